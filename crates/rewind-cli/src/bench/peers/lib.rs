//! Peers of the benchmarks, built with `--features peers` only (they need
//! PMDK's libpmemobj, Berkeley DB, LMDB and a C compiler:
//! `scripts/install-peers.sh`).
//!
//! This is the `rewind-cli` package's library target, holding only the
//! foreign-function code: the `rewind` binary forbids `unsafe` code, so the
//! few `unsafe` calls into libpmemobj, libdb, liblmdb and the C loop live
//! here, behind safe wrappers, and the benchmarks use the wrappers.
//! Without the feature this library is empty. Errors are `std::io::Error`s
//! carrying the library's message; the benchmarks turn them into errors of
//! their own.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

#[cfg(feature = "peers")]
pub mod cloop;
#[cfg(feature = "peers")]
pub mod floor;
#[cfg(feature = "peers")]
pub mod pmdk;
#[cfg(feature = "peers")]
pub mod shim;
