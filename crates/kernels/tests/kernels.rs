//! Each kernel does its work and counts its units; bad names are clear
//! errors. (The C implementation over [`Kernel::c_state`] is tested where it
//! lives, in `crates/micro`.)

use elfen_kernels::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

fn small_stream() -> KernelConfig {
    KernelConfig {
        stream_bytes: 1 << 20,
        ..KernelConfig::default()
    }
}

fn known_inputs() -> (Matrix5, Matrix5) {
    let mut a = [[0.0; MATRIX_N]; MATRIX_N];
    let mut b = [[0.0; MATRIX_N]; MATRIX_N];
    for i in 0..MATRIX_N {
        for j in 0..MATRIX_N {
            a[i][j] = (i * MATRIX_N + j) as f64; // 0..24
            b[i][j] = if i == j { 2.0 } else { 0.0 } + (j as f64); // 2I + column index
        }
    }
    (a, b)
}

#[test]
fn names_parse_and_bad_names_are_clear_errors() {
    for k in KernelKind::ALL {
        assert_eq!(k.name().parse::<KernelKind>().unwrap(), k);
        assert_eq!(k.to_string(), k.name());
        let json = serde_json::to_string(&k).unwrap();
        assert_eq!(json, format!("\"{}\"", k.name()));
        assert_eq!(serde_json::from_str::<KernelKind>(&json).unwrap(), k);
    }
    assert_eq!(
        " Matrix ".parse::<KernelKind>().unwrap(),
        KernelKind::Matrix
    );
    let e = "matrx".parse::<KernelKind>().unwrap_err().to_string();
    assert_eq!(
        e,
        "unknown batch kernel \"matrx\": expected one of loop, matrix, flush, stream"
    );
    let e = "".parse::<KernelKind>().unwrap_err().to_string();
    assert!(
        e.contains("expected one of loop, matrix, flush, stream"),
        "{e}"
    );
    let e = "temporal".parse::<StreamMode>().unwrap_err().to_string();
    assert!(e.contains("expected one of plain, non_temporal"), "{e}");
    assert_eq!("nt".parse::<StreamMode>().unwrap(), StreamMode::NonTemporal);
    let e = serde_json::from_str::<KernelKind>("\"stram\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("stream"), "{e}");
}

#[test]
fn bad_config_is_a_clear_error() {
    let cfg = KernelConfig {
        stream_bytes: 5000,
        ..KernelConfig::default()
    };
    let e = Kernel::with_config(KernelKind::Stream, cfg)
        .unwrap_err()
        .to_string();
    assert!(e.contains("multiple of 4096"), "{e}");
}

#[test]
fn loop_counts_units_and_checks_once_per_unit() {
    let mut k = Kernel::new(KernelKind::Loop);
    let mut c = CountCheck::default();
    k.run_units(1000, &mut c);
    k.run_unit(&mut c);
    assert_eq!(k.units(), 1001);
    assert_eq!(c.checks, 1001);
}

#[test]
fn matrix_multiplies_a_known_input() {
    let (a, b) = known_inputs();
    let want = matrix_multiply(&a, &b);
    // Row 1 of a is 5..9; column j of b is 2·e_j + j·1, so
    // c[1][j] = 2·a[1][j] + j·(5+6+7+8+9) = 2(5+j) + 35j.
    for (j, &got) in want[1].iter().enumerate() {
        assert_eq!(got, 2.0 * (5 + j) as f64 + 35.0 * j as f64);
    }
    let mut k = Kernel::new(KernelKind::Matrix);
    assert_eq!(k.matrix_product(), [[0.0; MATRIX_N]; MATRIX_N]);
    k.set_matrix_inputs(&a, &b);
    k.run_units(3, &mut NoCheck);
    assert_eq!(k.matrix_product(), want);
}

#[test]
fn flush_zeroes_its_32_kb() {
    let mut k = Kernel::new(KernelKind::Flush);
    assert_eq!(k.flush_buffer().len(), FLUSH_BYTES);
    k.flush_buffer_mut().fill(0xAB);
    k.run_unit(&mut NoCheck);
    assert!(k.flush_buffer().iter().all(|&b| b == 0));
    // Kinds that do not flush own no flush buffer.
    assert!(Kernel::new(KernelKind::Loop).flush_buffer().is_empty());
}

fn check_stream_passes(buf: &[u8], passes: u64, what: &str) {
    // Pass p (0-based) writes p + 1, so after `passes` passes every byte
    // holds `passes` (mod 256).
    let want = passes as u8;
    assert!(
        buf.iter().all(|&b| b == want),
        "{what}: after {passes} passes some byte is not {want}"
    );
}

#[test]
fn stream_writes_the_whole_buffer_in_both_modes() {
    for mode in StreamMode::ALL {
        let cfg = KernelConfig {
            stream_mode: mode,
            ..small_stream()
        };
        let units_per_pass = (cfg.stream_bytes / STREAM_CHUNK_BYTES) as u64;
        let mut k = Kernel::with_config(KernelKind::Stream, cfg).unwrap();
        assert_eq!(k.stream_buffer().len(), cfg.stream_bytes);
        k.run_units(units_per_pass - 1, &mut NoCheck);
        assert_eq!(k.stream_passes(), 0);
        assert_eq!(
            k.stream_buffer()[cfg.stream_bytes - 1],
            0,
            "last chunk not yet written"
        );
        k.run_units(1, &mut NoCheck);
        assert_eq!(k.stream_passes(), 1);
        check_stream_passes(k.stream_buffer(), 1, &format!("rust {mode}"));
        k.run_units(units_per_pass, &mut NoCheck);
        check_stream_passes(k.stream_buffer(), 2, &format!("rust {mode}"));
    }
}

#[test]
fn the_default_stream_is_64_mb() {
    let k = Kernel::new(KernelKind::Stream);
    assert_eq!(k.stream_buffer().len(), 64 << 20);
    assert_eq!(STREAM_BYTES / STREAM_CHUNK_BYTES, 16384);
}

#[test]
fn run_until_publishes_progress_and_stops() {
    for kind in KernelKind::ALL {
        let stop = Arc::new(AtomicBool::new(false));
        let units = Arc::new(AtomicU64::new(0));
        let (s2, u2) = (stop.clone(), units.clone());
        let h = std::thread::spawn(move || {
            let mut k = Kernel::with_config(kind, small_stream()).unwrap();
            let mut c = CountCheck::default();
            let n = k.run_until(&mut c, &s2, &u2, 64);
            (n, k.units(), c.checks)
        });
        while units.load(Ordering::Relaxed) < 256 {
            std::thread::yield_now();
        }
        stop.store(true, Ordering::Relaxed);
        let (n, total, checks) = h.join().unwrap();
        assert!(n >= 256 && n % 64 == 0, "{kind}: {n}");
        assert_eq!(total, n);
        assert_eq!(checks, n);
        assert_eq!(units.load(Ordering::Relaxed), n);
    }
}

#[test]
fn the_c_state_is_the_documented_layout() {
    // 3 × 25 f64, two pointers, three u64, two u32.
    assert_eq!(C_STATE_BYTES, 3 * 25 * 8 + 2 * 8 + 3 * 8 + 2 * 4);
    let mut k = Kernel::new(KernelKind::Flush);
    let p = k.c_state() as *const u8;
    // SAFETY: p points at the kernel's state, C_STATE_BYTES long; the flush
    // buffer pointer is at byte 600 (after the three matrices).
    let flush_buf = unsafe { std::ptr::read_unaligned(p.add(600) as *const *const u8) };
    assert_eq!(flush_buf, k.flush_buffer().as_ptr());
    assert_eq!(KernelKind::ALL.map(|k| k.c_id()), [0, 1, 2, 3]);
}
