//! A system under test in the B+-tree benchmarks: something that applies
//! the workload's operations, each its own durable transaction, or many in
//! one transaction that it then commits or rolls back.
//!
//! [`TreeStore`] is the one tree on any [`Engine`]; the peers with trees of
//! their own (Berkeley DB, LMDB, SQLite, redb) implement [`Store`] in
//! `peers`.

use std::time::{Duration, Instant};

use rewind::Counters;

use super::workload::{value_of, Digest, Op};
use super::{BTree, Engine, MemError, TxMem};

/// Records per transaction when loading.
pub const LOAD_BATCH: usize = 64;

/// How a batch ends.
#[derive(Clone, Copy)]
pub enum End<'a> {
    /// Commit: durable when `batch` returns.
    Commit,
    /// Roll back.
    Abort,
    /// Call `copy` with the transaction still open (it copies the system's
    /// files: the crash image a process killed there leaves), then roll back.
    Crash(&'a dyn Fn() -> std::io::Result<()>),
}

impl End<'_> {
    pub fn commits(&self) -> bool {
        matches!(self, End::Commit)
    }

    /// At the end of the batch's operations: the crash copy, if any.
    pub fn before_end(&self) -> Result<(), MemError> {
        match self {
            End::Crash(copy) => Ok(copy()?),
            _ => Ok(()),
        }
    }

    /// A batch's transaction, inside the system's transaction: each of
    /// `ops` by `one`, then the crash copy, and the end: `Ok` commits,
    /// `Aborted` rolls back. `returned` is when the end began.
    pub fn body(
        &self,
        ops: &[Op],
        returned: &mut Instant,
        mut one: impl FnMut(Op) -> Result<(), MemError>,
    ) -> Result<(), MemError> {
        ops.iter().try_for_each(|&op| one(op))?;
        self.before_end()?;
        *returned = Instant::now();
        match self {
            End::Commit => Ok(()),
            _ => Err(MemError::Aborted),
        }
    }

    /// The time of the end that began at `returned`, the transaction
    /// having returned `r` (a rollback asked for is no error).
    pub fn took(&self, r: Result<(), MemError>, returned: Instant) -> Result<Duration, MemError> {
        let took = returned.elapsed();
        match r {
            Ok(()) => Ok(took),
            Err(MemError::Aborted) if !self.commits() => Ok(took),
            Err(e) => Err(e),
        }
    }
}

/// A system under test.
pub trait Store {
    /// Applies `op` as its own durable transaction (a lookup as a read
    /// transaction), folding the outcome into `d`.
    fn apply(&mut self, op: Op, d: &mut Digest) -> Result<(), MemError>;

    /// Applies `ops` in one transaction, then ends it as `end` says.
    /// Returns the time of the commit or rollback alone: from the last
    /// operation's return (or the crash copy's) to the end's.
    fn batch(&mut self, ops: &[Op], end: End<'_>, d: &mut Digest) -> Result<Duration, MemError>;

    /// Fences and flushed lines so far, for systems on a rewind `Domain`.
    fn counters(&self) -> Option<Counters> {
        None
    }

    /// Makes committed transactions durable in place and empties the log
    /// (rewind's checkpoint; nothing elsewhere).
    fn checkpoint(&self) -> Result<(), MemError> {
        Ok(())
    }

    /// Waits until every committed transaction's values are in place
    /// (rewind's redo-async write-back; nothing elsewhere).
    fn sync(&self) -> Result<(), MemError> {
        Ok(())
    }

    /// Loads `ops` (inserts) in transactions of [`LOAD_BATCH`], each
    /// followed by a checkpoint, so that a log without automatic
    /// checkpoints need not hold the whole load.
    fn load(&mut self, ops: &[Op]) -> Result<(), MemError> {
        let mut d = Digest::default();
        for chunk in ops.chunks(LOAD_BATCH) {
            self.batch(chunk, End::Commit, &mut d)?;
            self.checkpoint()?;
        }
        Ok(())
    }
}

/// The benchmarks' tree on an engine.
pub struct TreeStore<E: Engine> {
    pub engine: E,
    pub tree: BTree,
}

impl<E: Engine> TreeStore<E> {
    /// A new empty tree in `engine`.
    pub fn create(mut engine: E) -> Result<TreeStore<E>, MemError> {
        let tree = engine.transaction(|m| BTree::create(m))?;
        Ok(TreeStore { engine, tree })
    }
}

/// Applies one operation to `t` inside a transaction's memory.
#[inline]
pub fn apply_in<M: TxMem + ?Sized>(
    t: BTree,
    m: &mut M,
    op: Op,
    d: &mut Digest,
) -> Result<(), MemError> {
    match op {
        Op::Get(k) => d.get(t.get(m, k)?.as_ref().map(|v| &v[..])),
        Op::Insert(k) => d.update(t.insert(m, k, &value_of(k))?),
        Op::Remove(k) => d.update(t.remove(m, k)?),
    }
    Ok(())
}

impl<E: Engine> Store for TreeStore<E> {
    #[inline]
    fn apply(&mut self, op: Op, d: &mut Digest) -> Result<(), MemError> {
        let t = self.tree;
        self.engine.transaction(|m| apply_in(t, m, op, d))
    }

    fn batch(&mut self, ops: &[Op], end: End<'_>, d: &mut Digest) -> Result<Duration, MemError> {
        let commit = end.commits();
        if !commit && !self.engine.recoverable() {
            return Err(MemError::Io(std::io::Error::other(
                "this engine cannot roll a transaction back",
            )));
        }
        let t = self.tree;
        let mut returned = Instant::now();
        let r =
            (self.engine).transaction(|m| end.body(ops, &mut returned, |op| apply_in(t, m, op, d)));
        end.took(r, returned)
    }

    fn checkpoint(&self) -> Result<(), MemError> {
        self.engine.checkpoint()
    }

    fn sync(&self) -> Result<(), MemError> {
        self.engine.sync()
    }

    fn counters(&self) -> Option<Counters> {
        self.engine.counters()
    }
}
