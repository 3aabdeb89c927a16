//! Files a root process writes and trusts: replaced atomically through a
//! temporary file nobody can have prepared ([`write_atomic`]), in a
//! directory only root or this user can write ([`check_private_dir`]),
//! and owned by root or this user ([`check_owner`]).

use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// 64 random bits for a temporary name (`getrandom(2)`; the time and pid
/// if it fails — the name is created exclusively either way).
fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom fills at most `b.len()` bytes of `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n == b.len() as isize {
        return u64::from_ne_bytes(b);
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ (u64::from(std::process::id()) << 32)
}

/// Writes `content` to `path` atomically: a new temporary file with a
/// random name in the same directory, created exclusively without
/// following links (`O_CREAT|O_EXCL|O_NOFOLLOW`, permissions `mode`),
/// written, synced and renamed over `path`; then the directory is synced.
/// A crash leaves the old or the new content, never a torn file, and a
/// link or file someone placed in the directory is never written through
/// (a link at `path` itself is replaced, not followed).
pub fn write_atomic(path: &Path, content: &[u8], mode: u32) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} has no file name", path.display()),
        )
    })?;
    let mut attempt = 0;
    let (tmp, mut f) = loop {
        let tmp = dir.join(format!(
            ".{}.{:016x}.tmp",
            name.to_string_lossy(),
            random_u64()
        ));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .mode(mode)
            .open(&tmp)
        {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 8 => attempt += 1,
            Err(e) => return Err(e),
        }
    };
    let written = f.write_all(content).and_then(|()| f.sync_all());
    drop(f);
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// This process's effective uid.
fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Why directory `dir` is not one whose files only root or this user
/// could have written: not a directory, owned by another user, or
/// writable by its group or others. `Ok` when it is.
pub fn check_private_dir(dir: &Path) -> Result<(), String> {
    let m = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !m.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    if m.uid() != 0 && m.uid() != euid() {
        return Err(format!(
            "directory {} belongs to {}, not root or this user: another user could replace \
             the files in it",
            dir.display(),
            crate::proc::describe_user(m.uid())
        ));
    }
    if m.mode() & 0o022 != 0 {
        return Err(format!(
            "directory {} is writable by {} (mode {:o}): another user could replace the files \
             in it; use a directory only root can write (e.g. chmod go-w, or /run/elfen)",
            dir.display(),
            if m.mode() & 0o002 != 0 {
                "every user"
            } else {
                "its group"
            },
            m.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Why `path` is not a plain file of root or this user (a link, another
/// kind of file, another owner). `Ok(None)` when it does not exist,
/// `Ok(Some(()))` when it is fine.
pub fn check_owner(path: &Path) -> Result<Option<()>, String> {
    let m = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    if m.file_type().is_symlink() {
        return Err(format!(
            "{} is a symbolic link: it is not followed; remove it",
            path.display()
        ));
    }
    if !m.is_file() {
        return Err(format!("{} is not a plain file", path.display()));
    }
    if m.uid() != 0 && m.uid() != euid() {
        return Err(format!(
            "{} belongs to {}, not root or this user: it is not trusted; check what it holds \
             and remove it",
            path.display(),
            crate::proc::describe_user(m.uid())
        ));
    }
    Ok(Some(()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn writes_atomically_through_a_fresh_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("state.json");
        write_atomic(&p, b"one", 0o600).unwrap();
        write_atomic(&p, b"two", 0o600).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "two");
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["state.json"], "no temporary file is left");
    }

    #[test]
    fn never_writes_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        // a link at the final name is replaced, its target untouched
        let p = dir.path().join("state.json");
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        write_atomic(&p, b"new", 0o600).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert!(
            !std::fs::symlink_metadata(&p)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        // the old predictable temporary name, prepared as a link, is not used
        let old_tmp = dir
            .path()
            .join(format!(".state.json.tmp.{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &old_tmp).unwrap();
        write_atomic(&p, b"newer", 0o600).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "newer");
    }

    #[test]
    fn a_shared_directory_is_refused_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        check_private_dir(dir.path()).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        let e = check_private_dir(dir.path()).unwrap_err();
        assert!(
            e.contains("writable by every user") && e.contains("1777"),
            "{e}"
        );
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o770)).unwrap();
        let e = check_private_dir(dir.path()).unwrap_err();
        assert!(e.contains("writable by its group"), "{e}");
        let f = dir.path().join("f");
        std::fs::write(&f, "").unwrap();
        assert!(
            check_private_dir(&f)
                .unwrap_err()
                .contains("not a directory")
        );
    }

    #[test]
    fn owners_and_links_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s");
        assert_eq!(check_owner(&p), Ok(None));
        std::fs::write(&p, "x").unwrap();
        assert_eq!(check_owner(&p), Ok(Some(())));
        let l = dir.path().join("l");
        std::os::unix::fs::symlink(&p, &l).unwrap();
        assert!(check_owner(&l).unwrap_err().contains("symbolic link"));
        if euid() == 0 {
            // another user's file (nobody's)
            std::os::unix::fs::chown(&p, Some(65534), None).unwrap();
            let e = check_owner(&p).unwrap_err();
            assert!(e.contains("uid 65534") && e.contains("not trusted"), "{e}");
            std::os::unix::fs::chown(dir.path(), Some(65534), None).unwrap();
            let e = check_private_dir(dir.path()).unwrap_err();
            assert!(e.contains("uid 65534"), "{e}");
        } else {
            crate::skip::skip(crate::skip::Need::Root, "files of another user not tried");
        }
    }
}
