//! Per-operation cost of `BTreeMap` updates, for callgrind: N entries
//! loaded, then M transactions each inserting one new key or removing a
//! present one (bench btree's 100 % updates), on /dev/shm.
//! `cargo run --release -p rewind-collections --example profile_btree -- [N] [M]`

use rewind::{Pool, PoolConfig};
use rewind_collections::{BTreeMap, Error};

fn main() -> Result<(), Error> {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<u64>().expect("a number"));
    let n = args.next().unwrap_or(50_000);
    let m = args.next().unwrap_or(3_000);
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        "/dev/shm".into()
    } else {
        std::env::temp_dir()
    };
    let path = dir.join(format!("rewind-profile-{}.pool", std::process::id()));
    let pool = Pool::create(&path, "profile", 96 << 20, &PoolConfig::default())?;
    let map = pool.transaction(BTreeMap::<u64, [u8; 24]>::create)?;
    let key = |i: u64| i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for c in 0..n.div_ceil(1000) {
        pool.transaction(|tx| {
            for i in c * 1000..((c + 1) * 1000).min(n) {
                map.insert(tx, key(i), [i as u8; 24])?;
            }
            Ok::<_, Error>(())
        })?;
    }
    let t = std::time::Instant::now();
    updates(&pool, map, n, m)?;
    let us = t.elapsed().as_secs_f64() * 1e6 / m as f64;
    println!("{m} updates on {n} entries: {us:.3} us each");
    drop(pool);
    let _ = std::fs::remove_file(&path);
    Ok(())
}

/// The measured phase (`valgrind --tool=callgrind --toggle-collect='*updates*'`).
#[inline(never)]
fn updates(pool: &Pool, map: BTreeMap<u64, [u8; 24]>, n: u64, m: u64) -> Result<(), Error> {
    let key = |i: u64| i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for j in 0..m {
        if j % 2 == 0 {
            pool.transaction(|tx| map.insert(tx, key(n + j), [j as u8; 24]))?;
        } else {
            pool.transaction(|tx| map.remove(tx, &key(j)))?;
        }
    }
    Ok(())
}
