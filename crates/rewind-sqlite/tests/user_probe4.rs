//! Defects found by a fourth round of probing the VFS as users' programs
//! would, each kept as a named regression test; then probes that found
//! none, kept as regression tests of what they check: SIGKILLs while a
//! WAL pool of 1 MiB grows for transactions of megabytes and restarts
//! free hundreds of blocks; a second process's statement waiting in its
//! busy handler while the process that has the WAL is killed; and
//! `VACUUM`, DDL and checkpoints beside writer and reader threads.

use std::path::Path;

use rusqlite::ErrorCode;

mod common;
use common::{count, intact};

/// A transaction larger than the pool at its maximum size, with frames of
/// committed transactions in the WAL: `SQLITE_FULL`, and `last_error`
/// says that no checkpoint makes room for it (commit it in pieces, or a
/// larger `max_pool_size`). Before, it said that a checkpoint freed the
/// committed frames' blocks "and writes go on": a program that followed
/// it (the crate's docs say: on `SQLITE_FULL`, checkpoint and retry) had
/// the same transaction fail again after the checkpoint. A transaction
/// that fits once the WAL is checkpointed still gets that advice, and
/// commits after the checkpoint.
#[test]
fn a_transaction_past_the_pools_maximum_is_not_promised_room_by_a_checkpoint() {
    let cfg = rewind_sqlite::Config::default()
        .pool_size(1 << 20)
        .max_pool_size(2 << 20);
    let dir = tempfile::tempdir().unwrap();
    let c = common::open_wal("rewind-user-probe4-max", &cfg, &dir.path().join("m.db"));
    c.execute_batch(
        "PRAGMA wal_autocheckpoint = 0;
         CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB); INSERT INTO t(v) VALUES (x'01');",
    )
    .unwrap();
    let too_large = |what: &str| {
        let e = c
            .execute("INSERT INTO t(v) VALUES (randomblob(3000000))", [])
            .unwrap_err();
        assert_eq!(
            e.sqlite_error_code(),
            Some(ErrorCode::DiskFull),
            "{what}: {e}"
        );
        let why = rewind_sqlite::last_error().unwrap();
        assert!(
            why.contains("no checkpoint makes room") && why.contains("max_pool_size"),
            "{what}: {why}"
        );
        assert!(!why.contains("writes go on"), "{what}: {why}");
    };
    too_large("with committed frames in the WAL");
    c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    too_large("after a checkpoint");
    // Transactions that fit an emptied pool but not this one: the advice
    // to checkpoint, which then lets them commit.
    let mut acked = 1;
    let e = loop {
        match c.execute("INSERT INTO t(v) VALUES (randomblob(300000))", []) {
            Ok(_) => acked += 1,
            Err(e) => break e,
        }
        assert!(acked < 100, "a 2 MiB pool took {acked} rows of 300 KB");
    };
    assert_eq!(e.sqlite_error_code(), Some(ErrorCode::DiskFull), "{e}");
    let why = rewind_sqlite::last_error().unwrap();
    assert!(
        why.contains("a checkpoint (PRAGMA wal_checkpoint) frees"),
        "{why}"
    );
    c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    c.execute("INSERT INTO t(v) VALUES (randomblob(300000))", [])
        .unwrap();
    assert_eq!(count(&c), acked + 1);
    intact(&c);
}

/// The WAL of one of several databases a connection has (its main one
/// and two attached) has a damaged pool: the statement that needs it fails
/// (`SQLITE_CANTOPEN`), and `last_error` names the damaged pool's file,
/// so the program can tell which database it is. Before, most reasons
/// named no file ("WAL pool damaged: ...", "heap metadata corrupt at
/// offset ...", "invalid header field ...", "not a rewind-sqlite WAL
/// pool ..."), though the engine's own errors for a truncated pool did.
#[test]
fn a_damaged_pool_among_attached_databases_is_named_in_the_error() {
    let cfg = rewind_sqlite::Config::default().pool_size(2 << 20);
    let vfs = "rewind-user-probe4-named";
    let dir = tempfile::tempdir().unwrap();
    let db = |n: &str| dir.path().join(format!("{n}.db"));
    let pool = |n: &str| rewind_sqlite::pool_path(&dir.path().join(format!("{n}.db-wal")));
    // Three databases whose rows are all in their pools, as a crash
    // leaves them (the files copied while the connections are open).
    let mut pools = Vec::new();
    for n in ["a", "b", "c"] {
        let c = common::open_wal(vfs, &cfg, &db(&format!("src-{n}")));
        c.execute_batch(
            "PRAGMA wal_autocheckpoint = 0;
             CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);
             INSERT INTO t(v) VALUES (zeroblob(3000)), (zeroblob(3000)), (x'07');",
        )
        .unwrap();
        std::fs::copy(db(&format!("src-{n}")), db(n)).unwrap();
        pools.push(std::fs::read(pool(&format!("src-{n}"))).unwrap());
    }
    // Each way of damaging b's pool: its checks fail at different places.
    type Damage = (&'static str, fn(&mut [u8]));
    let damages: [Damage; 4] = [
        ("a zeroed pool header", |p| p[..4096].fill(0)),
        ("a byte of the meta page", |p| p[4096 + 3000] ^= 0x40),
        ("garbage past the first page", |p| {
            for (i, b) in p[4096..].iter_mut().enumerate() {
                *b = (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1];
            }
        }),
        ("a byte of the header page past its checksum", |p| {
            p[1500] ^= 1
        }),
    ];
    for (what, damage) in damages {
        for (i, n) in ["a", "b", "c"].into_iter().enumerate() {
            let mut bytes = pools[i].clone();
            if n == "b" {
                damage(&mut bytes);
            }
            std::fs::write(pool(n), &bytes).unwrap();
        }
        let c = common::open_wal(vfs, &cfg, &db("a"));
        // (ATTACH reads the schema: it may be the statement that fails.)
        let e = c
            .execute("ATTACH ?1 AS b", [db("b").to_str().unwrap()])
            .and_then(|_| c.execute("ATTACH ?1 AS c", [db("c").to_str().unwrap()]))
            .and_then(|_| {
                c.query_row(
                    "SELECT (SELECT count(*) FROM main.t) + (SELECT count(*) FROM b.t) \
                     + (SELECT count(*) FROM c.t)",
                    [],
                    |r| r.get::<_, i64>(0),
                )
            })
            .unwrap_err();
        assert_eq!(
            e.sqlite_error_code(),
            Some(ErrorCode::CannotOpen),
            "{what}: {e}"
        );
        let why = rewind_sqlite::last_error().unwrap();
        assert!(
            why.contains(&pool("b").display().to_string()),
            "{what}: the reason names no file: {why}"
        );
        drop(c);
        for n in ["a", "b", "c"] {
            let _ = std::fs::remove_file(pool(n));
        }
    }
}

const GROW_DB: &str = "REWIND_USER_PROBE4_GROW_DB";
const GROW_START: &str = "REWIND_USER_PROBE4_GROW_START";

/// A pool of 1 MiB that must grow for most transactions, and whose WAL
/// restarts free hundreds of blocks.
fn grow_cfg() -> rewind_sqlite::Config {
    rewind_sqlite::Config::default()
        .pool_size(1 << 20)
        .max_pool_size(64 << 20)
}

/// The bytes of row `j` of transaction `t`.
fn grow_blob(t: i64, j: i64) -> Vec<u8> {
    let len = 20_000 + ((t * 7919 + j * 104_729) % 90_000) as usize;
    let mut x = (t as u64) << 32 | j as u64 | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Rows transaction `t` inserts.
fn grow_rows(t: i64) -> i64 {
    [3, 60, 10, 30, 1, 45][(t % 6) as usize]
}

/// The child of `sigkill_while_the_pool_grows_and_restarts_keeps_the_acked`:
/// from transaction `start` on, inserts `grow_rows(t)` rows of
/// `grow_blob`s (up to about 4 MB a transaction) and prints `ack t`;
/// checkpoints (every mode) between some, until killed.
#[test]
#[ignore = "child of sigkill_while_the_pool_grows_and_restarts_keeps_the_acked"]
fn grow_child() {
    use std::io::Write;
    let (Ok(db), Ok(start)) = (std::env::var(GROW_DB), std::env::var(GROW_START)) else {
        return;
    };
    let start: i64 = start.parse().unwrap();
    let c = common::open_wal("rewind-user-probe4-grow", &grow_cfg(), Path::new(&db));
    c.execute_batch(
        "PRAGMA cache_size = 50;
         CREATE TABLE IF NOT EXISTS t(tx INTEGER, j INTEGER, v BLOB, PRIMARY KEY (tx, j));",
    )
    .unwrap();
    let mut out = std::io::stdout().lock();
    for t in start.. {
        c.execute_batch("BEGIN").unwrap();
        for j in 0..grow_rows(t) {
            c.execute(
                "INSERT INTO t VALUES (?1, ?2, ?3)",
                rusqlite::params![t, j, grow_blob(t, j)],
            )
            .unwrap();
        }
        if t % 5 == 4 {
            c.execute("DELETE FROM t WHERE tx % 3 = 1 AND tx < ?1", [t - 4])
                .unwrap();
        }
        c.execute_batch("COMMIT").unwrap();
        writeln!(out, "ack {t}").unwrap();
        out.flush().unwrap();
        let mode = ["", "PASSIVE", "", "TRUNCATE", "RESTART", "FULL"][(t % 6) as usize];
        if !mode.is_empty() {
            c.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |_| Ok(()))
                .unwrap();
        }
    }
}

/// The transactions whose rows a database holds once transactions
/// `0..=last` committed: each one's, less those a later one's DELETE took.
fn grow_model(last: i64) -> std::collections::BTreeSet<i64> {
    (0..=last)
        .filter(|&t| !(t % 3 == 1 && (t + 5..=last).any(|u| u % 5 == 4 && t < u - 4)))
        .collect()
}

/// A child commits transactions of up to 4 MB into a WAL pool of 1 MiB
/// (each grows the pool, or reuses the blocks a restart freed or a killed
/// transaction linked) and checkpoints of every mode between them (each
/// restart frees hundreds of blocks, several reclaim transactions), and
/// is SIGKILLed at seeded instants; after each kill the database opens
/// with exactly the acknowledged transactions (the one in flight whole
/// or absent), every row's bytes, `integrity_check` ok, and the next child
/// goes on from there on the same files.
#[test]
fn sigkill_while_the_pool_grows_and_restarts_keeps_the_acked() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("grow.db");
    let mut next = 0i64;
    let rounds: u64 = std::env::var("REWIND_PROBE4_GROW_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    for round in 0..rounds {
        let mut ch = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "grow_child",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(GROW_DB, &db)
            .env(GROW_START, next.to_string())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(ch.stdout.take().unwrap());
        // Kill after 1 to 6 acknowledgements, and some lines of the
        // child's own output (which the test harness prints) between.
        let acks = 1 + (round * 7 + 3) % 6;
        let mut last = next - 1;
        let mut line = String::new();
        while last < next - 1 + acks as i64 {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "the child ended");
            if let Some(a) = line
                .trim()
                .rsplit("ack ")
                .next()
                .filter(|_| line.contains("ack "))
            {
                last = a.parse().unwrap();
            }
        }
        ch.kill().unwrap();
        ch.wait().unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
        for l in rest.lines().filter(|l| l.contains("ack ")) {
            last = l.rsplit("ack ").next().unwrap().trim().parse().unwrap();
        }
        let c = common::open_wal("rewind-user-probe4-grow", &grow_cfg(), &db);
        intact(&c);
        let mut st = c.prepare("SELECT tx, j, v FROM t ORDER BY tx, j").unwrap();
        let rows: Vec<(i64, i64, Vec<u8>)> = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        drop(st);
        for (t, j, v) in &rows {
            assert!(
                *v == grow_blob(*t, *j),
                "round {round}: row ({t}, {j}) has other bytes"
            );
        }
        let present: std::collections::BTreeSet<i64> = rows.iter().map(|r| r.0).collect();
        // The transaction in flight at the kill: whole or absent.
        let in_flight = present.contains(&(last + 1));
        let committed = if in_flight { last + 1 } else { last };
        assert_eq!(
            present,
            grow_model(committed),
            "round {round}: acked through {last}"
        );
        for t in &present {
            let n = rows.iter().filter(|r| r.0 == *t).count() as i64;
            assert_eq!(n, grow_rows(*t), "round {round}: transaction {t}");
        }
        drop(c);
        next = committed + 1;
    }
}

/// A second process's statement waits in its busy handler while the
/// first has the WAL open; the first is SIGKILLed in the middle of its
/// transactions: the waiting statement then goes on (the pool recovered
/// by the waiter), and sees exactly the acknowledged transactions.
#[test]
fn a_statement_waiting_for_a_killed_process_goes_on_with_its_acked() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("wait.db");
    let mut ch = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "grow_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(GROW_DB, &db)
        .env(GROW_START, "0")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(ch.stdout.take().unwrap());
    let mut last = -1i64;
    let mut line = String::new();
    let mut ack = |out: &mut BufReader<_>| loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the child ended");
        if let Some(a) = line.trim().split("ack ").nth(1) {
            break a.parse::<i64>().unwrap();
        }
    };
    last = last.max(ack(&mut out));
    // This process's connection, its busy handler counting its waits.
    common::register_once("rewind-user-probe4-grow", &grow_cfg());
    let c = rusqlite::Connection::open_with_flags_and_vfs(
        &db,
        rusqlite::OpenFlags::default(),
        "rewind-user-probe4-grow",
    )
    .unwrap();
    static WAITS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    c.busy_handler(Some(|_| {
        WAITS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::thread::yield_now();
        true
    }))
    .unwrap();
    let reader = std::thread::spawn(move || {
        let n: i64 = c
            .query_row("SELECT count(DISTINCT tx) FROM t", [], |r| r.get(0))
            .unwrap();
        let txs: Vec<i64> = c
            .prepare("SELECT DISTINCT tx FROM t ORDER BY tx")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        intact(&c);
        (n, txs)
    });
    // Once the statement waits, two more acknowledgements, then the kill.
    while WAITS.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        std::thread::yield_now();
    }
    last = last.max(ack(&mut out));
    last = last.max(ack(&mut out));
    ch.kill().unwrap();
    ch.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    for l in rest.lines().filter(|l| l.contains("ack ")) {
        last = l.rsplit("ack ").next().unwrap().trim().parse().unwrap();
    }
    let (n, txs) = reader.join().unwrap();
    let present: std::collections::BTreeSet<i64> = txs.into_iter().collect();
    assert_eq!(n as usize, present.len());
    let committed = if present.contains(&(last + 1)) {
        last + 1
    } else {
        last
    };
    assert_eq!(present, grow_model(committed), "acked through {last}");
}

/// Two writer threads move amounts between accounts (small caches: their
/// transactions spill), two reader threads check the total, and a third
/// kind of thread runs `VACUUM`, index creation and removal, `ANALYZE`
/// and checkpoints of the RESTART and TRUNCATE modes beside them (3,000
/// transfers, at least 30 of those): every total read is the one invariant, every error is
/// `SQLITE_BUSY` or `SQLITE_LOCKED`, and the database is intact, also
/// once reopened.
#[test]
fn vacuum_ddl_and_checkpoints_beside_transfers_keep_every_total() {
    let cfg = rewind_sqlite::Config::default()
        .pool_size(2 << 20)
        .max_pool_size(16 << 20);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bank.db");
    let mk = |p: &Path| {
        let c = common::open_wal("rewind-user-probe4-bank", &cfg, p);
        c.busy_handler(Some(|_| {
            std::thread::yield_now();
            true
        }))
        .unwrap();
        c
    };
    let c = mk(&path);
    c.execute_batch(
        "CREATE TABLE acct(id INTEGER PRIMARY KEY, bal INTEGER, pad BLOB);
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i<300)
         INSERT INTO acct SELECT i, 1000, randomblob(200) FROM n;",
    )
    .unwrap();
    let total = 300 * 1000i64;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let errors = std::sync::Mutex::new(Vec::<String>::new());
    let finished = std::sync::atomic::AtomicU64::new(0);
    let (transfers, vacuums) = (
        std::sync::atomic::AtomicU64::new(0),
        std::sync::atomic::AtomicU64::new(0),
    );
    std::thread::scope(|s| {
        let (path, mk, stop, transfers, vacuums, errors, finished) =
            (&path, &mk, &stop, &transfers, &vacuums, &errors, &finished);
        for w in 0..2u64 {
            s.spawn(move || {
                let c = mk(path);
                c.execute_batch("PRAGMA cache_size = 3").unwrap();
                let mut x = 0x1234_5678_9abc_def1u64 ^ (w << 7);
                let mut done = 0;
                while done < 1500 && !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let (a, b) = ((x % 300 + 1) as i64, ((x >> 20) % 300 + 1) as i64);
                    let amt = ((x >> 40) % 9) as i64;
                    let r = (|| -> rusqlite::Result<()> {
                        c.execute_batch("BEGIN IMMEDIATE")?;
                        c.execute(
                            "UPDATE acct SET bal = bal - ?1, pad = randomblob(150 + ?1 * 20) \
                             WHERE id = ?2",
                            [amt, a],
                        )?;
                        c.execute("UPDATE acct SET bal = bal + ?1 WHERE id = ?2", [amt, b])?;
                        c.execute_batch("COMMIT")
                    })();
                    match r {
                        Ok(()) => {
                            done += 1;
                            transfers.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        Err(e) => {
                            if e.sqlite_error_code() != Some(ErrorCode::DatabaseBusy) {
                                errors.lock().unwrap().push(format!(
                                    "writer {w}: {e} ({:?}; last error {:?})",
                                    e.sqlite_error_code(),
                                    rewind_sqlite::last_error()
                                ));
                                stop.store(true, std::sync::atomic::Ordering::SeqCst);
                            }
                            let _ = c.execute_batch("ROLLBACK");
                        }
                    }
                }
                finished.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            });
        }
        for r in 0..2 {
            s.spawn(move || {
                let c = mk(path);
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let sum: i64 = c
                        .query_row("SELECT sum(bal) FROM acct", [], |r| r.get(0))
                        .unwrap();
                    assert_eq!(sum, total, "reader {r}, read {i}");
                    i += 1;
                }
            });
        }
        let c = mk(path);
        let mut i = 0;
        while i < 30 || finished.load(std::sync::atomic::Ordering::SeqCst) < 2 {
            let sql = [
                "VACUUM",
                "CREATE INDEX IF NOT EXISTS ib ON acct(bal)",
                "PRAGMA wal_checkpoint(TRUNCATE)",
                "DROP INDEX IF EXISTS ib",
                "ANALYZE",
                "PRAGMA wal_checkpoint(RESTART)",
            ][i % 6];
            match c.execute_batch(sql) {
                Ok(()) if i % 6 == 0 => {
                    vacuums.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Ok(()) => {}
                Err(e) => assert!(
                    matches!(
                        e.sqlite_error_code(),
                        Some(ErrorCode::DatabaseBusy) | Some(ErrorCode::DatabaseLocked)
                    ),
                    "{sql}: {e} ({:?})",
                    rewind_sqlite::last_error()
                ),
            }
            i += 1;
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    assert_eq!(errors.into_inner().unwrap(), Vec::<String>::new());
    assert!(vacuums.into_inner() > 0, "no VACUUM ran");
    let sum: i64 = c
        .query_row("SELECT sum(bal) FROM acct", [], |r| r.get(0))
        .unwrap();
    assert_eq!(sum, total);
    intact(&c);
    drop(c);
    let c = mk(&path);
    intact(&c);
    println!("{} transfers", transfers.into_inner());
}

/// Two VFSes of this crate, one on the `Pmem` backend and one on `Msync`
/// (commits made durable by `msync`, for a database on a disk), and one
/// database opened through both in one process: a connection of the
/// `Msync` VFS never commits through a WAL its process opened on `Pmem`
/// (its commits would reach only the page cache). Before, it joined that
/// WAL without a word, and 20 commits it was acknowledged made no device
/// flush. Now its statement fails (`SQLITE_CANTOPEN`, `last_error` names
/// both backends) until the other connections close; then its commits
/// are flushed. The other way round (a `Pmem` connection joining a WAL
/// open on `Msync`) shares it: its commits are flushed too.
#[test]
fn an_msync_connection_never_commits_through_a_wal_opened_on_pmem() {
    let cfg = rewind_sqlite::Config::default().pool_size(2 << 20);
    let (pmem, msync) = ("rewind-user-probe4-pmem", "rewind-user-probe4-msync");
    common::register_once(pmem, &cfg.clone().backend(rewind::Backend::Pmem));
    common::register_once(msync, &cfg.clone().backend(rewind::Backend::Msync));
    let open = |vfs: &str, path: &Path| {
        rusqlite::Connection::open_with_flags_and_vfs(path, rusqlite::OpenFlags::default(), vfs)
            .unwrap()
    };
    let flushes = |path: &Path| rewind_sqlite::stats(path).unwrap().pool.device_flushes;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.db");
    let a = open(pmem, &path);
    a.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t(x); INSERT INTO t VALUES (0);")
        .unwrap();
    let b = open(msync, &path);
    let before = flushes(&path);
    let mut acked = 0;
    let refused = (1..=20).find_map(|i| match b.execute("INSERT INTO t VALUES (?1)", [i]) {
        Ok(_) => {
            acked += 1;
            None
        }
        Err(e) => Some(e),
    });
    match refused {
        None => assert!(
            flushes(&path) - before >= acked,
            "{acked} commits of the Msync VFS's connection made {} device flushes",
            flushes(&path) - before
        ),
        Some(e) => {
            assert_eq!(e.sqlite_error_code(), Some(ErrorCode::CannotOpen), "{e}");
            let why = rewind_sqlite::last_error().unwrap().to_lowercase();
            assert!(why.contains("pmem") && why.contains("msync"), "{why}");
        }
    }
    drop(a);
    // Alone now: the WAL opens on Msync, and a Pmem connection shares it.
    b.execute("INSERT INTO t VALUES (21)", []).unwrap();
    let c = open(pmem, &path);
    let before = flushes(&path);
    for i in 22..32 {
        b.execute("INSERT INTO t VALUES (?1)", [i]).unwrap();
        c.execute("INSERT INTO t VALUES (?1)", [-i]).unwrap();
    }
    assert!(flushes(&path) - before >= 20, "{}", flushes(&path) - before);
    assert_eq!(count(&c), 1 + acked as i64 + 21);
    intact(&c);
}
