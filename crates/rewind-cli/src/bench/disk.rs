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

use super::harness::{median, Bench, Ctx, Headline, Label, Per, Sample, Timer};
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

/// `rewind bench group-commit`: the same durable one-row updates from 1,
/// 2, 4, 8 and 16 threads at once, on the disk (`--dir`, else the temp
/// directory): rewind on `Msync` (one pool; its commits share device
/// flushes, see `rewind::persist`) beside SQLite WAL FULL (a connection
/// per thread on one database), LMDB and Berkeley DB (with `--features
/// peers`: an environment handle per thread on one environment, each
/// thread's transactions its own). Thread `t` of `T` updates only rows
/// `r` with `r % T == t`, so the rows' final values, read back after every
/// round, are the same for every system.
pub const GROUP_COMMIT: Bench = Bench {
    name: "group-commit",
    about: "durable one-row updates from 1-16 threads on a disk: rewind's group commit (Msync) beside SQLite WAL FULL, LMDB, Berkeley DB",
    run: run_group,
    table: &[
        Col("commits_per_s", "commits/s", 0),
        Col("scaling_vs_1_thread", "x 1 thread", 2),
        Col("commits_per_flush", "commits/flush", 2),
        Col("device_flushes_per_commit", "dev flushes", 2),
    ],
    chart: Chart {
        title: "durable one-row updates on a disk against threads",
        y_label: "commits per second (log scale)",
        metrics: &["commits_per_s"],
        log_y: true,
        higher_is_better: true,
    },
    peers: &["lmdb", "bdb"],
    paper: "Issue 17's group commit: on a disk a fence is a device flush, and every database shares one among the commits that arrive while it is in flight; the goal is 8 threads at 4x one thread's commits per second, and 2x the fastest of SQLite WAL FULL, LMDB and Berkeley DB at 8 threads.",
    notes: "rewind's commits reserve their ring space under the latch and write and fence outside it; on Msync a fence that finds a device flush in flight waits for it and the next one, which one waiter leads for all (`commits_per_flush`). SQLite's writers take the WAL's write lock in turn (a busy connection sleeps and retries), LMDB has one writer at a time, Berkeley DB's transactions lock pages and each commit flushes the log (its own group commit joins commits whose log records are written by the time the flush starts).",
    headlines: &[Headline {
        what: "durable one-row updates on a disk, 8 threads",
        param: Some("threads=8"),
        metric: "commits_per_s",
        unit: "commits/s",
        higher_is_better: true,
        against: &["sqlite", "lmdb", "bdb"],
    }],
};

/// Thread counts of `group-commit`.
const GROUP_THREADS: [usize; 5] = [1, 2, 4, 8, 16];

/// A system of `group-commit`: the peers keep only their directory, each
/// thread opening its own handle for a round.
enum Group {
    Rewind {
        pool: Box<Pool>,
        data: PPtr<u64>,
    },
    Sqlite(Vec<rusqlite::Connection>),
    #[cfg(feature = "peers")]
    Shim {
        dir: std::path::PathBuf,
        open: fn(&Path, u64) -> std::io::Result<rewind_peers::shim::Shim>,
        size: u64,
    },
}

fn group_systems(dir: &Path, threads: usize) -> Result<Vec<(Label, Group)>, CliError> {
    let param = format!("threads={threads}");
    let label = |s: &str, c: &str| Label::new(s, c, param.clone());
    let mut out = Vec::new();
    let cfg = PoolConfig::default()
        .policy(Policy::Redo)
        .backend(Backend::Msync);
    let (pool, data) = super::array_pool(dir, "group", LAYOUT, 64 << 20, &cfg, M)?;
    let pool = Box::new(pool);
    out.push((label("rewind", "msync-redo"), Group::Rewind { pool, data }));
    let db = dir.join("sqlite.db");
    let mut conns = Vec::new();
    for i in 0..threads {
        let c = rusqlite::Connection::open(&db).map_err(sql("opening SQLite"))?;
        c.busy_timeout(std::time::Duration::from_secs(600))
            .map_err(sql("SQLite busy timeout"))?;
        let mode: String = c
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(sql("SQLite WAL"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(CliError::Usage(format!("SQLite refused WAL mode ({mode})")));
        }
        c.execute_batch("PRAGMA synchronous = FULL;")
            .map_err(sql("SQLite synchronous"))?;
        if i == 0 {
            c.execute_batch("CREATE TABLE kv (k INTEGER PRIMARY KEY, v INTEGER NOT NULL); BEGIN;")
                .map_err(sql("SQLite schema"))?;
            for k in 0..M {
                c.execute("INSERT INTO kv (k, v) VALUES (?1, 0)", [k as i64])
                    .map_err(sql("SQLite load"))?;
            }
            c.execute_batch("COMMIT").map_err(sql("SQLite load"))?;
        }
        conns.push(c);
    }
    out.push((label("sqlite", "wal-full"), Group::Sqlite(conns)));
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
            drop(s);
            let sys = Group::Shim { dir: d, open, size };
            out.push((label(name, config), sys));
        }
    }
    Ok(out)
}

/// A round's input: each thread's rows, and the base of its values.
type Rows = (Vec<Vec<u64>>, u64);

/// Runs `f(t, rows)` on one thread per row list, all starting at one
/// barrier; the wall time from the barrier to the last one's end.
fn on_threads<W: Send>(
    workers: Vec<W>,
    rows: &[Vec<u64>],
    f: impl Fn(&mut W, usize, &[u64]) -> Result<(), CliError> + Sync,
) -> Result<std::time::Duration, CliError> {
    let barrier = std::sync::Barrier::new(rows.len() + 1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (workers.into_iter().zip(rows).enumerate())
            .map(|(t, (mut w, rows))| {
                let (barrier, f) = (&barrier, &f);
                scope.spawn(move || {
                    barrier.wait();
                    f(&mut w, t, rows)
                })
            })
            .collect();
        barrier.wait();
        let start = std::time::Instant::now();
        for h in handles {
            h.join()
                .map_err(|_| CliError::Bench("a group-commit thread panicked".into()))??;
        }
        Ok(start.elapsed())
    })
}

impl Group {
    /// Every thread's updates; the sample's digest is the rows read back.
    fn measure(&mut self, (rows, base): &Rows) -> Result<Sample, CliError> {
        let before = self.counters();
        let value = |t: usize, j: usize| base + ((t as u64) << 24) + j as u64;
        let time = match self {
            Group::Rewind { pool, data } => {
                let (pool, data) = (&**pool, *data);
                on_threads(vec![(); rows.len()], rows, |_, t, rows| {
                    for (j, &r) in rows.iter().enumerate() {
                        pool.transaction(|tx| tx.write(data.at(r), &value(t, j)))
                            .map_err(CliError::rewind("group-commit transaction"))?;
                    }
                    Ok(())
                })?
            }
            Group::Sqlite(conns) => on_threads(conns.iter_mut().collect(), rows, |c, t, rows| {
                let mut st = c
                    .prepare_cached("UPDATE kv SET v = ?1 WHERE k = ?2")
                    .map_err(sql("SQLite"))?;
                for (j, &r) in rows.iter().enumerate() {
                    st.execute([value(t, j) as i64, r as i64])
                        .map_err(sql("SQLite update"))?;
                }
                Ok(())
            })?,
            #[cfg(feature = "peers")]
            Group::Shim { dir, open, size } => {
                // Each thread opens its handle before the barrier and
                // closes it after its last commit.
                let (dir, open, size) = (&*dir, *open, *size);
                let barrier = std::sync::Barrier::new(rows.len() + 1);
                let e = |e| CliError::io("peer update")(e);
                let times = std::thread::scope(|scope| {
                    let handles: Vec<_> = (rows.iter().enumerate())
                        .map(|(t, rows)| {
                            let barrier = &barrier;
                            scope.spawn(move || {
                                let s = open(dir, size);
                                barrier.wait();
                                let mut s = s.map_err(CliError::io("opening a peer handle"))?;
                                for (j, &r) in rows.iter().enumerate() {
                                    let v = value(t, j).to_le_bytes();
                                    s.begin().map_err(e)?;
                                    s.del(r).map_err(e)?;
                                    s.put(r, &v).map_err(e)?;
                                    s.commit().map_err(e)?;
                                }
                                let end = std::time::Instant::now();
                                barrier.wait();
                                Ok::<_, CliError>(end)
                            })
                        })
                        .collect();
                    barrier.wait();
                    let start = std::time::Instant::now();
                    barrier.wait();
                    let mut last = start;
                    for h in handles {
                        let end = h.join().map_err(|_| {
                            CliError::Bench("a group-commit thread panicked".into())
                        })??;
                        last = last.max(end);
                    }
                    Ok::<_, CliError>(last - start)
                })?;
                times
            }
        };
        let commits: usize = rows.iter().map(Vec::len).sum();
        let mut sample = Sample {
            time,
            counters: self.counters().zip(before).map(|(a, b)| a.since(&b)),
            ..Sample::default()
        };
        let per_s = commits as f64 / time.as_secs_f64();
        sample.values.push(("commits_per_s", per_s, "commits/s"));
        if let Some(c) = sample.counters {
            let per = c.device_flushes as f64 / commits as f64;
            (sample.values).push(("device_flushes_per_commit", per, "count"));
            let group = commits as f64 / c.device_flushes.max(1) as f64;
            (sample.values).push(("commits_per_flush", group, "count"));
        }
        sample.digest = Some(self.digest(rows)?);
        Ok(sample)
    }

    /// Every thread's rows read back, in thread order, folded.
    fn digest(&mut self, rows: &[Vec<u64>]) -> Result<u64, CliError> {
        let mut d = 0u64;
        let mut fold = |v: u64| d = d.wrapping_mul(0x100_0000_01b3) ^ v;
        let all = rows.iter().flatten();
        match self {
            Group::Rewind { pool, data } => {
                for &r in all {
                    fold(pool.read(data.at(r)).map_err(CliError::rewind("read"))?);
                }
            }
            Group::Sqlite(conns) => {
                let mut st = conns[0]
                    .prepare_cached("SELECT v FROM kv WHERE k = ?1")
                    .map_err(sql("SQLite"))?;
                for &r in all {
                    let v: i64 = st
                        .query_row([r as i64], |r| r.get(0))
                        .map_err(sql("SQLite read"))?;
                    fold(v as u64);
                }
            }
            #[cfg(feature = "peers")]
            Group::Shim { dir, open, size } => {
                let mut s = open(dir, *size).map_err(CliError::io("opening a peer"))?;
                for &r in all {
                    let mut v = [0u8; 8];
                    let found = s.get(r, &mut v).map_err(CliError::io("peer read"))?;
                    fold(if found {
                        u64::from_le_bytes(v)
                    } else {
                        u64::MAX
                    });
                }
            }
        }
        Ok(d)
    }

    fn counters(&self) -> Option<Counters> {
        match self {
            Group::Rewind { pool, .. } => Some(pool.counters()),
            _ => None,
        }
    }
}

fn run_group(ctx: &Ctx, report: &mut Report) -> Result<(), CliError> {
    let n = ctx.scale.pick(4, 100, 400);
    let base = ctx.dir.clone().unwrap_or_else(std::env::temp_dir);
    if let Some((cpu, _)) = report.machine.split_once(", pools in ") {
        report.machine = format!("{cpu}, pools in {} (msync backend)", base.display());
    }
    println!(
        "  {n} one-row durable updates per thread per round, threads {GROUP_THREADS:?}, median of {ROUNDS} rounds, in {} (rewind's pools on Msync, whatever --backend says)",
        base.display()
    );
    // Every system at every thread count in one set of alternating rounds
    // (a round runs each of them once), so that a burst of load on the
    // shared disk hits every point alike, and each point's ratio to one
    // thread is taken round by round.
    let dirs = (GROUP_THREADS.iter())
        .map(|_| crate::scratch::dir(Some(&base)))
        .collect::<Result<Vec<_>, _>>()?;
    let (mut labels, mut systems) = (Vec::new(), Vec::new());
    for (k, &threads) in GROUP_THREADS.iter().enumerate() {
        for (l, g) in group_systems(dirs[k].path(), threads)? {
            labels.push(l);
            systems.push((k, g));
        }
    }
    let input = |r: usize| -> (usize, Vec<Rows>) {
        let rows = GROUP_THREADS.map(|threads| {
            let mut rng = SmallRng::seed_from_u64((r as u64) << 8 | threads as u64);
            let per = M / threads as u64;
            let rows = (0..threads as u64)
                .map(|t| {
                    (0..n)
                        .map(|_| rng.gen_range(0..per) * threads as u64 + t)
                        .collect()
                })
                .collect();
            (rows, (r as u64) << 40)
        });
        (r, rows.to_vec())
    };
    // The answers must agree between the systems at one thread count (the
    // driver's digest check compares every system of a round, so the
    // digests are checked here instead).
    let digests = std::cell::RefCell::new(std::collections::HashMap::new());
    let m = ctx.rounds(
        labels,
        &mut systems,
        (1, ROUNDS),
        input,
        |(k, g), (r, rows)| {
            let mut sample = g.measure(&rows[*k])?;
            let d = sample.digest.take();
            let mut seen = digests.borrow_mut();
            let want = *seen.entry((*r, *k)).or_insert(d);
            if want != d {
                return Err(CliError::Verification {
                    failures: vec![format!(
                        "round {r}, {} threads: the systems' answers differ",
                        GROUP_THREADS[*k]
                    )],
                });
            }
            Ok(sample)
        },
    )?;
    let value = |i: usize, r: usize, name: &str| {
        (m.samples[i][r].values.iter())
            .find(|v| v.0 == name)
            .map_or(f64::NAN, |v| v.1)
    };
    for (i, l) in m.labels.iter().enumerate() {
        let med = |name: &str| median((0..ROUNDS).map(|r| value(i, r, name)).collect());
        report.push(l, "commits_per_s", med("commits_per_s"), "commits/s");
        for name in ["commits_per_flush", "device_flushes_per_commit"] {
            report.push(l, name, med(name), "count");
        }
        let one = (m.labels.iter())
            .position(|b| b.system == l.system && b.config == l.config && b.param == "threads=1");
        if let Some(j) = one {
            let ratios =
                (0..ROUNDS).map(|r| value(i, r, "commits_per_s") / value(j, r, "commits_per_s"));
            report.push(l, "scaling_vs_1_thread", median(ratios.collect()), "ratio");
        }
    }
    Ok(())
}
