//! Database names are bytes: two databases whose names differ only in a
//! byte that is not UTF-8 each keep a WAL pool and a wal-index of their
//! own (a lossy conversion of the names once gave both one pool, so each
//! database saw the other's tables, and a reopen lost them).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rusqlite::Connection;

const VFS: &str = "rewind-names";

mod common;

fn open(path: &Path) -> Connection {
    common::open_wal(VFS, &rewind_sqlite::Config::default(), path)
}

fn values(c: &Connection) -> String {
    c.query_row("SELECT group_concat(x) FROM t", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn names_differing_in_a_non_utf8_byte_are_two_databases() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join(OsStr::from_bytes(b"db\xff.db"));
    let b = dir.path().join(OsStr::from_bytes(b"db\xfe.db"));
    let (ca, cb) = (open(&a), open(&b));
    ca.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES ('a');")
        .unwrap();
    cb.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES ('b');")
        .unwrap();
    assert_eq!((values(&ca), values(&cb)), ("a".into(), "b".into()));
    // Each pool is named after its own database, byte for byte.
    for db in [&a, &b] {
        let mut wal = db.as_os_str().to_owned();
        wal.push("-wal");
        assert!(rewind_sqlite::pool_path(Path::new(&wal)).exists());
    }
    drop((ca, cb));
    let (ca, cb) = (open(&a), open(&b));
    assert_eq!((values(&ca), values(&cb)), ("a".into(), "b".into()));
}
