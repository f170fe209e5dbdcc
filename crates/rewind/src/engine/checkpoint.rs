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
        let ck = Draft::checkpoint(bound);
        let mut placed = Vec::with_capacity(1);
        // Paid from the space the log holds for one checkpoint, so a full
        // log can always be checkpointed.
        let mut res = self.log.take_checkpoint_reservation();
        let r = self.log.append(d, &[ck], &mut placed, &mut res);
        let u = self.log.unreserve(d, &mut res);
        r?;
        u?;
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
}
