//! rewind-sqlite on a file system that fills up (a small tmpfs, mounted
//! for the test; it skips where mounting is not permitted): the WAL pool
//! cannot grow and the database file cannot grow at a checkpoint. Every
//! failure is `SQLITE_FULL`, never a panic, an abort or another error;
//! the connection goes on, the database stays intact, a statement that
//! failed inside an explicit transaction leaves the transaction's other
//! statements, and a reopen holds exactly the committed rows.

use rusqlite::{Connection, ErrorCode, OpenFlags};

mod common;
use common::{count, intact, SmallFs};

const VFS: &str = "rewind-full-fs";

fn open(path: &std::path::Path) -> Connection {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // A pool that may grow far past the file system.
        let cfg = rewind_sqlite::Config::default()
            .pool_size(2 << 20)
            .max_pool_size(256 << 20);
        rewind_sqlite::register(VFS, &cfg).unwrap()
    });
    let c = Connection::open_with_flags_and_vfs(path, OpenFlags::default(), VFS).unwrap();
    c.pragma_update(None, "journal_mode", "WAL").unwrap();
    c
}

fn assert_full(e: &rusqlite::Error, what: &str) {
    assert_eq!(
        e.sqlite_error_code(),
        Some(ErrorCode::DiskFull),
        "{what}: {e} ({:?})",
        rewind_sqlite::last_error()
    );
}

#[test]
fn inserts_until_the_file_system_is_full_are_sqlite_full_and_keep_every_commit() {
    let Some(fs) = SmallFs::mount(12) else {
        return;
    };
    let path = fs.path().join("f.db");
    // Ballast another program holds, removed later to free space.
    let ballast = fs.path().join("ballast");
    std::fs::write(&ballast, vec![1u8; 3 << 20]).unwrap();
    let c = open(&path);
    c.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB); CREATE INDEX tv ON t(v);")
        .unwrap();
    // Autocommit inserts (automatic checkpoints on) until the file system
    // is full.
    let mut acked = 0i64;
    let e = loop {
        match c.execute("INSERT INTO t VALUES (?1, randomblob(900))", [acked + 1]) {
            Ok(_) => acked += 1,
            Err(e) => break e,
        }
        assert!(acked < 1_000_000, "the file system never filled");
    };
    assert_full(&e, "autocommit insert");
    assert!(acked > 100, "{acked} rows before the file system filled");
    assert_eq!(count(&c), acked);
    intact(&c);
    // Inside an explicit transaction: a statement that fails leaves the
    // earlier ones, which commit (SQLite rolls back the statement only),
    // or the whole transaction fails and none of it stays.
    c.execute_batch("BEGIN").unwrap();
    let mut inside = 0;
    let mut failed = None;
    for k in 0..10_000i64 {
        match c.execute(
            "INSERT INTO t VALUES (?1, randomblob(900))",
            [acked + 1 + k],
        ) {
            Ok(_) => inside += 1,
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    if let Some(e) = &failed {
        assert_full(e, "insert in a transaction");
    }
    let committed = match c.execute_batch("COMMIT") {
        Ok(()) => inside,
        Err(e) => {
            assert_full(&e, "commit");
            let _ = c.execute_batch("ROLLBACK");
            0
        }
    };
    if c.is_autocommit() {
        acked += committed;
    } else {
        // Still open (SQLite keeps it after a failed COMMIT): roll back.
        c.execute_batch("ROLLBACK").unwrap();
    }
    assert_eq!(count(&c), acked);
    intact(&c);
    // With the file system full, a checkpoint may fail too (the database
    // file cannot grow), as SQLite's own WAL would: SQLITE_FULL, nothing
    // lost.
    if let Err(e) = c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
        r.get::<_, i64>(0)
    }) {
        assert_full(&e, "checkpoint on a full file system");
    }
    assert_eq!(count(&c), acked);
    intact(&c);
    // Space freed by another program: the checkpoint goes through,
    // deletes and inserts go on.
    std::fs::remove_file(&ballast).unwrap();
    let busy: i64 = c
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
        .unwrap_or_else(|e| {
            panic!(
                "checkpoint with room: {e} {:?}",
                rewind_sqlite::last_error()
            )
        });
    assert_eq!(busy, 0);
    let gone = c
        .execute("DELETE FROM t WHERE id % 2 = 0", [])
        .unwrap_or_else(|e| panic!("delete with room: {e} {:?}", rewind_sqlite::last_error()));
    let mut more = 0;
    for k in 0..20i64 {
        match c.execute(
            "INSERT INTO t VALUES (?1, randomblob(900))",
            [10_000_000 + k],
        ) {
            Ok(_) => more += 1,
            Err(e) => {
                assert_full(&e, "insert after the delete");
                break;
            }
        }
    }
    assert!(more > 0, "no room after deleting {gone} rows");
    let want = acked - gone as i64 + more;
    assert_eq!(count(&c), want);
    intact(&c);
    drop(c);
    let c = open(&path);
    assert_eq!(count(&c), want, "reopened");
    intact(&c);
}
