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

/// The WAL of one of several databases a connection has (its main one
/// and two attached) has a damaged pool: the statement that needs it fails
/// (`SQLITE_CANTOPEN`), and `last_error` names the damaged pool's file,
/// so the program can tell which database it is. Before, most reasons
/// named no file ("WAL pool damaged: ...", "heap metadata corrupt at
/// offset ...", "invalid header field ...", "not a rewind-sqlite WAL
/// pool ..."), though the engine's own errors for a truncated pool did.
#[test]
fn a_damaged_pool_among_attached_databases_is_named_in_the_error() {
    let cfg = rewind_sqlite::Config::default().pool_size(2 << 20);
    let vfs = "rewind-user-probe4-named";
    let dir = tempfile::tempdir().unwrap();
    let db = |n: &str| dir.path().join(format!("{n}.db"));
    let pool = |n: &str| rewind_sqlite::pool_path(&dir.path().join(format!("{n}.db-wal")));
    // Three databases whose rows are all in their pools, as a crash
    // leaves them (the files copied while the connections are open).
    let mut pools = Vec::new();
    for n in ["a", "b", "c"] {
        let c = common::open_wal(vfs, &cfg, &db(&format!("src-{n}")));
        c.execute_batch(
            "PRAGMA wal_autocheckpoint = 0;
             CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);
             INSERT INTO t(v) VALUES (zeroblob(3000)), (zeroblob(3000)), (x'07');",
        )
        .unwrap();
        std::fs::copy(db(&format!("src-{n}")), db(n)).unwrap();
        pools.push(std::fs::read(pool(&format!("src-{n}"))).unwrap());
    }
    // Each way of damaging b's pool: its checks fail at different places.
    type Damage = (&'static str, fn(&mut [u8]));
    let damages: [Damage; 4] = [
        ("a zeroed pool header", |p| p[..4096].fill(0)),
        ("a byte of the meta page", |p| p[4096 + 3000] ^= 0x40),
        ("garbage past the first page", |p| {
            for (i, b) in p[4096..].iter_mut().enumerate() {
                *b = (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1];
            }
        }),
        ("a byte of the header page past its checksum", |p| {
            p[1500] ^= 1
        }),
    ];
    for (what, damage) in damages {
        for (i, n) in ["a", "b", "c"].into_iter().enumerate() {
            let mut bytes = pools[i].clone();
            if n == "b" {
                damage(&mut bytes);
            }
            std::fs::write(pool(n), &bytes).unwrap();
        }
        let c = common::open_wal(vfs, &cfg, &db("a"));
        // (ATTACH reads the schema: it may be the statement that fails.)
        let e = c
            .execute("ATTACH ?1 AS b", [db("b").to_str().unwrap()])
            .and_then(|_| c.execute("ATTACH ?1 AS c", [db("c").to_str().unwrap()]))
            .and_then(|_| {
                c.query_row(
                    "SELECT (SELECT count(*) FROM main.t) + (SELECT count(*) FROM b.t) \
                     + (SELECT count(*) FROM c.t)",
                    [],
                    |r| r.get::<_, i64>(0),
                )
            })
            .unwrap_err();
        assert_eq!(
            e.sqlite_error_code(),
            Some(ErrorCode::CannotOpen),
            "{what}: {e}"
        );
        let why = rewind_sqlite::last_error().unwrap();
        assert!(
            why.contains(&pool("b").display().to_string()),
            "{what}: the reason names no file: {why}"
        );
        drop(c);
        for n in ["a", "b", "c"] {
            let _ = std::fs::remove_file(pool(n));
        }
    }
}
