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
//! `rewind bench group-commit` runs the same updates from 1 to 16 threads
//! at once. Both experiments drive the same stores ([`Store`]: rewind,
//! SQLite, LMDB, Berkeley DB, each updating the rows of one or more threads
//! and reading them back); `disk` is its one-thread case beside the floor.
//!
//! The pools are always `Msync`, whatever `--backend` says. Without `--dir`
//! the scratch directory is in the temp directory (not `/dev/shm`, the
//! other experiments' default, where no flush reaches a device).

use std::path::Path;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{Backend, Counters, PPtr, Policy, Pool, PoolConfig};
use rewind_peers::disk_floor::{DiskFloor, Primitive};
use rewind_sqlite::rusqlite;

use super::harness::{self, median, Agreement, Ctx, Label, Per, Sample};
use super::output::Report;
use crate::error::CliError;

/// Rows.
const M: u64 = 4096;
/// Measured rounds; the median counts.
const ROUNDS: usize = 5;
/// The floor that `ratio_vs_floor` divides by: the primitive rewind uses.
const FLOOR: &str = "disk-floor/pwrite-msync";

fn sql(what: &'static str) -> impl Fn(rusqlite::Error) -> CliError {
    move |e| CliError::Io {
        action: what.into(),
        source: std::io::Error::other(e.to_string()),
    }
}

/// A store doing durable one-row updates from one or more threads: rewind
/// (one pool), SQLite (a connection per thread on one database), LMDB and
/// Berkeley DB (with `--features peers`: only their directory is kept, each
/// thread opening its own handle for a round: a Berkeley DB environment
/// handle, or an LMDB handle on the process's one environment, which LMDB
/// requires, `peers/lmdb.c`).
enum Store {
    Rewind {
        pool: Box<Pool>,
        data: PPtr<u64>,
    },
    Sqlite(Vec<rusqlite::Connection>),
    #[cfg(feature = "peers")]
    Shim {
        dir: std::path::PathBuf,
        open: rewind_peers::shim::Open,
        size: u64,
    },
}

/// The stores in `dir` for `threads` threads, labelled with `param`: rewind
/// under each of `configs` (a pool each), SQLite WAL FULL, and with
/// `--features peers` LMDB and Berkeley DB, every one holding `M` rows of 0.
fn stores(
    dir: &Path,
    threads: usize,
    configs: &[(String, PoolConfig)],
    param: &str,
) -> Result<Vec<(Label, Store)>, CliError> {
    let label = |s: &str, c: &str| Label::new(s, c, param);
    let mut out = Vec::new();
    for (config, cfg) in configs {
        let (pool, data) = super::array_pool(dir, config, 64 << 20, cfg, M)?;
        let pool = Box::new(pool);
        out.push((label("rewind", config), Store::Rewind { pool, data }));
    }
    let db = dir.join("sqlite.db");
    let mut conns = Vec::new();
    for i in 0..threads {
        let c = super::sqlite_wal_full(&db, Duration::from_secs(600))?;
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
    out.push((label("sqlite", "wal-full"), Store::Sqlite(conns)));
    #[cfg(feature = "peers")]
    {
        use rewind_peers::shim::Shim;
        let zero = 0u64.to_le_bytes();
        let peers: [(&str, &str, rewind_peers::shim::Open, u64); 2] = [
            ("lmdb", "sync", Shim::lmdb, 1 << 30),
            ("bdb", "txn-sync", Shim::bdb, 64 << 20),
        ];
        for (name, config, open, size) in peers {
            let d = dir.join(name);
            std::fs::create_dir_all(&d)
                .map_err(CliError::io(format!("creating {}", d.display())))?;
            let mut s = open(&d, size).map_err(CliError::io(format!("opening {name}")))?;
            let load = |e| CliError::io(format!("{name} load"))(e);
            s.begin().map_err(load)?;
            for k in 0..M {
                s.put(k, &zero).map_err(load)?;
            }
            s.commit().map_err(load)?;
            drop(s);
            let sys = Store::Shim { dir: d, open, size };
            out.push((label(name, config), sys));
        }
    }
    Ok(out)
}

/// A round's input: each thread's rows, and the base of its values.
type Rows = (Vec<Vec<u64>>, u64);

/// Runs thread `t` of `rows.len()` on its worker's handle (`open`, not
/// timed): `f(handle, t, rows[t])`; the time from the first one's start
/// to the last one's end.
fn on_threads<W: Send, H>(
    workers: Vec<W>,
    rows: &[Vec<u64>],
    open: impl Fn(W) -> Result<H, CliError> + Sync,
    f: impl Fn(&mut H, usize, &[u64]) -> Result<(), CliError> + Sync,
) -> Result<Duration, CliError> {
    let panicked = || CliError::Bench("a benchmark thread panicked".into());
    let run = harness::on_threads(workers, open, |h, t| f(h, t, &rows[t]), panicked)?;
    Ok(run.time)
}

impl Store {
    /// Thread `t` stores `base + (t << 24) + j` in its `j`th row, each
    /// update durable before it goes on (rewind: one `tx.write` of 8 bytes;
    /// SQLite: one `UPDATE`; LMDB and Berkeley DB: one transaction deleting
    /// and re-inserting the row, their shims' `put` only inserting). The
    /// sample: the time, rewind's counters and `device_flushes_per_commit`,
    /// and the digest of the rows read back in thread order.
    fn measure(&mut self, (rows, base): &Rows) -> Result<Sample, CliError> {
        let before = self.counters();
        let value = |t: usize, j: usize| base + ((t as u64) << 24) + j as u64;
        let time = match self {
            Store::Rewind { pool, data } => {
                let (pool, data) = (&**pool, *data);
                on_threads(vec![(); rows.len()], rows, Ok, |_, t, rows| {
                    for (j, &r) in rows.iter().enumerate() {
                        pool.transaction(|tx| tx.write(data.at(r), &value(t, j)))
                            .map_err(CliError::rewind("durable update"))?;
                    }
                    Ok(())
                })?
            }
            Store::Sqlite(conns) => {
                on_threads(conns.iter_mut().collect(), rows, Ok, |c, t, rows| {
                    let mut st = c
                        .prepare_cached("UPDATE kv SET v = ?1 WHERE k = ?2")
                        .map_err(sql("SQLite"))?;
                    for (j, &r) in rows.iter().enumerate() {
                        st.execute([value(t, j) as i64, r as i64])
                            .map_err(sql("SQLite update"))?;
                    }
                    Ok(())
                })?
            }
            #[cfg(feature = "peers")]
            Store::Shim { dir, open, size } => {
                let (dir, open, size) = (&*dir, *open, *size);
                let e = |e| CliError::io("peer update")(e);
                let handle = |()| open(dir, size).map_err(CliError::io("opening a peer handle"));
                on_threads(vec![(); rows.len()], rows, handle, |s, t, rows| {
                    for (j, &r) in rows.iter().enumerate() {
                        let v = value(t, j).to_le_bytes();
                        s.begin().map_err(e)?;
                        s.del(r).map_err(e)?;
                        s.put(r, &v).map_err(e)?;
                        s.commit().map_err(e)?;
                    }
                    Ok(())
                })?
            }
        };
        let commits: usize = rows.iter().map(Vec::len).sum();
        let mut sample = Sample {
            time,
            counters: self.counters().zip(before).map(|(a, b)| a.since(&b)),
            ..Sample::default()
        };
        if let Some(c) = sample.counters {
            let per = c.device_flushes as f64 / commits as f64;
            (sample.values).push(("device_flushes_per_commit", per, "count"));
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
            Store::Rewind { pool, data } => {
                for &r in all {
                    fold(pool.read(data.at(r)).map_err(CliError::rewind("read"))?);
                }
            }
            Store::Sqlite(conns) => {
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
            Store::Shim { dir, open, size } => {
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

    /// The counters so far, where the store counts them (rewind).
    fn counters(&self) -> Option<Counters> {
        match self {
            Store::Rewind { pool, .. } => Some(pool.counters()),
            _ => None,
        }
    }
}

/// A system of `disk`: a store from one thread, or a floor primitive.
enum System {
    Store(Store),
    Floor(DiskFloor, Primitive),
}

/// rewind on the disk under each of `policies` (`msync-POLICY`), on Batch,
/// the default log.
fn rewind_configs(policies: &[Policy]) -> Vec<(String, PoolConfig)> {
    let cfg = |p| PoolConfig::default().policy(p).backend(Backend::Msync);
    policies
        .iter()
        .map(|&p| (format!("msync-{p}"), cfg(p)))
        .collect()
}

fn systems(dir: &Path) -> Result<Vec<(Label, System)>, CliError> {
    // Redo (one group, one fence per commit) and force.
    let configs = rewind_configs(&[Policy::Redo, Policy::Force]);
    let mut out: Vec<_> = (stores(dir, 1, &configs, "one-row")?.into_iter())
        .map(|(l, s)| (l, System::Store(s)))
        .collect();
    for how in Primitive::ALL {
        let path = dir.join(format!("floor-{}.log", how.name()));
        let f = DiskFloor::create(&path)
            .map_err(CliError::io(format!("creating {}", path.display())))?;
        let label = Label::new("disk-floor", how.name(), "one-row");
        out.push((label, System::Floor(f, how)));
    }
    Ok(out)
}

impl System {
    /// The store's updates from one thread, or the floor's records (one
    /// fence, one device flush each, by construction; no digest).
    fn measure(&mut self, input: &Rows) -> Result<Sample, CliError> {
        let (f, how) = match self {
            System::Store(s) => return s.measure(input),
            System::Floor(f, how) => (f, *how),
        };
        let (rows, base) = input;
        let n = rows[0].len() as u64;
        let start = Instant::now();
        for t in 0..n {
            f.write(how, base + t)
                .map_err(|e| CliError::io("disk-floor write")(e))?;
        }
        let mut c = Counters::default();
        c.fences = n;
        c.device_flushes = n;
        Ok(Sample {
            time: start.elapsed(),
            counters: Some(c),
            values: vec![("device_flushes_per_commit", 1.0, "count")],
            ..Sample::default()
        })
    }
}

/// Where the disk experiments' files go (`--dir`, else the temp directory,
/// not `/dev/shm`), named with the backend in the report's machine line.
fn on_disk(ctx: &Ctx, report: &mut Report) -> std::path::PathBuf {
    let base = ctx.dir.clone().unwrap_or_else(std::env::temp_dir);
    if let Some((cpu, _)) = report.machine.split_once(", pools in ") {
        report.machine = format!("{cpu}, pools in {} (msync backend)", base.display());
    }
    base
}

pub fn run(ctx: &Ctx, report: &mut Report) -> Result<(), CliError> {
    let n = ctx.scale.pick(5, 200, 2_000);
    let base = on_disk(ctx, report);
    let dir = crate::scratch::dir(Some(&base))?;
    println!(
        "  {n} one-row durable updates per round, median of {ROUNDS} rounds, in {} (rewind's pools on Msync, whatever --backend says)",
        dir.path().display()
    );
    let (labels, mut systems): (Vec<_>, Vec<_>) = systems(dir.path())?.into_iter().unzip();
    let input = |r: usize| {
        let mut rng = SmallRng::seed_from_u64(r as u64);
        let idx: Vec<u64> = (0..n).map(|_| rng.gen_range(0..M)).collect();
        (vec![idx], (r as u64) << 32)
    };
    let measured = ctx.rounds(labels, &mut systems, (1, ROUNDS), input, System::measure)?;
    let per = Per::us("commit", "us_per_commit", n);
    let peers = ["sqlite", "lmdb", "bdb"];
    measured.report(report, &per, &[("floor", FLOOR)], &peers);
    Ok(())
}

/// Thread counts of `group-commit`.
const GROUP_THREADS: [usize; 5] = [1, 2, 4, 8, 16];

/// `rewind bench group-commit`: the same durable one-row updates from 1,
/// 2, 4, 8 and 16 threads at once, on the disk (`--dir`, else the temp
/// directory): rewind on `Msync` (one pool; its commits share device
/// flushes, see `rewind::persist`) beside SQLite WAL FULL (a connection
/// per thread on one database), LMDB and Berkeley DB (with `--features
/// peers`: a handle per thread on one environment, each thread's
/// transactions its own). Thread `t` of `T` updates only rows
/// `r` with `r % T == t`, so the rows' final values, read back after every
/// round, are the same for every system.
pub fn run_group(ctx: &Ctx, report: &mut Report) -> Result<(), CliError> {
    let n = ctx.scale.pick(4, 100, 400);
    let base = on_disk(ctx, report);
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
    let configs = rewind_configs(&[Policy::Redo]);
    for (k, &threads) in GROUP_THREADS.iter().enumerate() {
        let param = format!("threads={threads}");
        for (l, g) in stores(dirs[k].path(), threads, &configs, &param)? {
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
    // The answers must agree between the systems at one thread count.
    let agree = Agreement::default();
    let m = ctx.rounds(
        labels,
        &mut systems,
        (1, ROUNDS),
        input,
        |(k, g), (r, rows)| {
            let mut sample = g.measure(&rows[*k])?;
            let commits = (GROUP_THREADS[*k] * n) as f64;
            let per_s = commits / sample.time.as_secs_f64();
            sample.values.push(("commits_per_s", per_s, "commits/s"));
            if let Some(c) = sample.counters {
                let group = commits / c.device_flushes.max(1) as f64;
                (sample.values).push(("commits_per_flush", group, "count"));
                let parks = c.order_parks as f64 / commits;
                (sample.values).push(("order_parks_per_commit", parks, "count"));
                let ahead = c.ahead_write_backs as f64 / commits;
                (sample.values).push(("ahead_per_commit", ahead, "count"));
            }
            let d = sample.digest.take();
            let who = || format!("a system at {} threads", GROUP_THREADS[*k]);
            agree.check(*r, *k, d, who)?;
            Ok(sample)
        },
    )?;
    for (i, l) in m.labels.iter().enumerate() {
        let med = |name: &str| m.median(i, |s| s.value(name));
        report.push(l, "commits_per_s", med("commits_per_s"), "commits/s");
        for name in [
            "commits_per_flush",
            "device_flushes_per_commit",
            "order_parks_per_commit",
            "ahead_per_commit",
        ] {
            report.push(l, name, med(name), "count");
        }
        let one = (m.labels.iter())
            .position(|b| b.system == l.system && b.config == l.config && b.param == "threads=1");
        if let Some(j) = one {
            let rate = |s: &Sample| s.value("commits_per_s");
            let pairs = m.samples[i].iter().zip(&m.samples[j]);
            let ratios = pairs.map(|(a, b)| rate(a) / rate(b)).collect();
            report.push(l, "scaling_vs_1_thread", median(ratios), "ratio");
        }
    }
    Ok(())
}
