//! `rewind bench disk --dir DIR`: one-word durable transactions on a real
//! disk (the `Msync` backend), beside the stores people without persistent
//! memory would pick: SQLite (WAL, `synchronous=FULL`), LMDB (default,
//! synchronous commits) and Berkeley DB (transactional, synchronous
//! commits), each doing one-row durable updates on the same directory
//! (`--features peers`).
//!
//! Every system holds `M` rows (rewind: an array of `M` u64 in a pool) and
//! runs the same sequence of transactions, each updating one random row and
//! returning only once the update is durable: rewind one `tx.write` of 8
//! bytes under the redo policy; SQLite one `UPDATE` statement (its own
//! transaction); LMDB and Berkeley DB one transaction deleting and
//! re-inserting the row (their shims' `put` inserts only). Systems run in
//! alternating rounds and the median round counts; rewind's device flushes
//! (`msync` calls) are counted, the peers' cannot be.
//!
//! Without `--dir` the results directory's parent is used, which may be a
//! tmpfs where no flush reaches a device: the point is a real disk.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{Backend, LogVariant, PPtr, Policy, Pool, PoolConfig};

use super::{median, median_ratio, Ctx, Scale};
use crate::error::CliError;
use crate::report::{Report, Row};

const LAYOUT: &str = "rewind-bench-disk";
/// Rows.
const M: u64 = 4096;
/// Rounds per system; the median counts.
const ROUNDS: usize = 5;

fn txs(scale: Scale) -> u64 {
    match scale {
        Scale::Tiny => 5,
        Scale::Quick => 200,
        Scale::Full => 2_000,
    }
}

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

struct Subject {
    system: &'static str,
    config: &'static str,
    inner: System,
}

fn fresh_dir(dir: &Path, name: &str) -> Result<PathBuf, CliError> {
    let d = dir.join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).map_err(CliError::io(format!("creating {}", d.display())))?;
    Ok(d)
}

fn subjects(dir: &Path) -> Result<Vec<Subject>, CliError> {
    let mut out = Vec::new();
    for (config, policy) in [("msync-redo", Policy::Redo), ("msync-force", Policy::Force)] {
        let cfg = PoolConfig::default()
            .log(LogVariant::Batch)
            .policy(policy)
            .backend(Backend::Msync);
        let (pool, data) = super::array_pool(dir, config, LAYOUT, 64 << 20, &cfg, M)?;
        out.push(Subject {
            system: "rewind",
            config,
            inner: System::Rewind {
                pool: Box::new(pool),
                data,
            },
        });
    }
    #[cfg(feature = "peers")]
    {
        let err = |what: &'static str| {
            move |e: rusqlite::Error| CliError::Io {
                action: what.into(),
                source: std::io::Error::other(e.to_string()),
            }
        };
        let path = dir.join("sqlite.db");
        let _ = std::fs::remove_file(&path);
        let c = rusqlite::Connection::open(&path).map_err(err("opening SQLite"))?;
        let mode: String = c
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(err("SQLite WAL"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(CliError::Usage(format!("SQLite refused WAL mode ({mode})")));
        }
        c.execute_batch(
            "PRAGMA synchronous = FULL;
             CREATE TABLE kv (k INTEGER PRIMARY KEY, v INTEGER NOT NULL);",
        )
        .map_err(err("SQLite schema"))?;
        c.execute_batch("BEGIN").map_err(err("SQLite load"))?;
        for k in 0..M {
            c.execute("INSERT INTO kv (k, v) VALUES (?1, 0)", [k as i64])
                .map_err(err("SQLite load"))?;
        }
        c.execute_batch("COMMIT").map_err(err("SQLite load"))?;
        out.push(Subject {
            system: "sqlite",
            config: "wal-full",
            inner: System::Sqlite(c),
        });
        let d = fresh_dir(dir, "lmdb")?;
        let mut l = rewind_peers::lmdb::Lmdb::open(&d, 1 << 30).map_err(CliError::io("LMDB"))?;
        l.begin().map_err(CliError::io("LMDB load"))?;
        for k in 0..M {
            l.put(k, &0u64.to_le_bytes())
                .map_err(CliError::io("LMDB load"))?;
        }
        l.commit().map_err(CliError::io("LMDB load"))?;
        out.push(Subject {
            system: "lmdb",
            config: "sync",
            inner: System::Lmdb(l),
        });
        let d = fresh_dir(dir, "bdb")?;
        let mut b =
            rewind_peers::bdb::Bdb::open(&d, 64 << 20).map_err(CliError::io("Berkeley DB"))?;
        b.begin().map_err(CliError::io("Berkeley DB load"))?;
        for k in 0..M {
            b.put(k, &0u64.to_le_bytes())
                .map_err(CliError::io("Berkeley DB load"))?;
        }
        b.commit().map_err(CliError::io("Berkeley DB load"))?;
        out.push(Subject {
            system: "bdb",
            config: "txn-sync",
            inner: System::Bdb(b),
        });
    }
    Ok(out)
}

impl Subject {
    /// Runs one durable one-row update per index; the time and rewind's
    /// device flushes.
    fn measure(&mut self, idx: &[u64], base: u64) -> Result<(Duration, Option<u64>), CliError> {
        let start = Instant::now();
        let flushes = match &mut self.inner {
            System::Rewind { pool, data } => {
                let before = pool.counters();
                for (t, &i) in idx.iter().enumerate() {
                    pool.transaction(|tx| tx.write(data.at(i), &(base + t as u64)))
                        .map_err(CliError::rewind("disk transaction"))?;
                }
                Some(pool.counters().since(&before).device_flushes)
            }
            #[cfg(feature = "peers")]
            System::Sqlite(c) => {
                let mut st = c
                    .prepare_cached("UPDATE kv SET v = ?1 WHERE k = ?2")
                    .map_err(|e| CliError::Usage(format!("SQLite: {e}")))?;
                for (t, &i) in idx.iter().enumerate() {
                    st.execute([(base + t as u64) as i64, i as i64])
                        .map_err(|e| CliError::Usage(format!("SQLite update: {e}")))?;
                }
                None
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
                None
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
                None
            }
        };
        Ok((start.elapsed(), flushes))
    }
}

/// Runs the disk benchmark in `dir` (a scratch directory on the disk to
/// measure), writing results to `out`.
pub fn run_in(ctx: &Ctx, dir: &Path, out: &Path) -> Result<(), CliError> {
    let scratch = fresh_dir(dir, "rewind-bench-disk")?;
    let n = txs(ctx.scale);
    println!(
        "disk: {n} one-row durable updates per round, {ROUNDS} rounds, in {}",
        scratch.display()
    );
    let mut subs = subjects(&scratch)?;
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); subs.len()];
    let mut flushes: Vec<u64> = vec![0; subs.len()];
    // One unmeasured warm-up round, then alternating measured rounds.
    for round in 0..=ROUNDS {
        let mut rng = SmallRng::seed_from_u64(round as u64);
        let idx: Vec<u64> = (0..n).map(|_| rng.gen_range(0..M)).collect();
        for (s, sub) in subs.iter_mut().enumerate() {
            let (t, f) = sub.measure(&idx, (round as u64) << 32)?;
            if round > 0 {
                times[s].push(t);
                flushes[s] += f.unwrap_or(0);
            }
        }
    }
    let mut report = Report {
        bench: "disk".into(),
        rows: Vec::new(),
    };
    let row = |sub: &Subject, metric: &str, value: f64, unit: &str| Row {
        system: sub.system.into(),
        config: sub.config.into(),
        param: "k=1".into(),
        metric: metric.into(),
        value,
        unit: unit.into(),
    };
    let us = |d: &[Duration]| median(d.iter().map(|d| d.as_secs_f64() * 1e6 / n as f64).collect());
    println!(
        "  {:<8} {:<12} {:>12} {:>16}",
        "system", "config", "us/commit", "device flushes"
    );
    for (s, sub) in subs.iter().enumerate() {
        let per = us(&times[s]);
        report.rows.push(row(sub, "us_per_commit", per, "us"));
        let fl = if sub.system == "rewind" {
            let f = flushes[s] as f64 / (n * ROUNDS as u64) as f64;
            report
                .rows
                .push(row(sub, "device_flushes_per_commit", f, "count"));
            format!("{f:.2}")
        } else {
            "n/a".into()
        };
        // rewind's redo speed over each peer, per round, median.
        if sub.config == "msync-redo" {
            for (p, peer) in subs
                .iter()
                .enumerate()
                .filter(|(_, x)| x.system != "rewind")
            {
                let r = median_ratio(&times[p], &times[s]);
                report
                    .rows
                    .push(row(sub, &format!("speed_vs_{}", peer.system), r, "x"));
                println!("  rewind msync-redo vs {}: {r:.2}x faster", peer.system);
            }
        }
        println!(
            "  {:<8} {:<12} {:>12.1} {:>16}",
            sub.system, sub.config, per, fl
        );
    }
    let mut written = report.write(out)?;
    written.sort();
    for p in written {
        println!("  wrote {}", p.display());
    }
    Ok(())
}
