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
//! and the checkpoint before each trial (no-force) are not timed. Each figure
//! is the median of the rounds, and `ratio_vs_force` is no-force's total
//! over force's in the same round, median.

use std::path::Path;
use std::time::Duration;

use rewind::{LogVariant, Policy};

use super::harness::{Ctx, Label, Per, Sample};
use super::interleave::{self, End, Subject, W};
use super::output::Report;
use crate::error::CliError;

/// The paper's one-layer configuration.
const LAYER: (&str, LogVariant) = ("1L", LogVariant::Optimized);
const POLICIES: [Policy; 2] = [Policy::Force, Policy::NoForce];
/// Skip records after each of the target's writes.
const SKIPS: [u64; 3] = [10, 150, 300];

/// Whether transaction `i` is recovered at `tenths` tenths.
fn is_recovered(i: u64, tenths: u64) -> bool {
    (i + 1) * tenths / 10 > i * tenths / 10
}

fn fraction(tenths: u64) -> String {
    format!("{:.1}", tenths as f64 / 10.0)
}

/// One run of `txs` transactions on a fresh pool; its time is the total.
fn run_once(
    ctx: &Ctx,
    dir: &Path,
    (policy, skip, tenths): (Policy, u64, u64),
    txs: u64,
    seed: u64,
) -> Result<Sample, CliError> {
    let name = format!("{}-{policy}", LAYER.0);
    let mut s = Subject::create(ctx, dir, &name, (LAYER.1, policy), skip)?;
    let (mut logging, mut commit, mut recovery) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let (mut recovered, mut rolled_back, mut records) = (0, 0, 0);
    for i in 0..txs {
        let seed = seed * 1_000 + i;
        s.checkpoint()?;
        if is_recovered(i, tenths) {
            let before = s.target_values()?;
            let t = interleave::trial(&s, skip, End::Crash, seed)?;
            let (time, report) = s.recover(&before, ctx.latency)?;
            logging += t.logging();
            recovery += time;
            recovered += 1;
            rolled_back += report.rolled_back;
            records += report.records;
        } else {
            let t = interleave::trial(&s, skip, End::Commit, seed)?;
            logging += t.logging();
            commit += t.end;
        }
    }
    drop(s);
    let _ = std::fs::remove_file(dir.join(format!("{name}.pool")));
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let values = vec![
        ("logging_ms", ms(logging), "ms"),
        ("commit_ms", ms(commit), "ms"),
        ("recovery_ms", ms(recovery), "ms"),
        ("recovered", recovered as f64, "count"),
        ("rolled_back", rolled_back as f64, "count"),
        ("recovery_records", records as f64, "count"),
    ];
    Ok(Sample::of(logging + commit + recovery, values))
}

pub fn run(ctx: &Ctx, report: &mut Report) -> Result<(), CliError> {
    // Fractions recovered (in tenths), transactions per run, rounds.
    let (fractions, txs, rounds) = ctx.scale.pick(
        (vec![0, 5, 10], 2, 1),
        (vec![0, 5, 10], 20, 3),
        ((0..=10).collect(), 20, 5),
    );
    println!(
        "  {txs} transactions of {W} 8-byte writes per run, S = {SKIPS:?} records of another \
         transaction after each write; tenths {fractions:?} of them recovered after a crash, \
         the others committed; one layer (optimized); median of {rounds} rounds"
    );
    let dir = ctx.scratch()?;
    // (skip, fraction, policy) by index, the policy innermost.
    let point = |k: usize, f: usize, p: Policy| {
        let param = format!("skip={}/recovered={}", SKIPS[k], fraction(fractions[f]));
        let label = Label::new("rewind", format!("{}-{p}", LAYER.0), param);
        (label, (k, f, p))
    };
    let mut systems: Vec<_> = (0..SKIPS.len())
        .flat_map(|k| (0..fractions.len()).flat_map(move |f| POLICIES.map(|p| point(k, f, p))))
        .collect();
    let m = ctx.seeded(&mut systems, (0, rounds), |&mut (k, f, p), r| {
        let seed = (r * SKIPS.len() as u64 + k as u64) * fractions.len() as u64 + f as u64;
        run_once(ctx, dir.path(), (p, SKIPS[k], fractions[f]), txs, seed)
    })?;
    m.report(report, &Per::whole("total_ms", "ms"), &[], &[]);
    // Force runs beside it, just before.
    let force = |i: usize| m.ratio(i, i - i % POLICIES.len());
    m.push_each(report, ("ratio_vs_force", "x"), force);
    Ok(())
}
