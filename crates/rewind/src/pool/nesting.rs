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
//! A transaction costs one thread-local access at its start and one at its
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
