//! The blocks a thread's transactions have found allocated: the access
//! check (`Tx::check_access`) reads the allocator's metadata (a chunk
//! descriptor and a bitmap byte) once per line of a small block, or per
//! 1 KiB region of a large one, not once per access, and not once per
//! transaction. A descent of a tree reads a node's count, a few separators
//! and a child word, each checked; with this cache only the first of them
//! reads metadata, and the header and upper nodes that every descent passes
//! are not read again by the thread's next transactions.
//!
//! **Kept across transactions** (a thread-local, handed from one
//! transaction of the thread to the next): the cache is stamped with the
//! allocator's free epoch (`Allocator::free_epoch`), which changes whenever
//! any block of the pool becomes free on media (a free, an undone
//! allocation, a commit group's cleared bit) or goes back to the free
//! lists unused (an aborted allocation), and is never shown by
//! another pool. A transaction takes the thread's cache only if the epoch
//! is still the one read before its blocks were verified: no block has
//! been freed since, so every one of them is still allocated. Otherwise it
//! starts empty, with the epoch read now. A block freed in one transaction
//! is therefore checked on media again by the next (and refused).
//!
//! A block the transaction allocated itself is remembered as well, though
//! the media may not show it allocated yet (under redo its commit group
//! sets its bit): a new node is read back by the operations after the one
//! that made it. It stays allocated unless the transaction frees it or
//! undoes its allocation, as below; an abort hands it back to the
//! allocator with a new free epoch, so no later transaction trusts it.
//!
//! Within a transaction, a block stays allocated unless the transaction
//! itself frees it (`Tx::free`) or undoes its allocation (a rollback to a
//! savepoint, a failed nested top action): both forget every block. Other
//! transactions' frees while it runs are the program's to keep apart (the
//! locks of `Tx::lock`, REWIND §4.7), as for any access to memory another
//! transaction may change; a stale entry can only let a read or write land
//! in a block of the heap, never outside the mapping.

use std::cell::Cell;

use bytemuck::Pod;

use crate::engine::Engine;
use crate::error::Error;
use crate::format::PPtr;

/// Slots of the cache, a power of two. A TPC-C new-order touches about
/// a hundred blocks (three trees' descents per order line, the rows, the
/// order's leaves), a few lines of each: 4096 slots (96 KiB) keep one
/// transaction's without many collisions, and the upper levels of the
/// trees across transactions. (With 1024, a new-order missed 100 times
/// and took 1.71x the no-log run's time; with 4096, 66 and 1.60x.)
const SLOTS: usize = 4096;

/// A block verified allocated, `[start, end)`, valid while `generation`
/// is the cache's.
#[derive(Clone, Copy, Debug)]
struct Slot {
    start: u64,
    end: u64,
    generation: u64,
}

/// The blocks verified allocated: a direct-mapped table indexed by the
/// cache line an access begins on, so that a lookup is one probe however
/// many blocks are remembered. A block accessed on several lines takes a
/// slot per line; a collision replaces the slot's block. Forgetting every
/// block starts a new generation: nothing is cleared.
#[derive(Debug)]
pub(super) struct Verified {
    /// [`SLOTS`] slots, or none in a cache handed on (`keep`).
    slots: Box<[Slot]>,
    /// The slots that count (never 0: a new table's slots are of none).
    generation: u64,
    /// The allocator's free epoch read before any of these blocks was
    /// verified (0: none, never an epoch).
    epoch: u64,
    /// The last block of a region or more verified (a large array, a
    /// table): looked at before the slots, so that accesses all over it
    /// do not each read a slot of the table (96 KiB, a cache miss for an
    /// access at a random place).
    big: Slot,
    /// The block of the last access found in a slot or inserted: looked at
    /// first, so that the accesses of a run into one block (a node's
    /// header, then its keys, then a child) hash and probe nothing.
    last: Slot,
}

/// A slot that holds nothing.
const EMPTY: Slot = Slot {
    start: 0,
    end: 0,
    generation: 0,
};

impl Default for Verified {
    fn default() -> Verified {
        Verified {
            slots: vec![EMPTY; SLOTS].into_boxed_slice(),
            generation: 1,
            epoch: 0,
            big: EMPTY,
            last: EMPTY,
        }
    }
}

thread_local! {
    /// The cache the thread's last transaction left (see the module docs).
    static KEPT: Cell<Option<Verified>> = const { Cell::new(None) };
}

/// The slot of an access beginning at `off`: its line, hashed (blocks are
/// aligned to their power-of-two size, so the low bits of a line alone
/// would crowd the slots of a block's first lines).
#[inline]
fn slot(off: u64) -> usize {
    hashed(off >> 6)
}

/// Bytes of a region: a block this large or larger takes one slot per
/// region it is accessed in, not one per line.
const REGION: u64 = 1024;

/// The slot of the region of `off` (hashed apart from the lines' slots).
#[inline]
fn region_slot(off: u64) -> usize {
    hashed((off / REGION) ^ 0x5bd1_e995_0000_0000)
}

#[inline]
fn hashed(n: u64) -> usize {
    (n.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOTS.trailing_zeros())) as usize
}

impl Verified {
    /// The thread's cache for a transaction of `eng` beginning: the one
    /// its last transaction left if no block of `eng` was freed since,
    /// else an empty one stamped with the epoch now.
    pub(super) fn resume(eng: &Engine) -> Verified {
        Self::resume_or(eng, Verified::default)
    }

    /// [`resume`](Self::resume) for a reader: when the thread has no cache
    /// to hand (its transaction holds it: a lookup through `&Pool` inside
    /// a transaction's closure), one with no slots, which remembers
    /// nothing, rather than a new table for a lookup or two.
    fn resume_reader(eng: &Engine) -> Verified {
        Self::resume_or(eng, || Verified {
            slots: Box::default(),
            generation: 1,
            epoch: 0,
            big: EMPTY,
            last: EMPTY,
        })
    }

    fn resume_or(eng: &Engine, none: impl FnOnce() -> Verified) -> Verified {
        let epoch = eng.alloc.free_epoch();
        // `try_with`: a transaction in a thread-local's destructor starts
        // empty. (Taken: a transaction of another pool nested in this one
        // finds none and starts empty; whichever ends last leaves its own,
        // stamped with an epoch no other pool shows.)
        let kept = KEPT.try_with(Cell::take).ok().flatten();
        match kept {
            Some(v) if v.epoch == epoch => v,
            Some(mut v) => {
                v.forget();
                v.epoch = epoch;
                v
            }
            None => Verified { epoch, ..none() },
        }
    }

    /// Leaves the cache to the thread's next transaction (checked against
    /// the epoch there).
    pub(super) fn keep(&mut self) {
        if self.slots.is_empty() {
            return; // handed on already
        }
        let v = Verified {
            slots: std::mem::take(&mut self.slots),
            generation: self.generation,
            epoch: self.epoch,
            big: self.big,
            last: self.last,
        };
        let _ = KEPT.try_with(|k| k.set(Some(v)));
    }

    /// True when `[off, off + len)` lies inside a remembered block.
    #[inline]
    pub(super) fn holds(&mut self, off: u64, len: u64) -> bool {
        let Some(end) = off.checked_add(len) else {
            return false;
        };
        let generation = self.generation;
        let inside = |s: &Slot| s.generation == generation && off >= s.start && end <= s.end;
        // A cache handed on has no slots: it holds nothing.
        if self.slots.is_empty() {
            return false;
        }
        if inside(&self.last) || inside(&self.big) {
            return true;
        }
        // (The region's slot before the line's: tree nodes are a region
        // or more, and their accesses missed the line's slot every time.)
        let found = (self.slots.get(region_slot(off)).filter(|s| inside(s)))
            .or_else(|| self.slots.get(slot(off)).filter(|s| inside(s)));
        match found {
            Some(&s) => {
                self.last = s;
                true
            }
            None => false,
        }
    }

    /// Remembers the allocated block `[start, start + size)`, which holds
    /// an access beginning at `off`.
    #[inline]
    pub(super) fn insert(&mut self, off: u64, start: u64, size: u64) {
        // A block of a region or more (aligned to its size, so it covers
        // whole regions) is found from any line of the region: a tree
        // node's other lines then miss no more.
        let at = if size >= REGION {
            region_slot(off)
        } else {
            slot(off)
        };
        let block = Slot {
            start,
            end: start.saturating_add(size),
            generation: self.generation,
        };
        if let Some(s) = self.slots.get_mut(at) {
            *s = block;
            self.last = block;
            if size >= REGION {
                self.big = block;
            }
        }
    }

    /// Forgets every block (this transaction freed one, or undid an
    /// allocation); the epoch stays (the next transaction compares it).
    pub(super) fn forget(&mut self) {
        self.generation += 1;
    }
}

/// Reads of a pool's committed state outside a transaction that check
/// each block once, as a transaction does: from [`Pool::reader`](crate::Pool::reader),
/// for a lookup that makes several small reads (a tree's descent).
///
/// A reader sees what [`Pool::read_bytes`](crate::Pool::read_bytes) sees.
/// It remembers the blocks it found allocated for as long as it lives, so
/// a block another thread frees meanwhile still reads (its bytes, inside
/// the heap): keep a reader for one lookup, or keep frees apart with
/// locks, as for any read of memory another transaction may change.
pub struct Reader<'p> {
    eng: &'p Engine,
    verified: Verified,
}

impl<'p> Reader<'p> {
    pub(crate) fn new(eng: &'p Engine) -> Reader<'p> {
        Reader {
            eng,
            verified: Verified::resume_reader(eng),
        }
    }

    /// Reads a value, as [`Pool::read`](crate::Pool::read).
    pub fn read<T: Pod>(&mut self, p: PPtr<T>) -> Result<T, Error> {
        let mut v = T::zeroed();
        self.read_bytes(p.offset(), bytemuck::bytes_of_mut(&mut v))?;
        Ok(v)
    }

    /// Reads bytes at a pool offset, as [`Pool::read_bytes`](crate::Pool::read_bytes).
    pub fn read_bytes(&mut self, off: u64, buf: &mut [u8]) -> Result<(), Error> {
        self.eng.usable()?;
        let len = buf.len() as u64;
        if !self.verified.holds(off, len) {
            let (start, size) =
                crate::alloc::access_block(&self.eng.dom, &self.eng.hdr.layout, off, len)?;
            self.verified.insert(off, start, size);
        }
        self.eng.read_committed(off, buf)
    }

    /// The size the pool may grow to, as [`Pool::max_size`](crate::Pool::max_size):
    /// no count of blocks stored in it can exceed what that many bytes hold.
    pub fn max_size(&self) -> u64 {
        self.eng.hdr.layout.pool_size
    }
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        // Stamped with the epoch read before its first check, as a
        // transaction's: the thread's next transaction keeps it only if
        // nothing was freed since.
        self.verified.keep();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_only_ranges_inside_a_remembered_block() {
        let mut v = Verified::default();
        assert!(
            !v.holds(0, 0),
            "an empty cache holds nothing, null included"
        );
        v.insert(4096, 4096, 64);
        assert!(v.holds(4096, 64));
        assert!(v.holds(4100, 8));
        assert!(!v.holds(4096, 65), "past the block's end");
        assert!(!v.holds(4095, 1), "before its start");
        assert!(!v.holds(u64::MAX, 2), "an overflowing range");
        v.forget();
        assert!(!v.holds(4100, 8));
    }

    #[test]
    fn a_small_block_is_found_from_its_lines_a_large_one_from_its_regions_or_as_the_last() {
        let mut v = Verified::default();
        let (small, next) = (1 << 20, 3 << 20);
        v.insert(small, small, 512);
        assert!(v.holds(small, 136), "the line of the first access");
        assert!(
            v.holds(small + 256, 8),
            "another line of the block last found"
        );
        v.insert(next, next, 512);
        assert!(
            !v.holds(small + 256, 8),
            "another line of a small block no longer the last: verified again"
        );
        v.insert(small + 256, small, 512);
        v.insert(next, next, 512);
        assert!(v.holds(small + 256, 8), "both lines now, by their slots");
        v.insert(next, next, 512);
        assert!(v.holds(small, 136));
        let large = 2 << 20;
        v.insert(large + 64, large, 4096);
        assert!(v.holds(large + 512, 64), "any line of the region");
        assert!(
            v.holds(large + 1024, 8),
            "another region: the last large block"
        );
        assert!(!v.holds(large + 4000, 200), "past the block's end");
        let other = 4 << 20;
        v.insert(other, other, 2048);
        assert!(
            v.holds(other + 1024, 8),
            "the last large block is the new one"
        );
        assert!(
            v.holds(large + 512, 64),
            "the first one's region, by its slot"
        );
        assert!(
            v.holds(large + 2048, 8),
            "and then its other regions, as the block last found"
        );
        v.insert(next, next, 512);
        assert!(
            !v.holds(large + 2048, 8),
            "another region of the first one, neither last nor last large: verified again"
        );
    }

    #[test]
    fn a_collision_replaces_the_slot() {
        let mut v = Verified::default();
        let a = 1u64 << 20;
        let b = (1..)
            .map(|i| a + i * 64)
            .find(|&b| slot(b) == slot(a))
            .expect("some line shares the slot");
        v.insert(a, a, 64);
        v.insert(b, b, 64);
        assert!(v.holds(b, 64));
        assert!(!v.holds(a, 64), "the older block went");
    }
}
