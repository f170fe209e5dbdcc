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
//! use rewind::{Pool, PoolConfig, Backend, PPtr, Pod, Zeroable};
//!
//! #[derive(Clone, Copy, Pod, Zeroable)]
//! #[repr(C)]
//! struct Counter { hits: u64 }
//!
//! let cfg = PoolConfig { backend: Backend::Sim, ..PoolConfig::default() };
//! let pool = Pool::create_sim("counter", 8 << 20, &cfg)?;
//! pool.transaction(|tx| {
//!     let root: PPtr<Counter> = tx.root()?;
//!     let c = tx.read(root)?;
//!     tx.write(root, &Counter { hits: c.hits + 1 })
//! })?;
//! let root = pool.root::<Counter>()?.expect("created above");
//! assert_eq!(pool.read(root)?.hits, 1);
//! # Ok::<(), rewind::Error>(())
//! ```
//!
//! Layers, each calling only the one below (see `docs/architecture.md`):
//! [`tx`] → [`log`] and [`alloc`] → [`pool`] → [`persist`].

#![warn(missing_docs, unsafe_op_in_unsafe_fn)]

pub mod alloc;
pub mod crashtest;
pub mod error;
pub mod inspect;
pub mod log;
pub mod persist;
pub mod pool;
pub mod tx;

pub use alloc::AllocStats;
/// Re-exported so `Pod`/`Zeroable` derives can name it; a crate deriving
/// them needs `bytemuck = { version = "1", features = ["derive"] }` itself,
/// because the derive macros refer to `::bytemuck`.
pub use bytemuck;
pub use bytemuck::{Pod, Zeroable};
pub use error::{Error, Result};
pub use log::LogVariant;
pub use persist::{Backend, Counters};
pub use pool::{OpenOptions, PPtr, Pool, PoolConfig};
pub use tx::{Policy, RecoveryReport, Tx};
