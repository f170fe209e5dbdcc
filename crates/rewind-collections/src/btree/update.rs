//! Inserts: one slot and one range of the leaf's first line, or a split
//! (part of the transaction under redo; under undo a nested top action
//! when the nodes are clean; see the module docs of `btree`).

use rewind::{PPtr, Policy, Tx};

use super::node::{fingerprint, store_inner, store_leaf, Raw, FPS_OFF};
use super::{descend, load_path, BTreeMap, Header, Path, LEN_OFF, MAX_DEPTH, ROOT_OFF, WHAT};
use crate::error::{corrupt, Error, Result};
use crate::mem::put64;
use crate::storable::Storable;

impl<K: Storable, V: Storable> BTreeMap<K, V>
where
    K::Ref: Ord,
{
    /// Sets `k` to `v`; returns the value it replaced.
    ///
    /// A new key takes a free slot of its leaf: the slot and the leaf's
    /// bitmap and fingerprint are written, nothing moves. A full leaf is
    /// split first: under redo as part of the transaction (an abort
    /// discards it too), under undo in a nested top action that stays if
    /// the transaction rolls back (see the module docs). Fails, leaving the map as it was,
    /// when the pool is out of memory for a new node.
    ///
    /// A byte-string key or value longer than 36 bytes is stored in a
    /// block of its own, allocated here; the block of a value replaced is
    /// freed.
    pub fn insert(&self, tx: &mut Tx<'_>, k: K, v: V) -> Result<Option<V>> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        let id = tx.id();
        let k = k.borrowed();
        let kb = K::ref_bytes(k);
        let fp = fingerprint(kb);
        // At most one split per level, then the key's leaf has room.
        for _ in 0..=MAX_DEPTH {
            let h = self.header(tx)?;
            let mut path = Path::new();
            let mut leaf = descend::<K, _>(tx, &h, k, Some(&mut path))?;
            let geo = h.geo;
            if let Some(i) = leaf.find_in::<K, _>(tx, &geo, k, fp)? {
                let old_slot = leaf.val_slot_in::<V, _>(tx, &geo, i)?;
                let old = V::load(tx, &old_slot)?;
                let new_slot = V::store(tx, v.borrowed())?;
                let at = leaf.off + (geo.slot(i) + geo.ks) as u64;
                tx.write_bytes(at, bytemuck::bytes_of(&new_slot))?;
                V::release(tx, &old_slot)?;
                if leaf.stamp() != id {
                    let (next, bitmap) = (leaf.next(), leaf.bitmap());
                    leaf.set_words(id, next, bitmap);
                    leaf.write_words(tx, FPS_OFF)?;
                }
                return Ok(Some(old));
            }
            let free = !leaf.bitmap() & geo.full();
            if free != 0 {
                let i = free.trailing_zeros() as usize;
                let ks = K::store(tx, k)?;
                // A value refused for space (OutOfMemory leaves the
                // transaction usable) takes the key's block back with it.
                let vs = match V::store(tx, v.borrowed()) {
                    Ok(vs) => vs,
                    Err(e) => {
                        K::release(tx, &ks)?;
                        return Err(e);
                    }
                };
                leaf.put_slot::<K, V>(tx, &geo, i, kb, &ks, &vs)?;
                let (next, bitmap) = (leaf.next(), leaf.bitmap() | 1 << i);
                leaf.set_words(id, next, bitmap);
                leaf.write_words(tx, FPS_OFF + i + 1)?;
                let len = (h.len.checked_add(1))
                    .ok_or_else(|| corrupt(WHAT, self.hdr, "length at its maximum"))?;
                put64(tx, self.hdr + LEN_OFF as u64, len)?;
                return Ok(None);
            }
            let leaf = Raw::load(tx, &geo, leaf.off)?; // all its slots
            let path = load_path(tx, &geo, &path)?;
            self.split(tx, &h, path, leaf)?;
        }
        Err(corrupt(
            WHAT,
            self.hdr,
            "a full leaf stays full after splitting",
        ))
    }

    /// Changes the value of `k` in place: `f` gets it and may change it.
    /// Returns what `f` returned, or `None` (without calling `f`) when `k`
    /// has no value.
    ///
    /// One descent, and only the bytes `f` changed are written (one range,
    /// from the first changed byte of the value's slot to the last): a
    /// counter of a large row costs a write of its word, where `get_tx`
    /// then `insert` descend twice and write the whole row. A byte-string
    /// value that `f` changes is stored again (in a new block when it is
    /// out of line, the old one freed), as `insert` would; one that `f`
    /// leaves as it was is not touched (no block allocated, nothing
    /// written, so it succeeds in a full pool).
    pub fn update<R>(
        &self,
        tx: &mut Tx<'_>,
        k: &K::Ref,
        f: impl FnOnce(&mut V) -> R,
    ) -> Result<Option<R>> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        let id = tx.id();
        let h = self.header(tx)?;
        let mut leaf = descend::<K, _>(tx, &h, k, None)?;
        let geo = h.geo;
        let Some(i) = leaf.find_in::<K, _>(tx, &geo, k, fingerprint(K::ref_bytes(k)))? else {
            return Ok(None);
        };
        let old_slot = leaf.val_slot_in::<V, _>(tx, &geo, i)?;
        let mut v = V::load(tx, &old_slot)?;
        // A byte string kept out of line would be stored again in a new
        // block even if `f` left it as it was (its slot names the block):
        // its bytes are compared first, and an unchanged one is not
        // touched (no allocation, no write). A slot that holds the whole
        // value is compared below.
        let was_bytes = (!V::INLINE && V::block(&old_slot).is_some())
            .then(|| V::ref_bytes(v.borrowed()).to_vec());
        let r = f(&mut v);
        if was_bytes.is_some_and(|b| b == V::ref_bytes(v.borrowed())) {
            return Ok(Some(r));
        }
        let new_slot = V::store(tx, v.borrowed())?;
        let (was, now) = (bytemuck::bytes_of(&old_slot), bytemuck::bytes_of(&new_slot));
        let differs = |(a, b): (&u8, &u8)| a != b;
        let (Some(first), Some(from_end)) = (
            was.iter().zip(now).position(differs),
            was.iter().rev().zip(now.iter().rev()).position(differs),
        ) else {
            // The same slot (an unchanged value, or one stored inline the
            // same): nothing to write, nothing to free.
            return Ok(Some(r));
        };
        let at = leaf.off + (geo.slot(i) + geo.ks + first) as u64;
        tx.write_bytes(at, &now[first..now.len() - from_end])?;
        V::release(tx, &old_slot)?;
        if leaf.stamp() != id {
            let (next, bitmap) = (leaf.next(), leaf.bitmap());
            leaf.set_words(id, next, bitmap);
            leaf.write_words(tx, FPS_OFF)?;
        }
        Ok(Some(r))
    }

    /// Splits the full `leaf` (and its full ancestors on `path`). Under the
    /// redo policies, as part of the transaction: its commit group carries
    /// the split, an abort discards it with the insert, and the map's
    /// exclusive lock keeps other transactions out until then. Under the
    /// undo policies, as a nested top action if none of the nodes it
    /// writes has uncommitted changes of this transaction, else as part of
    /// the transaction.
    fn split(&self, tx: &mut Tx<'_>, h: &Header, path: Vec<(Raw, usize)>, leaf: Raw) -> Result<()> {
        let id = tx.id();
        if matches!(tx.policy(), Policy::Redo | Policy::RedoAsync) {
            return self.split_path(tx, h, path, leaf, Some(id));
        }
        let mut clean = leaf.stamp() != id;
        for (n, _) in path.iter().rev() {
            clean &= n.stamp() != id;
            if n.count() < h.geo.fanout {
                break; // takes the separator, splits no further
            }
        }
        if clean {
            tx.nested_top_action(|tx| self.split_path(tx, h, path, leaf, None))
        } else {
            self.split_path(tx, h, path, leaf, Some(id))
        }
    }

    /// Splits `left` and, bottom up, every ancestor the separator overflows;
    /// a new root if the old one splits. `stamp`: the id to mark written
    /// nodes with (`None` in a nested top action: their stamps stay).
    fn split_path(
        &self,
        tx: &mut Tx<'_>,
        h: &Header,
        mut path: Vec<(Raw, usize)>,
        mut left: Raw,
        stamp: Option<u64>,
    ) -> Result<()> {
        let geo = &h.geo;
        let size = geo.size() as u64;
        // The upper half of the entries moves to a new leaf; the lower
        // half stays in its slots, the others' bits are cleared.
        // Entries move with their slots' bytes (an out-of-line block goes
        // with its slot); the separator is a key of its own, the shortest
        // between the halves.
        let sorted = left.sorted::<K, _>(tx, geo)?;
        let mid = sorted.len() / 2;
        if mid == 0 {
            return Err(corrupt(
                WHAT,
                left.off,
                "a full leaf with fewer than two entries",
            ));
        }
        let moved: Vec<(&[u8], u8)> = sorted[mid..]
            .iter()
            .map(|&(_, i)| left.raw_entry(geo, i))
            .collect();
        let sep = K::separator(sorted[mid - 1].0.borrowed(), sorted[mid].0.borrowed());
        // Every block the split takes (the new leaf, one node per full
        // ancestor, a new root if they all are, the separator's bytes) is
        // allocated before anything is written: a pool out of memory (an
        // error that leaves the transaction usable, and a program may
        // commit after it) fails the insert with the tree as it was and
        // nothing leaked, never half split.
        let splits = (path.iter().rev())
            .take_while(|(n, _)| n.count() >= geo.fanout)
            .count();
        let nodes = 1 + splits + usize::from(splits == path.len());
        let mut fresh = Vec::with_capacity(nodes);
        let stored = (0..nodes)
            .try_for_each(|_| tx.alloc_bytes(size).map(|b| fresh.push(b)))
            .map_err(Error::from)
            .and_then(|()| K::store(tx, sep.borrowed()));
        let mut sep = match stored {
            Ok(sep) => sep,
            Err(e) => {
                for &b in &fresh {
                    tx.free(PPtr::<u8>::from_offset(b))?;
                }
                return Err(e);
            }
        };
        let mut fresh = fresh.into_iter();
        let mut node = || {
            fresh
                .next()
                .ok_or_else(|| corrupt(WHAT, h.root, "a split reaching past the nodes it counted"))
        };
        let right = node()?;
        let new_stamp = stamp.unwrap_or(0);
        store_leaf(tx, geo, right, new_stamp, left.next(), &moved)?;
        let kept = sorted[mid..]
            .iter()
            .fold(left.bitmap(), |b, &(_, i)| b & !(1u64 << i));
        left.set_words(stamp.unwrap_or(left.stamp()), right, kept);
        left.write_words(tx, FPS_OFF)?;
        let mut right_off = right;
        while let Some((parent, i)) = path.pop() {
            let (mut keys, mut kids) = parent.decode_inner::<K>(geo);
            keys.insert(i, sep);
            kids.insert(i + 1, right_off);
            let pstamp = stamp.unwrap_or(parent.stamp());
            if keys.len() <= geo.fanout {
                return store_inner(tx, geo, parent.off, pstamp, &keys, &kids, i);
            }
            // fan-out + 1 keys: the middle one moves up.
            let mid = keys.len() / 2;
            let rkeys = keys.split_off(mid + 1);
            let rkids = kids.split_off(mid + 1);
            sep = keys.pop().expect("the middle key");
            let r = node()?;
            store_inner(tx, geo, r, new_stamp, &rkeys, &rkids, 0)?;
            store_inner(tx, geo, parent.off, pstamp, &keys, &kids, i.min(keys.len()))?;
            right_off = r;
        }
        let root = node()?;
        store_inner(tx, geo, root, new_stamp, &[sep], &[h.root, right_off], 0)?;
        put64(tx, self.hdr + ROOT_OFF as u64, root)
    }
}
