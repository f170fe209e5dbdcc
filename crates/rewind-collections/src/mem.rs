//! Reading a pool's bytes either directly (committed state) or through a
//! transaction (seeing its own writes), and the little-endian helpers every
//! header uses.

use rewind::{Pool, Reader, Tx};

use crate::error::{corrupt, Error, Result};

/// Something collection bytes can be read through: a [`Pool`] or a [`Tx`].
pub trait Mem {
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<()>;
    /// The pool's free epoch when reading through a transaction (checks
    /// remembered per epoch: `checked`), `None` otherwise (checked each
    /// time).
    #[inline]
    fn free_epoch(&self) -> Option<u64> {
        None
    }
    /// The size the pool may grow to: a stored count of blocks above what
    /// it holds is damage (`check_count`).
    fn max_size(&self) -> u64;
}

impl Mem for &Pool {
    #[inline]
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<()> {
        Ok(self.read_bytes(off, buf)?)
    }
    fn max_size(&self) -> u64 {
        Pool::max_size(self)
    }
}

impl Mem for Reader<'_> {
    #[inline]
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<()> {
        Ok(self.read_bytes(off, buf)?)
    }
    fn max_size(&self) -> u64 {
        Reader::max_size(self)
    }
}

impl Mem for &mut Reader<'_> {
    #[inline]
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<()> {
        Ok(self.read_bytes(off, buf)?)
    }
    fn max_size(&self) -> u64 {
        Reader::max_size(self)
    }
}

impl Mem for Tx<'_> {
    #[inline]
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<()> {
        Ok(self.read_bytes(off, buf)?)
    }
    #[inline]
    fn free_epoch(&self) -> Option<u64> {
        Some(Tx::free_epoch(self))
    }
    fn max_size(&self) -> u64 {
        Tx::max_size(self)
    }
}

impl Mem for &mut Tx<'_> {
    #[inline]
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<()> {
        Ok(self.read_bytes(off, buf)?)
    }
    #[inline]
    fn free_epoch(&self) -> Option<u64> {
        Some(Tx::free_epoch(self))
    }
    fn max_size(&self) -> u64 {
        Tx::max_size(self)
    }
}

/// The little-endian `u64` at `b[at..at + 8]`.
#[inline]
pub(crate) fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The little-endian `u32` at `b[at..at + 4]`.
#[inline]
pub(crate) fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Writes a little-endian `u64` field at `off`.
/// Allocates `size` bytes for a collection whose header `hdr` this
/// transaction has just allocated. Refused for space (`OutOfMemory` leaves
/// the transaction usable, and a program may commit after it), the header
/// is freed with it: nothing leaks.
pub(crate) fn alloc_beside(tx: &mut Tx<'_>, hdr: u64, size: u64) -> Result<u64> {
    match tx.alloc_bytes(size) {
        Ok(off) => Ok(off),
        Err(e) => {
            tx.free(rewind::PPtr::<u8>::from_offset(hdr))?;
            Err(e.into())
        }
    }
}

pub(crate) fn put64(tx: &mut Tx<'_>, off: u64, v: u64) -> Result<()> {
    Ok(tx.write_bytes(off, &v.to_le_bytes())?)
}

/// The magics of a collection's earlier layouts with their names, and the
/// current layout's name, for [`Error::UnsupportedLayout`].
pub(crate) type OldLayout = (&'static [([u8; 8], &'static str)], &'static str);

/// Reads the header of `buf.len()` bytes at `hdr` and checks its magic:
/// [`Error::UnsupportedLayout`] for an earlier layout's, [`Error::WrongMagic`]
/// for another. A read that fails (a block shorter than the header: a
/// pointer to something else, or an earlier, smaller header) is retried
/// for the magic alone, to say which.
pub(crate) fn read_header<M: Mem + ?Sized>(
    m: &mut M,
    what: &'static str,
    hdr: u64,
    buf: &mut [u8],
    magic: [u8; 8],
    old: OldLayout,
) -> Result<()> {
    let read = m.read_at(hdr, buf);
    if read.is_err() {
        let mut first = [0u8; 8];
        if m.read_at(hdr, &mut first).is_err() || first == magic {
            return read;
        }
        buf[..8].copy_from_slice(&first);
    }
    if let Some(&(_, found)) = old.0.iter().find(|o| buf[..8] == o.0) {
        return Err(Error::UnsupportedLayout {
            what,
            offset: hdr,
            found,
            expected: old.1,
        });
    }
    check_magic(what, hdr, buf, magic)?;
    read
}

/// Checks a header's magic.
pub(crate) fn check_magic(
    what: &'static str,
    offset: u64,
    found: &[u8],
    expected: [u8; 8],
) -> Result<()> {
    let found: [u8; 8] = found[..8].try_into().expect("8 bytes");
    if found != expected {
        return Err(Error::WrongMagic {
            what,
            offset,
            found,
            expected,
        });
    }
    Ok(())
}

/// Checks a count a header stores (entries, elements) against the most
/// the pool could hold, each item taking at least `per` bytes of it: a
/// damaged length is `Corrupt` before a walk is bounded by it or a buffer
/// sized by it (a chain's cycle would otherwise run until the length, and
/// a length of 2^60 is no bound at all).
pub(crate) fn check_count<M: Mem + ?Sized>(
    m: &M,
    what: &'static str,
    hdr: u64,
    count: u64,
    per: u64,
) -> Result<()> {
    if count > m.max_size() / per.max(1) {
        return Err(corrupt(
            what,
            hdr,
            "a length larger than the pool could hold",
        ));
    }
    Ok(())
}

/// Checks that the `len` bytes at `off` (a buffer a header points at) lie
/// in the pool, by reading the last one: sizes from a damaged header then
/// cannot overflow an offset or ask for more memory than the pool holds.
/// `len` is `None` when computing it overflowed.
pub(crate) fn check_span<M: Mem + ?Sized>(
    m: &mut M,
    what: &'static str,
    hdr: u64,
    off: u64,
    len: Option<u64>,
) -> Result<()> {
    match len.and_then(|l| off.checked_add(l)) {
        None => Err(corrupt(what, hdr, "a buffer size past 2^64 bytes")),
        Some(end) if end == off => Ok(()),
        Some(end) => m
            .read_at(end - 1, &mut [0u8])
            .map_err(|_| corrupt(what, hdr, "a buffer that extends past the pool")),
    }
}

/// The writers of a collection as a scan through `&Pool` (which takes no
/// lock) began: an error it meets on the way while a transaction changed
/// the collection (a node freed or reused by a commit, a chain longer than
/// the length read at first) is [`Error::Changed`], not damage.
#[derive(Clone, Copy)]
pub(crate) struct ScanWatch<'a> {
    pool: &'a Pool,
    what: &'static str,
    hdr: u64,
    watch: rewind::WriteWatch,
}

impl<'a> ScanWatch<'a> {
    /// Taken as a scan through `pool` begins, before it reads the header
    /// at `hdr`. On a thread inside a transaction of `pool` it is
    /// `NestedTransaction`, as the one-answer reads are (`read_isolated`):
    /// there the scan would see that transaction's own stores under the
    /// undo policies (they store in place, and its changes ahead of the
    /// scan end it with `Changed`) and not under the redo ones; the
    /// transaction scans with the `_tx` forms.
    pub(crate) fn start(pool: &'a Pool, what: &'static str, hdr: u64) -> Result<ScanWatch<'a>> {
        // An empty isolated read of the null offset: no transaction locks
        // it (`Tx::lock` refuses null), so it never waits.
        pool.read_isolated(0, |_| Ok::<_, Error>(()))?;
        Ok(ScanWatch::new(pool, what, hdr))
    }

    /// Refuses a scan through the pool going on on a thread that has
    /// entered a transaction of the pool since it began (an iterator
    /// made outside, consumed inside): `NestedTransaction`, as at its
    /// start. Checked as the scan reads each node (a B+-tree's leaf, a
    /// list's node, a hash map's entry): before, a loop removing what it
    /// scanned in one transaction went to the end under redo and ended
    /// with `Changed` after two entries under force, no-force and
    /// redo-async.
    pub(crate) fn outside(&self) -> Result<()> {
        self.pool.read_isolated(0, |_| Ok::<_, Error>(()))
    }

    /// Taken before the scan or check reads the header at `hdr`.
    pub(crate) fn new(pool: &'a Pool, what: &'static str, hdr: u64) -> ScanWatch<'a> {
        ScanWatch {
            pool,
            what,
            hdr,
            watch: pool.write_watch(hdr),
        }
    }

    /// `read` (of the collection at `hdr` through `pool`, taking no lock),
    /// its error told apart as [`explain`](Self::explain) does, the watch
    /// taken before `read` reads the header: for the checks
    /// (`check_invariants`, `blocks`). On a thread inside a transaction of
    /// `pool` it is `NestedTransaction`, as a scan is ([`start`](Self::start)):
    /// there a check read the transaction's own stores under the undo
    /// policies and the committed state under the redo ones, and answered
    /// `Ok` for either.
    pub(crate) fn around<T>(
        pool: &'a Pool,
        what: &'static str,
        hdr: u64,
        read: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        let watch = ScanWatch::start(pool, what, hdr)?;
        read().map_err(|e| watch.explain(e))
    }

    /// `e`, or [`Error::Changed`] when a writer held the collection's lock
    /// during the scan and `e` is what reading bytes it changed can give:
    /// a link followed from a block the writer freed and another
    /// collection then filled leads anywhere (outside the heap, or to
    /// null, as well as to a block not allocated), and a header read
    /// again (a B+-tree scan past the length it began with) may be
    /// another collection's, of other types or an older layout, made in
    /// the block after the writer destroyed this one.
    pub(crate) fn explain(&self, e: Error) -> Error {
        let moved = matches!(
            e,
            Error::Corrupt { .. }
                | Error::WrongMagic { .. }
                | Error::TypeMismatch { .. }
                | Error::UnsupportedLayout { .. }
                | Error::Pool(
                    rewind::Error::NotAllocated { .. }
                        | rewind::Error::OutOfBounds { .. }
                        | rewind::Error::NotInHeap { .. }
                        | rewind::Error::NullPointer { .. }
                )
        );
        match moved && self.pool.written_since(self.watch) {
            true => Error::Changed {
                what: self.what,
                offset: self.hdr,
            },
            false => e,
        }
    }
}
