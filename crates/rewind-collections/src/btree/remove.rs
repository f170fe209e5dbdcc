//! Removals: one bit of the leaf's bitmap, then, when the leaf is left
//! with fewer than `F / 4` entries, a merge with a sibling or a share of
//! its entries, up the tree as far as inner nodes underflow. Also `clear`,
//! `retain` and the pops, built on removal.

use rewind::{PPtr, Tx};

use super::node::{fingerprint, store_inner, store_leaf, Geo, Raw, FPS_OFF};
use super::{descend, load_path, BTreeMap, Header, Path, FIRST_OFF, LEN_OFF, ROOT_OFF, WHAT};
use crate::error::{corrupt, Result};
use crate::mem::put64;
use crate::storable::Storable;

impl<K: Storable, V: Storable> BTreeMap<K, V>
where
    K::Ref: Ord,
{
    /// Removes `k`; returns its value. A leaf left with fewer than a
    /// quarter of its slots in use merges with or borrows from a sibling,
    /// so an emptied tree gives its nodes back (module docs).
    pub fn remove(&self, tx: &mut Tx<'_>, k: &K::Ref) -> Result<Option<V>> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        let h = self.header(tx)?;
        let geo = h.geo;
        let mut path = Path::new();
        let mut leaf = descend::<K, _>(tx, &h, k, Some(&mut path))?;
        let fp = fingerprint(K::ref_bytes(k));
        let Some(i) = leaf.find_in::<K, _>(tx, &geo, k, fp)? else {
            return Ok(None);
        };
        let val_slot = leaf.val_slot_in::<V, _>(tx, &geo, i)?;
        let old = V::load(tx, &val_slot)?;
        let key_slot = match K::INLINE {
            true => None,
            false => Some(leaf.key_slot_in::<K, _>(tx, &geo, i)?),
        };
        let len = (h.len.checked_sub(1))
            .ok_or_else(|| corrupt(WHAT, self.hdr, "entry count 0 with an entry in a leaf"))?;
        let (next, bitmap) = (leaf.next(), leaf.bitmap() & !(1u64 << i));
        leaf.set_words(tx.id(), next, bitmap);
        // A leaf left underfull is rebalanced. Everything it reads and the
        // one thing that takes memory (a share's new separator: a byte
        // string's block) are done before anything is written, so that a
        // pool out of memory (an error that leaves the transaction usable)
        // fails the removal with the tree as it was, never half rebalanced.
        let rebalance = match !path.is_empty() && leaf.entries() < geo.min_leaf() {
            true => {
                let mut full = Raw::load(tx, &geo, leaf.off)?; // all its slots
                full.set_words(tx.id(), next, bitmap);
                let path = load_path(tx, &geo, &path)?;
                Some(self.plan_rebalance(tx, &geo, path, full)?)
            }
            false => None,
        };
        V::release(tx, &val_slot)?;
        if let Some(key_slot) = key_slot {
            K::release(tx, &key_slot)?;
        }
        leaf.write_words(tx, FPS_OFF)?;
        put64(tx, self.hdr + LEN_OFF as u64, len)?;
        if let Some(r) = rebalance {
            self.rebalance_leaf(tx, &h, r)?;
        }
        Ok(Some(old))
    }

    /// Works out how the underfull `leaf` (below the last node of `path`)
    /// rebalances: with its right sibling, or the left one for a last
    /// child; their entries in key order; and, when they are too many for
    /// one leaf, the separator between the halves, stored.
    fn plan_rebalance(
        &self,
        tx: &mut Tx<'_>,
        geo: &Geo,
        mut path: Vec<(Raw, usize)>,
        leaf: Raw,
    ) -> Result<Rebalance<K>> {
        let (parent, i) = path.pop().expect("a leaf below the root has a parent");
        let (keys, kids) = parent.decode_inner::<K>(geo);
        let (sep, left, right) = if i < keys.len() {
            (i, leaf, Raw::load(tx, geo, kids[i + 1])?)
        } else if i > 0 {
            (i - 1, Raw::load(tx, geo, kids[i - 1])?, leaf)
        } else {
            return Err(corrupt(WHAT, parent.off, "inner node without keys"));
        };
        if !left.is_leaf() || !right.is_leaf() {
            return Err(corrupt(WHAT, parent.off, "a leaf's sibling is not a leaf"));
        }
        let ls = left.sorted::<K, _>(tx, geo)?;
        let rs = right.sorted::<K, _>(tx, geo)?;
        let n = ls.len() + rs.len();
        let shared = match n > geo.fanout {
            true => {
                let in_order: Vec<&K> = ls.iter().chain(&rs).map(|(k, _)| k).collect();
                let new = K::separator(in_order[n / 2 - 1].borrowed(), in_order[n / 2].borrowed());
                Some(K::store(tx, new.borrowed())?)
            }
            false => None,
        };
        Ok(Rebalance {
            path,
            parent,
            keys,
            kids,
            sep,
            left,
            right,
            ls,
            rs,
            shared,
        })
    }

    /// `leaf` underflowed: merges it with a sibling under the same parent
    /// (the right one of the pair is freed) or shares their entries evenly,
    /// as [`plan_rebalance`](Self::plan_rebalance) worked out.
    fn rebalance_leaf(&self, tx: &mut Tx<'_>, h: &Header, r: Rebalance<K>) -> Result<()> {
        let geo = &h.geo;
        let id = tx.id();
        let Rebalance {
            path,
            parent,
            mut keys,
            mut kids,
            sep,
            left,
            right,
            ls,
            rs,
            shared,
        } = r;
        // Entries move with their slots' bytes, in key order.
        let raw: Vec<(&[u8], u8)> = (ls.iter().map(|&(_, i)| left.raw_entry(geo, i)))
            .chain(rs.iter().map(|&(_, i)| right.raw_entry(geo, i)))
            .collect();
        let Some(shared) = shared else {
            store_leaf(tx, geo, left.off, id, right.next(), &raw)?;
            tx.free(PPtr::<u8>::from_offset(right.off))?;
            K::release(tx, &keys[sep])?;
            keys.remove(sep);
            kids.remove(sep + 1);
            return self.shrink_inner(tx, h, path, parent.off, keys, kids, sep);
        };
        let half = raw.len() / 2;
        store_leaf(tx, geo, left.off, id, right.off, &raw[..half])?;
        store_leaf(tx, geo, right.off, id, right.next(), &raw[half..])?;
        K::release(tx, &keys[sep])?;
        keys[sep] = shared;
        store_inner(tx, geo, parent.off, id, &keys, &kids, sep)
    }

    /// Writes the inner node at `off`, which lost the key at `from`: as it
    /// is if it keeps enough keys (or is the root), else merged with or
    /// sharing keys with a sibling through the parent's separator, and so
    /// on up. A root left without keys hands the root to its one child.
    #[allow(clippy::too_many_arguments)]
    fn shrink_inner(
        &self,
        tx: &mut Tx<'_>,
        h: &Header,
        mut path: Vec<(Raw, usize)>,
        off: u64,
        keys: Vec<K::Slot>,
        kids: Vec<u64>,
        from: usize,
    ) -> Result<()> {
        let geo = &h.geo;
        let id = tx.id();
        let Some((gp, gi)) = path.pop() else {
            if keys.is_empty() {
                put64(tx, self.hdr + ROOT_OFF as u64, kids[0])?;
                return Ok(tx.free(PPtr::<u8>::from_offset(off))?);
            }
            return store_inner(tx, geo, off, id, &keys, &kids, from);
        };
        if keys.len() >= geo.min_inner() {
            return store_inner(tx, geo, off, id, &keys, &kids, from);
        }
        let (mut gkeys, mut gkids) = gp.decode_inner::<K>(geo);
        // (separator index in the parent, left node, right node)
        let (sep, (loff, mut lkeys, mut lkids), (roff, rkeys, rkids)) = if gi < gkeys.len() {
            let r = Raw::load(tx, geo, gkids[gi + 1])?;
            let (rk, rc) = self.inner_of(&r, geo)?;
            (gi, (off, keys, kids), (r.off, rk, rc))
        } else if gi > 0 {
            let l = Raw::load(tx, geo, gkids[gi - 1])?;
            let (lk, lc) = self.inner_of(&l, geo)?;
            (gi - 1, (l.off, lk, lc), (off, keys, kids))
        } else {
            return Err(corrupt(WHAT, gp.off, "inner node without keys"));
        };
        let pulled = gkeys[sep];
        if lkeys.len() + rkeys.len() < geo.fanout {
            // The left node's bytes from here on change; when it is this
            // node, its own change at `from` too.
            let from = if loff == off {
                from.min(lkeys.len())
            } else {
                lkeys.len()
            };
            lkeys.push(pulled);
            lkeys.extend(rkeys);
            lkids.extend(rkids);
            store_inner(tx, geo, loff, id, &lkeys, &lkids, from)?;
            tx.free(PPtr::<u8>::from_offset(roff))?;
            gkeys.remove(sep);
            gkids.remove(sep + 1);
            return self.shrink_inner(tx, h, path, gp.off, gkeys, gkids, sep);
        }
        // Share: all keys and the separator, the middle one goes up.
        let mut all = lkeys;
        all.push(pulled);
        all.extend(rkeys);
        let mut all_kids = lkids;
        all_kids.extend(rkids);
        let mid = all.len() / 2;
        let right_keys = all.split_off(mid + 1);
        let right_kids = all_kids.split_off(mid + 1);
        gkeys[sep] = all.pop().expect("the middle key");
        store_inner(tx, geo, loff, id, &all, &all_kids, 0)?;
        store_inner(tx, geo, roff, id, &right_keys, &right_kids, 0)?;
        store_inner(tx, geo, gp.off, id, &gkeys, &gkids, sep)
    }

    #[allow(clippy::type_complexity)]
    fn inner_of(&self, n: &Raw, geo: &super::node::Geo) -> Result<(Vec<K::Slot>, Vec<u64>)> {
        if n.is_leaf() {
            return Err(corrupt(WHAT, n.off, "an inner node's sibling is a leaf"));
        }
        Ok(n.decode_inner::<K>(geo))
    }

    /// Removes every entry: frees every node but the first leaf, which is
    /// emptied, in `tx`. It allocates nothing, so it frees the space of a
    /// map that filled the pool; its log holds a free per block, so in a
    /// pool whose log cannot grow either (no free chunk) a large map may
    /// need to lose entries in smaller transactions first
    /// ([`Error::Pool`](crate::Error::Pool)`(LogFull)` says so).
    pub fn clear(&self, tx: &mut Tx<'_>) -> Result<()> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        let blocks = self.blocks_in(tx)?;
        let h = self.header(tx)?;
        // The first leaf stays, emptied: a new one would need memory the
        // pool may not have (blocks freed here are reusable only after the
        // commit).
        let leaf = h.first;
        if !blocks[1..].contains(&leaf) {
            return Err(corrupt(WHAT, self.hdr, "the first leaf is not in the tree"));
        }
        for &off in blocks[1..].iter().filter(|&&off| off != leaf) {
            tx.free(PPtr::<u8>::from_offset(off))?;
        }
        store_leaf(tx, &h.geo, leaf, tx.id(), 0, &[])?;
        let mut w = [0u8; FIRST_OFF + 8 - LEN_OFF];
        w[ROOT_OFF - LEN_OFF..FIRST_OFF - LEN_OFF].copy_from_slice(&leaf.to_le_bytes());
        w[FIRST_OFF - LEN_OFF..].copy_from_slice(&leaf.to_le_bytes());
        Ok(tx.write_bytes(self.hdr + LEN_OFF as u64, &w)?)
    }

    /// Keeps only the entries for which `keep` returns true; removes the
    /// others in `tx`. Reads every entry first (their keys are held in
    /// memory), then removes. Whole or not at all: a removal refused for
    /// space (a byte-string key's share of entries needs a separator
    /// block; OutOfMemory leaves the transaction usable) undoes the
    /// removals before it, so a program that goes on commits the map as
    /// it was.
    pub fn retain(&self, tx: &mut Tx<'_>, mut keep: impl FnMut(&K, &V) -> bool) -> Result<()> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        let mut doomed = Vec::new();
        for e in self.iter_tx(tx)? {
            let (k, v) = e?;
            if !keep(&k, &v) {
                doomed.push(k);
            }
        }
        // Only a byte-string key's removal allocates (a `Pod` separator
        // is stored in its slot): only then can one fail after others.
        let undo = match !K::INLINE && doomed.len() > 1 {
            true => Some(tx.savepoint()?),
            false => None,
        };
        for k in doomed {
            if let Err(e) = self.remove(tx, k.borrowed()) {
                if let Some(sp) = undo {
                    tx.rollback_to(sp)?;
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Removes and returns the entry of the smallest key.
    pub fn pop_first(&self, tx: &mut Tx<'_>) -> Result<Option<(K, V)>> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        let Some((k, v)) = self.iter_tx(tx)?.next().transpose()? else {
            return Ok(None);
        };
        self.remove(tx, k.borrowed())?;
        Ok(Some((k, v)))
    }

    /// Removes and returns the entry of the largest key.
    pub fn pop_last(&self, tx: &mut Tx<'_>) -> Result<Option<(K, V)>> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        let Some((k, v)) = self.iter_tx(tx)?.next_back().transpose()? else {
            return Ok(None);
        };
        self.remove(tx, k.borrowed())?;
        Ok(Some((k, v)))
    }
}

/// A leaf's rebalance as [`BTreeMap::plan_rebalance`] works it out, before
/// anything is written.
struct Rebalance<K: Storable> {
    /// The ancestors above the parent.
    path: Vec<(Raw, usize)>,
    parent: Raw,
    keys: Vec<K::Slot>,
    kids: Vec<u64>,
    /// The parent's separator between the pair.
    sep: usize,
    left: Raw,
    right: Raw,
    /// Each leaf's entries in key order.
    ls: Vec<(K, usize)>,
    rs: Vec<(K, usize)>,
    /// For a share (too many entries for one leaf), the new separator
    /// between the halves, stored; `None`: the pair merges.
    shared: Option<K::Slot>,
}
