//! Asynchronous write-back (ReDU §III–IV), for the `redo-async` policy.
//!
//! A redo commit is durable once its log records are (one fence); its
//! values then wait here, in a volatile *write cache* of 64-byte lines,
//! until a write-back step stores them in place, writes them back and
//! fences. The step then advances the persistent **Log Start** (a meta
//! page word, `META_LOG_START`): the END lsn of the last commit, in commit
//! order, whose values are all in place. Recovery skips the groups at or
//! below it, so once the next step's fence has made it durable their
//! records are released (cleared in any order, their buckets reclaimed):
//! a group is never partly cleared while recovery could still redo an
//! older one over its newer values.
//!
//! * **Reads stay correct.** Until a line is in place, every read of the
//!   pool (`Pool::read`, `Tx::read`, other threads) lays the cached bytes
//!   over the bytes in place. A counting filter keyed by line (a one-hash
//!   counting Bloom filter) answers "certainly not cached" without a lock,
//!   so reads of other memory cost one atomic load per line.
//! * **Other in-place stores come after the cache.** A store the engine
//!   makes in place outside write-back (a savepoint's or nested top
//!   action's undo-logged writes, a fresh block's zeroing or writes, an
//!   atomic write) to a line the filter may hold first drains the cache:
//!   its old value must be the committed one, and no older committed value
//!   may be written over it later. A line stored in place stays counted by
//!   the filter until the fence that makes the Log Start covering its
//!   newest group durable: until then recovery could still redo that group
//!   over the newer store.
//! * **Order.** Steps run one at a time and finish groups in commit order
//!   (commits take sequence numbers with their END, under the log's latch;
//!   one that reaches the cache ahead of an earlier one waits for it). A
//!   step's single fence persists its lines and the Log Start the previous
//!   step stored; the records of the groups that Log Start covers are
//!   released after that fence.
//! * **Policies.** Eager writes every line back as soon as the write-back
//!   thread runs; LRU keeps the most recently written lines, writing the
//!   least recently written back once the cache holds more than its
//!   capacity. Either way the cache and the log are bounded: a commit that
//!   finds the cache over its limit, or the log full, runs a step itself.
//! * **Where steps run.** A thread per pool runs them on a real domain. On
//!   the simulated domain there is none: the crash explorer runs steps as
//!   operations of its programs, so crashes inside write-back and between
//!   write-back and the release are enumerated deterministically.
//!   `Pool::sync` and `Pool::close` drain the cache.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use rustc_hash::FxHashMap;

use super::Engine;
use crate::error::Error;
use crate::format::layout::META_LOG_START;
use crate::log::CellRef;
use crate::persist::{sites, Domain};

/// How committed values reach their home locations under `redo-async`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteBack {
    /// As soon as the write-back thread gets to them (the default).
    #[default]
    Eager,
    /// The cache keeps up to `lines` 64-byte lines, the least recently
    /// written going back first: a line written again and again is written
    /// back once.
    Lru {
        /// Lines held before write-back starts (at least 16).
        lines: usize,
    },
}

const LINE: u64 = 64;
/// Slots of the counting filter.
const FILTER_BITS: u32 = 14;
/// Lines the eager cache holds before a commit helps (about 1.6 MiB): with
/// 4,096, commits helped more often (`examples/txloop batch redo-async 8`
/// went from 7.8–8.3 to 6.3 µs per transaction with this bound).
const EAGER_LINES: usize = 16384;
/// Committed groups waiting before a commit helps (bounds the log the
/// cache holds).
const MAX_GROUPS: usize = 4096;
/// Groups waiting before a commit wakes the write-back thread (waking it
/// costs the commit a system call; it also wakes on its own).
const WAKE_GROUPS: usize = 16;
/// How long the thread sleeps before looking again while groups wait that
/// are not due yet (a thread with nothing waiting sleeps until the next
/// group arrives: an idle pool's thread does not wake a thousand times a
/// second, which took 4 % from a commit of another pool in the same
/// process in `bench overhead`).
const IDLE: Duration = Duration::from_millis(1);

#[derive(Clone)]
struct Line {
    data: [u8; LINE as usize],
    /// Which bytes of `data` are committed values.
    mask: u64,
    /// The oldest and the newest group whose bytes the line holds.
    oldest: u64,
    newest: u64,
    /// When it was last written (LRU).
    tick: u64,
}

/// A committed transaction whose values are not all in place yet.
struct Group {
    /// Its commit sequence number.
    seq: u64,
    /// Its END's lsn.
    end_lsn: u64,
    cells: Vec<CellRef>,
    end: CellRef,
}

struct Inner {
    lines: FxHashMap<u64, Line>,
    /// Groups in commit order, without gaps.
    groups: VecDeque<Group>,
    /// Groups that reached the cache ahead of an earlier commit.
    early: BTreeMap<u64, Group>,
    /// The sequence number the next group in order has.
    next_seq: u64,
    /// Groups whose values are in place; released once the Log Start
    /// stored after them is durable.
    written: Vec<Group>,
    /// Lines stored in place and gone from `lines`, with the newest group
    /// that wrote them, whose filter slots still count them: recovery can
    /// redo that group over the line until a durable Log Start covers it,
    /// so an in-place store there must drain until then.
    retired: Vec<(u64, u64)>,
    /// Every group up to this sequence number is covered by a durable Log
    /// Start (recovery never redoes it).
    covered: u64,
    tick: u64,
    stop: bool,
    /// The thread sleeps with no bound: nothing at all was waiting. The
    /// next group to arrive wakes it.
    asleep: bool,
}

/// The write cache of one pool.
pub(crate) struct WriteCache {
    mode: WriteBack,
    inner: Mutex<Inner>,
    filter: Box<[AtomicU32]>,
    work: Condvar,
    /// One step at a time.
    step: Mutex<()>,
    /// A thread runs the steps.
    threaded: bool,
}

fn slot(line: u64) -> usize {
    (line.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - FILTER_BITS)) as usize
}

/// Bits `at..at + n` of a line's byte mask.
fn mask(at: usize, n: usize) -> u64 {
    if n == 64 {
        u64::MAX
    } else {
        ((1u64 << n) - 1) << at
    }
}

impl WriteCache {
    /// A cache whose first commit will have sequence number `first`.
    pub(crate) fn new(mode: WriteBack, threaded: bool, first: u64) -> WriteCache {
        WriteCache {
            mode,
            inner: Mutex::new(Inner {
                lines: FxHashMap::default(),
                groups: VecDeque::new(),
                early: BTreeMap::new(),
                next_seq: first,
                written: Vec::new(),
                retired: Vec::new(),
                covered: 0,
                tick: 0,
                stop: false,
                asleep: false,
            }),
            filter: (0..1usize << FILTER_BITS)
                .map(|_| AtomicU32::new(0))
                .collect(),
            work: Condvar::new(),
            step: Mutex::new(()),
            threaded,
        }
    }

    /// Whether a thread runs the steps.
    pub(crate) fn threaded(&self) -> bool {
        self.threaded
    }

    /// Lines held before a commit must help: twice the LRU capacity,
    /// saturated, since `lines` is the program's (`usize::MAX` asks to hold
    /// all it can, and twice it overflowed inside a commit).
    fn limit(&self) -> usize {
        match self.mode {
            WriteBack::Eager => EAGER_LINES,
            WriteBack::Lru { lines } => lines.max(16).saturating_mul(2),
        }
    }

    /// Whether the thread has work.
    /// Whether the thread should run a step now rather than wait: a batch
    /// of commits is waiting (eager), or the cache is over its capacity
    /// (LRU). After its wait it runs one for whatever is there.
    fn due(&self, g: &Inner) -> bool {
        match self.mode {
            WriteBack::Eager => g.groups.len() + g.early.len() >= WAKE_GROUPS,
            WriteBack::Lru { lines } => {
                g.lines.len() > lines.max(16)
                    || g.groups.len() > MAX_GROUPS / 2
                    || !g.written.is_empty()
            }
        }
    }

    /// Whether a line of `off..off + len` may be in the cache.
    pub(crate) fn maybe(&self, off: u64, len: u64) -> bool {
        len > 0
            && (off / LINE..=(off + len - 1) / LINE)
                .any(|l| self.filter[slot(l)].load(Ordering::Acquire) != 0)
    }

    /// Reads `buf` at `off` as committed: the bytes in place, with the
    /// lines still waiting for write-back laid over them.
    pub(crate) fn read(&self, d: &Domain, off: u64, buf: &mut [u8]) -> Result<(), Error> {
        if !self.maybe(off, buf.len() as u64) {
            return d.read(off, buf);
        }
        // Under the lock no step can be halfway through a line.
        let g = self.inner.lock();
        d.read(off, buf)?;
        let end = off + buf.len() as u64;
        for line in off / LINE..=(end - 1) / LINE {
            let Some(l) = g.lines.get(&line) else {
                continue;
            };
            let base = line * LINE;
            for i in 0..LINE {
                let a = base + i;
                if a >= off && a < end && l.mask & (1 << i) != 0 {
                    buf[(a - off) as usize] = l.data[i as usize];
                }
            }
        }
        Ok(())
    }

    /// Takes a committed group's values (its records are durable): they
    /// are visible to every read from now on. `cells` and `end` are its
    /// records, released once the values are in place.
    pub(crate) fn insert<'a>(
        &self,
        eng: &Engine,
        entries: impl Iterator<Item = (u64, &'a [u8])>,
        cells: &[CellRef],
        end: crate::log::Placed,
    ) -> Result<(), Error> {
        let (help, wake) = {
            let mut g = self.inner.lock();
            let g = &mut *g;
            let was_due = self.due(g);
            let seq = end.seq;
            g.tick += 1;
            for (off, bytes) in entries {
                let (mut at_off, mut rest) = (off, bytes);
                while !rest.is_empty() {
                    let line = at_off / LINE;
                    let at = (at_off % LINE) as usize;
                    let n = rest.len().min(LINE as usize - at);
                    let l = g.lines.entry(line).or_insert_with(|| {
                        self.filter[slot(line)].fetch_add(1, Ordering::AcqRel);
                        Line {
                            data: [0; LINE as usize],
                            mask: 0,
                            oldest: seq,
                            newest: seq,
                            tick: 0,
                        }
                    });
                    l.newest = l.newest.max(seq);
                    l.data[at..at + n].copy_from_slice(&rest[..n]);
                    l.mask |= mask(at, n);
                    l.tick = g.tick;
                    at_off += n as u64;
                    rest = &rest[n..];
                }
            }
            g.early.insert(
                seq,
                Group {
                    seq,
                    end_lsn: end.lsn,
                    cells: cells.to_vec(),
                    end: end.cell,
                },
            );
            // In commit order: a group waits for the commits before it.
            while let Some(grp) = g.early.remove(&g.next_seq) {
                g.next_seq += 1;
                g.groups.push_back(grp);
            }
            let help = g.lines.len() > self.limit() || g.groups.len() + g.early.len() > MAX_GROUPS;
            // Woken when work becomes due, not at every commit after: a
            // wake is a system call, and the thread loops while work is due;
            // and by the first group after it found nothing to do.
            let wake = (!was_due && self.due(g)) || std::mem::take(&mut g.asleep);
            (help, wake)
        };
        if wake && self.threaded {
            self.work.notify_one();
        }
        if help {
            // Back-pressure: the commit pays for a step.
            self.step(eng, false)?;
        }
        Ok(())
    }

    /// One write-back step: the lines due (all with `all`, or in eager
    /// mode; the least recently written beyond the capacity in LRU mode)
    /// are stored in place and written back; one fence makes them durable,
    /// with the Log Start the previous step stored, whose groups are then
    /// released; the Log Start of the groups now wholly in place is stored
    /// for the next step's fence. Returns whether there was anything to do.
    pub(crate) fn step(&self, eng: &Engine, all: bool) -> Result<bool, Error> {
        let _one = self.step.lock();
        let d = &eng.dom;
        // The lines due, copied out under the lock; they stay in the cache
        // (reads keep finding them) while they are stored in place.
        let picked: Vec<(u64, Line)> = {
            let g = self.inner.lock();
            if g.groups.is_empty() && g.lines.is_empty() && g.written.is_empty() {
                return Ok(false);
            }
            let mut pick: Vec<(u64, u64)> = g.lines.iter().map(|(&k, l)| (l.tick, k)).collect();
            if let (false, WriteBack::Lru { lines }) = (all, self.mode) {
                if g.groups.len() <= MAX_GROUPS / 2 {
                    // The least recently written, down to half the capacity.
                    let keep = lines.max(16) / 2;
                    pick.sort_unstable();
                    pick.truncate(pick.len().saturating_sub(keep));
                }
            }
            pick.iter()
                .map(|&(_, line)| (line, g.lines[&line].clone()))
                .collect()
        };
        for (line, l) in &picked {
            let base = line * LINE;
            let mut i = 0;
            while i < LINE as usize {
                if l.mask & (1 << i) == 0 {
                    i += 1;
                    continue;
                }
                let start = i;
                while i < LINE as usize && l.mask & (1 << i) != 0 {
                    i += 1;
                }
                d.store(base + start as u64, &l.data[start..i])?;
            }
            d.flush_at(base, LINE, sites::WB_FLUSH)?;
        }
        let (done, log_start) = {
            let mut g = self.inner.lock();
            let g = &mut *g;
            for (line, l) in &picked {
                // A line a commit wrote again meanwhile stays (with its
                // older group too, written again by a later step).
                if g.lines.get(line).is_some_and(|now| now.tick == l.tick) {
                    // After the store: a reader that finds the line gone
                    // reads the value in place. Its filter slot keeps
                    // counting it until a durable Log Start covers its
                    // newest group (below, after a later fence).
                    g.lines.remove(line);
                    g.retired.push((*line, l.newest));
                }
            }
            // Groups none of whose lines is left are wholly in place.
            let oldest = g.lines.values().map(|l| l.oldest).min().unwrap_or(u64::MAX);
            let done = std::mem::take(&mut g.written);
            while g.groups.front().is_some_and(|x| x.seq < oldest) {
                g.written.extend(g.groups.pop_front());
            }
            (done, g.written.last().map(|x| x.end_lsn))
        };
        // This step's lines durable, and the Log Start the last step
        // stored: the groups it covers are never redone now.
        d.fence_at(sites::WB_FENCE)?;
        eng.log
            .release_later_all(d, done.iter().map(|g| (&g.cells[..], g.end)))?;
        if let Some(last) = done.last() {
            // The Log Start covering `done` is durable: recovery redoes
            // none of them, so in-place stores over their lines need no
            // drain from now on.
            let mut g = self.inner.lock();
            let g = &mut *g;
            g.covered = g.covered.max(last.seq);
            let covered = g.covered;
            g.retired.retain(|&(line, newest)| {
                let keep = newest > covered;
                if !keep {
                    self.filter[slot(line)].fetch_sub(1, Ordering::AcqRel);
                }
                keep
            });
        }
        if let Some(lsn) = log_start {
            // Persisted by the next step's fence; until then recovery
            // redoes these groups (their values are the newest).
            d.store_nt_u64(META_LOG_START, crate::format::meta::encode_log_start(lsn))?;
        }
        Ok(true)
    }

    /// Writes back everything committed so far: on return every value
    /// committed before the call is in place and durable, and the Log Start
    /// covering them too (so that no later store in place can be undone by
    /// recovery redoing them).
    pub(crate) fn drain(&self, eng: &Engine) -> Result<(), Error> {
        let target = {
            let g = self.inner.lock();
            g.early
                .last_key_value()
                .map_or(g.next_seq, |(&seq, _)| seq + 1)
                .max(g.next_seq)
        };
        loop {
            let settled = {
                // No step halfway: one that has taken `written` for
                // release has not yet made its Log Start durable.
                let _one = self.step.lock();
                let g = self.inner.lock();
                g.written.is_empty()
                    && g.groups.front().is_none_or(|x| x.seq >= target)
                    && g.next_seq >= target
                    && g.lines.values().all(|l| l.oldest >= target)
            };
            if settled {
                return Ok(());
            }
            if !self.step(eng, true)? {
                // A commit durable before the call whose group has not
                // reached the cache yet (a later one's is waiting for it):
                // its thread is between its fence and its insert.
                eng.usable()?;
                std::thread::yield_now();
            }
        }
    }

    /// Before an in-place store of `off..off + len` outside write-back:
    /// drains the cache if it may hold one of those lines.
    pub(crate) fn before_store(&self, eng: &Engine, off: u64, len: u64) -> Result<(), Error> {
        if self.maybe(off, len) {
            self.drain(eng)?;
        }
        Ok(())
    }

    /// Whether a thread holds one of the cache's locks (the crash
    /// explorer's two-thread scheduler must not pause it there).
    #[cfg(feature = "testing")]
    pub(crate) fn latched(&self) -> bool {
        self.inner.is_locked() || self.step.is_locked()
    }

    /// Whether committed groups wait for write-back.
    #[cfg(feature = "testing")]
    pub(crate) fn pending(&self) -> usize {
        self.inner.lock().groups.len()
    }

    /// The write-back thread's loop, until [`stop`](Self::stop).
    pub(crate) fn run(&self, eng: &Engine) {
        loop {
            let work = {
                let mut g = self.inner.lock();
                if !g.stop && !self.due(&g) {
                    if g.groups.is_empty() && g.early.is_empty() && g.written.is_empty() {
                        // Nothing waits: until a group arrives (or stop).
                        g.asleep = true;
                        self.work.wait(&mut g);
                        g.asleep = false;
                    } else {
                        // A batch of commits, or at most IDLE: eager
                        // write-back runs a step for every batch, not every
                        // commit.
                        self.work.wait_for(&mut g, IDLE);
                    }
                }
                if g.stop {
                    return;
                }
                let lru = matches!(self.mode, WriteBack::Lru { .. });
                !g.written.is_empty()
                    || if lru {
                        self.due(&g)
                    } else {
                        !g.groups.is_empty()
                    }
            };
            if !work {
                continue;
            }
            if let Err(e) = self.step(eng, false) {
                eng.poison(&e);
                return;
            }
        }
    }

    /// Ends the write-back thread's loop.
    pub(crate) fn stop(&self) {
        self.inner.lock().stop = true;
        self.work.notify_all();
    }
}
