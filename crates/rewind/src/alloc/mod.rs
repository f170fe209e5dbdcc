//! The persistent allocator (DESIGN §4, REWIND §4.3).
//!
//! The heap is cut into 256 KiB chunks. A chunk descriptor (one u64 per
//! chunk) says what the chunk holds; a bitmap per chunk (one bit per 64-byte
//! slot) says which blocks of a small-class chunk are allocated. The media
//! state is the truth; the free lists are volatile and rebuilt at open.
//!
//! ```text
//! descriptor  bits 56..64 kind   low bits
//!   0         free
//!   1         small class chunk  class index (block = 64 << class)
//!   2         large run head     run length in chunks
//!   3         large run continuation
//! ```
//!
//! Allocation state changes are logged by the transaction as ALLOC and
//! DELETE records and applied with [`Allocator::mark`], which is idempotent,
//! so recovery can redo or undo them any number of times. Formatting a free
//! chunk for a class is not logged: it is made durable at once and never
//! undone; a class chunk found empty at open goes back to free.
//!
//! Blocks freed by a transaction are handed back to the free lists only
//! after it commits ([`Allocator::release`]), and blocks allocated by an
//! aborted one after its rollback, so no block has two owners.

use std::collections::BTreeSet;

use parking_lot::Mutex;

use crate::error::Error;
use crate::persist::{sites, Domain};
use crate::pool::layout::{Layout, BITMAP_BYTES, CHUNK, MIN_CLASS};

/// Number of small size classes: 64 B .. 64 KiB.
pub const CLASSES: usize = 11;
/// Largest small class.
pub const MAX_SMALL: u64 = MIN_CLASS << (CLASSES - 1);

const KIND_SHIFT: u32 = 56;
const FREE: u64 = 0;
const SMALL: u64 = 1;
const LARGE: u64 = 2;
const CONT: u64 = 3;

fn desc(kind: u64, low: u64) -> u64 {
    kind << KIND_SHIFT | low
}

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
}

/// Usage figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Chunks not in use.
    pub free_chunks: u64,
    /// Chunks in the heap.
    pub total_chunks: u64,
    /// Free blocks on the small-class free lists.
    pub free_small_blocks: u64,
}

/// The allocator of one pool.
pub struct Allocator {
    l: Layout,
    state: Mutex<State>,
}

impl Allocator {
    fn desc_off(&self, chunk: u64) -> u64 {
        desc_off(&self.l, chunk)
    }

    fn bitmap(&self, chunk: u64) -> u64 {
        bitmap(&self.l, chunk)
    }

    fn chunk_start(&self, chunk: u64) -> u64 {
        chunk_start(&self.l, chunk)
    }

    /// Rebuilds the free lists from the media state, after recovery. Empty
    /// class chunks return to free. Inconsistent descriptors are errors.
    pub fn open(d: &Domain, l: &Layout) -> Result<Allocator, Error> {
        let a = Allocator {
            l: *l,
            state: Mutex::new(State {
                free: vec![Vec::new(); CLASSES],
                free_chunks: BTreeSet::new(),
            }),
        };
        let mut st = a.state.lock();
        let mut bits = vec![0u8; BITMAP_BYTES as usize];
        let mut c = 0;
        let mut reset = false;
        while c < l.heap_chunks {
            let v = d.read_u64(a.desc_off(c))?;
            let (kind, low) = (v >> KIND_SHIFT, v & ((1 << KIND_SHIFT) - 1));
            let corrupt = |reason| Error::HeapCorrupt {
                offset: a.desc_off(c),
                reason,
            };
            match kind {
                FREE if low == 0 => {
                    st.free_chunks.insert(c);
                    c += 1;
                }
                SMALL if (low as usize) < CLASSES => {
                    d.read(a.bitmap(c), &mut bits)?;
                    if bits.iter().all(|&b| b == 0) {
                        d.store_u64(a.desc_off(c), 0)?;
                        d.flush_at(a.desc_off(c), 8, sites::ALLOC_OPEN_RESET_FLUSH)?;
                        reset = true;
                        st.free_chunks.insert(c);
                    } else {
                        let size = MIN_CLASS << low;
                        for slot in (0..CHUNK / size).rev() {
                            if bits[(slot / 8) as usize] & (1 << (slot % 8)) == 0 {
                                st.free[low as usize].push(a.chunk_start(c) + slot * size);
                            }
                        }
                    }
                    c += 1;
                }
                LARGE if low >= 1 && c + low <= l.heap_chunks => {
                    for k in 1..low {
                        if d.read_u64(a.desc_off(c + k))? != desc(CONT, 0) {
                            return Err(corrupt("large run continuation descriptor missing"));
                        }
                    }
                    c += low;
                }
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
                    let chunk = st
                        .free_chunks
                        .pop_first()
                        .ok_or(Error::OutOfMemory { requested: size })?;
                    // Format: empty bitmap, then the descriptor, durable before
                    // any ALLOC record can name a block of the chunk.
                    d.store(self.bitmap(chunk), &[0u8; BITMAP_BYTES as usize])?;
                    d.flush_at(self.bitmap(chunk), BITMAP_BYTES, sites::ALLOC_FORMAT_BITMAP)?;
                    d.store_u64(self.desc_off(chunk), desc(SMALL, class as u64))?;
                    d.flush_at(self.desc_off(chunk), 8, sites::ALLOC_FORMAT_DESC)?;
                    d.fence_at(sites::ALLOC_FORMAT_FENCE)?;
                    let bs = MIN_CLASS << class;
                    for slot in (0..CHUNK / bs).rev() {
                        st.free[class].push(self.chunk_start(chunk) + slot * bs);
                    }
                }
                let off = st.free[class].pop().expect("refilled above");
                Ok((off, MIN_CLASS << class))
            }
            None => {
                let n = size.div_ceil(CHUNK);
                let start =
                    find_run(&st.free_chunks, n).ok_or(Error::OutOfMemory { requested: size })?;
                for c in start..start + n {
                    st.free_chunks.remove(&c);
                }
                Ok((self.chunk_start(start), n * CHUNK))
            }
        }
    }

    /// Returns blocks that were reserved but never became (or are no
    /// longer) allocated on media: after an abort, or after a commit that
    /// freed them.
    pub fn release(&self, off: u64, size: u64) {
        let mut st = self.state.lock();
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
        mark(d, &self.l, off, size, allocated)
    }

    /// The media bytes [`mark`](Self::mark) changes for this block, so a
    /// checkpoint can flush them.
    pub fn mark_range(&self, off: u64, size: u64) -> (u64, u64) {
        mark_range(&self.l, off, size)
    }

    /// If `off` is the start of an allocated block, its block size.
    pub fn allocated_size(&self, d: &Domain, off: u64) -> Result<u64, Error> {
        allocated_size(d, &self.l, off)
    }

    /// Whether some thread holds the latch (the crash explorer's scheduler
    /// never makes a thread wait while it holds one).
    pub(crate) fn latched(&self) -> bool {
        self.state.is_locked()
    }

    /// Usage figures.
    pub fn stats(&self) -> AllocStats {
        let st = self.state.lock();
        AllocStats {
            free_chunks: st.free_chunks.len() as u64,
            total_chunks: self.l.heap_chunks,
            free_small_blocks: st.free.iter().map(|v| v.len() as u64).sum(),
        }
    }
}

fn desc_off(l: &Layout, chunk: u64) -> u64 {
    l.alloc_off + chunk * 8
}

fn bitmap(l: &Layout, chunk: u64) -> u64 {
    l.bitmap_off + chunk * BITMAP_BYTES
}

fn chunk_start(l: &Layout, chunk: u64) -> u64 {
    l.heap_off + chunk * CHUNK
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

/// [`Allocator::mark`] without the volatile state, for recovery (which runs
/// before the free lists exist).
pub fn mark(d: &Domain, l: &Layout, off: u64, size: u64, allocated: bool) -> Result<(), Error> {
    let chunk = chunk_of(l, off)?;
    match class_of(size) {
        Some(class) if size == MIN_CLASS << class => {
            if allocated {
                // The block's chunk holds its class. Formatting a chunk is not
                // logged, so when recovery repeats history (no-force redo), an
                // earlier large run redone and freed in the same chunk would
                // otherwise leave it marked free under a later block.
                let want = desc(SMALL, class as u64);
                if d.read_u64(desc_off(l, chunk))? != want {
                    d.store_u64(desc_off(l, chunk), want)?;
                    d.flush_at(desc_off(l, chunk), 8, sites::ALLOC_MARK_BIT)?;
                }
            }
            let slot = (off - chunk_start(l, chunk)) / size;
            let byte_off = bitmap(l, chunk) + slot / 8;
            let mut b = [0u8];
            d.read(byte_off, &mut b)?;
            let nb = if allocated {
                b[0] | 1 << (slot % 8)
            } else {
                b[0] & !(1 << (slot % 8))
            };
            d.store(byte_off, &[nb])?;
            d.flush_at(byte_off, 1, sites::ALLOC_MARK_BIT)
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
                let v = match (allocated, k) {
                    (false, _) => 0,
                    (true, 0) => desc(LARGE, n),
                    (true, _) => desc(CONT, 0),
                };
                d.store_u64(desc_off(l, chunk + k), v)?;
            }
            d.flush_at(desc_off(l, chunk), n * 8, sites::ALLOC_MARK_RUN)
        }
    }
}

/// The media bytes [`mark`] changes for this block.
pub fn mark_range(l: &Layout, off: u64, size: u64) -> (u64, u64) {
    let chunk = (off - l.heap_off) / CHUNK;
    match class_of(size) {
        Some(class) if size == MIN_CLASS << class => {
            let slot = (off - chunk_start(l, chunk)) / size;
            (bitmap(l, chunk) + slot / 8, 1)
        }
        _ => (desc_off(l, chunk), size / CHUNK * 8),
    }
}

/// If `off` is the start of an allocated block, its block size.
pub fn allocated_size(d: &Domain, l: &Layout, off: u64) -> Result<u64, Error> {
    let chunk = chunk_of(l, off)?;
    let v = d.read_u64(desc_off(l, chunk))?;
    let (kind, low) = (v >> KIND_SHIFT, v & ((1 << KIND_SHIFT) - 1));
    let start = chunk_start(l, chunk);
    let not_allocated = Error::InvalidFree {
        offset: off,
        reason: "block is not allocated",
    };
    match kind {
        SMALL if (low as usize) < CLASSES => {
            let size = MIN_CLASS << low;
            if (off - start) % size != 0 {
                return Err(Error::InvalidFree {
                    offset: off,
                    reason: "not the start of a block",
                });
            }
            let slot = (off - start) / size;
            let mut b = [0u8];
            d.read(bitmap(l, chunk) + slot / 8, &mut b)?;
            if b[0] & (1 << (slot % 8)) == 0 {
                return Err(not_allocated);
            }
            Ok(size)
        }
        LARGE if off == start => Ok(low * CHUNK),
        _ => Err(not_allocated),
    }
}

/// Every allocated block, `(offset, block size)`, in address order, read
/// from the media state (descriptors and bitmaps).
pub fn allocated_blocks(d: &Domain, l: &Layout) -> Result<Vec<(u64, u64)>, Error> {
    let mut out = Vec::new();
    let mut bits = vec![0u8; BITMAP_BYTES as usize];
    let mut c = 0;
    while c < l.heap_chunks {
        let v = d.read_u64(desc_off(l, c))?;
        let (kind, low) = (v >> KIND_SHIFT, v & ((1 << KIND_SHIFT) - 1));
        match kind {
            SMALL if (low as usize) < CLASSES => {
                d.read(bitmap(l, c), &mut bits)?;
                let size = MIN_CLASS << low;
                for slot in 0..CHUNK / size {
                    if bits[(slot / 8) as usize] & (1 << (slot % 8)) != 0 {
                        out.push((chunk_start(l, c) + slot * size, size));
                    }
                }
                c += 1;
            }
            LARGE if low >= 1 && c + low <= l.heap_chunks => {
                out.push((chunk_start(l, c), low * CHUNK));
                c += low;
            }
            FREE => c += 1,
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
