//! Unlogged, unfenced writes into memory a program allocated, and the one
//! fence that makes them durable: NVWAL's lazy synchronization (§4.2).
//!
//! A transaction logs what it changes so that a crash can undo or redo it.
//! Some programs keep their own crash-consistent format inside blocks they
//! allocated through transactions: NVWAL's log of SQLite frames appends
//! records behind a checksummed commit mark, and recovery discards whatever
//! the checksum does not cover. For them a log of the log would only double
//! the bytes written. [`Pool::write_unlogged`] copies bytes with
//! non-temporal stores (they bypass the cache, so no flush is needed) and
//! no fence; [`Pool::fence`] then makes every such copy of the calling
//! thread durable at once: one fence per commit, however many records.
//!
//! Nothing orders these stores against each other before the fence: a crash
//! can leave any subset of their lines. The program's format must detect
//! that (a checksum over the records, checked before anything trusts them).

use crate::error::Error;
use crate::persist::sites;

use super::Pool;

impl Pool {
    /// Copies `bytes` to the pool offset `off` with non-temporal stores and
    /// no log record and no fence: they are durable after the calling
    /// thread's next [`fence`](Self::fence) (or any fence it issues, such
    /// as a commit's), and a crash before that can leave any subset of
    /// their cache lines.
    ///
    /// The range must lie inside one allocated block
    /// ([`Error::NotAllocated`] otherwise, [`Error::NullPointer`] at 0,
    /// [`Error::NotInHeap`] outside the heap), one the program allocated
    /// and no transaction is writing: the pool does not check ownership,
    /// and a transaction's rollback does not undo these bytes.
    /// Where a commit group not yet drained covers the range (a block a
    /// recent redo transaction allocated, whose zeroing is in its group,
    /// or wrote), the ring is drained first, with its own fence, so that
    /// no replay can later store over these bytes.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use rewind::{Pool, PoolConfig};
    /// let pool = Pool::create(dir.path().join("s.pool"), "doc", 4 << 20, &PoolConfig::default())?;
    /// let block = pool.transaction(|tx| tx.alloc_bytes(256))?;
    /// // The new block's zeroing belongs to its commit group until the
    /// // ring is drained: a store over it first drains (one more fence).
    /// pool.sync()?;
    /// let before = pool.counters();
    /// pool.write_unlogged(block, &[7u8; 100])?;
    /// pool.fence()?;
    /// let c = pool.counters().since(&before);
    /// assert_eq!(c.fences, 1);
    /// assert!(c.nt_lines >= 2); // 100 bytes: two or three lines
    /// let mut back = [0u8; 100];
    /// pool.read_bytes(block, &mut back)?;
    /// assert_eq!(back, [7u8; 100]);
    /// # Ok::<(), rewind::Error>(())
    /// ```
    pub fn write_unlogged(&self, off: u64, bytes: &[u8]) -> Result<(), Error> {
        self.eng.usable()?;
        // Inside one allocated block, as every read and write through the
        // pool: a stale pointer (a block freed, its chunk since taken by
        // the log growing into the heap) would copy bytes over log records
        // and list words, and the pool would not open again.
        // The catalog's block too: the engine's own.
        crate::alloc::check_write(&self.eng.dom, &self.eng.hdr.layout, off, bytes.len() as u64)?;
        // No committed value waiting in the write cache (redo-async), and
        // no commit group a recovery could replay (redo), may later be
        // written over these bytes.
        self.eng.before_store(off, bytes.len() as u64)?;
        self.eng.dom.store_nt(off, bytes)
    }

    /// One fence: every earlier [`write_unlogged`](Self::write_unlogged)
    /// (and flush) of the calling thread is durable when it returns.
    pub fn fence(&self) -> Result<(), Error> {
        self.eng.usable()?;
        let r = self.eng.dom.fence_at(sites::STREAM_FENCE);
        match &r {
            Ok(()) => self.eng.fenced_by_me(),
            Err(e) => self.eng.poison(e),
        }
        r
    }
}
