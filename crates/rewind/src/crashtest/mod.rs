//! Crash-state exploration: proof, on the simulated domain, that every
//! crash leaves a pool that recovers to exactly the committed transactions.
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
//!   returned, plus any transaction in flight (one per thread) all or
//!   nothing;
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
//!
//! A two-thread program runs its threads one at a time, interleaved at the
//! domain's operations by a seeded schedule (`sched`), so that its crash
//! points are as reproducible as a single thread's; the simulator keeps
//! each thread's flushes pending until that thread's own fence.
//!
//! Exploration runs programs `seed`, `seed + 1`, ... across the
//! configurations until a [`Budget`] is spent. A count budget (programs or
//! crash images) gives the same result on any machine and with any number
//! of workers: results are summed in program order and the budget is
//! checked at program boundaries.

mod aim;
mod check;
pub mod program;
mod run;
mod sched;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::log::LogVariant;
use crate::persist::sim::Point;
use crate::persist::Site;
use crate::tx::Policy;
pub use aim::{aim, reaches};
pub use program::Shape;
pub use run::run_program;

const LAYOUT: &str = "rewind-crashtest";
const POOL_SIZE: u64 = 2 << 20;

/// How to explore one program.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Log variant.
    pub variant: LogVariant,
    /// Commit policy.
    pub policy: Policy,
    /// Threads running the program's transactions (1 or 2).
    pub threads: usize,
    /// What kind of program.
    pub shape: Shape,
    /// An ordering point to disable (a mutation), or none.
    pub mutation: Option<Site>,
    /// Most transactions per program (per thread).
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
    /// The defaults for a variant and policy (one thread, mixed programs).
    pub fn new(variant: LogVariant, policy: Policy) -> Config {
        Config {
            variant,
            policy,
            threads: 1,
            shape: Shape::Mixed,
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

    /// The same with two threads (each up to half as many transactions).
    pub fn two_threads(self, shape: Shape) -> Config {
        Config {
            threads: 2,
            shape,
            max_tx: self.max_tx.div_ceil(2),
            ..self
        }
    }

    /// `variant-policy`, then `-2t` for two threads and the shape unless
    /// it is mixed: `batch-force`, `batch-force-2t`, `batch-force-2t-handoff`.
    pub fn name(&self) -> String {
        let mut n = format!("{}-{}", self.variant, self.policy);
        if self.threads > 1 {
            n.push_str("-2t");
        }
        if self.shape != Shape::Mixed {
            n.push('-');
            n.push_str(self.shape.name());
        }
        n
    }

    /// The configuration (with default settings) of a [`name`](Self::name).
    pub fn parse(name: &str) -> Option<Config> {
        let mut all = Vec::new();
        for v in LogVariant::ALL {
            for p in Policy::ALL {
                let one = Config::new(v, p);
                for s in Shape::ALL {
                    if s != Shape::Handoff {
                        all.push(Config { shape: s, ..one });
                    }
                    all.push(one.two_threads(s));
                }
            }
        }
        all.into_iter().find(|c| c.name() == name)
    }
}

/// A crash image whose recovery broke an invariant, with what reproduces it.
#[derive(Clone, Debug)]
pub struct Violation {
    /// The configuration's name ([`Config::name`]).
    pub config: String,
    /// The program's seed ([`program::generate_threads`]).
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

/// Figures of one kind of program.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Programs run.
    pub programs: u64,
    /// Crash images checked.
    pub images: u64,
    /// Violations found.
    pub violations: u64,
    /// Crash points at which both threads were inside a transaction.
    pub overlapping: u64,
    /// Redo commit groups written back ahead of an earlier group of the
    /// other thread (durable, writing none of their bytes): the commit
    /// ring's out-of-order write-back, explored.
    pub ahead: u64,
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
    /// Images checked up to and including the first violating one.
    pub detected_at: Option<u64>,
    /// The share of two-thread programs in these figures.
    pub two_thread: Tally,
    /// The first few, with reproducers.
    pub examples: Vec<Violation>,
}

impl Stats {
    /// Adds the figures of a run that came after these.
    pub fn merge(&mut self, o: &Stats) {
        if self.detected_at.is_none() {
            self.detected_at = o.detected_at.map(|d| self.images + d);
        }
        self.programs += o.programs;
        self.points += o.points;
        self.images += o.images;
        self.depth2 += o.depth2;
        self.violations += o.violations;
        self.two_thread.programs += o.two_thread.programs;
        self.two_thread.images += o.two_thread.images;
        self.two_thread.violations += o.two_thread.violations;
        self.two_thread.overlapping += o.two_thread.overlapping;
        self.two_thread.ahead += o.two_thread.ahead;
        for v in &o.examples {
            if self.examples.len() < 5 {
                self.examples.push(v.clone());
            }
        }
    }
}

/// When exploration ends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Budget {
    /// After this much wall-clock time (results vary with the machine).
    Seconds(f64),
    /// After this many programs.
    Programs(u64),
    /// After the first programs (in seed order) whose crash images reach
    /// this many.
    Images(u64),
}

/// Options of [`explore`].
#[derive(Clone, Debug)]
pub struct Options {
    /// First seed; program `i` uses `seed + i`.
    pub seed: u64,
    /// When to stop.
    pub budget: Budget,
    /// Worker threads.
    pub threads: usize,
    /// Configurations, cycled through: program `i` runs `configs[i % len]`.
    pub configs: Vec<Config>,
    /// Stop at the first violation (mutation runs).
    pub stop_on_violation: bool,
}

impl Options {
    /// Without a mutation: every log variant × policy, with one thread
    /// (mixed, control, growth and reuse programs) and with two (mixed and
    /// handoff programs), with the default settings. With one: the configurations and program shapes aimed at
    /// the site ([`aim`]), stopping at the first violation.
    pub fn all(seed: u64, budget: Budget, mutation: Option<Site>) -> Options {
        let configs = match mutation {
            Some(m) => aim(m),
            None => {
                // Every variant × policy of one kind of program before the
                // next kind, so a short run covers every configuration.
                let kinds: [fn(Config) -> Config; 6] = [
                    |c| c,
                    |c| c.two_threads(Shape::Mixed),
                    |c| Config {
                        shape: Shape::Control,
                        ..c
                    },
                    |c| c.two_threads(Shape::Handoff),
                    |c| Config {
                        shape: Shape::Grow,
                        ..c
                    },
                    |c| Config {
                        shape: Shape::Reuse,
                        ..c
                    },
                ];
                let mut configs = Vec::new();
                for kind in kinds {
                    for v in LogVariant::ALL {
                        for p in Policy::ALL {
                            configs.push(kind(Config::new(v, p)));
                        }
                    }
                }
                // The reuse programs come last, and a 60-second run on two
                // cores reaches only the first few of them: the policy they
                // were made for (redo-async, whose write-back may hold a
                // freed block's values) and the variants whose programs are
                // cheapest (Simple's take tens of thousands of images each)
                // go first.
                let rank = |c: &Config| {
                    let policy = Policy::ALL.iter().rev().position(|&p| p == c.policy);
                    let cheap = [
                        LogVariant::Batch,
                        LogVariant::Optimized,
                        LogVariant::TwoLayer,
                    ];
                    (
                        policy,
                        cheap.iter().position(|&v| v == c.variant).unwrap_or(3),
                    )
                };
                let reuse =
                    (configs.iter().position(|c| c.shape == Shape::Reuse)).unwrap_or(configs.len());
                configs[reuse..].sort_by_key(rank);
                configs
            }
        };
        Options {
            seed,
            budget,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            configs,
            stop_on_violation: mutation.is_some(),
        }
    }
}

fn lock(m: &Mutex<Fold>) -> std::sync::MutexGuard<'_, Fold> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Results of the programs run so far, summed in program order.
struct Fold {
    /// Finished programs not yet summed (an earlier one still runs).
    waiting: BTreeMap<u64, Stats>,
    /// The next program to sum.
    next: u64,
    total: Stats,
    /// The budget is spent (or a violation found, when stopping at one).
    finished: bool,
    /// Workers still running.
    workers: usize,
    failure: Option<Error>,
}

/// Runs programs across the configurations until the budget is spent.
/// `progress` is called after each program with the totals so far.
pub fn explore(opts: &Options, progress: &(dyn Fn(&Stats) + Sync)) -> Result<Stats, Error> {
    if opts.configs.is_empty() {
        return Ok(Stats::default());
    }
    let start = Instant::now();
    let workers = opts.threads.max(1);
    let next = AtomicU64::new(0);
    // Programs above this index are not needed (their results are dropped).
    let cutoff = AtomicU64::new(u64::MAX);
    let running: Mutex<BTreeMap<u64, Arc<AtomicBool>>> = Mutex::default();
    let fold = Mutex::new(Fold {
        waiting: BTreeMap::new(),
        next: 0,
        total: Stats::default(),
        finished: false,
        workers,
        failure: None,
    });
    let changed = Condvar::new();
    // Stops the running programs above `cut` (with `all`, every one) and
    // keeps any later one from starting.
    let stop_above = |cut: u64, all: bool| {
        cutoff.fetch_min(cut, Ordering::Relaxed);
        for (&i, flag) in running.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            if all || i > cut {
                flag.store(true, Ordering::Relaxed);
            }
        }
    };
    std::thread::scope(|s| {
        if let Budget::Seconds(secs) = opts.budget {
            // The watchdog: at the deadline, every running program stops.
            let (fold, changed, stop_above) = (&fold, &changed, &stop_above);
            s.spawn(move || {
                let mut g = lock(fold);
                while g.workers > 0 {
                    let left = secs - start.elapsed().as_secs_f64();
                    if left <= 0.0 {
                        g.finished = true;
                        drop(g);
                        stop_above(0, true);
                        return;
                    }
                    g = changed
                        // (At most an hour at a time: the loop reckons again,
                        // and a budget no clock counts cannot panic here.)
                        .wait_timeout(g, Duration::from_secs_f64(left.min(3600.0)))
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            });
        }
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let over = lock(&fold).finished
                        || i > cutoff.load(Ordering::Relaxed)
                        || matches!(opts.budget, Budget::Programs(n) if i >= n);
                    if over {
                        break;
                    }
                    let cfg = &opts.configs[(i as usize) % opts.configs.len()];
                    let flag = Arc::new(AtomicBool::new(false));
                    running
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(i, flag.clone());
                    if lock(&fold).finished || i > cutoff.load(Ordering::Relaxed) {
                        flag.store(true, Ordering::Relaxed);
                    }
                    let r = run_program(
                        cfg,
                        opts.seed.wrapping_add(i),
                        &flag,
                        opts.stop_on_violation,
                    );
                    running.lock().unwrap_or_else(|p| p.into_inner()).remove(&i);
                    if opts.stop_on_violation && r.as_ref().is_ok_and(|st| st.violations > 0) {
                        // No program after this one can matter any more.
                        stop_above(i, false);
                    }
                    let mut g = lock(&fold);
                    match r {
                        Ok(st) => {
                            g.waiting.insert(i, st);
                            if let Some(cut) = sum_in_order(&mut g, opts) {
                                drop(g);
                                stop_above(cut, false);
                                g = lock(&fold);
                            }
                            progress(&g.total);
                        }
                        Err(e) => {
                            g.failure.get_or_insert(e);
                            g.finished = true;
                            drop(g);
                            stop_above(0, true);
                            break;
                        }
                    }
                }
                let mut g = lock(&fold);
                g.workers -= 1;
                changed.notify_all();
            });
        }
    });
    let mut g = fold.into_inner().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = g.failure.take() {
        return Err(e);
    }
    if let Budget::Seconds(_) = opts.budget {
        // Every program run counts, in order (the time cut them anyway).
        for st in std::mem::take(&mut g.waiting).into_values() {
            g.total.merge(&st);
        }
    }
    Ok(g.total)
}

/// Sums the finished programs that follow the ones summed so far; when
/// that spends a count budget (or finds the violation sought), marks the
/// exploration finished and returns the last program needed.
fn sum_in_order(g: &mut Fold, opts: &Options) -> Option<u64> {
    while !g.finished {
        let Some(st) = g.waiting.remove(&g.next) else {
            break;
        };
        g.total.merge(&st);
        g.next += 1;
        let spent = match opts.budget {
            Budget::Seconds(_) => false,
            Budget::Programs(n) => g.total.programs >= n,
            Budget::Images(n) => g.total.images >= n,
        };
        if spent || (opts.stop_on_violation && g.total.violations > 0) {
            g.finished = true;
            g.waiting.clear();
            return Some(g.next - 1);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(configs: &[&str], budget: Budget, workers: usize) -> Stats {
        let configs = configs
            .iter()
            .map(|n| Config {
                max_tx: 3,
                ..Config::parse(n).expect("a configuration name")
            })
            .collect();
        let opts = Options {
            seed: 3,
            budget,
            threads: workers,
            configs,
            stop_on_violation: false,
        };
        explore(&opts, &|_| {}).expect("exploration runs")
    }

    fn figures(s: &Stats) -> (u64, u64, u64, u64, u64, Tally) {
        (
            s.programs,
            s.points,
            s.images,
            s.depth2,
            s.violations,
            s.two_thread,
        )
    }

    #[test]
    fn count_budgets_give_the_same_result_with_any_number_of_workers() {
        let names = ["batch-no-force", "batch-no-force-2t", "optimized-force-2t"];
        for budget in [Budget::Programs(4), Budget::Images(800)] {
            let one = small(&names, budget, 1);
            let three = small(&names, budget, 3);
            assert_eq!(figures(&one), figures(&three), "{budget:?}");
            assert!(one.two_thread.programs > 0);
        }
    }

    #[test]
    fn config_names_round_trip() {
        for n in [
            "simple-force",
            "batch-no-force-2t",
            "batch-force-2t-handoff",
            "optimized-force-churn",
        ] {
            assert_eq!(Config::parse(n).map(|c| c.name()).as_deref(), Some(n));
        }
        assert!(
            Config::parse("batch-force-handoff").is_none(),
            "handoff needs two threads"
        );
        assert!(Config::parse("batch").is_none());
    }
}
