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

thread_local! {
    /// The pool (by engine address) this thread entered a transaction of
    /// first, 0 for none.
    static FIRST: Cell<usize> = const { Cell::new(0) };
    /// The other pools this thread is in a transaction of.
    static MORE: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    /// The pool this thread entered an isolated read of first, 0 for none.
    static READ_FIRST: Cell<usize> = const { Cell::new(0) };
    /// The other pools this thread is in an isolated read of.
    static READ_MORE: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// Marks the thread as inside a transaction of the pool `key` until dropped.
pub(super) struct InTransaction {
    key: usize,
    /// Recorded in `FIRST` (else in `MORE`).
    first: bool,
}

impl InTransaction {
    /// Enters, or refuses when the thread is already inside one of `key`
    /// (not 0: an engine's address).
    #[inline]
    pub(super) fn enter(key: usize) -> Result<InTransaction, Error> {
        debug_assert_ne!(key, 0);
        if InRead::inside(key) {
            return Err(Error::NestedTransaction);
        }
        let first = FIRST.with(|f| {
            let now = f.get();
            if now == 0 {
                f.set(key);
            }
            now
        });
        match first {
            0 => Ok(InTransaction { key, first: true }),
            k if k == key => Err(Error::NestedTransaction),
            _ => Self::enter_more(key),
        }
    }

    /// [`enter`](Self::enter) with a transaction of another pool open.
    #[cold]
    fn enter_more(key: usize) -> Result<InTransaction, Error> {
        MORE.with(|m| {
            let mut m = m.borrow_mut();
            if m.contains(&key) {
                return Err(Error::NestedTransaction);
            }
            m.push(key);
            Ok(InTransaction { key, first: false })
        })
    }

    /// Whether the thread is inside a transaction of `key` (and so holds
    /// its gate).
    #[inline]
    pub(super) fn active(key: usize) -> bool {
        let first = FIRST.with(Cell::get);
        first == key || (first != 0 && MORE.with(|m| m.borrow().contains(&key)))
    }
}

impl Drop for InTransaction {
    #[inline]
    fn drop(&mut self) {
        if self.first {
            FIRST.with(|f| f.set(0));
            return;
        }
        MORE.with(|m| {
            let mut m = m.borrow_mut();
            if let Some(i) = m.iter().rposition(|&k| k == self.key) {
                m.swap_remove(i);
            }
        });
    }
}

/// Marks the thread as inside an isolated read of the pool `key` (reads
/// nest) until dropped: no transaction of that pool may start meanwhile.
pub(super) struct InRead {
    key: usize,
    /// Recorded in `READ_FIRST`, in `READ_MORE`, or not at all (a read
    /// inside a read of the same pool as `READ_FIRST`'s).
    at: ReadAt,
}

enum ReadAt {
    First,
    More,
    Nested,
}

impl InRead {
    /// Enters a read of `key` (not 0: an engine's address).
    #[inline]
    pub(super) fn enter(key: usize) -> InRead {
        debug_assert_ne!(key, 0);
        let first = READ_FIRST.with(|f| {
            let now = f.get();
            if now == 0 {
                f.set(key);
            }
            now
        });
        let at = match first {
            0 => ReadAt::First,
            k if k == key => ReadAt::Nested,
            _ => {
                READ_MORE.with(|m| m.borrow_mut().push(key));
                ReadAt::More
            }
        };
        InRead { key, at }
    }

    /// Whether the thread is inside an isolated read of `key`.
    #[inline]
    pub(super) fn inside(key: usize) -> bool {
        let first = READ_FIRST.with(Cell::get);
        first == key || (first != 0 && READ_MORE.with(|m| m.borrow().contains(&key)))
    }
}

impl Drop for InRead {
    #[inline]
    fn drop(&mut self) {
        match self.at {
            ReadAt::First => READ_FIRST.with(|f| f.set(0)),
            ReadAt::Nested => {}
            ReadAt::More => READ_MORE.with(|m| {
                let mut m = m.borrow_mut();
                if let Some(i) = m.iter().rposition(|&k| k == self.key) {
                    m.swap_remove(i);
                }
            }),
        }
    }
}
