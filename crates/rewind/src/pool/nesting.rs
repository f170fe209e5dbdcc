//! One transaction per pool per thread: a thread that is inside a
//! transaction of a pool and starts another on the same pool would get a
//! second, independent transaction whose commit the outer one's rollback
//! could later undo (and whose locks would wait for the outer one's for
//! ever). The guard below makes that `Error::NestedTransaction` instead.
//!
//! The same record tells whether the thread holds the pool's transaction
//! gate (`backup`): a transaction holds it from its start to its end, so a
//! call inside a transaction's closure (`Pool::checkpoint`, `Pool::grow`)
//! must not take it again, and a backup from there would wait for itself.
//!
//! An isolated read (`Pool::read_isolated`) is recorded too: its read
//! may run under the key's lock taken shared, held by the thread, so a
//! transaction started inside it that locks the key would wait for its own
//! thread for ever (the reader waits for nothing, so the lock table sees no
//! cycle); and one started in the read's first, unlocked run would commit
//! from a run whose result is dropped. Both are `NestedTransaction`.
//!
//! A transaction costs two thread-local loads at its start and one access at its
//! end: the pool a thread is in a transaction of is one `Cell`, with no
//! destructor to register and no borrow flag. A thread inside transactions
//! of several pools at once (a closure of one that starts one of another)
//! keeps the others in a list of their own, touched only then.

use std::cell::{Cell, RefCell};

use crate::error::Error;

/// The pools (by engine address) a thread is inside something of: the
/// first one entered in a `Cell` (no destructor to register, no borrow
/// flag), the others, entered while it is, in a list touched only then.
struct Pools {
    /// The pool entered first, 0 for none.
    first: Cell<usize>,
    /// The other pools entered.
    more: RefCell<Vec<usize>>,
}

/// Where [`Pools::enter`] recorded a pool.
#[derive(Clone, Copy, PartialEq, Eq)]
enum At {
    First,
    More,
    /// Not recorded: the thread was inside that pool already.
    Already,
}

impl Pools {
    /// No pool entered.
    const fn new() -> Pools {
        Pools {
            first: Cell::new(0),
            more: RefCell::new(Vec::new()),
        }
    }

    /// Records `key` (not 0: an engine's address), unless it is in already.
    #[inline]
    fn enter(&self, key: usize) -> At {
        debug_assert_ne!(key, 0);
        match self.first.get() {
            0 => {
                self.first.set(key);
                At::First
            }
            k if k == key => At::Already,
            _ => self.enter_more(key),
        }
    }

    /// [`enter`](Self::enter) with another pool entered first.
    #[cold]
    fn enter_more(&self, key: usize) -> At {
        let mut m = self.more.borrow_mut();
        if m.contains(&key) {
            return At::Already;
        }
        m.push(key);
        At::More
    }

    /// Whether `key` is recorded.
    #[inline]
    fn holds(&self, key: usize) -> bool {
        let first = self.first.get();
        first == key || (first != 0 && self.more.borrow().contains(&key))
    }

    /// Forgets `key`, recorded `at`.
    #[inline]
    fn leave(&self, key: usize, at: At) {
        match at {
            At::First => self.first.set(0),
            At::Already => {}
            At::More => {
                let mut m = self.more.borrow_mut();
                if let Some(i) = m.iter().rposition(|&k| k == key) {
                    m.swap_remove(i);
                }
            }
        }
    }
}

thread_local! {
    /// The pools this thread is in a transaction of.
    static TRANSACTIONS: Pools = const { Pools::new() };
    /// The pools this thread is in an isolated read of.
    static READS: Pools = const { Pools::new() };
}

/// Marks the thread as inside a transaction of the pool `key` until dropped.
pub(super) struct InTransaction {
    key: usize,
    /// Where it is recorded (never `Already`).
    at: At,
}

impl InTransaction {
    /// Enters, or refuses when the thread is already inside one of `key`
    /// (not 0: an engine's address), or inside an isolated read of it.
    #[inline]
    pub(super) fn enter(key: usize) -> Result<InTransaction, Error> {
        if InRead::inside(key) {
            return Err(Error::NestedTransaction);
        }
        match TRANSACTIONS.with(|p| p.enter(key)) {
            At::Already => Err(Error::NestedTransaction),
            at => Ok(InTransaction { key, at }),
        }
    }

    /// Whether the thread is inside a transaction of `key` (and so holds
    /// its gate).
    #[inline]
    pub(super) fn active(key: usize) -> bool {
        TRANSACTIONS.with(|p| p.holds(key))
    }
}

impl Drop for InTransaction {
    #[inline]
    fn drop(&mut self) {
        TRANSACTIONS.with(|p| p.leave(self.key, self.at));
    }
}

/// Marks the thread as inside an isolated read of the pool `key` (reads
/// nest) until dropped: no transaction of that pool may start meanwhile.
pub(super) struct InRead {
    key: usize,
    /// Where it is recorded (`Already`: a read inside a read of the same
    /// pool, recorded by the outer one).
    at: At,
}

impl InRead {
    /// Enters a read of `key` (not 0: an engine's address).
    #[inline]
    pub(super) fn enter(key: usize) -> InRead {
        InRead {
            key,
            at: READS.with(|p| p.enter(key)),
        }
    }

    /// Whether the thread is inside an isolated read of `key`.
    #[inline]
    pub(super) fn inside(key: usize) -> bool {
        READS.with(|p| p.holds(key))
    }
}

impl Drop for InRead {
    #[inline]
    fn drop(&mut self) {
        READS.with(|p| p.leave(self.key, self.at));
    }
}
