//! Redo, with synchronous write-back (MARS §3–4, in its simplest form): a
//! transaction's writes wait in its write set (the transaction's log
//! handle, `tx/handle.rs`), where its reads find them; a later write of the
//! same bytes edits the entry. At commit the whole set is logged as one
//! commit group of REDO records (new bytes only, no old value read) with
//! END, made valid together, then stored in place, written back and
//! fenced before the commit returns; the records are then cleared. An
//! abort discards the set: nothing was stored in place, nothing to undo.
//!
//! A savepoint or a nested top action logs the writes made before it as
//! ordinary UPDATE records (old and new bytes, stored in place at once),
//! as the force policy does, so that rolling back to it and the action's
//! survival of an abort use the one rollback machinery. Allocations and
//! frees are logged as under force.
//!
//! Recovery redoes a committed group that is still whole in the log (its
//! records are cleared only after its stores are durable, so a missing
//! one proves them durable); a group without END is a transaction that
//! never committed, and its REDO records are skipped.

use parking_lot::Mutex;

use super::{Durability, Ended, Finished, Force, RedoFacts};
use crate::error::Error;
use crate::persist::Domain;

/// The redo policy.
pub(crate) struct Redo;

impl Durability for Redo {
    fn stored(&self, d: &Domain, off: u64, len: u64) -> Result<(), Error> {
        // Stores made before commit (a savepoint's, a nested top action's)
        // are undo-logged and written back, as under force.
        Force.stored(d, off, len)
    }

    fn end(
        &self,
        finished: &Mutex<Vec<Finished>>,
        append_end: &mut dyn FnMut(bool) -> Result<Ended, Error>,
    ) -> Result<(), Error> {
        Force.end(finished, append_end)
    }

    fn keeps_records(&self) -> bool {
        false
    }

    fn redo(&self, f: &RedoFacts) -> bool {
        Force.redo(f)
    }

    fn write_set(&self) -> bool {
        true
    }
}

/// The redo policy with asynchronous write-back (ReDU): as [`Redo`], but a
/// commit hands its write set to the write cache (`engine/write_back.rs`)
/// once its records are durable, and returns.
pub(crate) struct RedoAsync;

impl Durability for RedoAsync {
    fn stored(&self, d: &Domain, off: u64, len: u64) -> Result<(), Error> {
        Redo.stored(d, off, len)
    }

    fn end(
        &self,
        finished: &Mutex<Vec<Finished>>,
        append_end: &mut dyn FnMut(bool) -> Result<Ended, Error>,
    ) -> Result<(), Error> {
        Redo.end(finished, append_end)
    }

    fn keeps_records(&self) -> bool {
        false
    }

    fn redo(&self, f: &RedoFacts) -> bool {
        Redo.redo(f)
    }

    fn write_set(&self) -> bool {
        true
    }

    fn write_back(&self) -> bool {
        true
    }
}
