//! Per-operation cost of a `BTreeMap<Vec<u8>, [u8; 24]>` with 32-byte
//! string keys (bench btree-str's tree), for callgrind: N entries loaded,
//! then M lookups (`get`) or M transactions each inserting one new key or
//! removing a present one (`update`), on /dev/shm.
//! `cargo run --release -p rewind-collections --example profile_btree_str -- [get|update] [N] [M]`

use rewind::{Pool, PoolConfig};
use rewind_collections::{BTreeMap, Error};

type Map = BTreeMap<Vec<u8>, [u8; 24]>;

/// A 32-byte ASCII key, distinct for distinct `i`, in random order.
fn key(i: u64) -> Vec<u8> {
    let h = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    format!("user{:012x}{i:016x}", h >> 16).into_bytes()
}

fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "update".into());
    let mut nums = args.map(|a| a.parse::<u64>().expect("a number"));
    let n = nums.next().unwrap_or(50_000);
    let m = nums.next().unwrap_or(3_000);
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        "/dev/shm".into()
    } else {
        std::env::temp_dir()
    };
    let path = dir.join(format!("rewind-profile-str-{}.pool", std::process::id()));
    let pool = Pool::create(&path, "profile", 128 << 20, &PoolConfig::default())?;
    let map = pool.transaction(Map::create)?;
    for c in 0..n.div_ceil(1000) {
        pool.transaction(|tx| {
            for i in c * 1000..((c + 1) * 1000).min(n) {
                map.insert(tx, key(i), [i as u8; 24])?;
            }
            Ok::<_, Error>(())
        })?;
    }
    let t = std::time::Instant::now();
    if mode == "get" {
        let keys: Vec<Vec<u8>> = (0..m).map(|j| key(j * 7 % n)).collect();
        gets(&pool, map, &keys)?;
    } else {
        updates(&pool, map, n, m)?;
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / m as f64;
    println!("{m} {mode}s on {n} entries: {us:.3} us each");
    drop(pool);
    let _ = std::fs::remove_file(&path);
    Ok(())
}

/// The measured lookups (`valgrind --tool=callgrind --toggle-collect='*gets*'`).
#[inline(never)]
fn gets(pool: &Pool, map: Map, keys: &[Vec<u8>]) -> Result<(), Error> {
    for k in keys {
        std::hint::black_box(map.get(pool, k)?);
    }
    Ok(())
}

/// The measured updates (`--toggle-collect='*updates*'`).
#[inline(never)]
fn updates(pool: &Pool, map: Map, n: u64, m: u64) -> Result<(), Error> {
    for j in 0..m {
        if j % 2 == 0 {
            pool.transaction(|tx| map.insert(tx, key(n + j), [j as u8; 24]))?;
        } else {
            let k = key(j);
            pool.transaction(|tx| map.remove(tx, &k))?;
        }
    }
    Ok(())
}
