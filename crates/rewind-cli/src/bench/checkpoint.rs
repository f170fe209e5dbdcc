//! REWIND Fig. 6: the cost of checkpoints against their frequency.
//!
//! Under no-force, each log variant logs the same stream of records
//! (transactions of 8 random 8-byte updates of a persistent array: 8 UPDATE
//! records and an END each) once without any checkpoint and once per
//! checkpoint interval, with a checkpoint every that many records. The
//! overhead is the checkpointed run's time over the run without
//! checkpoints, minus one, in percent. Runs alternate in rounds, the ratio
//! is taken per round against the uncheckpointed run of the same round, and
//! the median is reported. Without checkpoints the log keeps every record,
//! so each pool is sized to hold the whole stream.

use std::path::Path;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{Backend, Counters, LogVariant, NvmLatency, Policy, PoolConfig};

use super::output::{Report, Row};
use super::{median, median_ratio, svg, Ctx, Scale};
use crate::error::CliError;

const LAYOUT: &str = "rewind-bench-checkpoint";
/// Updates (UPDATE records) per transaction; each also logs an END.
const WRITES: u64 = 8;
/// Elements of the persistent array.
const ARRAY: u64 = 1 << 16;

/// Records in the stream, the checkpoint intervals (records between
/// checkpoints) and the rounds.
fn sizes(scale: Scale) -> (u64, Vec<u64>, usize) {
    match scale {
        Scale::Tiny => (2_000, vec![500, 1_000], 1),
        Scale::Quick => (200_000, vec![10_000, 50_000, 100_000], 3),
        Scale::Full => (10_000_000, vec![100_000, 1_000_000, 5_000_000], 3),
    }
}

/// One run's time and counters.
struct Run {
    time: Duration,
    counters: Counters,
    checkpoints: u64,
}

/// Logs `records` records on a fresh no-force pool of `variant`, with a
/// checkpoint every `every` records (none with `None`).
fn run_once(
    dir: &Path,
    variant: LogVariant,
    records: u64,
    every: Option<u64>,
    latency: NvmLatency,
    seed: u64,
) -> Result<Run, CliError> {
    let name = variant.to_string();
    // Room for every record without a checkpoint: a Simple record takes a
    // list node of its own.
    let per_record = if variant == LogVariant::Simple {
        512
    } else {
        128
    };
    let size = (records * per_record + ARRAY * 8 * 4).max(64 << 20);
    let cfg = PoolConfig::default()
        .log(variant)
        .policy(Policy::NoForce)
        .backend(Backend::Pmem)
        .nvm_latency(latency);
    let (mut pool, data) = super::array_pool(dir, &name, LAYOUT, size, &cfg, ARRAY)?;
    // Only the checkpoints this benchmark asks for.
    pool.set_checkpoint_fill(1.0);
    pool.checkpoint().map_err(CliError::rewind("checkpoint"))?;
    let per_tx = WRITES + 1;
    let txs = records / per_tx;
    let between = every.map(|e| (e / per_tx).max(1));
    let mut rng = SmallRng::seed_from_u64(seed);
    let before = pool.counters();
    let mut checkpoints = 0;
    let start = Instant::now();
    for t in 0..txs {
        pool.transaction(|tx| {
            for _ in 0..WRITES {
                tx.write(data.at(rng.gen_range(0..ARRAY)), &t)?;
            }
            Ok::<_, rewind::Error>(())
        })
        // The message is built only on failure (nothing allocates per transaction).
        .map_err(|e| CliError::rewind(format!("{variant} transaction"))(e))?;
        if between.is_some_and(|b| (t + 1) % b == 0) {
            pool.checkpoint()
                .map_err(|e| CliError::rewind("checkpoint")(e))?;
            checkpoints += 1;
        }
    }
    let time = start.elapsed();
    let counters = pool.counters().since(&before);
    drop(pool);
    let _ = std::fs::remove_file(dir.join(format!("{name}.pool")));
    Ok(Run {
        time,
        counters,
        checkpoints,
    })
}

/// What is reported for one variant and interval.
struct Result1 {
    variant: LogVariant,
    /// `None`: no checkpoints.
    every: Option<u64>,
    seconds: f64,
    overhead_pct: f64,
    fences_per_record: f64,
    lines_per_record: f64,
    nvm_writes_per_record: f64,
    checkpoints: u64,
}

pub fn run(ctx: &Ctx, out: &Path) -> Result<(), CliError> {
    let (records, intervals, rounds) = sizes(ctx.scale);
    println!(
        "bench checkpoint (REWIND Fig. 6): {records} log records per run ({WRITES} updates + END per transaction), no-force, with a checkpoint every N records or none; median of {rounds} alternating rounds{}",
        super::tiny_note(ctx.scale)
    );
    println!("  {}", super::latency_line(ctx.latency));
    let dir = ctx.scratch()?;
    println!("  pools in {}", dir.path().display());
    let runs: Vec<Option<u64>> = std::iter::once(None)
        .chain(intervals.iter().map(|&e| Some(e)))
        .collect();
    let bar = super::progress((LogVariant::ONE_LAYER.len() * runs.len() * rounds) as u64);
    let mut results = Vec::new();
    for variant in LogVariant::ONE_LAYER {
        // times[run][round]
        let mut times = vec![Vec::new(); runs.len()];
        let mut last: Vec<Option<Run>> = (0..runs.len()).map(|_| None).collect();
        for round in 0..rounds {
            for (i, every) in runs.iter().enumerate() {
                bar.set_message(format!(
                    "{variant} {}",
                    every.map_or("none".into(), |e| format!("every {e}"))
                ));
                let r = run_once(
                    dir.path(),
                    variant,
                    records,
                    *every,
                    ctx.latency,
                    round as u64,
                )?;
                times[i].push(r.time);
                last[i] = Some(r);
                bar.inc(1);
            }
        }
        for (i, every) in runs.iter().enumerate() {
            let r = last[i].as_ref().expect("every run ran");
            let n = records as f64;
            results.push(Result1 {
                variant,
                every: *every,
                seconds: median(times[i].iter().map(Duration::as_secs_f64).collect()),
                overhead_pct: (median_ratio(&times[i], &times[0]) - 1.0) * 100.0,
                fences_per_record: r.counters.fences as f64 / n,
                lines_per_record: (r.counters.flushed_lines + r.counters.nt_lines) as f64 / n,
                nvm_writes_per_record: r.counters.nvm_writes as f64 / n,
                checkpoints: r.checkpoints,
            });
        }
    }
    bar.finish_and_clear();

    let report = Report {
        bench: "checkpoint".into(),
        rows: rows(&results),
    };
    print_table(&results);
    super::write_results(&report, out, &chart(&results, &intervals))
}

fn param(every: Option<u64>) -> String {
    every.map_or("none".into(), |e| format!("every={e}"))
}

fn rows(results: &[Result1]) -> Vec<Row> {
    let mut rows = Vec::new();
    for r in results {
        for (metric, value, unit) in [
            ("seconds", r.seconds, "s"),
            ("overhead", r.overhead_pct, "%"),
            ("fences_per_record", r.fences_per_record, "count"),
            ("lines_per_record", r.lines_per_record, "lines"),
            ("nvm_writes_per_record", r.nvm_writes_per_record, "writes"),
            ("checkpoints", r.checkpoints as f64, "count"),
        ] {
            rows.push(Row {
                system: "rewind".into(),
                config: format!("{}-{}", r.variant, Policy::NoForce),
                param: param(r.every),
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
    println!(
        "  {:<22} {:>14} {:>10} {:>10} {:>12} {:>12} {:>12} {:>12}",
        "config",
        "checkpoints",
        "seconds",
        "overhead",
        "ckpt count",
        "fences/rec",
        "lines/rec",
        "nvm/rec"
    );
    for r in results {
        println!(
            "  {:<22} {:>14} {:>10.3} {:>9.1}% {:>12} {:>12.2} {:>12.2} {:>12.2}",
            format!("{}-{}", r.variant, Policy::NoForce),
            param(r.every),
            r.seconds,
            r.overhead_pct,
            r.checkpoints,
            r.fences_per_record,
            r.lines_per_record,
            r.nvm_writes_per_record
        );
    }
    println!();
}

fn chart(results: &[Result1], intervals: &[u64]) -> String {
    let groups: Vec<String> = intervals
        .iter()
        .map(|&e| format!("every {e} records"))
        .collect();
    let series: Vec<String> = LogVariant::ONE_LAYER
        .iter()
        .map(|v| v.to_string())
        .collect();
    let value = |g: usize, s: usize| {
        results
            .iter()
            .find(|r| r.variant == LogVariant::ONE_LAYER[s] && r.every == Some(intervals[g]))
            .map_or(f64::NAN, |r| r.overhead_pct)
    };
    svg::grouped_bars(
        "checkpoint overhead vs frequency, no-force (REWIND Fig. 6)",
        "overhead over no checkpoints, % (log scale)",
        &groups,
        &series,
        value,
    )
}
