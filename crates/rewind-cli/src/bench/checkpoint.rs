//! REWIND Fig. 6: the cost of checkpoints against their frequency.
//!
//! Under no-force, each log variant logs the same stream of records
//! (transactions of 8 random 8-byte updates of a persistent array: 8 UPDATE
//! records and an END each) once without any checkpoint and once per
//! checkpoint interval, with a checkpoint every that many records. The
//! overhead is the checkpointed run's time over the run without
//! checkpoints, minus one, in percent (per round, median). Without checkpoints the log keeps every record,
//! so each pool is sized to hold the whole stream.

use std::path::Path;

use rewind::{LogVariant, Policy};

use super::harness::{Ctx, Label, Per, Sample};
use super::output::Report;
use crate::error::CliError;

/// Updates (UPDATE records) per transaction; each also logs an END.
const WRITES: u64 = 8;

/// Logs `records` records on a fresh no-force pool of `variant`, with a
/// checkpoint every `every` records (none with `None`).
fn run_once(
    ctx: &Ctx,
    dir: &Path,
    variant: LogVariant,
    records: u64,
    every: Option<u64>,
    seed: u64,
) -> Result<Sample, CliError> {
    let name = variant.to_string();
    // Room for every record without a checkpoint: a Simple record takes a
    // list node of its own.
    let per_record = if variant == LogVariant::Simple {
        512
    } else {
        128
    };
    let cfg = ctx.pool_config(variant, Policy::NoForce);
    let txs = records / (WRITES + 1);
    let between = every.map(|e| (e / (WRITES + 1)).max(1));
    let mut checkpoints = 0;
    // Only the checkpoints this benchmark asks for.
    let work = (txs, WRITES);
    let log = records * per_record;
    let mut sample = super::random_writes((dir, &name), &cfg, log, work, seed, |pool, t| {
        if between.is_some_and(|b| (t + 1) % b == 0) {
            checkpoints += 1;
            pool.checkpoint()
                .map_err(|e| CliError::rewind("checkpoint")(e))?;
        }
        Ok(())
    })?;
    (sample.values).push(("checkpoints", checkpoints as f64, "count"));
    Ok(sample)
}

pub fn run(ctx: &Ctx, report: &mut Report) -> Result<(), CliError> {
    // Records in the stream, the checkpoint intervals (records between
    // checkpoints) and the rounds.
    let (records, intervals, rounds) = ctx.scale.pick(
        (2_000, vec![500, 1_000], 1),
        (200_000, vec![10_000, 50_000, 100_000], 3),
        (10_000_000, vec![100_000, 1_000_000, 5_000_000], 3),
    );
    println!(
        "  {records} log records per run ({WRITES} updates + END per transaction), a checkpoint \
         every {intervals:?} records or none; median of {rounds} rounds"
    );
    let dir = ctx.scratch()?;
    for variant in LogVariant::ONE_LAYER {
        let config = format!("{variant}-{}", Policy::NoForce);
        let run = |e: Option<u64>| {
            let param = e.map_or("none".into(), |e| format!("every={e}"));
            (Label::new("rewind", &config, param), e)
        };
        let mut runs: Vec<_> = std::iter::once(None)
            .chain(intervals.iter().map(|&e| Some(e)))
            .map(run)
            .collect();
        let m = ctx.seeded(&mut runs, (0, rounds), |every, seed| {
            run_once(ctx, dir.path(), variant, records, *every, seed)
        })?;
        // The run's whole time; counters per record.
        let per = Per {
            ops: records as f64,
            counters: Some("record"),
            ..Per::whole("seconds", "s")
        };
        m.report(report, &per, &[], &[]);
        m.push_each(report, ("overhead", "%"), |i| (m.ratio(i, 0) - 1.0) * 100.0);
    }
    Ok(())
}
