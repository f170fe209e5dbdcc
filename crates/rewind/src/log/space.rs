//! The log's space (`docs/architecture.md`, "Log space"): what a record
//! costs, what the log is sure to hold, the reservations that let every
//! rollback, recovery and checkpoint find the space its records need, and
//! the heap chunks the log grows into and gives back.
//!
//! Space is counted conservatively: a block is worth what any sequence of
//! records is sure to fit in it, whatever the mix of sizes, so an append
//! whose cost is within the count never fails.

use crate::alloc;
use crate::error::Error;
use crate::format::record::{self, Draft, Kind};
use crate::persist::{sites, Domain};

use super::blocks::Blocks;
use super::{Log, State, MAX_RECORD};

/// A transaction's place in the log: the head of its record chain, and the
/// log space it holds for the records its end may need (the compensation
/// records of its forward records, its ROLLBACK and its END).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reservation {
    /// Bytes held (in the log's cost units).
    pub bytes: u64,
    /// ROLLBACK and END are reserved (at the first forward record).
    pub(super) started: bool,
    /// Lsn of the transaction's latest record (0: none yet): the `prev` of
    /// its next one.
    pub last: u64,
}

impl Reservation {
    /// No reservation, for records that fit by construction: recovery's,
    /// continuing the chain whose latest record is `last`.
    pub fn none(last: u64) -> Reservation {
        Reservation {
            bytes: 0,
            started: true,
            last,
        }
    }
}

impl Log {
    pub(super) fn cost(&self, size: u64) -> u64 {
        (size + self.node).max(self.per_cell)
    }

    /// Log space a rollback of this record needs (its CLR: the old bytes
    /// of an UPDATE, the block size of an ALLOC or DELETE).
    pub fn clr_cost(&self, d: &Draft) -> u64 {
        match d.kind {
            Kind::Update => self.cost((record::HEADER + d.new.len().div_ceil(8) * 8) as u64),
            Kind::Alloc | Kind::Delete => self.cost(record::HEADER as u64 + 8),
            _ => 0,
        }
    }

    /// Space of a record without payload (ROLLBACK, END, CHECKPOINT).
    pub(super) fn bare_cost(&self) -> u64 {
        self.cost(record::HEADER as u64)
    }

    /// Reserves the space of a REDO record of `len` bytes of value (and,
    /// for a transaction's first, its END and ROLLBACK), which its commit
    /// group will be paid from: a redo transaction's write set is bounded by
    /// the log it must fit in. The log grows into the heap when it must;
    /// when it cannot, [`Error::LogFull`] and nothing is reserved.
    pub fn reserve_redo(&self, d: &Domain, len: usize, res: &mut Reservation) -> Result<(), Error> {
        let mut st = self.state.lock();
        let st = &mut *st;
        let mut needed = self.cost((record::HEADER + len.div_ceil(8) * 8) as u64);
        if !res.started {
            needed += 2 * self.bare_cost();
        }
        while self.available(st).saturating_sub(st.reserved) < needed || !self.holds(st) {
            if !self.grow(d, st)? {
                return Err(Error::LogFull {
                    needed,
                    free: self.available(st).saturating_sub(st.reserved),
                });
            }
        }
        res.started = true;
        st.reserved += needed;
        res.bytes += needed;
        Ok(())
    }

    /// Log space sure to be there: what any sequence of records costing
    /// this much fits in (free blocks plus the tail's room). An append
    /// lowers it by at most its cost, whichever block its records land in.
    pub(super) fn available(&self, st: &State) -> u64 {
        let tail = st.order.last().map_or(0, |t| {
            let b = &st.buckets[&t];
            usable(
                self.layout.bucket_cells,
                self.per_cell,
                self.layout.bucket_cells - b.next_cell as u64,
                self.layout.log_block_size - b.body_used,
                MAX_RECORD + self.node,
            )
        });
        // Two-layer: the blocks held for tree operations are not records' room.
        let blocks = (st.free.len() + st.inner.order.len()) as u64;
        match blocks.checked_sub(st.inner.hold) {
            Some(n) => n * self.block_usable + tail,
            None => 0,
        }
    }

    /// Two-layer: whether the blocks the largest tree operation needs are
    /// there (always so for the other variants).
    pub(super) fn holds(&self, st: &State) -> bool {
        (st.free.len() + st.inner.order.len()) as u64 >= st.inner.hold
    }

    /// Takes a chunk from the heap and adds its blocks to the free set.
    /// `false` when the heap has none (or the log is not attached to it).
    pub(super) fn grow(&self, d: &Domain, st: &mut State) -> Result<bool, Error> {
        let Some(heap) = self.heap.get() else {
            return Ok(false);
        };
        if Blocks::per_chunk(&self.layout) == 0 {
            return Ok(false);
        }
        let chunk = match heap.reserve_log_chunk(d) {
            Ok(c) => c,
            Err(Error::OutOfMemory { .. }) => return Ok(false),
            Err(e) => return Err(e),
        };
        st.blocks.add_chunk(chunk);
        let per_chunk = Blocks::per_chunk(&self.layout);
        for b in st.blocks.chunk_blocks(chunk).collect::<Vec<_>>() {
            st.free.insert(&st.blocks, per_chunk, b);
        }
        Ok(true)
    }

    /// Gives `block`'s heap chunk back when all its blocks are free and the
    /// log keeps enough space for every reservation without it.
    pub(super) fn maybe_shrink(&self, d: &Domain, st: &mut State, block: u64) -> Result<(), Error> {
        let (Some(heap), Some(chunk)) = (self.heap.get(), st.blocks.chunk_of(block)) else {
            return Ok(());
        };
        let n = Blocks::per_chunk(&self.layout);
        let blocks = (st.free.len() + st.inner.order.len()) as u64;
        if !st.free.is_idle(chunk)
            || self.available(st) < st.reserved + n * self.block_usable
            || blocks < st.inner.hold + n
        {
            return Ok(());
        }
        st.forget_chunk(chunk);
        heap.release_log_chunk(d, chunk)
    }

    /// Gives every log chunk back to the heap (an empty log: after
    /// recovery, at a clean close). Before the allocator exists (at open)
    /// the descriptors are freed directly.
    pub fn release_chunks(&self, d: &Domain) -> Result<(), Error> {
        let mut st = self.state.lock();
        if !st.order.is_empty() {
            return Ok(());
        }
        let chunks: Vec<u64> = st.blocks.chunks().collect();
        for chunk in chunks {
            st.forget_chunk(chunk);
            match self.heap.get() {
                Some(heap) => heap.release_log_chunk(d, chunk)?,
                None => {
                    alloc::free_log_chunk(d, &self.layout, chunk)?;
                }
            }
        }
        // The freed descriptors persistent (a crash before leaves chunks
        // the next open frees again).
        d.fence_at(sites::ALLOC_LOG_SHRINK_FENCE)
    }

    /// Takes the checkpoint's reservation for its CHECKPOINT record.
    pub fn take_checkpoint_reservation(&self) -> Reservation {
        let mut st = self.state.lock();
        let bytes = if st.checkpoint_held {
            st.checkpoint_held = false;
            self.bare_cost()
        } else {
            0
        };
        Reservation {
            bytes,
            started: true,
            last: 0,
        }
    }

    /// Returns what is left of a reservation once its transaction ended,
    /// and gives back the heap chunks the log no longer needs.
    pub fn unreserve(&self, d: &Domain, res: &mut Reservation) -> Result<(), Error> {
        let mut st = self.state.lock();
        st.reserved -= res.bytes;
        res.bytes = 0;
        // Only chunks whose blocks are all free can go.
        for chunk in st.free.idle() {
            self.maybe_shrink(d, &mut st, chunk)?;
        }
        Ok(())
    }
}

/// The space a block with `cells` of its `cells_total` cells and `body`
/// bytes of body left is sure to hold, in cost units (a record costs its
/// size, at least `per_cell`). A record that does not fit leaves the block
/// with no cell or with less than `largest` (the largest record, with its
/// two-layer node header) of body, both of which count 0 here; so appends
/// lower the total by at most their cost.
pub(super) fn usable(cells_total: u64, per_cell: u64, cells: u64, body: u64, largest: u64) -> u64 {
    if cells == 0 {
        0
    } else if cells_total == 1 {
        // Simple: one record per node, whatever its size.
        per_cell
    } else {
        (cells * per_cell).min(body.saturating_sub(largest))
    }
}
