//! Defects found by probing the VFS as users' programs would, each kept as
//! a named regression test.

use rusqlite::{Connection, ErrorCode, OpenFlags};

mod common;
use common::{count, intact};

/// A database of `vfs`, in WAL mode.
fn open_on(vfs: &'static str, cfg: &rewind_sqlite::Config, path: &std::path::Path) -> Connection {
    common::register_once(vfs, cfg);
    let c = Connection::open_with_flags_and_vfs(path, OpenFlags::default(), vfs).unwrap();
    c.pragma_update(None, "journal_mode", "WAL").unwrap();
    c
}

/// A bounded pool (1 MiB at most) filled while another connection holds
/// a read transaction open: no checkpoint can copy the frames committed
/// after its snapshot, so the write that finds no room fails with
/// `SQLITE_FULL`, and since only a commit runs the automatic checkpoint,
/// writes keep failing after the reader ends. The error now says what
/// frees the pool (a checkpoint by hand once no reader holds an older
/// snapshot: before, `last_error` said only "out of pool memory ... create
/// the pool with a larger max_size", and the crate's docs promised a
/// bounded pool never fills with frames a checkpoint could free), and the
/// checkpoint does: writes go on, with every acknowledged row.
#[test]
fn a_bounded_pool_filled_behind_a_reader_says_a_checkpoint_frees_it() {
    let cfg = rewind_sqlite::Config::default()
        .pool_size(1 << 20)
        .max_pool_size(1 << 20);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reader.db");
    let w = open_on("rewind-user-probe3-capped", &cfg, &path);
    w.execute_batch(
        "CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB); INSERT INTO t(v) VALUES (x'01');",
    )
    .unwrap();
    let r = open_on("rewind-user-probe3-capped", &cfg, &path);
    r.execute_batch("BEGIN").unwrap();
    assert_eq!(count(&r), 1);
    let mut acked = 1;
    let err = loop {
        match w.execute("INSERT INTO t(v) VALUES (randomblob(3000))", []) {
            Ok(_) => acked += 1,
            Err(e) => break e,
        }
        assert!(acked < 2000, "a 1 MiB pool took {acked} rows of 3 KB");
    };
    assert_eq!(err.sqlite_error_code(), Some(ErrorCode::DiskFull), "{err}");
    let why = rewind_sqlite::last_error().unwrap();
    assert!(why.contains("PRAGMA wal_checkpoint"), "{why}");
    // The reader still sees its snapshot; then it ends.
    assert_eq!(count(&r), 1);
    r.execute_batch("COMMIT").unwrap();
    drop(r);
    let e = w
        .execute("INSERT INTO t(v) VALUES (randomblob(3000))", [])
        .unwrap_err();
    assert_eq!(e.sqlite_error_code(), Some(ErrorCode::DiskFull), "{e}");
    // The checkpoint the error names frees the pool.
    let (busy, log, done): (i64, i64, i64) = w
        .query_row("PRAGMA wal_checkpoint", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    assert_eq!((busy, log), (0, done));
    for _ in 0..2 * acked {
        w.execute("INSERT INTO t(v) VALUES (randomblob(3000))", [])
            .unwrap_or_else(|e| panic!("{e}: {:?}", rewind_sqlite::last_error()));
    }
    assert_eq!(count(&w), 3 * acked);
    drop(w);
    let c = open_on("rewind-user-probe3-capped", &cfg, &path);
    assert_eq!(count(&c), 3 * acked);
    intact(&c);
}
