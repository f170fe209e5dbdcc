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
//! per round, median of the rounds. `--configs` keeps the setups of the
//! variants it names under no-force (`batch-no-force`: every group size).

use std::path::Path;

use rewind::{LogVariant, NvmLatency, Policy};

use super::harness::{every_config, Ctx, Label, Per, Sample};
use super::output::Report;
use crate::error::CliError;

/// Updates per transaction.
const K: u64 = 64;

/// The configurations: a log variant and its group size (Optimized has none).
const SETUPS: [(LogVariant, u32); 5] = [
    (LogVariant::Optimized, 8),
    (LogVariant::Batch, 8),
    (LogVariant::Batch, 16),
    (LogVariant::Batch, 32),
    (LogVariant::Batch, 64),
];

/// The setups `--configs` keeps (all of them without it): those whose
/// variant it names under no-force.
fn chosen_setups() -> Vec<(LogVariant, u32)> {
    let kept: Vec<LogVariant> = (every_config())
        .filter(|c| c.2 == Policy::NoForce)
        .map(|c| c.1)
        .collect();
    SETUPS.into_iter().filter(|s| kept.contains(&s.0)).collect()
}

/// Why `--configs` leaves this benchmark nothing to run (`None`: it runs).
pub fn nothing_chosen() -> Option<String> {
    nothing_in(&chosen_setups())
}

/// Why `setups`, the ones `--configs` keeps, are nothing to run.
fn nothing_in(setups: &[(LogVariant, u32)]) -> Option<String> {
    setups.is_empty().then(|| {
        let (o, b, p) = (LogVariant::Optimized, LogVariant::Batch, Policy::NoForce);
        format!("--configs names none of fence's configurations: {o}-{p} and {b}-{p}")
    })
}

fn name((variant, group): (LogVariant, u32)) -> String {
    match variant {
        LogVariant::Batch => format!("batch-{group}"),
        v => v.to_string(),
    }
}

/// Runs `txs` transactions of `K` updates on a fresh pool.
fn run_once(
    ctx: &Ctx,
    dir: &Path,
    setup: (LogVariant, u32),
    fence_ns: u64,
    txs: u64,
    seed: u64,
) -> Result<Sample, CliError> {
    let name = name(setup);
    // Every record stays (no checkpoints): room for all of them.
    let cfg = (ctx.pool_config(setup.0, Policy::NoForce))
        .group_size(setup.1)
        .nvm_latency(NvmLatency::new(ctx.latency.write_ns, fence_ns));
    let log = txs * (K + 1) * 160;
    super::random_writes((dir, &name), &cfg, log, (txs, K), seed, |_, _| Ok(()))
}

pub fn run(ctx: &Ctx, report: &mut Report) -> Result<(), CliError> {
    // Transactions per run, fence latencies, rounds.
    let (txs, fences, rounds) = ctx.scale.pick(
        (10, vec![0, 500], 1),
        (1_500, vec![0, 250, 1_000, 2_000], 3),
        (15_000, vec![0, 250, 500, 1_000, 2_000], 5),
    );
    println!(
        "  {txs} transactions of {K} random 8-byte updates per run, no-force, no checkpoints; \
         fence latency {fences:?} ns (--fence-ns is ignored); median of {rounds} rounds"
    );
    let setups = chosen_setups();
    if let Some(why) = nothing_in(&setups) {
        return Err(CliError::Usage(why));
    }
    let dir = ctx.scratch()?;
    let label = |s, f| {
        let config = format!("{}-{}", name(s), Policy::NoForce);
        Label::new("rewind", config, format!("fence={f}ns"))
    };
    let mut systems: Vec<_> = (fences.iter())
        .flat_map(|&f| setups.iter().map(move |&s| (label(s, f), (s, f))))
        .collect();
    let m = ctx.seeded(&mut systems, (0, rounds), |&mut (s, f), seed| {
        run_once(ctx, dir.path(), s, f, txs, seed)
    })?;
    m.report(report, &Per::us("tx", "us_per_tx", txs), &[], &[]);
    // Against the same configuration at the first fence latency (0).
    m.push_each(report, ("slowdown", "x"), |i| m.ratio(i, i % setups.len()));
    Ok(())
}
