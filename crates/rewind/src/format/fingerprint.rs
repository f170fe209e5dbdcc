//! Type fingerprints: what a pool records about the type of a stored
//! object, so that reopening it as another type is a typed error rather
//! than a silent reinterpretation of its bytes.
//!
//! A fingerprint is the type's size, its alignment and a stable name the
//! type gives itself ([`Typed::type_name`]; `std::any::type_name` is not
//! stable across compilers). Two types of the same size and alignment but
//! different names differ. Stored as 64 bytes, little-endian:
//!
//! ```text
//! off  size  field
//!   0     8  size in bytes
//!   8     4  alignment in bytes
//!  12     4  name length in bytes (the whole name, even when longer than 40)
//!  16     8  FNV-1a 64 of the whole name
//!  24    40  the name's first 40 bytes, zero-padded
//! ```

use std::fmt;

use bytemuck::{Pod, Zeroable};

use super::pptr::PPtr;

/// Bytes of the name a fingerprint keeps (the hash covers all of it).
pub const NAME_PREFIX: usize = 40;

/// A type's size, alignment and stable name, as recorded in a pool (see
/// [`Typed`]). `Pod`, so collections can keep one in their headers.
///
/// ```
/// use rewind::{TypeFingerprint, Typed};
/// let a = TypeFingerprint::of::<u64>();
/// assert_eq!((a.size(), a.align(), a.name()), (8, 8, "u64".to_string()));
/// assert_ne!(a, TypeFingerprint::of::<i64>()); // same size, another type
/// assert_eq!(<[u32; 4]>::type_name(), "[u32; 4]");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Pod, Zeroable)]
#[repr(C)]
pub struct TypeFingerprint {
    size: u64,
    align: u32,
    name_len: u32,
    name_hash: u64,
    name: [u8; NAME_PREFIX],
}

/// FNV-1a, 64 bits: stable, and enough to tell names apart.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl TypeFingerprint {
    /// The fingerprint of `T`.
    pub fn of<T: Typed>() -> TypeFingerprint {
        TypeFingerprint::new(
            &T::type_name(),
            std::mem::size_of::<T>() as u64,
            std::mem::align_of::<T>() as u64,
        )
    }

    /// A fingerprint from its parts (for types whose layout is not a Rust
    /// type: a collection's node format, say).
    pub fn new(name: &str, size: u64, align: u64) -> TypeFingerprint {
        let mut prefix = [0u8; NAME_PREFIX];
        let n = name.len().min(NAME_PREFIX);
        prefix[..n].copy_from_slice(&name.as_bytes()[..n]);
        TypeFingerprint {
            size,
            align: u32::try_from(align).unwrap_or(u32::MAX),
            name_len: u32::try_from(name.len()).unwrap_or(u32::MAX),
            name_hash: fnv1a(name.as_bytes()),
            name: prefix,
        }
    }

    /// The type's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The type's alignment in bytes.
    pub fn align(&self) -> u64 {
        self.align as u64
    }

    /// The type's name, or its first 40 bytes followed by `…` when longer
    /// (bytes that are not UTF-8, from a damaged pool, are replaced).
    pub fn name(&self) -> String {
        let n = self
            .name
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(NAME_PREFIX);
        let mut s = String::from_utf8_lossy(&self.name[..n]).into_owned();
        if self.name_len as usize > n {
            s.push('…');
        }
        s
    }

    /// Whether every byte is zero (no fingerprint recorded).
    pub fn is_zero(&self) -> bool {
        *self == TypeFingerprint::zeroed()
    }

    /// The 64 bytes recorded in a pool.
    pub fn to_bytes(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..8].copy_from_slice(&self.size.to_le_bytes());
        b[8..12].copy_from_slice(&self.align.to_le_bytes());
        b[12..16].copy_from_slice(&self.name_len.to_le_bytes());
        b[16..24].copy_from_slice(&self.name_hash.to_le_bytes());
        b[24..64].copy_from_slice(&self.name);
        b
    }

    /// Decodes 64 recorded bytes (any bytes decode; compare the result).
    pub fn from_bytes(b: &[u8; 64]) -> TypeFingerprint {
        let word = |r: std::ops::Range<usize>| {
            let mut w = [0u8; 8];
            w[..r.len()].copy_from_slice(&b[r]);
            u64::from_le_bytes(w)
        };
        let mut name = [0u8; NAME_PREFIX];
        name.copy_from_slice(&b[24..64]);
        TypeFingerprint {
            size: word(0..8),
            align: word(8..12) as u32,
            name_len: word(12..16) as u32,
            name_hash: word(16..24),
            name,
        }
    }
}

impl fmt::Debug for TypeFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for TypeFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` ({} bytes, align {})",
            self.name(),
            self.size,
            self.align
        )
    }
}

/// A type that may be stored under a name in a pool's catalog: plain data
/// with a stable name. The name is what tells two types of the same size
/// apart, so give each stored type its own (a crate prefix helps:
/// `"myapp::Account"`); rename a type and reopening its pool is an error.
///
/// ```
/// use rewind::{Pod, Typed, Zeroable};
/// #[derive(Clone, Copy, Pod, Zeroable)]
/// #[repr(C)]
/// struct Account { id: u64, balance: u64 }
/// impl Typed for Account {
///     fn type_name() -> String { "bank::Account".into() }
/// }
/// ```
pub trait Typed: Pod {
    /// The stable name recorded in the pool.
    fn type_name() -> String;
}

macro_rules! typed_primitive {
    ($($t:ty),*) => {$(
        impl Typed for $t {
            fn type_name() -> String {
                stringify!($t).into()
            }
        }
    )*};
}

typed_primitive!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, f32, f64);

impl<T: Typed, const N: usize> Typed for [T; N]
where
    [T; N]: Pod,
{
    fn type_name() -> String {
        format!("[{}; {N}]", T::type_name())
    }
}

/// What a [`PPtr`] kept in a typed root may point to: a type with a
/// stable name. Every [`Typed`] type is one; a library's types that are
/// not plain data name themselves here (the collections of
/// `rewind-collections` do), so that a pointer to one is [`Typed`] and can
/// be a named root: `tx.root_named::<PPtr<BTreeMap<String, u64>>>("accounts")`.
pub trait Pointee: 'static {
    /// The stable name recorded in the pool (see [`Typed::type_name`]).
    fn pointee_name() -> String;
}

impl<T: Typed> Pointee for T {
    fn pointee_name() -> String {
        T::type_name()
    }
}

impl<T: Pointee> Typed for PPtr<T> {
    fn type_name() -> String {
        format!("PPtr<{}>", T::pointee_name())
    }
}

impl Typed for () {
    fn type_name() -> String {
        "()".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_difference() {
        let f = TypeFingerprint::of::<PPtr<[u64; 3]>>();
        assert_eq!(f.name(), "PPtr<[u64; 3]>");
        assert_eq!(TypeFingerprint::from_bytes(&f.to_bytes()), f);
        assert_ne!(TypeFingerprint::of::<u64>(), TypeFingerprint::of::<f64>());
        let long = "x".repeat(100);
        let g = TypeFingerprint::new(&long, 8, 8);
        assert!(g.name().ends_with('…'));
        assert_ne!(g, TypeFingerprint::new(&"x".repeat(101), 8, 8));
        assert!(TypeFingerprint::zeroed().is_zero());
    }
}
