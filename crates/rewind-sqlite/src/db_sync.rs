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
use std::sync::Arc;

use parking_lot::Mutex;

/// A file's identity: device and inode (two names of one file, a symbolic
/// or hard link, share the locks and so the descriptor).
pub(crate) type FileId = (u64, u64);

struct Held {
    /// Handles of the database file open through the VFS.
    handles: usize,
    /// The descriptor syncs use, opened at the first. Locked through each
    /// sync (which the registry's lock is not: an `fdatasync` of one
    /// database held up every other database's opens and closes).
    sync: Arc<Mutex<Option<File>>>,
}

/// Database files open through the VFS in this process, by identity.
static HELD: crate::vfs::Registry<HashMap<FileId, Held>> = crate::vfs::Registry::new();

/// Lets go of every database file held without closing its descriptor:
/// in a child forked while they were open, they are its parent's
/// (`vfs::after_fork`), and closing a descriptor would drop this
/// process's locks on the file.
pub(crate) fn forget_all() {
    HELD.renew();
}

/// The identity of the file at `path`.
pub(crate) fn id_of(path: &Path) -> std::io::Result<FileId> {
    let m = std::fs::metadata(path)?;
    Ok((m.dev(), m.ino()))
}

/// Counts a handle of the database file `id` (opened by the default VFS).
pub(crate) fn hold(id: FileId) {
    HELD.lock()
        .entry(id)
        .or_insert_with(|| Held {
            handles: 0,
            sync: Arc::default(),
        })
        .handles += 1;
}

/// Opens the descriptor syncs of the database file `id` use, if it has
/// none, while `path` names that file: called as its WAL opens, so that a
/// database renamed or deleted while open is still synced at a WAL
/// restart (before, the sync opened it by name then, found nothing or
/// another file, and every write after a checkpoint failed with
/// `SQLITE_IOERR`). Not at every open of a database file: one in a
/// rollback mode would hold a second descriptor for nothing.
pub(crate) fn prepare(id: FileId, path: &Path) {
    let slot = HELD.lock().get(&id).map(|h| h.sync.clone());
    if let Some(slot) = slot {
        let mut file = slot.lock();
        if file.is_none() {
            *file = File::open(path)
                .ok()
                .filter(|f| f.metadata().is_ok_and(|m| (m.dev(), m.ino()) == id));
        }
    }
}

/// Lets go of a handle counted by [`hold`], after the default VFS closed
/// it; the last one closes the sync descriptor (no lock is left to drop),
/// under the registry's lock, so that no handle of the file opened after
/// it takes a lock this close would drop (a sync of this file in flight is
/// waited for first).
pub(crate) fn release(id: FileId) {
    let mut held = HELD.lock();
    if let Some(h) = held.get_mut(&id) {
        h.handles -= 1;
        if h.handles == 0 {
            let h = held.remove(&id).expect("found above");
            drop(h.sync.lock().take());
        }
    }
}

/// Makes the database file at `db` durable (its data: `fdatasync`). While
/// the process has it open through the VFS, through the descriptor kept
/// for it (its own lock is held meanwhile, so no close can race the sync;
/// the registry's is not, so other files' opens and closes go on);
/// otherwise through one of its own (the process then holds no lock on it
/// to lose).
pub(crate) fn sync_data(db: &Path) -> std::io::Result<()> {
    let id = id_of(db)?;
    let slot = HELD.lock().get(&id).map(|h| h.sync.clone());
    match slot {
        Some(slot) => {
            let mut file = slot.lock();
            if file.is_none() {
                *file = Some(File::open(db)?);
            }
            file.as_ref().expect("opened above").sync_data()
        }
        None => File::open(db)?.sync_data(),
    }
}

/// Makes the database file `id` durable, through the descriptor kept for
/// it while the process has it open through the VFS, whatever name it has
/// now; by `path` when it has none (not open, or its descriptor could not
/// be opened).
pub(crate) fn sync_file(id: FileId, path: &Path) -> std::io::Result<()> {
    let slot = HELD.lock().get(&id).map(|h| h.sync.clone());
    if let Some(slot) = slot {
        if let Some(f) = slot.lock().as_ref() {
            return f.sync_data();
        }
    }
    sync_data(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;
    use std::time::Duration;

    /// While one file's sync is in flight (its descriptor's lock held, as
    /// `sync_data` holds it through the `fdatasync`), another file's
    /// handles are counted and let go: the registry is free. Before, the
    /// sync held the registry's lock, and they waited for it.
    #[test]
    fn a_sync_in_flight_holds_up_only_its_own_file() {
        let (a, b) = ((u64::MAX, 1), (u64::MAX, 2));
        hold(a);
        let slot = HELD.lock().get(&a).unwrap().sync.clone();
        let in_flight = slot.lock();
        let (done, done_rx) = channel();
        std::thread::spawn(move || {
            hold(b);
            release(b);
            done.send(()).unwrap();
        });
        done_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("another file's hold waited for a sync in flight");
        drop(in_flight);
        release(a);
        assert!(HELD.lock().get(&a).is_none() && HELD.lock().get(&b).is_none());
    }
}
