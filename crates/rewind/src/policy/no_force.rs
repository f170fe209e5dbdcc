//! No-force (REWIND §4.3): in-place stores are left to the cache; commit
//! persists only the END record, and a transaction's records stay in the
//! log until a checkpoint (`engine::checkpoint`) has written its changes
//! back. Recovery repeats history for every transaction the last
//! checkpoint did not cover.

use parking_lot::Mutex;

use super::{Durability, Ended, Finished, RedoFacts};
use crate::error::Error;
use crate::persist::Domain;

/// The no-force policy.
pub(crate) struct NoForce;

impl Durability for NoForce {
    fn stored(&self, _d: &Domain, _off: u64, _len: u64) -> Result<(), Error> {
        Ok(())
    }

    fn end(
        &self,
        finished: &Mutex<Vec<Finished>>,
        append_end: &mut dyn FnMut(bool) -> Result<Ended, Error>,
    ) -> Result<(), Error> {
        // END and its registration are atomic with respect to a
        // checkpoint's choice of bound.
        let mut fin = finished.lock();
        let e = append_end(false)?;
        fin.push(Finished {
            end_lsn: e.end.lsn,
            cells: e.records,
            end: e.end.cell,
            targets: e.targets,
        });
        Ok(())
    }

    fn keeps_records(&self) -> bool {
        true
    }

    fn redo(&self, f: &RedoFacts) -> bool {
        !f.checkpointed
    }
}
