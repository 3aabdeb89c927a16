//! Request spans **from the wire**: what a client saw of each request —
//! when it was meant to be sent (the open-loop schedule), when it was sent
//! and when its response arrived — in a **spans file**, JSON lines, one per
//! request, `CLOCK_MONOTONIC` ns (the clock of the trace):
//!
//! ```text
//! {"id":17,"intended_ns":5123000000,"sent_ns":5123004100,"received_ns":5123119800}
//! ```
//!
//! `received_ns` is absent for a request never answered. `elfen trace
//! load` writes one; any client can (the id is the wire protocol's request
//! id, which a service publishing its LC line passes to `request_begin`).
//! The study joins them to the LC line's spans by id, or uses them alone
//! where the service publishes nothing.

use crate::error::TraceError;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::path::Path;

/// One request as the client saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientSpan {
    /// The wire request id.
    pub id: u64,
    /// When the open-loop schedule meant to send it, ns.
    pub intended_ns: u64,
    /// When it was sent, ns.
    pub sent_ns: u64,
    /// When its response arrived, ns (None: never answered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub received_ns: Option<u64>,
}

impl ClientSpan {
    /// Latency from the intended send time (the open-loop measure), ns;
    /// None while unanswered.
    pub fn latency_ns(&self) -> Option<u64> {
        self.received_ns.map(|r| r.saturating_sub(self.intended_ns))
    }
}

/// Writes spans as JSON lines.
pub fn write(path: &Path, spans: &[ClientSpan]) -> Result<(), TraceError> {
    let f = std::fs::File::create(path).map_err(|e| TraceError::io(path, e))?;
    let mut w = std::io::BufWriter::new(f);
    for s in spans {
        serde_json::to_writer(&mut w, s).map_err(|e| TraceError::Parse {
            path: path.into(),
            detail: e.to_string(),
        })?;
        w.write_all(b"\n").map_err(|e| TraceError::io(path, e))?;
    }
    w.flush().map_err(|e| TraceError::io(path, e))
}

/// Reads a spans file; a line that does not parse is an error naming it.
pub fn read(path: &Path) -> Result<Vec<ClientSpan>, TraceError> {
    let f = std::fs::File::open(path).map_err(|e| TraceError::io(path, e))?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|e| TraceError::io(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        let s: ClientSpan = serde_json::from_str(&line).map_err(|e| TraceError::Parse {
            path: path.into(),
            detail: format!("line {}: not a client span: {e}", i + 1),
        })?;
        out.push(s);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_round_trip_and_bad_lines_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("spans.jsonl");
        let v = vec![
            ClientSpan {
                id: 1,
                intended_ns: 100,
                sent_ns: 105,
                received_ns: Some(300),
            },
            ClientSpan {
                id: 2,
                intended_ns: 200,
                sent_ns: 201,
                received_ns: None,
            },
        ];
        write(&p, &v).unwrap();
        assert_eq!(read(&p).unwrap(), v);
        assert_eq!(v[0].latency_ns(), Some(200));
        assert_eq!(v[1].latency_ns(), None);
        std::fs::write(
            &p,
            "{\"id\":1,\"intended_ns\":1,\"sent_ns\":1}\n{\"id\":\"x\"}\n",
        )
        .unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert!(
            e.contains("line 2") && e.contains("not a client span"),
            "{e}"
        );
    }
}
