//! A persistent variable-length byte string.
//!
//! The header holds the length, the capacity and the offset of one buffer.
//! Bytes that fit the buffer are written in place, logged like any write
//! (their old bytes go to the log under the undo policies, so one change is
//! bounded by the log's room, `LogFull` otherwise). Bytes that do not fit
//! go to a new buffer of the next power of two (at least 16 bytes): the
//! transaction allocates it, copies the kept prefix into it — writes to a
//! block allocated in the same transaction are not logged, the block's
//! ALLOC record undoes them all — and frees the old one, so growing costs
//! a copy but no log space for the bytes. [`Blob::truncate`] keeps the
//! buffer; [`Blob::replace`] with a much shorter string keeps it too; only
//! [`Blob::shrink_to_fit`] and [`Blob::destroy`] give space back.
//!
//! Header, little-endian (`docs/collections.md`):
//!
//! ```text
//! 0   magic  [u8; 8]  "RWBLOB01"
//! 8   len    u64      bytes in use
//! 16  cap    u64      bytes the buffer holds (0: no buffer)
//! 24  buf    u64      offset of the buffer (0: none)
//! 32  (end)
//! ```

use rewind::{PPtr, Pool, Tx};

use crate::error::{corrupt, Error, Result};
use crate::mem::{check_magic, check_span, le64, put64, Mem, ScanWatch};

const WHAT: &str = "blob";
const MAGIC: [u8; 8] = *b"RWBLOB01";
const MAGIC_OFF: usize = 0;
const LEN_OFF: usize = MAGIC_OFF + 8;
const CAP_OFF: usize = LEN_OFF + 8;
const BUF_OFF: usize = CAP_OFF + 8;
const HEADER_SIZE: usize = BUF_OFF + 8;
/// The smallest buffer.
const MIN_CAP: u64 = 16;

/// A persistent byte string: a handle to its header in a pool (`Copy`; see
/// [`BTreeMap`](crate::BTreeMap) for storing handles).
///
/// ```
/// use rewind::{Pool, PoolConfig};
/// use rewind_collections::{Blob, Error};
///
/// let dir = tempfile::tempdir().unwrap();
/// let pool = Pool::create(dir.path().join("b.pool"), "b", 8 << 20, &PoolConfig::default())?;
/// let b = pool.transaction(|tx| Blob::create_from(tx, b"hello"))?;
/// pool.transaction(|tx| {
///     b.append(tx, b", world")?;
///     b.write_at(tx, 0, b"J")
/// })?;
/// assert_eq!(b.read(&pool)?, b"Jello, world");
/// // An aborted change leaves the old bytes.
/// let r = pool.transaction(|tx| {
///     b.replace(tx, &[7u8; 5000])?;
///     Err::<(), _>(Error::from(rewind::Error::Aborted))
/// });
/// assert!(r.is_err());
/// assert_eq!(b.read(&pool)?, b"Jello, world");
/// pool.transaction(|tx| b.truncate(tx, 5))?;
/// assert_eq!(b.read(&pool)?, b"Jello");
/// // Past the end: a typed error.
/// let r = pool.transaction(|tx| b.write_at(tx, 4, b"xyz"));
/// assert!(matches!(r, Err(Error::IndexOutOfBounds { index: 7, len: 5, .. })));
/// # Ok::<(), rewind_collections::Error>(())
/// ```
#[derive(Clone, Copy)]
pub struct Blob {
    hdr: u64,
}

impl std::fmt::Debug for Blob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Blob({:#x})", self.hdr)
    }
}

#[derive(Clone, Copy)]
struct Header {
    len: u64,
    cap: u64,
    buf: u64,
}

impl Blob {
    /// Creates an empty blob (no buffer until the first byte).
    pub fn create(tx: &mut Tx<'_>) -> Result<Self> {
        let hdr = tx.alloc_bytes(HEADER_SIZE as u64)?;
        let mut h = [0u8; HEADER_SIZE];
        h[MAGIC_OFF..LEN_OFF].copy_from_slice(&MAGIC);
        tx.write_bytes(hdr, &h)?;
        Ok(Blob { hdr })
    }

    /// Creates a blob holding `bytes`.
    pub fn create_from(tx: &mut Tx<'_>, bytes: &[u8]) -> Result<Self> {
        let b = Self::create(tx)?;
        // Bytes refused for space (OutOfMemory leaves the transaction
        // usable, and a program may commit after it) take the header back
        // with them: nothing leaks.
        if let Err(e) = b.append(tx, bytes) {
            tx.free(b.as_ptr())?;
            return Err(e);
        }
        Ok(b)
    }

    /// The blob whose header `p` points at; checked at first use.
    pub fn from_ptr(p: PPtr<Self>) -> Self {
        Blob { hdr: p.offset() }
    }

    /// The pointer to the blob's header.
    pub fn as_ptr(&self) -> PPtr<Self> {
        PPtr::from_offset(self.hdr)
    }

    fn header<M: Mem>(&self, m: &mut M) -> Result<Header> {
        let mut h = [0u8; HEADER_SIZE];
        m.read_at(self.hdr, &mut h)?;
        check_magic(WHAT, self.hdr, &h, MAGIC)?;
        let h = Header {
            len: le64(&h, LEN_OFF),
            cap: le64(&h, CAP_OFF),
            buf: le64(&h, BUF_OFF),
        };
        if h.len > h.cap || (h.cap > 0) != (h.buf != 0) {
            return Err(corrupt(
                WHAT,
                self.hdr,
                "length above capacity, or capacity without a buffer",
            ));
        }
        check_span(m, WHAT, self.hdr, h.buf, Some(h.cap))?;
        Ok(h)
    }

    fn put_header(&self, tx: &mut Tx<'_>, h: Header) -> Result<()> {
        let mut b = [0u8; 24];
        b[..8].copy_from_slice(&h.len.to_le_bytes());
        b[8..16].copy_from_slice(&h.cap.to_le_bytes());
        b[16..].copy_from_slice(&h.buf.to_le_bytes());
        Ok(tx.write_bytes(self.hdr + LEN_OFF as u64, &b)?)
    }

    /// The number of bytes.
    pub fn len(&self, pool: &Pool) -> Result<u64> {
        pool.read_isolated(self.hdr, |r| Ok(self.header(r)?.len))
    }

    /// True if it holds no bytes.
    pub fn is_empty(&self, pool: &Pool) -> Result<bool> {
        Ok(self.len(pool)? == 0)
    }

    /// The number of bytes, as `tx` sees it.
    pub fn len_tx(&self, tx: &mut Tx<'_>) -> Result<u64> {
        tx.lock_shared(self.as_ptr())?; // held until the transaction ends
        Ok(self.header(tx)?.len)
    }

    /// Bytes the buffer holds before the next change must move it.
    pub fn capacity(&self, pool: &Pool) -> Result<u64> {
        pool.read_isolated(self.hdr, |r| Ok(self.header(r)?.cap))
    }

    /// Every byte (committed state).
    pub fn read(&self, pool: &Pool) -> Result<std::vec::Vec<u8>> {
        pool.read_isolated(self.hdr, |r| self.read_in(r))
    }

    /// Every byte as `tx` sees them.
    pub fn read_tx(&self, tx: &mut Tx<'_>) -> Result<std::vec::Vec<u8>> {
        tx.lock_shared(self.as_ptr())?; // held until the transaction ends
        self.read_in(tx)
    }

    fn read_in<M: Mem>(&self, m: &mut M) -> Result<std::vec::Vec<u8>> {
        let h = self.header(m)?;
        let len = usize::try_from(h.len).map_err(|_| corrupt(WHAT, self.hdr, "length"))?;
        let mut out = vec![0u8; len];
        if len > 0 {
            m.read_at(h.buf, &mut out)?;
        }
        Ok(out)
    }

    /// Fills `buf` from byte `at` on (committed state);
    /// [`Error::IndexOutOfBounds`] if that runs past the end.
    pub fn read_at(&self, pool: &Pool, at: u64, buf: &mut [u8]) -> Result<()> {
        pool.read_isolated(self.hdr, |r| {
            let h = self.header(r)?;
            let end = Self::end_within(at, buf.len(), h.len)?;
            if end > at {
                r.read_at(h.buf + at, buf)?;
            }
            Ok(())
        })
    }

    /// `at + n`, if within `len`.
    fn end_within(at: u64, n: usize, len: u64) -> Result<u64> {
        match at.checked_add(n as u64) {
            Some(end) if end <= len => Ok(end),
            end => Err(Error::IndexOutOfBounds {
                what: WHAT,
                index: end.unwrap_or(u64::MAX),
                len,
            }),
        }
    }

    /// Overwrites bytes `at..at + bytes.len()`, which must lie within the
    /// blob ([`Error::IndexOutOfBounds`] otherwise). Logged.
    pub fn write_at(&self, tx: &mut Tx<'_>, at: u64, bytes: &[u8]) -> Result<()> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        let h = self.header(tx)?;
        Self::end_within(at, bytes.len(), h.len)?;
        if !bytes.is_empty() {
            tx.write_bytes(h.buf + at, bytes)?;
        }
        Ok(())
    }

    /// Replaces the whole content with `bytes`: in place if they fit the
    /// buffer, else in a new buffer (the old one freed).
    pub fn replace(&self, tx: &mut Tx<'_>, bytes: &[u8]) -> Result<()> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        let mut h = self.header(tx)?;
        let n = bytes.len() as u64;
        if n > h.cap {
            h = self.move_to(tx, h, n, 0)?;
        }
        if n > 0 {
            tx.write_bytes(h.buf, bytes)?;
        }
        put64(tx, self.hdr + LEN_OFF as u64, n)
    }

    /// Appends `bytes`, moving to a larger buffer if they do not fit.
    pub fn append(&self, tx: &mut Tx<'_>, bytes: &[u8]) -> Result<()> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        let mut h = self.header(tx)?;
        let n = h
            .len
            .checked_add(bytes.len() as u64)
            .ok_or(Error::TooLong {
                what: WHAT,
                len: u64::MAX,
                max: u64::MAX,
            })?;
        if n > h.cap {
            h = self.move_to(tx, h, n, h.len)?;
        }
        if !bytes.is_empty() {
            tx.write_bytes(h.buf + h.len, bytes)?;
        }
        put64(tx, self.hdr + LEN_OFF as u64, n)
    }

    /// Shortens the blob to `len` bytes; nothing if it is not longer. The
    /// buffer stays.
    pub fn truncate(&self, tx: &mut Tx<'_>, len: u64) -> Result<()> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        let h = self.header(tx)?;
        if len < h.len {
            put64(tx, self.hdr + LEN_OFF as u64, len)?;
        }
        Ok(())
    }

    /// Moves the content to a buffer of the smallest capacity that holds
    /// it (none when empty), freeing the old one, if that is smaller.
    pub fn shrink_to_fit(&self, tx: &mut Tx<'_>) -> Result<()> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        let h = self.header(tx)?;
        if h.len == 0 {
            if h.buf != 0 {
                tx.free(PPtr::<u8>::from_offset(h.buf))?;
            }
            return self.put_header(
                tx,
                Header {
                    len: 0,
                    cap: 0,
                    buf: 0,
                },
            );
        }
        if Self::capacity_for(h.len)? < h.cap {
            self.move_to(tx, h, h.len, h.len)?;
        }
        Ok(())
    }

    /// The buffer capacity for `n` bytes: the next power of two, at least
    /// [`MIN_CAP`].
    fn capacity_for(n: u64) -> Result<u64> {
        n.max(MIN_CAP)
            .checked_next_power_of_two()
            .ok_or(Error::TooLong {
                what: WHAT,
                len: n,
                max: 1 << 63,
            })
    }

    /// A new buffer for `need` bytes holding the first `keep` bytes of the
    /// old one, which is freed; the header points at it (length unchanged).
    fn move_to(&self, tx: &mut Tx<'_>, h: Header, need: u64, keep: u64) -> Result<Header> {
        let cap = Self::capacity_for(need)?;
        let buf = tx.alloc_bytes(cap)?;
        if keep > 0 {
            let keep = usize::try_from(keep).map_err(|_| corrupt(WHAT, self.hdr, "length"))?;
            let mut old = vec![0u8; keep];
            tx.read_bytes(h.buf, &mut old)?;
            tx.write_bytes(buf, &old)?; // fresh: not logged
        }
        if h.buf != 0 {
            tx.free(PPtr::<u8>::from_offset(h.buf))?;
        }
        let h = Header {
            len: h.len,
            cap,
            buf,
        };
        self.put_header(tx, h)?;
        Ok(h)
    }

    /// The offsets of every block the blob owns, header first (committed
    /// state): for space accounting and checks.
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
