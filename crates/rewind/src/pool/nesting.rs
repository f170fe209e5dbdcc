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
//!
//! It also records whether the thread is ending ([`thread_usable`]): a
//! transaction begun in a thread-local destructor after the engine's
//! per-thread state is gone is `TxMisuse`, not a panic (which aborts the
//! process there). One more load of a thread-local at a transaction's
//! start and one after it took its id.

use std::cell::{Cell, RefCell};
use std::thread::LocalKey;

use crate::error::Error;

/// The pools (by engine address) a thread is inside something of: the
/// first one entered in a `Cell` (no destructor to register, no borrow
/// flag), the others, entered while it is, in a list touched only then.
///
/// The first is a thread-local with nothing to drop, so it is there for
/// the whole life of the thread, thread-local destructors included: a
/// program whose thread-local value commits a last transaction when its
/// thread exits (a buffer flushed on drop) must not find it destroyed
/// (`Pool::transaction` panicked there, and a panic in a thread-local
/// destructor aborts the process). The list has a destructor: once it is
/// destroyed, a pool entered while another is ([`At::Unrecorded`]) is
/// not recorded.
struct Pools {
    /// The pool entered first, 0 for none.
    first: &'static LocalKey<Cell<usize>>,
    /// The other pools entered.
    more: &'static LocalKey<RefCell<Vec<usize>>>,
}

/// Where [`Pools::enter`] recorded a pool.
#[derive(Clone, Copy, PartialEq, Eq)]
enum At {
    First,
    More,
    /// Not recorded: the thread was inside that pool already.
    Already,
    /// Not recorded: entered while another pool is, in a thread-local
    /// destructor run after the list's own (the thread is ending).
    Unrecorded,
}

impl Pools {
    /// Records `key` (not 0: an engine's address), unless it is in already.
    #[inline]
    fn enter(&self, key: usize) -> At {
        debug_assert_ne!(key, 0);
        self.first.with(|first| match first.get() {
            0 => {
                first.set(key);
                At::First
            }
            k if k == key => At::Already,
            _ => self.enter_more(key),
        })
    }

    /// [`enter`](Self::enter) with another pool entered first.
    #[cold]
    fn enter_more(&self, key: usize) -> At {
        let entered = self.more.try_with(|m| {
            let mut m = m.borrow_mut();
            if m.contains(&key) {
                return At::Already;
            }
            m.push(key);
            At::More
        });
        entered.unwrap_or(At::Unrecorded)
    }

    /// Whether `key` is recorded.
    #[inline]
    fn holds(&self, key: usize) -> bool {
        let first = self.first.with(Cell::get);
        first == key
            || (first != 0 && (self.more.try_with(|m| m.borrow().contains(&key))).unwrap_or(false))
    }

    /// Forgets `key`, recorded `at`.
    #[inline]
    fn leave(&self, key: usize, at: At) {
        match at {
            At::First => self.first.with(|f| f.set(0)),
            At::Already | At::Unrecorded => {}
            At::More => {
                let _ = self.more.try_with(|m| {
                    let mut m = m.borrow_mut();
                    if let Some(i) = m.iter().rposition(|&k| k == key) {
                        m.swap_remove(i);
                    }
                });
            }
        }
    }
}

thread_local! {
    static TRANSACTIONS_FIRST: Cell<usize> = const { Cell::new(0) };
    static TRANSACTIONS_MORE: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    static READS_FIRST: Cell<usize> = const { Cell::new(0) };
    static READS_MORE: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// The pools this thread is in a transaction of.
const TRANSACTIONS: Pools = Pools {
    first: &TRANSACTIONS_FIRST,
    more: &TRANSACTIONS_MORE,
};

/// The pools this thread is in an isolated read of.
const READS: Pools = Pools {
    first: &READS_FIRST,
    more: &READS_MORE,
};

/// Where this thread stands for the engine's per-thread state (the
/// transaction ids and the gate's counts, kept by the `thread_local`
/// crate, which takes a thread id of its own): 0 not watched yet, 1 alive,
/// 2 ending. A thread-local with nothing to drop: readable in every
/// thread-local destructor.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Thread {
    Unwatched,
    Alive,
    Ending,
}

/// Set to [`Thread::Ending`] by [`Watch`]'s destructor.
struct Watch;

impl Drop for Watch {
    fn drop(&mut self) {
        THREAD.with(|t| t.set(Thread::Ending));
    }
}

thread_local! {
    static THREAD: Cell<Thread> = const { Cell::new(Thread::Unwatched) };
    /// Registered (first touched) after the thread's first use of the
    /// engine's per-thread state, so destroyed before the thread id that
    /// state needs (thread-local destructors run in the reverse order of
    /// their registration).
    static WATCH: Watch = const { Watch };
}

/// `TxMisuse` once this thread's thread-local storage is being destroyed
/// (a thread-local value whose destructor, as the thread ends, commits a
/// transaction or reads a pool): the engine's per-thread state can no
/// longer be had there (the `thread_local` crate panics for a thread
/// whose id it gave back, and a panic in a thread-local destructor aborts
/// the process). Before, and in destructors that run before the engine's
/// state is gone, everything works.
#[inline]
pub(super) fn thread_usable() -> Result<(), Error> {
    match THREAD.with(Cell::get) {
        Thread::Ending => Err(Error::TxMisuse(
            "the thread is ending: its thread-local storage is being destroyed",
        )),
        _ => Ok(()),
    }
}

/// Called after the engine's per-thread state was first used on this
/// thread (a transaction id taken, the gate entered): from then on
/// [`thread_usable`] refuses once that state may be gone.
#[inline]
pub(super) fn watch_thread() {
    if THREAD.with(Cell::get) == Thread::Unwatched {
        watch_now();
    }
}

#[cold]
fn watch_now() {
    // In a destructor run after `WATCH`'s own there is nothing to
    // register; the thread is ending (it was marked so).
    if WATCH.try_with(|_| ()).is_ok() {
        THREAD.with(|t| t.set(Thread::Alive));
    }
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
        match TRANSACTIONS.enter(key) {
            At::Already => Err(Error::NestedTransaction),
            at => Ok(InTransaction { key, at }),
        }
    }

    /// Whether the thread is inside a transaction of `key` (and so holds
    /// its gate).
    #[inline]
    pub(super) fn active(key: usize) -> bool {
        TRANSACTIONS.holds(key)
    }
}

impl Drop for InTransaction {
    #[inline]
    fn drop(&mut self) {
        TRANSACTIONS.leave(self.key, self.at);
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
            at: READS.enter(key),
        }
    }

    /// Whether the thread is inside an isolated read of `key`.
    #[inline]
    pub(super) fn inside(key: usize) -> bool {
        READS.holds(key)
    }
}

impl Drop for InRead {
    #[inline]
    fn drop(&mut self) {
        READS.leave(self.key, self.at);
    }
}
