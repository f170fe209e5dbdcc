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
//! All appends and removals hold one latch (`State`); per-thread lanes
//! (MARS' distributed log) can be added later as several `Log`s over
//! disjoint block sets merged by lsn at recovery.

pub mod adll;
pub mod record;

use std::fmt;
use std::str::FromStr;

use parking_lot::Mutex;

use crate::error::Error;
use crate::persist::{sites, Domain};
use crate::pool::layout::Layout;
pub use record::{Draft, Kind, Record};

/// The log structure, fixed at pool creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LogVariant {
    /// The plain ADLL: one node per record.
    Simple,
    /// Buckets of record cells.
    Optimized,
    /// Buckets with a persisted index; records fenced in groups of 8.
    Batch,
}

impl LogVariant {
    /// Every variant.
    pub const ALL: [LogVariant; 3] = [LogVariant::Simple, LogVariant::Optimized, LogVariant::Batch];

    pub(crate) fn code(self) -> u8 {
        match self {
            LogVariant::Simple => 1,
            LogVariant::Optimized => 2,
            LogVariant::Batch => 3,
        }
    }

    pub(crate) fn from_code(c: u8) -> Option<LogVariant> {
        match c {
            1 => Some(LogVariant::Simple),
            2 => Some(LogVariant::Optimized),
            3 => Some(LogVariant::Batch),
            _ => None,
        }
    }

    /// Records a Batch group holds before one fence: a line of cells.
    pub const GROUP: usize = 8;
}

impl fmt::Display for LogVariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogVariant::Simple => "simple",
            LogVariant::Optimized => "optimized",
            LogVariant::Batch => "batch",
        })
    }
}

impl FromStr for LogVariant {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "simple" => Ok(LogVariant::Simple),
            "optimized" => Ok(LogVariant::Optimized),
            "batch" => Ok(LogVariant::Batch),
            _ => Err(Error::InvalidConfig {
                what: "log variant",
                value: s.to_string(),
                expected: "simple, optimized or batch",
            }),
        }
    }
}

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

#[derive(Clone, Copy, Debug)]
struct Bucket {
    next_cell: u32,
    live: u32,
    body_used: u64,
}

/// Volatile bucket state, indexed by block number (a map keyed by block
/// offset, without hashing on the append path).
struct Buckets {
    log_off: u64,
    block_size: u64,
    v: Vec<Option<Bucket>>,
}

impl Buckets {
    fn new(l: &Layout) -> Buckets {
        Buckets {
            log_off: l.log_off,
            block_size: l.log_block_size,
            v: vec![None; l.log_blocks as usize],
        }
    }

    fn idx(&self, block: u64) -> usize {
        ((block - self.log_off) / self.block_size) as usize
    }

    fn get(&self, block: &u64) -> Option<&Bucket> {
        self.v[self.idx(*block)].as_ref()
    }

    fn get_mut(&mut self, block: &u64) -> Option<&mut Bucket> {
        let i = self.idx(*block);
        self.v[i].as_mut()
    }

    fn insert(&mut self, block: u64, b: Bucket) {
        let i = self.idx(block);
        self.v[i] = Some(b);
    }

    fn remove(&mut self, block: &u64) {
        let i = self.idx(*block);
        self.v[i] = None;
    }

    fn values(&self) -> impl Iterator<Item = &Bucket> {
        self.v.iter().flatten()
    }
}

impl std::ops::Index<&u64> for Buckets {
    type Output = Bucket;
    fn index(&self, block: &u64) -> &Bucket {
        self.get(block).expect("bucket is tracked")
    }
}

struct State {
    order: Vec<u64>,
    buckets: Buckets,
    free: Vec<u64>,
    next_lsn: u64,
    reserved: u64,
    scratch: Vec<u8>,
    batch_index: Vec<(u64, u32)>,
    batch_cells: Vec<(CellRef, u64)>,
    sorted: Vec<(CellRef, u64)>,
    words: Vec<u8>,
}

/// Usage figures.
#[derive(Clone, Copy, Debug, Default)]
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
    /// Space a record costs at least: its share of a block's body.
    per_cell: u64,
    state: Mutex<State>,
}

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
    pub fn open(d: &Domain, layout: &Layout, variant: LogVariant) -> Result<Opened, Error> {
        let repair = adll::recover(d, layout)?;
        let (order, buckets, records) = scan(d, layout, variant)?;
        let in_list: std::collections::HashSet<u64> = order.iter().copied().collect();
        let free = (0..layout.log_blocks)
            .rev()
            .map(|i| layout.log_off + i * layout.log_block_size)
            .filter(|b| !in_list.contains(b))
            .collect();
        let next_lsn = records.last().map_or(1, |s| s.rec.lsn + 1);
        let body = layout.log_block_size - layout.body_start();
        let log = Log {
            variant,
            layout: *layout,
            per_cell: (body / layout.bucket_cells).max(1),
            state: Mutex::new(State {
                order,
                buckets,
                free,
                next_lsn,
                reserved: 0,
                scratch: Vec::with_capacity(1024),
                batch_index: Vec::new(),
                batch_cells: Vec::new(),
                sorted: Vec::new(),
                words: Vec::new(),
            }),
        };
        Ok(Opened {
            log,
            records,
            repair,
        })
    }

    /// The variant.
    pub fn variant(&self) -> LogVariant {
        self.variant
    }

    fn cost(&self, size: u64) -> u64 {
        size.max(self.per_cell)
    }

    /// Log space a rollback of this record needs (its CLR).
    pub fn clr_cost(&self, d: &Draft) -> u64 {
        match d.kind {
            Kind::Update | Kind::Alloc | Kind::Delete => {
                self.cost((record::HEADER + d.new.len().div_ceil(8) * 8) as u64)
            }
            _ => 0,
        }
    }

    /// Appends `drafts` in order and makes them persistent and valid before
    /// returning, so the caller may then perform the in-place stores they
    /// describe (WAL). Forward records (UPDATE, ALLOC, DELETE) reserve room
    /// for their CLRs; the others (CLR, END, ROLLBACK, CHECKPOINT) may use
    /// that reserve, so a rollback never finds the log full.
    /// Returns the space reserved.
    pub fn append(
        &self,
        d: &Domain,
        drafts: &[Draft<'_>],
        out: &mut Vec<Placed>,
    ) -> Result<u64, Error> {
        let mut st = self.state.lock();
        self.append_locked(d, &mut st, drafts, out)
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
    ) -> Result<(), Error> {
        let mut st = self.state.lock();
        let st = &mut *st;
        let first = out.len();
        self.append_locked(d, st, std::slice::from_ref(end), out)?;
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
    ) -> Result<u64, Error> {
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
        let free = self.available(st);
        if forward + reserve > free.saturating_sub(st.reserved) || forward + reserve + other > free
        {
            return Err(Error::LogFull {
                needed: forward + reserve + other,
                free: free.saturating_sub(st.reserved),
            });
        }
        st.batch_index.clear();
        st.batch_cells.clear();
        for draft in drafts {
            let size = draft.size() as u64;
            let block = self.room(d, st, size)?;
            let lsn = st.next_lsn;
            st.next_lsn += 1;
            draft.encode(lsn, &mut st.scratch);
            let b = st.buckets.get_mut(&block).expect("tail bucket is tracked");
            let rec_off = block + b.body_used;
            let cell = CellRef {
                block,
                idx: b.next_cell,
            };
            b.body_used += size;
            b.next_cell += 1;
            b.live += 1;
            d.store_nt(rec_off, &st.scratch)?;
            match self.variant {
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
            out.push(Placed { lsn, cell, rec_off });
        }
        if self.variant == LogVariant::Batch && !drafts.is_empty() {
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
        st.reserved += reserve;
        Ok(reserve)
    }

    /// Bytes of log space left (free blocks plus the tail's room).
    fn available(&self, st: &State) -> u64 {
        let cap = self.layout.log_block_size - self.layout.body_start();
        let tail = st.order.last().map_or(0, |t| {
            let b = &st.buckets[t];
            let cells = (self.layout.bucket_cells - b.next_cell as u64) * self.per_cell;
            cells.min(self.layout.log_block_size - b.body_used)
        });
        st.free.len() as u64 * cap + tail
    }

    /// The tail bucket if it has room for a record of `size` bytes, else a
    /// new bucket appended to the list.
    fn room(&self, d: &Domain, st: &mut State, size: u64) -> Result<u64, Error> {
        if let Some(&tail) = st.order.last() {
            let b = &st.buckets[&tail];
            if (b.next_cell as u64) < self.layout.bucket_cells
                && b.body_used + size <= self.layout.log_block_size
            {
                return Ok(tail);
            }
        }
        let block = st.free.pop().ok_or(Error::LogFull {
            needed: size,
            free: 0,
        })?;
        // Zeroed cells and index: a cell is valid only once written.
        let zeros = vec![0u8; (self.layout.bucket_cells * 8) as usize];
        d.store_nt(block + CELLS, &zeros)?;
        d.store_nt_u64(block + INDEX, 0)?;
        adll::append(d, block)?;
        st.buckets.insert(
            block,
            Bucket {
                next_cell: 0,
                live: 0,
                body_used: self.layout.body_start(),
            },
        );
        st.order.push(block);
        // The old tail may be empty now that it is no longer the tail.
        if let Some(&old) = st.order.iter().rev().nth(1) {
            self.maybe_remove(d, st, old)?;
        }
        Ok(block)
    }

    fn maybe_remove(&self, d: &Domain, st: &mut State, block: u64) -> Result<(), Error> {
        let Some(b) = st.buckets.get(&block) else {
            return Ok(());
        };
        let full = b.next_cell as u64 == self.layout.bucket_cells;
        if b.live == 0 && (full || st.order.last() != Some(&block)) {
            adll::remove(d, block)?;
            st.buckets.remove(&block);
            st.order.retain(|&x| x != block);
            st.free.push(block);
        }
        Ok(())
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

    fn release_locked(
        &self,
        d: &Domain,
        st: &mut State,
        cells: &[CellRef],
        end: Option<CellRef>,
    ) -> Result<(), Error> {
        gap_cells(d, &mut st.words, &mut st.sorted, cells)?;
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

    /// Returns reserved rollback space once a transaction has ended.
    pub fn unreserve(&self, bytes: u64) {
        let mut st = self.state.lock();
        st.reserved = st.reserved.saturating_sub(bytes);
    }

    /// Removes every block, oldest first (recovery, after all records are
    /// applied). A crash leaves a suffix of the log, which is harmless: END
    /// records come after the records they finish.
    pub fn clear_all(&self, d: &Domain) -> Result<(), Error> {
        let mut st = self.state.lock();
        let st = &mut *st;
        for block in std::mem::take(&mut st.order) {
            adll::remove(d, block)?;
            st.buckets.remove(&block);
            st.free.push(block);
        }
        st.reserved = 0;
        Ok(())
    }

    /// Whether some thread holds the latch (the crash explorer's scheduler
    /// never makes a thread wait while it holds one).
    pub(crate) fn latched(&self) -> bool {
        self.state.is_locked()
    }

    /// Usage figures.
    pub fn stats(&self) -> LogStats {
        let st = self.state.lock();
        LogStats {
            blocks_used: st.order.len() as u64,
            blocks_total: self.layout.log_blocks,
            live_records: st.buckets.values().map(|b| b.live as u64).sum(),
        }
    }

    /// Fraction of blocks in use.
    pub fn fill(&self) -> f64 {
        let st = self.state.lock();
        st.order.len() as f64 / self.layout.log_blocks as f64
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

/// Walks the list and reads every valid record, verifying each checksum.
fn scan(d: &Domain, l: &Layout, variant: LogVariant) -> Result<ScanResult, Error> {
    let order = adll::walk(d, l)?;
    let mut buckets = Buckets::new(l);
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
        };
        for idx in 0..limit {
            let v = u64::from_le_bytes(
                cells[idx as usize * 8..idx as usize * 8 + 8]
                    .try_into()
                    .expect("8"),
            );
            if v == 0 {
                continue;
            }
            b.next_cell = idx as u32 + 1;
            if v == GAP {
                continue;
            }
            let body_end = block + l.log_block_size;
            if v < block + l.body_start()
                || v.checked_add(record::HEADER as u64)
                    .is_none_or(|e| e > body_end)
                || v % 8 != 0
            {
                return Err(Error::LogCorrupt {
                    offset: block + CELLS + idx * 8,
                    reason: "log cell points outside its bucket's body",
                });
            }
            let mut h = [0u8; record::HEADER];
            d.read(v, &mut h)?;
            let payload = record::payload_len(&h).ok_or(Error::LogCorrupt {
                offset: v,
                reason: "unknown record kind",
            })?;
            let total = record::HEADER as u64 + payload as u64;
            if v + total > body_end {
                return Err(Error::LogCorrupt {
                    offset: v,
                    reason: "log record runs past its bucket",
                });
            }
            buf.resize(total as usize, 0);
            d.read(v, &mut buf)?;
            let rec = record::decode(&buf, v)?;
            if records.last().is_some_and(|p| p.rec.lsn >= rec.lsn) {
                return Err(Error::LogCorrupt {
                    offset: v,
                    reason: "record ids do not increase in log order",
                });
            }
            b.live += 1;
            b.body_used = b.body_used.max(v + total - block);
            records.push(Scanned {
                rec,
                cell: CellRef {
                    block,
                    idx: idx as u32,
                },
            });
        }
        if variant == LogVariant::Batch {
            b.next_cell = limit as u32;
        }
        buckets.insert(block, b);
    }
    Ok((order, buckets, records))
}
