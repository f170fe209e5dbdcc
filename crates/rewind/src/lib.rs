//! `rewind`: crash-consistent transactions over data structures kept in
//! persistent memory, after REWIND (Chatzistergiou, Cintra, Viglas; VLDB
//! 2015).
//!
//! A program creates or opens a [`Pool`] (a memory-mapped file), reads its
//! data with [`Pool::read`], and changes it inside [`Pool::transaction`].
//! After a crash at any instant, opening the pool runs recovery: every
//! transaction whose commit returned is there whole, every other one is gone.
//!
//! ```
//! use rewind::{Pool, PoolConfig, PPtr, Pod, Zeroable};
//!
//! #[derive(Clone, Copy, Pod, Zeroable)]
//! #[repr(C)]
//! struct Counter { hits: u64 }
//!
//! let dir = tempfile::tempdir().unwrap();
//! let pool = Pool::create(dir.path().join("counter.pool"), "counter", 8 << 20, &PoolConfig::default())?;
//! pool.transaction(|tx| {
//!     let root: PPtr<Counter> = tx.root()?;
//!     let c = tx.read(root)?;
//!     tx.write(root, &Counter { hits: c.hits + 1 })
//! })?;
//! let root = pool.root::<Counter>()?.expect("created above");
//! assert_eq!(pool.read(root)?.hits, 1);
//! pool.close()?;
//! # Ok::<(), rewind::Error>(())
//! ```
//!
//! The public surface is what a program needs: [`Pool`], [`Tx`], [`PPtr`],
//! the configuration types, [`Error`], and [`inspect`] (what `rewind info`
//! and `rewind check` use). The engine's layers (see `docs/design.md`) are
//! private; the crash explorer, the simulated domain and the mutation hooks
//! are compiled in only with the `testing` feature, for rewind's own tests
//! and command-line tool.

#![warn(missing_docs, unsafe_op_in_unsafe_fn)]
// Unsafe code only where an `#[allow(unsafe_code)]` names the module:
// `persist::{mapping, pmem}` (the mapping, flush and fence instructions)
// and `format::pptr` (`Pod` for the persistent pointer).
#![deny(unsafe_code)]

#[cfg(feature = "testing")]
pub mod alloc;
#[cfg(not(feature = "testing"))]
mod alloc;
#[cfg(feature = "testing")]
pub mod crashtest;
mod engine;
mod error;
#[cfg(feature = "testing")]
pub mod format;
#[cfg(not(feature = "testing"))]
mod format;
pub mod inspect;
#[cfg(feature = "testing")]
pub mod log;
#[cfg(not(feature = "testing"))]
mod log;
mod padded;
#[cfg(feature = "testing")]
pub mod persist;
mod policy;
// The simulator's crash hooks, the raw domain and the ordering-point
// registry serve the testing feature's explorer and benchmarks.
#[cfg(not(feature = "testing"))]
#[allow(dead_code)]
mod persist;
#[cfg(feature = "testing")]
pub mod pool;
#[cfg(not(feature = "testing"))]
mod pool;
#[cfg(feature = "testing")]
pub mod recovery;
#[cfg(not(feature = "testing"))]
mod recovery;
mod tx;

pub use alloc::catalog::NamedRoot;
pub use alloc::{AllocStats, ClassStats};
/// Re-exported so `Pod`/`Zeroable` derives can name it; a crate deriving
/// them needs `bytemuck = { version = "1", features = ["derive"] }` itself,
/// because the derive macros refer to `::bytemuck`.
pub use bytemuck;
pub use bytemuck::{Pod, Zeroable};
pub use engine::locks::WriteWatch;
pub use engine::write_back::WriteBack;
pub use error::{Error, Result};
/// The most commit lanes a pool has ([`PoolConfig::lanes`]).
pub use format::layout::MAX_LANES;
/// The smallest pool [`Pool::create`] accepts, in bytes (1 MiB), and the
/// bound every pool's maximum size stays below (256 TiB).
pub use format::layout::{MAX_POOL, MIN_POOL};
pub use format::{Pointee, TypeFingerprint, Typed};
pub use log::{LogStats, LogVariant};
pub use persist::{Backend, Counters, NvmLatency};
pub use pool::{OpenOptions, PPtr, Pool, PoolConfig};
pub use recovery::RecoveryReport;
pub use tx::{Policy, Reader, Savepoint, Tx};
