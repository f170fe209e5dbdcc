//! The raw region behind a [`Domain`](super::Domain): a mapped file or an owned
//! buffer, addressed by offset. This is where offsets become pointers; every
//! access is bounds-checked by the caller (`Domain::check`) before it gets here.
//!
//! The region is shared by all threads of a pool. Rust references into it are
//! never created: reads and writes copy through raw pointers, so the region
//! behaves like `[UnsafeCell<u8>]`. Concurrent access to the *same bytes* by
//! two threads is the program's isolation to provide (REWIND §4.7), as with
//! any shared memory; the library's own structures are guarded by its locks.

use std::fs::File;
use std::io;

use memmap2::{MmapMut, MmapOptions};

use super::pmem::FlushInstr;

enum Backing {
    Map(MmapMut),
    // Keeps the owned buffer alive; accessed only through `base`.
    Owned(#[allow(dead_code)] Box<[u8]>),
}

/// A read-only view of a mapping's bytes for the simulator, which reads the
/// live contents to build crash images. Valid while its Mapping lives (the
/// Domain owns both and drops the simulator first).
#[derive(Clone, Copy)]
pub(super) struct View {
    base: *const u8,
    len: usize,
}

// SAFETY: a View only reads through raw-pointer copies (see Mapping) and is
// used under the simulator's lock, while the Mapping that owns the bytes lives.
unsafe impl Send for View {}

impl View {
    /// A copy of the bytes.
    pub(super) fn copy(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        // SAFETY: `base..base+len` is the live mapping (see the type's doc);
        // `v` is a fresh allocation of `len` bytes.
        unsafe { std::ptr::copy_nonoverlapping(self.base, v.as_mut_ptr(), self.len) };
        v
    }

    /// The 8 bytes at `off` (8-aligned, inside the view).
    pub(super) fn word(&self, off: u64) -> [u8; 8] {
        assert!(
            off as usize + 8 <= self.len,
            "simulated store outside the region"
        );
        let mut w = [0u8; 8];
        // SAFETY: bounds asserted above; `w` is a local buffer.
        unsafe { std::ptr::copy_nonoverlapping(self.base.add(off as usize), w.as_mut_ptr(), 8) };
        w
    }
}

pub(super) struct Mapping {
    base: *mut u8,
    len: usize,
    backing: Backing,
}

// SAFETY: `base` points into memory owned by `backing` for the lifetime of the
// Mapping; all access goes through raw-pointer copies, never references, so
// sharing across threads is as sound as sharing an `[UnsafeCell<u8>]`.
unsafe impl Send for Mapping {}
// SAFETY: see `Send` above.
unsafe impl Sync for Mapping {}

impl Mapping {
    pub(super) fn map_file(file: &File) -> io::Result<Mapping> {
        let len = file.metadata()?.len();
        let len = usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        Mapping::map_file_len(file, len)
    }

    /// A shared mapping of `len` bytes of the file, which may be longer
    /// than the file: a pool reserves its maximum size's address range
    /// this way when it opens, so the mapping never moves when the file
    /// grows. Linux maps a file past its end (on tmpfs, ext4, xfs alike);
    /// a page past the end faults (SIGBUS) until the file is extended
    /// over it, so the domain bounds every access by the file's length,
    /// not by `len`, and extends the file before it lets anything in.
    /// An anonymous PROT_NONE reservation with the file mapped over its
    /// start (MAP_FIXED) would reserve the same range, but needs a
    /// remapping at every growth; mapping the file at the maximum length
    /// needs none.
    pub(super) fn map_file_len(file: &File, len: usize) -> io::Result<Mapping> {
        // SAFETY: the file is opened read-write by us; the mapping is kept
        // alive by `backing`. Pages past the file's end are never touched
        // (see above). Another process truncating the file underneath
        // would fault, as for every mmap-based store (documented in the README).
        let mut map = unsafe { MmapOptions::new().len(len).map_mut(file)? };
        let base = map.as_mut_ptr();
        Ok(Mapping {
            base,
            len,
            backing: Backing::Map(map),
        })
    }

    /// A private (copy-on-write) mapping of the file's first `len` bytes:
    /// stores change this process's copy only, never the file, and only
    /// the pages touched take memory (inspection of a pool file).
    pub(super) fn map_file_private(file: &File, len: usize) -> io::Result<Mapping> {
        // SAFETY: a private mapping: the file is never written through it,
        // and it is kept alive by `backing`. A file truncated underneath
        // would fault, as for every mmap (documented in the README).
        let mut map = unsafe { MmapOptions::new().len(len).map_copy(file)? };
        let base = map.as_mut_ptr();
        Ok(Mapping {
            base,
            len,
            backing: Backing::Map(map),
        })
    }

    pub(super) fn owned(bytes: Vec<u8>) -> Mapping {
        let mut b = bytes.into_boxed_slice();
        let base = b.as_mut_ptr();
        let len = b.len();
        Mapping {
            base,
            len,
            backing: Backing::Owned(b),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn view(&self) -> View {
        View {
            base: self.base,
            len: self.len,
        }
    }

    /// The address of byte `off` (a name for its line; never dereferenced).
    pub(super) fn addr(&self, off: usize) -> usize {
        self.base as usize + off
    }

    #[inline]
    pub(super) fn read(&self, off: usize, buf: &mut [u8]) {
        debug_assert!(off + buf.len() <= self.len);
        if let Ok(w) = <&mut [u8; 8]>::try_from(&mut *buf) {
            // A word (most reads of a node's fields): a copy of known
            // size, no call.
            // SAFETY: as below, for 8 bytes.
            unsafe { std::ptr::copy_nonoverlapping(self.base.add(off), w.as_mut_ptr(), 8) };
            return;
        }
        // SAFETY: the caller checked `off + buf.len() <= len`; `buf` is a
        // distinct Rust allocation, so the ranges do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(self.base.add(off), buf.as_mut_ptr(), buf.len()) }
    }

    #[inline]
    pub(super) fn write(&self, off: usize, bytes: &[u8]) {
        debug_assert!(off + bytes.len() <= self.len);
        if let Ok(w) = <&[u8; 8]>::try_from(bytes) {
            // A word (most writes): a copy of known size, no call.
            // SAFETY: as below, for 8 bytes.
            unsafe { std::ptr::copy_nonoverlapping(w.as_ptr(), self.base.add(off), 8) };
            return;
        }
        // SAFETY: bounds checked by the caller; no reference into the region
        // exists, and `bytes` cannot alias it (it is a Rust borrow).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.add(off), bytes.len()) }
    }

    /// One store instruction of 1, 2, 4 or 8 bytes at an offset aligned to
    /// its size: failure-atomic, since the persistence domain receives an
    /// aligned store of at most 8 bytes whole.
    pub(super) fn write_word(&self, off: usize, bytes: &[u8]) {
        use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};
        debug_assert!(off + bytes.len() <= self.len && off.is_multiple_of(bytes.len()));
        // SAFETY: bounds and alignment checked by the caller (`Domain::store_word`);
        // the mapping is page-aligned, so `base + off` is aligned to the size,
        // and atomics of that size may alias the mapped bytes.
        unsafe {
            let p = self.base.add(off);
            match *bytes {
                [a] => (*p.cast::<AtomicU8>()).store(a, Relaxed),
                [a, b] => (*p.cast::<AtomicU16>()).store(u16::from_ne_bytes([a, b]), Relaxed),
                [a, b, c, d] => {
                    (*p.cast::<AtomicU32>()).store(u32::from_ne_bytes([a, b, c, d]), Relaxed)
                }
                _ => {
                    let w: [u8; 8] = bytes.try_into().expect("1, 2, 4 or 8 bytes");
                    (*p.cast::<AtomicU64>()).store(u64::from_ne_bytes(w), Relaxed)
                }
            }
        }
    }

    /// Non-temporal store: `movnti` for the aligned 8-byte words, ordinary
    /// stores plus a line flush for any unaligned head or tail.
    pub(super) fn write_nt(&self, off: usize, bytes: &[u8], instr: FlushInstr) {
        #[cfg(target_arch = "x86_64")]
        {
            if off.is_multiple_of(8) && bytes.len().is_multiple_of(8) {
                // Whole aligned words (a commit group, a Log Start slot):
                // one `movnti` each, no test per word.
                for (i, w) in bytes.chunks_exact(8).enumerate() {
                    let w = i64::from_le_bytes(w.try_into().expect("8 bytes"));
                    // SAFETY: as below: `off + 8 * i` is 8-aligned in the
                    // page-aligned mapping, inside the bounds the caller
                    // checked.
                    unsafe {
                        std::arch::x86_64::_mm_stream_si64(
                            self.base.add(off + 8 * i) as *mut i64,
                            w,
                        )
                    };
                }
                return;
            }
            let mut i = 0;
            while i < bytes.len() {
                let p = off + i;
                if p.is_multiple_of(8) && bytes.len() - i >= 8 {
                    let mut w = [0u8; 8];
                    w.copy_from_slice(&bytes[i..i + 8]);
                    // SAFETY: `p` is 8-aligned relative to the base, and the
                    // base is page-aligned (mmap) or from a Box<[u8]> of which
                    // only Sim domains use owned buffers (never this path);
                    // bounds were checked by the caller.
                    unsafe {
                        std::arch::x86_64::_mm_stream_si64(
                            self.base.add(p) as *mut i64,
                            i64::from_le_bytes(w),
                        )
                    };
                    i += 8;
                } else {
                    let end = (p / 8 + 1) * 8 - off;
                    let end = end.min(bytes.len());
                    self.write(p, &bytes[i..end]);
                    self.flush_line(p, instr);
                    i = end;
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self.write(off, bytes);
            let mut l = off / 64 * 64;
            while l < off + bytes.len() {
                self.flush_line(l, instr);
                l += 64;
            }
        }
    }

    #[inline]
    pub(super) fn flush_line(&self, off: usize, instr: FlushInstr) {
        debug_assert!(off < self.len);
        // SAFETY: `off` is inside the region (checked by the caller), so the
        // address is mapped; flush instructions do not modify memory.
        let p = unsafe { self.base.add(off) };
        instr.flush(p);
    }

    /// Asks the cache for the line of byte `off` (a hint: it changes
    /// nothing, and a line not fetched yet costs nothing more).
    #[inline]
    pub(super) fn prefetch(&self, off: usize) {
        debug_assert!(off < self.len);
        #[cfg(target_arch = "x86_64")]
        {
            let p = self.base.wrapping_add(off) as *const i8;
            // SAFETY: a prefetch is a hint: it neither reads nor writes
            // memory as the program sees it, and faults on no address.
            unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p) };
        }
    }

    #[inline]
    pub(super) fn sfence(&self) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: sfence has no memory operands and is always available on x86_64.
        unsafe {
            std::arch::x86_64::_mm_sfence()
        };
        #[cfg(not(target_arch = "x86_64"))]
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }

    pub(super) fn msync(&self, off: usize, len: usize) -> io::Result<()> {
        match &self.backing {
            Backing::Map(m) => m.flush_range(off, len),
            Backing::Owned(_) => Ok(()),
        }
    }
}
