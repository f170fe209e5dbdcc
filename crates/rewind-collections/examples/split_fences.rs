//! Fences and written-back lines per B+-tree insert, apart for the inserts
//! that split a node (they allocate one) and those that do not: the
//! counters of issue 16's "1.00 fence for a B+-tree insert that splits".
//! Each insert is its own transaction under the default `PoolConfig`
//! (redo), into a `BTreeMap<u64, [u8; 24]>` of N random keys (default
//! 20,000). An insert split a node when the pool's allocated bytes grew.
//! `cargo run --release -p rewind-collections --example split_fences [N]`.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{Pool, PoolConfig};
use rewind_collections::{BTreeMap, Error};

/// Counters summed over one kind of insert.
#[derive(Default)]
struct Sum {
    inserts: u64,
    fences: u64,
    lines: u64,
}

impl Sum {
    fn row(&self, what: &str) {
        let per = |x: u64| x as f64 / self.inserts.max(1) as f64;
        println!(
            "{what:<16} {:>8} {:>8.2} {:>8.2}",
            self.inserts,
            per(self.fences),
            per(self.lines)
        );
    }
}

fn main() -> Result<(), Error> {
    let n: u64 = std::env::args()
        .nth(1)
        .map_or(20_000, |a| a.parse().expect("N: a number of inserts"));
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("split.pool");
    let pool = Pool::create(
        &path,
        "split",
        (n * 200).max(64 << 20),
        &PoolConfig::default(),
    )?;
    let map = pool.transaction(BTreeMap::<u64, [u8; 24]>::create)?;
    let (mut split, mut plain) = (Sum::default(), Sum::default());
    let mut rng = SmallRng::seed_from_u64(0x9e37_79b9_7f4a_7c15);
    for _ in 0..n {
        // Random 64-bit keys: distinct in practice, in random order.
        let x: u64 = rng.gen();
        let used = pool.alloc_stats().bytes_used;
        let before = pool.counters();
        pool.transaction(|tx| map.insert(tx, x, [7; 24]).map(|_| ()))?;
        let after = pool.counters();
        let sum = if pool.alloc_stats().bytes_used > used {
            &mut split
        } else {
            &mut plain
        };
        sum.inserts += 1;
        sum.fences += after.fences - before.fences;
        sum.lines +=
            (after.flushed_lines + after.nt_lines) - (before.flushed_lines + before.nt_lines);
    }
    println!(
        "{:<16} {:>8} {:>8} {:>8}",
        "insert", "count", "fences", "lines"
    );
    split.row("splits a node");
    plain.row("no split");
    Ok(pool.close()?)
}
