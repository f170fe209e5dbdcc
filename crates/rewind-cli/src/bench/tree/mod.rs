//! One B+-tree for REWIND §5.2's experiments (Figs. 7–9), generic over the
//! engine that stores it, so that engines, not trees, are compared.
//!
//! The tree sees memory only through [`TxMem`]: read bytes, write bytes,
//! allocate, free, at byte offsets of the engine's space. An [`Engine`]
//! runs a closure as one transaction over a `TxMem`: DRAM with no
//! persistence (`volatile`), durable stores with no log (`persist-nolog`),
//! a rewind transaction, or a libpmemobj transaction (`mem`, `pmdk`).
//! Whatever the engine must do to make a write recoverable (an undo
//! record, a snapshot of the range) happens inside its `write`.
//!
//! The tree is a classic B+-tree: sorted keys in every node, records in the
//! leaves, internal nodes holding separators and children, bottom-up splits
//! of full nodes. A delete removes the record from its leaf and never
//! merges nodes (REWIND's workload keeps the size constant: as many
//! inserts as deletes); a leaf it empties is freed, unless it is its
//! parent's only child. Keys are u64, values 24 bytes: the paper's 32-byte
//! records. Node layouts (all words little-endian):
//!
//! ```text
//! leaf      0 header: count | LEAF_BIT     8 keys [u64; FANOUT]
//!         136 values [[u8; 24]; FANOUT]  520 next leaf (0: none)   528 end
//! internal  0 header: count (keys)        8 keys [u64; FANOUT]
//!         136 children [u64; FANOUT + 1] 272 end
//! meta      0 root node    8 height (1: the root is a leaf)    16 end
//! ```
//!
//! A lookup reads each node's header and keys in one read (136 bytes), the
//! child word or the value; an insert into a leaf with room makes two
//! writes (the header with all the keys, adjacent to it; the values from
//! the slot on), a delete the same or one. Fewer, larger writes suit every
//! engine that logs per write (one record each) and cost the others
//! nothing: the header and the first keys share a cache line.

pub mod coll;
pub mod mem;
#[cfg(feature = "peers")]
pub mod peers;
pub mod store;
pub mod systems;
pub mod workload;

/// Keys per node at most.
pub const FANOUT: usize = 16;
/// Bytes of a value (with the 8-byte key, the paper's 32-byte record).
pub const VALUE: usize = 24;
/// A record's value.
pub type Value = [u8; VALUE];

const LEAF_BIT: u64 = 1 << 63;
const HDR_OFF: u64 = 0;
const KEYS_OFF: u64 = HDR_OFF + 8;
const HEAD_LEN: usize = (KEYS_OFF as usize) + 8 * FANOUT;
const VALS_OFF: u64 = HEAD_LEN as u64;
const NEXT_OFF: u64 = VALS_OFF + (VALUE * FANOUT) as u64;
/// Bytes of a leaf.
pub const LEAF_SIZE: u64 = NEXT_OFF + 8;
const KIDS_OFF: u64 = HEAD_LEN as u64;
/// Bytes of an internal node.
pub const INNER_SIZE: u64 = KIDS_OFF + 8 * (FANOUT as u64 + 1);
const META_ROOT: u64 = 0;
const META_HEIGHT: u64 = 8;
/// Bytes of the tree's meta block.
pub const META_SIZE: u64 = 16;
/// Levels at most: FANOUT/2^h leaves fill any pool long before.
const MAX_HEIGHT: usize = 24;

/// What an engine or the tree can fail with.
#[derive(Debug, thiserror::Error)]
pub enum MemError {
    /// A rewind call failed.
    #[error("rewind: {0}")]
    Rewind(rewind::Error),
    /// A peer's call failed (its message says which).
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The engine's space is exhausted (`volatile`, `persist-nolog`).
    #[error("out of space: {requested} bytes requested from a space of {capacity}")]
    OutOfSpace { requested: u64, capacity: u64 },
    /// An access outside the engine's space.
    #[error("access of {len} bytes at {offset} outside a space of {capacity}")]
    OutOfBounds {
        offset: u64,
        len: u64,
        capacity: u64,
    },
    /// The tree's bytes are not a tree (a bad header or height).
    #[error("node at {node}: {what}")]
    Corrupt { node: u64, what: &'static str },
    /// The closure asked for the transaction to be rolled back.
    #[error("transaction aborted")]
    Aborted,
}

impl From<rewind::Error> for MemError {
    fn from(e: rewind::Error) -> MemError {
        match e {
            rewind::Error::Aborted => MemError::Aborted,
            e => MemError::Rewind(e),
        }
    }
}

/// Memory as one transaction sees it.
pub trait TxMem {
    /// Reads `buf.len()` bytes at `off`, seeing this transaction's writes.
    fn read(&mut self, off: u64, buf: &mut [u8]) -> Result<(), MemError>;
    /// Writes `bytes` at `off`, recoverably where the engine is.
    fn write(&mut self, off: u64, bytes: &[u8]) -> Result<(), MemError>;
    /// Allocates `size` zeroed bytes; returns their offset.
    fn alloc(&mut self, size: u64) -> Result<u64, MemError>;
    /// Frees the block of `size` bytes at `off`.
    fn free(&mut self, off: u64, size: u64) -> Result<(), MemError>;

    /// The little-endian u64 at `off`.
    fn read_u64(&mut self, off: u64) -> Result<u64, MemError> {
        let mut b = [0u8; 8];
        self.read(off, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Writes `v` little-endian at `off`.
    fn write_u64(&mut self, off: u64, v: u64) -> Result<(), MemError> {
        self.write(off, &v.to_le_bytes())
    }
}

/// A store of the tree that runs transactions.
pub trait Engine {
    /// The memory a transaction sees.
    type Tx<'a>: TxMem
    where
        Self: 'a;
    /// Runs `f` as one durable transaction: when `f` returns `Ok` the
    /// transaction commits and is durable before this returns; when it
    /// returns `Err`, the engine rolls back what it can (`volatile` and
    /// `persist-nolog` cannot) and returns the error.
    fn transaction<R>(
        &mut self,
        f: impl FnOnce(&mut Self::Tx<'_>) -> Result<R, MemError>,
    ) -> Result<R, MemError>;

    /// Whether a transaction whose closure fails is rolled back (`false`:
    /// `volatile` and `persist-nolog`, which keep what was written).
    fn recoverable(&self) -> bool {
        true
    }

    /// Makes committed transactions durable in place and empties the log
    /// (rewind's checkpoint; nothing elsewhere).
    fn checkpoint(&self) -> Result<(), MemError> {
        Ok(())
    }

    /// Waits until every committed transaction's values are in place and
    /// durable (rewind's redo-async writes back after its commit returns;
    /// every other engine is done when its commit returns).
    fn sync(&self) -> Result<(), MemError> {
        Ok(())
    }

    /// Fences and flushed lines so far, for engines on a rewind `Domain`.
    fn counters(&self) -> Option<rewind::Counters> {
        None
    }
}

/// A node's header and keys, as one read returns them.
struct Head {
    count: usize,
    leaf: bool,
    keys: [u64; FANOUT],
}

impl Head {
    fn read<M: TxMem + ?Sized>(m: &mut M, node: u64) -> Result<Head, MemError> {
        let mut b = [0u8; HEAD_LEN];
        m.read(node, &mut b)?;
        let word = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let hdr = word(0);
        let count = (hdr & !LEAF_BIT) as usize;
        if count > FANOUT {
            return Err(MemError::Corrupt {
                node,
                what: "key count above the fan-out",
            });
        }
        let mut keys = [0u64; FANOUT];
        for (i, k) in keys.iter_mut().enumerate().take(count) {
            *k = word(1 + i);
        }
        Ok(Head {
            count,
            leaf: hdr & LEAF_BIT != 0,
            keys,
        })
    }

    fn keys(&self) -> &[u64] {
        &self.keys[..self.count]
    }

    /// The keys with `key` inserted at `pos` (the first `count + 1`).
    fn inserted(&self, pos: usize, key: u64) -> [u64; FANOUT + 1] {
        let mut keys = [0u64; FANOUT + 1];
        keys[..pos].copy_from_slice(&self.keys[..pos]);
        keys[pos] = key;
        keys[pos + 1..=self.count].copy_from_slice(&self.keys[pos..self.count]);
        keys
    }
}

fn hdr(count: usize, leaf: bool) -> u64 {
    count as u64 | if leaf { LEAF_BIT } else { 0 }
}

/// Little-endian bytes of `keys`.
fn key_bytes(keys: &[u64], out: &mut [u8]) {
    for (k, o) in keys.iter().zip(out.chunks_exact_mut(8)) {
        o.copy_from_slice(&k.to_le_bytes());
    }
}

/// Writes a node's header (`keys.len()`, leaf or not) and its keys in one
/// write: they are adjacent, and one write is one log record.
fn write_head<M: TxMem + ?Sized>(
    m: &mut M,
    node: u64,
    keys: &[u64],
    leaf: bool,
) -> Result<(), MemError> {
    let mut b = [0u8; HEAD_LEN];
    b[..8].copy_from_slice(&hdr(keys.len(), leaf).to_le_bytes());
    key_bytes(keys, &mut b[KEYS_OFF as usize..]);
    m.write(node + HDR_OFF, &b[..KEYS_OFF as usize + 8 * keys.len()])
}

/// A B+-tree in an engine's space, found from its meta block.
#[derive(Clone, Copy, Debug)]
pub struct BTree {
    meta: u64,
}

/// One path step: a node and the child taken.
#[derive(Clone, Copy, Default)]
struct Step {
    node: u64,
    child: usize,
}

impl BTree {
    /// A new empty tree (its meta block and one empty leaf), made in `m`.
    pub fn create<M: TxMem + ?Sized>(m: &mut M) -> Result<BTree, MemError> {
        let meta = m.alloc(META_SIZE)?;
        let leaf = m.alloc(LEAF_SIZE)?;
        m.write_u64(leaf + HDR_OFF, hdr(0, true))?;
        m.write_u64(meta + META_ROOT, leaf)?;
        m.write_u64(meta + META_HEIGHT, 1)?;
        Ok(BTree { meta })
    }

    /// The tree whose meta block is at `meta`.
    pub fn at(meta: u64) -> BTree {
        BTree { meta }
    }

    /// Where the meta block is.
    pub fn meta(&self) -> u64 {
        self.meta
    }

    fn root<M: TxMem + ?Sized>(&self, m: &mut M) -> Result<(u64, usize), MemError> {
        let mut b = [0u8; META_SIZE as usize];
        m.read(self.meta, &mut b)?;
        let root = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
        let height = u64::from_le_bytes(b[8..].try_into().expect("8 bytes")) as usize;
        if height == 0 || height > MAX_HEIGHT {
            return Err(MemError::Corrupt {
                node: self.meta,
                what: "tree height out of range",
            });
        }
        Ok((root, height))
    }

    /// Descends to the leaf for `key`, filling `path` with the internal
    /// nodes taken; returns the leaf, its head and the height.
    fn descend<M: TxMem + ?Sized>(
        &self,
        m: &mut M,
        key: u64,
        path: &mut [Step; MAX_HEIGHT],
    ) -> Result<(u64, Head, usize), MemError> {
        let (mut node, height) = self.root(m)?;
        for step in path.iter_mut().take(height - 1) {
            let head = Head::read(m, node)?;
            if head.leaf {
                return Err(MemError::Corrupt {
                    node,
                    what: "a leaf above the leaf level",
                });
            }
            let child = head.keys().partition_point(|&k| k <= key);
            *step = Step { node, child };
            node = m.read_u64(node + KIDS_OFF + 8 * child as u64)?;
        }
        let head = Head::read(m, node)?;
        if !head.leaf {
            return Err(MemError::Corrupt {
                node,
                what: "an internal node at the leaf level",
            });
        }
        Ok((node, head, height))
    }

    /// The value of `key`, if present.
    pub fn get<M: TxMem + ?Sized>(&self, m: &mut M, key: u64) -> Result<Option<Value>, MemError> {
        let mut path = [Step::default(); MAX_HEIGHT];
        let (leaf, head, _) = self.descend(m, key, &mut path)?;
        match head.keys().binary_search(&key) {
            Ok(i) => {
                let mut v = [0u8; VALUE];
                m.read(leaf + VALS_OFF + (i * VALUE) as u64, &mut v)?;
                Ok(Some(v))
            }
            Err(_) => Ok(None),
        }
    }

    /// Inserts `key` with `value`; `false` (and no change) if present.
    pub fn insert<M: TxMem + ?Sized>(
        &self,
        m: &mut M,
        key: u64,
        value: &Value,
    ) -> Result<bool, MemError> {
        let mut path = [Step::default(); MAX_HEIGHT];
        let (leaf, head, height) = self.descend(m, key, &mut path)?;
        let pos = match head.keys().binary_search(&key) {
            Ok(_) => return Ok(false),
            Err(p) => p,
        };
        let n = head.count;
        if n < FANOUT {
            // The header and keys in one write, then the values from `pos`
            // on, each shifted one slot right.
            let keys = head.inserted(pos, key);
            write_head(m, leaf, &keys[..=n], true)?;
            let mut vb = [0u8; VALUE * FANOUT];
            let vb = &mut vb[..VALUE * (n + 1 - pos)];
            vb[..VALUE].copy_from_slice(value);
            m.read(leaf + VALS_OFF + (VALUE * pos) as u64, &mut vb[VALUE..])?;
            m.write(leaf + VALS_OFF + (VALUE * pos) as u64, vb)?;
            return Ok(true);
        }
        // Full: the FANOUT + 1 records split into two leaves.
        let keys = head.inserted(pos, key);
        let mut vals = [0u8; VALUE * (FANOUT + 1)];
        m.read(leaf + VALS_OFF, &mut vals[..VALUE * pos])?;
        vals[VALUE * pos..VALUE * (pos + 1)].copy_from_slice(value);
        m.read(
            leaf + VALS_OFF + (VALUE * pos) as u64,
            &mut vals[VALUE * (pos + 1)..],
        )?;
        let left = (FANOUT + 2) / 2;
        let right_n = FANOUT + 1 - left;
        let next = m.read_u64(leaf + NEXT_OFF)?;
        let right = m.alloc(LEAF_SIZE)?;
        // The new leaf, whole: header and keys, values, next.
        let mut rb = [0u8; LEAF_SIZE as usize];
        rb[..8].copy_from_slice(&hdr(right_n, true).to_le_bytes());
        key_bytes(&keys[left..], &mut rb[KEYS_OFF as usize..]);
        rb[VALS_OFF as usize..VALS_OFF as usize + VALUE * right_n]
            .copy_from_slice(&vals[VALUE * left..]);
        rb[NEXT_OFF as usize..].copy_from_slice(&next.to_le_bytes());
        m.write(right, &rb)?;
        // The old leaf keeps the first `left`: its header and keys, the
        // values that changed (from `pos` on), its next leaf.
        write_head(m, leaf, &keys[..left], true)?;
        if pos < left {
            m.write(
                leaf + VALS_OFF + (VALUE * pos) as u64,
                &vals[VALUE * pos..VALUE * left],
            )?;
        }
        m.write_u64(leaf + NEXT_OFF, right)?;
        self.insert_up(m, &path[..height - 1], keys[left], right)?;
        Ok(true)
    }

    /// Inserts separator `sep` and its right child `child` into the
    /// parents on `path` (the last step first), splitting full ones and,
    /// past the root, growing a new root.
    fn insert_up<M: TxMem + ?Sized>(
        &self,
        m: &mut M,
        path: &[Step],
        mut sep: u64,
        mut child: u64,
    ) -> Result<(), MemError> {
        for step in path.iter().rev() {
            let node = step.node;
            let head = Head::read(m, node)?;
            let n = head.count;
            let pos = step.child;
            let mut kids = [0u64; FANOUT + 2];
            if n < FANOUT {
                let keys = head.inserted(pos, sep);
                write_head(m, node, &keys[..=n], false)?;
                // Children after `pos`, shifted one right, the new one first.
                let mut cb = [0u8; 8 * (FANOUT + 1)];
                let cb = &mut cb[..8 * (n + 1 - pos)];
                cb[..8].copy_from_slice(&child.to_le_bytes());
                m.read(node + KIDS_OFF + 8 * (pos as u64 + 1), &mut cb[8..])?;
                m.write(node + KIDS_OFF + 8 * (pos as u64 + 1), cb)?;
                return Ok(());
            }
            // Full: FANOUT + 1 keys, FANOUT + 2 children; the middle key goes up.
            let keys = head.inserted(pos, sep);
            let mut cb = [0u8; 8 * (FANOUT + 1)];
            m.read(node + KIDS_OFF, &mut cb)?;
            let mut j = 0;
            for (i, c) in cb.chunks_exact(8).enumerate() {
                kids[j] = u64::from_le_bytes(c.try_into().expect("8 bytes"));
                j += 1;
                if i == pos {
                    kids[j] = child;
                    j += 1;
                }
            }
            let mid = FANOUT / 2;
            let right = m.alloc(INNER_SIZE)?;
            let mut rb = [0u8; INNER_SIZE as usize];
            let rn = FANOUT - mid;
            rb[..8].copy_from_slice(&hdr(rn, false).to_le_bytes());
            key_bytes(&keys[mid + 1..], &mut rb[KEYS_OFF as usize..]);
            key_bytes(&kids[mid + 1..], &mut rb[KIDS_OFF as usize..]);
            m.write(right, &rb)?;
            // The old node keeps keys[..mid] and kids[..=mid]: its header
            // and keys, and the children that changed (from `pos` on).
            write_head(m, node, &keys[..mid], false)?;
            if pos < mid {
                let mut cb = [0u8; 8 * (FANOUT + 1)];
                key_bytes(&kids[pos + 1..=mid], &mut cb);
                m.write(
                    node + KIDS_OFF + 8 * (pos as u64 + 1),
                    &cb[..8 * (mid - pos)],
                )?;
            }
            sep = keys[mid];
            child = right;
        }
        // The root split: a new root over the old one and `child`.
        let (old_root, height) = self.root(m)?;
        let root = m.alloc(INNER_SIZE)?;
        let mut rb = [0u8; INNER_SIZE as usize];
        rb[..8].copy_from_slice(&hdr(1, false).to_le_bytes());
        rb[KEYS_OFF as usize..KEYS_OFF as usize + 8].copy_from_slice(&sep.to_le_bytes());
        key_bytes(&[old_root, child], &mut rb[KIDS_OFF as usize..]);
        m.write(root, &rb)?;
        let mut mb = [0u8; META_SIZE as usize];
        mb[..8].copy_from_slice(&root.to_le_bytes());
        mb[8..].copy_from_slice(&(height as u64 + 1).to_le_bytes());
        m.write(self.meta, &mb)
    }

    /// Removes `key`; `false` if it was not there. Leaves are never merged.
    pub fn remove<M: TxMem + ?Sized>(&self, m: &mut M, key: u64) -> Result<bool, MemError> {
        let mut path = [Step::default(); MAX_HEIGHT];
        let (leaf, head, height) = self.descend(m, key, &mut path)?;
        let Ok(pos) = head.keys().binary_search(&key) else {
            return Ok(false);
        };
        let n = head.count;
        if n == 1 && height > 1 && self.free_leaf(m, leaf, &path[..height - 1])? {
            return Ok(true);
        }
        let mut keys = [0u64; FANOUT];
        keys[..pos].copy_from_slice(&head.keys[..pos]);
        keys[pos..n - 1].copy_from_slice(&head.keys[pos + 1..n]);
        write_head(m, leaf, &keys[..n - 1], true)?;
        if pos + 1 < n {
            let mut vb = [0u8; VALUE * FANOUT];
            let vb = &mut vb[..VALUE * (n - 1 - pos)];
            m.read(leaf + VALS_OFF + (VALUE * (pos + 1)) as u64, vb)?;
            m.write(leaf + VALS_OFF + (VALUE * pos) as u64, vb)?;
        }
        Ok(true)
    }

    /// Frees `leaf`, about to become empty, if its parent (the last step of
    /// `path`) keeps a child after losing it: the parent drops the leaf and
    /// one separator, and the previous leaf, if any, links past it.
    /// Returns whether it did; a parent with one child keeps its empty leaf.
    fn free_leaf<M: TxMem + ?Sized>(
        &self,
        m: &mut M,
        leaf: u64,
        path: &[Step],
    ) -> Result<bool, MemError> {
        let Some(&parent) = path.last() else {
            return Ok(false);
        };
        let head = Head::read(m, parent.node)?;
        let (n, idx) = (head.count, parent.child);
        if n == 0 {
            return Ok(false);
        }
        // The previous leaf: down the rightmost edge of the subtree left of
        // the deepest step that did not take its first child.
        if let Some(j) = path.iter().rposition(|s| s.child > 0) {
            let mut node = m.read_u64(path[j].node + KIDS_OFF + 8 * (path[j].child as u64 - 1))?;
            for _ in j + 1..path.len() {
                let h = Head::read(m, node)?;
                node = m.read_u64(node + KIDS_OFF + 8 * h.count as u64)?;
            }
            let next = m.read_u64(leaf + NEXT_OFF)?;
            m.write_u64(node + NEXT_OFF, next)?;
        }
        // Without child `idx` and separator `idx - 1` (key 0 for child 0).
        let gone = idx.saturating_sub(1);
        let mut keys = [0u64; FANOUT];
        keys[..gone].copy_from_slice(&head.keys[..gone]);
        keys[gone..n - 1].copy_from_slice(&head.keys[gone + 1..n]);
        write_head(m, parent.node, &keys[..n - 1], false)?;
        let mut cb = [0u8; 8 * FANOUT];
        let cb = &mut cb[..8 * (n - idx)];
        m.read(parent.node + KIDS_OFF + 8 * (idx as u64 + 1), cb)?;
        m.write(parent.node + KIDS_OFF + 8 * idx as u64, cb)?;
        m.free(leaf, LEAF_SIZE)?;
        Ok(true)
    }

    /// Every record in key order (walks the leaf chain): for checks.
    #[cfg(test)]
    pub fn records<M: TxMem + ?Sized>(&self, m: &mut M) -> Result<Vec<(u64, Value)>, MemError> {
        let (mut node, height) = self.root(m)?;
        for _ in 1..height {
            node = m.read_u64(node + KIDS_OFF)?;
        }
        let mut out = Vec::new();
        while node != 0 {
            let head = Head::read(m, node)?;
            for (i, &k) in head.keys().iter().enumerate() {
                let mut v = [0u8; VALUE];
                m.read(node + VALS_OFF + (i * VALUE) as u64, &mut v)?;
                out.push((k, v));
            }
            node = m.read_u64(node + NEXT_OFF)?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::mem::Volatile;
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeMap;

    fn val(k: u64) -> Value {
        let mut v = [0u8; VALUE];
        v[..8].copy_from_slice(&k.to_le_bytes());
        v[16..].copy_from_slice(&(!k).to_le_bytes());
        v
    }

    /// Random inserts and removes against a BTreeMap model, small keys so
    /// that both hits and misses happen, enough to split several levels.
    #[test]
    fn matches_a_btreemap_model() {
        let mut e = Volatile::new(64 << 20);
        let t = e.transaction(BTree::create).unwrap();
        let mut model = BTreeMap::new();
        let mut rng = SmallRng::seed_from_u64(7);
        for i in 0..40_000u64 {
            let k = rng.gen_range(0..5_000u64);
            let op = rng.gen_range(0..10);
            e.transaction(|m| {
                if op < 6 {
                    assert_eq!(t.insert(m, k, &val(k ^ i))?, !model.contains_key(&k));
                    model.entry(k).or_insert(val(k ^ i));
                } else if op < 9 {
                    assert_eq!(t.remove(m, k)?, model.remove(&k).is_some());
                } else {
                    assert_eq!(t.get(m, k)?, model.get(&k).copied());
                }
                Ok(())
            })
            .unwrap();
        }
        let got = e.transaction(|m| t.records(m)).unwrap();
        let want: Vec<_> = model.into_iter().collect();
        assert_eq!(got, want);
    }

    /// Deleting every key frees emptied leaves (the space is reused) and
    /// leaves a tree that still finds what is inserted again.
    #[test]
    fn emptied_leaves_are_freed_and_the_tree_stays_usable() {
        let mut e = Volatile::new(2 << 20);
        let t = e.transaction(BTree::create).unwrap();
        for round in 0..20u64 {
            let keys: Vec<u64> = (0..2_000u64).map(|k| k * 7 + round).collect();
            for &k in &keys {
                assert!(e.transaction(|m| t.insert(m, k, &val(k))).unwrap());
            }
            for &k in keys.iter().rev().step_by(3).chain(keys.iter()) {
                e.transaction(|m| t.remove(m, k)).unwrap();
            }
            assert!(e.transaction(|m| t.records(m)).unwrap().is_empty());
        }
        // 20 rounds of 2,000 records (~130 KB of nodes each) fit in 2 MiB
        // only if leaves are reused.
        e.transaction(|m| t.insert(m, 5, &val(5))).unwrap();
        assert_eq!(e.transaction(|m| t.get(m, 5)).unwrap(), Some(val(5)));
    }

    /// Ascending and descending inserts split at the edges of nodes.
    #[test]
    fn sorted_inserts_split_at_both_ends() {
        for keys in [
            (0..3_000u64).collect::<Vec<_>>(),
            (0..3_000).rev().collect(),
        ] {
            let mut e = Volatile::new(16 << 20);
            let t = e.transaction(BTree::create).unwrap();
            for &k in &keys {
                e.transaction(|m| t.insert(m, k, &val(k))).unwrap();
            }
            let got = e.transaction(|m| t.records(m)).unwrap();
            assert_eq!(got.len(), 3_000);
            assert!(got.windows(2).all(|w| w[0].0 < w[1].0));
            for k in [0, 1, 1_499, 2_999] {
                assert_eq!(e.transaction(|m| t.get(m, k)).unwrap(), Some(val(k)));
            }
        }
    }
}
