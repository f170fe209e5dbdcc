//! The blocks a transaction has found allocated: its access check
//! (`Tx::check_access`) reads the allocator's metadata (a chunk descriptor
//! and a bitmap byte) once per block, not once per access. A descent of a
//! tree reads a node's count, a few separators and a child word, each
//! checked; with this cache only the first of them reads metadata.
//!
//! A block stays allocated while the transaction runs unless the
//! transaction itself frees it (`Tx::free`) or undoes its allocation (a
//! rollback to a savepoint, a failed nested top action): both forget every
//! block. Other transactions' frees are the program's to keep apart (the
//! locks of `Tx::lock`, REWIND §4.7), as for any access to memory another
//! transaction may change; a stale entry can only let a read or write land
//! in a block of the heap, never outside the mapping.

use bytemuck::Pod;

use crate::engine::Engine;
use crate::error::Error;
use crate::format::PPtr;

/// Blocks remembered: a descent touches the tree header, one node per
/// level and an out-of-line key or value now and then.
const WAYS: usize = 8;

/// The last [`WAYS`] blocks verified allocated, `(start, end)`, replaced
/// round robin.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Verified {
    blocks: [(u64, u64); WAYS],
    /// Entries in use (`..len`), and the next one to replace.
    len: usize,
    next: usize,
}

impl Verified {
    /// True when `[off, off + len)` lies inside a remembered block.
    #[inline]
    pub(super) fn holds(&self, off: u64, len: u64) -> bool {
        let Some(end) = off.checked_add(len) else {
            return false;
        };
        self.blocks[..self.len]
            .iter()
            .any(|&(s, e)| off >= s && end <= e)
    }

    /// Remembers the allocated block `[start, start + size)`.
    pub(super) fn insert(&mut self, start: u64, size: u64) {
        let entry = (start, start.saturating_add(size));
        if self.len < WAYS {
            self.blocks[self.len] = entry;
            self.len += 1;
        } else {
            self.blocks[self.next] = entry;
            self.next = (self.next + 1) % WAYS;
        }
    }

    /// Forgets every block (this transaction freed one, or undid an
    /// allocation).
    pub(super) fn forget(&mut self) {
        self.len = 0;
        self.next = 0;
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
    fn replaces_round_robin_once_full() {
        let mut v = Verified::default();
        for i in 0..WAYS as u64 + 1 {
            v.insert(1 << 20 | i << 10, 64);
        }
        // The first block went for the ninth; the others stay.
        assert!(!v.holds(1 << 20, 8));
        for i in 1..WAYS as u64 + 1 {
            assert!(v.holds(1 << 20 | i << 10, 64), "block {i}");
        }
    }
}
