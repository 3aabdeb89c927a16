//! Every bad page file or batch segment is a clear error.

use crate::common::{tmp, two_lanes};
use elfen_shm::*;
use std::path::{Path, PathBuf};

/// A page file `name` in `dir` with `page`'s bytes, naming a new batch
/// segment holding `batch` (kept attached by the returned handle), or
/// naming the id of a segment that no longer exists when `batch` is None.
fn write_pair(dir: &Path, name: &str, page: &[u8], batch: Option<&[u8]>) -> (PathBuf, Segment) {
    let p = dir.join(name);
    let seg = match batch {
        Some(b) => {
            let s = Segment::create(b.len(), 0o644, None).unwrap();
            s.write_bytes(0, b);
            s
        }
        None => Segment::create(64, 0o644, None).unwrap(),
    };
    let mut bytes = page.to_vec();
    let id = if batch.is_some() {
        seg.id()
    } else {
        let gone = Segment::create(64, 0o644, None).unwrap();
        gone.id()
    };
    if bytes.len() >= 56 {
        bytes[52..56].copy_from_slice(&(id as u32).to_le_bytes());
    }
    let _ = std::fs::remove_file(&p);
    std::fs::write(&p, &bytes).unwrap();
    (p, seg)
}

/// The bytes of a fresh two-lane page and its batch segment.
fn good_bytes() -> (Vec<u8>, Vec<u8>) {
    let d = tmp();
    let p = d.path().join("good");
    let page = Page::create(&p, &two_lanes()).unwrap();
    let seg = Segment::attach(page.batch_shmid(), false).unwrap();
    (std::fs::read(&p).unwrap(), seg.read_bytes())
}

fn attach_err(p: &Path) -> String {
    Page::attach(p, Access::Batch).unwrap_err().to_string()
}

#[test]
fn bad_pages_are_clear_errors() {
    let d = tmp();
    let (page, batch) = good_bytes();
    // missing
    let e = attach_err(&d.path().join("absent"));
    assert!(e.contains("absent") && e.contains("does not exist"), "{e}");
    // short
    let (p, _s) = write_pair(d.path(), "short", &page[..12], Some(&batch));
    let e = attach_err(&p);
    assert!(e.contains("12 bytes") && e.contains("shorter"), "{e}");
    // wrong magic
    let mut m = page.clone();
    m[..8].copy_from_slice(b"NOTELFEN");
    let (p, _s) = write_pair(d.path(), "magic", &m, Some(&batch));
    let e = attach_err(&p);
    assert!(e.contains("NOTELFEN") && e.contains("ELFENSIG"), "{e}");
    // wrong version: an ABI-1 page (with its batch file beside it) is refused
    // for its version, before anything looks for a batch region
    let mut v = page.clone();
    v[8..12].copy_from_slice(&1u32.to_le_bytes());
    let (p, _s) = write_pair(d.path(), "v1", &v, Some(&batch));
    let e = attach_err(&p);
    assert!(
        e.contains("ABI version 1") && e.contains("speaks version 2"),
        "{e}"
    );
    // size field disagrees with the file
    let mut t = page.clone();
    t.extend_from_slice(&[0; 64]);
    let (p, _s) = write_pair(d.path(), "long", &t, Some(&batch));
    let e = attach_err(&p);
    assert!(e.contains("total_size") && e.contains("448"), "{e}");
    // lane count disagrees with size
    let mut l = page.clone();
    l[24..28].copy_from_slice(&3u32.to_le_bytes());
    let (p, _s) = write_pair(d.path(), "lanes", &l, Some(&batch));
    let e = attach_err(&p);
    assert!(e.contains("lane_count"), "{e}");
    // expected lane count
    let (p, _good) = write_pair(d.path(), "bad", &page, Some(&batch));
    let e = Page::attach_expect(&p, Access::Batch, 4)
        .unwrap_err()
        .to_string();
    assert!(e.contains("lane_count is 2, expected 4"), "{e}");
    // batch segment gone / of another page / wrong magic / wrong size
    let (p, _s) = write_pair(d.path(), "gone", &page, None);
    let e = attach_err(&p);
    assert!(
        e.contains("gone") && e.contains("batch segment") && e.contains("pid "),
        "{e}"
    );
    let (_, other_batch) = good_bytes();
    let (p, _s) = write_pair(d.path(), "other", &page, Some(&other_batch));
    let e = attach_err(&p);
    assert!(e.contains("instance") && e.contains("another page"), "{e}");
    let mut bm = batch.clone();
    bm[0] = b'X';
    let (p, _s) = write_pair(d.path(), "bmagic", &page, Some(&bm));
    let e = attach_err(&p);
    assert!(
        e.contains("batch segment") && e.contains("ELFENBAT") && e.contains("shm id"),
        "{e}"
    );
    let (p, _s) = write_pair(d.path(), "bshort", &page, Some(&batch[..128]));
    let e = attach_err(&p);
    assert!(
        e.contains("batch segment") && e.contains("total_size"),
        "{e}"
    );
    // lane out of range
    let (p, _s) = write_pair(d.path(), "ok", &page, Some(&batch));
    let page = Page::attach(&p, Access::Observer).unwrap();
    let e = page.lc(2).unwrap_err().to_string();
    assert!(
        e.contains("lane 2 is out of range") && e.contains("2 lanes"),
        "{e}"
    );
    assert!(page.batch(9).is_err() && page.controller(u32::MAX).is_err());
}
