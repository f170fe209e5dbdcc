//! `rewind bench disk --dir DIR`: one-word durable transactions on a real
//! disk, rewind on the `Msync` backend beside the stores people without
//! persistent memory would pick: SQLite (WAL, `synchronous=FULL`), LMDB
//! (synchronous commits) and Berkeley DB (transactional, synchronous
//! commits), each doing one-row durable updates in the same directory
//! (`--features peers`).
//!
//! Every system holds `M` rows (rewind: an array of `M` u64 in a pool) and
//! runs the same sequence of transactions, each updating one random row and
//! returning only once the update is durable: rewind one `tx.write` of 8
//! bytes under redo (and under force, for comparison); SQLite one `UPDATE`
//! statement (its own transaction); LMDB and Berkeley DB one transaction
//! deleting and re-inserting the row (their shims' `put` only inserts).
//! Alternating rounds, medians, per-round ratios (the harness). rewind's
//! device flushes (`msync` calls) are counted (`device_flushes_per_commit`);
//! the peers' cannot be.
//!
//! The pools are always `Msync`, whatever `--backend` says. Without `--dir`
//! the scratch directory is the harness's default (often a tmpfs, where no
//! flush reaches a device): the point is `--dir` on a real disk.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{Backend, LogVariant, PPtr, Policy, Pool};

use super::harness::{Bench, Ctx, Label, Per, Sample, Timer};
use super::output::{Chart, Col, Report};
use crate::error::CliError;

pub const BENCH: Bench = Bench {
    name: "disk",
    about: "one-word durable transactions on a disk: rewind (Msync) beside SQLite WAL FULL, LMDB, Berkeley DB",
    run,
    table: &[
        Col("us_per_commit", "us/commit", 1),
        Col("device_flushes_per_commit", "dev flushes", 2),
        Col("fences_per_commit", "fences", 2),
        Col("speed_vs_sqlite", "vs sqlite", 2),
        Col("speed_vs_lmdb", "vs lmdb", 2),
        Col("speed_vs_bdb", "vs bdb", 2),
    ],
    chart: Chart {
        title: "one-word durable transactions on a disk",
        y_label: "microseconds per commit",
        metrics: &["us_per_commit"],
        log_y: false,
    },
    peers: &["sqlite", "lmdb", "bdb"],
};

const LAYOUT: &str = "rewind-bench-disk";
/// Rows.
const M: u64 = 4096;
/// Measured rounds; the median counts.
const ROUNDS: usize = 5;

enum System {
    Rewind {
        pool: Box<Pool>,
        data: PPtr<u64>,
    },
    #[cfg(feature = "peers")]
    Sqlite(rusqlite::Connection),
    #[cfg(feature = "peers")]
    Lmdb(rewind_peers::lmdb::Lmdb),
    #[cfg(feature = "peers")]
    Bdb(rewind_peers::bdb::Bdb),
}

#[cfg(feature = "peers")]
fn sql(what: &'static str) -> impl Fn(rusqlite::Error) -> CliError {
    move |e| CliError::Io {
        action: what.into(),
        source: std::io::Error::other(e.to_string()),
    }
}

fn systems(dir: &std::path::Path) -> Result<Vec<(Label, System)>, CliError> {
    let label = |s: &str, c: &str| Label::new(s, c, "k=1");
    let mut out = Vec::new();
    for (config, policy) in [("msync-redo", Policy::Redo), ("msync-force", Policy::Force)] {
        let cfg = rewind::PoolConfig::default()
            .log(LogVariant::Batch)
            .policy(policy)
            .backend(Backend::Msync);
        let (pool, data) = super::array_pool(dir, config, LAYOUT, 64 << 20, &cfg, M)?;
        let pool = Box::new(pool);
        out.push((label("rewind", config), System::Rewind { pool, data }));
    }
    #[cfg(feature = "peers")]
    {
        let c = rusqlite::Connection::open(dir.join("sqlite.db")).map_err(sql("opening SQLite"))?;
        let mode: String = c
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(sql("SQLite WAL"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(CliError::Usage(format!("SQLite refused WAL mode ({mode})")));
        }
        c.execute_batch(
            "PRAGMA synchronous = FULL;
             CREATE TABLE kv (k INTEGER PRIMARY KEY, v INTEGER NOT NULL);",
        )
        .map_err(sql("SQLite schema"))?;
        c.execute_batch("BEGIN").map_err(sql("SQLite load"))?;
        for k in 0..M {
            c.execute("INSERT INTO kv (k, v) VALUES (?1, 0)", [k as i64])
                .map_err(sql("SQLite load"))?;
        }
        c.execute_batch("COMMIT").map_err(sql("SQLite load"))?;
        out.push((label("sqlite", "wal-full"), System::Sqlite(c)));
        let zero = 0u64.to_le_bytes();
        let d = dir.join("lmdb");
        std::fs::create_dir_all(&d).map_err(CliError::io("creating the LMDB directory"))?;
        let mut l = rewind_peers::lmdb::Lmdb::open(&d, 1 << 30).map_err(CliError::io("LMDB"))?;
        l.begin().map_err(CliError::io("LMDB load"))?;
        for k in 0..M {
            l.put(k, &zero).map_err(CliError::io("LMDB load"))?;
        }
        l.commit().map_err(CliError::io("LMDB load"))?;
        out.push((label("lmdb", "sync"), System::Lmdb(l)));
        let d = dir.join("bdb");
        std::fs::create_dir_all(&d).map_err(CliError::io("creating the Berkeley DB directory"))?;
        let mut b = rewind_peers::bdb::Bdb::open(&d, 64 << 20).map_err(CliError::io("Berkeley DB"))?;
        b.begin().map_err(CliError::io("Berkeley DB load"))?;
        for k in 0..M {
            b.put(k, &zero).map_err(CliError::io("Berkeley DB load"))?;
        }
        b.commit().map_err(CliError::io("Berkeley DB load"))?;
        out.push((label("bdb", "txn-sync"), System::Bdb(b)));
    }
    Ok(out)
}

impl System {
    /// One durable one-row update per index; transaction `t` stores
    /// `base + t`.
    fn measure(&mut self, (idx, base): &(Vec<u64>, u64)) -> Result<Sample, CliError> {
        let before = match self {
            System::Rewind { pool, .. } => Some(pool.counters()),
            #[cfg(feature = "peers")]
            _ => None,
        };
        let timer = Timer::start(before);
        match self {
            System::Rewind { pool, data } => {
                for (t, &i) in idx.iter().enumerate() {
                    pool.transaction(|tx| tx.write(data.at(i), &(base + t as u64)))
                        .map_err(CliError::rewind("disk transaction"))?;
                }
            }
            #[cfg(feature = "peers")]
            System::Sqlite(c) => {
                let mut st = c
                    .prepare_cached("UPDATE kv SET v = ?1 WHERE k = ?2")
                    .map_err(sql("SQLite"))?;
                for (t, &i) in idx.iter().enumerate() {
                    st.execute([(base + t as u64) as i64, i as i64])
                        .map_err(sql("SQLite update"))?;
                }
            }
            #[cfg(feature = "peers")]
            System::Lmdb(l) => {
                for (t, &i) in idx.iter().enumerate() {
                    let v = (base + t as u64).to_le_bytes();
                    l.begin().map_err(CliError::io("LMDB"))?;
                    l.del(i).map_err(CliError::io("LMDB"))?;
                    l.put(i, &v).map_err(CliError::io("LMDB"))?;
                    l.commit().map_err(CliError::io("LMDB"))?;
                }
            }
            #[cfg(feature = "peers")]
            System::Bdb(b) => {
                for (t, &i) in idx.iter().enumerate() {
                    let v = (base + t as u64).to_le_bytes();
                    b.begin().map_err(CliError::io("Berkeley DB"))?;
                    b.del(i).map_err(CliError::io("Berkeley DB"))?;
                    b.put(i, &v).map_err(CliError::io("Berkeley DB"))?;
                    b.commit().map_err(CliError::io("Berkeley DB"))?;
                }
            }
        }
        let after = match self {
            System::Rewind { pool, .. } => Some(pool.counters()),
            #[cfg(feature = "peers")]
            _ => None,
        };
        let mut sample = timer.stop(after);
        if let Some(c) = sample.counters {
            let per = c.device_flushes as f64 / idx.len() as f64;
            sample
                .values
                .push(("device_flushes_per_commit", per, "count"));
        }
        Ok(sample)
    }
}

fn run(ctx: &Ctx, report: &mut Report) -> Result<(), CliError> {
    let n = ctx.scale.pick(5, 200, 2_000);
    let dir = ctx.scratch()?;
    println!(
        "  {n} one-row durable updates per round, median of {ROUNDS} rounds, in {}",
        dir.path().display()
    );
    let (labels, mut systems): (Vec<_>, Vec<_>) = systems(dir.path())?.into_iter().unzip();
    let measured = ctx.rounds(
        labels,
        &mut systems,
        (1, ROUNDS),
        |r| {
            let mut rng = SmallRng::seed_from_u64(r as u64);
            let idx: Vec<u64> = (0..n).map(|_| rng.gen_range(0..M)).collect();
            (idx, (r as u64) << 32)
        },
        System::measure,
    )?;
    measured.report(
        report,
        &Per::us("commit", "us_per_commit", n),
        &[],
        &["sqlite", "lmdb", "bdb"],
    );
    Ok(())
}
