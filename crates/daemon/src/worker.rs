//! [`Worker`]: one thread of the daemon (the LC signal writer, a guard,
//! a freezer, a blind-isolation controller) with its stop flag and, where
//! it sleeps on one, the [`Bell`] that wakes it. One way to start such a
//! thread (its set-up runs on the new thread, and its error comes back to
//! the caller before anything runs), to stop it and to collect its report;
//! dropping a worker stops it too.

use crate::bell::Bell;
use crate::error::DaemonError;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::channel;
use std::thread::JoinHandle;

/// A running daemon thread whose run returns `R`.
#[derive(Debug)]
pub struct Worker<R> {
    stop: Arc<AtomicBool>,
    bell: Option<Arc<Bell>>,
    thread: Option<JoinHandle<R>>,
}

impl<R: Send + 'static> Worker<R> {
    /// Starts thread `name`. On the new thread `setup` runs first: its
    /// error is returned here (the thread has ended); on success it gives
    /// the state `run` works on and `info` returned here with the worker.
    /// `run` then runs until the stop flag it is given is set; `bell`, if
    /// any, is rung on stop so that a thread sleeping on it sees the flag.
    pub fn start<S, I: Send + 'static>(
        name: &str,
        bell: Option<Arc<Bell>>,
        setup: impl FnOnce() -> Result<(S, I), DaemonError> + Send + 'static,
        run: impl FnOnce(S, &AtomicBool) -> R + Send + 'static,
        failed: impl FnOnce() -> R + Send + 'static,
    ) -> Result<(Worker<R>, I), DaemonError> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let (tx, rx) = channel::<Result<I, DaemonError>>();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || match setup() {
                Ok((state, info)) => {
                    let _ = tx.send(Ok(info));
                    run(state, &flag)
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    failed()
                }
            })
            .map_err(|e| DaemonError::os(format!("starting thread {name}"), e))?;
        match rx.recv() {
            Ok(Ok(info)) => Ok((
                Worker {
                    stop,
                    bell,
                    thread: Some(thread),
                },
                info,
            )),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(DaemonError::thread(name, "ended before it started"))
            }
        }
    }
}

impl<R> Worker<R> {
    /// Whether the thread still runs.
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stops the thread and returns what its run returned (`None` if it
    /// panicked).
    pub fn stop(mut self) -> Option<R> {
        self.signal();
        self.thread.take().and_then(|t| t.join().ok())
    }

    fn signal(&self) {
        self.stop.store(true, Relaxed);
        if let Some(b) = &self.bell {
            b.ring();
        }
    }
}

impl<R> Drop for Worker<R> {
    fn drop(&mut self) {
        self.signal();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setup_errors_come_back_and_stop_returns_the_report() {
        let e = Worker::<u32>::start(
            "elfen-test",
            None,
            || Err::<((), ()), _>(DaemonError::thread("t", "refused")),
            |(), _| 1,
            || 0,
        )
        .unwrap_err();
        assert!(e.to_string().contains("refused"), "{e}");
        let bell = Arc::new(Bell::new().unwrap());
        let b2 = Arc::clone(&bell);
        let (w, info) = Worker::start(
            "elfen-test",
            Some(bell),
            || Ok((5u32, "ready")),
            move |n, stop| {
                // sleeps at least once: only the bell rung on stop ends
                // that sleep before 10 s
                let mut woken = 0;
                loop {
                    b2.wait(std::time::Duration::from_secs(10));
                    woken += 1;
                    if stop.load(Relaxed) {
                        break n + woken;
                    }
                }
            },
            || 0,
        )
        .unwrap();
        assert_eq!(info, "ready");
        assert!(w.is_running());
        // stop rings the bell: the thread does not sleep out its 10 s
        let t0 = std::time::Instant::now();
        assert!(w.stop().unwrap() >= 6);
        assert!(t0.elapsed() < std::time::Duration::from_secs(5));
    }
}
