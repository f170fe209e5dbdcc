//! ReDU Fig. 10 in software: large sequential write sets against small
//! random ones, under undo (force, no-force) and redo logging.
//!
//! Workloads, one durable transaction each, over a pool of 256 objects of
//! the workload's object size:
//! - **append S**: the next object (round robin) is overwritten whole, S
//!   bytes written 8 at a time in order (a vector append of an S-byte
//!   element); S = 1, 4 and 16 KiB.
//! - **swap S**: two random objects exchange their S bytes, 8 at a time.
//! - **rand(n)**: one 8-byte word in each of n random 64-byte objects,
//!   n = 4, 8, 16.
//!
//! Configurations: Batch force, Batch no-force (checkpoints as the pool
//! decides), Batch redo (synchronous write-back), and Batch redo-async
//! with eager and with LRU write-back (1,024 lines). A run's time ends when
//! every committed value is in place (`Pool::sync`): write-back that is
//! still behind is part of the work. Each figure is the median of the
//! rounds, the counters per transaction exact.

use std::path::Path;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{LogVariant, Policy, WriteBack};

use super::harness::{Ctx, Label, Per, Sample};
use super::output::Report;
use crate::error::CliError;

/// Objects of each workload's size.
const OBJECTS: u64 = 256;

/// A workload.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Work {
    Append(u64),
    Swap(u64),
    Rand(u64),
}

impl Work {
    fn name(self) -> String {
        match self {
            Work::Append(s) => format!("append-{}k", s / 1024),
            Work::Swap(s) => format!("swap-{}k", s / 1024),
            Work::Rand(n) => format!("rand-{n}"),
        }
    }

    /// Size of one object.
    fn object(self) -> u64 {
        match self {
            Work::Append(s) | Work::Swap(s) => s,
            Work::Rand(_) => 64,
        }
    }
}

const WORKS: [Work; 9] = [
    Work::Append(1024),
    Work::Append(4096),
    Work::Append(16384),
    Work::Swap(1024),
    Work::Swap(4096),
    Work::Swap(16384),
    Work::Rand(4),
    Work::Rand(8),
    Work::Rand(16),
];

/// The configurations, by name.
const CONFIGS: [(&str, Policy, WriteBack); 5] = [
    ("batch-force", Policy::Force, WriteBack::Eager),
    ("batch-no-force", Policy::NoForce, WriteBack::Eager),
    ("batch-redo", Policy::Redo, WriteBack::Eager),
    ("batch-redo-async", Policy::RedoAsync, WriteBack::Eager),
    (
        "batch-redo-lru",
        Policy::RedoAsync,
        WriteBack::Lru { lines: 1024 },
    ),
];

/// Transactions of `work` on a fresh pool: the time and counters.
fn run_once(
    ctx: &Ctx,
    dir: &Path,
    (name, policy, write_back): (&str, Policy, WriteBack),
    work: Work,
    txs: u64,
    seed: u64,
) -> Result<Sample, CliError> {
    let words = OBJECTS * work.object() / 8;
    // Room for the largest transaction's records (two values per word
    // under undo) several times over, and the objects.
    let size = (words * 8 * 6 + 64 * work.object() * 8 * 4).max(64 << 20);
    let cfg = (ctx.pool_config(LogVariant::Batch, policy)).write_back(write_back);
    let (pool, data) = super::array_pool(dir, name, size, &cfg, words)?;
    let per = work.object() / 8;
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut buf = vec![0u64; per as usize];
    let body = |tx: &mut rewind::Tx<'_>, t| {
        match work {
            Work::Append(_) => {
                let o = (t % OBJECTS) * per;
                for i in 0..per {
                    tx.write(data.at(o + i), &(t ^ i))?;
                }
            }
            Work::Swap(_) => {
                let a = rng.gen_range(0..OBJECTS) * per;
                let b = rng.gen_range(0..OBJECTS) * per;
                for (i, v) in (0..per).zip(buf.iter_mut()) {
                    *v = tx.read(data.at(a + i))?;
                }
                for i in 0..per {
                    let v = tx.read(data.at(b + i))?;
                    tx.write(data.at(a + i), &v)?;
                }
                for (i, v) in (0..per).zip(buf.iter()) {
                    tx.write(data.at(b + i), v)?;
                }
            }
            Work::Rand(n) => {
                for _ in 0..n {
                    let o = rng.gen_range(0..OBJECTS) * per;
                    tx.write(data.at(o + rng.gen_range(0..per)), &t)?;
                }
            }
        }
        Ok(())
    };
    // Redo-async: the run ends when write-back has caught up.
    super::harness::timed_txs((dir, name), pool, txs, body, |_, _| Ok(()))
}

pub fn run(ctx: &Ctx, report: &mut Report) -> Result<(), CliError> {
    // Transactions per run (for an object of 1 KiB or less), rounds.
    let (base_txs, rounds) = ctx.scale.pick((10, 1), (1_000, 3), (10_000, 5));
    println!(
        "  one durable transaction per append (an S-byte object written 8 bytes at a time, in order), \
         swap (two S-byte objects exchanged) or rand(n) (one word in each of n random objects); \
         redo-async timed until write-back finishes; median of {rounds} rounds"
    );
    let dir = ctx.scratch()?;
    for work in WORKS {
        let txs = (base_txs * 1024 / work.object().max(1024)).max(4);
        let mut configs = CONFIGS.map(|c| (Label::new("rewind", c.0, work.name()), c));
        let m = ctx.seeded(&mut configs, (0, rounds), |&mut c, seed| {
            run_once(ctx, dir.path(), c, work, txs, seed)
        })?;
        m.report(report, &Per::us("tx", "us_per_tx", txs), &[], &[]);
        // Force's time over this configuration's (force is first).
        m.push_each(report, ("speed_vs_force", "x"), |i| m.ratio(0, i));
    }
    Ok(())
}
