//! B+-tree nodes on media, and their in-memory decoding.
//!
//! Every node is one block of [`Geo::size`] bytes (leaf and inner alike, so
//! a block's role could change without reallocation), little-endian:
//!
//! ```text
//! 0   kind   u32   1 = leaf, 2 = inner
//! 4   count  u32   keys in use, 0..=fan-out
//! 8   stamp  u64   id of the last transaction that changed the node outside
//!                  a nested top action (see the module docs of `btree`)
//! 16  next   u64   leaf: offset of the next leaf (0: last); inner: 0
//! 24  keys   fan-out × size_of::<K>()
//! ..  leaf:  fan-out × size_of::<V>()       values
//!     inner: (fan-out + 1) × u64 (LE)       child offsets
//! ```
//!
//! Bytes past `count` (keys, values, children) are unspecified. Keys and
//! values are their in-memory bytes, read back unaligned.

use bytemuck::Pod;
use rewind::Tx;

use crate::error::{corrupt, Result};
use crate::mem::{le32, le64, Mem};

pub(super) const KIND_LEAF: u32 = 1;
pub(super) const KIND_INNER: u32 = 2;
pub(super) const KIND_OFF: usize = 0;
pub(super) const COUNT_OFF: usize = KIND_OFF + 4;
pub(super) const STAMP_OFF: usize = COUNT_OFF + 4;
pub(super) const NEXT_OFF: usize = STAMP_OFF + 8;
pub(super) const KEYS_OFF: usize = NEXT_OFF + 8;

const WHAT: &str = "B+-tree node";

/// A tree's node geometry: fan-out and the key and value sizes.
#[derive(Clone, Copy, Debug)]
pub(super) struct Geo {
    pub fanout: usize,
    pub ks: usize,
    pub vs: usize,
}

impl Geo {
    /// Offset of the values (leaf) or children (inner) in a node.
    fn slots_off(&self) -> usize {
        KEYS_OFF + self.fanout * self.ks
    }

    /// Bytes of every node of this tree.
    pub fn size(&self) -> usize {
        self.slots_off() + (self.fanout * self.vs).max((self.fanout + 1) * 8)
    }
}

/// A node decoded: `vals` for a leaf, `kids` (`keys.len() + 1` of them)
/// for an inner node.
#[derive(Debug)]
pub(super) struct Node<K, V> {
    pub off: u64,
    pub leaf: bool,
    pub stamp: u64,
    pub next: u64,
    pub keys: Vec<K>,
    pub vals: Vec<V>,
    pub kids: Vec<u64>,
}

impl<K: Pod, V: Pod> Node<K, V> {
    /// An empty leaf at `off`.
    pub fn leaf(off: u64, stamp: u64) -> Self {
        Node {
            off,
            leaf: true,
            stamp,
            next: 0,
            keys: Vec::new(),
            vals: Vec::new(),
            kids: Vec::new(),
        }
    }

    /// Reads and decodes the node at `off`.
    pub fn load<M: Mem>(m: &mut M, geo: &Geo, off: u64) -> Result<Self> {
        if off == 0 {
            return Err(corrupt(WHAT, off, "null child or root pointer"));
        }
        let mut b = vec![0u8; geo.size()];
        m.read_at(off, &mut b)?;
        let leaf = match le32(&b, KIND_OFF) {
            KIND_LEAF => true,
            KIND_INNER => false,
            _ => return Err(corrupt(WHAT, off, "unknown node kind")),
        };
        let n = le32(&b, COUNT_OFF) as usize;
        if n > geo.fanout {
            return Err(corrupt(WHAT, off, "key count above the fan-out"));
        }
        let keys = (0..n)
            .map(|i| bytemuck::pod_read_unaligned(&b[KEYS_OFF + i * geo.ks..][..geo.ks]))
            .collect();
        let slots = geo.slots_off();
        let (vals, kids) = if leaf {
            let vals = (0..n)
                .map(|i| bytemuck::pod_read_unaligned(&b[slots + i * geo.vs..][..geo.vs]))
                .collect();
            (vals, Vec::new())
        } else {
            (
                Vec::new(),
                (0..=n).map(|i| le64(&b, slots + i * 8)).collect(),
            )
        };
        Ok(Node {
            off,
            leaf,
            stamp: le64(&b, STAMP_OFF),
            next: le64(&b, NEXT_OFF),
            keys,
            vals,
            kids,
        })
    }

    /// Writes the node's header and its keys and values (or children)
    /// from index `from` on: what an insert or removal at `from` shifted.
    pub fn store(&self, tx: &mut Tx<'_>, geo: &Geo, from: usize) -> Result<()> {
        let n = self.keys.len();
        let mut h = [0u8; KEYS_OFF];
        let kind = if self.leaf { KIND_LEAF } else { KIND_INNER };
        h[KIND_OFF..COUNT_OFF].copy_from_slice(&kind.to_le_bytes());
        h[COUNT_OFF..STAMP_OFF].copy_from_slice(&(n as u32).to_le_bytes());
        h[STAMP_OFF..NEXT_OFF].copy_from_slice(&self.stamp.to_le_bytes());
        h[NEXT_OFF..KEYS_OFF].copy_from_slice(&self.next.to_le_bytes());
        tx.write_bytes(self.off, &h)?;
        if from < n {
            let keys: &[K] = &self.keys[from..];
            let at = self.off + (KEYS_OFF + from * geo.ks) as u64;
            tx.write_bytes(at, bytemuck::cast_slice(keys))?;
        }
        let slots = self.off + geo.slots_off() as u64;
        if self.leaf && from < n {
            let vals: &[V] = &self.vals[from..];
            tx.write_bytes(slots + (from * geo.vs) as u64, bytemuck::cast_slice(vals))?;
        } else if !self.leaf && from <= n {
            let kids: std::vec::Vec<u8> = self.kids[from..]
                .iter()
                .flat_map(|k| k.to_le_bytes())
                .collect();
            tx.write_bytes(slots + (from * 8) as u64, &kids)?;
        }
        Ok(())
    }
}
