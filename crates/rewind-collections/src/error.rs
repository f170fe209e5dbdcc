//! Errors: the pool's own ([`rewind::Error`], out of memory included) and
//! what a collection finds wrong with its bytes or its arguments.

/// Everything a collection operation can fail with. Converts from
/// [`rewind::Error`], so it can be a transaction closure's error type.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The pool failed: out of memory, log full, an I/O error, or
    /// [`rewind::Error::Aborted`] returned by a closure to roll back.
    #[error(transparent)]
    Pool(#[from] rewind::Error),
    /// The pointer does not lead to a collection of this kind.
    #[error("{what} at offset {offset}: magic {}, expected {} (a pointer to something else, or never created)", magic_text(.found), magic_text(.expected))]
    WrongMagic {
        /// The collection kind expected.
        what: &'static str,
        /// The header's offset.
        offset: u64,
        /// The bytes found.
        found: [u8; 8],
        /// The kind's magic.
        expected: [u8; 8],
    },
    /// The collection was created for keys, values or elements of another
    /// type than the handle's (by size, alignment or stable name: see
    /// [`Stored`](crate::Stored)).
    #[error("{what} at offset {offset} stores {part}s of type {found}, but the handle's {part} type is {expected} (open it with the types it was created with)")]
    TypeMismatch {
        /// The collection kind.
        what: &'static str,
        /// The header's offset.
        offset: u64,
        /// "key", "value" or "element".
        part: &'static str,
        /// The type recorded in the pool: name, size, alignment.
        found: String,
        /// The handle's type: name, size, alignment.
        expected: String,
    },
    /// The collection was written in the layout of an earlier version of
    /// this crate, which this one does not read (rebuild it from the old
    /// version's iteration).
    #[error("{what} at offset {offset} has layout {found}, written by an earlier rewind-collections; this version reads {expected}")]
    UnsupportedLayout {
        /// The collection kind.
        what: &'static str,
        /// The header's offset.
        offset: u64,
        /// The magic found (the old layout's name).
        found: &'static str,
        /// The magic this version writes.
        expected: &'static str,
    },
    /// A node or header holds an impossible value, or (from
    /// `check_invariants`) the structure breaks one of its invariants.
    #[error("{what} at offset {offset} is corrupt: {reason}")]
    Corrupt {
        /// Which structure.
        what: &'static str,
        /// Its offset in the pool.
        offset: u64,
        /// What is wrong.
        reason: &'static str,
    },
    /// A scan through `&Pool` (`iter`, `range`), which takes no lock, met
    /// bytes a transaction was changing or had changed while it read: a
    /// node freed or reused by a commit, a chain grown past the length it
    /// began with. The collection is whole; scan it in a transaction
    /// (`iter_tx`, `range_tx`, which lock it shared) for one consistent
    /// view.
    #[error("{what} at offset {offset} changed during a scan through &Pool, which takes no lock (scan in a transaction, with iter_tx or range_tx, for a consistent view)")]
    Changed {
        /// The collection kind.
        what: &'static str,
        /// Its header's offset.
        offset: u64,
    },
    /// An argument is out of range.
    #[error("invalid {what}: {value} (expected {expected})")]
    InvalidArgument {
        /// Which argument.
        what: &'static str,
        /// The value given.
        value: u64,
        /// The accepted range.
        expected: &'static str,
    },
    /// An index (or a byte range's end) past the end.
    #[error("index {index} is out of bounds for a {what} of length {len}")]
    IndexOutOfBounds {
        /// The collection kind: "vector", "list", "blob".
        what: &'static str,
        /// The index given.
        index: u64,
        /// The collection's length.
        len: u64,
    },
    /// A byte string longer than its type holds.
    #[error("{what}: {len} bytes, but at most {max} fit{}", too_long_hint(.what))]
    TooLong {
        /// The type or collection.
        what: &'static str,
        /// Bytes given.
        len: u64,
        /// The most that fit.
        max: u64,
    },
    /// A list cursor that does not lead to an element of this list: its
    /// element was removed, or it came from another list.
    #[error("list cursor at offset {offset} is not an element of the list at {list}: {reason}")]
    InvalidCursor {
        /// The cursor's node offset.
        offset: u64,
        /// The list's header offset.
        list: u64,
        /// What did not match.
        reason: &'static str,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn corrupt(what: &'static str, offset: u64, reason: &'static str) -> Error {
    Error::Corrupt {
        what,
        offset,
        reason,
    }
}

/// A header's magic for a message: as text when it is printable, naming
/// the collection it belongs to when it is one of this crate's (a handle
/// of the wrong kind is the usual mistake), else its bytes in hex.
fn magic_text(m: &[u8; 8]) -> String {
    const KINDS: [(&[u8; 8], &str); 5] = [
        (b"RWBTREE2", "a B+-tree"),
        (b"RWHASH03", "a hash map"),
        (b"RWVEC002", "a vector"),
        (b"RWLIST04", "a list"),
        (b"RWBLOB01", "a blob"),
    ];
    if let Some((_, kind)) = KINDS.iter().find(|(k, _)| *k == m) {
        return format!("\"{}\" ({kind})", String::from_utf8_lossy(m));
    }
    if m.iter().all(|b| b.is_ascii_graphic()) {
        return format!("\"{}\"", String::from_utf8_lossy(m));
    }
    let hex: String = m.iter().map(|b| format!("{b:02x}")).collect();
    format!("bytes 0x{hex}")
}

/// What to do about a [`Error::TooLong`], where there is something: a
/// larger `N` is only a `FixedBytes`' remedy.
fn too_long_hint(what: &str) -> &'static str {
    match what {
        "FixedBytes" => " (use a larger N, or a Blob)",
        "B+-tree byte string" => " (keep it in a Blob, and its pointer in the map)",
        _ => "",
    }
}
