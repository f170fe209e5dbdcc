//! REWIND Fig. 7: the B+-tree against the fraction of updates.
//!
//! One B+-tree implementation (`tree`), loaded with 100k records of 32
//! bytes (an 8-byte key, a 24-byte value), then a mix of lookups and
//! updates at update fractions 0, 0.1, 0.5 and 1, the updates split evenly
//! between inserts of new keys and deletes of present ones. Each operation
//! is its own durable transaction (a lookup a read transaction). Systems:
//! the tree in DRAM (`volatile`), with durable stores and no log
//! (`persist-nolog`), in rewind in every log variant × policy, and with
//! `--features peers` on libpmemobj (`pmdk`), beside Berkeley DB, LMDB,
//! SQLite and redb with their own trees; and `rewind-collections`' own
//! `BTreeMap` (`coll-btree`: unsorted leaves with fingerprints, under the
//! default policy and under redo) and `HashMap` (`coll-hash`, MARS Fig. 7's
//! hash table beside the tree). Every system sits on the same tmpfs.
//!
//! Fair measurement, as in `overhead`: one workload model draws each
//! round's operations before the round (every lookup hits, every update
//! succeeds), every system applies the same sequence, the systems take
//! turns round by round, each fraction starts with one unmeasured warm-up
//! round of the same length, and the median round counts. Ratios are taken
//! per round against the system measured beside it and the median ratio
//! reported. Each system's answers are folded into a digest, and the run
//! fails if two systems' digests differ.
//!
//! A round's time runs until every committed value is in place: under
//! rewind's redo-async a commit returns before its values are written back
//! (by a thread of the pool), so the round ends with `Pool::sync`, and the
//! time until the last commit returned is reported beside it.

use std::path::Path;

use super::harness::{Bench, Ctx, Headline, Label, Per, Sample, Timer};
use super::output::{Chart, Col, Report};
use super::tree::systems::{self, built, Plan, Subject, PEERS};
use super::tree::workload::{Digest, Model, Op};
use crate::error::CliError;

pub const BENCH: Bench = Bench {
    name: "btree",
    about: "REWIND Fig. 7: a B+-tree of 32-byte records against the fraction of updates",
    run,
    table: &[
        Col("us_per_op", "us/op", 3),
        Col("commit_us_per_op", "commit us", 3),
        Col("ratio_vs_nolog", "x nolog", 2),
        Col("fences_per_op", "fences", 2),
        Col("flushes_per_op", "lines", 2),
        Col("speed_vs_pmdk", "vs pmdk", 2),
        Col("speed_vs_bdb", "vs bdb", 2),
        Col("speed_vs_lmdb", "vs lmdb", 2),
        Col("speed_vs_sqlite", "vs sqlite", 2),
        Col("speed_vs_redb", "vs redb", 2),
    ],
    chart: Chart::costs(
        "B+-tree: time per operation against update fraction (REWIND Fig. 7)",
        "microseconds per operation (log scale)",
        &["us_per_op"],
    ),
    peers: &PEERS,
    paper: "REWIND Fig. 7: at 100 % updates REWIND's B+-tree is within a few percent of the non-recoverable tree, 105× faster than Berkeley DB, 85× than Stasis and 205× than Shore-MT.",
    notes: "The same tree runs on every engine that offers raw memory (DRAM, durable stores, rewind, libpmemobj); Berkeley DB, LMDB, SQLite and redb use their own trees, each operation its own durable transaction. Every system applies the same operations and its answers must agree with the others'.",
    headlines: &[Headline {
        what: "B+-tree, 100 % updates",
        param: Some("update=1"),
        metric: "us_per_op",
        unit: "us/op",
        higher_is_better: false,
        against: &PEERS,
    }],
};

/// Update fractions.
pub const FRACTIONS: [f64; 4] = [0.0, 0.1, 0.5, 1.0];
/// The workload's seed.
const SEED: u64 = 0x7ee;

/// Applies `ops` to `s`, each its own transaction, then waits for any
/// write-back; folds the answers into the sample's digest.
pub fn measure(s: &mut Subject, ops: &Vec<Op>) -> Result<Sample, CliError> {
    let mut d = Digest::default();
    let timer = Timer::start(s.store.counters());
    for &op in ops {
        if let Err(e) = s.store.apply(op, &mut d) {
            return Err(CliError::Bench(format!("{}: {op:?}: {e}", s.name())));
        }
    }
    let commits = timer.elapsed();
    s.store
        .sync()
        .map_err(|e| CliError::Bench(format!("{}: sync: {e}", s.name())))?;
    let mut sample = timer.stop(s.store.counters());
    sample.digest = Some(d.0);
    // Redo-async's commits return before its write-back is done.
    sample.commits = s.config.ends_with("redo-async").then_some(commits);
    Ok(sample)
}

/// Builds the systems in `dir` and loads `load` into each.
pub fn loaded(ctx: &Ctx, dir: &Path, plan: &Plan, load: &[Op]) -> Result<Vec<Subject>, CliError> {
    let mut subjects = systems::build(ctx, dir, plan)?;
    load_all(&mut subjects, load)?;
    Ok(subjects)
}

/// Loads `load` into every subject.
pub fn load_all(subjects: &mut [Subject], load: &[Op]) -> Result<(), CliError> {
    for s in subjects.iter_mut() {
        s.store
            .load(load)
            .map_err(|e| CliError::Bench(format!("loading {}: {e}", s.name())))?;
    }
    Ok(())
}

/// `rewind-collections`' maps, empty: its B+-tree under the default
/// policy and force, its hash map under the default policy.
fn collections(ctx: &Ctx, dir: &Path, plan: &Plan) -> Result<Vec<Subject>, CliError> {
    use super::tree::coll::MapStore;
    use super::tree::Value;
    use rewind::Policy;
    use rewind_collections::{BTreeMap, HashMap};
    type Tree = MapStore<BTreeMap<u64, Value>>;
    let tree = |name, policy| Tree::create(ctx, dir, name, policy, plan).map_err(built("a map"));
    let hash = MapStore::<HashMap<u64, Value>>::create(ctx, dir, "default", None, plan);
    Ok(vec![
        Subject::new("coll-btree", "default", tree("default", None)?),
        Subject::new("coll-btree", "force", tree("force", Some(Policy::Force))?),
        Subject::new("coll-hash", "default", hash.map_err(built("a map"))?),
    ])
}

fn run(ctx: &Ctx, report: &mut Report) -> Result<(), CliError> {
    // Records loaded, operations per round, measured rounds, each tree's
    // space (the loaded tree is ~7 MB at 100k records; the rest is room
    // for rewind's log and the allocators). Quick: half the paper's tree;
    // full: 5 rounds of 40k, the paper's 200k operations per fraction.
    let (n_load, n_ops, rounds, space) = ctx.scale.pick(
        (300, 100, 2, 16 << 20),
        (50_000, 3_000, 3, 96 << 20),
        (100_000, 40_000, 5, 256 << 20),
    );
    // On a disk (msync) every fence is a device flush, a thousand times a
    // persistent-memory one, and the undo policies fence several times per
    // insert: a tenth of the records and operations (a tree one level
    // lower) ends the run in minutes rather than hours.
    let (n_load, n_ops) = if ctx.backend == rewind::Backend::Msync {
        ((n_load / 10).max(300), (n_ops / 10).max(100))
    } else {
        (n_load, n_ops)
    };
    println!(
        "  {n_load} records (8-byte key, 24-byte value), {n_ops} operations per round, each its own \
         transaction; update fractions {FRACTIONS:?}; median of {rounds} rounds"
    );
    let dir = ctx.scratch()?;
    let plan = Plan::new(space, true);
    let mut model = Model::new(SEED);
    let load = model.load(n_load);
    let mut subjects = systems::build(ctx, dir.path(), &plan)?;
    subjects.extend(collections(ctx, dir.path(), &plan)?);
    load_all(&mut subjects, &load)?;
    let bases = [("nolog", "persist-nolog")];
    fractions(
        ctx,
        report,
        &mut subjects,
        &mut model,
        &FRACTIONS,
        (n_ops, rounds),
        (&bases, &PEERS),
    )
}

/// The measurement of `bench btree` and `btree-str`: at each update
/// fraction of `fracs`, `n_ops` operations drawn from `model` per round, `rounds`
/// alternating rounds over `subjects`, reported in µs per operation with
/// ratios to `bases` and the `peers`.
pub fn fractions(
    ctx: &Ctx,
    report: &mut Report,
    subjects: &mut [Subject],
    model: &mut Model,
    fracs: &[f64],
    (n_ops, rounds): (usize, usize),
    (bases, peers): (&[(&str, &str)], &[&str]),
) -> Result<(), CliError> {
    for &u in fracs {
        let labels = (subjects.iter())
            .map(|s| Label::new(s.system, s.config.clone(), format!("update={u}")))
            .collect();
        let m = ctx.rounds(
            labels,
            subjects,
            (1, rounds),
            |_| model.mix(n_ops, u),
            measure,
        )?;
        let per = Per::us("op", "us_per_op", n_ops as u64);
        m.report(report, &per, bases, peers);
    }
    Ok(())
}
