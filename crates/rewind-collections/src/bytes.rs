//! Byte strings of bounded length as `Pod` values: keys and values of the
//! maps that are not fixed-size numbers (names, paths, short records).
//!
//! A [`FixedBytes<N>`] is `2 + N` bytes, alignment 1:
//!
//! ```text
//! 0   len    u16 (LE)   bytes in use, 0..=N
//! 2   bytes  [u8; N]    the string, then zeros
//! ```
//!
//! It is ordered, compared and hashed by its bytes in use (a prefix before
//! its extensions: `"ab" < "abc" < "b"`), so a [`BTreeMap`](crate::BTreeMap)
//! keyed by it is ordered as the strings are. Made by
//! [`FixedBytes::new`], its unused bytes are zero, so two equal strings
//! have equal bytes and the [`HashMap`](crate::HashMap), which compares raw
//! key bytes, finds them too.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

use bytemuck::{Pod, Zeroable};

use crate::error::{Error, Result};

/// The longest `N` (the length is stored in 16 bits).
pub const MAX_FIXED_BYTES: usize = u16::MAX as usize;

/// A byte string of at most `N` bytes, stored inline in `N + 2` bytes.
///
/// ```
/// use rewind::{Pool, PoolConfig};
/// use rewind_collections::{BTreeMap, Error, FixedBytes};
///
/// type Name = FixedBytes<24>;
/// let dir = tempfile::tempdir().unwrap();
/// let pool = Pool::create(dir.path().join("n.pool"), "n", 8 << 20, &PoolConfig::default())?;
/// let ages = pool.transaction(|tx| {
///     let ages = BTreeMap::<Name, u32>::create(tx)?;
///     for (name, age) in [("carol", 51), ("alice", 34), ("bob", 27)] {
///         ages.insert(tx, Name::new(name)?, age)?;
///     }
///     Ok::<_, Error>(ages)
/// })?;
/// let names: Vec<String> = ages
///     .iter(&pool)?
///     .map(|e| e.map(|(k, _)| k.to_string()))
///     .collect::<Result<_, _>>()?;
/// assert_eq!(names, ["alice", "bob", "carol"]);
/// assert_eq!(ages.get(&pool, &Name::new("bob")?)?, Some(27));
/// // Too long for 24 bytes: an error, not a truncation.
/// assert!(matches!(
///     Name::new("a name far longer than twenty-four bytes"),
///     Err(Error::TooLong { len: 40, max: 24, .. })
/// ));
/// # Ok::<(), rewind_collections::Error>(())
/// ```
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C, packed)]
pub struct FixedBytes<const N: usize> {
    // Read and written through `bytes_of`, as the layout above: a
    // reference to a field of a packed generic struct is not allowed.
    len: [u8; 2],
    bytes: [u8; N],
}

/// Where the string's bytes start (after the length).
const BYTES_OFF: usize = 2;

impl<const N: usize> FixedBytes<N> {
    /// Rejects an `N` whose length cannot be stored, at compile time.
    const FITS: () = assert!(N <= MAX_FIXED_BYTES, "FixedBytes<N>: N above 65535");

    /// The string `b`; [`Error::TooLong`] if it has more than `N` bytes.
    pub fn new(b: impl AsRef<[u8]>) -> Result<Self> {
        let () = Self::FITS;
        let b = b.as_ref();
        if b.len() > N {
            return Err(Error::TooLong {
                what: "FixedBytes",
                len: b.len() as u64,
                max: N as u64,
            });
        }
        let mut s = Self::zeroed();
        let raw = bytemuck::bytes_of_mut(&mut s);
        raw[..BYTES_OFF].copy_from_slice(&(b.len() as u16).to_le_bytes());
        raw[BYTES_OFF..BYTES_OFF + b.len()].copy_from_slice(b);
        Ok(s)
    }

    /// The bytes in use. A length above `N` (bytes made by something other
    /// than [`new`](Self::new)) reads as `N`.
    pub fn as_bytes(&self) -> &[u8] {
        let raw = bytemuck::bytes_of(self);
        let n = (u16::from_le_bytes([raw[0], raw[1]]) as usize).min(N);
        &raw[BYTES_OFF..BYTES_OFF + n]
    }

    /// The number of bytes in use.
    pub fn len(&self) -> usize {
        self.as_bytes().len()
    }

    /// True for the empty string.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most bytes it holds: `N`.
    pub const fn capacity() -> usize {
        N
    }
}

impl<const N: usize> Default for FixedBytes<N> {
    fn default() -> Self {
        Self::zeroed()
    }
}

impl<const N: usize> TryFrom<&[u8]> for FixedBytes<N> {
    type Error = Error;
    fn try_from(b: &[u8]) -> Result<Self> {
        Self::new(b)
    }
}

impl<const N: usize> TryFrom<&str> for FixedBytes<N> {
    type Error = Error;
    fn try_from(s: &str) -> Result<Self> {
        Self::new(s)
    }
}

impl<const N: usize> AsRef<[u8]> for FixedBytes<N> {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl<const N: usize> PartialEq for FixedBytes<N> {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl<const N: usize> Eq for FixedBytes<N> {}

impl<const N: usize> PartialOrd for FixedBytes<N> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<const N: usize> Ord for FixedBytes<N> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl<const N: usize> Hash for FixedBytes<N> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.as_bytes().hash(h)
    }
}

impl<const N: usize> fmt::Debug for FixedBytes<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "b\"{}\"", self.as_bytes().escape_ascii())
    }
}

/// The bytes as UTF-8, invalid sequences replaced (U+FFFD).
impl<const N: usize> fmt::Display for FixedBytes<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(self.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type B4 = FixedBytes<4>;

    #[test]
    fn orders_by_bytes_prefix_first() {
        let mut v: Vec<B4> = ["b", "ab", "", "abc", "a"]
            .iter()
            .map(|s| B4::new(s).unwrap())
            .collect();
        v.sort();
        let got: Vec<&[u8]> = v.iter().map(|b| b.as_bytes()).collect();
        assert_eq!(got, [&b""[..], b"a", b"ab", b"abc", b"b"]);
    }

    #[test]
    fn too_long_is_an_error_and_full_length_fits() {
        assert!(matches!(
            B4::new("abcde"),
            Err(Error::TooLong { len: 5, max: 4, .. })
        ));
        let full = B4::new([0xff; 4]).unwrap();
        assert_eq!(full.len(), 4);
        assert_eq!(std::mem::size_of::<B4>(), 6);
        assert_eq!(bytemuck::bytes_of(&full), [4, 0, 0xff, 0xff, 0xff, 0xff]);
    }

    #[test]
    fn equal_strings_have_equal_bytes() {
        let a = B4::new("ab").unwrap();
        let b = B4::try_from(&b"ab"[..]).unwrap();
        assert_eq!(bytemuck::bytes_of(&a), bytemuck::bytes_of(&b));
        assert_eq!(format!("{a:?} {a}"), "b\"ab\" ab");
    }

    #[test]
    fn a_length_past_n_reads_as_n() {
        let mut raw = [0u8; 6];
        raw[..2].copy_from_slice(&900u16.to_le_bytes());
        let b: B4 = bytemuck::pod_read_unaligned(&raw);
        assert_eq!(b.len(), 4);
    }
}
