//! The demo's throughput table: the same B+-tree transactions in DRAM
//! (`std::collections::BTreeMap`, neither durable nor atomic: the floor)
//! and in a rewind pool under several log variants and policies. The
//! rewind rows pay for persistence (flushes and fences), logging, node
//! allocation and the tree's own reads of pool memory; the counters say
//! how many flushes and fences each transaction took.

use std::collections::BTreeMap as StdBTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use rewind::{Backend, Counters, LogVariant, Policy, Pool, PoolConfig};

use super::tree::{self, plan, Op, LAYOUT};
use crate::error::CliError;

/// One line of the table.
pub struct Row {
    pub system: &'static str,
    pub config: String,
    pub tx: u64,
    pub elapsed: Duration,
    pub counters: Counters,
}

impl Row {
    fn us_per_tx(&self) -> f64 {
        self.elapsed.as_secs_f64() * 1e6 / self.tx as f64
    }
}

/// The rewind configurations the demo compares.
const CONFIGS: [(LogVariant, Policy); 4] = [
    (LogVariant::Batch, Policy::Force),
    (LogVariant::Optimized, Policy::Force),
    (LogVariant::Batch, Policy::NoForce),
    (LogVariant::Batch, Policy::Redo),
];

const SEED: u64 = 7;

/// Runs `tx` transactions on every system.
pub fn measure(tx: u64) -> Result<Vec<Row>, CliError> {
    let dir = crate::scratch::dir(None)?;
    let mut rows = vec![volatile_row(tx)];
    for (variant, policy) in CONFIGS {
        rows.push(rewind_row(dir.path(), variant, policy, tx)?);
    }
    Ok(rows)
}

/// `volatile`: the transactions' operations on a `std` `BTreeMap`.
fn volatile_row(tx: u64) -> Row {
    let mut map = StdBTreeMap::new();
    let start = Instant::now();
    for i in 1..=tx {
        for op in plan(SEED, i) {
            match op {
                Op::Put(k, o) => drop(map.insert(k, o)),
                Op::Remove(k) => drop(map.remove(&k)),
            }
        }
    }
    let elapsed = start.elapsed();
    std::hint::black_box(&map);
    Row {
        system: "volatile",
        config: "std-btreemap".into(),
        tx,
        elapsed,
        counters: Counters::default(),
    }
}

fn rewind_row(dir: &Path, variant: LogVariant, policy: Policy, tx: u64) -> Result<Row, CliError> {
    let config = format!("{variant}-{policy}");
    let path = dir.join(format!("{config}.pool"));
    let cfg = PoolConfig::default()
        .log(variant)
        .policy(policy)
        .backend(Backend::Pmem);
    let pool = Pool::create(&path, LAYOUT, 32 << 20, &cfg)
        .map_err(CliError::rewind(format!("creating {}", path.display())))?;
    let root = tree::init(&pool).map_err(CliError::collection("creating the B+-tree"))?;
    let before = pool.counters();
    let start = Instant::now();
    for _ in 0..tx {
        tree::step(&pool, root, SEED, |_| {})
            .map_err(|e| CliError::collection(format!("running {config} transactions"))(e))?;
    }
    let elapsed = start.elapsed();
    Ok(Row {
        system: "rewind-btree",
        config,
        tx,
        elapsed,
        counters: pool.counters().since(&before),
    })
}

/// Prints the table, times relative to `volatile`.
pub fn print(rows: &[Row]) {
    let floor = rows
        .iter()
        .find(|r| r.system == "volatile")
        .map(Row::us_per_tx)
        .unwrap_or(f64::NAN);
    println!(
        "      {:<14} {:<20} {:>12} {:>9} {:>11} {:>10} {:>11}",
        "system", "config", "tx/s", "us/tx", "vs volatile", "fences/tx", "flushes/tx"
    );
    for r in rows {
        let n = r.tx as f64;
        println!(
            "      {:<14} {:<20} {:>12.0} {:>9.3} {:>10.1}x {:>10.2} {:>11.2}",
            r.system,
            r.config,
            n / r.elapsed.as_secs_f64(),
            r.us_per_tx(),
            r.us_per_tx() / floor,
            r.counters.fences as f64 / n,
            (r.counters.flushed_lines + r.counters.nt_lines) as f64 / n,
        );
    }
}
