//! REWIND Fig. 3 (left): logging overhead against update intensity.
//!
//! One transaction alternates a random 8-byte update of a persistent array
//! with computation, and commits at the end. The computation is calibrated
//! in units of one non-logged NVM store (a store and its `clwb`, measured
//! first on the no-log baseline): at update intensity `p`, each update is
//! followed by `1/p - 1` such units. The non-recoverable baseline does the
//! same loop with non-logged durable stores and one fence at the end. The
//! overhead is rewind's time over the baseline's in the same round, median
//! of the alternating rounds. Every log variant under both policies: the
//! paper's four configurations are Optimized (1L) and two-layer (2L), each
//! under force and no-force.

use std::path::Path;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::persist::Domain;
use rewind::{PPtr, Pool};

use super::harness::{every_config, Ctx, Label, Per, Sample};
use super::output::Report;
use super::ARRAY;
use crate::error::CliError;

/// Update intensities, in percent.
const INTENSITIES: [u64; 6] = [1, 5, 10, 25, 50, 100];

/// Computation that cannot be optimised away: `n` dependent steps.
#[inline(never)]
fn work(n: u64) {
    let mut x = std::hint::black_box(0x9e37_79b9_7f4a_7c15u64);
    for _ in 0..n {
        x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
    }
    std::hint::black_box(x);
}

/// Steps of [`work`] per nanosecond on this machine.
fn steps_per_ns() -> f64 {
    let n = 20_000_000;
    let start = Instant::now();
    work(n);
    n as f64 / start.elapsed().as_nanos().max(1) as f64
}

enum System {
    NoLog(Domain),
    Rewind { pool: Box<Pool>, data: PPtr<u64> },
}

impl System {
    /// `updates` updates, each followed by `steps` steps of computation.
    fn measure(&mut self, updates: u64, steps: u64, seed: u64) -> Result<Duration, CliError> {
        let mut rng = SmallRng::seed_from_u64(seed);
        // Errors are built only on failure: nothing allocates per update.
        let err = |what: &'static str| move |e| CliError::rewind(what)(e);
        let start = Instant::now();
        match self {
            System::NoLog(d) => {
                for t in 0..updates {
                    let off = rng.gen_range(0..ARRAY) * 8;
                    d.store_u64(off, t).map_err(err("persist-nolog store"))?;
                    d.flush(off, 8).map_err(err("persist-nolog flush"))?;
                    work(steps);
                }
                d.fence().map_err(err("persist-nolog fence"))?;
            }
            System::Rewind { pool, data } => {
                pool.transaction(|tx| {
                    for t in 0..updates {
                        tx.write(data.at(rng.gen_range(0..ARRAY)), &t)?;
                        work(steps);
                    }
                    Ok::<_, rewind::Error>(())
                })
                .map_err(err("rewind transaction"))?;
                // Redo-async: done when write-back has caught up.
                pool.sync().map_err(err("rewind sync"))?;
            }
        }
        Ok(start.elapsed())
    }
}

/// The baseline first, then every variant × policy.
fn systems(ctx: &Ctx, dir: &Path, updates: u64) -> Result<Vec<(Label, System)>, CliError> {
    let domain = ctx.domain(&dir.join("nolog.pool"), ARRAY * 8)?;
    let nolog = Label::new("persist-nolog", "nolog", "");
    let mut out = vec![(nolog, System::NoLog(domain))];
    for (name, variant, policy) in every_config() {
        // The whole transaction stays in the log until it commits.
        let size = (updates * 640 + ARRAY * 8 * 4).max(64 << 20);
        let cfg = ctx.pool_config(variant, policy);
        let (pool, data) = super::array_pool(dir, &name, size, &cfg, ARRAY)?;
        let rewind = System::Rewind {
            pool: Box::new(pool),
            data,
        };
        out.push((Label::new("rewind", name, ""), rewind));
    }
    Ok(out)
}

pub fn run(ctx: &Ctx, report: &mut Report) -> Result<(), CliError> {
    // Updates in the transaction, rounds.
    let (updates, rounds) = ctx.scale.pick((50, 1), (4_000, 3), (40_000, 5));
    println!("  {updates} updates; update intensity {INTENSITIES:?} %; median of {rounds} rounds");
    let dir = ctx.scratch()?;
    let mut systems = systems(ctx, dir.path(), updates)?;
    // The unit of computation: one non-logged NVM store, measured on the
    // baseline (warm: after one unmeasured pass).
    let rate = steps_per_ns();
    systems[0].1.measure(updates, 0, 0)?;
    let unit_ns = systems[0].1.measure(updates, 0, 1)?.as_nanos() as f64 / updates as f64;
    println!(
        "  one non-logged NVM store: {unit_ns:.1} ns ({:.0} computation steps)",
        unit_ns * rate
    );
    for p in INTENSITIES {
        let steps = ((100.0 / p as f64 - 1.0) * unit_ns * rate).round() as u64;
        systems.iter_mut().for_each(|s| s.0.param = format!("{p}%"));
        let m = ctx.seeded(&mut systems, (0, rounds), |s, r| {
            Ok(Sample::of(s.measure(updates, steps, p * 100 + r)?, vec![]))
        })?;
        let bases = [("nolog", "persist-nolog")];
        m.report(report, &Per::whole("ms", "ms"), &bases, &[]);
    }
    Ok(())
}
