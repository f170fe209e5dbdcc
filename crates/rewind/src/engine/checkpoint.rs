//! Cache-consistent checkpoints (REWIND §4.6), for the no-force policy.
//!
//! 1. Take the transactions that have finished (their END is in the log and
//!    they are registered); `bound` is the highest END lsn among them.
//! 2. Flush everything they changed, then fence: their effects are durable
//!    in place.
//! 3. Append CHECKPOINT(bound). From now on recovery does not redo any
//!    transaction whose END lsn is at most `bound`.
//! 4. Clear their records, then (after a fence) their END records, then
//!    (after a fence) the CHECKPOINT record. A crash at any point leaves
//!    either records recovery skips, or nothing.
//!
//! Transactions still running keep appending meanwhile; their records are
//! untouched. Under force, records are cleared at commit and a checkpoint
//! only has the deferred END records to clear, which the next append does.

use crate::error::Error;
use crate::log::Draft;
use crate::persist::sites;
use crate::policy::Finished;

use super::Engine;

impl Engine {
    /// Makes the work of every finished transaction durable in place and
    /// clears its log records.
    pub(crate) fn checkpoint(&self) -> Result<(), Error> {
        self.usable()?;
        let _one = self.checkpoint_lock.lock();
        let done = std::mem::take(&mut *self.finished.lock());
        let Some(bound) = done.iter().map(|f| f.end_lsn).max() else {
            return Ok(());
        };
        let d = &self.dom;
        for f in &done {
            for &(off, len) in &f.targets {
                d.flush_at(off, len, sites::CHECKPOINT_FLUSH)?;
            }
        }
        // Their stores persistent before CHECKPOINT says so.
        d.fence_at(sites::CHECKPOINT_FLUSHED)?;
        #[cfg(feature = "testing")]
        if self
            .checkpoint_in_order
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return self.clear_in_order(done);
        }
        let ck = Draft::checkpoint(bound);
        let mut placed = Vec::with_capacity(1);
        // Paid from the space the log holds for one checkpoint, so a full
        // log can always be checkpointed.
        let mut res = self.log.take_checkpoint_reservation();
        let r = self.log.append(d, &[ck], &mut placed, &mut res);
        let u = self.log.unreserve(d, &mut res);
        match (r, u) {
            (Ok(()), u) => u?,
            // The reservation was spent and not held again (see
            // `clear_in_order`): nothing was appended.
            (Err(Error::LogFull { .. }), Ok(())) => return self.clear_in_order(done),
            (Err(e), _) => {
                // Nothing appended, nothing cleared: a later checkpoint
                // clears them.
                self.finished.lock().extend(done);
                return Err(e);
            }
        }
        let cells: Vec<_> = done.iter().flat_map(|f| f.cells.iter().copied()).collect();
        self.log.release(d, &cells, None)?;
        // Every other record's gap persistent before any END's.
        d.fence_at(sites::CHECKPOINT_GAPS)?;
        let ends: Vec<_> = done.iter().map(|f| f.end).collect();
        self.log.release(d, &ends, None)?;
        // The ENDs' gaps persistent before the CHECKPOINT's.
        d.fence_at(sites::CHECKPOINT_ENDS)?;
        self.log.release(d, &[placed[0].cell], None)
    }

    /// A checkpoint whose CHECKPOINT record finds the log full: the
    /// finished transactions' records are cleared one at a time instead,
    /// each after a fence, oldest END first and each transaction's records
    /// in their order before its END (their effects are durable in place
    /// already). A crash then leaves, of those transactions, the latest
    /// records only: their redo stores the values already in place, newest
    /// last. The checkpoint's reservation is held again by the first
    /// forward append after a checkpoint, so a log that a checkpoint left
    /// full before any append succeeded has no room for the record; this
    /// is what still clears it (a fence per record, once).
    fn clear_in_order(&self, mut done: Vec<Finished>) -> Result<(), Error> {
        let d = &self.dom;
        done.sort_by_key(|f| f.end_lsn);
        for (i, f) in done.iter().enumerate() {
            let cleared = f.cells.iter().try_for_each(|&c| {
                self.log.release(d, &[c], None)?;
                d.fence_at(sites::CHECKPOINT_GAPS)
            });
            let cleared = cleared
                .and_then(|()| self.log.release(d, &[f.end], None))
                .and_then(|()| d.fence_at(sites::CHECKPOINT_ENDS));
            if let Err(e) = cleared {
                // The transactions not begun stay for a later checkpoint.
                self.finished.lock().extend(done.drain(i + 1..));
                return Err(e);
            }
        }
        Ok(())
    }
}
