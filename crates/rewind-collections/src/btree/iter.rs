//! Ordered scans: [`BTreeMap::range`] and [`BTreeMap::iter`] descend to
//! the first leaf in range, then follow the leaf chain, reading one leaf at
//! a time.

use std::ops::{Bound, RangeBounds};

use bytemuck::Pod;
use rewind::Pool;

use super::node::{Geo, Node};
use super::{descend, BTreeMap};
use crate::error::Result;

impl<K: Pod + Ord, V: Pod> BTreeMap<K, V> {
    /// The entries with keys in `range`, in key order (committed state).
    /// Nodes are read as the iterator goes; a read error ends it after
    /// yielding the error.
    pub fn range<'p>(&self, pool: &'p Pool, range: impl RangeBounds<K>) -> Result<Iter<'p, K, V>> {
        let mut m = pool;
        let h = self.header(&mut m)?;
        let (leaf, pos) = match range.start_bound() {
            Bound::Unbounded => (Node::load(&mut m, &h.geo, h.first)?, 0),
            Bound::Included(s) => {
                let leaf = descend(&mut m, &h, s, None)?;
                let pos = leaf.keys.partition_point(|k| k < s);
                (leaf, pos)
            }
            Bound::Excluded(s) => {
                let leaf = descend(&mut m, &h, s, None)?;
                let pos = leaf.keys.partition_point(|k| k <= s);
                (leaf, pos)
            }
        };
        Ok(Iter {
            pool,
            geo: h.geo,
            leaf: Some(leaf),
            pos,
            end: range.end_bound().cloned(),
        })
    }

    /// Every entry, in key order (committed state).
    pub fn iter<'p>(&self, pool: &'p Pool) -> Result<Iter<'p, K, V>> {
        self.range(pool, ..)
    }
}

/// An iterator over a [`BTreeMap`]'s entries in key order, reading leaves
/// as it goes (from [`BTreeMap::range`] and [`BTreeMap::iter`]).
pub struct Iter<'p, K, V> {
    pool: &'p Pool,
    geo: Geo,
    leaf: Option<Node<K, V>>,
    pos: usize,
    end: Bound<K>,
}

impl<K: Pod + Ord, V: Pod> Iterator for Iter<'_, K, V> {
    type Item = Result<(K, V)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let leaf = self.leaf.as_ref()?;
            if let Some(&k) = leaf.keys.get(self.pos) {
                let past = match &self.end {
                    Bound::Included(e) => k > *e,
                    Bound::Excluded(e) => k >= *e,
                    Bound::Unbounded => false,
                };
                if past {
                    self.leaf = None;
                    return None;
                }
                self.pos += 1;
                return Some(Ok((k, leaf.vals[self.pos - 1])));
            }
            if leaf.next == 0 {
                self.leaf = None;
                return None;
            }
            match Node::load(&mut { self.pool }, &self.geo, leaf.next) {
                Ok(n) => (self.leaf, self.pos) = (Some(n), 0),
                Err(e) => {
                    self.leaf = None;
                    return Some(Err(e));
                }
            }
        }
    }
}
