//! Read-only connections and the WAL pool: SQLite opens a WAL database's
//! WAL even for a read-only connection (creating it where the directory
//! allows), and deletes it at the last close only after a checkpoint,
//! which a read-only connection cannot run. Stock SQLite then leaves an
//! empty WAL file; this VFS left a whole pool (`Config::pool_size` bytes
//! of disk, 64 MiB by default) per database read that way.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

mod common;
use common::{count, open_wal, register_once};

const VFS: &str = "rewind-readonly-pool";

fn pool_of(db: &Path) -> PathBuf {
    let name = db.file_name().unwrap().to_str().unwrap();
    db.with_file_name(format!("{name}-wal.rewind"))
}

fn read_only(db: &Path) -> Connection {
    register_once(VFS, &rewind_sqlite::Config::default());
    Connection::open_with_flags_and_vfs(db, OpenFlags::SQLITE_OPEN_READ_ONLY, VFS).unwrap()
}

/// A database of `rows` rows, written and closed: no pool left.
fn database(dir: &Path, rows: i64) -> PathBuf {
    let db = dir.join("ro.db");
    let w = open_wal(VFS, &rewind_sqlite::Config::default(), &db);
    w.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
        .unwrap();
    for i in 0..rows {
        w.execute("INSERT INTO t(v) VALUES (?1)", [format!("row {i}")])
            .unwrap();
    }
    drop(w);
    assert!(!pool_of(&db).exists(), "a closed writer removes its pool");
    db
}

/// A read-only connection of a database whose WAL holds nothing removes
/// the pool it made at its last close (it left one of 64 MiB before).
#[test]
fn a_read_only_connection_leaves_no_pool_behind() {
    let dir = tempfile::tempdir().unwrap();
    let db = database(dir.path(), 10);
    for round in 0..3 {
        let r = read_only(&db);
        assert_eq!(count(&r), 10, "round {round}");
        let r2 = read_only(&db);
        assert_eq!(count(&r2), 10, "round {round}");
        drop(r);
        assert_eq!(
            count(&r2),
            10,
            "round {round}: the other connection reads on"
        );
        drop(r2);
        assert!(
            !pool_of(&db).exists(),
            "round {round}: the read-only connections left their pool"
        );
    }
    // A writer after them finds the database as it was.
    let w = open_wal(VFS, &rewind_sqlite::Config::default(), &db);
    w.execute("INSERT INTO t(v) VALUES ('more')", []).unwrap();
    assert_eq!(count(&w), 11);
}

/// A read-only connection beside a writer of the same process shares the
/// writer's pool: its close removes nothing, and the writer's frames stay.
#[test]
fn a_read_only_connection_beside_a_writer_leaves_the_writers_pool() {
    let dir = tempfile::tempdir().unwrap();
    let db = database(dir.path(), 3);
    let w = open_wal(VFS, &rewind_sqlite::Config::default(), &db);
    w.execute("INSERT INTO t(v) VALUES ('w')", []).unwrap();
    let r = read_only(&db);
    assert_eq!(count(&r), 4);
    drop(r);
    assert!(pool_of(&db).exists(), "the writer's pool, with its frame");
    w.execute("INSERT INTO t(v) VALUES ('w2')", []).unwrap();
    assert_eq!(count(&w), 5);
}

/// A pool that holds committed frames (left by a writer that crashed: a
/// copy of the files taken while it ran) is read through by a read-only
/// connection and kept: only an empty pool is removed.
#[test]
fn a_read_only_connection_keeps_a_pool_that_holds_frames() {
    let dir = tempfile::tempdir().unwrap();
    let db = database(dir.path(), 2);
    let w = open_wal(VFS, &rewind_sqlite::Config::default(), &db);
    w.execute("INSERT INTO t(v) VALUES ('in the wal')", [])
        .unwrap();
    let crash = dir.path().join("crash");
    std::fs::create_dir(&crash).unwrap();
    let copy = crash.join("ro.db");
    std::fs::copy(&db, &copy).unwrap();
    std::fs::copy(pool_of(&db), pool_of(&copy)).unwrap();
    drop(w);
    let r = read_only(&copy);
    assert_eq!(count(&r), 3, "the frame in the pool is read");
    drop(r);
    assert!(pool_of(&copy).exists(), "a pool with frames is kept");
    let again = read_only(&copy);
    assert_eq!(count(&again), 3);
}
