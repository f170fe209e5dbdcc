//! The last connection's close removes the WAL's pool only after the
//! database file holds the checkpointed frames durably, whatever `PRAGMA
//! synchronous` says (SQLite's own checkpoint syncs the database file only
//! when `synchronous` is NORMAL or more).
//!
//! The child closes a database under `synchronous = OFF`; the parent runs
//! it under `strace` (skipped where there is none) and checks that an
//! fsync or fdatasync of the database file comes after its last write and
//! before the pool is unlinked.

use std::path::Path;
use std::process::Command;

use rusqlite::{Connection, OpenFlags};

const VFS: &str = "rewind-close-sync";

#[test]
#[ignore = "child process of close_syncs_the_database_before_the_pool_goes"]
fn close_sync_child() {
    let Ok(db) = std::env::var("REWIND_SQLITE_CLOSE_SYNC") else {
        return;
    };
    rewind_sqlite::register(VFS, &rewind_sqlite::Config::default()).unwrap();
    let c = Connection::open_with_flags_and_vfs(&db, OpenFlags::default(), VFS).unwrap();
    c.pragma_update(None, "journal_mode", "WAL").unwrap();
    c.pragma_update(None, "synchronous", "OFF").unwrap();
    c.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (randomblob(10000));")
        .unwrap();
    drop(c);
}

#[test]
fn close_syncs_the_database_before_the_pool_goes() {
    // Where there is no strace, or it may not trace (a container without
    // ptrace), there is nothing to check.
    if !Command::new("strace")
        .args(["-f", "-e", "trace=none", "true"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        eprintln!("no working strace: skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let out = Command::new("strace")
        .args([
            "-f",
            "-y",
            "-e",
            "trace=pwrite64,write,fsync,fdatasync,unlink,unlinkat",
        ])
        .arg(std::env::current_exe().unwrap())
        .args([
            "close_sync_child",
            "--exact",
            "--ignored",
            "--test-threads=1",
        ])
        .env("REWIND_SQLITE_CLOSE_SYNC", &db)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trace = String::from_utf8_lossy(&out.stderr);
    let db_fd = format!("<{}>", db.display());
    let pool = rewind_sqlite::pool_path(Path::new(&format!("{}-wal", db.display())));
    let lines: Vec<&str> = trace.lines().collect();
    let unlink = lines
        .iter()
        .position(|l| l.contains("unlink") && l.contains(&*pool.to_string_lossy()))
        .expect("the pool is unlinked at close");
    let last_write = lines[..unlink]
        .iter()
        .rposition(|l| l.contains("write") && l.contains(&db_fd))
        .expect("the checkpoint writes the database file");
    assert!(
        lines[last_write..unlink]
            .iter()
            .any(|l| l.contains("sync") && l.contains(&db_fd)),
        "no sync of the database file between its last write and the pool's unlink:\n{}",
        lines[last_write..=unlink].join("\n")
    );
}
