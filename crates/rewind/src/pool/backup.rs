//! Online backup: [`Pool::backup_to`] writes a copy of an open pool that
//! is one committed state, while other threads go on using the pool.
//!
//! A plain `cp` of a live pool is not a backup: it reads the file's pages
//! at different instants, so it can hold a log record from one moment and
//! the data it describes from another (the black-box test of issue 21: of
//! 64 such copies, 24 held pointers to unallocated blocks). `backup_to`
//! closes the pool's transaction gate (`gate`): it waits for the
//! transactions running (and single atomic writes) to end, holds new ones
//! at their start, drains redo-async's write-back, and copies the pool's
//! bytes from the mapping while nothing changes them. Nothing is half done
//! then, so the copy is the state after the last commit: opening it runs
//! recovery over finished transactions only. The pause is the time to copy
//! the pool's bytes into the page cache (about 1 ms per MiB on tmpfs);
//! the copy's file is allocated before and made durable after it, outside
//! the pause. The copy is built in an unnamed file (`O_TMPFILE`; where the
//! filesystem lacks it, under a temporary name) and named once whole, so a
//! crash leaves no backup or a whole one, and a process killed midway
//! leaves no file behind; its open stamp is 0.

use std::path::Path;

use super::{file, Pool};
use crate::error::Error;
use crate::format::meta;

/// Bytes copied per read of the mapping.
const STEP: u64 = 1 << 20;

/// A pool's gate entered by this thread.
pub(super) type Gate<'a> = super::gate::Entered<'a>;

impl Pool {
    /// Writes a consistent copy of this pool to `path` (which must not
    /// exist) while other threads keep using the pool, pausing them only
    /// while the bytes are copied. The copy opens as the state after the
    /// last transaction that committed before the pause. Called inside a
    /// transaction or a [`read_isolated`](Self::read_isolated) read of
    /// this pool, it is [`Error::TxMisuse`]: it would wait for a
    /// transaction that waits for the caller.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use rewind::{Pool, PoolConfig, OpenOptions};
    /// let pool = Pool::create(dir.path().join("live.pool"), "doc", 4 << 20, &PoolConfig::default())?;
    /// let n = pool.transaction(|tx| tx.root::<u64>())?;
    /// pool.transaction(|tx| tx.write(n, &5))?;
    /// pool.backup_to(dir.path().join("backup.pool"))?;
    /// let copy = Pool::open(dir.path().join("backup.pool"), "doc", &OpenOptions::default())?;
    /// assert_eq!(copy.read(n)?, 5);
    /// # Ok::<(), rewind::Error>(())
    /// ```
    pub fn backup_to(&self, path: impl AsRef<Path>) -> Result<(), Error> {
        let path = path.as_ref();
        self.eng.usable()?;
        if super::nesting::InTransaction::active(self.nesting_key()) {
            return Err(Error::TxMisuse(
                "backup_to inside a transaction of the same pool would wait for itself",
            ));
        }
        // Its read may hold a lock shared that a transaction the backup
        // waits for is waiting for.
        if super::nesting::InRead::inside(self.nesting_key()) {
            return Err(Error::TxMisuse(
                "backup_to inside an isolated read of the same pool would wait for itself",
            ));
        }
        let size = self.eng.dom.len();
        let (f, tmp) = file::create_temp(path, size)?;
        let r = self
            .copy_quiesced(path, &f)
            .and_then(|()| file::publish(&f, &tmp, path));
        if r.is_err() {
            tmp.remove();
        }
        r
    }

    /// Enters the gate, unless this thread is inside already (a call
    /// inside a transaction's closure: a transaction is inside from its
    /// start to its end, see `nesting`). A backup waiting for the gate
    /// holds new entries back, so it is not starved by transactions that
    /// overlap (except inside an isolated read, below).
    /// On a thread whose thread-local storage is being destroyed it is
    /// `TxMisuse` (see `nesting::thread_usable`).
    pub(super) fn enter(&self) -> Result<Option<Gate<'_>>, Error> {
        super::nesting::thread_usable()?;
        let key = self.nesting_key();
        if super::nesting::InTransaction::active(key) {
            return Ok(None);
        }
        // Inside an isolated read (a `checkpoint` or a `grow` there), past
        // a waiting backup: the read may hold a lock shared that a
        // transaction the backup waits for is waiting for.
        let gate = self.gate.enter(super::nesting::InRead::inside(key));
        super::nesting::watch_thread();
        Ok(Some(gate))
    }

    /// Copies the pool's bytes into `f` under the transaction gate, at
    /// the pool's size once the gate is held (a transaction or a `grow`
    /// that the backup waited for may have grown the file: a copy of the
    /// size before would end short of the heap its header names).
    fn copy_quiesced(&self, path: &Path, f: &std::fs::File) -> Result<(), Error> {
        self.gate.closed(|| self.copy_closed(path, f))
    }

    /// [`copy_quiesced`](Self::copy_quiesced) with the gate closed.
    fn copy_closed(&self, path: &Path, f: &std::fs::File) -> Result<(), Error> {
        use std::os::unix::fs::FileExt;
        let size = self.eng.dom.len();
        f.set_len(size).map_err(|e| file::no_space(path, size, e))?;
        // The blocks of what the pool grew by while the backup waited
        // (the copy's first size was allocated at its create): a full disk
        // is `NoSpace` here, asked before anything is taken.
        file::allocate_holes(path, f, size)?;
        self.eng.sync()?;
        let mut buf = vec![0u8; STEP.min(size) as usize];
        let mut at = 0;
        while at < size {
            let n = (size - at).min(STEP) as usize;
            self.eng.dom.read(at, &mut buf[..n])?;
            if at <= meta::STAMP && meta::STAMP < at + n as u64 {
                // The copy is closed: no opener's stamp.
                let s = (meta::STAMP - at) as usize;
                buf[s..s + 8].fill(0);
            }
            f.write_all_at(&buf[..n], at)
                .map_err(|e| file::no_space(path, size, e))?;
            at += n as u64;
        }
        Ok(())
    }
}
