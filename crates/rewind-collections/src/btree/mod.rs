//! A persistent B+-tree: an ordered map from `K` to `V`.
//!
//! Keys and values live in the leaves; inner nodes hold separators and
//! child offsets (child `i` holds the keys `k` with `sep[i-1] <= k <
//! sep[i]`), and the leaves are linked left to right for ordered scans.
//! Every node has the same fan-out (default [`DEFAULT_FANOUT`] keys),
//! chosen when the tree is created. Layouts are in `node.rs` and
//! `docs/collections.md`.
//!
//! **Splits are nested top actions** (MARS; ARIES's "structure
//! modification operations"): when an insert meets a full leaf, the leaf,
//! and each full ancestor, is split in a [`Tx::nested_top_action`], so the
//! split stays even if the insert's transaction rolls back. An aborted
//! insert may therefore leave a split behind: the tree holds exactly the
//! entries it held before, in a structurally valid tree with one more,
//! emptier, node. Space taken by such splits is kept by the tree.
//!
//! rewind undoes physically (it restores the bytes a record logged), so a
//! nested top action must not rewrite bytes that its enclosing transaction
//! changed and may still undo: undoing them would put back a pre-split
//! node over the split. Every node therefore records in its `stamp` the id
//! of the last transaction that changed it outside a nested top action. A
//! split runs as a nested top action only when none of the nodes it writes
//! carries the running transaction's stamp; otherwise it runs as ordinary
//! logged writes of the transaction, and rolls back with it. (A stale stamp
//! equal to a later transaction's id only costs that transaction the
//! nested top action, never correctness.)
//!
//! **Removal** deletes the entry from its leaf and nothing more: leaves are
//! never merged, borrowed from or freed, and separators stay. A leaf may
//! end up empty; inner nodes never lose keys. So after many removals the
//! tree is larger than its entries need, and is reused by later inserts
//! into the same key ranges. Bounds, checked by
//! [`BTreeMap::check_invariants`]: leaves hold 0 to fan-out keys, inner
//! nodes other than the root `fan-out / 2` to fan-out, the root at least 1.

mod check;
mod node;

use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};

use bytemuck::Pod;
use rewind::{PPtr, Pool, Tx};

use crate::error::{corrupt, Error, Result};
use crate::mem::{check_magic, check_size, le32, le64, put64, Mem};
use node::{Geo, Node};

/// Keys per node unless [`BTreeMap::create_with_fanout`] says otherwise.
pub const DEFAULT_FANOUT: usize = 32;
/// The smallest fan-out.
pub const MIN_FANOUT: usize = 4;
/// The largest fan-out.
pub const MAX_FANOUT: usize = 1024;

const WHAT: &str = "B+-tree";
const MAGIC: [u8; 8] = *b"RWBTREE1";
/// Deeper than this is a cycle, not a tree (fan-out 4 and 2^64 entries
/// need 32 levels).
const MAX_DEPTH: usize = 64;

// The header block, little-endian (docs/collections.md).
const MAGIC_OFF: usize = 0;
const KEY_SIZE_OFF: usize = MAGIC_OFF + 8;
const VAL_SIZE_OFF: usize = KEY_SIZE_OFF + 4;
const FANOUT_OFF: usize = VAL_SIZE_OFF + 4;
const RESERVED_OFF: usize = FANOUT_OFF + 4;
const ROOT_OFF: usize = RESERVED_OFF + 4;
const LEN_OFF: usize = ROOT_OFF + 8;
const FIRST_OFF: usize = LEN_OFF + 8;
const HEADER_SIZE: usize = FIRST_OFF + 8;

/// A persistent ordered map: a handle to a B+-tree in a pool.
///
/// The handle is the offset of the tree's header; it is `Copy`, and
/// [`as_ptr`](Self::as_ptr) / [`from_ptr`](Self::from_ptr) store it in and
/// rebuild it from the program's own objects.
///
/// ```
/// use rewind::{Pool, PoolConfig, PPtr};
/// use rewind_collections::BTreeMap;
///
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("map.pool");
/// let pool = Pool::create(&path, "map", 8 << 20, &PoolConfig::default())?;
/// pool.transaction(|tx| {
///     let map = BTreeMap::<u64, u64>::create(tx)?;
///     let root = tx.root::<PPtr<BTreeMap<u64, u64>>>()?;
///     tx.write(root, &map.as_ptr())?; // found again after reopening
///     for k in 0..100 {
///         map.insert(tx, k, k * k)?;
///     }
///     Ok::<_, rewind_collections::Error>(())
/// })?;
/// pool.close()?;
///
/// let pool = Pool::open(&path, "map", &Default::default())?;
/// let map = BTreeMap::<u64, u64>::from_ptr(pool.read(pool.root().unwrap().unwrap())?);
/// assert_eq!(map.get(&pool, &9)?, Some(81));
/// let some: Vec<(u64, u64)> = map.range(&pool, 10..13)?.collect::<Result<_, _>>()?;
/// assert_eq!(some, [(10, 100), (11, 121), (12, 144)]);
/// // An aborted transaction leaves no entry behind.
/// let r = pool.transaction(|tx| {
///     map.remove(tx, &9)?;
///     Err::<(), _>(rewind_collections::Error::from(rewind::Error::Aborted))
/// });
/// assert!(r.is_err());
/// assert_eq!(map.len(&pool)?, 100);
/// map.check_invariants(&pool)?;
/// # Ok::<(), rewind_collections::Error>(())
/// ```
pub struct BTreeMap<K, V> {
    hdr: u64,
    _t: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Clone for BTreeMap<K, V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K, V> Copy for BTreeMap<K, V> {}
impl<K, V> std::fmt::Debug for BTreeMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BTreeMap({:#x})", self.hdr)
    }
}

/// The header decoded.
struct Header {
    geo: Geo,
    root: u64,
    len: u64,
    first: u64,
}

impl<K: Pod + Ord, V: Pod> BTreeMap<K, V> {
    /// Creates an empty map with [`DEFAULT_FANOUT`] keys per node.
    pub fn create(tx: &mut Tx<'_>) -> Result<Self> {
        Self::create_with_fanout(tx, DEFAULT_FANOUT)
    }

    /// Creates an empty map whose nodes hold `fanout` keys
    /// ([`MIN_FANOUT`]..=[`MAX_FANOUT`]).
    pub fn create_with_fanout(tx: &mut Tx<'_>, fanout: usize) -> Result<Self> {
        if !(MIN_FANOUT..=MAX_FANOUT).contains(&fanout) {
            return Err(Error::InvalidArgument {
                what: "B+-tree fan-out",
                value: fanout as u64,
                expected: "4 to 1024 keys per node",
            });
        }
        let geo = Self::geo(fanout);
        let hdr = tx.alloc_bytes(HEADER_SIZE as u64)?;
        let leaf = tx.alloc_bytes(geo.size() as u64)?;
        Node::<K, V>::leaf(leaf, tx.id()).store(tx, &geo, 0)?;
        let mut h = [0u8; HEADER_SIZE];
        h[MAGIC_OFF..KEY_SIZE_OFF].copy_from_slice(&MAGIC);
        h[KEY_SIZE_OFF..VAL_SIZE_OFF].copy_from_slice(&(geo.ks as u32).to_le_bytes());
        h[VAL_SIZE_OFF..FANOUT_OFF].copy_from_slice(&(geo.vs as u32).to_le_bytes());
        h[FANOUT_OFF..RESERVED_OFF].copy_from_slice(&(fanout as u32).to_le_bytes());
        h[ROOT_OFF..LEN_OFF].copy_from_slice(&leaf.to_le_bytes());
        h[FIRST_OFF..HEADER_SIZE].copy_from_slice(&leaf.to_le_bytes());
        tx.write_bytes(hdr, &h)?;
        Ok(Self::from_ptr(PPtr::from_offset(hdr)))
    }

    /// The map whose header `p` points at (from [`as_ptr`](Self::as_ptr)).
    /// Nothing is checked until the first operation, which fails with
    /// [`Error::WrongMagic`] or [`Error::TypeMismatch`] if `p` leads
    /// elsewhere.
    pub fn from_ptr(p: PPtr<Self>) -> Self {
        BTreeMap {
            hdr: p.offset(),
            _t: PhantomData,
        }
    }

    /// The pointer to the map's header, to store in the program's objects.
    pub fn as_ptr(&self) -> PPtr<Self> {
        PPtr::from_offset(self.hdr)
    }

    fn geo(fanout: usize) -> Geo {
        Geo {
            fanout,
            ks: std::mem::size_of::<K>(),
            vs: std::mem::size_of::<V>(),
        }
    }

    fn header<M: Mem>(&self, m: &mut M) -> Result<Header> {
        let mut h = [0u8; HEADER_SIZE];
        m.read_at(self.hdr, &mut h)?;
        check_magic(WHAT, self.hdr, &h, MAGIC)?;
        check_size(
            WHAT,
            self.hdr,
            "key",
            le32(&h, KEY_SIZE_OFF),
            size_of::<K>(),
        )?;
        check_size(
            WHAT,
            self.hdr,
            "value",
            le32(&h, VAL_SIZE_OFF),
            size_of::<V>(),
        )?;
        let fanout = le32(&h, FANOUT_OFF) as usize;
        if !(MIN_FANOUT..=MAX_FANOUT).contains(&fanout) {
            return Err(crate::error::corrupt(
                WHAT,
                self.hdr,
                "fan-out out of range",
            ));
        }
        Ok(Header {
            geo: Self::geo(fanout),
            root: le64(&h, ROOT_OFF),
            len: le64(&h, LEN_OFF),
            first: le64(&h, FIRST_OFF),
        })
    }

    /// The number of entries.
    pub fn len(&self, pool: &Pool) -> Result<u64> {
        Ok(self.header(&mut { pool })?.len)
    }

    /// True if the map has no entries.
    pub fn is_empty(&self, pool: &Pool) -> Result<bool> {
        Ok(self.len(pool)? == 0)
    }

    /// The number of entries, as transaction `tx` sees it.
    pub fn len_tx(&self, tx: &mut Tx<'_>) -> Result<u64> {
        Ok(self.header(tx)?.len)
    }

    /// Levels of the tree: 1 while the root is a leaf (committed state).
    pub fn height(&self, pool: &Pool) -> Result<u32> {
        let mut m = pool;
        let h = self.header(&mut m)?;
        let mut node = Node::<K, V>::load(&mut m, &h.geo, h.root)?;
        for height in 1..=MAX_DEPTH as u32 {
            if node.leaf {
                return Ok(height);
            }
            node = Node::load(&mut m, &h.geo, node.kids[0])?;
        }
        Err(crate::error::corrupt(
            WHAT,
            h.root,
            "deeper than 64 levels (a cycle?)",
        ))
    }

    /// The value of `k` (committed state).
    pub fn get(&self, pool: &Pool, k: &K) -> Result<Option<V>> {
        self.get_in(&mut { pool }, k)
    }

    /// The value of `k` as transaction `tx` sees it (its own writes too).
    pub fn get_tx(&self, tx: &mut Tx<'_>, k: &K) -> Result<Option<V>> {
        self.get_in(tx, k)
    }

    fn get_in<M: Mem>(&self, m: &mut M, k: &K) -> Result<Option<V>> {
        let h = self.header(m)?;
        let leaf = descend(m, &h, k, None)?;
        Ok(leaf.keys.binary_search(k).ok().map(|i| leaf.vals[i]))
    }

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

/// Walks from the root to the leaf that holds (or would hold) `k`,
/// recording each inner node and the child taken in `path`.
fn descend<K: Pod + Ord, V: Pod, M: Mem>(
    m: &mut M,
    h: &Header,
    k: &K,
    mut path: Option<&mut Vec<(Node<K, V>, usize)>>,
) -> Result<Node<K, V>> {
    let mut node = Node::load(m, &h.geo, h.root)?;
    for _ in 0..MAX_DEPTH {
        if node.leaf {
            return Ok(node);
        }
        let i = node.keys.partition_point(|s| s <= k);
        let child = Node::load(m, &h.geo, node.kids[i])?;
        if let Some(p) = path.as_deref_mut() {
            p.push((node, i));
        }
        node = child;
    }
    Err(crate::error::corrupt(
        WHAT,
        h.root,
        "deeper than 64 levels (a cycle?)",
    ))
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
