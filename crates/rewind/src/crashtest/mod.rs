//! Crash-state exploration (DESIGN §7): proof, on the simulated domain,
//! that every crash leaves a pool that recovers to exactly the committed
//! transactions.
//!
//! A random program ([`program`]) runs on a simulated pool whose domain
//! calls a hook at every ordering point (each fence, just before it takes
//! effect) and after every `store_every`-th store. At each such point the
//! explorer builds the images a power failure there could leave: with at
//! most [`Config::exhaustive_lines`] dirty lines and few enough
//! combinations, every combination of per-line prefixes of the pending
//! stores; otherwise nothing persisted, everything persisted, and random
//! per-line prefixes. Every image is recovered on a copy and checked:
//!
//! * recovery succeeds;
//! * the data equals the model after exactly the transactions whose commit
//!   returned, the one in flight all or nothing;
//! * the allocated blocks are exactly the blocks the program can reach (no
//!   leak, no double allocation), and objects read back as written (their
//!   zeroing included);
//! * `check` finds nothing wrong with the recovered pool.
//!
//! For a sample of images, recovery itself is crashed at some of its own
//! ordering points and the result recovered again: it must equal the result
//! of the uninterrupted recovery (depth 2).
//!
//! Because a crash between two fences can only leave per-line prefixes of
//! the stores issued since the first, the images at a fence include those of
//! every store point before it; store points are sampled anyway.

pub mod program;

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::alloc;
use crate::error::Error;
use crate::log::LogVariant;
use crate::persist::sim::{Point, SimState};
use crate::persist::{Backend, Domain, Site};
use crate::pool::layout::META_ADLL;
use crate::pool::{Pool, PoolConfig};
use crate::tx::Policy;
use program::{Model, Rng, TxProg};

const LAYOUT: &str = "rewind-crashtest";
const POOL_SIZE: u64 = 2 << 20;

/// How to explore one program.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Log variant.
    pub variant: LogVariant,
    /// Commit policy.
    pub policy: Policy,
    /// An ordering point to disable (a mutation), or none.
    pub mutation: Option<Site>,
    /// Most transactions per program.
    pub max_tx: u64,
    /// Also a crash point after every n-th store (0: fences only).
    pub store_every: u64,
    /// Enumerate every prefix combination when at most this many lines are dirty...
    pub exhaustive_lines: usize,
    /// ...and the combinations number at most this.
    pub exhaustive_max: u64,
    /// Random prefix images per point otherwise (besides none and all).
    pub random_images: usize,
    /// Crash recovery itself for one image in this many (0: never).
    pub depth2_every: u64,
    /// Recovery crash points tried per such image.
    pub depth2_points: u64,
}

impl Config {
    /// The defaults for a variant and policy.
    pub fn new(variant: LogVariant, policy: Policy) -> Config {
        Config {
            variant,
            policy,
            mutation: None,
            max_tx: 8,
            store_every: 7,
            exhaustive_lines: 4,
            exhaustive_max: 64,
            random_images: 3,
            depth2_every: 32,
            depth2_points: 2,
        }
    }

    /// `variant-policy`.
    pub fn name(&self) -> String {
        format!("{}-{}", self.variant, self.policy)
    }
}

/// A crash image whose recovery broke an invariant, with what reproduces it.
#[derive(Clone, Debug)]
pub struct Violation {
    /// `variant-policy`.
    pub config: String,
    /// The program's seed (`generate(seed, max_tx)`).
    pub seed: u64,
    /// The crash point.
    pub point: Point,
    /// Which image: `none`, `all`, or the prefix kept per dirty line.
    pub image: String,
    /// Depth 2: the recovery crash point and its image.
    pub inner: Option<(u64, usize)>,
    /// What was wrong.
    pub message: String,
    /// The program.
    pub program: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "violation in {} (seed {}): {}",
            self.config, self.seed, self.message
        )?;
        writeln!(f, "  crash point: {:?}; image: {}", self.point, self.image)?;
        if let Some((k, i)) = self.inner {
            writeln!(f, "  then recovery crashed at its fence {k} (image {i})")?;
        }
        write!(f, "  program: {}", self.program)
    }
}

/// What exploration found.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Programs run.
    pub programs: u64,
    /// Crash points visited.
    pub points: u64,
    /// Crash images recovered and checked (depth 2 included).
    pub images: u64,
    /// Images checked at depth 2.
    pub depth2: u64,
    /// Violations found.
    pub violations: u64,
    /// The first few, with reproducers.
    pub examples: Vec<Violation>,
}

impl Stats {
    /// Adds another run's figures.
    pub fn merge(&mut self, o: &Stats) {
        self.programs += o.programs;
        self.points += o.points;
        self.images += o.images;
        self.depth2 += o.depth2;
        self.violations += o.violations;
        for v in &o.examples {
            if self.examples.len() < 5 {
                self.examples.push(v.clone());
            }
        }
    }
}

struct Expect {
    committed: Model,
    in_flight: Option<Model>,
}

struct Shared {
    expect: Expect,
    stats: Stats,
    rng: Rng,
    last_empty: bool,
}

/// Recovers `image` and checks it against the expectation; returns the
/// recovered model.
fn check_image(
    image: Vec<u8>,
    committed: &Model,
    in_flight: Option<&Model>,
    mutation: Option<Site>,
) -> Result<(Model, Pool), String> {
    let mut dom = Domain::sim_from_image(image);
    dom.set_mutation(mutation);
    let pool = Pool::open_domain(dom, LAYOUT).map_err(|e| format!("recovery failed: {e}"))?;
    let (m, reach) = program::read(&pool)?;
    if &m != committed && Some(&m) != in_flight {
        return Err(format!("recovered state is neither the committed one nor the in-flight transaction applied whole: {}", diff(&m, committed)));
    }
    let blocks: Vec<u64> = alloc::allocated_blocks(pool.domain(), pool.layout())
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|(off, _)| off)
        .collect();
    if blocks != reach {
        let (b, r): (HashSet<u64>, HashSet<u64>) = (
            blocks.iter().copied().collect(),
            reach.iter().copied().collect(),
        );
        let leaked: Vec<_> = b.difference(&r).collect();
        let lost: Vec<_> = r.difference(&b).collect();
        return Err(format!(
            "allocator: leaked blocks {leaked:x?}, reachable but free {lost:x?}"
        ));
    }
    let report = crate::inspect::check_pool(&pool);
    if !report.is_ok() {
        return Err(format!("check: {}", report.problems.join("; ")));
    }
    Ok((m, pool))
}

/// Runs a check, turning a panic (a bug in recovery or the checker) into a
/// reported violation rather than the end of the exploration.
fn guarded<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        Err(format!("panic during recovery or checking: {msg}"))
    })
}

fn diff(got: &Model, want: &Model) -> String {
    let mut out = Vec::new();
    for (i, (g, w)) in got.slots.iter().zip(&want.slots).enumerate() {
        if g != w {
            out.push(format!("slot {i} = {g:#x} (committed {w:#x})"));
        }
    }
    for (i, (g, w)) in got.objs.iter().zip(&want.objs).enumerate() {
        if g != w {
            out.push(format!("object {i} = {g:?} (committed {w:?})"));
        }
    }
    if let Some(i) = (0..got.big.len()).find(|&i| got.big[i] != want.big[i]) {
        out.push(format!("byte range differs from byte {i}"));
    }
    out.truncate(4);
    out.join(", ")
}

/// Crash images with the label that says which they are.
type Labelled = Vec<(String, Vec<u8>)>;

/// The images a crash at this point could leave, labelled.
fn images(sim: &SimState, cfg: &Config, rng: &mut Rng) -> Labelled {
    let lines = sim.pending_lines();
    if lines.is_empty() {
        return vec![("durable".into(), sim.image_none_pending())];
    }
    let combos = lines
        .iter()
        .try_fold(1u64, |acc, &(_, n)| acc.checked_mul(n as u64 + 1))
        .unwrap_or(u64::MAX);
    let mut out = vec![
        ("none".into(), sim.image_none_pending()),
        ("all".into(), sim.image_all_pending()),
    ];
    let pick = |ks: &[usize]| {
        let img =
            sim.image_with(|l, _| lines.iter().position(|&(x, _)| x == l).map_or(0, |i| ks[i]));
        let label = format!(
            "prefixes {:?}",
            lines
                .iter()
                .zip(ks)
                .map(|(&(l, n), &k)| (l, k, n))
                .collect::<Vec<_>>()
        );
        (label, img)
    };
    if lines.len() <= cfg.exhaustive_lines && combos <= cfg.exhaustive_max {
        let mut ks = vec![0usize; lines.len()];
        loop {
            let all_none = ks.iter().all(|&k| k == 0);
            let all_all = ks.iter().zip(&lines).all(|(&k, &(_, n))| k == n);
            if !all_none && !all_all {
                out.push(pick(&ks));
            }
            // Mixed-radix increment.
            let mut i = 0;
            loop {
                if i == ks.len() {
                    return out;
                }
                ks[i] += 1;
                if ks[i] <= lines[i].1 {
                    break;
                }
                ks[i] = 0;
                i += 1;
            }
        }
    }
    for _ in 0..cfg.random_images {
        let ks: Vec<usize> = lines
            .iter()
            .map(|&(_, n)| rng.below(n as u64 + 1) as usize)
            .collect();
        out.push(pick(&ks));
    }
    out
}

fn visit(
    sim: &SimState,
    at: Point,
    cfg: &Config,
    seed: u64,
    prog: &str,
    sh: &mut Shared,
    stop: &AtomicBool,
) {
    if stop.load(Ordering::Relaxed) {
        return;
    }
    let empty = sim.pending_lines().is_empty();
    if empty && sh.last_empty {
        return; // the same durable image as the previous point
    }
    sh.last_empty = empty;
    sh.stats.points += 1;
    let imgs = images(sim, cfg, &mut sh.rng);
    let mut adll_done = false;
    for (label, img) in imgs {
        sh.stats.images += 1;
        // An image that catches an ADLL operation in flight makes recovery
        // redo it: crash that recovery at every fence. Others: a sample.
        let word = |off: u64| {
            u64::from_le_bytes(img[off as usize..off as usize + 8].try_into().expect("8"))
        };
        // (One image per crash point is enough: they share the interrupted operation.)
        let adll_in_flight = !adll_done && (word(META_ADLL + 24) != 0 || word(META_ADLL + 32) != 0);
        adll_done |= adll_in_flight;
        let depth2 =
            adll_in_flight || (cfg.depth2_every > 0 && sh.stats.images % cfg.depth2_every == 0);
        let keep = depth2.then(|| img.clone());
        let r = guarded(|| {
            check_image(
                img,
                &sh.expect.committed,
                sh.expect.in_flight.as_ref(),
                cfg.mutation,
            )
        });
        let (model, pool) = match r {
            Ok(ok) => ok,
            Err(message) => {
                report(sh, cfg, seed, at, label, None, message, prog);
                continue;
            }
        };
        if let Some(img) = keep {
            let fences = pool.domain().with_sim(|s| s.fences()).unwrap_or(0);
            let points: Vec<u64> = if adll_in_flight {
                (1..=fences.min(3)).collect()
            } else {
                (0..cfg.depth2_points.min(fences))
                    .map(|_| 1 + sh.rng.below(fences))
                    .collect()
            };
            for k in points {
                // Recovery's own crash images at its fence k, enumerated as
                // at any other crash point.
                let mut dom = Domain::sim_from_image(img.clone());
                dom.set_mutation(cfg.mutation);
                let got: Arc<Mutex<Labelled>> = Arc::default();
                let c2 = Config {
                    exhaustive_max: 16,
                    random_images: 2,
                    ..*cfg
                };
                let (g2, mut r2) = (got.clone(), Rng::new(sh.rng.next_u64()));
                dom.with_sim_mut(|s| {
                    s.set_hook(
                        Box::new(move |sim, p| {
                            if p == Point::Fence(k) {
                                *g2.lock().unwrap_or_else(|e| e.into_inner()) =
                                    images(sim, &c2, &mut r2);
                            }
                        }),
                        0,
                    )
                });
                let inner = match Pool::open_domain(dom, LAYOUT) {
                    Ok(p) => {
                        p.domain().with_sim_mut(|s| s.clear_hook());
                        std::mem::take(&mut *got.lock().unwrap_or_else(|e| e.into_inner()))
                    }
                    Err(e) => {
                        report(
                            sh,
                            cfg,
                            seed,
                            at,
                            label.clone(),
                            Some((k, 0)),
                            format!("recovery failed: {e}"),
                            prog,
                        );
                        continue;
                    }
                };
                for (i, (_, img2)) in inner.into_iter().enumerate() {
                    sh.stats.images += 1;
                    sh.stats.depth2 += 1;
                    if let Err(m) = guarded(|| check_image(img2, &model, None, cfg.mutation)) {
                        let message = format!("after a crash during recovery: {m}");
                        report(
                            sh,
                            cfg,
                            seed,
                            at,
                            label.clone(),
                            Some((k, i)),
                            message,
                            prog,
                        );
                    }
                }
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn report(
    sh: &mut Shared,
    cfg: &Config,
    seed: u64,
    point: Point,
    image: String,
    inner: Option<(u64, usize)>,
    message: String,
    prog: &str,
) {
    sh.stats.violations += 1;
    if sh.stats.examples.len() < 5 {
        sh.stats.examples.push(Violation {
            config: cfg.name(),
            seed,
            point,
            image,
            inner,
            message,
            program: prog.to_string(),
        });
    }
}

/// Runs the program of `seed` under `cfg`, visiting every crash point until
/// `stop` is set.
pub fn run_program(cfg: &Config, seed: u64, stop: &Arc<AtomicBool>) -> Result<Stats, Error> {
    let pcfg = PoolConfig {
        log: cfg.variant,
        policy: cfg.policy,
        backend: Backend::Sim,
        bucket_cells: 16,
        log_size: Some(128 << 10),
        ..PoolConfig::default()
    };
    let mut pool = Pool::create_sim(LAYOUT, POOL_SIZE, &pcfg)?;
    program::setup(&pool)?;
    pool.set_mutation(cfg.mutation);
    let progs: Vec<TxProg> = program::generate(seed, cfg.max_tx);
    let text = format!("{progs:?}");
    let shared = Arc::new(Mutex::new(Shared {
        expect: Expect {
            committed: Model::initial(),
            in_flight: None,
        },
        stats: Stats {
            programs: 1,
            ..Stats::default()
        },
        rng: Rng::new(seed ^ 0x5eed),
        last_empty: false,
    }));
    {
        let (sh, cfg, text, stop) = (shared.clone(), *cfg, text.clone(), stop.clone());
        pool.domain().with_sim_mut(|s| {
            s.set_hook(
                Box::new(move |sim, at| {
                    let mut g = sh.lock().unwrap_or_else(|p| p.into_inner());
                    visit(sim, at, &cfg, seed, &text, &mut g, &stop);
                }),
                cfg.store_every,
            )
        });
    }
    let set = |committed: &Model, in_flight: Option<Model>| {
        let mut g = shared.lock().unwrap_or_else(|p| p.into_inner());
        g.expect = Expect {
            committed: committed.clone(),
            in_flight,
        };
    };
    let mut model = Model::initial();
    for t in &progs {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let mut after = model.clone();
        for op in &t.ops {
            after.apply(op);
        }
        set(&model, t.commit.then(|| after.clone()));
        let r = pool.transaction(|tx| {
            for op in &t.ops {
                program::run_op(tx, op)?;
            }
            if t.commit {
                Ok(())
            } else {
                Err(Error::TxMisuse("aborted by the program"))
            }
        });
        if r.is_ok() {
            model = after;
        }
        set(&model, None);
        if t.checkpoint {
            pool.checkpoint()?;
        }
    }
    // The state the program ends in, and a last look at its crash images.
    pool.domain().with_sim_mut(|s| s.clear_hook());
    {
        let mut g = shared.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(st) = pool.domain().with_sim(|s| s.image_all_pending()) {
            g.stats.images += 1;
            if let Err(m) = guarded(|| check_image(st, &model, None, cfg.mutation)) {
                let text = text.clone();
                report(
                    &mut g,
                    cfg,
                    seed,
                    Point::Fence(u64::MAX),
                    "final".into(),
                    None,
                    m,
                    &text,
                );
            }
        }
    }
    let stats = shared
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .stats
        .clone();
    Ok(stats)
}

/// Whether a configuration's code path reaches an ordering point (the
/// others cannot show its mutation).
pub fn reaches(site: Site, v: LogVariant, p: Policy) -> bool {
    let n = site.0;
    if n.starts_with("checkpoint.") || n == "recovery.redo.flush" {
        p == Policy::NoForce
    } else if n.starts_with("log.group.") {
        v == LogVariant::Batch
    } else if n.starts_with("log.record.") {
        v != LogVariant::Batch
    } else if n == "tx.commit.stores" {
        v == LogVariant::Batch && p == Policy::Force
    } else if n == "tx.store.flush" {
        p == Policy::Force
    } else {
        true
    }
}

/// Options of [`explore`].
#[derive(Clone, Debug)]
pub struct Options {
    /// First seed; program `i` uses `seed + i`.
    pub seed: u64,
    /// Time budget.
    pub seconds: f64,
    /// Worker threads.
    pub threads: usize,
    /// Configurations, cycled through.
    pub configs: Vec<Config>,
    /// Stop at the first violation (mutation runs).
    pub stop_on_violation: bool,
}

impl Options {
    /// Every log variant × policy, with the default settings; with a
    /// mutation, only the configurations whose code path reaches the site.
    pub fn all(seed: u64, seconds: f64, mutation: Option<Site>) -> Options {
        let configs = LogVariant::ALL
            .iter()
            .flat_map(|&v| Policy::ALL.iter().map(move |&p| (v, p)))
            .filter(|&(v, p)| mutation.is_none_or(|m| reaches(m, v, p)))
            .map(|(v, p)| Config {
                mutation,
                ..Config::new(v, p)
            })
            .collect();
        Options {
            seed,
            seconds,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            configs,
            stop_on_violation: mutation.is_some(),
        }
    }
}

/// Runs programs across the configurations until the time budget is spent.
/// `progress` is called after each program with the totals so far.
pub fn explore(opts: &Options, progress: &(dyn Fn(&Stats) + Sync)) -> Result<Stats, Error> {
    let start = Instant::now();
    let next = AtomicU64::new(0);
    let total = Mutex::new(Stats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let failure: Mutex<Option<Error>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..opts.threads.max(1) {
            s.spawn(|| {
                // A watchdog per worker: points stop being explored at the deadline.
                while start.elapsed().as_secs_f64() < opts.seconds && !stop.load(Ordering::Relaxed)
                {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let cfg = &opts.configs[(i as usize) % opts.configs.len()];
                    let stop_at = opts.seconds;
                    let stop2 = stop.clone();
                    let timer = std::thread::spawn(move || {
                        let left = stop_at - start.elapsed().as_secs_f64();
                        if left > 0.0 {
                            std::thread::park_timeout(std::time::Duration::from_secs_f64(left));
                        }
                        if start.elapsed().as_secs_f64() >= stop_at {
                            stop2.store(true, Ordering::Relaxed);
                        }
                    });
                    let r = run_program(cfg, opts.seed.wrapping_add(i), &stop);
                    timer.thread().unpark();
                    let _ = timer.join();
                    match r {
                        Ok(st) => {
                            let mut t = total.lock().unwrap_or_else(|p| p.into_inner());
                            t.merge(&st);
                            progress(&t);
                            if opts.stop_on_violation && t.violations > 0 {
                                stop.store(true, Ordering::Relaxed);
                                return;
                            }
                        }
                        Err(e) => {
                            *failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                            stop.store(true, Ordering::Relaxed);
                            return;
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    Ok(total.into_inner().unwrap_or_else(|p| p.into_inner()))
}
