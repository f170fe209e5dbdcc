//! The Atomic AVL Tree of the two-layer log (REWIND §3.4): log records
//! indexed by (transaction id, lsn), so that a transaction's records are
//! one key range (the transaction table) and any record is found without
//! a scan.
//!
//! A node is a 32-byte header followed by the record it holds:
//!
//! ```text
//! +0 left  +8 right  +16 height (a leaf is 1)  +24 check (node ^ NODE_MARK)
//! +32 the record (format/record.rs), never changed once written
//! ```
//!
//! The tree is changed only by *operations* ([`Shadow`]): an insertion or
//! removal runs against a volatile overlay of the words it reads and
//! writes, and its result is the set of words to write, which the
//! two-layer log makes atomic (`two_layer.rs`). The root is one word of
//! the meta page ([`ROOT`]).

use std::collections::HashMap;

use crate::error::Error;
use crate::format::layout::META_OFF;
use crate::persist::Domain;

/// Offset of a node's left child.
pub const LEFT: u64 = 0;
/// Offset of a node's right child.
pub const RIGHT: u64 = 8;
/// Offset of a node's height.
pub const HEIGHT: u64 = 16;
/// Offset of a node's check word.
pub const CHECK: u64 = 24;
/// Size of the node header; the record follows.
pub const NODE: u64 = 32;
/// The meta-page word holding the root node (0: empty tree).
pub const ROOT: u64 = META_OFF + 192;
/// No AVL tree of the nodes a pool can hold is taller: 1.44·log2(2^40).
pub const MAX_HEIGHT: u64 = 60;

const NODE_MARK: u64 = 0x5452_4545_4e4f_4445; // "TREENODE"

/// The check word of the node at `n`.
pub fn check_word(n: u64) -> u64 {
    n ^ NODE_MARK
}

/// The header of a new leaf at `n`.
pub fn leaf_header(n: u64) -> [u8; NODE as usize] {
    let mut h = [0u8; NODE as usize];
    h[HEIGHT as usize..HEIGHT as usize + 8].copy_from_slice(&1u64.to_le_bytes());
    h[CHECK as usize..].copy_from_slice(&check_word(n).to_le_bytes());
    h
}

/// A node's key: its record's transaction id, then its lsn.
pub fn key(d: &Domain, n: u64) -> Result<(u64, u64), Error> {
    Ok((d.read_u64(n + NODE + 8)?, d.read_u64(n + NODE)?))
}

/// One tree operation in the making: reads see its own writes; the writes
/// are kept in the order made, the last value of each word winning.
pub struct Shadow<'a> {
    d: &'a Domain,
    words: HashMap<u64, u64>,
    order: Vec<u64>,
}

impl<'a> Shadow<'a> {
    /// An empty operation over the tree in `d`.
    pub fn new(d: &'a Domain) -> Shadow<'a> {
        Shadow {
            d,
            words: HashMap::new(),
            order: Vec::new(),
        }
    }

    /// Words written so far.
    pub fn writes(&self) -> usize {
        self.order.len()
    }

    /// The words to write, each with its final value, and an empty shadow.
    pub fn take(&mut self) -> Vec<(u64, u64)> {
        let w = std::mem::take(&mut self.words);
        std::mem::take(&mut self.order)
            .into_iter()
            .map(|a| (a, w[&a]))
            .collect()
    }

    fn get(&self, a: u64) -> Result<u64, Error> {
        match self.words.get(&a) {
            Some(&v) => Ok(v),
            None => self.d.read_u64(a),
        }
    }

    fn set(&mut self, a: u64, v: u64) -> Result<(), Error> {
        if self.get(a)? == v {
            return Ok(());
        }
        if self.words.insert(a, v).is_none() {
            self.order.push(a);
        }
        Ok(())
    }

    fn height(&self, n: u64) -> Result<u64, Error> {
        if n == 0 {
            Ok(0)
        } else {
            self.get(n + HEIGHT)
        }
    }

    fn fix_height(&mut self, n: u64) -> Result<(), Error> {
        let h = 1 + self
            .height(self.get(n + LEFT)?)?
            .max(self.height(self.get(n + RIGHT)?)?);
        self.set(n + HEIGHT, h)
    }

    /// Rotates the subtree whose root `link` names so that its `side`
    /// child becomes its root.
    fn rotate(&mut self, link: u64, side: u64) -> Result<(), Error> {
        let other = LEFT + RIGHT - side;
        let n = self.get(link)?;
        let c = self.get(n + side)?;
        self.set(n + side, self.get(c + other)?)?;
        self.set(c + other, n)?;
        self.fix_height(n)?;
        self.fix_height(c)?;
        self.set(link, c)
    }

    /// Restores the AVL balance of the subtree whose root `link` names.
    fn rebalance(&mut self, link: u64) -> Result<(), Error> {
        let n = self.get(link)?;
        if n == 0 {
            return Ok(());
        }
        self.fix_height(n)?;
        let (l, r) = (self.get(n + LEFT)?, self.get(n + RIGHT)?);
        let (hl, hr) = (self.height(l)?, self.height(r)?);
        if hl > hr + 1 {
            if self.height(self.get(l + LEFT)?)? < self.height(self.get(l + RIGHT)?)? {
                self.rotate(n + LEFT, RIGHT)?;
            }
            self.rotate(link, LEFT)?;
        } else if hr > hl + 1 {
            if self.height(self.get(r + RIGHT)?)? < self.height(self.get(r + LEFT)?)? {
                self.rotate(n + RIGHT, LEFT)?;
            }
            self.rotate(link, RIGHT)?;
        }
        Ok(())
    }

    /// The links from the root word down to where `k` is or would go.
    fn path(&self, k: (u64, u64)) -> Result<Vec<u64>, Error> {
        let mut path = vec![ROOT];
        let mut n = self.get(ROOT)?;
        while n != 0 {
            let nk = key(self.d, n)?;
            if nk == k {
                return Ok(path);
            }
            let link = n + if k < nk { LEFT } else { RIGHT };
            path.push(link);
            if path.len() as u64 > MAX_HEIGHT + 1 {
                return Err(corrupt(n, "two-layer log tree is taller than any AVL tree"));
            }
            n = self.get(link)?;
        }
        Ok(path)
    }

    /// Inserts the leaf `n` (its header written by [`leaf_header`]).
    pub fn insert(&mut self, n: u64) -> Result<(), Error> {
        let path = self.path(key(self.d, n)?)?;
        let at = *path.last().expect("the root link");
        if self.get(at)? != 0 {
            return Err(corrupt(n, "two-layer log record id already in the tree"));
        }
        self.set(at, n)?;
        for &link in path.iter().rev().skip(1) {
            self.rebalance(link)?;
        }
        Ok(())
    }

    /// Removes the node `n`.
    pub fn remove(&mut self, n: u64) -> Result<(), Error> {
        let mut path = self.path(key(self.d, n)?)?;
        let at = *path.last().expect("the root link");
        if self.get(at)? != n {
            return Err(corrupt(n, "two-layer log record is not in the tree"));
        }
        let (l, r) = (self.get(n + LEFT)?, self.get(n + RIGHT)?);
        if l == 0 || r == 0 {
            self.set(at, l | r)?;
            path.pop();
        } else {
            // The successor `s` (leftmost of the right subtree) takes n's place.
            let mut below = vec![n + RIGHT];
            let mut s = r;
            while self.get(s + LEFT)? != 0 {
                below.push(s + LEFT);
                if below.len() as u64 > MAX_HEIGHT {
                    return Err(corrupt(s, "two-layer log tree is taller than any AVL tree"));
                }
                s = self.get(s + LEFT)?;
            }
            self.set(*below.last().expect("one link"), self.get(s + RIGHT)?)?;
            self.set(s + LEFT, l)?;
            self.set(s + RIGHT, self.get(n + RIGHT)?)?;
            self.set(s + HEIGHT, self.get(n + HEIGHT)?)?;
            self.set(at, s)?;
            // n's right link is now s's.
            below[0] = s + RIGHT;
            path.extend(below);
        }
        for &link in path.iter().rev() {
            self.rebalance(link)?;
        }
        Ok(())
    }
}

fn corrupt(offset: u64, reason: &'static str) -> Error {
    Error::LogCorrupt { offset, reason }
}

/// Walks the whole tree in key order, checking that every node is where
/// `valid` allows, carries its check word, and that keys increase and
/// heights are those of a balanced tree. Returns the nodes in key order.
pub fn walk(d: &Domain, valid: &dyn Fn(u64) -> bool) -> Result<Vec<u64>, Error> {
    let mut out = Vec::new();
    let root = d.read_u64(ROOT)?;
    visit(d, valid, root, 1, &mut out, &mut None)?;
    Ok(out)
}

fn visit(
    d: &Domain,
    valid: &dyn Fn(u64) -> bool,
    n: u64,
    depth: u64,
    out: &mut Vec<u64>,
    last: &mut Option<(u64, u64)>,
) -> Result<u64, Error> {
    if n == 0 {
        return Ok(0);
    }
    if depth > MAX_HEIGHT || !n.is_multiple_of(8) || !valid(n) {
        return Err(corrupt(n, "two-layer log tree link points outside the log"));
    }
    if d.read_u64(n + CHECK)? != check_word(n) {
        return Err(corrupt(
            n + CHECK,
            "two-layer log tree node fails its check",
        ));
    }
    let hl = visit(d, valid, d.read_u64(n + LEFT)?, depth + 1, out, last)?;
    let k = key(d, n)?;
    if last.is_some_and(|p| p >= k) {
        return Err(corrupt(n, "two-layer log tree keys out of order"));
    }
    *last = Some(k);
    out.push(n);
    let hr = visit(d, valid, d.read_u64(n + RIGHT)?, depth + 1, out, last)?;
    let h = 1 + hl.max(hr);
    if d.read_u64(n + HEIGHT)? != h || hl.abs_diff(hr) > 1 {
        return Err(corrupt(n + HEIGHT, "two-layer log tree is not balanced"));
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeSet;

    /// Node slots of a test tree: 64 bytes each from `BASE`, the record's
    /// lsn and transaction id at +32 and +40.
    const BASE: u64 = 16 << 10;
    const SLOT: u64 = 64;

    fn slot(i: u64) -> u64 {
        BASE + i * SLOT
    }

    fn apply(d: &Domain, op: &mut Shadow) {
        for (a, v) in op.take() {
            d.store_u64(a, v).unwrap();
        }
    }

    /// Random insertions and removals, each its own operation applied
    /// in place, against a `BTreeSet` of keys: after every step the walk
    /// finds a balanced tree with the model's keys in order.
    #[test]
    fn operations_keep_a_balanced_tree_of_the_model_keys() {
        for seed in 0..6u64 {
            let d = Domain::sim(((BASE + 600 * SLOT) as usize).next_multiple_of(4096));
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut model: BTreeSet<(u64, u64)> = BTreeSet::new();
            let mut node_of = std::collections::HashMap::new();
            for i in 0..600u64 {
                let present: Vec<_> = model.iter().copied().collect();
                let mut op = Shadow::new(&d);
                if present.is_empty() || rng.gen_bool(0.6) {
                    // Few transactions, so their records share key prefixes.
                    let k = (rng.gen_range(0..8u64), i + 1);
                    let n = slot(i);
                    d.store(n, &leaf_header(n)).unwrap();
                    d.store_u64(n + NODE, k.1).unwrap();
                    d.store_u64(n + NODE + 8, k.0).unwrap();
                    op.insert(n).unwrap();
                    model.insert(k);
                    node_of.insert(k, n);
                } else {
                    let k = present[rng.gen_range(0..present.len())];
                    op.remove(node_of[&k]).unwrap();
                    model.remove(&k);
                }
                apply(&d, &mut op);
                let nodes = walk(&d, &|n| n >= BASE && n < slot(600)).unwrap();
                let keys: Vec<_> = nodes.iter().map(|&n| key(&d, n).unwrap()).collect();
                assert_eq!(
                    keys,
                    model.iter().copied().collect::<Vec<_>>(),
                    "seed {seed} step {i}"
                );
            }
        }
    }

    /// A damaged tree is a typed error, never a hang or a panic: a cycle, a
    /// link outside the allowed nodes, a wrong height, a wrong check word.
    #[test]
    fn damaged_trees_are_refused() {
        let d = Domain::sim(((BASE + 64 * SLOT) as usize).next_multiple_of(4096));
        let mut op = Shadow::new(&d);
        for i in 0..20u64 {
            let n = slot(i);
            d.store(n, &leaf_header(n)).unwrap();
            d.store_u64(n + NODE, i + 1).unwrap();
            d.store_u64(n + NODE + 8, 1).unwrap();
            op.insert(n).unwrap();
            apply(&d, &mut op);
        }
        let valid = |n: u64| n >= BASE && n < slot(64);
        let nodes = walk(&d, &valid).unwrap();
        assert_eq!(nodes.len(), 20);
        let root = d.read_u64(ROOT).unwrap();
        let leaf = *nodes.first().unwrap();
        let cases: [(u64, u64); 5] = [
            (leaf + LEFT, root),      // a cycle
            (leaf + RIGHT, slot(63)), // a node never written
            (leaf + RIGHT, 12345),    // outside the nodes
            (root + HEIGHT, 1),       // a wrong height
            (root + CHECK, 7),        // a wrong check word
        ];
        for (at, v) in cases {
            let old = d.read_u64(at).unwrap();
            d.store_u64(at, v).unwrap();
            assert!(
                matches!(walk(&d, &valid), Err(Error::LogCorrupt { .. })),
                "{at:#x} = {v:#x} not refused"
            );
            d.store_u64(at, old).unwrap();
        }
        assert!(walk(&d, &valid).is_ok());
    }
}
