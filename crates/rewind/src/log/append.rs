//! Appending records to the bucket log (`docs/architecture.md`, "Appending
//! records"): an append is paid for first ([`Charge`]: nothing is written
//! when the log cannot grow enough), then its records are placed one after
//! another in the tail bucket's cells and body, and the variant's
//! [`Protocol`] makes them durable and valid. Each protocol's ordering is
//! one short function here, [`Protocol::placed`] per record and
//! [`Protocol::seal`] per append, with the fence sites the crash explorer
//! disables one by one.

use crate::error::Error;
use crate::format::record::{self, Draft, GroupChecksum, Kind, ONE_FENCE_PAYLOAD};
use crate::format::LogVariant;
use crate::persist::{sites, Domain};

use super::{tagged_cell, tree, CellRef, Log, Placed, Reservation, State, GAP, INDEX};

/// How an append makes its records durable and valid: one ordering per
/// log variant, and the one-fence commit of the redo policies.
enum Protocol {
    /// Simple and Optimized: each record's body fenced, then its cell
    /// stored and fenced, before the next record.
    EachRecord,
    /// Batch: the group's bodies and cells, one fence, then the bucket
    /// index that makes them valid (a fence between two buckets' indexes),
    /// fenced.
    Group,
    /// A one-fence commit (Optimized and Batch, NVWAL §4.3): bodies and
    /// tagged cells, and an END holding the checksum of the records before
    /// it, under one fence. The checksum is built as the records are
    /// encoded.
    OneFence(GroupChecksum),
    /// Two-layer: each record a tree node, made valid by the append's
    /// tree insertion (its own fenced operation).
    Tree,
}

impl Protocol {
    fn of(variant: LogVariant, one_fence: bool) -> Protocol {
        match variant {
            _ if one_fence => Protocol::OneFence(GroupChecksum::default()),
            LogVariant::Simple | LogVariant::Optimized => Protocol::EachRecord,
            LogVariant::Batch => Protocol::Group,
            LogVariant::TwoLayer => Protocol::Tree,
        }
    }

    /// Before the first record. The clears committed transactions left
    /// pending and other threads' unfenced clears are stored so that this
    /// append's first fence persists them before any in-place store it
    /// covers (a group stores them just before its fence instead).
    fn begin(&self, d: &Domain, st: &mut State) -> Result<(), Error> {
        st.batch_index.clear();
        st.batch_cells.clear();
        match self {
            Protocol::Group => Ok(()),
            _ => st.store_others_clears(d),
        }
    }

    /// Encodes `draft` into `st.scratch`. A one-fence commit's END carries
    /// its commit sequence number `seq` and the group's checksum; its other
    /// records add theirs to the checksum.
    fn encode(&mut self, st: &mut State, draft: &Draft<'_>, lsn: u64, prev: u64, seq: u64) {
        match self {
            Protocol::OneFence(group) if draft.kind == Kind::End => {
                let mut payload = [0u8; ONE_FENCE_PAYLOAD];
                payload[..8].copy_from_slice(&seq.to_le_bytes());
                payload[8..].copy_from_slice(&group.value().to_le_bytes());
                Draft::end_one_fence(draft.tx, draft.aux, &payload).encode(
                    lsn,
                    prev,
                    &mut st.scratch,
                );
            }
            Protocol::OneFence(group) => {
                draft.encode(lsn, prev, &mut st.scratch);
                group.add(lsn, record::stored_crc(&st.scratch));
            }
            _ => draft.encode(lsn, prev, &mut st.scratch),
        }
    }

    /// After a record's body is stored (non-temporal) at `rec_off`, its
    /// cell being `cell`.
    fn placed(
        &self,
        d: &Domain,
        st: &mut State,
        cell: CellRef,
        rec_off: u64,
        lsn: u64,
    ) -> Result<(), Error> {
        match self {
            Protocol::EachRecord => {
                // The body persistent before a cell points at it.
                d.fence_at(sites::LOG_RECORD_BODY)?;
                d.store_nt_u64(cell.off(), rec_off)?;
                // The cell persistent before the caller's in-place store.
                d.fence_at(sites::LOG_RECORD_CELL)
            }
            Protocol::Group => {
                st.batch_cells.push((cell, rec_off));
                match st.batch_index.last_mut() {
                    Some((blk, n)) if *blk == cell.block => *n = cell.idx + 1,
                    _ => st.batch_index.push((cell.block, cell.idx + 1)),
                }
                Ok(())
            }
            Protocol::OneFence(_) => {
                let b = st.buckets.get_mut(&cell.block);
                b.expect("a placed record's bucket is tracked")
                    .tagged
                    .push(rec_off);
                st.batch_cells.push((cell, tagged_cell(rec_off, lsn)));
                Ok(())
            }
            // The node's body is fenced by the tree operation in `seal`.
            Protocol::Tree => Ok(()),
        }
    }

    /// After the last record (`placed`, the append's records): they are
    /// made durable and valid before the caller's in-place stores.
    fn seal(&self, log: &Log, d: &Domain, st: &mut State, placed: &[Placed]) -> Result<(), Error> {
        match self {
            Protocol::EachRecord => Ok(()),
            Protocol::Group if placed.is_empty() => Ok(()),
            Protocol::Group => {
                st.store_others_clears(d)?;
                store_cells(d, &mut st.words, &st.batch_cells)?;
                // Bodies and cells of the group persistent before the
                // index makes them valid.
                d.fence_at(sites::LOG_GROUP_BODY)?;
                for (i, &(block, n)) in st.batch_index.iter().enumerate() {
                    if i > 0 {
                        // A group spanning buckets becomes valid in log
                        // order: a crash may leave a prefix of it, never a
                        // later part alone (an END without its records, a
                        // CLR without the earlier ones).
                        d.fence_at(sites::LOG_GROUP_SPAN)?;
                    }
                    d.store_nt_u64(block + INDEX, n as u64)?;
                }
                // The index persistent before the caller's in-place stores.
                d.fence_at(sites::LOG_GROUP_INDEX)
            }
            Protocol::OneFence(_) => {
                // The cells after the bodies, a run per line (one line
                // write, not one per record); records and END durable
                // together: the commit point.
                store_cells(d, &mut st.words, &st.batch_cells)?;
                d.fence_at(sites::LOG_ONE_FENCE)
            }
            // Valid once in the tree, before the caller's in-place stores.
            Protocol::Tree => log.tree_insert(d, st, placed),
        }
    }
}

/// What an append costs (see [`Log::append`]), known to fit before any
/// record is written; the accounting changes only once they are placed.
struct Charge {
    /// Of the append's records that are not forward ones, the cost its
    /// reservation pays.
    paid: u64,
    /// Space the forward records add to the reservation: their CLRs, and a
    /// transaction's ROLLBACK and END with its first.
    reserve: u64,
    /// The checkpoint's reservation, taken by the first forward record
    /// since the last checkpoint.
    held: u64,
    /// The append has forward records.
    forward: bool,
}

impl Charge {
    /// The accounting of an append whose records are placed. Only then:
    /// an append that fails on the way (`room` finding no block after all)
    /// holds nothing, and leaves no checkpoint reservation marked held
    /// whose bytes `reserved` never got (the next checkpoint would take
    /// them back: an underflow that made every later append `LogFull`).
    fn settle(self, st: &mut State, res: &mut Reservation) {
        res.bytes -= self.paid;
        st.reserved -= self.paid;
        if self.forward {
            res.started = true;
            st.checkpoint_held = true;
        }
        st.reserved += self.reserve + self.held;
        res.bytes += self.reserve;
    }
}

impl Log {
    /// Appends `drafts` in order and makes them persistent and valid before
    /// returning, so the caller may then perform the in-place stores they
    /// describe (WAL). Forward records (UPDATE, ALLOC, DELETE) add to `res`
    /// the space of their CLRs (and, for a transaction's first, its
    /// ROLLBACK and END); the others (CLR, END, ROLLBACK, CHECKPOINT) are
    /// paid from `res`, so a rollback never finds the log full. The log
    /// grows into the heap when it must; when it cannot, nothing is written
    /// and the error is [`Error::LogFull`].
    pub fn append(
        &self,
        d: &Domain,
        drafts: &[Draft<'_>],
        out: &mut Vec<Placed>,
        res: &mut Reservation,
    ) -> Result<(), Error> {
        let mut st = self.state.lock();
        self.append_locked(d, &mut st, drafts, out, res, false)
    }

    /// Appends a one-fence commit (NVWAL §4.3): `drafts` (the REDO records
    /// of a transaction with no other record in the log) and, after them,
    /// END with the commit sequence number and the group's checksum, all
    /// under a single fence. Optimized and Batch logs only: the others'
    /// records become valid through their own fenced structures.
    pub fn append_commit(
        &self,
        d: &Domain,
        drafts: &[Draft<'_>],
        out: &mut Vec<Placed>,
        res: &mut Reservation,
    ) -> Result<(), Error> {
        debug_assert!(self.variant.one_fence());
        debug_assert!(drafts.last().is_some_and(|e| e.kind == Kind::End));
        let mut st = self.state.lock();
        self.append_locked(d, &mut st, drafts, out, res, true)
    }

    /// Appends a transaction's END record and, under force, clears its
    /// records (`cells`, then END: see [`release`](Self::release)) in the
    /// same critical section.
    pub fn append_end(
        &self,
        d: &Domain,
        end: &Draft<'_>,
        clear: Option<&[CellRef]>,
        out: &mut Vec<Placed>,
        res: &mut Reservation,
    ) -> Result<(), Error> {
        let mut st = self.state.lock();
        let st = &mut *st;
        let first = out.len();
        self.append_locked(d, st, std::slice::from_ref(end), out, res, false)?;
        if let Some(cells) = clear {
            self.release_locked(d, st, cells, Some(out[first].cell))?;
        }
        Ok(())
    }

    fn append_locked(
        &self,
        d: &Domain,
        st: &mut State,
        drafts: &[Draft<'_>],
        out: &mut Vec<Placed>,
        res: &mut Reservation,
        one_fence: bool,
    ) -> Result<(), Error> {
        let charge = self.charge(d, st, drafts, res)?;
        let mut protocol = Protocol::of(self.variant, one_fence);
        protocol.begin(d, st)?;
        // The append's lsns, taken at once before any record is written: a
        // locked instruction drains the write-combining buffers, so one
        // among the records' non-temporal stores would wait for all of them.
        let first_lsn = self.lsns.take(drafts.len() as u64);
        let first_out = out.len();
        for (lsn, draft) in (first_lsn..).zip(drafts) {
            let size = draft.size() as u64 + self.node;
            let block = self.room(d, st, size)?;
            // A CHECKPOINT belongs to no transaction's chain.
            let prev = match draft.kind {
                Kind::Checkpoint => 0,
                _ => std::mem::replace(&mut res.last, lsn),
            };
            let seq = if draft.kind == Kind::End && draft.flags & record::END_COMMITTED != 0 {
                st.csn += 1;
                st.csn - 1
            } else {
                0
            };
            protocol.encode(st, draft, lsn, prev, seq);
            let (cell, rec_off) = self.claim(d, st, block, size)?;
            d.store_nt(rec_off, &st.scratch)?;
            protocol.placed(d, st, cell, rec_off, lsn)?;
            out.push(Placed {
                lsn,
                cell,
                rec_off,
                seq,
            });
        }
        protocol.seal(self, d, st, &out[first_out..])?;
        charge.settle(st, res);
        Ok(())
    }

    /// What appending `drafts` under `res` costs, the log grown into the
    /// heap until it fits beside every other reservation; when it cannot,
    /// [`Error::LogFull`] and nothing changed but the log's size.
    fn charge(
        &self,
        d: &Domain,
        st: &mut State,
        drafts: &[Draft<'_>],
        res: &Reservation,
    ) -> Result<Charge, Error> {
        let (mut forward, mut other, mut reserve) = (0, 0, 0);
        for x in drafts {
            let c = self.cost(x.size() as u64);
            match x.kind {
                Kind::Update | Kind::Alloc | Kind::Delete => {
                    forward += c;
                    reserve += self.clr_cost(x);
                }
                _ => other += c,
            }
        }
        let mut held = 0;
        if forward > 0 {
            if !res.started {
                reserve += 2 * self.bare_cost();
            }
            if !st.checkpoint_held {
                held = self.bare_cost();
            }
        }
        let paid = other.min(res.bytes);
        let needed = forward + reserve + held + (other - paid);
        // Reserved space not this append's to use.
        let others = st.reserved - paid;
        while self.available(st).saturating_sub(others) < needed || !self.holds(st) {
            if !self.grow(d, st)? {
                return Err(Error::LogFull {
                    needed,
                    free: self.available(st).saturating_sub(others),
                });
            }
        }
        Ok(Charge {
            paid,
            reserve,
            held,
            forward: forward > 0,
        })
    }

    /// Takes the next cell and `size` bytes of body (a two-layer node's
    /// header included) of `block`, the bucket [`room`](Self::room)
    /// chose: the record's cell and the offset its encoding goes to. A
    /// two-layer node's header is stored here.
    fn claim(
        &self,
        d: &Domain,
        st: &mut State,
        block: u64,
        size: u64,
    ) -> Result<(CellRef, u64), Error> {
        let b = st.buckets.get_mut(&block).expect("tail bucket is tracked");
        let at = block + b.body_used;
        let cell = if self.node > 0 {
            CellRef::node_at(block, at)
        } else {
            CellRef {
                block,
                idx: b.next_cell,
            }
        };
        b.body_used += size;
        b.next_cell += 1;
        b.live += 1;
        if self.node > 0 {
            d.store_nt(at, &tree::leaf_header(at))?;
        }
        Ok((cell, at + self.node))
    }
}

/// Writes cell values, one non-temporal store per run of adjacent cells:
/// whole-line writes cost a fraction of word-by-word ones.
pub(super) fn store_cells(
    d: &Domain,
    words: &mut Vec<u8>,
    cells: &[(CellRef, u64)],
) -> Result<(), Error> {
    let mut i = 0;
    while i < cells.len() {
        let start = cells[i].0;
        words.clear();
        let mut j = i;
        while j < cells.len()
            && cells[j].0.block == start.block
            && cells[j].0.idx == start.idx + (j - i) as u32
        {
            words.extend_from_slice(&cells[j].1.to_le_bytes());
            j += 1;
        }
        d.store_nt(start.off(), words)?;
        i = j;
    }
    Ok(())
}

/// Marks cells as gaps, coalescing adjacent ones.
pub(super) fn gap_cells(
    d: &Domain,
    words: &mut Vec<u8>,
    sorted: &mut Vec<(CellRef, u64)>,
    cells: &[CellRef],
) -> Result<(), Error> {
    sorted.clear();
    sorted.extend(cells.iter().map(|&c| (c, GAP)));
    sorted.sort_unstable_by_key(|(c, _)| (c.block, c.idx));
    store_cells(d, words, sorted)
}
