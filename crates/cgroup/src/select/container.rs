//! Containers of docker, podman and CRI engines: by id in the cgroup
//! directories' names, by name in the engines' own files.

use super::{HostNames, Resolved, SelectError, Selector, is_hex};

impl HostNames {
    pub(super) fn container(&self, sel: &Selector, c: &str) -> Result<Resolved, SelectError> {
        let id = if (12..=64).contains(&c.len()) && is_hex(c) {
            c.to_ascii_lowercase()
        } else {
            self.container_id_of_name(c).ok_or_else(|| SelectError::NotFound {
                what: sel.to_string(),
                looked: format!(
                    "no container named {c:?} in {} or {} (give its id: docker inspect -f '{{{{.Id}}}}' {c})",
                    self.files.docker_containers.display(),
                    self.files
                        .podman_containers
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })?
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

    /// A container's full id from its name, in docker's or podman's files.
    pub(super) fn container_id_of_name(&self, name: &str) -> Option<String> {
        if let Ok(rd) = std::fs::read_dir(&self.files.docker_containers) {
            for e in rd.flatten() {
                let Ok(text) = std::fs::read_to_string(e.path().join("config.v2.json")) else {
                    continue;
                };
                let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
                    continue;
                };
                let n = v.get("Name").and_then(|n| n.as_str()).unwrap_or("");
                if n.trim_start_matches('/') == name {
                    let id = v.get("ID").and_then(|i| i.as_str()).map(str::to_string);
                    return id.or_else(|| Some(e.file_name().to_string_lossy().to_string()));
                }
            }
        }
        for f in &self.files.podman_containers {
            let Ok(text) = std::fs::read_to_string(f) else {
                continue;
            };
            let Ok(serde_json::Value::Array(list)) = serde_json::from_str(&text) else {
                continue;
            };
            for c in list {
                let named = c
                    .get("names")
                    .and_then(|n| n.as_array())
                    .is_some_and(|ns| ns.iter().any(|n| n.as_str() == Some(name)));
                if named {
                    if let Some(id) = c.get("id").and_then(|i| i.as_str()) {
                        return Some(id.to_string());
                    }
                }
            }
        }
        None
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
