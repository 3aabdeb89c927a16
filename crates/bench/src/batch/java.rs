//! The **Java batch job**: Lucene indexing of the corpus
//! (`bindings/java/lucene`, `elfen-lucene batch`), a real batch program
//! instrumented with the Java binding's check at its loop back-edge (each
//! document). With `ELFEN_PAGE` / `ELFEN_LANE` it attaches its indexing
//! thread to the batch lane and naps as the lane's policy says, so it runs
//! the Elfen configurations too; without them it checks nothing. Its
//! progress is the documents it reports indexed (`progress docs=N …` lines
//! on stdout, every [`REPORT_MS`] ms).

use crate::error::{BenchError, Result};
use crate::lc::lucene;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{ChildStderr, ChildStdout};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// How long the job may take to report its first documents (JVM start,
/// corpus load into memory).
pub const START_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// How long the job runs after its first documents before an invocation
/// counts it as started: the JIT compiles the indexing code in its first
/// seconds (documents per second still rise several-fold), so a measured
/// window that started at once would see a JVM warming up.
pub const WARM_UP: std::time::Duration = std::time::Duration::from_secs(2);
/// How often the job reports its progress, ms: a measured window's
/// progress is known to within this much work at each edge.
pub const REPORT_MS: u32 = 50;
/// Bytes of the job's stderr kept for error messages.
const STDERR_TAIL: usize = 2048;

/// Checks that launcher, jar and corpus exist and returns the launcher;
/// the error names the one command that makes them.
pub fn check() -> Result<PathBuf> {
    let missing = |what: String| {
        Err(BenchError::Batch(format!(
            "lucene-index: {what}; run {} (corpus, Maven build, index) first",
            lucene::SETUP
        )))
    };
    let exe = lucene::launcher();
    if !exe.is_file() {
        return missing(format!(
            "{} not found (run from the repository)",
            lucene::LAUNCHER
        ));
    }
    let jar = lucene::jar_of(&exe);
    if !jar.is_file() {
        return missing(format!("{} is not built", jar.display()));
    }
    let corpus = lucene::corpus_file();
    if !corpus.is_file() {
        return missing(format!("no corpus at {}", corpus.display()));
    }
    Ok(exe)
}

/// The job's command line: index until stopped, report every
/// [`REPORT_MS`].
pub fn argv() -> Vec<String> {
    vec![
        lucene::launcher().display().to_string(),
        "batch".into(),
        "--seconds".into(),
        "0".into(),
        "--passes".into(),
        "0".into(),
        "--report-ms".into(),
        REPORT_MS.to_string(),
    ]
}

/// A directory of the job's own for its temporary index
/// (`-Djava.io.tmpdir`), removed when dropped — also after the job was
/// killed with SIGKILL, which its own clean-up on SIGTERM does not see.
#[derive(Debug)]
pub struct JobTmp(PathBuf);

impl JobTmp {
    /// A fresh directory under the system's temporary directory.
    pub fn create() -> Result<JobTmp> {
        use std::sync::atomic::AtomicU32;
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "elfen-bench-{}-lucene-index-{}",
            std::process::id(),
            N.fetch_add(1, Relaxed)
        ));
        std::fs::create_dir_all(&d)
            .map_err(|e| BenchError::io(format!("creating {}", d.display()), e))?;
        Ok(JobTmp(d))
    }

    /// `ELFEN_LUCENE_JAVA_OPTS` for the launcher: the caller's, plus the
    /// temporary directory.
    pub fn java_opts(&self) -> String {
        let mine = format!("-Djava.io.tmpdir={}", self.0.display());
        match std::env::var("ELFEN_LUCENE_JAVA_OPTS") {
            Ok(o) if !o.trim().is_empty() => format!("{o} {mine}"),
            _ => mine,
        }
    }

    /// The directory.
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for JobTmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Reads the job's stdout on a thread of its own and keeps the last
/// reported document count in the returned counter.
pub fn follow(out: ChildStdout) -> Arc<AtomicU64> {
    let docs = Arc::new(AtomicU64::new(0));
    let d = Arc::clone(&docs);
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
            if let Some(n) = parse_docs(&line) {
                d.store(n, Relaxed);
            }
        }
    });
    docs
}

/// Keeps the last [`STDERR_TAIL`] bytes the job writes to stderr.
pub fn follow_stderr(mut err: ChildStderr) -> Arc<Mutex<Vec<u8>>> {
    let tail = Arc::new(Mutex::new(Vec::new()));
    let t = Arc::clone(&tail);
    std::thread::spawn(move || {
        let mut buf = [0u8; 1024];
        while let Ok(n) = err.read(&mut buf) {
            if n == 0 {
                break;
            }
            let mut v = t.lock().unwrap_or_else(|p| p.into_inner());
            v.extend_from_slice(&buf[..n]);
            let over = v.len().saturating_sub(STDERR_TAIL);
            v.drain(..over);
        }
    });
    tail
}

/// The last lines of a kept stderr tail.
pub fn tail_text(tail: &Mutex<Vec<u8>>) -> String {
    let v = tail.lock().unwrap_or_else(|p| p.into_inner());
    let s = String::from_utf8_lossy(&v);
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(6)..].join("\n")
}

/// `N` of a `progress docs=N …` line.
pub fn parse_docs(line: &str) -> Option<u64> {
    line.strip_prefix("progress ")?
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("docs="))?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_parse() {
        let l = "progress docs=244724 elapsed_s=5.010 docs_per_s=48849.4 interval_docs_per_s=1.0";
        assert_eq!(parse_docs(l), Some(244_724));
        assert_eq!(parse_docs("done docs=5"), None);
        assert_eq!(parse_docs("progress elapsed_s=1"), None);
        assert_eq!(parse_docs("progress docs=x"), None);
    }

    #[test]
    fn the_command_reports_often_and_never_stops_by_itself() {
        let a = argv();
        assert!(a[0].ends_with("elfen-lucene") && a[1] == "batch", "{a:?}");
        let after = |k: &str| a.iter().position(|x| x == k).map(|i| a[i + 1].as_str());
        assert_eq!(after("--seconds"), Some("0"));
        assert_eq!(after("--passes"), Some("0"));
        assert_eq!(after("--report-ms"), Some("50"));
    }
}
