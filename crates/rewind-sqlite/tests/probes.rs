//! Defects found by probing the VFS from outside, each kept as a named
//! regression test.

use std::path::Path;

use rusqlite::Connection;

const VFS: &str = "rewind-probes";

mod common;

fn open(path: &Path) -> Connection {
    common::open_wal(VFS, &rewind_sqlite::Config::default(), path)
}

/// Whether some process holds a POSIX lock on SQLite's shared byte range
/// of the database file (where every WAL-mode connection keeps a `SHARED`
/// lock for its whole life). An open-file-description lock conflicts with
/// this process's own `fcntl` locks too, so the question can be asked
/// here.
fn shared_range_locked(db: &Path) -> bool {
    use std::os::fd::AsRawFd;
    // SQLite's lock bytes: PENDING at 1 GiB, RESERVED after it, then 510
    // SHARED bytes.
    const SHARED_FIRST: i64 = 0x4000_0000 + 2;
    const SHARED_SIZE: i64 = 510;
    let f = std::fs::File::open(db).unwrap();
    // SAFETY: a zeroed flock is a valid value of the plain C struct.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as _;
    fl.l_whence = libc::SEEK_SET as _;
    fl.l_start = SHARED_FIRST as _;
    fl.l_len = SHARED_SIZE as _;
    // SAFETY: F_OFD_GETLK reads and writes the flock passed, on an open
    // descriptor.
    let rc = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    // (Dropping `f`, an OFD-lock-free descriptor opened here, would itself
    // drop this process's POSIX locks: leak it instead.)
    std::mem::forget(f);
    fl.l_type != libc::F_UNLCK as _
}

/// A WAL restart makes the database file durable first. It did so through
/// a descriptor opened and closed for the purpose, and closing any
/// descriptor of a file drops every POSIX lock the process holds on it:
/// after `wal_checkpoint(TRUNCATE)` the connection's `SHARED` lock was
/// gone while SQLite went on as if it held it (and at the last close, the
/// `EXCLUSIVE` lock under which SQLite removes the WAL, so another process
/// could open the pool about to be unlinked).
#[test]
fn a_wal_restart_keeps_the_connections_lock_on_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.db");
    let c = open(&path);
    c.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
        .unwrap();
    assert!(shared_range_locked(&path), "a WAL connection holds SHARED");
    for round in 0..3 {
        let busy: i64 = c
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
            .unwrap();
        assert_eq!(busy, 0);
        assert!(
            shared_range_locked(&path),
            "round {round}: the lock survives the restart's sync"
        );
        c.execute("INSERT INTO t VALUES (2)", []).unwrap();
        // A restart by a new WAL header (a checkpoint, then a write).
        c.query_row("PRAGMA wal_checkpoint(RESTART)", [], |r| r.get::<_, i64>(0))
            .unwrap();
        c.execute("INSERT INTO t VALUES (3)", []).unwrap();
        assert!(shared_range_locked(&path), "round {round}: after a restart");
    }
    let c2 = open(&path);
    let n: i64 = c2
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 7);
    drop(c);
    drop(c2);
    assert!(
        !shared_range_locked(&path),
        "no lock once every connection closed"
    );
    assert!(!rewind_sqlite::pool_path(&dir.path().join("l.db-wal")).exists());
}
