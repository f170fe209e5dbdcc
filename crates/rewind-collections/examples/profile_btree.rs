//! Per-operation cost of `BTreeMap` updates, for callgrind: N entries
//! loaded, then M transactions each inserting one new key or removing a
//! present one (bench btree's 100 % updates), on /dev/shm; with `str`,
//! 32-byte string keys (bench btree-str's) in place of `u64` ones; with a
//! thread count T after it (`u64` or `str`), T threads each update a map of
//! their own in the one pool (bench threads' own trees), for `perf`; with
//! `each` after T, each thread's map in a pool of its own (what sharing
//! one pool costs).
//! `cargo run --release -p rewind-collections --example profile_btree -- [N] [M] [str|u64] [T] [one|each]`

use rewind::{Pool, PoolConfig};
use rewind_collections::{BTreeMap, Error, Storable};

/// The `i`-th key of a run, spread over the key space.
trait Key: Storable + Sized
where
    Self::Ref: Ord,
{
    fn key(i: u64) -> Self;
}

impl Key for u64 {
    fn key(i: u64) -> u64 {
        i.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }
}

impl Key for Vec<u8> {
    /// `user`, 12 hex digits of a mix of `i`, then `i` in 16: 32 bytes.
    fn key(i: u64) -> Vec<u8> {
        let mix = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 16;
        format!("user{mix:012x}{i:016x}").into_bytes()
    }
}

fn main() -> Result<(), Error> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d| a.get(i).map_or(d, |s| s.parse::<u64>().expect("a number"));
    let (n, m, t) = (num(0, 50_000), num(1, 3_000), num(3, 1));
    let each = a.get(4).is_some_and(|s| s == "each");
    match a.get(2).map(String::as_str) {
        Some("str") => run::<Vec<u8>>(n, m, t, each),
        _ => run::<u64>(n, m, t, each),
    }
}

fn run<K: Key + Send>(n: u64, m: u64, threads: u64, each: bool) -> Result<(), Error>
where
    K::Ref: Ord,
{
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        "/dev/shm".into()
    } else {
        std::env::temp_dir()
    };
    let pools = if each { threads } else { 1 };
    let paths: Vec<_> = (0..pools)
        .map(|i| dir.join(format!("rewind-profile-{}-{i}.pool", std::process::id())))
        .collect();
    let pools = (paths.iter())
        .map(|path| Pool::create(path, "profile", 96 << 20, &PoolConfig::default()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut maps = Vec::new();
    for i in 0..threads as usize {
        let pool = &pools[i % pools.len()];
        let map = pool.transaction(BTreeMap::<K, [u8; 24]>::create)?;
        for c in 0..n.div_ceil(1000) {
            pool.transaction(|tx| {
                for i in c * 1000..((c + 1) * 1000).min(n) {
                    map.insert(tx, K::key(i), [i as u8; 24])?;
                }
                Ok::<_, Error>(())
            })?;
        }
        maps.push((pool, map));
    }
    let t = std::time::Instant::now();
    match maps[..] {
        // One thread: this one, which loaded the map (and whose access
        // cache holds its upper nodes), as before threads were added.
        [(pool, map)] => updates(pool, map, n, m)?,
        _ => std::thread::scope(|s| {
            let runs: Vec<_> = (maps.iter())
                .map(|&(pool, map)| s.spawn(move || updates(pool, map, n, m)))
                .collect();
            runs.into_iter()
                .try_for_each(|r| r.join().expect("a thread panicked"))
        })?,
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / m as f64;
    println!("{m} updates on {n} entries, {threads} thread(s): {us:.3} us per thread's update");
    drop(pools);
    for path in paths {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// The measured phase (`valgrind --tool=callgrind --toggle-collect='*updates*'`).
#[inline(never)]
fn updates<K: Key>(pool: &Pool, map: BTreeMap<K, [u8; 24]>, n: u64, m: u64) -> Result<(), Error>
where
    K::Ref: Ord,
{
    for j in 0..m {
        if j % 2 == 0 {
            pool.transaction(|tx| map.insert(tx, K::key(n + j), [j as u8; 24]))?;
        } else {
            let k = K::key(j);
            pool.transaction(|tx| map.remove(tx, k.borrowed()))?;
        }
    }
    Ok(())
}
