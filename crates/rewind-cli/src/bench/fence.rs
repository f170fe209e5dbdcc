//! REWIND Fig. 10: sensitivity to fence latency, and how record groups
//! mitigate it.
//!
//! Optimized (two fences per record) against Batch with groups of 8, 16,
//! 32 and 64 records per fence, under no-force without checkpoints as in
//! the paper, at emulated fence latencies from 0 up. The paper runs its
//! B+-tree at 100 % updates; until the collections exist this benchmark
//! runs the update-only array workload of `bench overhead` with 64 updates
//! per transaction (so a transaction fills several groups). The slowdown
//! is a configuration's time at a fence latency over its time at 0, taken
//! per round (the runs alternate), median of the rounds.

use std::path::Path;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{Backend, Counters, LogVariant, NvmLatency, Policy, PoolConfig};

use super::output::{Report, Row};
use super::{median, median_ratio, svg, Ctx, Scale};
use crate::error::CliError;

const LAYOUT: &str = "rewind-bench-fence";
/// Updates per transaction.
const K: u64 = 64;
/// Elements of the persistent array.
const ARRAY: u64 = 1 << 16;

/// A configuration: a log variant and its group size.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Setup {
    variant: LogVariant,
    group: u32,
}

impl Setup {
    fn name(self) -> String {
        match self.variant {
            LogVariant::Batch => format!("batch-{}", self.group),
            v => v.to_string(),
        }
    }
}

const SETUPS: [Setup; 5] = [
    Setup {
        variant: LogVariant::Optimized,
        group: 8,
    },
    Setup {
        variant: LogVariant::Batch,
        group: 8,
    },
    Setup {
        variant: LogVariant::Batch,
        group: 16,
    },
    Setup {
        variant: LogVariant::Batch,
        group: 32,
    },
    Setup {
        variant: LogVariant::Batch,
        group: 64,
    },
];

/// Transactions per run, fence latencies, rounds.
fn sizes(scale: Scale) -> (u64, Vec<u64>, usize) {
    match scale {
        Scale::Tiny => (10, vec![0, 500], 1),
        Scale::Quick => (1_500, vec![0, 250, 1_000, 2_000], 3),
        Scale::Full => (15_000, vec![0, 250, 500, 1_000, 2_000], 5),
    }
}

/// Runs `txs` transactions of `K` updates on a fresh pool.
fn run_once(
    dir: &Path,
    setup: Setup,
    txs: u64,
    latency: NvmLatency,
    seed: u64,
) -> Result<(Duration, Counters), CliError> {
    let name = setup.name();
    // Every record stays (no checkpoints): room for all of them.
    let size = (txs * (K + 1) * 160 + ARRAY * 8 * 4).max(64 << 20);
    let cfg = PoolConfig::default()
        .log(setup.variant)
        .policy(Policy::NoForce)
        .group_size(setup.group)
        .backend(Backend::Pmem)
        .nvm_latency(latency);
    let (mut pool, data) = super::array_pool(dir, &name, LAYOUT, size, &cfg, ARRAY)?;
    pool.set_checkpoint_fill(1.0);
    let mut rng = SmallRng::seed_from_u64(seed);
    let before = pool.counters();
    let start = Instant::now();
    for t in 0..txs {
        pool.transaction(|tx| {
            for _ in 0..K {
                tx.write(data.at(rng.gen_range(0..ARRAY)), &t)?;
            }
            Ok::<_, rewind::Error>(())
        })
        // The message is built only on failure (nothing allocates per transaction).
        .map_err(|e| CliError::rewind(format!("{name} transaction"))(e))?;
    }
    let time = start.elapsed();
    let counters = pool.counters().since(&before);
    drop(pool);
    let _ = std::fs::remove_file(dir.join(format!("{name}.pool")));
    Ok((time, counters))
}

struct Result1 {
    setup: Setup,
    fence_ns: u64,
    us_per_tx: f64,
    slowdown: f64,
    fences_per_tx: f64,
    nvm_writes_per_tx: f64,
}

pub fn run(ctx: &Ctx, out: &Path) -> Result<(), CliError> {
    let (txs, fences, rounds) = sizes(ctx.scale);
    println!(
        "bench fence (REWIND Fig. 10): {txs} transactions of {K} random 8-byte updates per run, no-force, no checkpoints; fence latency {} ns; median of {rounds} alternating rounds{}",
        fences
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        super::tiny_note(ctx.scale)
    );
    println!(
        "  {} ns per NVM write (--nvm-write-ns); the fence latency is this benchmark's variable (--fence-ns is ignored)",
        ctx.latency.write_ns
    );
    let dir = ctx.scratch()?;
    println!("  pools in {}", dir.path().display());
    let bar = super::progress((SETUPS.len() * fences.len() * rounds) as u64);
    // times[setup][fence][round]
    let mut times = vec![vec![Vec::new(); fences.len()]; SETUPS.len()];
    let mut counters = vec![vec![Counters::default(); fences.len()]; SETUPS.len()];
    for round in 0..rounds {
        for (f, &fence_ns) in fences.iter().enumerate() {
            for (s, &setup) in SETUPS.iter().enumerate() {
                bar.set_message(format!("{} fence {fence_ns} ns", setup.name()));
                let latency = NvmLatency::new(ctx.latency.write_ns, fence_ns);
                let (t, c) = run_once(dir.path(), setup, txs, latency, round as u64)?;
                times[s][f].push(t);
                counters[s][f] = c;
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    let mut results = Vec::new();
    for (s, &setup) in SETUPS.iter().enumerate() {
        for (f, &fence_ns) in fences.iter().enumerate() {
            let us = times[s][f]
                .iter()
                .map(|t| t.as_secs_f64() * 1e6 / txs as f64);
            results.push(Result1 {
                setup,
                fence_ns,
                us_per_tx: median(us.collect()),
                slowdown: median_ratio(&times[s][f], &times[s][0]),
                fences_per_tx: counters[s][f].fences as f64 / txs as f64,
                nvm_writes_per_tx: counters[s][f].nvm_writes as f64 / txs as f64,
            });
        }
    }
    let report = Report {
        bench: "fence".into(),
        rows: rows(&results),
    };
    print_table(&results, &fences);
    super::write_results(&report, out, &chart(&results, &fences))
}

fn rows(results: &[Result1]) -> Vec<Row> {
    let mut rows = Vec::new();
    for r in results {
        for (metric, value, unit) in [
            ("us_per_tx", r.us_per_tx, "us"),
            ("slowdown", r.slowdown, "x"),
            ("fences_per_tx", r.fences_per_tx, "count"),
            ("nvm_writes_per_tx", r.nvm_writes_per_tx, "writes"),
        ] {
            rows.push(Row {
                system: "rewind".into(),
                config: format!("{}-{}", r.setup.name(), Policy::NoForce),
                param: format!("fence={}ns", r.fence_ns),
                metric: metric.into(),
                value,
                unit: unit.into(),
            });
        }
    }
    rows
}

fn print_table(results: &[Result1], fences: &[u64]) {
    println!();
    let mut head = format!("  {:<12} {:>10} {:>10}", "config", "fences/tx", "nvm/tx");
    for f in fences {
        head.push_str(&format!(" | {:>18}", format!("fence {f} ns")));
    }
    println!("{head}");
    for setup in SETUPS {
        let of = |f: u64| {
            results
                .iter()
                .find(|r| r.setup == setup && r.fence_ns == f)
                .expect("measured")
        };
        let first = of(fences[0]);
        let mut line = format!(
            "  {:<12} {:>10.2} {:>10.2}",
            setup.name(),
            first.fences_per_tx,
            first.nvm_writes_per_tx
        );
        for &f in fences {
            let r = of(f);
            line.push_str(&format!(" | {:>9.2} us {:>5.2}x", r.us_per_tx, r.slowdown));
        }
        println!("{line}");
    }
    println!();
}

fn chart(results: &[Result1], fences: &[u64]) -> String {
    let groups: Vec<String> = fences.iter().map(|f| format!("fence {f} ns")).collect();
    let series: Vec<String> = SETUPS.iter().map(|s| s.name()).collect();
    let value = |g: usize, s: usize| {
        results
            .iter()
            .find(|r| r.setup == SETUPS[s] && r.fence_ns == fences[g])
            .map_or(f64::NAN, |r| r.slowdown)
    };
    svg::grouped_bars(
        "slowdown against fence latency, no-force (REWIND Fig. 10)",
        "time over time at 0 ns fences (log scale)",
        &groups,
        &series,
        value,
    )
}
