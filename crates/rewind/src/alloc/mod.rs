//! The persistent allocator (REWIND §4.3).
//!
//! The heap is cut into 256 KiB chunks. The chunk table (`table`) says
//! what each chunk holds (free, a small size class, a large run, log
//! blocks); a bitmap per chunk (one bit per 64-byte slot) says which blocks
//! of a small-class chunk are allocated. Both carry checks (a check byte
//! per descriptor, an additive hash per bitmap: [`bitmap_check_update`]),
//! so damaged metadata is found at open, not trusted. The media state is the truth;
//! the free lists are volatile and rebuilt at open.
//!
//! Allocation state changes are logged by the transaction as ALLOC and
//! DELETE records and applied with [`Allocator::mark`], which is idempotent,
//! so recovery can redo or undo them any number of times. Formatting a free
//! chunk for a class is not logged: it is made durable at once and never
//! undone; a class chunk found empty at open goes back to free.
//!
//! The log grows by taking whole chunks from the heap ([`Allocator::reserve_log_chunk`])
//! and gives them back when all their blocks are free again. A log chunk
//! is marked with one 8-byte descriptor store, so it is never half
//! formatted; one whose blocks are all out of the log list (a crash between
//! marking it and linking a block, or a log cleared by recovery) is freed
//! at open.
//!
//! Blocks freed by a transaction are handed back to the free lists only
//! after it commits ([`Allocator::release`]), and blocks allocated by an
//! aborted one after its rollback, so no block has two owners.
//!
//! **Chunks shared by all classes.** A class chunk all of whose blocks are
//! free (on media and on the free lists) is given back to the free chunks
//! when a chunk is needed and none is free (the reclaim: its descriptor set
//! free, one 8-byte store), so the space freed by one class serves any
//! other class, a large run or the log.
//!
//! **Growth.** The chunk table is planned for the pool's maximum size; the
//! meta page's heap size word says how many of its chunks are in the heap
//! now (`format::meta::encode_heap`). When a chunk is needed and none is
//! free even after the reclaim, the heap grows (to twice its chunks, or
//! what the request needs, at most the maximum): the file is extended
//! with its blocks allocated and its length made durable
//! ([`Domain::extend`]), then the heap size word is stored, written back
//! and fenced, and only then are the new chunks handed out. A crash before
//! that fence leaves the old size (the file may be longer: the next growth
//! reuses it), after it the new one; the new chunks are free either way
//! (their descriptors were zero, which [`Allocator::open`] checks of every
//! chunk past the recorded heap). A full disk is [`Error::NoSpaceToGrow`]
//! with nothing changed.

pub mod catalog;
pub(crate) mod table;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::error::Error;
use crate::format::layout::{Layout, BITMAP_BYTES, CHUNK, DESC_BYTES, MIN_CLASS};
use crate::format::meta;
use crate::persist::{sites, Domain};
use table::{bitmap_off, check_off, chunk_start, desc_off, ChunkKind};

#[cfg(feature = "testing")]
pub use table::check_update as bitmap_check_update;

/// Number of small size classes: 64 B .. 64 KiB.
pub const CLASSES: usize = 11;
/// Largest small class.
pub const MAX_SMALL: u64 = MIN_CLASS << (CLASSES - 1);

/// Size class for `size` bytes, or `None` for a large allocation.
pub fn class_of(size: u64) -> Option<usize> {
    if size > MAX_SMALL {
        return None;
    }
    let s = size.max(MIN_CLASS).next_power_of_two();
    Some((s.trailing_zeros() - MIN_CLASS.trailing_zeros()) as usize)
}

/// The block size an allocation of `size` bytes gets.
pub fn block_size(size: u64) -> u64 {
    match class_of(size) {
        Some(c) => MIN_CLASS << c,
        None => size.div_ceil(CHUNK) * CHUNK,
    }
}

struct State {
    free: Vec<Vec<u64>>,
    free_chunks: BTreeSet<u64>,
    /// Chunks in the heap now (the heap size word).
    chunks: u64,
    /// Blocks a running transaction frees, or allocated with its bits set
    /// before its commit, by the transaction's id
    /// ([`Allocator::claim_free`], [`Allocator::mark_allocated_for`]): from the
    /// free's check (the allocation) until the block is released, or the
    /// transaction ends.
    freeing: HashMap<u64, u64>,
}

/// Usage figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AllocStats {
    /// Chunks not in use.
    pub free_chunks: u64,
    /// Chunks in the heap now (it may grow up to the maximum size).
    pub total_chunks: u64,
    /// Free blocks on the small-class free lists.
    pub free_small_blocks: u64,
    /// Bytes in allocated blocks (block sizes, not the sizes asked for).
    pub bytes_used: u64,
    /// Bytes free: free chunks and the free blocks of class chunks.
    pub bytes_free: u64,
    /// Per small class (64 B << index): bytes allocated and free in the
    /// chunks that class holds.
    pub classes: [ClassStats; CLASSES],
}

/// One size class's figures in [`AllocStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClassStats {
    /// Block size of the class.
    pub block_size: u64,
    /// Chunks holding the class.
    pub chunks: u64,
    /// Bytes in allocated blocks.
    pub bytes_used: u64,
    /// Bytes in free blocks.
    pub bytes_free: u64,
}

/// The allocator of one pool.
pub struct Allocator {
    l: Layout,
    state: Mutex<State>,
    /// The free epoch ([`free_epoch`](Self::free_epoch)).
    epoch: AtomicU64,
}

/// Where every allocator's free epochs are drawn from: no two allocators
/// of a process ever show the same epoch, so a cache stamped with one
/// cannot be taken for another pool's (a new pool may reuse an old one's
/// address, never its epochs).
static EPOCHS: AtomicU64 = AtomicU64::new(1);

fn next_epoch() -> u64 {
    EPOCHS.fetch_add(1, Ordering::SeqCst)
}

impl Allocator {
    /// Rebuilds the free lists from the media state, after recovery. Empty
    /// class chunks return to free. Inconsistent descriptors are errors.
    pub fn open(d: &Domain, l: &Layout) -> Result<Allocator, Error> {
        let chunks = heap_chunks(d, l)?;
        let a = Allocator {
            l: *l,
            epoch: AtomicU64::new(next_epoch()),
            state: Mutex::new(State {
                free: vec![Vec::new(); CLASSES],
                free_chunks: BTreeSet::new(),
                chunks,
                freeing: HashMap::new(),
            }),
        };
        table::verify_padding(d, l, chunks)?;
        let mut st = a.state.lock();
        let mut bits = vec![0u8; BITMAP_BYTES as usize];
        let mut c = 0;
        let mut reset = false;
        while c < chunks {
            let (kind, low) = table::read(d, l, c)?;
            table::verify_bitmap(d, l, c, kind, &mut bits)?;
            let corrupt = |reason| Error::HeapCorrupt {
                offset: desc_off(l, c),
                reason,
            };
            match kind {
                ChunkKind::Free if low == 0 => {
                    st.free_chunks.insert(c);
                    c += 1;
                }
                ChunkKind::Small if (low as usize) < CLASSES => {
                    if bits.iter().all(|&b| b == 0) {
                        table::write(d, l, c, ChunkKind::Free, 0)?;
                        d.flush_at(desc_off(l, c), 8, sites::ALLOC_OPEN_RESET_FLUSH)?;
                        reset = true;
                        st.free_chunks.insert(c);
                    } else {
                        let size = MIN_CLASS << low;
                        for slot in (0..CHUNK / size).rev() {
                            if bits[(slot / 8) as usize] & (1 << (slot % 8)) == 0 {
                                st.free[low as usize].push(chunk_start(l, c) + slot * size);
                            }
                        }
                        if bits_past_slots(&bits, CHUNK / size) {
                            return Err(corrupt("bitmap bits set past the class's last block"));
                        }
                    }
                    c += 1;
                }
                ChunkKind::Large if low >= 1 && c + low <= chunks => {
                    for k in 1..low {
                        if table::read(d, l, c + k)? != (ChunkKind::Cont, k) {
                            return Err(corrupt("large run continuation descriptor missing"));
                        }
                        table::verify_bitmap(d, l, c + k, ChunkKind::Cont, &mut bits)?;
                    }
                    c += low;
                }
                // Owned by the log (which freed the empty ones before this).
                ChunkKind::Log if low == 0 => c += 1,
                _ => return Err(corrupt("invalid chunk descriptor")),
            }
        }
        if reset {
            // Resets are only an optimisation; ordering them is not needed
            // for safety, but leave the media tidy.
            d.fence_at(sites::ALLOC_OPEN_RESET_FENCE)?;
        }
        drop(st);
        Ok(a)
    }

    /// Picks a free block of at least `size` bytes (volatile; the caller
    /// logs ALLOC and then calls [`mark`](Self::mark)). Returns its offset
    /// and block size.
    pub fn reserve(&self, d: &Domain, size: u64) -> Result<(u64, u64), Error> {
        if size == 0 {
            return Err(Error::InvalidConfig {
                what: "allocation size",
                value: "0".into(),
                expected: "at least 1 byte",
            });
        }
        let mut st = self.state.lock();
        match class_of(size) {
            Some(class) => {
                if st.free[class].is_empty() {
                    if st.free_chunks.is_empty() {
                        self.make_room(d, &mut st, 1, size)?;
                    }
                    let chunk = st
                        .free_chunks
                        .pop_first()
                        .ok_or(Error::OutOfMemory { requested: size })?;
                    // Format: empty bitmap, then the descriptor, durable before
                    // any ALLOC record can name a block of the chunk.
                    let l = &self.l;
                    d.store(bitmap_off(l, chunk), &[0u8; BITMAP_BYTES as usize])?;
                    d.flush_at(
                        bitmap_off(l, chunk),
                        BITMAP_BYTES,
                        sites::ALLOC_FORMAT_BITMAP,
                    )?;
                    d.store(check_off(l, chunk), &[0u8; 24])?;
                    table::write(d, l, chunk, ChunkKind::Small, class as u64)?;
                    d.flush_at(desc_off(l, chunk), DESC_BYTES, sites::ALLOC_FORMAT_DESC)?;
                    d.fence_at(sites::ALLOC_FORMAT_FENCE)?;
                    let bs = MIN_CLASS << class;
                    for slot in (0..CHUNK / bs).rev() {
                        st.free[class].push(chunk_start(l, chunk) + slot * bs);
                    }
                }
                let off = st.free[class].pop().expect("refilled above");
                Ok((off, MIN_CLASS << class))
            }
            None => {
                let n = size.div_ceil(CHUNK);
                let start = match find_run(&st.free_chunks, n) {
                    Some(s) => s,
                    None => {
                        self.make_room(d, &mut st, n, size)?;
                        find_run(&st.free_chunks, n)
                            .ok_or(Error::OutOfMemory { requested: size })?
                    }
                };
                for c in start..start + n {
                    st.free_chunks.remove(&c);
                }
                Ok((chunk_start(&self.l, start), n * CHUNK))
            }
        }
    }

    /// Takes a free chunk for the log and marks it as a log chunk on media,
    /// persistently: its blocks back reservations that recovery counts on.
    /// Returns its offset.
    pub fn reserve_log_chunk(&self, d: &Domain) -> Result<u64, Error> {
        let mut st = self.state.lock();
        if st.free_chunks.is_empty() {
            self.make_room(d, &mut st, 1, CHUNK)?;
        }
        // The highest free chunk: user data grows from the bottom.
        let chunk = st
            .free_chunks
            .pop_last()
            .ok_or(Error::OutOfMemory { requested: CHUNK })?;
        table::write(d, &self.l, chunk, ChunkKind::Log, 0)?;
        d.flush_at(desc_off(&self.l, chunk), 8, sites::ALLOC_LOG_GROW)?;
        d.fence_at(sites::ALLOC_LOG_GROW_FENCE)?;
        Ok(chunk_start(&self.l, chunk))
    }

    /// Gives a log chunk none of whose blocks is in the log list back to
    /// the heap.
    pub fn release_log_chunk(&self, d: &Domain, off: u64) -> Result<(), Error> {
        let mut st = self.state.lock();
        let chunk = free_log_chunk(d, &self.l, off)?;
        d.fence_at(sites::ALLOC_LOG_SHRINK_FENCE)?;
        st.free_chunks.insert(chunk);
        Ok(())
    }

    /// Makes room for a run of `n` free chunks (a request of `size`
    /// bytes): first the reclaim of empty class chunks, then growth.
    fn make_room(&self, d: &Domain, st: &mut State, n: u64, size: u64) -> Result<(), Error> {
        if self.reclaim(d, st)? && find_run(&st.free_chunks, n).is_some() {
            return Ok(());
        }
        // Free chunks at the heap's end join the new ones in a run.
        let mut tail = 0;
        while tail < n.min(st.chunks) && st.free_chunks.contains(&(st.chunks - tail - 1)) {
            tail += 1;
        }
        let need = n - tail;
        let min = st.chunks + need;
        if min > self.l.heap_chunks {
            return Err(Error::OutOfMemory { requested: size });
        }
        let want = (st.chunks * 2).clamp(min, self.l.heap_chunks);
        match self.grow_to(d, st, want) {
            // A disk without room for the doubling may have it for the
            // request.
            Err(Error::NoSpaceToGrow { .. }) if want > min => self.grow_to(d, st, min),
            r => r,
        }
    }

    /// Gives every class chunk all of whose blocks are free (on media and
    /// on its class's free list) back to the free chunks: its descriptor
    /// set free (one 8-byte store each, then one fence). Returns whether
    /// any was.
    fn reclaim(&self, d: &Domain, st: &mut State) -> Result<bool, Error> {
        let l = &self.l;
        let mut counts: std::collections::HashMap<u64, u64> = Default::default();
        for list in &st.free {
            for &off in list {
                *counts.entry((off - l.heap_off) / CHUNK).or_default() += 1;
            }
        }
        let mut empty = Vec::new();
        for (&c, &n) in &counts {
            match table::read(d, l, c)? {
                (ChunkKind::Small, k)
                    if (k as usize) < CLASSES && n == CHUNK / (MIN_CLASS << k) =>
                {
                    let mut bits = [0u8; BITMAP_BYTES as usize];
                    d.read(bitmap_off(l, c), &mut bits)?;
                    if bits.iter().all(|&b| b == 0) && d.read_u64(check_off(l, c))? == 0 {
                        empty.push((c, k as usize));
                    }
                }
                _ => {}
            }
        }
        if empty.is_empty() {
            return Ok(false);
        }
        for &(c, class) in &empty {
            table::write(d, l, c, ChunkKind::Free, 0)?;
            d.flush_at(desc_off(l, c), 8, sites::ALLOC_RECLAIM)?;
            let (lo, hi) = (chunk_start(l, c), chunk_start(l, c) + CHUNK);
            st.free[class].retain(|&o| o < lo || o >= hi);
            st.free_chunks.insert(c);
        }
        d.fence_at(sites::ALLOC_RECLAIM_FENCE)?;
        Ok(true)
    }

    /// Grows the heap to `want` chunks (at most the maximum): the file
    /// extended and its length durable, then the heap size word stored,
    /// written back and fenced, then the chunks free. The chunks' table
    /// entries and bitmaps must be zero (`HeapCorrupt` otherwise).
    fn grow_to(&self, d: &Domain, st: &mut State, want: u64) -> Result<(), Error> {
        let l = &self.l;
        let want = want.min(l.heap_chunks);
        if want <= st.chunks {
            return Ok(());
        }
        table::verify_unused(d, l, st.chunks, want)?;
        d.extend(chunk_start(l, want))?;
        d.store_word(meta::HEAP, &meta::encode_heap(want).to_le_bytes())?;
        d.flush_at(meta::HEAP, 8, sites::ALLOC_HEAP_GROW)?;
        d.fence_at(sites::ALLOC_HEAP_GROW_FENCE)?;
        st.free_chunks.extend(st.chunks..want);
        st.chunks = want;
        Ok(())
    }

    /// Grows the heap by the chunks `more` asks for given the chunks it
    /// holds, asked under the allocator's lock, so that calls at once each
    /// see the others' growth ([`Pool::grow`](crate::Pool::grow)):
    /// `OutOfMemory` past the maximum size. Returns the chunks it holds.
    pub fn grow(&self, d: &Domain, more: impl FnOnce(u64) -> u64) -> Result<u64, Error> {
        let mut st = self.state.lock();
        let chunks = more(st.chunks);
        let want = st.chunks.saturating_add(chunks);
        if want > self.l.heap_chunks {
            return Err(Error::OutOfMemory {
                requested: chunks.saturating_mul(CHUNK),
            });
        }
        self.grow_to(d, &mut st, want)?;
        Ok(st.chunks)
    }

    /// Returns blocks that were reserved but never became (or are no
    /// longer) allocated on media: after an abort, or after a commit that
    /// freed them.
    pub fn release(&self, off: u64, size: u64) {
        let mut st = self.state.lock();
        // Free now: no transaction is freeing it any more.
        st.freeing.remove(&off);
        // A block handed out again from here may be of another type: a
        // check cached for it (an aborted transaction's allocation that
        // its own reads checked) must not outlive it.
        self.freeing();
        match class_of(size) {
            Some(class) if size == MIN_CLASS << class => st.free[class].push(off),
            _ => {
                let c = (off - self.l.heap_off) / CHUNK;
                for k in 0..size / CHUNK {
                    st.free_chunks.insert(c + k);
                }
            }
        }
    }

    /// Marks the block `[off, off+size)` allocated or free on media with
    /// ordinary stores and flushes (persistent at the caller's next fence).
    /// Idempotent. `size` is the block size.
    pub fn mark(&self, d: &Domain, off: u64, size: u64, allocated: bool) -> Result<(), Error> {
        let _st = self.state.lock();
        if !allocated {
            self.freeing();
        }
        mark_with(d, &self.l, off, size, allocated, true)
    }

    /// Sets (`allocated`) or clears the bitmap bit of the small block of
    /// `size` bytes at `off` and updates its check word, under the latch,
    /// written back with no fence: the write-back of a commit group's bits
    /// entry (`log/ring.rs`). Returns the ranges written (the bitmap byte,
    /// the check word). The block's chunk was formatted for its class
    /// before the block was handed out, so its descriptor is not written.
    pub fn apply_bits(
        &self,
        d: &Domain,
        off: u64,
        size: u64,
        allocated: bool,
    ) -> Result<[(u64, u64); 2], Error> {
        let _st = self.state.lock();
        let (chunk, slot) = small_slot(&self.l, off, size).ok_or(Error::InvalidFree {
            offset: off,
            reason: "a commit group's bits entry names no small block",
        })?;
        if !allocated {
            self.freeing();
        }
        table::set_bit(d, &self.l, chunk, slot, allocated, true)?;
        Ok([
            (bitmap_off(&self.l, chunk) + slot / 8, 1),
            (check_off(&self.l, chunk), 8),
        ])
    }

    /// A value that changes whenever a block of this pool becomes free on
    /// media (a free, an undone allocation, a commit group's cleared bit)
    /// or goes back to the free lists unused (an aborted allocation),
    /// and that no other allocator of the process shows: while it stays
    /// the same, a block found allocated stays allocated (and cannot be
    /// handed out again). Caches of such checks (`tx/access.rs`, the
    /// collections' header checks) are kept while it stays.
    #[inline]
    pub fn free_epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// A new epoch, drawn before a block's bits are cleared (under the
    /// latch): whoever read the old one after the clear began has its
    /// cache dropped at its next check.
    fn freeing(&self) {
        self.epoch.store(next_epoch(), Ordering::SeqCst);
    }

    /// The media bytes [`mark`](Self::mark) changes for this block, so a
    /// checkpoint can flush them.
    pub fn mark_range(&self, off: u64, size: u64) -> [(u64, u64); 2] {
        mark_range(&self.l, off, size)
    }

    /// Transaction `tx`'s free of the block at `off`: its block size if
    /// it is allocated on media and no other running transaction frees
    /// it, and then it is `tx`'s to free until [`release`](Self::release)
    /// or [`unclaim`](Self::unclaim). Checked and claimed under the latch:
    /// two transactions freeing one block at once both found it allocated
    /// (its bit clears at the free, or under redo at the commit), both
    /// committed, and the block went back to the free lists twice (two
    /// later allocations were handed the same memory).
    pub fn claim_free(&self, d: &Domain, off: u64, tx: u64) -> Result<u64, Error> {
        let mut st = self.state.lock();
        let size = allocated_size(d, &self.l, off)?;
        if st.freeing.get(&off).is_some_and(|&other| other != tx) {
            return Err(Error::InvalidFree {
                offset: off,
                reason: "another transaction running now frees the block, or allocated it and has \
                         not committed",
            });
        }
        st.freeing.insert(off, tx);
        Ok(size)
    }

    /// Transaction `tx`'s allocation of the block at `off` (`size` bytes),
    /// marked allocated on media before its commit (outside the commit
    /// ring), as [`mark`](Self::mark): the block is `tx`'s until it is
    /// released or `tx` ends ([`unclaim`](Self::unclaim)), so that no
    /// other transaction frees it meanwhile ([`claim_free`](Self::claim_free)).
    /// Such a free found it allocated and committed; when `tx` then rolled
    /// back, its undo freed the block too, and it went back to the free
    /// lists twice (two later allocations were handed the same memory).
    /// The bit and the claim are made under one hold of the latch: a free
    /// between them (of a stale pointer to the block, from before it was
    /// last freed) found the bit set and no claim, claimed the block, and
    /// the allocation's claim then replaced its own.
    pub fn mark_allocated_for(
        &self,
        d: &Domain,
        off: u64,
        size: u64,
        tx: u64,
    ) -> Result<(), Error> {
        let mut st = self.state.lock();
        mark_with(d, &self.l, off, size, true, true)?;
        st.freeing.insert(off, tx);
        Ok(())
    }

    /// The claims of transaction `tx` ([`claim_free`](Self::claim_free))
    /// on the blocks at `offs` dropped, where they are still its own: it
    /// has ended, and those frees were rolled back (or never logged).
    pub fn unclaim(&self, offs: &[u64], tx: u64) {
        let mut st = self.state.lock();
        for off in offs {
            if st.freeing.get(off) == Some(&tx) {
                st.freeing.remove(off);
            }
        }
    }

    /// Whether some thread holds the latch (the crash explorer's scheduler
    /// never makes a thread wait while it holds one).
    #[cfg(feature = "testing")]
    pub(crate) fn latched(&self) -> bool {
        self.state.is_locked()
    }

    /// Usage figures: the volatile free lists, and the chunk table for the
    /// chunks each class holds.
    pub fn stats(&self, d: &Domain) -> AllocStats {
        let st = self.state.lock();
        let mut classes = [ClassStats::default(); CLASSES];
        for (i, c) in classes.iter_mut().enumerate() {
            c.block_size = MIN_CLASS << i;
            c.bytes_free = st.free[i].len() as u64 * c.block_size;
        }
        let mut log_chunks = 0;
        for c in 0..st.chunks {
            match table::read(d, &self.l, c) {
                Ok((ChunkKind::Small, k)) if (k as usize) < CLASSES => {
                    classes[k as usize].chunks += 1
                }
                Ok((ChunkKind::Log, _)) => log_chunks += 1,
                _ => {}
            }
        }
        for c in &mut classes {
            c.bytes_used = (c.chunks * CHUNK).saturating_sub(c.bytes_free);
        }
        let free_chunks = st.free_chunks.len() as u64;
        let small_free: u64 = classes.iter().map(|c| c.bytes_free).sum();
        let bytes_free = free_chunks * CHUNK + small_free;
        AllocStats {
            free_chunks,
            total_chunks: st.chunks,
            free_small_blocks: st.free.iter().map(|v| v.len() as u64).sum(),
            bytes_used: ((st.chunks - log_chunks) * CHUNK).saturating_sub(bytes_free),
            bytes_free,
            classes,
        }
    }
}

/// True when a bitmap has a bit set at or past slot `slots`.
fn bits_past_slots(bits: &[u8], slots: u64) -> bool {
    (slots..BITMAP_BYTES * 8).any(|s| bits[(s / 8) as usize] & (1 << (s % 8)) != 0)
}

fn chunk_of(l: &Layout, off: u64) -> Result<u64, Error> {
    if off < l.heap_off || off >= l.heap_end() {
        return Err(Error::InvalidFree {
            offset: off,
            reason: "outside the heap",
        });
    }
    Ok((off - l.heap_off) / CHUNK)
}

/// Whether any chunk of the run `[off, off + len)` (at least `off`'s, the
/// run clamped to the heap) lies in a heap chunk the log owns now. A chunk
/// goes to the log only once it is free, so the records recovery finds
/// about its earlier life (user data, allocations, frees, under no-force
/// not yet checkpointed; a large run freed and partly taken by the log
/// since) are older than the log's use of it, which is durable before any
/// block of it is: redoing them would write over the log.
pub fn run_in_log_chunk(d: &Domain, l: &Layout, off: u64, len: u64) -> Result<bool, Error> {
    if off < l.heap_off || off >= l.heap_end() {
        return Ok(false);
    }
    let end = off.saturating_add(len.max(1)).min(l.heap_end());
    let (first, last) = (chunk_of(l, off)?, chunk_of(l, end - 1)?);
    for c in first..=last {
        if table::read(d, l, c)?.0 == ChunkKind::Log {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Chunks in the heap: the meta page's heap size word, checked, at most
/// the chunk table's entries, and inside the file (`MetaCorrupt`
/// otherwise: a heap size word larger than the file, or than the maximum
/// size, is damage, never a fault at a later access).
pub fn heap_chunks(d: &Domain, l: &Layout) -> Result<u64, Error> {
    let n = meta::decode_heap(d.read_u64(meta::HEAP)?)?;
    let bad = |reason| {
        Err(Error::MetaCorrupt {
            offset: meta::HEAP,
            reason,
        })
    };
    if n == 0 || n > l.heap_chunks {
        return bad("the heap size word is 0 or past the pool's maximum size");
    }
    if chunk_start(l, n) > d.len() {
        return bad("the heap size word names chunks past the end of the file (a truncated file)");
    }
    Ok(n)
}

/// The offsets of the chunks the log owns, in address order.
pub fn log_chunks(d: &Domain, l: &Layout) -> Result<Vec<u64>, Error> {
    let mut out = Vec::new();
    for c in 0..heap_chunks(d, l)? {
        if table::read(d, l, c)?.0 == ChunkKind::Log {
            out.push(chunk_start(l, c));
        }
    }
    Ok(out)
}

/// Marks the log chunk at `off` free on media (written back, not fenced);
/// returns its index. Used by the allocator and, before it exists, at open.
pub fn free_log_chunk(d: &Domain, l: &Layout, off: u64) -> Result<u64, Error> {
    let chunk = (off - l.heap_off) / CHUNK;
    if table::read(d, l, chunk)? != (ChunkKind::Log, 0) {
        return Err(Error::HeapCorrupt {
            offset: desc_off(l, chunk),
            reason: "log chunk released twice",
        });
    }
    table::write(d, l, chunk, ChunkKind::Free, 0)?;
    d.flush_at(desc_off(l, chunk), 8, sites::ALLOC_LOG_SHRINK)?;
    Ok(chunk)
}

/// [`Allocator::mark`] without the volatile state, for recovery (which runs
/// before the free lists exist): a small block's bit only, its chunk's
/// bitmap check left to [`recompute_check`] (see `table`: the check on
/// media may be torn from the bits, and an update from it would keep the
/// tear).
pub fn mark(d: &Domain, l: &Layout, off: u64, size: u64, allocated: bool) -> Result<(), Error> {
    mark_with(d, l, off, size, allocated, false)
}

fn mark_with(
    d: &Domain,
    l: &Layout,
    off: u64,
    size: u64,
    allocated: bool,
    update_check: bool,
) -> Result<(), Error> {
    let chunk = chunk_of(l, off)?;
    match class_of(size) {
        Some(class) if size == MIN_CLASS << class => {
            if allocated {
                // The block's chunk holds its class. Formatting a chunk is not
                // logged, so when recovery repeats history (no-force redo), an
                // earlier large run redone and freed in the same chunk would
                // otherwise leave it marked free under a later block.
                if table::read(d, l, chunk)? != (ChunkKind::Small, class as u64) {
                    table::write(d, l, chunk, ChunkKind::Small, class as u64)?;
                    d.flush_at(desc_off(l, chunk), 8, sites::ALLOC_MARK_BIT)?;
                }
            }
            let slot = (off - chunk_start(l, chunk)) / size;
            table::set_bit(d, l, chunk, slot, allocated, update_check)
        }
        _ => {
            let n = size / CHUNK;
            if n == 0 || chunk + n > l.heap_chunks {
                return Err(Error::OutOfBounds {
                    offset: off,
                    len: size,
                    size: l.heap_end(),
                });
            }
            for k in 0..n {
                let (kind, v) = match (allocated, k) {
                    (false, _) => (ChunkKind::Free, 0),
                    (true, 0) => (ChunkKind::Large, n),
                    (true, k) => (ChunkKind::Cont, k),
                };
                table::write(d, l, chunk + k, kind, v)?;
            }
            d.flush_at(desc_off(l, chunk), n * DESC_BYTES, sites::ALLOC_MARK_RUN)
        }
    }
}

/// The chunk and slot of the small block of `size` bytes at `off`: `None`
/// unless `size` is a class's block size and `off` a block of that size
/// inside the heap's planned chunks.
fn small_slot(l: &Layout, off: u64, size: u64) -> Option<(u64, u64)> {
    let class = class_of(size)?;
    if size != MIN_CLASS << class || off < l.heap_off {
        return None;
    }
    let chunk = (off - l.heap_off) / CHUNK;
    let within = off - chunk_start(l, chunk);
    (chunk < l.heap_chunks && within.is_multiple_of(size)).then_some((chunk, within / size))
}

/// The chunk of the small block of `size` bytes at `off` (see
/// `small_slot`).
pub fn small_chunk(l: &Layout, off: u64, size: u64) -> Option<u64> {
    small_slot(l, off, size).map(|(c, _)| c)
}

/// Recovery's replay of a commit group's bits entry (`log/ring.rs`): sets
/// or clears the block's bitmap bit, written back, without its check word
/// (the caller recomputes the check of each chunk so changed, before its
/// fence). Returns the chunk. A block that is no small block of the heap
/// is `LogCorrupt` at `at` (the group's place).
pub fn replay_bits(
    d: &Domain,
    l: &Layout,
    off: u64,
    size: u64,
    allocated: bool,
    at: u64,
) -> Result<u64, Error> {
    let (chunk, slot) = small_slot(l, off, size).ok_or(Error::LogCorrupt {
        offset: at,
        reason: "commit group bits entry names no small block of the heap",
    })?;
    table::set_bit(d, l, chunk, slot, allocated, false)?;
    Ok(chunk)
}

/// The media bytes [`mark`] changes for this block: the bitmap byte and
/// its check word, or the run's descriptors.
pub fn mark_range(l: &Layout, off: u64, size: u64) -> [(u64, u64); 2] {
    let chunk = (off - l.heap_off) / CHUNK;
    match class_of(size) {
        Some(class) if size == MIN_CLASS << class => {
            let slot = (off - chunk_start(l, chunk)) / size;
            [
                (bitmap_off(l, chunk) + slot / 8, 1),
                (desc_off(l, chunk), DESC_BYTES),
            ]
        }
        _ => [(desc_off(l, chunk), size / CHUNK * DESC_BYTES), (0, 0)],
    }
}

/// The chunk holding block `off` of `size` bytes and the block's bit in
/// that chunk's bitmap; `None` for a large run (it has no bit), or a block
/// outside the heap.
pub fn bitmap_slot(l: &Layout, off: u64, size: u64) -> Option<(u64, u64)> {
    let chunk = chunk_of(l, off).ok()?;
    match class_of(size) {
        Some(class) if size == MIN_CLASS << class => {
            Some((chunk, (off - chunk_start(l, chunk)) / size))
        }
        _ => None,
    }
}

/// Recovery, before any bit changes: chunk `chunk`'s stored bitmap check
/// must be its bitmap's with some of `slots` (the bits the log's records
/// name in it) flipped; `HeapCorrupt` otherwise. See `table`.
pub fn verify_torn_check(d: &Domain, l: &Layout, chunk: u64, slots: &[u64]) -> Result<(), Error> {
    table::verify_torn(d, l, chunk, slots)
}

/// Recovery, after redo and undo: chunk `chunk`'s bitmap check recomputed
/// from its words, written back.
pub fn recompute_check(d: &Domain, l: &Layout, chunk: u64) -> Result<(), Error> {
    table::recompute_check(d, l, chunk)
}

/// If `off` is the start of an allocated block, its block size.
pub fn allocated_size(d: &Domain, l: &Layout, off: u64) -> Result<u64, Error> {
    let chunk = chunk_of(l, off)?;
    let (kind, low) = table::read(d, l, chunk)?;
    let start = chunk_start(l, chunk);
    let not_allocated = Error::InvalidFree {
        offset: off,
        reason: "block is not allocated",
    };
    match kind {
        ChunkKind::Small if (low as usize) < CLASSES => {
            let size = MIN_CLASS << low;
            if !(off - start).is_multiple_of(size) {
                return Err(Error::InvalidFree {
                    offset: off,
                    reason: "not the start of a block",
                });
            }
            let slot = (off - start) / size;
            let mut b = [0u8];
            d.read(bitmap_off(l, chunk) + slot / 8, &mut b)?;
            if b[0] & (1 << (slot % 8)) == 0 {
                return Err(not_allocated);
            }
            Ok(size)
        }
        ChunkKind::Large if off == start => Ok(low * CHUNK),
        _ => Err(not_allocated),
    }
}

/// `Ok` when `[off, off+len)` lies inside one block allocated on media:
/// not null, not in the header, meta page, allocator or log, not in memory
/// never allocated or freed, not across the end of its block. Every
/// transactional write and typed read goes through it: two metadata reads
/// (the chunk's descriptor and one bitmap byte), more only in a large
/// run's later chunks.
pub fn check_access(d: &Domain, l: &Layout, off: u64, len: u64) -> Result<(), Error> {
    access_block(d, l, off, len).map(|_| ())
}

/// [`check_access`] for a write from outside the engine
/// (`Pool::atomic_write`, `Pool::write_unlogged`): the block of named
/// roots' catalog is refused as well ([`catalog_write`]).
pub fn check_write(d: &Domain, l: &Layout, off: u64, len: u64) -> Result<(), Error> {
    let (start, _) = access_block(d, l, off, len)?;
    match is_catalog(d, start)? {
        true => Err(catalog_write(off, len)),
        false => Ok(()),
    }
}

/// Whether `start` is the catalog's block (the meta page's committed
/// catalog word; 0, no catalog, is never a block's start).
pub fn is_catalog(d: &Domain, start: u64) -> Result<bool, Error> {
    Ok(d.read_u64(meta::CATALOG)? == start)
}

/// The refusal of a program's write of `[off, off+len)` into the
/// catalog's block: the engine's own block, allocated in the heap, that
/// `open` checks whole. A stray write there (a pointer computed wrongly)
/// would leave a pool that no longer opens; into any other block it
/// damages only the program's own data.
pub fn catalog_write(off: u64, len: u64) -> Error {
    Error::NotAllocated {
        offset: off,
        len,
        reason:
            "the block of the pool's catalog of named roots, which only `Tx::root_named` writes",
    }
}

/// [`check_access`], returning the allocated block `(start, block size)`
/// that holds the range: a transaction remembers it, so that its later
/// accesses to the same block need no metadata read (see `tx`).
pub fn access_block(d: &Domain, l: &Layout, off: u64, len: u64) -> Result<(u64, u64), Error> {
    if off == 0 {
        return Err(Error::NullPointer { len });
    }
    l.check_in_heap(off, len)?;
    let (start, size) = block_containing(d, l, off, len)?;
    if off - start + len > size {
        return Err(Error::NotAllocated {
            offset: off,
            len,
            reason: "the range runs past the end of its block",
        });
    }
    Ok((start, size))
}

/// The allocated block (start, block size) that holds heap offset `off`,
/// or `NotAllocated` naming an access of `len` bytes.
pub fn block_containing(d: &Domain, l: &Layout, off: u64, len: u64) -> Result<(u64, u64), Error> {
    let not = |reason| Error::NotAllocated {
        offset: off,
        len,
        reason,
    };
    let chunk = chunk_of(l, off).map_err(|_| not("outside the heap"))?;
    let start = chunk_start(l, chunk);
    match table::read(d, l, chunk)? {
        (ChunkKind::Small, low) if (low as usize) < CLASSES => {
            let size = MIN_CLASS << low;
            // A shift, not a division by a size known only here.
            let slot = (off - start) >> size.trailing_zeros();
            let mut b = [0u8];
            d.read(bitmap_off(l, chunk) + slot / 8, &mut b)?;
            if b[0] & (1 << (slot % 8)) == 0 {
                return Err(not("memory never allocated, or freed"));
            }
            Ok((start + slot * size, size))
        }
        (ChunkKind::Large, n) if n >= 1 => Ok((start, n.saturating_mul(CHUNK))),
        (ChunkKind::Cont, k) => match chunk.checked_sub(k) {
            // A continuation names its distance to the run's head.
            Some(head) if k > 0 => match table::read(d, l, head)? {
                (ChunkKind::Large, n) if n > k => Ok((chunk_start(l, head), n * CHUNK)),
                _ => Err(Error::HeapCorrupt {
                    offset: desc_off(l, chunk),
                    reason: "large run continuation without its head",
                }),
            },
            _ => Err(Error::HeapCorrupt {
                offset: desc_off(l, chunk),
                reason: "large run continuation without its head",
            }),
        },
        (ChunkKind::Log, _) => Err(not("memory of the log")),
        _ => Err(not("memory never allocated, or freed")),
    }
}

/// Every allocated block, `(offset, block size)`, in address order, read/// Every allocated block, `(offset, block size)`, in address order, read
/// from the media state (descriptors and bitmaps).
pub fn allocated_blocks(d: &Domain, l: &Layout) -> Result<Vec<(u64, u64)>, Error> {
    let mut out = Vec::new();
    let mut bits = vec![0u8; BITMAP_BYTES as usize];
    let mut c = 0;
    let chunks = heap_chunks(d, l)?;
    while c < chunks {
        let (kind, low) = table::read(d, l, c)?;
        table::verify_bitmap(d, l, c, kind, &mut bits)?;
        match kind {
            ChunkKind::Small if (low as usize) < CLASSES => {
                let size = MIN_CLASS << low;
                for slot in 0..CHUNK / size {
                    if bits[(slot / 8) as usize] & (1 << (slot % 8)) != 0 {
                        out.push((chunk_start(l, c) + slot * size, size));
                    }
                }
                c += 1;
            }
            ChunkKind::Large if low >= 1 && c + low <= chunks => {
                out.push((chunk_start(l, c), low * CHUNK));
                c += low;
            }
            ChunkKind::Free | ChunkKind::Log => c += 1,
            _ => {
                return Err(Error::HeapCorrupt {
                    offset: desc_off(l, c),
                    reason: "invalid chunk descriptor",
                })
            }
        }
    }
    Ok(out)
}

fn find_run(free: &BTreeSet<u64>, n: u64) -> Option<u64> {
    let (mut start, mut len, mut prev) = (0, 0, None);
    for &c in free {
        if prev == Some(c.wrapping_sub(1)) {
            len += 1;
        } else {
            start = c;
            len = 1;
        }
        if len == n {
            return Some(start);
        }
        prev = Some(c);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert_eq!(class_of(1), Some(0));
        assert_eq!(class_of(64), Some(0));
        assert_eq!(class_of(65), Some(1));
        assert_eq!(class_of(MAX_SMALL), Some(CLASSES - 1));
        assert_eq!(class_of(MAX_SMALL + 1), None);
        assert_eq!(block_size(MAX_SMALL + 1), CHUNK);
    }

    #[test]
    fn runs() {
        let s: BTreeSet<u64> = [1, 2, 4, 5, 6, 9].into_iter().collect();
        assert_eq!(find_run(&s, 1), Some(1));
        assert_eq!(find_run(&s, 3), Some(4));
        assert_eq!(find_run(&s, 4), None);
    }
}
