//! Lists what a test run skipped, fuzzed and ran twice, and fails when a
//! skipped test needs something this machine offers (`scripts/test.sh` runs
//! it last; the VM test bed's guest judges each test's skips with it).
//!
//! ```text
//! elfen-test-log LOG [--surefire DIR]...
//! ```
//!
//! `LOG` is the file the Rust and C tests appended to (`ELFEN_TEST_LOG`);
//! each `--surefire DIR` adds the skipped tests of the Maven Surefire
//! reports in `DIR` (`TEST-*.xml`). A test that ran twice
//! (`elfen_cmd::rerun`) is counted and listed with its first failure; it
//! does not change the exit status (its second failure failed the test).
//! Exit 1 when a skip could have run here (or names an unknown need), 2 on
//! bad arguments.

use elfen_cmd::skip::{Entry, judge, surefire_skips};
use std::path::PathBuf;

fn main() {
    match run() {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("elfen-test-log: {e}");
            std::process::exit(2);
        }
    }
}

fn run() -> Result<bool, String> {
    let mut args = std::env::args().skip(1);
    let mut log: Option<PathBuf> = None;
    let mut surefire: Vec<PathBuf> = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--surefire" => {
                surefire.push(args.next().ok_or("--surefire needs a directory")?.into())
            }
            _ if log.is_none() && !a.starts_with('-') => log = Some(a.into()),
            _ => {
                return Err(format!(
                    "unexpected argument {a:?}; usage: elfen-test-log LOG [--surefire DIR]..."
                ));
            }
        }
    }
    let log = log.ok_or("usage: elfen-test-log LOG [--surefire DIR]...")?;
    let text = match std::fs::read_to_string(&log) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("{}: {e}", log.display())),
    };
    let mut entries: Vec<Entry> = text.lines().filter_map(Entry::parse).collect();
    for dir in &surefire {
        let Ok(rd) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("TEST-") && n.ends_with(".xml"))
            })
            .collect();
        files.sort();
        for f in files {
            let xml = std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
            entries.extend(surefire_skips(&xml));
        }
    }
    let fuzz: Vec<&Entry> = entries
        .iter()
        .filter(|e| matches!(e, Entry::Fuzz { .. }))
        .collect();
    println!("fuzzed: {} targets", fuzz.len());
    for e in fuzz {
        if let Entry::Fuzz {
            suite,
            target,
            cases,
            seconds,
        } = e
        {
            println!("  {suite} {target}: {cases} cases in {seconds:.2} s");
        }
    }
    let skips = judge(&entries);
    println!("skipped: {}", skips.len());
    for s in &skips {
        let need = match &s.need {
            Ok(n) => format!("needs {n}"),
            Err(e) => e.to_string(),
        };
        let verdict = if s.runnable() {
            "  <- RUNNABLE HERE"
        } else {
            ""
        };
        println!("  {} {}: {need}: {}{verdict}", s.suite, s.test, s.reason);
    }
    let reruns: Vec<&Entry> = entries
        .iter()
        .filter(|e| matches!(e, Entry::Rerun { .. }))
        .collect();
    println!("ran twice: {}", reruns.len());
    for e in reruns {
        if let Entry::Rerun {
            suite,
            test,
            first_failure,
        } = e
        {
            println!("  {suite} {test}: first failure: {first_failure}");
        }
    }
    let runnable = skips.iter().filter(|s| s.runnable()).count();
    if runnable > 0 {
        println!(
            "FAILED: {runnable} skipped test(s) need what this machine offers (or name no known \
             need): they should have run"
        );
    }
    Ok(runnable == 0)
}
