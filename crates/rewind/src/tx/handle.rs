//! A transaction's log handle: the head of its record chain and its log
//! reservation, its records' cells, its undo list (the volatile copy of its
//! chain), the ranges it changed in place and, with a log that groups
//! records (Batch), its group of writes waiting for one fence. Each logged
//! write becomes an UPDATE record followed by the in-place store, which the
//! policy's hook (`policy::Durability::stored`) then writes back or not.

use crate::engine::Engine;
use crate::error::Error;
use crate::format::group;
use crate::format::layout::MAX_RECORD_DATA;
use crate::format::record::{IN_COMMIT_GROUP, ONE_FENCE_PAYLOAD};
use crate::log::{CellRef, Draft, Kind, Placed, Reservation};
use crate::persist::sites;
use crate::policy::Ended;

use crate::log::table::Table;

/// A forward record of this transaction that a rollback would undo: the
/// volatile copy of its chain (its `prev` is the undo-next of its CLR).
#[derive(Clone, Copy, Debug)]
pub(super) struct Undo {
    pub(super) lsn: u64,
    pub(super) prev: u64,
    pub(super) what: UndoKind,
}

#[derive(Clone, Copy, Debug)]
pub(super) enum UndoKind {
    /// UPDATE: restore the old bytes stored in the record at `rec_off`,
    /// the `len` bytes at `target`.
    Update { rec_off: u64, target: u64, len: u64 },
    /// ALLOC: mark the block free.
    Alloc { off: u64, size: u64 },
    /// DELETE: mark the block allocated.
    Delete { off: u64, size: u64 },
}

/// A one-fence END's payload before the log fills it in.
static ONE_FENCE_BLANK: [u8; ONE_FENCE_PAYLOAD] = [0; ONE_FENCE_PAYLOAD];

/// Drafts of a group built on the stack: a Batch group of up to 64
/// records and its END.
const STACK_DRAFTS: usize = 65;

/// A Batch write waiting for its group's fence.
#[derive(Clone, Copy, Debug)]
struct Pending {
    target: u64,
    /// Range of old bytes, then new bytes, in `Group::bytes`; redo: the
    /// new bytes' place in `Group::set`.
    at: usize,
    len: usize,
    /// Redo: this entry's first node in `Group::chain` (one per line it
    /// touches, in line order).
    node: u32,
}

/// The most entries a write's probe for an entry to edit scans, while
/// the write set has no line index (`Group::latest_by_scan`); beyond it
/// the index is built. A scan costs a few instructions per entry; building
/// the index about ninety per entry (measured with callgrind at 64 writes
/// per transaction, where the filter's false positives built it in half
/// of the transactions).
const SCAN_MAX: usize = 64;

impl Pending {
    /// The cache lines its bytes touch (it has at least one byte).
    #[inline]
    fn lines(&self) -> std::ops::RangeInclusive<u64> {
        self.target / 64..=(self.target + self.len as u64 - 1) / 64
    }
}

/// No earlier entry on the line (`Group::chain`).
const NO_ENTRY: u32 = u32::MAX;

/// The most entries of other bytes of its line that a write's probe for an
/// entry to edit passes on the line's chain (`Group::latest_over_bytes`).
const WALK_MAX: usize = 8;

/// Writes held until their group is logged (Batch), or until commit (the
/// redo policy's write set).
#[derive(Default)]
struct Group {
    size: usize,
    pending: Vec<Pending>,
    bytes: Vec<u8>,
    /// Redo: the write set, committed as one group of the commit ring (or
    /// logged at commit as REDO records, new bytes only); a write of the
    /// same bytes as an earlier one edits its entry.
    redo: bool,
    /// Redo: the write set's new bytes, as the commit group lays them out
    /// (each write pushed as it comes, adjacent ones joined): the commit
    /// seals it in place. The rare paths that log the write set in the
    /// bucket log (a savepoint, a group too large for the ring) first lay
    /// it out as `bytes` (`lay_out_pairs`).
    set: group::Builder,
    /// Redo: each cache line the write set touches, with the latest entry
    /// that touches it, so that a read of other memory skips the entries
    /// (a large write set would make every read slow), and a write of the
    /// same bytes as that latest entry edits it: one probe per line, no
    /// second index (a write of bytes an earlier entry holds under a later
    /// one that overlaps them is a new entry, replayed after both).
    lines: Table<u32>,
    /// Redo: for each line of each entry (the entry's `node` and on), the
    /// previous entry that touches the same line ([`NO_ENTRY`]: none). With
    /// `lines`, a chain per line, latest first: a read of a written line
    /// visits only the entries on that line (`Handle::overlay_pending`),
    /// not the whole write set (a TPC-C new-order's hundred entries).
    chain: Vec<u32>,
    /// Redo: the entries of `pending` that `lines` and `chain` index, a
    /// prefix. A write only marks its lines in `bloom`; the index is
    /// brought up to date when a read or a write meets a line the filter
    /// may hold ([`Group::index`]), so a transaction that never reads or
    /// rewrites what it wrote (random updates) builds none.
    indexed: usize,
    /// Redo with the commit ring: the bytes the write set's commit group
    /// takes at most (header and one entry per write, before coalescing).
    /// While it fits the ring, no log space is reserved: the group commits
    /// there (or, when the ring has no room, through the bucket log, a
    /// commit that then fails for want of log space rolls back). Once it
    /// does not fit, the write set's REDO records are reserved in the
    /// bucket log, as without a ring.
    group_bytes: usize,
    /// The write set's REDO records are reserved as they come.
    reserving: bool,
    /// Redo: a filter of the lines the write set touches (see [`Bloom`]),
    /// checked first: most reads of memory the transaction has not written
    /// cost one test, as `Pool::read` does.
    bloom: Bloom,
}

impl Group {
    /// Indexes the entries written since the last call into `lines` and
    /// `chain` (redo), so that each line's latest entry and chain are
    /// current.
    #[inline]
    fn index(&mut self) {
        if self.indexed < self.pending.len() {
            self.index_rest();
        }
    }

    /// `pending` has just been emptied (logged or dropped): so are the
    /// line index, the filter and the group's size, which describe it.
    fn pending_emptied(&mut self) {
        if self.indexed > 0 {
            self.lines.clear();
            self.chain.clear();
            self.indexed = 0;
        }
        self.bloom.clear();
        if self.group_bytes > 0 {
            self.group_bytes = 0;
        }
    }

    /// The entry that `accept` takes and that is the latest on every line
    /// of `lines` (indexed): no later entry touches any of their bytes.
    /// (`accept` is asked first: it is cheaper than the other lines.)
    fn latest_over(
        &self,
        mut lines: std::ops::RangeInclusive<u64>,
        accept: impl Fn(&Pending) -> bool,
    ) -> Option<u32> {
        let i = self.lines.get(lines.next()?)?;
        (accept(&self.pending[i as usize]) && lines.all(|l| self.lines.get(l) == Some(i)))
            .then_some(i)
    }

    /// [`latest_over`](Self::latest_over) by a scan of `pending` from its
    /// end, without the index: the first entry found that touches any of
    /// `lines` is the latest on each line it touches, and `accept` takes
    /// only an entry of the same bytes, hence of all of `lines`. (The
    /// unit test below holds the index to it; writes probe with
    /// [`latest_over_bytes_by_scan`](Self::latest_over_bytes_by_scan).)
    #[cfg(test)]
    fn latest_by_scan(
        &self,
        lines: std::ops::RangeInclusive<u64>,
        accept: impl Fn(&Pending) -> bool,
    ) -> Option<u32> {
        let (first, last) = (*lines.start(), *lines.end());
        let (i, p) = (self.pending.iter().enumerate().rev())
            .find(|(_, p)| p.len > 0 && *p.lines().start() <= last && *p.lines().end() >= first)?;
        accept(p).then_some(i as u32)
    }

    /// The latest entry that writes any of the bytes `[off, end)`, if
    /// `accept` takes it (an entry of the same bytes): no later entry
    /// writes any of them, so editing it gives what a new entry would,
    /// though later entries write other bytes of its lines (a struct's
    /// fields written in turn: when the entry had to be the latest on its
    /// lines, each such write was a new entry, and a loop of them filled
    /// the log).
    fn latest_over_bytes_by_scan(
        &self,
        off: u64,
        end: u64,
        accept: impl Fn(&Pending) -> bool,
    ) -> Option<u32> {
        let (i, p) = (self.pending.iter().enumerate().rev())
            .find(|(_, p)| p.len > 0 && p.target < end && off < p.target + p.len as u64)?;
        accept(p).then_some(i as u32)
    }

    /// [`latest_over_bytes_by_scan`](Self::latest_over_bytes_by_scan) for
    /// bytes on one line, indexed: that line's chain, latest first, past
    /// at most [`WALK_MAX`] entries of other bytes (then none: a new entry,
    /// as ever correct).
    fn latest_over_bytes(
        &self,
        off: u64,
        end: u64,
        accept: impl Fn(&Pending) -> bool,
    ) -> Option<u32> {
        let l = off / 64;
        let (mut i, mut node) = self.latest_on_line(l)?;
        for _ in 0..WALK_MAX {
            let p = &self.pending[i as usize];
            if p.target < end && off < p.target + p.len as u64 {
                return accept(p).then_some(i);
            }
            match self.chain[node] {
                NO_ENTRY => return None,
                prev => (i, node) = (prev, self.node_of(prev, l)),
            }
        }
        None
    }

    fn index_rest(&mut self) {
        for i in self.indexed..self.pending.len() {
            let p = self.pending[i];
            let node = self.chain.len() as u32;
            if p.len > 0 {
                for l in p.lines() {
                    let prev = self.lines.replace(l, i as u32).unwrap_or(NO_ENTRY);
                    self.chain.push(prev);
                }
            }
            self.pending[i].node = node;
        }
        self.indexed = self.pending.len();
    }

    /// The new bytes of write `p`.
    #[inline]
    fn new_of(&self, p: &Pending) -> &[u8] {
        match self.redo {
            true => self.set.value(p.at, p.len),
            false => &self.bytes[p.at + p.len..p.at + 2 * p.len],
        }
    }

    /// Redo: lays the write set out in `bytes` as Batch does (room for
    /// the old bytes, then the new ones), for a path that logs it in the
    /// bucket log, and empties `set`.
    fn lay_out_pairs(&mut self) {
        let Group {
            pending,
            bytes,
            set,
            ..
        } = self;
        bytes.clear();
        for p in pending.iter_mut() {
            let at = bytes.len();
            bytes.resize(at + p.len, 0);
            bytes.extend_from_slice(set.value(p.at, p.len));
            p.at = at;
        }
        set.begin();
    }

    /// The entry of the write set that touches line `l` last, and its node
    /// in `chain` for that line.
    #[inline]
    fn latest_on_line(&self, l: u64) -> Option<(u32, usize)> {
        let i = self.lines.get(l)?;
        Some((i, self.node_of(i, l)))
    }

    /// Entry `i`'s node in `chain` for line `l` (one it touches).
    #[inline]
    fn node_of(&self, i: u32, l: u64) -> usize {
        let p = &self.pending[i as usize];
        p.node as usize + (l - p.target / 64) as usize
    }

    /// Lays the write set's bytes of line `l` over `buf`, read at `off`:
    /// the entries on that line, latest first, each giving the bytes no
    /// later one gave (a 64-bit mask, one bit per byte of the line), until
    /// every byte of `buf` on the line has its latest value.
    fn overlay_line(&self, l: u64, off: u64, buf: &mut [u8]) {
        let Some((mut i, mut node)) = self.latest_on_line(l) else {
            return;
        };
        let base = l * 64;
        let end = off + buf.len() as u64;
        // The bytes of the line that `buf` holds, as bits of the line.
        let (ws, we) = (off.max(base) - base, end.min(base + 64) - base);
        let want = mask(ws, we);
        let mut done = 0u64;
        loop {
            let p = &self.pending[i as usize];
            let (ps, pe) = (p.target, p.target + p.len as u64);
            let (s, e) = (ps.max(off).max(base), pe.min(end).min(base + 64));
            if s < e {
                let new = self.new_of(p);
                let give = mask(s - base, e - base) & !done;
                if give == mask(s - base, e - base) {
                    buf[(s - off) as usize..(e - off) as usize]
                        .copy_from_slice(&new[(s - ps) as usize..(e - ps) as usize]);
                } else {
                    // Each run of bytes no later entry gave, copied whole.
                    let mut bits = give;
                    while bits != 0 {
                        let s = u64::from(bits.trailing_zeros());
                        let run = u64::from((!(bits >> s)).trailing_zeros());
                        bits &= !mask(s, s + run);
                        let a = base + s;
                        buf[(a - off) as usize..(a + run - off) as usize]
                            .copy_from_slice(&new[(a - ps) as usize..(a + run - ps) as usize]);
                    }
                }
                done |= give;
                if done & want == want {
                    return;
                }
            }
            let prev = self.chain[node];
            if prev == NO_ENTRY {
                return;
            }
            i = prev;
            node = self.node_of(i, l);
        }
    }
}

/// Bits `s..e` of a line's 64 bytes (`s < e <= 64`).
#[inline]
fn mask(s: u64, e: u64) -> u64 {
    let high = if e == 64 { u64::MAX } else { (1 << e) - 1 };
    high & !((1 << s) - 1)
}

/// The write set's line filter: 4,096 bits, one per hashed line, and which
/// of its 64 words hold a bit (so that clearing it touches only those).
/// A TPC-C new-order writes about a hundred lines: with 512 bits, a read
/// of a five-line node header found one of its lines in the filter about
/// half the time, and probed the write set's table for nothing.
struct Bloom {
    words: [u64; 64],
    used: u64,
}

impl Default for Bloom {
    fn default() -> Bloom {
        Bloom {
            words: [0; 64],
            used: 0,
        }
    }
}

impl Bloom {
    /// The word and bit of cache line `line`.
    #[inline]
    fn slot(line: u64) -> (usize, u64) {
        let h = line.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52;
        ((h >> 6) as usize, 1 << (h & 63))
    }

    #[inline]
    fn insert(&mut self, line: u64) {
        let (w, b) = Self::slot(line);
        self.words[w] |= b;
        self.used |= 1 << w;
    }

    /// False when `line` was never inserted.
    #[inline]
    fn may_hold(&self, line: u64) -> bool {
        let (w, b) = Self::slot(line);
        self.words[w] & b != 0
    }

    fn clear(&mut self) {
        if self.used == 0 {
            return;
        }
        let mut used = std::mem::take(&mut self.used);
        while used != 0 {
            self.words[used.trailing_zeros() as usize] = 0;
            used &= used - 1;
        }
    }
}

/// The log side of one transaction (recycled per thread, so a transaction
/// allocates nothing on the common path): a [`Handle`], boxed so that it
/// moves in and out of the thread's spare as a pointer, not as the few
/// hundred bytes of its buffers' headers. Empty only once recycled.
pub(super) struct TxLog(Option<Box<Handle>>);

impl std::ops::Deref for TxLog {
    type Target = Handle;
    fn deref(&self) -> &Handle {
        self.0
            .as_deref()
            .expect("a transaction's log is used only until it ends")
    }
}

impl std::ops::DerefMut for TxLog {
    fn deref_mut(&mut self) -> &mut Handle {
        self.0
            .as_deref_mut()
            .expect("a transaction's log is used only until it ends")
    }
}

/// What [`TxLog`] holds.
#[derive(Default)]
pub(super) struct Handle {
    pub(super) id: u64,
    pub(super) res: Reservation,
    pub(super) cells: Vec<CellRef>,
    pub(super) undo: Vec<Undo>,
    /// Every range changed in place (what a checkpoint writes back).
    pub(super) targets: Vec<(u64, u64)>,
    group: Option<Group>,
    placed: Vec<Placed>,
    old_buf: Vec<u8>,
    /// Redo commit: the coalesced runs (target, offset in `merged`, length)
    /// and their bytes.
    runs: Vec<(u64, usize, usize)>,
    merged: Vec<u8>,
    /// Appending the commit group or END: a full log must not trigger a
    /// checkpoint (which waits for the lock commit holds).
    pub(super) committing: bool,
    /// The blocks the transaction allocated and freed (kept here, not in
    /// the `Tx`, so that a transaction that allocates nothing makes none of
    /// their headers).
    pub(super) blocks: Blocks,
}

/// The blocks a transaction allocated and freed (see [`Handle::blocks`]).
#[derive(Default)]
pub(super) struct Blocks {
    /// Blocks allocated since the last savepoint or nested top action
    /// boundary: writes into them need no record.
    pub(super) fresh: Vec<(u64, u64)>,
    /// Blocks freed: back to the allocator at commit.
    pub(super) freed: Vec<(u64, u64)>,
    /// Blocks allocated and then freed by a rollback to a savepoint: back
    /// to the allocator when the transaction ends.
    pub(super) unalloc: Vec<(u64, u64)>,
    /// Redo with the commit ring: blocks this transaction allocated and
    /// freed that its commit group carries as bits entries (nothing in
    /// the log nor in the bitmap until then; see `Tx::alloc_bytes`).
    pub(super) ring_allocs: Vec<(u64, u64)>,
    pub(super) ring_frees: Vec<(u64, u64)>,
    /// The ring allocations not zeroed (`alloc_bytes_unzeroed`).
    pub(super) ring_unzeroed: Vec<u64>,
}

impl Blocks {
    /// Empties every list (each only when it holds something).
    fn clear(&mut self) {
        clear_if_any(&mut self.fresh);
        clear_if_any(&mut self.freed);
        clear_if_any(&mut self.unalloc);
        clear_if_any(&mut self.ring_allocs);
        clear_if_any(&mut self.ring_frees);
        clear_if_any(&mut self.ring_unzeroed);
    }
}

/// Empties `v` if it holds anything: an empty one is left unwritten.
#[inline]
fn clear_if_any<T>(v: &mut Vec<T>) {
    if !v.is_empty() {
        v.clear();
    }
}

thread_local! {
    static SPARE: std::cell::Cell<Option<Box<Handle>>> = const { std::cell::Cell::new(None) };
}

impl TxLog {
    /// A handle for transaction `id`, reusing this thread's last one.
    pub(super) fn new(eng: &Engine, id: u64) -> TxLog {
        let mut h = SPARE
            .try_with(std::cell::Cell::take)
            .ok()
            .flatten()
            .unwrap_or_default();
        h.id = id;
        let redo = eng.durability.write_set();
        if eng.log.variant().groups_records() || redo {
            let g = h.group.get_or_insert_with(Group::default);
            // The write set is logged at commit (or at a savepoint), never
            // because it grew. Without a ring, every REDO record is
            // reserved (see `Group::group_bytes`). (Stored only when they
            // change: the thread's last transaction set the same.)
            let size = if redo {
                usize::MAX
            } else {
                eng.hdr.group as usize
            };
            let reserving = eng.ring.is_none();
            if (g.redo, g.size, g.reserving) != (redo, size, reserving) {
                (g.redo, g.size, g.reserving) = (redo, size, reserving);
            }
        } else {
            h.group = None;
        }
        TxLog(Some(h))
    }

    /// Gives the buffers back for the thread's next transaction (the
    /// handle is then empty: the transaction is over).
    pub(super) fn recycle(&mut self) {
        let Some(mut h) = self.0.take() else { return };
        // (Each part emptied only when it holds something: most are empty
        // after a commit in the ring, and every store after a commit's
        // fence waits for it.)
        if h.res != Reservation::default() {
            h.res = Reservation::default();
        }
        clear_if_any(&mut h.cells);
        clear_if_any(&mut h.undo);
        clear_if_any(&mut h.targets);
        h.drop_pending();
        clear_if_any(&mut h.placed);
        h.blocks.clear();
        if h.committing {
            h.committing = false;
        }
        let _ = SPARE.try_with(|s| s.set(Some(h)));
    }
}

impl Handle {
    /// Nothing logged and nothing pending (a read-only transaction).
    pub(super) fn is_empty(&self) -> bool {
        self.cells.is_empty() && self.group.as_ref().is_none_or(|g| g.pending.is_empty())
    }

    /// Forgets the writes not yet logged (they were never applied either).
    pub(super) fn drop_pending(&mut self) {
        if let Some(g) = &mut self.group {
            if g.set.count() > 0 {
                g.set.begin();
            }
            // (Each part cleared only when it holds something: a commit
            // empties the write set, and its recycling finds it empty;
            // every store after a commit's fence waits for the fence.)
            clear_if_any(&mut g.pending);
            clear_if_any(&mut g.bytes);
            g.pending_emptied();
        }
    }

    /// Logs pending writes before a record that must follow them (an
    /// allocation or a free): a Batch group. The redo policy's write set
    /// waits for commit: its entries are never undone, so their place in
    /// the chain does not matter.
    pub(super) fn settle(&mut self, eng: &Engine) -> Result<(), Error> {
        if self.group.as_ref().is_some_and(|g| g.redo) {
            return Ok(());
        }
        self.flush(eng)
    }

    /// Lays this transaction's pending writes over `buf`, read at `off`.
    /// The filter is inline: a read of memory the transaction has not
    /// written costs a test or two and no call.
    #[inline]
    pub(super) fn overlay(&mut self, off: u64, buf: &mut [u8]) {
        if self.may_overlay(off, buf.len() as u64) {
            self.overlay_pending(off, buf);
        }
    }

    /// False when no pending write can overlap `[off, off + len)`: nothing
    /// pending, or (redo) none of its lines is in the write set's filter.
    #[inline]
    pub(super) fn may_overlay(&self, off: u64, len: u64) -> bool {
        let Some(g) = &self.group else { return false };
        if g.pending.is_empty() || len == 0 {
            return false;
        }
        if !g.redo {
            return true;
        }
        let (first, last) = (off / 64, (off + len - 1) / 64);
        (first..=last).any(|l| g.bloom.may_hold(l))
    }

    #[inline(never)]
    pub(super) fn overlay_pending(&mut self, off: u64, buf: &mut [u8]) {
        let Some(g) = &mut self.group else { return };
        let end = off + buf.len() as u64;
        if g.redo {
            g.index();
            let g = &*g;
            let (first, last) = (off / 64, (end - 1) / 64);
            // One entry the latest on every line of the read, and holding
            // all of it (a node's header read after the transaction wrote
            // it whole): no later write touched any of these bytes, so it
            // has them all.
            let holds = |p: &Pending| p.target <= off && end <= p.target + p.len as u64;
            if let Some(i) = g.latest_over(first..=last, holds) {
                let p = &g.pending[i as usize];
                let at = (off - p.target) as usize;
                buf.copy_from_slice(&g.new_of(p)[at..at + buf.len()]);
                return;
            }
            for l in first..=last {
                if g.bloom.may_hold(l) {
                    g.overlay_line(l, off, buf);
                }
            }
            return;
        }
        for p in &g.pending {
            let (ps, pe) = (p.target, p.target + p.len as u64);
            let (s, e) = (ps.max(off), pe.min(end));
            if s < e {
                let new = &g.bytes[p.at + p.len..p.at + 2 * p.len];
                buf[(s - off) as usize..(e - off) as usize]
                    .copy_from_slice(&new[(s - ps) as usize..(e - ps) as usize]);
            }
        }
    }

    /// A logged write of at most one record's worth of bytes: an UPDATE
    /// record, then the in-place store (with a group, when the group is
    /// logged).
    #[inline(always)]
    pub(super) fn write(&mut self, eng: &Engine, off: u64, new: &[u8]) -> Result<(), Error> {
        match &self.group {
            // A full group is logged when the next write arrives, so that a
            // commit can carry END in the last group.
            Some(g) if g.pending.len() == g.size => self.write_after_flush(eng, off, new),
            Some(_) => self.add(eng, off, new),
            None => self.write_unbatched(eng, off, new),
        }
    }

    /// [`write`](Self::write) when the group is full: logged first (its
    /// failure is returned once the write is added, as the write's).
    #[cold]
    #[inline(never)]
    fn write_after_flush(&mut self, eng: &Engine, off: u64, new: &[u8]) -> Result<(), Error> {
        let r = self.flush(eng);
        self.add(eng, off, new).and(r)
    }

    /// Adds a write to the group: an entry of the redo write set (or an
    /// edit of the entry that wrote the same bytes last), or a Batch
    /// group's pending write. The common path returns `Ok(())` made here,
    /// not a result carried through it (a move of the whole `Error`).
    #[inline(always)]
    fn add(&mut self, eng: &Engine, off: u64, new: &[u8]) -> Result<(), Error> {
        // The old value is read when the group is logged.
        let Self { group, res, .. } = self;
        let g = group.as_mut().expect("grouped");
        if g.redo {
            let end = off + new.len() as u64;
            let lines = off / 64..=end.saturating_sub(1) / 64;
            // The same bytes as the latest entry that writes any of
            // them: no later entry overlaps it (entries are read and
            // replayed in order, the latest winning), so it is edited.
            // (Indexed, a write across lines asks that entry to be the
            // latest on each; a line not in the filter is in no entry: no
            // probe.)
            let same = |p: &Pending| p.target == off && p.len == new.len();
            let edit = if new.is_empty() || !g.bloom.may_hold(off / 64) {
                None
            } else if g.indexed == 0 && g.pending.len() <= SCAN_MAX {
                // A small write set with no index yet (most of them, as
                // only a read builds it or a filter's false positive):
                // scanned, not indexed for one probe.
                g.latest_over_bytes_by_scan(off, end, same)
            } else {
                g.index();
                match lines.start() == lines.end() {
                    true => g.latest_over_bytes(off, end, same),
                    false => g.latest_over(lines.clone(), same),
                }
            };
            if let Some(i) = edit.map(|i| i as usize) {
                // The same bytes again: the entry is edited.
                let p = g.pending[i];
                g.set.value_mut(p.at, p.len).copy_from_slice(new);
                return Ok(());
            }
            g.group_bytes += group::entry_size(new.len());
            if g.reserving
                || !eng
                    .ring
                    .as_ref()
                    .is_some_and(|ring| ring.fits(group::HEADER + g.group_bytes))
            {
                Self::reserve_entry(eng, g, res, new.len())?;
            }
            // Its lines fetched now, so that the commit's write-back,
            // after the fence, does not wait for them.
            eng.dom.prefetch(off, new.len() as u64);
            // Indexed in `lines` and `chain` when a read or a rewrite
            // needs it (`Group::index`): only its lines marked now.
            if !new.is_empty() {
                for l in lines {
                    g.bloom.insert(l);
                }
            }
        }
        let at = if g.redo {
            // Into the commit group as it will be sealed.
            g.set.push(off, new)
        } else {
            let at = g.bytes.len();
            match <&[u8; 8]>::try_from(new) {
                // A word (most writes): copies of known size, no call.
                Ok(w) => {
                    g.bytes.extend_from_slice(&[0; 8]);
                    g.bytes.extend_from_slice(w);
                }
                Err(_) => {
                    g.bytes.resize(at + new.len(), 0);
                    g.bytes.extend_from_slice(new);
                }
            }
            at
        };
        g.pending.push(Pending {
            target: off,
            at,
            len: new.len(),
            // Redo: set by `Group::index`.
            node: 0,
        });
        Ok(())
    }

    /// A redo write set's new entry once the write set outgrows the ring:
    /// the bucket log's space for the entries so far (the first time),
    /// then for this one. Out of line: most write sets fit the ring, and
    /// [`write`](Self::write) stays small enough to inline.
    #[cold]
    #[inline(never)]
    fn reserve_entry(
        eng: &Engine,
        g: &mut Group,
        res: &mut Reservation,
        len: usize,
    ) -> Result<(), Error> {
        if !g.reserving {
            // Too large for the ring: the bucket log's space for the
            // entries so far, then for each one as it comes.
            for p in &g.pending {
                eng.log.reserve_redo(&eng.dom, p.len, res)?;
            }
            g.reserving = true;
        }
        // A new entry: its record's log space is held now. Under
        // redo-async the log may be full of groups waiting for write-back:
        // written back, their records make room.
        match eng.log.reserve_redo(&eng.dom, len, res) {
            Err(Error::LogFull { .. }) if eng.give_back_log_space(false)? => {
                eng.log.reserve_redo(&eng.dom, len, res)
            }
            r => r,
        }
    }

    /// A write with no group (the Simple and two-layer logs, force and
    /// no-force): its UPDATE record appended, then the store in place.
    #[inline(never)]
    fn write_unbatched(&mut self, eng: &Engine, off: u64, new: &[u8]) -> Result<(), Error> {
        let mut old = std::mem::take(&mut self.old_buf);
        old.resize(new.len(), 0);
        let r = eng
            .dom
            .read(off, &mut old)
            .and_then(|_| self.append(eng, &[Draft::update(self.id, off, &old, new)]))
            .and_then(|_| self.apply(eng, off, new));
        self.old_buf = old;
        r
    }

    /// Logs the pending group, if any, with one fence, then performs its
    /// stores.
    pub(super) fn flush(&mut self, eng: &Engine) -> Result<(), Error> {
        if self.group.as_ref().is_none_or(|g| g.pending.is_empty()) {
            return Ok(());
        }
        self.log_group(eng, false).map(|_| ())
    }

    /// Appends drafts (made persistent and valid by the log), remembering
    /// their cells and, for forward records, what undoes them.
    pub(super) fn append(&mut self, eng: &Engine, drafts: &[Draft<'_>]) -> Result<(), Error> {
        self.append_as(eng, drafts, false)
    }

    /// [`append`](Self::append), or with `one_fence` a one-fence commit
    /// group (see [`crate::log::Log::append_commit`]).
    fn append_as(
        &mut self,
        eng: &Engine,
        drafts: &[Draft<'_>],
        one_fence: bool,
    ) -> Result<(), Error> {
        // The bucket log's records are followed by stores in place that no
        // ring group covers: the ring is drained first.
        eng.before_bucket_log()?;
        self.placed.clear();
        let mut prev = self.res.last;
        let append = |placed: &mut Vec<Placed>, res: &mut Reservation| match one_fence {
            true => eng.log.append_commit(&eng.dom, drafts, placed, res),
            false => eng.log.append(&eng.dom, drafts, placed, res),
        };
        let mut r = append(&mut self.placed, &mut self.res);
        // The log may be full of finished transactions' records (no-force,
        // not while committing, so never a one-fence commit) or of
        // committed groups waiting for write-back (redo-async: the Simple
        // and two-layer logs commit through the log blocks). Nothing was
        // written by the failure.
        if matches!(r, Err(Error::LogFull { .. })) && eng.give_back_log_space(self.committing)? {
            r = append(&mut self.placed, &mut self.res);
        }
        r?;
        if let Some(ring) = &eng.ring {
            // The append fenced: a Log Start this thread's drain stored is
            // durable.
            ring.fenced_by_me(&eng.dom);
        }
        for (d, p) in drafts.iter().zip(&self.placed) {
            self.cells.push(p.cell);
            let what = match d.kind {
                Kind::Update => UndoKind::Update {
                    rec_off: p.rec_off,
                    target: d.target,
                    len: d.new.len() as u64,
                },
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
            self.undo.push(Undo {
                lsn: p.lsn,
                prev,
                what,
            });
            prev = p.lsn;
        }
        Ok(())
    }

    /// Commits the write set as one group of the commit ring (redo, a
    /// transaction with nothing in the bucket log), if it fits there:
    /// adjacent writes coalesced, one fence, the values written back with
    /// none. `false`: the transaction commits through the bucket log.
    ///
    /// `bits`: the transaction's allocations (set) and frees (clear) in the
    /// commit ring, bits entries of the group (alloc's part: see
    /// `Tx::alloc_bytes`).
    pub(super) fn commit_in_ring(
        &mut self,
        eng: &Engine,
        bits: &[group::Bits],
    ) -> Result<bool, Error> {
        let (Some(ring), Some(g)) = (&eng.ring, &mut self.group) else {
            return Ok(false);
        };
        if !g.redo || !self.cells.is_empty() || (g.pending.is_empty() && bits.is_empty()) {
            return Ok(false);
        }
        // The write set is the group, entries in write order, writes that
        // follow one another in memory joined (`Builder::push`: a struct
        // written field by field is one entry; later entries win at
        // replay, as in the write set). The allocations and frees go
        // before the values.
        let b = &mut g.set;
        b.insert_bits(bits);
        if !ring.fits(b.size()) {
            return Ok(false);
        }
        // Committed groups of the bucket log whose clears wait: this
        // commit's fence persists them before its write-back.
        eng.log.settle_clears(&eng.dom)?;
        let apply = &mut |off, size, set| eng.alloc.apply_bits(&eng.dom, off, size, set);
        if ring.commit(&eng.dom, b, apply)?.is_none() {
            // No room before the durable Log Start: the bucket log.
            return Ok(false);
        }
        self.drop_pending();
        Ok(true)
    }

    /// The in-place store a logged UPDATE describes.
    fn apply(&mut self, eng: &Engine, off: u64, new: &[u8]) -> Result<(), Error> {
        eng.dom.store(off, new)?;
        self.targets.push((off, new.len() as u64));
        eng.durability.stored(&eng.dom, off, new.len() as u64)
    }

    /// Logs the pending group — with `commit`, the END record too, in the
    /// same group, so the group's index update is the commit point — then
    /// performs the group's in-place stores. Returns END's placement.
    fn log_group(&mut self, eng: &Engine, commit: bool) -> Result<Option<Placed>, Error> {
        let g = self.group.as_mut().expect("grouped");
        if g.redo {
            g.lay_out_pairs();
        }
        let pending = std::mem::take(&mut g.pending);
        let mut bytes = std::mem::take(&mut g.bytes);
        g.pending_emptied();
        // Redo: a commit logs the new bytes only (REDO records).
        let redo = g.redo && commit;
        // Redo-async: the bytes these UPDATEs change in place must hold
        // their committed values first (see `engine::write_back`).
        for p in pending.iter().filter(|_| g.redo && !redo) {
            eng.before_store(p.target, p.len as u64)?;
        }
        // Old values, read together so their cache misses overlap, then
        // overlaid with the earlier writes of the group to the same bytes.
        for p in pending.iter().filter(|_| !redo) {
            eng.dom.read(p.target, &mut bytes[p.at..p.at + p.len])?;
        }
        for i in (1..pending.len()).filter(|_| !redo) {
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
        // Redo: writes that follow one another in memory, in write order,
        // coalesce into one record (ReDU's coalescing): a struct written
        // field by field is one REDO record, not one per field.
        // Buffers kept across transactions: nothing allocates per commit
        // once they have grown.
        let mut runs = std::mem::take(&mut self.runs);
        let mut merged = std::mem::take(&mut self.merged);
        runs.clear();
        merged.clear();
        if redo {
            for p in &pending {
                let new = &bytes[p.at + p.len..p.at + 2 * p.len];
                match runs.last_mut() {
                    Some((t, _, len))
                        if *t + *len as u64 == p.target
                            && (*len + p.len) as u64 <= MAX_RECORD_DATA =>
                    {
                        *len += p.len;
                    }
                    _ => runs.push((p.target, merged.len(), p.len)),
                }
                merged.extend_from_slice(new);
            }
        }
        let n = if redo { runs.len() } else { pending.len() };
        // A Batch group's records fit on the stack; a redo write set (or
        // one a savepoint logs) may be larger.
        let mut fixed = [Draft::bare(self.id, Kind::Update); STACK_DRAFTS];
        let mut spill = Vec::new();
        let drafts: &mut [Draft<'_>] = if n < STACK_DRAFTS {
            &mut fixed[..n + usize::from(commit)]
        } else {
            spill.resize(n + usize::from(commit), Draft::bare(self.id, Kind::Update));
            &mut spill
        };
        if redo {
            for (d, &(target, at, len)) in drafts.iter_mut().zip(&runs) {
                *d = Draft::redo(self.id, target, &merged[at..at + len]);
            }
        } else {
            for (d, p) in drafts.iter_mut().zip(&pending) {
                let new = &bytes[p.at + p.len..p.at + 2 * p.len];
                *d = Draft::update(self.id, p.target, &bytes[p.at..p.at + p.len], new);
            }
        }
        // A redo commit of a transaction with nothing else in the log goes
        // out under one fence (its END carries a checksum of the group);
        // one with earlier records (a savepoint's, an allocation's) makes
        // END valid only after the records, as a Batch group does, so that
        // recovery never takes a torn commit for a finished transaction
        // whose other records must then stay.
        let one_fence = redo
            && eng.write_back.is_some()
            && self.cells.is_empty()
            && eng.log.variant().one_fence();
        if commit {
            for d in &mut drafts[..n] {
                d.flags = IN_COMMIT_GROUP;
            }
            drafts[n] = if one_fence {
                // The payload is filled in by the log.
                Draft::end_one_fence(self.id, n as u64, &ONE_FENCE_BLANK)
            } else {
                Draft::end(self.id, true, n as u64)
            };
        }
        let drafts: &[Draft<'_>] = drafts;
        let mut r = self.append_as(eng, drafts, one_fence).map(|_| None);
        self.runs = runs;
        self.merged = merged;
        if r.is_ok() {
            if commit {
                // END is not one of the records cleared with the others.
                self.cells.pop();
                r = Ok(self.placed.last().copied());
            }
            match (&eng.write_back, &r) {
                // Redo-async: durable now; the values go to the write
                // cache, which releases the records once they are in place.
                (Some(wb), Ok(Some(end))) if redo => {
                    let values = pending
                        .iter()
                        .map(|p| (p.target, &bytes[p.at + p.len..p.at + 2 * p.len]));
                    wb.insert(eng, values, &self.cells, *end)?;
                    self.cells.clear();
                }
                _ => {
                    for p in &pending {
                        self.apply(eng, p.target, &bytes[p.at + p.len..p.at + 2 * p.len])?;
                    }
                }
            }
        }
        // Keep the buffers' capacity for the next group.
        let g = self.group.as_mut().expect("grouped");
        g.pending = pending;
        g.pending.clear();
        g.bytes = bytes;
        g.bytes.clear();
        r
    }

    /// Appends the transaction's END (`committed` or rolled back) and, with
    /// `clear`, clears its other records at once (END last). With a group,
    /// a commit's END travels in the last group: its index update is the
    /// commit point and the group's stores follow it, so recovery redoes a
    /// commit group still whole in the log; under `clear` those stores are
    /// made persistent before the records go.
    pub(super) fn append_end(
        &mut self,
        eng: &Engine,
        committed: bool,
        clear: bool,
    ) -> Result<Ended, Error> {
        let d = &eng.dom;
        let end = if committed && self.group.is_some() {
            let end = self.log_group(eng, true)?.expect("END was appended");
            if clear && eng.write_back.is_some() && self.group.as_ref().is_some_and(|g| g.redo) {
                // The write cache holds the records until write-back.
            } else if clear {
                d.fence_at(sites::TX_COMMIT_STORES)?;
                eng.log.release_later(d, &self.cells, end.cell)?;
                self.cells.clear();
            }
            end
        } else {
            let draft = Draft::end(self.id, committed, 0);
            let mut placed = std::mem::take(&mut self.placed);
            placed.clear();
            // Under `clear`, the END append's first fence persists every
            // flushed store before the records go.
            let cells = clear.then_some(self.cells.as_slice());
            let r = eng
                .log
                .append_end(d, &draft, cells, &mut placed, &mut self.res);
            let end = placed.first().copied();
            self.placed = placed;
            r?;
            if clear {
                self.cells.clear();
            }
            end.expect("END was appended")
        };
        if clear {
            // Nothing stays: the buffers keep their capacity for the
            // thread's next transaction.
            self.targets.clear();
            return Ok(Ended {
                end,
                records: Vec::new(),
                targets: Vec::new(),
            });
        }
        Ok(Ended {
            end,
            records: std::mem::take(&mut self.cells),
            targets: std::mem::take(&mut self.targets),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::SmallRng, Rng, SeedableRng};

    /// The probe for an entry to edit finds the same entry by a scan as by
    /// the line index, over random write sets of overlapping writes of
    /// 1 to 200 bytes (one to five lines) and random probes.
    #[test]
    fn the_scan_and_the_index_find_the_same_entry_to_edit() {
        let mut rng = SmallRng::seed_from_u64(7);
        let (mut edits, mut probes_made) = (0, 0);
        for _ in 0..300 {
            let mut g = Group::default();
            let n = rng.gen_range(1..=SCAN_MAX);
            for i in 0..n {
                let target = rng.gen_range(0..4096u64);
                let len = rng.gen_range(1..=200usize);
                g.pending.push(Pending {
                    target,
                    at: i,
                    len,
                    node: 0,
                });
            }
            // Probes: earlier entries' own bytes (some still the latest,
            // some covered by a later write) and random ranges.
            let probes: Vec<(u64, usize)> = (0..40)
                .map(|_| match rng.gen_bool(0.5) {
                    true => {
                        let p = g.pending[rng.gen_range(0..n)];
                        (p.target, p.len)
                    }
                    false => (rng.gen_range(0..4096), rng.gen_range(1..=200)),
                })
                .collect();
            let scanned: Vec<Option<u32>> = (probes.iter())
                .map(|&(off, len)| {
                    let lines = off / 64..=(off + len as u64 - 1) / 64;
                    g.latest_by_scan(lines, |p| p.target == off && p.len == len)
                })
                .collect();
            g.index();
            let indexed: Vec<Option<u32>> = (probes.iter())
                .map(|&(off, len)| {
                    let lines = off / 64..=(off + len as u64 - 1) / 64;
                    g.latest_over(lines, |p| p.target == off && p.len == len)
                })
                .collect();
            assert_eq!(scanned, indexed);
            edits += scanned.iter().filter(|e| e.is_some()).count();
            probes_made += scanned.len();
        }
        // Both outcomes were met, many times.
        assert!(
            edits > 1000 && probes_made - edits > 1000,
            "{edits} of {probes_made}"
        );
    }
}
