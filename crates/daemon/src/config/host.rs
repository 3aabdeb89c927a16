//! The keys that name a group the host's way (`unit`, `slice`,
//! `container`, `pod`, `pod_uid`, `qos`), shared by `[lc]` and `[[batch]]`.

use crate::error::ConfigError;
use elfen_cgroup::{QosClass, Selector};

/// The keys of `[lc]` and `[[batch]]` that name a group the host's way.
pub(super) struct HostKeys<'a> {
    pub(super) unit: &'a Option<String>,
    pub(super) slice: &'a Option<String>,
    pub(super) container: &'a Option<String>,
    pub(super) pod: &'a Option<String>,
    pub(super) pod_uid: &'a Option<String>,
    pub(super) qos: Option<QosClass>,
}

/// The one selector among `extra` and the host keys (`None` if none is
/// given; more than one is the caller's error), checked for form.
pub(super) fn host_selector<const N: usize>(
    section: &str,
    extra: [(&'static str, Option<Selector>); N],
    k: HostKeys<'_>,
) -> Result<Option<(Selector, &'static str)>, ConfigError> {
    let pod = match k.pod {
        Some(p) => Some(
            Selector::pod(p)
                .map_err(|e| ConfigError::new(format!("{section}.pod"), e.to_string()))?,
        ),
        None => None,
    };
    let all = extra.into_iter().chain([
        ("unit", k.unit.clone().map(Selector::Unit)),
        ("slice", k.slice.clone().map(Selector::Slice)),
        ("container", k.container.clone().map(Selector::Container)),
        ("pod", pod),
        ("pod_uid", k.pod_uid.clone().map(Selector::PodUid)),
        ("qos", k.qos.map(Selector::Qos)),
    ]);
    let mut found = None;
    for (key, sel) in all {
        if let Some(sel) = sel {
            sel.validate()
                .map_err(|e| ConfigError::new(format!("{section}.{key}"), e.to_string()))?;
            found.get_or_insert((sel, key));
        }
    }
    Ok(found)
}
