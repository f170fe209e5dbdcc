//! `rewind bench disk --dir DIR`: one-word durable transactions on a plain
//! disk, rewind on the `Msync` backend beside the stores people without
//! persistent memory would pick, each doing one-row durable updates in the
//! same directory: SQLite (WAL, `synchronous=FULL`; always built, the
//! SQLite `rewind-sqlite` bundles) and, with `--features peers`, LMDB
//! (synchronous commits) and Berkeley DB (transactional, synchronous
//! commits). Beside them, the floor: one 64-byte record made durable by
//! each primitive a log in a file can use (`disk-floor`:
//! `pwrite`+`fdatasync`, `pwritev2(RWF_DSYNC)`, a mapped store + `msync`,
//! `pwrite` + `msync`), each one device flush.
//!
//! Every system holds `M` rows (rewind: an array of `M` u64 in a pool) and
//! runs the same sequence of transactions, each updating one random row and
//! returning only once the update is durable: rewind one `tx.write` of 8
//! bytes (under redo, and under force); SQLite one `UPDATE` statement (its
//! own transaction); LMDB and Berkeley DB one transaction deleting and
//! re-inserting the row (their shims' `put` only inserts). Alternating
//! rounds, medians, per-round ratios (the harness); after each round every
//! system reads back the rows it wrote, and the answers must agree.
//! rewind's device flushes are counted (`device_flushes_per_commit`: the
//! `msync` calls of its `Msync` domain, one per fence with anything to make
//! durable); the peers' cannot be, the floor's are one per record by
//! construction.
//!
//! The pools are always `Msync`, whatever `--backend` says. Without `--dir`
//! the scratch directory is in the temp directory (not `/dev/shm`, the
//! other experiments' default, where no flush reaches a device).

use std::path::Path;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{Backend, Counters, PPtr, Policy, Pool, PoolConfig};
use rewind_peers::disk_floor::{DiskFloor, Primitive};
use rewind_sqlite::rusqlite;

use super::harness::{Bench, Ctx, Headline, Label, Per, Sample, Timer};
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
        Col("ratio_vs_floor", "x floor", 2),
    ],
    chart: Chart {
        title: "one-word durable transactions on a disk",
        y_label: "microseconds per commit",
        metrics: &["us_per_commit"],
        log_y: false,
        higher_is_better: false,
    },
    peers: &["lmdb", "bdb"],
    paper: "Issue 16's disk half: on a plain disk every fence is a device flush, so a durable commit costs at least one; the goal is 1.00 device flush per one-word commit and at least 2x the speed of SQLite WAL FULL and 1.5x that of LMDB and Berkeley DB on the same disk.",
    notes: "rewind's redo commit writes its group to the file with `pwrite` and makes it durable with one `msync` of its pages (one device flush); the values stored in place reach the disk lazily, when the commit ring is drained (ring full, `sync`, close). Force pays a fence per log record and for the data. SQLite WAL FULL writes a 4 KiB frame and syncs the WAL per commit (the SQLite rusqlite bundles is built without `HAVE_FDATASYNC`, so that sync is an `fsync`, which on ext4 also commits the journal for the file's mtime), LMDB writes its pages and syncs twice (data, then meta page), Berkeley DB writes and syncs its log. `disk-floor` rows are the flush alone: 64 bytes and one device flush by each primitive.",
    headlines: &[Headline {
        what: "one-row durable update on a disk (Msync)",
        param: None,
        metric: "us_per_commit",
        unit: "us/commit",
        higher_is_better: false,
        against: &["sqlite", "lmdb", "bdb"],
    }],
};

const LAYOUT: &str = "rewind-bench-disk";
/// Rows.
const M: u64 = 4096;
/// Measured rounds; the median counts.
const ROUNDS: usize = 5;
/// The floor that `ratio_vs_floor` divides by: the primitive rewind uses.
const FLOOR: &str = "disk-floor/pwrite-msync";

enum System {
    Rewind {
        pool: Box<Pool>,
        data: PPtr<u64>,
    },
    Sqlite(rusqlite::Connection),
    Floor(DiskFloor, Primitive),
    #[cfg(feature = "peers")]
    Shim(rewind_peers::shim::Shim),
}

fn sql(what: &'static str) -> impl Fn(rusqlite::Error) -> CliError {
    move |e| CliError::Io {
        action: what.into(),
        source: std::io::Error::other(e.to_string()),
    }
}

/// rewind's configurations: redo (one group, one fence per commit) and
/// force, on Batch, the default log.
fn rewind_configs() -> [(String, PoolConfig); 2] {
    [Policy::Redo, Policy::Force].map(|policy| {
        let cfg = PoolConfig::default().policy(policy).backend(Backend::Msync);
        (format!("msync-{policy}"), cfg)
    })
}

fn systems(dir: &Path) -> Result<Vec<(Label, System)>, CliError> {
    let label = |s: &str, c: &str| Label::new(s, c, "one-row");
    let mut out = Vec::new();
    for (config, cfg) in rewind_configs() {
        let (pool, data) = super::array_pool(dir, &config, LAYOUT, 64 << 20, &cfg, M)?;
        let pool = Box::new(pool);
        out.push((label("rewind", &config), System::Rewind { pool, data }));
    }
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
    #[cfg(feature = "peers")]
    {
        use rewind_peers::shim::Shim;
        let zero = 0u64.to_le_bytes();
        type Open = fn(&Path, u64) -> std::io::Result<Shim>;
        let peers: [(&str, &str, Open, u64); 2] = [
            ("lmdb", "sync", Shim::lmdb, 1 << 30),
            ("bdb", "txn-sync", Shim::bdb, 64 << 20),
        ];
        for (name, config, open, size) in peers {
            let d = dir.join(name);
            std::fs::create_dir_all(&d)
                .map_err(CliError::io(format!("creating {}", d.display())))?;
            let mut s = open(&d, size).map_err(CliError::io(format!("opening {name}")))?;
            s.begin().map_err(CliError::io(format!("{name} load")))?;
            for k in 0..M {
                s.put(k, &zero)
                    .map_err(CliError::io(format!("{name} load")))?;
            }
            s.commit().map_err(CliError::io(format!("{name} load")))?;
            out.push((label(name, config), System::Shim(s)));
        }
    }
    for how in Primitive::ALL {
        let path = dir.join(format!("floor-{}.log", how.name()));
        let f = DiskFloor::create(&path)
            .map_err(CliError::io(format!("creating {}", path.display())))?;
        out.push((label("disk-floor", how.name()), System::Floor(f, how)));
    }
    Ok(out)
}

impl System {
    /// One durable one-row update per index; transaction `t` stores
    /// `base + t`. The digest: the rows written, read back in order.
    fn measure(&mut self, (idx, base): &(Vec<u64>, u64)) -> Result<Sample, CliError> {
        let timer = Timer::start(self.counters());
        match self {
            System::Rewind { pool, data } => {
                for (t, &i) in idx.iter().enumerate() {
                    pool.transaction(|tx| tx.write(data.at(i), &(base + t as u64)))
                        .map_err(CliError::rewind("disk transaction"))?;
                }
            }
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
            System::Shim(s) => {
                let e = |e| CliError::io("peer update")(e);
                for (t, &i) in idx.iter().enumerate() {
                    let v = (base + t as u64).to_le_bytes();
                    s.begin().map_err(e)?;
                    s.del(i).map_err(e)?;
                    s.put(i, &v).map_err(e)?;
                    s.commit().map_err(e)?;
                }
            }
            System::Floor(f, how) => {
                for (t, _) in idx.iter().enumerate() {
                    f.write(*how, base + t as u64)
                        .map_err(|e| CliError::io("disk-floor write")(e))?;
                }
            }
        }
        let mut sample = timer.stop(self.counters());
        if let System::Floor(..) = self {
            // One fence, one device flush per record, by construction.
            let mut c = Counters::default();
            c.fences = idx.len() as u64;
            c.device_flushes = idx.len() as u64;
            sample.counters = Some(c);
        }
        if let Some(c) = sample.counters {
            let per = c.device_flushes as f64 / idx.len() as f64;
            (sample.values).push(("device_flushes_per_commit", per, "count"));
        }
        sample.digest = self.digest(idx)?;
        Ok(sample)
    }

    /// The rows of `idx` read back, folded (`None` for the floor, which
    /// keeps no rows).
    fn digest(&mut self, idx: &[u64]) -> Result<Option<u64>, CliError> {
        let mut d = 0u64;
        let mut fold = |v: u64| d = d.wrapping_mul(0x100_0000_01b3) ^ v;
        match self {
            System::Rewind { pool, data } => {
                for &i in idx {
                    fold(
                        pool.read(data.at(i))
                            .map_err(CliError::rewind("disk read"))?,
                    );
                }
            }
            System::Sqlite(c) => {
                let mut st = c
                    .prepare_cached("SELECT v FROM kv WHERE k = ?1")
                    .map_err(sql("SQLite"))?;
                for &i in idx {
                    let v: i64 = st
                        .query_row([i as i64], |r| r.get(0))
                        .map_err(sql("SQLite read"))?;
                    fold(v as u64);
                }
            }
            #[cfg(feature = "peers")]
            System::Shim(s) => {
                for &i in idx {
                    let mut v = [0u8; 8];
                    let found = s.get(i, &mut v).map_err(CliError::io("peer read"))?;
                    fold(if found {
                        u64::from_le_bytes(v)
                    } else {
                        u64::MAX
                    });
                }
            }
            System::Floor(..) => return Ok(None),
        }
        Ok(Some(d))
    }

    /// The counters so far, where this system counts them.
    fn counters(&self) -> Option<Counters> {
        match self {
            System::Rewind { pool, .. } => Some(pool.counters()),
            _ => None,
        }
    }
}

fn run(ctx: &Ctx, report: &mut Report) -> Result<(), CliError> {
    let n = ctx.scale.pick(5, 200, 2_000);
    let base = ctx.dir.clone().unwrap_or_else(std::env::temp_dir);
    let dir = crate::scratch::dir(Some(&base))?;
    // The machine line names where the files went and the backend used.
    if let Some((cpu, _)) = report.machine.split_once(", pools in ") {
        report.machine = format!("{cpu}, pools in {} (msync backend)", base.display());
    }
    println!(
        "  {n} one-row durable updates per round, median of {ROUNDS} rounds, in {} (rewind's pools on Msync, whatever --backend says)",
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
        &[("floor", FLOOR)],
        &["sqlite", "lmdb", "bdb"],
    );
    Ok(())
}
