//! Kubernetes: a pod by UID or by namespace and name (the kubelet's log
//! directories), and the groups of a QoS class.

use super::{HostNames, QosClass, Resolved, SelectError, Selector, normalise_pod_uid};

impl HostNames {
    /// A pod's group by its (normalised) UID.
    pub(super) fn pod_uid(&self, uid: &str) -> Option<Resolved> {
        let cgroupfs = format!("pod{uid}");
        let systemd = format!("-pod{}.slice", uid.replace('-', "_"));
        self.search(|n| n == cgroupfs || (n.starts_with("kubepods") && n.ends_with(&systemd)))
            .into_iter()
            .next()
            .map(|r| Resolved {
                found_by: format!("pod uid {uid}"),
                ..r
            })
    }

    pub(super) fn pod(
        &self,
        sel: &Selector,
        ns: &str,
        name: &str,
    ) -> Result<Resolved, SelectError> {
        let prefix = format!("{ns}_{name}_");
        let mut uids: Vec<String> = std::fs::read_dir(&self.files.pod_logs)
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| {
                        let n = e.file_name().to_string_lossy().to_string();
                        n.strip_prefix(&prefix).and_then(normalise_pod_uid)
                    })
                    .collect()
            })
            .unwrap_or_default();
        uids.sort();
        uids.dedup();
        if uids.is_empty() {
            return Err(SelectError::NotFound {
                what: sel.to_string(),
                looked: format!(
                    "{} has no {prefix}<uid> directory (the kubelet's pod logs: pods are named \
                     offline through them only; give pod_uid, from kubectl get pod -n {ns} {name} \
                     -o jsonpath='{{.metadata.uid}}')",
                    self.files.pod_logs.display()
                ),
            });
        }
        let live: Vec<Resolved> = uids
            .iter()
            .filter_map(|u| self.pod_uid(u))
            .map(|r| Resolved {
                found_by: format!("{} → {}", self.files.pod_logs.display(), r.found_by),
                ..r
            })
            .collect();
        match live.as_slice() {
            [] => Err(SelectError::NotFound {
                what: sel.to_string(),
                looked: format!(
                    "its uid{} {} ha{} no cgroup here: it does not run on this node now",
                    if uids.len() > 1 { "s" } else { "" },
                    uids.join(", "),
                    if uids.len() > 1 { "ve" } else { "s" }
                ),
            }),
            [one] => Ok(one.clone()),
            many => Err(SelectError::Ambiguous {
                what: sel.to_string(),
                candidates: many
                    .iter()
                    .map(|r| r.path.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }

    /// The kubelet's top group (`kubepods` or `kubepods.slice`), searched
    /// a few levels down (a `--cgroup-root` may nest it).
    pub(super) fn kubepods(&self) -> Option<Resolved> {
        self.search(|n| n == "kubepods" || n == "kubepods.slice")
            .into_iter()
            .find(|r| r.path.depth() <= 3)
    }

    pub(super) fn qos(&self, sel: &Selector, q: QosClass) -> Result<Vec<Resolved>, SelectError> {
        let Some(top) = self.kubepods() else {
            return Err(SelectError::NotFound {
                what: sel.to_string(),
                looked: format!(
                    "no kubepods or kubepods.slice directory under {}: no kubelet runs pods here",
                    self.looked()
                ),
            });
        };
        let systemd = top.path.name() == "kubepods.slice";
        let child = |name: String| -> Option<Resolved> {
            let path = top.path.join(&name).ok()?;
            let r = Resolved {
                path,
                found_by: format!(
                    "the kubelet's {} layout",
                    if systemd { "systemd" } else { "cgroupfs" }
                ),
                ..top.clone()
            };
            r.dir().join("cgroup.procs").exists().then_some(r)
        };
        match q {
            QosClass::Burstable | QosClass::Besteffort => {
                let name = if systemd {
                    format!("kubepods-{}.slice", q.name())
                } else {
                    q.name().to_string()
                };
                child(name.clone())
                    .map(|r| vec![r])
                    .ok_or_else(|| SelectError::NotFound {
                        what: sel.to_string(),
                        looked: format!("no {}/{name} directory", top.path),
                    })
            }
            QosClass::Guaranteed => {
                let mut names: Vec<String> = std::fs::read_dir(top.dir())
                    .map(|rd| {
                        rd.flatten()
                            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                            .map(|e| e.file_name().to_string_lossy().to_string())
                            .filter(|n| {
                                if systemd {
                                    n.starts_with("kubepods-pod") && n.ends_with(".slice")
                                } else {
                                    n.strip_prefix("pod").and_then(normalise_pod_uid).is_some()
                                }
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                names.sort();
                Ok(names.into_iter().filter_map(child).collect())
            }
        }
    }
}
