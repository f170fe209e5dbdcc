//! A B+-tree filled with N entries (default 1,000,000; `u64` keys, 24-byte
//! values, in transactions of 1,000) and emptied again by removals: the
//! pool's allocated blocks before, when full, and after, and the time of
//! each phase. `cargo run --release -p rewind-collections --example space [N]`.

use std::time::Instant;

use rewind::{Pool, PoolConfig};
use rewind_collections::{BTreeMap, Error};

fn main() -> Result<(), Error> {
    let n: u64 = std::env::args()
        .nth(1)
        .map_or(1_000_000, |a| a.parse().expect("N: a number of entries"));
    let path = std::env::temp_dir().join(format!("rewind-space-{}.pool", std::process::id()));
    let size = (n * 160).max(64 << 20);
    let pool = Pool::create(&path, "space", size, &PoolConfig::default())?;
    let blocks = |pool: &Pool| -> Result<usize, Error> {
        Ok(rewind::alloc::allocated_blocks(pool.domain(), pool.layout())?.len())
    };
    let map = pool.transaction(BTreeMap::<u64, [u8; 24]>::create)?;
    let key = |i: u64| i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let start = blocks(&pool)?;
    let t = Instant::now();
    for c in 0..n.div_ceil(1000) {
        pool.transaction(|tx| {
            for i in c * 1000..((c + 1) * 1000).min(n) {
                map.insert(tx, key(i), [i as u8; 24])?;
            }
            Ok::<_, Error>(())
        })?;
    }
    let fill = t.elapsed();
    let full = blocks(&pool)?;
    let height = map.height(&pool)?;
    let t = Instant::now();
    for c in 0..n.div_ceil(1000) {
        pool.transaction(|tx| {
            for i in c * 1000..((c + 1) * 1000).min(n) {
                map.remove(tx, &key(i))?;
            }
            Ok::<_, Error>(())
        })?;
    }
    let empty = t.elapsed();
    let end = blocks(&pool)?;
    map.check_invariants(&pool)?;
    println!(
        "{n} entries: {start} blocks before, {full} full (height {height}, fill {:.2} s), \
         {end} after emptying ({:.2} s): {:+.1} % of the start",
        fill.as_secs_f64(),
        empty.as_secs_f64(),
        (end as f64 - start as f64) * 100.0 / start as f64
    );
    pool.close()?;
    let _ = std::fs::remove_file(&path);
    Ok(())
}
