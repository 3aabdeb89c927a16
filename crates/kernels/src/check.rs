//! The check a Rust kernel makes at the start of every work unit.

/// Something a batch kernel calls at the start of every work unit — the
/// Rust counterpart of the prologue check the paper inserts with `-pg` (and
/// of the `-finstrument-functions` hook the C kernels call).
///
/// Implementations must be cheap on their fast path: the kernels call
/// [`Check::check`] once per unit, and for the Loop kernel a unit is one
/// empty function call. The runtime's batch thread implements it (one load and
/// one compare; the slow path runs the policy and naps).
pub trait Check {
    /// Called once at the start of every work unit.
    fn check(&mut self);
}

/// No check at all: the baseline the instrumentation overhead is measured
/// against.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoCheck;

impl Check for NoCheck {
    #[inline(always)]
    fn check(&mut self) {}
}

/// Counts its calls (tests, and a sanity figure for benchmarks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CountCheck {
    /// Checks made so far.
    pub checks: u64,
}

impl Check for CountCheck {
    #[inline(always)]
    fn check(&mut self) {
        self.checks += 1;
    }
}

impl<C: Check + ?Sized> Check for &mut C {
    #[inline(always)]
    fn check(&mut self) {
        (**self).check()
    }
}

/// Any `FnMut()` is a check (handy for tests and ad-hoc probes).
#[derive(Debug, Clone, Copy)]
pub struct FnCheck<F: FnMut()>(pub F);

impl<F: FnMut()> Check for FnCheck<F> {
    #[inline(always)]
    fn check(&mut self) {
        (self.0)()
    }
}

/// The runtime's batch thread: its fast path (one relaxed load of the
/// request lane's `state`, one compare), and on a change the slow path (the
/// policy; a nap while it says so).
impl Check for elfen_runtime::BatchThread {
    #[inline(always)]
    fn check(&mut self) {
        elfen_runtime::BatchThread::check(self)
    }
}
