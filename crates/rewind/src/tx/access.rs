//! The blocks a thread's transactions have found allocated: the access
//! check (`Tx::check_access`) reads the allocator's metadata (a chunk
//! descriptor and a bitmap byte) once per block, not once per access, and
//! not once per transaction. A descent of a tree reads a node's count, a
//! few separators and a child word, each checked; with this cache only the
//! first of them reads metadata, and the header and upper nodes that every
//! descent passes are not read again by the thread's next transactions.
//!
//! **Kept across transactions** (a thread-local, handed from one
//! transaction of the thread to the next): the cache is stamped with the
//! allocator's free epoch (`Allocator::free_epoch`), which changes whenever
//! any block of the pool becomes free on media (a free, an undone
//! allocation, a commit group's cleared bit) and is never shown by
//! another pool. A transaction takes the thread's cache only if the epoch
//! is still the one read before its blocks were verified: no block has
//! been freed since, so every one of them is still allocated. Otherwise it
//! starts empty, with the epoch read now. A block freed in one transaction
//! is therefore checked on media again by the next (and refused).
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

/// Blocks remembered: a descent touches the tree header, one node per
/// level and an out-of-line key or value now and then; kept across
/// transactions, the header and the upper levels should stay.
const WAYS: usize = 8;

/// The last blocks verified allocated, `(start, end)`, at most [`WAYS`],
/// replaced by a clock: an entry used since the hand last passed it is
/// spared once.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Verified {
    blocks: [(u64, u64); WAYS],
    /// Bit `i`: entry `i` was used since the hand last passed it.
    used: u8,
    /// The entry that held the last access (most accesses fall in the
    /// same block as the one before): tried first.
    last: u8,
    /// Entries in use (`..len`), and the clock's hand.
    len: usize,
    next: usize,
    /// The allocator's free epoch read before any of these blocks was
    /// verified (0: none, never an epoch).
    epoch: u64,
}

thread_local! {
    /// The cache the thread's last transaction left (see the module docs).
    static KEPT: Cell<Verified> = const {
        Cell::new(Verified {
            blocks: [(0, 0); WAYS],
            used: 0,
            last: 0,
            len: 0,
            next: 0,
            epoch: 0,
        })
    };
}

impl Verified {
    /// The thread's cache for a transaction of `eng` beginning: the one
    /// its last transaction left if no block of `eng` was freed since,
    /// else an empty one stamped with the epoch now.
    pub(super) fn resume(eng: &Engine) -> Verified {
        let epoch = eng.alloc.free_epoch();
        // `try_with`: a transaction in a thread-local's destructor starts
        // empty. (Copied, not taken: a transaction of another pool nested in
        // this one may find the same cache, and keeps it only if the epoch,
        // which no other pool shows, is still its own pool's.)
        let kept = KEPT.try_with(Cell::get).unwrap_or_default();
        if kept.epoch == epoch {
            return kept;
        }
        Verified {
            epoch,
            ..Verified::default()
        }
    }

    /// Leaves the cache to the thread's next transaction (checked against
    /// the epoch there).
    pub(super) fn keep(&self) {
        let _ = KEPT.try_with(|k| k.set(*self));
    }

    /// True when `[off, off + len)` lies inside a remembered block.
    #[inline]
    pub(super) fn holds(&mut self, off: u64, len: u64) -> bool {
        let Some(end) = off.checked_add(len) else {
            return false;
        };
        let inside = |&(s, e): &(u64, u64)| off >= s && end <= e;
        let last = self.last as usize;
        if last < self.len && inside(&self.blocks[last]) {
            return true;
        }
        match self.blocks[..self.len].iter().position(inside) {
            Some(i) => {
                self.used |= 1 << i;
                self.last = i as u8;
                true
            }
            None => false,
        }
    }

    /// Remembers the allocated block `[start, start + size)`.
    pub(super) fn insert(&mut self, start: u64, size: u64) {
        let entry = (start, start.saturating_add(size));
        if self.len < WAYS {
            self.blocks[self.len] = entry;
            self.last = self.len as u8;
            self.len += 1;
            return;
        }
        // The clock: spare (and clear) used entries until an unused one.
        while self.used & 1 << self.next != 0 {
            self.used &= !(1 << self.next);
            self.next = (self.next + 1) % WAYS;
        }
        self.blocks[self.next] = entry;
        self.last = self.next as u8;
        self.next = (self.next + 1) % WAYS;
    }

    /// Forgets every block (this transaction freed one, or undid an
    /// allocation); the epoch stays (the next transaction compares it).
    pub(super) fn forget(&mut self) {
        self.len = 0;
        self.next = 0;
        self.used = 0;
        self.last = 0;
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
            verified: Verified::default(),
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
            self.verified.insert(start, size);
        }
        self.eng.read_committed(off, buf)
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
        v.insert(4096, 64);
        assert!(v.holds(4096, 64));
        assert!(v.holds(4100, 8));
        assert!(!v.holds(4096, 65), "past the block's end");
        assert!(!v.holds(4095, 1), "before its start");
        assert!(!v.holds(u64::MAX, 2), "an overflowing range");
        v.forget();
        assert!(!v.holds(4100, 8));
    }

    #[test]
    fn replaces_in_order_once_full_when_nothing_is_used() {
        let mut v = Verified::default();
        for i in 0..WAYS as u64 + 1 {
            v.insert(1 << 20 | i << 10, 64);
        }
        // Nothing used: the first block went for the last; the others stay.
        assert!(!v.holds(1 << 20, 8));
        for i in 1..WAYS as u64 + 1 {
            assert!(v.holds(1 << 20 | i << 10, 64), "block {i}");
        }
    }

    #[test]
    fn the_clock_spares_blocks_in_use() {
        let mut v = Verified::default();
        for i in 0..WAYS as u64 {
            v.insert(1 << 20 | i << 10, 64);
        }
        // The first two (a header, a root) used again and again.
        for j in 0..3 * WAYS as u64 {
            assert!(v.holds(1 << 20, 8));
            assert!(v.holds(1 << 20 | 1 << 10, 8));
            v.insert(2 << 20 | j << 10, 64);
        }
        assert!(v.holds(1 << 20, 8));
        assert!(v.holds(1 << 20 | 1 << 10, 8));
    }
}
