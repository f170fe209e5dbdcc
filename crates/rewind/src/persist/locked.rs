//! A file and the advisory lock it may hold, released explicitly when
//! dropped (see [`Locked`]). The lock is taken where a pool file is opened
//! (`pool/file.rs`); a `Domain` keeps the file for the mapping's lifetime.

use std::fs::File;

/// An open pool file whose advisory lock (if it holds one) is released
/// explicitly when it is dropped, on every path: a pool's close, an open
/// that fails after the lock, an inspection's shared lock.
///
/// The lock belongs to the open file description, which a child forked
/// by any thread of the process shares until it execs (or exits): closing
/// this handle alone would leave the pool locked for that while, and an
/// open right after a close could fail with `PoolInUse` (seen as 1 run in
/// 40 of `rewind-sqlite`'s `workloads` tests, whose other tests spawn
/// processes). An unlock through any handle releases it for the
/// description, the child's copy included. Unlocking a file that holds no
/// lock does nothing.
pub(crate) struct Locked(Option<File>);

impl Locked {
    /// Takes over `file` and whatever lock it holds.
    pub(crate) fn new(file: File) -> Locked {
        Locked(Some(file))
    }

    /// Gives the file up with its lock, to be taken over again by
    /// [`Locked::new`] (a `Domain` takes its file as a plain `File`, and
    /// does so first).
    pub(crate) fn into_file(mut self) -> File {
        self.0
            .take()
            .expect("a Locked holds its file until dropped")
    }
}

impl std::ops::Deref for Locked {
    type Target = File;

    fn deref(&self) -> &File {
        self.0
            .as_ref()
            .expect("a Locked holds its file until dropped")
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        if let Some(f) = &self.0 {
            let _ = f.unlock();
        }
    }
}
