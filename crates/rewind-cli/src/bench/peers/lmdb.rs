//! LMDB (liblmdb, `lmdb.c`): a copy-on-write B+-tree, each write
//! transaction synced at commit. Safe wrapper over the C shim's functions.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::NonNull;

#[repr(C)]
struct Raw {
    _private: [u8; 0],
}

extern "C" {
    fn lm_strerror(err: c_int) -> *const c_char;
    fn lm_open(dir: *const c_char, mapsize: u64, out: *mut *mut Raw) -> c_int;
    fn lm_close(b: *mut Raw);
    fn lm_put(b: *mut Raw, key: u64, val: *const c_void, len: u32, inserted: *mut c_int) -> c_int;
    fn lm_get(b: *mut Raw, key: u64, val: *mut c_void, len: u32, found: *mut c_int) -> c_int;
    fn lm_del(b: *mut Raw, key: u64, found: *mut c_int) -> c_int;
    fn lm_begin(b: *mut Raw) -> c_int;
    fn lm_commit(b: *mut Raw) -> c_int;
    fn lm_abort(b: *mut Raw) -> c_int;
}

fn check(action: &str, rc: c_int) -> io::Result<()> {
    if rc == 0 {
        return Ok(());
    }
    // SAFETY: mdb_strerror returns a static NUL-terminated string for any code.
    let msg = unsafe { CStr::from_ptr(lm_strerror(rc)) }.to_string_lossy();
    Err(io::Error::other(format!(
        "{action}: LMDB: {msg} (error {rc})"
    )))
}

fn c_path(dir: &Path) -> io::Result<CString> {
    CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| io::Error::other(format!("{}: {e}", dir.display())))
}

/// An open environment and its tree.
pub struct Lmdb {
    raw: NonNull<Raw>,
}

impl Lmdb {
    /// Opens (creating) the environment in the existing directory `dir`,
    /// its map `mapsize` bytes.
    pub fn open(dir: &Path, mapsize: u64) -> io::Result<Lmdb> {
        let cdir = c_path(dir)?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: `cdir` is NUL-terminated and outlives the call; `raw` is
        // written only on success.
        check("opening LMDB", unsafe {
            lm_open(cdir.as_ptr(), mapsize, &mut raw)
        })?;
        let raw = NonNull::new(raw).ok_or_else(|| io::Error::other("lm_open: null handle"))?;
        Ok(Lmdb { raw })
    }

    /// Inserts `val` under `key` unless `key` is present (its own
    /// transaction outside a batch); whether it inserted.
    pub fn put(&mut self, key: u64, val: &[u8]) -> io::Result<bool> {
        let mut inserted = 0;
        // SAFETY: the handle is open; `val` is valid for its length.
        check("LMDB put", unsafe {
            lm_put(
                self.raw.as_ptr(),
                key,
                val.as_ptr().cast(),
                val.len() as u32,
                &mut inserted,
            )
        })?;
        Ok(inserted != 0)
    }

    /// Reads `key`'s value into `out`; whether it was there.
    pub fn get(&mut self, key: u64, out: &mut [u8]) -> io::Result<bool> {
        let mut found = 0;
        // SAFETY: the handle is open; `out` is writable for its length.
        check("LMDB get", unsafe {
            lm_get(
                self.raw.as_ptr(),
                key,
                out.as_mut_ptr().cast(),
                out.len() as u32,
                &mut found,
            )
        })?;
        Ok(found != 0)
    }

    /// Deletes `key`; whether it was there.
    pub fn del(&mut self, key: u64) -> io::Result<bool> {
        let mut found = 0;
        // SAFETY: the handle is open.
        check("LMDB del", unsafe {
            lm_del(self.raw.as_ptr(), key, &mut found)
        })?;
        Ok(found != 0)
    }

    /// Opens a batch: one transaction for the operations until commit or abort.
    pub fn begin(&mut self) -> io::Result<()> {
        // SAFETY: the handle is open.
        check("LMDB txn_begin", unsafe { lm_begin(self.raw.as_ptr()) })
    }

    /// Commits the batch (durable when it returns).
    pub fn commit(&mut self) -> io::Result<()> {
        // SAFETY: the handle is open.
        check("LMDB commit", unsafe { lm_commit(self.raw.as_ptr()) })
    }

    /// Aborts the batch: its changes are rolled back.
    pub fn abort(&mut self) -> io::Result<()> {
        // SAFETY: the handle is open.
        check("LMDB abort", unsafe { lm_abort(self.raw.as_ptr()) })
    }
}

impl Drop for Lmdb {
    fn drop(&mut self) {
        // SAFETY: the handle is open and closed only here.
        unsafe { lm_close(self.raw.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_get_del_and_abort() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = Lmdb::open(dir.path(), 8 << 20).unwrap();
        assert!(b.put(5, &[7; 24]).unwrap());
        assert!(!b.put(5, &[8; 24]).unwrap());
        let mut v = [0u8; 24];
        assert!(b.get(5, &mut v).unwrap());
        assert_eq!(v, [7; 24]);
        b.begin().unwrap();
        assert!(b.del(5).unwrap());
        b.abort().unwrap();
        assert!(b.get(5, &mut v).unwrap());
        assert!(b.del(5).unwrap());
        assert!(!b.get(5, &mut v).unwrap());
        assert!(!b.del(5).unwrap());
    }
}
