//! Fake cgroup roots: temp dirs with the files the kernel would show, and a
//! create hook that populates new groups the way the kernel does.

// The fake roots are the crate's own (`elfen_cgroup::fake`, feature
// `fake`), compiled in here from its source.
#[path = "../../src/fake.rs"]
mod fake;
pub use fake::*;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// A file's content.
pub fn read(p: impl AsRef<Path>) -> String {
    let p = p.as_ref();
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Sets a file's mtime far in the past, so any write shows.
pub fn age(p: impl AsRef<Path>) {
    let f = std::fs::File::options().write(true).open(p).unwrap();
    f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000))
        .unwrap();
}

/// Whether a file still has the mtime [`age`] gave it.
pub fn untouched(p: impl AsRef<Path>) -> bool {
    std::fs::metadata(p).unwrap().modified().unwrap()
        == SystemTime::UNIX_EPOCH + Duration::from_secs(1_000)
}

/// Writes `content` to `file` after `delay`, from another thread (the
/// kernel finishing a freeze).
pub fn later(file: PathBuf, content: &'static str, delay: Duration) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        // Whole or not at all, as the kernel's files read: a plain write
        // truncates first, and a reader in between would see an empty file.
        let tmp = file.with_extension("later-tmp");
        std::fs::write(&tmp, content).unwrap();
        std::fs::rename(&tmp, file).unwrap();
    })
}
