//! A process killed in the middle of `Pool::backup_to` leaves nothing in
//! the backup's directory: the copy is built in an unnamed file (Linux's
//! `O_TMPFILE`) that is named only once it is whole, so a kill frees it
//! with the process instead of leaving a temporary file as large as the
//! pool (its blocks allocated) on the disk.

use std::path::Path;
use std::process::Command;

use rewind::{PPtr, Pool, PoolConfig};

const ENV_DIR: &str = "REWIND_KILLED_BACKUP_DIR";

/// The child: creates a pool, commits a transaction whose group waits in
/// the commit ring, and starts a backup with a kill armed at the next
/// fence (the backup's drain of the ring, after its file was created).
/// A no-op in a normal test run.
#[test]
fn killed_backup_child() {
    let Some(dir) = std::env::var_os(ENV_DIR) else {
        return;
    };
    let dir = Path::new(&dir);
    let pool = Pool::create(dir.join("p.pool"), "kb", 8 << 20, &PoolConfig::default()).unwrap();
    let r: PPtr<u64> = pool.transaction(|tx| tx.root()).unwrap();
    pool.transaction(|tx| tx.write(r, &7)).unwrap();
    rewind::persist::kill_at_fence(1);
    let _ = pool.backup_to(dir.join("backup.pool"));
    // Not killed: the parent sees the exit status and says so.
    std::process::exit(3);
}

#[test]
fn a_backup_killed_midway_leaves_no_file_behind() {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "killed_backup_child", "--nocapture"])
        .env(ENV_DIR, dir.path())
        .status()
        .unwrap();
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            status.signal(),
            Some(9),
            "the child was not killed: {status}"
        );
    }
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, vec![std::ffi::OsString::from("p.pool")]);
    // The pool itself is whole.
    let pool = Pool::open(dir.path().join("p.pool"), "kb", &Default::default()).unwrap();
    let r = pool.root::<u64>().unwrap().unwrap();
    assert_eq!(pool.read(r).unwrap(), 7);
}
