//! Making a database file durable without dropping SQLite's locks on it.
//!
//! Before a WAL restart, and before the pool of a closed WAL is removed, the
//! database file must be durable (`fdatasync`), whatever `PRAGMA
//! synchronous` says. The default VFS locks the database file with POSIX
//! `fcntl` locks, which belong to the process and the file, not to a
//! descriptor: closing *any* descriptor of the file drops every lock the
//! process holds on it (the default VFS keeps its own descriptors open
//! until its locks are released, for this reason). A sync through a
//! descriptor opened and closed for the purpose therefore took away the
//! `SHARED` lock every WAL-mode connection holds, and the `EXCLUSIVE` lock
//! under which SQLite checkpoints and deletes a WAL at its last close: in
//! the moment between that sync and the pool's removal, another process
//! could take the lock, open the pool about to be unlinked, and commit
//! into a file no later opener would see.
//!
//! So the descriptor a sync uses is kept open for as long as this process
//! has the database file open through the VFS ([`hold`] when the default
//! VFS opens it, [`release`] after it closes it): it is closed only when
//! the process holds no SQLite lock on the file.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::LazyLock;

use parking_lot::Mutex;

/// A file's identity: device and inode (two names of one file, a symbolic
/// or hard link, share the locks and so the descriptor).
pub(crate) type FileId = (u64, u64);

struct Held {
    /// Handles of the database file open through the VFS.
    handles: usize,
    /// The descriptor syncs use, opened at the first.
    sync: Option<File>,
}

/// Database files open through the VFS in this process, by identity.
static HELD: LazyLock<Mutex<HashMap<FileId, Held>>> = LazyLock::new(Default::default);

/// The identity of the file at `path`.
pub(crate) fn id_of(path: &Path) -> std::io::Result<FileId> {
    let m = std::fs::metadata(path)?;
    Ok((m.dev(), m.ino()))
}

/// Counts a handle of the database file `id` (opened by the default VFS).
pub(crate) fn hold(id: FileId) {
    HELD.lock()
        .entry(id)
        .or_insert(Held {
            handles: 0,
            sync: None,
        })
        .handles += 1;
}

/// Lets go of a handle counted by [`hold`], after the default VFS closed
/// it; the last one closes the sync descriptor (no lock is left to drop).
pub(crate) fn release(id: FileId) {
    let mut held = HELD.lock();
    if let Some(h) = held.get_mut(&id) {
        h.handles -= 1;
        if h.handles == 0 {
            held.remove(&id);
        }
    }
}

/// Makes the database file at `db` durable (its data: `fdatasync`). While
/// the process has it open through the VFS, through the descriptor kept
/// for it (the registry's lock is held meanwhile, so no close can race the
/// sync); otherwise through one of its own (the process then holds no lock
/// on it to lose).
pub(crate) fn sync_data(db: &Path) -> std::io::Result<()> {
    let id = id_of(db)?;
    let mut held = HELD.lock();
    match held.get_mut(&id) {
        Some(h) => {
            if h.sync.is_none() {
                h.sync = Some(File::open(db)?);
            }
            h.sync.as_ref().expect("opened above").sync_data()
        }
        None => {
            drop(held);
            File::open(db)?.sync_data()
        }
    }
}
