//! systemd's names: a slice by systemd's rule of nesting, a unit by
//! `systemctl show` or by its directory.

use super::{HostNames, Resolved, SelectError, Selector, invalid, slice_path};
use crate::group::GroupPath;

impl HostNames {
    pub(super) fn slice(&self, sel: &Selector, name: &str) -> Result<Resolved, SelectError> {
        let path = slice_path(name).map_err(|r| invalid(sel, r))?;
        if let Some(r) = self.at_path(&path, "the slice's name") {
            return Ok(r);
        }
        if self.systemctl {
            if let Some(props) = crate::host::systemctl_show(name, &["LoadState", "ActiveState"]) {
                let get = |k: &str| props.get(k).cloned().unwrap_or_default();
                if get("LoadState") == "loaded" {
                    return Err(SelectError::NotRunning {
                        what: sel.to_string(),
                        detail: format!(
                            "systemd knows it (ActiveState={}) but its cgroup {path} does not exist: \
                             start it (systemctl start {name})",
                            get("ActiveState")
                        ),
                        expected: Some(path),
                    });
                }
            }
        }
        Err(SelectError::NotFound {
            what: sel.to_string(),
            looked: format!("no directory {path} under {}", self.looked()),
        })
    }

    pub(super) fn unit(&self, sel: &Selector, name: &str) -> Result<Resolved, SelectError> {
        if self.systemctl {
            if let Some(props) = crate::host::systemctl_show(
                name,
                &["LoadState", "ActiveState", "ControlGroup", "Slice"],
            ) {
                let get = |k: &str| props.get(k).cloned().unwrap_or_default();
                if get("LoadState") != "loaded" {
                    return Err(SelectError::NotFound {
                        what: sel.to_string(),
                        looked: format!(
                            "systemd has no such unit (LoadState={})",
                            get("LoadState")
                        ),
                    });
                }
                let cg = get("ControlGroup");
                if let Ok(path) = GroupPath::new(&cg) {
                    if !path.is_root() {
                        if let Some(r) = self.at_path(&path, "systemctl show -p ControlGroup") {
                            return Ok(r);
                        }
                    }
                }
                let expected = slice_path(&get("Slice"))
                    .ok()
                    .and_then(|s| s.join(name).ok());
                return Err(SelectError::NotRunning {
                    what: sel.to_string(),
                    detail: format!(
                        "systemd knows it (ActiveState={}) but it has no cgroup now",
                        get("ActiveState")
                    ),
                    expected,
                });
            }
        }
        let hits = self.search(|n| n == name);
        match hits.as_slice() {
            [] => Err(SelectError::NotFound {
                what: sel.to_string(),
                looked: format!(
                    "no directory named {name} under {} (a unit has a cgroup only while it runs)",
                    self.looked()
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
}
