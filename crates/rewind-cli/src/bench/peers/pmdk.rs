//! PMDK's libpmemobj as a peer: the same persistent array, each transaction
//! an undo-logged libpmemobj transaction.
//!
//! Hand-declared bindings for the few calls used (libpmemobj 1.x, as in
//! `<libpmemobj/base.h>`, `pool_base.h`, `atomic_base.h` and `tx_base.h`),
//! and a safe wrapper, [`PmdkArray`]. Errors are `io::Error`s whose text is
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
/// `EINVAL`, the error number an abort for a bad index carries.
const EINVAL: c_int = 22;

// Linked by build.rs (pkg-config libpmemobj).
extern "C" {
    fn pmemobj_create(
        path: *const c_char,
        layout: *const c_char,
        poolsize: usize,
        mode: u32, // mode_t
    ) -> *mut PmemObjPool;
    fn pmemobj_close(pop: *mut PmemObjPool);
    fn pmemobj_root(pop: *mut PmemObjPool, size: usize) -> PmemOid;
    fn pmemobj_direct(oid: PmemOid) -> *mut c_void;
    fn pmemobj_zalloc(
        pop: *mut PmemObjPool,
        oidp: *mut PmemOid,
        size: usize,
        type_num: u64,
    ) -> c_int;
    fn pmemobj_errormsg() -> *const c_char;
    // `jmp_buf env` (an array type, so a pointer); NULL: never longjmp.
    fn pmemobj_tx_begin(pop: *mut PmemObjPool, env: *mut c_void, ...) -> c_int;
    fn pmemobj_tx_add_range_direct(ptr: *const c_void, size: usize) -> c_int;
    fn pmemobj_tx_commit();
    fn pmemobj_tx_end() -> c_int;
    fn pmemobj_tx_abort(errnum: c_int);
    fn pmemobj_tx_stage() -> c_int; // enum pobj_tx_stage
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

/// A libpmemobj pool whose root holds an array of `len` u64.
pub struct PmdkArray {
    pop: NonNull<PmemObjPool>,
    /// The array, inside the pool's mapping.
    arr: NonNull<u64>,
    len: u64,
}

impl PmdkArray {
    /// Creates a pool of `size` bytes at `path` (replacing any file there)
    /// and allocates a zeroed array of `m` u64, pointed to by the root.
    pub fn create(path: &Path, m: u64, size: u64) -> io::Result<PmdkArray> {
        let _ = std::fs::remove_file(path);
        // The pools live on tmpfs, DRAM standing in for persistent memory,
        // as for rewind's Pmem backend. Without this, libpmemobj sees a
        // mapping that is not pmem and makes every persist an msync; with
        // it, pmem_is_pmem is true and persists are cache-line write-backs
        // (clwb where the CPU has it) and an sfence, as rewind's are. Read
        // at the first pool create or open, so set before it; the benchmark
        // is single-threaded here, so no other thread reads the environment.
        std::env::set_var("PMEM_IS_PMEM_FORCE", "1");
        let what = format!("creating PMDK pool {}", path.display());
        let cpath = CString::new(path.as_os_str().as_bytes())
            .map_err(|e| io::Error::other(format!("{what}: {e}")))?;
        let layout = c"rewind-bench-pmdk";
        // SAFETY: both strings are NUL-terminated and outlive the call.
        let pop = unsafe { pmemobj_create(cpath.as_ptr(), layout.as_ptr(), size as usize, 0o600) };
        let pop = NonNull::new(pop).ok_or_else(|| pmdk_error(&what, 0))?;
        // From here on, dropping `pool` closes the pool.
        let mut pool = PmdkArray {
            pop,
            arr: NonNull::dangling(),
            len: 0,
        };
        let what = format!("allocating the array in {}", path.display());
        // SAFETY: `pop` is an open pool; the root object (zeroed on first
        // use) is one PMEMoid.
        let root = unsafe { pmemobj_root(pool.pop.as_ptr(), size_of::<PmemOid>()) };
        if root.off == 0 {
            return Err(pmdk_error(&what, 0));
        }
        // SAFETY: `root` is a valid oid of this open pool.
        let slot = unsafe { pmemobj_direct(root) }.cast::<PmemOid>();
        if slot.is_null() {
            return Err(pmdk_error(&what, 0));
        }
        // SAFETY: `slot` points at the root object, a PMEMoid inside the
        // pool, where pmemobj_zalloc stores the new object's oid atomically.
        let rc = unsafe { pmemobj_zalloc(pool.pop.as_ptr(), slot, (m * 8) as usize, 1) };
        if rc != 0 {
            return Err(pmdk_error(&what, rc));
        }
        // SAFETY: `slot` holds the oid just allocated, of this open pool.
        let arr = unsafe { pmemobj_direct(*slot) }.cast::<u64>();
        match NonNull::new(arr) {
            Some(a) if a.as_ptr().is_aligned() => pool.arr = a,
            _ => return Err(pmdk_error(&what, 0)),
        }
        pool.len = m;
        Ok(pool)
    }

    /// One transaction: for each index `i` of `idx`, snapshot `arr[i]` into
    /// the undo log (`pmemobj_tx_add_range_direct`), then store `t` there;
    /// commit. Durable and atomic when it returns `Ok`.
    pub fn update_tx(&mut self, idx: &[u64], t: u64) -> io::Result<()> {
        // SAFETY: `pop` is open; NULL env: errors return, never longjmp.
        let rc =
            unsafe { pmemobj_tx_begin(self.pop.as_ptr(), std::ptr::null_mut(), TX_PARAM_NONE) };
        if rc != 0 {
            let err = pmdk_error("PMDK transaction begin", rc);
            // SAFETY: tx_end must follow every tx_begin, even a failed one
            // (stage ONABORT, not WORK).
            unsafe { pmemobj_tx_end() };
            return Err(err);
        }
        for &i in idx {
            if i >= self.len {
                // SAFETY: stage WORK (every earlier step succeeded); abort
                // then end, as the API requires.
                unsafe {
                    pmemobj_tx_abort(EINVAL);
                    pmemobj_tx_end();
                }
                return Err(io::Error::other(format!(
                    "PMDK transaction: index {i} outside the array of {}",
                    self.len
                )));
            }
            // SAFETY: i < len, so `p` is inside the array we allocated.
            let p = unsafe { self.arr.as_ptr().add(i as usize) };
            // SAFETY: stage WORK; `p..p+8` lies inside this pool.
            let rc = unsafe { pmemobj_tx_add_range_direct(p.cast(), 8) };
            if rc != 0 {
                let err = pmdk_error("PMDK pmemobj_tx_add_range_direct", rc);
                // SAFETY: under the default failure behavior the stage is
                // ONABORT now; were it still WORK, abort first, since tx_end
                // must not be called during WORK.
                unsafe {
                    if pmemobj_tx_stage() == TX_STAGE_WORK {
                        pmemobj_tx_abort(rc);
                    }
                    pmemobj_tx_end();
                }
                return Err(err);
            }
            // SAFETY: `p` is inside the array, 8-aligned (checked at
            // create), and no Rust reference to the array exists.
            unsafe { p.write(t) };
        }
        // SAFETY: stage WORK. A failed commit moves to ONABORT (NULL env:
        // no longjmp) and tx_end reports its error code.
        let rc = unsafe {
            pmemobj_tx_commit();
            pmemobj_tx_end()
        };
        if rc != 0 {
            return Err(pmdk_error("PMDK transaction commit", rc));
        }
        Ok(())
    }
}

impl PmdkArray {
    /// Element `i`, or `None` past the end.
    pub fn get(&self, i: u64) -> Option<u64> {
        // SAFETY: i < len, so the read is inside the array; no transaction
        // of ours is open (`update_tx` ends each before returning).
        (i < self.len).then(|| unsafe { self.arr.as_ptr().add(i as usize).read() })
    }
}

impl Drop for PmdkArray {
    fn drop(&mut self) {
        // SAFETY: `pop` is open and closed only here; `arr` is not used after.
        unsafe { pmemobj_close(self.pop.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transactions_store_and_a_bad_index_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.pool");
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
    fn a_pool_that_cannot_be_created_is_an_error_with_libpmemobj_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no-such-dir").join("t.pool");
        let err = PmdkArray::create(&path, 1024, 16 << 20).err().unwrap();
        assert!(err.to_string().contains("libpmemobj: "), "{err}");
    }
}
