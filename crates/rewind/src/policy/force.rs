//! Force (REWIND §4.2): every in-place store is written back as it is made,
//! so commit's fence makes the transaction durable in place and its records
//! are cleared at once, END last. Recovery redoes only what a crash can
//! leave behind the commit point: a Batch commit group still whole in the
//! log, and compensations no later append settled.

use parking_lot::Mutex;

use super::{Durability, Ended, Finished, RedoFacts};
use crate::error::Error;
use crate::persist::{sites, Domain};

/// The force policy.
pub(crate) struct Force;

impl Durability for Force {
    fn stored(&self, d: &Domain, off: u64, len: u64) -> Result<(), Error> {
        // Commit's fence must find every store flushed.
        d.flush_at(off, len, sites::TX_STORE_FLUSH)
    }

    fn end(
        &self,
        _finished: &Mutex<Vec<Finished>>,
        append_end: &mut dyn FnMut(bool) -> Result<Ended, Error>,
    ) -> Result<(), Error> {
        append_end(true).map(|_| ())
    }

    fn keeps_records(&self) -> bool {
        false
    }

    fn redo(&self, f: &RedoFacts) -> bool {
        f.whole_commit_group || f.unsettled_clr
    }
}
