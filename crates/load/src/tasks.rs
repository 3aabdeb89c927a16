//! The luceneutil tasks file (`data/luceneutil/`): finding it and reading
//! its term queries (`HighTerm: ref # freq=3793973`).

use crate::error::{LoadError, Result};
use std::path::{Path, PathBuf};

/// The tasks file the paper's term queries come from.
pub const TASKS_FILE: &str = "wikimedium.10M.nostopwords.tasks";

/// The repository's data directory as this crate was built (found at run
/// time when the binary runs where it was built: tests, `target/release`).
const BUILT_DATA_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/luceneutil");

/// Where a data file is looked for: `$ELFEN_DATA_DIR/<file>`; then
/// `data/luceneutil/<file>` in the working directory and its ancestors and
/// in the running binary's ancestors; then the repository this crate was
/// built from.
pub fn data_candidates(file: &str) -> Vec<PathBuf> {
    let mut c = Vec::new();
    if let Some(d) = std::env::var_os("ELFEN_DATA_DIR") {
        c.push(PathBuf::from(d).join(file));
    }
    let mut roots = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        roots.extend(cwd.ancestors().take(4).map(Path::to_path_buf));
    }
    if let Ok(exe) = std::env::current_exe() {
        roots.extend(exe.ancestors().skip(1).take(5).map(Path::to_path_buf));
    }
    for r in roots {
        let p = r.join("data/luceneutil").join(file);
        if !c.contains(&p) {
            c.push(p);
        }
    }
    c.push(Path::new(BUILT_DATA_DIR).join(file));
    c
}

/// The tasks file: `given`, or the first of [`data_candidates`] that exists.
pub fn find_tasks_file(given: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = given {
        return if p.is_file() {
            Ok(p.to_path_buf())
        } else {
            Err(LoadError::Demand(format!(
                "tasks file {} does not exist",
                p.display()
            )))
        };
    }
    let c = data_candidates(TASKS_FILE);
    c.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        LoadError::Demand(format!(
            "{TASKS_FILE} not found; it ships in the repository's data/luceneutil/ \
             (set ELFEN_DATA_DIR to a directory holding it); looked in: {}",
            c.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}

/// The class of a term query (how frequent its term is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TermClass {
    /// `HighTerm:`.
    High,
    /// `MedTerm:`.
    Med,
    /// `LowTerm:`.
    Low,
}

/// One term query of the tasks file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TermQuery {
    /// Its class.
    pub class: TermClass,
    /// The term.
    pub term: String,
    /// The term's document frequency in luceneutil's 10M-document index.
    pub freq: u64,
    /// 1-based line number.
    pub line: usize,
}

/// The term queries of a tasks file, and the term-query lines that did not
/// parse (`(line number, text)`); other tasks are ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TermQueries {
    /// Parsed queries, in file order.
    pub queries: Vec<TermQuery>,
    /// Lines that start like a term query but do not parse.
    pub bad: Vec<(usize, String)>,
}

/// Parses the term queries of a tasks file's text.
pub fn parse_term_queries(text: &str) -> TermQueries {
    let mut out = TermQueries::default();
    for (i, l) in text.lines().enumerate() {
        let (class, rest) = if let Some(r) = l.strip_prefix("HighTerm:") {
            (TermClass::High, r)
        } else if let Some(r) = l.strip_prefix("MedTerm:") {
            (TermClass::Med, r)
        } else if let Some(r) = l.strip_prefix("LowTerm:") {
            (TermClass::Low, r)
        } else {
            continue;
        };
        let parsed = rest.split_once('#').and_then(|(term, f)| {
            let term = term.trim();
            let freq = f.trim().strip_prefix("freq=")?.trim().parse::<u64>().ok()?;
            (!term.is_empty() && !term.contains(char::is_whitespace) && freq > 0)
                .then(|| (term.to_string(), freq))
        });
        match parsed {
            Some((term, freq)) => out.queries.push(TermQuery {
                class,
                term,
                freq,
                line: i + 1,
            }),
            None => out.bad.push((i + 1, l.to_string())),
        }
    }
    out
}

/// Reads and parses a tasks file.
pub fn read_term_queries(path: &Path) -> Result<TermQueries> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| LoadError::Demand(format!("reading {}: {e}", path.display())))?;
    Ok(parse_term_queries(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn term_lines_parse_and_bad_ones_are_kept_with_their_line() {
        let text = "HighTerm: ref # freq=3000\nMedTerm: x # freq=100\nLowTerm: y # freq=20\n\
                    OrHighHigh: a b # freq=5 freq=6\nHighTerm: bad # freq=\nLowTerm: two words # freq=3\n";
        let q = parse_term_queries(text);
        assert_eq!(
            q.queries.iter().map(|q| q.freq).collect::<Vec<_>>(),
            vec![3000, 100, 20]
        );
        assert_eq!(q.queries[1].class, TermClass::Med);
        assert_eq!(q.queries[2].line, 3);
        assert_eq!(
            q.bad.iter().map(|b| b.0).collect::<Vec<_>>(),
            vec![5, 6],
            "{:?}",
            q.bad
        );
    }

    #[test]
    fn the_shipped_tasks_file_is_found_and_complete() {
        // The file ships with the repository: missing is a failure.
        let p = find_tasks_file(None).unwrap_or_else(|e| panic!("{e}"));
        let q = read_term_queries(&p).unwrap();
        assert_eq!(q.queries.len(), 1237, "{}", p.display());
        assert!(q.bad.is_empty(), "{:?}", &q.bad[..q.bad.len().min(3)]);
        let e = find_tasks_file(Some(Path::new("/nonexistent/t.tasks"))).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/t.tasks"), "{e}");
    }
}
