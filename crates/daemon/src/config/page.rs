//! `page`: the signal page the daemon creates, and the group that may
//! write its batch lines.

use super::DEFAULT_PAGE;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `page`: the signal page. Either `page = "PATH"` (the path alone) or a
/// `[page]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PageSection {
    /// The page file (default `/dev/shm/elfen`, where `elfen status` and
    /// `elfen ctl` look first; a name without `/` lives in `/dev/shm`).
    pub path: PathBuf,
    /// The group whose members may attach cooperative batch threads (write
    /// the page's batch lines): a group name or a gid. Default: none, so
    /// only the daemon's user (root) writes them; everyone may read.
    pub batch_group: Option<GroupRef>,
}

impl Default for PageSection {
    fn default() -> Self {
        PageSection {
            path: PathBuf::from(DEFAULT_PAGE),
            batch_group: None,
        }
    }
}

/// The `[page]` table's keys (unknown keys refused).
#[derive(Deserialize)]
#[serde(default, deny_unknown_fields)]
struct PageTable {
    path: PathBuf,
    batch_group: Option<GroupRef>,
}

impl Default for PageTable {
    fn default() -> Self {
        let d = PageSection::default();
        PageTable {
            path: d.path,
            batch_group: d.batch_group,
        }
    }
}

impl<'de> Deserialize<'de> for PageSection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = PageSection;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a page path (page = \"/dev/shm/elfen\") or a [page] table")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<PageSection, E> {
                Ok(PageSection {
                    path: PathBuf::from(v),
                    batch_group: None,
                })
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                m: A,
            ) -> Result<PageSection, A::Error> {
                let t = PageTable::deserialize(serde::de::value::MapAccessDeserializer::new(m))?;
                Ok(PageSection {
                    path: t.path,
                    batch_group: t.batch_group,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// A group, by name or by id (`batch_group = "elfen-batch"` or `= 1001`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum GroupRef {
    /// A gid.
    Id(u32),
    /// A group name (or a gid written as a string).
    Name(String),
}

impl std::fmt::Display for GroupRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GroupRef::Id(g) => write!(f, "gid {g}"),
            GroupRef::Name(n) => write!(f, "{n:?}"),
        }
    }
}
