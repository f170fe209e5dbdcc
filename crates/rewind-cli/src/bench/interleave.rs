//! The skip-record workload of REWIND §5.1, shared by `bench skip`
//! (Figs. 3 right and 4) and `bench recovered` (Fig. 5).
//!
//! A *target* transaction makes [`W`] 8-byte writes to a persistent array,
//! one per cache line. After each of them a second thread, inside a
//! transaction of its own that stays open until the target has ended, logs
//! `S` random 8-byte writes to another part of the array: in the log, the
//! target's records are separated by `S` *skip records* of another
//! transaction, and `S` more follow its last one. The threads hand over
//! through channels, so the log order is fixed and nothing runs
//! concurrently; only the writes are timed on each side, never a handover.
//!
//! How the target ends ([`End`]):
//! - **commit** or **rollback**: the closure returns `Ok` or
//!   `Err(Error::Aborted)` after its last handover, with the other
//!   transaction still open (its records stay in the log). The time of the
//!   end is from the closure's return to `Pool::transaction`'s return.
//! - **crash**: the other transaction commits first; then, the target still
//!   open inside its closure, the pool file is copied. The copy holds what a
//!   process killed at that instant leaves: every store so far is in the
//!   file's shared mapping, and nothing is in flight, both threads being
//!   between writes. Opening the copy runs recovery (timed by the caller).
//!   The target then rolls back in the original pool, untimed.
//!
//! A live pool cannot be crashed in-process with a transaction open
//! (`Pool::crash` takes the pool, and the open transaction borrows it), and
//! a child process per crash would add a process start to every trial:
//! the copy is the same bytes without either.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::persist::Domain;
use rewind::{Counters, LogVariant, NvmLatency, OpenOptions, PPtr, Policy, Pool, RecoveryReport};

use super::harness::failed;
use super::{Ctx, ARRAY};
use crate::error::CliError;

/// Writes of the target transaction.
pub const W: u64 = 16;
/// The target writes element `i * LINE` (one per cache line); the other
/// transaction writes elements from [`OTHERS_FROM`] on.
const LINE: u64 = 8;
const OTHERS_FROM: u64 = W * LINE;
/// Mixed into the seed of the other transaction's positions.
const OTHERS_SEED: u64 = 0x5eed_0f07;

/// How the target transaction ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Commit,
    Rollback,
    /// Left open; the pool file is copied to [`Subject::image`].
    Crash,
}

/// What one trial took.
#[derive(Clone, Copy, Debug, Default)]
pub struct Trial {
    /// In the target's writes.
    pub target_writes: Duration,
    /// In the other transaction's writes.
    pub skip_writes: Duration,
    /// From the closure's return to `transaction`'s: the commit or the
    /// rollback (zero for a crash).
    pub end: Duration,
    /// The persistence work of the commit or rollback (exact: the other
    /// thread is waiting meanwhile).
    pub end_work: Counters,
}

impl Trial {
    /// Logging: the writes of both transactions.
    pub fn logging(&self) -> Duration {
        self.target_writes + self.skip_writes
    }
}

/// A pool holding the array, and where its crash images go.
pub struct Subject {
    pub pool: Pool,
    pub data: PPtr<u64>,
    pub path: PathBuf,
    /// The copy a crash leaves.
    pub image: PathBuf,
}

/// Room for `skip` skip records per target write: every record and its
/// reserved compensation, and the array.
fn pool_size(skip: u64) -> u64 {
    (W * (skip + 1) * 512 + ARRAY * 8 * 4).max(16 << 20)
}

impl Subject {
    /// A fresh pool `DIR/NAME.pool` of `variant` under `policy`, with no
    /// automatic checkpoint (the benchmarks checkpoint between trials).
    pub fn create(
        ctx: &Ctx,
        dir: &Path,
        name: &str,
        (variant, policy): (LogVariant, Policy),
        max_skip: u64,
    ) -> Result<Subject, CliError> {
        let size = pool_size(max_skip);
        let cfg = ctx.pool_config(variant, policy).log_size(size / 2);
        let (mut pool, data) = super::array_pool(dir, name, size, &cfg, ARRAY)?;
        pool.set_checkpoint_fill(1.0)
            .map_err(CliError::rewind("setting the checkpoint fill"))?;
        Ok(Subject {
            pool,
            data,
            path: dir.join(format!("{name}.pool")),
            image: dir.join(format!("{name}.crashed.pool")),
        })
    }

    /// Makes finished transactions durable in place and clears their
    /// records (no-force; nothing under force), so that a trial starts
    /// with an empty log.
    pub fn checkpoint(&self) -> Result<(), CliError> {
        self.pool
            .checkpoint()
            .map_err(|e| CliError::rewind("checkpoint between trials")(e))
    }

    /// The values of the target's elements.
    pub fn target_values(&self) -> Result<Vec<u64>, CliError> {
        target_values(&self.pool, self.data)
    }

    /// Opens the crash image (timed: the open runs recovery) and checks
    /// that it holds the target's elements as they were before the trial;
    /// the pool and data of `self` become the recovered ones. Returns the
    /// open's time and what recovery did.
    pub fn recover(
        &mut self,
        before: &[u64],
        latency: NvmLatency,
    ) -> Result<(Duration, RecoveryReport), CliError> {
        let opts = OpenOptions::default().nvm_latency(latency);
        let start = Instant::now();
        let mut pool = Pool::open(&self.image, super::ARRAY_LAYOUT, &opts).map_err(
            CliError::rewind(format!("recovering {}", self.image.display())),
        )?;
        let time = start.elapsed();
        let report = pool.recovery_report();
        pool.set_checkpoint_fill(1.0)
            .map_err(CliError::rewind("setting the checkpoint fill"))?;
        let after = target_values(&pool, self.data)?;
        if after != before {
            return Err(failed(format!(
                "recovery left the uncommitted target's elements {after:?}, expected {before:?}"
            )));
        }
        // The recovered copy carries on; the original (rolled back) goes.
        self.pool = pool;
        std::fs::rename(&self.image, &self.path).map_err(CliError::io(format!(
            "renaming {} to {}",
            self.image.display(),
            self.path.display()
        )))?;
        Ok((time, report))
    }
}

fn target_values(pool: &Pool, data: PPtr<u64>) -> Result<Vec<u64>, CliError> {
    (0..W)
        .map(|i| pool.read(data.at(i * LINE)))
        .collect::<Result<_, _>>()
        .map_err(CliError::rewind("reading the target's elements"))
}

/// From the target to the other thread.
enum Ask {
    /// Log `S` records.
    Skip,
    /// Commit and stop.
    Finish,
}

/// From the other thread to the target.
enum Told {
    /// `S` records logged.
    Skipped,
    /// The other transaction committed.
    Committed,
}

/// One target transaction with `skip` skip records after each of its
/// writes, ending as `end`. The rngs are seeded from `seed`.
pub fn trial(s: &Subject, skip: u64, end: End, seed: u64) -> Result<Trial, CliError> {
    let (ask, asked) = mpsc::channel();
    let (tell, told) = mpsc::channel();
    std::thread::scope(|scope| {
        let other = scope.spawn(|| other_side(&s.pool, s.data, skip, seed, asked, tell));
        let r = target_side(s, end, seed, &ask, &told);
        // Whatever happened, the other transaction ends now (a send fails
        // only if it has ended already).
        let _ = ask.send(Ask::Finish);
        let skipped = other
            .join()
            .map_err(|_| CliError::Bench("the skip-record thread panicked".into()))?;
        // The other side's error first: the target's is then its echo.
        let skip_writes = skipped?;
        let mut t = r?;
        t.skip_writes = skip_writes;
        Ok(t)
    })
}

/// The target transaction. Errors other than the library's are kept
/// aside while the closure rolls the transaction back.
fn target_side(
    s: &Subject,
    end: End,
    seed: u64,
    ask: &Sender<Ask>,
    told: &Receiver<Told>,
) -> Result<Trial, CliError> {
    let mut t = Trial::default();
    let mut aside: Option<CliError> = None;
    let mut returned = Instant::now();
    let mut work_before = Counters::default();
    let stopped = || CliError::Bench("the skip-record thread stopped".into());
    let r = s.pool.transaction(|tx| {
        for i in 0..W {
            let start = Instant::now();
            tx.write(s.data.at(i * LINE), &(seed + i + 1))?;
            t.target_writes += start.elapsed();
            if ask.send(Ask::Skip).is_err() || !matches!(told.recv(), Ok(Told::Skipped)) {
                aside = Some(stopped());
                return Err(rewind::Error::Aborted);
            }
        }
        if end == End::Crash {
            if ask.send(Ask::Finish).is_err() || !matches!(told.recv(), Ok(Told::Committed)) {
                aside = Some(stopped());
                return Err(rewind::Error::Aborted);
            }
            let _ = std::fs::remove_file(&s.image);
            let copying = || format!("copying {} to {}", s.path.display(), s.image.display());
            aside = (std::fs::copy(&s.path, &s.image).err()).map(|e| CliError::io(copying())(e));
            return Err(rewind::Error::Aborted);
        }
        work_before = s.pool.counters();
        returned = Instant::now();
        match end {
            End::Commit => Ok(()),
            _ => Err(rewind::Error::Aborted),
        }
    });
    t.end = returned.elapsed();
    t.end_work = s.pool.counters().since(&work_before);
    if let Some(e) = aside {
        return Err(e);
    }
    match r {
        // The closure returns Ok only to commit.
        Ok(()) => {}
        Err(rewind::Error::Aborted) if end != End::Commit => {}
        Err(e) => return Err(CliError::rewind(format!("target transaction ({end:?})"))(e)),
    }
    if end == End::Crash {
        t.end = Duration::ZERO;
        t.end_work = Counters::default();
    }
    Ok(t)
}

/// The other transaction: `skip` random writes per request, then commit.
/// Returns the time spent in its writes.
fn other_side(
    pool: &Pool,
    data: PPtr<u64>,
    skip: u64,
    seed: u64,
    asked: Receiver<Ask>,
    tell: Sender<Told>,
) -> Result<Duration, CliError> {
    let mut rng = SmallRng::seed_from_u64(seed ^ OTHERS_SEED);
    let mut spent = Duration::ZERO;
    pool.transaction(|tx| {
        // A closed channel (the target failed) ends it like Finish.
        while let Ok(Ask::Skip) = asked.recv() {
            let start = Instant::now();
            for j in 0..skip {
                tx.write(data.at(rng.gen_range(OTHERS_FROM..ARRAY)), &j)?;
            }
            spent += start.elapsed();
            let _ = tell.send(Told::Skipped);
        }
        Ok::<_, rewind::Error>(())
    })
    .map_err(CliError::rewind("skip-record transaction"))?;
    let _ = tell.send(Told::Committed);
    Ok(spent)
}

/// The same sequence of stores without a log: each store flushed, one
/// fence at the end (what the target's commit would be), through a
/// persistence domain of its own.
pub struct Baseline {
    domain: Domain,
}

impl Baseline {
    pub fn create(ctx: &Ctx, dir: &Path) -> Result<Baseline, CliError> {
        let domain = ctx.domain(&dir.join("nolog.pool"), ARRAY * 8)?;
        Ok(Baseline { domain })
    }

    /// The time of the trial's stores, in one thread.
    pub fn run(&self, skip: u64, seed: u64) -> Result<Duration, CliError> {
        let d = &self.domain;
        // Errors are built only on failure: nothing allocates per store.
        let err = |e| CliError::rewind("persist-nolog store")(e);
        let mut rng = SmallRng::seed_from_u64(seed ^ OTHERS_SEED);
        let start = Instant::now();
        for i in 0..W {
            let off = i * LINE * 8;
            d.store_u64(off, seed + i + 1).map_err(err)?;
            d.flush(off, 8).map_err(err)?;
            for j in 0..skip {
                let off = rng.gen_range(OTHERS_FROM..ARRAY) * 8;
                d.store_u64(off, j).map_err(err)?;
                d.flush(off, 8).map_err(err)?;
            }
        }
        d.fence().map_err(err)?;
        Ok(start.elapsed())
    }
}
