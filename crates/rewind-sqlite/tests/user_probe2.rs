//! Defects found by probing the VFS as a user would, each kept as a named
//! regression test: a second process meeting a WAL another holds, and a
//! file system without room for a new WAL pool.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use rusqlite::{Connection, ErrorCode, OpenFlags};

mod common;
use common::{count, intact, SmallFs};

const VFS: &str = "rewind-user-probe2";

fn cfg() -> rewind_sqlite::Config {
    rewind_sqlite::Config::default().pool_size(8 << 20)
}

const CHILD_DB: &str = "REWIND_USER_PROBE2_DB";

/// The child of `a_second_process_waits_for_the_wal_in_its_busy_handler`:
/// inserts a row through a connection whose busy handler, at its first
/// call, says `busy` and waits for a line on its standard input before it
/// lets SQLite try again; prints the outcome.
#[test]
#[ignore = "child process of a_second_process_waits_for_the_wal_in_its_busy_handler"]
fn busy_child() {
    let Ok(db) = std::env::var(CHILD_DB) else {
        return;
    };
    // The harness printed the test's name without a newline.
    println!();
    common::register_once(VFS, &cfg());
    let c = Connection::open_with_flags_and_vfs(&db, OpenFlags::default(), VFS).unwrap();
    c.busy_handler(Some(|n| {
        if n == 0 {
            println!("busy");
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line).unwrap();
        }
        // At most a few tries after the parent's close: a bound, so that
        // a wrong outcome ends the child instead of hanging it.
        n < 1000
    }))
    .unwrap();
    let r = c
        .execute("INSERT INTO t VALUES (2)", [])
        .and_then(|_| c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0)));
    match r {
        Ok(n) => println!("result: ok {n}"),
        Err(e) => println!(
            "result: error {e} ({:?}) / {:?}",
            e.sqlite_error_code(),
            rewind_sqlite::last_error()
        ),
    }
}

/// A second process that needs the WAL while this one has it open meets
/// `SQLITE_BUSY`, as it would meet a lock this process held: its busy
/// handler (`busy_timeout`) waits, and once the first closes, its
/// statement runs and sees every commit. Before, the WAL's open failed
/// with `SQLITE_CANTOPEN` at once, whatever the busy timeout: SQLite never
/// called the busy handler, and programs that share a database between
/// processes by `busy_timeout` failed with "unable to open database file".
#[test]
fn a_second_process_waits_for_the_wal_in_its_busy_handler() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.db");
    let c = common::open_wal(VFS, &cfg(), &path);
    c.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
        .unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "busy_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DB, &path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    loop {
        first.clear();
        assert!(out.read_line(&mut first).unwrap() > 0, "the child ended");
        if first.starts_with("busy") || first.starts_with("result") {
            break;
        }
    }
    // The child waits in its busy handler (or has failed already): the
    // parent lets go of the WAL, then lets the child go on.
    c.execute("INSERT INTO t VALUES (3)", []).unwrap();
    drop(c);
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.write_all(b"go\n");
    drop(stdin);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(child.wait().unwrap().success(), "{rest}");
    assert_eq!(first.trim_end(), "busy", "{rest}");
    assert!(rest.contains("result: ok 3"), "{rest}");
    let c = common::open_wal(VFS, &cfg(), &path);
    assert_eq!(count(&c), 3);
    intact(&c);
}

/// A file system without room for a new WAL pool (8 MiB here): reading or
/// writing the database in WAL mode is `SQLITE_FULL` ("database or disk is
/// full"), not `SQLITE_CANTOPEN` ("unable to open database file", which
/// names no cause a program could act on), the pool's file is not left
/// behind, and once space is freed the same connection reads and writes
/// every row.
#[test]
fn no_room_for_a_new_wal_pool_is_sqlite_full_and_freeing_space_heals() {
    // 32 MiB: room, once the filler is gone, for the pool and for a
    // second one's worth of a deleted pool that a child forked by the
    // other test of this file still maps until it execs.
    let Some(fs) = SmallFs::mount(32) else {
        return;
    };
    let path = fs.path().join("full.db");
    {
        let c = Connection::open(&path).unwrap();
        c.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
            .unwrap();
    }
    // Leaves about 4 MiB free: less than the pool's 8 MiB.
    let filler = fs.path().join("filler");
    std::fs::write(&filler, vec![0x5a; 28 << 20]).unwrap();
    common::register_once(VFS, &cfg());
    let c = Connection::open_with_flags_and_vfs(&path, OpenFlags::default(), VFS).unwrap();
    // SQLite marks the database WAL before it opens the WAL.
    let mode: String = c
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    for sql in ["INSERT INTO t VALUES (2)", "SELECT count(*) FROM t"] {
        let e = c
            .prepare(sql)
            .and_then(|mut st| st.query([])?.next().map(|_| ()))
            .expect_err(sql);
        assert_eq!(
            e.sqlite_error_code(),
            Some(ErrorCode::DiskFull),
            "{sql}: {e} ({:?})",
            rewind_sqlite::last_error()
        );
        assert!(
            rewind_sqlite::last_error().is_some_and(|m| m.contains("no space")),
            "{:?}",
            rewind_sqlite::last_error()
        );
    }
    assert!(!rewind_sqlite::pool_path(&fs.path().join("full.db-wal")).exists());
    std::fs::remove_file(&filler).unwrap();
    c.execute("INSERT INTO t VALUES (2)", []).unwrap();
    assert_eq!(count(&c), 2);
    intact(&c);
    drop(c);
    let c = common::open_wal(VFS, &cfg(), &path);
    assert_eq!(count(&c), 2);
    drop(c);
}
