//! REWIND Fig. 9: the B+-tree with many threads.
//!
//! 1, 2, 4, … threads (up to the machine's parallelism, and at least 2);
//! thread `i` of `T` makes its own mix of lookups and updates, its update
//! fraction spread evenly from 20% (thread 0) to 80% (thread `T-1`), the
//! updates alternating inserts and deletes as in `btree`. Reported: the
//! total operations over the wall time from the start of all threads
//! (one barrier) to the end of the last.
//!
//! rewind isolates nothing (REWIND §4.7: two transactions writing the same
//! bytes must be kept apart by the program), so the tree is shared two
//! ways, both measured:
//!
//! - **own**: one tree per thread, all in one pool. The threads share
//!   what rewind shares: the log, the transaction ids, the allocator, the
//!   domain. This is the measure of rewind's own concurrency, the nearest
//!   to REWIND's, whose tree used the library's fine-grained mechanisms.
//! - **shared**: one tree, one lock held across each whole transaction (a
//!   lookup's too). Correct for any tree, and scaling no better than the
//!   lock: it shows what a program gets without a concurrent tree.
//!
//! - **coll**: `rewind-collections`' `BTreeMap` (system `coll-btree`),
//!   one per thread (own) or ONE shared by every thread (shared) with no
//!   user lock: each operation's transaction takes the map's own lock
//!   (exclusive for an update, shared for a lookup through a
//!   transaction; a lookup outside one, `map.get(&pool, k)`, reads the
//!   committed state), under the default policy (redo) and batch-force.
//!
//! The baselines run the same way (own: one arena or domain per thread;
//! shared: the one tree under the lock). Each thread's keys come from a
//! range of its own, so its answers do not depend on the interleaving:
//! every system's per-thread digests must equal `volatile`'s. The peers do
//! not run here: their concurrency control (BDB's locking, LMDB's single
//! writer, SQLite's and redb's) would be measured, not their logging.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rewind::Policy;
use rewind_collections::BTreeMap;

use super::fresh_pool;
use super::harness::{every_config, on_threads, Agreement, Ctx, Label, Sample, Scale};
use super::output::Report;
use super::tree::coll::MapStore;
use super::tree::mem::{NoLog, Rewind, Volatile};
use super::tree::store::{Store, TreeStore};
use super::tree::systems::LAYOUT;
use super::tree::workload::{Digest, Model, Op};
use super::tree::{MemError, Value};
use crate::error::CliError;

const SEED: u64 = 0x9a;
/// Each thread's keys: a range of 2^56 of its own.
const KEY_SPAN: u64 = 1 << 56;

/// Records loaded in all, operations per thread per round, rounds (full:
/// the paper's 100k operations per thread; quick: rounds of some tens of
/// milliseconds, so that one burst of load on a shared machine moves a
/// round's time little).
fn sizes(scale: Scale) -> (usize, usize, usize) {
    scale.pick((200, 50, 1), (10_000, 30_000, 5), (100_000, 100_000, 5))
}

/// 1, 2, 4, … up to the parallelism, at least 2.
fn thread_counts() -> Vec<usize> {
    let max = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .max(2);
    let mut out = vec![1];
    while out[out.len() - 1] * 2 <= max {
        out.push(out[out.len() - 1] * 2);
    }
    if out[out.len() - 1] != max {
        out.push(max);
    }
    out
}

/// Thread `i` of `t`'s update fraction: 0.2 to 0.8, evenly.
fn fraction(i: usize, t: usize) -> f64 {
    if t == 1 {
        0.5
    } else {
        0.2 + 0.6 * i as f64 / (t - 1) as f64
    }
}

/// How the threads share the tree.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sharing {
    Own,
    Shared,
}

impl Sharing {
    /// The point of `t` threads sharing as `self`.
    fn param(self, t: usize) -> String {
        let name = match self {
            Sharing::Own => "own",
            Sharing::Shared => "shared",
        };
        format!("{name}-tree,threads={t}")
    }
}

/// A count of a pool's counters (a kind of wait, per operation).
type Count = fn(&rewind::Counters) -> u64;

/// A worker thread's failure outside its store.
fn worker(what: &str) -> MemError {
    MemError::Io(std::io::Error::other(format!("a worker thread {what}")))
}

/// A system at one sharing and thread count, loaded: thread `i` runs on
/// `stores[i]`, or with `locked` all on `stores[0]` under one lock.
struct Sys {
    system: &'static str,
    config: String,
    stores: Vec<Box<dyn Store + Send>>,
    /// One lock held across each transaction (shared-tree).
    locked: bool,
    /// Whether the run waits for the write-back (rewind's redo-async).
    sync: bool,
}

/// Applies `ops` in order, each by `apply` (its own transaction): the
/// digest of their answers.
fn apply_all(
    ops: &[Op],
    mut apply: impl FnMut(Op, &mut Digest) -> Result<(), MemError>,
) -> Result<Digest, MemError> {
    let mut d = Digest::default();
    ops.iter().try_for_each(|&op| apply(op, &mut d))?;
    Ok(d)
}

/// The stores `make(i)` made, store `i` loaded with `groups[i]`.
fn loaded<S: Store + Send + 'static>(
    groups: &[&[Op]],
    what: &str,
    mut make: impl FnMut(usize) -> Result<S, CliError>,
) -> Result<Vec<Box<dyn Store + Send>>, CliError> {
    let mut out: Vec<Box<dyn Store + Send>> = Vec::new();
    for (i, ops) in groups.iter().enumerate() {
        let mut s = make(i)?;
        s.load(ops)
            .map_err(CliError::bench(format!("loading {what}")))?;
        out.push(Box::new(s));
    }
    Ok(out)
}

/// Every system for `t` threads sharing as `sharing`: own, a tree (arena,
/// domain, map) per thread loaded with its records (`loads[i]`); shared,
/// one loaded with all.
fn build(
    dir: &Path,
    ctx: &Ctx,
    sharing: Sharing,
    loads: &[Vec<Op>],
    space: u64,
) -> Result<Vec<Sys>, CliError> {
    let t = loads.len();
    let all: Vec<Op> = loads.iter().flatten().copied().collect();
    let (groups, per, locked): (Vec<&[Op]>, _, _) = match sharing {
        Sharing::Own => {
            let per = (space / t as u64).max(16 << 20);
            (loads.iter().map(Vec::as_slice).collect(), per, false)
        }
        Sharing::Shared => (vec![&all], space, true),
    };
    let sys = |system, config: &str, stores, sync| Sys {
        system,
        config: config.into(),
        stores,
        locked,
        sync,
    };
    let volatile = loaded(&groups, "volatile", |_| {
        TreeStore::create(Volatile::new(per)).map_err(CliError::bench("volatile"))
    })?;
    let nolog = loaded(&groups, "nolog", |i| {
        let name = match sharing {
            Sharing::Own => format!("nolog-{i}.pool"),
            Sharing::Shared => "nolog.pool".into(),
        };
        let nolog = NoLog::new(ctx.domain(&dir.join(name), per)?);
        TreeStore::create(nolog).map_err(CliError::bench("nolog"))
    })?;
    let mut out = vec![
        sys("volatile", "dram", volatile, false),
        sys("persist-nolog", "nolog", nolog, false),
    ];
    // The collections' map: the default policy (redo) and batch-force.
    for policy in [Policy::Redo, Policy::Force] {
        let config = format!("batch-{policy}");
        let cfg = ctx.default_config().policy(policy);
        let name = format!("coll-{config}");
        let pool = Arc::new(fresh_pool((dir, &name), LAYOUT, space, &cfg)?);
        let mut maps = Vec::new();
        for ops in &groups {
            let what = CliError::bench(format!("coll-btree/{config}"));
            let mut map = MapStore::<BTreeMap<u64, Value>>::in_pool(pool.clone()).map_err(&what)?;
            map.load(ops).map_err(what)?;
            maps.push(map);
        }
        // Shared: every thread on the one map, with no user lock.
        let stores = (0..t).map(|i| Box::new(maps[i % maps.len()].clone()) as _);
        let stores = stores.collect();
        out.push(Sys {
            locked: false,
            ..sys("coll-btree", &config, stores, false)
        });
    }
    for (config, variant, policy) in every_config() {
        let cfg = ctx.pool_config(variant, policy);
        let pool = Arc::new(fresh_pool((dir, &config), LAYOUT, space, &cfg)?);
        let trees = loaded(&groups, &config, |_| {
            TreeStore::create(Rewind(pool.clone())).map_err(CliError::bench(config.clone()))
        })?;
        out.push(sys("rewind", &config, trees, true));
    }
    Ok(out)
}

impl Sys {
    /// Thread `i` applies `ops[i]`, each operation its own transaction:
    /// the wall time and each thread's digest.
    fn run(&mut self, ops: &[Vec<Op>]) -> Result<(Duration, Vec<Digest>), CliError> {
        let panicked = || worker("panicked");
        let run = if self.locked {
            let one = Mutex::new(&mut self.stores[0]);
            let work = |_: &mut (), i: usize| {
                apply_all(&ops[i], |op, d| {
                    let mut s = one.lock().map_err(|_| worker("found the lock poisoned"))?;
                    s.apply(op, d)
                })
            };
            on_threads(vec![(); ops.len()], Ok, work, panicked)
        } else {
            let work = |s: &mut &mut Box<dyn Store + Send>, i: usize| {
                apply_all(&ops[i], |op, d| s.apply(op, d))
            };
            on_threads(self.stores.iter_mut().collect(), Ok, work, panicked)
        };
        // A run has not finished while redo-async's write-back is behind:
        // its time runs until the write-back is done.
        let run = run.and_then(|run| match self.sync {
            true => self.stores[0]
                .sync()
                .map(|()| (run.first.elapsed(), run.results)),
            false => Ok((run.time, run.results)),
        });
        run.map_err(|e| CliError::Bench(format!("{}/{}: {e}", self.system, self.config)))
    }
}

pub fn run(ctx: &Ctx, report: &mut Report) -> Result<(), CliError> {
    let (n_load, n_ops, rounds) = sizes(ctx.scale);
    let counts = thread_counts();
    println!(
        "  {n_load} records, {n_ops} operations per thread, threads {counts:?}, update fraction \
         20%..80% across threads; own-tree: one tree per thread in one pool; shared-tree: one \
         tree, a lock held across each transaction; every thread count in the same alternating \
         rounds, median of {rounds}"
    );
    let space = ctx.scale.pick(32 << 20, 64 << 20, 256 << 20);
    for sharing in [Sharing::Own, Sharing::Shared] {
        // Every system at every thread count in one set of alternating
        // rounds (a round runs each of them once), so that a burst of load
        // on the shared machine hits every point alike, and each point's
        // scaling over one thread is taken round by round.
        let (mut labels, mut systems, mut models, mut dirs) = (vec![], vec![], vec![], vec![]);
        for (k, &t) in counts.iter().enumerate() {
            let dir = ctx.scratch()?;
            let mut m: Vec<Model> = (0..t)
                .map(|i| Model::in_range(SEED + i as u64, 1 + i as u64 * KEY_SPAN, KEY_SPAN - 1))
                .collect();
            let loads: Vec<Vec<Op>> = m.iter_mut().map(|m| m.load(n_load / t)).collect();
            for s in build(dir.path(), ctx, sharing, &loads, space)? {
                labels.push(Label::new(s.system, s.config.clone(), sharing.param(t)));
                systems.push((k, s));
            }
            models.push(m);
            dirs.push(dir);
        }
        let input = |r: usize| -> (usize, Vec<Vec<Vec<Op>>>) {
            let ops = models.iter_mut().map(|ms| {
                let t = ms.len();
                let each = ms.iter_mut().enumerate();
                each.map(|(i, m)| m.mix(n_ops, fraction(i, t))).collect()
            });
            (r, ops.collect())
        };
        // The answers must agree between the systems at one thread count.
        let agree = Agreement::default();
        let m = ctx.rounds(
            labels,
            &mut systems,
            (1, rounds),
            input,
            |(k, s), (r, ops)| {
                let before = s.stores[0].counters();
                let (time, threads) = s.run(&ops[*k])?;
                let after = s.stores[0].counters();
                // Each thread's digest, folded in thread order.
                let mut d = Digest::default();
                threads.iter().for_each(|x| d.add(x.0));
                agree.check(*r, *k, Some(d.0), || {
                    format!("{}/{} at {} threads", s.system, s.config, ops[*k].len())
                })?;
                Ok(Sample {
                    time,
                    counters: after.zip(before).map(|(a, b)| a.since(&b)),
                    ..Sample::default()
                })
            },
        )?;
        let threads = |i: usize| counts[systems[i].0];
        let per_s = |i| (n_ops * threads(i)) as f64 / m.median(i, |s| s.time.as_secs_f64());
        m.push_each(report, ("ops_per_s", "ops/s"), per_s);
        // Throughput over the same system's at one thread, round by round
        // (its time over this one's, times the threads).
        let one = |i: usize| {
            let l = &m.labels[i];
            (m.labels.iter()).position(|b| {
                b.system == l.system && b.config == l.config && b.param == sharing.param(1)
            })
        };
        let scaling = |i| match one(i) {
            Some(j) => threads(i) as f64 / m.ratio(i, j),
            None => f64::NAN,
        };
        m.push_each(report, ("scaling_vs_1_thread", "ratio"), scaling);
        // Where the threads wait for one another (rewind's pools): a
        // commit for an earlier group's write-back, a transaction for a
        // lock; and of those waits, the ones that slept.
        let m = &m;
        let per_op = |f: Count| {
            // (Summed over the rounds.)
            move |i| match m.counters(i) {
                Some(c) => {
                    let ops = (n_ops * threads(i) * m.samples[i].len()) as f64;
                    f(&c) as f64 / ops
                }
                None => f64::NAN,
            }
        };
        let waits: [(&str, Count); 4] = [
            ("order_waits_per_op", |c| c.order_waits),
            ("order_parks_per_op", |c| c.order_parks),
            ("lock_waits_per_op", |c| c.lock_waits),
            ("lock_sleeps_per_op", |c| c.lock_sleeps),
        ];
        for (metric, count) in waits {
            m.push_each(report, (metric, "count"), per_op(count));
        }
        // The pools close before their scratch directories go.
        drop(systems);
        drop(dirs);
    }
    Ok(())
}
