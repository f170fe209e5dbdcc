//! The B+-tree's structural invariants, checked from the committed state.

use std::collections::HashSet;

use rewind::{PPtr, Pool, Tx};

use super::node::{fingerprint, Raw, FPS_OFF};
use super::{BTreeMap, Header, MAX_DEPTH, WHAT};
use crate::error::{corrupt, Result};
use crate::mem::{Mem, ScanWatch};
use crate::storable::Storable;

/// What a walk of the tree collects.
struct Walk {
    leaves: Vec<u64>,
    leaf_depth: Option<usize>,
    entries: u64,
    seen: HashSet<u64>,
}

impl<K: Storable, V: Storable> BTreeMap<K, V>
where
    K::Ref: Ord,
{
    /// Checks the tree's invariants, returning [`Error::Corrupt`](crate::Error::Corrupt)
    /// for the first one broken: separators strictly increasing, every key
    /// within its parent's separators and unique in its leaf, every
    /// fingerprint its key's; every leaf at the same depth; counts within
    /// bounds (leaves other than the root at least fan-out / 4, inner
    /// nodes at least fan-out / 2, the root at least 1); no node reachable
    /// twice; the
    /// leaf chain visiting exactly the leaves in key order; the header's
    /// entry count and first leaf right. Committed state: on a thread
    /// inside a transaction of `pool` it is `NestedTransaction`.
    pub fn check_invariants(&self, pool: &Pool) -> Result<()> {
        // (An error while a writer held it is `Changed`, as for a scan.)
        ScanWatch::around(pool, WHAT, self.hdr, || {
            self.check_invariants_unwatched(pool)
        })
    }

    fn check_invariants_unwatched(&self, pool: &Pool) -> Result<()> {
        let mut m = pool;
        let h = self.header(&mut m)?;
        let mut w = Walk {
            leaves: Vec::new(),
            leaf_depth: None,
            entries: 0,
            seen: HashSet::new(),
        };
        self.walk(pool, &h, h.root, 0, None, None, &mut w)?;
        if w.entries != h.len {
            return Err(corrupt(
                WHAT,
                self.hdr,
                "entry count differs from the leaves' keys",
            ));
        }
        if w.leaves.first() != Some(&h.first) {
            return Err(corrupt(
                WHAT,
                self.hdr,
                "first-leaf field is not the leftmost leaf",
            ));
        }
        let mut cur = h.first;
        for &leaf in &w.leaves {
            if cur != leaf {
                return Err(corrupt(WHAT, leaf, "leaf chain skips or reorders leaves"));
            }
            cur = Raw::load(&mut m, &h.geo, cur)?.next();
        }
        if cur != 0 {
            return Err(corrupt(WHAT, cur, "leaf chain runs past the last leaf"));
        }
        Ok(())
    }

    /// The offsets of every block the tree owns, header first, then every
    /// node reachable from the root, breadth first, each node followed by
    /// the out-of-line blocks of its byte-string keys and values
    /// (committed state): for space accounting and checks. Nodes split off
    /// by nested top actions of aborted inserts (undo policies) are
    /// reachable, so they are here too.
    pub fn blocks(&self, pool: &Pool) -> Result<Vec<u64>> {
        // (An error while a writer held it is `Changed`, as for a scan.)
        ScanWatch::around(pool, WHAT, self.hdr, || self.blocks_in(&mut { pool }))
    }

    /// Frees every node and the header, in `tx`; the handle must not be
    /// used again.
    pub fn destroy(self, tx: &mut Tx<'_>) -> Result<()> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        for off in self.blocks_in(tx)? {
            tx.free(PPtr::<u8>::from_offset(off))?;
        }
        Ok(())
    }

    pub(super) fn blocks_in<M: Mem>(&self, m: &mut M) -> Result<Vec<u64>> {
        let h = self.header(m)?;
        let mut out = vec![self.hdr];
        let mut level = vec![h.root];
        for _ in 0..=MAX_DEPTH {
            if level.is_empty() {
                return Ok(out);
            }
            let mut below = Vec::new();
            for &off in &level {
                let node = Raw::load(m, &h.geo, off)?;
                out.push(off);
                if !node.is_leaf() {
                    below.extend((0..=node.count()).map(|i| node.kid(&h.geo, i)));
                    if !K::INLINE {
                        let keys = (0..node.count()).map(|i| node.ikey::<K>(&h.geo, i));
                        out.extend(keys.filter_map(|k| K::block(&k)));
                    }
                } else if !K::INLINE || !V::INLINE {
                    let mut bits = node.bitmap();
                    while bits != 0 {
                        let i = bits.trailing_zeros() as usize;
                        bits &= bits - 1;
                        out.extend(K::block(&node.key::<K>(&h.geo, i)));
                        out.extend(V::block(&node.val::<V>(&h.geo, i)));
                    }
                }
            }
            level = below;
        }
        Err(corrupt(WHAT, h.root, "deeper than 64 levels"))
    }

    #[allow(clippy::too_many_arguments)]
    fn walk(
        &self,
        pool: &Pool,
        h: &Header,
        off: u64,
        depth: usize,
        lo: Option<&K::Ref>,
        hi: Option<&K::Ref>,
        w: &mut Walk,
    ) -> Result<()> {
        if depth > MAX_DEPTH {
            return Err(corrupt(WHAT, off, "deeper than 64 levels"));
        }
        if !w.seen.insert(off) {
            return Err(corrupt(WHAT, off, "node reachable twice"));
        }
        let geo = &h.geo;
        let node = Raw::load(&mut { pool }, geo, off)?;
        let below = |k: &K| lo.is_some_and(|lo| k.borrowed() < lo);
        let above = |k: &K| hi.is_some_and(|hi| k.borrowed() >= hi);
        let mut m = pool;
        if node.is_leaf() {
            let sorted = node.sorted::<K, _>(&mut m, geo)?;
            for &(_, i) in &sorted {
                V::load(&mut m, &node.val::<V>(geo, i))?; // a block that reads
            }
            if (sorted.windows(2)).any(|p| p[0].0.borrowed() == p[1].0.borrowed()) {
                return Err(corrupt(WHAT, off, "a key twice in a leaf"));
            }
            if sorted.iter().any(|(k, _)| below(k) || above(k)) {
                return Err(corrupt(WHAT, off, "key outside its parent's separators"));
            }
            if sorted
                .iter()
                .any(|(k, i)| node.b[FPS_OFF + i] != fingerprint(K::ref_bytes(k.borrowed())))
            {
                return Err(corrupt(WHAT, off, "a fingerprint that is not its key's"));
            }
            if depth > 0 && sorted.len() < geo.min_leaf() {
                return Err(corrupt(WHAT, off, "leaf with too few entries"));
            }
            if *w.leaf_depth.get_or_insert(depth) != depth {
                return Err(corrupt(WHAT, off, "leaves at different depths"));
            }
            w.leaves.push(off);
            w.entries += sorted.len() as u64;
            return Ok(());
        }
        let (slots, kids) = node.decode_inner::<K>(geo);
        let keys = (slots.iter().map(|s| K::load(&mut m, s))).collect::<Result<Vec<K>>>()?;
        if (keys.windows(2)).any(|p| p[0].borrowed() >= p[1].borrowed()) {
            return Err(corrupt(WHAT, off, "keys not strictly increasing"));
        }
        if keys.iter().any(|k| below(k) || above(k)) {
            return Err(corrupt(WHAT, off, "key outside its parent's separators"));
        }
        let least = if depth == 0 { 1 } else { geo.min_inner() };
        if keys.len() < least {
            return Err(corrupt(WHAT, off, "inner node with too few keys"));
        }
        if node.next() != 0 {
            return Err(corrupt(WHAT, off, "inner node with a next pointer"));
        }
        let n = keys.len();
        for (j, &kid) in kids.iter().enumerate() {
            let lo = if j == 0 {
                lo
            } else {
                Some(keys[j - 1].borrowed())
            };
            let hi = if j == n { hi } else { Some(keys[j].borrowed()) };
            self.walk(pool, h, kid, depth + 1, lo, hi, w)?;
        }
        Ok(())
    }
}
