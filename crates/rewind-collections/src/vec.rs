//! A persistent growable array.
//!
//! The header holds the length, the capacity and the offset of one buffer
//! of `capacity` elements. A push into a full buffer allocates one twice as
//! large (at least 4 elements), copies the elements over and frees the old
//! buffer, all inside the pushing transaction: if it rolls back, the old
//! buffer is back and the new one freed. The buffer never shrinks (pop and
//! clear keep it); [`Vec::destroy`] frees it.
//!
//! Header, little-endian (`docs/collections.md`):
//!
//! ```text
//! 0   magic      [u8; 8]  "RWVEC002"
//! 8   elem_size  u32      size_of::<T>() (the fingerprint has it too)
//! 12  reserved   u32      0
//! 16  len        u64
//! 24  cap        u64      elements the buffer holds
//! 32  buf        u64      offset of the buffer (0: none yet)
//! 40  elem type  48 bytes: type fingerprint of T (`types.rs`)
//! 88  (end)
//! ```
//!
//! Elements are their in-memory bytes, `elem_size` apart.

use std::marker::PhantomData;

use rewind::{PPtr, Pool, Tx};

use crate::error::{corrupt, Error, Result};
use crate::mem::{check_span, le64, put64, read_header, Mem, ScanWatch};
use crate::types::{Stored, TypeTag, TAG_SIZE};

const WHAT: &str = "vector";
const MAGIC: [u8; 8] = *b"RWVEC002";
/// The magic of the size-checked header of earlier versions.
const OLD_MAGIC: [u8; 8] = *b"RWVEC001";
const MAGIC_OFF: usize = 0;
const ELEM_SIZE_OFF: usize = MAGIC_OFF + 8;
const RESERVED_OFF: usize = ELEM_SIZE_OFF + 4;
const LEN_OFF: usize = RESERVED_OFF + 4;
const CAP_OFF: usize = LEN_OFF + 8;
const BUF_OFF: usize = CAP_OFF + 8;
const ELEM_TAG_OFF: usize = BUF_OFF + 8;
const HEADER_SIZE: usize = ELEM_TAG_OFF + TAG_SIZE;
/// The first buffer's capacity.
const MIN_CAP: u64 = 4;

/// A persistent vector of `T`: a handle to its header in a pool (`Copy`;
/// see [`BTreeMap`](crate::BTreeMap) for storing handles).
///
/// ```
/// use rewind::{Pool, PoolConfig};
/// use rewind_collections::Vec;
///
/// let dir = tempfile::tempdir().unwrap();
/// let pool = Pool::create(dir.path().join("v.pool"), "v", 8 << 20, &PoolConfig::default())?;
/// let v = pool.transaction(|tx| {
///     let v = Vec::<[u32; 2]>::create(tx)?;
///     for i in 0..10 {
///         v.push(tx, [i, i * i])?;
///     }
///     v.set(tx, 0, [7, 7])?;
///     Ok::<_, rewind_collections::Error>(v)
/// })?;
/// assert_eq!(v.len(&pool)?, 10);
/// assert_eq!(v.get(&pool, 3)?, Some([3, 9]));
/// assert_eq!(v.get(&pool, 10)?, None);
/// assert_eq!(pool.transaction(|tx| v.pop(tx))?, Some([9, 81]));
/// assert_eq!(v.to_vec(&pool)?[0], [7, 7]);
/// # Ok::<(), rewind_collections::Error>(())
/// ```
pub struct Vec<T> {
    hdr: u64,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for Vec<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Vec<T> {}
impl<T> std::fmt::Debug for Vec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Vec({:#x})", self.hdr)
    }
}

struct Header {
    len: u64,
    cap: u64,
    buf: u64,
}

impl<T: Stored> Vec<T> {
    const SIZE: u64 = size_of::<T>() as u64;

    /// Creates an empty vector (no buffer until the first push).
    pub fn create(tx: &mut Tx<'_>) -> Result<Self> {
        let hdr = tx.alloc_bytes(HEADER_SIZE as u64)?;
        let mut h = [0u8; HEADER_SIZE];
        h[MAGIC_OFF..ELEM_SIZE_OFF].copy_from_slice(&MAGIC);
        h[ELEM_SIZE_OFF..RESERVED_OFF].copy_from_slice(&(Self::SIZE as u32).to_le_bytes());
        h[ELEM_TAG_OFF..HEADER_SIZE].copy_from_slice(&TypeTag::of::<T>().encode());
        tx.write_bytes(hdr, &h)?;
        Ok(Self::from_ptr(PPtr::from_offset(hdr)))
    }

    /// The vector whose header `p` points at; checked at first use.
    pub fn from_ptr(p: PPtr<Self>) -> Self {
        Vec {
            hdr: p.offset(),
            _t: PhantomData,
        }
    }

    /// The pointer to the vector's header.
    pub fn as_ptr(&self) -> PPtr<Self> {
        PPtr::from_offset(self.hdr)
    }

    fn header<M: Mem>(&self, m: &mut M) -> Result<Header> {
        let mut h = [0u8; HEADER_SIZE];
        let old = (&[(OLD_MAGIC, "RWVEC001")][..], "RWVEC002");
        read_header(m, WHAT, self.hdr, &mut h, MAGIC, old)?;
        TypeTag::check::<T>(&h[ELEM_TAG_OFF..HEADER_SIZE], WHAT, self.hdr, "element")?;
        let h = Header {
            len: le64(&h, LEN_OFF),
            cap: le64(&h, CAP_OFF),
            buf: le64(&h, BUF_OFF),
        };
        if h.len > h.cap || (h.cap > 0 && h.buf == 0) {
            return Err(corrupt(
                WHAT,
                self.hdr,
                "length above capacity, or no buffer",
            ));
        }
        check_span(m, WHAT, self.hdr, h.buf, h.cap.checked_mul(Self::SIZE))?;
        Ok(h)
    }

    /// The number of elements.
    pub fn len(&self, pool: &Pool) -> Result<u64> {
        pool.read_isolated(self.hdr, |r| Ok(self.header(r)?.len))
    }

    /// True if there are no elements.
    pub fn is_empty(&self, pool: &Pool) -> Result<bool> {
        Ok(self.len(pool)? == 0)
    }

    /// The number of elements, as `tx` sees it.
    pub fn len_tx(&self, tx: &mut Tx<'_>) -> Result<u64> {
        tx.lock_shared(self.as_ptr())?; // held until the transaction ends
        Ok(self.header(tx)?.len)
    }

    /// Element `i`, or `None` past the end (committed state: isolated
    /// from the transactions changing the vector, see
    /// [`Pool::read_isolated`]).
    pub fn get(&self, pool: &Pool, i: u64) -> Result<Option<T>> {
        pool.read_isolated(self.hdr, |r| self.get_in(r, i))
    }

    /// Element `i` as `tx` sees it.
    pub fn get_tx(&self, tx: &mut Tx<'_>, i: u64) -> Result<Option<T>> {
        tx.lock_shared(self.as_ptr())?; // held until the transaction ends
        self.get_in(tx, i)
    }

    fn get_in<M: Mem>(&self, m: &mut M, i: u64) -> Result<Option<T>> {
        let h = self.header(m)?;
        if i >= h.len {
            return Ok(None);
        }
        let mut v = T::zeroed();
        m.read_at(h.buf + i * Self::SIZE, bytemuck::bytes_of_mut(&mut v))?;
        Ok(Some(v))
    }

    /// Replaces element `i`; [`Error::IndexOutOfBounds`] past the end.
    pub fn set(&self, tx: &mut Tx<'_>, i: u64, v: T) -> Result<()> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        let h = self.header(tx)?;
        if i >= h.len {
            return Err(Error::IndexOutOfBounds {
                what: WHAT,
                index: i,
                len: h.len,
            });
        }
        Ok(tx.write_bytes(h.buf + i * Self::SIZE, bytemuck::bytes_of(&v))?)
    }

    /// Appends `v`, growing the buffer (copy and free, in `tx`) when full.
    pub fn push(&self, tx: &mut Tx<'_>, v: T) -> Result<()> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        let mut h = self.header(tx)?;
        if h.len == h.cap {
            h = self.grow(tx, h)?;
        }
        tx.write_bytes(h.buf + h.len * Self::SIZE, bytemuck::bytes_of(&v))?;
        put64(tx, self.hdr + LEN_OFF as u64, h.len + 1)
    }

    fn grow(&self, tx: &mut Tx<'_>, h: Header) -> Result<Header> {
        let cap = h.cap.saturating_mul(2).max(MIN_CAP);
        let bytes = cap.checked_mul(Self::SIZE).ok_or(Error::InvalidArgument {
            what: "vector capacity",
            value: cap,
            expected: "a buffer size that fits in 64 bits",
        })?;
        let buf = tx.alloc_bytes(bytes.max(1))?;
        if h.len > 0 {
            let mut old = vec![0u8; (h.len * Self::SIZE) as usize];
            tx.read_bytes(h.buf, &mut old)?;
            tx.write_bytes(buf, &old)?; // fresh: not logged
        }
        if h.buf != 0 {
            tx.free(PPtr::<u8>::from_offset(h.buf))?;
        }
        let mut w = [0u8; 16];
        w[..8].copy_from_slice(&cap.to_le_bytes());
        w[8..].copy_from_slice(&buf.to_le_bytes());
        tx.write_bytes(self.hdr + CAP_OFF as u64, &w)?;
        Ok(Header {
            len: h.len,
            cap,
            buf,
        })
    }

    /// Removes and returns the last element (the buffer stays).
    pub fn pop(&self, tx: &mut Tx<'_>) -> Result<Option<T>> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        let h = self.header(tx)?;
        if h.len == 0 {
            return Ok(None);
        }
        let mut v = T::zeroed();
        tx.read_bytes(
            h.buf + (h.len - 1) * Self::SIZE,
            bytemuck::bytes_of_mut(&mut v),
        )?;
        put64(tx, self.hdr + LEN_OFF as u64, h.len - 1)?;
        Ok(Some(v))
    }

    /// Removes every element (the buffer stays).
    pub fn clear(&self, tx: &mut Tx<'_>) -> Result<()> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        put64(tx, self.hdr + LEN_OFF as u64, 0)
    }

    /// Every element, in order (committed state).
    pub fn to_vec(&self, pool: &Pool) -> Result<std::vec::Vec<T>> {
        pool.read_isolated(self.hdr, |r| {
            let h = self.header(r)?;
            let mut out = vec![T::zeroed(); h.len as usize];
            if h.len == 0 || Self::SIZE == 0 {
                return Ok(out);
            }
            r.read_at(h.buf, bytemuck::cast_slice_mut(&mut out))?;
            Ok(out)
        })
    }

    /// The offsets of every block the vector owns, header first
    /// (committed state): for space accounting and checks.
    pub fn blocks(&self, pool: &Pool) -> Result<std::vec::Vec<u64>> {
        // Read with no lock: beside a writer the header can be half
        // written, or freed; an error then is `Changed`, as for a scan.
        ScanWatch::around(pool, WHAT, self.hdr, || {
            let h = self.header(&mut { pool })?;
            Ok(std::iter::once(self.hdr)
                .chain((h.buf != 0).then_some(h.buf))
                .collect())
        })
    }

    /// Frees the buffer and the header; the handle must not be used again.
    pub fn destroy(self, tx: &mut Tx<'_>) -> Result<()> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        let h = self.header(tx)?;
        if h.buf != 0 {
            tx.free(PPtr::<u8>::from_offset(h.buf))?;
        }
        Ok(tx.free(self.as_ptr())?)
    }
}
