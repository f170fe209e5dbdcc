//! The benchmarks' foreign-function code: the C loops (the redo commit's
//! floor, always built on x86_64; the no-log loop), the disk's floor
//! (`disk_floor`: a mapped file, always built) and, with `--features
//! peers`, the wrappers over PMDK's libpmemobj, Berkeley DB and LMDB (which
//! need those libraries and a C compiler: `scripts/install-peers.sh`).
//!
//! This is the `rewind-cli` package's library target, holding only the
//! foreign-function code: the `rewind` binary forbids `unsafe` code, so the
//! few `unsafe` calls into the C loops, libpmemobj, libdb and liblmdb live
//! here, behind safe wrappers, and the benchmarks use the wrappers.
//! Errors are `std::io::Error`s carrying the library's message; the
//! benchmarks turn them into errors of their own.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

#[cfg(feature = "peers")]
pub mod cloop;
pub mod disk_floor;
#[cfg(target_arch = "x86_64")]
pub mod floor;
pub mod mapped;
#[cfg(feature = "peers")]
pub mod pmdk;
#[cfg(feature = "peers")]
pub mod shim;

/// A test's scratch file: the path `name` in a fresh temporary directory
/// (removed when the guard drops).
#[cfg(test)]
fn scratch(name: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join(name);
    (dir, path)
}
