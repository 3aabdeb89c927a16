//! **Lucene** (`bindings/java/lucene`) as the harness's LC service:
//! `elfen bench --lc lucene`. The service is an external one
//! ([`elfen_wire::launch`]) — `elfen-lucene serve`, a Lucene 10 search server
//! speaking the LC wire protocol and publishing through the Java binding's
//! `LcLane` — sent the tasks file's term queries.
//!
//! Its demand is set by the index size: `--copies K` indexes every
//! document of the corpus K times, so posting lists and query costs grow
//! K-fold. The default, [`DEFAULT_COPIES`] = 40 (10.2 M documents, the
//! paper's index size), puts the demand in the paper's regime: a mean of a
//! few hundred µs and a tail of milliseconds (`docs/lucene.md`).
//! `ELFEN_LUCENE_COPIES` chooses another size.
//!
//! Pre-flight ([`preflight`]) checks what the server needs before anything
//! starts — the launcher, the jar, the corpus and the index for that many
//! copies — and names the one command that makes what is missing
//! ([`SETUP`]), so the harness never starts a server that would build an
//! index for minutes or stop half-started.

use crate::error::{LoadError, Result};
use std::path::{Path, PathBuf};

/// The launcher, relative to the repository root.
pub const LAUNCHER: &str = "bindings/java/lucene/bin/elfen-lucene";
/// The jar the launcher runs, relative to the launcher's directory.
const JAR_FROM_BIN: &str = "../target/elfen-lucene.jar";
/// The command that builds the corpus, the jar and the index.
pub const SETUP: &str = "scripts/lucene.sh";
/// The environment variable that sets the index size (copies of the corpus).
pub const COPIES_ENV: &str = "ELFEN_LUCENE_COPIES";
/// Copies of the corpus in the index `--lc lucene` serves: 10.2 M
/// documents, the size of the paper's index.
pub const DEFAULT_COPIES: u32 = 40;
/// The file a complete index holds (written last by the Java side).
pub const INDEX_MARKER: &str = "elfen-index.properties";
/// The Lucene major version in the index directory's name
/// (`index-lucene<major>[-x<copies>]`, as `Options.java` names it).
const LUCENE_MAJOR: u32 = 10;
/// How long the server may take to answer its first ping: index check
/// (reads the whole index) and 20 rounds of JIT warm-up; about 13 s with 40
/// copies on an idle machine, several times that on a busy one.
pub const STARTUP_TIMEOUT_S: f64 = 180.0;

/// The repository root: the first of the working directory, the running
/// executable's directory and their ancestors that holds the launcher.
pub fn repo_root() -> Option<PathBuf> {
    let starts = [
        std::env::current_dir().ok(),
        std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(Path::to_path_buf)),
    ];
    starts
        .into_iter()
        .flatten()
        .flat_map(|s| s.ancestors().map(Path::to_path_buf).collect::<Vec<_>>())
        .find(|d| d.join(LAUNCHER).is_file())
}

/// The launcher's path: absolute when the repository is found, else
/// relative to the working directory.
pub fn launcher() -> PathBuf {
    repo_root().map_or_else(|| PathBuf::from(LAUNCHER), |r| r.join(LAUNCHER))
}

/// The jar a launcher runs.
pub fn jar_of(launcher: &Path) -> PathBuf {
    launcher
        .parent()
        .unwrap_or(Path::new("."))
        .join(JAR_FROM_BIN)
}

/// The corpus directory: `ELFEN_CORPUS_DIR`, else `~/.cache/elfen/corpus`
/// (as `scripts/corpus.sh` and the Java side choose it).
pub fn corpus_dir() -> PathBuf {
    std::env::var_os("ELFEN_CORPUS_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/elfen/corpus")))
        .unwrap_or_else(|| PathBuf::from(".cache/elfen/corpus"))
}

/// The corpus file.
pub fn corpus_file() -> PathBuf {
    corpus_dir().join("docs.tsv")
}

/// The value of option `name` on a command line (`name V` or `name=V`).
fn option_in<'a>(command: &'a str, name: &str) -> Option<&'a str> {
    let words: Vec<&str> = command.split_whitespace().collect();
    let eq = format!("{name}=");
    for (i, w) in words.iter().enumerate() {
        if let Some(v) = w.strip_prefix(eq.as_str()) {
            return Some(v);
        }
        if *w == name {
            return Some(words.get(i + 1).copied().unwrap_or(""));
        }
    }
    None
}

/// Where a command line's server finds its corpus and its index of
/// `copies` copies, as the Java side resolves them: `--corpus-dir`,
/// `ELFEN_CORPUS_DIR`, `~/.cache/elfen/corpus`; `--corpus`, else
/// `docs.tsv` there; `--index`, `ELFEN_INDEX_DIR`, else
/// `<corpus dir>/index-lucene10[-x<copies>]`.
pub fn paths_of(command: &str, copies: u32) -> (PathBuf, PathBuf) {
    let dir = option_in(command, "--corpus-dir").map_or_else(corpus_dir, PathBuf::from);
    let corpus = option_in(command, "--corpus").map_or_else(|| dir.join("docs.tsv"), PathBuf::from);
    let index = option_in(command, "--index")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("ELFEN_INDEX_DIR").map(PathBuf::from))
        .unwrap_or_else(|| {
            dir.join(if copies > 1 {
                format!("index-lucene{LUCENE_MAJOR}-x{copies}")
            } else {
                format!("index-lucene{LUCENE_MAJOR}")
            })
        });
    (corpus, index)
}

/// Parses a copies setting (a positive number).
pub fn parse_copies(what: &str, s: &str) -> Result<u32> {
    s.trim()
        .parse::<u32>()
        .ok()
        .filter(|&c| c >= 1)
        .ok_or_else(|| LoadError::Parse {
            what: what.into(),
            given: s.into(),
            expected: "a number of copies >= 1".into(),
        })
}

/// The copies `--lc lucene` serves: `ELFEN_LUCENE_COPIES`, else
/// [`DEFAULT_COPIES`].
pub fn copies_setting() -> Result<u32> {
    match std::env::var(COPIES_ENV) {
        Ok(s) if !s.trim().is_empty() => parse_copies(COPIES_ENV, &s),
        _ => Ok(DEFAULT_COPIES),
    }
}

/// The `--copies` of a command line (`--copies K` or `--copies=K`), if
/// given.
pub fn copies_in(command: &str) -> Result<Option<u32>> {
    option_in(command, "--copies")
        .map(|v| parse_copies("--copies", v))
        .transpose()
}

/// The copies a command line serves: its `--copies`, else
/// `ELFEN_LUCENE_COPIES` (which the server reads too), else 1 (the
/// server's default).
pub fn copies_of(command: &str) -> Result<u32> {
    if let Some(c) = copies_in(command)? {
        return Ok(c);
    }
    match std::env::var(COPIES_ENV) {
        Ok(s) if !s.trim().is_empty() => parse_copies(COPIES_ENV, &s),
        _ => Ok(1),
    }
}

/// The nice value of the server's acceptor and dispatchers in the
/// harness: ahead of batch work at nice 0 on their CPU (a dispatcher woken
/// by a request preempts it), yet in the normal class, and at a weight
/// (9.3 : 1) that leaves the JVM's own normal threads on that CPU a slice
/// within a few of theirs whatever a dispatcher does (at −20, 87 : 1, a
/// spinning dispatcher could keep them waiting a quarter of a second). Not
/// `SCHED_FIFO`:
/// the JVM's VM thread, JIT and GC share their CPU at `SCHED_OTHER`, and a
/// real-time dispatcher spinning for something one of them holds (HotSpot
/// spins and yields, and a yield at a real-time priority lets no normal
/// thread run) stalled the whole JVM until the kernel's real-time
/// throttling stopped it: a dispatcher on CPU for 950 ms straight while the
/// JIT and the JVM's service threads waited, measured under load.
pub const SIDE_NICE: i8 = -10;

/// The server's command line for the harness, with `copies` copies and
/// its acceptor and dispatchers at nice [`SIDE_NICE`].
pub fn command(copies: u32) -> String {
    format!(
        "{} serve --port {{port}} --cpu {{cpu}} --side-cpus {{side_cpus}} \
         --lc-signal {{lc_signal}} --page {{page}} --lane {{lane}} --copies {copies} \
         --side-nice {SIDE_NICE}",
        launcher().display()
    )
}

/// Whether `command` runs the Lucene launcher.
pub fn is_lucene(command: &str) -> bool {
    command
        .split_whitespace()
        .next()
        .is_some_and(|w| w.ends_with("elfen-lucene"))
}

fn setup_hint(copies: u32) -> String {
    let mut env = String::new();
    for v in ["ELFEN_CORPUS_DIR", "ELFEN_INDEX_DIR"] {
        if let Some(x) = std::env::var_os(v) {
            env.push_str(&format!("{v}={} ", x.to_string_lossy()));
        }
    }
    let copies = if copies == DEFAULT_COPIES {
        String::new()
    } else {
        format!(" --copies {copies}")
    };
    format!("run {env}{SETUP}{copies} (corpus, Maven build, index; idempotent)")
}

/// Pre-flight of a Lucene command line: the launcher, its jar, the corpus
/// and a complete index for its copies exist. The error names what is
/// missing and the command that makes it.
pub fn preflight(command: &str) -> Result<()> {
    let copies = copies_of(command)?;
    let missing = |what: String| {
        Err(LoadError::Service(format!(
            "Lucene: {what}; {}",
            setup_hint(copies)
        )))
    };
    let exe = PathBuf::from(command.split_whitespace().next().unwrap_or(LAUNCHER));
    if !exe.is_file() {
        return missing(format!(
            "the launcher {} does not exist (run from the repository root)",
            exe.display()
        ));
    }
    let jar = jar_of(&exe);
    if !jar.is_file() {
        return missing(format!("{} is not built", jar.display()));
    }
    let (corpus, index) = paths_of(command, copies);
    if !corpus.is_file() {
        return missing(format!("no corpus at {}", corpus.display()));
    }
    if !index.is_dir() {
        return missing(format!(
            "no index of {copies} cop{} of the corpus at {}",
            if copies == 1 { "y" } else { "ies" },
            index.display()
        ));
    }
    if !index.join(INDEX_MARKER).is_file() {
        return Err(LoadError::Service(format!(
            "Lucene: the index at {} is half-built (no {INDEX_MARKER}); rebuild it with \
             {} index --rebuild --copies {copies}",
            index.display(),
            exe.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_come_from_the_command_line() {
        assert_eq!(copies_in("x serve --copies 40 --port 1").unwrap(), Some(40));
        assert_eq!(copies_in("x serve --copies=3").unwrap(), Some(3));
        assert_eq!(copies_in("x serve --port 1").unwrap(), None);
        assert!(copies_in("x serve --copies 0").is_err());
        assert!(copies_in("x serve --copies").is_err());
        assert!(copies_in("x serve --copies=many").is_err());
    }

    #[test]
    fn the_preset_command_serves_the_chosen_copies() {
        let c = command(7);
        assert!(is_lucene(&c), "{c}");
        assert_eq!(copies_in(&c).unwrap(), Some(7));
        assert!(c.contains("--side-nice -10"), "{c}");
        assert!(!c.contains("fifo"), "no real-time JVM thread: {c}");
        for p in [
            "{port}",
            "{cpu}",
            "{side_cpus}",
            "{lc_signal}",
            "{page}",
            "{lane}",
        ] {
            assert!(c.contains(p), "{p} in {c}");
        }
        assert!(!is_lucene("target/release/elfen serve --port {port}"));
    }

    #[test]
    fn corpus_and_index_come_from_the_command_line_first() {
        let (c, i) = paths_of("x serve --corpus-dir /c --copies 3", 3);
        assert_eq!(c, Path::new("/c/docs.tsv"));
        if std::env::var_os("ELFEN_INDEX_DIR").is_none() {
            assert_eq!(i, Path::new("/c/index-lucene10-x3"));
        }
        let (c, i) = paths_of("x serve --corpus=/d/x.tsv --index /i", 1);
        assert_eq!(
            (c.as_path(), i.as_path()),
            (Path::new("/d/x.tsv"), Path::new("/i"))
        );
    }

    #[test]
    fn a_missing_launcher_names_the_setup_command() {
        let e = preflight("/nonexistent/bin/elfen-lucene serve --copies 40")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/nonexistent/bin/elfen-lucene") && e.contains(SETUP),
            "{e}"
        );
    }
}
