//! Transactions (REWIND §4): begin, write, alloc, free, commit, rollback.
//!
//! A transaction logs a physical UPDATE record (old and new bytes) before
//! each in-place store — write-ahead logging with the log itself in
//! persistent memory — and an ALLOC or DELETE record before each change of
//! allocation state. Writes into memory the same transaction allocated need
//! no record: if the transaction does not commit, the block is freed.
//!
//! * **Force**: in-place stores are flushed as they are made, so commit is
//!   one fence (folded into the END record's append) and the transaction's
//!   records are cleared at once, END last. Recovery is analysis + undo.
//! * **No-force**: in-place stores are left to the cache; commit persists
//!   only the END record, and records stay until a checkpoint. Recovery is
//!   analysis + redo + undo.
//!
//! With the Batch log a transaction holds up to a group of 8 records and
//! their in-place stores in volatile memory and performs the stores right
//! after the group's single fence; [`Tx::read`] sees the pending values.
//!
//! Rollback writes a ROLLBACK record, then a CLR before each undo, then END,
//! so a crash during rollback resumes it (§4.4). Their log space is
//! reserved as the transaction logs (see `log`), so rollback never fails
//! for want of log space.
//!
//! **Doomed transactions.** A call that fails after it may have changed
//! something (the log could not grow because the heap is full, an I/O
//! error) dooms the transaction: later writes return the same error, and
//! whatever the closure returns, the transaction rolls back and
//! [`Pool::transaction`](crate::Pool::transaction) returns that error. Calls refused before they
//! change anything (a write outside the heap, a bad free, an allocation
//! the heap cannot satisfy) do not doom it; the closure may carry on.
//!
//! **A commit that fails** for want of log space rolls back. One that fails
//! otherwise (an I/O error in a fence, say) may have reached its commit
//! point, so it cannot be rolled back: the pool handle is poisoned (every
//! later call returns [`Error::Poisoned`]) and reopening the pool lets
//! recovery finish or undo the transaction.
//!
//! **Isolation.** [`Tx::lock`] and [`Tx::lock_shared`] take a lock on a
//! pool object in the pool's lock table (`engine/locks.rs`) and hold it
//! until the transaction has committed or rolled back: strict two-phase
//! locking, so transactions that lock what they touch are serializable.
//! `rewind-collections` locks each collection this way. A deadlock or a
//! wait past the pool's lock timeout is an error that dooms the
//! transaction. Memory a transaction writes without locking it is not
//! protected (REWIND §4.7): two transactions writing the same bytes at
//! once must then be kept apart by the program.

mod access;
pub(crate) mod atomic;
mod control;
mod handle;
mod named;

use bytemuck::Pod;
use smallvec::SmallVec;

use crate::engine::locks::Mode;
use crate::engine::Engine;
use crate::error::Error;
use crate::format::group::Bits;
use crate::format::layout::{MAX_RECORD_DATA, META_ROOT_END, META_ROOT_OFF};
use crate::format::PPtr;
use crate::log::{Draft, Kind};
use crate::persist::sites;
use handle::{TxLog, UndoKind};

pub use crate::format::Policy;
pub use access::Reader;
pub use control::Savepoint;

/// An open transaction. Obtained from [`Pool::transaction`](crate::Pool::transaction); every write to
/// the pool goes through it.
pub struct Tx<'p> {
    eng: &'p Engine,
    log: TxLog,
    /// The error that doomed the transaction.
    doomed: Option<Error>,
    /// The nested top action running (0: none), and the last one begun.
    frame: u64,
    frames: u64,
    /// Length of the undo list when the running nested top action began.
    frame_start: usize,
    /// The bytes the frames enclosing the running nested top action wrote
    /// (`enclosing`), built at its first write.
    enclosing: Option<Box<Enclosing>>,
    /// The locks held, released when the transaction has ended (most
    /// transactions take one or two: no allocation for them).
    locks: SmallVec<[(u64, Mode); 4]>,
    /// Blocks found allocated by [`Tx::check_access`] (see `access`).
    verified: access::Verified,
    /// The nested top action running that commits as a group of the
    /// commit ring (`control`): begun with nothing else in the
    /// transaction.
    flat: Option<u64>,
    /// A savepoint was taken: allocations and frees take the bucket log.
    bucket_allocs: bool,
    /// Blocks this transaction claimed to free (`Allocator::claim_free`)
    /// or allocated outside the ring (`Allocator::mark_allocated_for`), their
    /// claims dropped when it ends.
    claimed: Vec<u64>,
}

/// Whether an error leaves the transaction usable: only those raised by
/// checks made before anything was changed.
fn dooms(e: &Error) -> bool {
    !matches!(
        e,
        Error::NotInHeap { .. }
            | Error::NullPointer { .. }
            | Error::NotAllocated { .. }
            | Error::TypeMismatch { .. }
            | Error::InvalidFree { .. }
            | Error::RootMismatch { .. }
            | Error::InvalidConfig { .. }
            | Error::OutOfBounds { .. }
            | Error::OutOfMemory { .. }
            | Error::InvalidSavepoint { .. }
            | Error::Aborted
            | Error::TxMisuse(_)
    )
}

/// The bytes that the undo list's UPDATE records `undo[..covered]` restore
/// on a rollback, by cache line: what the frames enclosing a nested top
/// action wrote before it began (see [`Tx::refuse_enclosing_bytes`]).
/// Kept across the transaction's actions and extended, so that a
/// transaction of many actions (a tree's splits under the undo policies)
/// reads each record once; valid while the list's first `covered` entries
/// are still those indexed (the last one's lsn, unique, tells).
#[derive(Default)]
struct Enclosing {
    covered: usize,
    last_lsn: u64,
    lines: rustc_hash::FxHashMap<u64, SmallVec<[(u64, u64); 2]>>,
}

/// Why a nested top action's write is refused.
const ENCLOSING_WRITE: &str = "a nested top action cannot write bytes its enclosing transaction \
     wrote before it began: a rollback of the enclosing transaction would restore their old \
     value over the action's, which stays";

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        // The claims on blocks it freed dropped while it still holds its
        // locks: a transaction that takes a lock it released next may
        // free one of those blocks (one this transaction's rollback kept
        // allocated), and must not find it claimed.
        if !self.claimed.is_empty() {
            self.eng.alloc.unclaim(&self.claimed, self.log.id);
        }
        // Strict two-phase locking: released only now, after the commit or
        // the rollback (both run before it drops).
        if !self.locks.is_empty() {
            let keys = self.locks.iter().map(|&(k, _)| k);
            self.eng.locks.release_all(self.log.id, keys);
        }
        self.verified.keep();
        self.log.recycle();
    }
}

impl<'p> Tx<'p> {
    #[inline(always)]
    pub(crate) fn new(eng: &'p Engine, id: u64) -> Tx<'p> {
        Tx {
            eng,
            log: TxLog::new(eng, id),
            doomed: None,
            frame: 0,
            frames: 0,
            frame_start: 0,
            enclosing: None,
            locks: SmallVec::new(),
            verified: access::Verified::resume(eng),
            flat: None,
            bucket_allocs: false,
            claimed: Vec::new(),
        }
    }

    /// Locks the object at `ptr` for this transaction alone (readers and
    /// writers of other transactions that lock it wait) until the
    /// transaction ends. Taking a lock this transaction holds is free; a
    /// shared lock it holds is upgraded.
    ///
    /// A deadlock ([`Error::Deadlock`]) or a wait past the pool's lock
    /// timeout ([`Error::LockTimeout`]) dooms the transaction: it rolls
    /// back, releasing its locks, and `Pool::transaction` returns the
    /// error, so the program can retry (after a deadlock, once the thread
    /// has backed off for a moment, longer with each refusal in a row, so
    /// that retries at once converge). A null `ptr` is
    /// [`Error::NullPointer`], one outside the heap [`Error::NotInHeap`].
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("lock.pool");
    /// use rewind::{Pool, PoolConfig};
    /// let pool = Pool::create(&path, "doc", 4 << 20, &PoolConfig::default())?;
    /// let counter = pool.transaction(|tx| tx.root::<u64>())?;
    /// std::thread::scope(|s| {
    ///     for _ in 0..4 {
    ///         s.spawn(|| {
    ///             for _ in 0..100 {
    ///                 pool.transaction(|tx| {
    ///                     tx.lock(counter)?; // read-modify-write, isolated
    ///                     let v = tx.read(counter)?;
    ///                     tx.write(counter, &(v + 1))
    ///                 })
    ///                 .unwrap();
    ///             }
    ///         });
    ///     }
    /// });
    /// assert_eq!(pool.read(counter)?, 400);
    /// # Ok::<(), rewind::Error>(())
    /// ```
    pub fn lock<T>(&mut self, ptr: PPtr<T>) -> Result<(), Error> {
        self.lockable(ptr.offset())?;
        let r = self.take_lock(ptr.offset(), Mode::Exclusive);
        self.check(r)
    }

    /// Locks the object at `ptr` for reading: other transactions may hold
    /// it shared too, none exclusively, until this transaction ends.
    /// Errors as [`Tx::lock`].
    pub fn lock_shared<T>(&mut self, ptr: PPtr<T>) -> Result<(), Error> {
        self.lockable(ptr.offset())?;
        let r = self.take_lock(ptr.offset(), Mode::Shared);
        self.check(r)
    }

    /// A program's lock names an object of the heap: null is
    /// [`Error::NullPointer`], an offset outside the heap
    /// [`Error::NotInHeap`] (the transaction is not doomed by either).
    fn lockable(&self, off: u64) -> Result<(), Error> {
        if off == 0 {
            return Err(Error::NullPointer { len: 0 });
        }
        self.eng.hdr.layout.check_in_heap(off, 1)
    }

    /// Takes lock `key` (a heap object [`lockable`](Self::lockable)
    /// checked, or a word of the meta page) in `mode`.
    fn take_lock(&mut self, key: u64, mode: Mode) -> Result<(), Error> {
        self.live()?;
        let slot = self.locks.iter().position(|&(k, _)| k == key);
        let held = slot.map(|i| self.locks[i].1);
        let now = self.eng.locks.acquire(self.log.id, key, mode, held)?;
        match slot {
            Some(i) => self.locks[i].1 = now,
            None => self.locks.push((key, now)),
        }
        Ok(())
    }

    /// Records the error that dooms the transaction, if it does.
    fn check<T>(&mut self, r: Result<T, Error>) -> Result<T, Error> {
        if let Err(e) = &r {
            if dooms(e) && self.doomed.is_none() {
                self.doomed = Some(e.clone());
            }
        }
        r
    }

    /// Whether the transaction was refused a lock for
    /// [`Error::Deadlock`] (it rolls back).
    pub(crate) fn deadlocked(&self) -> bool {
        matches!(self.doomed, Some(Error::Deadlock { .. }))
    }

    /// The doom error, if the transaction is doomed.
    fn live(&self) -> Result<(), Error> {
        match &self.doomed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// This transaction's id.
    pub fn id(&self) -> u64 {
        self.log.id
    }

    /// The pool's policy. Under [`Policy::Redo`] and [`Policy::RedoAsync`]
    /// a transaction's writes wait in its write set until it commits, and
    /// an abort (or a rollback to a savepoint) discards them: nothing in
    /// place is undone. A structure change that other transactions cannot
    /// see before the commit (a B+-tree split under the collection's
    /// exclusive lock) can then be part of the transaction instead of a
    /// nested top action of its own, which would cost a commit of its own.
    pub fn policy(&self) -> Policy {
        self.eng.policy
    }

    /// A number that changes whenever a block of this pool becomes free
    /// (a free by any transaction, an undone or aborted allocation) and
    /// that no other
    /// pool of the process shows: while it stays the same, every block
    /// found allocated is still allocated, to the same owner. For caches
    /// of checks made on blocks: `rewind-collections` checks a header's
    /// type tags once per epoch, not once per operation.
    #[inline]
    pub fn free_epoch(&self) -> u64 {
        self.eng.alloc.free_epoch()
    }

    /// The size the pool may grow to, as [`Pool::max_size`](crate::Pool::max_size): no count of
    /// blocks stored in it can exceed what that many bytes hold (a bound
    /// for a walk that a damaged length would otherwise set).
    pub fn max_size(&self) -> u64 {
        self.eng.hdr.layout.pool_size
    }

    /// Reads a value, seeing this transaction's own writes.
    pub fn read<T: Pod>(&mut self, p: PPtr<T>) -> Result<T, Error> {
        let mut v = T::zeroed();
        self.read_bytes(p.offset(), bytemuck::bytes_of_mut(&mut v))?;
        Ok(v)
    }

    /// Reads bytes, seeing this transaction's own writes.
    ///
    /// Inline only what most reads do (a tree's descent): a block already
    /// verified, lines the write set's filter does not hold, the copy. The
    /// rest is a call, so that a caller reading a node a few bytes at a
    /// time does not save and restore the registers of the whole check at
    /// every read.
    #[inline]
    pub fn read_bytes(&mut self, off: u64, buf: &mut [u8]) -> Result<(), Error> {
        let len = buf.len() as u64;
        let verified = self.verified.holds(off, len);
        if verified && !self.log.may_overlay(off, len) {
            return self.eng.read_committed(off, buf);
        }
        self.read_bytes_rest(off, buf, verified)
    }

    /// [`read_bytes`](Self::read_bytes) past its common case: the block
    /// checked on media (`verified` false), or the write set laid over the
    /// bytes read (`verified` true: the filter may hold one of their lines).
    #[inline(never)]
    fn read_bytes_rest(&mut self, off: u64, buf: &mut [u8], verified: bool) -> Result<(), Error> {
        if !verified {
            self.check_access_slow(off, buf.len() as u64, false)?;
        }
        self.eng.read_committed(off, buf)?;
        match verified {
            true => self.log.overlay_pending(off, buf),
            false => self.log.overlay(off, buf),
        }
        Ok(())
    }

    /// Writes a value (logged; undone if the transaction does not commit).
    pub fn write<T: Pod>(&mut self, p: PPtr<T>, v: &T) -> Result<(), Error> {
        self.write_bytes(p.offset(), bytemuck::bytes_of(v))
    }

    /// Writes bytes at a pool offset inside the heap.
    pub fn write_bytes(&mut self, off: u64, bytes: &[u8]) -> Result<(), Error> {
        self.check_access(off, bytes.len() as u64)?;
        self.live()?;
        // (`Ok` made here rather than the write's result passed on: a
        // move of the whole `Error` on every write.)
        match self.write_logged(off, bytes) {
            Ok(()) => Ok(()),
            r => self.check(r),
        }
    }

    /// `Ok` when `[off, off+len)` lies inside one block allocated now:
    /// on media, or allocated by this transaction, and not freed by it
    /// (see `alloc::check_access`; refused before anything is changed).
    /// A block found allocated, on media or by this transaction, is
    /// remembered until the transaction frees something or undoes an
    /// allocation (`access`): later accesses inside it read no allocator
    /// metadata.
    /// For a write (the only caller): the catalog's block is never
    /// remembered, and a write into it is refused (see
    /// `alloc::catalog_write`; the catalog's own writes go through
    /// [`write_catalog`](Self::write_catalog)).
    #[inline]
    fn check_access(&mut self, off: u64, len: u64) -> Result<(), Error> {
        if self.verified.holds(off, len) {
            return Ok(());
        }
        self.check_access_slow(off, len, true)
    }

    fn check_access_slow(&mut self, off: u64, len: u64, write: bool) -> Result<(), Error> {
        let inside =
            |&&(s, n): &&(u64, u64)| off >= s && off.checked_add(len).is_some_and(|e| e <= s + n);
        let b = &self.log.blocks;
        match crate::alloc::access_block(&self.eng.dom, &self.eng.hdr.layout, off, len) {
            Err(e @ Error::NotAllocated { .. }) => {
                // A block this transaction allocated and its commit group
                // (or its ALLOC record, just after) has yet to mark on
                // media: remembered like one found allocated there, so
                // the reads of a block just allocated (a new node read
                // back by the next insert) take the fast path. Freeing it
                // or undoing its allocation forgets every block, and an
                // abort releases it with a new free epoch (see `access`).
                let mine = b.fresh.iter().chain(&b.ring_allocs).find(inside).copied();
                match mine {
                    Some((start, size)) => {
                        self.verified.insert(off, start, size);
                        Ok(())
                    }
                    None => Err(e),
                }
            }
            Ok(_) if b.freed.iter().any(|&(s, n)| off >= s && off < s + n) => {
                Err(Error::NotAllocated {
                    offset: off,
                    len,
                    reason: "a block this transaction freed",
                })
            }
            Ok((start, _)) if crate::alloc::is_catalog(&self.eng.dom, start)? => match write {
                // Not remembered: every access to it comes here.
                true => Err(crate::alloc::catalog_write(off, len)),
                false => Ok(()),
            },
            Ok((start, size)) => {
                self.verified.insert(off, start, size);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Writes bytes of the catalog of named roots (`named`), which
    /// [`write_bytes`](Self::write_bytes) refuses: logged like user data.
    pub(crate) fn write_catalog(&mut self, off: u64, bytes: &[u8]) -> Result<(), Error> {
        self.live()?;
        let r = self.write_logged(off, bytes);
        self.check(r)
    }

    /// Reads meta-page words (the root's and catalog's), seeing this
    /// transaction's own writes: they lie in no allocated block.
    pub(crate) fn read_meta(&mut self, off: u64, buf: &mut [u8]) -> Result<(), Error> {
        self.meta_range(off, buf.len() as u64)?;
        self.eng.read_committed(off, buf)?;
        self.log.overlay(off, buf);
        Ok(())
    }

    /// Writes meta-page words (the root's and catalog's), logged like
    /// user data.
    pub(crate) fn write_meta(&mut self, off: u64, bytes: &[u8]) -> Result<(), Error> {
        self.meta_range(off, bytes.len() as u64)?;
        self.live()?;
        let r = self.write_logged(off, bytes);
        self.check(r)
    }

    fn meta_range(&self, off: u64, len: u64) -> Result<(), Error> {
        if off < META_ROOT_OFF || off.checked_add(len).is_none_or(|e| e > META_ROOT_END) {
            return Err(Error::OutOfBounds {
                offset: off,
                len,
                size: META_ROOT_END,
            });
        }
        Ok(())
    }

    #[inline(always)]
    fn write_logged(&mut self, off: u64, bytes: &[u8]) -> Result<(), Error> {
        if self.frame != 0 {
            self.refuse_enclosing_bytes(off, bytes.len() as u64)?;
        }
        let end = off + bytes.len() as u64;
        let fresh = &self.log.blocks.fresh;
        if fresh.iter().any(|&(s, n)| off >= s && end <= s + n) {
            // Memory this transaction allocated: no undo needed (the ALLOC
            // record frees it); flushed now so commit's fence covers it.
            let d = &self.eng.dom;
            self.eng.before_store(off, bytes.len() as u64)?;
            d.store(off, bytes)?;
            return d.flush_at(off, bytes.len() as u64, sites::TX_FRESH_FLUSH);
        }
        if bytes.len() as u64 <= MAX_RECORD_DATA {
            // Most writes: one piece.
            return self.log.write(self.eng, off, bytes);
        }
        for (i, piece) in bytes.chunks(MAX_RECORD_DATA as usize).enumerate() {
            self.log
                .write(self.eng, off + (i as u64) * MAX_RECORD_DATA, piece)?;
        }
        Ok(())
    }

    /// `TxMisuse` for a write inside a nested top action of bytes that a
    /// frame enclosing it wrote before it began (they are in the undo list
    /// below the action's start): the action stays when the enclosing
    /// transaction rolls back, and that rollback, physical, would restore
    /// the bytes' value from before the enclosing write over the action's
    /// (a collection changed by both was left corrupt). Refused before
    /// anything changes; the action's closure sees the error, and the
    /// transaction goes on. An action that commits as its own group
    /// (`flat`) has no enclosing writes.
    #[cold]
    #[inline(never)]
    fn refuse_enclosing_bytes(&mut self, off: u64, len: u64) -> Result<(), Error> {
        if self.flat == Some(self.frame) || self.frame_start == 0 || len == 0 {
            return Ok(());
        }
        let undo = &self.log.undo[..self.frame_start.min(self.log.undo.len())];
        let e = self.enclosing.get_or_insert_with(Box::default);
        let same_prefix =
            e.covered <= undo.len() && (e.covered == 0 || undo[e.covered - 1].lsn == e.last_lsn);
        if !same_prefix {
            **e = Enclosing::default();
        }
        for u in &undo[e.covered..] {
            if let UndoKind::Update { target, len, .. } = u.what {
                if len > 0 {
                    for l in target / 64..=(target + len - 1) / 64 {
                        e.lines.entry(l).or_default().push((target, target + len));
                    }
                }
            }
        }
        e.covered = undo.len();
        e.last_lsn = undo.last().map_or(0, |u| u.lsn);
        let end = off.saturating_add(len);
        let hit = (off / 64..=(end - 1) / 64).any(|l| {
            e.lines
                .get(&l)
                .is_some_and(|rs| rs.iter().any(|&(s, t)| s < end && off < t))
        });
        match hit {
            true => Err(Error::TxMisuse(ENCLOSING_WRITE)),
            false => Ok(()),
        }
    }

    /// Allocates a zeroed `T`. A zero-sized `T` is
    /// [`Error::InvalidConfig`] (an allocation has at least one byte),
    /// and the transaction goes on.
    pub fn alloc<T: Pod>(&mut self) -> Result<PPtr<T>, Error> {
        self.alloc_array::<T>(1)
    }

    /// Allocates a zeroed array of `n` `T`s. An empty array (`n` = 0 or
    /// a zero-sized `T`) is [`Error::InvalidConfig`], one whose size
    /// overflows `u64` [`Error::OutOfMemory`]; neither dooms the
    /// transaction.
    pub fn alloc_array<T: Pod>(&mut self, n: u64) -> Result<PPtr<T>, Error> {
        let size = (std::mem::size_of::<T>() as u64)
            .checked_mul(n)
            .ok_or(Error::OutOfMemory {
                requested: u64::MAX,
            })?;
        Ok(PPtr::from_offset(self.alloc_bytes(size)?))
    }

    /// Allocates `size` zeroed bytes; returns the pool offset. `size` 0 is
    /// [`Error::InvalidConfig`], more than the pool can hold
    /// [`Error::OutOfMemory`]; neither dooms the transaction.
    pub fn alloc_bytes(&mut self, size: u64) -> Result<u64, Error> {
        self.live()?;
        let r = self.alloc_logged(size);
        self.check(r)
    }

    /// Allocates `size` bytes without zeroing them: they hold whatever an
    /// earlier use of the memory left, so the caller must never read
    /// them as its own until it has written them. For a log that writes
    /// a fresh block before it reads it and can tell its own records from
    /// stale ones (rewind-sqlite's blocks): zeroing 8 KiB would write 128
    /// lines the log never needs. Allocation, rollback and recovery are
    /// those of [`Tx::alloc_bytes`].
    pub fn alloc_bytes_unzeroed(&mut self, size: u64) -> Result<u64, Error> {
        self.live()?;
        let r = self.alloc_logged_with(size, false);
        self.check(r)
    }

    fn alloc_logged(&mut self, size: u64) -> Result<u64, Error> {
        self.alloc_logged_with(size, true)
    }

    fn alloc_logged_with(&mut self, size: u64, zeroed: bool) -> Result<u64, Error> {
        let eng = self.eng;
        if self.in_ring(size) {
            // Reserved in the volatile allocator only: the commit group's
            // bits entry zeroes the block and sets its bit, at write-back
            // and at replay, so writes into it go to the write set like
            // any other (a block's data stored in place before the commit
            // could be torn by a crash during the commit's fence, which
            // makes the group whole). The zeros stored now, never written
            // back, are what the transaction reads of it.
            let (off, bsize) = eng.alloc.reserve(&eng.dom, size)?;
            self.log.blocks.ring_allocs.push((off, bsize));
            if zeroed {
                zero_unflushed(eng, off, bsize)?;
            } else {
                self.log.blocks.ring_unzeroed.push(off);
            }
            return Ok(off);
        }
        self.settle_ring()?;
        self.log.settle(eng)?;
        let (off, bsize) = match eng.alloc.reserve(&eng.dom, size) {
            // The log may hold heap chunks with records that finished
            // transactions no longer need (redo-async: committed groups
            // waiting for write-back; no-force: records a checkpoint
            // clears, a rolled-back transaction starting none): given
            // back, as for a full log in `TxLog::append_as` (nothing of
            // this allocation is written yet). A 2 MiB pool ran out of
            // memory with a hash map of 1,000 entries under redo-async,
            // and for 1 MiB under no-force after a transaction that grew
            // the log into the heap rolled back. (A growable pool whose
            // file system is full tries its growth first: `NoSpaceToGrow`
            // is no room too.)
            Err(Error::OutOfMemory { .. } | Error::NoSpaceToGrow { .. })
                if eng.give_back_log_space(false)? =>
            {
                eng.alloc.reserve(&eng.dom, size)?
            }
            r => r?,
        };
        let draft = Draft::block(self.log.id, Kind::Alloc, off, bsize);
        if let Err(e) = self.log.append(eng, &[draft]) {
            eng.alloc.release(off, bsize);
            return Err(e);
        }
        self.log.blocks.fresh.push((off, bsize));
        // Allocated on media before the commit: no other transaction may
        // free it until this one ends (its rollback frees it).
        self.claimed.push(off);
        eng.alloc
            .mark_allocated_for(&eng.dom, off, bsize, self.log.id)?;
        self.log.targets.extend(eng.alloc.mark_range(off, bsize));
        if zeroed {
            zero(eng, off, size)?;
        }
        Ok(off)
    }

    /// Frees a block allocated earlier (by this or a committed transaction).
    /// The block becomes reusable when this transaction commits. A block
    /// another transaction running now frees, or allocated and has not
    /// committed, is [`Error::InvalidFree`] (one free of it commits, never
    /// two), which leaves this transaction usable.
    pub fn free<T>(&mut self, p: PPtr<T>) -> Result<(), Error> {
        self.live()?;
        let r = self.free_logged(p.offset());
        self.check(r)
    }

    fn free_logged(&mut self, off: u64) -> Result<(), Error> {
        let eng = self.eng;
        // Checked before anything is logged, so a bad free does not doom.
        // The root as this transaction sees it: as committed, or as it
        // made it (its commit would name a freed block).
        if off != 0 && self.root_words_now()?.0 == off {
            return Err(Error::InvalidFree {
                offset: off,
                reason: "the root object cannot be freed",
            });
        }
        // Nor the catalog of named roots, nor a named root's object: the
        // catalog would name a freed block, and the pool open no more.
        self.refuse_named_free(off)?;
        let b = &mut self.log.blocks;
        if let Some(i) = b.ring_allocs.iter().position(|&(o, _)| o == off) {
            // Allocated by this transaction through the ring and not yet
            // committed: the reservation goes back when the transaction
            // ends, nothing is logged.
            let (o, size) = b.ring_allocs.remove(i);
            b.fresh.retain(|&(s, _)| s != o);
            b.unalloc.push((o, size));
            self.verified.forget();
            return Ok(());
        }
        if self.log.blocks.freed.iter().any(|&(o, _)| o == off) {
            return Err(Error::InvalidFree {
                offset: off,
                reason: "block is not allocated",
            });
        }
        // Allocated, and freed by no other transaction running now.
        let size = eng.alloc.claim_free(&eng.dom, off, self.log.id)?;
        self.claimed.push(off);
        if self.in_ring(size) {
            // The commit group's bits entry clears its bit; reusable once
            // the group is applied (released after the commit).
            self.verified.forget();
            self.log.blocks.fresh.retain(|&(s, _)| s != off);
            self.log.blocks.ring_frees.push((off, size));
            self.log.blocks.freed.push((off, size));
            return Ok(());
        }
        self.settle_ring()?;
        let outside = &self.log.undo[..self.frame_start];
        if self.frame != 0
            && outside
                .iter()
                .any(|u| matches!(u.what, UndoKind::Alloc { off: o, .. } if o == off))
        {
            // The enclosing transaction's rollback would free it again.
            return Err(Error::InvalidFree {
                offset: off,
                reason:
                    "a nested top action cannot free a block its enclosing transaction allocated",
            });
        }
        self.log.settle(eng)?;
        // The block is no longer this transaction's to access.
        self.verified.forget();
        let draft = Draft::block(self.log.id, Kind::Delete, off, size);
        self.log.append(eng, &[draft])?;
        eng.alloc.mark(&eng.dom, off, size, false)?;
        self.log.targets.extend(eng.alloc.mark_range(off, size));
        self.log.blocks.fresh.retain(|&(s, _)| s != off);
        self.log.blocks.freed.push((off, size));
        Ok(())
    }

    /// The root object, allocated zeroed on first use. Transactions of
    /// several threads may ask for it at once: one creates it (holding the
    /// root's lock until it ends), the others find that one. Under the
    /// undo policies a transaction that finds it holds the lock shared, so
    /// it never sees a root another transaction has not committed.
    pub fn root<T: Pod>(&mut self) -> Result<PPtr<T>, Error> {
        self.find_or_add(META_ROOT_OFF, Self::root_now::<T>, |tx| {
            if let Some(p) = tx.root_now::<T>()? {
                return Ok(p);
            }
            let size = std::mem::size_of::<T>() as u64;
            let off = tx.alloc_bytes(size.max(1))?;
            let mut words = [0u8; 24];
            words[..8].copy_from_slice(&off.to_le_bytes());
            words[8..16].copy_from_slice(&size.to_le_bytes());
            words[16..].copy_from_slice(&crate::format::meta::root_check(off, size).to_le_bytes());
            debug_assert_eq!(META_ROOT_END, META_ROOT_OFF + 40);
            let r = tx.write_logged(META_ROOT_OFF, &words);
            tx.check(r)?;
            Ok(PPtr::from_offset(off))
        })
    }

    /// An object the pool's metadata names under the lock `key` (the root
    /// word, the catalog): `find` looks for it, and when it finds none,
    /// `add` looks again and adds it. Under the undo policies another
    /// transaction's change of the metadata is in place before it commits,
    /// so `find` runs with the lock shared (a reader waits for it). `add`
    /// runs with the lock exclusive, held until the transaction ends: one
    /// transaction at a time adds, and one that added meanwhile has
    /// committed, so `add`'s look finds its object. Under the redo
    /// policies that change is stored in place as it commits, under its
    /// lock: `find` first looks with no lock, and that look counts only
    /// if no exclusive hold of `key` began meanwhile (one that overlapped
    /// it may have torn the words it read, or freed the catalog it was
    /// reading); otherwise it looks again with the lock shared.
    pub(super) fn find_or_add<R>(
        &mut self,
        key: u64,
        find: impl Fn(&mut Self) -> Result<Option<R>, Error>,
        add: impl FnOnce(&mut Self) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let eng = self.eng;
        let seen = match eng.durability.write_set() {
            true => eng.locks.read_quiet(key, || find(self)),
            false => None,
        };
        let found = match seen {
            Some(r) => r?,
            None => {
                let r = self.take_lock(key, Mode::Shared);
                self.check(r)?;
                find(self)?
            }
        };
        if let Some(found) = found {
            return Ok(found);
        }
        let r = self.take_lock(key, Mode::Exclusive);
        self.check(r)?;
        add(self)
    }

    /// The root object as this transaction sees it (its own writes too).
    fn root_now<T: Pod>(&mut self) -> Result<Option<PPtr<T>>, Error> {
        self.eng.usable()?;
        let (off, size) = self.root_words_now()?;
        crate::engine::root_of(off, size)
    }

    /// The root object's (offset, size) as this transaction sees them.
    fn root_words_now(&mut self) -> Result<(u64, u64), Error> {
        let mut w = [0u8; crate::engine::ROOT_WORDS];
        self.read_meta(META_ROOT_OFF, &mut w)?;
        crate::engine::root_words_in(&w)
    }

    /// Ends a transaction whose closure returned `Ok`: commits it (the END
    /// record is the commit point), or rolls it back when it is doomed or
    /// its commit found no log space, returning that error.
    /// (By reference: a `Tx` is a few hundred bytes, and the caller drops
    /// it once this returns, releasing its locks.)
    pub(crate) fn finish(&mut self) -> Result<(), Error> {
        if let Some(e) = self.doomed.take() {
            self.abort()?;
            return Err(e);
        }
        let eng = self.eng;
        let (allocs, frees) = (
            self.log.blocks.ring_allocs.len(),
            self.log.blocks.ring_frees.len(),
        );
        if self.log.is_empty() && allocs == 0 && frees == 0 {
            // Nothing to commit; but a block it reserved and freed again,
            // and the log space of writes a rollback dropped, go back.
            return self.release_unused();
        }
        self.log.committing = true;
        let bits = self.ring_bits(allocs, frees);
        let mut in_ring = false;
        let r = match self.log.commit_in_ring(eng, &bits) {
            Ok(true) => {
                in_ring = true;
                Ok(())
            }
            Ok(false) => {
                // Through the bucket log: the allocations and frees become
                // its records first.
                self.log.committing = false;
                let r = self.settle_ring();
                self.log.committing = true;
                let log = &mut self.log;
                r.and_then(|()| {
                    eng.durability
                        .end(&eng.finished, &mut |clear| log.append_end(eng, true, clear))
                })
            }
            Err(e) => Err(e),
        };
        self.log.committing = false;
        if let Err(e) = r {
            if matches!(e, Error::LogFull { .. }) {
                // Refused before anything of the commit was written.
                self.abort()?;
            } else {
                // Perhaps past the commit point: recovery decides.
                eng.poison(&e);
            }
            return Err(e);
        }
        // A commit in the ring that held no log space (its write set fitted
        // the ring) has nothing to give back, nor made the log grow.
        if !in_ring || self.log.res.bytes > 0 {
            if let Err(e) = eng.log.unreserve(&eng.dom, &mut self.log.res) {
                // Committed; only giving a chunk back failed.
                eng.poison(&e);
            }
        }
        if let Err(e) = self.release_freed(0) {
            // Committed; only the drain before the blocks' reuse failed
            // (they stay out of the allocator until the pool is reopened).
            eng.poison(&e);
        }
        for &(off, size) in &self.log.blocks.unalloc {
            eng.alloc.release(off, size);
        }
        if eng.durability.keeps_records() && eng.log.fill() >= eng.checkpoint_fill {
            // The transaction is durable whatever happens here; a failed
            // checkpoint leaves the log to recovery.
            if let Err(e) = eng.checkpoint() {
                eng.poison(&e);
            }
        }
        Ok(())
    }

    /// Gives the blocks freed from `freed[from..]` on, whose frees are
    /// committed, back to the allocator, each once the engine has made
    /// sure no committed value of it can still be stored over its next use
    /// (`Engine::before_reuse`).
    pub(super) fn release_freed(&mut self, from: usize) -> Result<(), Error> {
        let eng = self.eng;
        for &(off, size) in &self.log.blocks.freed[from..] {
            eng.before_reuse(off, size)?;
        }
        for (off, size) in self.log.blocks.freed.drain(from..) {
            eng.alloc.release(off, size);
        }
        Ok(())
    }

    /// The end of a transaction with nothing to commit: the blocks it
    /// reserved in the ring and freed again (`unalloc`) go back to the
    /// allocator, and the log space held for writes a `rollback_to` or a
    /// failed nested top action dropped goes back to the log. Neither was
    /// ever on media.
    fn release_unused(&mut self) -> Result<(), Error> {
        let eng = self.eng;
        for (off, size) in self.log.blocks.unalloc.drain(..) {
            eng.alloc.release(off, size);
        }
        if self.log.res.bytes > 0 {
            if let Err(e) = eng.log.unreserve(&eng.dom, &mut self.log.res) {
                // Only giving a log chunk back failed.
                eng.poison(&e);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Rolls the transaction back; a failure poisons the pool (recovery at
    /// the next open finishes the rollback).
    pub(crate) fn abort(&mut self) -> Result<(), Error> {
        let r = self.rollback();
        if let Err(e) = &r {
            self.eng.poison(e);
        }
        r
    }
}

impl Tx<'_> {
    /// Whether an allocation or free of a block of `size` bytes is a bits
    /// entry of the commit group: redo with the commit ring, a small
    /// block, nothing of the transaction in the bucket log, no savepoint
    /// taken, and outside nested top actions other than one that joins
    /// the group (`control`). Otherwise the ALLOC/DELETE record path.
    fn in_ring(&self, size: u64) -> bool {
        self.eng.ring.is_some()
            && !self.bucket_allocs
            && self.log.cells.is_empty()
            && (self.frame == 0 || self.flat == Some(self.frame))
            && crate::alloc::class_of(size).is_some()
    }

    /// The bits entries of the first `allocs` ring allocations and `frees`
    /// ring frees.
    fn ring_bits(&self, allocs: usize, frees: usize) -> Vec<Bits> {
        if allocs + frees == 0 {
            // Most transactions: no collect of an empty chain.
            return Vec::new();
        }
        let b = &self.log.blocks;
        let a = b.ring_allocs[..allocs].iter().map(|&(off, size)| Bits {
            off,
            size,
            set: true,
            zero: !b.ring_unzeroed.contains(&off),
        });
        let f = b.ring_frees[..frees].iter().map(|&(off, size)| Bits {
            off,
            size,
            set: false,
            zero: false,
        });
        a.chain(f).collect()
    }

    /// Before anything of the transaction goes to the bucket log: a
    /// running nested top action that was to commit in the ring becomes an
    /// ordinary one (it began with nothing else in the transaction), and
    /// the ring allocations and frees become ALLOC/DELETE records, applied
    /// in the bitmap.
    pub(super) fn settle_ring(&mut self) -> Result<(), Error> {
        let eng = self.eng;
        self.flat = None;
        let allocs = std::mem::take(&mut self.log.blocks.ring_allocs);
        let frees = std::mem::take(&mut self.log.blocks.ring_frees);
        let id = self.log.id;
        let ops = allocs.iter().map(|&(o, sz)| (o, sz, true));
        let ops: Vec<(u64, u64, bool)> = ops
            .chain(frees.iter().map(|&(o, sz)| (o, sz, false)))
            .collect();
        for (i, &(off, size, set)) in ops.iter().enumerate() {
            let kind = if set { Kind::Alloc } else { Kind::Delete };
            let d = Draft::block(id, kind, off, size);
            if let Err(e) = self.log.append(eng, &[d]) {
                // Not logged: released at the rollback that follows.
                self.log.blocks.ring_allocs.extend(allocs.iter().skip(i));
                return Err(e);
            }
            if set {
                // Allocated on media before the commit now, as on the
                // bucket log's path: no other transaction may free it
                // until this one ends (its rollback frees it).
                self.claimed.push(off);
                eng.alloc.mark_allocated_for(&eng.dom, off, size, id)?;
            } else {
                eng.alloc.mark(&eng.dom, off, size, set)?;
            }
            self.log.targets.extend(eng.alloc.mark_range(off, size));
            if set && !self.log.blocks.ring_unzeroed.contains(&off) {
                // Its zeros (stored when it was reserved) durable before
                // the commit, as an allocation of the bucket log's path.
                eng.dom.flush_at(off, size, sites::TX_ZERO_FLUSH)?;
            }
        }
        Ok(())
    }
}

/// Zeroes a block reserved for a ring allocation in place, with no write-
/// back: free on media until its group commits, whose write-back (and
/// replay) zeroes it durably.
fn zero_unflushed(eng: &Engine, off: u64, size: u64) -> Result<(), Error> {
    const Z: [u8; 4096] = [0; 4096];
    let mut done = 0;
    while done < size {
        let n = (size - done).min(Z.len() as u64);
        eng.dom.store(off + done, &Z[..n as usize])?;
        done += n;
    }
    Ok(())
}

fn zero(eng: &Engine, off: u64, size: u64) -> Result<(), Error> {
    const Z: [u8; 4096] = [0; 4096];
    eng.before_store(off, size)?;
    let mut done = 0;
    while done < size {
        let n = (size - done).min(Z.len() as u64);
        eng.dom.store(off + done, &Z[..n as usize])?;
        done += n;
    }
    eng.dom.flush_at(off, size, sites::TX_ZERO_FLUSH)
}
