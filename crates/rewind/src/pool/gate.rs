//! The transaction gate: every transaction, atomic write, checkpoint and
//! growth runs inside it; a backup closes it and waits until no one is
//! inside (see `backup`), so that it copies a pool in which nothing is half
//! done.
//!
//! A read-write lock did this, read-locked by every transaction. Its read
//! lock is a locked instruction on a word every thread shares: at the start
//! of a transaction it came right after the previous commit's fence, where
//! a locked instruction waits for the fence's non-temporal stores to drain
//! and the work after it no longer overlaps the drain
//! (`scripts/fence-overlap.c`), and on many processors the word's line
//! moved between them at every transaction.
//!
//! So entering is a plain store: each thread counts its own entries in a
//! word of its own (`inside`), then reads `closed`. A backup sets `closed`,
//! then makes every thread of the process pass a full barrier
//! (`membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, an asymmetric fence: the
//! cost is all on the backup's side), then waits until every thread's count
//! is zero. Either a thread's count was visible to the backup, which waits
//! for it, or the thread's read of `closed` came after the barrier and saw
//! it set: it steps out and waits for the backup to end. Where the kernel
//! has no such barrier, each entry fences (`mfence`) instead.
//!
//! A backup waiting for the gate holds new entries back, so transactions
//! that overlap cannot starve it, except entries inside an isolated read
//! (`Pool::read_isolated`), which go in past a closed gate: the read may
//! hold a lock shared that a transaction the backup waits for is waiting
//! for. Once no one is inside, the backup sets `copying` (the same
//! barrier, the same wait) and those entries wait too until its copy
//! ends: the copy waits for no one, and a growth that went in during it
//! left a copy whose heap size word named chunks past its end.

use std::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use thread_local::ThreadLocal;

/// How long a backup waiting for the threads inside sleeps before it looks
/// again (a thread leaving wakes it if it sees the gate closed; one that
/// left just before it looked is caught by this bound).
const RECHECK: Duration = Duration::from_millis(1);

/// A thread's entries in progress, on lines of its own (two: a
/// neighbouring line may be fetched with it).
#[derive(Default)]
#[repr(align(128))]
struct Inside(AtomicU64);

#[derive(Default)]
pub(crate) struct Gate {
    /// Set by a backup: new entries wait until it ends.
    closed: AtomicBool,
    /// Set by a backup once no one is inside, for its copy: entries past
    /// the closed gate (inside an isolated read) wait too, until it ends.
    copying: AtomicBool,
    inside: ThreadLocal<Inside>,
    /// Where entries wait for a backup, and a backup for the threads
    /// inside.
    latch: Mutex<()>,
    changed: Condvar,
    /// One backup at a time.
    backup: Mutex<()>,
    /// Entries that waited (for the unit tests).
    #[cfg(test)]
    waits: AtomicU64,
}

/// Whether this process can make every thread pass a barrier
/// (`membarrier`, registered once).
fn asymmetric() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        use rustix::thread::{membarrier, MembarrierCommand};
        membarrier(MembarrierCommand::RegisterPrivateExpedited).is_ok()
    })
}

/// Makes every thread of the process pass a full barrier; false if the
/// kernel refused, even once this process registered again.
fn barrier_all() -> bool {
    use rustix::thread::{membarrier, MembarrierCommand};
    membarrier(MembarrierCommand::PrivateExpedited).is_ok()
        || (membarrier(MembarrierCommand::RegisterPrivateExpedited).is_ok()
            && membarrier(MembarrierCommand::PrivateExpedited).is_ok())
}

/// The gate entered by this thread, left when dropped.
pub(crate) struct Entered<'a> {
    gate: &'a Gate,
    me: &'a Inside,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        let n = self.me.0.load(Ordering::Relaxed);
        self.me.0.store(n - 1, Ordering::Release);
        if self.gate.closed.load(Ordering::Relaxed) {
            let _l = self.gate.latch.lock();
            self.gate.changed.notify_all();
        }
    }
}

impl Gate {
    /// Enters the gate, waiting while a backup holds it closed, unless
    /// `past` (an entry inside an isolated read, see the module docs).
    pub(crate) fn enter(&self, past: bool) -> Entered<'_> {
        let asym = asymmetric();
        let me = self.inside.get_or_default();
        loop {
            // Only this thread writes its count: plain stores.
            let n = me.0.load(Ordering::Relaxed);
            me.0.store(n + 1, Ordering::Relaxed);
            match asym {
                true => compiler_fence(Ordering::SeqCst),
                false => fence(Ordering::SeqCst),
            }
            // An entry past the gate waits only for a backup's copy (the
            // backup may be waiting for a transaction that waits for the
            // isolated read's lock; the copy waits for no one).
            let shut = match past {
                false => &self.closed,
                true => &self.copying,
            };
            if !shut.load(Ordering::Relaxed) {
                // (After the check: what the entry then reads is after
                // any backup that ended before it.)
                fence(Ordering::Acquire);
                return Entered { gate: self, me };
            }
            me.0.store(n, Ordering::Release);
            #[cfg(test)]
            self.waits.fetch_add(1, Ordering::SeqCst);
            let mut l = self.latch.lock();
            self.changed.notify_all();
            while shut.load(Ordering::Acquire) {
                self.changed.wait(&mut l);
            }
        }
    }

    /// Closes the gate, waits until no thread is inside, runs `f`, and
    /// opens the gate again.
    pub(crate) fn closed<R>(&self, f: impl FnOnce() -> R) -> R {
        let _one = self.backup.lock();
        // Open again however this ends, a panic included.
        struct Open<'a>(&'a Gate);
        impl Drop for Open<'_> {
            fn drop(&mut self) {
                self.0.copying.store(false, Ordering::Release);
                self.0.closed.store(false, Ordering::Release);
                let _l = self.0.latch.lock();
                self.0.changed.notify_all();
            }
        }
        let _open = Open(self);
        self.shut_and_drain(&self.closed);
        // Entries past the closed gate (a `checkpoint` or a `grow` inside
        // an isolated read) went in while it waited; during `f` none may:
        // a growth while the pool was copied left a copy whose heap size
        // named chunks past its end ('a truncated file').
        self.shut_and_drain(&self.copying);
        f()
    }

    /// Sets `flag` (`closed` or `copying`) and waits until no entry that
    /// did not see it set is inside.
    fn shut_and_drain(&self, flag: &AtomicBool) {
        flag.store(true, Ordering::SeqCst);
        if asymmetric() && !barrier_all() {
            // No barrier could be had (a sandbox that refuses the call
            // after it allowed the registration; a fork keeps the
            // registration on Linux 6.18, and registering again is tried
            // first). On x86 a store leaves its thread's store buffer in
            // bounded time: after this pause every count stored before
            // `closed` was read is visible, which is what the barrier gave.
            std::thread::sleep(Duration::from_millis(1));
        }
        fence(Ordering::SeqCst);
        let mut l = self.latch.lock();
        while self.inside.iter().any(|i| i.0.load(Ordering::Acquire) > 0) {
            self.changed.wait_for(&mut l, RECHECK);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_backup_waits_for_those_inside_and_holds_new_ones_back() {
        // Four threads enter and leave the gate, counting a shared number
        // while inside; a backup (closed) sees it unchanged while it runs:
        // no one is inside then. Counts and states only, no clock.
        let gate = Arc::new(Gate::default());
        let busy = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let (gate, busy, stop) = (gate.clone(), busy.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) || n < 100 {
                        let _in = gate.enter(false);
                        busy.fetch_add(1, Ordering::SeqCst);
                        std::hint::spin_loop();
                        busy.fetch_sub(1, Ordering::SeqCst);
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        for _ in 0..50 {
            gate.closed(|| {
                assert_eq!(busy.load(Ordering::SeqCst), 0, "someone inside");
                std::hint::spin_loop();
                assert_eq!(busy.load(Ordering::SeqCst), 0, "someone came in");
            });
        }
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            assert!(w.join().unwrap() >= 100);
        }
        // An entry past the gate goes in while a backup waits for one
        // inside (states only: the backup is seen waiting by its flag).
        let inside = gate.enter(false);
        let g = gate.clone();
        let past = Arc::new(AtomicBool::new(false));
        let p = past.clone();
        let backup = std::thread::spawn(move || {
            let g2 = g.clone();
            g.closed(move || {
                // During the copy an entry past the gate waits for its end
                // (it went in at once: a `grow` inside an isolated read
                // changed the pool while a backup copied it).
                let before = g2.waits.load(Ordering::SeqCst);
                let g3 = g2.clone();
                let held = std::thread::spawn(move || {
                    let _in = g3.enter(true);
                    p.store(true, Ordering::SeqCst);
                });
                while g2.waits.load(Ordering::SeqCst) == before {
                    assert!(!held.is_finished(), "an entry went in during the copy");
                    std::thread::yield_now();
                }
                held
            })
        });
        while !gate.closed.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        drop(gate.enter(true));
        drop(inside);
        backup.join().unwrap().join().unwrap();
        assert!(past.load(Ordering::SeqCst));
    }
}
