//! The lock table: strict two-phase locking of pool objects between
//! transactions (the isolation REWIND §4.7 leaves to the program, given as
//! libpmemobj++ and redb give it).
//!
//! A lock is named by a pool offset (a collection's header, or any object a
//! program locks with `Tx::lock`). A transaction takes it shared or
//! exclusive and holds it until the transaction has committed or rolled
//! back; the table is volatile (a crash releases every lock, and recovery
//! needs none: no transaction runs during it).
//!
//! **Deadlock.** A transaction that would wait walks the wait-for graph from
//! the lock's conflicting holders, through the locks those holders wait
//! for; if the walk comes back to it, waiting could never end, and the
//! request fails at once with [`Error::Deadlock`]: the transaction is doomed
//! and rolls back, releasing its locks, so the others go on. A wait that
//! finds no cycle but lasts past the table's bound fails with
//! [`Error::LockTimeout`] (a holder that never ends its transaction, say).
//!
//! An upgrade (shared to exclusive by the same transaction) waits for the
//! other shared holders, not for the requests in line behind it (they wait
//! for it); two upgraders of one lock are a cycle and one of them gets
//! `Deadlock`.
//!
//! **Waiting.** A lock is held for one transaction, a microsecond or two
//! on persistent memory, so a waiter (already in line, so first come,
//! first served holds) first spins, then yields the processor
//! (`persist::backoff`), watching a counter of releases, and only sleeps on
//! the condition variable once the holder has kept it longer than that
//! (a transaction on a disk, or one that waits itself). Sleeping at once
//! made every hand-over of a lock two threads share a futex wake and a
//! context switch: two threads inserting into one `BTreeMap` of
//! `rewind-collections` ran at a third of one thread's rate
//! (`rewind bench threads`, shared tree). A release with no one in line
//! (the common case) bumps nothing and wakes no one: a waiter joins the
//! line under the latch before it waits, and tests under it.
//!
//! **Readers outside transactions** (`Pool::read_isolated`) first take no
//! lock: they read optimistically and check that no exclusive hold of the
//! lock began or ended meanwhile, as a sequence lock's readers do. Each key
//! falls in one of [`STRIPES`] stripes, each with two counters: exclusive
//! holds granted and exclusive holds released. A reader that sees them
//! equal before its reads and `granted` unchanged after them read bytes no
//! exclusive holder was changing (a holder writes only between its grant
//! and its release). Keys that share a stripe only make a reader retry.
//! A reader that finds a writer in the way takes the lock shared instead,
//! in line like a transaction (so writers that follow one another cannot
//! starve it), under an id of its own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use rustc_hash::FxHashMap;

use crate::error::Error;
use crate::persist::backoff;

/// How a lock is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Readers: any number at once.
    Shared,
    /// One writer, no readers.
    Exclusive,
}

/// The holders of one lock.
#[derive(Default)]
struct Entry {
    exclusive: Option<u64>,
    shared: Vec<u64>,
}

impl Entry {
    /// The holders that keep `tx` from taking the lock in `mode`.
    fn blockers(&self, tx: u64, mode: Mode) -> Vec<u64> {
        let mut b: Vec<u64> = self.exclusive.filter(|&h| h != tx).into_iter().collect();
        if mode == Mode::Exclusive {
            b.extend(self.shared.iter().copied().filter(|&h| h != tx));
        }
        b
    }

    fn is_free(&self) -> bool {
        self.exclusive.is_none() && self.shared.is_empty()
    }
}

#[derive(Default)]
struct Table {
    locks: FxHashMap<u64, Entry>,
    /// What each waiting transaction waits for, with its place in line.
    waiting: FxHashMap<u64, Wait>,
    next_ticket: u64,
}

#[derive(Clone, Copy)]
struct Wait {
    key: u64,
    mode: Mode,
    ticket: u64,
}

impl Table {
    /// The transactions `tx` must wait for to take `key` in `mode`: the
    /// conflicting holders, and the conflicting requests in line before it
    /// (`ticket`: its place, `u64::MAX` for a request not yet in line), so a
    /// lock is granted first come, first served and a waiter woken by a
    /// release is never overtaken by a newcomer.
    fn blocking(&self, tx: u64, key: u64, mode: Mode, ticket: u64) -> Vec<u64> {
        let entry = self.locks.get(&key);
        let mut b = entry.map_or_else(Vec::new, |e| e.blockers(tx, mode));
        // An upgrade (a shared holder asking for exclusive) waits for the
        // other holders alone, not for the requests in line: they wait for
        // it, so waiting for them would be a deadlock of its own making.
        if entry.is_some_and(|e| e.shared.contains(&tx)) {
            return b;
        }
        b.extend(self.waiting.iter().filter_map(|(&w, a)| {
            let conflicts = mode == Mode::Exclusive || a.mode == Mode::Exclusive;
            (w != tx && a.key == key && a.ticket < ticket && conflicts).then_some(w)
        }));
        b
    }

    /// Whether `tx` waiting for `key` in `mode` would close a cycle.
    fn would_deadlock(&self, tx: u64, key: u64, mode: Mode, ticket: u64) -> bool {
        let mut stack = self.blocking(tx, key, mode, ticket);
        let mut seen = Vec::new();
        while let Some(h) = stack.pop() {
            if h == tx {
                return true;
            }
            if seen.contains(&h) {
                continue;
            }
            seen.push(h);
            if let Some(w) = self.waiting.get(&h) {
                stack.extend(self.blocking(h, w.key, w.mode, w.ticket));
            }
        }
        false
    }
}

/// Stripes of the exclusive-hold counters (see the module docs).
const STRIPES: usize = 256;

/// The exclusive holds of the keys of one stripe, granted and released
/// (a line of its own: threads on locks of different stripes share none).
#[derive(Default)]
#[repr(align(64))]
struct Stripe {
    granted: AtomicU64,
    released: AtomicU64,
}

/// The stripe of `key`.
fn stripe_of(key: u64) -> usize {
    ((key >> 3).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - STRIPES.trailing_zeros())) as usize
}

/// A reader's view of a key's stripe with no exclusive hold in it
/// ([`LockTable::quiet`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Quiet {
    stripe: usize,
    granted: u64,
}

/// The volatile lock table of one open pool.
pub(crate) struct LockTable {
    table: Mutex<Table>,
    /// Exclusive holds granted and released, by stripe of their key.
    stripes: Box<[Stripe]>,
    changed: Condvar,
    /// Bumped by every change a waiter may wait for (a release, a request
    /// leaving the line), once the change is made: what a spinning waiter
    /// watches before it tests its request again under the latch.
    changes: AtomicU64,
    /// The longest wait, in milliseconds.
    timeout_ms: AtomicU64,
}

/// Spins of a waiter before it yields (a few microseconds: `pause` takes
/// tens of cycles).
const SPINS: u32 = 100;

/// The longest a waiter spins and yields, in all, before it sleeps: a
/// few transactions on persistent memory.
const SPIN_MAX: Duration = Duration::from_micros(50);

/// The default bound on one lock wait.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

impl LockTable {
    pub(crate) fn new() -> LockTable {
        LockTable {
            table: Mutex::new(Table::default()),
            stripes: (0..STRIPES).map(|_| Stripe::default()).collect(),
            changed: Condvar::new(),
            changes: AtomicU64::new(0),
            timeout_ms: AtomicU64::new(DEFAULT_TIMEOUT.as_millis() as u64),
        }
    }

    /// Wakes the waiters, spinning and sleeping.
    fn notify(&self) {
        self.changes.fetch_add(1, Ordering::Release);
        self.changed.notify_all();
    }

    /// Waits, with the table's latch released, until a change is seen or
    /// `until` passes: spinning briefly, then yielding the processor. True
    /// if a change was seen (the caller tests its request again).
    fn spin_for_change(&self, seen: u64, until: Instant) -> bool {
        let changed = || self.changes.load(Ordering::Acquire) != seen;
        for _ in 0..SPINS {
            if changed() {
                return true;
            }
            std::hint::spin_loop();
        }
        let left = until.saturating_duration_since(Instant::now());
        backoff::yield_until(left, changed)
    }

    /// Sets the bound on one lock wait.
    pub(crate) fn set_timeout(&self, d: Duration) {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        self.timeout_ms.store(ms, Ordering::Relaxed);
    }

    /// Takes `key` in `mode` for transaction `tx`, which holds it already in
    /// `held` (or not), waiting while another transaction's hold conflicts.
    /// Returns the mode `tx` now holds.
    pub(crate) fn acquire(
        &self,
        tx: u64,
        key: u64,
        mode: Mode,
        held: Option<Mode>,
    ) -> Result<Mode, Error> {
        match (held, mode) {
            (Some(Mode::Exclusive), _) | (Some(Mode::Shared), Mode::Shared) => {
                return Ok(held.unwrap_or(mode));
            }
            _ => {}
        }
        // Read the clock only once a wait begins: most requests never wait.
        let mut deadline = None;
        let mut t = self.table.lock();
        if held.is_none() && t.waiting.is_empty() {
            // Most requests: a lock no one holds, and no one in line for
            // any lock. One probe of the table, the grant made in it.
            if let std::collections::hash_map::Entry::Vacant(v) = t.locks.entry(key) {
                if mode == Mode::Exclusive {
                    self.granted(key);
                }
                v.insert(match mode {
                    Mode::Exclusive => Entry {
                        exclusive: Some(tx),
                        shared: Vec::new(),
                    },
                    Mode::Shared => Entry {
                        exclusive: None,
                        shared: vec![tx],
                    },
                });
                return Ok(mode);
            }
        }
        let mut ticket = u64::MAX;
        let mut spinning = true;
        let mut spin_until = None;
        loop {
            if t.blocking(tx, key, mode, ticket).is_empty() {
                let entry = t.locks.entry(key).or_default();
                match mode {
                    Mode::Exclusive => {
                        entry.shared.retain(|&h| h != tx);
                        entry.exclusive = Some(tx);
                        self.granted(key);
                    }
                    Mode::Shared => entry.shared.push(tx),
                }
                // (Most grants find no one in line: nothing to look up.)
                if !t.waiting.is_empty() {
                    t.waiting.remove(&tx);
                    if t.waiting.values().any(|w| w.key == key) {
                        // A shared grant may let the next shared waiters in.
                        self.notify();
                    }
                }
                return Ok(mode);
            }
            if t.would_deadlock(tx, key, mode, ticket) {
                t.waiting.remove(&tx);
                self.notify(); // those in line behind it move up
                return Err(Error::Deadlock { offset: key });
            }
            if ticket == u64::MAX {
                ticket = t.next_ticket;
                t.next_ticket += 1;
            }
            t.waiting.insert(tx, Wait { key, mode, ticket });
            let timeout = Duration::from_millis(self.timeout_ms.load(Ordering::Relaxed));
            let deadline = *deadline.get_or_insert_with(|| Instant::now().checked_add(timeout));
            // In line: watch for changes before sleeping (see the module
            // docs), for a bounded time in all.
            let until = *spin_until.get_or_insert_with(|| Instant::now() + SPIN_MAX);
            if spinning {
                // Tested again under the latch whatever the spin saw: a
                // change after its last look found no sleeper to wake.
                let seen = self.changes.load(Ordering::Acquire);
                spinning = Instant::now() < until
                    && parking_lot::MutexGuard::unlocked(&mut t, || {
                        self.spin_for_change(seen, until)
                    });
                continue;
            }
            let timed_out = match deadline {
                Some(d) => self.changed.wait_until(&mut t, d).timed_out(),
                None => {
                    self.changed.wait(&mut t);
                    false
                }
            };
            if timed_out && !t.blocking(tx, key, mode, ticket).is_empty() {
                t.waiting.remove(&tx);
                self.notify();
                return Err(Error::LockTimeout {
                    offset: key,
                    waited_ms: timeout.as_millis() as u64,
                });
            }
        }
    }

    /// Releases every lock `tx` holds (the keys of `held`).
    pub(crate) fn release_all(&self, tx: u64, held: impl Iterator<Item = u64>) {
        let mut t = self.table.lock();
        let mut any = false;
        for key in held {
            if let std::collections::hash_map::Entry::Occupied(mut o) = t.locks.entry(key) {
                let e = o.get_mut();
                if e.exclusive == Some(tx) {
                    e.exclusive = None;
                    // After the holder's last write (its commit's write-back
                    // or its rollback): readers may take what they read.
                    self.stripes[stripe_of(key)]
                        .released
                        .fetch_add(1, Ordering::Release);
                }
                e.shared.retain(|&h| h != tx);
                if e.is_free() {
                    o.remove();
                }
                any = true;
            }
        }
        // Only a transaction in line (spinning, yielding or asleep: it
        // joins `waiting` under the latch before it waits) needs to hear
        // of a release; one that comes later tests under the latch.
        let waiters = !t.waiting.is_empty();
        if waiters {
            t.waiting.remove(&tx);
        }
        drop(t);
        if any && waiters {
            self.notify();
        }
    }

    /// Counts an exclusive hold of `key` granted, before its holder's
    /// first write (a full barrier: the holder's writes come after it).
    fn granted(&self, key: u64) {
        self.stripes[stripe_of(key)]
            .granted
            .fetch_add(1, Ordering::SeqCst);
    }

    /// `key`'s stripe, if no exclusive hold is in it now: a reader outside
    /// transactions may read, then ask [`still`](Self::still).
    pub(crate) fn quiet(&self, key: u64) -> Option<Quiet> {
        let stripe = stripe_of(key);
        let s = &self.stripes[stripe];
        let released = s.released.load(Ordering::Acquire);
        let granted = s.granted.load(Ordering::Acquire);
        (granted == released).then_some(Quiet { stripe, granted })
    }

    /// Whether no exclusive hold in the stripe began since `q` was seen:
    /// what was read in between no holder was changing.
    pub(crate) fn still(&self, q: Quiet) -> bool {
        std::sync::atomic::fence(Ordering::Acquire);
        self.stripes[q.stripe].granted.load(Ordering::Acquire) == q.granted
    }

    /// `read`'s result if it ran while no exclusive hold of `key`'s
    /// stripe began or was in force ([`quiet`](Self::quiet), then
    /// [`still`](Self::still)): what it read no holder was changing. `None`
    /// (and `read` not run, or its result dropped): read again under the
    /// lock.
    pub(crate) fn read_quiet<R>(&self, key: u64, read: impl FnOnce() -> R) -> Option<R> {
        let q = self.quiet(key)?;
        let r = read();
        self.still(q).then_some(r)
    }

    /// How many locks are held.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.table.lock().locks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn shared_holders_coexist_and_exclusive_excludes() {
        let t = LockTable::new();
        assert_eq!(t.acquire(1, 64, Mode::Shared, None).unwrap(), Mode::Shared);
        assert_eq!(t.acquire(2, 64, Mode::Shared, None).unwrap(), Mode::Shared);
        t.set_timeout(Duration::ZERO);
        assert!(matches!(
            t.acquire(3, 64, Mode::Exclusive, None),
            Err(Error::LockTimeout { offset: 64, .. })
        ));
        t.release_all(1, [64].into_iter());
        t.release_all(2, [64].into_iter());
        assert_eq!(
            t.acquire(3, 64, Mode::Exclusive, None).unwrap(),
            Mode::Exclusive
        );
        assert_eq!(t.held(), 1);
        t.release_all(3, [64].into_iter());
        assert_eq!(t.held(), 0);
    }

    #[test]
    fn a_reader_sees_an_exclusive_hold_begin_and_end() {
        let t = LockTable::new();
        let q = t.quiet(64).expect("no hold yet");
        assert!(t.still(q));
        // Shared holds change nothing for a reader.
        t.acquire(1, 64, Mode::Shared, None).unwrap();
        assert!(t.still(q) && t.quiet(64).is_some());
        // An upgrade is an exclusive hold: in force until released.
        t.acquire(1, 64, Mode::Exclusive, Some(Mode::Shared))
            .unwrap();
        assert!(!t.still(q));
        assert!(t.quiet(64).is_none());
        t.release_all(1, [64].into_iter());
        let q = t.quiet(64).expect("released");
        // A hold granted and released between a reader's two looks.
        t.acquire(2, 64, Mode::Exclusive, None).unwrap();
        t.release_all(2, [64].into_iter());
        assert!(!t.still(q));
        // Another key's hold in another stripe leaves the reader alone.
        let other = (1..)
            .map(|i| 64 + 8 * i)
            .find(|&k| stripe_of(k) != stripe_of(64))
            .unwrap();
        let q = t.quiet(64).unwrap();
        t.acquire(3, other, Mode::Exclusive, None).unwrap();
        assert!(t.still(q) && t.quiet(64).is_some() && t.quiet(other).is_none());
        t.release_all(3, [other].into_iter());
    }

    #[test]
    fn a_held_mode_is_kept_and_an_upgrade_needs_no_other_reader() {
        let t = LockTable::new();
        t.acquire(1, 8, Mode::Exclusive, None).unwrap();
        assert_eq!(
            t.acquire(1, 8, Mode::Shared, Some(Mode::Exclusive))
                .unwrap(),
            Mode::Exclusive
        );
        t.release_all(1, [8].into_iter());
        t.acquire(1, 8, Mode::Shared, None).unwrap();
        assert_eq!(
            t.acquire(1, 8, Mode::Exclusive, Some(Mode::Shared))
                .unwrap(),
            Mode::Exclusive
        );
    }

    #[test]
    fn two_upgraders_and_a_crossed_pair_are_deadlocks_not_hangs() {
        // Crossed pair: 1 holds A and waits for B; 2 holds B and asks for A.
        let t = Arc::new(LockTable::new());
        t.set_timeout(Duration::from_secs(3600));
        t.acquire(1, 100, Mode::Exclusive, None).unwrap();
        t.acquire(2, 200, Mode::Exclusive, None).unwrap();
        let t1 = t.clone();
        let waiter = std::thread::spawn(move || t1.acquire(1, 200, Mode::Exclusive, None));
        // Wait (by state, not time) until 1 is recorded as waiting.
        while !t.table.lock().waiting.contains_key(&1) {
            std::thread::yield_now();
        }
        assert!(matches!(
            t.acquire(2, 100, Mode::Exclusive, None),
            Err(Error::Deadlock { offset: 100 })
        ));
        t.release_all(2, [200].into_iter());
        assert_eq!(waiter.join().unwrap().unwrap(), Mode::Exclusive);
        t.release_all(1, [100, 200].into_iter());

        // Two readers that both upgrade.
        t.acquire(1, 300, Mode::Shared, None).unwrap();
        t.acquire(2, 300, Mode::Shared, None).unwrap();
        let t1 = t.clone();
        let up =
            std::thread::spawn(move || t1.acquire(1, 300, Mode::Exclusive, Some(Mode::Shared)));
        while !t.table.lock().waiting.contains_key(&1) {
            std::thread::yield_now();
        }
        assert!(matches!(
            t.acquire(2, 300, Mode::Exclusive, Some(Mode::Shared)),
            Err(Error::Deadlock { .. })
        ));
        t.release_all(2, [300].into_iter());
        assert_eq!(up.join().unwrap().unwrap(), Mode::Exclusive);
    }
}
