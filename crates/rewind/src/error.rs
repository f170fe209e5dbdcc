//! Errors. Every variant says what was found, what was expected, and where
//! that helps, how to fix it. Bad input never panics.

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Everything that can go wrong in `rewind`. `Clone`, so a doomed
/// transaction can hand the error that doomed it to its commit.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system call on the pool file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// Another handle (this process or another) has the pool open. A pool
    /// has one opener at a time; inspection waits for none and says so.
    #[error(
        "{path}: the pool is in use by another opener (in this or another process); close it first"
    )]
    PoolInUse {
        /// The file.
        path: PathBuf,
    },
    /// The filesystem has no room for a new pool (or backup) of this
    /// size, or the file may not be that long (`EFBIG`: the process's
    /// `RLIMIT_FSIZE`, or the filesystem's largest file).
    #[error(
        "{path}: no space left for a pool of {needed} bytes (free space, or create a smaller pool)"
    )]
    NoSpace {
        /// The file (removed again).
        path: PathBuf,
        /// Bytes the pool needs.
        needed: u64,
    },
    /// The filesystem has no room to grow the pool's file: the pool is
    /// unchanged and stays usable (free space, or allocate less).
    #[error("no space left to grow the pool by {needed} bytes (the pool is unchanged; free space, or allocate less)")]
    NoSpaceToGrow {
        /// Bytes the growth needed.
        needed: u64,
    },
    /// The path names something other than a regular file.
    #[error("{path}: is {kind}, not a pool file")]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What it is ("a FIFO", "a directory", ...).
        kind: &'static str,
    },
    /// The file is shorter than a pool header, or than the size its header records.
    #[error("{path}: file is {found} bytes but {expected} bytes are needed ({what}); the pool is truncated or not a pool")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// What needed the bytes.
        what: &'static str,
        /// Bytes present.
        found: u64,
        /// Bytes needed.
        expected: u64,
    },
    /// The header does not start with the pool magic.
    #[error("{path}: not a rewind pool (magic {found:02x?}, expected {expected:02x?})")]
    NotAPool {
        /// The file.
        path: PathBuf,
        /// Bytes found.
        found: [u8; 8],
        /// The magic.
        expected: [u8; 8],
    },
    /// A checksum does not match the bytes it covers.
    #[error("{what} at offset {offset}: checksum {stored:#010x} stored, {computed:#010x} computed; the pool is damaged")]
    ChecksumMismatch {
        /// Which structure.
        what: &'static str,
        /// Its offset in the pool.
        offset: u64,
        /// The checksum stored.
        stored: u32,
        /// The checksum of the bytes.
        computed: u32,
    },
    /// The pool was written by an unsupported format version.
    #[error("pool format version {found} is not supported (this build reads version {supported})")]
    UnsupportedVersion {
        /// Version in the header.
        found: u32,
        /// Version this build reads.
        supported: u32,
    },
    /// The layout name given at open differs from the one given at create.
    #[error("layout mismatch: pool was created with layout `{found}`, opened as `{expected}`")]
    LayoutMismatch {
        /// Layout in the header.
        found: String,
        /// Layout asked for.
        expected: String,
    },
    /// A header field holds an impossible value.
    #[error("invalid header field `{field}`: {value} ({reason})")]
    BadHeader {
        /// Field name.
        field: &'static str,
        /// The value found.
        value: u64,
        /// Why it is invalid.
        reason: &'static str,
    },
    /// A configuration value is out of range.
    #[error("invalid {what}: {value} (expected {expected})")]
    InvalidConfig {
        /// Which setting.
        what: &'static str,
        /// The value given.
        value: String,
        /// The accepted range.
        expected: &'static str,
    },
    /// An access falls outside the pool.
    #[error("access [{offset}, {offset}+{len}) is outside the pool of {size} bytes")]
    OutOfBounds {
        /// Start offset.
        offset: u64,
        /// Length.
        len: u64,
        /// Pool size.
        size: u64,
    },
    /// The heap has no free block large enough (`requested` is
    /// `u64::MAX` for a size that overflows, an array's say).
    #[error("out of pool memory: {}", out_of_memory(*requested))]
    OutOfMemory {
        /// Bytes asked for.
        requested: u64,
    },
    /// The log has no room for the records and cannot grow: the heap has
    /// no free chunk left. The transaction is rolled back.
    #[error("log full: {needed} more bytes of log needed, {free} free, and the heap has no free chunk to grow the log into (commit smaller transactions, free memory, or create a larger pool)")]
    LogFull {
        /// Bytes needed.
        needed: u64,
        /// Bytes free (not reserved for rollback).
        free: u64,
    },
    /// A log structure is inconsistent in a way recovery cannot repair.
    #[error("log corrupt at offset {offset}: {reason}")]
    LogCorrupt {
        /// Where.
        offset: u64,
        /// What is wrong.
        reason: &'static str,
    },
    /// The meta page (root object words, reserved bytes) is damaged.
    #[error("meta page corrupt at offset {offset}: {reason}")]
    MetaCorrupt {
        /// Where.
        offset: u64,
        /// What is wrong.
        reason: &'static str,
    },
    /// Allocator metadata is inconsistent.
    #[error("heap metadata corrupt at offset {offset}: {reason}")]
    HeapCorrupt {
        /// Where.
        offset: u64,
        /// What is wrong.
        reason: &'static str,
    },
    /// A read or write aimed outside the heap (at the header, log or
    /// allocator).
    #[error("access to [{offset}, {offset}+{len}) is outside the heap [{heap_start}, {heap_end}); only allocated memory may be read or written")]
    NotInHeap {
        /// Start offset.
        offset: u64,
        /// Length.
        len: u64,
        /// Heap start.
        heap_start: u64,
        /// Heap end.
        heap_end: u64,
    },
    /// A read or write through the null pointer (offset 0, the header).
    #[error("access of {len} bytes through a null pointer")]
    NullPointer {
        /// Bytes asked for.
        len: u64,
    },
    /// An access that does not lie inside one allocated heap block: memory
    /// never allocated, a block freed (in this transaction or before), or a
    /// range that runs past the end of its block into the next.
    #[error("access to [{offset}, {offset}+{len}) is not inside one allocated block ({reason})")]
    NotAllocated {
        /// Start offset.
        offset: u64,
        /// Length.
        len: u64,
        /// Why.
        reason: &'static str,
    },
    /// `free` of an offset that is not the start of an allocated block.
    #[error("free of offset {offset}, which is not an allocated block ({reason})")]
    InvalidFree {
        /// The offset.
        offset: u64,
        /// Why.
        reason: &'static str,
    },
    /// The root object exists with another size than the type asked for.
    #[error("root object is {found} bytes, but a {expected}-byte type was asked for")]
    RootMismatch {
        /// Stored size.
        found: u64,
        /// Requested size.
        expected: u64,
    },
    /// A named root exists with another type than the one asked for.
    #[error("root `{name}` holds {found}, but it was opened as {expected}")]
    TypeMismatch {
        /// The root's name.
        name: String,
        /// The type recorded in the pool (its fingerprint, displayed).
        found: String,
        /// The type asked for.
        expected: String,
    },
    /// `open_or_create` found a pool whose settings differ from the ones
    /// asked for (it never silently opens a pool unlike the one asked for).
    #[error("the existing pool's {what} is {found}, but {asked} was asked for (open it with Pool::open, or ask for what it has)")]
    ConfigMismatch {
        /// Which setting.
        what: &'static str,
        /// What the pool has.
        found: String,
        /// What was asked for.
        asked: String,
    },
    /// An earlier commit or rollback failed midway (an I/O error, say), so
    /// this handle no longer knows the pool's state. Close it and reopen
    /// the pool: recovery finishes or undoes that transaction.
    #[error("the pool handle is poisoned: a commit or rollback failed midway ({cause}); close and reopen the pool to recover it")]
    Poisoned {
        /// What failed.
        cause: String,
    },
    /// A savepoint that cannot be rolled back to here.
    #[error("invalid savepoint: {reason}")]
    InvalidSavepoint {
        /// Why.
        reason: &'static str,
    },
    /// Returned by a transaction's closure to roll it back when the program
    /// has no error of its own to give (the library never returns it).
    #[error("the transaction was rolled back on request")]
    Aborted,
    /// A transaction was used after it ended, or nested illegally.
    #[error("transaction misuse: {0}")]
    TxMisuse(&'static str),
    /// `Pool::transaction` (or `atomic_write`) was called on a thread that is
    /// already inside a transaction of the same pool. The inner one could
    /// commit and then be undone by the outer one's rollback, so it is
    /// refused: do the work in the outer transaction's `Tx`. Also inside the
    /// read of a `Pool::read_isolated` of the same pool, which may hold a
    /// lock shared that the transaction would wait for; and a
    /// `Pool::read_isolated` (a collection's read through `&Pool`) inside a
    /// transaction of the same pool, which would see that transaction's
    /// stores under some policies and not others: read through its `Tx`.
    #[error("a transaction or isolated read of this pool is already running on this thread: use its Tx instead of starting another")]
    NestedTransaction,
    /// Waiting for the lock at `offset` would never end: the holder waits,
    /// directly or through others, for a lock this transaction holds. The
    /// transaction is doomed and rolls back, releasing its locks; retry it.
    #[error("deadlock on the lock at offset {offset}: this transaction was chosen to roll back; retry it")]
    Deadlock {
        /// The lock's offset.
        offset: u64,
    },
    /// The lock at `offset` was not granted within the pool's lock timeout
    /// (`Pool::set_lock_timeout`). The transaction is doomed and rolls back.
    #[error("the lock at offset {offset} was not granted within {waited_ms} ms (the pool's lock timeout); the transaction rolls back")]
    LockTimeout {
        /// The lock's offset.
        offset: u64,
        /// How long it waited.
        waited_ms: u64,
    },
}

impl Error {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Error {
        Error::Io {
            path: path.to_path_buf(),
            source: Arc::new(source),
        }
    }

    /// The kind of the operating system's error, for an [`Error::Io`]
    /// (`NotFound`: a file removed under an open, `AlreadyExists`...).
    pub fn io_kind(&self) -> Option<std::io::ErrorKind> {
        match self {
            Error::Io { source, .. } => Some(source.kind()),
            _ => None,
        }
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// [`Error::OutOfMemory`]'s reason.
fn out_of_memory(requested: u64) -> String {
    match requested {
        u64::MAX => "the size asked for overflows 64 bits (an array of too many elements?)".into(),
        n => format!(
            "no free block of {n} bytes, and no room to grow the pool to one (free memory, or \
             create the pool with a larger `max_size`)"
        ),
    }
}
