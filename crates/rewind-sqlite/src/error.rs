//! Errors of the WAL in a pool. The VFS turns them into SQLite result codes
//! (and keeps the last one for [`last_error`](crate::last_error)).

use std::path::PathBuf;

/// What went wrong with a database's WAL pool.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The pool failed (full, in use by another process, damaged, I/O).
    #[error(transparent)]
    Pool(#[from] rewind::Error),
    /// The pool's root is not a WAL log.
    #[error("not a rewind-sqlite WAL pool: root magic {found:#018x} (the file beside the database is another pool)")]
    NotAWalPool {
        /// The magic found.
        found: u64,
    },
    /// A WAL pool of another version of this crate's format.
    #[error("WAL pool format version {found}, this build reads version {expected} (checkpoint the database with the build that wrote it, then remove the pool)")]
    UnsupportedVersion {
        /// The version found.
        found: u64,
        /// The version this build writes.
        expected: u64,
    },
    /// A structure in the pool is inconsistent.
    #[error("WAL pool damaged: {what}")]
    Damaged {
        /// What was found.
        what: &'static str,
    },
    /// SQLite wrote what a WAL file never holds at this place.
    #[error("unexpected WAL write of {len} bytes at offset {offset}: {why}")]
    UnexpectedWrite {
        /// File offset.
        offset: u64,
        /// Bytes.
        len: usize,
        /// Why it is refused.
        why: &'static str,
    },
    /// A WAL file of stock SQLite (or of another VFS) lies beside the
    /// database: its frames may hold committed transactions this VFS would
    /// not see, so the database is not opened through it.
    #[error("{path}: a WAL file of {len} bytes not kept by this VFS (stock SQLite's?) lies beside the database, and its frames may hold committed transactions; open the database once without this VFS and checkpoint it (PRAGMA wal_checkpoint(TRUNCATE)), then open it through this VFS")]
    ForeignWal {
        /// The stock WAL file.
        path: PathBuf,
        /// Its size.
        len: u64,
    },
    /// A transaction's frames found no room in the pool (`SQLITE_FULL`)
    /// while the WAL still held frames of committed transactions: SQLite's
    /// checkpoints could not copy them all while a connection read an
    /// older snapshot, and no later commit runs the automatic one. Once no
    /// connection reads an older snapshot, a checkpoint by hand (`PRAGMA
    /// wal_checkpoint`) frees their blocks and writes go on.
    #[error("{source}; the WAL holds {frames} frames of committed transactions: once no connection reads an older snapshot, a checkpoint (PRAGMA wal_checkpoint) frees their blocks, and writes go on")]
    Full {
        /// Committed frames in the WAL.
        frames: usize,
        /// The pool's error.
        #[source]
        source: rewind::Error,
    },
    /// A transaction's frames found no room in the pool, and their changed
    /// bytes alone pass the heap the pool has at its maximum size
    /// ([`Config::max_pool_size`](crate::Config::max_pool_size)): no
    /// checkpoint makes room for it (`SQLITE_FULL`).
    #[error("{source}; this transaction's changed pages take at least {bytes} bytes of log, more than the {max_heap} bytes of heap the WAL pool has at its maximum size, so no checkpoint makes room for it: commit it in smaller pieces, or register the VFS with a larger Config::max_pool_size")]
    TooLarge {
        /// A lower bound of the bytes of records the transaction needs.
        bytes: u64,
        /// The pool's heap at its maximum size.
        max_heap: u64,
        /// The pool's error.
        #[source]
        source: rewind::Error,
    },
    /// SQLite asked to delete a WAL this process has open: it does so for
    /// a database file it finds empty, which one with an open WAL is not
    /// unless the file was deleted or replaced while a connection had it
    /// open. The WAL is kept (`SQLITE_IOERR_DELETE`).
    #[error("{db}: SQLite asked to delete the WAL of this database, which a connection of this process has open (was the database file deleted or replaced while in use?); the WAL is kept until that connection closes")]
    WalOpen {
        /// The database file.
        db: PathBuf,
    },
    /// The WAL of the database is open in this process on a backend that
    /// does not make commits durable as this connection's VFS asks (opened
    /// on `Pmem` by a connection of another VFS, where this one's is
    /// `Msync`): the connection is refused until that WAL is closed.
    #[error("{db}: its WAL is open in this process on the {open} backend (by a connection of another VFS), and this connection's VFS asks for {wanted}, whose commits it would not make durable: open the database through one VFS, or close the other connections first")]
    BackendMismatch {
        /// The database file.
        db: PathBuf,
        /// The backend the open WAL runs on.
        open: rewind::Backend,
        /// The backend this connection's VFS names.
        wanted: rewind::Backend,
    },
    /// A transaction's frames without SQLite's commit flag on the last.
    #[error("a WAL commit whose last frame has no commit flag")]
    NoCommitFlag,
    /// The database file could not be made durable before a WAL restart.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}
