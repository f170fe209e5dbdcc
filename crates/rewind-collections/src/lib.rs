//! Crash-consistent collections kept in a [`rewind`] pool: an ordered map
//! (a B+-tree, [`BTreeMap`]), a hash map ([`HashMap`]), a growable array
//! ([`Vec`]), a doubly-linked list ([`List`]) and a variable-length byte
//! string ([`Blob`]), with [`FixedBytes`] for bounded byte-string keys and
//! values; built only on rewind's public API, without unsafe code.
//!
//! A collection lives in the pool as a small header block; the handle a
//! program holds is that block's offset and nothing else, so a handle is
//! `Copy`, costs nothing to rebuild ([`BTreeMap::from_ptr`]), and its
//! pointer ([`BTreeMap::as_ptr`]) can be stored in the program's root
//! object to find the collection again after the pool is reopened.
//!
//! Every change goes through a [`rewind::Tx`]: each mutating method takes
//! `&mut Tx`, so changes to several collections (and to the program's own
//! objects) in one transaction commit or roll back together, and survive a
//! crash the same way. Read-only methods take `&Pool` and need no
//! transaction; `*_tx` variants read through a transaction and see its
//! uncommitted writes.
//!
//! ```
//! use rewind::{Pool, PoolConfig};
//! use rewind_collections::{BTreeMap, Vec};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let pool = Pool::create(dir.path().join("c.pool"), "c", 8 << 20, &PoolConfig::default())?;
//! let (map, log) = pool.transaction(|tx| {
//!     let map = BTreeMap::<u64, u64>::create(tx)?;
//!     let log = Vec::<u64>::create(tx)?;
//!     Ok::<_, rewind_collections::Error>((map, log))
//! })?;
//! // One transaction changes both collections, or neither.
//! pool.transaction(|tx| {
//!     map.insert(tx, 7, 49)?;
//!     log.push(tx, 7)
//! })?;
//! assert_eq!(map.get(&pool, &7)?, Some(49));
//! assert_eq!(log.len(&pool)?, 1);
//! # Ok::<(), rewind_collections::Error>(())
//! ```
//!
//! **Isolation**: every operation that takes a transaction locks its
//! collection in the pool's lock table (exclusive for changes, shared for
//! the `_tx` reads and scans) until the transaction commits or rolls back
//! (strict two-phase locking), so threads may share one handle with no lock
//! of their own: the result is that of some serial order of the committed
//! transactions (`examples/threads.rs`). A deadlock between two
//! transactions that lock collections in opposite orders is
//! `Error::Pool(rewind::Error::Deadlock { .. })`, rolled back and
//! retryable. Reads through `&Pool` (`get(&pool, ..)`, `iter(&pool)`) take
//! no lock and see the committed state of the instant: for a consistent
//! view beside writers, read through a transaction (`docs/collections.md`,
//! "Isolation").
//!
//! **Keys and values** are `Pod` types, stored as their in-memory bytes
//! (as [`rewind::Tx::write`] stores them): a pool is read back by the same
//! platform that wrote it. The B+-tree's implement [`Stored`]: a stable
//! name, recorded with the size and alignment in the tree's header, so a
//! tree reopened under other types is [`Error::TypeMismatch`] naming both.
//! The hash map compares and hashes keys by their bytes. The B+-tree
//! orders keys by `Ord`, which must be a total order that does not change
//! between runs and under which equal keys have equal bytes. The B+-tree
//! also stores `String` and `Vec<u8>` keys and values of any length
//! ([`Storable`]: inline up to 36 bytes, in a block of their own beyond,
//! ordered by their bytes, looked up by `&str` / `&[u8]`); bounded strings
//! kept whole in the slot are [`FixedBytes<N>`] (longer input is
//! [`Error::TooLong`]).
//!
//! **The B+-tree is built for persistent memory**: its leaves keep their
//! entries in unsorted slots with a validity bitmap and one-byte
//! fingerprints (wB+-tree, FPTree), so an insert writes one slot and one
//! range of the leaf's first line, and removals merge and rebalance nodes.
//!
//! **B+-tree splits** are part of the inserting transaction under the redo
//! policies (the default: one commit group, one fence, an abort discards
//! the split too), and nested top actions under the undo policies, where
//! an aborted insert may leave its split behind (the same entries, one
//! more node per split level, kept and reused by the tree); see
//! [`BTreeMap`]'s module notes.
//!
//! The layouts, byte by byte, the space rules, nested top actions,
//! isolation and the error cases are in `docs/collections.md`.

#![warn(missing_docs)]
#![deny(unsafe_code)]

mod blob;
mod btree;
mod bytes;
mod checked;
mod error;
mod hash;
mod list;
mod mem;
mod storable;
mod types;
mod vec;

pub use blob::Blob;
pub use btree::{BTreeMap, Iter, MAX_FANOUT, MIN_FANOUT};
pub use bytes::{FixedBytes, MAX_FIXED_BYTES};
pub use error::{Error, Result};
pub use hash::{HashIter, HashMap};
pub use list::{Cursor, Iter as ListIter, List};
pub use storable::Storable;
pub use types::Stored;
pub use vec::Vec;
