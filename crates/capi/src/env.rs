//! The environment of lazy attach: how an unmodified, instrumented program
//! learns where to borrow CPU (`bindings/c/README.md`).
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `ELFEN_PAGE` | the signal page (a name in `/dev/shm`, or a path) | unset: checks stay off, one warning |
//! | `ELFEN_LANE` | the batch lane index each thread attaches to | the page's first batch lane |
//! | `ELFEN_NAP` | `page`, `auto`, `spin`, `futex`, `hybrid`, `umwait`, `mwaitx` (or -1..5) | `page` (the controller line's) |
//! | `ELFEN_PIN` | `1` pin each thread to the lane's CPU, `0` do not | `1` |
//! | `ELFEN_QUIET` | `1`: no warning when `ELFEN_PAGE` is unset | unset |

use crate::error::{EINVAL, Error};
use elfen_runtime::NapChoice;
use std::ffi::OsString;
use std::path::PathBuf;

/// The variable naming the page.
pub const PAGE: &str = "ELFEN_PAGE";
/// The variable naming the batch lane.
pub const LANE: &str = "ELFEN_LANE";
/// The variable naming the nap backend.
pub const NAP: &str = "ELFEN_NAP";
/// The variable saying whether to pin.
pub const PIN: &str = "ELFEN_PIN";
/// The variable silencing the "not set" warning.
pub const QUIET: &str = "ELFEN_QUIET";

/// `ELFEN_NAP_PAGE`: take the nap backend from the controller line.
pub const NAP_PAGE: i32 = -1;

/// What lazy attach should do, read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvConfig {
    /// The page file.
    pub page: PathBuf,
    /// The batch lane (`None`: the page's first batch lane).
    pub lane: Option<u32>,
    /// The nap backend (`None`: the controller line's).
    pub nap: Option<NapChoice>,
    /// Pin the thread to the lane's CPU.
    pub pin: bool,
}

/// A C `nap` argument (`ELFEN_NAP_PAGE`, or an `ELFEN_NAP_*` id) as the
/// runtime's choice (`None` = the controller line's).
pub fn nap_arg(nap: i32) -> Result<Option<NapChoice>, Error> {
    if nap == NAP_PAGE {
        return Ok(None);
    }
    u32::try_from(nap)
        .ok()
        .and_then(NapChoice::from_id)
        .map(Some)
        .ok_or_else(|| {
            Error::new(
                EINVAL,
                format!(
                    "unknown nap backend {nap}: expected ELFEN_NAP_PAGE (-1), AUTO (0), SPIN (1), \
                     FUTEX (2), HYBRID (3), UMWAIT (4) or MWAITX (5)"
                ),
            )
        })
}

fn text(v: OsString, name: &str) -> Result<String, Error> {
    v.into_string()
        .map_err(|v| Error::new(EINVAL, format!("{name}={v:?} is not valid UTF-8")))
}

/// Reads the configuration through `get` (`std::env::var_os` in the
/// library, a map in tests). `Ok(None)` when `ELFEN_PAGE` is unset or empty.
pub fn read(get: impl Fn(&str) -> Option<OsString>) -> Result<Option<EnvConfig>, Error> {
    let Some(page) = get(PAGE).filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    let page = text(page, PAGE)?;
    let lane = match get(LANE).map(|v| text(v, LANE)).transpose()? {
        None => None,
        Some(s) if s.trim().is_empty() => None,
        Some(s) => Some(s.trim().parse::<u32>().map_err(|_| {
            Error::new(
                EINVAL,
                format!("{LANE}={s:?} is not a lane index (a number such as 1)"),
            )
        })?),
    };
    let nap = match get(NAP).map(|v| text(v, NAP)).transpose()? {
        None => None,
        Some(s) => {
            let t = s.trim().to_ascii_lowercase();
            if t.is_empty() || t == "page" {
                None
            } else if let Ok(n) = t.parse::<i32>() {
                nap_arg(n).map_err(|e| Error::new(EINVAL, format!("{NAP}={s:?}: {e}")))?
            } else {
                Some(
                    t.parse::<NapChoice>()
                        .map_err(|e| Error::new(EINVAL, format!("{NAP}={s:?}: {e} (or page)")))?,
                )
            }
        }
    };
    let pin = match get(PIN).map(|v| text(v, PIN)).transpose()? {
        None => true,
        Some(s) => match s.trim() {
            "" | "1" | "yes" | "true" => true,
            "0" | "no" | "false" => false,
            _ => {
                return Err(Error::new(
                    EINVAL,
                    format!("{PIN}={s:?}: expected 1 (pin) or 0 (do not pin)"),
                ));
            }
        },
    };
    Ok(Some(EnvConfig {
        page: elfen_shm::page_path(&page),
        lane,
        nap,
        pin,
    }))
}

/// Whether `ELFEN_QUIET` asks for silence.
pub fn quiet(get: impl Fn(&str) -> Option<OsString>) -> bool {
    get(QUIET).is_some_and(|v| !v.is_empty() && v != "0")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let m: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn unset_page_means_no_attach() {
        assert_eq!(read(env(&[])).unwrap(), None);
        assert_eq!(read(env(&[(PAGE, ""), (LANE, "1")])).unwrap(), None);
        assert!(!quiet(env(&[])));
        assert!(!quiet(env(&[(QUIET, "0")])));
        assert!(quiet(env(&[(QUIET, "1")])));
    }

    #[test]
    fn full_configuration() {
        let c = read(env(&[
            (PAGE, "/tmp/x/sig"),
            (LANE, " 3 "),
            (NAP, "Futex"),
            (PIN, "0"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(c.page, PathBuf::from("/tmp/x/sig"));
        assert_eq!(c.lane, Some(3));
        assert_eq!(c.nap, Some(NapChoice::Futex));
        assert!(!c.pin);
        // a bare name lives in /dev/shm; defaults
        let c = read(env(&[(PAGE, "elfen")])).unwrap().unwrap();
        assert_eq!(c.page, PathBuf::from("/dev/shm/elfen"));
        assert_eq!((c.lane, c.nap, c.pin), (None, None, true));
        // numbers work for the nap backend, and page / -1 mean the controller's
        for (v, want) in [("2", Some(NapChoice::Futex)), ("page", None), ("-1", None)] {
            let c = read(env(&[(PAGE, "p/q"), (NAP, v)])).unwrap().unwrap();
            assert_eq!(c.nap, want, "{v}");
        }
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (k, v, needle) in [
            (LANE, "one", "ELFEN_LANE=\"one\""),
            (NAP, "doze", "ELFEN_NAP=\"doze\""),
            (NAP, "9", "unknown nap backend 9"),
            (PIN, "maybe", "ELFEN_PIN"),
        ] {
            let e = read(env(&[(PAGE, "/tmp/p"), (k, v)])).unwrap_err();
            assert!(e.message.contains(needle), "{e}");
            assert_eq!(e.code, EINVAL);
        }
    }

    #[test]
    fn nap_arguments() {
        assert_eq!(nap_arg(NAP_PAGE).unwrap(), None);
        assert_eq!(nap_arg(0).unwrap(), Some(NapChoice::Auto));
        assert_eq!(nap_arg(5).unwrap(), Some(NapChoice::Mwaitx));
        assert!(
            nap_arg(6)
                .unwrap_err()
                .message
                .contains("unknown nap backend 6")
        );
        assert!(nap_arg(-2).is_err());
    }
}
