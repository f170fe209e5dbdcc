//! One opener at a time, and only regular files: a second open of a pool in
//! use, and an open of a FIFO, a directory or a device, are typed errors
//! returned at once.

mod common;

use std::path::Path;
use std::process::Command;

use rewind::{Backend, Error, OpenOptions, Pool, PoolConfig};

/// A child process forked by one test holds, until it execs, every file
/// this process has open: a pool just dropped by another test would look
/// in use for that moment. The tests of this file take turns.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn create(path: &Path) -> Pool {
    let cfg = PoolConfig::default().backend(Backend::Msync);
    let pool = Pool::create(path, "opener", 4 << 20, &cfg).unwrap();
    pool.transaction(|tx| {
        let r = tx.root::<u64>()?;
        tx.write(r, &42)
    })
    .unwrap();
    pool
}

fn open(path: &Path) -> Result<Pool, Error> {
    Pool::open(path, "opener", &OpenOptions::default())
}

#[test]
fn second_open_in_this_process_is_refused() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.pool");
    let pool = create(&path);
    let e = open(&path).expect_err("second open must fail");
    assert!(matches!(e, Error::PoolInUse { .. }), "{e}");
    assert!(e.to_string().contains("in use"), "{e}");
    // Inspection refuses a live pool too, instead of reading it.
    let e = rewind::inspect::check(&path).expect_err("check must refuse");
    assert!(matches!(e, Error::PoolInUse { .. }), "{e}");
    // The first opener is untouched.
    let r = pool.root::<u64>().unwrap().unwrap();
    assert_eq!(pool.read(r).unwrap(), 42);
    pool.transaction(|tx| tx.write(r, &43)).unwrap();
    drop(pool);
    // Closed: the next opener gets it, and sees the last commit.
    let pool = open(&path).unwrap();
    assert_eq!(pool.read(r).unwrap(), 43);
}

#[test]
fn second_open_from_another_process_is_refused() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.pool");
    drop(create(&path));
    // `flock` (util-linux) holds the same kind of lock a Pool takes, from
    // another process; skip where the tool is missing.
    let Ok(mut child) = Command::new("flock")
        .args([
            "--exclusive",
            "--no-fork",
            path.to_str().unwrap(),
            "sleep",
            "3600",
        ])
        .spawn()
    else {
        eprintln!("flock(1) not installed: skipped");
        return;
    };
    // Wait (by polling the lock itself, not the clock) until the child
    // holds it, or has ended without (then `flock` failed: the test fails).
    let seen = common::retry_while(
        || open(&path).map(drop),
        |r| r.is_ok() && child.try_wait().is_ok_and(|s| s.is_none()),
    );
    let _ = child.kill();
    let _ = child.wait();
    let e = seen.expect_err("the other process's lock was never seen");
    assert!(matches!(e, Error::PoolInUse { .. }), "{e}");
    // Once it is gone the pool opens.
    let pool = open(&path).unwrap();
    assert_eq!(pool.read(pool.root::<u64>().unwrap().unwrap()).unwrap(), 42);
}

#[test]
fn special_files_are_refused_without_blocking() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if made.is_ok_and(|s| s.success()) {
        let e = open(&fifo).expect_err("a FIFO is not a pool");
        assert!(matches!(e, Error::NotAFile { kind: "a FIFO", .. }), "{e}");
        let e = rewind::inspect::info(&fifo).expect_err("a FIFO is not a pool");
        assert!(matches!(e, Error::NotAFile { .. }), "{e}");
    }
    let e = open(dir.path()).expect_err("a directory is not a pool");
    assert!(
        matches!(
            e,
            Error::NotAFile {
                kind: "a directory",
                ..
            }
        ),
        "{e}"
    );
    let e = open(Path::new("/dev/null")).expect_err("a device is not a pool");
    assert!(matches!(e, Error::NotAFile { .. }), "{e}");
}

#[test]
fn sim_backend_for_a_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sim.pool");
    let cfg = PoolConfig::default().backend(Backend::Sim);
    let e = Pool::create(&path, "opener", 4 << 20, &cfg).err().unwrap();
    assert!(
        matches!(
            e,
            Error::InvalidConfig {
                what: "backend",
                ..
            }
        ),
        "{e}"
    );
    assert!(!path.exists(), "no file is left behind");
}

#[test]
fn a_pool_larger_than_the_free_space_is_refused_at_create() {
    // Where free space is not known up front, `fallocate` may fill the disk
    // for a moment: the other tests of this file wait for their turn.
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.pool");
    let st = rustix::fs::statvfs(dir.path()).unwrap();
    let free = st.f_bavail * st.f_frsize;
    let size = free + (256 << 20);
    match Pool::create(&path, "opener", size, &PoolConfig::default()) {
        Err(Error::NoSpace { needed, .. }) => assert_eq!(needed, size),
        // A filesystem that cannot preallocate, or caps file sizes: a
        // typed error all the same, never a pool that faults later.
        Err(Error::Io { .. }) => {}
        Ok(_) => {
            // Only where the filesystem neither preallocates nor refuses
            // (sparse files without fallocate support).
            eprintln!("filesystem without fallocate: skipped");
            return;
        }
        Err(e) => panic!("unexpected error: {e}"),
    }
    assert!(!path.exists(), "a refused create leaves no file");
}

/// Growing a file pool by more than the disk has free is `NoSpaceToGrow`,
/// refused before any block is taken: the file keeps its length and the
/// pool stays usable.
#[test]
fn growth_beyond_the_free_space_is_refused_before_taking_blocks() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("grow.pool");
    let Some((pool, free)) = common::pool_beyond_free_space(&path, "opener") else {
        return;
    };
    let len = std::fs::metadata(&path).unwrap().len();
    let e = pool.grow(free + (512 << 20)).unwrap_err();
    assert!(matches!(e, Error::NoSpaceToGrow { .. }), "{e}");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), len);
    pool.transaction(|tx| {
        let r = tx.root::<u64>()?;
        tx.write(r, &7)
    })
    .unwrap();
}
