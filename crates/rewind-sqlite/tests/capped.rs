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
