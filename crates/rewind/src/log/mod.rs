//! The recoverable log (REWIND §3): records linked into an Atomic
//! Doubly-Linked List of fixed-size blocks.
//!
//! * **Simple** — one record per ADLL node (Algorithm 1 for every append).
//! * **Optimized** — the ADLL links buckets of `bucket_cells` cells; placing
//!   a record is one 8-byte store into a zeroed cell, after its body is
//!   persistent. Cleared cells become marked gaps; a bucket leaves the list
//!   when it is empty. Counts and the next free cell are rebuilt at recovery.
//! * **Batch** — Optimized plus a per-bucket persisted index: the records of
//!   a group (up to 8, one cache line of cells) are written, fenced once, and
//!   only then made valid by the index; recovery ignores cells past it. The
//!   transaction holds the group's in-place stores until the group is valid.
//!
//! A block is 64 bytes of header (`prev`, `next`, the Batch index at +24),
//! the cells, then a body area where the records of its cells live. Blocks
//! that are not in the list are free; the free set is rebuilt at open, so
//! the log needs no allocator of its own on media.
//!
//! **Space.** The log starts with the blocks of its region (the configured
//! log size) and grows by whole heap chunks taken through the allocator
//! ([`blocks`]); a chunk whose blocks are all free again goes back to the
//! heap. Every forward record (UPDATE, ALLOC, DELETE) reserves, when it is
//! logged, the space of the compensation record its rollback would write,
//! and a transaction's first one also reserves its ROLLBACK and END (as
//! ARIES does); the log keeps one CHECKPOINT's worth besides. Those records
//! are charged to the reservation, so rollback, recovery (which only writes
//! such records for the transactions it rolls back) and checkpoints never
//! need space they cannot get. Space is counted conservatively: a block is
//! worth what any sequence of records is sure to fit in it, whatever the
//! mix of sizes, so an append whose cost is within the count never fails.
//! When the heap has no chunk left, a forward append fails with
//! [`Error::LogFull`] and nothing is written.
//!
//! A `Log` is an instance over its own list (`adll::List`, its words in
//! the meta page) and its own blocks, drawing lsns from a counter
//! ([`Lsns`]) that several logs can share, so that per-thread lanes (MARS's
//! distributed log) can later be several `Log`s merged by lsn at recovery.
//! All appends and removals of one log hold its latch (`State`).
//!
//! **Code.** This module holds the log's volatile state, its opening and
//! the clearing of finished transactions' records; `append` the writer
//! (an append's charge, then its records placed and made valid by the
//! variant's protocol, one short function each), `reader` the recovery
//! scan, `space` the costs, reservations and growth, `two_layer` the
//! two-layer variant's tree operations. The commit ring of the redo
//! policies is [`ring`], its per-thread lanes [`lanes`].

pub mod adll;
mod append;
pub mod blocks;
pub mod lanes;
mod reader;
pub mod ring;
mod space;
pub(crate) mod table;
mod tracking;
pub mod tree;
mod two_layer;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::alloc::{self, Allocator};
use crate::error::Error;
use crate::format::layout::{Layout, MAX_RECORD_DATA, RECORD_HEADER};
pub use crate::format::record::{Draft, Kind, Record};
pub use crate::format::LogVariant;
use crate::persist::Domain;
use append::{gap_cells, store_cells};
use blocks::Blocks;
use reader::scan;
use space::usable;
pub use space::Reservation;
use tracking::{Free, Order};

/// A cell of a bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CellRef {
    /// The block.
    pub block: u64,
    /// Cell index.
    pub idx: u32,
}

impl CellRef {
    fn off(self) -> u64 {
        self.block + CELLS + 8 * self.idx as u64
    }

    /// The two-layer log names a record by its tree node: the node's block
    /// and its offset there in 8-byte units.
    fn node_at(block: u64, node: u64) -> CellRef {
        CellRef {
            block,
            idx: ((node - block) / 8) as u32,
        }
    }

    /// The tree node a two-layer log's reference names.
    fn node(self) -> u64 {
        self.block + 8 * self.idx as u64
    }
}

/// A record placed in the log.
#[derive(Clone, Copy, Debug)]
pub struct Placed {
    /// Its lsn.
    pub lsn: u64,
    /// Its cell.
    pub cell: CellRef,
    /// Offset of its body.
    pub rec_off: u64,
    /// A committed END's commit sequence number (0 for other records):
    /// commits take them in log order, one each, without gaps.
    pub seq: u64,
}

/// A record found by the recovery scan.
#[derive(Clone, Debug)]
pub struct Scanned {
    /// The record.
    pub rec: Record,
    /// Its cell.
    pub cell: CellRef,
}

/// Block header: `prev`, `next` (ADLL), Batch persisted index at +24.
const INDEX: u64 = 24;
/// Cells start after the 64-byte block header.
const CELLS: u64 = 64;
/// Cell value of a cleared record.
const GAP: u64 = 1;

#[derive(Clone, Debug)]
struct Bucket {
    next_cell: u32,
    live: u32,
    body_used: u64,
    /// Bodies of one-fence records placed here: invalidated when the
    /// block is reused, before it rejoins the list (see [`tagged_cell`]).
    tagged: Vec<u64>,
}

/// Cell tag of a one-fence commit's record (bit 1; record offsets are
/// multiples of 8, and 1 is a gap).
const TAG: u64 = 2;
/// A tagged cell's record offset bits; the 16 bits above are the low bits
/// of the record's lsn.
const OFF_BITS: u64 = (1 << 48) - 1;

/// The cell value of a one-fence commit's record. Its body and cell go out
/// under the commit's single fence, so a crash may keep the cell and lose
/// the body: the scan then finds whatever bytes were there before. The tag
/// tells it such a body may be torn (a bad one is ignored, not corruption),
/// and the lsn bits, with the bodies a block's one-fence records had being
/// invalidated before the block rejoins the list, keep an older record
/// left at the same offset from passing for the new one.
fn tagged_cell(rec_off: u64, lsn: u64) -> u64 {
    rec_off | TAG | ((lsn & 0xffff) << 48)
}

/// Volatile bucket state by block offset. Block offsets are distinct
/// multiples of 64, so a multiplicative hash is enough (no SipHash on the
/// append path).
#[derive(Default)]
struct OffsetHasher(u64);

impl std::hash::Hasher for OffsetHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (v >> 6).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type Buckets = HashMap<u64, Bucket, std::hash::BuildHasherDefault<OffsetHasher>>;

struct State {
    layout: Layout,
    /// The list the log's blocks are linked into.
    list: adll::List,
    order: Order,
    buckets: Buckets,
    blocks: Blocks,
    /// Blocks not in the list.
    free: Free,
    /// Space held by reservations, the checkpoint's included.
    reserved: u64,
    /// The checkpoint's reservation is held.
    checkpoint_held: bool,
    /// Batch: cells cleared since the last group append, with the thread
    /// that cleared them (see `append_locked`).
    unfenced_clears: Vec<(u64, CellRef)>,
    /// The cells of committed transactions' commit groups (Batch, the redo
    /// policy) whose clearing waits for the next append (see
    /// [`Log::release_later`]).
    pending_clears: Vec<CellRef>,
    scratch: Vec<u8>,
    batch_index: Vec<(u64, u32)>,
    batch_cells: Vec<(CellRef, u64)>,
    sorted: Vec<(CellRef, u64)>,
    words: Vec<u8>,
    /// Two-layer: the tree's update log.
    inner: two_layer::Inner,
    /// One-fence records' bodies in blocks out of the list, invalidated
    /// when the block is reused.
    stale: HashMap<u64, Vec<u64>>,
    /// The next one-fence commit's sequence number: taken with its lsns,
    /// so commit order and log order agree; it starts at the lsn counter's
    /// value at open, above every sequence number in the log (an END's is
    /// below its own lsn).
    csn: u64,
}

impl State {
    /// Takes `block` out of the list (an ADLL removal) and out of the
    /// volatile state; its block becomes free.
    fn unlist(&mut self, d: &Domain, block: u64) -> Result<(), Error> {
        self.list.remove(d, block)?;
        if let Some(b) = self.buckets.remove(&block) {
            // Its one-fence records are invalidated when the block is
            // reused (see `Log::room`), not now: while it is in the list a
            // crash could find a newer group's record invalid and an older
            // group whole, and redo the older values over the newer.
            if !b.tagged.is_empty() {
                self.stale.insert(block, b.tagged);
            }
        }
        self.order.remove(block);
        let per_chunk = Blocks::per_chunk(&self.layout);
        self.free.insert(&self.blocks, per_chunk, block);
        self.unfenced_clears.retain(|(_, c)| c.block != block);
        // Out of the list, its cells no longer count; a reuse zeroes them.
        self.pending_clears.retain(|c| c.block != block);
        Ok(())
    }

    /// Batch: a fence persists only its own thread's stores. Another
    /// thread's clears of a committed group, not yet fenced, would let
    /// recovery redo that group over the stores this thread makes after its
    /// next fence: they are stored again, so that fence persists them first.
    /// The clears committed transactions left pending are stored here too,
    /// by this thread, so the same fence persists them.
    fn store_others_clears(&mut self, d: &Domain) -> Result<(), Error> {
        let me = thread_tag();
        // The pending list, extended by the others' unfenced clears, is the
        // list to store (no allocation per append once it has grown).
        let mut cells = std::mem::take(&mut self.pending_clears);
        cells.extend(
            self.unfenced_clears
                .iter()
                .filter(|(t, _)| *t != me)
                .map(|&(_, c)| c),
        );
        let r = if cells.is_empty() {
            Ok(())
        } else {
            gap_cells(d, &mut self.words, &mut self.sorted, &cells)
        };
        cells.clear();
        self.pending_clears = cells;
        self.unfenced_clears.clear();
        r
    }

    /// Forgets log chunk `chunk`, all of whose blocks are free; the caller
    /// frees its descriptor.
    fn forget_chunk(&mut self, chunk: u64) {
        for b in self.blocks.chunk_blocks(chunk) {
            self.stale.remove(&b);
        }
        self.free.forget_chunk(&self.blocks, chunk);
        self.blocks.remove_chunk(chunk);
    }
}

/// Usage figures.
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
pub struct LogStats {
    /// Blocks in the list.
    pub blocks_used: u64,
    /// Blocks in the region.
    pub blocks_total: u64,
    /// Records not cleared.
    pub live_records: u64,
}

/// The log of one pool.
pub struct Log {
    variant: LogVariant,
    layout: Layout,
    /// Bytes a record takes besides its encoding: the tree node header of
    /// the two-layer log.
    node: u64,
    /// Space a record costs at least: its share of a block's body.
    per_cell: u64,
    /// Space a free block is sure to hold.
    block_usable: u64,
    state: Mutex<State>,
    /// The heap the log grows into; unset during recovery (which never
    /// needs to grow).
    heap: OnceLock<Arc<Allocator>>,
    /// Where its lsns come from.
    lsns: Arc<Lsns>,
    /// Clears wait to be stored (pending or other threads' unfenced
    /// ones): read without the latch by [`settle_clears`](Self::settle_clears).
    clears: std::sync::atomic::AtomicBool,
}

/// A source of lsns, shared by the logs of one pool: strictly increasing
/// in the order taken, above every lsn found in any of them at open.
#[derive(Debug, Default)]
pub struct Lsns(std::sync::atomic::AtomicU64);

impl Lsns {
    /// A counter whose first lsn is 1.
    pub fn new() -> Lsns {
        Lsns(std::sync::atomic::AtomicU64::new(1))
    }

    /// Makes every later lsn greater than `lsn` (one found in a log).
    pub fn observe(&self, lsn: u64) {
        self.0
            .fetch_max(lsn.saturating_add(1), std::sync::atomic::Ordering::Relaxed);
    }

    /// The next lsn, without taking it.
    fn peek(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `n` consecutive lsns; returns the first.
    fn take(&self, n: u64) -> u64 {
        self.0.fetch_add(n, std::sync::atomic::Ordering::Relaxed)
    }
}

/// The largest record: header plus old and new values of the longest piece.
const MAX_RECORD: u64 = RECORD_HEADER + 2 * MAX_RECORD_DATA;

/// What [`Log::open`] found.
pub struct Opened {
    /// The log, ready for appends.
    pub log: Log,
    /// Every valid record in log order.
    pub records: Vec<Scanned>,
    /// What the ADLL recovery redid.
    pub repair: adll::Repair,
}

impl Log {
    /// Recovers the list structure, then scans every bucket (REWIND §4.5,
    /// "we must first recover the log itself").
    ///
    /// The log's blocks are linked into `list`; its lsns come from `lsns`,
    /// which learns the highest lsn found.
    pub fn open(
        d: &Domain,
        layout: &Layout,
        variant: LogVariant,
        list: adll::List,
        lsns: Arc<Lsns>,
    ) -> Result<Opened, Error> {
        let blocks = Blocks::new(layout, alloc::log_chunks(d, layout)?);
        let mut repair = list.recover(d, &blocks)?;
        let (order, mut buckets, mut records) = scan(d, layout, &blocks, variant, list)?;
        let mut inner = two_layer::Inner::none();
        if variant == LogVariant::TwoLayer {
            let (r, inner_repair) =
                two_layer::recover(d, layout, &blocks, &order, &mut buckets, &records)?;
            lsns.observe(r.max_lsn);
            records = r.records;
            inner = r.inner;
            repair.append |= inner_repair.append;
            repair.remove |= inner_repair.remove;
        } else {
            list.check_unlinked(d, &blocks, &order)?;
            two_layer::check_unused(d)?;
        }
        let in_list: std::collections::HashSet<u64> = order.iter().copied().collect();
        let mut free = Free::default();
        let per_chunk = Blocks::per_chunk(layout);
        for b in blocks.all() {
            if !in_list.contains(&b) {
                free.insert(&blocks, per_chunk, b);
            }
        }
        let order = Order::new(&order);
        if let Some(s) = records.last() {
            lsns.observe(s.rec.lsn);
        }
        let node = if variant == LogVariant::TwoLayer {
            tree::NODE
        } else {
            0
        };
        let csn = lsns.peek();
        let body = layout.log_block_size - layout.body_start();
        let per_cell = (body / layout.bucket_cells).max(1);
        let mut log = Log {
            variant,
            layout: *layout,
            node,
            per_cell,
            block_usable: usable(
                layout.bucket_cells,
                per_cell,
                layout.bucket_cells,
                body,
                MAX_RECORD + node,
            ),
            heap: OnceLock::new(),
            lsns,
            clears: std::sync::atomic::AtomicBool::new(false),
            state: Mutex::new(State {
                layout: *layout,
                list,
                order,
                buckets,
                blocks,
                free,
                reserved: 0,
                checkpoint_held: false,
                unfenced_clears: Vec::new(),
                pending_clears: Vec::new(),
                scratch: Vec::with_capacity(1024),
                batch_index: Vec::new(),
                batch_cells: Vec::new(),
                sorted: Vec::new(),
                words: Vec::new(),
                inner,
                stale: HashMap::new(),
                csn,
            }),
        };
        log.drop_empty_buckets(d)?;
        Ok(Opened {
            log,
            records,
            repair,
        })
    }

    /// Takes out of the list every bucket that holds no valid record: the
    /// buckets of a group a crash left invalid (Batch), the empty tail.
    /// The space of records that never became valid is then free again,
    /// so recovery has at least the space its reservations counted on: the
    /// list is a prefix of the crashed one minus empty buckets, and its tail
    /// is rebuilt from the valid records only.
    fn drop_empty_buckets(&mut self, d: &Domain) -> Result<(), Error> {
        let st = self.state.get_mut();
        let empty: Vec<u64> = st
            .order
            .iter()
            .filter(|b| st.buckets.get(b).is_some_and(|x| x.live == 0))
            .collect();
        for block in empty {
            st.unlist(d, block)?;
        }
        Ok(())
    }

    /// Makes every later lsn greater than `lsn`.
    pub fn observe(&self, lsn: u64) {
        self.lsns.observe(lsn);
    }

    /// The commit sequence number the next committed END takes.
    pub fn next_csn(&self) -> u64 {
        self.state.lock().csn
    }

    /// The variant.
    pub fn variant(&self) -> LogVariant {
        self.variant
    }

    /// Lets the log grow into the heap (after recovery).
    pub fn attach_heap(&self, heap: Arc<Allocator>) {
        let _ = self.heap.set(heap);
    }

    /// Runs `write`, an in-place store outside any transaction followed by
    /// its flush and a fence, with the latch held and (Batch) after the
    /// clears other threads left unfenced are stored again: recovery cannot
    /// then redo a committed group over the store.
    pub fn fenced_write(
        &self,
        d: &Domain,
        write: impl FnOnce() -> Result<(), Error>,
    ) -> Result<(), Error> {
        let mut st = self.state.lock();
        st.store_others_clears(d)?;
        write()
    }

    /// Stores the clears committed transactions left pending, and those
    /// other threads stored without a fence, so that this thread's next
    /// fence persists them: before a commit ring group's fence, whose
    /// write-back may overwrite what those transactions' groups, still
    /// whole in the log, would make recovery redo.
    pub fn settle_clears(&self, d: &Domain) -> Result<(), Error> {
        use std::sync::atomic::Ordering;
        if !self.clears.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut st = self.state.lock();
        st.store_others_clears(d)?;
        self.clears.store(false, Ordering::Release);
        Ok(())
    }

    /// Walks the list, checking every link (`rewind check`).
    pub fn check_list(&self, d: &Domain) -> Result<Vec<u64>, Error> {
        let st = self.state.lock();
        st.list.walk(d, &st.blocks)
    }

    /// The tail bucket if it has room for a record of `size` bytes, else a
    /// new bucket appended to the list.
    fn room(&self, d: &Domain, st: &mut State, size: u64) -> Result<u64, Error> {
        if let Some(tail) = st.order.last() {
            let b = &st.buckets[&tail];
            if (b.next_cell as u64) < self.layout.bucket_cells
                && b.body_used + size <= self.layout.log_block_size
            {
                return Ok(tail);
            }
        }
        let State { free, blocks, .. } = &mut *st;
        let block = free.pop_first(blocks).ok_or(Error::LogFull {
            needed: size,
            free: 0,
        })?;
        // One-fence records the block held in its last use made invalid
        // (lsn zeroed), persistent by the append's fence before the block
        // is in the list: a new record placed at one of their offsets,
        // whose body a crash loses, cannot find an old valid one there.
        for rec in st.stale.remove(&block).unwrap_or_default() {
            d.store_nt_u64(rec, 0)?;
        }
        // Zeroed cells and index: a cell is valid only once written.
        let zeros = vec![0u8; (self.layout.bucket_cells * 8) as usize];
        d.store_nt(block + CELLS, &zeros)?;
        d.store_nt_u64(block + INDEX, 0)?;
        st.list.append(d, block)?;
        st.buckets.insert(
            block,
            Bucket {
                next_cell: 0,
                live: 0,
                body_used: self.layout.body_start(),
                tagged: Vec::new(),
            },
        );
        st.order.push(block);
        // The old tail may be empty now that it is no longer the tail. It
        // leaves the list, but its chunk stays with the log until the
        // transaction gives its reservation back (`unreserve`): the space
        // this append was sure of (`available`, checked before its first
        // record) must not go back to the heap halfway through it.
        if let Some(old) = st.order.before_last() {
            self.maybe_unlist(d, st, old)?;
        }
        Ok(block)
    }

    fn maybe_remove(&self, d: &Domain, st: &mut State, block: u64) -> Result<(), Error> {
        if self.maybe_unlist(d, st, block)? {
            self.maybe_shrink(d, st, block)?;
        }
        Ok(())
    }

    /// Takes `block` out of the list if no live record keeps it there;
    /// returns whether it did.
    fn maybe_unlist(&self, d: &Domain, st: &mut State, block: u64) -> Result<bool, Error> {
        let Some(b) = st.buckets.get(&block) else {
            return Ok(false);
        };
        let full = b.next_cell as u64 == self.layout.bucket_cells;
        if b.live == 0 && (full || st.order.last() != Some(block)) {
            st.unlist(d, block)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Clears a finished transaction's records: their cells become gaps,
    /// in any order and without a fence. Its END record (`end`) is never
    /// cleared on its own: it stays in place, dead, until its bucket leaves
    /// the list. So a crash can never leave an END gone while records of its
    /// transaction remain (which would make it look unfinished); an END
    /// whose records are gone, wholly or partly, is inert, because the caller
    /// made the transaction's effects durable before clearing anything.
    pub fn release(
        &self,
        d: &Domain,
        cells: &[CellRef],
        end: Option<CellRef>,
    ) -> Result<(), Error> {
        let mut st = self.state.lock();
        self.release_locked(d, &mut st, cells, end)
    }

    /// [`release`](Self::release) for a committed transaction whose
    /// in-place stores are durable, leaving the clearing to the next append
    /// (the two-layer log removes them at once: its tree operations are
    /// fenced one by one). The clears need to
    /// be persistent only before a later in-place store can be, and every
    /// such store follows a group append (or [`fenced_write`](Self::fenced_write)),
    /// whose fence now persists them with its own records: the commit does
    /// not wait for them. Until then recovery finds the group whole, and
    /// redoes its values, which are the newest.
    pub fn release_later(&self, d: &Domain, cells: &[CellRef], end: CellRef) -> Result<(), Error> {
        self.release_later_all(d, std::iter::once((cells, end)))
    }

    /// [`release_later`](Self::release_later) of several transactions, in
    /// order, under one acquisition of the latch (redo-async's write-back
    /// releases a step's commits together).
    pub fn release_later_all<'a>(
        &self,
        d: &Domain,
        groups: impl IntoIterator<Item = (&'a [CellRef], CellRef)>,
    ) -> Result<(), Error> {
        let mut st = self.state.lock();
        for (cells, end) in groups {
            if self.variant == LogVariant::TwoLayer {
                // Tree operations are fenced one by one.
                self.release_locked(d, &mut st, cells, Some(end))?;
            } else {
                st.pending_clears.extend_from_slice(cells);
                self.clears
                    .store(true, std::sync::atomic::Ordering::Release);
                self.forget_cells(d, &mut st, cells, Some(end))?;
            }
        }
        Ok(())
    }

    fn release_locked(
        &self,
        d: &Domain,
        st: &mut State,
        cells: &[CellRef],
        end: Option<CellRef>,
    ) -> Result<(), Error> {
        if self.variant == LogVariant::TwoLayer {
            // Out of the tree, END last: its records go first.
            self.tree_remove(d, st, cells.iter().chain(end.as_ref()).copied())?;
        } else {
            gap_cells(d, &mut st.words, &mut st.sorted, cells)?;
        }
        if self.variant == LogVariant::Batch {
            let me = thread_tag();
            st.unfenced_clears.extend(cells.iter().map(|&c| (me, c)));
            self.clears
                .store(true, std::sync::atomic::Ordering::Release);
        }
        self.forget_cells(d, st, cells, end)
    }

    /// The volatile side of clearing: live counts, and buckets left empty
    /// leave the list.
    fn forget_cells(
        &self,
        d: &Domain,
        st: &mut State,
        cells: &[CellRef],
        end: Option<CellRef>,
    ) -> Result<(), Error> {
        for c in cells {
            if let Some(b) = st.buckets.get_mut(&c.block) {
                b.live -= 1;
            }
        }
        if let Some(e) = end {
            // END stays in its cell, dead: it no longer keeps its bucket
            // alive and vanishes with it (a reused block's cells are zeroed).
            if let Some(b) = st.buckets.get_mut(&e.block) {
                b.live -= 1;
            }
        }
        for c in cells.iter().chain(end.as_ref()) {
            self.maybe_remove(d, st, c.block)?;
        }
        Ok(())
    }

    /// Removes every block, oldest first (recovery, after all records are
    /// applied). A crash leaves a suffix of the log, which is harmless: END
    /// records come after the records they finish.
    pub fn clear_all(&self, d: &Domain) -> Result<(), Error> {
        let mut st = self.state.lock();
        let st = &mut *st;
        if self.variant == LogVariant::TwoLayer {
            // The whole tree at once: its nodes are then free.
            if d.read_u64(tree::ROOT)? != 0 {
                self.tree_op(d, st, &[(tree::ROOT, 0)])?;
            }
            let inner: Vec<u64> = st.inner.order.clone();
            for b in inner {
                self.inner_unlist(d, st, b)?;
            }
        }
        while let Some(block) = st.order.first() {
            st.unlist(d, block)?;
        }
        Ok(())
    }

    /// Whether some thread holds the latch (the crash explorer's scheduler
    /// never makes a thread wait while it holds one).
    #[cfg(feature = "testing")]
    pub(crate) fn latched(&self) -> bool {
        self.state.is_locked()
    }

    /// Usage figures.
    pub fn stats(&self) -> LogStats {
        let st = self.state.lock();
        LogStats {
            blocks_used: st.order.len() as u64,
            blocks_total: st.blocks.count(),
            live_records: st.buckets.values().map(|b| b.live as u64).sum(),
        }
    }

    /// Blocks holding records over the blocks of the log's own region
    /// (more than 1 once it has grown into the heap).
    pub fn fill(&self) -> f64 {
        let st = self.state.lock();
        st.order.len() as f64 / self.layout.log_blocks.max(1) as f64
    }
}

/// A small number naming the calling thread (cheaper than `ThreadId`).
fn thread_tag() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static TAG: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    TAG.with(|t| *t)
}
