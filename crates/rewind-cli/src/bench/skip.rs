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

use rewind::{Counters, LogVariant, Policy};

use super::harness::{median, Ctx, Label, Per, Sample};
use super::interleave::{self, Baseline, End, Subject, W};
use super::output::Report;
use crate::error::CliError;

/// The log structures compared, by the paper's name: one layer (the
/// Optimized ADLL, as in the paper's §5.1) and two (the AVL tree over it).
const LAYERS: [(&str, LogVariant); 2] =
    [("1L", LogVariant::Optimized), ("2L", LogVariant::TwoLayer)];
/// The policies: force is the paper's for Figs. 3 right and 4.
const POLICIES: [Policy; 2] = [Policy::Force, Policy::NoForce];

fn median_us(times: impl Iterator<Item = Duration>) -> f64 {
    median(times.map(|t| t.as_secs_f64() * 1e6).collect())
}

/// Lines written back by flushes or written by non-temporal stores.
fn lines(c: &Counters) -> f64 {
    (c.flushed_lines + c.nt_lines) as f64
}

/// One run on a fresh pool: `trials` trials of each kind, alternating
/// (commit, a checkpoint, the no-log baseline, rollback, a checkpoint),
/// then one crash and its recovery. Its time is the median sequence (both
/// transactions' writes and the target's commit); the rest are values.
#[allow(clippy::too_many_arguments)]
fn run_once(
    ctx: &Ctx,
    dir: &Path,
    (name, variant, policy): (&str, LogVariant, Policy),
    skip: u64,
    trials: usize,
    baseline: &Baseline,
    seed: u64,
) -> Result<Sample, CliError> {
    let mut s = Subject::create(ctx, dir, name, (variant, policy), skip)?;
    let (mut commit, mut rollback, mut sequence, mut nolog) = (vec![], vec![], vec![], vec![]);
    let (mut commit_work, mut rollback_work) = (Counters::default(), Counters::default());
    for t in 0..trials as u64 {
        let seed = seed * 1_000 + t;
        let c = interleave::trial(&s, skip, End::Commit, seed)?;
        commit_work = c.end_work;
        commit.push(c.end);
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
    let (recovery, rep) = s.recover(&before, ctx.latency)?;
    drop(s);
    let _ = std::fs::remove_file(dir.join(format!("{name}.pool")));
    let seq = median_us(sequence.into_iter());
    let base = median_us(nolog.into_iter());
    let mut values = vec![
        ("commit_us", median_us(commit.into_iter()), "us"),
        ("rollback_us", median_us(rollback.into_iter()), "us"),
        ("recovery_us", recovery.as_secs_f64() * 1e6, "us"),
        ("ratio_vs_nolog", seq / base, "x"),
        ("nolog_us", base, "us"),
    ];
    values.extend([
        ("commit_fences", commit_work.fences as f64, "count"),
        ("commit_lines", lines(&commit_work), "lines"),
        ("rollback_fences", rollback_work.fences as f64, "count"),
        ("rollback_lines", lines(&rollback_work), "lines"),
        ("recovery_records", rep.records as f64, "count"),
        ("recovery_committed", rep.committed as f64, "count"),
        ("recovery_rolled_back", rep.rolled_back as f64, "count"),
        ("recovery_redone", rep.redone as f64, "count"),
        ("recovery_undone", rep.undone as f64, "count"),
    ]);
    Ok(Sample::of(Duration::from_secs_f64(seq / 1e6), values))
}

pub fn run(ctx: &Ctx, report: &mut Report) -> Result<(), CliError> {
    // Skip-record counts, trials of each kind per run, rounds.
    let (skips, trials, rounds) = ctx.scale.pick(
        (vec![0, 200], 2, 1),
        ((0..=1_000).step_by(200).collect(), 7, 3),
        ((0..=1_000).step_by(100).collect(), 15, 5),
    );
    println!(
        "  a transaction of {W} 8-byte writes with S records of another open transaction after \
         each, S = {skips:?}; commit and rollback (median of {trials} trials per run) and \
         recovery after a crash with the target open; median of {rounds} rounds"
    );
    let dir = ctx.scratch()?;
    let baseline = Baseline::create(ctx, dir.path())?;
    let configs: Vec<(String, LogVariant, Policy)> = (LAYERS.iter())
        .flat_map(|&(layer, v)| POLICIES.map(|p| (format!("{layer}-{p}"), v, p)))
        .collect();
    // (configuration, skip count) by index.
    let mut systems: Vec<_> = (0..skips.len())
        .flat_map(|k| (configs.iter().enumerate()).map(move |(c, (name, ..))| (c, k, name)))
        .map(|(c, k, name)| {
            let param = format!("skip={}", skips[k]);
            (Label::new("rewind", name, param), (c, k))
        })
        .collect();
    let m = ctx.seeded(&mut systems, (0, rounds), |&mut (c, k), r| {
        let (name, v, p) = &configs[c];
        // One seed per round and skip count, the same for every configuration.
        let seed = r * skips.len() as u64 + k as u64;
        let config = (name.as_str(), *v, *p);
        run_once(ctx, dir.path(), config, skips[k], trials, &baseline, seed)
    })?;
    m.report(report, &Per::whole("sequence_us", "us"), &[], &[]);
    // The no-log sequence at each S: the median over every run beside it.
    for (k, chunk) in m.samples.chunks(configs.len()).enumerate() {
        let all = chunk.iter().flatten().map(|s| s.value("nolog_us"));
        let l = Label::new("persist-nolog", "nolog", format!("skip={}", skips[k]));
        report.push(&l, "sequence_us", median(all.collect()), "us");
    }
    Ok(())
}
