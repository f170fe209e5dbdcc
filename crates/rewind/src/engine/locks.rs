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
//! Before `Pool::transaction` returns that error, the thread backs off for
//! a random time, longer with each refusal in a row
//! ([`after_transaction`]), so that retries at once converge.
//!
//! An upgrade (shared to exclusive by the same transaction) waits for the
//! other shared holders, not for the requests in line behind it (they wait
//! for it); two upgraders of one lock are a cycle and one of them gets
//! `Deadlock`.
//!
//! **Waiting.** A lock is held for one transaction, a microsecond or two
//! on persistent memory. A request that must wait joins the lock's line
//! (first come, first served: a ticket) and is **handed** the lock: the
//! transaction that releases it (or a request that leaves the line) grants
//! it, under the table's latch, to the requests at the head of the line
//! that nothing blocks now (consecutive shared requests together), and sets
//! each one's own flag. A waiter spins on its flag, then yields the
//! processor (`persist::backoff`), and sleeps on the condition variable
//! only once the wait has lasted longer than that (a transaction on a
//! disk, or one that waits itself). Two earlier designs collapsed under
//! many threads on one lock (`rewind bench threads`, shared tree):
//! - sleeping at once made every hand-over a futex wake and a context
//!   switch: two threads on one `BTreeMap` of `rewind-collections` ran at
//!   a third of one thread's rate;
//! - waiters watching one counter of releases, each taking the latch to
//!   test its request again at every release, made each hand-over cost a
//!   latch hand-over per waiter: on a 16-core machine one map ran at
//!   467 k operations/s with 2 threads, 75 k with 8 and 14 k with 16,
//!   against 1.08 M with one, with no waiter asleep up to 8 threads
//!   (`docs/bench/16-core`).
//!
//! How long a waiter spins and yields depends on the line: 50 µs while the
//! holder and those in line outnumber the processors (spinning then takes
//! a processor from one of them), 500 µs while each can have one (a
//! sleeper then delays the hand-over to itself, and the whole line behind
//! it). A release with no one in line (the common case) hands nothing over
//! and wakes no one.
//!
//! **Shards.** The holders of the locks are kept in [`SHARDS`] shards by
//! key, each under a latch of its own on lines of its own, and the
//! requests in line in one `line` under another latch. A request that
//! finds no one in line (a counter, `slow`, is zero) and no holder in its
//! way is granted under its key's shard latch alone, and a release with no
//! one in line takes only that latch: threads locking objects of their own
//! share no latch and no line of memory. With one latch over the whole
//! table, two threads each locking objects of their own took 0.58–0.79 µs
//! per transaction of three locks each on the 2-core VM, against 0.11–0.18
//! µs for one thread alone; sharded, two threads take 0.19–0.22 µs each
//! (`examples/lockloop.rs`).
//! Everything else (a wait, an upgrade, a release while anyone is in line)
//! takes `line` first, then shard latches one at a time, and counts itself
//! in `slow` before it reads any holder: a request or release that reads
//! `slow` under its shard's latch then either ran wholly before the
//! holders were read, or sees the count and goes through `line`. So while
//! `line` is held with the count raised no holder changes, and the
//! wait-for graph can be walked across shards. A request in line stays
//! counted until it is served or leaves.
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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use rustc_hash::FxHashMap;

use crate::error::Error;
use crate::padded::Padded;
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

/// Free entries a shard keeps (see `release_all`).
const KEEP_FREE: usize = 8;

/// Shards of the lock entries (a power of two; see the module docs).
const SHARDS: usize = 64;

/// The shard of `key`.
fn shard_of(key: u64) -> usize {
    ((key >> 3).wrapping_mul(0x2545_f491_4f6c_dd1d) >> (64 - SHARDS.trailing_zeros())) as usize
}

/// The entries of the keys of one shard.
#[derive(Default)]
struct Shard {
    locks: FxHashMap<u64, Entry>,
}

/// The requests in line, for every key: the waits of the wait-for graph.
#[derive(Default)]
struct Line {
    /// What each waiting transaction waits for, with its place in line.
    waiting: FxHashMap<u64, Wait>,
    next_ticket: u64,
    /// Waiters asleep on the condition variable.
    sleepers: usize,
}

struct Wait {
    key: u64,
    mode: Mode,
    ticket: u64,
    /// Set, under the line's latch, once the lock is granted to it.
    served: std::sync::Arc<AtomicBool>,
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

/// The writers of a lock as a reader that takes none saw them
/// ([`LockTable::watch`], [`Pool::write_watch`](crate::Pool::write_watch)).
#[derive(Clone, Copy, Debug)]
pub struct WriteWatch {
    /// The serial of the pool handle's engine that took it (0: the lock
    /// table's own, for its readers): a watch is of one pool's counters.
    pub(crate) pool: u64,
    stripe: usize,
    granted: u64,
    busy: bool,
}

/// The volatile lock table of one open pool.
pub(crate) struct LockTable {
    /// The holders of each lock, by shard of its key.
    shards: Box<[Padded<Mutex<Shard>>]>,
    /// The requests in line. Taken before any shard's latch, never after.
    line: Mutex<Line>,
    /// The requests in line and those on their way to it (see the module
    /// docs): while it is not zero, every request and release goes
    /// through `line`.
    slow: Padded<AtomicU64>,
    /// Exclusive holds granted and released, by stripe of their key.
    stripes: Box<[Stripe]>,
    /// Where the waiters that outlasted their spin sleep (with `line`).
    changed: Condvar,
    /// The longest wait, in microseconds (a bound below a millisecond is
    /// kept, not rounded down to no wait at all).
    timeout_us: AtomicU64,
    /// Requests that waited, and waits that slept (`Counters::lock_waits`,
    /// `lock_sleeps`): touched only by a request that waits.
    waited: AtomicU64,
    slept: AtomicU64,
}

/// Spins of a waiter before it yields (a few microseconds: `pause` takes
/// tens of cycles).
const SPINS: u32 = 100;

/// The longest a waiter spins and yields, in all, before it sleeps, while
/// more transactions wait than there are processors: a few transactions
/// on persistent memory.
const SPIN_MAX: Duration = Duration::from_micros(50);

/// The same while every waiter, and the holder, can have a processor of
/// its own. A line of sixteen transactions behind one lock is tens of
/// microseconds long; a waiter that slept there made the lock wait for its
/// wake-up (a futex wake, on a virtual machine an interrupt to a halted
/// processor) at every hand-over, and the line, first come first served,
/// grew behind it: sixteen threads on one `BTreeMap` of
/// `rewind-collections` ran at 14 k operations/s against one thread's
/// 1.1 M on a 16-core machine (`docs/bench/16-core`).
const SPIN_MAX_UNCROWDED: Duration = Duration::from_micros(500);

/// The default bound on one lock wait.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest a thread backs off after a deadlock (see
/// [`after_transaction`]).
const BACKOFF_MAX: Duration = Duration::from_millis(1);

thread_local! {
    /// This thread's transactions refused for [`Error::Deadlock`] in a
    /// row, and its backoff's random state.
    static REFUSED: std::cell::Cell<(u32, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// Called when a transaction of this thread has ended, its locks
/// released: `deadlocked` when it was refused a lock for
/// [`Error::Deadlock`] and rolled back. Then, before the error reaches the
/// program (which retries, as the docs advise), the thread backs off for
/// a random time, its bound doubling with each refusal in a row (from a
/// few microseconds to [`BACKOFF_MAX`]); a transaction that ends any other
/// way clears the count.
///
/// The request refused is the one that closes a cycle, so the retry, at
/// once and with the same program order, met the same transactions
/// holding the same locks, and closed the next cycle: eight threads
/// reading, then updating, two collections in opposite orders
/// (`rewind-collections`'s `tests/engine_probe.rs`) met tens of millions
/// of refusals for a few hundred commits. Randomized exponential backoff
/// (a contention manager's remedy for livelock, as Ethernet's for
/// collisions) lets the transactions that won finish first.
pub(crate) fn after_transaction(deadlocked: bool) {
    let (n, seed) = REFUSED.with(|c| c.get());
    if !deadlocked {
        if n != 0 {
            REFUSED.with(|c| c.set((0, seed)));
        }
        return;
    }
    let n = n.saturating_add(1);
    // xorshift64*, seeded once from the address of the thread's state.
    let mut x = match seed {
        0 => REFUSED.with(|c| c as *const _ as u64) | 1,
        s => s,
    };
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    REFUSED.with(|c| c.set((n, x)));
    let bound = (Duration::from_micros(2) * (1u32 << n.min(10))).min(BACKOFF_MAX);
    let wait =
        bound.mul_f64((x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64);
    if wait < Duration::from_micros(50) {
        // Shorter than a sleep can be: the processor yielded meanwhile.
        let end = Instant::now() + wait;
        while Instant::now() < end {
            std::thread::yield_now();
        }
    } else {
        std::thread::sleep(wait);
    }
}

impl LockTable {
    pub(crate) fn new() -> LockTable {
        LockTable {
            shards: (0..SHARDS).map(|_| Padded::default()).collect(),
            line: Mutex::new(Line::default()),
            slow: Padded::default(),
            stripes: (0..STRIPES).map(|_| Stripe::default()).collect(),
            changed: Condvar::new(),
            timeout_us: AtomicU64::new(DEFAULT_TIMEOUT.as_micros() as u64),
            waited: AtomicU64::new(0),
            slept: AtomicU64::new(0),
        }
    }

    /// Requests that waited, and waits that slept, so far.
    pub(crate) fn waits(&self) -> (u64, u64) {
        let w = self.waited.load(Ordering::Relaxed);
        (w, self.slept.load(Ordering::Relaxed))
    }

    /// Sets the bound on one lock wait.
    pub(crate) fn set_timeout(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.timeout_us.store(us, Ordering::Relaxed);
    }

    /// The bound on one lock wait, as kept (to the microsecond;
    /// `Duration::MAX`: none).
    pub(crate) fn timeout(&self) -> Duration {
        match self.timeout_us.load(Ordering::Relaxed) {
            u64::MAX => Duration::MAX,
            us => Duration::from_micros(us),
        }
    }

    /// The latched shard of `key`.
    fn shard(&self, key: u64) -> parking_lot::MutexGuard<'_, Shard> {
        self.shards[shard_of(key)].lock()
    }

    /// The transactions `tx` must wait for to take `key` in `mode`: the
    /// conflicting holders, and the conflicting requests in line before it
    /// (`ticket`: its place, `u64::MAX` for a request not yet in line), so a
    /// lock is granted first come, first served and a waiter woken by a
    /// release is never overtaken by a newcomer. Under the line's latch,
    /// with `slow` raised (the caller's count, or that of the waiter a
    /// hand-over looks at): no holder changes meanwhile.
    fn blocking(&self, t: &Line, tx: u64, key: u64, mode: Mode, ticket: u64) -> Vec<u64> {
        let (mut b, upgrade) = {
            let s = self.shard(key);
            let entry = s.locks.get(&key);
            let b = entry.map_or_else(Vec::new, |e| e.blockers(tx, mode));
            (b, entry.is_some_and(|e| e.shared.contains(&tx)))
        };
        // An upgrade (a shared holder asking for exclusive) waits for the
        // other holders alone, not for the requests in line: they wait for
        // it, so waiting for them would be a deadlock of its own making.
        if upgrade {
            return b;
        }
        b.extend(t.waiting.iter().filter_map(|(&w, a)| {
            let conflicts = mode == Mode::Exclusive || a.mode == Mode::Exclusive;
            (w != tx && a.key == key && a.ticket < ticket && conflicts).then_some(w)
        }));
        b
    }

    /// Whether `tx` waiting for `key` in `mode` would close a cycle.
    fn would_deadlock(&self, t: &Line, tx: u64, key: u64, mode: Mode, ticket: u64) -> bool {
        let mut stack = self.blocking(t, tx, key, mode, ticket);
        let mut seen = Vec::new();
        while let Some(h) = stack.pop() {
            if h == tx {
                return true;
            }
            if seen.contains(&h) {
                continue;
            }
            seen.push(h);
            if let Some(w) = t.waiting.get(&h) {
                stack.extend(self.blocking(t, h, w.key, w.mode, w.ticket));
            }
        }
        false
    }

    /// Grants `tx` the lock `key` in `mode` (nothing conflicts).
    fn grant(&self, tx: u64, key: u64, mode: Mode) {
        let mut s = self.shard(key);
        self.grant_in(s.locks.entry(key).or_default(), tx, key, mode);
    }

    /// Makes `tx` a holder of `e`, `key`'s entry (its shard latched), in
    /// `mode`: nothing conflicts.
    fn grant_in(&self, e: &mut Entry, tx: u64, key: u64, mode: Mode) {
        match mode {
            Mode::Exclusive => {
                // An upgrade: no longer a shared holder.
                e.shared.retain(|&h| h != tx);
                e.exclusive = Some(tx);
                self.granted(key);
            }
            Mode::Shared => e.shared.push(tx),
        }
    }

    /// Hands `key` over to the requests in line for it that nothing blocks
    /// any more, first come first served (consecutive shared requests
    /// together), after a release of it or a request leaving its line.
    /// Each is granted here and told by its own flag, so a hand-over wakes
    /// only the waiters it serves, and no waiter takes the latch to find
    /// out whether it was served.
    fn hand_over(&self, t: &mut Line, key: u64) {
        let mut line: Vec<(u64, u64)> = (t.waiting.iter())
            .filter(|(_, w)| w.key == key)
            .map(|(&tx, w)| (w.ticket, tx))
            .collect();
        if line.is_empty() {
            return;
        }
        line.sort_unstable();
        let mut served = false;
        for (ticket, tx) in line {
            let mode = t.waiting[&tx].mode;
            if !self.blocking(t, tx, key, mode, ticket).is_empty() {
                continue;
            }
            if let Some(w) = t.waiting.remove(&tx) {
                self.grant(tx, key, mode);
                // Out of line: its count in `slow` goes.
                self.slow.fetch_sub(1, Ordering::SeqCst);
                w.served.store(true, Ordering::Release);
                served = true;
            }
        }
        if served && t.sleepers > 0 {
            self.changed.notify_all();
        }
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
        if held.is_none() {
            // Most requests: no one in line for any lock, and no holder in
            // the way. The key's shard alone, the grant made in it.
            let mut s = self.shard(key);
            if self.slow.load(Ordering::SeqCst) == 0 {
                let e = s.locks.entry(key).or_default();
                let free = match mode {
                    Mode::Exclusive => e.is_free(),
                    Mode::Shared => e.exclusive.is_none(),
                };
                if free {
                    self.grant_in(e, tx, key, mode);
                    return Ok(mode);
                }
            }
        }
        self.acquire_slow(tx, key, mode)
    }

    /// [`acquire`](Self::acquire) through the line: a holder in the way,
    /// someone in line, or an upgrade.
    #[cold]
    #[inline(never)]
    fn acquire_slow(&self, tx: u64, key: u64, mode: Mode) -> Result<Mode, Error> {
        let mut t = self.line.lock();
        // Counted first: from now on every request and release goes
        // through the line, so the holders read below stay as read while
        // the line's latch is held.
        self.slow.fetch_add(1, Ordering::SeqCst);
        if self.blocking(&t, tx, key, mode, u64::MAX).is_empty() {
            self.grant(tx, key, mode);
            self.slow.fetch_sub(1, Ordering::SeqCst);
            return Ok(mode);
        }
        // Joining the line closes the only edges of the wait-for graph
        // this request adds: a cycle through them is found now or never
        // (a hand-over only turns a wait for a request in line into a wait
        // for the same transaction holding).
        if self.would_deadlock(&t, tx, key, mode, u64::MAX) {
            self.slow.fetch_sub(1, Ordering::SeqCst);
            return Err(Error::Deadlock { offset: key });
        }
        // In line: its count in `slow` stays until it leaves the line.
        let ticket = t.next_ticket;
        t.next_ticket += 1;
        let served = std::sync::Arc::new(AtomicBool::new(false));
        let wait = Wait {
            key,
            mode,
            ticket,
            served: served.clone(),
        };
        t.waiting.insert(tx, wait);
        self.waited.fetch_add(1, Ordering::Relaxed);
        // Read the clock only once a wait begins: most requests never wait.
        let timeout = self.timeout();
        let start = Instant::now();
        // (`Duration::MAX`: no deadline at all.)
        let deadline = start.checked_add(timeout);
        // The holders and those in line, each on a processor?
        let spin = match backoff::crowded(t.waiting.len() as u64 + 1) {
            true => SPIN_MAX,
            false => SPIN_MAX_UNCROWDED,
        };
        let is_served = || served.load(Ordering::Acquire);
        // Spinning, then yielding, with the latch released (see the module
        // docs); the flag is set under the latch, with the grant.
        let spun = parking_lot::MutexGuard::unlocked(&mut t, || {
            (0..SPINS).any(|_| {
                std::hint::spin_loop();
                is_served()
            }) || backoff::yield_until(spin.min(timeout), is_served)
        });
        if spun || is_served() {
            return Ok(mode);
        }
        self.slept.fetch_add(1, Ordering::Relaxed);
        t.sleepers += 1;
        let mut timed_out = false;
        while !is_served() && !timed_out {
            timed_out = match deadline {
                Some(d) => self.changed.wait_until(&mut t, d).timed_out(),
                None => {
                    self.changed.wait(&mut t);
                    false
                }
            };
        }
        t.sleepers -= 1;
        if is_served() {
            return Ok(mode);
        }
        // Out of the line: those behind it may move up.
        t.waiting.remove(&tx);
        self.slow.fetch_sub(1, Ordering::SeqCst);
        self.hand_over(&mut t, key);
        Err(Error::LockTimeout {
            offset: key,
            waited_ms: timeout.as_millis() as u64,
        })
    }

    /// Releases every lock `tx` holds (the keys of `held`).
    pub(crate) fn release_all(&self, tx: u64, held: impl Iterator<Item = u64>) {
        for key in held {
            let in_line = {
                let mut s = self.shard(key);
                let crowded = s.locks.len() > KEEP_FREE;
                // Read under the shard's latch: a request that joined the
                // line for this key counted itself before it read the
                // holders under this latch.
                let in_line = self.slow.load(Ordering::SeqCst) != 0;
                if let std::collections::hash_map::Entry::Occupied(mut o) = s.locks.entry(key) {
                    let e = o.get_mut();
                    if e.exclusive == Some(tx) {
                        e.exclusive = None;
                        // After the holder's last write (its commit's
                        // write-back or its rollback): readers may take
                        // what they read.
                        self.stripes[stripe_of(key)]
                            .released
                            .fetch_add(1, Ordering::Release);
                    }
                    e.shared.retain(|&h| h != tx);
                    // A free entry stays for the next request of the same
                    // lock (most transactions take the ones the last
                    // took), until free entries are most of the shard.
                    if e.is_free() && crowded {
                        o.remove();
                    }
                }
                in_line
            };
            // Only a request in line needs to hear of it; most releases
            // find none and take no other latch.
            if in_line {
                self.hand_over(&mut self.line.lock(), key);
            }
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
    pub(crate) fn quiet(&self, key: u64) -> Option<WriteWatch> {
        let w = self.watch(key);
        (!w.busy).then_some(w)
    }

    /// Whether no exclusive hold in the stripe began since `q` was seen:
    /// what was read in between no holder was changing.
    pub(crate) fn still(&self, q: WriteWatch) -> bool {
        !self.written_since(q)
    }

    /// The exclusive holds of `key`'s stripe as of now, for
    /// [`written_since`](Self::written_since).
    pub(crate) fn watch(&self, key: u64) -> WriteWatch {
        let stripe = stripe_of(key);
        let s = &self.stripes[stripe];
        let released = s.released.load(Ordering::Acquire);
        let granted = s.granted.load(Ordering::Acquire);
        WriteWatch {
            pool: 0,
            stripe,
            granted,
            busy: granted != released,
        }
    }

    /// Whether an exclusive hold of `w`'s stripe was in force when `w`
    /// was taken or began since: what was read in between, a holder may
    /// have been changing.
    pub(crate) fn written_since(&self, w: WriteWatch) -> bool {
        std::sync::atomic::fence(Ordering::Acquire);
        w.busy || self.stripes[w.stripe].granted.load(Ordering::Acquire) != w.granted
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
        (self.shards.iter())
            .map(|s| s.lock().locks.values().filter(|e| !e.is_free()).count())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_bound_below_a_millisecond_is_kept_and_the_largest_never_times_out() {
        let t = LockTable::new();
        t.set_timeout(Duration::from_micros(500));
        assert_eq!(
            t.timeout(),
            Duration::from_micros(500),
            "half a millisecond, not rounded down to no wait"
        );
        t.set_timeout(Duration::from_nanos(1_500));
        assert_eq!(t.timeout(), Duration::from_micros(1));
        t.set_timeout(Duration::MAX);
        assert_eq!(
            t.timeout_us.load(Ordering::Relaxed),
            u64::MAX,
            "the largest bound: a wait with no deadline (`acquire`)"
        );
        assert_eq!(t.timeout(), Duration::MAX);
        assert!(
            Instant::now().checked_add(t.timeout()).is_none(),
            "no deadline"
        );
    }

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
        while !t.line.lock().waiting.contains_key(&1) {
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
        while !t.line.lock().waiting.contains_key(&1) {
            std::thread::yield_now();
        }
        assert!(matches!(
            t.acquire(2, 300, Mode::Exclusive, Some(Mode::Shared)),
            Err(Error::Deadlock { .. })
        ));
        t.release_all(2, [300].into_iter());
        assert_eq!(up.join().unwrap().unwrap(), Mode::Exclusive);
    }

    /// Waits (by state, not time) until `tx` is in line.
    fn in_line(t: &LockTable, tx: u64) {
        while !t.line.lock().waiting.contains_key(&tx) {
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_request_leaving_the_line_hands_the_lock_to_those_behind_it() {
        // 1 holds shared; 2 asks exclusive and waits; 3 asks shared and
        // waits behind 2 (first come, first served). When 2 gives up, 3
        // shares the lock with 1 at once: no release will come to hand it.
        let t = Arc::new(LockTable::new());
        t.acquire(1, 64, Mode::Shared, None).unwrap();
        t.set_timeout(Duration::from_millis(50));
        let t2 = t.clone();
        let writer = std::thread::spawn(move || t2.acquire(2, 64, Mode::Exclusive, None));
        in_line(&t, 2);
        t.set_timeout(Duration::from_secs(3600));
        let t3 = t.clone();
        let reader = std::thread::spawn(move || t3.acquire(3, 64, Mode::Shared, None));
        in_line(&t, 3);
        assert!(matches!(
            writer.join().unwrap(),
            Err(Error::LockTimeout { offset: 64, .. })
        ));
        assert_eq!(reader.join().unwrap().unwrap(), Mode::Shared);
        t.release_all(1, [64].into_iter());
        t.release_all(3, [64].into_iter());
        assert_eq!(t.held(), 0);
    }

    #[test]
    fn threads_on_keys_of_many_shards_exclude_one_another_and_leave_no_count() {
        // Four threads, each transaction taking two of six keys (spread
        // over shards) in key order, exclusive or shared: the fast path
        // (no one in line) and the line (a holder in the way) race. Inside
        // an exclusive hold of a key no one else holds it; at the end no
        // lock is held, no one is in line and the count is back to zero.
        use std::sync::atomic::AtomicI64;
        let keys: Vec<u64> = (1..).map(|i| i * 64).take(6).collect();
        assert!(keys.iter().any(|&k| shard_of(k) != shard_of(keys[0])));
        let t = Arc::new(LockTable::new());
        t.set_timeout(Duration::from_secs(3600));
        let inside: Arc<Vec<AtomicI64>> =
            Arc::new(keys.iter().map(|_| AtomicI64::new(0)).collect());
        // Held until a worker is in line for it (thread 0's first
        // transaction takes it): the line is exercised however the
        // threads are scheduled.
        t.acquire(u64::MAX, keys[0], Mode::Exclusive, None).unwrap();
        let threads: Vec<_> = (0..4u64)
            .map(|i| {
                let (t, inside, keys) = (t.clone(), inside.clone(), keys.clone());
                std::thread::spawn(move || {
                    for n in 0..3_000u64 {
                        let tx = (i << 32) | n;
                        let (a, b) = ((i + n) as usize % 6, (i * 7 + n * 5) as usize % 6);
                        let mut two = [a.min(b), a.max(b)];
                        if two[0] == two[1] {
                            two[1] = (two[0] + 1) % 6;
                            two.sort_unstable();
                        }
                        let modes = [0, 1].map(|j| match (n + j) % 3 {
                            0 => Mode::Exclusive,
                            _ => Mode::Shared,
                        });
                        for (&k, &mode) in two.iter().zip(&modes) {
                            t.acquire(tx, keys[k], mode, None).unwrap();
                            if mode == Mode::Exclusive {
                                assert_eq!(inside[k].swap(-1, Ordering::SeqCst), 0);
                            } else {
                                assert!(inside[k].fetch_add(1, Ordering::SeqCst) >= 0);
                            }
                        }
                        for (&k, &mode) in two.iter().zip(&modes) {
                            if mode == Mode::Exclusive {
                                assert_eq!(inside[k].swap(0, Ordering::SeqCst), -1);
                            } else {
                                assert!(inside[k].fetch_sub(1, Ordering::SeqCst) >= 1);
                            }
                        }
                        t.release_all(tx, two.iter().map(|&k| keys[k]));
                    }
                })
            })
            .collect();
        while t.line.lock().waiting.is_empty() {
            std::thread::yield_now();
        }
        t.release_all(u64::MAX, [keys[0]].into_iter());
        threads.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(t.held(), 0);
        assert!(t.line.lock().waiting.is_empty());
        assert_eq!(t.slow.load(Ordering::SeqCst), 0);
        assert!(t.waits().0 > 0);
    }

    #[test]
    fn many_threads_on_one_lock_exclude_one_another_and_all_get_it() {
        // Eight threads, a mix of shared and exclusive requests on one
        // key: inside an exclusive hold no one else is inside; every
        // request is served (none times out, none is lost in the line).
        use std::sync::atomic::AtomicI64;
        let t = Arc::new(LockTable::new());
        t.set_timeout(Duration::from_secs(3600));
        let inside = Arc::new(AtomicI64::new(0));
        let threads: Vec<_> = (0..8u64)
            .map(|i| {
                let (t, inside) = (t.clone(), inside.clone());
                std::thread::spawn(move || {
                    let mut exclusive = 0;
                    for n in 0..2_000u64 {
                        let tx = (i << 32) | n;
                        let mode = match (i + n) % 3 {
                            0 => Mode::Exclusive,
                            _ => Mode::Shared,
                        };
                        t.acquire(tx, 8, mode, None).unwrap();
                        if mode == Mode::Exclusive {
                            assert_eq!(inside.swap(-1, Ordering::SeqCst), 0);
                            std::hint::spin_loop();
                            assert_eq!(inside.swap(0, Ordering::SeqCst), -1);
                            exclusive += 1;
                        } else {
                            assert!(inside.fetch_add(1, Ordering::SeqCst) >= 0);
                            assert!(inside.fetch_sub(1, Ordering::SeqCst) >= 1);
                        }
                        t.release_all(tx, [8].into_iter());
                    }
                    exclusive
                })
            })
            .collect();
        let exclusive: u64 = threads.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(exclusive > 0);
        assert_eq!(t.held(), 0);
        assert!(t.line.lock().waiting.is_empty());
    }
}
