//! The demo's throughput table: the bank transfers with and without rewind.
//!
//! The baselines run the same transfers over a flat array of words: in DRAM
//! (`volatile`), and on a persistence domain with every changed line flushed
//! and one fence per transfer but no log (`persist-nolog`) — the cheapest a
//! durable but not crash-atomic transfer can be. A fixed ring of history
//! slots stands in for the allocator, and the walk to the oldest entry is
//! kept, so the only work rewind adds is logging, allocation and recovery
//! bookkeeping.

use std::path::Path;
use std::time::{Duration, Instant};

use rewind::persist::Domain;
use rewind::{Backend, Counters, LogVariant, Policy, Pool, PoolConfig};

use super::bank::{self, amount, plan, ACCOUNTS, HISTORY_CAP, INITIAL_BALANCE, LAYOUT};
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
const CONFIGS: [(LogVariant, Policy); 3] = [
    (LogVariant::Batch, Policy::Force),
    (LogVariant::Optimized, Policy::Force),
    (LogVariant::Batch, Policy::NoForce),
];

/// Runs `tx` transfers on every system.
pub fn measure(tx: u64) -> Result<Vec<Row>, CliError> {
    let dir = crate::scratch::dir()?;
    let mut rows = Vec::new();

    let mut words = Volatile(vec![0; flat::WORDS]);
    rows.push(time("volatile", "dram".into(), tx, &mut words, |_| {
        Counters::default()
    })?);

    let path = dir.path().join("nolog.pool");
    let domain = Domain::create_file(&path, flat::WORDS as u64 * 8, Backend::Pmem)
        .map_err(CliError::rewind(format!("creating {}", path.display())))?;
    let mut nolog = NoLog(domain);
    rows.push(time(
        "persist-nolog",
        "nolog".into(),
        tx,
        &mut nolog,
        |d| d.0.counters(),
    )?);

    for (variant, policy) in CONFIGS {
        rows.push(rewind_row(dir.path(), variant, policy, tx)?);
    }
    Ok(rows)
}

fn time<C: flat::Cells>(
    system: &'static str,
    config: String,
    tx: u64,
    cells: &mut C,
    counters: impl Fn(&C) -> Counters,
) -> Result<Row, CliError> {
    // Built only on failure: nothing allocates per transfer.
    let err = |e| CliError::rewind(format!("running {system} transfers"))(e);
    flat::init(cells).map_err(err)?;
    let before = counters(cells);
    let start = Instant::now();
    for _ in 0..tx {
        flat::transfer(cells, SEED).map_err(err)?;
    }
    let elapsed = start.elapsed();
    Ok(Row {
        system,
        config,
        tx,
        elapsed,
        counters: counters(cells).since(&before),
    })
}

const SEED: u64 = 7;

fn rewind_row(dir: &Path, variant: LogVariant, policy: Policy, tx: u64) -> Result<Row, CliError> {
    let config = format!("{variant}-{policy}");
    let path = dir.join(format!("{config}.pool"));
    let cfg = PoolConfig::default()
        .log(variant)
        .policy(policy)
        .backend(Backend::Pmem);
    let pool = Pool::create(&path, LAYOUT, 16 << 20, &cfg)
        .map_err(CliError::rewind(format!("creating {}", path.display())))?;
    let root = bank::init(&pool).map_err(CliError::rewind("initialising the bank"))?;
    let before = pool.counters();
    let start = Instant::now();
    for _ in 0..tx {
        bank::transfer(&pool, root, SEED, |_| {})
            .map_err(|e| CliError::rewind(format!("running {config} transfers"))(e))?;
    }
    let elapsed = start.elapsed();
    Ok(Row {
        system: "rewind",
        config,
        tx,
        elapsed,
        counters: pool.counters().since(&before),
    })
}

/// Prints the table, times relative to `persist-nolog`.
pub fn print(rows: &[Row]) {
    let nolog = rows
        .iter()
        .find(|r| r.system == "persist-nolog")
        .map(Row::us_per_tx)
        .unwrap_or(f64::NAN);
    println!(
        "      {:<14} {:<20} {:>12} {:>9} {:>9} {:>10} {:>11}",
        "system", "config", "tx/s", "us/tx", "vs nolog", "fences/tx", "flushes/tx"
    );
    for r in rows {
        let n = r.tx as f64;
        println!(
            "      {:<14} {:<20} {:>12.0} {:>9.3} {:>8.2}x {:>10.2} {:>11.2}",
            r.system,
            r.config,
            n / r.elapsed.as_secs_f64(),
            r.us_per_tx(),
            r.us_per_tx() / nolog,
            r.counters.fences as f64 / n,
            (r.counters.flushed_lines + r.counters.nt_lines) as f64 / n,
        );
    }
}

/// The bank as a flat array of 8-byte words, for the baselines.
mod flat {
    use super::*;

    /// Header words: history head (slot + 1, 0 = none), history length, committed.
    const HEAD: usize = 0;
    const LEN: usize = 1;
    const COMMITTED: usize = 2;
    /// Accounts start on the second cache line.
    const ACC: usize = 8;
    /// History slots, one cache line each: from, to, amount, tx_no, next.
    const ENT: usize = (ACC + ACCOUNTS as usize).div_ceil(8) * 8;
    /// One slot more than the history holds: the new entry is placed before
    /// the oldest is dropped. Slot `i % SLOTS` was freed by transfer `i - 1`.
    const SLOTS: u64 = HISTORY_CAP + 1;
    pub const WORDS: usize = ENT + 8 * SLOTS as usize;

    /// Word storage: DRAM or a persistence domain.
    pub trait Cells {
        fn get(&self, w: usize) -> Result<u64, rewind::Error>;
        fn set(&mut self, w: usize, v: u64) -> Result<(), rewind::Error>;
        /// Write back words `[w, w + n)`.
        fn persist(&mut self, w: usize, n: usize) -> Result<(), rewind::Error>;
        fn fence(&mut self) -> Result<(), rewind::Error>;
    }

    pub fn init<C: Cells>(c: &mut C) -> Result<(), rewind::Error> {
        for w in 0..WORDS {
            c.set(w, 0)?;
        }
        for a in 0..ACCOUNTS as usize {
            c.set(ACC + a, INITIAL_BALANCE)?;
        }
        c.persist(0, WORDS)?;
        c.fence()
    }

    /// The same transfer as [`bank::transfer`], durable but not atomic.
    pub fn transfer<C: Cells>(c: &mut C, seed: u64) -> Result<(), rewind::Error> {
        let i = c.get(COMMITTED)? + 1;
        let (from, to, want) = plan(seed, i);
        let (from, to) = (ACC + from as usize, ACC + to as usize);
        let from_balance = c.get(from)?;
        let amount = amount(want, from_balance);
        c.set(from, from_balance - amount)?;
        c.persist(from, 1)?;
        let to_balance = c.get(to)?;
        c.set(to, to_balance + amount)?;
        c.persist(to, 1)?;

        let slot = i % SLOTS;
        let e = ENT + 8 * slot as usize;
        let head = c.get(HEAD)?;
        for (k, v) in [
            from as u64 - ACC as u64,
            to as u64 - ACC as u64,
            amount,
            i,
            head,
        ]
        .into_iter()
        .enumerate()
        {
            c.set(e + k, v)?;
        }
        c.persist(e, 5)?;
        let mut len = c.get(LEN)? + 1;
        if len > HISTORY_CAP {
            let mut prev = slot;
            for _ in 0..len - 2 {
                prev = c.get(ENT + 8 * prev as usize + 4)? - 1;
            }
            let next = ENT + 8 * prev as usize + 4;
            c.set(next, 0)?;
            c.persist(next, 1)?;
            len -= 1;
        }
        c.set(HEAD, slot + 1)?;
        c.set(LEN, len)?;
        c.set(COMMITTED, i)?;
        c.persist(HEAD, 3)?;
        c.fence()
    }
}

/// `volatile`: plain stores to DRAM.
struct Volatile(Vec<u64>);

impl flat::Cells for Volatile {
    fn get(&self, w: usize) -> Result<u64, rewind::Error> {
        Ok(self.0[w])
    }
    fn set(&mut self, w: usize, v: u64) -> Result<(), rewind::Error> {
        self.0[w] = v;
        Ok(())
    }
    fn persist(&mut self, _: usize, _: usize) -> Result<(), rewind::Error> {
        Ok(())
    }
    fn fence(&mut self) -> Result<(), rewind::Error> {
        Ok(())
    }
}

/// `persist-nolog`: stores, flushes and a fence on a mapped file.
struct NoLog(Domain);

impl flat::Cells for NoLog {
    fn get(&self, w: usize) -> Result<u64, rewind::Error> {
        self.0.read_u64(w as u64 * 8)
    }
    fn set(&mut self, w: usize, v: u64) -> Result<(), rewind::Error> {
        self.0.store_u64(w as u64 * 8, v)
    }
    fn persist(&mut self, w: usize, n: usize) -> Result<(), rewind::Error> {
        self.0.flush(w as u64 * 8, n as u64 * 8)
    }
    fn fence(&mut self) -> Result<(), rewind::Error> {
        self.0.fence()
    }
}
