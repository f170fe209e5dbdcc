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
//! On x86_64 with the Pmem backend, with or without `peers`: `c-floor`
//! (`redo-floor`), the redo commit's physical floor as a C loop
//! (`peers/floor.c`): per transaction the commit ring's lines (32-byte
//! header, 16 bytes per update, whole lines) with non-temporal stores, one
//! `sfence`, then the K values stored and their lines written back with no
//! fence. Its counters are computed, not counted. Every system gets
//! `ratio_vs_floor` (its time / the floor's, per round, median).

use std::path::Path;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::persist::Domain;
use rewind::{Counters, LogVariant, PPtr, Policy, Pool};

use super::harness::{every_config, Ctx, Label, Per, Sample, Timer};
use super::output::Report;
use crate::error::CliError;
#[cfg(feature = "peers")]
use rewind_peers::{cloop, pmdk};
#[cfg(target_arch = "x86_64")]
use rewind_peers::{floor, mapped::Checked};

/// Updates per transaction.
const KS: [u64; 3] = [1, 8, 64];
/// Measured rounds per system and K; the median is reported.
const ROUNDS: usize = 7;
/// Added to `K * 1000` for the warm-up round's seed (rounds use 0..ROUNDS).
const WARMUP_SEED: u64 = 999;

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
    /// The redo commit's floor as a C loop (`peers/floor.c`).
    #[cfg(target_arch = "x86_64")]
    Floor(floor::FloorArray),
}

/// Builds the systems for one K, with fresh pools in `dir`: the two
/// baselines (and the C loops with peers), every variant × policy, at K = 1
/// `atomic_write`, and PMDK with peers. The rewind domains are charged the
/// emulated latency; the C loop and PMDK cannot be.
fn systems(ctx: &Ctx, dir: &Path, m: u64, k: u64) -> Result<Vec<(Label, System)>, CliError> {
    let param = format!("K={k}");
    let label = |system: &str, config: &str| Label::new(system, config, param.clone());
    let mut out = vec![(label("volatile", "dram"), System::Dram(vec![0; m as usize]))];
    let domain = ctx.domain(&dir.join("nolog.pool"), m * 8)?;
    out.push((label("persist-nolog", "nolog"), System::NoLog(domain)));
    #[cfg(feature = "peers")]
    for (config, counted) in [("c-loop", false), ("c-loop-counted", true)] {
        let path = dir.join(format!("{config}.pool"));
        let array = cloop::CLoopArray::create(&path, m)
            .map_err(CliError::io(format!("creating {}", path.display())))?;
        out.push((label("c-nolog", config), System::CLoop { array, counted }));
    }
    // The floor is a loop of cache-line instructions: beside Pmem pools only.
    #[cfg(target_arch = "x86_64")]
    if ctx.backend == rewind::Backend::Pmem {
        let path = dir.join("floor.pool");
        let array = floor::FloorArray::create(&path, m)
            .map_err(CliError::io(format!("creating {}", path.display())))?;
        out.push((label("c-floor", "redo-floor"), System::Floor(array)));
    }
    let pool = |name: &str, variant, policy| {
        let cfg = ctx.pool_config(variant, policy);
        super::array_pool(dir, name, pool_size(m), &cfg, m)
            .map(|(pool, data)| (Box::new(pool), data))
    };
    for (config, variant, policy) in every_config() {
        let (pool, data) = pool(&config, variant, policy)?;
        out.push((label("rewind", &config), System::Rewind { pool, data }));
    }
    if k == 1 {
        for policy in Policy::ALL {
            let config = format!("{}-{policy}", LogVariant::Batch);
            let (pool, data) = pool(&format!("atomic-{config}"), LogVariant::Batch, policy)?;
            let atomic = System::Atomic { pool, data };
            out.push((label("atomic_write", &config), atomic));
        }
    }
    #[cfg(feature = "peers")]
    {
        let pmdk = pmdk::PmdkArray::create(&dir.join("pmdk.pool"), m, pool_size(m))
            .map_err(CliError::io("PMDK pool"))?;
        out.push((label("pmdk", "libpmemobj"), System::Pmdk(pmdk)));
    }
    Ok(out)
}

/// The persist-nolog baseline's round: per transaction each update
/// stored and its line written back, then one fence. Its own function,
/// kept out of `measure`: inlined there, the loop's iterator and result
/// live on the stack, and their stores queue in the store buffer behind
/// each store that missed the cache (measured at K = 64, each flush then
/// bumping two counters: 2.9x the C loop's time inlined there, 1.9x as a
/// function of its own).
#[inline(never)]
fn nolog_round(d: &Domain, seq: &Sequence) -> Result<(), rewind::Error> {
    for (t, ix) in seq.txs() {
        for &i in ix {
            d.store_u64(i * 8, t)?;
            d.flush(i * 8, 8)?;
        }
        // What makes the transaction durable; nothing makes it atomic.
        d.fence()?;
    }
    Ok(())
}

impl System {
    /// Runs the transactions of `seq`: the time until every committed
    /// value is in place (redo-async's write-back included), for rewind
    /// the time until the last commit returned, and the counters spent.
    fn measure(&mut self, seq: &Sequence) -> Result<Sample, CliError> {
        // The C loops' indices are checked here, outside the measurement.
        #[cfg(target_arch = "x86_64")]
        let checked = Checked::new(&seq.idx, seq.k, seq.bound)
            .map_err(CliError::io("checking the index sequence"))?;
        // Inside the measurement, errors are built only when one happens:
        // an eagerly built `CliError` allocates its message on every call,
        // work the systems do not do.
        let err = |what: &'static str| move |e| CliError::rewind(what)(e);
        let timer = Timer::start(self.counters());
        let mut commits = None;
        match self {
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
                debug_assert!(seq.bound * 8 <= d.len());
                nolog_round(d, seq).map_err(err("persist-nolog"))?;
            }
            System::Rewind { pool, data } => {
                for (t, ix) in seq.txs() {
                    pool.transaction(|tx| ix.iter().try_for_each(|&i| tx.write(data.at(i), &t)))
                        .map_err(err("rewind transaction"))?;
                }
                // A run has not finished while write-back is behind.
                commits = Some(timer.elapsed());
                pool.sync().map_err(err("rewind sync"))?;
            }
            System::Atomic { pool, data } => {
                for (t, ix) in seq.txs() {
                    for &i in ix {
                        pool.atomic_write(data.at(i), &t)
                            .map_err(err("atomic_write"))?;
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
                let mut counts = [0u64; 2];
                let r = match counted {
                    true => array.run_counted(&checked, &mut counts),
                    false => array.run(&checked),
                };
                r.map_err(CliError::io("c-nolog run"))?;
                let mut sample = timer.stop(None);
                // As for persist-nolog: its last commit returns at the end.
                sample.commits = Some(sample.time);
                // The plain C loop's are computed: it makes exactly K clwb
                // and one sfence per transaction. The other one counts them.
                let mut c = Counters::default();
                (c.flushed_lines, c.fences) = match counted {
                    false => (seq.n * seq.k, seq.n),
                    true => (counts[0], counts[1]),
                };
                // Each written-back line is one NVM write.
                c.nvm_writes = c.flushed_lines;
                sample.counters = Some(c);
                return Ok(sample);
            }
            #[cfg(target_arch = "x86_64")]
            System::Floor(array) => {
                array.run(&checked).map_err(CliError::io("floor run"))?;
                let mut sample = timer.stop(None);
                // Computed: per transaction the group's lines (32 + 16K
                // bytes, whole lines) non-temporal, K lines written back,
                // one fence.
                let mut c = Counters::default();
                c.nt_lines = seq.n * (32 + 16 * seq.k).div_ceil(64);
                c.flushed_lines = seq.n * seq.k;
                c.fences = seq.n;
                c.nvm_writes = c.nt_lines + c.flushed_lines;
                sample.counters = Some(c);
                return Ok(sample);
            }
        }
        let mut sample = timer.stop(self.counters());
        // Elsewhere the last commit returns when the work is done.
        sample.commits = commits.or(Some(sample.time));
        Ok(sample)
    }

    /// The counters so far, where this system has them.
    fn counters(&self) -> Option<Counters> {
        match self {
            System::Dram(_) => Some(Counters::default()),
            System::NoLog(d) => Some(d.counters()),
            System::Rewind { pool, .. } | System::Atomic { pool, .. } => Some(pool.counters()),
            #[cfg(feature = "peers")]
            System::Pmdk(_) | System::CLoop { .. } => None,
            #[cfg(target_arch = "x86_64")]
            System::Floor(_) => None,
        }
    }
}

pub fn run(ctx: &Ctx, report: &mut Report) -> Result<(), CliError> {
    // Array length and transactions per measurement for each K.
    let (m, txs) = ctx.scale.pick(
        (1 << 12, [20, 10, 4]),
        (1 << 20, [20_000, 10_000, 2_000]),
        (1 << 20, [200_000, 100_000, 20_000]),
    );
    println!("  array of {m} u64, transactions per round {txs:?} at K = {KS:?}, median of {ROUNDS} rounds");
    let dir = ctx.scratch()?;
    for (&k, &n) in KS.iter().zip(&txs) {
        let (labels, mut systems): (Vec<_>, Vec<_>) =
            systems(ctx, dir.path(), m, k)?.into_iter().unzip();
        let seed = |r: usize| k * 1000 + r.checked_sub(1).map_or(WARMUP_SEED, |r| r as u64);
        let input = |r| Sequence::random(m, k, n, seed(r));
        let measured = ctx.rounds(labels, &mut systems, (1, ROUNDS), input, System::measure)?;
        let bases = [
            ("nolog", "persist-nolog"),
            ("c_loop", "c-nolog/c-loop"),
            ("c_loop_counted", "c-nolog/c-loop-counted"),
            ("floor", "c-floor/redo-floor"),
        ];
        measured.report(report, &Per::us("tx", "us_per_tx", n), &bases, &["pmdk"]);
        // Dropping the systems unmaps the pools; the directory goes at the end.
    }
    Ok(())
}
