//! Running one program on a simulated pool whose domain calls the crash
//! hook ([`check::visit`]) at every crash point: one thread, or two threads
//! interleaved by a seeded [`Turnstile`].

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::Error;
use crate::format::meta::mix64;
use crate::persist::sim::Point;
use crate::persist::Backend;
use crate::pool::{Pool, PoolConfig};

use super::check::{self, Shared};
use super::program::{self, TxProg};
use super::sched::Turnstile;
use super::{Config, Shape, Stats, Tally, LAYOUT, POOL_SIZE};
use crate::format::layout::MIN_POOL;

/// A free scheduling point of a two-thread program passes the turn with
/// probability 1 / this: often enough that the two threads' transactions
/// overlap (see [`Tally::overlapping`]), rarely enough that each gets
/// several ordering points done in a row.
const SWITCH_ONE_IN: u64 = 6;

thread_local! {
    /// Which thread of a two-thread program the calling thread is (none on
    /// every other thread, whose domain operations are not scheduled).
    static ROLE: Cell<Option<usize>> = const { Cell::new(None) };
}

fn lock(sh: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    sh.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether some thread holds one of the engine's latches.
fn latched(pool: &Pool) -> bool {
    pool.eng.log.latched()
        || pool.eng.alloc.latched()
        || pool.eng.finished.is_locked()
        || pool.eng.checkpoint_lock.is_locked()
        || pool.eng.write_back.as_ref().is_some_and(|wb| wb.latched())
        || pool.eng.ring.as_ref().is_some_and(|r| r.latched())
}

/// Runs the program of `seed` under `cfg`, visiting every crash point until
/// `stop` is set (or, with `first_only`, until the first violation).
pub fn run_program(
    cfg: &Config,
    seed: u64,
    stop: &Arc<AtomicBool>,
    first_only: bool,
) -> Result<Stats, Error> {
    let pcfg = PoolConfig {
        log: cfg.variant,
        policy: cfg.policy,
        backend: Backend::Sim,
        bucket_cells: 16,
        // The smallest log (four buckets) for growth and reuse programs.
        log_size: Some(if cfg.shape.smallest_log() {
            0
        } else {
            128 << 10
        }),
        // Churn programs start on the smallest pool, which may grow to
        // four times its size: their allocations outgrow its few chunks,
        // so the heap grows (and empty class chunks are reclaimed).
        max_size: (cfg.shape == Shape::Churn).then_some(4 * MIN_POOL),
        // Half the two-thread seeds (the even ones) commit in a lane per
        // thread; the others share one (the smallest pools' default),
        // where groups of the two threads meet in one lane's order.
        lanes: (cfg.threads > 1 && seed.is_multiple_of(2)).then_some(2),
        ..PoolConfig::default()
    };
    let size = match cfg.shape {
        Shape::Churn => MIN_POOL,
        _ => POOL_SIZE,
    };
    let mut pool = Pool::create_sim(LAYOUT, size, &pcfg)?;
    // A third of the seeds write redo commits back in sequence order, as
    // persistent memory does (each commit then records its write-back
    // without the ring's latch); the others let a group go ahead of
    // earlier ones that write none of its bytes, as a disk does.
    pool.domain().set_sim_ordered(seed % 3 == 1);
    // Half the checkpoint programs (the odd seeds) clear the log as a
    // checkpoint that finds no room for its CHECKPOINT record does: a
    // record at a time, each after a fence.
    let in_order = cfg.shape == Shape::Checkpoints && seed % 2 == 1;
    (pool.eng.checkpoint_in_order).store(in_order, std::sync::atomic::Ordering::Relaxed);
    program::setup(&pool)?;
    pool.set_mutation(cfg.mutation);
    let progs = program::generate_threads(seed, cfg.max_tx, cfg.threads, cfg.shape);
    let text = if progs.len() == 1 {
        format!("{:?}", progs[0])
    } else {
        format!("thread 0: {:?}; thread 1: {:?}", progs[0], progs[1])
    };
    let shared = Arc::new(Mutex::new(Shared::new(seed, progs.len(), first_only)));
    {
        let (sh, cfg, text, stop) = (shared.clone(), *cfg, text.clone(), stop.clone());
        pool.domain().with_sim_mut(|s| {
            s.set_hook(
                Box::new(move |sim, at| {
                    check::visit(sim, at, &cfg, seed, &text, &mut lock(&sh), &stop);
                }),
                cfg.store_every,
            )
        });
    }
    let pool = Arc::new(pool);
    if progs.len() == 1 {
        run_thread(&pool, cfg, seed, &text, 0, &progs[0], &shared, stop, None)?;
    } else {
        run_two(&pool, seed, &progs, &shared, stop, cfg, &text)?;
    }
    // The state the program ends in, and a last look at its crash images.
    pool.domain().with_sim_mut(|s| s.clear_hook());
    let mut g = lock(&shared);
    if let Some(st) = pool.domain().with_sim(|s| s.image_all_pending()) {
        g.stats.images += 1;
        let want = g.expect.committed.clone();
        if let Err(m) = check::guarded(|| check::check_image(st, &[want], cfg.mutation)) {
            let at = Point::Fence(u64::MAX);
            check::report(&mut g, cfg, seed, at, "final".into(), None, m, &text);
        }
    }
    let mut stats = g.stats.clone();
    if cfg.threads > 1 {
        stats.two_thread = Tally {
            programs: 1,
            images: stats.images,
            violations: stats.violations,
            ahead: pool.counters().ahead_write_backs,
            ..stats.two_thread
        };
    }
    Ok(stats)
}

/// Whether a program may meet this error: its own abort, or a heap or log
/// too full for a transaction (growth and reuse programs fill both). Any
/// other is the engine failing (a poisoned handle, a damaged structure).
fn expected(e: &Error) -> bool {
    matches!(
        e,
        Error::Aborted | Error::LogFull { .. } | Error::OutOfMemory { .. }
    )
}

/// Runs thread `t`'s transactions, keeping the expectation up to date. An
/// error no program should meet (see [`expected`]), of a transaction, a
/// checkpoint or a sync, is reported as a violation and ends the thread.
#[allow(clippy::too_many_arguments)]
fn run_thread(
    pool: &Pool,
    cfg: &Config,
    seed: u64,
    text: &str,
    t: usize,
    txs: &[TxProg],
    shared: &Mutex<Shared>,
    stop: &AtomicBool,
    ts: Option<&Turnstile>,
) -> Result<(), Error> {
    // Redo-async: a write-back step at three in eight of the program's
    // points, chosen by the seed, so that crashes inside write-back, and
    // between it and the Log Start's advance, are among the crash points.
    // Reuse programs: at one in 64, so that committed values often still
    // wait while their freed block is reused.
    let points = std::cell::Cell::new(0u64);
    let async_wb = pool.policy() == crate::Policy::RedoAsync;
    let point = || {
        if let Some(ts) = ts {
            ts.point(t, latched(pool));
        }
        if async_wb {
            let n = points.get();
            points.set(n + 1);
            let h = (seed ^ (t as u64) << 32 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let due = match cfg.shape {
                // (Seed and point mixed apart: in `h`, nearby seeds
                // share their rare steps' points.)
                Shape::Reuse => mix64(mix64(seed ^ (t as u64) << 32).wrapping_add(n)) >> 58 == 0,
                _ => h >> 62 == 0 || h >> 61 == 2,
            };
            if due {
                // A failed step poisons the pool; the program then stops.
                if let Err(e) = pool.write_back_step() {
                    pool.eng.poison(&e);
                }
            }
        }
    };
    for tx in txs {
        if stop.load(Ordering::Relaxed) || lock(shared).halted() {
            break;
        }
        point();
        if let (Some(ts), Some(n)) = (ts, tx.after) {
            ts.wait_for(t, n);
        }
        // The outcomes a crash may leave of this transaction once `done`
        // of its nested top actions have ended (and, while `ending`, one
        // more).
        let outcomes = |done: usize, ending: bool| {
            let mut o = vec![program::effect(&tx.ops, false, done)];
            if ending {
                o.push(program::effect(&tx.ops, false, done + 1));
            }
            if tx.commit {
                o.push(program::effect(&tx.ops, true, 0));
            }
            o
        };
        {
            let mut g = lock(shared);
            g.expect.in_flight[t] = outcomes(0, false);
            g.expect.busy[t] = true;
        }
        let mut done = 0;
        let r = match tx.ops.first() {
            Some(op) if op.is_atomic() => {
                point();
                program::run_atomic(pool, op)
            }
            _ => pool.transaction(|x| {
                let mut nta = |k: usize, ended: bool| {
                    done = k + ended as usize;
                    lock(shared).expect.in_flight[t] = outcomes(done, !ended);
                };
                program::run_ops(x, &tx.ops, &point, &mut nta)?;
                if tx.commit {
                    Ok(())
                } else {
                    Err(Error::Aborted)
                }
            }),
        };
        let failed = |what: &str, e: &Error| {
            let mut g = lock(shared);
            let (at, m) = (Point::Fence(u64::MAX), format!("{what} failed: {e}"));
            check::report(&mut g, cfg, seed, at, "program".into(), None, m, text);
        };
        {
            let mut g = lock(shared);
            let kept = match &r {
                Ok(()) => program::effect(&tx.ops, true, 0),
                Err(_) => program::effect(&tx.ops, false, done),
            };
            kept.iter().for_each(|op| g.expect.committed.apply(op));
            g.expect.in_flight[t] = Vec::new();
            g.expect.busy[t] = false;
        }
        if let Some(ts) = ts {
            ts.returned(t);
        }
        if let Some(e) = r.as_ref().err().filter(|e| !expected(e)) {
            failed("a transaction", e);
            break;
        }
        if tx.checkpoint {
            point();
            if let Err(e) = pool.checkpoint() {
                failed("a checkpoint", &e);
                break;
            }
        }
        if tx.sync {
            point();
            if let Err(e) = pool.sync() {
                failed("a sync", &e);
                break;
            }
        }
    }
    Ok(())
}

/// Leaves the turnstile however the thread ends, so the other one goes on.
struct Leave<'a>(&'a Turnstile, usize);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        ROLE.with(|r| r.set(None));
        self.0.leave(self.1);
    }
}

/// Runs the two threads of a program, one at a time by the turnstile.
fn run_two(
    pool: &Arc<Pool>,
    seed: u64,
    progs: &[Vec<TxProg>],
    shared: &Mutex<Shared>,
    stop: &AtomicBool,
    cfg: &Config,
    text: &str,
) -> Result<(), Error> {
    let ts = Arc::new(Turnstile::new(
        seed ^ 0x7475_726e,
        (seed >> 7) as usize & 1,
        SWITCH_ONE_IN,
    ));
    {
        // A scheduling point at each store, flush and fence of the pool's
        // own domain, on the program's two threads only (crash images are
        // recovered on other domains, from inside the crash hook).
        let (ts, weak) = (ts.clone(), Arc::downgrade(pool));
        pool.domain().set_schedule(Some(Arc::new(move || {
            if let (Some(t), Some(p)) = (ROLE.with(|r| r.get()), weak.upgrade()) {
                ts.point(t, latched(&p));
            }
        })));
    }
    let results: Vec<std::thread::Result<Result<(), Error>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|t| {
                let (ts, txs) = (&*ts, &progs[t]);
                s.spawn(move || {
                    let _leave = Leave(ts, t);
                    ts.enter(t);
                    ROLE.with(|r| r.set(Some(t)));
                    run_thread(pool, cfg, seed, text, t, txs, shared, stop, Some(ts))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    pool.domain().set_schedule(None);
    for r in results {
        match r {
            Ok(r) => r?,
            Err(p) => {
                // A panic in the engine while running the program.
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                let mut g = lock(shared);
                let at = Point::Fence(u64::MAX);
                let m = format!("panic in a program thread: {msg}");
                check::report(&mut g, cfg, seed, at, "program".into(), None, m, text);
            }
        }
    }
    Ok(())
}
