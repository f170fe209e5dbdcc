//! Defects found by probing the VFS as users' programs would, each kept as
//! a named regression test.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::process::Command;

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

const VFS: &str = "rewind-user-probe3";

fn cfg() -> rewind_sqlite::Config {
    rewind_sqlite::Config::default().pool_size(4 << 20)
}

const CHILD_DB: &str = "REWIND_USER_PROBE3_DB";

/// The child of `a_pool_made_by_root_belongs_to_the_databases_owner`,
/// run as `nobody`: inserts a row into the database and prints the count.
#[test]
#[ignore = "child process of a_pool_made_by_root_belongs_to_the_databases_owner"]
fn owner_child() {
    let Ok(db) = std::env::var(CHILD_DB) else {
        return;
    };
    println!();
    common::register_once(VFS, &cfg());
    let c = Connection::open_with_flags_and_vfs(&db, OpenFlags::default(), VFS).unwrap();
    let r = c
        .execute("INSERT INTO t VALUES (2)", [])
        .and_then(|_| c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0)));
    match r {
        Ok(n) => println!("result: ok {n}"),
        Err(e) => println!("result: error {e} / {:?}", rewind_sqlite::last_error()),
    }
}

/// A process run as root that reads another user's database (here
/// read-only: such a connection leaves its pool behind, as stock SQLite
/// leaves its WAL file) creates the pool: it gets the database file's
/// owner, group and permission bits, as SQLite gives the WAL and `-shm`
/// files it creates. Before, the pool was root's, `0644`: every statement
/// of the database's owner then failed with `SQLITE_CANTOPEN`
/// ("Permission denied" in `last_error`), for as long as the pool was
/// there. Skipped where the test does not run as root.
#[test]
fn a_pool_made_by_root_belongs_to_the_databases_owner() {
    const NOBODY: u32 = 65534;
    let dir = tempfile::tempdir().unwrap();
    let probe = dir.path().join("probe");
    std::fs::write(&probe, b"").unwrap();
    if std::fs::metadata(&probe).unwrap().uid() != 0 {
        eprintln!("not root: skipped");
        return;
    }
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let path = dir.path().join("theirs.db");
    let c = open_on(VFS, &cfg(), &path);
    c.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
        .unwrap();
    drop(c);
    let pool = rewind_sqlite::pool_path(&dir.path().join("theirs.db-wal"));
    assert!(!pool.exists(), "the last close removes the pool");
    std::os::unix::fs::chown(&path, Some(NOBODY), Some(NOBODY)).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o660)).unwrap();
    // Root reads it.
    let r =
        Connection::open_with_flags_and_vfs(&path, OpenFlags::SQLITE_OPEN_READ_ONLY, VFS).unwrap();
    assert_eq!(count(&r), 1);
    drop(r);
    let m = std::fs::metadata(&pool).expect("a read-only connection leaves its pool");
    assert_eq!(
        (m.uid(), m.gid(), m.mode() & 0o777),
        (NOBODY, NOBODY, 0o660)
    );
    // The owner uses the database (where nobody may run this binary).
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["owner_child", "--exact", "--ignored", "--nocapture"])
        .env(CHILD_DB, &path)
        .uid(NOBODY)
        .gid(NOBODY)
        .output();
    match child {
        Ok(out) => {
            let out = String::from_utf8_lossy(&out.stdout);
            assert!(out.contains("result: ok 2"), "{out}");
        }
        Err(e) => eprintln!("cannot run this binary as nobody ({e}): the owner's use skipped"),
    }
    let c = open_on(VFS, &cfg(), &path);
    assert_eq!(count(&c), 2);
    intact(&c);
}

/// A pool that grew for a transaction of 12 MB keeps its size on disk
/// after a `TRUNCATE` checkpoint under `journal_size_limit = 0` (which
/// leave a stock WAL file empty): the engine's pools never shrink, and the
/// crate's docs said nothing of it (its *Room* limit now does); the space
/// comes back when the last connection closes and the pool is removed,
/// and the blocks the checkpoint freed take later transactions without
/// growing the file. On a tmpfs (skipped where none can be mounted).
#[test]
fn a_grown_pool_keeps_its_disk_space_until_the_last_close() {
    let Some(fs) = common::SmallFs::mount(64) else {
        return;
    };
    let cfg = rewind_sqlite::Config::default().pool_size(2 << 20);
    let path = fs.path().join("grown.db");
    let pool = rewind_sqlite::pool_path(&fs.path().join("grown.db-wal"));
    let c = open_on("rewind-user-probe3-grow", &cfg, &path);
    c.execute_batch("PRAGMA journal_size_limit = 0; CREATE TABLE t(v BLOB);")
        .unwrap();
    c.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 4000)
         INSERT INTO t SELECT randomblob(3000) FROM n",
        [],
    )
    .unwrap();
    let on_disk = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.blocks() * 512).unwrap();
    let grown = on_disk(&pool);
    assert!(grown >= 12 << 20, "the pool grew to {grown} bytes");
    let (busy, log, done): (i64, i64, i64) = c
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    assert_eq!((busy, log, done), (0, 0, 0));
    assert_eq!(on_disk(&pool), grown, "no disk space comes back");
    for _ in 0..50 {
        c.execute("INSERT INTO t VALUES (randomblob(3000))", [])
            .unwrap();
    }
    assert_eq!(on_disk(&pool), grown, "the freed blocks take new frames");
    drop(c);
    assert!(!pool.exists(), "the last close removes the pool");
    let c = open_on("rewind-user-probe3-grow", &cfg, &path);
    assert_eq!(count(&c), 4050);
    intact(&c);
}

/// A database file deleted while a connection has it open, and created
/// again at its name by a second connection of the process: SQLite asks to
/// delete the WAL of the new, empty file, which is the first connection's
/// open WAL (kept: `SQLITE_IOERR_DELETE`, as before). `last_error` now
/// says why; before, it held nothing, or an older error of the thread
/// (here the first connection's "No such file or directory").
#[test]
fn a_refused_delete_of_an_open_wal_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gone.db");
    let c = open_on(VFS, &cfg(), &path);
    c.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    // The first connection still reads its (unlinked) database.
    assert_eq!(count(&c), 1);
    common::register_once(VFS, &cfg());
    let c2 = Connection::open_with_flags_and_vfs(&path, OpenFlags::default(), VFS).unwrap();
    let e = c2
        .execute_batch("CREATE TABLE u(y)")
        .expect_err("the open WAL is not deleted");
    assert_eq!(
        e.sqlite_error_code(),
        Some(ErrorCode::SystemIoFailure),
        "{e}"
    );
    let why = rewind_sqlite::last_error().unwrap_or_default();
    assert!(why.contains("open") && why.contains("gone.db"), "{why}");
    drop(c);
    // Once the first has closed, the new database is used as any other.
    c2.execute_batch("CREATE TABLE u(y); INSERT INTO u VALUES (5);")
        .unwrap();
    let n: i64 = c2
        .query_row("SELECT count(*) FROM u", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);
    intact(&c2);
}
