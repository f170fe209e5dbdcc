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
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use rewind::{LogVariant, Policy, Pool, PoolConfig};
use rewind_collections::BTreeMap;

use super::harness::{Bench, Ctx, Headline, Label, Sample, Scale};
use super::output::{Chart, Col, Report};
use super::tree::mem::{NoLog, Rewind, Volatile};
use super::tree::store::{Store, TreeStore};
use super::tree::systems::LAYOUT;
use super::tree::workload::value_of;
use super::tree::workload::{Digest, Model, Op};
use super::tree::{BTree, MemError, Value};
use crate::error::CliError;

pub const BENCH: Bench = Bench {
    name: "threads",
    about: "REWIND Fig. 9: the B+-tree with many threads",
    run,
    table: &[Col("ops_per_s", "ops/s", 0)],
    chart: Chart {
        title: "B+-tree: throughput against threads (REWIND Fig. 9)",
        y_label: "operations per second (log scale)",
        metrics: &["ops_per_s"],
        log_y: true,
        higher_is_better: true,
    },
    peers: &[],
    paper: "REWIND Fig. 9: REWIND's throughput scales with threads past three; Berkeley DB and Stasis grow linearly but stay far below.",
    notes: "Own-tree gives each thread a tree in one shared pool (the log, allocator and domain are shared); shared-tree puts one lock around every transaction. On a machine without idle cores no system can scale, so compare the systems at one thread count rather than along the axis.",
    headlines: &[Headline {
        what: "B+-tree, one tree per thread",
        param: Some("own-tree,threads=2"),
        metric: "ops_per_s",
        unit: "ops/s",
        higher_is_better: true,
        against: &["persist-nolog"],
    }],
};

const SEED: u64 = 0x9a;
/// Each thread's keys: a range of 2^56 of its own.
const KEY_SPAN: u64 = 1 << 56;

/// Records loaded in all, operations per thread per round, rounds (full:
/// the paper's 100k operations per thread).
fn sizes(scale: Scale) -> (usize, usize, usize) {
    scale.pick((200, 50, 1), (10_000, 1_000, 3), (100_000, 100_000, 3))
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
    fn name(self) -> &'static str {
        match self {
            Sharing::Own => "own",
            Sharing::Shared => "shared",
        }
    }
}

fn param(sharing: Sharing, t: usize) -> String {
    format!("{}-tree,threads={t}", sharing.name())
}

/// A worker thread's failure outside its store.
fn worker(what: &str) -> MemError {
    MemError::Io(std::io::Error::other(format!("a worker thread {what}")))
}

/// What a thread returns: when it started and ended, and its digest.
type Span = (Instant, Instant, Digest);

/// A run's wall time, each thread's digest, and when the first thread
/// started.
type Run = (Duration, Vec<Digest>, Instant);

/// The wall time from the first thread's start to the last one's end, and
/// each thread's digest.
fn span(results: impl Iterator<Item = Result<Span, MemError>>) -> Result<Run, MemError> {
    let spans: Vec<Span> = results.collect::<Result<_, _>>()?;
    let first = spans.iter().map(|s| s.0).min().unwrap_or_else(Instant::now);
    let last = spans.iter().map(|s| s.1).max().unwrap_or(first);
    Ok((
        last - first,
        spans.into_iter().map(|s| s.2).collect(),
        first,
    ))
}

/// Runs thread `i`'s operations `ops[i]` with `workers[i]`, every thread
/// starting at one barrier; the wall time and each thread's digest.
fn threads<T: Send>(
    workers: Vec<T>,
    ops: &[Vec<Op>],
    apply: impl Fn(&mut T, Op, &mut Digest) -> Result<(), MemError> + Sync,
) -> Result<Run, MemError> {
    let barrier = Barrier::new(workers.len() + 1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (workers.into_iter().zip(ops))
            .map(|(mut w, ops)| {
                let (barrier, apply) = (&barrier, &apply);
                scope.spawn(move || {
                    let mut d = Digest::default();
                    barrier.wait();
                    let start = Instant::now();
                    for &op in ops {
                        apply(&mut w, op, &mut d)?;
                    }
                    Ok::<_, MemError>((start, Instant::now(), d))
                })
            })
            .collect();
        barrier.wait();
        let joined = handles.into_iter().map(|h| h.join());
        span(joined.map(|r| r.unwrap_or_else(|_| Err(worker("panicked")))))
    })
}

/// Each thread on its own store.
fn own_run<S: Store + Send>(stores: &mut [S], ops: &[Vec<Op>]) -> Result<Run, MemError> {
    threads(stores.iter_mut().collect(), ops, |s, op, d| s.apply(op, d))
}

/// Every thread on the one store, each operation under its lock.
fn shared_run<S: Store + Send>(store: &Mutex<S>, ops: &[Vec<Op>]) -> Result<Run, MemError> {
    threads(vec![store; ops.len()], ops, |m, op, d| {
        let mut s = m.lock().map_err(|_| worker("found the lock poisoned"))?;
        s.apply(op, d)
    })
}

/// A system at one sharing and thread count, loaded.
enum Setup {
    VolatileOwn(Vec<TreeStore<Volatile>>),
    VolatileShared(Mutex<TreeStore<Volatile>>),
    NoLogOwn(Vec<TreeStore<NoLog>>),
    NoLogShared(Mutex<TreeStore<NoLog>>),
    /// One pool; the trees' meta blocks (one per thread, or one).
    Rewind {
        pool: Box<Pool>,
        trees: Vec<BTree>,
    },
    /// One pool; `rewind-collections` maps (one per thread, or one shared
    /// with no user lock).
    Coll {
        pool: Box<Pool>,
        maps: Vec<BTreeMap<u64, Value>>,
    },
}

fn coll(e: rewind_collections::Error) -> MemError {
    match e {
        rewind_collections::Error::Pool(e) => MemError::from(e),
        e => MemError::Io(std::io::Error::other(e.to_string())),
    }
}

/// Inserts of a map's load per transaction.
const COLL_LOAD: usize = 256;

/// A map of the collections in `pool`, holding the inserts of `ops`.
fn coll_map(pool: &Pool, ops: &[Op]) -> Result<BTreeMap<u64, Value>, MemError> {
    let map = pool.transaction(BTreeMap::create).map_err(coll)?;
    for chunk in ops.chunks(COLL_LOAD) {
        pool.transaction(|tx| {
            for op in chunk {
                if let Op::Insert(k) = *op {
                    map.insert(tx, k, value_of(k))?;
                }
            }
            Ok::<_, rewind_collections::Error>(())
        })
        .map_err(coll)?;
    }
    Ok(map)
}

/// One operation of the workload on a map, its own transaction (a lookup
/// reads the committed state, as a program of the collections would).
fn coll_apply(
    pool: &Pool,
    map: BTreeMap<u64, Value>,
    op: Op,
    d: &mut Digest,
) -> Result<(), MemError> {
    match op {
        Op::Get(k) => d.get(map.get(pool, &k).map_err(coll)?.as_ref().map(|v| &v[..])),
        Op::Insert(k) => {
            let old = pool.transaction(|tx| map.insert(tx, k, value_of(k)));
            d.update(old.map_err(coll)?.is_none())
        }
        Op::Remove(k) => {
            let old = pool.transaction(|tx| map.remove(tx, &k));
            d.update(old.map_err(coll)?.is_some())
        }
    }
    Ok(())
}

struct Sys {
    system: &'static str,
    config: String,
    setup: Setup,
}

fn pool_for(
    dir: &Path,
    name: &str,
    variant: LogVariant,
    policy: Policy,
    ctx: &Ctx,
    space: u64,
) -> Result<Pool, CliError> {
    let path = dir.join(format!("{name}.pool"));
    let _ = std::fs::remove_file(&path);
    let cfg = ctx.pool_config(variant, policy);
    Pool::create(&path, LAYOUT, space, &cfg)
        .map_err(CliError::rewind(format!("creating {}", path.display())))
}

fn built(what: String) -> impl Fn(MemError) -> CliError {
    move |e| CliError::Bench(format!("{what}: {e}"))
}

/// Every system for `t` threads sharing as `sharing`, each thread's load
/// (`loads[i]`) in its tree or the shared one.
fn build(
    dir: &Path,
    ctx: &Ctx,
    sharing: Sharing,
    loads: &[Vec<Op>],
    space: u64,
) -> Result<Vec<Sys>, CliError> {
    let t = loads.len();
    let all: Vec<Op> = loads.iter().flatten().copied().collect();
    let mut out = Vec::new();
    let per = (space / t as u64).max(16 << 20);
    let load = |s: &mut dyn Store, ops: &[Op], what: &str| {
        s.load(ops).map_err(built(format!("loading {what}")))
    };
    match sharing {
        Sharing::Own => {
            let mut v = Vec::new();
            let mut n = Vec::new();
            for (i, l) in loads.iter().enumerate() {
                let mut s =
                    TreeStore::create(Volatile::new(per)).map_err(built("volatile".into()))?;
                load(&mut s, l, "volatile")?;
                v.push(s);
                let path = dir.join(format!("nolog-{i}.pool"));
                let nolog = NoLog::new(ctx.domain(&path, per)?);
                let mut s = TreeStore::create(nolog).map_err(built("nolog".into()))?;
                load(&mut s, l, "nolog")?;
                n.push(s);
            }
            out.push(Sys {
                system: "volatile",
                config: "dram".into(),
                setup: Setup::VolatileOwn(v),
            });
            out.push(Sys {
                system: "persist-nolog",
                config: "nolog".into(),
                setup: Setup::NoLogOwn(n),
            });
        }
        Sharing::Shared => {
            let mut s =
                TreeStore::create(Volatile::new(space)).map_err(built("volatile".into()))?;
            load(&mut s, &all, "volatile")?;
            out.push(Sys {
                system: "volatile",
                config: "dram".into(),
                setup: Setup::VolatileShared(Mutex::new(s)),
            });
            let path = dir.join("nolog.pool");
            let nolog = NoLog::new(ctx.domain(&path, space)?);
            let mut s = TreeStore::create(nolog).map_err(built("nolog".into()))?;
            load(&mut s, &all, "nolog")?;
            out.push(Sys {
                system: "persist-nolog",
                config: "nolog".into(),
                setup: Setup::NoLogShared(Mutex::new(s)),
            });
        }
    }
    // The collections' map: the default policy (redo) and batch-force.
    for policy in [Policy::Redo, Policy::Force] {
        let config = format!("batch-{policy}");
        let path = dir.join(format!("coll-{config}.pool"));
        let _ = std::fs::remove_file(&path);
        let cfg = PoolConfig::default()
            .policy(policy)
            .backend(ctx.backend)
            .nvm_latency(ctx.latency);
        let pool = Box::new(
            Pool::create(&path, LAYOUT, space, &cfg)
                .map_err(CliError::rewind(format!("creating {}", path.display())))?,
        );
        let groups: Vec<&[Op]> = match sharing {
            Sharing::Own => loads.iter().map(Vec::as_slice).collect(),
            Sharing::Shared => vec![&all],
        };
        let mut maps = Vec::new();
        for ops in groups {
            maps.push(coll_map(&pool, ops).map_err(built(format!("coll-btree/{config}")))?);
        }
        out.push(Sys {
            system: "coll-btree",
            config,
            setup: Setup::Coll { pool, maps },
        });
    }
    for variant in LogVariant::ALL {
        for policy in Policy::ALL {
            let config = format!("{variant}-{policy}");
            let pool = Box::new(pool_for(dir, &config, variant, policy, ctx, space)?);
            let groups: Vec<&[Op]> = match sharing {
                Sharing::Own => loads.iter().map(Vec::as_slice).collect(),
                Sharing::Shared => vec![&all],
            };
            let mut trees = Vec::new();
            for ops in groups {
                let mut s = TreeStore::create(Rewind(&*pool)).map_err(built(config.clone()))?;
                load(&mut s, ops, &config)?;
                trees.push(s.tree);
            }
            out.push(Sys {
                system: "rewind",
                config,
                setup: Setup::Rewind { pool, trees },
            });
        }
    }
    Ok(out)
}

impl Sys {
    fn run(&mut self, ops: &[Vec<Op>]) -> Result<(Duration, Vec<Digest>), CliError> {
        let name = format!("{}/{}", self.system, self.config);
        let r = match &mut self.setup {
            Setup::VolatileOwn(v) => own_run(v, ops),
            Setup::VolatileShared(s) => shared_run(s, ops),
            Setup::NoLogOwn(v) => own_run(v, ops),
            Setup::NoLogShared(s) => shared_run(s, ops),
            Setup::Rewind { pool, trees } => {
                let r = if trees.len() == 1 {
                    let s = Mutex::new(TreeStore {
                        engine: Rewind(&**pool),
                        tree: trees[0],
                    });
                    shared_run(&s, ops)
                } else {
                    let mut stores: Vec<_> = trees
                        .iter()
                        .map(|&tree| TreeStore {
                            engine: Rewind(&**pool),
                            tree,
                        })
                        .collect();
                    own_run(&mut stores, ops)
                };
                // A run has not finished while redo-async's write-back is
                // behind: its time runs until the write-back is done.
                r.and_then(|(wall, d, first)| {
                    pool.sync()?;
                    Ok((wall.max(first.elapsed()), d, first))
                })
            }
            Setup::Coll { pool, maps } => {
                let pool = &**pool;
                // Shared: every thread on the one map, no user lock.
                let workers = (0..ops.len()).map(|i| maps[i % maps.len()]).collect();
                threads(workers, ops, |m, op, d| coll_apply(pool, *m, op, d))
            }
        };
        r.map(|(wall, digests, _)| (wall, digests))
            .map_err(|e| CliError::Bench(format!("{name}: {e}")))
    }
}

fn run(ctx: &Ctx, report: &mut Report) -> Result<(), CliError> {
    let (n_load, n_ops, rounds) = sizes(ctx.scale);
    let counts = thread_counts();
    println!(
        "  {n_load} records, {n_ops} operations per thread, threads {counts:?}, update fraction \
         20%..80% across threads; own-tree: one tree per thread in one pool; shared-tree: one \
         tree, a lock held across each transaction; median of {rounds} rounds"
    );
    let space = ctx.scale.pick(32 << 20, 64 << 20, 256 << 20);
    for sharing in [Sharing::Own, Sharing::Shared] {
        for &t in &counts {
            let dir = ctx.scratch()?;
            let mut models: Vec<Model> = (0..t)
                .map(|i| Model::in_range(SEED + i as u64, 1 + i as u64 * KEY_SPAN, KEY_SPAN - 1))
                .collect();
            let loads: Vec<Vec<Op>> = models.iter_mut().map(|m| m.load(n_load / t)).collect();
            let mut systems = build(dir.path(), ctx, sharing, &loads, space)?;
            let labels = (systems.iter())
                .map(|s| Label::new(s.system, s.config.clone(), param(sharing, t)))
                .collect();
            let input = |_| -> Vec<Vec<Op>> {
                let ops = models.iter_mut().enumerate();
                ops.map(|(i, m)| m.mix(n_ops, fraction(i, t))).collect()
            };
            let m = ctx.rounds(labels, &mut systems, (1, rounds), input, |s, ops| {
                let (time, digests) = s.run(ops)?;
                // Each thread's digest, folded in thread order.
                let mut d = Digest::default();
                digests.iter().for_each(|x| d.add(x.0));
                Ok(Sample {
                    time,
                    digest: Some(d.0),
                    ..Sample::default()
                })
            })?;
            let total = (n_ops * t) as f64;
            for (i, l) in m.labels.iter().enumerate() {
                report.push(
                    l,
                    "ops_per_s",
                    total / m.median(i, |s| s.time.as_secs_f64()),
                    "ops/s",
                );
            }
        }
    }
    Ok(())
}
