//! A user's sixth round with the `rewind` command, on the pools
//! `rewind-sqlite` keeps SQLite's WAL in (`app.db-wal.rewind`): while a
//! process has the database open, and after that process is SIGKILLed
//! with frames in the pool. Every command must end with a clear message
//! and status 0 or 1, never a panic or a signal; the readers must leave
//! the pool's bytes as they were; and the database must open through the
//! VFS afterwards with exactly the acknowledged rows, from the pool, a
//! recovered one, a grown one and a copy alike. A probe that found no
//! defect.
//!
//! The writer is this test binary again, running the ignored test
//! `cli_probe6_child` with its database in the environment.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use rewind_sqlite::rusqlite::{Connection, OpenFlags};

const VFS: &str = "rewind-cli-probe6";
const CHILD_DB: &str = "REWIND_CLI_PROBE6_DB";
/// Rows the writer commits, one transaction each.
const ROWS: i64 = 150;

fn cfg() -> rewind_sqlite::Config {
    rewind_sqlite::Config::default()
        .pool_size(1 << 20)
        .max_pool_size(8 << 20)
}

fn register() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| rewind_sqlite::register(VFS, &cfg()).unwrap());
}

fn open(db: &Path) -> Connection {
    register();
    let c = Connection::open_with_flags_and_vfs(db, OpenFlags::default(), VFS).unwrap();
    c.pragma_update(None, "journal_mode", "WAL").unwrap();
    c
}

fn pool_of(db: &Path) -> PathBuf {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    rewind_sqlite::pool_path(Path::new(&wal))
}

/// The writer: `ROWS` one-row transactions with checkpoints off, then
/// `acked ROWS`, then waits with the WAL open until killed.
#[test]
#[ignore]
fn cli_probe6_child() {
    let Ok(db) = std::env::var(CHILD_DB) else {
        return;
    };
    println!();
    let c = open(Path::new(&db));
    c.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
    c.execute_batch("CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB)")
        .unwrap();
    for i in 0..ROWS {
        c.execute("INSERT INTO t VALUES (?1, randomblob(200 + ?1))", [i])
            .unwrap();
    }
    println!("acked {ROWS}");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

/// Runs `rewind COMMAND POOL REST...` (`args`: the command, then the
/// rest): it must end with status 0 or 1, no panic.
fn rewind(args: &[&str], pool: &Path) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_rewind"))
        .arg(args[0])
        .arg(pool)
        .args(&args[1..])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(0 | 1)) && !err.contains("panicked"),
        "rewind {args:?}: {:?}\n{err}",
        out.status
    );
    out
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The rows of `db` through the VFS, checked intact.
fn rows(db: &Path) -> i64 {
    let c = open(db);
    let ok: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
    c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn rewind_on_a_wal_pool_in_use_and_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    let pool = pool_of(&db);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "cli_probe6_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DB, &db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while lines.next().expect("the writer ended").unwrap() != format!("acked {ROWS}") {}

    // In use: the header alone, or a refusal that says so.
    let info = rewind(&["info"], &pool);
    assert!(
        info.status.success() && text(&info).contains("IN USE"),
        "{}",
        text(&info)
    );
    for args in [
        &["check"][..],
        &["dump-log"],
        &["recover"],
        &["grow", "+1M"],
    ] {
        let o = rewind(args, &pool);
        assert!(
            !o.status.success() && text(&o).contains("in use"),
            "rewind {args:?}: {}",
            text(&o)
        );
    }
    let copy_dir = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_rewind"))
        .arg("copy")
        .arg(&pool)
        .arg(copy_dir.path().join("x.rewind"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(!copy_dir.path().join("x.rewind").exists());

    // SIGKILLed with its frames in the pool.
    child.kill().unwrap();
    child.wait().unwrap();
    let before = std::fs::read(&pool).unwrap();
    for args in [
        &["info"][..],
        &["check"],
        &["dump-log"],
        &["dump-log", "--json"],
    ] {
        let o = rewind(args, &pool);
        assert!(o.status.success(), "rewind {args:?}: {}", text(&o));
        assert!(
            std::fs::read(&pool).unwrap() == before,
            "rewind {args:?} changed the pool"
        );
    }
    assert!(text(&rewind(&["check"], &pool)).contains("consistent"));
    // A copy beside a copy of the database, in another directory.
    let copied = copy_dir.path().join("app.db");
    std::fs::copy(&db, &copied).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_rewind"))
        .arg("copy")
        .arg(&pool)
        .arg(pool_of(&copied))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(rows(&copied), ROWS);
    // Recovered, then grown, in place.
    assert!(rewind(&["recover"], &pool).status.success());
    let o = rewind(&["grow", "+1M"], &pool);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(rows(&db), ROWS);
    {
        let c = open(&db);
        for i in ROWS..ROWS + 50 {
            c.execute("INSERT INTO t VALUES (?1, randomblob(9000))", [i])
                .unwrap();
        }
    }
    assert_eq!(rows(&db), ROWS + 50);
    assert!(!pool.exists(), "the last close leaves no pool");
}
