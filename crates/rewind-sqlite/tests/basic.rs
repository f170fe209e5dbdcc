//! SQLite on the VFS: a database written, closed, reopened; the WAL's pool
//! beside it; a checkpoint; a second opener refused.

use rusqlite::{Connection, OpenFlags};

const VFS: &str = "rewind-basic";

mod common;

fn vfs() {
    common::register_once(VFS, &rewind_sqlite::Config::default());
}

fn open(path: &std::path::Path) -> Connection {
    vfs();
    let c = open_on(path, VFS);
    let mode: String = c
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    c
}

/// Opens `path` through the VFS registered as `vfs`.
fn open_on(path: &std::path::Path, vfs: &str) -> Connection {
    Connection::open_with_flags_and_vfs(path, OpenFlags::default(), vfs).unwrap()
}

/// The rows of table `t`.
fn rows(c: &Connection) -> i64 {
    c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap()
}

/// Asserts that SQLite finds the database intact.
fn assert_intact(c: &Connection) {
    let ok: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
}

#[test]
fn rows_survive_close_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.db");
    {
        let c = open(&path);
        c.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
            .unwrap();
        for i in 0..200 {
            c.execute("INSERT INTO t(v) VALUES (?1)", [vec![i as u8; 100]])
                .unwrap();
        }
        assert!(rewind_sqlite::pool_path(&dir.path().join("a.db-wal")).exists());
        let s = rewind_sqlite::stats(&path).expect("open");
        assert!(s.commits >= 200, "{s:?}");
        assert!(s.record_bytes * 3 < s.whole_frame_bytes, "{s:?}");
    }
    let c = open(&path);
    assert_eq!(rows(&c), 200);
    assert_intact(&c);
}

#[test]
fn a_killed_writer_leaves_its_commits() {
    // Dropping without closing is what a crash leaves for the WAL pool:
    // SQLite's last close checkpoints, so forget the connection instead.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.db");
    let c = open(&path);
    c.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
        .unwrap();
    c.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
    for i in 0..50 {
        c.execute("INSERT INTO t(v) VALUES (?1)", [format!("row {i}")])
            .unwrap();
    }
    let s = rewind_sqlite::stats(&path).unwrap();
    assert!(s.frames >= 50);
    let c2 = open(&path);
    assert_eq!(rows(&c2), 50);
    drop(c2);
    drop(c);
}

#[test]
fn checkpoint_truncate_restarts_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    let c = open(&path);
    c.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
        .unwrap();
    for i in 0..30 {
        c.execute("INSERT INTO t(v) VALUES (?1)", [format!("row {i}")])
            .unwrap();
    }
    c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    let s = rewind_sqlite::stats(&path).unwrap();
    assert!(s.restarts >= 2, "{s:?}");
    for i in 30..60 {
        c.execute("INSERT INTO t(v) VALUES (?1)", [format!("row {i}")])
            .unwrap();
    }
    assert_eq!(rows(&c), 60);
    drop(c);
    let c = open(&path);
    assert_eq!(rows(&c), 60);
}

#[test]
fn a_transaction_larger_than_the_pool_at_its_maximum_is_sqlite_full_and_loses_nothing() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let cfg = rewind_sqlite::Config::default()
            .pool_size(2 << 20)
            .max_pool_size(2 << 20);
        rewind_sqlite::register("rewind-small", &cfg).unwrap()
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("full.db");
    let c = open_on(&path, "rewind-small");
    c.pragma_update(None, "journal_mode", "WAL").unwrap();
    c.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
        .unwrap();
    c.execute("INSERT INTO t(v) VALUES (?1)", [vec![1u8; 1000]])
        .unwrap();
    // About 8 MiB of pages in one transaction: more than the pool holds.
    let big = c
        .execute_batch(
            "BEGIN;
             WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 2000)
             INSERT INTO t(v) SELECT randomblob(4000) FROM s;
             COMMIT;",
        )
        .expect_err("the transaction does not fit");
    assert!(
        big.to_string().contains("full")
            || big.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull),
        "{big}"
    );
    let _ = c.execute_batch("ROLLBACK");
    // The connection goes on, and only the committed row is there.
    c.execute("INSERT INTO t(v) VALUES (?1)", [vec![2u8; 1000]])
        .unwrap();
    drop(c);
    let c = open_on(&path, "rewind-small");
    assert_eq!(rows(&c), 2);
    assert_intact(&c);
}

/// A transaction that fills the pool to its maximum fails with
/// `SQLITE_FULL`; the checkpoint after it must still free every block of
/// the log (a restart frees them in transactions of bounded size, so it
/// needs no log space the full heap cannot give), and writes go on.
#[test]
fn a_checkpoint_after_sqlite_full_frees_the_log_and_writes_go_on() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let cfg = rewind_sqlite::Config::default()
            .pool_size(2 << 20)
            .max_pool_size(32 << 20);
        rewind_sqlite::register("rewind-full-grown", &cfg).unwrap()
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("full.db");
    let c = open_on(&path, "rewind-full-grown");
    c.pragma_update(None, "journal_mode", "WAL").unwrap();
    c.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
        .unwrap();
    // About 40 MiB of pages in one transaction: more than the maximum.
    let big = c
        .execute("INSERT INTO t(v) VALUES (randomblob(40000000))", [])
        .expect_err("the transaction does not fit");
    assert_eq!(
        big.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DiskFull),
        "{big}"
    );
    let blocks = rewind_sqlite::stats(&path).unwrap().blocks;
    assert!(
        blocks > 2000,
        "the failed transaction filled the pool: {blocks} blocks"
    );
    let (busy, _, _): (i64, i64, i64) = c
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    assert_eq!(busy, 0, "{:?}", rewind_sqlite::last_error());
    assert_eq!(rewind_sqlite::stats(&path).unwrap().blocks, 1);
    // The space is back: a transaction of 20 MiB fits again.
    c.execute("INSERT INTO t(v) VALUES (randomblob(20000000))", [])
        .unwrap();
    c.execute("INSERT INTO t(v) VALUES (x'01')", []).unwrap();
    drop(c);
    let c = open_on(&path, "rewind-full-grown");
    assert_eq!(rows(&c), 2);
    assert_intact(&c);
}

/// A transaction larger than the pool's initial size grows it (up to
/// `Config::max_pool_size`, 64 times the initial size by default).
#[test]
fn a_transaction_larger_than_the_pool_grows_it() {
    let cfg = rewind_sqlite::Config::default().pool_size(8 << 20);
    rewind_sqlite::register("rewind-grow", &cfg).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let open = || open_on(&path, "rewind-grow");
    let mut c = open();
    c.pragma_update(None, "journal_mode", "WAL").unwrap();
    c.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
    c.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
        .unwrap();
    // 24 MiB of 64 KiB blobs in one transaction: three times the pool.
    let tx = c.transaction().unwrap();
    for _ in 0..24 * 16 {
        tx.execute("INSERT INTO t(v) VALUES (randomblob(65536))", [])
            .unwrap();
    }
    tx.commit().unwrap();
    let pool = rewind_sqlite::pool_path(&dir.path().join("g.db-wal"));
    assert!(std::fs::metadata(&pool).unwrap().len() > 24 << 20);
    drop(c);
    let c = open();
    assert_eq!(rows(&c), 24 * 16);
    assert_intact(&c);
}

/// The second process of `a_second_process_gets_an_error`: opens the
/// database the parent holds and prints what a query gave.
#[test]
#[ignore = "child process of a_second_process_gets_an_error"]
fn second_opener_child() {
    let Ok(db) = std::env::var("REWIND_SQLITE_SECOND") else {
        return;
    };
    vfs();
    // The harness printed the test's name without a newline.
    println!();
    let r = Connection::open_with_flags_and_vfs(&db, OpenFlags::default(), VFS).and_then(|c| {
        // No busy handler: the parent's WAL is SQLITE_BUSY at once.
        c.busy_timeout(std::time::Duration::ZERO)?;
        c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0))
    });
    match r {
        Ok(n) => println!("result: ok {n}"),
        Err(e) => println!(
            "result: error {e} / {}",
            rewind_sqlite::last_error().unwrap_or_default()
        ),
    }
}

#[test]
fn a_second_process_gets_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two.db");
    let c = open(&path);
    c.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
        .unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "second_opener_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("REWIND_SQLITE_SECOND", &path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("result: "))
        .expect("the child reports");
    assert!(
        line.starts_with("result: error database is locked"),
        "{line}"
    );
    assert!(line.contains("in use"), "{line}");
    // The first opener is undisturbed.
    assert_eq!(rows(&c), 1);
    drop(c);
    // Once it is gone, another process opens the database.
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "second_opener_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("REWIND_SQLITE_SECOND", &path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("result: ok 1"), "{text}");
}

/// The wal-index lives in process memory: no `-shm` file, and the
/// connections of one process share it, its readers and its one writer.
#[test]
fn connections_share_a_wal_index_in_process_memory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let a = open(&path);
    a.execute_batch("CREATE TABLE t(x INTEGER)").unwrap();
    let b = open(&path);
    a.execute("INSERT INTO t VALUES (1)", []).unwrap();
    assert_eq!(rows(&b), 1, "b sees a's commit");
    b.execute("INSERT INTO t VALUES (2)", []).unwrap();
    assert_eq!(rows(&a), 2, "a sees b's commit");
    // One writer at a time.
    a.execute_batch("BEGIN IMMEDIATE; INSERT INTO t VALUES (3)")
        .unwrap();
    b.busy_timeout(std::time::Duration::ZERO).unwrap();
    let e = b.execute("INSERT INTO t VALUES (4)", []).unwrap_err();
    assert_eq!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy),
        "{e}"
    );
    // A reader sees the last commit, not the open transaction.
    assert_eq!(rows(&b), 2);
    a.execute_batch("COMMIT").unwrap();
    b.execute("INSERT INTO t VALUES (4)", []).unwrap();
    assert_eq!((rows(&a), rows(&b)), (4, 4));
    // A reader's snapshot holds while the other writes.
    b.execute_batch("BEGIN").unwrap();
    assert_eq!(rows(&b), 4);
    a.execute("INSERT INTO t VALUES (5)", []).unwrap();
    assert_eq!(rows(&b), 4, "b's snapshot");
    b.execute_batch("COMMIT").unwrap();
    assert_eq!(rows(&b), 5);
    assert!(
        !dir.path().join("s.db-shm").exists(),
        "no -shm file: the wal-index is on the heap"
    );
    drop((a, b));
    // The last connection freed it; a new one rebuilds it from the WAL.
    let c = open(&path);
    assert_eq!(rows(&c), 5);
}

/// A database whose stock SQLite WAL still holds committed frames (its
/// writer died before a checkpoint) is not opened through the VFS: the
/// frames would be ignored, and the last close deleted the stock WAL with
/// them (found by a user: 1,000 committed rows lost). The open fails with
/// a message that says what to do, the stock WAL is left as it was, and
/// once stock SQLite has checkpointed it the VFS opens the database with
/// every row.
#[test]
fn a_stock_wal_with_frames_is_refused_and_never_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stock.db");
    let stock = open_on(&path, "unix");
    stock.pragma_update(None, "journal_mode", "WAL").unwrap();
    stock.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
    stock.execute("CREATE TABLE t(x)", []).unwrap();
    for i in 0..1000 {
        stock.execute("INSERT INTO t VALUES (?1)", [i]).unwrap();
    }
    // The writer "dies": no close, no checkpoint; its frames stay in the WAL.
    std::mem::forget(stock);
    let wal = dir.path().join("stock.db-wal");
    let len = std::fs::metadata(&wal).unwrap().len();
    assert!(len > 0);
    vfs();
    let c = open_on(&path, VFS);
    let r: Result<i64, _> = c.query_row("SELECT count(*) FROM t", [], |r| r.get(0));
    assert!(r.is_err(), "read through the VFS beside a stock WAL: {r:?}");
    let why = rewind_sqlite::last_error().unwrap_or_default();
    assert!(why.contains("not kept by this VFS"), "{why}");
    drop(c);
    assert_eq!(
        std::fs::metadata(&wal).unwrap().len(),
        len,
        "the stock WAL is untouched"
    );
    // Stock SQLite checkpoints it; the VFS then sees every row.
    let stock = open_on(&path, "unix");
    stock
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    drop(stock);
    let c = open(&path);
    assert_eq!(rows(&c), 1000);
    assert_intact(&c);
}

/// A name SQLite knows already (its own `unix`, or one registered by
/// anyone) and an empty name are refused, as are configurations no pool
/// could be made of, each naming the `Config` field; nothing is opened.
#[test]
fn register_refuses_taken_names_and_impossible_configs() {
    use rewind_sqlite::{Config, RegisterError};
    for name in ["unix", ""] {
        let r = rewind_sqlite::register(name, &Config::default());
        assert!(
            matches!(
                r,
                Err(RegisterError::NameTaken { .. } | RegisterError::BadName { .. })
            ),
            "{name:?}: {r:?}"
        );
    }
    vfs();
    assert!(matches!(
        rewind_sqlite::register(VFS, &Config::default()),
        Err(RegisterError::AlreadyRegistered { .. } | RegisterError::NameTaken { .. })
    ));
    for (cfg, field) in [
        (Config::default().pool_size(0), "pool_size"),
        (Config::default().pool_size(64 << 10), "pool_size"),
        (Config::default().block_size(1 << 40), "block_size"),
        (
            Config::default()
                .pool_size(1 << 20)
                .max_pool_size(2 << 20)
                .block_size(4 << 20),
            "block_size",
        ),
        // No pool reaches 256 TiB (the engine's bound): refused here, not
        // at the first open.
        (Config::default().pool_size(u64::MAX), "pool_size"),
        (Config::default().pool_size(1 << 50), "pool_size"),
        (
            Config::default().pool_size(1 << 20).max_pool_size(1 << 62),
            "max_pool_size",
        ),
        // A pool of at most 1 MiB: its heap holds one 512 KiB block, not two.
        (
            Config::default()
                .pool_size(1 << 20)
                .max_pool_size(1 << 20)
                .block_size(512 << 10),
            "block_size",
        ),
    ] {
        match rewind_sqlite::register("rewind-bad-config", &cfg) {
            Err(e @ RegisterError::BadConfig { field: f, .. }) => {
                assert_eq!(f, field);
                assert!(e.to_string().contains(field), "{e}");
            }
            r => panic!("{field}: {r:?}"),
        }
    }
    // Maxima whose allocator metadata does not fit the first size beside
    // the log: refused here, with the engine's reason, not at the first
    // statement.
    for cfg in [
        Config::default().pool_size(4 << 20).max_pool_size(4 << 30),
        Config::default()
            .pool_size(1 << 20)
            .max_pool_size(256 << 20),
        Config::default().max_pool_size(1 << 40),
    ] {
        match rewind_sqlite::register("rewind-bad-config", &cfg) {
            Err(e @ RegisterError::Pool(rewind::Error::InvalidConfig { .. })) => {
                assert!(e.to_string().contains("max size"), "{e}");
            }
            r => panic!("{cfg:?}: {r:?}"),
        }
    }
}

/// The default maximum (64 times the pool size) stays below the engine's
/// bound, so a large pool size alone is not a configuration no pool could
/// be made of.
#[test]
fn the_default_maximum_stays_below_the_engines_bound() {
    let cfg = rewind_sqlite::Config::default().pool_size(8 << 40);
    assert!(cfg.pool_max() < rewind::MAX_POOL);
    assert!(cfg.pool_max() >= cfg.pool_size);
    assert_eq!(
        rewind_sqlite::Config::default().pool_max(),
        64 * (64 << 20),
        "the default's maximum is unchanged"
    );
}
