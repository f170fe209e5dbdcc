//! Waiting for a device flush, or for another commit behind one, without
//! sleeping at once.
//!
//! On a disk (the Msync backend) a commit waits for things that end within
//! about one device flush: the flush in flight (its group's, or the one
//! before it), then the earlier groups' write-back in sequence order; and
//! the leader of a flush waits for the fences of its group to join. A
//! thread that sleeps on a condition variable for such a wait costs a
//! futex wake and a context switch to whoever ends it, and on a virtual
//! machine a wake-up across processors is an interrupt between them: at
//! eight threads committing, those wake-ups were a third of the CPU time
//! (`perf` of `examples/threadloop.rs`), and the wake-up chain of the
//! ordered write-back was on every flush's critical path.
//!
//! So a waiter first yields the processor (`sched_yield`) while it checks
//! its condition, and sleeps only if the wait outlasts a bound of about
//! the device flush it waits for. A yield gives the processor to any
//! thread that can run, first of all the commits the waiter waits for;
//! only a processor nobody else wants is kept busy. RocksDB's
//! `WriteThread::AwaitState` does the same (spin, yield, then block), but
//! stops yielding after three yields of 3 µs or more, taking them for
//! other work it would delay. Here the threads a waiter yields to are
//! mostly the commits it waits for, and that rule lost most of the gain:
//! at eight threads on two cores (`examples/threadloop.rs`, ext4), 29-40k
//! commits/s sleeping at once, 35-40k with RocksDB's rule, 53-58k with
//! the bounds here (a fence yields for up to four flushes' time, any
//! waiter for at most [`YIELD_MAX`]).
//!
//! Yielding pays only when there are more threads committing than
//! processors: with a processor each, a woken thread finds its processor
//! idle, and a yielding one only burns its own (at two threads on two
//! processors it doubled the CPU time per commit and gained nothing). So
//! the Msync domain yields only while its last group of fences held more
//! threads than the machine has processors ([`crowded`]).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Whether `threads` committing at once outnumber the processors.
pub(crate) fn crowded(threads: u64) -> bool {
    static CORES: OnceLock<u64> = OnceLock::new();
    let cores =
        *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u64));
    threads > cores
}

/// The longest a waiter yields before it sleeps.
pub(crate) const YIELD_MAX: Duration = Duration::from_micros(500);

/// Yields the processor until `done` holds (true), for at most `bound`
/// (false: the caller sleeps instead).
pub(crate) fn yield_until(bound: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if done() {
            return true;
        }
        if start.elapsed() >= bound {
            return false;
        }
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_that_holds_ends_the_wait_at_once() {
        let mut calls = 0;
        assert!(yield_until(YIELD_MAX, || {
            calls += 1;
            true
        }));
        assert_eq!(calls, 1);
    }

    #[test]
    fn a_condition_that_never_holds_gives_up() {
        // Ends by the bound, and says the condition does not hold.
        assert!(!yield_until(Duration::from_micros(50), || false));
    }
}
