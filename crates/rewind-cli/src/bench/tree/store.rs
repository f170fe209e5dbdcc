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
pub const LOAD_BATCH: usize = 500;

/// A system under test.
pub trait Store {
    /// Applies `op` as its own durable transaction (a lookup as a read
    /// transaction), folding the outcome into `d`.
    fn apply(&mut self, op: Op, d: &mut Digest) -> Result<(), MemError>;

    /// Applies `ops` in one transaction, then commits it (`commit`) or rolls
    /// it back. Returns the time of that end alone: from the last
    /// operation's return to the commit's or rollback's.
    fn batch(&mut self, ops: &[Op], commit: bool, d: &mut Digest) -> Result<Duration, MemError>;

    /// Fences and flushed lines so far, for systems on a rewind `Domain`.
    fn counters(&self) -> Option<Counters> {
        None
    }

    /// Loads `ops` (inserts) in transactions of [`LOAD_BATCH`].
    fn load(&mut self, ops: &[Op]) -> Result<(), MemError> {
        let mut d = Digest::default();
        for chunk in ops.chunks(LOAD_BATCH) {
            self.batch(chunk, true, &mut d)?;
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

    fn batch(&mut self, ops: &[Op], commit: bool, d: &mut Digest) -> Result<Duration, MemError> {
        if !commit && !self.engine.recoverable() {
            return Err(MemError::Io(std::io::Error::other(
                "this engine cannot roll a transaction back",
            )));
        }
        let t = self.tree;
        let mut returned = Instant::now();
        let r = self.engine.transaction(|m| {
            for &op in ops {
                apply_in(t, m, op, d)?;
            }
            returned = Instant::now();
            if commit {
                Ok(())
            } else {
                Err(MemError::Aborted)
            }
        });
        let end = returned.elapsed();
        match r {
            Ok(()) => Ok(end),
            Err(MemError::Aborted) if !commit => Ok(end),
            Err(e) => Err(e),
        }
    }

    fn counters(&self) -> Option<Counters> {
        self.engine.counters()
    }
}
