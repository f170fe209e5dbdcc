//! REWIND Fig. 5: total cost against the fraction of transactions
//! recovered.
//!
//! One-layer log (Optimized), force and no-force, 10, 150 and 300 skip
//! records. A run is a sequence of `N` target transactions of
//! `interleave`'s workload (16 writes, `S` records of another transaction
//! after each) on one pool. A fixed schedule, by count, picks which of
//! them are recovered: with a fraction of `k` tenths, transaction `i` is
//! recovered when `(i + 1) k / 10 > i k / 10`, which spreads `N k / 10` of
//! them evenly. A committed one costs its logging (both transactions'
//! writes) and its commit; a recovered one its logging and the recovery of
//! the crash it is left open in (the other transaction committed), which is
//! the time of `Pool::open` on the crash image; the recovered pool carries
//! the sequence on. The total is the sum over the sequence.
//!
//! As in the paper, log clearing is left out under both policies: the other
//! transaction's commit (under force mostly the clearing of its records)
//! and the checkpoint before each trial (no-force) are not timed. Rounds
//! alternate over every configuration; each figure is the median of the
//! rounds, and `ratio_vs_force` is no-force's total over force's in the
//! same round, median.

use std::path::Path;
use std::time::Duration;

use rewind::{LogVariant, NvmLatency, Policy};

use super::interleave::{self, End, Subject, W};
use super::output::{Report, Row};
use super::{median, median_ratio, svg, Ctx, Scale};
use crate::error::CliError;

/// The paper's one-layer configuration.
const LAYER: (&str, LogVariant) = ("1L", LogVariant::Optimized);
const POLICIES: [Policy; 2] = [Policy::Force, Policy::NoForce];
/// Skip records after each of the target's writes.
const SKIPS: [u64; 3] = [10, 150, 300];

/// Fractions recovered (in tenths), transactions per run, rounds.
fn sizes(scale: Scale) -> (Vec<u64>, u64, usize) {
    match scale {
        Scale::Tiny => (vec![0, 5, 10], 2, 1),
        Scale::Quick => (vec![0, 5, 10], 20, 3),
        Scale::Full => ((0..=10).collect(), 20, 5),
    }
}

/// Whether transaction `i` is recovered at `tenths` tenths.
fn is_recovered(i: u64, tenths: u64) -> bool {
    (i + 1) * tenths / 10 > i * tenths / 10
}

fn config_name(policy: Policy) -> String {
    format!("{}-{policy}", LAYER.0)
}

fn fraction(tenths: u64) -> String {
    format!("{:.1}", tenths as f64 / 10.0)
}

/// One run's times and counts.
#[derive(Clone, Copy, Default)]
struct Run {
    logging: Duration,
    commit: Duration,
    recovery: Duration,
    recovered: u64,
    /// Transactions recovery rolled back, over the run's recoveries.
    rolled_back: u64,
    /// Records recovery found, over the run's recoveries.
    records: u64,
}

impl Run {
    fn total(&self) -> Duration {
        self.logging + self.commit + self.recovery
    }
}

fn run_once(
    dir: &Path,
    policy: Policy,
    skip: u64,
    tenths: u64,
    txs: u64,
    latency: NvmLatency,
    seed: u64,
) -> Result<Run, CliError> {
    let name = config_name(policy);
    let mut s = Subject::create(dir, &name, LAYER.1, policy, skip, latency)?;
    let mut run = Run::default();
    for i in 0..txs {
        let seed = seed * 1_000 + i;
        s.checkpoint()?;
        if is_recovered(i, tenths) {
            let before = s.target_values()?;
            let t = interleave::trial(&s, skip, End::Crash, seed)?;
            let (time, report) = s.recover(&before, latency)?;
            run.logging += t.logging();
            run.recovery += time;
            run.recovered += 1;
            run.rolled_back += report.rolled_back;
            run.records += report.records;
        } else {
            let t = interleave::trial(&s, skip, End::Commit, seed)?;
            run.logging += t.logging();
            run.commit += t.end;
        }
    }
    drop(s);
    let _ = std::fs::remove_file(dir.join(format!("{name}.pool")));
    Ok(run)
}

/// What is reported for one configuration, skip count and fraction.
struct Result1 {
    policy: Policy,
    skip: u64,
    tenths: u64,
    total_ms: f64,
    logging_ms: f64,
    commit_ms: f64,
    recovery_ms: f64,
    vs_force: f64,
    run: Run,
}

pub fn run(ctx: &Ctx, out: &Path) -> Result<(), CliError> {
    let (fractions, txs, rounds) = sizes(ctx.scale);
    println!(
        "bench recovered (REWIND Fig. 5): {txs} transactions of {W} 8-byte writes per run, S = {} records of another transaction after each write; a fraction {} of them recovered after a crash, the others committed; one layer (optimized), force and no-force; median of {rounds} alternating rounds{}",
        SKIPS.map(|s| s.to_string()).join(", "),
        fractions
            .iter()
            .map(|&t| fraction(t))
            .collect::<Vec<_>>()
            .join(", "),
        super::tiny_note(ctx.scale)
    );
    println!("  {}", super::latency_line(ctx.latency));
    let dir = ctx.scratch()?;
    println!("  pools in {}", dir.path().display());
    let bar = super::progress((rounds * POLICIES.len() * SKIPS.len() * fractions.len()) as u64);
    // runs[policy][skip][fraction][round]
    let mut runs = vec![vec![vec![Vec::new(); fractions.len()]; SKIPS.len()]; POLICIES.len()];
    for round in 0..rounds {
        for (k, &skip) in SKIPS.iter().enumerate() {
            for (f, &tenths) in fractions.iter().enumerate() {
                for (p, &policy) in POLICIES.iter().enumerate() {
                    bar.set_message(format!(
                        "{} S={skip} recovered {}",
                        config_name(policy),
                        fraction(tenths)
                    ));
                    let seed = ((round * SKIPS.len() + k) * fractions.len() + f) as u64;
                    let r = run_once(dir.path(), policy, skip, tenths, txs, ctx.latency, seed)?;
                    runs[p][k][f].push(r);
                    bar.inc(1);
                }
            }
        }
    }
    bar.finish_and_clear();
    let mut results = Vec::new();
    for (p, &policy) in POLICIES.iter().enumerate() {
        for (k, &skip) in SKIPS.iter().enumerate() {
            for (f, &tenths) in fractions.iter().enumerate() {
                let rs: &[Run] = &runs[p][k][f];
                let ms = |f: fn(&Run) -> Duration| {
                    median(rs.iter().map(|r| f(r).as_secs_f64() * 1e3).collect())
                };
                let totals: Vec<Duration> = rs.iter().map(Run::total).collect();
                let force: Vec<Duration> = runs[0][k][f].iter().map(Run::total).collect();
                results.push(Result1 {
                    policy,
                    skip,
                    tenths,
                    total_ms: ms(Run::total),
                    logging_ms: ms(|r| r.logging),
                    commit_ms: ms(|r| r.commit),
                    recovery_ms: ms(|r| r.recovery),
                    vs_force: median_ratio(&totals, &force),
                    run: rs[0],
                });
            }
        }
    }
    let report = Report {
        bench: "recovered".into(),
        rows: rows(&results),
    };
    print_table(&results, &fractions);
    super::write_results(&report, out, &chart(&results, &fractions))
}

fn param(skip: u64, tenths: u64) -> String {
    format!("skip={skip}/recovered={}", fraction(tenths))
}

fn rows(results: &[Result1]) -> Vec<Row> {
    let mut rows = Vec::new();
    for r in results {
        for (metric, value, unit) in [
            ("total_ms", r.total_ms, "ms"),
            ("logging_ms", r.logging_ms, "ms"),
            ("commit_ms", r.commit_ms, "ms"),
            ("recovery_ms", r.recovery_ms, "ms"),
            ("ratio_vs_force", r.vs_force, "x"),
            ("recovered", r.run.recovered as f64, "count"),
            ("rolled_back", r.run.rolled_back as f64, "count"),
            ("recovery_records", r.run.records as f64, "count"),
        ] {
            rows.push(Row {
                system: "rewind".into(),
                config: config_name(r.policy),
                param: param(r.skip, r.tenths),
                metric: metric.into(),
                value,
                unit: unit.into(),
            });
        }
    }
    rows
}

fn of(results: &[Result1], policy: Policy, skip: u64, tenths: u64) -> &Result1 {
    results
        .iter()
        .find(|r| r.policy == policy && r.skip == skip && r.tenths == tenths)
        .expect("measured")
}

fn print_table(results: &[Result1], fractions: &[u64]) {
    println!();
    let mut head = format!("  {:<14} {:>5}", "config", "skip");
    for &t in fractions {
        head.push_str(&format!(" | {:>17}", format!("recovered {}", fraction(t))));
    }
    println!("{head}   (total ms, x force)");
    for policy in POLICIES {
        for skip in SKIPS {
            let mut line = format!("  {:<14} {:>5}", config_name(policy), skip);
            for &t in fractions {
                let r = of(results, policy, skip, t);
                line.push_str(&format!(" | {:>9.2} {:>6.2}x", r.total_ms, r.vs_force));
            }
            println!("{line}");
        }
    }
    let (first, last) = (fractions[0], fractions[fractions.len() - 1]);
    for skip in SKIPS {
        let at = |t| of(results, Policy::NoForce, skip, t).vs_force;
        println!(
            "  no-force over force, S={skip}: {:.2}x with {} recovered, {:.2}x with {}",
            at(first),
            fraction(first),
            at(last),
            fraction(last)
        );
    }
    println!();
}

fn chart(results: &[Result1], fractions: &[u64]) -> String {
    let groups: Vec<String> = fractions.iter().map(|&t| fraction(t)).collect();
    let cases: Vec<(Policy, u64)> = POLICIES
        .iter()
        .flat_map(|&p| SKIPS.map(|s| (p, s)))
        .collect();
    let series: Vec<String> = cases
        .iter()
        .map(|&(p, s)| format!("{} S={s}", config_name(p)))
        .collect();
    let value = |g: usize, s: usize| {
        let (policy, skip) = cases[s];
        of(results, policy, skip, fractions[g]).total_ms
    };
    svg::grouped_bars(
        "total cost vs fraction of transactions recovered (REWIND Fig. 5)",
        "logging + commit or recovery, ms (log scale)",
        &groups,
        &series,
        value,
    )
}
