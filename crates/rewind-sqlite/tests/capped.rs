//! A WAL pool of bounded size (`max_pool_size`) that SQLite's
//! auto-checkpoint, every 1,000 frames, would reach too late: with 64 KiB
//! pages a 16 MiB pool holds about 250 frames, and a 1 MiB one about 150
//! frames of 4 KiB. The VFS checkpoints once the frames hold half the
//! pool's maximum, so small transactions never fill it (before, every
//! write failed with `SQLITE_FULL` from the first full pool on, until a
//! checkpoint by hand).

use rusqlite::{params, Connection, OpenFlags};

fn open(vfs: &str, path: &std::path::Path, page_size: u32) -> Connection {
    let c = Connection::open_with_flags_and_vfs(path, OpenFlags::default(), vfs).unwrap();
    c.pragma_update(None, "page_size", page_size).unwrap();
    c.pragma_update(None, "journal_mode", "WAL").unwrap();
    c.execute_batch("CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v BLOB)")
        .unwrap();
    c
}

fn fill(vfs: &str, cap_mib: u64, page_size: u32, row: usize, rows: i64) {
    let cfg = rewind_sqlite::Config::default()
        .pool_size(cap_mib << 20)
        .max_pool_size(cap_mib << 20);
    rewind_sqlite::register(vfs, &cfg).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("capped.db");
    {
        let c = open(vfs, &path, page_size);
        for i in 0..rows {
            c.execute(
                "INSERT INTO t(id, v) VALUES (?1, randomblob(?2))",
                params![i, row as i64],
            )
            .unwrap_or_else(|e| {
                panic!("{vfs}: insert {i}: {e} ({:?})", rewind_sqlite::last_error())
            });
        }
        let s = rewind_sqlite::stats(&path).unwrap();
        assert!(s.restarts > 0, "{vfs}: no checkpoint let the WAL restart");
        // The crate's hook is set (SQLite reads 0 for a hook not its own);
        // the pragma puts SQLite's own rule back.
        let n: i64 = c
            .query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 0, "{vfs}");
        c.pragma_update(None, "wal_autocheckpoint", 100).unwrap();
        let n: i64 = c
            .query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 100, "{vfs}");
        let n: i64 = c
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, rows);
    }
    // Reopened: every row, intact.
    let c = open(vfs, &path, page_size);
    let n: i64 = c
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, rows, "{vfs}: after reopening");
    let ok: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
}

#[test]
fn a_16_mib_pool_of_64_kib_pages_takes_small_transactions_for_ever() {
    fill("rewind-capped-16", 16, 65536, 60_000, 1200);
}

#[test]
fn a_1_mib_pool_of_4_kib_pages_takes_small_transactions_for_ever() {
    fill("rewind-capped-1", 1, 4096, 3000, 1500);
}

/// A connection whose main database is not the VFS's (here in memory)
/// `ATTACH`es a database of the VFS with a bounded pool: its WAL gets the
/// crate's checkpoints as well. Before, only a connection whose main
/// database was the VFS's had them, and the attached database's pool
/// filled after 79 inserts of 3,000 bytes, every later write failing with
/// `SQLITE_FULL`. A connection with no database of the VFS keeps SQLite's
/// own hook (the pragma reads its count).
#[test]
fn a_capped_database_attached_to_a_stock_connection_takes_small_transactions_for_ever() {
    const VFS: &str = "rewind-capped-attached";
    let cfg = rewind_sqlite::Config::default()
        .pool_size(1 << 20)
        .max_pool_size(1 << 20);
    rewind_sqlite::register(VFS, &cfg).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("attached.db");
    let c = Connection::open_in_memory().unwrap();
    c.execute(
        "ATTACH ?1 AS cap",
        [format!("file:{}?vfs={VFS}", path.display())],
    )
    .unwrap();
    c.execute_batch(
        "PRAGMA cap.journal_mode = WAL;
         CREATE TABLE cap.t(id INTEGER PRIMARY KEY, v BLOB);",
    )
    .unwrap();
    let rows = 600;
    for i in 0..rows {
        c.execute(
            "INSERT INTO cap.t(id, v) VALUES (?1, randomblob(3000))",
            [i],
        )
        .unwrap_or_else(|e| panic!("insert {i}: {e} ({:?})", rewind_sqlite::last_error()));
    }
    assert!(rewind_sqlite::stats(&path).unwrap().restarts > 0);
    drop(c);
    let c = Connection::open_with_flags_and_vfs(&path, OpenFlags::default(), VFS).unwrap();
    let n: i64 = c
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, rows);
    // A stock database alone, in WAL mode, after a commit: SQLite's hook.
    let stock = Connection::open(dir.path().join("stock.db")).unwrap();
    stock
        .execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t(x); INSERT INTO t VALUES (1);")
        .unwrap();
    let n: i64 = stock
        .query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1000);
}

/// A load committed in pieces of about 40% of a 2 MiB pool's heap (as the
/// crate's docs advise for large loads): each piece fits an empty log,
/// and the VFS checkpoints after a piece when the blocks held and one more
/// piece of its size would reach half the heap. It checkpointed only once
/// the blocks held reached half: the second piece found the first's 45%
/// held and failed with `SQLITE_FULL`, and so did every second piece.
#[test]
fn a_load_in_pieces_of_two_fifths_of_the_pool_commits_every_piece() {
    const VFS: &str = "rewind-capped-pieces";
    let cfg = rewind_sqlite::Config::default()
        .pool_size(2 << 20)
        .max_pool_size(2 << 20);
    rewind_sqlite::register(VFS, &cfg).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pieces.db");
    let c = open(VFS, &path, 4096);
    let (pieces, rows) = (6, 420);
    for p in 0..pieces {
        c.execute(
            "WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ?2)
             INSERT INTO t(id, v) SELECT ?1 + i, randomblob(1500) FROM k",
            params![p * rows, rows],
        )
        .unwrap_or_else(|e| panic!("piece {p}: {e} ({:?})", rewind_sqlite::last_error()));
    }
    let n: i64 = c
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, pieces * rows);
}
