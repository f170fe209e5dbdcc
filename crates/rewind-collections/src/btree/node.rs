//! B+-tree nodes on media, read into a byte buffer and decoded field by
//! field as they are needed (a lookup reads a leaf's first line and then
//! only the slots whose fingerprints match).
//!
//! Every node is one block of [`Geo::size`] bytes, leaf and inner alike.
//! Little-endian; `F` is the fan-out (at most 64, the bits of the bitmap),
//! `ks` and `vs` the key and value sizes:
//!
//! ```text
//! leaf (wB+-tree / FPTree: unsorted slots)     inner (sorted)
//! 0   kind    u32  1                           0   kind   u32  2
//! 4   zero    u32  0                           4   count  u32  keys in use, 0..=F
//! 8   stamp   u64  (see the module docs)       8   stamp  u64
//! 16  next    u64  next leaf (0: last)         16  zero   u64  0
//! 24  bitmap  u64  bit i: slot i holds an entry 24  keys   F × ks, ascending
//! 32  fps     [u8; F] slot i's key fingerprint  ..   kids   (F + 1) × u64
//! S   slots   F × (ks + vs): key, then value
//!     where S = 32 + F rounded up to 8
//! ```
//!
//! A slot whose bit is clear is free, whatever its bytes; a leaf's entries
//! are in no order, its bitmap says which slots hold one. An insert writes
//! the slot, then the bitmap and the slot's fingerprint (one write: bytes
//! 8.. of the first line, the stamp with them); a removal writes only the
//! bitmap word. With a fan-out up to 32 the stamp, next, bitmap and
//! fingerprints share the node's first 64-byte line.

use std::cmp::Ordering;
use std::ops::{Deref, DerefMut};

use bytemuck::{Pod, Zeroable};
use rewind::Tx;

use crate::error::{corrupt, Result};
use crate::mem::{le32, le64, Mem};
use crate::storable::Storable;
use crate::types::fnv1a;

pub(super) const KIND_LEAF: u32 = 1;
pub(super) const KIND_INNER: u32 = 2;
pub(super) const KIND_OFF: usize = 0;
pub(super) const COUNT_OFF: usize = KIND_OFF + 4;
pub(super) const STAMP_OFF: usize = COUNT_OFF + 4;
pub(super) const NEXT_OFF: usize = STAMP_OFF + 8;
/// Leaf: the validity bitmap.
pub(super) const BITMAP_OFF: usize = NEXT_OFF + 8;
/// Leaf: one fingerprint byte per slot.
pub(super) const FPS_OFF: usize = BITMAP_OFF + 8;
/// Inner: the separators.
pub(super) const KEYS_OFF: usize = NEXT_OFF + 8;

const WHAT: &str = "B+-tree node";

/// The most bytes of a node's head ([`Geo::slots_off`] at the largest
/// fan-out): a leaf's words and fingerprints, an inner node's count and
/// first separators.
const HEAD_MAX: usize = (FPS_OFF + super::MAX_FANOUT).next_multiple_of(8);

/// The most separator bytes a binary search reads at once (see
/// [`Raw::partition`]): 64 8-byte keys, or 51 of the 40-byte slots of
/// byte-string keys (their nodes hold 30); more are read one at a time as
/// the search compares them. With 512, a string key's descent read each
/// separator it compared on its own, each read through the transaction's
/// access check: 9.5 % of a string-keyed update's time.
pub(super) const SEPS_MAX: usize = 2048;

/// The separator bytes a descent reads at once for 8-byte keys (64 of
/// them): what it zeroes for them.
const SEPS_SMALL: usize = 512;

/// Runs `f` with a zeroed buffer for the separators a binary search reads
/// at once, as large as `K`'s slots need: zeroing 2 KiB for 8-byte keys
/// would cost them more than it saves (the branch is decided at compile
/// time).
#[inline]
pub(super) fn with_seps<K: Storable, R>(f: impl FnOnce(&mut [u8]) -> R) -> R {
    match size_of::<K::Slot>() * super::MAX_FANOUT <= SEPS_SMALL {
        true => f(&mut [0; SEPS_SMALL]),
        false => f(&mut [0; SEPS_MAX]),
    }
}

/// A key's one-byte fingerprint (FPTree): the top byte of its FNV-1a hash,
/// finished with a multiply so that short keys spread too.
pub(super) fn fingerprint(key: &[u8]) -> u8 {
    let h = fnv1a(key);
    ((h ^ (h >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9) >> 56) as u8
}

/// A tree's node geometry: fan-out and the key and value sizes.
#[derive(Clone, Copy, Debug)]
pub(super) struct Geo {
    pub fanout: usize,
    pub ks: usize,
    pub vs: usize,
}

impl Geo {
    /// Where a leaf's slots start.
    #[inline]
    pub fn slots_off(&self) -> usize {
        (FPS_OFF + self.fanout).next_multiple_of(8)
    }

    /// Where leaf slot `i` starts.
    #[inline]
    pub fn slot(&self, i: usize) -> usize {
        self.slots_off() + i * (self.ks + self.vs)
    }

    /// Where an inner node's children start.
    #[inline]
    pub fn kids_off(&self) -> usize {
        KEYS_OFF + self.fanout * self.ks
    }

    /// Bytes of every node of this tree.
    pub fn size(&self) -> usize {
        self.slot(self.fanout)
            .max(self.kids_off() + (self.fanout + 1) * 8)
    }

    /// The bitmap with every slot in use.
    #[inline]
    pub fn full(&self) -> u64 {
        if self.fanout == 64 {
            u64::MAX
        } else {
            (1u64 << self.fanout) - 1
        }
    }

    /// The fewest entries of a leaf other than the root: a removal that
    /// leaves fewer merges the leaf or borrows from a sibling.
    pub fn min_leaf(&self) -> usize {
        self.fanout / 4
    }

    /// The fewest keys of an inner node other than the root.
    pub fn min_inner(&self) -> usize {
        self.fanout / 2
    }
}

/// A node's bytes as read, with its offset.
#[derive(Clone, Debug)]
pub(super) struct Raw {
    pub off: u64,
    pub b: Buf,
}

/// The bytes of a node read: its head, on the stack (what a descent
/// reads), or the whole node.
#[derive(Clone, Debug)]
pub(super) enum Buf {
    Head { len: usize, b: [u8; HEAD_MAX] },
    Whole(Vec<u8>),
}

impl Buf {
    fn zeroed(len: usize) -> Buf {
        if len <= HEAD_MAX {
            Buf::Head {
                len,
                b: [0; HEAD_MAX],
            }
        } else {
            Buf::Whole(vec![0; len])
        }
    }
}

impl Deref for Buf {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            Buf::Head { len, b } => &b[..*len],
            Buf::Whole(v) => v,
        }
    }
}

impl DerefMut for Buf {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            Buf::Head { len, b } => &mut b[..*len],
            Buf::Whole(v) => v,
        }
    }
}

impl Raw {
    /// Reads the node at `off` and checks what decoding relies on: its
    /// kind, an inner node's count, a leaf's bitmap within the fan-out.
    pub fn load<M: Mem + ?Sized>(m: &mut M, geo: &Geo, off: u64) -> Result<Raw> {
        Raw::read_checked(m, geo, off, geo.size())
    }

    /// Reads the first `len` bytes of the node at `off` (they hold its
    /// kind, count and bitmap) and checks what decoding relies on.
    fn read_checked<M: Mem + ?Sized>(m: &mut M, geo: &Geo, off: u64, len: usize) -> Result<Raw> {
        let mut n = Raw {
            off,
            b: Buf::zeroed(len),
        };
        n.fill(m, geo, off, len)?;
        Ok(n)
    }

    /// Reads the first `len` bytes of the node at `off` into this node's
    /// buffer (reused when it has the room; the bytes past `len` are never
    /// seen: `Buf` shows only its `len`) and checks them.
    fn fill<M: Mem + ?Sized>(&mut self, m: &mut M, geo: &Geo, off: u64, len: usize) -> Result<()> {
        if off == 0 {
            return Err(corrupt(WHAT, off, "null child or root pointer"));
        }
        match &mut self.b {
            Buf::Head { len: l, b } if len <= HEAD_MAX => {
                *l = len;
                m.read_at(off, &mut b[..len])?;
            }
            Buf::Whole(v) if v.len() == len => m.read_at(off, v)?,
            b => {
                *b = Buf::zeroed(len);
                m.read_at(off, b)?;
            }
        }
        self.off = off;
        self.check(geo)
    }

    /// What decoding relies on: a known kind, an inner node's count and a
    /// leaf's bitmap within the fan-out.
    fn check(&self, geo: &Geo) -> Result<()> {
        match le32(&self.b, KIND_OFF) {
            KIND_LEAF if self.bitmap() & !geo.full() != 0 => {
                Err(corrupt(WHAT, self.off, "bitmap bits past the fan-out"))
            }
            KIND_INNER if self.count() > geo.fanout => {
                Err(corrupt(WHAT, self.off, "key count above the fan-out"))
            }
            KIND_LEAF | KIND_INNER => Ok(()),
            _ => Err(corrupt(WHAT, self.off, "unknown node kind")),
        }
    }

    /// [`load_head`](Self::load_head) of the node at `off` into this
    /// node's buffer: a descent reads each level into one buffer on the
    /// stack instead of zeroing a new one and moving it.
    pub fn reload_head<M: Mem + ?Sized>(&mut self, m: &mut M, geo: &Geo, off: u64) -> Result<()> {
        self.fill(m, geo, off, geo.slots_off())
    }

    /// Reads what a descent needs first of the node at `off`, into a
    /// buffer on the stack: a leaf's words and fingerprints (its slots
    /// are read one at a time by [`find_in`](Self::find_in) and
    /// [`val_slot_in`](Self::val_slot_in)), an inner node's count and
    /// first separators (the others and the child taken are read one at a
    /// time by [`child_for`](Self::child_for) and [`kid_in`](Self::kid_in)).
    /// A lookup reads the first line of each node on its way, the
    /// separators its binary search compares, one child word per level and
    /// the leaf slots whose fingerprint matches, not whole nodes;
    /// [`load`](Self::load) reads a whole node.
    pub fn load_head<M: Mem + ?Sized>(m: &mut M, geo: &Geo, off: u64) -> Result<Raw> {
        Raw::read_checked(m, geo, off, geo.slots_off())
    }

    /// The slot holding `k` (fingerprint `fp`), reading only the keys
    /// whose fingerprint matches.
    pub fn find_in<K: Storable, M: Mem + ?Sized>(
        &self,
        m: &mut M,
        geo: &Geo,
        k: &K::Ref,
        fp: u8,
    ) -> Result<Option<usize>>
    where
        K::Ref: Ord,
    {
        let used = self.bitmap();
        let mut key = K::Slot::zeroed();
        let want = u64::from(fp) * 0x0101_0101_0101_0101;
        // Eight fingerprints at a time (SWAR): 0x80 in each byte equal to
        // `fp`, exactly; then only the slots in use among those.
        let fps = &self.b[FPS_OFF..geo.slots_off()];
        for (c, word) in fps.chunks_exact(8).enumerate() {
            let x = u64::from_le_bytes(word.try_into().expect("8 bytes")) ^ want;
            const LOW: u64 = 0x7f7f_7f7f_7f7f_7f7f;
            let mut same = !(((x & LOW) + LOW) | x | LOW);
            while same != 0 {
                let i = c * 8 + (same.trailing_zeros() / 8) as usize;
                same &= same - 1;
                if used & (1 << i) == 0 {
                    continue;
                }
                m.read_at(
                    self.off + geo.slot(i) as u64,
                    bytemuck::bytes_of_mut(&mut key),
                )?;
                if K::slot_eq(m, &key, k)? {
                    return Ok(Some(i));
                }
            }
        }
        Ok(None)
    }

    /// The key slot of slot `i`, read from the pool.
    pub fn key_slot_in<K: Storable, M: Mem + ?Sized>(
        &self,
        m: &mut M,
        geo: &Geo,
        i: usize,
    ) -> Result<K::Slot> {
        let mut k = K::Slot::zeroed();
        m.read_at(
            self.off + geo.slot(i) as u64,
            bytemuck::bytes_of_mut(&mut k),
        )?;
        Ok(k)
    }

    /// The value slot of slot `i`, read from the pool.
    pub fn val_slot_in<V: Storable, M: Mem + ?Sized>(
        &self,
        m: &mut M,
        geo: &Geo,
        i: usize,
    ) -> Result<V::Slot> {
        let mut v = V::Slot::zeroed();
        let at = self.off + (geo.slot(i) + geo.ks) as u64;
        m.read_at(at, bytemuck::bytes_of_mut(&mut v))?;
        Ok(v)
    }

    #[inline]
    pub fn is_leaf(&self) -> bool {
        le32(&self.b, KIND_OFF) == KIND_LEAF
    }

    #[inline]
    pub fn stamp(&self) -> u64 {
        le64(&self.b, STAMP_OFF)
    }

    #[inline]
    pub fn next(&self) -> u64 {
        le64(&self.b, NEXT_OFF)
    }

    // ---- leaves ----

    #[inline]
    pub fn bitmap(&self) -> u64 {
        le64(&self.b, BITMAP_OFF)
    }

    /// Entries in a leaf.
    pub fn entries(&self) -> usize {
        self.bitmap().count_ones() as usize
    }

    pub fn key<K: Storable>(&self, geo: &Geo, i: usize) -> K::Slot {
        bytemuck::pod_read_unaligned(&self.b[geo.slot(i)..][..geo.ks])
    }

    pub fn val<V: Storable>(&self, geo: &Geo, i: usize) -> V::Slot {
        bytemuck::pod_read_unaligned(&self.b[geo.slot(i) + geo.ks..][..geo.vs])
    }

    /// Slot `i`'s bytes (key and value slots) and fingerprint.
    pub fn raw_entry(&self, geo: &Geo, i: usize) -> (&[u8], u8) {
        (
            &self.b[geo.slot(i)..][..geo.ks + geo.vs],
            self.b[FPS_OFF + i],
        )
    }

    /// The leaf's entries in key order, as (key, slot); out-of-line keys
    /// are read from the pool.
    pub fn sorted<K: Storable, M: Mem + ?Sized>(
        &self,
        m: &mut M,
        geo: &Geo,
    ) -> Result<Vec<(K, usize)>>
    where
        K::Ref: Ord,
    {
        let mut bits = self.bitmap();
        let mut out = Vec::with_capacity(bits.count_ones() as usize);
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            out.push((K::load(m, &self.key::<K>(geo, i))?, i));
        }
        out.sort_unstable_by(|a, b| a.0.borrowed().cmp(b.0.borrowed()));
        Ok(out)
    }

    /// The leaf's entries in key order.
    pub fn sorted_entries<K: Storable, V: Storable, M: Mem + ?Sized>(
        &self,
        m: &mut M,
        geo: &Geo,
    ) -> Result<Vec<(K, V)>>
    where
        K::Ref: Ord,
    {
        let sorted = self.sorted::<K, M>(m, geo)?;
        let mut out = Vec::with_capacity(sorted.len());
        for (k, i) in sorted {
            out.push((k, V::load(m, &self.val::<V>(geo, i))?));
        }
        Ok(out)
    }

    /// Sets the stamp, next and bitmap words in the buffer.
    pub fn set_words(&mut self, stamp: u64, next: u64, bitmap: u64) {
        self.b[STAMP_OFF..NEXT_OFF].copy_from_slice(&stamp.to_le_bytes());
        self.b[NEXT_OFF..BITMAP_OFF].copy_from_slice(&next.to_le_bytes());
        self.b[BITMAP_OFF..FPS_OFF].copy_from_slice(&bitmap.to_le_bytes());
    }

    /// Writes the buffer's bytes from the stamp up to `end` (the bitmap's
    /// end, or past a fingerprint) in one write.
    pub fn write_words(&self, tx: &mut Tx<'_>, end: usize) -> Result<()> {
        Ok(tx.write_bytes(self.off + STAMP_OFF as u64, &self.b[STAMP_OFF..end])?)
    }

    /// Writes the key and value slots `k`, `v` (made by
    /// [`Storable::store`]) for key bytes `kb` into free slot `i` in the
    /// pool and sets its fingerprint in the buffer (the caller writes the
    /// words).
    pub fn put_slot<K: Storable, V: Storable>(
        &mut self,
        tx: &mut Tx<'_>,
        geo: &Geo,
        i: usize,
        kb: &[u8],
        k: &K::Slot,
        v: &V::Slot,
    ) -> Result<()> {
        self.b[FPS_OFF + i] = fingerprint(kb);
        let (k, v) = (bytemuck::bytes_of(k), bytemuck::bytes_of(v));
        let at = self.off + geo.slot(i) as u64;
        // One write of the slot (one entry of the write set): on the stack
        // when it is small, as it is for fixed-size keys and values.
        let mut small = [0u8; 128];
        if let Some(kv) = small.get_mut(..k.len() + v.len()) {
            kv[..k.len()].copy_from_slice(k);
            kv[k.len()..].copy_from_slice(v);
            tx.write_bytes(at, kv)?;
        } else {
            tx.write_bytes(at, &[k, v].concat())?;
        }
        Ok(())
    }

    // ---- inner nodes ----

    /// Keys in use in an inner node.
    #[inline]
    pub fn count(&self) -> usize {
        le32(&self.b, COUNT_OFF) as usize
    }

    #[inline]
    pub fn ikey<K: Storable>(&self, geo: &Geo, i: usize) -> K::Slot {
        bytemuck::pod_read_unaligned(&self.b[KEYS_OFF + i * geo.ks..][..geo.ks])
    }

    #[inline]
    pub fn kid(&self, geo: &Geo, i: usize) -> u64 {
        le64(&self.b, geo.kids_off() + i * 8)
    }

    /// Separator `i`'s slot: from the bytes read, else read alone from the
    /// pool (a node read by [`load_head`](Self::load_head)).
    fn key_in<K: Storable, M: Mem + ?Sized>(
        &self,
        m: &mut M,
        geo: &Geo,
        i: usize,
    ) -> Result<K::Slot> {
        let at = KEYS_OFF + i * geo.ks;
        if at + geo.ks <= self.b.len() {
            return Ok(self.ikey::<K>(geo, i));
        }
        let mut k = K::Slot::zeroed();
        m.read_at(self.off + at as u64, bytemuck::bytes_of_mut(&mut k))?;
        Ok(k)
    }

    /// Child `i` (at most [`count`](Self::count)): from the bytes read, else
    /// read alone from the pool.
    pub fn kid_in<M: Mem + ?Sized>(&self, m: &mut M, geo: &Geo, i: usize) -> Result<u64> {
        let at = geo.kids_off() + i * 8;
        if at + 8 <= self.b.len() {
            return Ok(self.kid(geo, i));
        }
        let mut w = [0u8; 8];
        m.read_at(self.off + at as u64, &mut w)?;
        Ok(u64::from_le_bytes(w))
    }

    /// The child that holds `k`: the number of separators `<= k`.
    #[inline]
    pub fn child_for<K: Storable, M: Mem + ?Sized>(
        &self,
        m: &mut M,
        geo: &Geo,
        k: &K::Ref,
    ) -> Result<usize>
    where
        K::Ref: Ord,
    {
        with_seps::<K, _>(|seps| self.partition::<K, M>(m, geo, k, Ordering::is_le, seps))
    }

    /// [`child_for`](Self::child_for) with a buffer for the separators
    /// that a descent zeroes once for all its levels.
    #[inline]
    pub fn child_for_in<K: Storable, M: Mem + ?Sized>(
        &self,
        m: &mut M,
        geo: &Geo,
        k: &K::Ref,
        seps: &mut [u8],
    ) -> Result<usize>
    where
        K::Ref: Ord,
    {
        self.partition::<K, M>(m, geo, k, Ordering::is_le, seps)
    }

    /// The child that holds the largest keys `< k`.
    pub fn child_before<K: Storable, M: Mem + ?Sized>(
        &self,
        m: &mut M,
        geo: &Geo,
        k: &K::Ref,
    ) -> Result<usize>
    where
        K::Ref: Ord,
    {
        with_seps::<K, _>(|seps| self.partition::<K, M>(m, geo, k, Ordering::is_lt, seps))
    }

    /// The number of separators `s` for which `pred(s.cmp(k))` holds (a
    /// prefix of them).
    #[inline]
    fn partition<K: Storable, M: Mem + ?Sized>(
        &self,
        m: &mut M,
        geo: &Geo,
        k: &K::Ref,
        pred: fn(Ordering) -> bool,
        seps: &mut [u8],
    ) -> Result<usize>
    where
        K::Ref: Ord,
    {
        let (mut lo, mut hi) = (0, self.count());
        let bytes = hi * geo.ks;
        if KEYS_OFF + bytes > self.b.len() && bytes <= seps.len() {
            // Separators past the head: read together, one read (and one
            // access check) rather than one per comparison; at most the
            // buffer's bytes (`with_seps`), lines the search touches anyway.
            m.read_at(self.off + KEYS_OFF as u64, &mut seps[..bytes])?;
            while lo < hi {
                let mid = (lo + hi) / 2;
                let sep: K::Slot = bytemuck::pod_read_unaligned(&seps[mid * geo.ks..][..geo.ks]);
                if pred(K::slot_cmp(m, &sep, k)?) {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            return Ok(lo);
        }
        while lo < hi {
            let mid = (lo + hi) / 2;
            let sep = self.key_in::<K, M>(m, geo, mid)?;
            if pred(K::slot_cmp(m, &sep, k)?) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// An inner node's separators (their slots) and children.
    pub fn decode_inner<K: Storable>(&self, geo: &Geo) -> (Vec<K::Slot>, Vec<u64>) {
        let n = self.count();
        (
            (0..n).map(|i| self.ikey::<K>(geo, i)).collect(),
            (0..=n).map(|i| self.kid(geo, i)).collect(),
        )
    }
}

/// Writes an inner node: its first 24 bytes, then its separators and
/// children from index `from` on (what an insert or removal at `from`
/// shifted; 0 for a new node).
pub(super) fn store_inner<K: Pod>(
    tx: &mut Tx<'_>,
    geo: &Geo,
    off: u64,
    stamp: u64,
    keys: &[K],
    kids: &[u64],
    from: usize,
) -> Result<()> {
    let n = keys.len();
    let mut h = [0u8; KEYS_OFF];
    h[KIND_OFF..COUNT_OFF].copy_from_slice(&KIND_INNER.to_le_bytes());
    h[COUNT_OFF..STAMP_OFF].copy_from_slice(&(n as u32).to_le_bytes());
    h[STAMP_OFF..NEXT_OFF].copy_from_slice(&stamp.to_le_bytes());
    tx.write_bytes(off, &h)?;
    if from < n {
        let at = off + (KEYS_OFF + from * geo.ks) as u64;
        tx.write_bytes(at, bytemuck::cast_slice(&keys[from..]))?;
    }
    if from <= n {
        let kids: Vec<u8> = kids[from..].iter().flat_map(|k| k.to_le_bytes()).collect();
        tx.write_bytes(off + (geo.kids_off() + from * 8) as u64, &kids)?;
    }
    Ok(())
}

/// Writes a whole leaf holding `entries` (each its key and value slots'
/// bytes and its fingerprint, as [`Raw::raw_entry`] reads them) in slots
/// `0..n` (a new node, or one rebuilt).
pub(super) fn store_leaf(
    tx: &mut Tx<'_>,
    geo: &Geo,
    off: u64,
    stamp: u64,
    next: u64,
    entries: &[(&[u8], u8)],
) -> Result<()> {
    let n = entries.len();
    let bitmap = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
    let mut h = vec![0u8; FPS_OFF + n];
    h[KIND_OFF..COUNT_OFF].copy_from_slice(&KIND_LEAF.to_le_bytes());
    h[STAMP_OFF..NEXT_OFF].copy_from_slice(&stamp.to_le_bytes());
    h[NEXT_OFF..BITMAP_OFF].copy_from_slice(&next.to_le_bytes());
    h[BITMAP_OFF..FPS_OFF].copy_from_slice(&bitmap.to_le_bytes());
    let mut slots = Vec::with_capacity(n * (geo.ks + geo.vs));
    for (i, &(kv, fp)) in entries.iter().enumerate() {
        h[FPS_OFF + i] = fp;
        slots.extend_from_slice(kv);
    }
    tx.write_bytes(off, &h)?;
    if n > 0 {
        tx.write_bytes(off + geo.slots_off() as u64, &slots)?;
    }
    Ok(())
}
