//! Defects found by a fourth round of probing the VFS as users' programs
//! would, each kept as a named regression test.

use rusqlite::ErrorCode;

mod common;
use common::{count, intact};

/// A transaction larger than the pool at its maximum size, with frames of
/// committed transactions in the WAL: `SQLITE_FULL`, and `last_error`
/// says that no checkpoint makes room for it (commit it in pieces, or a
/// larger `max_pool_size`). Before, it said that a checkpoint freed the
/// committed frames' blocks "and writes go on": a program that followed
/// it (the crate's docs say: on `SQLITE_FULL`, checkpoint and retry) had
/// the same transaction fail again after the checkpoint. A transaction
/// that fits once the WAL is checkpointed still gets that advice, and
/// commits after the checkpoint.
#[test]
fn a_transaction_past_the_pools_maximum_is_not_promised_room_by_a_checkpoint() {
    let cfg = rewind_sqlite::Config::default()
        .pool_size(1 << 20)
        .max_pool_size(2 << 20);
    let dir = tempfile::tempdir().unwrap();
    let c = common::open_wal("rewind-user-probe4-max", &cfg, &dir.path().join("m.db"));
    c.execute_batch(
        "PRAGMA wal_autocheckpoint = 0;
         CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB); INSERT INTO t(v) VALUES (x'01');",
    )
    .unwrap();
    let too_large = |what: &str| {
        let e = c
            .execute("INSERT INTO t(v) VALUES (randomblob(3000000))", [])
            .unwrap_err();
        assert_eq!(
            e.sqlite_error_code(),
            Some(ErrorCode::DiskFull),
            "{what}: {e}"
        );
        let why = rewind_sqlite::last_error().unwrap();
        assert!(
            why.contains("no checkpoint makes room") && why.contains("max_pool_size"),
            "{what}: {why}"
        );
        assert!(!why.contains("writes go on"), "{what}: {why}");
    };
    too_large("with committed frames in the WAL");
    c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    too_large("after a checkpoint");
    // Transactions that fit an emptied pool but not this one: the advice
    // to checkpoint, which then lets them commit.
    let mut acked = 1;
    let e = loop {
        match c.execute("INSERT INTO t(v) VALUES (randomblob(300000))", []) {
            Ok(_) => acked += 1,
            Err(e) => break e,
        }
        assert!(acked < 100, "a 2 MiB pool took {acked} rows of 300 KB");
    };
    assert_eq!(e.sqlite_error_code(), Some(ErrorCode::DiskFull), "{e}");
    let why = rewind_sqlite::last_error().unwrap();
    assert!(
        why.contains("a checkpoint (PRAGMA wal_checkpoint) frees"),
        "{why}"
    );
    c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    c.execute("INSERT INTO t(v) VALUES (randomblob(300000))", [])
        .unwrap();
    assert_eq!(count(&c), acked + 1);
    intact(&c);
}
