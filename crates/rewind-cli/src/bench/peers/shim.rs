//! Berkeley DB (libdb, `bdb.c`: a transactional B-tree, synchronous
//! commit) and LMDB (liblmdb, `lmdb.c`: a copy-on-write B+-tree, each write
//! transaction synced at commit) behind one safe wrapper: the two C shims
//! export the same calls, so one [`Shim`] drives either through a table of
//! its functions.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::NonNull;

#[repr(C)]
pub struct Raw {
    _private: [u8; 0],
}

/// Declares one shim's C functions (named as given, each with the same
/// signature in both shims) and the [`Api`] table `$api` of them.
macro_rules! shim_api {
    ($api:ident, $name:literal, $strerror:ident, $open:ident, $close:ident, $put:ident,
     $get:ident, $del:ident, $begin:ident, $commit:ident, $abort:ident) => {
        extern "C" {
            fn $strerror(err: c_int) -> *const c_char;
            fn $open(dir: *const c_char, size: u64, out: *mut *mut Raw) -> c_int;
            fn $close(b: *mut Raw) -> c_int;
            fn $put(
                b: *mut Raw,
                key: *const c_void,
                klen: u32,
                val: *const c_void,
                len: u32,
                inserted: *mut c_int,
            ) -> c_int;
            fn $get(
                b: *mut Raw,
                key: *const c_void,
                klen: u32,
                val: *mut c_void,
                len: u32,
                found: *mut c_int,
            ) -> c_int;
            fn $del(b: *mut Raw, key: *const c_void, klen: u32, found: *mut c_int) -> c_int;
            fn $begin(b: *mut Raw) -> c_int;
            fn $commit(b: *mut Raw) -> c_int;
            fn $abort(b: *mut Raw) -> c_int;
        }

        static $api: Api = Api {
            name: $name,
            strerror: $strerror,
            open: $open,
            close: $close,
            put: $put,
            get: $get,
            del: $del,
            begin: $begin,
            commit: $commit,
            abort: $abort,
        };
    };
}

/// One shim's functions.
struct Api {
    name: &'static str,
    strerror: unsafe extern "C" fn(c_int) -> *const c_char,
    open: unsafe extern "C" fn(*const c_char, u64, *mut *mut Raw) -> c_int,
    close: Call,
    put:
        unsafe extern "C" fn(*mut Raw, *const c_void, u32, *const c_void, u32, *mut c_int) -> c_int,
    get: unsafe extern "C" fn(*mut Raw, *const c_void, u32, *mut c_void, u32, *mut c_int) -> c_int,
    del: unsafe extern "C" fn(*mut Raw, *const c_void, u32, *mut c_int) -> c_int,
    begin: Call,
    commit: Call,
    abort: Call,
}

type Call = unsafe extern "C" fn(*mut Raw) -> c_int;

shim_api!(
    BDB,
    "Berkeley DB",
    bdb_strerror,
    bdb_open,
    bdb_close,
    bdb_put,
    bdb_get,
    bdb_del,
    bdb_begin,
    bdb_commit,
    bdb_abort
);
shim_api!(
    LMDB,
    "LMDB",
    lm_strerror,
    lm_open,
    lm_close,
    lm_put,
    lm_get,
    lm_del,
    lm_begin,
    lm_commit,
    lm_abort
);

extern "C" {
    fn bdb_recover(dir: *const c_char, cache: u64) -> c_int;
}

fn c_path(dir: &Path) -> io::Result<CString> {
    CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| io::Error::other(format!("{}: {e}", dir.display())))
}

/// Opens (creating) an environment in an existing directory, at a size:
/// [`Shim::bdb`] or [`Shim::lmdb`].
pub type Open = fn(&Path, u64) -> io::Result<Shim>;

/// An open environment and its tree.
pub struct Shim {
    raw: NonNull<Raw>,
    api: &'static Api,
}

impl Shim {
    /// Opens (creating) a Berkeley DB environment in the existing directory
    /// `dir`, with a cache of `cache` bytes.
    pub fn bdb(dir: &Path, cache: u64) -> io::Result<Shim> {
        Shim::open(&BDB, dir, cache)
    }

    /// Opens (creating) an LMDB environment in the existing directory
    /// `dir`, its map `mapsize` bytes.
    pub fn lmdb(dir: &Path, mapsize: u64) -> io::Result<Shim> {
        Shim::open(&LMDB, dir, mapsize)
    }

    /// Runs Berkeley DB's normal recovery on the environment in `dir` (not open).
    pub fn bdb_recover(dir: &Path, cache: u64) -> io::Result<()> {
        let cdir = c_path(dir)?;
        // SAFETY: `cdir` is NUL-terminated and outlives the call.
        check(&BDB, "recover", unsafe {
            bdb_recover(cdir.as_ptr(), cache)
        })
    }

    fn open(api: &'static Api, dir: &Path, size: u64) -> io::Result<Shim> {
        let cdir = c_path(dir)?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: `cdir` is NUL-terminated and outlives the call; `raw` is
        // written only on success.
        check(api, "open", unsafe {
            (api.open)(cdir.as_ptr(), size, &mut raw)
        })?;
        let raw = NonNull::new(raw).ok_or_else(|| io::Error::other("open: null handle"))?;
        Ok(Shim { raw, api })
    }

    /// Inserts `val` under the u64 `key` (its 8 big-endian bytes, so
    /// the tree's byte order is numeric order) unless `key` is present
    /// (its own transaction outside a batch); whether it inserted.
    pub fn put(&mut self, key: u64, val: &[u8]) -> io::Result<bool> {
        self.put_bytes(&key.to_be_bytes(), val)
    }

    /// Reads the u64 `key`'s value into `out`; whether it was there.
    pub fn get(&mut self, key: u64, out: &mut [u8]) -> io::Result<bool> {
        self.get_bytes(&key.to_be_bytes(), out)
    }

    /// Deletes the u64 `key`; whether it was there.
    pub fn del(&mut self, key: u64) -> io::Result<bool> {
        self.del_bytes(&key.to_be_bytes())
    }

    /// [`put`](Self::put) with a byte-string key, ordered by its bytes.
    pub fn put_bytes(&mut self, key: &[u8], val: &[u8]) -> io::Result<bool> {
        let (kl, len) = (len32(key)?, len32(val)?);
        let (mut inserted, raw) = (0, self.raw.as_ptr());
        let (k, v) = (key.as_ptr().cast(), val.as_ptr().cast());
        // SAFETY: the handle is open; `key` and `val` are valid for their
        // lengths.
        let rc = unsafe { (self.api.put)(raw, k, kl, v, len, &mut inserted) };
        check(self.api, "put", rc).map(|()| inserted != 0)
    }

    /// [`get`](Self::get) with a byte-string key.
    pub fn get_bytes(&mut self, key: &[u8], out: &mut [u8]) -> io::Result<bool> {
        let (kl, len) = (len32(key)?, len32(out)?);
        let (mut found, raw) = (0, self.raw.as_ptr());
        let (k, o) = (key.as_ptr().cast(), out.as_mut_ptr().cast());
        // SAFETY: the handle is open; `key` is valid and `out` writable for
        // their lengths.
        let rc = unsafe { (self.api.get)(raw, k, kl, o, len, &mut found) };
        check(self.api, "get", rc).map(|()| found != 0)
    }

    /// [`del`](Self::del) with a byte-string key.
    pub fn del_bytes(&mut self, key: &[u8]) -> io::Result<bool> {
        let (kl, mut found) = (len32(key)?, 0);
        // SAFETY: the handle is open; `key` is valid for its length.
        let rc = unsafe { (self.api.del)(self.raw.as_ptr(), key.as_ptr().cast(), kl, &mut found) };
        check(self.api, "del", rc).map(|()| found != 0)
    }

    /// Opens a batch: one transaction for the operations until commit or abort.
    pub fn begin(&mut self) -> io::Result<()> {
        self.call("begin", self.api.begin)
    }

    /// Commits the batch (durable when it returns).
    pub fn commit(&mut self) -> io::Result<()> {
        self.call("commit", self.api.commit)
    }

    /// Aborts the batch: its changes are rolled back.
    pub fn abort(&mut self) -> io::Result<()> {
        self.call("abort", self.api.abort)
    }

    fn call(&mut self, action: &str, f: Call) -> io::Result<()> {
        // SAFETY: the handle is open; `f` is one of its shim's calls.
        check(self.api, action, unsafe { f(self.raw.as_ptr()) })
    }
}

/// A key's or value's length as the shims take it.
fn len32(b: &[u8]) -> io::Result<u32> {
    u32::try_from(b.len()).map_err(|_| io::Error::other(format!("{} bytes: too long", b.len())))
}

fn check(api: &Api, action: &str, rc: c_int) -> io::Result<()> {
    if rc == 0 {
        return Ok(());
    }
    // SAFETY: both libraries' strerror return a static NUL-terminated
    // string for any code.
    let msg = unsafe { CStr::from_ptr((api.strerror)(rc)) }.to_string_lossy();
    Err(io::Error::other(format!(
        "{} {action}: {msg} (error {rc})",
        api.name
    )))
}

impl Drop for Shim {
    fn drop(&mut self) {
        // SAFETY: the handle is open and closed only here.
        unsafe { (self.api.close)(self.raw.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_get_del_and_abort_in_both() {
        for open in [Shim::bdb, Shim::lmdb] {
            let dir = tempfile::tempdir().unwrap();
            let mut b = open(dir.path(), 8 << 20).unwrap();
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
            // Byte-string keys: a 32-byte one and its 8-byte prefix are two.
            let long = [b'k'; 32];
            assert!(b.put_bytes(&long, &[1; 24]).unwrap());
            assert!(b.put_bytes(&long[..8], &[2; 24]).unwrap());
            assert!(b.get_bytes(&long, &mut v).unwrap());
            assert_eq!(v, [1; 24]);
            assert!(b.del_bytes(&long).unwrap());
            assert!(!b.get_bytes(&long, &mut v).unwrap());
            assert!(b.get_bytes(&long[..8], &mut v).unwrap());
        }
    }

    /// A handle per thread on one directory (as `bench group-commit`
    /// opens them), closed while the others go on, then one reopened:
    /// each thread's writes are there, and nothing crashes (LMDB's handles
    /// share the process's one environment).
    #[test]
    fn handles_per_thread_on_one_environment() {
        for open in [Shim::bdb, Shim::lmdb] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path();
            open(path, 8 << 20).unwrap().put(0, &[0; 8]).unwrap();
            for round in 0..3u64 {
                std::thread::scope(|s| {
                    for t in 1..=4u64 {
                        s.spawn(move || {
                            let mut h = open(path, 8 << 20).unwrap();
                            // Thread t closes its handle after t * 10 writes.
                            for i in 0..t * 10 {
                                let v = (round << 32 | t << 16 | i).to_le_bytes();
                                h.begin().unwrap();
                                h.del(t).unwrap();
                                assert!(h.put(t, &v).unwrap());
                                h.commit().unwrap();
                            }
                        });
                    }
                });
                let mut h = open(path, 8 << 20).unwrap();
                for t in 1..=4u64 {
                    let mut v = [0u8; 8];
                    assert!(h.get(t, &mut v).unwrap());
                    assert_eq!(u64::from_le_bytes(v), round << 32 | t << 16 | (t * 10 - 1));
                }
            }
        }
    }
}
