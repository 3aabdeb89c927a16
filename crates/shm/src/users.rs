//! User and group names for messages and configuration (`getpwuid_r`,
//! `getgrgid_r`, `getgrnam_r`): who owns a page, which group may write its
//! batch lines.

use std::ffi::{CStr, CString};

/// Calls a `get*_r` function with a growing buffer; `None` when there is no
/// such entry or the lookup fails.
fn lookup<T>(mut call: impl FnMut(&mut [u8], &mut *mut T) -> i32) -> Option<(Vec<u8>, *mut T)> {
    let mut buf = vec![0u8; 1024];
    loop {
        let mut found: *mut T = std::ptr::null_mut();
        let r = call(&mut buf, &mut found);
        if r == libc::ERANGE && buf.len() < (1 << 20) {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        return (r == 0 && !found.is_null()).then_some((buf, found));
    }
}

/// The name of user `uid`, if the user database has one.
pub fn user_name(uid: u32) -> Option<String> {
    // SAFETY: passwd is plain data, filled by getpwuid_r into `buf`.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let (_buf, found) = lookup(|buf, found| {
        // SAFETY: buffers of the lengths given.
        unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), found) }
    })?;
    // SAFETY: `found` points at `pw`, whose strings live in `_buf`.
    let name = unsafe { CStr::from_ptr((*found).pw_name) };
    Some(name.to_string_lossy().into_owned())
}

/// The uid of user `name`: a name in the user database, or a number.
pub fn user_id(name: &str) -> Option<u32> {
    if let Ok(uid) = name.parse::<u32>() {
        return Some(uid);
    }
    let c = CString::new(name).ok()?;
    // SAFETY: passwd is plain data, filled by getpwnam_r into `buf`.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let (_buf, found) = lookup(|buf, found| {
        // SAFETY: buffers of the lengths given, a NUL-terminated name.
        unsafe {
            libc::getpwnam_r(
                c.as_ptr(),
                &mut pw,
                buf.as_mut_ptr().cast(),
                buf.len(),
                found,
            )
        }
    })?;
    // SAFETY: `found` points at `pw`.
    Some(unsafe { (*found).pw_uid })
}

/// The name of group `gid`, if the group database has one.
pub fn group_name(gid: u32) -> Option<String> {
    // SAFETY: group is plain data, filled by getgrgid_r into `buf`.
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let (_buf, found) = lookup(|buf, found| {
        // SAFETY: buffers of the lengths given.
        unsafe { libc::getgrgid_r(gid, &mut gr, buf.as_mut_ptr().cast(), buf.len(), found) }
    })?;
    // SAFETY: `found` points at `gr`, whose strings live in `_buf`.
    let name = unsafe { CStr::from_ptr((*found).gr_name) };
    Some(name.to_string_lossy().into_owned())
}

/// The gid of the group named `name`, if the group database has it.
pub fn group_id(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    // SAFETY: as in `group_name`.
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let (_buf, found) = lookup(|buf, found| {
        // SAFETY: buffers of the lengths given, a NUL-terminated name.
        unsafe {
            libc::getgrnam_r(
                c.as_ptr(),
                &mut gr,
                buf.as_mut_ptr().cast(),
                buf.len(),
                found,
            )
        }
    })?;
    // SAFETY: `found` points at `gr`.
    Some(unsafe { (*found).gr_gid })
}

/// "user nobody (uid 65534)", or "uid 4242" without a name.
pub fn describe_user(uid: u32) -> String {
    match user_name(uid) {
        Some(n) => format!("user {n} (uid {uid})"),
        None => format!("uid {uid}"),
    }
}

/// "group batch (gid 1001)", or "gid 1001" without a name.
pub fn describe_group(gid: u32) -> String {
    match group_name(gid) {
        Some(n) => format!("group {n} (gid {gid})"),
        None => format!("gid {gid}"),
    }
}

/// This process's effective uid.
pub fn euid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_known_by_name_and_id() {
        assert_eq!(user_name(0).as_deref(), Some("root"));
        assert_eq!(group_name(0).as_deref(), Some("root"));
        assert_eq!(group_id("root"), Some(0));
        assert_eq!(group_id("no-such-group-elfen"), None);
        assert_eq!(group_id("nul\0inside"), None);
        assert_eq!(describe_user(0), "user root (uid 0)");
        assert!(describe_group(4_000_000_000).starts_with("gid "));
    }
}
