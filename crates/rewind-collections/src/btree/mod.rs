//! A persistent B+-tree: an ordered map from `K` to `V`, with leaves laid
//! out for persistent memory.
//!
//! **Leaves** (wB+-tree, Chen & Jin, VLDB 2015; FPTree, Oukid et al.,
//! SIGMOD 2016) keep their entries in unsorted slots, with a validity
//! bitmap and a one-byte fingerprint per slot. An insert writes its entry
//! into a free slot and then one range of the node's first line (the
//! bitmap, the slot's fingerprint and the stamp); a removal clears a bit.
//! No entry moves, so no shifted half-node is written or logged. A lookup
//! compares only the keys whose fingerprint matches (one in 256 of the
//! others). Scans sort a leaf's entries when they read it.
//!
//! **Inner nodes** are sorted arrays of separators and child offsets
//! (child `i` holds the keys `k` with `sep[i-1] <= k < sep[i]`), kept in
//! the pool. FPTree keeps them in DRAM and rebuilds them at open; here a
//! handle is only an offset, inner nodes change only when a leaf splits or
//! merges (one update in `F / 2` at most), and a descent reads them with
//! the same loads as DRAM on a mapped pool, so they stay persistent and a
//! tree opens in constant time. Leaves are linked left to right for scans;
//! a backward scan finds the previous leaf by descending again.
//!
//! **Splits** copy the upper half of a full leaf's entries into a new leaf
//! and clear their bits in the old one, and split each full ancestor.
//! Under the redo policies (the default) a split is part of the inserting
//! transaction ([`Tx::policy`]): its writes and new nodes join the
//! transaction's commit group (one fence for the insert and its split),
//! and an abort discards the split with the insert. The map's exclusive
//! lock keeps other transactions out of the nodes until the commit, so
//! nothing needs the split durable sooner.
//!
//! Under the undo policies **splits are nested top actions** (REWIND, MARS;
//! ARIES's "structure modification operations"): when an insert meets a
//! full leaf, the leaf, and each full ancestor, is split in a
//! [`Tx::nested_top_action`], so the split stays even if the insert's
//! transaction rolls back. rewind undoes physically, so a nested top action
//! must not rewrite bytes that its enclosing transaction changed and may
//! still undo: every node records in its `stamp` the id of the last
//! transaction that changed it outside a nested top action, and a split
//! runs as a nested top action only when none of the nodes it writes
//! carries the running transaction's stamp; otherwise it runs as ordinary
//! logged writes of the transaction, and rolls back with it.
//!
//! **Removals merge and rebalance**: a leaf left with fewer than `F / 4`
//! entries takes entries from a sibling, or, when both fit in one node,
//! the right one's entries move into the left and the right one is freed;
//! an inner node left with fewer than `F / 2` keys does the same with its
//! sibling through the parent's separator; a root left with one child
//! hands the root to it. These are ordinary writes of the transaction
//! (the removal already changed the leaf), so a tree emptied by removals
//! gives its nodes back and shrinks to one leaf.
//!
//! Files: `node.rs` the node layout and its decoding, `update.rs` insert
//! and split, `remove.rs` removal, merges and `clear`, `iter.rs` ordered
//! scans (both directions), `check.rs` the invariants and the block list;
//! this file the handle, the header and lookups.

mod check;
mod iter;
mod node;
mod remove;
mod update;

pub use iter::Iter;

use std::marker::PhantomData;

use rewind::{PPtr, Pool, Tx};
use smallvec::SmallVec;

use crate::checked;
use crate::error::{corrupt, Error, Result};
use crate::mem::{alloc_beside, check_count, le32, le64, Mem};
use crate::storable::Storable;
use crate::types::TAG_SIZE;
use node::{fingerprint, store_leaf, Geo, Raw};

/// The smallest fan-out.
pub const MIN_FANOUT: usize = 4;
/// The largest fan-out: the bits of a leaf's bitmap.
pub const MAX_FANOUT: usize = 64;

const WHAT: &str = "B+-tree";
const MAGIC: [u8; 8] = *b"RWBTREE2";
/// The magic of the sorted-leaf layout of earlier versions.
const OLD_MAGIC: [u8; 8] = *b"RWBTREE1";
/// Deeper than this is a cycle, not a tree (fan-out 4 and 2^64 entries
/// need 32 levels).
const MAX_DEPTH: usize = 64;

// The header block, little-endian (docs/collections.md). The fields every
// update writes (`len`) and every descent reads share the first line.
const MAGIC_OFF: usize = 0;
const LEN_OFF: usize = MAGIC_OFF + 8;
const ROOT_OFF: usize = LEN_OFF + 8;
const FIRST_OFF: usize = ROOT_OFF + 8;
const FANOUT_OFF: usize = FIRST_OFF + 8;
const RESERVED_OFF: usize = FANOUT_OFF + 4;
const KEY_TAG_OFF: usize = RESERVED_OFF + 4;
const VAL_TAG_OFF: usize = KEY_TAG_OFF + TAG_SIZE;
const HEADER_SIZE: usize = VAL_TAG_OFF + TAG_SIZE;

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

/// The largest fan-out whose nodes fit a power-of-two block of at least 16
/// keys (at most 64 KiB, else the smallest fan-out).
fn auto_fanout(ks: usize, vs: usize) -> usize {
    let fits = |f: usize, block: usize| Geo { fanout: f, ks, vs }.size() <= block;
    let mut block = 512;
    loop {
        let f = (MIN_FANOUT..=MAX_FANOUT)
            .rev()
            .find(|&f| fits(f, block))
            .unwrap_or(0);
        if f >= 16 || block >= 1 << 16 {
            return f.max(MIN_FANOUT);
        }
        block *= 2;
    }
}

impl<K: Storable, V: Storable> BTreeMap<K, V>
where
    K::Ref: Ord,
{
    /// Creates an empty map. Its fan-out is chosen from the key and value
    /// sizes: the most keys (up to 64) whose node fits a power-of-two
    /// block that holds at least 16 (a 1 KiB block of 30 for 8-byte keys
    /// and 24-byte values).
    pub fn create(tx: &mut Tx<'_>) -> Result<Self> {
        Self::create_with_fanout(tx, auto_fanout(size_of::<K::Slot>(), size_of::<V::Slot>()))
    }

    /// Creates an empty map whose nodes hold `fanout` keys
    /// ([`MIN_FANOUT`]..=[`MAX_FANOUT`]).
    pub fn create_with_fanout(tx: &mut Tx<'_>, fanout: usize) -> Result<Self> {
        if !(MIN_FANOUT..=MAX_FANOUT).contains(&fanout) {
            return Err(Error::InvalidArgument {
                what: "B+-tree fan-out",
                value: fanout as u64,
                expected: "4 to 64 keys per node",
            });
        }
        let geo = Self::geo(fanout);
        let hdr = tx.alloc_bytes(HEADER_SIZE as u64)?;
        let leaf = alloc_beside(tx, hdr, geo.size() as u64)?;
        store_leaf(tx, &geo, leaf, tx.id(), 0, &[])?;
        let mut h = [0u8; HEADER_SIZE];
        h[MAGIC_OFF..LEN_OFF].copy_from_slice(&MAGIC);
        h[ROOT_OFF..FIRST_OFF].copy_from_slice(&leaf.to_le_bytes());
        h[FIRST_OFF..FANOUT_OFF].copy_from_slice(&leaf.to_le_bytes());
        h[FANOUT_OFF..RESERVED_OFF].copy_from_slice(&(fanout as u32).to_le_bytes());
        h[KEY_TAG_OFF..VAL_TAG_OFF].copy_from_slice(&K::tag());
        h[VAL_TAG_OFF..HEADER_SIZE].copy_from_slice(&V::tag());
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
            ks: size_of::<K::Slot>(),
            vs: size_of::<V::Slot>(),
        }
    }

    /// The header, checked: its magic and fan-out each time, its type tags
    /// once per free epoch through a transaction (`checked`).
    fn header<M: Mem + ?Sized>(&self, m: &mut M) -> Result<Header> {
        let mut h = [0u8; HEADER_SIZE];
        let old = (&[(OLD_MAGIC, "RWBTREE1")][..], "RWBTREE2");
        checked::read_checked_header::<Self, M>(
            m,
            WHAT,
            self.hdr,
            &mut h,
            KEY_TAG_OFF,
            MAGIC,
            old,
            |tags| {
                let (key, value) = tags.split_at(VAL_TAG_OFF - KEY_TAG_OFF);
                K::check_tag(key, WHAT, self.hdr, "key")?;
                V::check_tag(value, WHAT, self.hdr, "value")
            },
        )?;
        let fanout = le32(&h, FANOUT_OFF) as usize;
        if !(MIN_FANOUT..=MAX_FANOUT).contains(&fanout) {
            return Err(corrupt(WHAT, self.hdr, "fan-out out of range"));
        }
        let geo = Self::geo(fanout);
        let len = le64(&h, LEN_OFF);
        // Each leaf, a block of a node's size, holds at most `fanout`.
        check_count(&*m, WHAT, self.hdr, len, (geo.size() / fanout) as u64)?;
        Ok(Header {
            geo,
            root: le64(&h, ROOT_OFF),
            len,
            first: le64(&h, FIRST_OFF),
        })
    }

    /// The number of entries (stored in the header: O(1)).
    pub fn len(&self, pool: &Pool) -> Result<u64> {
        pool.read_isolated(self.hdr, |r| Ok(self.header(r)?.len))
    }

    /// True if the map has no entries.
    pub fn is_empty(&self, pool: &Pool) -> Result<bool> {
        Ok(self.len(pool)? == 0)
    }

    /// The number of entries, as transaction `tx` sees it.
    pub fn len_tx(&self, tx: &mut Tx<'_>) -> Result<u64> {
        tx.lock_shared(self.as_ptr())?; // held until the transaction ends
        Ok(self.header(tx)?.len)
    }

    /// Keys per node, chosen at creation.
    pub fn fanout(&self, pool: &Pool) -> Result<usize> {
        pool.read_isolated(self.hdr, |r| Ok(self.header(r)?.geo.fanout))
    }

    /// Levels of the tree: 1 while the root is a leaf (committed state).
    pub fn height(&self, pool: &Pool) -> Result<u32> {
        pool.read_isolated(self.hdr, |r| {
            let h = self.header(r)?;
            let mut node = Raw::load(r, &h.geo, h.root)?;
            for height in 1..=MAX_DEPTH as u32 {
                if node.is_leaf() {
                    return Ok(height);
                }
                node = Raw::load(r, &h.geo, node.kid(&h.geo, 0))?;
            }
            Err(corrupt(WHAT, h.root, "deeper than 64 levels (a cycle?)"))
        })
    }

    /// The value of `k` (committed state: isolated from the transactions
    /// changing the map, see [`Pool::read_isolated`]).
    pub fn get(&self, pool: &Pool, k: &K::Ref) -> Result<Option<V>> {
        // A reader checks each node's block once, not each read in it.
        pool.read_isolated(self.hdr, |r| self.get_in(r, k))
    }

    /// The value of `k` as transaction `tx` sees it (its own writes too).
    pub fn get_tx(&self, tx: &mut Tx<'_>, k: &K::Ref) -> Result<Option<V>> {
        tx.lock_shared(self.as_ptr())?; // held until the transaction ends
        self.get_in(tx, k)
    }

    /// True if `k` has a value (committed state).
    pub fn contains_key(&self, pool: &Pool, k: &K::Ref) -> Result<bool> {
        Ok(self.get(pool, k)?.is_some())
    }

    /// True if `k` has a value, as `tx` sees it.
    pub fn contains_key_tx(&self, tx: &mut Tx<'_>, k: &K::Ref) -> Result<bool> {
        tx.lock_shared(self.as_ptr())?; // held until the transaction ends
        Ok(self.get_tx(tx, k)?.is_some())
    }

    fn get_in<M: Mem + ?Sized>(&self, m: &mut M, k: &K::Ref) -> Result<Option<V>> {
        let h = self.header(m)?;
        let leaf = descend::<K, M>(m, &h, k, None)?;
        let fp = fingerprint(K::ref_bytes(k));
        match leaf.find_in::<K, M>(m, &h.geo, k, fp)? {
            Some(i) => {
                let slot = leaf.val_slot_in::<V, M>(m, &h.geo, i)?;
                Ok(Some(V::load(m, &slot)?))
            }
            None => Ok(None),
        }
    }
}

/// The inner nodes a descent passed, root first: each one's offset and
/// the child taken. On the stack for any tree of fewer than 16 levels (a
/// `SmallVec`: nothing to zero): an update allocates nothing to descend.
struct Path(SmallVec<[(u64, usize); 16]>);

impl Path {
    fn new() -> Path {
        Path(SmallVec::new())
    }

    /// Records a step; `false` when the path is full (a cycle).
    fn push(&mut self, step: (u64, usize)) -> bool {
        if self.0.len() >= MAX_DEPTH {
            return false;
        }
        self.0.push(step);
        true
    }
}

impl std::ops::Deref for Path {
    type Target = [(u64, usize)];
    fn deref(&self) -> &[(u64, usize)] {
        &self.0
    }
}

/// Walks from the root to the leaf that holds (or would hold) `k`,
/// recording each inner node and the child taken in `path`. Every node is
/// read as [`Raw::load_head`] reads it (its first bytes), an inner node's
/// other separators and its child word one at a time, as the binary
/// search needs them: the leaf comes back with its words and fingerprints.
fn descend<K: Storable, M: Mem + ?Sized>(
    m: &mut M,
    h: &Header,
    k: &K::Ref,
    path: Option<&mut Path>,
) -> Result<Raw>
where
    K::Ref: Ord,
{
    node::with_seps::<K, _>(|seps| descend_in::<K, M>(m, h, k, path, seps))
}

/// [`descend`] with a buffer for the separators, zeroed once for all
/// levels.
fn descend_in<K: Storable, M: Mem + ?Sized>(
    m: &mut M,
    h: &Header,
    k: &K::Ref,
    mut path: Option<&mut Path>,
    seps: &mut [u8],
) -> Result<Raw>
where
    K::Ref: Ord,
{
    let mut node = Raw::load_head(m, &h.geo, h.root)?;
    for _ in 0..MAX_DEPTH {
        if node.is_leaf() {
            return Ok(node);
        }
        let i = node.child_for_in::<K, M>(m, &h.geo, k, seps)?;
        let kid = node.kid_in(m, &h.geo, i)?;
        if let Some(p) = path.as_deref_mut() {
            if !p.push((node.off, i)) {
                break;
            }
        }
        node.reload_head(m, &h.geo, kid)?;
    }
    Err(corrupt(WHAT, h.root, "deeper than 64 levels (a cycle?)"))
}

/// The inner nodes of `path` read whole, for a split or a merge to
/// rewrite (the descent read only what it compared).
fn load_path(tx: &mut Tx<'_>, geo: &Geo, path: &Path) -> Result<Vec<(Raw, usize)>> {
    let mut out = Vec::with_capacity(path.len());
    for &(off, i) in path.iter() {
        let n = Raw::load(tx, geo, off)?;
        if n.is_leaf() || i > n.count() {
            return Err(corrupt(
                WHAT,
                off,
                "an inner node changed under its descent",
            ));
        }
        out.push((n, i));
    }
    Ok(out)
}
