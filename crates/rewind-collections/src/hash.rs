//! A persistent hash map with separate chaining.
//!
//! The header points at a table of `buckets` chain heads (a power of two);
//! each entry is its own block holding the next entry's offset, the key and
//! the value. Keys are hashed with 64-bit FNV-1a over their bytes (stable
//! across runs and platforms of one endianness) and compared by their bytes,
//! so two keys are the same key exactly when their bytes are equal.
//!
//! When an insert would make the entries outnumber the buckets, the table
//! doubles, incrementally: the inserting transaction allocates a table of
//! twice the buckets (zeroed, so not logged) and keeps the old one beside
//! it, and every change from then on (this one included) moves the next
//! [`MOVE_STEP`] buckets of the old table into the new one (one logged
//! 8-byte write per entry moved, and per chain head written), until the
//! last is moved and the old table freed. So no transaction logs more
//! than a few dozen writes for the doubling, however large the map (a
//! doubling in one transaction logged a write per entry: a map of a few
//! hundred thousand entries could no longer grow in a pool with megabytes
//! free). While the old table is kept, a key lives in exactly one chain:
//! its old bucket's if that bucket is not moved yet, else its new bucket's
//! (an insert goes there too). A removal frees its entry; the table never
//! shrinks.
//!
//! Layouts, little-endian (`docs/collections.md`):
//!
//! ```text
//! header                            entry
//! 0   magic     [u8; 8] "RWHASH03"  0   next   u64   next entry in the chain (0: end)
//! 8   len       u64                 8   key    size_of::<K>() bytes
//! 16  buckets   u64  a power of two ..  value  size_of::<V>() bytes
//! 24  table     u64  offset of buckets × u64 chain heads
//! 32  old table u64  the table being moved (buckets / 2 heads; 0: none)
//! 40  moved     u64  its buckets moved so far (0..buckets / 2)
//! 48  key type  48 bytes: type fingerprint of K (`types.rs`)
//! 96  val type  48 bytes: type fingerprint of V
//! 144 (end)
//! ```

use std::marker::PhantomData;

use rewind::{PPtr, Pool, Tx};

use crate::checked;
use crate::error::{corrupt, Result};
use crate::mem::{alloc_beside, check_count, check_span, le64, put64, Mem, ScanWatch};
use crate::types::{fnv1a, Stored, TypeTag, TAG_SIZE};

const WHAT: &str = "hash map";
const MAGIC: [u8; 8] = *b"RWHASH03";
/// The magics of earlier layouts: the size-checked header, and the one
/// whose table doubled in one transaction.
const OLD_MAGICS: &[([u8; 8], &str)] = &[(*b"RWHASH01", "RWHASH01"), (*b"RWHASH02", "RWHASH02")];
const MAGIC_OFF: usize = 0;
const LEN_OFF: usize = MAGIC_OFF + 8;
const BUCKETS_OFF: usize = LEN_OFF + 8;
const TABLE_OFF: usize = BUCKETS_OFF + 8;
const OLD_TABLE_OFF: usize = TABLE_OFF + 8;
const MOVED_OFF: usize = OLD_TABLE_OFF + 8;
const KEY_TAG_OFF: usize = MOVED_OFF + 8;
const VAL_TAG_OFF: usize = KEY_TAG_OFF + TAG_SIZE;
const HEADER_SIZE: usize = VAL_TAG_OFF + TAG_SIZE;
const NEXT_OFF: u64 = 0;
const KEY_OFF: u64 = NEXT_OFF + 8;
/// Buckets of a new map.
const INITIAL_BUCKETS: u64 = 16;
/// Buckets of the old table each change moves while the table doubles: a
/// doubling ends after `buckets / 2 / MOVE_STEP` changes, long before the
/// entries can outnumber the new buckets (after `buckets / 2` inserts).
const MOVE_STEP: u64 = 8;

/// A persistent hash map: a handle to its header in a pool (`Copy`; see
/// [`BTreeMap`](crate::BTreeMap) for storing handles).
///
/// ```
/// use rewind::{Pool, PoolConfig};
/// use rewind_collections::HashMap;
///
/// let dir = tempfile::tempdir().unwrap();
/// let pool = Pool::create(dir.path().join("h.pool"), "h", 8 << 20, &PoolConfig::default())?;
/// let m = pool.transaction(|tx| {
///     let m = HashMap::<[u8; 4], u64>::create(tx)?;
///     for i in 0..100u32 {
///         m.insert(tx, i.to_le_bytes(), i as u64)?; // grows past 16 buckets
///     }
///     m.remove(tx, &7u32.to_le_bytes())?;
///     Ok::<_, rewind_collections::Error>(m)
/// })?;
/// assert_eq!(m.len(&pool)?, 99);
/// assert_eq!(m.get(&pool, &42u32.to_le_bytes())?, Some(42));
/// assert_eq!(m.get(&pool, &7u32.to_le_bytes())?, None);
/// let sum: u64 = m.iter(&pool)?.map(|e| e.map(|(_, v)| v)).sum::<Result<u64, _>>()?;
/// assert_eq!(sum, (0..100).sum::<u64>() - 7);
/// m.check_invariants(&pool)?;
/// # Ok::<(), rewind_collections::Error>(())
/// ```
pub struct HashMap<K, V> {
    hdr: u64,
    _t: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Clone for HashMap<K, V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K, V> Copy for HashMap<K, V> {}
impl<K, V> std::fmt::Debug for HashMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HashMap({:#x})", self.hdr)
    }
}

#[derive(Clone, Copy)]
struct Header {
    len: u64,
    buckets: u64,
    table: u64,
    /// The table being moved (`buckets / 2` heads), 0 when none.
    old_table: u64,
    /// Its buckets moved into `table` so far.
    moved: u64,
}

impl Header {
    /// Buckets of the old table (when there is one).
    fn old_buckets(&self) -> u64 {
        self.buckets / 2
    }

    /// The chain head of the key hashed to `hash`: its old bucket's while
    /// that is not moved yet, else its bucket's in the table.
    fn link(&self, hash: u64) -> u64 {
        let old = hash & (self.old_buckets().max(1) - 1);
        if self.old_table != 0 && old >= self.moved {
            self.old_table + old * 8
        } else {
            self.table + (hash & (self.buckets - 1)) * 8
        }
    }

    /// How many chain heads hold entries: every bucket of the table, then
    /// the old table's buckets not moved yet.
    fn heads(&self) -> u64 {
        match self.old_table {
            0 => self.buckets,
            _ => self.buckets + self.old_buckets() - self.moved,
        }
    }

    /// The `i`th of [`heads`](Self::heads).
    fn head(&self, i: u64) -> u64 {
        match i.checked_sub(self.buckets) {
            None => self.table + i * 8,
            Some(j) => self.old_table + (self.moved + j) * 8,
        }
    }
}

/// Where a key was found: the link that points at its entry, the entry.
struct Found<V> {
    link: u64,
    entry: u64,
    next: u64,
    val: V,
}

impl<K: Stored, V: Stored> HashMap<K, V> {
    const KS: u64 = size_of::<K>() as u64;
    const VS: u64 = size_of::<V>() as u64;
    const ENTRY: u64 = KEY_OFF + Self::KS + Self::VS;

    /// Creates an empty map of 16 buckets.
    pub fn create(tx: &mut Tx<'_>) -> Result<Self> {
        let hdr = tx.alloc_bytes(HEADER_SIZE as u64)?;
        let table = alloc_beside(tx, hdr, INITIAL_BUCKETS * 8)?;
        let mut h = [0u8; HEADER_SIZE];
        h[MAGIC_OFF..LEN_OFF].copy_from_slice(&MAGIC);
        h[BUCKETS_OFF..TABLE_OFF].copy_from_slice(&INITIAL_BUCKETS.to_le_bytes());
        h[TABLE_OFF..OLD_TABLE_OFF].copy_from_slice(&table.to_le_bytes());
        h[KEY_TAG_OFF..VAL_TAG_OFF].copy_from_slice(&TypeTag::of::<K>().encode());
        h[VAL_TAG_OFF..HEADER_SIZE].copy_from_slice(&TypeTag::of::<V>().encode());
        tx.write_bytes(hdr, &h)?;
        Ok(Self::from_ptr(PPtr::from_offset(hdr)))
    }

    /// The map whose header `p` points at; checked at first use.
    pub fn from_ptr(p: PPtr<Self>) -> Self {
        HashMap {
            hdr: p.offset(),
            _t: PhantomData,
        }
    }

    /// The pointer to the map's header.
    pub fn as_ptr(&self) -> PPtr<Self> {
        PPtr::from_offset(self.hdr)
    }

    /// The header, checked: its magic and table each time, its type tags
    /// once per free epoch through a transaction (`checked`).
    fn header<M: Mem + ?Sized>(&self, m: &mut M) -> Result<Header> {
        let mut h = [0u8; HEADER_SIZE];
        let old = (OLD_MAGICS, "RWHASH03");
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
                TypeTag::check::<K>(key, WHAT, self.hdr, "key")?;
                TypeTag::check::<V>(value, WHAT, self.hdr, "value")
            },
        )?;
        let h = Header {
            len: le64(&h, LEN_OFF),
            buckets: le64(&h, BUCKETS_OFF),
            table: le64(&h, TABLE_OFF),
            old_table: le64(&h, OLD_TABLE_OFF),
            moved: le64(&h, MOVED_OFF),
        };
        // Each entry is a block of its own, of at least 64 bytes.
        check_count(&*m, WHAT, self.hdr, h.len, Self::ENTRY.max(64))?;
        if !h.buckets.is_power_of_two() || h.table == 0 {
            return Err(corrupt(
                WHAT,
                self.hdr,
                "bucket count not a power of two, or no table",
            ));
        }
        let moving = h.old_table != 0;
        if (moving && (h.buckets < 2 || h.moved >= h.old_buckets())) || (!moving && h.moved != 0) {
            return Err(corrupt(WHAT, self.hdr, "a table being moved past its end"));
        }
        check_span(m, WHAT, self.hdr, h.table, h.buckets.checked_mul(8))?;
        if moving {
            check_span(m, WHAT, self.hdr, h.old_table, Some(h.old_buckets() * 8))?;
        }
        Ok(h)
    }

    fn hash(k: &K) -> u64 {
        fnv1a(bytemuck::bytes_of(k))
    }

    fn read64<M: Mem + ?Sized>(m: &mut M, off: u64) -> Result<u64> {
        let mut b = [0u8; 8];
        m.read_at(off, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Reads the entry at `off`: next, key, value.
    fn entry<M: Mem + ?Sized>(m: &mut M, off: u64) -> Result<(u64, K, V)> {
        let mut b = vec![0u8; Self::ENTRY as usize];
        m.read_at(off, &mut b)?;
        let (ks, vs) = (KEY_OFF as usize, (KEY_OFF + Self::KS) as usize);
        Ok((
            le64(&b, NEXT_OFF as usize),
            bytemuck::pod_read_unaligned(&b[ks..vs]),
            bytemuck::pod_read_unaligned(&b[vs..]),
        ))
    }

    fn find<M: Mem>(&self, m: &mut M, h: &Header, k: &K) -> Result<Option<Found<V>>> {
        let mut link = h.link(Self::hash(k));
        let mut cur = Self::read64(m, link)?;
        // A chain longer than the map is a cycle.
        for _ in 0..=h.len {
            if cur == 0 {
                return Ok(None);
            }
            let (next, key, val) = Self::entry(m, cur)?;
            if bytemuck::bytes_of(&key) == bytemuck::bytes_of(k) {
                return Ok(Some(Found {
                    link,
                    entry: cur,
                    next,
                    val,
                }));
            }
            (link, cur) = (cur + NEXT_OFF, next);
        }
        Err(corrupt(
            WHAT,
            self.hdr,
            "a chain longer than the map (a cycle?)",
        ))
    }

    /// The number of entries.
    pub fn len(&self, pool: &Pool) -> Result<u64> {
        pool.read_isolated(self.hdr, |r| Ok(self.header(r)?.len))
    }

    /// True if the map has no entries.
    pub fn is_empty(&self, pool: &Pool) -> Result<bool> {
        Ok(self.len(pool)? == 0)
    }

    /// The number of entries, as `tx` sees it.
    pub fn len_tx(&self, tx: &mut Tx<'_>) -> Result<u64> {
        tx.lock_shared(self.as_ptr())?; // held until the transaction ends
        Ok(self.header(tx)?.len)
    }

    /// The value of `k` (committed state: isolated from the transactions
    /// changing the map, see [`Pool::read_isolated`]).
    pub fn get(&self, pool: &Pool, k: &K) -> Result<Option<V>> {
        pool.read_isolated(self.hdr, |r| {
            let h = self.header(r)?;
            Ok(self.find(r, &h, k)?.map(|f| f.val))
        })
    }

    /// The value of `k` as `tx` sees it.
    pub fn get_tx(&self, tx: &mut Tx<'_>, k: &K) -> Result<Option<V>> {
        tx.lock_shared(self.as_ptr())?; // held until the transaction ends
        let h = self.header(tx)?;
        Ok(self.find(tx, &h, k)?.map(|f| f.val))
    }

    /// True if `k` has a value (committed state).
    pub fn contains_key(&self, pool: &Pool, k: &K) -> Result<bool> {
        Ok(self.get(pool, k)?.is_some())
    }

    /// True if `k` has a value, as `tx` sees it.
    pub fn contains_key_tx(&self, tx: &mut Tx<'_>, k: &K) -> Result<bool> {
        tx.lock_shared(self.as_ptr())?; // held until the transaction ends
        Ok(self.get_tx(tx, k)?.is_some())
    }

    /// Every entry, bucket by bucket (in no particular order), read as the
    /// iterator goes (committed state). A read error, or a chain longer
    /// than the map, ends it after yielding the error. Not isolated from
    /// writers: beside transactions that change the map it can see part
    /// of a change, and an error met while one did (a chain grown past the
    /// length the scan began with, an entry freed by a commit) is
    /// [`Error::Changed`](crate::Error::Changed);
    /// [`iter_tx`](Self::iter_tx) scans under the map's lock, and is the
    /// scan inside a transaction (there this one is `NestedTransaction`).
    pub fn iter<'a>(&self, pool: &'a Pool) -> Result<HashIter<'a, K, V>> {
        // (Taken before the header is read.)
        let watch = ScanWatch::start(pool, WHAT, self.hdr)?;
        let mut it = HashIter::new(self, Box::new(pool)).map_err(|e| watch.explain(e))?;
        it.watch = Some(watch);
        Ok(it)
    }

    /// [`iter`](Self::iter) as `tx` sees the map, its own writes included.
    pub fn iter_tx<'a, 'p: 'a>(&self, tx: &'a mut Tx<'p>) -> Result<HashIter<'a, K, V>> {
        tx.lock_shared(self.as_ptr())?; // held until the transaction ends
        HashIter::new(self, Box::new(tx))
    }

    /// Sets `k` to `v`; returns the value it replaced. May double the
    /// table (in `tx`).
    pub fn insert(&self, tx: &mut Tx<'_>, k: K, v: V) -> Result<Option<V>> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        let mut h = self.moving_on(tx)?;
        if let Some(f) = self.find(tx, &h, &k)? {
            tx.write_bytes(f.entry + KEY_OFF + Self::KS, bytemuck::bytes_of(&v))?;
            return Ok(Some(f.val));
        }
        if h.old_table == 0 && h.len >= h.buckets {
            h = self.grow(tx, h)?;
        }
        let link = h.link(Self::hash(&k));
        let head = Self::read64(tx, link)?;
        let e = tx.alloc_bytes(Self::ENTRY)?;
        let mut b = Vec::with_capacity(Self::ENTRY as usize);
        b.extend_from_slice(&head.to_le_bytes());
        b.extend_from_slice(bytemuck::bytes_of(&k));
        b.extend_from_slice(bytemuck::bytes_of(&v));
        tx.write_bytes(e, &b)?;
        put64(tx, link, e)?;
        let len = (h.len.checked_add(1))
            .ok_or_else(|| corrupt(WHAT, self.hdr, "length at its maximum"))?;
        put64(tx, self.hdr + LEN_OFF as u64, len)?;
        Ok(None)
    }

    /// The header, after the next [`MOVE_STEP`] buckets of a table being
    /// moved are (what every change does first, so that the key's chain
    /// it then finds stays where it is).
    fn moving_on(&self, tx: &mut Tx<'_>) -> Result<Header> {
        let h = self.header(tx)?;
        match h.old_table {
            0 => Ok(h),
            _ => self.move_buckets(tx, h),
        }
    }

    /// Starts doubling the table: a new one of twice the buckets (zeroed,
    /// not logged) beside the old, whose buckets the changes from now on
    /// move, this one first.
    fn grow(&self, tx: &mut Tx<'_>, h: Header) -> Result<Header> {
        let buckets = (h.buckets.checked_mul(2))
            .filter(|b| b.checked_mul(8).is_some())
            .ok_or_else(|| corrupt(WHAT, self.hdr, "bucket count at its maximum"))?;
        let table = tx.alloc_bytes(buckets * 8)?;
        let mut w = [0u8; 16];
        w[..8].copy_from_slice(&buckets.to_le_bytes());
        w[8..].copy_from_slice(&table.to_le_bytes());
        // (The old table and `moved` are written by the first move.)
        tx.write_bytes(self.hdr + BUCKETS_OFF as u64, &w)?;
        let h = Header {
            buckets,
            table,
            old_table: h.table,
            moved: 0,
            ..h
        };
        self.move_buckets(tx, h)
    }

    /// Moves the next [`MOVE_STEP`] buckets of the old table: the entries of
    /// old bucket `b` go to buckets `b` and `b + old buckets` of the table
    /// (which nothing was put in while `b` was not moved). After its last
    /// bucket, frees the old table.
    fn move_buckets(&self, tx: &mut Tx<'_>, mut h: Header) -> Result<Header> {
        let half = h.old_buckets();
        let end = (h.moved + MOVE_STEP).min(half);
        for b in h.moved..end {
            let mut cur = Self::read64(tx, h.old_table + b * 8)?;
            let mut heads = [0u64; 2];
            for _ in 0..=h.len {
                if cur == 0 {
                    break;
                }
                let (next, key, _) = Self::entry(tx, cur)?;
                let hash = Self::hash(&key);
                if hash & (half - 1) != b {
                    return Err(corrupt(WHAT, cur, "entry in another key's bucket"));
                }
                let i = usize::from(hash & half != 0);
                put64(tx, cur + NEXT_OFF, heads[i])?;
                heads[i] = cur;
                cur = next;
            }
            if cur != 0 {
                return Err(corrupt(
                    WHAT,
                    self.hdr,
                    "a chain longer than the map (a cycle?)",
                ));
            }
            for (i, head) in heads.into_iter().enumerate() {
                if head != 0 {
                    put64(tx, h.table + (b + i as u64 * half) * 8, head)?;
                }
            }
        }
        h.moved = end;
        if end == half {
            tx.free(PPtr::<u64>::from_offset(h.old_table))?;
            (h.old_table, h.moved) = (0, 0);
        }
        let mut w = [0u8; 16];
        w[..8].copy_from_slice(&h.old_table.to_le_bytes());
        w[8..].copy_from_slice(&h.moved.to_le_bytes());
        tx.write_bytes(self.hdr + OLD_TABLE_OFF as u64, &w)?;
        Ok(h)
    }

    /// Removes `k` and frees its entry; returns its value.
    pub fn remove(&self, tx: &mut Tx<'_>, k: &K) -> Result<Option<V>> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        let h = self.moving_on(tx)?;
        let Some(f) = self.find(tx, &h, k)? else {
            return Ok(None);
        };
        let Some(len) = h.len.checked_sub(1) else {
            return Err(corrupt(WHAT, self.hdr, "length 0 with an entry in a chain"));
        };
        put64(tx, f.link, f.next)?;
        tx.free(PPtr::<u8>::from_offset(f.entry))?;
        put64(tx, self.hdr + LEN_OFF as u64, len)?;
        Ok(Some(f.val))
    }

    /// Every entry, in no particular order (committed state).
    pub fn entries(&self, pool: &Pool) -> Result<Vec<(K, V)>> {
        pool.read_isolated(self.hdr, |r| {
            let h = self.header(r)?;
            // The length is bounded by the pool (`header`); the buffer
            // grows with the entries found, not with what a damaged
            // length claims.
            let mut out = Vec::with_capacity(h.len.min(1024) as usize);
            for i in 0..h.heads() {
                let mut cur = Self::read64(r, h.head(i))?;
                while cur != 0 {
                    if out.len() as u64 >= h.len {
                        return Err(corrupt(WHAT, self.hdr, "more entries than the length"));
                    }
                    let (next, k, v) = Self::entry(r, cur)?;
                    out.push((k, v));
                    cur = next;
                }
            }
            Ok(out)
        })
    }

    /// The offsets of every block the map owns: header, table, then every
    /// entry (committed state): for space accounting and checks.
    pub fn blocks(&self, pool: &Pool) -> Result<Vec<u64>> {
        // (An error while a writer held it is `Changed`, as for a scan.)
        ScanWatch::around(pool, WHAT, self.hdr, || self.blocks_in(&mut { pool }))
    }

    /// Frees every entry, the table and the header, in `tx`; the handle
    /// must not be used again.
    pub fn destroy(self, tx: &mut Tx<'_>) -> Result<()> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        for off in self.blocks_in(tx)? {
            tx.free(PPtr::<u8>::from_offset(off))?;
        }
        Ok(())
    }

    fn blocks_in<M: Mem>(&self, m: &mut M) -> Result<Vec<u64>> {
        let h = self.header(m)?;
        let mut out = vec![self.hdr, h.table];
        if h.old_table != 0 {
            out.push(h.old_table);
        }
        let owned = out.len() as u64;
        for i in 0..h.heads() {
            let mut cur = Self::read64(m, h.head(i))?;
            while cur != 0 {
                if out.len() as u64 >= h.len.saturating_add(owned) {
                    return Err(corrupt(WHAT, self.hdr, "more entries than the length"));
                }
                out.push(cur);
                cur = Self::read64(m, cur + NEXT_OFF)?;
            }
        }
        Ok(out)
    }

    /// Checks that every entry sits in its key's chain (while the table
    /// doubles: its old bucket's until that is moved, then its new
    /// bucket's), no key appears twice, and the length is the number of
    /// entries. Committed state: on a thread inside a transaction of
    /// `pool` it is `NestedTransaction`.
    pub fn check_invariants(&self, pool: &Pool) -> Result<()> {
        // (An error while a writer held it is `Changed`, as for a scan.)
        ScanWatch::around(pool, WHAT, self.hdr, || {
            self.check_invariants_unwatched(pool)
        })
    }

    fn check_invariants_unwatched(&self, pool: &Pool) -> Result<()> {
        let mut m = pool;
        let h = self.header(&mut m)?;
        let mut keys = std::collections::HashSet::new();
        for i in 0..h.heads() {
            let link = h.head(i);
            let mut cur = Self::read64(&mut m, link)?;
            while cur != 0 {
                if keys.len() as u64 >= h.len {
                    return Err(corrupt(WHAT, self.hdr, "more entries than the length"));
                }
                let (next, k, _) = Self::entry(&mut m, cur)?;
                if h.link(Self::hash(&k)) != link {
                    return Err(corrupt(WHAT, cur, "entry in another key's bucket"));
                }
                if !keys.insert(bytemuck::bytes_of(&k).to_vec()) {
                    return Err(corrupt(WHAT, cur, "key appears twice"));
                }
                cur = next;
            }
        }
        if keys.len() as u64 != h.len {
            return Err(corrupt(WHAT, self.hdr, "length differs from the entries"));
        }
        Ok(())
    }
}

/// An iterator over a [`HashMap`]'s entries, bucket by bucket (from
/// [`HashMap::iter`] and [`HashMap::iter_tx`]).
pub struct HashIter<'a, K, V> {
    mem: Box<dyn Mem + 'a>,
    hdr: u64,
    h: Header,
    /// The next chain head to read (see `Header::heads`).
    bucket: u64,
    /// The next entry of the chain being read (0: none).
    cur: u64,
    seen: u64,
    done: bool,
    /// A scan through `&Pool`: its errors while a writer held the map are
    /// `Changed`.
    watch: Option<ScanWatch<'a>>,
    _t: PhantomData<fn() -> (K, V)>,
}

impl<'a, K: Stored, V: Stored> HashIter<'a, K, V> {
    fn new(map: &HashMap<K, V>, mut mem: Box<dyn Mem + 'a>) -> Result<Self> {
        let h = map.header(&mut *mem)?;
        Ok(HashIter {
            mem,
            hdr: map.hdr,
            h,
            bucket: 0,
            cur: 0,
            seen: 0,
            done: false,
            watch: None,
            _t: PhantomData,
        })
    }

    fn step(&mut self) -> Result<Option<(K, V)>> {
        loop {
            if self.cur != 0 {
                self.seen += 1;
                if self.seen > self.h.len {
                    return Err(corrupt(WHAT, self.hdr, "more entries than the length"));
                }
                let (next, k, v) = HashMap::<K, V>::entry(&mut *self.mem, self.cur)?;
                self.cur = next;
                return Ok(Some((k, v)));
            }
            if self.bucket == self.h.heads() {
                return Ok(None);
            }
            let link = self.h.head(self.bucket);
            self.cur = HashMap::<K, V>::read64(&mut *self.mem, link)?;
            self.bucket += 1;
        }
    }
}

impl<K: Stored, V: Stored> Iterator for HashIter<'_, K, V> {
    type Item = Result<(K, V)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if let Some(Err(e)) = self.watch.map(|w| w.outside()) {
            self.done = true;
            return Some(Err(e));
        }
        let r = self.step();
        if !matches!(r, Ok(Some(_))) {
            self.done = true;
        }
        match (r, &self.watch) {
            (Err(e), Some(w)) => Some(Err(w.explain(e))),
            (r, _) => r.transpose(),
        }
    }
}
