//! NVWAL (Kim et al., ASPLOS 2016) Figs. 7 and 9, Table 2 and Fig. 6:
//! SQLite with its WAL in a rewind pool (`rewind-sqlite`) against stock
//! SQLite.
//!
//! - **Figs. 7/9**: one-row transactions (insert, update, delete of a
//!   100-byte record), each an autocommit transaction, in microseconds and
//!   transactions per second. Systems: the WAL in a pool in the scratch
//!   directory (tmpfs unless `--dir`), the database file beside it, at
//!   emulated NVM write latencies of 0, 500, 1,000 and 2,000 ns per line;
//!   stock SQLite (the same bundled build) in WAL mode with
//!   `synchronous=FULL` on the temp directory's disk and in the scratch
//!   directory, and with the rollback journal (`DELETE`, `FULL`) on the
//!   disk (inserts only: 30 ms a transaction on the VM's disk).
//! - **Table 2**: the log's bytes per transaction with differential frames
//!   and with whole-page frames (`Config::differential(false)`), beside the
//!   bytes SQLite's own WAL file takes for the same frames.
//! - **Fig. 6**: transactions of 1 to 32 inserted rows, and the share of
//!   their time spent copying records and fencing (each commit's persist
//!   phase), at 0 and 2,000 ns.
//!
//! Counters are the pool's: fences and lines per transaction in all (block
//! links and WAL restarts included), and the commits' own copies and fence.

use std::path::{Path, PathBuf};
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::NvmLatency;
use rewind_sqlite::rusqlite::{params, Connection, OpenFlags};
use rewind_sqlite::{Config, Stats};

use super::harness::{Ctx, Label, Per, Sample};
use super::output::Report;
use crate::error::CliError;

/// Stock SQLite's systems, whose time the others are compared with.
const PEERS: [&str; 2] = ["sqlite-wal-disk", "sqlite-wal-scratch"];

/// A system under test.
#[derive(Clone, Copy, PartialEq, Eq)]
enum System {
    /// The WAL in a pool: write latency in ns, differential frames or not.
    Pool { write_ns: u64, differential: bool },
    /// Stock SQLite, WAL, synchronous=FULL, on the disk or in scratch.
    StockWal { disk: bool },
    /// Stock SQLite, rollback journal (DELETE), synchronous=FULL, on disk.
    StockRollback,
}

impl System {
    fn label(self, param: &str) -> Label {
        match self {
            System::Pool {
                write_ns,
                differential,
            } => {
                let kind = if differential { "" } else { "whole-" };
                Label::new("rewind-sqlite", format!("pool-{kind}{write_ns}ns"), param)
            }
            System::StockWal { disk: true } => Label::new(PEERS[0], "full", param),
            System::StockWal { disk: false } => Label::new(PEERS[1], "full", param),
            System::StockRollback => Label::new("sqlite-rollback-disk", "full", param),
        }
    }
}

const fn pool(write_ns: u64) -> System {
    System::Pool {
        write_ns,
        differential: true,
    }
}

const ONE_ROW_SYSTEMS: [System; 8] = [
    pool(0),
    pool(500),
    pool(1000),
    pool(2000),
    System::Pool {
        write_ns: 0,
        differential: false,
    },
    System::StockWal { disk: true },
    System::StockWal { disk: false },
    System::StockRollback,
];
const MULTI_SYSTEMS: [System; 3] = [pool(0), pool(2000), System::StockWal { disk: false }];

/// A workload: one-row transactions, or transactions of k inserted rows.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Work {
    Insert,
    Update,
    Delete,
    Rows(u32),
}

impl Work {
    fn name(self) -> String {
        match self {
            Work::Insert => "insert".into(),
            Work::Update => "update".into(),
            Work::Delete => "delete".into(),
            Work::Rows(k) => format!("insert-{k}-rows"),
        }
    }
}

/// Bytes of a record.
const RECORD: usize = 100;

fn sql(what: &str) -> impl FnOnce(rewind_sqlite::rusqlite::Error) -> CliError + '_ {
    move |e| match rewind_sqlite::last_error() {
        Some(vfs) => CliError::Bench(format!("{what}: {e} (last VFS error: {vfs})")),
        None => CliError::Bench(format!("{what}: {e}")),
    }
}

/// Registers the VFS of a pool system (once per process) and names it.
fn vfs_name(system: System, ctx: &Ctx) -> String {
    let System::Pool {
        write_ns,
        differential,
    } = system
    else {
        return String::new();
    };
    let name = format!("rewind-bench-{write_ns}-{differential}");
    let cfg = Config::default()
        .differential(differential)
        .backend(ctx.backend)
        .nvm_latency(NvmLatency::new(write_ns, ctx.latency.fence_ns));
    // Registered already by an earlier point: the same configuration.
    let _ = rewind_sqlite::register(&name, &cfg);
    name
}

fn open(system: System, db: &Path, ctx: &Ctx) -> Result<Connection, CliError> {
    let c = match system {
        System::Pool { .. } => {
            let vfs = vfs_name(system, ctx);
            Connection::open_with_flags_and_vfs(db, OpenFlags::default(), vfs.as_str())
        }
        _ => Connection::open(db),
    }
    .map_err(sql("opening the database"))?;
    let mode = match system {
        System::StockRollback => "DELETE",
        _ => "WAL",
    };
    c.pragma_update(None, "journal_mode", mode)
        .map_err(sql("setting the journal mode"))?;
    c.pragma_update(None, "synchronous", "FULL")
        .map_err(sql("setting synchronous"))?;
    c.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB NOT NULL)")
        .map_err(sql("creating the table"))?;
    Ok(c)
}

/// What the pool did between two snapshots.
fn delta(a: &Stats, b: &Stats) -> Stats {
    let mut d = *b;
    d.commits -= a.commits;
    d.frames -= a.frames;
    d.record_bytes -= a.record_bytes;
    d.whole_frame_bytes -= a.whole_frame_bytes;
    d.restarts -= a.restarts;
    d.pool = b.pool.since(&a.pool);
    d.persist.time -= a.persist.time;
    d.persist.counters = b.persist.counters.since(&a.persist.counters);
    d.persist.blocks_linked -= a.persist.blocks_linked;
    d
}

/// Where the systems keep their files.
struct Dirs {
    scratch: PathBuf,
    disk: PathBuf,
}

/// `txs` transactions of `work` on a fresh database of `system`.
fn run_once(
    dirs: &Dirs,
    system: System,
    work: Work,
    txs: u64,
    ctx: &Ctx,
    seed: u64,
) -> Result<Sample, CliError> {
    let parent = match system {
        System::StockWal { disk: true } | System::StockRollback => &dirs.disk,
        _ => &dirs.scratch,
    };
    let sub = crate::scratch::dir(Some(parent))?;
    let db = sub.path().join("bench.db");
    let c = open(system, &db, ctx)?;
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut value = vec![0u8; RECORD];
    if matches!(work, Work::Update | Work::Delete) {
        c.execute_batch("BEGIN").map_err(sql("loading"))?;
        for _ in 0..txs {
            rng.fill(&mut value[..]);
            c.execute("INSERT INTO t(v) VALUES (?1)", [&value])
                .map_err(sql("loading"))?;
        }
        c.execute_batch("COMMIT").map_err(sql("loading"))?;
        // Start from an empty WAL, as the insert runs do.
        c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .map_err(sql("checkpointing"))?;
    }
    let before = rewind_sqlite::stats(&db);
    let prepare = |q: &str| c.prepare(q).map_err(sql("preparing"));
    let mut ins = prepare("INSERT INTO t(v) VALUES (?1)")?;
    let mut upd = prepare("UPDATE t SET v = ?1 WHERE id = ?2")?;
    let mut del = prepare("DELETE FROM t WHERE id = ?1")?;
    let start = Instant::now();
    for i in 0..txs {
        rng.fill(&mut value[..]);
        match work {
            Work::Insert => ins.execute([&value]).map(drop),
            Work::Update => upd
                .execute(params![&value, rng.gen_range(1..=txs as i64)])
                .map(drop),
            Work::Delete => del.execute([i as i64 + 1]).map(drop),
            Work::Rows(k) => (|| {
                c.execute_batch("BEGIN")?;
                for _ in 0..k {
                    rng.fill(&mut value[..]);
                    ins.execute([&value])?;
                }
                c.execute_batch("COMMIT")
            })(),
        }
        .map_err(sql("a transaction"))?;
    }
    let time = start.elapsed();
    let after = rewind_sqlite::stats(&db);
    drop((ins, upd, del));
    drop(c);
    let n = txs as f64;
    let mut sample = Sample::of(time, vec![("tx_per_s", n / time.as_secs_f64(), "tx/s")]);
    if let (Some(a), Some(b)) = (before, after) {
        let d = delta(&a, &b);
        sample.counters = Some(d.pool);
        // Per transaction; the commits' persist phase's own share of the time.
        let per = |v: u64| v as f64 / n;
        let p = d.persist;
        let share = p.time.as_secs_f64() / time.as_secs_f64();
        sample.values.extend([
            ("commit_fences_per_tx", per(p.counters.fences), "count"),
            ("commit_lines_per_tx", per(p.counters.nt_lines), "lines"),
            ("record_bytes_per_tx", per(d.record_bytes), "bytes"),
            ("sqlite_wal_bytes_per_tx", per(d.whole_frame_bytes), "bytes"),
            ("frames_per_tx", per(d.frames), "count"),
            ("blocks_linked_per_tx", per(p.blocks_linked), "count"),
            ("persist_share", share, "fraction"),
        ]);
    }
    Ok(sample)
}

pub fn run(ctx: &Ctx, report: &mut Report) -> Result<(), CliError> {
    // (Warm-up rounds, measured rounds.) Quick takes the median of three
    // too: of one round, noise alone ordered the emulated latencies.
    let (txs, rounds) = ctx
        .scale
        .pick((20, (0, 1)), (1_000, (0, 3)), (2_000, (1, 3)));
    let scratch = ctx.scratch()?;
    let disk = crate::scratch::dir(Some(&std::env::temp_dir()))?;
    println!(
        "  {txs} transactions per run ({} for multi-row ones), {RECORD}-byte records; median of {} rounds",
        txs / 4,
        rounds.1
    );
    println!(
        "  scratch files (pools, sqlite-wal-scratch) in {}, disk files in {}",
        scratch.path().display(),
        disk.path().display()
    );
    let dirs = Dirs {
        scratch: scratch.path().to_path_buf(),
        disk: disk.path().to_path_buf(),
    };
    // The rollback journal (an fsync of the journal and one of the
    // database per transaction, 30 ms on the VM's disk) runs inserts only.
    let mut points: Vec<(Work, Vec<System>)> = [Work::Insert, Work::Update, Work::Delete]
        .into_iter()
        .map(|w| {
            let systems = ONE_ROW_SYSTEMS.iter().copied();
            let systems = systems.filter(|&s| w == Work::Insert || s != System::StockRollback);
            (w, systems.collect())
        })
        .collect();
    points.extend([1, 2, 4, 8, 16, 32].map(|k| (Work::Rows(k), MULTI_SYSTEMS.to_vec())));
    for (work, systems) in points {
        let n = match work {
            Work::Rows(k) if k > 1 => (txs / 4).max(10),
            _ => txs,
        };
        let mut systems: Vec<_> = (systems.into_iter())
            .map(|s| (s.label(&work.name()), s))
            .collect();
        let m = ctx.seeded(&mut systems, rounds, |&mut s, seed| {
            run_once(&dirs, s, work, n, ctx, seed)
        })?;
        m.report(report, &Per::us("tx", "us_per_tx", n), &[], &PEERS);
    }
    Ok(())
}
