//! Tests that cannot run here, made visible.
//!
//! A test that cannot run on this machine (no root, one CPU, no BPF, a
//! program not installed…) calls [`skip`] with what it needs ([`Need`]) and
//! why, then returns. The skip is printed, and, when [`LOG_ENV`] names a
//! file (the test script sets it), appended to that file as one line, so
//! that the script can list every skip of the run at its end — Rust, C and
//! Java alike ([`Entry`] is the line's format) — and fail when a skipped
//! test needs something this machine offers ([`Need::present`]): such a
//! skip hides a test that could have run.
//!
//! [`crate::fuzz`] appends its targets' figures to the same file, and
//! [`crate::rerun`] a line for each test that ran twice.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The environment variable naming the test log.
pub const LOG_ENV: &str = "ELFEN_TEST_LOG";

/// What a skipped test needs and this machine may lack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// Root (effective uid 0).
    Root,
    /// An unprivileged user: root bypasses what the test checks.
    Unprivileged,
    /// BPF: the privileges to load a tracing program (CAP_SYS_ADMIN, or
    /// CAP_BPF + CAP_PERFMON) and the kernel's BTF.
    Bpf,
    /// At least this many CPUs this process may run on.
    Cpus(usize),
    /// The cgroup v1 hierarchy of this controller at `/sys/fs/cgroup/<c>`.
    CgroupV1(String),
    /// A cgroup v2 hierarchy with this controller enabled at its root.
    CgroupV2(String),
    /// A cgroup v2 file system mounted anywhere, whatever its controllers
    /// (the unified tree of a hybrid layout counts).
    CgroupV2Tree,
    /// systemd as the init system (`/run/systemd/system` exists).
    Systemd,
    /// A program on the `PATH` (or at this absolute path).
    Program(String),
    /// A hardware feature.
    Hardware(Feature),
    /// A file or directory a previous step builds.
    Input(PathBuf),
}

/// Hardware features tests need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// An x86-64 CPU (`-pg -mfentry` builds).
    X86_64,
    /// A TSC that ticks at a constant rate and never stops
    /// (`constant_tsc` and `nonstop_tsc` in `/proc/cpuinfo`).
    InvariantTsc,
    /// Transparent huge pages the kernel may use (not `[never]` in
    /// `/sys/kernel/mm/transparent_hugepage/enabled`).
    TransparentHugePages,
}

impl Feature {
    fn token(self) -> &'static str {
        match self {
            Feature::X86_64 => "x86-64",
            Feature::InvariantTsc => "invariant-tsc",
            Feature::TransparentHugePages => "transparent-huge-pages",
        }
    }

    fn present(self) -> bool {
        match self {
            Feature::X86_64 => cfg!(target_arch = "x86_64"),
            Feature::InvariantTsc => {
                let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
                let flags = info
                    .lines()
                    .find(|l| l.starts_with("flags"))
                    .unwrap_or_default();
                let has = |f: &str| flags.split_whitespace().any(|w| w == f);
                has("constant_tsc") && has("nonstop_tsc")
            }
            Feature::TransparentHugePages => {
                std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
                    .is_ok_and(|s| !s.is_empty() && !s.contains("[never]"))
            }
        }
    }
}

/// The CPUs this process may run on.
fn cpus() -> usize {
    // SAFETY: a zeroed cpu_set_t is valid; the kernel fills at most its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            return libc::CPU_COUNT(&set) as usize;
        }
    }
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Where the kernel exposes its own BTF.
const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Whether `name` is an executable file, on the `PATH` when it has no `/`.
fn program_installed(name: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let exec = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if name.contains('/') {
        return exec(Path::new(name));
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| exec(&d.join(name))))
}

/// The mount points of cgroup2 file systems.
fn cgroup2_mounts() -> Vec<PathBuf> {
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
        })
        .collect()
}

impl Need {
    /// Whether this machine (and this process) offers it.
    pub fn present(&self) -> bool {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        match self {
            Need::Root => root,
            Need::Unprivileged => !root,
            Need::Bpf => {
                let cap = crate::proc::effective_capabilities();
                let has = |c: u32| cap & (1u64 << c) != 0;
                // CAP_SYS_ADMIN 21, CAP_PERFMON 38, CAP_BPF 39
                (has(21) || (has(39) && has(38))) && Path::new(VMLINUX_BTF).exists()
            }
            Need::Cpus(n) => cpus() >= *n,
            Need::CgroupV1(c) => Path::new("/sys/fs/cgroup")
                .join(c)
                .join("cgroup.procs")
                .exists(),
            Need::CgroupV2(c) => cgroup2_mounts().iter().any(|m| {
                std::fs::read_to_string(m.join("cgroup.controllers"))
                    .is_ok_and(|s| s.split_whitespace().any(|w| w == c))
            }),
            Need::CgroupV2Tree => !cgroup2_mounts().is_empty(),
            Need::Systemd => Path::new("/run/systemd/system").is_dir(),
            Need::Program(p) => program_installed(p),
            Need::Hardware(f) => f.present(),
            Need::Input(p) => p.exists(),
        }
    }
}

/// The log's token: `root`, `unprivileged`, `bpf`, `cpus:N`,
/// `cgroup-v1:C`, `cgroup-v2:C`, `cgroup-v2` (a tree), `systemd`,
/// `program:NAME`, `hardware:FEATURE`, `input:PATH` (C and Java tests and
/// the VM test bed's scenarios write the same tokens).
impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Need::Root => f.write_str("root"),
            Need::Unprivileged => f.write_str("unprivileged"),
            Need::Bpf => f.write_str("bpf"),
            Need::Cpus(n) => write!(f, "cpus:{n}"),
            Need::CgroupV1(c) => write!(f, "cgroup-v1:{c}"),
            Need::CgroupV2(c) => write!(f, "cgroup-v2:{c}"),
            Need::CgroupV2Tree => f.write_str("cgroup-v2"),
            Need::Systemd => f.write_str("systemd"),
            Need::Program(p) => write!(f, "program:{p}"),
            Need::Hardware(h) => write!(f, "hardware:{}", h.token()),
            Need::Input(p) => write!(f, "input:{}", p.display()),
        }
    }
}

/// A need token that names nothing known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownNeed(pub String);

impl fmt::Display for UnknownNeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown need {:?} (root, unprivileged, bpf, cpus:N, cgroup-v1:C, cgroup-v2:C, \
             cgroup-v2, systemd, program:NAME, \
             hardware:x86-64|invariant-tsc|transparent-huge-pages, input:PATH)",
            self.0
        )
    }
}

impl std::str::FromStr for Need {
    type Err = UnknownNeed;

    fn from_str(s: &str) -> Result<Need, UnknownNeed> {
        let bad = || UnknownNeed(s.to_string());
        let (kind, arg) = match s.split_once(':') {
            Some((k, a)) if !a.is_empty() => (k, Some(a)),
            Some(_) => return Err(bad()),
            None => (s, None),
        };
        Ok(match (kind, arg) {
            ("root", None) => Need::Root,
            ("unprivileged", None) => Need::Unprivileged,
            ("bpf", None) => Need::Bpf,
            ("cpus", Some(n)) => Need::Cpus(n.parse().map_err(|_| bad())?),
            ("cgroup-v1", Some(c)) => Need::CgroupV1(c.into()),
            ("cgroup-v2", Some(c)) => Need::CgroupV2(c.into()),
            ("cgroup-v2", None) => Need::CgroupV2Tree,
            ("systemd", None) => Need::Systemd,
            ("program", Some(p)) => Need::Program(p.into()),
            ("hardware", Some("x86-64")) => Need::Hardware(Feature::X86_64),
            ("hardware", Some("invariant-tsc")) => Need::Hardware(Feature::InvariantTsc),
            ("hardware", Some("transparent-huge-pages")) => {
                Need::Hardware(Feature::TransparentHugePages)
            }
            ("input", Some(p)) => Need::Input(p.into()),
            _ => return Err(bad()),
        })
    }
}

/// One line of the test log.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    /// A skipped test: `skip <TAB> suite <TAB> test <TAB> need <TAB> reason`.
    Skip {
        /// The test binary or program (`crate/binary`, `c`, `java`).
        suite: String,
        /// The test.
        test: String,
        /// What it needs (a [`Need`] token; parsed when judged).
        need: String,
        /// Why it skipped, in words.
        reason: String,
    },
    /// A test that failed once and ran again ([`crate::rerun::once_more`]):
    /// `rerun <TAB> suite <TAB> test <TAB> first failure`. Counted and
    /// listed, never hidden; its second failure failed the test.
    Rerun {
        /// The test binary or program.
        suite: String,
        /// The test.
        test: String,
        /// The first run's failure, in its own words.
        first_failure: String,
    },
    /// A fuzz target: `fuzz <TAB> suite <TAB> target <TAB> cases <TAB> seconds`.
    Fuzz {
        /// The test binary.
        suite: String,
        /// The target.
        target: String,
        /// Cases run.
        cases: u64,
        /// Wall time, s.
        seconds: f64,
    },
}

/// Tabs and line breaks inside a field become spaces.
fn field(s: &str) -> String {
    s.replace(['\t', '\n', '\r'], " ")
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Entry::Skip {
                suite,
                test,
                need,
                reason,
            } => write!(
                f,
                "skip\t{}\t{}\t{}\t{}",
                field(suite),
                field(test),
                field(need),
                field(reason)
            ),
            Entry::Rerun {
                suite,
                test,
                first_failure,
            } => write!(
                f,
                "rerun\t{}\t{}\t{}",
                field(suite),
                field(test),
                field(first_failure)
            ),
            Entry::Fuzz {
                suite,
                target,
                cases,
                seconds,
            } => write!(
                f,
                "fuzz\t{}\t{}\t{cases}\t{seconds:.3}",
                field(suite),
                field(target)
            ),
        }
    }
}

impl Entry {
    /// Parses one log line (`None`: not an entry).
    pub fn parse(line: &str) -> Option<Entry> {
        let f: Vec<&str> = line.trim_end_matches(['\n', '\r']).split('\t').collect();
        match f[..] {
            ["skip", suite, test, need, reason] => Some(Entry::Skip {
                suite: suite.into(),
                test: test.into(),
                need: need.into(),
                reason: reason.into(),
            }),
            ["rerun", suite, test, first_failure] => Some(Entry::Rerun {
                suite: suite.into(),
                test: test.into(),
                first_failure: first_failure.into(),
            }),
            ["fuzz", suite, target, cases, seconds] => Some(Entry::Fuzz {
                suite: suite.into(),
                target: target.into(),
                cases: cases.parse().ok()?,
                seconds: seconds.parse().ok()?,
            }),
            _ => None,
        }
    }
}

/// This test binary: `CARGO_PKG_NAME/<executable without its hash>`.
pub fn suite() -> String {
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let exe = match exe.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            name.to_string()
        }
        _ => exe,
    };
    match std::env::var("CARGO_PKG_NAME") {
        Ok(pkg) => format!("{pkg}/{exe}"),
        Err(_) => exe,
    }
}

/// Appends `entry` to the log named by [`LOG_ENV`], if any (one `write` of
/// one line on an `O_APPEND` file: lines of concurrent tests do not mix).
pub fn append(entry: &Entry) {
    let Some(path) = std::env::var_os(LOG_ENV).filter(|p| !p.is_empty()) else {
        return;
    };
    let line = format!("{entry}\n");
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        eprintln!(
            "cannot append to the test log {} ({LOG_ENV}): {e}",
            Path::new(&path).display()
        );
    }
}

/// Records that the current test (named after its thread, as the test
/// harness names it) skips: it needs `need`, for `reason`.
pub fn skip(need: Need, reason: impl fmt::Display) {
    skip_test(&current_test(), need, reason);
}

/// The current test's name: its thread's, as the test harness names it
/// (`(unnamed test)` on a main thread).
pub fn current_test() -> String {
    std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .unwrap_or("(unnamed test)")
        .to_string()
}

/// Records that `test` skips: it needs `need`, for `reason`.
pub fn skip_test(test: &str, need: Need, reason: impl fmt::Display) {
    let reason = reason.to_string();
    let offered = if need.present() {
        " — this machine offers it: the test should have run"
    } else {
        ""
    };
    println!("skipped {test}: {reason} (needs {need}){offered}");
    append(&Entry::Skip {
        suite: suite(),
        test: test.to_string(),
        need: need.to_string(),
        reason,
    });
}

/// A skip, judged on this machine.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    /// Suite, test and reason of the skip.
    pub suite: String,
    /// The test.
    pub test: String,
    /// Why, in words.
    pub reason: String,
    /// What it needs, or the token that names nothing known.
    pub need: Result<Need, UnknownNeed>,
}

impl Judged {
    /// Whether this skip hides a test that could have run: its need is
    /// offered here, or names nothing known (so cannot be judged).
    pub fn runnable(&self) -> bool {
        self.need.as_ref().map_or(true, Need::present)
    }
}

/// The skips among `entries`, judged on this machine.
pub fn judge(entries: &[Entry]) -> Vec<Judged> {
    entries
        .iter()
        .filter_map(|e| match e {
            Entry::Skip {
                suite,
                test,
                need,
                reason,
            } => Some(Judged {
                suite: suite.clone(),
                test: test.clone(),
                reason: reason.clone(),
                need: need.parse(),
            }),
            Entry::Fuzz { .. } | Entry::Rerun { .. } => None,
        })
        .collect()
}

/// Decodes the five XML entities of an attribute value.
fn xml_unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&#10;", " ")
        .replace("&amp;", "&")
}

/// The value of attribute `name` in the tag text `tag`.
fn attr(tag: &str, name: &str) -> Option<String> {
    let key = format!(" {name}=\"");
    let at = tag.find(&key)? + key.len();
    let end = tag[at..].find('"')? + at;
    Some(xml_unescape(&tag[at..end]))
}

/// The skipped test cases of a Maven Surefire report (`TEST-*.xml`) as
/// entries of suite `java`. A skip's message (the `message` attribute, or
/// the first line of the element's text) says what it needs as
/// `needs <token>: <reason>` (JUnit prefixes `Assumption failed: `); a
/// message without it gets the need token `unstated`, which judges as
/// runnable.
pub fn surefire_skips(xml: &str) -> Vec<Entry> {
    let mut out = Vec::new();
    for case in xml.split("<testcase").skip(1) {
        let end = case.find("</testcase>").unwrap_or(case.len());
        let case = &case[..end];
        let Some(sk) = case.find("<skipped") else {
            continue;
        };
        let head_end = case.find('>').unwrap_or(case.len());
        let head = &case[..head_end];
        let class = attr(head, "classname").unwrap_or_default();
        let name = attr(head, "name").unwrap_or_default();
        let skipped = &case[sk..];
        let tag_end = skipped.find('>').unwrap_or(skipped.len());
        let tag = &skipped[..tag_end];
        // the message attribute, else the element's text (a stack trace
        // whose first line is the exception and its message)
        let message = attr(tag, "message").unwrap_or_else(|| {
            let body = &skipped[(tag_end + 1).min(skipped.len())..];
            let body = &body[..body.find("</skipped>").unwrap_or(body.len())];
            let body = body.trim_start().trim_start_matches("<![CDATA[");
            xml_unescape(body.lines().next().unwrap_or_default())
        });
        let (need, reason) = match message.find("needs ") {
            Some(i) => {
                let rest = &message[i + "needs ".len()..];
                match rest.split_once(": ") {
                    Some((need, reason)) => (need.trim().to_string(), reason.trim().to_string()),
                    None => (rest.trim().to_string(), String::new()),
                }
            }
            None => ("unstated".to_string(), message.trim().to_string()),
        };
        let class = class.rsplit('.').next().unwrap_or_default();
        out.push(Entry::Skip {
            suite: "java".into(),
            test: format!("{class}.{name}"),
            need,
            reason,
        });
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn needs_round_trip_through_their_tokens() {
        for n in [
            Need::Root,
            Need::Unprivileged,
            Need::Bpf,
            Need::Cpus(2),
            Need::CgroupV1("freezer".into()),
            Need::CgroupV2("cpu".into()),
            Need::CgroupV2Tree,
            Need::Systemd,
            Need::Program("systemd-analyze".into()),
            Need::Hardware(Feature::X86_64),
            Need::Hardware(Feature::InvariantTsc),
            Need::Input("/a/b.jar".into()),
        ] {
            assert_eq!(n.to_string().parse::<Need>(), Ok(n.clone()), "{n}");
        }
        for bad in [
            "",
            "cpus",
            "cpus:x",
            "hardware:smt",
            "root:1",
            "program:",
            "gpu",
        ] {
            let e = bad.parse::<Need>().unwrap_err().to_string();
            assert!(e.contains("unknown need"), "{bad}: {e}");
        }
    }

    #[test]
    fn presence_follows_the_machine() {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        assert_eq!(Need::Root.present(), root);
        assert_eq!(Need::Unprivileged.present(), !root);
        assert!(Need::Cpus(1).present());
        assert!(!Need::Cpus(1 << 20).present());
        assert!(Need::Program("sh".into()).present());
        assert!(Need::Program("/bin/sh".into()).present());
        assert!(!Need::Program("no-such-program-elfen".into()).present());
        assert!(Need::Input("/".into()).present());
        assert!(!Need::Input("/no/such/elfen/input".into()).present());
        assert!(!Need::CgroupV1("no-such-controller".into()).present());
        assert!(!Need::CgroupV2("no-such-controller".into()).present());
        let cgroup2 = std::fs::read_to_string("/proc/self/mounts")
            .unwrap()
            .lines()
            .any(|l| l.split_whitespace().nth(2) == Some("cgroup2"));
        assert_eq!(Need::CgroupV2Tree.present(), cgroup2);
        assert_eq!(
            Need::Systemd.present(),
            Path::new("/run/systemd/system").is_dir()
        );
        assert_eq!(
            Need::Hardware(Feature::X86_64).present(),
            cfg!(target_arch = "x86_64")
        );
    }

    #[test]
    fn entries_are_one_line_each_and_parse_back() {
        let e = Entry::Skip {
            suite: "elfen-x/it".into(),
            test: "a::b".into(),
            need: "cpus:2".into(),
            reason: "one CPU\there\nonly".into(),
        };
        let line = e.to_string();
        assert_eq!(line.lines().count(), 1);
        assert_eq!(
            Entry::parse(&line),
            Some(Entry::Skip {
                suite: "elfen-x/it".into(),
                test: "a::b".into(),
                need: "cpus:2".into(),
                reason: "one CPU here only".into(),
            })
        );
        let f = Entry::Fuzz {
            suite: "s".into(),
            target: "t".into(),
            cases: 2000,
            seconds: 0.25,
        };
        assert_eq!(Entry::parse(&f.to_string()), Some(f));
        let r = Entry::Rerun {
            suite: "s".into(),
            test: "t".into(),
            first_failure: "assertion failed:\tp99 3 ms".into(),
        };
        let line = r.to_string();
        assert_eq!(line, "rerun\ts\tt\tassertion failed: p99 3 ms");
        assert!(judge(&[r]).is_empty(), "a rerun is no skip");
        assert!(matches!(
            Entry::parse(&line),
            Some(Entry::Rerun { first_failure, .. }) if first_failure == "assertion failed: p99 3 ms"
        ));
        assert_eq!(Entry::parse("garbage"), None);
        assert_eq!(Entry::parse("fuzz\ts\tt\tmany\t1"), None);
    }

    /// The tests of this crate that set [`LOG_ENV`] hold this lock.
    pub(crate) static LOG_ENV_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn a_skip_is_appended_to_the_log() {
        let _one = LOG_ENV_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        // Appending reads the variable at each call.
        let before = std::env::var_os(LOG_ENV);
        // SAFETY: the tests of this binary that touch LOG_ENV hold LOG_ENV_LOCK.
        unsafe { std::env::set_var(LOG_ENV, &log) };
        skip_test("t1", Need::Cpus(1 << 20), "needs a huge machine");
        skip_test("t2", Need::Program("no-such-program-elfen".into()), "x");
        // SAFETY: as above.
        unsafe {
            match before {
                Some(v) => std::env::set_var(LOG_ENV, v),
                None => std::env::remove_var(LOG_ENV),
            }
        };
        let text = std::fs::read_to_string(&log).unwrap();
        let entries: Vec<Entry> = text.lines().filter_map(Entry::parse).collect();
        assert_eq!(entries.len(), 2, "{text}");
        assert!(
            matches!(&entries[0], Entry::Skip { test, need, .. } if test == "t1" && need == "cpus:1048576")
        );
        let judged = judge(&entries);
        assert!(judged.iter().all(|j| !j.runnable()), "{judged:?}");
    }

    #[test]
    fn a_skip_of_what_is_offered_or_unknown_is_runnable() {
        let judged = judge(&[
            Entry::Skip {
                suite: "s".into(),
                test: "offered".into(),
                need: "cpus:1".into(),
                reason: "r".into(),
            },
            Entry::Skip {
                suite: "s".into(),
                test: "unknown".into(),
                need: "gpu".into(),
                reason: "r".into(),
            },
            Entry::Fuzz {
                suite: "s".into(),
                target: "t".into(),
                cases: 1,
                seconds: 0.0,
            },
        ]);
        assert_eq!(judged.len(), 2);
        assert!(judged.iter().all(Judged::runnable), "{judged:?}");
    }

    #[test]
    fn surefire_reports_give_their_skips_and_reasons() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="dev.elfen.PageTest" tests="3" skipped="2">
  <testcase name="runs" classname="dev.elfen.PageTest" time="0.1"/>
  <testcase name="modes" classname="dev.elfen.PageTest" time="0">
    <skipped message="Assumption failed: needs unprivileged: root may open a 0444 file &quot;rw&quot;"/>
  </testcase>
  <testcase name="old" classname="dev.elfen.X" time="0">
    <skipped message="no reason given"/>
  </testcase>
  <testcase name="trace" classname="dev.elfen.Y" time="0.0">
    <skipped type="org.opentest4j.TestAbortedException"><![CDATA[org.opentest4j.TestAbortedException: Assumption failed: needs cpus:2: cpu 1 is not ours
	at org.junit.jupiter.api.Assumptions.throwAssumptionFailed(Assumptions.java:316)
]]></skipped>
  </testcase>
</testsuite>"#;
        let e = surefire_skips(xml);
        assert_eq!(
            e,
            [
                Entry::Skip {
                    suite: "java".into(),
                    test: "PageTest.modes".into(),
                    need: "unprivileged".into(),
                    reason: "root may open a 0444 file \"rw\"".into(),
                },
                Entry::Skip {
                    suite: "java".into(),
                    test: "X.old".into(),
                    need: "unstated".into(),
                    reason: "no reason given".into(),
                },
                Entry::Skip {
                    suite: "java".into(),
                    test: "Y.trace".into(),
                    need: "cpus:2".into(),
                    reason: "cpu 1 is not ours".into(),
                },
            ]
        );
        assert!(judge(&e)[1].runnable());
    }
}
