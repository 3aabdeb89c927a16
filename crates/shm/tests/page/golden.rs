//! The golden vectors in `testdata/signal/`: this build's bytes match
//! them, and the API reads them back.

use crate::common::{tmp, two_lanes};
use elfen_shm::layout::{self, page_size};
use elfen_shm::*;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/signal")
}

/// `header.batch_shmid` in the golden vectors: the kernel picks a real
/// page's id, so tests set the bytes they compare to this value (and
/// point a copy of the golden page at a live segment before attaching it).
const GOLDEN_SHMID: u32 = 123_456_789;
/// Offset of `header.batch_shmid`.
const SHMID_OFFSET: usize = std::mem::offset_of!(Header, batch_shmid);

/// The page file's and batch segment's bytes, the segment id set to
/// [`GOLDEN_SHMID`].
fn golden_bytes(page: &Page) -> (Vec<u8>, Vec<u8>) {
    let mut p = std::fs::read(page.path()).unwrap();
    p[SHMID_OFFSET..SHMID_OFFSET + 4].copy_from_slice(&GOLDEN_SHMID.to_le_bytes());
    let b = Segment::attach(page.batch_shmid(), false)
        .unwrap()
        .read_bytes();
    (p, b)
}

/// A copy of the golden page at `dir/name`, naming a new segment holding
/// the golden batch bytes (alive while the returned handle is).
fn golden_copy(dir: &Path, name: &str) -> (PathBuf, Segment) {
    let td = testdata();
    let mut page = std::fs::read(td.join("v2-2lanes.page.bin")).unwrap();
    let batch = std::fs::read(td.join("v2-2lanes.batch.bin")).unwrap();
    let seg = Segment::create(batch.len(), 0o644, None).unwrap();
    seg.write_bytes(0, &batch);
    page[SHMID_OFFSET..SHMID_OFFSET + 4].copy_from_slice(&(seg.id() as u32).to_le_bytes());
    let p = dir.join(name);
    std::fs::write(&p, &page).unwrap();
    (p, seg)
}

/// The golden page: two lanes (cpu 0 request, cpu 1 batch) with every field
/// set to a recognisable value.
fn golden_page(dir: &Path) -> Page {
    let mut spec = two_lanes();
    spec.identity = Some(Identity {
        clock: Clock::MONOTONIC,
        instance: 0x0123_4567_89AB_CDEF,
        creator_pid: 4242,
        created_unix_s: 1_790_000_000,
    });
    spec.lanes[0].policy = 2;
    spec.lanes[0].budget_ns = 2_000_000;
    spec.lanes[1].policy = 2;
    spec.lanes[1].budget_ns = 1_000_000;
    spec.lanes[1].nap = nap::HYBRID;
    spec.lanes[1].ref_ipc_milli = 1500;
    let page = Page::create(dir.join("golden"), &spec).unwrap();
    // one seqlocked rewrite of lane 0 (config_seq 0 -> 2)
    let mut l0 = spec.lanes[0].clone();
    l0.policy = 3;
    page.write_controller(0, &l0).unwrap();
    // the kill switch in mode "paused" over "unmanaged" (bits 0 and 1), the
    // heartbeat fail-safe on at 50 ms, then a fixed heartbeat
    page.set_control(KillMode::Unmanaged).unwrap();
    page.set_kill(true).unwrap();
    page.set_heartbeat_stale(50_000_000).unwrap();
    let h = page.header();
    h.heartbeat.store(5_400_000_000, Relaxed);
    let lc = page.lc(0).unwrap();
    lc.state.store(state::pack(true, 5, 3), Relaxed);
    lc.request_id.store(0xDEAD_BEEF_0000_0042, Relaxed);
    lc.busy_since.store(5_399_000_000, Relaxed);
    lc.busy_ticks.store(123_456_789, Relaxed);
    lc.requests.store(4, Relaxed);
    lc.lc_tid.store(4243, Relaxed);
    let b = page.batch(1).unwrap();
    b.attached.store(1, Relaxed);
    b.napping.store(1, Relaxed);
    b.sleepers.store(1, Relaxed);
    b.naps.store(17, Relaxed);
    b.wakes.store(16, Relaxed);
    b.run_ticks.store(1_000_000, Relaxed);
    b.corun_ticks.store(250_000, Relaxed);
    b.last_change.store(5_399_000_100, Relaxed);
    b.slow_checks.store(40, Relaxed);
    page
}

/// (file, name, offset, size): every named field of a 2-lane page.
fn field_table() -> Vec<(&'static str, String, usize, usize)> {
    use std::mem::offset_of;
    let mut t = Vec::new();
    macro_rules! f {
        ($file:expr, $base:expr, $prefix:expr, $ty:ty, $($field:ident: $size:expr),*) => {
            $(t.push(($file, format!("{}.{}", $prefix, stringify!($field)), $base + offset_of!($ty, $field), $size));)*
        };
    }
    f!("page", 0, "header", Header, magic: 8, abi_version: 4, line_size: 4, total_size: 8,
       lane_count: 4, clock: 4, ticks_per_sec: 8, instance: 8, creator_pid: 4, batch_shmid: 4,
       created_unix_s: 8, heartbeat: 8, control: 8, heartbeat_stale_ns: 8);
    f!("batch", 0, "batch_header", BatchHeader, magic: 8, abi_version: 4, line_size: 4,
       total_size: 8, lane_count: 4, instance: 8);
    for lane in 0..2usize {
        let lc = layout::HEADER_SIZE + lane * layout::LANE_STRIDE;
        f!("page", lc, format!("lane{lane}.lc"), LcLine, state: 8, request_id: 8, busy_since: 8,
           busy_ticks: 8, requests: 8, lc_tid: 4);
        let c = lc + layout::LINE_SIZE;
        f!("page", c, format!("lane{lane}.controller"), ControllerLine, role: 4, cpu: 4,
           policy: 4, nap: 4, budget_ns: 8, ref_ipc_milli: 4, partner_count: 4);
        for i in 0..MAX_PARTNERS {
            t.push((
                "page",
                format!("lane{lane}.controller.partners[{i}]"),
                c + 32 + 4 * i,
                4,
            ));
        }
        f!("page", c, format!("lane{lane}.controller"), ControllerLine, hybrid_spin_ns: 4,
           config_seq: 4);
        let b = layout::BATCH_HEADER_SIZE + lane * layout::BATCH_STRIDE;
        f!("batch", b, format!("lane{lane}.batch"), BatchLine, attached: 4, sleepers: 4,
           napping: 4, naps: 8, wakes: 8, run_ticks: 8, corun_ticks: 8, last_change: 8,
           slow_checks: 8);
    }
    t
}

fn read_le(bytes: &[u8], off: usize, size: usize) -> u64 {
    let mut b = [0u8; 8];
    b[..size].copy_from_slice(&bytes[off..off + size]);
    u64::from_le_bytes(b)
}

#[test]
fn golden_vectors_match_this_build() {
    let d = tmp();
    let page = golden_page(d.path());
    let (got_page, got_batch) = golden_bytes(&page);
    assert_eq!(got_page.len(), page_size(2));
    let dir = testdata();
    let fields: Vec<serde_json::Value> = field_table()
        .into_iter()
        .map(|(file, name, offset, size)| {
            let bytes = if file == "page" {
                &got_page
            } else {
                &got_batch
            };
            serde_json::json!({
                "file": file, "name": name, "offset": offset, "size": size,
                "value": read_le(bytes, offset, size).to_string(),
            })
        })
        .collect();
    let json = serde_json::json!({
        "description": "elfen signal page ABI v2, 2 lanes (lane 0 = cpu 0 request lane, lane 1 = cpu 1 batch lane). \
                        \"page\" is the page file, \"batch\" the batch segment's bytes (a System V shared-memory segment \
                        whose id is header.batch_shmid; the kernel picks it, so the vectors hold 123456789 there and tests set \
                        a real page's bytes to that value before comparing, and point a copy at a live segment before attaching). \
                        Every named field; all other bytes are zero. Values are little-endian unsigned integers, \
                        written as decimal strings. Regenerate: ELFEN_BLESS=1 cargo test -p elfen-shm --test page",
        "abi_version": ABI_VERSION,
        "page_file": "v2-2lanes.page.bin",
        "batch_file": "v2-2lanes.batch.bin",
        "golden_batch_shmid": GOLDEN_SHMID,
        "page_size": got_page.len(),
        "batch_size": got_batch.len(),
        "fields": fields,
    });
    if std::env::var_os("ELFEN_BLESS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("v2-2lanes.page.bin"), &got_page).unwrap();
        std::fs::write(dir.join("v2-2lanes.batch.bin"), &got_batch).unwrap();
        std::fs::write(
            dir.join("v2-2lanes.json"),
            serde_json::to_string_pretty(&json).unwrap() + "\n",
        )
        .unwrap();
    }
    let want_page = std::fs::read(dir.join("v2-2lanes.page.bin"))
        .expect("golden page (bless with ELFEN_BLESS=1)");
    let want_batch = std::fs::read(dir.join("v2-2lanes.batch.bin")).unwrap();
    assert!(
        got_page == want_page,
        "page bytes differ from testdata/signal/v2-2lanes.page.bin"
    );
    assert!(
        got_batch == want_batch,
        "batch bytes differ from testdata/signal/v2-2lanes.batch.bin"
    );
    let want_json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("v2-2lanes.json")).unwrap())
            .unwrap();
    assert_eq!(
        json, want_json,
        "v2-2lanes.json differs from this build's field table"
    );
}

#[test]
fn golden_vectors_read_through_the_api() {
    // Attach to a copy of the golden page (its batch bytes in a new
    // segment) and read every field the JSON lists.
    let dir = testdata();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("v2-2lanes.json")).unwrap())
            .unwrap();
    let d = tmp();
    let (p, _seg) = golden_copy(d.path(), "copy");
    let page = Page::attach_expect(&p, Access::Observer, 2).unwrap();
    assert!(page.killed() && page.unmanaged());
    assert_eq!(page.kill_mode(), KillMode::Paused);
    assert_eq!(
        page.header().control.load(Relaxed),
        control::KILL | control::UNMANAGED
    );
    assert_eq!(page.heartbeat_stale_ns(), 50_000_000);
    assert_eq!(page.header().heartbeat.load(Relaxed), 5_400_000_000);
    // KILL wins over a stale heartbeat and over UNMANAGED
    assert_eq!(page.batch_mode(), BatchMode::Killed);
    let c0 = page.read_controller(0).unwrap();
    assert_eq!((c0.policy, c0.seq, c0.partners()), (3, 2, &[1][..]));
    let s = page.lc(0).unwrap().state.load(Relaxed);
    assert_eq!(
        (state::busy(s), state::seq(s), state::queue_len(s)),
        (true, 5, 3)
    );
    let bytes = golden_bytes(&page);
    let mut covered = (vec![false; bytes.0.len()], vec![false; bytes.1.len()]);
    for f in json["fields"].as_array().unwrap() {
        let (off, size) = (
            f["offset"].as_u64().unwrap() as usize,
            f["size"].as_u64().unwrap() as usize,
        );
        let want: u64 = f["value"].as_str().unwrap().parse().unwrap();
        let (b, cov) = if f["file"] == "page" {
            (&bytes.0, &mut covered.0)
        } else {
            (&bytes.1, &mut covered.1)
        };
        assert_eq!(read_le(b, off, size), want, "{}", f["name"]);
        cov[off..off + size].iter_mut().for_each(|c| *c = true);
    }
    // everything not named is reserved and zero
    for (b, cov) in [(&bytes.0, &covered.0), (&bytes.1, &covered.1)] {
        for (i, (&byte, &c)) in b.iter().zip(cov.iter()).enumerate() {
            assert!(c || byte == 0, "reserved byte {i} is {byte}");
        }
    }
}
