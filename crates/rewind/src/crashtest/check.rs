//! Checking one crash point: the images a power failure there could leave,
//! each recovered on a copy and compared with what the program committed.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::alloc;
use crate::log::adll::List;
use crate::persist::sim::{Point, SimState};
use crate::persist::{Domain, Site};
use crate::pool::Pool;

use super::program::{self, Model, Op, Rng};
use super::{Config, Stats, Violation, LAYOUT};

/// What a crash may leave: the state after the transactions that returned
/// committed, plus, per thread, one of the outcomes its transaction in
/// flight may have: nothing, or what its finished nested top actions left
/// (one more while an action is ending), or all of it if it is meant to
/// commit.
pub(super) struct Expect {
    pub(super) committed: Model,
    /// Per thread, the outcomes of its transaction in flight (plain
    /// operations applied whole); empty when none is.
    pub(super) in_flight: Vec<Vec<Vec<Op>>>,
    /// Per thread, whether it is inside a transaction (committing or not).
    pub(super) busy: Vec<bool>,
}

impl Expect {
    pub(super) fn new(threads: usize) -> Expect {
        Expect {
            committed: Model::initial(),
            in_flight: vec![Vec::new(); threads],
            busy: vec![false; threads],
        }
    }

    /// Every state recovery may produce. Threads touch disjoint parts of
    /// the root (a handed-off slot is written by one thread at a time), so
    /// the order in which in-flight transactions apply does not matter.
    fn allowed(&self) -> Vec<Model> {
        let mut out = vec![self.committed.clone()];
        for outcomes in self.in_flight.iter().filter(|o| !o.is_empty()) {
            out = out
                .iter()
                .flat_map(|m| {
                    outcomes.iter().map(move |ops| {
                        let mut m = m.clone();
                        ops.iter().for_each(|op| m.apply(op));
                        m
                    })
                })
                .collect();
        }
        out
    }
}

/// State shared by a program's crash hook and its runner.
pub(super) struct Shared {
    pub(super) expect: Expect,
    pub(super) stats: Stats,
    pub(super) rng: Rng,
    pub(super) last_empty: bool,
    /// Stop exploring this program at its first violation.
    pub(super) first_only: bool,
}

impl Shared {
    pub(super) fn new(seed: u64, threads: usize, first_only: bool) -> Shared {
        Shared {
            expect: Expect::new(threads),
            stats: Stats {
                programs: 1,
                ..Stats::default()
            },
            rng: Rng::new(seed ^ 0x5eed),
            last_empty: false,
            first_only,
        }
    }

    /// Whether exploring this program is over (first violation found).
    pub(super) fn halted(&self) -> bool {
        self.first_only && self.stats.violations > 0
    }
}

/// Recovers `image` and checks it against the states it may hold
/// (`allowed[0]` is the committed one); returns the recovered model.
pub(super) fn check_image(
    image: Vec<u8>,
    allowed: &[Model],
    mutation: Option<Site>,
) -> Result<(Model, Pool), String> {
    if let Ok(path) = std::env::var("REWIND_DUMP_IMAGE") {
        let copy = image.clone();
        let r = check_image_inner(image, allowed, mutation);
        if r.is_err() && !std::path::Path::new(&path).exists() {
            let _ = std::fs::write(path, &copy);
        }
        return r;
    }
    check_image_inner(image, allowed, mutation)
}

fn check_image_inner(
    image: Vec<u8>,
    allowed: &[Model],
    mutation: Option<Site>,
) -> Result<(Model, Pool), String> {
    let mut dom = Domain::sim_from_image(image);
    dom.set_mutation(mutation);
    let pool = Pool::open_domain(dom, LAYOUT).map_err(|e| format!("recovery failed: {e}"))?;
    let (m, reach) = program::read(&pool)?;
    if !allowed.contains(&m) {
        return Err(format!("recovered state is neither the committed one nor the in-flight transactions applied whole: {}", diff(&m, &allowed[0])));
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
pub(super) fn guarded<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
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

pub(super) fn visit(
    sim: &SimState,
    at: Point,
    cfg: &Config,
    seed: u64,
    prog: &str,
    sh: &mut Shared,
    stop: &AtomicBool,
) {
    if stop.load(Ordering::Relaxed) || sh.halted() {
        return;
    }
    let empty = sim.pending_lines().is_empty();
    if empty && sh.last_empty {
        return; // the same durable image as the previous point
    }
    sh.last_empty = empty;
    sh.stats.points += 1;
    if sh.expect.busy.len() > 1 && sh.expect.busy.iter().all(|&b| b) {
        sh.stats.two_thread.overlapping += 1;
    }
    let imgs = images(sim, cfg, &mut sh.rng);
    let allowed = sh.expect.allowed();
    let mut adll_done = false;
    for (label, img) in imgs {
        if sh.halted() {
            return;
        }
        sh.stats.images += 1;
        // An image that catches an ADLL operation in flight makes recovery
        // redo it: crash that recovery at every fence. Others: a sample.
        // (One image per crash point is enough: they share the interrupted operation.)
        let adll_in_flight =
            !adll_done && (List::LOG.in_flight(&img) || List::TREE.in_flight(&img));
        adll_done |= adll_in_flight;
        let depth2 = adll_in_flight
            || (cfg.depth2_every > 0 && sh.stats.images.is_multiple_of(cfg.depth2_every));
        let keep = depth2.then(|| img.clone());
        let r = guarded(|| check_image(img, &allowed, cfg.mutation));
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
                    if sh.halted() {
                        return;
                    }
                    sh.stats.images += 1;
                    sh.stats.depth2 += 1;
                    if let Err(m) =
                        guarded(|| check_image(img2, std::slice::from_ref(&model), cfg.mutation))
                    {
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
pub(super) fn report(
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
    sh.stats.detected_at.get_or_insert(sh.stats.images);
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
