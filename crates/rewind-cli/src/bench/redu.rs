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
//! still behind is part of the work. Rounds alternate over configurations;
//! each figure is the median of the rounds, the counters per transaction
//! exact.

use std::path::Path;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{Backend, Counters, LogVariant, Policy, PoolConfig, WriteBack};

use super::output::{Report, Row};
use super::{median, median_ratio, svg, Ctx, Scale};
use crate::error::CliError;

const LAYOUT: &str = "rewind-bench-redu";
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

/// Transactions per run (for an object of 1 KiB or less), rounds.
fn sizes(scale: Scale) -> (u64, usize) {
    match scale {
        Scale::Tiny => (10, 1),
        Scale::Quick => (1_000, 3),
        Scale::Full => (10_000, 5),
    }
}

/// Transactions of `work` on a fresh pool: the time and counters.
fn run_once(
    dir: &Path,
    config: (&str, Policy, WriteBack),
    work: Work,
    txs: u64,
    ctx: &Ctx,
    seed: u64,
) -> Result<(Duration, Counters), CliError> {
    let (name, policy, write_back) = config;
    let words = OBJECTS * work.object() / 8;
    // Room for the largest transaction's records (two values per word
    // under undo) several times over, and the objects.
    let size = (words * 8 * 6 + 64 * work.object() * 8 * 4).max(64 << 20);
    let cfg = PoolConfig::default()
        .log(LogVariant::Batch)
        .policy(policy)
        .write_back(write_back)
        .backend(Backend::Pmem)
        .nvm_latency(ctx.latency);
    let (pool, data) = super::array_pool(dir, name, LAYOUT, size, &cfg, words)?;
    let per = work.object() / 8;
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut buf = vec![0u64; per as usize];
    let before = pool.counters();
    let start = Instant::now();
    for t in 0..txs {
        pool.transaction(|tx| {
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
                    for i in 0..per {
                        buf[i as usize] = tx.read(data.at(a + i))?;
                    }
                    for i in 0..per {
                        let v = tx.read(data.at(b + i))?;
                        tx.write(data.at(a + i), &v)?;
                    }
                    for i in 0..per {
                        tx.write(data.at(b + i), &buf[i as usize])?;
                    }
                }
                Work::Rand(n) => {
                    for _ in 0..n {
                        let o = rng.gen_range(0..OBJECTS) * per;
                        tx.write(data.at(o + rng.gen_range(0..per)), &t)?;
                    }
                }
            }
            Ok::<_, rewind::Error>(())
        })
        // The message is built only on failure.
        .map_err(|e| CliError::rewind(format!("{name} {}", work.name()))(e))?;
    }
    // Redo-async: the run ends when write-back has caught up.
    pool.sync()
        .map_err(|e| CliError::rewind(format!("{name} sync"))(e))?;
    let time = start.elapsed();
    let counters = pool.counters().since(&before);
    drop(pool);
    let _ = std::fs::remove_file(dir.join(format!("{name}.pool")));
    Ok((time, counters))
}

struct Result1 {
    config: &'static str,
    work: Work,
    us_per_tx: f64,
    vs_force: f64,
    fences_per_tx: f64,
    lines_per_tx: f64,
}

pub fn run(ctx: &Ctx, out: &Path) -> Result<(), CliError> {
    let (base_txs, rounds) = sizes(ctx.scale);
    println!(
        "bench redu (ReDU Fig. 10, in software): one durable transaction per append (an S-byte object written 8 bytes at a time, in order), swap (two S-byte objects exchanged) or rand(n) (one word in each of n random objects); batch log, force, no-force, redo (synchronous write-back) and redo-async (eager and LRU write-back, timed until write-back finishes); median of {rounds} alternating rounds{}",
        super::tiny_note(ctx.scale)
    );
    println!("  {}", super::latency_line(ctx.latency));
    let dir = ctx.scratch()?;
    println!("  pools in {}", dir.path().display());
    let bar = super::progress((WORKS.len() * CONFIGS.len() * rounds) as u64);
    // times[work][config][round]
    let mut times = vec![vec![Vec::new(); CONFIGS.len()]; WORKS.len()];
    let mut counters = vec![vec![Counters::default(); CONFIGS.len()]; WORKS.len()];
    let txs_of = |w: Work| (base_txs * 1024 / w.object().max(1024)).max(4);
    for round in 0..rounds {
        for (w, &work) in WORKS.iter().enumerate() {
            for (c, &config) in CONFIGS.iter().enumerate() {
                bar.set_message(format!("{} {}", config.0, work.name()));
                let (t, n) = run_once(dir.path(), config, work, txs_of(work), ctx, round as u64)?;
                times[w][c].push(t);
                counters[w][c] = n;
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    let mut results = Vec::new();
    for (w, &work) in WORKS.iter().enumerate() {
        let txs = txs_of(work) as f64;
        for (c, &(config, _, _)) in CONFIGS.iter().enumerate() {
            let us = times[w][c].iter().map(|t| t.as_secs_f64() * 1e6 / txs);
            results.push(Result1 {
                config,
                work,
                us_per_tx: median(us.collect()),
                vs_force: median_ratio(&times[w][0], &times[w][c]),
                fences_per_tx: counters[w][c].fences as f64 / txs,
                lines_per_tx: (counters[w][c].flushed_lines + counters[w][c].nt_lines) as f64 / txs,
            });
        }
    }
    let report = Report {
        bench: "redu".into(),
        rows: rows(&results),
    };
    print_table(&results);
    super::write_results(&report, out, &chart(&results))
}

fn rows(results: &[Result1]) -> Vec<Row> {
    let mut rows = Vec::new();
    for r in results {
        for (metric, value, unit) in [
            ("us_per_tx", r.us_per_tx, "us"),
            ("speed_vs_force", r.vs_force, "x"),
            ("fences_per_tx", r.fences_per_tx, "count"),
            ("lines_per_tx", r.lines_per_tx, "lines"),
        ] {
            rows.push(Row {
                system: "rewind".into(),
                config: r.config.into(),
                param: r.work.name(),
                metric: metric.into(),
                value,
                unit: unit.into(),
            });
        }
    }
    rows
}

fn print_table(results: &[Result1]) {
    println!();
    let mut head = format!("  {:<12}", "workload");
    for (c, _, _) in CONFIGS {
        head.push_str(&format!(" | {:>38}", c));
    }
    println!("{head}");
    println!(
        "  {:<12}{}",
        "",
        format!(
            " | {:>9} {:>9} {:>8} {:>9}",
            "us/tx", "vs force", "fences", "lines"
        )
        .repeat(CONFIGS.len())
    );
    for work in WORKS {
        let mut line = format!("  {:<12}", work.name());
        for (c, _, _) in CONFIGS {
            let r = results
                .iter()
                .find(|r| r.work == work && r.config == c)
                .expect("measured");
            line.push_str(&format!(
                " | {:>9.2} {:>8.2}x {:>8.2} {:>9.1}",
                r.us_per_tx, r.vs_force, r.fences_per_tx, r.lines_per_tx
            ));
        }
        println!("{line}");
    }
    println!();
}

fn chart(results: &[Result1]) -> String {
    let groups: Vec<String> = WORKS.iter().map(|w| w.name()).collect();
    let series: Vec<String> = CONFIGS.iter().map(|(c, _, _)| c.to_string()).collect();
    let value = |g: usize, s: usize| {
        results
            .iter()
            .find(|r| r.work == WORKS[g] && r.config == CONFIGS[s].0)
            .map_or(f64::NAN, |r| r.vs_force)
    };
    svg::grouped_bars(
        "speed against undo force (ReDU Fig. 10, in software)",
        "force's time over the configuration's (log scale)",
        &groups,
        &series,
        value,
    )
}
