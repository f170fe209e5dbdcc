//! A persistent doubly-linked list.
//!
//! The header holds the length and the offsets of the first and last
//! nodes; each element is its own node block, linked both ways. A push
//! allocates one node and changes at most one neighbour's link and the
//! header; a pop or a removal changes at most two neighbours' links and
//! the header, and frees the node. A removal in the middle needs the node:
//! by index (a walk from the nearer end) or by a [`Cursor`] (checked to
//! lead to this list's nearer end: twice that distance in steps).
//! Everything happens in the caller's transaction, so a rollback relinks
//! and frees exactly what it should; no nested top actions.
//!
//! Layouts, little-endian (`docs/collections.md`):
//!
//! ```text
//! header                              node
//! 0   magic      [u8; 8] "RWLIST04"   0   prev   u64  (0: first)
//! 8   elem_size  u32                  8   next   u64  (0: last)
//! 12  reserved   u32     0            16  id     u64  the node's number
//! 16  len        u64                  24  stamp  u64  the push's stamp
//! 24  head       u64     first node   32  value  elem_size bytes
//!                        (0: empty)
//! 32  tail       u64     last node (0: empty)
//! 40  next_id    u64     the next node's number
//! 48  elem type  48 bytes: type fingerprint of T (`types.rs`)
//! 96  (end)
//! ```
//!
//! A node's number is the list's count of nodes made before it (kept in
//! `next_id`): no two nodes a list holds one after another share one. A
//! push that rolls back (whole, or to a savepoint) gives its count back,
//! so its node's number is the next push's too; its stamp is not: each
//! push takes the next of a process-wide 64-bit counter that begins at a
//! random point in each process, so no two pushes of one process share a
//! stamp (and pushes of two processes, one in 2^64 per pair). A
//! [`Cursor`] keeps its node's number and stamp (and lives only in the
//! process that took it), so a cursor whose element was removed or never
//! committed is told from an element pushed since into the same block.
//! (`RWLIST02`, without numbers, took the new element for the cursor's;
//! `RWLIST03` mixed the low 24 bits of the pushing transaction's id into
//! the number, and transaction ids start again at each open, so a cursor
//! to a rolled-back push, held across a reopen, matched the element the
//! new handle's transaction of the same id pushed.)

use std::marker::PhantomData;

use rewind::{PPtr, Pool, Tx};

use crate::error::{corrupt, Error, Result};
use crate::mem::{check_count, le64, put64, read_header, Mem, ScanWatch};
use crate::types::{Stored, TypeTag, TAG_SIZE};

const WHAT: &str = "list";
const MAGIC: [u8; 8] = *b"RWLIST04";
/// The magics of earlier versions: the size-checked header, the nodes
/// without numbers, and the numbers without stamps.
const OLD_MAGICS: [([u8; 8], &str); 3] = [
    (*b"RWLIST01", "RWLIST01"),
    (*b"RWLIST02", "RWLIST02"),
    (*b"RWLIST03", "RWLIST03"),
];
const MAGIC_OFF: usize = 0;
const ELEM_SIZE_OFF: usize = MAGIC_OFF + 8;
const RESERVED_OFF: usize = ELEM_SIZE_OFF + 4;
const LEN_OFF: usize = RESERVED_OFF + 4;
const HEAD_OFF: usize = LEN_OFF + 8;
const TAIL_OFF: usize = HEAD_OFF + 8;
const NEXT_ID_OFF: usize = TAIL_OFF + 8;
const ELEM_TAG_OFF: usize = NEXT_ID_OFF + 8;
const HEADER_SIZE: usize = ELEM_TAG_OFF + TAG_SIZE;
const PREV_OFF: u64 = 0;
const NEXT_OFF: u64 = PREV_OFF + 8;
const ID_OFF: u64 = NEXT_OFF + 8;
const STAMP_OFF: u64 = ID_OFF + 8;
const VALUE_OFF: u64 = STAMP_OFF + 8;

/// The next push's stamp: a process-wide counter that begins at a random
/// point (`RandomState`'s keys, seeded by the system), so that no two
/// pushes of this process share a stamp and pushes of two processes
/// almost surely do not either; with the process id in its top half, so
/// that a process forked after it took stamps, whose counter goes on from
/// the same point as its parent's, takes none of the parent's (two counts
/// fewer than 2^32 apart differ in the bottom half, and the two ids in
/// the top).
fn next_stamp() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static NEXT: OnceLock<AtomicU64> = OnceLock::new();
    let count = NEXT
        .get_or_init(|| {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(std::process::id());
            AtomicU64::new(h.finish())
        })
        .fetch_add(1, Ordering::Relaxed);
    stamp(count, std::process::id())
}

/// The stamp of the counter's `count` in process `pid`.
fn stamp(count: u64, pid: u32) -> u64 {
    count ^ (u64::from(pid) << 32)
}

/// The offset of a field of the node at `node`: a damaged link (an end
/// in the header, a neighbour's word) so near the end of the address
/// space that the sum wraps is `Corrupt`, never an overflow.
fn field(node: u64, at: u64) -> Result<u64> {
    node.checked_add(at)
        .ok_or_else(|| corrupt(WHAT, node, "a node at the end of the address space"))
}

/// An error of reading a node at an offset that a cursor gave, or that a
/// word of its node gave before the node was known to be linked: no
/// readable node there.
fn unreadable(e: &Error) -> bool {
    matches!(
        e,
        Error::Pool(
            rewind::Error::NotAllocated { .. }
                | rewind::Error::NotInHeap { .. }
                | rewind::Error::OutOfBounds { .. }
                | rewind::Error::NullPointer { .. }
        )
    )
}

/// A position in a [`List`]: one element's node (its offset, its number
/// and its push's stamp). Valid until that element is removed;
/// [`List::remove_at`] and [`List::value`] check that the node is still
/// the cursor's (its number and stamp: a removed element's block may hold
/// an element pushed since) and still
/// linked into the list (its neighbours link to it, and the nearer end it
/// leads to is this list's: steps up to twice its distance to that end),
/// and fail with [`Error::InvalidCursor`] if not; [`List::next`] and
/// [`List::prev`] check its number and that its neighbours link to it (a
/// removed element is `InvalidCursor`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cursor(u64, u64, u64);

impl Cursor {
    /// The node's offset in the pool.
    pub fn offset(self) -> u64 {
        self.0
    }
}

/// A persistent doubly-linked list of `T`: a handle to its header in a pool
/// (`Copy`; see [`BTreeMap`](crate::BTreeMap) for storing handles).
///
/// ```
/// use rewind::{Pool, PoolConfig};
/// use rewind_collections::{Error, List};
///
/// let dir = tempfile::tempdir().unwrap();
/// let pool = Pool::create(dir.path().join("l.pool"), "l", 8 << 20, &PoolConfig::default())?;
/// let l = pool.transaction(|tx| {
///     let l = List::<u32>::create(tx)?;
///     for i in 1..=5 {
///         l.push_back(tx, i)?;
///     }
///     l.push_front(tx, 0)?;
///     Ok::<_, Error>(l)
/// })?;
/// // Both ways.
/// let fwd: Vec<u32> = l.iter(&pool)?.collect::<Result<_, _>>()?;
/// let back: Vec<u32> = l.iter(&pool)?.rev().collect::<Result<_, _>>()?;
/// assert_eq!(fwd, [0, 1, 2, 3, 4, 5]);
/// assert_eq!(back, [5, 4, 3, 2, 1, 0]);
/// // Remove at a cursor (found outside the transaction) and at an index.
/// let c = l.cursor(&pool, 2)?.expect("index 2 exists");
/// assert_eq!(l.value(&pool, c)?, 2);
/// pool.transaction(|tx| {
///     assert_eq!(l.remove_at(tx, c)?, 2);
///     assert_eq!(l.remove(tx, 0)?, 0);
///     assert_eq!(l.pop_back(tx)?, Some(5));
///     Ok::<_, Error>(())
/// })?;
/// assert_eq!(l.iter(&pool)?.collect::<Result<Vec<_>, _>>()?, [1, 3, 4]);
/// // The cursor's element is gone: an error, not a corrupted list.
/// let r = pool.transaction(|tx| l.remove_at(tx, c));
/// assert!(matches!(r, Err(Error::InvalidCursor { .. })));
/// # Ok::<(), rewind_collections::Error>(())
/// ```
pub struct List<T> {
    hdr: u64,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for List<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for List<T> {}
impl<T> std::fmt::Debug for List<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "List({:#x})", self.hdr)
    }
}

#[derive(Clone, Copy)]
struct Header {
    len: u64,
    head: u64,
    tail: u64,
    next_id: u64,
}

/// A node's links, its number and its stamp.
#[derive(Clone, Copy)]
struct Links {
    prev: u64,
    next: u64,
    id: u64,
    stamp: u64,
}

impl<T: Stored> List<T> {
    const SIZE: u64 = size_of::<T>() as u64;
    const NODE: u64 = VALUE_OFF + Self::SIZE;

    /// Creates an empty list.
    pub fn create(tx: &mut Tx<'_>) -> Result<Self> {
        let hdr = tx.alloc_bytes(HEADER_SIZE as u64)?;
        let mut h = [0u8; HEADER_SIZE];
        h[MAGIC_OFF..ELEM_SIZE_OFF].copy_from_slice(&MAGIC);
        h[ELEM_SIZE_OFF..RESERVED_OFF].copy_from_slice(&(Self::SIZE as u32).to_le_bytes());
        h[ELEM_TAG_OFF..HEADER_SIZE].copy_from_slice(&TypeTag::of::<T>().encode());
        tx.write_bytes(hdr, &h)?;
        Ok(Self::from_ptr(PPtr::from_offset(hdr)))
    }

    /// The list whose header `p` points at; checked at first use.
    pub fn from_ptr(p: PPtr<Self>) -> Self {
        List {
            hdr: p.offset(),
            _t: PhantomData,
        }
    }

    /// The pointer to the list's header.
    pub fn as_ptr(&self) -> PPtr<Self> {
        PPtr::from_offset(self.hdr)
    }

    fn header<M: Mem + ?Sized>(&self, m: &mut M) -> Result<Header> {
        let mut h = [0u8; HEADER_SIZE];
        let old = (&OLD_MAGICS[..], "RWLIST04");
        read_header(m, WHAT, self.hdr, &mut h, MAGIC, old)?;
        TypeTag::check::<T>(&h[ELEM_TAG_OFF..HEADER_SIZE], WHAT, self.hdr, "element")?;
        let h = Header {
            len: le64(&h, LEN_OFF),
            head: le64(&h, HEAD_OFF),
            tail: le64(&h, TAIL_OFF),
            next_id: le64(&h, NEXT_ID_OFF),
        };
        if (h.len == 0) != (h.head == 0) || (h.len == 0) != (h.tail == 0) {
            return Err(corrupt(WHAT, self.hdr, "length disagrees with the ends"));
        }
        // Each node is a block of its own, of at least 64 bytes.
        check_count(&*m, WHAT, self.hdr, h.len, (VALUE_OFF + Self::SIZE).max(64))?;
        Ok(h)
    }

    /// Writes the length and the ends (and, with `pushed`, the next node
    /// number: a push's write reaches one word further).
    fn put_header(&self, tx: &mut Tx<'_>, h: Header, pushed: bool) -> Result<()> {
        let mut b = [0u8; 32];
        b[..8].copy_from_slice(&h.len.to_le_bytes());
        b[8..16].copy_from_slice(&h.head.to_le_bytes());
        b[16..24].copy_from_slice(&h.tail.to_le_bytes());
        b[24..].copy_from_slice(&h.next_id.to_le_bytes());
        let n = if pushed { 32 } else { 24 };
        Ok(tx.write_bytes(self.hdr + LEN_OFF as u64, &b[..n])?)
    }

    fn links<M: Mem + ?Sized>(m: &mut M, node: u64) -> Result<Links> {
        let mut b = [0u8; VALUE_OFF as usize];
        m.read_at(node, &mut b)?;
        Ok(Links {
            prev: le64(&b, PREV_OFF as usize),
            next: le64(&b, NEXT_OFF as usize),
            id: le64(&b, ID_OFF as usize),
            stamp: le64(&b, STAMP_OFF as usize),
        })
    }

    /// A cursor at `node`, with its number and stamp.
    fn cursor_at<M: Mem + ?Sized>(m: &mut M, node: u64) -> Result<Cursor> {
        let l = Self::links(m, node)?;
        Ok(Cursor(node, l.id, l.stamp))
    }

    fn value_in<M: Mem + ?Sized>(m: &mut M, node: u64) -> Result<T> {
        let mut v = T::zeroed();
        m.read_at(field(node, VALUE_OFF)?, bytemuck::bytes_of_mut(&mut v))?;
        Ok(v)
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

    /// `len + 1`, or corrupt at `u64::MAX`.
    fn grown(len: u64, hdr: u64) -> Result<u64> {
        len.checked_add(1)
            .ok_or_else(|| corrupt(WHAT, hdr, "length at its maximum"))
    }

    /// A new node holding `v` with the given links and the list's next
    /// number, which `h` moves on (fresh: not logged).
    fn new_node(tx: &mut Tx<'_>, h: &mut Header, prev: u64, next: u64, v: &T) -> Result<u64> {
        // The count, and a stamp no other push of this process has: a
        // push rolled back gives its count back, and a cursor to its
        // element (taken in that transaction) must not match the next
        // push's, in this transaction, another, or a later handle's.
        let id = h.next_id;
        let stamp = next_stamp();
        let node = tx.alloc_bytes(Self::NODE)?;
        h.next_id = h.next_id.wrapping_add(1);
        let mut b = std::vec::Vec::with_capacity(Self::NODE as usize);
        b.extend_from_slice(&prev.to_le_bytes());
        b.extend_from_slice(&next.to_le_bytes());
        b.extend_from_slice(&id.to_le_bytes());
        b.extend_from_slice(&stamp.to_le_bytes());
        b.extend_from_slice(bytemuck::bytes_of(v));
        tx.write_bytes(node, &b)?;
        Ok(node)
    }

    /// Adds `v` at the front.
    pub fn push_front(&self, tx: &mut Tx<'_>, v: T) -> Result<()> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        let mut h = self.header(tx)?;
        let head = h.head;
        let node = Self::new_node(tx, &mut h, 0, head, &v)?;
        if h.head == 0 {
            h.tail = node;
        } else {
            put64(tx, field(h.head, PREV_OFF)?, node)?;
        }
        h.head = node;
        h.len = Self::grown(h.len, self.hdr)?;
        self.put_header(tx, h, true)
    }

    /// Adds `v` at the back.
    pub fn push_back(&self, tx: &mut Tx<'_>, v: T) -> Result<()> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        let mut h = self.header(tx)?;
        let tail = h.tail;
        let node = Self::new_node(tx, &mut h, tail, 0, &v)?;
        if h.tail == 0 {
            h.head = node;
        } else {
            put64(tx, field(h.tail, NEXT_OFF)?, node)?;
        }
        h.tail = node;
        h.len = Self::grown(h.len, self.hdr)?;
        self.put_header(tx, h, true)
    }

    /// Removes and returns the first element.
    pub fn pop_front(&self, tx: &mut Tx<'_>) -> Result<Option<T>> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        let h = self.header(tx)?;
        if h.head == 0 {
            return Ok(None);
        }
        self.unlink(tx, h, h.head).map(Some)
    }

    /// Removes and returns the last element.
    pub fn pop_back(&self, tx: &mut Tx<'_>) -> Result<Option<T>> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        let h = self.header(tx)?;
        if h.tail == 0 {
            return Ok(None);
        }
        self.unlink(tx, h, h.tail).map(Some)
    }

    /// Removes and returns element `i`; [`Error::IndexOutOfBounds`] past
    /// the end.
    pub fn remove(&self, tx: &mut Tx<'_>, i: u64) -> Result<T> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        let h = self.header(tx)?;
        let node = self.node_at(tx, &h, i)?;
        self.unlink(tx, h, node)
    }

    /// Removes and returns the element at `c`; [`Error::InvalidCursor`] if
    /// `c` is not an element of this list (as `tx` sees it).
    pub fn remove_at(&self, tx: &mut Tx<'_>, c: Cursor) -> Result<T> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        let h = self.header(tx)?;
        self.check_linked(tx, &h, c)?;
        self.unlink(tx, h, c.0)
    }

    /// Checks that the cursor's node is still its element (its number) and
    /// is linked where it stands: its neighbours (or this list's header,
    /// at an end) point back at it; its links.
    fn check_neighbours<M: Mem>(&self, m: &mut M, h: &Header, c: Cursor) -> Result<Links> {
        let node = c.0;
        let bad = |reason| Error::InvalidCursor {
            offset: node,
            list: self.hdr,
            reason,
        };
        if node == 0 || h.len == 0 {
            return Err(bad("null cursor, or the list is empty"));
        }
        // A node freed earlier in this transaction (or never allocated)
        // is not in the list: the pool refuses to read it.
        let l = match Self::links(m, node) {
            Err(e) if unreadable(&e) => return Err(bad("not an allocated node (removed?)")),
            r => r?,
        };
        if (l.id, l.stamp) != (c.1, c.2) {
            return Err(bad(
                "its element was removed (its block holds another element now)",
            ));
        }
        // Until its neighbours link back to it, its words are not known
        // to be links: the block of a removed element may hold anything
        // now (another collection's bytes), so a word that leads nowhere
        // readable means the cursor is stale, not that the list is
        // damaged.
        let mut neighbour = |at: u64, word: u64| match Self::links(m, at) {
            Ok(l) => Ok(if word == NEXT_OFF { l.next } else { l.prev }),
            Err(e) if unreadable(&e) => Err(bad(
                "its links lead to no node (removed, its block reused?)",
            )),
            Err(e) => Err(e),
        };
        let back = match l.prev {
            0 => h.head,
            p => neighbour(p, NEXT_OFF)?,
        };
        let fwd = match l.next {
            0 => h.tail,
            n => neighbour(n, PREV_OFF)?,
        };
        if back != node || fwd != node {
            return Err(bad("its neighbours do not link to it (removed?)"));
        }
        Ok(l)
    }

    /// Checks that `node` is linked into this list: its neighbours (or the
    /// header, at an end) point back at it.
    fn check_linked<M: Mem>(&self, m: &mut M, h: &Header, c: Cursor) -> Result<()> {
        let node = c.0;
        let bad = |reason| Error::InvalidCursor {
            offset: node,
            list: self.hdr,
            reason,
        };
        let l = self.check_neighbours(m, h, c)?;
        // Linked, but perhaps into another list: walk out from it both
        // ways at once until one way reaches an end, which must be this
        // list's (steps: twice the distance to the nearer end, at most
        // the length).
        let (mut fwd, mut fwd_next) = (node, l.next);
        let (mut back, mut back_prev) = (node, l.prev);
        for _ in 0..h.len {
            if fwd_next == 0 {
                return match fwd == h.tail {
                    true => Ok(()),
                    false => Err(bad("an element of another list")),
                };
            }
            if back_prev == 0 {
                return match back == h.head {
                    true => Ok(()),
                    false => Err(bad("an element of another list")),
                };
            }
            (fwd, back) = (fwd_next, back_prev);
            fwd_next = Self::links(m, fwd)?.next;
            back_prev = Self::links(m, back)?.prev;
        }
        Err(bad(
            "an element of another list (a chain longer than this one)",
        ))
    }

    /// Unlinks and frees `node` (known to be in the list), returning its
    /// value.
    fn unlink(&self, tx: &mut Tx<'_>, mut h: Header, node: u64) -> Result<T> {
        let l = Self::links(tx, node)?;
        let v = Self::value_in(tx, node)?;
        match l.prev {
            0 => h.head = l.next,
            p => put64(tx, field(p, NEXT_OFF)?, l.next)?,
        }
        match l.next {
            0 => h.tail = l.prev,
            n => put64(tx, field(n, PREV_OFF)?, l.prev)?,
        }
        h.len -= 1;
        self.put_header(tx, h, false)?;
        tx.free(PPtr::<u8>::from_offset(node))?;
        Ok(v)
    }

    /// The node of element `i`, walking from the nearer end.
    fn node_at<M: Mem>(&self, m: &mut M, h: &Header, i: u64) -> Result<u64> {
        if i >= h.len {
            return Err(Error::IndexOutOfBounds {
                what: WHAT,
                index: i,
                len: h.len,
            });
        }
        let (mut node, steps, forward) = if i < h.len / 2 {
            (h.head, i, true)
        } else {
            (h.tail, h.len - 1 - i, false)
        };
        for _ in 0..steps {
            let l = Self::links(m, node)?;
            node = if forward { l.next } else { l.prev };
            if node == 0 {
                return Err(corrupt(WHAT, self.hdr, "a chain shorter than the length"));
            }
        }
        Ok(node)
    }

    /// Element `i`, or `None` past the end (committed state).
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
        let node = self.node_at(m, &h, i)?;
        Self::value_in(m, node).map(Some)
    }

    /// The first element (committed state).
    pub fn front(&self, pool: &Pool) -> Result<Option<T>> {
        self.get(pool, 0)
    }

    /// The last element (committed state).
    pub fn back(&self, pool: &Pool) -> Result<Option<T>> {
        pool.read_isolated(self.hdr, |r| {
            let n = self.header(r)?.len;
            if n == 0 {
                return Ok(None);
            }
            self.get_in(r, n - 1)
        })
    }

    /// A cursor at element `i`, or `None` past the end (committed state).
    pub fn cursor(&self, pool: &Pool, i: u64) -> Result<Option<Cursor>> {
        pool.read_isolated(self.hdr, |r| self.cursor_in(r, i))
    }

    /// A cursor at element `i` as `tx` sees the list.
    pub fn cursor_tx(&self, tx: &mut Tx<'_>, i: u64) -> Result<Option<Cursor>> {
        tx.lock_shared(self.as_ptr())?; // held until the transaction ends
        self.cursor_in(tx, i)
    }

    fn cursor_in<M: Mem>(&self, m: &mut M, i: u64) -> Result<Option<Cursor>> {
        let h = self.header(m)?;
        if i >= h.len {
            return Ok(None);
        }
        let node = self.node_at(m, &h, i)?;
        Self::cursor_at(m, node).map(Some)
    }

    /// The cursor after `c`, or `None` at the back (committed state);
    /// [`Error::InvalidCursor`] if `c`'s element was removed (its
    /// neighbours no longer link to it: a constant-time check, not the
    /// walk of [`value`](Self::value) that also tells another list's
    /// element apart).
    pub fn next(&self, pool: &Pool, c: Cursor) -> Result<Option<Cursor>> {
        pool.read_isolated(self.hdr, |r| {
            let h = self.header(r)?;
            match self.check_neighbours(r, &h, c)?.next {
                0 => Ok(None),
                n => Self::cursor_at(r, n).map(Some),
            }
        })
    }

    /// The cursor before `c`, or `None` at the front (committed state);
    /// [`Error::InvalidCursor`] if `c`'s element was removed (as
    /// [`next`](Self::next)).
    pub fn prev(&self, pool: &Pool, c: Cursor) -> Result<Option<Cursor>> {
        pool.read_isolated(self.hdr, |r| {
            let h = self.header(r)?;
            match self.check_neighbours(r, &h, c)?.prev {
                0 => Ok(None),
                p => Self::cursor_at(r, p).map(Some),
            }
        })
    }

    /// The element at `c` (committed state).
    pub fn value(&self, pool: &Pool, c: Cursor) -> Result<T> {
        pool.read_isolated(self.hdr, |r| {
            let h = self.header(r)?;
            self.check_linked(r, &h, c)?;
            Self::value_in(r, c.0)
        })
    }

    /// Every element from front to back, or back to front with `.rev()`
    /// (committed state). Nodes are read as the iterator goes, with no
    /// lock: beside transactions that change the list it can see part of
    /// a change, and an error met while one did (a node freed by a commit)
    /// is [`Error::Changed`](crate::Error::Changed). On a thread inside a
    /// transaction of `pool` it is `NestedTransaction`: scan with
    /// [`iter_tx`](Self::iter_tx) there.
    pub fn iter<'p>(&self, pool: &'p Pool) -> Result<Iter<'p, T>> {
        // (Taken before the header is read.)
        let watch = ScanWatch::start(pool, WHAT, self.hdr)?;
        let mut it = self.iter_in(Box::new(pool)).map_err(|e| watch.explain(e))?;
        it.watch = Some(watch);
        Ok(it)
    }

    /// [`iter`](Self::iter) as `tx` sees the list, its own writes
    /// included (under the list's lock, taken shared).
    pub fn iter_tx<'a, 'p: 'a>(&self, tx: &'a mut Tx<'p>) -> Result<Iter<'a, T>> {
        tx.lock_shared(self.as_ptr())?; // held until the transaction ends
        self.iter_in(Box::new(tx))
    }

    fn iter_in<'a>(&self, mut mem: Box<dyn Mem + 'a>) -> Result<Iter<'a, T>> {
        let h = self.header(&mut *mem)?;
        Ok(Iter {
            watch: None,
            mem,
            list: self.hdr,
            front: h.head,
            back: h.tail,
            left: h.len,
            front_done: 0,
            back_done: 0,
            _t: PhantomData,
        })
    }

    /// The offsets of every block the list owns, header first (committed
    /// state): for space accounting and checks.
    pub fn blocks(&self, pool: &Pool) -> Result<std::vec::Vec<u64>> {
        // (An error while a writer held it is `Changed`, as for a scan.)
        ScanWatch::around(pool, WHAT, self.hdr, || self.blocks_unwatched(pool))
    }

    fn blocks_unwatched(&self, pool: &Pool) -> Result<std::vec::Vec<u64>> {
        let mut m = pool;
        let h = self.header(&mut m)?;
        let mut out = vec![self.hdr];
        let mut node = h.head;
        let mut prev = 0;
        while node != 0 {
            if out.len() as u64 > h.len {
                return Err(corrupt(WHAT, self.hdr, "a chain longer than the length"));
            }
            let l = Self::links(&mut m, node)?;
            if l.prev != prev {
                return Err(corrupt(WHAT, node, "prev link is not the previous node"));
            }
            out.push(node);
            (prev, node) = (node, l.next);
        }
        if h.len.checked_add(1) != Some(out.len() as u64) || prev != h.tail {
            return Err(corrupt(
                WHAT,
                self.hdr,
                "length or tail disagrees with the chain",
            ));
        }
        Ok(out)
    }

    /// Checks the links: walking forward visits `len` nodes ending at the
    /// tail, and every node's `prev` is the node before it. Committed
    /// state: on a thread inside a transaction of `pool` it is
    /// `NestedTransaction`.
    pub fn check_invariants(&self, pool: &Pool) -> Result<()> {
        self.blocks(pool).map(|_| ())
    }

    /// Frees every node and the header; the handle must not be used again.
    pub fn destroy(self, tx: &mut Tx<'_>) -> Result<()> {
        tx.lock(self.as_ptr())?; // held until the transaction ends
        let h = self.header(tx)?;
        let mut node = h.head;
        for _ in 0..h.len {
            if node == 0 {
                return Err(corrupt(WHAT, self.hdr, "a chain shorter than the length"));
            }
            let next = Self::links(tx, node)?.next;
            tx.free(PPtr::<u8>::from_offset(node))?;
            node = next;
        }
        Ok(tx.free(self.as_ptr())?)
    }
}

/// An iterator over a [`List`]'s elements, front to back, or back to front
/// with `.rev()` (from [`List::iter`] and [`List::iter_tx`]).
pub struct Iter<'p, T> {
    /// A scan through `&Pool`: its errors while a writer held the list
    /// are `Changed`.
    watch: Option<ScanWatch<'p>>,
    mem: Box<dyn Mem + 'p>,
    list: u64,
    front: u64,
    back: u64,
    left: u64,
    /// The nodes last yielded from the front and from the back (0: none):
    /// an end that reaches a node the other end yielded stops there. The
    /// count alone let a scan through `&Pool` whose list lost elements
    /// between its ends run past the back and yield them again.
    front_done: u64,
    back_done: u64,
    _t: PhantomData<fn() -> T>,
}

impl<T: Stored> Iter<'_, T> {
    /// Reads `node`, moving the end it came from along `step`; ends the
    /// iterator on an error.
    fn take(&mut self, node: u64, forward: bool) -> Option<Result<T>> {
        let met = if forward {
            self.back_done
        } else {
            self.front_done
        };
        if node != 0 && node == met {
            self.left = 0; // the ends met: every element between is yielded
            return None;
        }
        self.left -= 1;
        if let Some(Err(e)) = self.watch.map(|w| w.outside()) {
            self.left = 0;
            return Some(Err(e));
        }
        let m = &mut *self.mem;
        let read = (|| {
            if node == 0 {
                return Err(corrupt(WHAT, self.list, "a chain shorter than the length"));
            }
            let l = List::<T>::links(m, node)?;
            let v = List::<T>::value_in(m, node)?;
            Ok((l, v))
        })();
        match read {
            Ok((l, v)) => {
                if forward {
                    self.front = l.next;
                    self.front_done = node;
                } else {
                    self.back = l.prev;
                    self.back_done = node;
                }
                Some(Ok(v))
            }
            Err(e) => {
                self.left = 0;
                Some(Err(match self.watch {
                    Some(w) => w.explain(e),
                    None => e,
                }))
            }
        }
    }
}

impl<T: Stored> Iterator for Iter<'_, T> {
    type Item = Result<T>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.take(self.front, true)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.left).unwrap_or(usize::MAX);
        (0, Some(n))
    }
}

impl<T: Stored> DoubleEndedIterator for Iter<'_, T> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.take(self.back, false)
    }
}

#[cfg(test)]
mod tests {
    use super::stamp;

    #[test]
    fn a_forked_process_takes_none_of_its_parents_stamps() {
        // Parent and child go on from the same count (at the edges of
        // the bottom half too); no stamp of one is the other's.
        let (parent, child) = (4242, 4243);
        for start in [0, u64::MAX - 3, (1 << 32) - 2, 0x1234_5678_ffff_fff0] {
            let ours: std::collections::HashSet<u64> = (0..64)
                .map(|i| stamp(start.wrapping_add(i), parent))
                .collect();
            assert_eq!(ours.len(), 64, "a process's stamps are distinct");
            for i in 0..64 {
                assert!(!ours.contains(&stamp(start.wrapping_add(i), child)));
            }
        }
        // Two counts fewer than 2^32 apart, in two processes: apart.
        assert_ne!(stamp(5, parent), stamp(5 + (1 << 32) - 1, child));
    }
}
