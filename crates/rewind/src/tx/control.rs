//! MARS's transaction control (and REWIND §4.4's rollback): whole
//! rollbacks, savepoints and partial rollbacks, nested top actions.
//!
//! All of them undo by compensation, as ARIES does: a CLR per undone
//! record, persistent before the undo is applied, whose undo-next is the
//! undone record's `prev`; so a crash in the middle of a rollback is
//! finished by recovery, which follows the same chain and never undoes a
//! record twice. A nested top action ends with a CLR that compensates
//! nothing and whose undo-next is the record before the action: every
//! later rollback, partial or whole, in the program or at recovery, skips
//! the action's records.

use crate::error::Error;
use crate::format::record::clr;
use crate::log::{Draft, Kind};
use crate::recovery;

use super::handle::{Undo, UndoKind};
use super::Tx;

/// A point in a transaction that [`Tx::rollback_to`] can return to.
///
/// Rolling back to a savepoint undoes the writes, allocations and frees
/// made after it (with compensation records, so a crash in the middle
/// finishes the job at recovery) and keeps the savepoint; savepoints taken
/// after it are gone. A savepoint belongs to the nested top action (or the
/// top level) it was taken in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Savepoint {
    /// The serial of the pool handle's engine: transaction ids are unique
    /// only within one handle.
    pool: u64,
    tx: u64,
    /// The nested top action it was taken in (0: the top level).
    frame: u64,
    /// Length of the undo list.
    undo_len: usize,
    /// Lsn of the last undo entry before it (0: none), to tell a savepoint
    /// a rollback to an earlier one destroyed.
    entry_lsn: u64,
}

impl<'p> Tx<'p> {
    /// Rolls the transaction back (REWIND §4.4): ROLLBACK, the
    /// compensations, END.
    pub(super) fn rollback(&mut self) -> Result<(), Error> {
        // The ring allocations were never on media.
        self.flat = None;
        for (off, size) in self.log.blocks.ring_allocs.drain(..) {
            self.eng.alloc.release(off, size);
        }
        self.log.blocks.ring_frees.clear();
        // Pending Batch writes were never logged nor applied.
        self.log.drop_pending();
        if self.log.undo.is_empty() && self.log.cells.is_empty() {
            for (off, size) in self.log.blocks.unalloc.drain(..) {
                self.eng.alloc.release(off, size);
            }
            // Nothing logged; a redo write set's reservation goes back.
            return self.eng.log.unreserve(&self.eng.dom, &mut self.log.res);
        }
        let rb = Draft::bare(self.log.id, Kind::Rollback);
        let undone = self.compensate(0, Some(rb))?;
        let eng = self.eng;
        let log = &mut self.log;
        // Under force, END's first fence persists the flushed undo stores.
        eng.durability.end(&eng.finished, &mut |clear| {
            log.append_end(eng, false, clear)
        })?;
        eng.log.unreserve(&eng.dom, &mut self.log.res)?;
        // Blocks this transaction allocated are free again on media.
        for &(off, size) in undone.iter().chain(&self.log.blocks.unalloc) {
            eng.alloc.release(off, size);
        }
        // Blocks freed by its nested top actions were released already.
        Ok(())
    }

    /// Undoes the records of `undo[from..]`, latest first: their CLRs (after
    /// `lead`, a ROLLBACK for a whole rollback) are appended together and
    /// made persistent, then applied. Returns the blocks the undone records
    /// had allocated (free on media now; the caller gives them back to the
    /// allocator).
    pub(super) fn compensate(
        &mut self,
        from: usize,
        lead: Option<Draft<'static>>,
    ) -> Result<Vec<(u64, u64)>, Error> {
        let eng = self.eng;
        let d = &eng.dom;
        let undo: Vec<Undo> = self.log.undo.drain(from..).rev().collect();
        // Old values are read back from the records themselves.
        let mut values: Vec<(u64, Vec<u8>)> = Vec::with_capacity(undo.len());
        for u in &undo {
            values.push(match u.what {
                UndoKind::Update { rec_off, .. } => {
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
            drafts.push(Draft::clr(self.log.id, what, *target, u.prev, value));
        }
        // Every CLR persistent before any undo is applied; a crash in
        // between is repaired by recovery redoing the CLRs.
        self.log.append(eng, &drafts)?;
        // Undone allocations leave blocks this transaction may have
        // accessed: checked on media again.
        self.verified.forget();
        let mut unallocated = Vec::new();
        for (u, (target, value)) in undo.iter().zip(&values) {
            match u.what {
                UndoKind::Update { .. } => {
                    recovery::apply_clr(d, &eng.hdr.layout, clr::BYTES, *target, value)?;
                    self.log.targets.push((*target, value.len() as u64));
                }
                // Bitmap bytes are shared with concurrent transactions:
                // changed under the allocator's latch.
                UndoKind::Alloc { off, size } => {
                    eng.alloc.mark(d, off, size, false)?;
                    unallocated.push((off, size));
                }
                UndoKind::Delete { off, size } => {
                    eng.alloc.mark(d, off, size, true)?;
                    if let Some(i) = self.log.blocks.freed.iter().position(|&(o, _)| o == off) {
                        self.log.blocks.freed.swap_remove(i);
                    }
                }
            }
        }
        // Writes into blocks allocated before `from` were not logged, so
        // from here on they are.
        self.log.blocks.fresh.clear();
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
        // A rollback to it undoes records: allocations and frees are
        // records from here on.
        let r = self.settle_ring();
        self.check(r)?;
        self.bucket_allocs = true;
        // Pending Batch writes are logged, so the savepoint is a point of
        // the log.
        let r = self.log.flush(self.eng);
        self.check(r)?;
        // A rollback to here must undo every later write, those into blocks
        // allocated before it too.
        self.log.blocks.fresh.clear();
        Ok(Savepoint {
            pool: self.eng.serial,
            tx: self.log.id,
            frame: self.frame,
            undo_len: self.log.undo.len(),
            entry_lsn: self.log.undo.last().map_or(0, |u| u.lsn),
        })
    }

    /// Undoes what the transaction did after `sp`: its writes, allocations
    /// and frees, latest first, each with a compensation record (so it is
    /// crash-safe). The transaction goes on and may commit. `sp` stays
    /// valid; savepoints taken after it do not.
    ///
    /// A savepoint of another transaction (of this pool handle, another
    /// pool, or a handle of this pool closed since), one taken inside a nested top
    /// action that ended or outside the one running, or one a rollback to
    /// an earlier savepoint destroyed is refused with
    /// [`Error::InvalidSavepoint`], and the transaction carries on.
    pub fn rollback_to(&mut self, sp: Savepoint) -> Result<(), Error> {
        let mine = sp.pool == self.eng.serial && sp.tx == self.log.id;
        let valid = mine
            && sp.frame == self.frame
            && sp.undo_len <= self.log.undo.len()
            && (sp.undo_len == 0 || self.log.undo[sp.undo_len - 1].lsn == sp.entry_lsn);
        if !valid {
            return Err(Error::InvalidSavepoint {
                reason: if sp.pool != self.eng.serial {
                    "the savepoint belongs to a transaction of another pool handle"
                } else if sp.tx != self.log.id {
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
        self.log.drop_pending();
        if self.log.undo.len() == sp.undo_len {
            self.log.blocks.fresh.clear();
            return Ok(());
        }
        let r = self.compensate(sp.undo_len, None);
        let unallocated = self.check(r)?;
        self.log.blocks.unalloc.extend(unallocated);
        Ok(())
    }

    /// Runs `f` as a nested top action (MARS's NestedTopAction, ARIES):
    /// what it does stays even if the enclosing transaction later rolls
    /// back, and is as durable as the enclosing transaction's commit would
    /// be. If `f` returns an error, what it did is rolled back (the
    /// enclosing transaction goes on) and the error is returned. If `f`
    /// panics, what it did is rolled back the same way before the panic
    /// goes on: a program that catches it inside the transaction goes on in
    /// the enclosing transaction, without the action's writes.
    ///
    /// The classic use is a structure change that others may already rely
    /// on, such as a B-tree page split: it stays while the insert that
    /// caused it rolls back. The action must not depend on uncommitted
    /// changes of the enclosing transaction. It may not write bytes the
    /// enclosing transaction wrote before it (a rollback of the enclosing
    /// transaction would restore their value from before that write, over
    /// the action's): such a write is [`Error::TxMisuse`], refused before
    /// anything changes, and the transaction goes on. It may not free a block the
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
        if self.can_join() {
            return self.joined_action(f);
        }
        let start = self.savepoint()?;
        let (outer, outer_start) = (self.frame, self.frame_start);
        self.frame_start = start.undo_len;
        let head = self.log.res.last;
        let freed_from = self.log.blocks.freed.len();
        self.frames += 1;
        self.frame = self.frames;
        let start = Savepoint {
            frame: self.frame,
            ..start
        };
        let (r, panic) = self.run_action(f);
        let r = r.and_then(|v| {
            self.live()?;
            let r = self.end_action(start, head, freed_from);
            self.check(r).map(|_| v).map_err(E::from)
        });
        if r.is_err() && self.doomed.is_none() {
            // The action is undone; the enclosing transaction goes on.
            if let Err(e) = self.rollback_to(start) {
                (self.frame, self.frame_start) = (outer, outer_start);
                resume(panic);
                return Err(e.into());
            }
        }
        (self.frame, self.frame_start) = (outer, outer_start);
        resume(panic);
        r
    }

    /// Runs an action's closure. A panic in it comes back as
    /// `Err(Aborted)` with its payload: the action is then undone and the
    /// enclosing frame restored, as after an error, before the panic goes
    /// on ([`resume`]); so a program that catches it inside the
    /// transaction goes on in the enclosing frame, without the action's
    /// writes.
    #[allow(clippy::type_complexity)]
    fn run_action<R, E: From<Error>>(
        &mut self,
        f: impl FnOnce(&mut Tx<'p>) -> Result<R, E>,
    ) -> (Result<R, E>, Option<Box<dyn std::any::Any + Send>>) {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(self))) {
            Ok(r) => (r, None),
            Err(payload) => (Err(E::from(Error::Aborted)), Some(payload)),
        }
    }

    /// Ends a nested top action begun at `start`, when the transaction's
    /// latest record was `head`: its CLR (undo-next `head`) makes every
    /// later rollback skip the action's records.
    /// Whether a nested top action may commit as a group of the commit
    /// ring: redo with the ring, and nothing else in the transaction yet
    /// (so that everything in its write set and its allocations are the
    /// action's, and a rollback to its start empties the transaction).
    fn can_join(&self) -> bool {
        self.eng.ring.is_some()
            && self.frame == 0
            && self.flat.is_none()
            && !self.bucket_allocs
            && self.log.is_empty()
            && self.log.blocks.ring_allocs.is_empty()
            && self.log.blocks.ring_frees.is_empty()
            && self.log.blocks.unalloc.is_empty()
            && self.log.blocks.freed.is_empty()
    }

    /// A nested top action that commits as its own group of the commit
    /// ring: its writes go to the write set and its allocations and frees
    /// are bits entries, as a transaction's; when it ends they commit
    /// under one fence, and the enclosing transaction goes on empty. If it
    /// takes a savepoint (or logs anything in the bucket log), or its group
    /// does not go in the ring, it becomes an ordinary nested top action
    /// from its start, which was the transaction's start.
    fn joined_action<R, E: From<Error>>(
        &mut self,
        f: impl FnOnce(&mut Tx<'p>) -> Result<R, E>,
    ) -> Result<R, E> {
        let head = self.log.res.last;
        self.frames += 1;
        let frame = self.frames;
        (self.frame, self.frame_start, self.flat) = (frame, 0, Some(frame));
        let start = Savepoint {
            pool: self.eng.serial,
            tx: self.log.id,
            frame,
            undo_len: 0,
            entry_lsn: 0,
        };
        let (r, panic) = self.run_action(f);
        let r = r.and_then(|v| {
            self.live()?;
            let r = self.end_joined(start, head);
            self.check(r).map(|_| v).map_err(E::from)
        });
        if r.is_err() && self.doomed.is_none() {
            let r2 = if self.flat == Some(frame) {
                // Nothing of it is on media: the transaction is empty again.
                self.log.drop_pending();
                let b = &mut self.log.blocks;
                for (off, size) in b.ring_allocs.drain(..).chain(b.unalloc.drain(..)) {
                    self.eng.alloc.release(off, size);
                }
                b.ring_frees.clear();
                b.freed.clear();
                b.fresh.clear();
                self.verified.forget();
                Ok(())
            } else {
                self.rollback_to(start)
            };
            if let Err(e) = r2 {
                (self.frame, self.frame_start, self.flat) = (0, 0, None);
                resume(panic);
                return Err(e.into());
            }
        }
        (self.frame, self.frame_start, self.flat) = (0, 0, None);
        resume(panic);
        r
    }

    fn end_joined(&mut self, start: Savepoint, head: u64) -> Result<(), Error> {
        if self.flat == Some(start.frame) {
            let eng = self.eng;
            let bits = self.ring_bits(
                self.log.blocks.ring_allocs.len(),
                self.log.blocks.ring_frees.len(),
            );
            if self.log.commit_in_ring(eng, &bits)? {
                // Committed and applied: its blocks are the pool's, later
                // writes into them go to the write set, its frees are
                // reusable.
                self.log.blocks.ring_allocs.clear();
                self.log.blocks.fresh.clear();
                for (off, size) in self.log.blocks.ring_frees.drain(..) {
                    eng.alloc.release(off, size);
                }
                self.log.blocks.freed.clear();
                return Ok(());
            }
            // Not in the ring (too large, or no room): an ordinary nested
            // top action.
            self.settle_ring()?;
            self.log.flush(eng)?;
        }
        self.end_action(start, head, 0)
    }

    fn end_action(&mut self, start: Savepoint, head: u64, freed_from: usize) -> Result<(), Error> {
        self.log.flush(self.eng)?;
        if self.log.undo.len() > start.undo_len {
            let eng = self.eng;
            // The append's fence also makes the action's stores persistent
            // before its CLR.
            let end = Draft::nta_end(self.log.id, head);
            self.log.append(eng, &[end])?;
            self.log.undo.truncate(start.undo_len);
            // Frees the action made are final.
            self.release_freed(freed_from)?;
        }
        // Blocks the action allocated are the pool's now: later writes
        // into them are logged.
        self.log.blocks.fresh.clear();
        Ok(())
    }
}

/// Goes on with the panic an action's closure raised, if it did
/// ([`Tx::run_action`]).
fn resume(panic: Option<Box<dyn std::any::Any + Send>>) {
    if let Some(payload) = panic {
        std::panic::resume_unwind(payload);
    }
}
