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
/// everything in it when dropped.
pub fn dir(base: Option<&Path>) -> Result<TempDir, CliError> {
    let base = base.map_or_else(base_dir, Path::to_path_buf);
    tempfile::Builder::new()
        .prefix("rewind-bench-")
        .tempdir_in(&base)
        .map_err(CliError::io(format!(
            "creating a scratch directory in {}",
            base.display()
        )))
}
