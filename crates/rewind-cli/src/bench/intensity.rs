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
use rewind::{Backend, LogVariant, NvmLatency, PPtr, Policy, Pool, PoolConfig};

use super::{median, median_ratio, svg, Ctx, Scale};
use crate::error::CliError;
use crate::report::{Report, Row};

const LAYOUT: &str = "rewind-bench-intensity";
/// Elements of the persistent array.
const ARRAY: u64 = 1 << 16;
/// Update intensities, in percent.
const INTENSITIES: [u64; 6] = [1, 5, 10, 25, 50, 100];

/// Updates in the transaction, rounds.
fn sizes(scale: Scale) -> (u64, usize) {
    match scale {
        Scale::Tiny => (50, 1),
        Scale::Quick => (4_000, 3),
        Scale::Full => (40_000, 5),
    }
}

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

struct Subject {
    name: String,
    inner: System,
}

impl Subject {
    /// `updates` updates, each followed by `steps` steps of computation.
    fn measure(&mut self, updates: u64, steps: u64, seed: u64) -> Result<Duration, CliError> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let start = Instant::now();
        match &mut self.inner {
            System::NoLog(d) => {
                // Errors are built only on failure: nothing allocates per update.
                let err = |e| CliError::rewind("persist-nolog update")(e);
                for t in 0..updates {
                    let off = rng.gen_range(0..ARRAY) * 8;
                    d.store_u64(off, t).map_err(err)?;
                    d.flush(off, 8).map_err(err)?;
                    work(steps);
                }
                d.fence().map_err(err)?;
            }
            System::Rewind { pool, data } => {
                pool.transaction(|tx| {
                    for t in 0..updates {
                        tx.write(data.at(rng.gen_range(0..ARRAY)), &t)?;
                        work(steps);
                    }
                    Ok::<_, rewind::Error>(())
                })
                .map_err(|e| CliError::rewind(format!("{} transaction", self.name))(e))?;
                // Redo-async: done when write-back has caught up.
                pool.sync()
                    .map_err(|e| CliError::rewind(format!("{} sync", self.name))(e))?;
            }
        }
        Ok(start.elapsed())
    }
}

fn subjects(dir: &Path, updates: u64, latency: NvmLatency) -> Result<Vec<Subject>, CliError> {
    let path = dir.join("nolog.pool");
    let _ = std::fs::remove_file(&path);
    let mut domain = Domain::create_file(&path, ARRAY * 8, Backend::Pmem)
        .map_err(CliError::rewind(format!("creating {}", path.display())))?;
    domain.set_latency(latency);
    let mut out = vec![Subject {
        name: "persist-nolog".into(),
        inner: System::NoLog(domain),
    }];
    for variant in LogVariant::ALL {
        for policy in Policy::ALL {
            let name = format!("{variant}-{policy}");
            // The whole transaction stays in the log until it commits.
            let size = (updates * 640 + ARRAY * 8 * 4).max(64 << 20);
            let cfg = PoolConfig::default()
                .log(variant)
                .policy(policy)
                .backend(Backend::Pmem)
                .nvm_latency(latency);
            let (pool, data) = super::array_pool(dir, &name, LAYOUT, size, &cfg, ARRAY)?;
            out.push(Subject {
                name,
                inner: System::Rewind {
                    pool: Box::new(pool),
                    data,
                },
            });
        }
    }
    Ok(out)
}

struct Result1 {
    name: String,
    intensity: u64,
    ms: f64,
    overhead: f64,
}

pub fn run(ctx: &Ctx, out: &Path) -> Result<(), CliError> {
    let (updates, rounds) = sizes(ctx.scale);
    println!(
        "bench intensity (REWIND Fig. 3 left): one transaction of {updates} random 8-byte updates, each followed by computation; update intensity {}%; median of {rounds} alternating rounds{}",
        INTENSITIES
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        super::tiny_note(ctx.scale)
    );
    println!("  {}", super::latency_line(ctx.latency));
    let dir = crate::scratch::dir()?;
    println!("  pools in {}", dir.path().display());
    let mut subjects = subjects(dir.path(), updates, ctx.latency)?;
    // The unit of computation: one non-logged NVM store, measured on the
    // baseline (warm: after one unmeasured pass).
    let rate = steps_per_ns();
    subjects[0].measure(updates, 0, 0)?;
    let unit_ns = subjects[0].measure(updates, 0, 1)?.as_nanos() as f64 / updates as f64;
    println!(
        "  one non-logged NVM store: {unit_ns:.1} ns ({:.0} computation steps)",
        unit_ns * rate
    );
    let bar = super::progress((INTENSITIES.len() * rounds * subjects.len()) as u64);
    let mut results = Vec::new();
    for &p in &INTENSITIES {
        let steps = ((100.0 / p as f64 - 1.0) * unit_ns * rate).round() as u64;
        let mut times = vec![Vec::new(); subjects.len()];
        for round in 0..rounds {
            for (s, subject) in subjects.iter_mut().enumerate() {
                bar.set_message(format!("{p}% {}", subject.name));
                times[s].push(subject.measure(updates, steps, p * 100 + round as u64)?);
                bar.inc(1);
            }
        }
        for (s, subject) in subjects.iter().enumerate() {
            results.push(Result1 {
                name: subject.name.clone(),
                intensity: p,
                ms: median(times[s].iter().map(|t| t.as_secs_f64() * 1e3).collect()),
                overhead: median_ratio(&times[s], &times[0]),
            });
        }
    }
    bar.finish_and_clear();
    let report = Report {
        bench: "intensity".into(),
        rows: rows(&results),
    };
    print_table(&results);
    super::write_results(&report, out, &chart(&results))
}

fn rows(results: &[Result1]) -> Vec<Row> {
    let mut rows = Vec::new();
    for r in results {
        let system = if r.name == "persist-nolog" {
            "persist-nolog"
        } else {
            "rewind"
        };
        for (metric, value, unit) in [("ms", r.ms, "ms"), ("ratio_vs_nolog", r.overhead, "x")] {
            rows.push(Row {
                system: system.into(),
                config: r.name.clone(),
                param: format!("{}%", r.intensity),
                metric: metric.into(),
                value,
                unit: unit.into(),
            });
        }
    }
    rows
}

fn names(results: &[Result1]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in results {
        if !out.contains(&r.name) {
            out.push(r.name.clone());
        }
    }
    out
}

fn print_table(results: &[Result1]) {
    println!();
    let mut head = format!("  {:<20}", "config");
    for p in INTENSITIES {
        head.push_str(&format!(" | {:>16}", format!("{p}% updates")));
    }
    println!("{head}");
    for name in names(results) {
        let mut line = format!("  {name:<20}");
        for p in INTENSITIES {
            let r = results
                .iter()
                .find(|r| r.name == name && r.intensity == p)
                .expect("measured");
            line.push_str(&format!(" | {:>7.2} ms {:>5.2}x", r.ms, r.overhead));
        }
        println!("{line}");
    }
    println!();
}

fn chart(results: &[Result1]) -> String {
    let series: Vec<String> = names(results)
        .into_iter()
        .filter(|n| n != "persist-nolog")
        .collect();
    let groups: Vec<String> = INTENSITIES.iter().map(|p| format!("{p}%")).collect();
    let value = |g: usize, s: usize| {
        results
            .iter()
            .find(|r| r.name == series[s] && r.intensity == INTENSITIES[g])
            .map_or(f64::NAN, |r| r.overhead)
    };
    svg::grouped_bars(
        "logging overhead vs update intensity (REWIND Fig. 3 left)",
        "time over the non-recoverable baseline (log scale)",
        &groups,
        &series,
        value,
    )
}
