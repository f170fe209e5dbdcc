//! Where log blocks may live: the fixed log region laid out at create (the
//! configured log size), and log chunks taken from the heap when the log
//! grows (REWIND §3.3: the log grows by appending buckets to its list).
//!
//! Every link the list stores is checked against this set before it is
//! followed, so a damaged link is a typed error, never a wild access.

use std::collections::BTreeSet;

use crate::format::layout::{Layout, CHUNK};

/// The set of offsets that are log blocks.
#[derive(Clone, Debug)]
pub struct Blocks {
    layout: Layout,
    /// Offsets of the heap chunks the log owns.
    chunks: BTreeSet<u64>,
}

impl Blocks {
    /// The region of `layout` plus the log chunks at `chunks`.
    pub fn new(layout: &Layout, chunks: impl IntoIterator<Item = u64>) -> Blocks {
        Blocks {
            layout: *layout,
            chunks: chunks.into_iter().collect(),
        }
    }

    /// Blocks one heap chunk holds.
    pub fn per_chunk(l: &Layout) -> u64 {
        CHUNK / l.log_block_size
    }

    /// True if `off` is the start of a log block.
    pub fn is_block(&self, off: u64) -> bool {
        if self.layout.is_block(off) {
            return true;
        }
        if off < self.layout.heap_off || off >= self.layout.heap_end() {
            return false;
        }
        let chunk = off - (off - self.layout.heap_off) % CHUNK;
        let within = off - chunk;
        self.chunks.contains(&chunk)
            && within.is_multiple_of(self.layout.log_block_size)
            && within / self.layout.log_block_size < Blocks::per_chunk(&self.layout)
    }

    /// True if `off` could be a log block of this pool now or earlier: a
    /// 64-byte aligned offset in the log region or the heap.
    pub fn plausible(&self, off: u64) -> bool {
        off.is_multiple_of(64) && off >= self.layout.log_off && off < self.layout.heap_end()
    }

    /// The block whose bytes include `off`, if any.
    pub fn containing(&self, off: u64) -> Option<u64> {
        let bs = self.layout.log_block_size;
        let b = if off >= self.layout.log_off && off < self.layout.log_end() {
            off - (off - self.layout.log_off) % bs
        } else if off >= self.layout.heap_off && off < self.layout.heap_end() {
            let chunk = off - (off - self.layout.heap_off) % CHUNK;
            chunk + (off - chunk) / bs * bs
        } else {
            return None;
        };
        self.is_block(b).then_some(b)
    }

    /// The log chunk holding `block`, if it is not in the fixed region.
    pub fn chunk_of(&self, block: u64) -> Option<u64> {
        if self.layout.is_block(block) {
            return None;
        }
        Some(block - (block - self.layout.heap_off) % CHUNK)
    }

    /// The blocks of the log chunk at `chunk`, lowest first.
    pub fn chunk_blocks(&self, chunk: u64) -> impl Iterator<Item = u64> {
        let bs = self.layout.log_block_size;
        (0..Blocks::per_chunk(&self.layout)).map(move |i| chunk + i * bs)
    }

    /// Every block, region first, in address order.
    pub fn all(&self) -> Vec<u64> {
        let l = &self.layout;
        let mut v: Vec<u64> = (0..l.log_blocks)
            .map(|i| l.log_off + i * l.log_block_size)
            .collect();
        for &c in &self.chunks {
            v.extend(self.chunk_blocks(c));
        }
        v
    }

    /// How many blocks there are.
    pub fn count(&self) -> u64 {
        self.layout.log_blocks + self.chunks.len() as u64 * Blocks::per_chunk(&self.layout)
    }

    /// Adds a log chunk.
    pub fn add_chunk(&mut self, chunk: u64) {
        self.chunks.insert(chunk);
    }

    /// Removes a log chunk.
    pub fn remove_chunk(&mut self, chunk: u64) {
        self.chunks.remove(&chunk);
    }

    /// The log chunks, in address order.
    pub fn chunks(&self) -> impl Iterator<Item = u64> + '_ {
        self.chunks.iter().copied()
    }
}
