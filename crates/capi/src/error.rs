//! Error reporting across the C ABI: a negative code per failure kind and a
//! thread-local message (`elfen_last_error`). Nothing crosses the ABI as a
//! panic: every entry point runs inside [`guard`].

use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// `ELFEN_EINVAL`: a bad argument (NULL, non-UTF-8 name, unknown nap backend).
pub const EINVAL: i32 = -1;
/// `ELFEN_EPAGE`: the page is missing, unreadable or fails validation.
pub const EPAGE: i32 = -2;
/// `ELFEN_ELANE`: lane out of range, or the wrong role for the call.
pub const ELANE: i32 = -3;
/// `ELFEN_ESTATE`: already attached, not attached, read-only handle.
pub const ESTATE: i32 = -4;
/// `ELFEN_EOS`: an OS call failed.
pub const EOS: i32 = -5;
/// `ELFEN_EINTERNAL`: a bug in elfen, caught at the ABI.
pub const EINTERNAL: i32 = -6;

/// A failure of a C entry point: its code and the message for
/// `elfen_last_error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// One of the negative `ELFEN_E*` codes.
    pub code: i32,
    /// What went wrong, naming the file and the mismatch.
    pub message: String,
}

impl Error {
    /// An error with `code` and `message`.
    pub fn new(code: i32, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// The code of a page error.
pub fn shm_code(e: &elfen_shm::ShmError) -> i32 {
    use elfen_shm::ShmError as S;
    match e {
        S::LaneOutOfRange { .. } => ELANE,
        S::ReadOnly { .. } => ESTATE,
        S::BadSpec(_) => EINVAL,
        S::Os { .. } => EOS,
        _ => EPAGE,
    }
}

impl From<elfen_shm::ShmError> for Error {
    fn from(e: elfen_shm::ShmError) -> Error {
        Error::new(shm_code(&e), e.to_string())
    }
}

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `message` as this thread's last error.
pub fn set_last_error(message: &str) {
    let c = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    let _ = LAST.try_with(|l| *l.borrow_mut() = c);
}

/// This thread's last error message ("" if none); what `elfen_last_error`
/// returns, as a Rust string.
pub fn last_error() -> String {
    LAST.try_with(|l| l.borrow().to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Runs an entry point: its error (or a caught panic) becomes the thread's
/// last error and `on_error(code)` the return value.
pub fn guard<T>(on_error: impl FnOnce(i32) -> T, f: impl FnOnce() -> Result<T, Error>) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_last_error(&e.message);
            on_error(e.code)
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            set_last_error(&format!(
                "internal error in libelfen (please report): {what}"
            ));
            on_error(EINTERNAL)
        }
    }
}

/// The message of the last failing elfen call on the calling thread ("" if
/// none failed). Valid until the thread's next failing call; never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn elfen_last_error() -> *const c_char {
    static EMPTY: &[u8] = b"\0";
    LAST.try_with(|l| l.borrow().as_ptr())
        .unwrap_or(EMPTY.as_ptr().cast())
}

/// The signal page ABI version this library speaks (`ELFEN_ABI_VERSION`).
#[unsafe(no_mangle)]
pub extern "C" fn elfen_abi_version() -> u32 {
    elfen_shm::ABI_VERSION
}
