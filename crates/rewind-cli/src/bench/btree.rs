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
//!
//! `btree-str` (issue 18) runs the same workload with 32-byte string keys:
//! each u64 key stands for the string `str_key` makes of it (`user`, 12
//! hex digits of a mix of the key, its 16 hex digits). Its systems:
//! `rewind-collections`' `BTreeMap<Vec<u8>, _>` (the key inline in its
//! 40-byte leaf slot) beside Berkeley DB and LMDB (byte keys), SQLite (the
//! BLOB primary key of a `WITHOUT ROWID` table) and redb (`&[u8]` keys).

use std::path::Path;

use rewind::Policy;
use rewind_collections::{BTreeMap, HashMap};

use super::harness::{Ctx, Label, Per, Sample, Timer};
use super::output::Report;
use super::tree::coll::MapStore;
use super::tree::systems::{self, Plan, Subject, PEERS};
use super::tree::workload::{Digest, Model, Op};
use super::tree::Value;
use crate::error::CliError;

/// The systems besides the collections' tree, in the order built.
pub const STR_PEERS: [&str; 4] = ["bdb", "lmdb", "sqlite", "redb"];

/// Update fractions.
pub const FRACTIONS: [f64; 4] = [0.0, 0.1, 0.5, 1.0];

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

pub fn load_all(subjects: &mut [Subject], load: &[Op]) -> Result<(), CliError> {
    for s in subjects.iter_mut() {
        s.store
            .load(load)
            .map_err(|e| CliError::Bench(format!("loading {}: {e}", s.name())))?;
    }
    Ok(())
}

/// `btree`'s systems: the generic tree on every engine (and the peers),
/// then `rewind-collections`' maps, empty: its B+-tree under the default
/// policy and force, its hash map under the default policy.
fn u64_systems(ctx: &Ctx, dir: &Path, plan: &Plan) -> Result<Vec<Subject>, CliError> {
    type Tree = MapStore<BTreeMap<u64, Value>>;
    let tree = |name, policy| Tree::create(ctx, dir, name, policy, plan);
    let hash = MapStore::<HashMap<u64, Value>>::create(ctx, dir, "default", None, plan);
    let mut out = systems::build(ctx, dir, plan)?;
    out.extend([
        Subject::new("coll-btree", "default", tree("default", None)?),
        Subject::new("coll-btree", "force", tree("force", Some(Policy::Force))?),
        Subject::new("coll-hash", "default", hash?),
    ]);
    Ok(out)
}

/// `btree-str`'s systems: the collections' tree with string keys, then
/// the peers (`--features peers`), each empty.
fn str_systems(ctx: &Ctx, dir: &Path, plan: &Plan) -> Result<Vec<Subject>, CliError> {
    let coll = MapStore::<BTreeMap<Vec<u8>, Value>>::create(ctx, dir, "str32", None, plan)?;
    #[allow(unused_mut)]
    let mut out = vec![Subject::new("coll-btree", "default", coll)];
    #[cfg(feature = "peers")]
    out.extend(systems::stores(dir, super::tree::workload::Keys::Str32)?);
    Ok(out)
}

/// What differs between `btree` and `btree-str`.
struct Tree {
    /// The key, as the run's description names it.
    key: &'static str,
    fractions: &'static [f64],
    /// The workload's seed.
    seed: u64,
    systems: fn(&Ctx, &Path, &Plan) -> Result<Vec<Subject>, CliError>,
    bases: &'static [(&'static str, &'static str)],
    peers: &'static [&'static str],
}

pub fn run(ctx: &Ctx, report: &mut Report) -> Result<(), CliError> {
    let t = Tree {
        key: "8-byte key",
        fractions: &FRACTIONS,
        seed: 0x7ee,
        systems: u64_systems,
        bases: &[("nolog", "persist-nolog")],
        peers: &PEERS,
    };
    run_tree(ctx, report, t)
}

pub fn run_str(ctx: &Ctx, report: &mut Report) -> Result<(), CliError> {
    let t = Tree {
        key: "32-byte string key",
        fractions: &[0.0, 1.0],
        seed: 0x57_2ee,
        systems: str_systems,
        bases: &[],
        peers: &STR_PEERS,
    };
    run_tree(ctx, report, t)
}

/// Loads the tree of `btree` or `btree-str` into every system, then at
/// each update fraction measures rounds of operations drawn from one
/// model, reported in µs per operation with ratios to the bases and the
/// peers.
fn run_tree(ctx: &Ctx, report: &mut Report, t: Tree) -> Result<(), CliError> {
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
        "  {n_load} records ({}, 24-byte value), {n_ops} operations per round, each its own \
         transaction; update fractions {:?}; median of {rounds} rounds",
        t.key, t.fractions
    );
    let dir = ctx.scratch()?;
    let mut model = Model::new(t.seed);
    let load = model.load(n_load);
    let mut subjects = (t.systems)(ctx, dir.path(), &Plan::new(space, true))?;
    load_all(&mut subjects, &load)?;
    for &u in t.fractions {
        let labels = (subjects.iter())
            .map(|s| Label::new(s.system, s.config.clone(), format!("update={u}")))
            .collect();
        let input = |_| model.mix(n_ops, u);
        let m = ctx.rounds(labels, &mut subjects, (1, rounds), input, measure)?;
        let per = Per::us("op", "us_per_op", n_ops as u64);
        m.report(report, &per, t.bases, t.peers);
    }
    Ok(())
}
