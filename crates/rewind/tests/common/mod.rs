//! What the engine's integration tests share.

// Each test binary compiles this module and may use only part of it.
#![allow(dead_code)]

use std::ffi::OsString;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Every log variant × commit policy the engine offers, as the tests
/// that run in each enumerate them.
pub fn configs() -> Vec<(rewind::LogVariant, rewind::Policy)> {
    rewind::LogVariant::ALL
        .into_iter()
        .flat_map(|v| rewind::Policy::ALL.map(|p| (v, p)))
        .collect()
}

/// Waits for the next message of a watched child or worker. By default it
/// waits as long as it takes, so that no outcome depends on the machine's
/// speed (a true hang is left to the CI's own time limit). With
/// `REWIND_HANG_LIMIT_SECS=N`, a silence of N seconds is `Timeout`: a
/// watchdog for runs by hand that names the hung case.
pub fn recv_watched<T>(recv: &Receiver<T>) -> Result<T, RecvTimeoutError> {
    match hang_limit() {
        Some(limit) => recv.recv_timeout(limit),
        None => recv.recv().map_err(|_| RecvTimeoutError::Disconnected),
    }
}

/// `REWIND_HANG_LIMIT_SECS`, when set.
fn hang_limit() -> Option<Duration> {
    std::env::var("REWIND_HANG_LIMIT_SECS")
        .ok()
        .map(|s| Duration::from_secs(s.parse().expect("REWIND_HANG_LIMIT_SECS: whole seconds")))
}

/// Calls `f` again, a millisecond apart, while `busy` says its answer met
/// a holder that is sure to let go (processes that contend for one pool on
/// purpose, a child that has yet to take its lock), and returns the first
/// answer that did not. As long as it takes by
/// default, as [`recv_watched`] waits, so no outcome depends on the
/// machine's speed; with `REWIND_HANG_LIMIT_SECS=N`, the answer of the
/// last call once N seconds have passed.
pub fn retry_while<T>(mut f: impl FnMut() -> T, mut busy: impl FnMut(&T) -> bool) -> T {
    let deadline = hang_limit().map(|limit| Instant::now() + limit);
    loop {
        let r = f();
        if !busy(&r) || deadline.is_some_and(|d| Instant::now() >= d) {
            return r;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// This test binary's test `name`, alone, in a child process with `envs`
/// set: stdin closed, stdout piped (the child's reports to the parent),
/// stderr inherited.
pub fn spawn_test_child(name: &str, envs: &[(&str, OsString)]) -> Child {
    let exe = std::env::current_exe().expect("current_exe");
    Command::new(exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child")
}

/// A pool on the filesystem of `dir` whose maximum size is 1 GiB more than
/// the free space there, created at the least size its chunk table allows
/// (544 bytes for each 256 KiB chunk, the log taking an eighth), on
/// Msync; with the free space. `None` (the caller skips) where that least
/// size would take more than a sixteenth of the free space.
#[allow(dead_code)]
pub fn pool_beyond_free_space(path: &std::path::Path, layout: &str) -> Option<(rewind::Pool, u64)> {
    let dir = path.parent().expect("a directory");
    let st = rustix::fs::statvfs(dir).unwrap();
    let free = st.f_bavail * st.f_frsize;
    let max = free + (1 << 30);
    let first = (max / 400 + (16 << 20)).next_multiple_of(1 << 20);
    if first > free / 16 {
        eprintln!("too little free space for the chunk table: skipped");
        return None;
    }
    let cfg = rewind::PoolConfig::default()
        .backend(rewind::Backend::Msync)
        .max_size(max);
    Some((
        rewind::Pool::create(path, layout, first, &cfg).unwrap(),
        free,
    ))
}

/// A tmpfs of `mib` MiB mounted for the test, unmounted (lazily: a child
/// process may still map a pool there) when dropped; `None` where mounting
/// is not permitted (not root, no tmpfs, a container without the
/// capability): the caller skips.
pub struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    pub fn mount(mib: u64) -> Option<SmallFs> {
        let dir = tempfile::tempdir().ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("cannot mount a tmpfs here: skipped");
            return None;
        }
        Some(SmallFs { dir })
    }

    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}
