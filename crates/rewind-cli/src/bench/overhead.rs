//! REWIND Fig. 3: the cost of recoverability against update intensity.
//!
//! A persistent array of M u64; each transaction writes K random elements
//! (K = 1, 8, 64). Every log variant and policy of rewind runs beside the
//! baselines: `volatile` (plain stores to DRAM) and `persist-nolog` (each
//! store flushed, one fence per transaction, no log: durable, not atomic).
//! All systems see the same index sequence; they are measured in
//! alternating rounds and the median round counts, so a burst of machine
//! noise hits every system alike instead of one. The ratio to
//! `persist-nolog` is taken per round, against the nolog measurement made
//! beside it, and the median of those ratios is reported: on a shared,
//! noisy machine the baseline drifts between rounds, and a ratio of two
//! separately taken medians would carry that drift.
//!
//! At K = 1 the `atomic_write` rows make the same single update with
//! `Pool::atomic_write` instead of a transaction (MARS's AtomicWrite), on a
//! Batch pool of each policy.

use std::path::Path;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::persist::Domain;
use rewind::{
    Backend, Counters, LogVariant, NvmLatency, PPtr, Pod, Policy, Pool, PoolConfig, Zeroable,
};

use super::{svg, Ctx, Scale};
use crate::error::CliError;
use crate::report::{Report, Row};

const LAYOUT: &str = "rewind-bench-overhead";
/// Updates per transaction.
const KS: [u64; 3] = [1, 8, 64];
/// Measurements per system and K; the median is reported.
const ROUNDS: usize = 7;

/// Array length and transactions per measurement for each K.
fn sizes(scale: Scale) -> (u64, [u64; 3]) {
    match scale {
        Scale::Tiny => (1 << 12, [20, 10, 4]),
        Scale::Quick => (1 << 20, [20_000, 10_000, 2_000]),
        Scale::Full => (1 << 20, [200_000, 100_000, 20_000]),
    }
}

/// The pool's root: the array.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct ArrayRoot {
    data: PPtr<u64>,
    len: u64,
}

/// One system under test, holding its array.
enum System {
    Dram(Vec<u64>),
    NoLog(Domain),
    // Boxed: a Pool is large, and the other variants are small.
    Rewind {
        pool: Box<Pool>,
        data: PPtr<u64>,
    },
    /// The same pool kind, each update by `Pool::atomic_write`.
    Atomic {
        pool: Box<Pool>,
        data: PPtr<u64>,
    },
}

struct Subject {
    system: &'static str,
    config: String,
    inner: System,
}

/// A pool of `config` in `dir` holding an array of `m` u64.
fn array_pool(
    dir: &Path,
    name: &str,
    m: u64,
    variant: LogVariant,
    policy: Policy,
    latency: NvmLatency,
) -> Result<(Pool, PPtr<u64>), CliError> {
    let path = dir.join(format!("{name}.pool"));
    let _ = std::fs::remove_file(&path);
    // Data plus headroom for the allocator and the log (pool/8 by default).
    let size = (m * 8 * 4).max(64 << 20);
    let cfg = PoolConfig::default()
        .log(variant)
        .policy(policy)
        .backend(Backend::Pmem)
        .nvm_latency(latency);
    let pool = Pool::create(&path, LAYOUT, size, &cfg)
        .map_err(CliError::rewind(format!("creating {}", path.display())))?;
    let data = pool
        .transaction(|tx| {
            let root = tx.root::<ArrayRoot>()?;
            let data = tx.alloc_array::<u64>(m)?;
            tx.write(root, &ArrayRoot { data, len: m })?;
            Ok::<_, rewind::Error>(data)
        })
        .map_err(CliError::rewind(format!("allocating the array in {name}")))?;
    Ok((pool, data))
}

/// Builds the subjects for one K, with fresh pools in `dir`: the two
/// baselines, every variant × policy, and at K = 1 `atomic_write`.
fn subjects(dir: &Path, m: u64, k: u64, latency: NvmLatency) -> Result<Vec<Subject>, CliError> {
    let mut out = vec![Subject {
        system: "volatile",
        config: "dram".into(),
        inner: System::Dram(vec![0; m as usize]),
    }];
    let path = dir.join("nolog.pool");
    let _ = std::fs::remove_file(&path);
    let mut domain = Domain::create_file(&path, m * 8, Backend::Pmem)
        .map_err(CliError::rewind(format!("creating {}", path.display())))?;
    // Charged by the same rules as the pools.
    domain.set_latency(latency);
    out.push(Subject {
        system: "persist-nolog",
        config: "nolog".into(),
        inner: System::NoLog(domain),
    });
    for variant in LogVariant::ALL {
        for policy in Policy::ALL {
            let config = format!("{variant}-{policy}");
            let (pool, data) = array_pool(dir, &config, m, variant, policy, latency)?;
            out.push(Subject {
                system: "rewind",
                config,
                inner: System::Rewind {
                    pool: Box::new(pool),
                    data,
                },
            });
        }
    }
    if k == 1 {
        for policy in Policy::ALL {
            let config = format!("{}-{policy}", LogVariant::Batch);
            let name = format!("atomic-{config}");
            let (pool, data) = array_pool(dir, &name, m, LogVariant::Batch, policy, latency)?;
            out.push(Subject {
                system: "atomic_write",
                config,
                inner: System::Atomic {
                    pool: Box::new(pool),
                    data,
                },
            });
        }
    }
    Ok(out)
}

impl Subject {
    /// Runs `n` transactions of `k` updates; returns the time and the counters spent.
    fn measure(
        &mut self,
        m: u64,
        k: u64,
        n: u64,
        seed: u64,
    ) -> Result<(Duration, Counters), CliError> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let start = Instant::now();
        let before = self.counters();
        match &mut self.inner {
            System::Dram(v) => {
                for t in 0..n {
                    for _ in 0..k {
                        v[rng.gen_range(0..m) as usize] = t;
                    }
                }
                std::hint::black_box(&v);
            }
            System::NoLog(d) => {
                let err = || CliError::rewind("persist-nolog update");
                for t in 0..n {
                    for _ in 0..k {
                        let off = rng.gen_range(0..m) * 8;
                        d.store_u64(off, t).map_err(err())?;
                        d.flush(off, 8).map_err(err())?;
                    }
                    // What makes the transaction durable; nothing makes it atomic.
                    d.fence().map_err(err())?;
                }
            }
            System::Rewind { pool, data } => {
                for t in 0..n {
                    pool.transaction(|tx| {
                        for _ in 0..k {
                            tx.write(data.at(rng.gen_range(0..m)), &t)?;
                        }
                        Ok::<_, rewind::Error>(())
                    })
                    .map_err(CliError::rewind(format!("{} transaction", self.config)))?;
                }
            }
            System::Atomic { pool, data } => {
                for t in 0..n {
                    for _ in 0..k {
                        pool.atomic_write(data.at(rng.gen_range(0..m)), &t)
                            .map_err(CliError::rewind(format!("{} atomic_write", self.config)))?;
                    }
                }
            }
        }
        let elapsed = start.elapsed();
        Ok((elapsed, self.counters().since(&before)))
    }

    fn counters(&self) -> Counters {
        match &self.inner {
            System::Dram(_) => Counters::default(),
            System::NoLog(d) => d.counters(),
            System::Rewind { pool, .. } | System::Atomic { pool, .. } => pool.counters(),
        }
    }
}

/// Median time and mean counters of one subject at one K.
struct Result1 {
    system: &'static str,
    config: String,
    k: u64,
    us_per_tx: f64,
    fences_per_tx: f64,
    flushes_per_tx: f64,
    /// Median over rounds of this round's time / nolog's time in the same round.
    ratio_vs_nolog: f64,
}

pub fn run(ctx: &Ctx, out: &Path) -> Result<(), CliError> {
    let scale = ctx.scale;
    let (m, txs) = sizes(scale);
    println!(
        "bench overhead (REWIND Fig. 3): array of {m} u64 ({} KiB), K random 8-byte updates per transaction",
        (m * 8) >> 10
    );
    println!(
        "  transactions per measurement: {}; median of {ROUNDS} alternating rounds{}",
        KS.iter()
            .zip(txs)
            .map(|(k, n)| format!("K={k}: {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        if scale == Scale::Tiny {
            " (tiny: format test only)"
        } else {
            ""
        }
    );
    println!("  {}", super::latency_line(ctx.latency));
    let dir = crate::scratch::dir()?;
    println!("  pools in {}", dir.path().display());

    // Eight subjects at every K, two more at K = 1.
    let bar = ProgressBar::new(((KS.len() * 8 + 2) * ROUNDS) as u64);
    bar.set_style(
        ProgressStyle::with_template("  {bar:40} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut results = Vec::new();
    for (&k, &n) in KS.iter().zip(&txs) {
        let mut subjects = subjects(dir.path(), m, k, ctx.latency)?;
        let mut times = vec![Vec::new(); subjects.len()];
        let mut counters = vec![Counters::default(); subjects.len()];
        for round in 0..ROUNDS {
            let seed = k * 1000 + round as u64;
            for (s, subject) in subjects.iter_mut().enumerate() {
                bar.set_message(format!("K={k} {}", subject.config));
                let (t, c) = subject.measure(m, k, n, seed)?;
                times[s].push(t);
                counters[s] = counters[s] + c;
                bar.inc(1);
            }
        }
        for (s, subject) in subjects.iter().enumerate() {
            let tx = (n * ROUNDS as u64) as f64;
            let nolog = subjects.iter().position(|x| x.system == "persist-nolog");
            let mut ratios: Vec<f64> = match nolog {
                Some(b) => times[s]
                    .iter()
                    .zip(&times[b])
                    .map(|(t, base)| t.as_secs_f64() / base.as_secs_f64())
                    .collect(),
                None => vec![f64::NAN],
            };
            ratios.sort_by(f64::total_cmp);
            results.push(Result1 {
                system: subject.system,
                config: subject.config.clone(),
                k,
                ratio_vs_nolog: ratios[ratios.len() / 2],
                us_per_tx: median(&mut times[s].clone()).as_secs_f64() * 1e6 / n as f64,
                fences_per_tx: counters[s].fences as f64 / tx,
                flushes_per_tx: (counters[s].flushed_lines + counters[s].nt_lines) as f64 / tx,
            });
        }
        // Dropping the subjects unmaps the pools; the directory goes at the end.
    }
    bar.finish_and_clear();

    let report = Report {
        bench: "overhead".into(),
        rows: rows(&results),
    };
    print_table(&report);
    let mut written = report.write(out)?;
    let svg_path = out.join("overhead.svg");
    crate::report::write_file(&svg_path, &chart(&report))?;
    written.push(svg_path);
    for p in written {
        println!("  wrote {}", p.display());
    }
    Ok(())
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort_unstable();
    times[times.len() / 2]
}

/// The report rows, with each time also as a ratio to `persist-nolog` at the same K.
fn rows(results: &[Result1]) -> Vec<Row> {
    let mut rows = Vec::new();
    for r in results {
        let param = format!("K={}", r.k);
        for (metric, value, unit) in [
            ("us_per_tx", r.us_per_tx, "us"),
            ("fences_per_tx", r.fences_per_tx, "count"),
            ("flushes_per_tx", r.flushes_per_tx, "lines"),
            ("ratio_vs_nolog", r.ratio_vs_nolog, "x"),
        ] {
            rows.push(Row {
                system: r.system.into(),
                config: r.config.clone(),
                param: param.clone(),
                metric: metric.into(),
                value,
                unit: unit.into(),
            });
        }
    }
    rows
}

/// Configs in the order measured, each with its system.
fn configs(report: &Report) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for r in &report.rows {
        let key = (r.system.clone(), r.config.clone());
        if !out.contains(&key) {
            out.push(key);
        }
    }
    out
}

/// Config rows x K columns: time, ratio to nolog, fences and flushed lines per tx.
fn print_table(report: &Report) {
    let mut head1 = format!("  {:<30}", "");
    let mut head2 = format!("  {:<30}", "system/config");
    for k in KS {
        head1.push_str(&format!(" | {:<33}", format!("K={k}")));
        head2.push_str(&format!(
            " | {:>9} {:>7} {:>7} {:>7}",
            "us/tx", "x nolog", "fences", "lines"
        ));
    }
    println!();
    println!("{}", head1.trim_end());
    println!("{head2}");
    for (system, config) in configs(report) {
        let mut line = format!("  {:<30}", format!("{system}/{config}"));
        for k in KS {
            let param = format!("K={k}");
            let v = |metric| {
                report
                    .value(&system, &config, &param, metric)
                    .unwrap_or(f64::NAN)
            };
            line.push_str(&format!(
                " | {:>9.3} {:>6.2}x {:>7.2} {:>7.2}",
                v("us_per_tx"),
                v("ratio_vs_nolog"),
                v("fences_per_tx"),
                v("flushes_per_tx")
            ));
        }
        println!("{line}");
    }
    println!();
}

fn chart(report: &Report) -> String {
    let keys = configs(report);
    let series: Vec<String> = keys
        .iter()
        .map(|(system, config)| match system.as_str() {
            "atomic_write" => format!("{system} {config}"),
            _ => config.clone(),
        })
        .collect();
    let groups: Vec<String> = KS.iter().map(|k| format!("K={k}")).collect();
    let value = |g: usize, s: usize| {
        let (system, config) = &keys[s];
        report
            .value(system, config, &groups[g], "us_per_tx")
            .unwrap_or(f64::NAN)
    };
    svg::grouped_bars(
        "rewind overhead vs update intensity (REWIND Fig. 3)",
        "microseconds per transaction (log scale)",
        &groups,
        &series,
        value,
    )
}
