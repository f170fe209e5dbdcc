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

/// A VFS the program unregistered from SQLite (`sqlite3_vfs_unregister`,
/// there being no other way) can be registered again under its name:
/// `register` refused it as "registered already", from a list of the
/// names it had ever registered, though SQLite had none of that name and
/// nothing could open a database through it again. A connection opened
/// before the unregistering keeps its VFS meanwhile.
#[test]
fn a_vfs_unregistered_from_sqlite_registers_again() {
    const NAME: &str = "rewind-probes-unregistered";
    let cname = std::ffi::CString::new(NAME).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("u.db");
    let cfg = rewind_sqlite::Config::default();
    rewind_sqlite::register(NAME, &cfg).unwrap();
    let flags = rusqlite::OpenFlags::default();
    let before = Connection::open_with_flags_and_vfs(&path, flags, NAME).unwrap();
    before.pragma_update(None, "journal_mode", "WAL").unwrap();
    before
        .execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
        .unwrap();
    for round in 0..2 {
        // SAFETY: `cname` is NUL-terminated; sqlite3_vfs_find returns a
        // VFS registered with SQLite, which sqlite3_vfs_unregister takes
        // off its list (this crate never frees its VFS structures).
        let rc = unsafe {
            let vfs = rusqlite::ffi::sqlite3_vfs_find(cname.as_ptr());
            assert!(!vfs.is_null(), "round {round}");
            rusqlite::ffi::sqlite3_vfs_unregister(vfs)
        };
        assert_eq!(rc, rusqlite::ffi::SQLITE_OK);
        assert!(Connection::open_with_flags_and_vfs(&path, flags, NAME).is_err());
        before.execute("INSERT INTO t VALUES (2)", []).unwrap();
        rewind_sqlite::register(NAME, &cfg).unwrap_or_else(|e| panic!("round {round}: {e}"));
        let again = Connection::open_with_flags_and_vfs(&path, flags, NAME).unwrap();
        let n: i64 = again
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 2, "round {round}");
        again
            .execute("DELETE FROM t WHERE rowid = (SELECT max(rowid) FROM t)", [])
            .unwrap();
        assert!(matches!(
            rewind_sqlite::register(NAME, &cfg),
            Err(rewind_sqlite::RegisterError::AlreadyRegistered { .. })
        ));
    }
    drop(before);
}
