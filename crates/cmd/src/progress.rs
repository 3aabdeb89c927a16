//! Progress on stderr for long runs, the same in every command.
//!
//! [`Progress::say`] prints one line, `[  12.3 s] message`, the time since
//! the command started. A run of counted steps (a sweep's invocations)
//! shows a live line, `[  3/45] label · ETA 1m02s`, rewritten in place on a
//! terminal; without a terminal (CI logs, pipes) it prints only the steps a
//! caller marks as worth a line, so logs stay short.

use std::io::Write;
use std::time::Instant;

/// A progress printer; disabled, it prints nothing.
#[derive(Debug)]
pub struct Progress {
    start: Instant,
    enabled: bool,
    tty: bool,
    total: usize,
    done: usize,
    counted_since: Instant,
    guess_step_s: f64,
}

impl Progress {
    /// A printer; `enabled = false` (`--quiet`) prints nothing.
    pub fn new(enabled: bool) -> Progress {
        // SAFETY: isatty has no preconditions.
        let tty = unsafe { libc::isatty(2) } == 1;
        Progress {
            start: Instant::now(),
            enabled,
            tty,
            total: 0,
            done: 0,
            counted_since: Instant::now(),
            guess_step_s: 1.0,
        }
    }

    /// Whether anything is printed.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Starts counting `total` steps, each guessed to take `guess_step_s`
    /// until the first one finishes (the ETA's clock restarts here).
    pub fn count(&mut self, total: usize, guess_step_s: f64) {
        self.total = total;
        self.done = 0;
        self.counted_since = Instant::now();
        self.guess_step_s = guess_step_s;
    }

    /// Marks one counted step done.
    pub fn step_done(&mut self) {
        self.done += 1;
    }

    /// Steps done and planned.
    pub fn steps(&self) -> (usize, usize) {
        (self.done, self.total)
    }

    /// Seconds left at the pace so far.
    pub fn eta_s(&self) -> f64 {
        let per = if self.done > 0 {
            self.counted_since.elapsed().as_secs_f64() / self.done as f64
        } else {
            self.guess_step_s
        };
        per * self.total.saturating_sub(self.done) as f64
    }

    /// The live line for the step now running; without a terminal it is
    /// printed only when `line_in_logs` (e.g. the first step of a round).
    pub fn show(&self, label: &str, line_in_logs: bool) {
        if !self.enabled {
            return;
        }
        let eta = self.eta_s().round() as u64;
        let line = format!(
            "[{:>3}/{}] {label} · ETA {}m{:02}s",
            (self.done + 1).min(self.total.max(1)),
            self.total,
            eta / 60,
            eta % 60
        );
        let mut e = std::io::stderr().lock();
        if self.tty {
            let _ = write!(e, "\r\x1b[2K{line}");
        } else if line_in_logs {
            let _ = writeln!(e, "{line}");
        }
        let _ = e.flush();
    }

    /// Prints one line (clearing a live line first).
    pub fn say(&self, msg: &str) {
        if !self.enabled {
            return;
        }
        let mut e = std::io::stderr().lock();
        if self.tty {
            let _ = write!(e, "\r\x1b[2K");
        }
        let _ = writeln!(e, "[{:7.1} s] {msg}", self.start.elapsed().as_secs_f64());
    }

    /// Clears the live line.
    pub fn finish(&self) {
        if self.enabled && self.tty {
            let _ = write!(std::io::stderr().lock(), "\r\x1b[2K");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eta_follows_the_pace() {
        let mut p = Progress::new(false);
        let t0 = Instant::now();
        p.count(10, 2.0);
        let t1 = Instant::now();
        assert_eq!(p.eta_s(), 20.0, "the guess before the first step");
        p.step_done();
        let t2 = Instant::now();
        let eta = p.eta_s();
        let t3 = Instant::now();
        // the one step took between t2 - t1 and t3 - t0: the other nine
        // at that pace, not at the guess (9 x 2 s)
        let (lo, hi) = ((t2 - t1).as_secs_f64(), (t3 - t0).as_secs_f64());
        assert!(
            9.0 * lo - 1e-9 <= eta && eta <= 9.0 * hi + 1e-9,
            "one step in {lo}..{hi} s: eta {eta} s"
        );
        assert!(
            eta < 9.0,
            "one quick step: the rest are quick too ({eta} s)"
        );
        assert_eq!(p.steps(), (1, 10));
        p.say("not printed");
        p.show("not printed", true);
    }
}
