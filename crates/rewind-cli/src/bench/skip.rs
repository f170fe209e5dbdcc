//! REWIND Fig. 3 (right) and Fig. 4: commit, rollback and recovery of one
//! transaction against the number of skip records.
//!
//! The workload is `interleave`'s: a target transaction of 16 writes with
//! `S` records of another open transaction logged after each of them. Per
//! configuration and `S`, one pool runs several trials of each kind,
//! alternating (commit, a checkpoint, the no-log baseline, rollback, a
//! checkpoint), then one crash:
//! - **commit**: from the closure's return to `transaction`'s, median of
//!   the trials. Its overhead (Fig. 3 right) is the whole sequence — both
//!   transactions' writes and the target's commit — over the same stores
//!   made without a log (each flushed, one fence at the end), per trial,
//!   median.
//! - **rollback**: the same, the closure returning `Error::Aborted`.
//! - **recovery**: the other transaction commits, the target is left open
//!   and the pool crashes (see `interleave`); the time of `Pool::open`,
//!   which runs recovery, and its report. The target's elements are checked
//!   to be back as they were.
//!
//! Rounds alternate over every configuration and `S`; each figure is the
//! median of the rounds. Under no-force the other transaction's committed
//! records stay in the log until a checkpoint, so recovery meets them: the
//! paper's scenario ("committed ... but without clearing them from the
//! log"). Under force they are cleared when it commits, and recovery finds
//! only the target's. [`LAYERS`] lists the log structures compared.

use std::path::Path;
use std::time::Duration;

use rewind::{Counters, LogVariant, NvmLatency, Policy, RecoveryReport};

use super::interleave::{self, Baseline, End, Subject, W};
use super::output::{Report, Row};
use super::{median, median_ratio, svg, Ctx, Scale};
use crate::error::CliError;

/// The log structures compared, by the paper's name: one layer (the
/// Optimized ADLL, as in the paper's §5.1) and two (the AVL tree over it).
const LAYERS: &[(&str, LogVariant)] =
    &[("1L", LogVariant::Optimized), ("2L", LogVariant::TwoLayer)];
/// The policies: force is the paper's for Figs. 3 right and 4.
const POLICIES: [Policy; 2] = [Policy::Force, Policy::NoForce];

/// Skip-record counts, trials of each kind per run, rounds.
fn sizes(scale: Scale) -> (Vec<u64>, usize, usize) {
    match scale {
        Scale::Tiny => (vec![0, 200], 2, 1),
        Scale::Quick => ((0..=1_000).step_by(200).collect(), 7, 3),
        Scale::Full => ((0..=1_000).step_by(100).collect(), 15, 5),
    }
}

/// A log structure under a policy.
#[derive(Clone, Copy)]
struct Config {
    layer: &'static str,
    variant: LogVariant,
    policy: Policy,
}

impl Config {
    fn name(self) -> String {
        format!("{}-{}", self.layer, self.policy)
    }
}

fn configs() -> Vec<Config> {
    LAYERS
        .iter()
        .flat_map(|&(layer, variant)| {
            POLICIES.map(|policy| Config {
                layer,
                variant,
                policy,
            })
        })
        .collect()
}

/// One run: medians over its trials, and its crash.
struct Run {
    commit: Duration,
    rollback: Duration,
    /// Both transactions' writes and the target's commit.
    sequence: Duration,
    /// The same stores without a log.
    nolog: Duration,
    recovery: Duration,
    report: RecoveryReport,
    /// The persistence work of the last commit and rollback.
    commit_work: Counters,
    rollback_work: Counters,
}

fn median_time(times: Vec<Duration>) -> Duration {
    Duration::from_secs_f64(median(times.iter().map(Duration::as_secs_f64).collect()))
}

fn run_once(
    dir: &Path,
    config: Config,
    skip: u64,
    trials: usize,
    latency: NvmLatency,
    baseline: &Baseline,
    seed: u64,
) -> Result<Run, CliError> {
    let name = config.name();
    let mut s = Subject::create(dir, &name, config.variant, config.policy, skip, latency)?;
    let (mut commit, mut rollback, mut sequence, mut nolog) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut commit_work, mut rollback_work) = (Counters::default(), Counters::default());
    for t in 0..trials as u64 {
        let seed = seed * 1_000 + t;
        let c = interleave::trial(&s, skip, End::Commit, seed)?;
        commit.push(c.end);
        commit_work = c.end_work;
        sequence.push(c.logging() + c.end);
        s.checkpoint()?;
        nolog.push(baseline.run(skip, seed)?);
        let r = interleave::trial(&s, skip, End::Rollback, seed)?;
        rollback.push(r.end);
        rollback_work = r.end_work;
        s.checkpoint()?;
    }
    let before = s.target_values()?;
    interleave::trial(&s, skip, End::Crash, seed * 1_000 + trials as u64)?;
    let (recovery, report) = s.recover(&before, latency)?;
    drop(s);
    let _ = std::fs::remove_file(dir.join(format!("{name}.pool")));
    Ok(Run {
        commit: median_time(commit),
        rollback: median_time(rollback),
        sequence: median_time(sequence),
        nolog: median_time(nolog),
        recovery,
        report,
        commit_work,
        rollback_work,
    })
}

/// What is reported for one configuration and skip count.
struct Result1 {
    config: String,
    skip: u64,
    commit_us: f64,
    rollback_us: f64,
    recovery_us: f64,
    sequence_us: f64,
    overhead: f64,
    report: RecoveryReport,
    commit_work: Counters,
    rollback_work: Counters,
}

pub fn run(ctx: &Ctx, out: &Path) -> Result<(), CliError> {
    let (skips, trials, rounds) = sizes(ctx.scale);
    println!(
        "bench skip (REWIND Fig. 3 right, Fig. 4): a transaction of {W} 8-byte writes with S records of another open transaction after each, S = {}; commit and rollback (median of {trials} trials per run) and recovery after a crash with the target open; median of {rounds} alternating rounds{}",
        skips
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        super::tiny_note(ctx.scale)
    );
    println!("  {}", super::latency_line(ctx.latency));
    let dir = ctx.scratch()?;
    println!("  pools in {}", dir.path().display());
    let configs = configs();
    let baseline = Baseline::create(dir.path(), ctx.latency)?;
    let bar = super::progress((rounds * skips.len() * configs.len()) as u64);
    // runs[config][skip][round]
    let mut runs: Vec<Vec<Vec<Run>>> = configs
        .iter()
        .map(|_| skips.iter().map(|_| Vec::new()).collect())
        .collect();
    for round in 0..rounds {
        for (k, &skip) in skips.iter().enumerate() {
            for (c, &config) in configs.iter().enumerate() {
                bar.set_message(format!("{} S={skip}", config.name()));
                let seed = (round * skips.len() + k) as u64;
                let r = run_once(
                    dir.path(),
                    config,
                    skip,
                    trials,
                    ctx.latency,
                    &baseline,
                    seed,
                )?;
                runs[c][k].push(r);
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    let mut results = Vec::new();
    let mut nolog = Vec::new();
    for (k, &skip) in skips.iter().enumerate() {
        let all: Vec<f64> = runs
            .iter()
            .flat_map(|r| r[k].iter().map(|r| r.nolog.as_secs_f64() * 1e6))
            .collect();
        nolog.push((skip, median(all)));
        for (c, config) in configs.iter().enumerate() {
            let rs = &runs[c][k];
            let us = |f: fn(&Run) -> Duration| {
                median(rs.iter().map(|r| f(r).as_secs_f64() * 1e6).collect())
            };
            let seq: Vec<Duration> = rs.iter().map(|r| r.sequence).collect();
            let base: Vec<Duration> = rs.iter().map(|r| r.nolog).collect();
            let last = rs.last().expect("every run ran");
            results.push(Result1 {
                config: config.name(),
                skip,
                commit_us: us(|r| r.commit),
                rollback_us: us(|r| r.rollback),
                recovery_us: us(|r| r.recovery),
                sequence_us: us(|r| r.sequence),
                overhead: median_ratio(&seq, &base),
                report: last.report,
                commit_work: last.commit_work,
                rollback_work: last.rollback_work,
            });
        }
    }
    let report = Report {
        bench: "skip".into(),
        rows: rows(&results, &nolog),
    };
    print_table(&results, &nolog);
    super::write_results(&report, out, &chart(&results, &skips))
}

fn param(skip: u64) -> String {
    format!("skip={skip}")
}

/// Lines written back by flushes or written by non-temporal stores.
fn lines(c: &Counters) -> f64 {
    (c.flushed_lines + c.nt_lines) as f64
}

fn rows(results: &[Result1], nolog: &[(u64, f64)]) -> Vec<Row> {
    let mut rows = Vec::new();
    for &(skip, us) in nolog {
        rows.push(Row {
            system: "persist-nolog".into(),
            config: "nolog".into(),
            param: param(skip),
            metric: "sequence_us".into(),
            value: us,
            unit: "us".into(),
        });
    }
    for r in results {
        let rep = &r.report;
        for (metric, value, unit) in [
            ("commit_us", r.commit_us, "us"),
            ("rollback_us", r.rollback_us, "us"),
            ("recovery_us", r.recovery_us, "us"),
            ("sequence_us", r.sequence_us, "us"),
            ("ratio_vs_nolog", r.overhead, "x"),
            ("commit_fences", r.commit_work.fences as f64, "count"),
            ("commit_lines", lines(&r.commit_work), "lines"),
            ("rollback_fences", r.rollback_work.fences as f64, "count"),
            ("rollback_lines", lines(&r.rollback_work), "lines"),
            ("recovery_records", rep.records as f64, "count"),
            ("recovery_committed", rep.committed as f64, "count"),
            ("recovery_rolled_back", rep.rolled_back as f64, "count"),
            ("recovery_redone", rep.redone as f64, "count"),
            ("recovery_undone", rep.undone as f64, "count"),
        ] {
            rows.push(Row {
                system: "rewind".into(),
                config: r.config.clone(),
                param: param(r.skip),
                metric: metric.into(),
                value,
                unit: unit.into(),
            });
        }
    }
    rows
}

fn print_table(results: &[Result1], nolog: &[(u64, f64)]) {
    println!();
    println!(
        "  {:<14} {:>6} | {:>10} {:>8} {:>6} | {:>11} {:>6} | {:>11} {:>8} {:>8} {:>8}",
        "config",
        "skip",
        "commit us",
        "x nolog",
        "lines",
        "rollback us",
        "lines",
        "recovery us",
        "records",
        "redone",
        "undone"
    );
    for r in results {
        println!(
            "  {:<14} {:>6} | {:>10.2} {:>7.2}x {:>6} | {:>11.2} {:>6} | {:>11.1} {:>8} {:>8} {:>8}",
            r.config,
            r.skip,
            r.commit_us,
            r.overhead,
            lines(&r.commit_work),
            r.rollback_us,
            lines(&r.rollback_work),
            r.recovery_us,
            r.report.records,
            r.report.redone,
            r.report.undone
        );
    }
    println!(
        "  the no-log sequence ({W} stores, each followed by S): {}",
        nolog
            .iter()
            .map(|(s, us)| format!("{us:.1} us at S={s}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!();
}

fn chart(results: &[Result1], skips: &[u64]) -> String {
    let groups: Vec<String> = skips.iter().map(|s| format!("S={s}")).collect();
    let names: Vec<String> = configs().iter().map(|c| c.name()).collect();
    let kinds = ["commit", "rollback", "recovery"];
    let series: Vec<String> = names
        .iter()
        .flat_map(|n| kinds.map(|k| format!("{n} {k}")))
        .collect();
    let value = |g: usize, s: usize| {
        results
            .iter()
            .find(|r| r.config == names[s / kinds.len()] && r.skip == skips[g])
            .map_or(f64::NAN, |r| match s % kinds.len() {
                0 => r.commit_us,
                1 => r.rollback_us,
                _ => r.recovery_us,
            })
    };
    svg::grouped_bars(
        "one transaction's commit, rollback and recovery vs skip records (REWIND Figs. 3 right, 4)",
        "us (log scale)",
        &groups,
        &series,
        value,
    )
}
