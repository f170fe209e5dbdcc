//! Changes to the tree: insert (with splits, as nested top actions when
//! the nodes are clean; see the module docs of `btree`) and remove.

use bytemuck::Pod;
use rewind::Tx;

use super::node::Node;
use super::{descend, BTreeMap, Header, LEN_OFF, MAX_DEPTH, ROOT_OFF, WHAT};
use crate::error::{corrupt, Result};
use crate::mem::put64;

impl<K: Pod + Ord, V: Pod> BTreeMap<K, V> {
    /// Sets `k` to `v`; returns the value it replaced.
    ///
    /// May split nodes in nested top actions, which stay if the
    /// transaction rolls back (see the module docs). Fails, leaving the
    /// map as it was, when the pool is out of memory for a new node.
    pub fn insert(&self, tx: &mut Tx<'_>, k: K, v: V) -> Result<Option<V>> {
        let id = tx.id();
        // At most one split per level, then the key's leaf has room.
        for _ in 0..=MAX_DEPTH {
            let h = self.header(tx)?;
            let mut path = Vec::new();
            let mut leaf = descend(tx, &h, &k, Some(&mut path))?;
            match leaf.keys.binary_search(&k) {
                Ok(i) => {
                    let old = std::mem::replace(&mut leaf.vals[i], v);
                    leaf.stamp = id;
                    leaf.store(tx, &h.geo, i)?;
                    return Ok(Some(old));
                }
                Err(i) if leaf.keys.len() < h.geo.fanout => {
                    leaf.keys.insert(i, k);
                    leaf.vals.insert(i, v);
                    leaf.stamp = id;
                    leaf.store(tx, &h.geo, i)?;
                    let len = (h.len.checked_add(1))
                        .ok_or_else(|| corrupt(WHAT, self.hdr, "length at its maximum"))?;
                    put64(tx, self.hdr + LEN_OFF as u64, len)?;
                    return Ok(None);
                }
                Err(_) => self.split(tx, &h, path, leaf)?,
            }
        }
        Err(crate::error::corrupt(
            WHAT,
            self.hdr,
            "a full leaf stays full after splitting",
        ))
    }

    /// Splits the full `leaf` (and its full ancestors on `path`): as a
    /// nested top action if none of the nodes it writes has uncommitted
    /// changes of this transaction, else as part of the transaction.
    fn split(
        &self,
        tx: &mut Tx<'_>,
        h: &Header,
        path: Vec<(Node<K, V>, usize)>,
        leaf: Node<K, V>,
    ) -> Result<()> {
        let id = tx.id();
        let mut clean = leaf.stamp != id;
        for (n, _) in path.iter().rev() {
            clean &= n.stamp != id;
            if n.keys.len() < h.geo.fanout {
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
        mut path: Vec<(Node<K, V>, usize)>,
        mut left: Node<K, V>,
        stamp: Option<u64>,
    ) -> Result<()> {
        let geo = &h.geo;
        let size = geo.size() as u64;
        let mid = left.keys.len() / 2;
        let mut right = Node::leaf(tx.alloc_bytes(size)?, stamp.unwrap_or(0));
        right.keys = left.keys.split_off(mid);
        right.vals = left.vals.split_off(mid);
        right.next = left.next;
        left.next = right.off;
        left.stamp = stamp.unwrap_or(left.stamp);
        right.store(tx, geo, 0)?;
        left.store(tx, geo, left.keys.len())?; // header: count and next
        let mut sep = right.keys[0];
        let mut right_off = right.off;
        while let Some((mut parent, i)) = path.pop() {
            parent.keys.insert(i, sep);
            parent.kids.insert(i + 1, right_off);
            parent.stamp = stamp.unwrap_or(parent.stamp);
            if parent.keys.len() <= geo.fanout {
                return parent.store(tx, geo, i);
            }
            // fan-out + 1 keys: the middle one moves up.
            let mid = parent.keys.len() / 2;
            let mut right = Node::<K, V>::leaf(tx.alloc_bytes(size)?, stamp.unwrap_or(0));
            right.leaf = false;
            right.keys = parent.keys.split_off(mid + 1);
            right.kids = parent.kids.split_off(mid + 1);
            sep = parent.keys.pop().expect("mid key");
            right.store(tx, geo, 0)?;
            parent.store(tx, geo, i.min(parent.keys.len()))?;
            right_off = right.off;
        }
        let mut root = Node::<K, V>::leaf(tx.alloc_bytes(size)?, stamp.unwrap_or(0));
        root.leaf = false;
        root.keys = vec![sep];
        root.kids = vec![h.root, right_off];
        root.store(tx, geo, 0)?;
        put64(tx, self.hdr + ROOT_OFF as u64, root.off)
    }

    /// Removes `k`; returns its value. Leaves are not merged (module docs).
    pub fn remove(&self, tx: &mut Tx<'_>, k: &K) -> Result<Option<V>> {
        let h = self.header(tx)?;
        let mut leaf = descend(tx, &h, k, None)?;
        let Ok(i) = leaf.keys.binary_search(k) else {
            return Ok(None);
        };
        leaf.keys.remove(i);
        let old = leaf.vals.remove(i);
        leaf.stamp = tx.id();
        leaf.store(tx, &h.geo, i)?;
        let len = (h.len.checked_sub(1))
            .ok_or_else(|| corrupt(WHAT, self.hdr, "entry count 0 with an entry in a leaf"))?;
        put64(tx, self.hdr + LEN_OFF as u64, len)?;
        Ok(Some(old))
    }
}
