//! Measures the persistence primitives on this machine (Pmem backend on a
//! tmpfs file): what one flushed line, one non-temporal line and one fence
//! cost. Used to reason about where transaction time goes.

use std::time::Instant;

use rewind::persist::{Backend, Domain};

fn time(name: &str, n: u64, mut f: impl FnMut(u64)) {
    for i in 0..n / 10 {
        f(i);
    }
    let t = Instant::now();
    for i in 0..n {
        f(i);
    }
    println!(
        "{name:<44} {:>8.1} ns",
        t.elapsed().as_nanos() as f64 / n as f64
    );
}

fn main() -> Result<(), rewind::Error> {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let path = dir.join(format!("rewind-primitives-{}.pool", std::process::id()));
    let d = Domain::create_file(&path, 64 << 20, Backend::Pmem)?;
    let _ = std::fs::remove_file(&path);
    let n = 200_000;
    let line = |i: u64, k: u64| ((i * 8 + k) * 4096 + k * 64) % (60 << 20);
    time("fence alone", n, |_| d.fence().unwrap());
    time("store 8 B + fence", n, |i| {
        d.store_u64(line(i, 0), i).unwrap();
        d.fence().unwrap();
    });
    time("store 8 B + clwb + fence", n, |i| {
        d.store_u64(line(i, 0), i).unwrap();
        d.flush(line(i, 0), 8).unwrap();
        d.fence().unwrap();
    });
    time("8 x (store 8 B + clwb) + fence", n, |i| {
        for k in 0..8 {
            d.store_u64(line(i, k), i).unwrap();
            d.flush(line(i, k), 8).unwrap();
        }
        d.fence().unwrap();
    });
    time("nt 8 B + fence", n, |i| {
        d.store_nt_u64(line(i, 0), i).unwrap();
        d.fence().unwrap();
    });
    time("nt 64 B + fence", n, |i| {
        d.store_nt(line(i, 0), &[i as u8; 64]).unwrap();
        d.fence().unwrap();
    });
    time("nt 8 x 64 B (sequential) + fence", n, |i| {
        d.store_nt(line(i, 0) / 4096 * 4096, &[i as u8; 512])
            .unwrap();
        d.fence().unwrap();
    });
    time("nt 8 B to same line x8 + fence", n, |i| {
        for k in 0..8 {
            d.store_nt_u64(line(i, 0) + 8 * k, i).unwrap();
        }
        d.fence().unwrap();
    });
    time("8 x (store + clwb) + fence + nt 8B + fence", n, |i| {
        for k in 0..8 {
            d.store_u64(line(i, k), i).unwrap();
            d.flush(line(i, k), 8).unwrap();
        }
        d.fence().unwrap();
        d.store_nt_u64(line(i, 9), i).unwrap();
        d.fence().unwrap();
    });
    Ok(())
}
