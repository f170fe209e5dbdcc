//! Type fingerprints: what a collection's header records about the types
//! it was created with, so that a handle of other types is refused.
//!
//! A collection is found again from a bare offset, so nothing in Rust's
//! type system ties the bytes in the pool to the handle's type parameters.
//! Every header therefore holds a [`TypeTag`] per part (key and value, or
//! element): the type's size, alignment and stable name, and the first
//! operation through a handle compares them with the handle's types. A
//! `BTreeMap<u64, u64>` reopened as `BTreeMap<[u8; 8], f64>` has the same
//! sizes but other names, and is an [`Error::TypeMismatch`] naming both.
//!
//! The name is the type's own choice ([`Stored::type_name`]), not
//! `std::any::type_name`, whose output the compiler may change between
//! versions: a type renamed or moved in the source keeps its name, and its
//! pools open. (The pool's named roots carry rewind's own
//! `TypeFingerprint`, of another shape: 64 bytes, a 40-byte name prefix.)
//!
//! On media (48 bytes, little-endian):
//!
//! ```text
//! 0   size      u32       size_of::<T>()
//! 4   align     u16       align_of::<T>()
//! 6   name_len  u16       bytes of the full name (at most 65,535)
//! 8   name_hash u64       64-bit FNV-1a of the full name
//! 16  name      [u8; 32]  the name's first 32 bytes, then zeros
//! 48  (end)
//! ```

use std::any::TypeId;
use std::borrow::Cow;
use std::cell::RefCell;

use bytemuck::Pod;
use rewind::PPtr;

use crate::error::{Error, Result};
use crate::mem::{le32, le64};
use crate::storable::Storable;

/// Plain data that a collection stores, with a stable name recorded (with
/// its size and alignment) in the collection's header.
///
/// Implemented for the integers, `f32`, `f64`, arrays of stored types,
/// [`FixedBytes<N>`](crate::FixedBytes), `PPtr<T>` of a stored `T`, and
/// the pointers to this crate's collections (`PPtr<BTreeMap<K, V>>` and
/// the others, from `as_ptr()`: collections as values of collections).
/// A program's own `#[repr(C)]` struct derives `Pod` and `Zeroable` (it
/// must have no padding: add explicit fields for it) and names itself:
///
/// ```
/// use rewind::{Pod, Zeroable};
/// use rewind_collections::Stored;
///
/// #[derive(Clone, Copy, Pod, Zeroable)]
/// #[repr(C)]
/// struct Point { x: u32, y: u32 }
///
/// impl Stored for Point {
///     fn type_name() -> std::borrow::Cow<'static, str> {
///         "myapp::Point".into() // kept when the type moves or is renamed
///     }
/// }
/// ```
pub trait Stored: Pod {
    /// The type's stable name: keep it when the type is renamed, change it
    /// when its meaning changes.
    fn type_name() -> Cow<'static, str>;
}

macro_rules! stored_primitive {
    ($($t:ty),*) => {$(
        impl Stored for $t {
            fn type_name() -> Cow<'static, str> {
                Cow::Borrowed(stringify!($t))
            }
        }
    )*};
}

stored_primitive!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, f32, f64);

impl<T: Stored, const N: usize> Stored for [T; N]
where
    [T; N]: Pod,
{
    fn type_name() -> Cow<'static, str> {
        Cow::Owned(format!("[{}; {N}]", T::type_name()))
    }
}

impl<const N: usize> Stored for crate::FixedBytes<N> {
    fn type_name() -> Cow<'static, str> {
        Cow::Owned(format!("FixedBytes<{N}>"))
    }
}

/// A pointer to a program's stored object, as a value: `PPtr<T>`.
impl<T: Stored> Stored for PPtr<T> {
    fn type_name() -> Cow<'static, str> {
        Cow::Owned(format!("PPtr<{}>", T::type_name()))
    }
}

/// The name of a collection's pointer as a value: `PPtr<` and the
/// collection's [`rewind::Pointee`] name `>`, the one name of each
/// collection type, whether it is a value or a named root.
fn pointer_name<T: rewind::Pointee>() -> Cow<'static, str> {
    Cow::Owned(format!("PPtr<{}>", T::pointee_name()))
}

/// A collection as a value of another (maps in maps): the pointer that
/// [`BTreeMap::as_ptr`](crate::BTreeMap::as_ptr) gives, named with the
/// collection's types, so that a map of `PPtr<BTreeMap<u64, u64>>` values
/// reopened as one of `PPtr<BTreeMap<u64, i64>>` is a type mismatch.
impl<K: Storable, V: Storable> Stored for PPtr<crate::BTreeMap<K, V>> {
    fn type_name() -> Cow<'static, str> {
        pointer_name::<crate::BTreeMap<K, V>>()
    }
}

/// A hash map as a value of another collection (see `PPtr<BTreeMap>`).
impl<K: Stored, V: Stored> Stored for PPtr<crate::HashMap<K, V>> {
    fn type_name() -> Cow<'static, str> {
        pointer_name::<crate::HashMap<K, V>>()
    }
}

/// A vector as a value of another collection (see `PPtr<BTreeMap>`).
impl<T: Stored> Stored for PPtr<crate::Vec<T>> {
    fn type_name() -> Cow<'static, str> {
        pointer_name::<crate::Vec<T>>()
    }
}

/// A list as a value of another collection (see `PPtr<BTreeMap>`).
impl<T: Stored> Stored for PPtr<crate::List<T>> {
    fn type_name() -> Cow<'static, str> {
        pointer_name::<crate::List<T>>()
    }
}

/// A blob as a value of another collection (see `PPtr<BTreeMap>`).
impl Stored for PPtr<crate::Blob> {
    fn type_name() -> Cow<'static, str> {
        pointer_name::<crate::Blob>()
    }
}

/// A collection as what a named root's pointer points to:
/// `tx.root_named::<PPtr<BTreeMap<String, u64>>>("accounts")` finds the
/// map stored under that name, and one named with other types is a
/// [`rewind::Error::TypeMismatch`]. As a value of another collection its
/// pointer is named from this name too (`pointer_name`).
impl<K: Storable, V: Storable> rewind::Pointee for crate::BTreeMap<K, V> {
    fn pointee_name() -> String {
        format!("BTreeMap<{}, {}>", K::stored_name(), V::stored_name())
    }
}

/// A hash map as a named root's pointee (see `BTreeMap`'s).
impl<K: Stored, V: Stored> rewind::Pointee for crate::HashMap<K, V> {
    fn pointee_name() -> String {
        format!("HashMap<{}, {}>", K::type_name(), V::type_name())
    }
}

/// A vector as a named root's pointee (see `BTreeMap`'s).
impl<T: Stored> rewind::Pointee for crate::Vec<T> {
    fn pointee_name() -> String {
        format!("Vec<{}>", T::type_name())
    }
}

/// A list as a named root's pointee (see `BTreeMap`'s).
impl<T: Stored> rewind::Pointee for crate::List<T> {
    fn pointee_name() -> String {
        format!("List<{}>", T::type_name())
    }
}

/// A blob as a named root's pointee (see `BTreeMap`'s).
impl rewind::Pointee for crate::Blob {
    fn pointee_name() -> String {
        "Blob".into()
    }
}

/// Bytes of a tag on media.
pub(crate) const TAG_SIZE: usize = 48;
const SIZE_OFF: usize = 0;
const ALIGN_OFF: usize = SIZE_OFF + 4;
const NAME_LEN_OFF: usize = ALIGN_OFF + 2;
const HASH_OFF: usize = NAME_LEN_OFF + 2;
const NAME_OFF: usize = HASH_OFF + 8;
const NAME_BYTES: usize = TAG_SIZE - NAME_OFF;

/// 64-bit FNV-1a.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

thread_local! {
    /// Each type's name hash and name length, computed once per thread: a
    /// name may be built by `format!`, and every operation checks it. A
    /// program stores few types, so a list searched in order is fastest.
    static NAME_HASHES: RefCell<Vec<(TypeId, u64, usize)>> = const { RefCell::new(Vec::new()) };
}

/// `T`'s name hash and name length (`name` is `T`'s name).
fn name_hash<T: 'static>(name: impl Fn() -> Cow<'static, str>) -> (u64, usize) {
    let id = TypeId::of::<T>();
    let compute = || {
        let name = name();
        (fnv1a(name.as_bytes()), name.len().min(u16::MAX as usize))
    };
    // `try_with`: in a thread-local destructor run after the cache's own,
    // as the thread ends (a value that reads a map when dropped), there is
    // no cache; `with` panicked there, and the panic aborted the process.
    let cached = NAME_HASHES.try_with(|c| {
        if let Some(&(_, h, n)) = c.borrow().iter().find(|e| e.0 == id) {
            return (h, n);
        }
        let e = compute();
        c.borrow_mut().push((id, e.0, e.1));
        e
    });
    cached.unwrap_or_else(|_| compute())
}

/// A type's fingerprint: its size, alignment and stable name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TypeTag {
    size: u32,
    align: u16,
    name_len: u16,
    hash: u64,
    name: Cow<'static, str>,
}

impl TypeTag {
    /// The fingerprint of `T`.
    pub fn of<T: Stored>() -> TypeTag {
        TypeTag::named(T::type_name(), size_of::<T>(), align_of::<T>())
    }

    /// The fingerprint of a type stored as `size` bytes of alignment
    /// `align` under `name` (a byte string's slot).
    pub fn named(name: Cow<'static, str>, size: usize, align: usize) -> TypeTag {
        TypeTag {
            size: size as u32,
            align: align as u16,
            name_len: name.len().min(u16::MAX as usize) as u16,
            hash: fnv1a(name.as_bytes()),
            name,
        }
    }

    /// The 48 bytes on media.
    pub fn encode(&self) -> [u8; TAG_SIZE] {
        let mut b = [0u8; TAG_SIZE];
        b[SIZE_OFF..ALIGN_OFF].copy_from_slice(&self.size.to_le_bytes());
        b[ALIGN_OFF..NAME_LEN_OFF].copy_from_slice(&self.align.to_le_bytes());
        b[NAME_LEN_OFF..HASH_OFF].copy_from_slice(&self.name_len.to_le_bytes());
        b[HASH_OFF..NAME_OFF].copy_from_slice(&self.hash.to_le_bytes());
        let n = self.name.len().min(NAME_BYTES);
        b[NAME_OFF..NAME_OFF + n].copy_from_slice(&self.name.as_bytes()[..n]);
        b
    }

    /// Checks the tag stored in `b` (48 bytes) against `T`'s.
    pub fn check<T: Stored>(
        b: &[u8],
        what: &'static str,
        offset: u64,
        part: &'static str,
    ) -> Result<()> {
        let (size, align) = (size_of::<T>(), align_of::<T>());
        TypeTag::check_named::<T>(b, what, offset, part, size, align, T::type_name)
    }

    /// Checks the tag stored in `b` (48 bytes) against that of the type
    /// `T`, stored as `size` bytes of alignment `align` under `name`.
    pub fn check_named<T: 'static>(
        b: &[u8],
        what: &'static str,
        offset: u64,
        part: &'static str,
        size: usize,
        align: usize,
        name: impl Fn() -> Cow<'static, str>,
    ) -> Result<()> {
        let found_size = le32(b, SIZE_OFF);
        let found_align = u16::from_le_bytes([b[ALIGN_OFF], b[ALIGN_OFF + 1]]);
        let found_len = u16::from_le_bytes([b[NAME_LEN_OFF], b[NAME_LEN_OFF + 1]]);
        let found_hash = le64(b, HASH_OFF);
        // Sizes and alignments first: they need no name.
        if found_size as usize == size && found_align as usize == align && size <= u32::MAX as usize
        {
            let (hash, len) = name_hash::<T>(&name);
            if found_hash == hash && found_len as usize == len {
                return Ok(());
            }
        }
        let stored = &b[NAME_OFF..TAG_SIZE];
        let shown = stored.iter().position(|&c| c == 0).unwrap_or(NAME_BYTES);
        let mut found = String::from_utf8_lossy(&stored[..shown]).into_owned();
        if found_len as usize > shown {
            found.push('…');
        }
        Err(Error::TypeMismatch {
            what,
            offset,
            part,
            found: format!("{found} ({found_size} bytes, align {found_align})"),
            expected: format!("{} ({size} bytes, align {align})", name()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_and_compose() {
        assert_eq!(u64::type_name(), "u64");
        assert_eq!(<[u8; 8]>::type_name(), "[u8; 8]");
        assert_eq!(crate::FixedBytes::<32>::type_name(), "FixedBytes<32>");
        assert_eq!(PPtr::<u64>::type_name(), "PPtr<u64>");
        assert_eq!(
            PPtr::<crate::BTreeMap<String, [u8; 4]>>::type_name(),
            "PPtr<BTreeMap<String, [u8; 4]>>"
        );
        assert_eq!(
            PPtr::<crate::HashMap<u64, u32>>::type_name(),
            "PPtr<HashMap<u64, u32>>"
        );
        assert_eq!(PPtr::<crate::List<u8>>::type_name(), "PPtr<List<u8>>");
        assert_eq!(PPtr::<crate::Vec<i64>>::type_name(), "PPtr<Vec<i64>>");
        assert_eq!(PPtr::<crate::Blob>::type_name(), "PPtr<Blob>");
    }

    #[test]
    fn same_size_other_name_is_a_mismatch_naming_both() {
        let b = TypeTag::of::<u64>().encode();
        assert!(TypeTag::check::<u64>(&b, "map", 64, "value").is_ok());
        let e = TypeTag::check::<f64>(&b, "map", 64, "value").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("u64 (8 bytes, align 8)"), "{msg}");
        assert!(msg.contains("f64 (8 bytes, align 8)"), "{msg}");
        assert!(TypeTag::check::<[u8; 8]>(&b, "map", 64, "key").is_err());
    }

    #[test]
    fn a_long_name_is_shown_cut() {
        #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
        #[repr(C)]
        struct Long(u64);
        impl Stored for Long {
            fn type_name() -> Cow<'static, str> {
                "a::very::long::module::path::to::Long".into()
            }
        }
        let b = TypeTag::of::<Long>().encode();
        assert!(TypeTag::check::<Long>(&b, "map", 0, "key").is_ok());
        let msg = TypeTag::check::<u64>(&b, "map", 0, "key")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("a::very::long::module::path::to:…"), "{msg}");
    }
}
