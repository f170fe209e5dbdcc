//! SQLite with its write-ahead log in a rewind pool: NVWAL (Kim et al.,
//! ASPLOS 2016) as a SQLite VFS for rusqlite.
//!
//! ```no_run
//! use rusqlite::{Connection, OpenFlags};
//! rewind_sqlite::register("rewind-wal", &rewind_sqlite::Config::default())?;
//! let db = Connection::open_with_flags_and_vfs("app.db", OpenFlags::default(), "rewind-wal")?;
//! db.pragma_update(None, "journal_mode", "WAL")?;
//! db.execute_batch("CREATE TABLE IF NOT EXISTS t(x); INSERT INTO t VALUES (1);")?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The database file stays an ordinary file; the WAL lives in a pool file
//! beside it, `<db>-wal.rewind` ([`pool_path`]: shortened for a database
//! name of 245 bytes or more), as NVWAL keeps it in NVRAM (§3–4 of the
//! paper):
//!
//! * **differential frames** (§3.2): a frame's record holds only the byte
//!   ranges that differ from the page's previous frame ([`record`]'s
//!   format, in `docs/design.md`);
//! * **lazy synchronization** (§4.2): a transaction's records are copied
//!   with non-temporal stores and no ordering, and one fence makes them and
//!   their checksummed commit mark durable;
//! * **a user-level heap** (§3.3): blocks allocated, linked and freed by
//!   rewind transactions, so no crash leaks or reuses one.
//!
//! SQLite itself is unchanged: it reads and writes a WAL file as always,
//! and this crate keeps what the file means in the pool. After a crash,
//! SQLite rebuilds its wal-index from that file, which the pool's recovery
//! has rebuilt from the committed records.
//!
//! **Locking and the wal-index.** A pool has one opener. The database file
//! and its locks are the default VFS's; the wal-index, which the default
//! VFS keeps in a `-shm` file with `fcntl` locks (four system calls per
//! write transaction), lives in process memory, shared by the process's
//! connections, with an in-process lock table (`db.rs`). So any number of
//! connections of one process share the database as usual (they share the
//! one open pool and the one wal-index); a second process that opens the
//! database while the first has its WAL open gets `SQLITE_BUSY`, as for
//! a lock the first held: its busy handler (`busy_timeout`) waits, and
//! once the first has closed the database its statement goes on; if the
//! handler gives up, "database is locked" (with the pool's "in use"
//! error in [`last_error`]). Never a corrupt database, and no other
//! process ever needs the wal-index. Each process rebuilds it from the WAL file when it
//! first opens the database, as SQLite does after a crash. Exclusive
//! locking mode works as well. A child that a process with databases open
//! forks opens them as another process would; its parent's connections
//! must not be used in it, as SQLite says (their WAL pools are not even
//! mapped there: the child lets go of them as it starts, so that a parent
//! that crashed leaves no pool locked by its children). Open the database only through this VFS:
//! stock SQLite would not see the frames in the pool.
//!
//! **Limits.**
//! * *Durability on a disk.* With the default backend
//!   ([`Backend::Pmem`]: cache-line flushes and a fence) a commit is
//!   durable once its fence returns only where the pool is persistent
//!   memory mapped directly (DAX). On an ordinary file system the
//!   committed frames sit in the page cache: they survive the process
//!   being killed, not a power failure or an operating-system crash, and
//!   `PRAGMA synchronous` changes nothing (the WAL's `xSync` has nothing
//!   to do; stock SQLite syncs its WAL file at each commit under `FULL`).
//!   For a database on a disk use [`Config::backend`]`(Backend::Msync)`:
//!   each commit's fence is then an `msync` of what it wrote. The
//!   connections of a process share a database's one open WAL, which runs
//!   on the backend of the VFS that opened it: a connection of an `Msync`
//!   VFS is refused (`SQLITE_CANTOPEN`, the reason in [`last_error`])
//!   while its process has the WAL open through a `Pmem` one.
//! * *Memory.* A transaction's frames wait in memory until it commits,
//!   and committed frames are mirrored in memory until a checkpoint (as
//!   the page cache mirrors a WAL file), as are the frames a rolled-back
//!   spill left past the last commit: a transaction of N bytes of pages
//!   takes a few times N of memory (300 one-megabyte rows in one
//!   transaction peaked at 1 GB), where stock SQLite spills to its WAL
//!   file. Commit large loads in pieces, and keep checkpoints on.
//! * *Read-only use.* A connection opened read-only still opens (and, the
//!   first time, creates) the pool file beside the database, and leaves it
//!   there when it closes, as stock SQLite leaves its WAL file (a new pool
//!   gets the database file's owner, group and permission bits, as SQLite
//!   gives its WAL file, so a root process reading another user's database
//!   leaves a pool its owner can open): a database on
//!   a read-only file system cannot be opened through this VFS
//!   (`SQLITE_CANTOPEN`, the reason in [`last_error`]).
//! * *Room.* A new WAL pool takes [`Config::pool_size`] bytes on disk at
//!   once (a stock WAL file starts empty): on a file system without that
//!   much room, every statement on a database in WAL mode, reads too, is
//!   `SQLITE_FULL` until space is freed. A pool that grew for a large
//!   transaction never shrinks: a checkpoint frees its blocks for later
//!   transactions, but the file keeps its largest size on disk until the
//!   last connection of the process closes the database and the pool is
//!   removed. `PRAGMA journal_size_limit` and `wal_checkpoint(TRUNCATE)`,
//!   which shrink a stock WAL file, give no disk space back. An open WAL
//!   pool maps address space for its maximum size
//!   ([`Config::pool_max`], 4 GiB by default): in a process whose address
//!   space is bounded (`ulimit -v`), the open WAL whose maximum passes
//!   the bound fails with `SQLITE_CANTOPEN` ("Cannot allocate memory" in
//!   [`last_error`]; under a bound of 1.2 GiB not one database of the
//!   default configuration opens): give such a program a smaller
//!   [`Config::max_pool_size`].
//! * *Checkpoints.* Every connection with a database of this VFS (its
//!   main one or one it attached) checkpoints as
//!   SQLite does at 1,000 frames, and also once the WAL's blocks, with
//!   room for one more transaction the size of the last, hold half
//!   the pool's heap at its maximum size, so that a bounded pool (a small
//!   [`Config::max_pool_size`], large pages) never fills with frames a
//!   checkpoint could free. A read transaction held open meanwhile (a
//!   long query, a `BEGIN` with a read in it) keeps every checkpoint from
//!   copying the frames committed after its snapshot, so a bounded pool
//!   can fill behind it: the write fails with `SQLITE_FULL` ([`last_error`]
//!   names the committed frames), and since only a commit runs the
//!   automatic checkpoint, writes keep failing after the reader ended
//!   until a checkpoint by hand (`PRAGMA wal_checkpoint`) frees the
//!   blocks: on `SQLITE_FULL`, checkpoint and retry (unless [`last_error`]
//!   says the transaction by itself passes the pool at its maximum size:
//!   then no checkpoint makes room for it). `PRAGMA wal_autocheckpoint = N` on a
//!   connection replaces this with SQLite's own rule, by frames only (and
//!   the pragma, read, says 0 while this crate's hook is set, as SQLite
//!   says for any hook but its own). The hook is set at the connection's
//!   first commit, by a commit hook this crate gives each connection as it
//!   opens: a commit hook the program sets before that first commit
//!   (`sqlite3_commit_hook`, rusqlite's `commit_hook`) takes its place,
//!   and the connection keeps SQLite's rule alone (a pool of 1 MiB at
//!   most then failed with `SQLITE_FULL` after 79 inserts of 3 KB). Set
//!   yours after a first commit, or checkpoint by hand. A WAL hook the
//!   program sets (`sqlite3_wal_hook`) before that first commit is
//!   replaced by this crate's, without a word (SQLite gives no way to read
//!   a hook back, nor to tell its own from another): set it after the
//!   first commit (`PRAGMA journal_mode = WAL` on a database in rollback
//!   mode is one), and it is kept, in place of this crate's.
//! * *Copies.* Copy a database in use with SQLite's backup API (or `VACUUM
//!   INTO`), never with `cp` of its files: a copy of a live pool may be torn
//!   and nothing opening it can tell (`rewind check` on the copied pool file
//!   says it was copied while open). Stock SQLite's WAL has the same hazard.
//! * *Stock SQLite* opening the database sees none of the frames in the
//!   pool, and what it writes to the database file is hidden by those
//!   frames when the database is opened through this VFS again (then
//!   overwritten by its next checkpoint), with no error: open the database
//!   only through this VFS.
//!
//! **Why `libsqlite3-sys` directly** (through `rusqlite::ffi`). The VFS
//! needs SQLite's own C structures for one file kind and the default VFS's
//! untouched for the others (the database file keeps the `unix` VFS's
//! methods but for the four of shared memory). `sqlite-plugin` is maintained and has the
//! shm methods, but it wraps every file in its own trait and links its own
//! bindings, a second copy of the `sqlite3` link name beside rusqlite's;
//! `sqlite-vfs` calls itself a prototype. Writing on the C API that
//! rusqlite already links (bundled: no system package) keeps one SQLite
//! and about 1,000 lines of unsafe code in two modules (`vfs.rs` and
//! `db.rs`, each block with its `SAFETY` line).

#![warn(missing_docs, unsafe_op_in_unsafe_fn)]
#![deny(unsafe_code)]

mod db;
mod db_sync;
mod error;
pub mod log;
pub mod record;
mod vfs;
pub mod wal;

use rewind::{Backend, NvmLatency};

pub use error::Error;
/// The rusqlite this crate registers its VFS with (bundled SQLite).
pub use rusqlite;
pub use vfs::{last_error, pool_path, stats, LAYOUT};
pub use wal::Stats;

/// How the VFS keeps WALs. `Config::default()` and the builder methods.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    /// Size of a new WAL pool in bytes (default 64 MiB).
    pub pool_size: u64,
    /// Size a new WAL pool may grow to when a transaction's frames do not
    /// fit (default `None`: 64 times `pool_size`, 4 GiB for the default
    /// 64 MiB). The file grows on demand, with its blocks allocated; the
    /// allocator's metadata for the maximum (about 2 MiB per GiB) is laid
    /// out at creation, inside `pool_size`. A transaction that does not
    /// fit the maximum, or a full disk, fails with `SQLITE_FULL` and is
    /// rolled back; a maximum whose metadata does not fit `pool_size`
    /// fails the open (`SQLITE_CANTOPEN`, the reason in [`last_error`]).
    pub max_pool_size: Option<u64>,
    /// Bytes per block of the log (default 8 KiB, NVWAL's).
    pub block_size: u64,
    /// Differential frames (default); `false` writes whole pages, as
    /// SQLite's own WAL does (a baseline for benchmarks).
    pub differential: bool,
    /// Emulated NVM latencies of the pool (default none).
    pub nvm_latency: NvmLatency,
    /// The pool's persistence backend (default `Pmem`: cache-line flushes
    /// and fences; `Msync` for a pool on a disk).
    pub backend: Backend,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            pool_size: 64 << 20,
            max_pool_size: None,
            block_size: 8 << 10,
            differential: true,
            nvm_latency: NvmLatency::default(),
            backend: Backend::Pmem,
        }
    }
}

impl Config {
    /// Size of new pools.
    pub fn pool_size(mut self, bytes: u64) -> Self {
        self.pool_size = bytes;
        self
    }

    /// Size new pools may grow to.
    pub fn max_pool_size(mut self, bytes: u64) -> Self {
        self.max_pool_size = Some(bytes);
        self
    }

    /// The size new pools may grow to: [`Config::max_pool_size`], or 64
    /// times `pool_size` (kept below the engine's bound,
    /// [`rewind::MAX_POOL`]), never less than `pool_size`.
    pub fn pool_max(&self) -> u64 {
        self.max_pool_size
            .unwrap_or(self.pool_size.saturating_mul(64).min(rewind::MAX_POOL - 1))
            .max(self.pool_size)
    }

    /// The configuration of a new WAL pool. Redo: the blocks' rare link
    /// and free transactions commit as groups of the commit ring, and the
    /// next commit's unlogged frame copy drains the ring only if a group
    /// wrote one of its lines.
    pub(crate) fn pool_config(&self) -> rewind::PoolConfig {
        rewind::PoolConfig::default()
            .policy(rewind::Policy::Redo)
            .backend(self.backend)
            .nvm_latency(self.nvm_latency)
            .max_size(self.pool_max())
    }

    /// Bytes per block (at least 4 KiB, a multiple of 64).
    pub fn block_size(mut self, bytes: u64) -> Self {
        self.block_size = bytes;
        self
    }

    /// Differential or whole-page frames.
    pub fn differential(mut self, on: bool) -> Self {
        self.differential = on;
        self
    }

    /// Emulated NVM latencies.
    pub fn nvm_latency(mut self, l: NvmLatency) -> Self {
        self.nvm_latency = l;
        self
    }

    /// The pool's backend.
    pub fn backend(mut self, b: Backend) -> Self {
        self.backend = b;
        self
    }
}

/// Why a VFS could not be registered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegisterError {
    /// SQLite has this crate's VFS of this name registered already.
    #[error("a VFS named {name:?} is registered already (register each name once)")]
    AlreadyRegistered {
        /// The name.
        name: String,
    },
    /// The name is empty or holds a NUL byte.
    #[error("VFS name {name:?} is empty or holds a NUL byte")]
    BadName {
        /// The name.
        name: String,
    },
    /// SQLite has a VFS of this name already (one of its own, such as
    /// `unix`, or one another library registered): SQLite would find that
    /// one, never this one.
    #[error("SQLite has a VFS named {name:?} already; choose another name")]
    NameTaken {
        /// The name.
        name: String,
    },
    /// The configuration is out of range.
    #[error("block size {block_size}: expected a multiple of 64 of at least 4096")]
    BadBlockSize {
        /// What was given.
        block_size: u64,
    },
    /// A [`Config`] field is out of range, or does not fit with another.
    #[error("Config::{field} = {value}: expected {expected}")]
    BadConfig {
        /// The field, as `Config` names it.
        field: &'static str,
        /// What was given.
        value: u64,
        /// What would be accepted.
        expected: String,
    },
    /// The backend keeps no file ([`Backend::Sim`], the engine's simulated
    /// persistence domain in memory): a WAL pool is a file beside the
    /// database.
    #[error("Config::backend = {backend:?}: expected Pmem or Msync (a WAL pool is a file)")]
    BadBackend {
        /// What was given.
        backend: Backend,
    },
    /// The default VFS's file structure is larger than this VFS leaves it.
    #[error("the default VFS's files take {bytes} bytes, more than the 512 this VFS leaves them")]
    DefaultVfsFileTooLarge {
        /// Its `szOsFile`.
        bytes: usize,
    },
    /// No pool could be made with this configuration (the engine's
    /// reason: a maximum whose allocator metadata does not fit the pool's
    /// first size, say).
    #[error("no WAL pool can be made with this configuration: {0}")]
    Pool(#[source] rewind::Error),
    /// SQLite has no default VFS to keep the database files with.
    #[error("SQLite has no default VFS")]
    NoDefaultVfs,
    /// sqlite3_vfs_register failed.
    #[error("sqlite3_vfs_register failed with code {code}")]
    Sqlite {
        /// SQLite's result code.
        code: i32,
    },
}

/// Registers a SQLite VFS named `name` that keeps each database's WAL in a
/// rewind pool beside it. Open databases with it by name
/// (`Connection::open_with_flags_and_vfs`) and set `PRAGMA
/// journal_mode=WAL`.
///
/// Refused at once, before any database is opened: a name that is empty,
/// holds a NUL byte or is SQLite's already ([`RegisterError::NameTaken`]),
/// and a configuration no pool could be made of: a pool under 1 MiB, a
/// pool or a maximum of 256 TiB or more ([`rewind::MAX_POOL`]), a
/// pool size and maximum no pool can be laid out with
/// ([`RegisterError::Pool`]: the maximum's allocator metadata must fit
/// the first size beside the log), a block size that is not a multiple of
/// 64 of at least 4096 or that the heap of a pool of the maximum size
/// ([`Config::pool_max`]) could not hold twice, an emulated NVM latency
/// past [`NvmLatency::MAX_NS`] (1 ms) per write or per fence, and
/// [`Backend::Sim`] ([`RegisterError::BadBackend`]). Before, the last two
/// were taken: `PRAGMA journal_mode = WAL` said `wal`, writing WAL mode
/// into the database file, and from then on every statement failed with
/// `SQLITE_CANTOPEN` (the pool's "invalid NVM write latency", "invalid
/// backend" in [`last_error`]).
///
/// A name whose VFS the program unregistered from SQLite
/// (`sqlite3_vfs_unregister`) may be registered again, with any
/// configuration; connections opened before keep the VFS they opened with.
pub fn register(name: &str, cfg: &Config) -> Result<(), RegisterError> {
    if !log::block_size_shaped(cfg.block_size) {
        return Err(RegisterError::BadBlockSize {
            block_size: cfg.block_size,
        });
    }
    // The engine's own least pool size, found here rather than at the
    // first WAL open.
    let least = rewind::MIN_POOL;
    if cfg.pool_size < least {
        return Err(RegisterError::BadConfig {
            field: "pool_size",
            value: cfg.pool_size,
            expected: format!("at least 1 MiB ({least})"),
        });
    }
    let bound = rewind::MAX_POOL;
    if cfg.pool_size >= bound {
        return Err(RegisterError::BadConfig {
            field: "pool_size",
            value: cfg.pool_size,
            expected: format!("below 256 TiB ({bound})"),
        });
    }
    if cfg.backend == Backend::Sim {
        return Err(RegisterError::BadBackend {
            backend: cfg.backend,
        });
    }
    for (field, ns) in [
        ("nvm_latency.write_ns", cfg.nvm_latency.write_ns),
        ("nvm_latency.fence_ns", cfg.nvm_latency.fence_ns),
    ] {
        if ns > NvmLatency::MAX_NS {
            return Err(RegisterError::BadConfig {
                field,
                value: ns,
                expected: format!("at most {} ns (1 ms)", NvmLatency::MAX_NS),
            });
        }
    }
    let max = cfg.pool_max();
    if max >= bound {
        return Err(RegisterError::BadConfig {
            field: "max_pool_size",
            value: max,
            expected: format!("below 256 TiB ({bound})"),
        });
    }
    // What the first open would find: a pool that cannot be laid out, or
    // a heap at the maximum size that cannot hold two blocks.
    let heap = (cfg.pool_config())
        .max_heap(cfg.pool_size)
        .map_err(RegisterError::Pool)?;
    if cfg.block_size > heap / 2 {
        return Err(RegisterError::BadConfig {
            field: "block_size",
            value: cfg.block_size,
            expected: format!(
                "at most half the heap of a pool of max_pool_size ({max}), {} bytes",
                heap / 2
            ),
        });
    }
    vfs::register(name, cfg)
}
