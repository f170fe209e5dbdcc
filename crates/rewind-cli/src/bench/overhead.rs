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
//!
//! Each round's index sequence is drawn once, before the round, and every
//! system consumes that same slice: the random number generator is outside
//! every measurement, and all systems make exactly the same updates. Before
//! the measured rounds, each system runs one unmeasured warm-up round of the
//! same length (its pages faulted in, its caches and allocator warm).
//!
//! With `--features peers` (PMDK and a C compiler: `scripts/install-peers.sh`)
//! more systems run at every K: `pmdk` (`libpmemobj`: one libpmemobj
//! transaction per transaction, each update `pmemobj_tx_add_range_direct`
//! of its 8 bytes, then the store) and `c-nolog`, the `persist-nolog` work
//! as C loops, to check that the Rust baseline does no more than the
//! operations themselves: `c-loop`, the plainest loop (store, `clwb`;
//! `sfence` per transaction), and `c-loop-counted`, which also makes the
//! counter stores `persist::Domain` makes (one before each `clwb`, one
//! before each `sfence`). Every system then also gets `speed_vs_pmdk`
//! (pmdk's time / its time, per round, median), and `persist-nolog` gets
//! `ratio_vs_c_loop` and `ratio_vs_c_loop_counted` (its time / that loop's,
//! per round, median). PMDK's fences and flushed lines cannot be counted
//! from outside: its rows carry no `fences_per_tx` or `flushes_per_tx` (NaN
//! in the table). The plain C loop's are computed, not counted: it issues
//! exactly K `clwb` and one `sfence` per transaction; the other one counts.
//!
//! Also with `peers`: `c-floor` (`redo-floor`), the redo commit's physical
//! floor as a C loop (`peers/floor.c`): per transaction the commit ring's
//! lines (32-byte header, 16 bytes per update, whole lines) with
//! non-temporal stores, one `sfence`, then the K values stored and their
//! lines written back with no fence. Its counters are computed. Every
//! rewind row gets `ratio_vs_floor` (its time / the floor's, per round,
//! median), printed for the redo rows.

use std::path::Path;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::persist::Domain;
use rewind::{Backend, Counters, LogVariant, NvmLatency, PPtr, Policy, Pool, PoolConfig};

use super::{median, median_ratio, svg, Ctx, Scale};
use crate::error::CliError;
use crate::report::{Report, Row};
#[cfg(feature = "peers")]
use rewind_peers::{cloop, floor, pmdk};

const LAYOUT: &str = "rewind-bench-overhead";
/// Updates per transaction.
const KS: [u64; 3] = [1, 8, 64];
/// Measurements per system and K; the median is reported.
const ROUNDS: usize = 7;
/// Added to `K * 1000` for the warm-up round's seed (rounds use 0..ROUNDS).
const WARMUP_SEED: u64 = 999;
/// The range persist-nolog's time over the C loop's should fall in at K = 8.
const C_LOOP_AGREEMENT: (f64, f64) = (0.87, 1.15);

/// Array length and transactions per measurement for each K.
fn sizes(scale: Scale) -> (u64, [u64; 3]) {
    match scale {
        Scale::Tiny => (1 << 12, [20, 10, 4]),
        Scale::Quick => (1 << 20, [20_000, 10_000, 2_000]),
        Scale::Full => (1 << 20, [200_000, 100_000, 20_000]),
    }
}

/// Bytes of each pool: the data plus headroom for the allocator and the log
/// (pool/8 by default). PMDK's pool gets the same.
fn pool_size(m: u64) -> u64 {
    (m * 8 * 4).max(64 << 20)
}

/// The updates of one round: transaction `t` (0..n) writes the `k` elements
/// `idx[t*k..t*k+k]`, each index below `bound`. Every system consumes the
/// same sequence.
struct Sequence {
    k: u64,
    n: u64,
    bound: u64,
    idx: Vec<u64>,
}

impl Sequence {
    /// `n` transactions of `k` indices drawn uniformly from `0..m`.
    fn random(m: u64, k: u64, n: u64, seed: u64) -> Sequence {
        let mut rng = SmallRng::seed_from_u64(seed);
        let idx = (0..n * k).map(|_| rng.gen_range(0..m)).collect();
        Sequence {
            k,
            n,
            bound: m,
            idx,
        }
    }

    /// Each transaction's number and its indices, in order.
    fn txs(&self) -> impl Iterator<Item = (u64, &[u64])> {
        (0..self.n).zip(self.idx.chunks_exact(self.k as usize))
    }
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
    /// PMDK's libpmemobj, one libpmemobj transaction per transaction.
    #[cfg(feature = "peers")]
    Pmdk(pmdk::PmdkArray),
    /// The no-log baseline as a plain C loop; `counted`: with the counter
    /// stores `persist::Domain` makes.
    #[cfg(feature = "peers")]
    CLoop {
        array: cloop::CLoopArray,
        counted: bool,
    },
    /// The redo commit's physical floor as a C loop (`peers/floor.c`): the
    /// commit ring's lines with non-temporal stores, one fence, the data
    /// lines written back with no fence.
    #[cfg(feature = "peers")]
    Floor(floor::FloorArray),
}

struct Subject {
    system: &'static str,
    config: String,
    inner: System,
}

/// A pool of `variant` × `policy` in `dir` holding an array of `m` u64.
fn array_pool(
    dir: &Path,
    name: &str,
    m: u64,
    variant: LogVariant,
    policy: Policy,
    latency: NvmLatency,
) -> Result<(Pool, PPtr<u64>), CliError> {
    let cfg = PoolConfig::default()
        .log(variant)
        .policy(policy)
        .backend(Backend::Pmem)
        .nvm_latency(latency);
    super::array_pool(dir, name, LAYOUT, pool_size(m), &cfg, m)
}

/// Builds the subjects for one K, with fresh pools in `dir`: the two
/// baselines (and the C loop with peers), every variant × policy, at K = 1
/// `atomic_write`, and PMDK with peers. The rewind domains are charged the
/// emulated `latency`; the C loop and PMDK cannot be.
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
    #[cfg(feature = "peers")]
    for (config, counted) in [("c-loop", false), ("c-loop-counted", true)] {
        let path = dir.join(format!("{config}.pool"));
        let array = cloop::CLoopArray::create(&path, m)
            .map_err(CliError::io(format!("creating {}", path.display())))?;
        out.push(Subject {
            system: "c-nolog",
            config: config.into(),
            inner: System::CLoop { array, counted },
        });
    }
    #[cfg(feature = "peers")]
    {
        let path = dir.join("floor.pool");
        let array = floor::FloorArray::create(&path, m)
            .map_err(CliError::io(format!("creating {}", path.display())))?;
        out.push(Subject {
            system: "c-floor",
            config: "redo-floor".into(),
            inner: System::Floor(array),
        });
    }
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
    #[cfg(feature = "peers")]
    out.push(Subject {
        system: "pmdk",
        config: "libpmemobj".into(),
        inner: System::Pmdk(
            pmdk::PmdkArray::create(&dir.join("pmdk.pool"), m, pool_size(m))
                .map_err(CliError::io("PMDK pool"))?,
        ),
    });
    Ok(out)
}

impl Subject {
    /// Runs the transactions of `seq`; returns the time (until every
    /// committed value is in place: redo-async's write-back included), the
    /// time until the last commit returned, and the counters spent.
    fn measure(
        &mut self,
        seq: &Sequence,
    ) -> Result<(Duration, Duration, Option<Counters>), CliError> {
        // The C loop's indices are checked here, outside the measurement.
        #[cfg(feature = "peers")]
        let checked = cloop::Checked::new(&seq.idx, seq.k, seq.bound)
            .map_err(CliError::io("checking the index sequence"))?;
        let before = self.counters();
        // Inside the measurement, errors are built only when one happens:
        // an eagerly built `CliError` allocates its message on every call
        // (two allocations per update in persist-nolog, one formatted
        // message per transaction in rewind), work the systems do not do.
        let config = &self.config;
        #[cfg(feature = "peers")]
        let mut counts = [0u64; 2];
        let start = Instant::now();
        let mut commits = None;
        match &mut self.inner {
            System::Dram(v) => {
                debug_assert!(seq.bound <= v.len() as u64);
                for (t, ix) in seq.txs() {
                    for &i in ix {
                        v[i as usize] = t;
                    }
                }
                std::hint::black_box(&v);
            }
            System::NoLog(d) => {
                let err = |e| CliError::rewind("persist-nolog update")(e);
                debug_assert!(seq.bound * 8 <= d.len());
                for (t, ix) in seq.txs() {
                    for &i in ix {
                        let off = i * 8;
                        d.store_u64(off, t).map_err(err)?;
                        d.flush(off, 8).map_err(err)?;
                    }
                    // What makes the transaction durable; nothing makes it atomic.
                    d.fence().map_err(err)?;
                }
            }
            System::Rewind { pool, data } => {
                for (t, ix) in seq.txs() {
                    pool.transaction(|tx| {
                        for &i in ix {
                            tx.write(data.at(i), &t)?;
                        }
                        Ok::<_, rewind::Error>(())
                    })
                    .map_err(|e| CliError::rewind(format!("{config} transaction"))(e))?;
                }
                // A run has not finished while write-back is behind.
                commits = Some(start.elapsed());
                pool.sync()
                    .map_err(|e| CliError::rewind(format!("{config} sync"))(e))?;
            }
            System::Atomic { pool, data } => {
                for (t, ix) in seq.txs() {
                    for &i in ix {
                        pool.atomic_write(data.at(i), &t)
                            .map_err(|e| CliError::rewind(format!("{config} atomic_write"))(e))?;
                    }
                }
            }
            #[cfg(feature = "peers")]
            System::Pmdk(a) => {
                for (t, ix) in seq.txs() {
                    a.update_tx(ix, t)
                        .map_err(|e| CliError::io("pmdk transaction")(e))?;
                }
            }
            #[cfg(feature = "peers")]
            System::CLoop { array, counted } => {
                let err = |e| CliError::io("c-nolog run")(e);
                if *counted {
                    array.run_counted(&checked, &mut counts).map_err(err)?;
                } else {
                    array.run(&checked).map_err(err)?;
                }
            }
            #[cfg(feature = "peers")]
            System::Floor(array) => {
                array.run(&checked).map_err(CliError::io("floor run"))?;
            }
        }
        let elapsed = start.elapsed();
        let commits = commits.unwrap_or(elapsed);
        let spent = match &self.inner {
            // The plain C loop's are computed: it makes exactly K clwb and
            // one sfence per transaction. The other one counts them.
            #[cfg(feature = "peers")]
            System::CLoop { counted, .. } => {
                let mut c = Counters::default();
                (c.flushed_lines, c.fences) = match counted {
                    false => (seq.n * seq.k, seq.n),
                    true => (counts[0], counts[1]),
                };
                // Each written-back line is one NVM write.
                c.nvm_writes = c.flushed_lines;
                Some(c)
            }
            // Computed: per transaction the group's lines (32 + 16K bytes,
            // whole lines) non-temporal, K lines written back, one fence.
            #[cfg(feature = "peers")]
            System::Floor(_) => {
                let mut c = Counters::default();
                c.nt_lines = seq.n * (32 + 16 * seq.k).div_ceil(64);
                c.flushed_lines = seq.n * seq.k;
                c.fences = seq.n;
                c.nvm_writes = c.nt_lines + c.flushed_lines;
                Some(c)
            }
            _ => self.counters().zip(before).map(|(a, b)| a.since(&b)),
        };
        Ok((elapsed, commits, spent))
    }

    /// The counters so far, where this system has them.
    fn counters(&self) -> Option<Counters> {
        match &self.inner {
            System::Dram(_) => Some(Counters::default()),
            System::NoLog(d) => Some(d.counters()),
            System::Rewind { pool, .. } | System::Atomic { pool, .. } => Some(pool.counters()),
            #[cfg(feature = "peers")]
            System::Pmdk(_) | System::CLoop { .. } | System::Floor(_) => None,
        }
    }
}

/// Median time and mean counters of one subject at one K.
struct Result1 {
    system: &'static str,
    config: String,
    k: u64,
    /// Until every committed value is in place (sustained throughput).
    us_per_tx: f64,
    /// Until the last commit returned (redo-async's commit latency).
    commit_us_per_tx: f64,
    /// `None` where not counted (PMDK).
    fences_per_tx: Option<f64>,
    flushes_per_tx: Option<f64>,
    /// NVM writes as the emulation counts (and charges) them.
    nvm_writes_per_tx: Option<f64>,
    /// Median over rounds of this round's time / nolog's time in the same round.
    ratio_vs_nolog: f64,
    /// Median over rounds of pmdk's time / this round's time (when pmdk ran).
    speed_vs_pmdk: Option<f64>,
    /// The same with this system's time until its last commit returned.
    commit_speed_vs_pmdk: Option<f64>,
    /// persist-nolog only: median over rounds of its time / the plain C
    /// loop's (when the C loops ran).
    ratio_vs_c_loop: Option<f64>,
    /// persist-nolog only: the same against the C loop with the Domain's
    /// counter stores.
    ratio_vs_c_loop_counted: Option<f64>,
    /// rewind only: median over rounds of its time / the redo floor loop's
    /// (when it ran).
    ratio_vs_floor: Option<f64>,
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
        super::tiny_note(scale)
    );
    println!("  {}", super::latency_line(ctx.latency));
    let dir = crate::scratch::dir()?;
    println!("  pools in {}", dir.path().display());

    // The length grows as each K's subjects are built.
    let bar = super::progress(0);
    let mut results = Vec::new();
    for (&k, &n) in KS.iter().zip(&txs) {
        let mut subjects = subjects(dir.path(), m, k, ctx.latency)?;
        bar.inc_length(((ROUNDS + 1) * subjects.len()) as u64);
        let warm_up = Sequence::random(m, k, n, k * 1000 + WARMUP_SEED);
        for subject in subjects.iter_mut() {
            bar.set_message(format!("K={k} {} (warm-up)", subject.config));
            subject.measure(&warm_up)?;
            bar.inc(1);
        }
        let mut times = vec![Vec::new(); subjects.len()];
        let mut commit_times = vec![Vec::new(); subjects.len()];
        let mut counters = vec![Some(Counters::default()); subjects.len()];
        for round in 0..ROUNDS {
            let seq = Sequence::random(m, k, n, k * 1000 + round as u64);
            for (s, subject) in subjects.iter_mut().enumerate() {
                bar.set_message(format!("K={k} {}", subject.config));
                let (t, ct, c) = subject.measure(&seq)?;
                times[s].push(t);
                commit_times[s].push(ct);
                counters[s] = counters[s].zip(c).map(|(a, b)| a + b);
                bar.inc(1);
            }
        }
        let find = |system: &str, config: &str| {
            subjects
                .iter()
                .position(|x| x.system == system && x.config == config)
        };
        let (nolog, pmdk) = (find("persist-nolog", "nolog"), find("pmdk", "libpmemobj"));
        let c_loop = find("c-nolog", "c-loop");
        let c_loop_counted = find("c-nolog", "c-loop-counted");
        let floor = find("c-floor", "redo-floor");
        for (s, subject) in subjects.iter().enumerate() {
            let tx = (n * ROUNDS as u64) as f64;
            let per_tx = |c: &Option<Counters>, f: fn(&Counters) -> u64| {
                c.as_ref().map(|c| f(c) as f64 / tx)
            };
            results.push(Result1 {
                system: subject.system,
                config: subject.config.clone(),
                k,
                ratio_vs_nolog: nolog.map_or(f64::NAN, |b| median_ratio(&times[s], &times[b])),
                speed_vs_pmdk: pmdk.map(|p| median_ratio(&times[p], &times[s])),
                commit_speed_vs_pmdk: pmdk.map(|p| median_ratio(&times[p], &commit_times[s])),
                ratio_vs_c_loop: c_loop
                    .filter(|_| Some(s) == nolog)
                    .map(|c| median_ratio(&times[s], &times[c])),
                ratio_vs_c_loop_counted: c_loop_counted
                    .filter(|_| Some(s) == nolog)
                    .map(|c| median_ratio(&times[s], &times[c])),
                ratio_vs_floor: floor
                    .filter(|_| subject.system == "rewind")
                    .map(|f| median_ratio(&times[s], &times[f])),
                us_per_tx: median(times[s].iter().map(Duration::as_secs_f64).collect()) * 1e6
                    / n as f64,
                commit_us_per_tx: median(
                    commit_times[s].iter().map(Duration::as_secs_f64).collect(),
                ) * 1e6
                    / n as f64,
                fences_per_tx: per_tx(&counters[s], |c| c.fences),
                flushes_per_tx: per_tx(&counters[s], |c| c.flushed_lines + c.nt_lines),
                nvm_writes_per_tx: per_tx(&counters[s], |c| c.nvm_writes),
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
    print_async(&report);
    print_c_loop_check(&report);
    print_floor(&report);
    super::write_results(&report, out, &chart(&report))
}

/// The redo rows' time over the floor loop's, per K (when it ran).
fn print_floor(report: &Report) {
    let redo: Vec<String> = configs(report)
        .into_iter()
        .filter(|(s, c)| s == "rewind" && c.ends_with("-redo"))
        .map(|(_, c)| c)
        .collect();
    if !report.rows.iter().any(|r| r.metric == "ratio_vs_floor") {
        return;
    }
    println!("  redo time / the C floor loop's (same lines, one fence, clwb of the data):");
    for c in redo {
        let cells: Vec<String> = KS
            .iter()
            .map(|k| {
                let v = report.value("rewind", &c, &format!("K={k}"), "ratio_vs_floor");
                format!("K={k}: {:.2}x", v.unwrap_or(f64::NAN))
            })
            .collect();
        println!("    {c:<24} {}", cells.join("  "));
    }
}

/// Redo-async's commit latency beside its sustained time (the table's,
/// which waits for write-back to finish).
fn print_async(report: &Report) {
    let async_configs: Vec<String> = configs(report)
        .into_iter()
        .filter(|(s, c)| s == "rewind" && c.ends_with("redo-async"))
        .map(|(_, c)| c)
        .collect();
    if async_configs.is_empty() {
        return;
    }
    println!("  redo-async: us/tx until the last commit returned / until write-back finished");
    for c in async_configs {
        let mut line = format!("    {c:<28}");
        for k in KS {
            let param = format!("K={k}");
            let v = |m: &str| report.value("rewind", &c, &param, m).unwrap_or(f64::NAN);
            line.push_str(&format!(
                "  K={k}: {:.3} / {:.3}",
                v("commit_us_per_tx"),
                v("us_per_tx")
            ));
            if let Some(p) = report.value("rewind", &c, &param, "commit_speed_vs_pmdk") {
                line.push_str(&format!(" ({p:.2}× pmdk by commit latency)"));
            }
        }
        println!("{line}");
    }
    println!();
}

/// persist-nolog against the C loops (peers only): the Rust baseline
/// should cost what the operations cost. A warning, not a failure: on this
/// shared machine one run can be off by noise alone.
fn print_c_loop_check(report: &Report) {
    let ratio =
        |metric: &str, k: u64| report.value("persist-nolog", "nolog", &format!("K={k}"), metric);
    let Some(r) = ratio("ratio_vs_c_loop", 8) else {
        return;
    };
    let (low, high) = C_LOOP_AGREEMENT;
    let others = |metric: &str| {
        [1, 64]
            .into_iter()
            .filter_map(|k| ratio(metric, k).map(|r| format!("K={k}: {r:.2}×")))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "  persist-nolog vs C loop at K=8: {r:.2}× (must be within {high:.2}); {}",
        others("ratio_vs_c_loop")
    );
    let counted = ratio("ratio_vs_c_loop_counted", 8);
    if let Some(c) = counted {
        println!(
            "  persist-nolog vs C loop with the Domain's counter stores at K=8: {c:.2}×; {}",
            others("ratio_vs_c_loop_counted")
        );
    }
    if r > high {
        println!(
            "  WARNING: persist-nolog takes {r:.2}× the C loop's time at K=8, above {high}: \
             the Rust baseline does work the plain loop does not, or the machine was noisy; run again"
        );
    } else if r < low {
        println!(
            "  WARNING: persist-nolog takes {r:.2}× the C loop's time at K=8, below {low}: \
             the plain C loop is the slower one; on this project's VM a store followed at once \
             by the clwb of its line is slow, and the Domain's counter store between them \
             avoids it (compare the C loop with the counter stores; BENCHMARKS.md, Peers)"
        );
    }
    println!();
}

/// The report rows, with each time also as a ratio to `persist-nolog` at the
/// same K (and to pmdk and the C loop when they ran).
fn rows(results: &[Result1]) -> Vec<Row> {
    let mut rows = Vec::new();
    for r in results {
        let param = format!("K={}", r.k);
        for (metric, value, unit) in [
            ("us_per_tx", Some(r.us_per_tx), "us"),
            ("commit_us_per_tx", Some(r.commit_us_per_tx), "us"),
            ("fences_per_tx", r.fences_per_tx, "count"),
            ("flushes_per_tx", r.flushes_per_tx, "lines"),
            ("nvm_writes_per_tx", r.nvm_writes_per_tx, "writes"),
            ("ratio_vs_nolog", Some(r.ratio_vs_nolog), "x"),
            ("speed_vs_pmdk", r.speed_vs_pmdk, "x"),
            ("commit_speed_vs_pmdk", r.commit_speed_vs_pmdk, "x"),
            ("ratio_vs_c_loop", r.ratio_vs_c_loop, "x"),
            ("ratio_vs_c_loop_counted", r.ratio_vs_c_loop_counted, "x"),
            ("ratio_vs_floor", r.ratio_vs_floor, "x"),
        ] {
            // Metrics a system does not have (PMDK's counters, the ratios
            // to peers that did not run) get no row.
            let Some(value) = value else { continue };
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

/// Config rows x K columns: time, ratio to nolog, speed against pmdk (when
/// it ran), fences and flushed lines per tx. NaN: not measured.
fn print_table(report: &Report) {
    let pmdk = report.rows.iter().any(|r| r.metric == "speed_vs_pmdk");
    let width = if pmdk { 49 } else { 41 };
    let mut head1 = format!("  {:<30}", "");
    let mut head2 = format!("  {:<30}", "system/config");
    for k in KS {
        head1.push_str(&format!(" | {:<width$}", format!("K={k}")));
        head2.push_str(&format!(" | {:>9} {:>7}", "us/tx", "x nolog"));
        if pmdk {
            head2.push_str(&format!(" {:>7}", "vs pmdk"));
        }
        head2.push_str(&format!(" {:>7} {:>7} {:>7}", "fences", "lines", "nvm"));
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
                " | {:>9.3} {:>6.2}x",
                v("us_per_tx"),
                v("ratio_vs_nolog")
            ));
            if pmdk {
                line.push_str(&format!(" {:>6.2}x", v("speed_vs_pmdk")));
            }
            line.push_str(&format!(
                " {:>7.2} {:>7.2} {:>7.2}",
                v("fences_per_tx"),
                v("flushes_per_tx"),
                v("nvm_writes_per_tx")
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
