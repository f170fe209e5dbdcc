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

pub mod adll;
pub mod blocks;
pub mod lanes;
pub mod ring;
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
pub use crate::format::record::{self, Draft, Kind, Record};
pub use crate::format::LogVariant;
use crate::persist::{sites, Domain};
use blocks::Blocks;
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

/// A transaction's place in the log: the head of its record chain, and the
/// log space it holds for the records its end may need (the compensation
/// records of its forward records, its ROLLBACK and its END).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reservation {
    /// Bytes held (in the log's cost units).
    pub bytes: u64,
    /// ROLLBACK and END are reserved (at the first forward record).
    started: bool,
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

    fn cost(&self, size: u64) -> u64 {
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
    fn bare_cost(&self) -> u64 {
        self.cost(record::HEADER as u64)
    }

    /// Lets the log grow into the heap (after recovery).
    pub fn attach_heap(&self, heap: Arc<Allocator>) {
        let _ = self.heap.set(heap);
    }

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
        st.batch_index.clear();
        st.batch_cells.clear();
        if self.variant != LogVariant::Batch || one_fence {
            // Committed groups' clears (redo policy), persisted by this
            // append's first fence before any in-place store it covers.
            st.store_others_clears(d)?;
        }
        // One-fence commit: the group's checksum, built as its records are
        // encoded, and END's payload (commit sequence number, checksum).
        let mut group = record::GroupChecksum::default();
        let mut end_payload = [0u8; record::ONE_FENCE_PAYLOAD];
        // The append's lsns, taken at once before any record is written: a
        // locked instruction drains the write-combining buffers, so one
        // among the records' non-temporal stores would wait for all of them.
        let first_lsn = self.lsns.take(drafts.len() as u64);
        let first_out = out.len();
        for (lsn, draft) in (first_lsn..).zip(drafts) {
            let size = draft.size() as u64 + self.node;
            let block = self.room(d, st, size)?;
            // A CHECKPOINT belongs to no transaction's chain.
            let prev = if draft.kind == Kind::Checkpoint {
                0
            } else {
                std::mem::replace(&mut res.last, lsn)
            };
            let seq = if draft.kind == Kind::End && draft.flags & record::END_COMMITTED != 0 {
                st.csn += 1;
                st.csn - 1
            } else {
                0
            };
            if one_fence && draft.kind == Kind::End {
                let csn = seq;
                end_payload[..8].copy_from_slice(&csn.to_le_bytes());
                end_payload[8..].copy_from_slice(&group.value().to_le_bytes());
                Draft::end_one_fence(draft.tx, draft.aux, &end_payload).encode(
                    lsn,
                    prev,
                    &mut st.scratch,
                );
            } else {
                draft.encode(lsn, prev, &mut st.scratch);
                if one_fence {
                    group.add(lsn, record::stored_crc(&st.scratch));
                }
            }
            let b = st.buckets.get_mut(&block).expect("tail bucket is tracked");
            let at = block + b.body_used;
            let rec_off = at + self.node;
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
            d.store_nt(rec_off, &st.scratch)?;
            match self.variant {
                // The group's single fence comes after the loop.
                _ if one_fence => {
                    b.tagged.push(rec_off);
                    st.batch_cells.push((cell, tagged_cell(rec_off, lsn)));
                }
                // The node's body is fenced by the tree operation below.
                LogVariant::TwoLayer => {}
                LogVariant::Simple | LogVariant::Optimized => {
                    // The body persistent before the cell points at it.
                    d.fence_at(sites::LOG_RECORD_BODY)?;
                    d.store_nt_u64(cell.off(), rec_off)?;
                    // The cell persistent before the caller's in-place store.
                    d.fence_at(sites::LOG_RECORD_CELL)?;
                }
                LogVariant::Batch => {
                    st.batch_cells.push((cell, rec_off));
                    match st.batch_index.last_mut() {
                        Some((blk, n)) if *blk == block => *n = cell.idx + 1,
                        _ => st.batch_index.push((block, cell.idx + 1)),
                    }
                }
            }
            out.push(Placed {
                lsn,
                cell,
                rec_off,
                seq,
            });
        }
        if one_fence {
            // The cells after the bodies, a run per line (one line write,
            // not one per record); records and END durable together: the
            // commit point.
            store_cells(d, &mut st.words, &st.batch_cells)?;
            d.fence_at(sites::LOG_ONE_FENCE)?;
        } else if self.variant == LogVariant::Batch && !drafts.is_empty() {
            st.store_others_clears(d)?;
            store_cells(d, &mut st.words, &st.batch_cells)?;
            // Bodies and cells of the group persistent before the index
            // makes them valid.
            d.fence_at(sites::LOG_GROUP_BODY)?;
            for (i, &(block, n)) in st.batch_index.iter().enumerate() {
                if i > 0 {
                    // A group spanning buckets becomes valid in log order: a
                    // crash may leave a prefix of it, never a later part alone
                    // (an END without its records, a CLR without the earlier ones).
                    d.fence_at(sites::LOG_GROUP_SPAN)?;
                }
                d.store_nt_u64(block + INDEX, n as u64)?;
            }
            // The index persistent before the caller's in-place stores.
            d.fence_at(sites::LOG_GROUP_INDEX)?;
        }
        if self.variant == LogVariant::TwoLayer {
            // Valid once in the tree, before the caller's in-place stores.
            let placed: Vec<Placed> = out[first_out..].to_vec();
            self.tree_insert(d, st, &placed)?;
        }
        // The accounting changes once the records are placed: an append
        // that fails on the way (`room` finding no block after all) holds
        // nothing, and leaves no checkpoint reservation marked held whose
        // bytes `reserved` never got (the next checkpoint would take them
        // back: an underflow that made every later append `LogFull`).
        res.bytes -= paid;
        st.reserved -= paid;
        if forward > 0 {
            res.started = true;
            st.checkpoint_held = true;
        }
        st.reserved += reserve + held;
        res.bytes += reserve;
        Ok(())
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

    /// Log space sure to be there: what any sequence of records costing
    /// this much fits in (free blocks plus the tail's room). An append
    /// lowers it by at most its cost, whichever block its records land in.
    fn available(&self, st: &State) -> u64 {
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
    fn holds(&self, st: &State) -> bool {
        (st.free.len() + st.inner.order.len()) as u64 >= st.inner.hold
    }

    /// Takes a chunk from the heap and adds its blocks to the free set.
    /// `false` when the heap has none (or the log is not attached to it).
    fn grow(&self, d: &Domain, st: &mut State) -> Result<bool, Error> {
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
    fn maybe_shrink(&self, d: &Domain, st: &mut State, block: u64) -> Result<(), Error> {
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

    /// Walks the list, checking every link (`rewind check`).
    pub fn check_list(&self, d: &Domain) -> Result<Vec<u64>, Error> {
        let st = self.state.lock();
        st.list.walk(d, &st.blocks)
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

/// The space a block with `cells` of its `cells_total` cells and `body`
/// bytes of body left is sure to hold, in cost units (a record costs its
/// size, at least `per_cell`). A record that does not fit leaves the block
/// with no cell or with less than `largest` (the largest record, with its
/// two-layer node header) of body, both of which count 0 here; so appends
/// lower the total by at most their cost.
fn usable(cells_total: u64, per_cell: u64, cells: u64, body: u64, largest: u64) -> u64 {
    if cells == 0 {
        0
    } else if cells_total == 1 {
        // Simple: one record per node, whatever its size.
        per_cell
    } else {
        (cells * per_cell).min(body.saturating_sub(largest))
    }
}

/// Writes cell values, one non-temporal store per run of adjacent cells:
/// whole-line writes cost a fraction of word-by-word ones.
fn store_cells(d: &Domain, words: &mut Vec<u8>, cells: &[(CellRef, u64)]) -> Result<(), Error> {
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
fn gap_cells(
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

type ScanResult = (Vec<u64>, Buckets, Vec<Scanned>);

/// Reads and checks the record a cell points at (`off`, inside a body
/// ending at `body_end`).
fn read_cell_record(
    d: &Domain,
    off: u64,
    body_end: u64,
    buf: &mut Vec<u8>,
) -> Result<Record, Error> {
    let mut h = [0u8; record::HEADER];
    d.read(off, &mut h)?;
    let payload = record::payload_len(&h).ok_or(Error::LogCorrupt {
        offset: off,
        reason: "unknown record kind",
    })?;
    let total = record::HEADER as u64 + payload as u64;
    if off + total > body_end {
        return Err(Error::LogCorrupt {
            offset: off,
            reason: "log record runs past its bucket",
        });
    }
    buf.resize(total as usize, 0);
    d.read(off, buf)?;
    record::decode(buf, off)
}

/// Walks the list and reads every valid record, verifying each checksum.
fn scan(
    d: &Domain,
    l: &Layout,
    blocks: &Blocks,
    variant: LogVariant,
    list: adll::List,
) -> Result<ScanResult, Error> {
    let order = list.walk(d, blocks)?;
    let mut buckets = Buckets::default();
    let mut records: Vec<Scanned> = Vec::new();
    let mut cells = vec![0u8; (l.bucket_cells * 8) as usize];
    let mut buf = Vec::new();
    for &block in &order {
        d.read(block + CELLS, &mut cells)?;
        let limit = match variant {
            LogVariant::Batch => {
                let n = d.read_u64(block + INDEX)?;
                if n > l.bucket_cells {
                    return Err(Error::LogCorrupt {
                        offset: block + INDEX,
                        reason: "bucket index past its last cell",
                    });
                }
                n
            }
            _ => l.bucket_cells,
        };
        let mut b = Bucket {
            next_cell: 0,
            live: 0,
            body_used: l.body_start(),
            tagged: Vec::new(),
        };
        let body_end = block + l.log_block_size;
        for idx in 0..l.bucket_cells {
            let v = u64::from_le_bytes(
                cells[idx as usize * 8..idx as usize * 8 + 8]
                    .try_into()
                    .expect("8"),
            );
            if v == 0 {
                continue;
            }
            let cell = CellRef {
                block,
                idx: idx as u32,
            };
            if v == GAP {
                b.next_cell = idx as u32 + 1;
                continue;
            }
            let tagged = v & TAG != 0;
            if !tagged && idx >= limit {
                // Batch: a group whose index never persisted; its cell is
                // made a gap, so that an index a later group moves past it
                // cannot make it valid.
                d.store_nt_u64(cell.off(), GAP)?;
                continue;
            }
            let off = if tagged { v & OFF_BITS & !7 } else { v };
            if off < block + l.body_start()
                || off
                    .checked_add(record::HEADER as u64)
                    .is_none_or(|e| e > body_end)
                || off % 8 != 0
            {
                return Err(Error::LogCorrupt {
                    offset: cell.off(),
                    reason: "log cell points outside its bucket's body",
                });
            }
            b.next_cell = idx as u32 + 1;
            let rec = read_cell_record(d, off, body_end, &mut buf);
            let rec = match rec {
                Ok(r) if !tagged || r.lsn & 0xffff == v >> 48 => r,
                // A one-fence commit's record whose body a crash lost (or
                // an older record left at its offset): that commit is not
                // whole, so never redone; the cell becomes a gap.
                Ok(_) | Err(Error::LogCorrupt { .. } | Error::ChecksumMismatch { .. })
                    if tagged =>
                {
                    d.store_nt_u64(cell.off(), GAP)?;
                    continue;
                }
                Ok(_) => unreachable!("untagged records are taken as they are"),
                Err(e) => return Err(e),
            };
            if records.last().is_some_and(|p| p.rec.lsn >= rec.lsn) {
                return Err(Error::LogCorrupt {
                    offset: off,
                    reason: "record ids do not increase in log order",
                });
            }
            if tagged {
                b.tagged.push(off);
            }
            b.live += 1;
            b.body_used = b.body_used.max(off + two_layer::rec_size(&rec) - block);
            records.push(Scanned { rec, cell });
        }
        if variant == LogVariant::Batch {
            b.next_cell = b.next_cell.max(limit as u32);
        }
        buckets.insert(block, b);
    }
    Ok((order, buckets, records))
}
