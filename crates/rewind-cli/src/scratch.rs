//! Where benchmarks put their throw-away pools.
//!
//! `/dev/shm` is a tmpfs: a mapped file there lives in DRAM, which stands in
//! for persistent memory (as PMEM_IS_PMEM_FORCE does for PMDK) and keeps disk
//! write-back out of the measurements. Elsewhere we fall back to the temp dir.

use std::path::{Path, PathBuf};

use tempfile::TempDir;

use crate::error::CliError;

/// The directory for scratch pools.
pub fn base_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() && tempfile::tempdir_in(shm).is_ok() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// A fresh directory under `base` (`None`: [`base_dir`]), removed with
/// everything in it when dropped, or by [`remove_on_signal`]'s handler when
/// the process is interrupted first.
pub fn dir(base: Option<&Path>) -> Result<Scratch, CliError> {
    let base = base.map_or_else(base_dir, Path::to_path_buf);
    let dir = tempfile::Builder::new()
        .prefix("rewind-bench-")
        .tempdir_in(&base)
        .map_err(CliError::io(format!(
            "creating a scratch directory in {}",
            base.display()
        )))?;
    track(dir.path().to_path_buf());
    Ok(Scratch(dir))
}

/// A scratch directory (see [`dir`]).
pub struct Scratch(TempDir);

impl Scratch {
    /// Its path.
    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        untrack(self.0.path());
    }
}

/// The scratch directories not yet dropped, and the run's other files
/// of its own ([`track`]).
fn live() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    static LIVE: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Has [`remove_all`] remove `path` (a directory with everything in it,
/// or a file), until [`untrack`]: what the run removes itself when it
/// ends normally (a scratch directory, the demo's lock file).
pub fn track(path: PathBuf) {
    live().push(path);
}

/// Leaves `path` to its owner again (it removes it, or keeps it).
pub fn untrack(path: &Path) {
    let mut live = live();
    if let Some(i) = live.iter().position(|p| p == path) {
        live.swap_remove(i);
    }
}

/// Removes every scratch directory and tracked file still there: for a
/// process that ends without unwinding (a signal, a closed stdout).
pub fn remove_all() {
    for p in live().drain(..) {
        let _ = match p.is_dir() {
            true => std::fs::remove_dir_all(&p),
            false => std::fs::remove_file(&p),
        };
    }
}

/// On SIGINT, SIGTERM or SIGHUP, removes every scratch directory still
/// there ([`remove_all`]), then exits with status 130: an
/// interrupted benchmark leaves no gigabytes of pools in `/dev/shm` (RAM)
/// or on a disk. (The handler runs on a thread of its own, not in the
/// signal's context.) Installed once; a second call does nothing.
pub fn remove_on_signal() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            remove_all();
            eprintln!("interrupted: scratch files removed");
            std::process::exit(130);
        });
    });
}
