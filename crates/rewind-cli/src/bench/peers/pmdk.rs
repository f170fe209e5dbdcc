//! PMDK's libpmemobj as a peer: the same persistent array, each transaction
//! an undo-logged libpmemobj transaction.
//!
//! Hand-declared bindings for the few calls used (libpmemobj 1.x, as in
//! `<libpmemobj/base.h>`, `pool_base.h` and `tx_base.h`), and safe
//! wrappers: [`PmdkHeap`], and [`PmdkArray`] on it. Errors are `io::Error`s whose text is
//! what we were doing and `pmemobj_errormsg`'s message; nothing panics.
//!
//! Transactions start with a NULL `jmp_buf`: libpmemobj then never
//! `longjmp`s. A failing call moves the transaction to `TX_STAGE_ONABORT`
//! (the default failure behavior) and returns an error number;
//! `pmemobj_tx_end` must still be called, and returns the transaction's
//! error code (0 when it committed).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::NonNull;

/// `PMEMobjpool`: opaque.
#[repr(C)]
struct PmemObjPool {
    _private: [u8; 0],
}

/// `PMEMoid`: a persistent pointer, `{ uint64_t pool_uuid_lo; uint64_t off; }`.
#[repr(C)]
#[derive(Clone, Copy)]
struct PmemOid {
    pool_uuid_lo: u64,
    off: u64,
}

/// `enum pobj_tx_param`: `TX_PARAM_NONE` ends `pmemobj_tx_begin`'s parameter list.
const TX_PARAM_NONE: c_int = 0;
/// `enum pobj_tx_stage`: `TX_STAGE_WORK`, a transaction in progress.
const TX_STAGE_WORK: c_int = 1;
/// `ECANCELED`, the error number of an abort the caller asked for.
const ECANCELED: c_int = 125;

// Linked by build.rs (pkg-config libpmemobj).
extern "C" {
    fn pmemobj_create(
        path: *const c_char,
        layout: *const c_char,
        poolsize: usize,
        mode: u32, // mode_t
    ) -> *mut PmemObjPool;
    fn pmemobj_open(path: *const c_char, layout: *const c_char) -> *mut PmemObjPool;
    fn pmemobj_close(pop: *mut PmemObjPool);
    fn pmemobj_root(pop: *mut PmemObjPool, size: usize) -> PmemOid;
    fn pmemobj_direct(oid: PmemOid) -> *mut c_void;
    fn pmemobj_errormsg() -> *const c_char;
    // `jmp_buf env` (an array type, so a pointer); NULL: never longjmp.
    fn pmemobj_tx_begin(pop: *mut PmemObjPool, env: *mut c_void, ...) -> c_int;
    fn pmemobj_tx_add_range_direct(ptr: *const c_void, size: usize) -> c_int;
    fn pmemobj_tx_commit();
    fn pmemobj_tx_end() -> c_int;
    fn pmemobj_tx_abort(errnum: c_int);
    fn pmemobj_tx_stage() -> c_int; // enum pobj_tx_stage
    fn pmemobj_tx_zalloc(size: usize, type_num: u64) -> PmemOid;
    fn pmemobj_tx_free(oid: PmemOid) -> c_int;
    fn pmemobj_tx_errno() -> c_int;
}

/// The last libpmemobj error message of this thread.
fn errormsg() -> String {
    // SAFETY: pmemobj_errormsg returns a pointer to a thread-local,
    // NUL-terminated buffer (or NULL); we copy it out at once.
    let p = unsafe { pmemobj_errormsg() };
    if p.is_null() {
        return "unknown libpmemobj error".into();
    }
    // SAFETY: non-null, NUL-terminated (see above), valid until the next
    // libpmemobj call of this thread, and we make none before copying.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// An error whose text is what we were doing and libpmemobj's message
/// (with the error number a transaction call returned, if any).
fn pmdk_error(action: &str, code: c_int) -> io::Error {
    let msg = errormsg();
    if code > 0 {
        io::Error::other(format!("{action}: libpmemobj: {msg} (error {code})"))
    } else {
        io::Error::other(format!("{action}: libpmemobj: {msg}"))
    }
}

/// Commits and ends the transaction in stage WORK on this thread: durable
/// when it returns `Ok`.
fn tx_commit() -> io::Result<()> {
    // SAFETY: the caller's transaction is in stage WORK; a failed commit
    // moves to ONABORT (NULL env: no longjmp) and tx_end reports its error
    // code.
    let rc = unsafe {
        pmemobj_tx_commit();
        pmemobj_tx_end()
    };
    if rc != 0 {
        return Err(pmdk_error("PMDK transaction commit", rc));
    }
    Ok(())
}

/// `path` as libpmemobj takes it; an error says `what` we were doing.
fn c_path(path: &Path, what: &str) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|e| io::Error::other(format!("{what}: {e}")))
}

/// Begins a libpmemobj transaction on the open pool `pop`.
fn tx_begin(pop: NonNull<PmemObjPool>) -> io::Result<()> {
    // SAFETY: `pop` is open; NULL env: errors return, never longjmp.
    let rc = unsafe { pmemobj_tx_begin(pop.as_ptr(), std::ptr::null_mut(), TX_PARAM_NONE) };
    if rc != 0 {
        let err = pmdk_error("PMDK transaction begin", rc);
        // SAFETY: tx_end must follow every tx_begin, even a failed one
        // (stage ONABORT, not WORK).
        unsafe { pmemobj_tx_end() };
        return Err(err);
    }
    Ok(())
}

/// A libpmemobj pool whose heap holds an array of `len` u64.
pub struct PmdkArray {
    heap: PmdkHeap,
    /// The array's offset in the pool.
    arr: u64,
    len: u64,
}

impl PmdkArray {
    /// Creates a pool of `size` bytes at `path` (replacing any file there)
    /// and allocates a zeroed array of `m` u64 in it.
    pub fn create(path: &Path, m: u64, size: u64) -> io::Result<PmdkArray> {
        let mut heap = PmdkHeap::create(path, size)?;
        let mut tx = heap.begin()?;
        let arr = tx.zalloc(m * 8)?;
        tx.commit()?;
        Ok(PmdkArray { heap, arr, len: m })
    }

    /// One transaction: for each index `i` of `idx`, snapshot `arr[i]` into
    /// the undo log (`pmemobj_tx_add_range_direct`), then store `t` there;
    /// commit. Durable and atomic when it returns `Ok`.
    pub fn update_tx(&mut self, idx: &[u64], t: u64) -> io::Result<()> {
        let mut tx = self.heap.begin()?;
        for &i in idx {
            if i >= self.len {
                // Dropping `tx` aborts it.
                return Err(io::Error::other(format!(
                    "PMDK transaction: index {i} outside the array of {}",
                    self.len
                )));
            }
            tx.write(self.arr + i * 8, &t.to_ne_bytes())?;
        }
        tx.commit()
    }

    /// Element `i`, or `None` past the end.
    pub fn get(&self, i: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        let read = i < self.len && self.heap.read(self.arr + i * 8, &mut b).is_ok();
        read.then(|| u64::from_ne_bytes(b))
    }
}

/// The layout name of [`PmdkHeap`] pools.
const HEAP_LAYOUT: &CStr = c"rewind-bench-heap";

/// A libpmemobj pool as a heap of byte offsets, for the B+-tree benchmarks:
/// transactions that snapshot each range before writing it
/// (`pmemobj_tx_add_range_direct`), allocate (`pmemobj_tx_zalloc`) and free
/// (`pmemobj_tx_free`). Offsets are from the pool's base, as `PMEMoid.off`.
pub struct PmdkHeap {
    pop: NonNull<PmemObjPool>,
    /// The pool's base address (oid.off 0).
    base: NonNull<u8>,
    /// The pool's length: every access is checked against it.
    size: u64,
    /// The pool's uuid, for the oids given to `pmemobj_tx_free`.
    uuid_lo: u64,
    /// The root object: one u64 the user may use (a tree's meta offset).
    root: u64,
}

// SAFETY: the pool handle and its mapping may be used from any thread
// (libpmemobj's handles are thread-safe); `&mut self` on every call keeps
// one thread in a transaction of this handle at a time.
unsafe impl Send for PmdkHeap {}

/// An open libpmemobj transaction of a [`PmdkHeap`]; aborted if dropped
/// without [`commit`](PmdkTx::commit).
pub struct PmdkTx<'h> {
    heap: &'h mut PmdkHeap,
    open: bool,
}

impl PmdkHeap {
    /// Creates a pool of `size` bytes at `path` (replacing any file there).
    pub fn create(path: &Path, size: u64) -> io::Result<PmdkHeap> {
        let _ = std::fs::remove_file(path);
        let what = format!("creating PMDK pool {}", path.display());
        let cpath = c_path(path, &what)?;
        // SAFETY: both strings are NUL-terminated and outlive the call.
        let pop =
            unsafe { pmemobj_create(cpath.as_ptr(), HEAP_LAYOUT.as_ptr(), size as usize, 0o600) };
        let pop = NonNull::new(pop).ok_or_else(|| pmdk_error(&what, 0))?;
        PmdkHeap::start(pop, size, &what)
    }

    /// Opens the pool at `path` (recovering any transaction it was left in).
    pub fn open(path: &Path) -> io::Result<PmdkHeap> {
        let what = format!("opening PMDK pool {}", path.display());
        let size = std::fs::metadata(path)
            .map_err(|e| io::Error::other(format!("{what}: {e}")))?
            .len();
        let cpath = c_path(path, &what)?;
        // SAFETY: both strings are NUL-terminated and outlive the call.
        let pop = unsafe { pmemobj_open(cpath.as_ptr(), HEAP_LAYOUT.as_ptr()) };
        let pop = NonNull::new(pop).ok_or_else(|| pmdk_error(&what, 0))?;
        PmdkHeap::start(pop, size, &what)
    }

    fn start(pop: NonNull<PmemObjPool>, size: u64, what: &str) -> io::Result<PmdkHeap> {
        // SAFETY: `pop` is an open pool; the root object is one u64.
        let root = unsafe { pmemobj_root(pop.as_ptr(), 8) };
        if root.off == 0 {
            // SAFETY: open, and not used after.
            unsafe { pmemobj_close(pop.as_ptr()) };
            return Err(pmdk_error(what, 0));
        }
        // SAFETY: `root` is a valid oid of this open pool.
        let p = unsafe { pmemobj_direct(root) }.cast::<u8>();
        // The base is the root's address less its offset.
        let base = p.wrapping_sub(root.off as usize);
        match NonNull::new(base) {
            Some(base) if root.off + 8 <= size => Ok(PmdkHeap {
                pop,
                base,
                size,
                uuid_lo: root.pool_uuid_lo,
                root: root.off,
            }),
            _ => {
                // SAFETY: open, and not used after.
                unsafe { pmemobj_close(pop.as_ptr()) };
                Err(pmdk_error(what, 0))
            }
        }
    }

    /// The offset of the root word.
    pub fn root(&self) -> u64 {
        self.root
    }

    /// The range `off..off + len`, checked inside the pool.
    fn check(&self, off: u64, len: usize) -> io::Result<*mut u8> {
        match off.checked_add(len as u64) {
            Some(end) if off > 0 && end <= self.size => {
                // SAFETY: off < size: inside the pool's mapping.
                Ok(unsafe { self.base.as_ptr().add(off as usize) })
            }
            _ => Err(io::Error::other(format!(
                "PMDK: access of {len} bytes at {off} outside the pool of {}",
                self.size
            ))),
        }
    }

    /// Reads committed bytes (no transaction open).
    pub fn read(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        let p = self.check(off, buf.len())?;
        // SAFETY: checked inside the mapping; no Rust reference to the
        // pool's bytes exists, and `&self` excludes a writing transaction.
        unsafe { std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// Begins a transaction.
    pub fn begin(&mut self) -> io::Result<PmdkTx<'_>> {
        tx_begin(self.pop)?;
        Ok(PmdkTx {
            heap: self,
            open: true,
        })
    }
}

impl PmdkTx<'_> {
    /// Fails the transaction after error `rc` of `action`: aborts it (if
    /// still in WORK) and ends it.
    fn fail(&mut self, action: &str, rc: c_int) -> io::Error {
        let err = pmdk_error(action, rc);
        self.end_aborted(if rc > 0 { rc } else { ECANCELED });
        err
    }

    fn end_aborted(&mut self, rc: c_int) {
        if self.open {
            self.open = false;
            // SAFETY: our transaction is open; abort only in WORK, then end.
            unsafe {
                if pmemobj_tx_stage() == TX_STAGE_WORK {
                    pmemobj_tx_abort(rc);
                }
                pmemobj_tx_end();
            }
        }
    }

    fn live(&self) -> io::Result<()> {
        if self.open {
            Ok(())
        } else {
            Err(io::Error::other("PMDK: the transaction has ended"))
        }
    }

    /// Reads bytes (this transaction's writes are in place).
    pub fn read(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        self.heap.read(off, buf)
    }

    /// Snapshots `off..off + len` into the undo log, then writes `bytes` there.
    pub fn write(&mut self, off: u64, bytes: &[u8]) -> io::Result<()> {
        self.live()?;
        let p = self.heap.check(off, bytes.len())?;
        // SAFETY: stage WORK; the range lies inside this pool.
        let rc = unsafe { pmemobj_tx_add_range_direct(p.cast(), bytes.len()) };
        if rc != 0 {
            return Err(self.fail("PMDK pmemobj_tx_add_range_direct", rc));
        }
        // SAFETY: inside the mapping (checked); no Rust reference to it exists.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) };
        Ok(())
    }

    /// Allocates `size` zeroed bytes (freed again if the transaction aborts).
    pub fn zalloc(&mut self, size: u64) -> io::Result<u64> {
        self.live()?;
        // SAFETY: stage WORK.
        let oid = unsafe { pmemobj_tx_zalloc(size as usize, 2) };
        if oid.off == 0 {
            // SAFETY: reads this thread's transaction error.
            let rc = unsafe { pmemobj_tx_errno() };
            return Err(self.fail("PMDK pmemobj_tx_zalloc", rc));
        }
        Ok(oid.off)
    }

    /// Frees the block at `off` when the transaction commits.
    pub fn free(&mut self, off: u64) -> io::Result<()> {
        self.live()?;
        self.heap.check(off, 1)?;
        let oid = PmemOid {
            pool_uuid_lo: self.heap.uuid_lo,
            off,
        };
        // SAFETY: stage WORK; the oid names a block of this pool (libpmemobj
        // checks that it is allocated and fails the transaction if not).
        let rc = unsafe { pmemobj_tx_free(oid) };
        if rc != 0 {
            return Err(self.fail("PMDK pmemobj_tx_free", rc));
        }
        Ok(())
    }

    /// Commits: durable when it returns `Ok`.
    pub fn commit(mut self) -> io::Result<()> {
        self.live()?;
        self.open = false;
        tx_commit()
    }

    /// Aborts: every write of the transaction is rolled back.
    pub fn abort(mut self) {
        self.end_aborted(ECANCELED);
    }
}

impl Drop for PmdkTx<'_> {
    fn drop(&mut self) {
        self.end_aborted(ECANCELED);
    }
}

impl Drop for PmdkHeap {
    fn drop(&mut self) {
        // SAFETY: `pop` is open and closed only here; no transaction is open
        // (a PmdkTx borrows the heap mutably and ends its transaction on drop).
        unsafe { pmemobj_close(self.pop.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transactions_store_and_a_bad_index_is_an_error_not_a_panic() {
        let (_dir, path) = crate::scratch("t.pool");
        let mut a = PmdkArray::create(&path, 1024, 16 << 20).unwrap();
        a.update_tx(&[3, 700, 3], 7).unwrap();
        a.update_tx(&[5], 9).unwrap();
        assert_eq!(a.get(3), Some(7));
        assert_eq!(a.get(700), Some(7));
        assert_eq!(a.get(5), Some(9));
        assert_eq!(a.get(4), Some(0));
        assert_eq!(a.get(1024), None);
        // Aborted: its first store is rolled back, and the next one works.
        let err = a.update_tx(&[5, 1024], 11).unwrap_err();
        assert!(err.to_string().contains("index 1024"), "{err}");
        assert_eq!(a.get(5), Some(9));
        a.update_tx(&[6], 12).unwrap();
        assert_eq!(a.get(6), Some(12));
    }

    #[test]
    fn heap_transactions_commit_and_abort() {
        let (_dir, path) = crate::scratch("h.pool");
        let mut h = PmdkHeap::create(&path, 16 << 20).unwrap();
        let mut tx = h.begin().unwrap();
        let a = tx.zalloc(64).unwrap();
        tx.write(a, &[1; 8]).unwrap();
        tx.commit().unwrap();
        let mut tx = h.begin().unwrap();
        tx.write(a, &[2; 8]).unwrap();
        let mut b = [0u8; 8];
        tx.read(a, &mut b).unwrap();
        assert_eq!(b, [2; 8]);
        tx.abort();
        h.read(a, &mut b).unwrap();
        assert_eq!(b, [1; 8]);
        let mut tx = h.begin().unwrap();
        tx.free(a).unwrap();
        tx.commit().unwrap();
        assert!(h.read(h.root(), &mut b).is_ok());
        assert!(h.read(16 << 20, &mut b).is_err());
    }

    #[test]
    fn a_pool_that_cannot_be_created_is_an_error_with_libpmemobj_text() {
        let (_dir, path) = crate::scratch("no-such-dir/t.pool");
        let err = PmdkArray::create(&path, 1024, 16 << 20).err().unwrap();
        assert!(err.to_string().contains("libpmemobj: "), "{err}");
    }
}
