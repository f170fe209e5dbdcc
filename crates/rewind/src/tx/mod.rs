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
//! Isolation of user data between concurrent transactions is the program's
//! (REWIND §4.7): two transactions writing the same bytes at once must be
//! kept apart by the program's own locks.

pub(crate) mod atomic;

use bytemuck::Pod;

use crate::engine::checkpoint::Finished;
use crate::engine::Engine;
use crate::error::Error;
use crate::format::layout::{MAX_GROUP, MAX_RECORD_DATA, META_ROOT_END, META_ROOT_OFF};
use crate::format::record::{clr, IN_COMMIT_GROUP};
use crate::format::PPtr;
use crate::log::{CellRef, Draft, Kind, LogVariant, Placed, Reservation};
use crate::persist::sites;
use crate::recovery;

pub use crate::format::Policy;

/// A forward record of this transaction that a rollback would undo: the
/// volatile copy of its chain (its `prev` is the undo-next of its CLR).
#[derive(Clone, Copy, Debug)]
struct Undo {
    lsn: u64,
    prev: u64,
    what: UndoKind,
}

#[derive(Clone, Copy, Debug)]
enum UndoKind {
    /// UPDATE: restore the old bytes stored in the record at `rec_off`.
    Update { rec_off: u64 },
    /// ALLOC: mark the block free.
    Alloc { off: u64, size: u64 },
    /// DELETE: mark the block allocated.
    Delete { off: u64, size: u64 },
}

/// A point in a transaction that [`Tx::rollback_to`] can return to.
///
/// Rolling back to a savepoint undoes the writes, allocations and frees
/// made after it (with compensation records, so a crash in the middle
/// finishes the job at recovery) and keeps the savepoint; savepoints taken
/// after it are gone. A savepoint belongs to the nested top action (or the
/// top level) it was taken in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Savepoint {
    tx: u64,
    /// The nested top action it was taken in (0: the top level).
    frame: u64,
    /// Length of the undo list.
    undo_len: usize,
    /// Lsn of the last undo entry before it (0: none), to tell a savepoint
    /// a rollback to an earlier one destroyed.
    entry_lsn: u64,
}

/// A Batch write waiting for its group's fence.
#[derive(Clone, Copy, Debug)]
struct Pending {
    target: u64,
    /// Range of old bytes, then new bytes, in `pending_bytes`.
    at: usize,
    len: usize,
}

/// A transaction's volatile buffers, recycled per thread so a transaction
/// allocates nothing on the common path.
#[derive(Default)]
struct Buffers {
    cells: Vec<CellRef>,
    undo: Vec<Undo>,
    targets: Vec<(u64, u64)>,
    pending: Vec<Pending>,
    pending_bytes: Vec<u8>,
    /// Blocks allocated since the last savepoint or nested top action
    /// boundary: writes into them need no record.
    fresh: Vec<(u64, u64)>,
    freed: Vec<(u64, u64)>,
    /// Blocks allocated and then freed by a rollback to a savepoint: back
    /// to the allocator when the transaction ends.
    unalloc: Vec<(u64, u64)>,
    placed: Vec<Placed>,
    old_buf: Vec<u8>,
}

impl Buffers {
    fn clear(&mut self) {
        self.cells.clear();
        self.undo.clear();
        self.targets.clear();
        self.pending.clear();
        self.pending_bytes.clear();
        self.fresh.clear();
        self.freed.clear();
        self.unalloc.clear();
        self.placed.clear();
        self.old_buf.clear();
    }
}

thread_local! {
    static SPARE: std::cell::RefCell<Option<Buffers>> = const { std::cell::RefCell::new(None) };
}

/// An open transaction. Obtained from [`Pool::transaction`](crate::Pool::transaction); every write to
/// the pool goes through it.
pub struct Tx<'p> {
    pool: &'p Engine,
    id: u64,
    b: Buffers,
    res: Reservation,
    /// The error that doomed the transaction.
    doomed: Option<Error>,
    /// Appending the commit group or END: a full log must not trigger a
    /// checkpoint (which waits for the lock commit holds).
    committing: bool,
    /// The nested top action running (0: none), and the last one begun.
    frame: u64,
    frames: u64,
    /// Length of the undo list when the running nested top action began.
    frame_start: usize,
}

/// Whether an error leaves the transaction usable: only those raised by
/// checks made before anything was changed.
fn dooms(e: &Error) -> bool {
    !matches!(
        e,
        Error::NotInHeap { .. }
            | Error::InvalidFree { .. }
            | Error::RootMismatch { .. }
            | Error::InvalidConfig { .. }
            | Error::OutOfBounds { .. }
            | Error::OutOfMemory { .. }
            | Error::InvalidSavepoint { .. }
            | Error::Aborted
    )
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        let mut b = std::mem::take(&mut self.b);
        b.clear();
        let _ = SPARE.try_with(|s| *s.borrow_mut() = Some(b));
    }
}

impl<'p> Tx<'p> {
    pub(crate) fn new(pool: &'p Engine, id: u64) -> Tx<'p> {
        let b = SPARE
            .try_with(|s| s.borrow_mut().take())
            .ok()
            .flatten()
            .unwrap_or_default();
        Tx {
            pool,
            id,
            b,
            res: Reservation::default(),
            doomed: None,
            committing: false,
            frame: 0,
            frames: 0,
            frame_start: 0,
        }
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

    /// The doom error, if the transaction is doomed.
    fn live(&self) -> Result<(), Error> {
        match &self.doomed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// This transaction's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Reads a value, seeing this transaction's own writes.
    pub fn read<T: Pod>(&mut self, p: PPtr<T>) -> Result<T, Error> {
        let mut v = T::zeroed();
        self.read_bytes(p.offset(), bytemuck::bytes_of_mut(&mut v))?;
        Ok(v)
    }

    /// Reads bytes, seeing this transaction's own writes.
    pub fn read_bytes(&mut self, off: u64, buf: &mut [u8]) -> Result<(), Error> {
        self.pool.dom.read(off, buf)?;
        let end = off + buf.len() as u64;
        for p in &self.b.pending {
            let (ps, pe) = (p.target, p.target + p.len as u64);
            let (s, e) = (ps.max(off), pe.min(end));
            if s < e {
                let new = &self.b.pending_bytes[p.at + p.len..p.at + 2 * p.len];
                buf[(s - off) as usize..(e - off) as usize]
                    .copy_from_slice(&new[(s - ps) as usize..(e - ps) as usize]);
            }
        }
        Ok(())
    }

    /// Writes a value (logged; undone if the transaction does not commit).
    pub fn write<T: Pod>(&mut self, p: PPtr<T>, v: &T) -> Result<(), Error> {
        self.write_bytes(p.offset(), bytemuck::bytes_of(v))
    }

    /// Writes bytes at a pool offset inside the heap.
    pub fn write_bytes(&mut self, off: u64, bytes: &[u8]) -> Result<(), Error> {
        let l = &self.pool.hdr.layout;
        let end = off.checked_add(bytes.len() as u64);
        if off < l.heap_off || end.is_none_or(|e| e > l.heap_end()) {
            return Err(Error::NotInHeap {
                offset: off,
                len: bytes.len() as u64,
                heap_start: l.heap_off,
                heap_end: l.heap_end(),
            });
        }
        self.live()?;
        let r = self.write_logged(off, bytes);
        self.check(r)
    }

    fn write_logged(&mut self, off: u64, bytes: &[u8]) -> Result<(), Error> {
        let end = off + bytes.len() as u64;
        if self.b.fresh.iter().any(|&(s, n)| off >= s && end <= s + n) {
            // Memory this transaction allocated: no undo needed (the ALLOC
            // record frees it); flushed now so commit's fence covers it.
            let d = &self.pool.dom;
            d.store(off, bytes)?;
            return d.flush_at(off, bytes.len() as u64, sites::TX_FRESH_FLUSH);
        }
        for (i, piece) in bytes.chunks(MAX_RECORD_DATA as usize).enumerate() {
            self.write_piece(off + (i as u64) * MAX_RECORD_DATA, piece)?;
        }
        Ok(())
    }

    fn write_piece(&mut self, off: u64, new: &[u8]) -> Result<(), Error> {
        if self.pool.log.variant() == LogVariant::Batch {
            // A full group is logged when the next write arrives, so that a
            // commit can carry END in the last group.
            let r = if self.b.pending.len() == self.pool.hdr.group as usize {
                self.flush_group()
            } else {
                Ok(())
            };
            // The old value is read when the group is logged (see log_group).
            let at = self.b.pending_bytes.len();
            self.b.pending_bytes.resize(at + new.len(), 0);
            self.b.pending_bytes.extend_from_slice(new);
            self.b.pending.push(Pending {
                target: off,
                at,
                len: new.len(),
            });
            return r;
        }
        let mut old = std::mem::take(&mut self.b.old_buf);
        old.resize(new.len(), 0);
        let r = self
            .pool
            .dom
            .read(off, &mut old)
            .and_then(|_| self.append(&[Draft::update(self.id, off, &old, new)]));
        let r = r.and_then(|_| self.apply_update(off, new));
        self.b.old_buf = old;
        r
    }

    /// Appends drafts, remembering their cells and undo information.
    fn append(&mut self, drafts: &[Draft<'_>]) -> Result<(), Error> {
        self.b.placed.clear();
        let mut prev = self.res.last;
        let pool = self.pool;
        let mut r = pool
            .log
            .append(&pool.dom, drafts, &mut self.b.placed, &mut self.res);
        if matches!(r, Err(Error::LogFull { .. }))
            && pool.policy == Policy::NoForce
            && !self.committing
        {
            // The log may be full of finished transactions' records: a
            // checkpoint clears them (nothing was written by the failure).
            pool.checkpoint()?;
            r = pool
                .log
                .append(&pool.dom, drafts, &mut self.b.placed, &mut self.res);
        }
        r?;
        for (d, p) in drafts.iter().zip(&self.b.placed) {
            self.b.cells.push(p.cell);
            let what = match d.kind {
                Kind::Update => UndoKind::Update { rec_off: p.rec_off },
                Kind::Alloc => UndoKind::Alloc {
                    off: d.target,
                    size: d.aux,
                },
                Kind::Delete => UndoKind::Delete {
                    off: d.target,
                    size: d.aux,
                },
                _ => {
                    prev = p.lsn;
                    continue;
                }
            };
            self.b.undo.push(Undo {
                lsn: p.lsn,
                prev,
                what,
            });
            prev = p.lsn;
        }
        Ok(())
    }

    /// The in-place store a logged UPDATE describes.
    fn apply_update(&mut self, off: u64, new: &[u8]) -> Result<(), Error> {
        let d = &self.pool.dom;
        d.store(off, new)?;
        self.b.targets.push((off, new.len() as u64));
        if self.pool.policy == Policy::Force {
            // Under force, commit's fence must find every store flushed.
            d.flush_at(off, new.len() as u64, sites::TX_STORE_FLUSH)?;
        }
        Ok(())
    }

    /// Batch: logs the pending group with one fence, then performs its stores.
    fn flush_group(&mut self) -> Result<(), Error> {
        if self.b.pending.is_empty() {
            return Ok(());
        }
        self.log_group(false).map(|_| ())
    }

    /// Logs the pending group — with `commit`, the END record too, in the
    /// same group, so the group's index update is the commit point — then
    /// performs the group's in-place stores. Returns END's placement.
    fn log_group(&mut self, commit: bool) -> Result<Option<Placed>, Error> {
        let pending = std::mem::take(&mut self.b.pending);
        let mut bytes = std::mem::take(&mut self.b.pending_bytes);
        // Old values, read together so their cache misses overlap, then
        // overlaid with the earlier writes of the group to the same bytes.
        for p in &pending {
            self.pool
                .dom
                .read(p.target, &mut bytes[p.at..p.at + p.len])?;
        }
        for i in 1..pending.len() {
            let p = pending[i];
            for q in &pending[..i] {
                let (s, e) = (
                    p.target.max(q.target),
                    (p.target + p.len as u64).min(q.target + q.len as u64),
                );
                if s < e {
                    let (from, to) = (
                        q.at + q.len + (s - q.target) as usize,
                        p.at + (s - p.target) as usize,
                    );
                    bytes.copy_within(from..from + (e - s) as usize, to);
                }
            }
        }
        let mut drafts = [Draft::bare(self.id, Kind::Update); MAX_GROUP + 1];
        for (d, p) in drafts.iter_mut().zip(&pending) {
            *d = Draft::update(
                self.id,
                p.target,
                &bytes[p.at..p.at + p.len],
                &bytes[p.at + p.len..p.at + 2 * p.len],
            );
        }
        let mut n = pending.len();
        if commit {
            for d in &mut drafts[..n] {
                d.flags = IN_COMMIT_GROUP;
            }
            drafts[n] = Draft::end(self.id, true, n as u64);
            n += 1;
        }
        let mut r = self.append(&drafts[..n]).map(|_| None);
        if r.is_ok() {
            if commit {
                // END is not one of the records cleared with the others.
                self.b.cells.pop();
                r = Ok(self.b.placed.last().copied());
            }
            for p in &pending {
                self.apply_update(p.target, &bytes[p.at + p.len..p.at + 2 * p.len])?;
            }
        }
        // Keep the buffers' capacity for the next group.
        self.b.pending = pending;
        self.b.pending.clear();
        self.b.pending_bytes = bytes;
        self.b.pending_bytes.clear();
        r
    }

    /// Allocates a zeroed `T`.
    pub fn alloc<T: Pod>(&mut self) -> Result<PPtr<T>, Error> {
        self.alloc_array::<T>(1)
    }

    /// Allocates a zeroed array of `n` `T`s.
    pub fn alloc_array<T: Pod>(&mut self, n: u64) -> Result<PPtr<T>, Error> {
        let size = (std::mem::size_of::<T>() as u64)
            .checked_mul(n)
            .ok_or(Error::OutOfMemory {
                requested: u64::MAX,
            })?;
        Ok(PPtr::from_offset(self.alloc_bytes(size)?))
    }

    /// Allocates `size` zeroed bytes; returns the pool offset.
    pub fn alloc_bytes(&mut self, size: u64) -> Result<u64, Error> {
        self.live()?;
        let r = self.alloc_logged(size);
        self.check(r)
    }

    fn alloc_logged(&mut self, size: u64) -> Result<u64, Error> {
        self.flush_group()?;
        let pool = self.pool;
        let (off, bsize) = pool.alloc.reserve(&pool.dom, size)?;
        let draft = Draft::block(self.id, Kind::Alloc, off, bsize);
        if let Err(e) = self.append(&[draft]) {
            pool.alloc.release(off, bsize);
            return Err(e);
        }
        self.b.fresh.push((off, bsize));
        pool.alloc.mark(&pool.dom, off, bsize, true)?;
        self.b.targets.extend(pool.alloc.mark_range(off, bsize));
        zero(pool, off, size)?;
        Ok(off)
    }

    /// Frees a block allocated earlier (by this or a committed transaction).
    /// The block becomes reusable when this transaction commits.
    pub fn free<T>(&mut self, p: PPtr<T>) -> Result<(), Error> {
        self.live()?;
        let r = self.free_logged(p.offset());
        self.check(r)
    }

    fn free_logged(&mut self, off: u64) -> Result<(), Error> {
        let pool = self.pool;
        // Checked before anything is logged, so a bad free does not doom.
        if off != 0 && crate::engine::root_words(&pool.dom)?.0 == off {
            return Err(Error::InvalidFree {
                offset: off,
                reason: "the root object cannot be freed",
            });
        }
        let size = pool.alloc.allocated_size(&pool.dom, off)?;
        let outside = &self.b.undo[..self.frame_start];
        if self.frame != 0
            && outside
                .iter()
                .any(|u| matches!(u.what, UndoKind::Alloc { off: o, .. } if o == off))
        {
            // The enclosing transaction's rollback would free it again.
            return Err(Error::InvalidFree {
                offset: off,
                reason: "a nested top action cannot free a block its enclosing transaction allocated",
            });
        }
        self.flush_group()?;
        let draft = Draft::block(self.id, Kind::Delete, off, size);
        self.append(&[draft])?;
        pool.alloc.mark(&pool.dom, off, size, false)?;
        self.b.targets.extend(pool.alloc.mark_range(off, size));
        self.b.fresh.retain(|&(s, _)| s != off);
        self.b.freed.push((off, size));
        Ok(())
    }

    /// The root object, allocated zeroed on first use.
    pub fn root<T: Pod>(&mut self) -> Result<PPtr<T>, Error> {
        let size = std::mem::size_of::<T>() as u64;
        if let Some(p) = self.pool.root::<T>()? {
            return Ok(p);
        }
        let off = self.alloc_bytes(size.max(1))?;
        let mut words = [0u8; 24];
        words[..8].copy_from_slice(&off.to_le_bytes());
        words[8..16].copy_from_slice(&size.to_le_bytes());
        words[16..].copy_from_slice(&(off ^ size).to_le_bytes());
        debug_assert_eq!(META_ROOT_END, META_ROOT_OFF + 24);
        let r = self.write_logged(META_ROOT_OFF, &words);
        self.check(r)?;
        Ok(PPtr::from_offset(off))
    }

    /// Ends a transaction whose closure returned `Ok`: commits it (the END
    /// record is the commit point), or rolls it back when it is doomed or
    /// its commit found no log space, returning that error.
    pub(crate) fn finish(mut self) -> Result<(), Error> {
        if let Some(e) = self.doomed.take() {
            self.abort()?;
            return Err(e);
        }
        let pool = self.pool;
        if self.b.cells.is_empty() && self.b.pending.is_empty() {
            return Ok(()); // read-only
        }
        self.committing = true;
        let r = if pool.log.variant() == LogVariant::Batch {
            self.commit_batch()
        } else {
            self.commit_end()
        };
        self.committing = false;
        if let Err(e) = r {
            if matches!(e, Error::LogFull { .. }) {
                // Refused before anything of the commit was written.
                self.abort()?;
            } else {
                // Perhaps past the commit point: recovery decides.
                pool.poison(&e);
            }
            return Err(e);
        }
        if let Err(e) = pool.log.unreserve(&pool.dom, &mut self.res) {
            // Committed; only giving a chunk back failed.
            pool.poison(&e);
        }
        for &(off, size) in self.b.freed.iter().chain(&self.b.unalloc) {
            pool.alloc.release(off, size);
        }
        if pool.policy == Policy::NoForce && pool.log.fill() > pool.checkpoint_fill {
            // The transaction is durable whatever happens here; a failed
            // checkpoint leaves the log to recovery.
            if let Err(e) = pool.checkpoint() {
                pool.poison(&e);
            }
        }
        Ok(())
    }

    /// Rolls the transaction back; a failure poisons the pool (recovery at
    /// the next open finishes the rollback).
    pub(crate) fn abort(mut self) -> Result<(), Error> {
        let r = self.rollback();
        if let Err(e) = &r {
            self.pool.poison(e);
        }
        r
    }

    /// Batch commit: END travels in the last group. Its index update is the
    /// commit point; the group's in-place stores follow it, so recovery
    /// redoes a committed transaction whose records are still in the log
    /// (both policies). Under force the stores are flushed and fenced before
    /// the records are cleared, END last.
    fn commit_batch(&mut self) -> Result<(), Error> {
        let pool = self.pool;
        // No-force: END and its registration atomic with respect to a
        // checkpoint's bound, and registered only once its stores are made.
        let fin = (pool.policy == Policy::NoForce).then(|| pool.finished.lock());
        let end = self.log_group(true)?.expect("END was appended");
        match fin {
            None => {
                // The stores persistent before their records are cleared.
                pool.dom.fence_at(sites::TX_COMMIT_STORES)?;
                pool.log.release(&pool.dom, &self.b.cells, Some(end.cell))?;
            }
            Some(mut fin) => fin.push(Finished {
                end_lsn: end.lsn,
                cells: std::mem::take(&mut self.b.cells),
                end: end.cell,
                targets: std::mem::take(&mut self.b.targets),
            }),
        }
        Ok(())
    }

    /// Simple and Optimized commit: every in-place store is already made
    /// (and under force flushed); END is appended after them.
    fn commit_end(&mut self) -> Result<(), Error> {
        let pool = self.pool;
        let end = Draft::end(self.id, true, 0);
        let mut placed = std::mem::take(&mut self.b.placed);
        placed.clear();
        match pool.policy {
            Policy::Force => {
                // The END append's first fence persists every flushed store.
                pool.log.append_end(
                    &pool.dom,
                    &end,
                    Some(&self.b.cells),
                    &mut placed,
                    &mut self.res,
                )?;
            }
            Policy::NoForce => {
                // END and its registration are atomic with respect to a
                // checkpoint's choice of bound.
                let mut fin = pool.finished.lock();
                pool.log
                    .append_end(&pool.dom, &end, None, &mut placed, &mut self.res)?;
                fin.push(Finished {
                    end_lsn: placed[0].lsn,
                    cells: std::mem::take(&mut self.b.cells),
                    end: placed[0].cell,
                    targets: std::mem::take(&mut self.b.targets),
                });
            }
        }
        Ok(())
    }

    /// Rolls the transaction back (REWIND §4.4): ROLLBACK, the
    /// compensations, END.
    fn rollback(&mut self) -> Result<(), Error> {
        // Pending Batch writes were never logged nor applied.
        self.b.pending.clear();
        if self.b.undo.is_empty() && self.b.cells.is_empty() {
            return Ok(());
        }
        let undone = self.compensate(0, Some(Draft::bare(self.id, Kind::Rollback)))?;
        let pool = self.pool;
        let d = &pool.dom;
        let end = Draft::end(self.id, false, 0);
        let mut placed = Vec::with_capacity(1);
        match pool.policy {
            Policy::Force => {
                // END's first fence persists the flushed undo stores.
                pool.log
                    .append_end(d, &end, Some(&self.b.cells), &mut placed, &mut self.res)?;
            }
            Policy::NoForce => {
                let mut fin = pool.finished.lock();
                pool.log
                    .append_end(d, &end, None, &mut placed, &mut self.res)?;
                fin.push(Finished {
                    end_lsn: placed[0].lsn,
                    cells: std::mem::take(&mut self.b.cells),
                    end: placed[0].cell,
                    targets: std::mem::take(&mut self.b.targets),
                });
            }
        }
        pool.log.unreserve(d, &mut self.res)?;
        // Blocks this transaction allocated are free again on media.
        for &(off, size) in undone.iter().chain(&self.b.unalloc) {
            pool.alloc.release(off, size);
        }
        // Blocks freed by its nested top actions were released already.
        Ok(())
    }

    /// Undoes the records of `undo[from..]`, latest first: their CLRs (after
    /// `lead`, a ROLLBACK for a whole rollback) are appended together and
    /// made persistent, then applied. Returns the blocks the undone records
    /// had allocated (free on media now; the caller gives them back to the
    /// allocator).
    fn compensate(
        &mut self,
        from: usize,
        lead: Option<Draft<'static>>,
    ) -> Result<Vec<(u64, u64)>, Error> {
        let pool = self.pool;
        let d = &pool.dom;
        let undo: Vec<Undo> = self.b.undo.drain(from..).rev().collect();
        // Old values are read back from the records themselves.
        let mut values: Vec<(u64, Vec<u8>)> = Vec::with_capacity(undo.len());
        for u in &undo {
            values.push(match u.what {
                UndoKind::Update { rec_off } => {
                    let r = recovery::read_record(d, rec_off)?;
                    (r.target, r.old)
                }
                UndoKind::Alloc { off, size } | UndoKind::Delete { off, size } => {
                    (off, size.to_le_bytes().to_vec())
                }
            });
        }
        let mut drafts: Vec<Draft<'_>> = lead.into_iter().collect();
        for (u, (target, value)) in undo.iter().zip(&values) {
            let what = match u.what {
                UndoKind::Update { .. } => clr::BYTES,
                UndoKind::Alloc { .. } => clr::FREE,
                UndoKind::Delete { .. } => clr::ALLOCATED,
            };
            drafts.push(Draft::clr(self.id, what, *target, u.prev, value));
        }
        // Every CLR persistent before any undo is applied; a crash in
        // between is repaired by recovery redoing the CLRs.
        self.append(&drafts)?;
        let mut unallocated = Vec::new();
        for (u, (target, value)) in undo.iter().zip(&values) {
            match u.what {
                UndoKind::Update { .. } => {
                    recovery::apply_clr(d, &pool.hdr.layout, clr::BYTES, *target, value)?;
                    self.b.targets.push((*target, value.len() as u64));
                }
                // Bitmap bytes are shared with concurrent transactions:
                // changed under the allocator's latch.
                UndoKind::Alloc { off, size } => {
                    pool.alloc.mark(d, off, size, false)?;
                    unallocated.push((off, size));
                }
                UndoKind::Delete { off, size } => {
                    pool.alloc.mark(d, off, size, true)?;
                    if let Some(i) = self.b.freed.iter().position(|&(o, _)| o == off) {
                        self.b.freed.swap_remove(i);
                    }
                }
            }
        }
        // Writes into blocks allocated before `from` were not logged, so
        // from here on they are.
        self.b.fresh.clear();
        Ok(unallocated)
    }

    /// Marks a point this transaction can roll back to with
    /// [`rollback_to`](Self::rollback_to) (MARS's PartialAbort, ARIES's
    /// savepoints).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("sp.pool");
    /// use rewind::{Pool, PoolConfig};
    /// let pool = Pool::create(&path, "doc", 4 << 20, &PoolConfig::default())?;
    /// pool.transaction(|tx| {
    ///     let root = tx.root::<[u64; 2]>()?;
    ///     tx.write(root, &[1, 1])?;
    ///     let sp = tx.savepoint()?;
    ///     tx.write(root, &[2, 2])?;
    ///     let extra = tx.alloc::<u64>()?;
    ///     tx.write(extra, &7)?;
    ///     tx.rollback_to(sp)?; // the second write and the allocation are undone
    ///     assert_eq!(tx.read(root)?, [1, 1]);
    ///     Ok::<_, rewind::Error>(())
    /// })?;
    /// let root = pool.root::<[u64; 2]>()?.unwrap();
    /// assert_eq!(pool.read(root)?, [1, 1]);
    /// # Ok::<(), rewind::Error>(())
    /// ```
    pub fn savepoint(&mut self) -> Result<Savepoint, Error> {
        self.live()?;
        // Pending Batch writes are logged, so the savepoint is a point of
        // the log.
        let r = self.flush_group();
        self.check(r)?;
        // A rollback to here must undo every later write, those into blocks
        // allocated before it too.
        self.b.fresh.clear();
        Ok(Savepoint {
            tx: self.id,
            frame: self.frame,
            undo_len: self.b.undo.len(),
            entry_lsn: self.b.undo.last().map_or(0, |u| u.lsn),
        })
    }

    /// Undoes what the transaction did after `sp`: its writes, allocations
    /// and frees, latest first, each with a compensation record (so it is
    /// crash-safe). The transaction goes on and may commit. `sp` stays
    /// valid; savepoints taken after it do not.
    ///
    /// A savepoint of another transaction, one taken inside a nested top
    /// action that ended or outside the one running, or one a rollback to
    /// an earlier savepoint destroyed is refused with
    /// [`Error::InvalidSavepoint`], and the transaction carries on.
    pub fn rollback_to(&mut self, sp: Savepoint) -> Result<(), Error> {
        let valid = sp.tx == self.id
            && sp.frame == self.frame
            && sp.undo_len <= self.b.undo.len()
            && (sp.undo_len == 0 || self.b.undo[sp.undo_len - 1].lsn == sp.entry_lsn);
        if !valid {
            return Err(Error::InvalidSavepoint {
                reason: if sp.tx != self.id {
                    "the savepoint belongs to another transaction"
                } else if sp.frame != self.frame {
                    "the savepoint was taken in another nested top action"
                } else {
                    "a rollback to an earlier savepoint undid this one"
                },
            });
        }
        self.live()?;
        // Writes not yet logged all came after the savepoint.
        self.b.pending.clear();
        self.b.pending_bytes.clear();
        if self.b.undo.len() == sp.undo_len {
            self.b.fresh.clear();
            return Ok(());
        }
        let r = self.compensate(sp.undo_len, None);
        let unallocated = self.check(r)?;
        self.b.unalloc.extend(unallocated);
        Ok(())
    }

    /// Runs `f` as a nested top action (MARS's NestedTopAction, ARIES):
    /// what it does stays even if the enclosing transaction later rolls
    /// back, and is as durable as the enclosing transaction's commit would
    /// be. If `f` returns an error, what it did is rolled back (the
    /// enclosing transaction goes on) and the error is returned.
    ///
    /// The classic use is a structure change that others may already rely
    /// on, such as a B-tree page split: it stays while the insert that
    /// caused it rolls back. The action must not depend on uncommitted
    /// changes of the enclosing transaction, and may not free a block the
    /// enclosing transaction allocated (refused with
    /// [`Error::InvalidFree`]). Allocations made in it are the pool's for
    /// good: freeing them is a later transaction's job.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("nta.pool");
    /// use rewind::{Pool, PoolConfig};
    /// let pool = Pool::create(&path, "doc", 4 << 20, &PoolConfig::default())?;
    /// let root = pool.transaction(|tx| tx.root::<[u64; 2]>())?;
    /// let r: Result<(), rewind::Error> = pool.transaction(|tx| {
    ///     tx.nested_top_action(|tx| tx.write(root, &[5, 0]))?; // stays
    ///     tx.write(root, &[5, 9])?;                              // undone
    ///     Err(rewind::Error::Aborted)
    /// });
    /// assert!(r.is_err());
    /// assert_eq!(pool.read(root)?, [5, 0]);
    /// # Ok::<(), rewind::Error>(())
    /// ```
    pub fn nested_top_action<R, E: From<Error>>(
        &mut self,
        f: impl FnOnce(&mut Tx<'p>) -> Result<R, E>,
    ) -> Result<R, E> {
        let start = self.savepoint()?;
        let (outer, outer_start) = (self.frame, self.frame_start);
        self.frame_start = start.undo_len;
        let head = self.res.last;
        let freed_from = self.b.freed.len();
        self.frames += 1;
        self.frame = self.frames;
        let start = Savepoint {
            frame: self.frame,
            ..start
        };
        let r = f(self).and_then(|v| {
            self.live()?;
            let r = self.end_action(start, head, freed_from);
            self.check(r).map(|_| v).map_err(E::from)
        });
        if r.is_err() && self.doomed.is_none() {
            // The action is undone; the enclosing transaction goes on.
            if let Err(e) = self.rollback_to(start) {
                (self.frame, self.frame_start) = (outer, outer_start);
                return Err(e.into());
            }
        }
        (self.frame, self.frame_start) = (outer, outer_start);
        r
    }

    /// Ends a nested top action begun at `start`, when the transaction's
    /// latest record was `head`: its CLR (undo-next `head`) makes every
    /// later rollback skip the action's records.
    fn end_action(&mut self, start: Savepoint, head: u64, freed_from: usize) -> Result<(), Error> {
        self.flush_group()?;
        if self.b.undo.len() > start.undo_len {
            let pool = self.pool;
            // The append's fence also makes the action's stores persistent
            // before its CLR.
            self.append(&[Draft::nta_end(self.id, head)])?;
            self.b.undo.truncate(start.undo_len);
            // Frees the action made are final.
            for (off, size) in self.b.freed.drain(freed_from..) {
                pool.alloc.release(off, size);
            }
        }
        // Blocks the action allocated are the pool's now: later writes
        // into them are logged.
        self.b.fresh.clear();
        Ok(())
    }
}

fn zero(pool: &Engine, off: u64, size: u64) -> Result<(), Error> {
    const Z: [u8; 4096] = [0; 4096];
    let mut done = 0;
    while done < size {
        let n = (size - done).min(Z.len() as u64);
        pool.dom.store(off + done, &Z[..n as usize])?;
        done += n;
    }
    pool.dom.flush_at(off, size, sites::TX_ZERO_FLUSH)
}
