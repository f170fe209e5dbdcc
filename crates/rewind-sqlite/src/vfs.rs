//! The SQLite VFS: every file goes to the default VFS (`unix`) except
//! the WAL, which goes to [`WalFile`] in a pool beside the database.
//!
//! The main database file, its journals, temporary files, the `-shm`
//! wal-index and every lock are the default VFS's own: this VFS opens them
//! with the default VFS's `xOpen` into its own file structure, so SQLite
//! calls the default VFS's methods on them directly. Only a file opened
//! with `SQLITE_OPEN_WAL` gets this module's methods.
//!
//! This is the only module with unsafe code: SQLite calls these functions
//! through C pointers.

#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use rewind::{OpenOptions, Pool};
use rusqlite::ffi;

use crate::error::Error;
use crate::log::WalLog;
use crate::wal::{Stats, WalFile};
use crate::Config;

/// The pool's layout name.
pub const LAYOUT: &str = "rewind-sqlite-wal";

/// The pool file of the WAL file `wal`: `<db>-wal.rewind`, or, where that
/// name would pass the 255 bytes a file name may have (a database name of
/// 245 bytes or more, whose WAL name stock SQLite can still make), the
/// WAL's name cut to 180 bytes, `~`, 64 bits of hash of its whole name
/// in hex, and `.rewind`. Before, such a database's pool could not be created:
/// `PRAGMA journal_mode = WAL` said `wal`, and every later statement
/// failed with `SQLITE_CANTOPEN` ("File name too long").
pub fn pool_path(wal: &Path) -> PathBuf {
    /// The longest file name most file systems allow.
    const NAME_MAX: usize = 255;
    /// The bytes of a long WAL name kept (room left for the engine's
    /// temporary name beside it, on a file system without `O_TMPFILE`).
    const KEEP: usize = 180;
    let mut p = wal.as_os_str().to_owned();
    p.push(".rewind");
    let p = PathBuf::from(p);
    match wal.file_name().map(OsStr::as_bytes) {
        Some(name) if name.len() + ".rewind".len() > NAME_MAX => {
            // 64 bits of hash (two CRC-32s, the second seeded): names
            // that share their first 180 bytes do not share a pool.
            let mut second = crc32fast::Hasher::new_with_initial(0x5157_4c21);
            second.update(name);
            let hash = (u64::from(crc32fast::hash(name)) << 32) | u64::from(second.finalize());
            let mut short = name[..KEEP].to_vec();
            short.extend_from_slice(format!("~{hash:016x}.rewind").as_bytes());
            wal.with_file_name(OsStr::from_bytes(&short))
        }
        _ => p,
    }
}

/// One database's open WAL, shared by its connections in this process
/// (`None` while it is being opened, or once an open failed or the last
/// handle closed it).
struct Shared<T = WalFile> {
    file: Mutex<Option<T>>,
}

struct Entry<T = WalFile> {
    shared: Arc<Shared<T>>,
    handles: usize,
}

/// Open WALs by database path (canonical where it can be).
static OPEN: Registry<HashMap<PathBuf, Entry>> = Registry::new();

/// A handle on the WAL of `key` in `map`: the one open, or one `open`
/// makes. The registry's lock is held only to find or insert the entry,
/// never while a WAL is read from its pool (a recovery): a connection
/// opening one database's WAL does not stall every other database's
/// connections (their commits' WAL hook, their opens and closes take
/// that lock). Before, it was held throughout the open, and the recovery
/// of a 120 MB WAL held up an unrelated database's commit for 256 ms. A
/// handle asked for while another thread opens the same WAL waits for
/// that open: on success it shares the WAL; on failure (which removed the
/// entry, and this handle's count with it) it tries again, opening it
/// itself.
fn join_or_open<T, E>(
    map: &Mutex<HashMap<PathBuf, Entry<T>>>,
    key: &Path,
    open: impl FnOnce() -> Result<T, E>,
) -> Result<Arc<Shared<T>>, E> {
    let mut open = Some(open);
    loop {
        let mut reg = map.lock();
        if let Some(e) = reg.get_mut(key) {
            e.handles += 1;
            let shared = e.shared.clone();
            drop(reg);
            if shared.file.lock().is_some() {
                return Ok(shared);
            }
            continue;
        }
        let shared = Arc::new(Shared {
            file: Mutex::new(None),
        });
        // Held until the open's outcome is known: a handle joining
        // meanwhile waits on it, not on the registry.
        let mut file = shared.file.lock();
        reg.insert(
            key.to_path_buf(),
            Entry {
                shared: shared.clone(),
                handles: 1,
            },
        );
        drop(reg);
        let opened = (open.take().expect("opened once"))();
        match opened {
            Ok(f) => {
                *file = Some(f);
                drop(file);
                return Ok(shared);
            }
            Err(e) => {
                // Nothing holds the registry while it waits for this
                // entry's file (only the last handle's close locks a file
                // under it, and every handle of this entry is waiting
                // here), so the order is safe.
                let mut reg = map.lock();
                if reg
                    .get(key)
                    .is_some_and(|x| Arc::ptr_eq(&x.shared, &shared))
                {
                    reg.remove(key);
                }
                drop(reg);
                drop(file);
                return Err(e);
            }
        }
    }
}

/// The process whose WALs, wal-indexes and database descriptors the
/// registries hold (0 before the first open).
static OWNER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// A process-wide registry behind a mutex that a forked child can
/// replace with an empty one ([`Registry::renew`]) without touching the
/// old one: in the child, the old one's lock may be held for ever (by a
/// thread of the parent, which the child does not have), and what it
/// holds is the parent's (leaked: never closed nor freed in the child).
pub(crate) struct Registry<T> {
    cur: std::sync::atomic::AtomicPtr<Mutex<T>>,
}

impl<T: Default + Send> Registry<T> {
    /// An empty registry (made at first use).
    pub(crate) const fn new() -> Self {
        Registry {
            cur: std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The registry's mutex now.
    pub(crate) fn get(&self) -> &'static Mutex<T> {
        use std::sync::atomic::Ordering;
        let p = self.cur.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: a pointer stored here is a leaked box, never freed.
            return unsafe { &*p };
        }
        let fresh = Box::into_raw(Box::new(Mutex::new(T::default())));
        match self.cur.compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // SAFETY: leaked from here on.
            Ok(_) => unsafe { &*fresh },
            Err(p) => {
                // SAFETY: `fresh` was never shared; `p` is leaked, as above.
                unsafe {
                    drop(Box::from_raw(fresh));
                    &*p
                }
            }
        }
    }

    /// Locks the registry.
    pub(crate) fn lock(&self) -> parking_lot::MutexGuard<'static, T> {
        self.get().lock()
    }

    /// Starts an empty registry in place of this one, which is leaked
    /// (its contents never dropped, its lock never taken again): only in
    /// a forked child, before any other thread of it could use the
    /// registry.
    pub(crate) fn renew(&self) {
        self.cur
            .store(std::ptr::null_mut(), std::sync::atomic::Ordering::Release);
    }
}

/// The identities of the pool files of the WALs this process has open
/// (one entry per open WAL), for [`fork_child`].
static POOL_IDS: Registry<Vec<crate::db_sync::FileId>> = Registry::new();

/// In a child forked while its parent had databases open through the VFS
/// (a server forking workers, Python's `multiprocessing`), called before
/// the child's first use of the VFS: the registries are the parent's.
/// Their WALs share the parent's pool mapping, so a connection the child
/// opened joined the parent's open WAL (its copy of the parent's state)
/// and wrote frames into the pool the parent was writing: 50 inserts the
/// child acknowledged, then 50 of the parent, left 51 rows of 101 (stock
/// SQLite kept all 101). Now the child lets go of them without closing
/// or freeing anything of the parent's (leaked, unused) and starts with
/// empty registries: its connections open the WAL as another process's
/// would (`SQLITE_BUSY` while the parent has it open, as the docs say of
/// two processes). The parent's connections must not be used in the
/// child, as SQLite says.
///
/// The registries are replaced, never emptied in place: a registry that
/// another thread of the parent held locked at the fork stayed so in the
/// child (`try_lock` found it taken and left it), and the child's first
/// open of any database waited on it for ever (2 of 8 children forked
/// beside a thread calling [`stats`] hung). [`fork_child`] does this in
/// every forked child as it starts; here, at the child's first use of
/// the VFS, for a child that handler did not run in.
pub(crate) fn after_fork() {
    use std::sync::atomic::Ordering;
    let pid = std::process::id();
    let owner = OWNER.load(Ordering::Acquire);
    if owner == pid
        || OWNER
            .compare_exchange(owner, pid, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        || owner == 0
    {
        return;
    }
    renew_all();
}

/// The registries [`after_fork`] replaces.
fn renew_all() {
    OPEN.renew();
    DIRS.renew();
    crate::db::forget_all();
    crate::db_sync::forget_all();
}

/// Installs [`fork_prepare`], [`fork_parent`] and [`fork_child`] for every
/// fork of the process (once).
fn hook_fork() {
    static HOOKED: std::sync::Once = std::sync::Once::new();
    extern "C" {
        fn pthread_atfork(
            prepare: Option<unsafe extern "C" fn()>,
            parent: Option<unsafe extern "C" fn()>,
            child: Option<unsafe extern "C" fn()>,
        ) -> c_int;
    }
    HOOKED.call_once(|| {
        // SAFETY: the three handlers live as long as the process.
        // (Should it fail, for want of memory, a child still renews its
        // registries at its first use of the VFS.)
        let _ = unsafe { pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child)) };
    });
}

/// Before a fork: [`OURS`] and [`POOL_IDS`] locked (in that order), so
/// the child finds them whole.
unsafe extern "C" fn fork_prepare() {
    std::mem::forget(OURS.lock());
    std::mem::forget(POOL_IDS.lock());
}

/// After a fork, in the parent: [`OURS`] and [`POOL_IDS`] unlocked.
unsafe extern "C" fn fork_parent() {
    // SAFETY: `fork_prepare` locked them on this thread and forgot the
    // guards.
    unsafe {
        POOL_IDS.get().force_unlock();
        OURS.get().force_unlock();
    }
}

/// After a fork, in the child (its only thread): fresh registries
/// ([`after_fork`]), and the child's copies of the descriptors of its
/// parent's open WAL pools closed. Each pool is locked with `flock`,
/// which belongs to the open file, shared by the copy a fork makes: a
/// parent that crashed with a WAL open left its pool locked by its
/// children for as long as they lived, and every open of the database
/// (theirs too) was `SQLITE_BUSY` ("in use by another opener") until the
/// last of them ended. Closing the child's copy leaves the parent's lock
/// as it is (`flock` is released by the last descriptor's close); the
/// parent's pool objects in the child are leaked, never used.
unsafe extern "C" fn fork_child() {
    // SAFETY: `fork_prepare` locked it and this is the only thread: read
    // as the parent left it, then left locked for ever (renewed).
    let (ours, ids) = unsafe {
        (
            (*OURS.get().data_ptr()).clone(),
            (*POOL_IDS.get().data_ptr()).clone(),
        )
    };
    OURS.renew();
    *OURS.lock() = ours;
    POOL_IDS.renew();
    // Whatever the registries hold (some, or a lock, even before this
    // process's first open: `stats` takes them too).
    renew_all();
    OWNER.store(std::process::id(), std::sync::atomic::Ordering::Release);
    if ids.is_empty() {
        return;
    }
    // The mappings of those pools too: a mapping holds the open file (and
    // its lock) as a descriptor does.
    let parents = |dev: u64, ino: u64| ids.contains(&(dev, ino));
    if let Ok(maps) = std::fs::read_to_string("/proc/self/maps") {
        for (start, end) in pool_mappings(&maps, parents) {
            // SAFETY: a mapping of a parent's pool, which nothing in the
            // child uses (its pool objects are leaked).
            unsafe { libc::munmap(start as *mut c_void, end - start) };
        }
    }
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<c_int> = fds
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    for fd in fds {
        // SAFETY: an all-zero `stat` is a valid value of the structure.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat writes into the structure; a closed descriptor
        // (the directory's own, by now) fails.
        let found = unsafe { libc::fstat(fd, &mut st) } == 0;
        if found && parents(st.st_dev, st.st_ino) {
            // SAFETY: a descriptor of a parent's pool, which nothing in
            // the child uses.
            unsafe { libc::close(fd) };
        }
    }
}

/// The address ranges of `maps` (`/proc/self/maps`) that map a file
/// `ours(dev, ino)` names.
fn pool_mappings(maps: &str, ours: impl Fn(u64, u64) -> bool) -> Vec<(usize, usize)> {
    maps.lines()
        .filter_map(|line| {
            let mut f = line.split_ascii_whitespace();
            let (range, _perms, _off, dev, ino) =
                (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
            let (start, end) = range.split_once('-')?;
            let (major, minor) = dev.split_once(':')?;
            let dev = libc::makedev(
                u32::from_str_radix(major, 16).ok()?,
                u32::from_str_radix(minor, 16).ok()?,
            );
            let ino: u64 = ino.parse().ok()?;
            let range = (
                usize::from_str_radix(start, 16).ok()?,
                usize::from_str_radix(end, 16).ok()?,
            );
            (ino != 0 && ours(dev, ino) && range.0 < range.1).then_some(range)
        })
        .collect()
}

thread_local! {
    /// The last error this VFS turned into a SQLite result code on this
    /// thread.
    static LAST_ERROR: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

fn remember(e: &Error) {
    remember_why(e.to_string());
}

/// Keeps `why` as the thread's last error ([`last_error`]).
fn remember_why(why: String) {
    let _ = LAST_ERROR.try_with(|l| *l.borrow_mut() = Some(why));
}

/// Forgets the thread's last error: a file is being opened, or a
/// transaction starts (the database file's `SHARED` lock, or a read mark
/// of the wal-index), and a failure before it is no reason for what
/// follows.
pub(crate) fn forget_error() {
    let _ = LAST_ERROR.try_with(|l| {
        if let Ok(mut l) = l.try_borrow_mut() {
            *l = None;
        }
    });
}

/// The message of the last error the VFS reported to SQLite on the
/// calling thread (SQLite calls the VFS on the thread that runs the
/// statement, so it is the reason behind that thread's last failed
/// call), or `None` if there was none. A WAL that could not be opened
/// names its file (the pool's, or a stock WAL's beside the database).
/// Each open of a file through the VFS and each transaction's start
/// forget it: before, a database that could not be opened for a reason
/// of the default VFS's (a missing directory), or a statement failing for
/// SQLite's own reason, found an older failure's reason, about another
/// database.
pub fn last_error() -> Option<String> {
    LAST_ERROR.try_with(|l| l.borrow().clone()).ok().flatten()
}

/// Directories by identity: the canonical path each was first found by
/// (checked, and replaced, when that path names another now), for
/// [`key_of`].
static DIRS: Registry<HashMap<(u64, u64), PathBuf>> = Registry::new();

/// The key of the database at `db` in this process's registries (open
/// WALs here, wal-indexes in `db.rs`): its canonical path, with its
/// directory named as it was first named, so that the same directory
/// entry reached by another path (a bind mount of its directory, a
/// `/proc/PID/root` path) has the same key. Its WAL's pool, the WAL's
/// name and `.rewind` in that directory, is the same file by either
/// path. Before, a connection opening a database by such a path while
/// another connection of the process had it open by the first found its
/// pool "in use by another opener" (`SQLITE_BUSY`) for as long as that
/// connection stayed open: a busy handler that waits as long as it takes
/// waited for ever, where stock SQLite shares the WAL (its wal-index is
/// found by the file's identity). Two names of one file in two
/// directory entries (hard links) stay two databases, as they are to
/// stock SQLite, whose WAL file each name has its own.
pub(crate) fn key_of(db: &Path) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let canon = std::fs::canonicalize(db).unwrap_or_else(|_| db.to_path_buf());
    let (Some(dir), Some(name)) = (canon.parent(), canon.file_name()) else {
        return canon;
    };
    let id_of = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let Some(id) = id_of(dir) else {
        return canon;
    };
    let mut dirs = DIRS.lock();
    let first = dirs.entry(id).or_insert_with(|| dir.to_path_buf());
    if *first != dir && id_of(first) != Some(id) {
        // That path names another directory now (this one's inode
        // number was reused).
        *first = dir.to_path_buf();
    }
    first.join(name)
}

fn db_of(wal: &Path) -> PathBuf {
    let b = wal.as_os_str().as_bytes();
    PathBuf::from(OsStr::from_bytes(b.strip_suffix(b"-wal").unwrap_or(b)))
}

/// What the WAL of the database at `db` wrote, while a connection has it
/// open in this process.
pub fn stats(db: &Path) -> Option<Stats> {
    // (The registry is not held while the file's lock is waited for: an
    // open holds that lock until the WAL is read.)
    let shared = OPEN.lock().get(&key_of(db))?.shared.clone();
    let f = shared.file.lock();
    let f = f.as_ref()?;
    let mut s = f.stats();
    s.pool = f.counters();
    s.persist = f.persist();
    Some(s)
}

struct VfsData {
    parent: *mut ffi::sqlite3_vfs,
    cfg: Config,
    _name: CString,
}

/// A WAL file handle: SQLite's base structure first.
#[repr(C)]
struct WalHandle {
    base: ffi::sqlite3_file,
    key: *mut PathBuf,
    shared: *const Shared,
}

/// Held through [`register`]: two threads registering one name at once
/// register it once.
static REGISTERING: Mutex<()> = Mutex::new(());

/// The VFS structures [`register`] gave SQLite (their addresses); kept
/// whole across a fork ([`fork_prepare`]).
static OURS: Registry<Vec<usize>> = Registry::new();

/// SQLite's default auto-checkpoint: once the WAL holds this many frames
/// (`SQLITE_DEFAULT_WAL_AUTOCHECKPOINT`).
const AUTO_CHECKPOINT_FRAMES: c_int = 1000;

/// The result of installing [`on_connection`] for every connection the
/// process opens (once).
static HOOKED: std::sync::OnceLock<c_int> = std::sync::OnceLock::new();

/// Run by SQLite as each connection opens (`sqlite3_auto_extension`):
/// every connection gets [`first_commit`], which gives a connection with a
/// database of this crate's VFS [`wal_hook`] in place of SQLite's default
/// hook. Every connection, not only those whose main database is this
/// VFS's: one opened on a stock database (or in memory) that `ATTACH`es a
/// database of this VFS writes its WAL to a pool as well, and without the
/// hook a pool of bounded size filled with frames a checkpoint could free
/// (every write to it then failed with `SQLITE_FULL`).
unsafe extern "C" fn on_connection(
    db: *mut ffi::sqlite3,
    _err: *mut *mut c_char,
    _api: *const ffi::sqlite3_api_routines,
) -> c_int {
    // (SQLite sets its own WAL hook after the auto-extensions ran: a
    // commit sets this one.)
    // SAFETY: `db` is the connection SQLite is opening; the hook gets it
    // back.
    unsafe { ffi::sqlite3_commit_hook(db, Some(first_commit), db.cast()) };
    ffi::SQLITE_OK
}

/// Whether one of `db`'s databases (main, temp or attached) is kept by a
/// VFS of this crate.
///
/// # Safety
/// `db` is an open connection, on the thread that uses it.
unsafe fn has_ours(db: *mut ffi::sqlite3) -> bool {
    let ours = OURS.lock();
    (0..)
        .map_while(|i| {
            // SAFETY: the caller's promise; NULL past the last database.
            let name = unsafe { ffi::sqlite3_db_name(db, i) };
            (!name.is_null()).then_some(name)
        })
        .any(|name| {
            let mut vfs: *mut ffi::sqlite3_vfs = std::ptr::null_mut();
            // SAFETY: `name` is the schema name SQLite just gave; the file
            // control writes that database's VFS pointer into `vfs`.
            let rc = unsafe {
                ffi::sqlite3_file_control(
                    db,
                    name,
                    ffi::SQLITE_FCNTL_VFS_POINTER,
                    (&mut vfs as *mut *mut ffi::sqlite3_vfs).cast(),
                )
            };
            rc == ffi::SQLITE_OK && ours.contains(&(vfs as usize))
        })
}

/// Each commit of a connection until one of its databases is this
/// crate's VFS's (main or attached since): then sets [`wal_hook`] in
/// place of SQLite's default one, with the same frame count (1,000, or
/// what `PRAGMA wal_autocheckpoint` set before it; none if it turned
/// checkpoints off), and removes itself. A connection with none of them
/// keeps SQLite's own hook.
unsafe extern "C" fn first_commit(arg: *mut c_void) -> c_int {
    let db = arg.cast::<ffi::sqlite3>();
    // SAFETY: `arg` is the connection this commit hook was set on, and
    // SQLite calls the hook on the thread running its commit.
    if !unsafe { has_ours(db) } {
        return 0; // the commit goes on; the next one asks again
    }
    // SAFETY: as above.
    let frames =
        unsafe { ffi::sqlite3_wal_hook(db, Some(wal_hook), arg_of(AUTO_CHECKPOINT_FRAMES)) };
    let frames = frames as usize;
    if frames == 0 {
        // Checkpoints turned off (or no hook): left so.
        // SAFETY: as above.
        unsafe { ffi::sqlite3_wal_hook(db, None, std::ptr::null_mut()) };
    } else if frames != AUTO_CHECKPOINT_FRAMES as usize {
        // SAFETY: as above.
        unsafe { ffi::sqlite3_wal_hook(db, Some(wal_hook), frames as *mut c_void) };
    }
    // SAFETY: as above; SQLite reads the commit hook before it calls it.
    unsafe { ffi::sqlite3_commit_hook(db, None, std::ptr::null_mut()) };
    0 // the commit goes on
}

/// A frame count as a hook's argument (as SQLite's default hook takes it).
fn arg_of(frames: c_int) -> *mut c_void {
    frames as usize as *mut c_void
}

/// After each commit to a WAL of this VFS: SQLite's default
/// auto-checkpoint (a passive checkpoint once the WAL holds `arg` frames,
/// 1,000 unless the program set another count), and one as soon as the
/// log's blocks hold half the pool's heap at its maximum
/// size ([`WalFile::wants_checkpoint`]): a pool of bounded size (large
/// pages, or a small `max_pool_size`) would otherwise fill with frames the
/// checkpoint could free, and every write would fail with `SQLITE_FULL`.
/// `PRAGMA wal_autocheckpoint` on a connection replaces it with SQLite's
/// own hook, as for any connection.
unsafe extern "C" fn wal_hook(
    arg: *mut c_void,
    db: *mut ffi::sqlite3,
    zdb: *const c_char,
    frames: c_int,
) -> c_int {
    let due = frames as usize >= arg as usize || {
        // SAFETY: `db` and `zdb` are the connection and schema SQLite
        // passes the hook; the file name lives as long as the connection.
        let name = unsafe { ffi::sqlite3_db_filename(db, zdb) };
        // SAFETY: a non-null file name is a NUL-terminated string.
        let path = (!name.is_null()).then(|| unsafe { CStr::from_ptr(name) });
        path.is_some_and(|p| {
            // The name SQLite gives is its full path name, the key itself
            // unless a link leads to the file: resolved (`key_of`, a
            // `readlink` per component) only when it names no open WAL,
            // not at every commit (it was a fifth of a one-row insert's
            // time, `examples/profile.rs` under `perf`).
            let name = Path::new(OsStr::from_bytes(p.to_bytes()));
            let open_wal = |key: &Path| OPEN.lock().get(key).map(|e| e.shared.clone());
            let shared = open_wal(name).or_else(|| open_wal(&key_of(name)));
            shared.is_some_and(|s| s.file.lock().as_ref().is_some_and(|f| f.wants_checkpoint()))
        })
    };
    if due {
        // SAFETY: as SQLite's default hook does, from inside the hook.
        unsafe {
            ffi::sqlite3_wal_checkpoint_v2(
                db,
                zdb,
                ffi::SQLITE_CHECKPOINT_PASSIVE,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
    }
    ffi::SQLITE_OK
}

/// Registers the VFS `name` (not as the default).
pub fn register(name: &str, cfg: &Config) -> Result<(), crate::RegisterError> {
    let _registering = REGISTERING.lock();
    let cname = CString::new(name)
        .ok()
        .filter(|_| !name.is_empty())
        .ok_or_else(|| crate::RegisterError::BadName {
            name: name.to_string(),
        })?;
    // What SQLite has now decides, not what this process registered once:
    // a VFS of this crate that the program unregistered
    // (`sqlite3_vfs_unregister`) may be registered again.
    // SAFETY: `cname` is a NUL-terminated string that outlives the call;
    // sqlite3_vfs_find only reads SQLite's global list.
    let found = unsafe { ffi::sqlite3_vfs_find(cname.as_ptr()) };
    if !found.is_null() {
        let name = name.to_string();
        return Err(if OURS.lock().contains(&(found as usize)) {
            crate::RegisterError::AlreadyRegistered { name }
        } else {
            crate::RegisterError::NameTaken { name }
        });
    }
    // SAFETY: sqlite3_vfs_find with NULL returns the default VFS (or NULL
    // before initialization fails); it only reads SQLite's global list.
    let parent = unsafe { ffi::sqlite3_vfs_find(std::ptr::null()) };
    if parent.is_null() {
        return Err(crate::RegisterError::NoDefaultVfs);
    }
    // SAFETY: `parent` is a registered VFS, which SQLite keeps alive.
    let p = unsafe { &*parent };
    if p.szOsFile.max(0) as usize > crate::db::EXTRA_OFF {
        return Err(crate::RegisterError::DefaultVfsFileTooLarge {
            bytes: p.szOsFile.max(0) as usize,
        });
    }
    let data = Box::new(VfsData {
        parent,
        cfg: cfg.clone(),
        _name: cname.clone(),
    });
    let vfs = Box::new(ffi::sqlite3_vfs {
        iVersion: 2,
        szOsFile: crate::db::FILE_SIZE.max(std::mem::size_of::<WalHandle>()) as c_int,
        mxPathname: p.mxPathname,
        pNext: std::ptr::null_mut(),
        zName: cname.into_raw(),
        pAppData: Box::into_raw(data) as *mut c_void,
        xOpen: Some(x_open),
        xDelete: Some(x_delete),
        xAccess: Some(x_access),
        xFullPathname: Some(x_full_pathname),
        xDlOpen: Some(x_dl_open),
        xDlError: Some(x_dl_error),
        xDlSym: Some(x_dl_sym),
        xDlClose: Some(x_dl_close),
        xRandomness: Some(x_randomness),
        xSleep: Some(x_sleep),
        xCurrentTime: Some(x_current_time),
        xGetLastError: Some(x_get_last_error),
        xCurrentTimeInt64: Some(x_current_time_int64),
        xSetSystemCall: None,
        xGetSystemCall: None,
        xNextSystemCall: None,
    });
    // The VFS structure and its data are leaked: they live as long as the
    // process, as SQLite requires of a registered VFS.
    let vfs = Box::into_raw(vfs);
    // SAFETY: `vfs` is a whole VFS structure that is never freed.
    let rc = unsafe { ffi::sqlite3_vfs_register(vfs, 0) };
    if rc != ffi::SQLITE_OK {
        return Err(crate::RegisterError::Sqlite { code: rc });
    }
    OURS.lock().push(vfs as usize);
    hook_fork();
    // SAFETY: `on_connection` has the entry point's signature and lives
    // as long as the process.
    let hooked =
        *HOOKED.get_or_init(|| unsafe { ffi::sqlite3_auto_extension(Some(on_connection)) });
    if hooked != ffi::SQLITE_OK {
        return Err(crate::RegisterError::Sqlite { code: hooked });
    }
    Ok(())
}

/// The VFS's data and its parent.
///
/// # Safety
/// `vfs` is a VFS registered by [`register`].
unsafe fn data<'a>(vfs: *mut ffi::sqlite3_vfs) -> &'a VfsData {
    // SAFETY: pAppData was set to a leaked VfsData by `register`.
    unsafe { &*((*vfs).pAppData as *const VfsData) }
}

/// The parent VFS.
///
/// # Safety
/// As [`data`].
unsafe fn parent<'a>(vfs: *mut ffi::sqlite3_vfs) -> &'a mut ffi::sqlite3_vfs {
    // SAFETY: the parent is a registered VFS SQLite keeps alive.
    unsafe { &mut *data(vfs).parent }
}

fn is_wal_name(name: &Path) -> bool {
    name.as_os_str().as_bytes().ends_with(b"-wal")
}

/// A WAL file of stock SQLite with frames in it, beside the database whose
/// WAL this VFS would keep in a pool (an empty one, which a checkpoint
/// leaves, holds nothing).
fn foreign_wal(wal: &Path) -> Option<Error> {
    let len = std::fs::metadata(wal).ok().filter(|m| m.is_file())?.len();
    (len > 0).then(|| Error::ForeignWal {
        path: wal.to_path_buf(),
        len,
    })
}

/// # Safety
/// `z` is NULL or a NUL-terminated string.
unsafe fn path_of(z: *const c_char) -> Option<PathBuf> {
    if z.is_null() {
        return None;
    }
    // SAFETY: SQLite passes NUL-terminated names.
    let s = unsafe { CStr::from_ptr(z) };
    // The bytes as they are: a lossy conversion would give two names
    // that differ in an invalid UTF-8 byte one pool and one wal-index.
    Some(PathBuf::from(OsStr::from_bytes(s.to_bytes())))
}

fn open_wal(cfg: &Config, wal: &Path, create: bool) -> Result<WalFile, Error> {
    if let Some(e) = foreign_wal(wal) {
        return Err(e);
    }
    let pool = open_pool(cfg, &pool_path(wal), &db_of(wal), create)?;
    // Listed for forked children as soon as it is open, before the WAL is
    // read from it (a recovery, which may take a while); taken out again
    // if the open fails. (A pool whose file is not found by its name
    // right after its open is left out: a child forked meanwhile keeps
    // its descriptor, as one forked inside `open_pool` does; see
    // `fork_child`.)
    let mut listed = Listed::new(crate::db_sync::id_of(&pool_path(wal)).ok());
    let (log, rec) = WalLog::open(pool, cfg.block_size)?;
    // SQLite checks its WAL header's magic and checksum when it reads the
    // file, and ignores every frame after one that fails: a damaged header
    // in the pool would lose the committed frames without a word.
    if let Some(h) = &rec.header {
        if !crate::wal::header_checks(h) {
            return Err(Error::Damaged {
                what: "the WAL header in the pool fails SQLite's magic or checksum",
            });
        }
    }
    let mut w = WalFile::open(log, rec, db_of(wal), cfg.differential);
    w.pool_id = listed.keep();
    Ok(w)
}

/// A pool file's identity in [`POOL_IDS`], taken out again when dropped
/// unless kept.
struct Listed(Option<crate::db_sync::FileId>);

impl Listed {
    fn new(id: Option<crate::db_sync::FileId>) -> Listed {
        if let Some(id) = id {
            POOL_IDS.lock().push(id);
        }
        Listed(id)
    }

    /// Kept listed: the id, for [`unlist`] when the pool closes.
    fn keep(&mut self) -> Option<crate::db_sync::FileId> {
        self.0.take()
    }
}

impl Drop for Listed {
    fn drop(&mut self) {
        if let Some(id) = self.0 {
            unlist(id);
        }
    }
}

/// Takes one entry of `id` out of [`POOL_IDS`].
fn unlist(id: crate::db_sync::FileId) {
    let mut ids = POOL_IDS.lock();
    if let Some(i) = ids.iter().position(|&x| x == id) {
        ids.swap_remove(i);
    }
}

/// Opens the pool file `pool` of the database `db`, or, with `create`,
/// makes it if there is none.
///
/// A pool that vanishes while it is being opened (gone between the check
/// that it is there and its open, or between `open_or_create`'s create
/// and open) was removed by another process's last close: a read-only
/// connection removes a WAL pool that holds nothing (`release`). It is
/// looked for again, and created if it is still not there; a pool that
/// other processes keep making and removing under this open, a few times
/// running, is `PoolInUse` (`SQLITE_BUSY`: the busy handler tries again).
/// A pool found missing and then made by another process before this
/// one's create (`open_or_create` then opens it) is opened whatever
/// configuration that process's VFS has, as a pool found there is.
/// Before, each of these races failed the statement with
/// `SQLITE_CANTOPEN` ("No such file or directory", or, for a pool made
/// by a VFS of another `pool_size`, "the existing pool's size is ..."),
/// which no busy handler retries: a process beside another whose
/// read-only connections opened and closed the database failed now and
/// then.
fn open_pool(cfg: &Config, pool: &Path, db: &Path, create: bool) -> Result<Pool, Error> {
    /// Opens that found the pool gone before this one gives up.
    const TRIES: usize = 8;
    let opts = OpenOptions::default()
        .nvm_latency(cfg.nvm_latency)
        .backend(cfg.backend);
    let gone = |e: &rewind::Error| e.io_kind() == Some(std::io::ErrorKind::NotFound);
    for _ in 0..TRIES {
        let opened = if pool.exists() || !create {
            Pool::open(pool, LAYOUT, &opts)
        } else {
            Pool::open_or_create(pool, LAYOUT, cfg.pool_size, &cfg.pool_config())
                .inspect(|_| like_db(pool, db))
        };
        match opened {
            // (A directory that is gone, or a link at the pool's name to
            // nothing, is no race: its error stands.)
            Err(e)
                if create
                    && gone(&e)
                    && pool.parent().is_none_or(Path::exists)
                    && !pool.is_symlink() =>
            {
                continue
            }
            // Made since it was found missing, by another process whose
            // VFS has another configuration: an existing pool is opened
            // whatever configuration made it (as `Pool::open` does above).
            Err(rewind::Error::ConfigMismatch { .. }) if create => continue,
            r => return Ok(r?),
        }
    }
    Err(Error::Pool(rewind::Error::PoolInUse {
        path: pool.to_path_buf(),
    }))
}

/// Gives a new pool file the database file's owner and permission bits,
/// as SQLite gives the WAL and `-shm` files it creates
/// (`findCreateFileMode`, and `robustFchown` when run as root), with read
/// and write for the owner always (every opener of a pool writes it).
/// Before, the pool had the creating process's owner and umask: a root
/// process that read another user's database while its pool held frames,
/// or crashed, left a root-owned `0644` pool, and every statement of the database's
/// owner then failed with `SQLITE_CANTOPEN` ("Permission denied"); the
/// members of a database's group could not write a pool another member
/// made. Best effort: a change the process may not make is left undone.
fn like_db(pool: &Path, db: &Path) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let Ok(m) = std::fs::metadata(db) else {
        return;
    };
    let mode = (m.mode() & 0o666) | 0o600;
    let _ = std::fs::set_permissions(pool, std::fs::Permissions::from_mode(mode));
    // Root may give the file to anyone; another process only to itself
    // and a group it is in (refused otherwise, and left).
    let _ = std::os::unix::fs::chown(pool, Some(m.uid()), Some(m.gid()));
}

static WAL_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 1,
    xClose: Some(w_close),
    xRead: Some(w_read),
    xWrite: Some(w_write),
    xTruncate: Some(w_truncate),
    xSync: Some(w_sync),
    xFileSize: Some(w_file_size),
    xLock: Some(w_lock),
    xUnlock: Some(w_lock),
    xCheckReservedLock: Some(w_check_reserved),
    xFileControl: Some(w_file_control),
    xSectorSize: Some(w_sector_size),
    xDeviceCharacteristics: Some(w_device_characteristics),
    xShmMap: None,
    xShmLock: None,
    xShmBarrier: None,
    xShmUnmap: None,
    xFetch: None,
    xUnfetch: None,
};

unsafe extern "C" fn x_open(
    vfs: *mut ffi::sqlite3_vfs,
    z_name: *const c_char,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    after_fork();
    // A new use of a file: an older failure is no reason for what
    // happens to it.
    forget_error();
    // SAFETY: SQLite passes the registered VFS and a file of szOsFile bytes.
    let (d, p) = unsafe { (data(vfs), parent(vfs)) };
    // SAFETY: as above; the name is NULL or NUL-terminated.
    let name = unsafe { path_of(z_name) };
    let (Some(wal), true) = (name.clone(), flags & ffi::SQLITE_OPEN_WAL != 0) else {
        // SAFETY: the parent fills `file` (its part, no larger than
        // EXTRA_OFF, checked by register) and sets its own methods.
        let rc = unsafe { (p.xOpen.expect("xOpen"))(p, z_name, file, flags, out_flags) };
        // A named database file gets the wal-index in process memory.
        if let (Some(db), true) = (name, flags & ffi::SQLITE_OPEN_MAIN_DB != 0) {
            // SAFETY: as above; an open that succeeded set pMethods.
            if rc == ffi::SQLITE_OK && unsafe { !(*file).pMethods.is_null() } {
                // SAFETY: `file` has FILE_SIZE bytes (szOsFile).
                unsafe { crate::db::adopt(file, key_of(&db)) };
            }
        }
        return rc;
    };
    let key = key_of(&db_of(&wal));
    // A panic must not unwind into SQLite (the process would abort): one
    // that a damaged pool provokes while it is read is an error.
    let opened = join_or_open(OPEN.get(), &key, || {
        std::panic::catch_unwind(|| open_wal(&d.cfg, &wal, flags & ffi::SQLITE_OPEN_CREATE != 0))
            .unwrap_or(Err(Error::Damaged {
                what: "reading the pool panicked",
            }))
    });
    let shared = match opened {
        Ok(shared) => shared,
        Err(e) => {
            // SAFETY: an open that fails leaves pMethods NULL.
            unsafe { (*file).pMethods = std::ptr::null() };
            return open_code(&e, &wal);
        }
    };
    // A WAL this process has open already runs on the backend its first
    // opener's VFS named. One opened on `Pmem` would not make this
    // connection's commits durable as an `Msync` VFS promises (before, it
    // was joined without a word, and its commits reached only the page
    // cache): refused until that WAL is closed. (A `Pmem` connection
    // joining a WAL on `Msync` gets more than it asked for.)
    let running = with_file(&shared, None, |w| Some(w.backend()));
    if let (rewind::Backend::Msync, Some(open @ rewind::Backend::Pmem)) = (d.cfg.backend, running) {
        let _ = release(&key, shared);
        // SAFETY: an open that fails leaves pMethods NULL.
        unsafe { (*file).pMethods = std::ptr::null() };
        let e = Error::BackendMismatch {
            db: db_of(&wal),
            open,
            wanted: d.cfg.backend,
        };
        return open_code(&e, &wal);
    }
    let h = file as *mut WalHandle;
    // SAFETY: `file` has room for a WalHandle (szOsFile), which SQLite owns
    // until xClose.
    unsafe {
        (*h).base.pMethods = &WAL_METHODS;
        (*h).key = Box::into_raw(Box::new(key));
        (*h).shared = Arc::into_raw(shared);
        if !out_flags.is_null() {
            *out_flags = flags;
        }
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_delete(
    vfs: *mut ffi::sqlite3_vfs,
    z: *const c_char,
    sync_dir: c_int,
) -> c_int {
    after_fork();
    // SAFETY: SQLite passes the registered VFS and a NUL-terminated name.
    let (p, name) = unsafe { (parent(vfs), path_of(z)) };
    if let Some(wal) = name.filter(|n| is_wal_name(n)) {
        if OPEN.lock().contains_key(&key_of(&db_of(&wal))) {
            remember(&Error::WalOpen { db: db_of(&wal) });
            return ffi::SQLITE_IOERR_DELETE;
        }
        let pool = pool_path(&wal);
        // SQLite deletes the WAL once a checkpoint has copied every frame
        // into the database file, but syncs that file only as `PRAGMA
        // synchronous` asks (not at all under OFF): the frames leave the
        // pool only once the database file holds them durably, as at a
        // restart (`WalFile::restart`), whatever `synchronous` says.
        if pool.exists() {
            if let Err(e) = sync_db(&db_of(&wal)) {
                remember(&e);
                return ffi::SQLITE_IOERR_DELETE;
            }
        }
        // Only the pool is this VFS's: a file at the WAL's own name is
        // another VFS's (stock SQLite's), never deleted here.
        return match std::fs::remove_file(&pool) {
            Ok(()) => ffi::SQLITE_OK,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => ffi::SQLITE_OK,
            Err(source) => {
                remember(&Error::Io { path: pool, source });
                ffi::SQLITE_IOERR_DELETE
            }
        };
    }
    // SAFETY: delegated with the parent VFS.
    let rc = unsafe { (p.xDelete.expect("xDelete"))(p, z, sync_dir) };
    if rc == ffi::SQLITE_IOERR_DELETE_NOENT {
        ffi::SQLITE_OK
    } else {
        rc
    }
}

/// Makes the database file durable (a database that is gone has nothing
/// to keep).
fn sync_db(db: &Path) -> Result<(), Error> {
    match crate::wal::sync_db(db) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r.map_err(|source| Error::Io {
            path: db.to_path_buf(),
            source,
        }),
    }
}

unsafe extern "C" fn x_access(
    vfs: *mut ffi::sqlite3_vfs,
    z: *const c_char,
    flags: c_int,
    res: *mut c_int,
) -> c_int {
    after_fork();
    // SAFETY: SQLite passes the registered VFS and a NUL-terminated name.
    let (p, name) = unsafe { (parent(vfs), path_of(z)) };
    if let Some(wal) = name.filter(|n| is_wal_name(n)) {
        // (A stock WAL with frames counts: SQLite then opens it, and the
        // open says why it cannot be used.)
        let there = OPEN.lock().contains_key(&key_of(&db_of(&wal)))
            || pool_path(&wal).exists()
            || foreign_wal(&wal).is_some();
        // SAFETY: `res` points to an int SQLite owns.
        unsafe { *res = there as c_int };
        return ffi::SQLITE_OK;
    }
    // SAFETY: delegated with the parent VFS.
    unsafe { (p.xAccess.expect("xAccess"))(p, z, flags, res) }
}

unsafe extern "C" fn x_full_pathname(
    vfs: *mut ffi::sqlite3_vfs,
    z: *const c_char,
    n: c_int,
    out: *mut c_char,
) -> c_int {
    // SAFETY: delegated with the parent VFS.
    unsafe {
        let p = parent(vfs);
        (p.xFullPathname.expect("xFullPathname"))(p, z, n, out)
    }
}

unsafe extern "C" fn x_dl_open(vfs: *mut ffi::sqlite3_vfs, z: *const c_char) -> *mut c_void {
    // SAFETY: delegated with the parent VFS.
    unsafe {
        let p = parent(vfs);
        match p.xDlOpen {
            Some(f) => f(p, z),
            None => std::ptr::null_mut(),
        }
    }
}

unsafe extern "C" fn x_dl_error(vfs: *mut ffi::sqlite3_vfs, n: c_int, out: *mut c_char) {
    // SAFETY: delegated with the parent VFS.
    unsafe {
        let p = parent(vfs);
        if let Some(f) = p.xDlError {
            f(p, n, out)
        }
    }
}

type DlSym = unsafe extern "C" fn(*mut ffi::sqlite3_vfs, *mut c_void, *const c_char);

unsafe extern "C" fn x_dl_sym(
    vfs: *mut ffi::sqlite3_vfs,
    h: *mut c_void,
    z: *const c_char,
) -> Option<DlSym> {
    // SAFETY: delegated with the parent VFS.
    unsafe {
        let p = parent(vfs);
        p.xDlSym.and_then(|f| f(p, h, z))
    }
}

unsafe extern "C" fn x_dl_close(vfs: *mut ffi::sqlite3_vfs, h: *mut c_void) {
    // SAFETY: delegated with the parent VFS.
    unsafe {
        let p = parent(vfs);
        if let Some(f) = p.xDlClose {
            f(p, h)
        }
    }
}

unsafe extern "C" fn x_randomness(vfs: *mut ffi::sqlite3_vfs, n: c_int, out: *mut c_char) -> c_int {
    // SAFETY: delegated with the parent VFS.
    unsafe {
        let p = parent(vfs);
        (p.xRandomness.expect("xRandomness"))(p, n, out)
    }
}

unsafe extern "C" fn x_sleep(vfs: *mut ffi::sqlite3_vfs, us: c_int) -> c_int {
    // SAFETY: delegated with the parent VFS.
    unsafe {
        let p = parent(vfs);
        (p.xSleep.expect("xSleep"))(p, us)
    }
}

unsafe extern "C" fn x_current_time(vfs: *mut ffi::sqlite3_vfs, t: *mut f64) -> c_int {
    // SAFETY: delegated with the parent VFS.
    unsafe {
        let p = parent(vfs);
        (p.xCurrentTime.expect("xCurrentTime"))(p, t)
    }
}

unsafe extern "C" fn x_get_last_error(
    vfs: *mut ffi::sqlite3_vfs,
    n: c_int,
    out: *mut c_char,
) -> c_int {
    // SAFETY: delegated with the parent VFS.
    unsafe {
        let p = parent(vfs);
        match p.xGetLastError {
            Some(f) => f(p, n, out),
            None => 0,
        }
    }
}

unsafe extern "C" fn x_current_time_int64(
    vfs: *mut ffi::sqlite3_vfs,
    t: *mut ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: delegated with the parent VFS (version 2 or later, as the
    // unix VFS is).
    unsafe {
        let p = parent(vfs);
        match p.xCurrentTimeInt64 {
            Some(f) => f(p, t),
            None => ffi::SQLITE_ERROR,
        }
    }
}

/// The shared WAL of a handle.
///
/// # Safety
/// `f` is a handle opened by [`x_open`] and not yet closed.
unsafe fn shared<'a>(f: *mut ffi::sqlite3_file) -> &'a Shared {
    // SAFETY: x_open stored an Arc's pointer, released only by w_close.
    unsafe { &*(*(f as *mut WalHandle)).shared }
}

fn with_file<R>(sh: &Shared, fail: R, f: impl FnOnce(&mut WalFile) -> R) -> R {
    match sh.file.lock().as_mut() {
        Some(w) => f(w),
        None => fail,
    }
}

/// The result code of a WAL that could not be opened (the reason kept
/// for [`last_error`]). A pool another process has open is
/// `SQLITE_BUSY`, as a lock that process held would be: SQLite's busy
/// handler (`busy_timeout`) waits and tries again, and the error, once it
/// gives up, is "database is locked". A file system without room for a
/// new pool is `SQLITE_FULL` ("database or disk is full"). Anything else
/// is `SQLITE_CANTOPEN`.
///
/// The reason kept names the file: the pool's, unless it names it, the
/// WAL's (a stock WAL beside the database) or the database already. Before, most
/// reasons for a damaged pool named none ("WAL pool damaged: ...", "heap
/// metadata corrupt at offset ..."), and a program with several
/// databases attached could not tell which one's pool it was.
fn open_code(e: &Error, wal: &Path) -> c_int {
    let why = e.to_string();
    let (pool, db) = (pool_path(wal), db_of(wal));
    let named = [wal, pool.as_path(), db.as_path()]
        .iter()
        .any(|p| why.contains(&*p.to_string_lossy()));
    remember_why(match named {
        true => why,
        false => format!("{}: {why}", pool.display()),
    });
    match e {
        Error::Pool(rewind::Error::PoolInUse { .. }) => ffi::SQLITE_BUSY,
        Error::Pool(rewind::Error::NoSpace { .. }) => ffi::SQLITE_FULL,
        _ => ffi::SQLITE_CANTOPEN,
    }
}

fn code_of(e: &Error, io: c_int) -> c_int {
    remember(e);
    match e {
        Error::Pool(rewind::Error::OutOfMemory { .. })
        | Error::Pool(rewind::Error::NoSpaceToGrow { .. })
        | Error::Pool(rewind::Error::LogFull { .. })
        | Error::Full { .. }
        | Error::TooLarge { .. } => ffi::SQLITE_FULL,
        _ => io,
    }
}

unsafe extern "C" fn w_close(f: *mut ffi::sqlite3_file) -> c_int {
    let h = f as *mut WalHandle;
    // SAFETY: the pointers were made by x_open with Box/Arc::into_raw and
    // are taken back once, here.
    let (key, shared) = unsafe { (Box::from_raw((*h).key), Arc::from_raw((*h).shared)) };
    // SAFETY: as above.
    unsafe { (*h).base.pMethods = std::ptr::null() };
    release(&key, shared)
}

/// Gives back a handle on the WAL of `key`; the last one closes it.
fn release(key: &Path, shared: Arc<Shared>) -> c_int {
    let mut open = OPEN.lock();
    let last = match open.get_mut(key) {
        Some(e) => {
            e.handles -= 1;
            e.handles == 0
        }
        None => false,
    };
    if last {
        open.remove(key);
        if let Some(w) = shared.file.lock().take() {
            // A WAL that holds nothing (no header, no frame): its pool is
            // removed, under its lock, before it is closed. SQLite deletes
            // a WAL at its last close only after a checkpoint, which a
            // read-only connection cannot run (it cannot take the
            // database's exclusive lock), so every read-only connection of
            // a database with no WAL left a whole pool (`pool_size`, 64
            // MiB by default) where stock SQLite leaves an empty file. A
            // later open finds no pool and makes one (an open racing this
            // one finds the file it locked gone and starts again: see
            // `rewind::Pool::open`). A pool that holds frames stays.
            if w.size() == 0 {
                let mut wal = w.db_path().as_os_str().to_owned();
                wal.push("-wal");
                let pool = pool_path(Path::new(&wal));
                if let Err(e) = std::fs::remove_file(&pool) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        remember(&Error::Io {
                            path: pool,
                            source: e,
                        });
                    }
                }
            }
            if let Some(id) = w.pool_id {
                unlist(id);
            }
            if let Err(e) = w.close() {
                return code_of(&e, ffi::SQLITE_IOERR_CLOSE);
            }
        }
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn w_read(
    f: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    n: c_int,
    off: i64,
) -> c_int {
    // SAFETY: SQLite passes a buffer of `n` bytes.
    let out = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, n.max(0) as usize) };
    // SAFETY: `f` is an open WAL handle.
    let sh = unsafe { shared(f) };
    with_file(sh, ffi::SQLITE_IOERR_READ, |w| {
        if w.read(off.max(0) as u64, out) {
            ffi::SQLITE_OK
        } else {
            ffi::SQLITE_IOERR_SHORT_READ
        }
    })
}

unsafe extern "C" fn w_write(
    f: *mut ffi::sqlite3_file,
    buf: *const c_void,
    n: c_int,
    off: i64,
) -> c_int {
    // SAFETY: SQLite passes a buffer of `n` bytes.
    let data = unsafe { std::slice::from_raw_parts(buf as *const u8, n.max(0) as usize) };
    // SAFETY: `f` is an open WAL handle.
    let sh = unsafe { shared(f) };
    with_file(sh, ffi::SQLITE_IOERR_WRITE, |w| {
        match w.write(off.max(0) as u64, data) {
            Ok(()) => ffi::SQLITE_OK,
            Err(e) => code_of(&e, ffi::SQLITE_IOERR_WRITE),
        }
    })
}

unsafe extern "C" fn w_truncate(f: *mut ffi::sqlite3_file, size: i64) -> c_int {
    // SAFETY: `f` is an open WAL handle.
    let sh = unsafe { shared(f) };
    with_file(sh, ffi::SQLITE_IOERR_TRUNCATE, |w| {
        match w.truncate(size.max(0) as u64) {
            Ok(()) => ffi::SQLITE_OK,
            Err(e) => code_of(&e, ffi::SQLITE_IOERR_TRUNCATE),
        }
    })
}

unsafe extern "C" fn w_sync(_f: *mut ffi::sqlite3_file, _flags: c_int) -> c_int {
    // Every committed transaction was made durable by its own fence.
    ffi::SQLITE_OK
}

unsafe extern "C" fn w_file_size(f: *mut ffi::sqlite3_file, size: *mut i64) -> c_int {
    // SAFETY: `f` is an open WAL handle.
    let sh = unsafe { shared(f) };
    let s = with_file(sh, None, |w| Some(w.size()));
    match s {
        Some(s) => {
            // SAFETY: SQLite passes a pointer to its result.
            unsafe { *size = s as i64 };
            ffi::SQLITE_OK
        }
        None => ffi::SQLITE_IOERR_FSTAT,
    }
}

unsafe extern "C" fn w_lock(_f: *mut ffi::sqlite3_file, _level: c_int) -> c_int {
    // SQLite locks the database file, never the WAL.
    ffi::SQLITE_OK
}

unsafe extern "C" fn w_check_reserved(_f: *mut ffi::sqlite3_file, res: *mut c_int) -> c_int {
    // SAFETY: SQLite passes a pointer to its result.
    unsafe { *res = 0 };
    ffi::SQLITE_OK
}

unsafe extern "C" fn w_file_control(
    _f: *mut ffi::sqlite3_file,
    _op: c_int,
    _arg: *mut c_void,
) -> c_int {
    ffi::SQLITE_NOTFOUND
}

unsafe extern "C" fn w_sector_size(_f: *mut ffi::sqlite3_file) -> c_int {
    512
}

unsafe extern "C" fn w_device_characteristics(_f: *mut ffi::sqlite3_file) -> c_int {
    ffi::SQLITE_IOCAP_POWERSAFE_OVERWRITE | ffi::SQLITE_IOCAP_SAFE_APPEND
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::{channel, Receiver, Sender};
    use std::time::Duration;

    type Map = Mutex<HashMap<PathBuf, Entry<u32>>>;

    /// An opener that says it started, then waits for its outcome.
    fn gated(
        started: Sender<()>,
        outcome: Receiver<Result<u32, String>>,
    ) -> impl FnOnce() -> Result<u32, String> {
        move || {
            started.send(()).unwrap();
            outcome.recv().unwrap()
        }
    }

    fn handles(map: &Map, key: &str) -> Option<usize> {
        map.lock().get(Path::new(key)).map(|e| e.handles)
    }

    /// While one WAL is being opened (its pool read), another database's
    /// WAL opens: the registry is not held meanwhile (it was, for the
    /// whole open). A handle asked for the WAL being opened waits for it
    /// and shares it; one whose open failed tries again itself.
    #[test]
    fn an_open_in_progress_holds_up_only_its_own_database() {
        let map: &'static Map = Box::leak(Box::default());
        let (started, started_rx) = channel();
        let (go, go_rx) = channel();
        let a =
            std::thread::spawn(move || join_or_open(map, Path::new("a"), gated(started, go_rx)));
        started_rx.recv().unwrap();
        // Another database, while "a" is being opened.
        let (done, done_rx) = channel();
        std::thread::spawn(move || {
            let b = join_or_open(map, Path::new("b"), || Ok::<_, String>(2));
            done.send(b.map(|s| *s.file.lock())).unwrap();
        });
        let b = done_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the open of b waited for the open of a");
        assert_eq!(b, Ok(Some(2)));
        // A second handle of "a" joins and waits for the open.
        let joiner = std::thread::spawn(move || {
            join_or_open(map, Path::new("a"), || {
                Err::<u32, _>("a joiner opened".to_string())
            })
        });
        while handles(map, "a") != Some(2) {
            std::thread::yield_now();
        }
        go.send(Ok(1)).unwrap();
        let (a, joined) = (a.join().unwrap().unwrap(), joiner.join().unwrap().unwrap());
        assert!(Arc::ptr_eq(&a, &joined));
        assert_eq!(*a.file.lock(), Some(1));
        assert_eq!(handles(map, "a"), Some(2));
        // An open that fails: the handle that joined meanwhile opens it.
        let (started, started_rx) = channel();
        let (go, go_rx) = channel();
        let c =
            std::thread::spawn(move || join_or_open(map, Path::new("c"), gated(started, go_rx)));
        started_rx.recv().unwrap();
        let retry =
            std::thread::spawn(move || join_or_open(map, Path::new("c"), || Ok::<_, String>(5)));
        while handles(map, "c") != Some(2) {
            std::thread::yield_now();
        }
        go.send(Err("damaged".to_string())).unwrap();
        assert_eq!(c.join().unwrap().err(), Some("damaged".to_string()));
        let retried = retry.join().unwrap().unwrap();
        assert_eq!(*retried.file.lock(), Some(5));
        assert_eq!(handles(map, "c"), Some(1));
    }
}
