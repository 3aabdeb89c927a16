//! A test that may run twice, counted.
//!
//! Where a check fails now and then because of the machine (other work on
//! a shared machine tipping a latency figure), not because of elfen, a
//! test may run its body a second time — through [`once_more`] only. The
//! first failure is printed and recorded in the test log ([`Entry::Rerun`],
//! the file `scripts/test.sh` and the VM test bed read), so the end of the
//! test command counts and lists every test that ran twice; a second
//! failure fails the test. A failure whose cause is elfen's is never
//! retried: it is found and fixed.

use crate::skip::{Entry, append, current_test, suite};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

/// The words of a panic's payload (`panic!`'s message).
fn words(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Runs `body`; when it fails (panics), prints and records that the
/// current test runs twice — `why` says why a second run is fair — and
/// runs it once more, whose failure fails the test.
pub fn once_more<T>(why: &str, mut body: impl FnMut() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(&mut body)) {
        Ok(v) => v,
        Err(first) => {
            let test = current_test();
            let failure = words(first.as_ref());
            println!(
                "ran twice: {test}: the first run failed ({failure}); running it once more: {why}"
            );
            append(&Entry::Rerun {
                suite: suite(),
                test,
                first_failure: failure,
            });
            match catch_unwind(AssertUnwindSafe(&mut body)) {
                Ok(v) => v,
                Err(second) => {
                    println!("the second run failed too: the test fails");
                    resume_unwind(second)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skip::LOG_ENV;
    use crate::skip::tests::LOG_ENV_LOCK;

    /// `f` with LOG_ENV naming a fresh file; the file's entries after it.
    fn logged<T>(f: impl FnOnce() -> T) -> (std::thread::Result<T>, Vec<Entry>) {
        let _one = LOG_ENV_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let before = std::env::var_os(LOG_ENV);
        // SAFETY: the tests of this binary that touch LOG_ENV hold LOG_ENV_LOCK.
        unsafe { std::env::set_var(LOG_ENV, &log) };
        let r = catch_unwind(AssertUnwindSafe(f));
        // SAFETY: as above.
        unsafe {
            match before {
                Some(v) => std::env::set_var(LOG_ENV, v),
                None => std::env::remove_var(LOG_ENV),
            }
        };
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        (r, text.lines().filter_map(Entry::parse).collect())
    }

    #[test]
    fn a_first_success_runs_once_and_records_nothing() {
        let mut runs = 0;
        let (r, entries) = logged(|| once_more("noise", || runs += 1));
        assert!(r.is_ok());
        assert_eq!(runs, 1);
        assert!(entries.is_empty(), "{entries:?}");
    }

    #[test]
    fn a_first_failure_is_recorded_and_the_second_run_decides() {
        let mut runs = 0;
        let (r, entries) = logged(|| {
            once_more("noise", || {
                runs += 1;
                assert!(runs > 1, "p99 {} ms over the bound", 7);
                runs
            })
        });
        assert_eq!(r.ok(), Some(2), "the second run's value");
        assert_eq!(entries.len(), 1, "{entries:?}");
        match &entries[0] {
            Entry::Rerun {
                test,
                first_failure,
                ..
            } => {
                assert!(test.contains("a_first_failure_is_recorded"), "{test}");
                assert_eq!(first_failure, "p99 7 ms over the bound");
            }
            e => panic!("not a rerun: {e:?}"),
        }
    }

    #[test]
    fn a_second_failure_fails_the_test() {
        let mut runs = 0;
        let (r, entries) = logged(|| {
            once_more("noise", || {
                runs += 1;
                panic!("run {runs} failed");
            })
        });
        let e = r.expect_err("the second failure propagates");
        assert_eq!(words(e.as_ref()), "run 2 failed");
        assert_eq!(runs, 2, "never a third run");
        assert!(
            matches!(&entries[..], [Entry::Rerun { first_failure, .. }] if first_failure == "run 1 failed"),
            "{entries:?}"
        );
    }
}
