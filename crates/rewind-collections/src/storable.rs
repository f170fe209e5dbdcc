//! What a [`BTreeMap`](crate::BTreeMap) stores as keys and values: a
//! [`Stored`] type kept whole in its slot, or a byte string of any length
//! (`Vec<u8>`, `String`) kept in a 40-byte slot, inline up to 36 bytes (a
//! UUID's text, a 32-byte hash) and in a block of its own beyond.
//!
//! A byte string's slot, little-endian:
//!
//! ```text
//! len <= 36 (inline)                 len > 36 (out of line)
//! 0   len    u32                     0   len     u32
//! 4   bytes  [u8; 36] then zeros     4   prefix  [u8; 28]  its first 28 bytes
//! 40  (end)                          32  block   u64       a block of len bytes
//!                                    40  (end)
//! ```
//!
//! The block is allocated when the string is stored and freed when its
//! entry is removed or its value replaced, in the same transaction (rewind
//! fences and flushes the allocator's state for each: keys that fit
//! inline cost no allocation). A comparison reads the block only when the
//! 28-byte prefixes are equal, so a descent through separators of distinct
//! prefixes reads no block.

use std::borrow::Cow;
use std::cmp::Ordering;

use bytemuck::Pod;
use rewind::{PPtr, Tx};

use crate::error::{corrupt, Error, Result};
use crate::mem::{check_span, le32, le64, Mem};
use crate::types::{Stored, TypeTag};

mod sealed {
    /// Only this crate's types implement [`Storable`](super::Storable).
    pub trait Sealed {}
    impl<T: crate::Stored> Sealed for T {}
    impl Sealed for Vec<u8> {}
    impl Sealed for String {}
}

/// A key or value type of a [`BTreeMap`](crate::BTreeMap): every
/// [`Stored`] type (integers, arrays, [`FixedBytes<N>`](crate::FixedBytes),
/// a program's `Pod` structs), and the byte strings `Vec<u8>` and `String`
/// of any length, ordered by their bytes. Lookups take
/// [`Ref`](Self::Ref): the type itself, `[u8]` or `str`.
///
/// ```
/// use rewind::{Pool, PoolConfig};
/// use rewind_collections::{BTreeMap, Error};
///
/// let dir = tempfile::tempdir().unwrap();
/// let pool = Pool::create(dir.path().join("s.pool"), "s", 8 << 20, &PoolConfig::default())?;
/// let map = pool.transaction(|tx| {
///     let map = BTreeMap::<String, Vec<u8>>::create(tx)?;
///     map.insert(tx, "a short key".into(), b"inline".to_vec())?;
///     map.insert(tx, "a key longer than thirty-six bytes, out of line".into(), vec![7; 100])?;
///     Ok::<_, Error>(map)
/// })?;
/// assert_eq!(map.get(&pool, "a short key")?.as_deref(), Some(&b"inline"[..]));
/// assert_eq!(map.get(&pool, "a key longer than thirty-six bytes, out of line")?, Some(vec![7; 100]));
/// # Ok::<(), Error>(())
/// ```
pub trait Storable: Sized + Clone + 'static + sealed::Sealed {
    /// What lookups take: `Self` for a [`Stored`] type, `[u8]` for
    /// `Vec<u8>`, `str` for `String`.
    type Ref: ?Sized + ToOwned<Owned = Self>;
    #[doc(hidden)]
    /// The fixed-size bytes kept in a node's slot.
    type Slot: Pod;
    #[doc(hidden)]
    /// True when the slot holds the whole value (no block to read or free).
    const INLINE: bool;
    #[doc(hidden)]
    fn borrowed(&self) -> &Self::Ref;
    #[doc(hidden)]
    /// The bytes a key's fingerprint is taken of.
    fn ref_bytes(r: &Self::Ref) -> &[u8];
    #[doc(hidden)]
    /// Checks the type fingerprint `b` (48 bytes) against this type's.
    fn check_tag(b: &[u8], what: &'static str, offset: u64, part: &'static str) -> Result<()>;
    #[doc(hidden)]
    fn tag() -> [u8; crate::types::TAG_SIZE];
    #[doc(hidden)]
    /// The name the type fingerprint records.
    fn stored_name() -> Cow<'static, str>;
    #[doc(hidden)]
    /// The value a slot holds, reading its block if it has one.
    fn load<M: Mem + ?Sized>(m: &mut M, slot: &Self::Slot) -> Result<Self>;
    #[doc(hidden)]
    /// The slot for `r`, allocating its block in `tx` if it needs one.
    fn store(tx: &mut Tx<'_>, r: &Self::Ref) -> Result<Self::Slot>;
    #[doc(hidden)]
    /// Frees the slot's block, if it has one, in `tx`.
    fn release(tx: &mut Tx<'_>, slot: &Self::Slot) -> Result<()>;
    #[doc(hidden)]
    /// The slot's block (offset), if it has one.
    fn block(slot: &Self::Slot) -> Option<u64>;
    #[doc(hidden)]
    /// Compares the key in `slot` with `r`.
    fn slot_cmp<M: Mem + ?Sized>(m: &mut M, slot: &Self::Slot, r: &Self::Ref) -> Result<Ordering>
    where
        Self::Ref: Ord;
    #[doc(hidden)]
    /// True if the key in `slot` equals `r`.
    fn slot_eq<M: Mem + ?Sized>(m: &mut M, slot: &Self::Slot, r: &Self::Ref) -> Result<bool>
    where
        Self::Ref: Ord;
    #[doc(hidden)]
    /// A separator `s` with `lo < s <= hi`, as short as the type allows
    /// (`hi` itself for a fixed-size type).
    fn separator(lo: &Self::Ref, hi: &Self::Ref) -> Self
    where
        Self::Ref: Ord;
}

impl<T: Stored> Storable for T {
    type Ref = T;
    type Slot = T;
    const INLINE: bool = true;

    #[inline]
    fn borrowed(&self) -> &T {
        self
    }
    #[inline]
    fn ref_bytes(r: &T) -> &[u8] {
        bytemuck::bytes_of(r)
    }
    fn check_tag(b: &[u8], what: &'static str, offset: u64, part: &'static str) -> Result<()> {
        TypeTag::check::<T>(b, what, offset, part)
    }
    fn tag() -> [u8; crate::types::TAG_SIZE] {
        TypeTag::of::<T>().encode()
    }
    fn stored_name() -> Cow<'static, str> {
        T::type_name()
    }
    #[inline]
    fn load<M: Mem + ?Sized>(_: &mut M, slot: &T) -> Result<T> {
        Ok(*slot)
    }
    #[inline]
    fn store(_: &mut Tx<'_>, r: &T) -> Result<T> {
        Ok(*r)
    }
    #[inline]
    fn release(_: &mut Tx<'_>, _: &T) -> Result<()> {
        Ok(())
    }
    #[inline]
    fn block(_: &T) -> Option<u64> {
        None
    }
    #[inline]
    fn slot_cmp<M: Mem + ?Sized>(_: &mut M, slot: &T, r: &T) -> Result<Ordering>
    where
        T: Ord,
    {
        Ok(slot.cmp(r))
    }
    #[inline]
    fn slot_eq<M: Mem + ?Sized>(_: &mut M, slot: &T, r: &T) -> Result<bool>
    where
        T: Ord,
    {
        Ok(slot == r)
    }
    fn separator(_: &T, hi: &T) -> T
    where
        T: Ord,
    {
        *hi
    }
}

/// A byte string's slot: see the module docs.
pub type VarSlot = [u8; VAR_SLOT];
/// Bytes of a byte string's slot.
pub const VAR_SLOT: usize = 40;
/// The longest byte string kept inline.
pub const VAR_INLINE: usize = VAR_SLOT - 4;
const PREFIX: usize = 28;
const BLOCK_OFF: usize = 4 + PREFIX;
const WHAT: &str = "B+-tree byte string";

fn var_len(slot: &VarSlot) -> usize {
    le32(slot, 0) as usize
}

fn var_store(tx: &mut Tx<'_>, b: &[u8]) -> Result<VarSlot> {
    let len = u32::try_from(b.len()).map_err(|_| Error::TooLong {
        what: WHAT,
        len: b.len() as u64,
        max: u32::MAX as u64,
    })?;
    let mut s = [0u8; VAR_SLOT];
    s[..4].copy_from_slice(&len.to_le_bytes());
    if b.len() <= VAR_INLINE {
        s[4..4 + b.len()].copy_from_slice(b);
    } else {
        let block = tx.alloc_bytes_unzeroed(b.len() as u64)?;
        tx.write_bytes(block, b)?;
        s[4..BLOCK_OFF].copy_from_slice(&b[..PREFIX]);
        s[BLOCK_OFF..].copy_from_slice(&block.to_le_bytes());
    }
    Ok(s)
}

fn var_block(slot: &VarSlot) -> Option<u64> {
    (var_len(slot) > VAR_INLINE).then(|| le64(slot, BLOCK_OFF))
}

fn var_release(tx: &mut Tx<'_>, slot: &VarSlot) -> Result<()> {
    match var_block(slot) {
        Some(0) => Err(corrupt(WHAT, 0, "null block pointer")),
        Some(b) => Ok(tx.free(PPtr::<u8>::from_offset(b))?),
        None => Ok(()),
    }
}

/// The string's bytes: the slot's, or its block's (checked to lie in the
/// pool before a buffer of its length is made).
fn var_load<'s, M: Mem + ?Sized>(m: &mut M, slot: &'s VarSlot) -> Result<Cow<'s, [u8]>> {
    let len = var_len(slot);
    match var_block(slot) {
        None => Ok(Cow::Borrowed(&slot[4..4 + len])),
        Some(0) => Err(corrupt(WHAT, 0, "null block pointer")),
        Some(b) => {
            check_span(m, WHAT, b, b, Some(len as u64))?;
            let mut v = vec![0u8; len];
            m.read_at(b, &mut v)?;
            if v[..PREFIX] != slot[4..BLOCK_OFF] {
                return Err(corrupt(
                    WHAT,
                    b,
                    "a block that does not start with its prefix",
                ));
            }
            Ok(Cow::Owned(v))
        }
    }
}

fn var_cmp<M: Mem + ?Sized>(m: &mut M, slot: &VarSlot, r: &[u8]) -> Result<Ordering> {
    let len = var_len(slot);
    if len <= VAR_INLINE {
        return Ok(slot[4..4 + len].cmp(r));
    }
    // The prefix decides unless it is all of `r`'s first 28 bytes.
    let rp = &r[..r.len().min(PREFIX)];
    match slot[4..BLOCK_OFF].cmp(rp) {
        Ordering::Equal if r.len() >= PREFIX => Ok(var_load(m, slot)?.as_ref().cmp(r)),
        o => Ok(o),
    }
}

fn var_eq<M: Mem + ?Sized>(m: &mut M, slot: &VarSlot, r: &[u8]) -> Result<bool> {
    let len = var_len(slot);
    if len != r.len() {
        return Ok(false);
    }
    if len <= VAR_INLINE {
        return Ok(slot[4..4 + len] == *r);
    }
    Ok(slot[4..BLOCK_OFF] == r[..PREFIX] && *var_load(m, slot)? == *r)
}

/// The shortest prefix of `hi` above `lo` (`lo < hi`), cut at one of the
/// lengths `cut` accepts.
fn short_prefix(lo: &[u8], hi: &[u8], cut: impl Fn(usize) -> bool) -> usize {
    let same = lo.iter().zip(hi).take_while(|(a, b)| a == b).count();
    (same + 1..=hi.len()).find(|&n| cut(n)).unwrap_or(hi.len())
}

impl Storable for Vec<u8> {
    type Ref = [u8];
    type Slot = VarSlot;
    const INLINE: bool = false;

    fn borrowed(&self) -> &[u8] {
        self
    }
    fn ref_bytes(r: &[u8]) -> &[u8] {
        r
    }
    fn check_tag(b: &[u8], what: &'static str, offset: u64, part: &'static str) -> Result<()> {
        TypeTag::check_named::<Self>(b, what, offset, part, VAR_SLOT, 1, || "Vec<u8>".into())
    }
    fn tag() -> [u8; crate::types::TAG_SIZE] {
        TypeTag::named("Vec<u8>".into(), VAR_SLOT, 1).encode()
    }
    fn stored_name() -> Cow<'static, str> {
        "Vec<u8>".into()
    }
    fn load<M: Mem + ?Sized>(m: &mut M, slot: &VarSlot) -> Result<Self> {
        Ok(var_load(m, slot)?.into_owned())
    }
    fn store(tx: &mut Tx<'_>, r: &[u8]) -> Result<VarSlot> {
        var_store(tx, r)
    }
    fn release(tx: &mut Tx<'_>, slot: &VarSlot) -> Result<()> {
        var_release(tx, slot)
    }
    fn block(slot: &VarSlot) -> Option<u64> {
        var_block(slot)
    }
    fn slot_cmp<M: Mem + ?Sized>(m: &mut M, slot: &VarSlot, r: &[u8]) -> Result<Ordering> {
        var_cmp(m, slot, r)
    }
    fn slot_eq<M: Mem + ?Sized>(m: &mut M, slot: &VarSlot, r: &[u8]) -> Result<bool> {
        var_eq(m, slot, r)
    }
    fn separator(lo: &[u8], hi: &[u8]) -> Self {
        hi[..short_prefix(lo, hi, |_| true)].to_vec()
    }
}

impl Storable for String {
    type Ref = str;
    type Slot = VarSlot;
    const INLINE: bool = false;

    fn borrowed(&self) -> &str {
        self
    }
    fn ref_bytes(r: &str) -> &[u8] {
        r.as_bytes()
    }
    fn check_tag(b: &[u8], what: &'static str, offset: u64, part: &'static str) -> Result<()> {
        TypeTag::check_named::<Self>(b, what, offset, part, VAR_SLOT, 1, || "String".into())
    }
    fn tag() -> [u8; crate::types::TAG_SIZE] {
        TypeTag::named("String".into(), VAR_SLOT, 1).encode()
    }
    fn stored_name() -> Cow<'static, str> {
        "String".into()
    }
    fn load<M: Mem + ?Sized>(m: &mut M, slot: &VarSlot) -> Result<Self> {
        String::from_utf8(var_load(m, slot)?.into_owned()).map_err(|_| {
            corrupt(
                WHAT,
                var_block(slot).unwrap_or(0),
                "a String that is not UTF-8",
            )
        })
    }
    fn store(tx: &mut Tx<'_>, r: &str) -> Result<VarSlot> {
        var_store(tx, r.as_bytes())
    }
    fn release(tx: &mut Tx<'_>, slot: &VarSlot) -> Result<()> {
        var_release(tx, slot)
    }
    fn block(slot: &VarSlot) -> Option<u64> {
        var_block(slot)
    }
    fn slot_cmp<M: Mem + ?Sized>(m: &mut M, slot: &VarSlot, r: &str) -> Result<Ordering> {
        var_cmp(m, slot, r.as_bytes())
    }
    fn slot_eq<M: Mem + ?Sized>(m: &mut M, slot: &VarSlot, r: &str) -> Result<bool> {
        var_eq(m, slot, r.as_bytes())
    }
    fn separator(lo: &str, hi: &str) -> Self {
        hi[..short_prefix(lo.as_bytes(), hi.as_bytes(), |n| hi.is_char_boundary(n))].to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators_are_short_and_between() {
        let s = Vec::<u8>::separator(b"apple", b"apricot");
        assert_eq!(s, b"apr");
        assert!(b"apple"[..] < s[..] && s[..] <= b"apricot"[..]);
        assert_eq!(Vec::<u8>::separator(b"ab", b"abc"), b"abc");
        assert_eq!(Vec::<u8>::separator(b"", b"b"), b"b");
        // Cut at a character boundary: "é" is two bytes.
        assert_eq!(String::separator("aéa", "aéb"), "aéb");
        assert_eq!(String::separator("a", "é"), "é");
        assert_eq!(u64::separator(&3, &9), 9);
    }

    #[test]
    fn short_prefix_is_above_lo() {
        assert_eq!(short_prefix(b"abc", b"abd", |_| true), 3);
        assert_eq!(short_prefix(b"a", b"b", |_| true), 1);
    }
}
