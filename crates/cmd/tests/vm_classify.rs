//! The VM test bed's verdict on a test (`scripts/vm/guest/classify.sh`, run
//! in the guest after each test), fed real and derived logs on the host.
//!
//! `vm_classify/nocapture-skip.log` is what a test binary printed when run
//! as the guest runs it (`--exact NAME --nocapture --test-threads=1`; here
//! the page permission test as user nobody, which records a skip that needs
//! root): libtest's `test NAME ... ` comes first, so `elfen_cmd::skip`'s
//! `skipped NAME: …` lands on that same line, and libtest still reports
//! `1 passed`. `nocapture-skip.tsv` is the record the test wrote to its
//! `ELFEN_TEST_LOG`. The bed once read such a test as passed (it looked
//! for `skipped` at a line's start only).

use elfen_cmd::skip::Need;
use std::path::{Path, PathBuf};
use std::process::Command;

const CLASSIFY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../scripts/vm/guest/classify.sh"
);
const JUDGE: &str = env!("CARGO_BIN_EXE_elfen-test-log");
const TEST: &str = "permissions::permission_model_is_enforced_by_the_os";

fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/vm_classify")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A test's output and test log, written to files for classify.sh.
struct Case {
    dir: tempfile::TempDir,
}

impl Case {
    fn new(output: &str, test_log: &str) -> Case {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("out.log"), output).unwrap();
        std::fs::write(dir.path().join("log.tsv"), test_log).unwrap();
        Case { dir }
    }

    fn path(&self, f: &str) -> PathBuf {
        self.dir.path().join(f)
    }

    /// (status, note) of `kind` (test or scenario) `name` that exited `rc`,
    /// judged by `judge` (none: no elfen-test-log).
    fn classify_with(
        &self,
        kind: &str,
        name: &str,
        rc: i32,
        judge: Option<&str>,
    ) -> (String, String) {
        let mut c = Command::new("bash");
        c.arg(CLASSIFY)
            .args([kind, name, &rc.to_string()])
            .arg(self.path("out.log"))
            .arg(self.path("log.tsv"))
            .env("TEST_TIMEOUT_S", "600")
            .env_remove("ELFEN_TEST_LOG_BIN");
        if let Some(j) = judge {
            c.env("ELFEN_TEST_LOG_BIN", j);
        }
        let out = c.output().expect("bash runs classify.sh");
        assert!(
            out.status.success(),
            "classify.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "one verdict line: {text:?}");
        let (status, note) = lines[0].split_once('\t').expect("STATUS<TAB>NOTE");
        (status.to_string(), note.to_string())
    }

    fn classify(&self, rc: i32) -> (String, String) {
        self.classify_with("test", TEST, rc, Some(JUDGE))
    }
}

/// The real record with its need replaced by `need`.
fn record_needing(need: &str) -> String {
    let real = fixture("nocapture-skip.tsv");
    let f: Vec<&str> = real.trim_end().split('\t').collect();
    assert_eq!(f.len(), 5, "{real:?}");
    format!("{}\t{}\t{}\t{need}\t{}\n", f[0], f[1], f[2], f[4])
}

#[test]
fn the_real_log_puts_the_skip_after_libtests_test_line() {
    let out = fixture("nocapture-skip.log");
    let line = out
        .lines()
        .find(|l| l.contains("skipped "))
        .expect("the skip's line");
    assert!(
        line.starts_with(&format!("test {TEST} ... skipped {TEST}: ")),
        "{line}"
    );
    assert!(
        !out.lines().any(|l| l.starts_with("skipped")),
        "no line starts with the skip: a reading of line starts calls this test passed"
    );
    assert!(out.contains("test result: ok. 1 passed"), "{out}");
}

#[test]
fn a_recorded_skip_after_libtests_test_line_is_a_skip_not_a_pass() {
    let out = fixture("nocapture-skip.log");
    // the real record (needs root): judged by what this machine offers
    let (status, note) = Case::new(&out, &fixture("nocapture-skip.tsv")).classify(0);
    let want = if Need::Root.present() {
        "skip-runnable"
    } else {
        "skip"
    };
    assert_eq!(status, want, "{note}");
    assert!(
        note.contains("needs root: switches to a batch user"),
        "{note}"
    );
    // a need no machine offers: a skip
    let (status, note) = Case::new(&out, &record_needing("cpus:1048576")).classify(0);
    assert_eq!(
        (status.as_str(), note.as_str()),
        (
            "skip",
            "needs cpus:1048576: switches to a batch user (the modes were checked)"
        )
    );
    // a need every machine offers, or one nobody knows: runnable here
    for need in ["cpus:1", "gpu"] {
        let (status, note) = Case::new(&out, &record_needing(need)).classify(0);
        assert_eq!(status, "skip-runnable", "{need}: {note}");
        assert!(note.contains("offers what it needs"), "{note}");
    }
}

#[test]
fn a_skip_printed_without_a_record_is_a_skip_that_cannot_be_judged() {
    let out = fixture("nocapture-skip.log");
    let (status, note) = Case::new(&out, "").classify(0);
    assert_eq!(status, "skip-runnable", "{note}");
    assert!(
        note.starts_with("printed, not recorded") && note.contains("switches to a batch user"),
        "{note}"
    );
    // the same skip at a line's start, by the test's last name part
    let at_start = "\nrunning 1 test\nskipped permission_model_is_enforced_by_the_os: no root\n\
                    test permissions::permission_model_is_enforced_by_the_os ... ok\n\n\
                    test result: ok. 1 passed; 0 failed\n";
    let (status, note) = Case::new(at_start, "").classify(0);
    assert_eq!(
        (status.as_str(), note.as_str()),
        (
            "skip-runnable",
            "printed, not recorded (so not judged): no root"
        )
    );
    // a recorded skip without a judge in the guest cannot be judged either
    let (status, note) =
        Case::new(&out, &record_needing("cpus:1048576")).classify_with("test", TEST, 0, None);
    assert_eq!(status, "skip-runnable", "{note}");
    assert!(note.contains("not judged"), "{note}");
}

/// The real log with libtest's line for a test that ran to the end.
fn passed_log() -> String {
    let out = fixture("nocapture-skip.log");
    let line = out.lines().find(|l| l.contains("skipped ")).unwrap();
    out.replace(line, &format!("test {TEST} ... ok"))
        .replace("\nok\n", "\n")
}

#[test]
fn passes_failures_and_timeouts_are_told_apart() {
    let passed = passed_log();
    assert_eq!(Case::new(&passed, "").classify(0).0, "pass");
    // words that start with "skipped" but name another thing (a cgroup
    // restore report) are no skip of this test
    let report = passed.replace(
        "test result:",
        "skipped elfen-daemon-7/spin: the group is gone\ntest result:",
    );
    assert_eq!(Case::new(&report, "").classify(0).0, "pass");
    // a timing check's line is the pass's note, wherever it landed
    let timed = format!(
        "\nrunning 1 test\ntest {TEST} ... timing: wake-ups: 25.0000, at least 3.0000 (VM under TCG, \
         slack 10): holds\nok\n\ntest result: ok. 1 passed; 0 failed\n"
    );
    assert_eq!(
        Case::new(&timed, "").classify(0),
        (
            "pass".into(),
            "timing: wake-ups: 25.0000, at least 3.0000 (VM under TCG, slack 10): holds".into()
        )
    );
    let panicked = format!(
        "\nrunning 1 test\ntest {TEST} ... \nthread '{TEST}' panicked at crates/x.rs:1:2:\n\
         the guard occupied 10 % of the window\nFAILED\n\ntest result: FAILED. 0 passed; 1 failed\n"
    );
    let (status, note) = Case::new(&panicked, "").classify(101);
    assert_eq!(status, "fail");
    assert!(note.contains("the guard occupied 10 %"), "{note}");
    let (status, note) = Case::new(&passed, "").classify(124);
    assert_eq!(
        (status.as_str(), note.as_str()),
        ("fail", "timed out after 600 s")
    );
    let none = "\nrunning 0 tests\n\ntest result: ok. 0 passed; 0 failed; 16 filtered out\n";
    let (status, note) = Case::new(none, "").classify(0);
    assert_eq!(status, "fail");
    assert!(note.starts_with("no test ran"), "{note}");
}

#[test]
fn a_test_that_ran_twice_says_so_in_its_note() {
    let rerun = format!("rerun\telfen-daemon/it\t{TEST}\tp99 3.1 ms over the 2 ms bound\n");
    let (status, note) = Case::new(&passed_log(), &rerun).classify(0);
    assert_eq!(status, "pass");
    assert_eq!(
        note,
        "ran twice, the first run failed: p99 3.1 ms over the 2 ms bound"
    );
}

#[test]
fn a_scenarios_skip_is_judged_like_a_tests() {
    let printed = "skipped guard-systemd: systemd as PID 1 (needs program:no-such-program-elfen)\n";
    let lacking =
        "skip\tscenario\tguard-systemd\tprogram:no-such-program-elfen\tsystemd as PID 1\n";
    let c = Case::new(printed, lacking);
    let (status, note) = c.classify_with("scenario", "guard-systemd", 77, Some(JUDGE));
    assert_eq!(
        (status.as_str(), note.as_str()),
        (
            "skip",
            "needs program:no-such-program-elfen: systemd as PID 1"
        )
    );
    let offered = "skip\tscenario\tguard-systemd\tprogram:sh\tsh\n";
    let c = Case::new(printed, offered);
    assert_eq!(
        c.classify_with("scenario", "guard-systemd", 77, Some(JUDGE))
            .0,
        "skip-runnable"
    );
    // the old form, printed only
    let c = Case::new("skipped: needs systemd as PID 1\n", "");
    let (status, note) = c.classify_with("scenario", "guard-systemd", 77, Some(JUDGE));
    assert_eq!(status, "skip-runnable", "{note}");
    let failed = "ok: the daemon started\nFAIL: the guard occupied lane 1\nnote: LC ran 13.3 s\n";
    let c = Case::new(failed, "");
    assert_eq!(
        c.classify_with("scenario", "guard-systemd", 1, Some(JUDGE)),
        (
            "fail".into(),
            "FAIL: the guard occupied lane 1; LC ran 13.3 s".into()
        )
    );
    let c = Case::new("note: LC ran 13.3 s\n", "");
    assert_eq!(
        c.classify_with("scenario", "guard-systemd", 0, Some(JUDGE)),
        ("pass".into(), "LC ran 13.3 s".into())
    );
}
