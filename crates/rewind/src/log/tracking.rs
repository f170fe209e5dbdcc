//! Volatile bookkeeping of the log's blocks, rebuilt at open: their order
//! in the list, and which are free, counted per heap chunk so that a chunk
//! whose blocks are all free is found without scanning. Every operation is
//! O(log n), so a log of millions of blocks (no-force without checkpoints,
//! one long transaction) appends and clears at the same cost as a short one.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::blocks::Blocks;

/// The list's blocks, oldest first.
#[derive(Default)]
pub(super) struct Order {
    by_pos: BTreeMap<u64, u64>,
    pos: HashMap<u64, u64>,
    next: u64,
}

impl Order {
    /// The blocks of `list`, in list order.
    pub(super) fn new(list: &[u64]) -> Order {
        let mut o = Order::default();
        for &b in list {
            o.push(b);
        }
        o
    }

    /// Appends `block` at the tail.
    pub(super) fn push(&mut self, block: u64) {
        self.by_pos.insert(self.next, block);
        self.pos.insert(block, self.next);
        self.next += 1;
    }

    /// Takes `block` out, wherever it is.
    pub(super) fn remove(&mut self, block: u64) {
        if let Some(p) = self.pos.remove(&block) {
            self.by_pos.remove(&p);
        }
    }

    /// The tail.
    pub(super) fn last(&self) -> Option<u64> {
        self.by_pos.last_key_value().map(|(_, &b)| b)
    }

    /// The block before the tail.
    pub(super) fn before_last(&self) -> Option<u64> {
        self.by_pos.values().rev().nth(1).copied()
    }

    /// The head.
    pub(super) fn first(&self) -> Option<u64> {
        self.by_pos.first_key_value().map(|(_, &b)| b)
    }

    pub(super) fn len(&self) -> usize {
        self.pos.len()
    }

    /// The blocks, oldest first.
    pub(super) fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.by_pos.values().copied()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.pos.is_empty()
    }
}

/// The free blocks, lowest first (region blocks before heap chunks, so
/// chunks empty out and can go back), with per-chunk counts.
#[derive(Default)]
pub(super) struct Free {
    set: BTreeSet<u64>,
    in_chunk: HashMap<u64, u64>,
    /// Heap chunks all of whose blocks are free.
    idle: BTreeSet<u64>,
}

impl Free {
    /// Marks `block` free.
    pub(super) fn insert(&mut self, blocks: &Blocks, per_chunk: u64, block: u64) {
        if !self.set.insert(block) {
            return;
        }
        if let Some(c) = blocks.chunk_of(block) {
            let n = self.in_chunk.entry(c).or_default();
            *n += 1;
            if *n == per_chunk {
                self.idle.insert(c);
            }
        }
    }

    /// Marks `block` used.
    fn taken(&mut self, blocks: &Blocks, block: u64) {
        if let Some(c) = blocks.chunk_of(block) {
            if let Some(n) = self.in_chunk.get_mut(&c) {
                *n -= 1;
                if *n == 0 {
                    self.in_chunk.remove(&c);
                }
            }
            self.idle.remove(&c);
        }
    }

    /// Takes the lowest free block.
    pub(super) fn pop_first(&mut self, blocks: &Blocks) -> Option<u64> {
        let b = self.set.pop_first()?;
        self.taken(blocks, b);
        Some(b)
    }

    /// Forgets the blocks of `chunk` (leaving the log).
    pub(super) fn forget_chunk(&mut self, blocks: &Blocks, chunk: u64) {
        for b in blocks.chunk_blocks(chunk) {
            self.set.remove(&b);
        }
        self.in_chunk.remove(&chunk);
        self.idle.remove(&chunk);
    }

    /// Whether every block of `chunk` is free.
    pub(super) fn is_idle(&self, chunk: u64) -> bool {
        self.idle.contains(&chunk)
    }

    /// The chunks all of whose blocks are free.
    pub(super) fn idle(&self) -> Vec<u64> {
        self.idle.iter().copied().collect()
    }

    pub(super) fn len(&self) -> usize {
        self.set.len()
    }
}
