//! Group paths and group handles.

use crate::error::{CgroupError, Result};
use crate::layout::Controller;
use serde::{Deserialize, Serialize};

/// A group's path relative to a hierarchy's root: `""` is the root group,
/// `batch`, `system.slice/lc.service` are groups below it.
///
/// A leading or trailing `/` is dropped (`/system.slice/x` as printed in
/// `/proc/<pid>/cgroup` is accepted); `.`, `..`, empty components and NUL
/// bytes are refused, so a path can never leave the hierarchy.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct GroupPath(String);

impl GroupPath {
    /// Validates `path`.
    pub fn new(path: &str) -> Result<GroupPath> {
        let trimmed = path.trim_matches('/');
        if trimmed.is_empty() {
            return Ok(GroupPath(String::new()));
        }
        for comp in trimmed.split('/') {
            let bad = match comp {
                "" => Some("empty component (\"//\")"),
                "." | ".." => Some("\".\" and \"..\" are not allowed"),
                c if c.contains('\0') => Some("NUL byte"),
                c if c.contains('\n') => Some("newline"),
                _ => None,
            };
            if let Some(reason) = bad {
                return Err(CgroupError::group(
                    path,
                    format!("bad group path: {reason}"),
                ));
            }
        }
        Ok(GroupPath(trimmed.to_string()))
    }

    /// The root group.
    pub fn root() -> GroupPath {
        GroupPath(String::new())
    }

    /// Whether this is the root group.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// The path as a string (`""` for the root).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The parent group (`None` for the root).
    pub fn parent(&self) -> Option<GroupPath> {
        if self.is_root() {
            return None;
        }
        Some(match self.0.rsplit_once('/') {
            Some((p, _)) => GroupPath(p.to_string()),
            None => GroupPath::root(),
        })
    }

    /// Number of components (0 for the root).
    pub fn depth(&self) -> usize {
        if self.is_root() {
            0
        } else {
            self.0.split('/').count()
        }
    }

    /// The last component (`""` for the root).
    pub fn name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or("")
    }

    /// A child of this group.
    pub fn join(&self, child: &str) -> Result<GroupPath> {
        if self.is_root() {
            GroupPath::new(child)
        } else {
            GroupPath::new(&format!("{}/{}", self.0, child.trim_start_matches('/')))
        }
    }

    /// The groups from the root's first child down to this one
    /// (`a/b/c` → `a`, `a/b`, `a/b/c`).
    pub fn lineage(&self) -> Vec<GroupPath> {
        let mut out = Vec::new();
        let mut acc = String::new();
        if self.is_root() {
            return out;
        }
        for comp in self.0.split('/') {
            if !acc.is_empty() {
                acc.push('/');
            }
            acc.push_str(comp);
            out.push(GroupPath(acc.clone()));
        }
        out
    }

    /// Whether `self` is `other` or below it.
    pub fn is_within(&self, other: &GroupPath) -> bool {
        other.is_root()
            || self.0 == other.0
            || (self.0.starts_with(&other.0) && self.0.as_bytes().get(other.0.len()) == Some(&b'/'))
    }
}

impl std::fmt::Display for GroupPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_root() {
            f.write_str("/")
        } else {
            f.write_str(&self.0)
        }
    }
}

impl TryFrom<String> for GroupPath {
    type Error = CgroupError;
    fn try_from(s: String) -> Result<GroupPath> {
        GroupPath::new(&s)
    }
}

impl From<GroupPath> for String {
    fn from(g: GroupPath) -> String {
        g.0
    }
}

/// A handle on a group in the controllers it was created or opened with.
/// Cheap to clone; obtained from
/// [`Executor::create_group`](crate::Executor::create_group) or
/// [`Executor::open_group`](crate::Executor::open_group).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub(crate) path: GroupPath,
    pub(crate) controllers: Vec<Controller>,
}

impl Group {
    /// Its path.
    pub fn path(&self) -> &GroupPath {
        &self.path
    }

    /// The controllers it is driven in.
    pub fn controllers(&self) -> &[Controller] {
        &self.controllers
    }

    /// Whether it is driven in `ctl`.
    pub fn has(&self, ctl: Controller) -> bool {
        self.controllers.contains(&ctl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_normalised_and_checked() {
        assert_eq!(GroupPath::new("/a/b/").unwrap().as_str(), "a/b");
        assert!(GroupPath::new("/").unwrap().is_root());
        for bad in ["a//b", "a/../b", "./a", "a/\0"] {
            let e = GroupPath::new(bad).unwrap_err().to_string();
            assert!(e.contains("bad group path"), "{bad:?}: {e}");
        }
        let p = GroupPath::new("a/b/c").unwrap();
        assert_eq!(p.depth(), 3);
        assert_eq!(p.parent().unwrap().as_str(), "a/b");
        assert_eq!(p.name(), "c");
        assert_eq!(
            p.lineage().iter().map(|g| g.as_str()).collect::<Vec<_>>(),
            ["a", "a/b", "a/b/c"]
        );
        assert!(p.is_within(&GroupPath::new("a").unwrap()));
        assert!(
            !GroupPath::new("ab")
                .unwrap()
                .is_within(&GroupPath::new("a").unwrap())
        );
        assert_eq!(
            GroupPath::new("a").unwrap().parent(),
            Some(GroupPath::root())
        );
    }
}
