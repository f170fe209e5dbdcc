//! One transaction per pool per thread: a thread that is inside a
//! transaction of a pool and starts another on the same pool would get a
//! second, independent transaction whose commit the outer one's rollback
//! could later undo (and whose locks would wait for the outer one's for
//! ever). The guard below makes that `Error::NestedTransaction` instead.

use std::cell::RefCell;

use crate::error::Error;

thread_local! {
    /// The pools (by engine address) this thread is in a transaction of.
    static ACTIVE: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// Marks the thread as inside a transaction of the pool `key` until dropped.
pub(super) struct InTransaction {
    key: usize,
}

impl InTransaction {
    /// Enters, or refuses when the thread is already inside one of `key`.
    pub(super) fn enter(key: usize) -> Result<InTransaction, Error> {
        ACTIVE.with(|a| {
            let mut a = a.borrow_mut();
            if a.contains(&key) {
                return Err(Error::NestedTransaction);
            }
            a.push(key);
            Ok(InTransaction { key })
        })
    }

    /// Whether the thread is inside a transaction of `key`.
    pub(super) fn active(key: usize) -> bool {
        ACTIVE.with(|a| a.borrow().contains(&key))
    }
}

impl Drop for InTransaction {
    fn drop(&mut self) {
        ACTIVE.with(|a| {
            let mut a = a.borrow_mut();
            if let Some(i) = a.iter().rposition(|&k| k == self.key) {
                a.swap_remove(i);
            }
        });
    }
}
