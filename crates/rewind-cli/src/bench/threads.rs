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

use super::output::{Report, Row};
use super::tree::mem::{NoLog, Rewind, Volatile};
use super::tree::plot::{self, Legend, Series};
use super::tree::store::{Store, TreeStore};
use super::tree::systems::LAYOUT;
use super::tree::workload::{Digest, Model, Op};
use super::tree::{BTree, MemError};
use super::{median, Ctx, Scale};
use crate::error::CliError;
use plotters::prelude::SeriesLabelPosition;

const SEED: u64 = 0x9a;
/// Each thread's keys: a range of 2^56 of its own.
const KEY_SPAN: u64 = 1 << 56;

/// Records loaded in all, operations per thread per round, rounds.
fn sizes(scale: Scale) -> (usize, usize, usize) {
    match scale {
        Scale::Tiny => (200, 50, 1),
        Scale::Quick => (10_000, 1_000, 3),
        // The paper's 100k operations per thread.
        Scale::Full => (100_000, 100_000, 3),
    }
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

/// Runs each thread's operations on its store; the wall time and each
/// thread's digest.
fn own_run<S: Store + Send>(stores: &mut [S], ops: &[Vec<Op>]) -> Result<Run, MemError> {
    let barrier = Barrier::new(stores.len() + 1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = stores
            .iter_mut()
            .zip(ops)
            .map(|(s, ops)| {
                let barrier = &barrier;
                scope.spawn(move || {
                    let mut d = Digest::default();
                    barrier.wait();
                    let start = Instant::now();
                    for &op in ops {
                        s.apply(op, &mut d)?;
                    }
                    Ok::<_, MemError>((start, Instant::now(), d))
                })
            })
            .collect();
        barrier.wait();
        span(
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(worker("panicked")))),
        )
    })
}

/// Runs each thread's operations on the one store, each under its lock.
fn shared_run<S: Store + Send>(store: &Mutex<S>, ops: &[Vec<Op>]) -> Result<Run, MemError> {
    let barrier = Barrier::new(ops.len() + 1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = ops
            .iter()
            .map(|ops| {
                let barrier = &barrier;
                scope.spawn(move || {
                    let mut d = Digest::default();
                    barrier.wait();
                    let start = Instant::now();
                    for &op in ops {
                        let mut s = store
                            .lock()
                            .map_err(|_| worker("found the lock poisoned"))?;
                        s.apply(op, &mut d)?;
                    }
                    Ok::<_, MemError>((start, Instant::now(), d))
                })
            })
            .collect();
        barrier.wait();
        span(
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(worker("panicked")))),
        )
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
    let cfg = PoolConfig::default()
        .log(variant)
        .policy(policy)
        .backend(ctx.backend)
        .nvm_latency(ctx.latency);
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
        };
        r.map(|(wall, digests, _)| (wall, digests))
            .map_err(|e| CliError::Bench(format!("{name}: {e}")))
    }
}

pub fn run(ctx: &Ctx, out: &Path) -> Result<(), CliError> {
    let scale = ctx.scale;
    let (n_load, n_ops, rounds) = sizes(scale);
    let counts = thread_counts();
    println!(
        "bench threads (REWIND Fig. 9): B+-tree of {n_load} records, {n_ops} operations per thread, \
         threads {counts:?}, update fraction 20%..80% across threads"
    );
    println!(
        "  own-tree: one tree per thread in one pool; shared-tree: one tree, a lock held across each transaction"
    );
    println!(
        "  median of {rounds} alternating rounds after a warm-up round{}",
        super::tiny_note(scale)
    );
    println!("  {}", super::latency_line(ctx.latency));
    let space = match scale {
        Scale::Tiny => 32 << 20,
        Scale::Quick => 64 << 20,
        Scale::Full => 256 << 20,
    };
    let mut rows = Vec::new();
    for sharing in [Sharing::Own, Sharing::Shared] {
        for &t in &counts {
            let dir = ctx.scratch()?;
            let mut models: Vec<Model> = (0..t)
                .map(|i| Model::in_range(SEED + i as u64, 1 + i as u64 * KEY_SPAN, KEY_SPAN - 1))
                .collect();
            let loads: Vec<Vec<Op>> = models.iter_mut().map(|m| m.load(n_load / t)).collect();
            let mut systems = build(dir.path(), ctx, sharing, &loads, space)?;
            let bar = super::progress(((rounds + 1) * systems.len()) as u64);
            let mut times = vec![Vec::new(); systems.len()];
            for round in 0..=rounds {
                let ops: Vec<Vec<Op>> = models
                    .iter_mut()
                    .enumerate()
                    .map(|(i, m)| m.mix(n_ops, fraction(i, t)))
                    .collect();
                let mut want = None;
                for (k, s) in systems.iter_mut().enumerate() {
                    bar.set_message(format!(
                        "{} t={t} {}/{}",
                        sharing.name(),
                        s.system,
                        s.config
                    ));
                    let (time, digests) = s.run(&ops)?;
                    match &want {
                        None => want = Some(digests),
                        Some(w) if *w != digests => {
                            return Err(CliError::Verification {
                                failures: vec![format!(
                                "{}/{} answered differently from volatile with {t} threads ({})",
                                s.system,
                                s.config,
                                sharing.name()
                            )],
                            })
                        }
                        Some(_) => {}
                    }
                    // Round 0 is the warm-up.
                    if round > 0 {
                        times[k].push(time);
                    }
                    bar.inc(1);
                }
            }
            bar.finish_and_clear();
            let total = (n_ops * t) as f64;
            for (k, s) in systems.iter().enumerate() {
                let secs = median(times[k].iter().map(Duration::as_secs_f64).collect());
                rows.push(Row {
                    system: s.system.into(),
                    config: s.config.clone(),
                    param: param(sharing, t),
                    metric: "ops_per_s".into(),
                    value: total / secs,
                    unit: "ops/s".into(),
                });
            }
        }
    }
    let report = Report {
        bench: "threads".into(),
        rows,
    };
    print_table(&report, &counts);
    let chart = chart(&report, &counts)?;
    super::write_results(&report, out, &chart)
}

fn print_table(report: &Report, counts: &[usize]) {
    println!();
    let mut head = format!("  {:<28}", "kops/s");
    for sharing in [Sharing::Own, Sharing::Shared] {
        for t in counts {
            head.push_str(&format!(" {:>11}", format!("{} t={t}", sharing.name())));
        }
    }
    println!("{head}");
    for (s, c) in report.systems() {
        let mut line = format!("  {:<28}", format!("{s}/{c}"));
        for sharing in [Sharing::Own, Sharing::Shared] {
            for &t in counts {
                let v = report
                    .value(&s, &c, &param(sharing, t), "ops_per_s")
                    .unwrap_or(f64::NAN);
                line.push_str(&format!(" {:>11.1}", v / 1e3));
            }
        }
        println!("{line}");
    }
    println!();
}

/// Own-tree throughput of every system (the shared-tree numbers are in
/// the table: drawn too, the lines would not be told apart).
fn chart(report: &Report, counts: &[usize]) -> Result<String, CliError> {
    let xs: Vec<f64> = counts.iter().map(|&t| t as f64).collect();
    let series: Vec<Series> = report
        .systems()
        .into_iter()
        .map(|(s, c)| Series {
            ys: counts
                .iter()
                .map(|&t| {
                    report
                        .value(&s, &c, &param(Sharing::Own, t), "ops_per_s")
                        .unwrap_or(f64::NAN)
                })
                .collect(),
            name: if s == "rewind" { c } else { s },
        })
        .collect();
    plot::lines(
        "B+-tree: throughput against threads, one tree per thread (REWIND Fig. 9)",
        ("threads", "operations per second (log scale)"),
        &xs,
        &series,
        true,
        Legend {
            pos: SeriesLabelPosition::LowerRight,
            room: 30.0,
        },
    )
}
