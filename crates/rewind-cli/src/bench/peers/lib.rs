//! Peers of `rewind bench overhead`, built with `--features peers` only
//! (they need PMDK's libpmemobj and a C compiler: `scripts/install-peers.sh`).
//!
//! This is the `rewind-cli` package's library target, holding only the
//! foreign-function code: the `rewind` binary forbids `unsafe` code, so the
//! few `unsafe` calls into libpmemobj and the C loop live here, behind safe
//! wrappers, and the benchmark (`src/bench/overhead.rs`) uses the wrappers.
//! Without the feature this library is empty. Errors are `std::io::Error`s
//! carrying libpmemobj's message; the benchmark turns them into `CliError`s.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

#[cfg(feature = "peers")]
pub mod cloop;
#[cfg(feature = "peers")]
pub mod pmdk;
