//! Errors of the kernels crate.

/// What can go wrong building or naming a kernel.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KernelError {
    /// A kernel name that is none of the kinds.
    #[error("unknown batch kernel {given:?}: expected one of {expected}")]
    UnknownKind {
        /// The name given.
        given: String,
        /// The valid names, comma-separated.
        expected: &'static str,
    },
    /// A stream mode name that is none of the modes.
    #[error("unknown stream mode {given:?}: expected one of {expected}")]
    UnknownStreamMode {
        /// The name given.
        given: String,
        /// The valid names, comma-separated.
        expected: &'static str,
    },
    /// A configuration the kernels cannot run with.
    #[error("bad kernel configuration: {0}")]
    BadConfig(String),
    /// The allocator refused a buffer.
    #[error("cannot allocate a {bytes}-byte kernel buffer")]
    Alloc {
        /// The size asked for.
        bytes: usize,
    },
}
