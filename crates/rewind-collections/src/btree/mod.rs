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
//!
//! Files: `node.rs` the node layout and its decoding, `update.rs` insert,
//! split and remove, `iter.rs` ordered scans, `check.rs` the invariants
//! and the block list; this file the handle, the header and lookups.

mod check;
mod iter;
mod node;
mod update;

pub use iter::Iter;

use std::marker::PhantomData;

use bytemuck::Pod;
use rewind::{PPtr, Pool, Tx};

use crate::error::{Error, Result};
use crate::mem::{check_magic, check_size, le32, le64, Mem};
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
