//! Durability policies as strategies (REWIND §4.2 and §4.6): what a policy
//! does after an in-place store, how it ends a transaction (commit or
//! rollback), whether finished transactions' records wait for a checkpoint,
//! and what recovery's redo pass repeats. The transaction code and recovery
//! call these hooks and never ask which policy runs; a new policy is one
//! more file here and one more arm in [`of`].

mod force;
mod no_force;
mod redo;

use parking_lot::Mutex;

use crate::error::Error;
use crate::format::Policy;
use crate::log::{CellRef, Placed};
use crate::persist::Domain;

pub(crate) use force::Force;
pub(crate) use no_force::NoForce;
pub(crate) use redo::{Redo, RedoAsync};

/// A transaction that finished under a policy that keeps its records until
/// a checkpoint makes its changes durable in place.
pub(crate) struct Finished {
    /// Its END record's lsn.
    pub(crate) end_lsn: u64,
    /// Its records, END aside.
    pub(crate) cells: Vec<CellRef>,
    /// Its END record.
    pub(crate) end: CellRef,
    /// Every range it changed in place.
    pub(crate) targets: Vec<(u64, u64)>,
}

/// What appending a transaction's END left: the END, and (when its records
/// were not cleared with it) the records and the ranges changed in place.
pub(crate) struct Ended {
    pub(crate) end: Placed,
    pub(crate) records: Vec<CellRef>,
    pub(crate) targets: Vec<(u64, u64)>,
}

/// The facts about one record that decide whether recovery redoes it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RedoFacts {
    /// Its transaction finished (committed or rolled back) at or before the
    /// last checkpoint's bound: its changes are durable in place.
    pub(crate) checkpointed: bool,
    /// An UPDATE of a Batch commit group all of whose records are still in
    /// the log (its in-place stores may follow the commit point).
    pub(crate) whole_commit_group: bool,
    /// A CLR of a transaction being rolled back that no later append of
    /// its transaction settled (its store may not be persistent).
    pub(crate) unsettled_clr: bool,
}

/// A durability policy.
pub(crate) trait Durability: Sync + Send {
    /// After an in-place store that a log record covers.
    fn stored(&self, d: &Domain, off: u64, len: u64) -> Result<(), Error>;

    /// Ends a transaction: `append_end(clear)` appends its END record,
    /// clearing its other records at once when `clear`; the policy settles
    /// what stays. `finished` is the checkpointer's queue.
    fn end(
        &self,
        finished: &Mutex<Vec<Finished>>,
        append_end: &mut dyn FnMut(bool) -> Result<Ended, Error>,
    ) -> Result<(), Error>;

    /// Whether finished transactions' records stay in the log until a
    /// checkpoint (so a checkpoint can make room in a full log).
    fn keeps_records(&self) -> bool;

    /// Whether recovery's redo pass repeats a record.
    fn redo(&self, f: &RedoFacts) -> bool;

    /// Whether a transaction's writes wait in its write set until it
    /// commits, and are then logged as one commit group (redo), rather
    /// than logged and stored as they are made.
    fn write_set(&self) -> bool {
        false
    }

    /// Whether committed write sets go to the write cache, for the
    /// write-back thread, rather than in place before the commit returns.
    fn write_back(&self) -> bool {
        false
    }
}

/// The strategy of a policy.
pub(crate) fn of(p: Policy) -> &'static dyn Durability {
    match p {
        Policy::Force => &Force,
        Policy::NoForce => &NoForce,
        Policy::Redo => &Redo,
        Policy::RedoAsync => &RedoAsync,
    }
}
