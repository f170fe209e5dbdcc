//! SQLite on the VFS: a database written, closed, reopened; the WAL's pool
//! beside it; a checkpoint; a second opener refused.

use rusqlite::{Connection, OpenFlags};

const VFS: &str = "rewind-basic";

fn vfs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| rewind_sqlite::register(VFS, &rewind_sqlite::Config::default()).unwrap());
}

fn open(path: &std::path::Path) -> Connection {
    vfs();
    let c = Connection::open_with_flags_and_vfs(path, OpenFlags::default(), VFS).unwrap();
    let mode: String = c
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    c
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
    let n: i64 = c
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 200);
    let ok: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
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
    let n: i64 = c2
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 50);
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
    let n: i64 = c
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 60);
    drop(c);
    let c = open(&path);
    let n: i64 = c
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 60);
}
