//! Threads of one process, each with its own connection to one database
//! through the VFS: writers take turns through SQLite's locks (the
//! wal-index's lock table in process memory), readers see committed rows
//! only, checkpoints run while others write, and the database ends with
//! exactly the committed rows and `integrity_check` ok, reopened too.

use std::time::Duration;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

mod common;

const VFS: &str = "rewind-threads";
const WRITERS: u64 = 4;
const TXS: u64 = 150;
const ROWS: u64 = 3;

fn open(path: &std::path::Path) -> Connection {
    common::register_once(VFS, &rewind_sqlite::Config::default());
    let c = Connection::open_with_flags_and_vfs(path, OpenFlags::default(), VFS).unwrap();
    // A writer waits for the others' locks as long as it takes (every
    // holder lets go), so no outcome depends on the machine's speed.
    c.busy_handler(Some(|_| {
        std::thread::sleep(Duration::from_millis(1));
        true
    }))
    .unwrap();
    let mode: String = c
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    c
}

fn count(c: &Connection) -> (u64, u64) {
    c.query_row("SELECT count(*), coalesce(sum(v), 0) FROM t", [], |r| {
        Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64))
    })
    .unwrap()
}

#[test]
fn threads_with_connections_of_their_own_commit_exactly_their_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let setup = open(&path);
    setup
        .execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, w INTEGER, v INTEGER, pad BLOB)")
        .unwrap();
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let path = &path;
            s.spawn(move || {
                let mut c = open(path);
                // Small WAL: checkpoints run while the others write.
                c.pragma_update(None, "wal_autocheckpoint", 50).unwrap();
                for i in 0..TXS {
                    let tx = c
                        .transaction_with_behavior(TransactionBehavior::Immediate)
                        .unwrap();
                    for r in 0..ROWS {
                        tx.execute(
                            "INSERT INTO t(w, v, pad) VALUES (?1, ?2, randomblob(80))",
                            (w as i64, (i * ROWS + r) as i64),
                        )
                        .unwrap();
                    }
                    // Every fifth transaction is rolled back: none of its rows stays.
                    if i % 5 == 4 {
                        tx.rollback().unwrap();
                    } else {
                        tx.commit().unwrap();
                    }
                }
            });
        }
        // A reader: each snapshot holds whole transactions only.
        let path = &path;
        s.spawn(move || {
            let c = open(path);
            for _ in 0..200 {
                let (n, _) = count(&c);
                assert_eq!(n % ROWS, 0, "a snapshot with part of a transaction");
            }
        });
    });
    let committed = TXS - TXS / 5;
    let sum_per_writer: u64 = (0..TXS)
        .filter(|i| i % 5 != 4)
        .flat_map(|i| (0..ROWS).map(move |r| i * ROWS + r))
        .sum();
    let want = (WRITERS * committed * ROWS, WRITERS * sum_per_writer);
    assert_eq!(count(&setup), want);
    let ok: String = setup
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
    let per: Vec<(i64, i64)> = setup
        .prepare("SELECT w, count(*) FROM t GROUP BY w ORDER BY w")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let expect: Vec<(i64, i64)> = (0..WRITERS as i64)
        .map(|w| (w, (committed * ROWS) as i64))
        .collect();
    assert_eq!(per, expect);
    drop(setup);
    let c = open(&path);
    assert_eq!(count(&c), want);
}

/// Connections opened and closed over and over from several threads: the
/// last close of each round checkpoints and removes the WAL's pool while
/// another thread may be opening it again, and a thread truncates the WAL
/// between writes. Every committed row stays.
#[test]
fn connections_opened_and_closed_by_threads_keep_every_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("oc.db");
    open(&path)
        .execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, w INTEGER, v INTEGER, pad BLOB)")
        .unwrap();
    const ROUNDS: u64 = 40;
    std::thread::scope(|s| {
        for w in 0..3u64 {
            let path = &path;
            s.spawn(move || {
                for i in 0..ROUNDS {
                    let c = open(path);
                    c.execute(
                        "INSERT INTO t(w, v, pad) VALUES (?1, ?2, randomblob(200))",
                        (w as i64, i as i64),
                    )
                    .unwrap();
                    if i % 7 == 3 {
                        c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                            .unwrap();
                    }
                }
            });
        }
    });
    let c = open(&path);
    assert_eq!(count(&c).0, 3 * ROUNDS);
    let ok: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
}
