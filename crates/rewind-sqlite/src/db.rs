//! The database file: the default VFS's file, with the wal-index in process
//! memory.
//!
//! The default VFS (`unix`) keeps the wal-index in a `-shm` file mapped by
//! every process and takes `fcntl` locks on it: four system calls per
//! write transaction, a quarter of a one-row insert's time on tmpfs. A WAL
//! in a pool has one opener, the process holding the pool's file lock, so
//! no other process ever reads this wal-index: it lives on the heap, shared
//! by the connections of this process through a registry by database path,
//! and its locks are a table behind a mutex (the semantics of
//! `unixShmLock`: shared locks counted, exclusive ones alone). It starts
//! zeroed in each process, and SQLite rebuilds it from the WAL file, as it
//! does from a `-shm` file whose header does not check.
//!
//! Every other method is the default VFS's: the database file is opened by
//! its `xOpen`, then its methods table is swapped for [`DB_METHODS`], which
//! calls the original one kept beside the file ([`Extra`]).
//!
//! Unsafe code: SQLite calls these functions through C pointers; each block
//! has its `SAFETY` line.

#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;
use rusqlite::ffi;

/// Where [`Extra`] sits in a database file's structure: after the default
/// VFS's own (at most this many bytes, checked by `register`).
pub const EXTRA_OFF: usize = 512;

/// Bytes a database file's structure takes.
pub const FILE_SIZE: usize = EXTRA_OFF + std::mem::size_of::<Extra>();

/// What this module keeps beside the default VFS's file.
#[repr(C)]
struct Extra {
    /// The default VFS's methods for the file.
    orig: *const ffi::sqlite3_io_methods,
    /// The database's key in [`NODES`].
    key: *mut PathBuf,
    /// The connection's wal-index, once mapped.
    shm: *mut Conn,
    /// The file's identity, counted by `db_sync::hold` (`None` when it
    /// could not be found, and so was not counted).
    id: Option<crate::db_sync::FileId>,
}

/// One database's wal-index in this process.
#[derive(Default)]
struct Node {
    inner: Mutex<NodeInner>,
}

#[derive(Default)]
struct NodeInner {
    /// Regions of 32 KiB (as u64s: 8-byte aligned); a box never moves.
    regions: Vec<Box<[u64]>>,
    /// Per lock: readers holding it shared, or -1 for a writer.
    locks: [i32; ffi::SQLITE_SHM_NLOCK as usize],
    /// Connections attached.
    conns: usize,
}

/// A connection's hold on a [`Node`].
struct Conn {
    node: Arc<Node>,
    shared: u32,
    excl: u32,
}

/// Wal-indexes by database path.
static NODES: crate::vfs::Registry<HashMap<PathBuf, Arc<Node>>> = crate::vfs::Registry::new();

/// Lets go of every wal-index without freeing it: in a child forked
/// while they were in use, they are its parent's (`vfs::after_fork`).
pub(crate) fn forget_all() {
    NODES.renew();
}

/// Takes a file the default VFS has just opened (its methods set) as a
/// database file of this VFS.
///
/// # Safety
/// `file` points to at least [`FILE_SIZE`] bytes, of which the default VFS
/// has filled its own (at most [`EXTRA_OFF`]) and set `pMethods`.
pub unsafe fn adopt(file: *mut ffi::sqlite3_file, key: PathBuf) {
    let id = crate::db_sync::id_of(&key).ok();
    if let Some(id) = id {
        crate::db_sync::hold(id);
    }
    // SAFETY: the caller's promise: the extra bytes are ours.
    unsafe {
        let e = extra(file);
        (*e).orig = (*file).pMethods;
        (*e).key = Box::into_raw(Box::new(key));
        (*e).shm = std::ptr::null_mut();
        (*e).id = id;
        (*file).pMethods = &DB_METHODS;
    }
}

/// # Safety
/// `file` was adopted and not closed.
unsafe fn extra(file: *mut ffi::sqlite3_file) -> *mut Extra {
    // SAFETY: FILE_SIZE bytes; EXTRA_OFF is 8-byte aligned, as is the file.
    unsafe { (file as *mut u8).add(EXTRA_OFF) as *mut Extra }
}

/// The default VFS's methods of an adopted file.
///
/// # Safety
/// As [`extra`].
unsafe fn orig<'a>(file: *mut ffi::sqlite3_file) -> &'a ffi::sqlite3_io_methods {
    // SAFETY: set by adopt to the default VFS's static methods.
    unsafe { &*(*extra(file)).orig }
}

pub static DB_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(d_close),
    xRead: Some(d_read),
    xWrite: Some(d_write),
    xTruncate: Some(d_truncate),
    xSync: Some(d_sync),
    xFileSize: Some(d_file_size),
    xLock: Some(d_lock),
    xUnlock: Some(d_unlock),
    xCheckReservedLock: Some(d_check_reserved),
    xFileControl: Some(d_file_control),
    xSectorSize: Some(d_sector_size),
    xDeviceCharacteristics: Some(d_device_characteristics),
    xShmMap: Some(d_shm_map),
    xShmLock: Some(d_shm_lock),
    xShmBarrier: Some(d_shm_barrier),
    xShmUnmap: Some(d_shm_unmap),
    xFetch: Some(d_fetch),
    xUnfetch: Some(d_unfetch),
};

unsafe extern "C" fn d_close(f: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: `f` is an adopted file; its wal-index is let go, then the
    // default VFS closes its part (which leaves our extra bytes alone).
    unsafe {
        detach(f);
        let e = extra(f);
        let m = orig(f);
        drop(Box::from_raw((*e).key));
        (*e).key = std::ptr::null_mut();
        let rc = (m.xClose.expect("xClose"))(f);
        // Only now, with this handle's locks released, may the sync
        // descriptor of its last handle be closed.
        if let Some(id) = (*e).id.take() {
            crate::db_sync::release(id);
        }
        rc
    }
}

unsafe extern "C" fn d_read(f: *mut ffi::sqlite3_file, b: *mut c_void, n: c_int, o: i64) -> c_int {
    // SAFETY: delegated to the default VFS's method of this file.
    unsafe { (orig(f).xRead.expect("xRead"))(f, b, n, o) }
}

unsafe extern "C" fn d_write(
    f: *mut ffi::sqlite3_file,
    b: *const c_void,
    n: c_int,
    o: i64,
) -> c_int {
    // SAFETY: delegated to the default VFS's method of this file.
    unsafe { (orig(f).xWrite.expect("xWrite"))(f, b, n, o) }
}

unsafe extern "C" fn d_truncate(f: *mut ffi::sqlite3_file, size: i64) -> c_int {
    // SAFETY: delegated to the default VFS's method of this file.
    unsafe { (orig(f).xTruncate.expect("xTruncate"))(f, size) }
}

unsafe extern "C" fn d_sync(f: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    // SAFETY: delegated to the default VFS's method of this file.
    unsafe { (orig(f).xSync.expect("xSync"))(f, flags) }
}

unsafe extern "C" fn d_file_size(f: *mut ffi::sqlite3_file, size: *mut i64) -> c_int {
    // SAFETY: delegated to the default VFS's method of this file.
    unsafe { (orig(f).xFileSize.expect("xFileSize"))(f, size) }
}

unsafe extern "C" fn d_lock(f: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    if level == ffi::SQLITE_LOCK_SHARED {
        // A transaction starts (rollback mode): an older failure is no
        // reason for it.
        crate::vfs::forget_error();
    }
    // SAFETY: delegated to the default VFS's method of this file.
    unsafe { (orig(f).xLock.expect("xLock"))(f, level) }
}

unsafe extern "C" fn d_unlock(f: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: delegated to the default VFS's method of this file.
    unsafe { (orig(f).xUnlock.expect("xUnlock"))(f, level) }
}

unsafe extern "C" fn d_check_reserved(f: *mut ffi::sqlite3_file, res: *mut c_int) -> c_int {
    // SAFETY: delegated to the default VFS's method of this file.
    unsafe { (orig(f).xCheckReservedLock.expect("xCheckReservedLock"))(f, res) }
}

unsafe extern "C" fn d_file_control(
    f: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: delegated to the default VFS's method of this file.
    unsafe { (orig(f).xFileControl.expect("xFileControl"))(f, op, arg) }
}

unsafe extern "C" fn d_sector_size(f: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: delegated to the default VFS's method of this file.
    unsafe { (orig(f).xSectorSize.expect("xSectorSize"))(f) }
}

unsafe extern "C" fn d_device_characteristics(f: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: delegated to the default VFS's method of this file.
    unsafe {
        (orig(f)
            .xDeviceCharacteristics
            .expect("xDeviceCharacteristics"))(f)
    }
}

unsafe extern "C" fn d_fetch(
    f: *mut ffi::sqlite3_file,
    o: i64,
    n: c_int,
    pp: *mut *mut c_void,
) -> c_int {
    // SAFETY: delegated to the default VFS's method of this file, when it
    // has one; else no mapping (SQLite then reads).
    unsafe {
        let m = orig(f);
        match (m.iVersion >= 3, m.xFetch) {
            (true, Some(x)) => x(f, o, n, pp),
            _ => {
                *pp = std::ptr::null_mut();
                ffi::SQLITE_OK
            }
        }
    }
}

unsafe extern "C" fn d_unfetch(f: *mut ffi::sqlite3_file, o: i64, p: *mut c_void) -> c_int {
    // SAFETY: as d_fetch.
    unsafe {
        let m = orig(f);
        match (m.iVersion >= 3, m.xUnfetch) {
            (true, Some(x)) => x(f, o, p),
            _ => ffi::SQLITE_OK,
        }
    }
}

/// The connection's hold on its wal-index, attached on first use.
///
/// # Safety
/// As [`extra`].
unsafe fn conn<'a>(f: *mut ffi::sqlite3_file) -> &'a mut Conn {
    // SAFETY: the extra bytes are ours; `shm` is null or a leaked Conn.
    unsafe {
        let e = extra(f);
        if (*e).shm.is_null() {
            // Attached under the registry's lock, so a detach never drops
            // a node another connection is joining.
            let mut nodes = NODES.lock();
            let node = nodes.entry((*(*e).key).clone()).or_default().clone();
            node.inner.lock().conns += 1;
            drop(nodes);
            (*e).shm = Box::into_raw(Box::new(Conn {
                node,
                shared: 0,
                excl: 0,
            }));
        }
        &mut *(*e).shm
    }
}

/// Lets go of the connection's locks and wal-index; the last connection of
/// the process frees it.
///
/// # Safety
/// As [`extra`].
unsafe fn detach(f: *mut ffi::sqlite3_file) {
    // SAFETY: the extra bytes are ours; `shm` is null or a leaked Conn,
    // taken back once here.
    let c = unsafe {
        let e = extra(f);
        let c = std::mem::replace(&mut (*e).shm, std::ptr::null_mut());
        if c.is_null() {
            return;
        }
        Box::from_raw(c)
    };
    let mut nodes = NODES.lock();
    let mut g = c.node.inner.lock();
    release(&mut g, &c, u32::MAX);
    g.conns -= 1;
    if g.conns == 0 {
        g.regions.clear();
        nodes.retain(|_, n| !Arc::ptr_eq(n, &c.node));
    }
}

/// Releases the locks of `mask` that `c` holds.
fn release(g: &mut NodeInner, c: &Conn, mask: u32) {
    for (i, l) in g.locks.iter_mut().enumerate() {
        let bit = 1u32 << i;
        if mask & bit == 0 {
            continue;
        }
        if c.shared & bit != 0 {
            *l -= 1;
        } else if c.excl & bit != 0 {
            *l = 0;
        }
    }
}

unsafe extern "C" fn d_shm_map(
    f: *mut ffi::sqlite3_file,
    region: c_int,
    size: c_int,
    extend: c_int,
    pp: *mut *mut c_void,
) -> c_int {
    // SAFETY: `f` is an adopted file.
    let c = unsafe { conn(f) };
    let (region, words) = (region.max(0) as usize, (size.max(0) as usize).div_ceil(8));
    let mut g = c.node.inner.lock();
    if g.regions.first().is_some_and(|r| r.len() != words) {
        return ffi::SQLITE_IOERR_SHMSIZE;
    }
    while g.regions.len() <= region {
        if extend == 0 {
            // SAFETY: SQLite passes a pointer to its result.
            unsafe { *pp = std::ptr::null_mut() };
            return ffi::SQLITE_OK;
        }
        g.regions.push(vec![0u64; words].into_boxed_slice());
    }
    // SAFETY: as above; the region's box lives until the last connection
    // detaches, and SQLite uses it only while this one is attached.
    unsafe { *pp = g.regions[region].as_mut_ptr() as *mut c_void };
    ffi::SQLITE_OK
}

unsafe extern "C" fn d_shm_lock(
    f: *mut ffi::sqlite3_file,
    ofst: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: `f` is an adopted file.
    let c = unsafe { conn(f) };
    let nlock = ffi::SQLITE_SHM_NLOCK;
    if ofst < 0 || n < 1 || ofst + n > nlock {
        return ffi::SQLITE_IOERR_SHMLOCK;
    }
    let mask = ((1u32 << n) - 1) << ofst;
    let node = c.node.clone();
    let mut g = node.inner.lock();
    if flags & ffi::SQLITE_SHM_UNLOCK != 0 {
        release(&mut g, c, mask);
        c.shared &= !mask;
        c.excl &= !mask;
        return ffi::SQLITE_OK;
    }
    if flags & ffi::SQLITE_SHM_SHARED != 0 {
        // A transaction starts (a read mark, in WAL mode): an older
        // failure is no reason for it.
        crate::vfs::forget_error();
        // SQLite takes shared locks one at a time.
        if c.shared & mask == mask {
            return ffi::SQLITE_OK;
        }
        let i = ofst as usize;
        if g.locks[i] < 0 {
            return ffi::SQLITE_BUSY;
        }
        g.locks[i] += 1;
        c.shared |= mask;
        return ffi::SQLITE_OK;
    }
    // Exclusive: none of the range held by anyone else.
    if c.excl & mask == mask {
        return ffi::SQLITE_OK;
    }
    for i in ofst..ofst + n {
        let bit = 1u32 << i;
        let l = g.locks[i as usize];
        let mine = c.excl & bit != 0 || (c.shared & bit != 0 && l == 1);
        if l != 0 && !mine {
            return ffi::SQLITE_BUSY;
        }
    }
    for i in ofst..ofst + n {
        g.locks[i as usize] = -1;
    }
    c.shared &= !mask;
    c.excl |= mask;
    ffi::SQLITE_OK
}

unsafe extern "C" fn d_shm_barrier(_f: *mut ffi::sqlite3_file) {
    // Connections of one process: a full fence orders the wal-index.
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

unsafe extern "C" fn d_shm_unmap(f: *mut ffi::sqlite3_file, _delete: c_int) -> c_int {
    // SAFETY: `f` is an adopted file.
    unsafe { detach(f) };
    ffi::SQLITE_OK
}
