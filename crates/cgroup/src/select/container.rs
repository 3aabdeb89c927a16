//! Containers of docker, podman and CRI engines: by id in the cgroup
//! directories' names, by name in the engines' own files.

use super::{HostNames, Resolved, SelectError, Selector, is_hex};
use std::path::PathBuf;

/// One engine's record of a container by name.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NameHit {
    /// `docker` or `podman`.
    engine: &'static str,
    /// The container's full id.
    id: String,
    /// The file the record is in.
    file: PathBuf,
}

/// What one engine's files said of a name.
struct EngineLook {
    /// `docker` or `podman`.
    engine: &'static str,
    /// Where its records are.
    place: String,
    /// How many containers it records (`None`: its records are not here,
    /// the engine is not installed or keeps them elsewhere).
    count: Option<usize>,
}

impl std::fmt::Display for EngineLook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.count {
            Some(n) => write!(f, "{} ({n} containers in {})", self.engine, self.place),
            None => write!(f, "{} (not installed here: no {})", self.engine, self.place),
        }
    }
}

impl HostNames {
    pub(super) fn container(&self, sel: &Selector, c: &str) -> Result<Resolved, SelectError> {
        let id = if (12..=64).contains(&c.len()) && is_hex(c) {
            c.to_ascii_lowercase()
        } else {
            self.container_id_of_name(sel, c)?
        };
        let hits = self.search(|n| container_id_in(n).is_some_and(|full| full.starts_with(&id)));
        let mut ids: Vec<String> = hits
            .iter()
            .filter_map(|h| container_id_in(h.path.name()).map(str::to_string))
            .collect();
        ids.sort();
        ids.dedup();
        match (hits.first(), ids.len()) {
            (None, _) => Err(SelectError::NotFound {
                what: sel.to_string(),
                looked: format!(
                    "no container scope (docker-, libpod-, cri-containerd-, crio-{id}….scope) or \
                     cgroupfs directory {id}… under {}: it does not run here",
                    self.looked()
                ),
            }),
            (Some(h), 1) => Ok(Resolved {
                found_by: format!("container id {}", ids[0]),
                ..h.clone()
            }),
            _ => Err(SelectError::Ambiguous {
                what: sel.to_string(),
                candidates: format!("the id prefix {id} matches {}", ids.join(", ")),
            }),
        }
    }

    /// A container's full id from its name, in docker's and podman's
    /// files: refused when no engine records it (naming the engines looked
    /// at, and saying which are not installed) or when two containers of
    /// that name have different ids (naming both).
    fn container_id_of_name(&self, sel: &Selector, name: &str) -> Result<String, SelectError> {
        let (mut hits, looks) = self.containers_named(name);
        hits.sort_by(|a, b| a.id.cmp(&b.id));
        hits.dedup_by(|a, b| a.id == b.id);
        match hits.as_slice() {
            [one] => Ok(one.id.clone()),
            [] => {
                let engines = looks
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ");
                let none = if looks.iter().all(|l| l.count.is_none()) {
                    "no container engine's records here"
                } else {
                    "no container of that name"
                };
                Err(SelectError::NotFound {
                    what: sel.to_string(),
                    looked: format!(
                        "{none} — looked at {engines} (give the container's id instead: \
                         docker inspect -f '{{{{.Id}}}}' {name}, podman inspect -f '{{{{.Id}}}}' {name}; \
                         a containerd or CRI-O container: crictl ps)"
                    ),
                })
            }
            many => Err(SelectError::Ambiguous {
                what: sel.to_string(),
                candidates: format!(
                    "{} containers are named {name:?}: {} (select one by id)",
                    many.len(),
                    many.iter()
                        .map(|h| format!("{}'s {} in {}", h.engine, h.id, h.file.display()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }),
        }
    }

    /// Every record of a container named `name` in docker's and podman's
    /// files, and what each engine's files held.
    fn containers_named(&self, name: &str) -> (Vec<NameHit>, Vec<EngineLook>) {
        let mut hits = Vec::new();
        let mut looks = Vec::new();
        let docker = &self.files.docker_containers;
        let mut count = None;
        if let Ok(rd) = std::fs::read_dir(docker) {
            let mut n = 0;
            for e in rd.flatten() {
                let file = e.path().join("config.v2.json");
                let Ok(text) = std::fs::read_to_string(&file) else {
                    continue;
                };
                let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
                    continue;
                };
                n += 1;
                let named = v.get("Name").and_then(|n| n.as_str()).unwrap_or("");
                if named.trim_start_matches('/') == name {
                    let id = v.get("ID").and_then(|i| i.as_str()).map(str::to_string);
                    hits.push(NameHit {
                        engine: "docker",
                        id: id.unwrap_or_else(|| e.file_name().to_string_lossy().to_string()),
                        file,
                    });
                }
            }
            count = Some(n);
        }
        looks.push(EngineLook {
            engine: "docker",
            place: format!("{}/*/config.v2.json", docker.display()),
            count,
        });
        let mut count = None;
        for f in &self.files.podman_containers {
            let Ok(text) = std::fs::read_to_string(f) else {
                continue;
            };
            let Ok(serde_json::Value::Array(list)) = serde_json::from_str(&text) else {
                continue;
            };
            *count.get_or_insert(0) += list.len();
            for c in list {
                let named = c
                    .get("names")
                    .and_then(|n| n.as_array())
                    .is_some_and(|ns| ns.iter().any(|n| n.as_str() == Some(name)));
                if let (true, Some(id)) = (named, c.get("id").and_then(|i| i.as_str())) {
                    hits.push(NameHit {
                        engine: "podman",
                        id: id.to_string(),
                        file: f.clone(),
                    });
                }
            }
        }
        looks.push(EngineLook {
            engine: "podman",
            place: self
                .files
                .podman_containers
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" or "),
            count,
        });
        (hits, looks)
    }
}

/// The container id in a cgroup directory's name: `docker-<id>.scope`,
/// `libpod-<id>.scope`, `cri-containerd-<id>.scope`, `crio-<id>.scope`
/// (systemd drivers), `libpod-<id>` or a bare 64-hex-digit id (cgroupfs
/// drivers). The runtimes' monitor scopes (`libpod-conmon-…`,
/// `crio-conmon-…`) are not containers.
pub fn container_id_in(name: &str) -> Option<&str> {
    let stem = name.strip_suffix(".scope").unwrap_or(name);
    for p in ["docker-", "libpod-", "cri-containerd-", "crio-"] {
        if let Some(id) = stem.strip_prefix(p) {
            return (id.len() == 64 && is_hex(id)).then_some(id);
        }
    }
    (stem.len() == 64 && is_hex(stem) && stem == name).then_some(stem)
}
