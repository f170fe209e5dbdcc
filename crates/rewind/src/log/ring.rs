//! One commit lane's ring: the redo policy's commit groups (NVWAL §4.2,
//! ReDU's packing, MARS's redo log), one after another in a circular region
//! of whole lines, a lane of the commit ring between the bucket log and the
//! heap (`format/group.rs` draws a group byte by byte). A pool's ring is
//! split into lanes (`log/lanes.rs`: which thread commits in which lane,
//! the global commit number every group takes, the watermark that keeps a
//! lane's reclamation from letting another lane's older group replay over
//! newer values, recovery merging the lanes, the drain of all lanes).
//! Everything below is of one lane: "the ring" is this lane, its sequence
//! numbers (csn) its own.
//!
//! **Commit** (one fence). Under the ring's latch, a transaction's group
//! (header, packed entries, CRC) is given its place at the head and its
//! sequence number; outside the latch it is written with non-temporal
//! stores in whole lines, then **one fence** makes it durable: the commit
//! point. Its values are then stored in place and their lines written back
//! (`clwb`) with no fence of their own, in the thread's batch of deferred
//! write-backs (`Domain::store_flush_lazy_at`): the batch is written back
//! once it holds the lines the commit asks for (see [`Ring::commit`]; at
//! once for a commit of many lines), or just before any fence of the
//! thread but a commit's, and the thread's next fence makes it durable. So
//! a commit's fence usually waits for its group alone.
//!
//! **Concurrent commits** (the latch never held across a fence). Groups
//! of several threads are written and fenced at the same time, so group
//! `n + 1` may be durable before group `n`. Recovery replays groups in
//! sequence order and stops at the first one missing, so:
//! - a commit returns (is acknowledged) only once every earlier group is
//!   durable: each commit, after its fence, waits until group `n - 1` is
//!   *applied* (durable and written back in place), spinning briefly (with
//!   more commits in flight than processors, or on a crowded disk,
//!   yielding: `persist::backoff`), then parked on a
//!   condition variable of group `n - 1`'s own, which its commit wakes;
//! - write-back in place happens after the commit point of its group and
//!   of every earlier one, in sequence order where bytes meet: a group's
//!   values are stored once group `n - 1` is applied, or, for a group of
//!   values alone on a disk or the simulator (`Domain::writes_back_ahead`),
//!   once every earlier group not yet applied is durable and published
//!   byte ranges none of which meets its own (`State::may_write_back`:
//!   recovery replays them all then, in order).
//!   Two groups that write the same bytes (a program that does not lock
//!   what it shares) leave the later group's value in place, as replay
//!   does; a crash before group `n` is durable replays neither `n` nor
//!   any later group, none of which has stored a value in place. The
//!   applied count passes a group written back ahead only once the groups
//!   before it are applied;
//! - the ring's bookkeeping (each group written back, with the ranges
//!   its bits entries wrote, the thread epochs, a lagged Log Start's
//!   slot) is recorded under the latch when a group is applied, so in
//!   sequence order. A group's value ranges are not recorded: they are
//!   its value entries, read back from the ring by the rare work that
//!   needs them (a drain writing back other threads' lines, a store in
//!   place asking whether a group touched its lines), so a commit's
//!   bookkeeping does not grow with its writes. On persistent memory a
//!   commit in order that moves no Log Start records it without the
//!   latch instead: its bits ranges and thread into its slot of `done`,
//!   then the applied count, plain stores all (a
//!   locked instruction right after the fence would wait for the group's
//!   non-temporal stores to drain); a holder of the latch that reads
//!   what they record first folds those slots into the state, in sequence
//!   order ([`Ring::fold`]), so what it reads is as if each had recorded
//!   under the latch (a reservation, which reads only the head and the
//!   durable Log Start, folds in batches: see [`Ring::commit`]). Only one
//!   commit at a time stores a lagged Log Start (the slot not in use is
//!   one line).
//!
//! A commit that fails after its reservation (its store or fence) leaves a
//! sequence number that recovery can never pass: the ring takes no more
//! commits, and every commit waiting on it fails with `Poisoned`. On a
//! disk the fence is shared by the commits in flight (group commit, see
//! `persist`: one `msync` covers every group recorded before it); on
//! persistent memory a fence (`sfence`) orders only its own thread's
//! stores, so each commit fences its own group and "sharing" is only the
//! wait for the earlier groups.
//!
//! **Log Start** (reclamation without a fence). Two slots of the lane's line
//! in the meta page hold (commit sequence number, ring position, watermark,
//! check word); recovery takes the valid slot with the higher sequence
//! number and replays, from its position, every group whose CRC matches
//! and whose sequence number is exactly the next one (if its global commit
//! number is above the watermark). The ring space behind the durable Log
//! Start is free. A group is durable in place once the batch its values
//! went into is: the thread that wrote it back tells, with each later group
//! it records, the batches its fences have made durable (an `sfence` orders
//! only its own thread's `clwb`s). A commit advances the Log Start over the
//! prefix of groups so known that the watermark covers
//! ([`Ring::advance_to`]), storing the slot not in use before its own fence.
//! The slot is stored only once
//! that prefix covers an eighth of the ring, so its line is
//! written once per many commits; the space it frees is reused only after
//! the fence that made it durable (until then, a torn slot leaves the other
//! one, which still covers only durable groups).
//!
//! **On a disk** (the Msync backend, where a fence is a device flush), the
//! write-back is lazy: a commit's fence syncs only the group's pages, one
//! device flush per commit, and the data pages reach the disk when the
//! ring is drained (when it is full, before a transaction that logs in the
//! bucket log, at `sync` and close): a checkpoint.
//!
//! **Placement.** Positions grow without bound (`virtual`), the ring
//! position being the remainder by its length. A group that does not fit
//! before the end of the ring starts at position 0, and the scan does the
//! same: at each position it takes the group there if its sequence number
//! is the expected one and it fits before the end, otherwise the group at
//! 0. A group larger than half the ring is not placed here at all (the
//! transaction commits through the bucket log instead).
//!
//! **Drain.** A drain waits for the commits in flight to be applied and
//! holds new ones back (at their reservation) until it ends; it keeps the
//! latch across its fence (drains are checkpoints: rare). Before a
//! transaction logs in the bucket log (its records'
//! stores in place no ring group covers), and at `sync` and close, the
//! lines of groups other threads wrote back and have not fenced are written
//! back again by this thread and fenced (`ring.drain.lines`), then the Log
//! Start is stored at the head with no fence of its own (one fence for both
//! could persist it without a line it covers; and until it is durable a
//! crash only replays values already durable, in order). Ring space behind
//! it is reused only once it is known durable: the draining thread's next
//! fence (its append to the bucket log, `Pool::fence`) makes it so, or a
//! later commit stores the same slot and fences. A commit that finds no
//! room before the durable Log Start commits through the bucket log instead
//! (its first append drains). A block freed by a bucket-log transaction is
//! so never replayed into after its reuse.
//!
//! **Precise drain.** Any other store in place (a fresh block's zeroing and
//! writes, `Pool::write_unlogged`) drains only if a group that recovery
//! could still replay (one at or after the durable Log Start) wrote one of
//! its cache lines: the ring keeps, per line, the sequence number of the
//! last group that wrote it (a commit records only its group's place;
//! the group's entries are read back from the ring and indexed by line
//! when such a store asks, so a commit pays nothing per range). A replay
//! writes only its groups' lines, so a store elsewhere costs no fence. A Log Start that another thread's drain
//! stored and has not fenced is not durable for this thread's fence (a
//! fence orders only its own thread's stores): a drain that finds one
//! stores it again, so that this thread's next fence makes it durable
//! before any of its stores over a drained group's line can count as done.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::error::Error;
use crate::format::group::{self, Builder, Head};
use crate::format::layout::{Layout, META_ROOT_END, META_ROOT_OFF};
use crate::format::meta;
use crate::persist::{backoff, sites, Domain};

use super::lanes::{Lanes, Order};
use super::table::Table;
pub(super) use crate::padded::Padded;

/// A group in the ring that the durable Log Start does not cover yet.
#[derive(Clone, Copy, Debug)]
struct Flight {
    /// Its sequence number.
    csn: u64,
    /// Its global commit number (see `log/lanes.rs`).
    g: u64,
    /// Virtual position of its header, and just after it.
    at: u64,
    end: u64,
    /// The thread that wrote it back, and the batch of that thread's
    /// deferred write-backs its values went into (`Domain::store_flush_lazy_at`):
    /// durable in place once the thread's fences have made that batch
    /// durable (`State::epochs`; `u64::MAX` on a disk: only a drain).
    writer: u64,
    epoch: u64,
    /// The write-back ranges of its bits entries (the bitmap words and
    /// zeroed blocks its allocations and frees wrote), at the front of
    /// `State::ranges` (a group written back ahead of an earlier one keeps
    /// them in `State::early` until the groups before it are written
    /// back). Its values' ranges are its value entries, read from the
    /// ring when a drain or a store in place needs them
    /// ([`Ring::value_ranges`]): a commit records none.
    ranges: usize,
    /// Written back in place (ahead of an earlier group, or in order).
    applied: bool,
    /// Its byte ranges are in `State::claims`.
    claims: bool,
}

/// A Log Start: the next group's sequence number and virtual position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Start {
    csn: u64,
    at: u64,
    /// The global commit number of the last group before it (0: none
    /// known).
    g: u64,
    /// The watermark stored with it (`log/lanes.rs`): every group of every
    /// lane numbered up to it is durable in place.
    w: u64,
}

impl Start {
    /// The later of two Log Starts.
    fn max_by_csn(self, other: Start) -> Start {
        if other.csn > self.csn {
            other
        } else {
            self
        }
    }
}

pub(super) struct State {
    /// Where the next group goes, and its sequence number.
    head: u64,
    next_csn: u64,
    /// The Log Start last stored (durable or not).
    start: Start,
    /// The last Log Start known durable (a fence of the thread that stored
    /// it followed): ring space before it may be reused. And the slot that
    /// holds it; stores go to the other one.
    fenced: Start,
    slot: u64,
    /// A Log Start a drain stored without a fence, and the thread that
    /// stored it: durable once that thread fences (its append to the
    /// bucket log does).
    unfenced: Option<(Start, u64)>,
    /// The end of the groups known durable in place (not yet stored).
    durable_to: Start,
    /// Ends of groups known durable in place that the Log Start has not
    /// passed, in order (the last is `durable_to`): it passes only groups
    /// the watermark covers (`log/lanes.rs`), so possibly not all.
    passed: VecDeque<Start>,
    /// The global commit number of the last group reserved.
    last_g: u64,
    flights: VecDeque<Flight>,
    /// The bits entries' write-back ranges of the groups in `flights`, in
    /// order (see `Flight::ranges`).
    ranges: VecDeque<(u64, u64)>,
    /// Per thread (by its tag), the batches of deferred write-backs its
    /// fences have made durable, as it last told (`Domain::batches_durable`,
    /// recorded with each of its groups): a few threads, looked up by a
    /// scan, and only those with groups in flight kept once there are
    /// more than `epochs_prune_at` (threads come and go).
    epochs: Vec<(u64, u64)>,
    epochs_prune_at: usize,
    /// Cache line → sequence number of the last group that wrote it. A
    /// group at or after the durable Log Start (`fenced.csn`) may still be
    /// replayed: a store in place of one of its lines must drain first.
    /// Built lazily from `groups` and `written`, when a store in place
    /// asks ([`State::touches`]).
    touched: Table<u64>,
    /// `touched` drops the lines of groups behind the durable Log Start
    /// once it holds more than this.
    prune_at: usize,
    /// The groups whose lines `touched` does not hold yet: (sequence
    /// number, virtual position), one per group written back. A commit
    /// pushes its group here, not its ranges: the group's value entries
    /// are read from the ring, and their lines indexed, only when a store
    /// in place asks, so a run of commits with no such store never reads
    /// a group back nor indexes a line.
    groups: Vec<(u64, u64)>,
    /// The same for the ranges the groups' bits entries wrote back (the
    /// allocator's words, which the group does not name): (first line,
    /// last line, sequence number).
    written: Vec<(u64, u64, u64)>,
    /// `groups` and `written` drop the groups behind the durable Log Start
    /// once they hold more than this (they then hold at most the groups
    /// in the ring).
    written_prune_at: usize,
    /// The last group durable and written back in place such that every
    /// group up to it is too (a group may be written back ahead of an
    /// earlier one that writes none of its bytes, see
    /// [`State::may_write_back`]; this count passes it only once the earlier
    /// ones are).
    applied: u64,
    /// (sequence number, first byte, end) of each value entry of the
    /// groups in flight that published them at their reservation (those
    /// reserved while another commit was in flight, with no bits entry
    /// and at most [`MAX_CLAIMS`] entries): what a later group compares
    /// its own with to be written back ahead of them.
    claims: Vec<(u64, u64, u64)>,
    /// The write-back ranges of groups written back ahead of an earlier
    /// one, by sequence number: moved to `ranges` in order once the groups
    /// before them are written back.
    early: Vec<(u64, Vec<(u64, u64)>)>,
    /// A commit stores the Log Start slot not in use (one at a time).
    advancing: bool,
    /// A drain waits for the commits in flight; new ones wait for it.
    draining: bool,
    /// A commit failed after its reservation: later groups could never be
    /// replayed, so the ring takes no more (the pool is poisoned).
    broken: Option<String>,
}

impl State {
    /// The state of a ring whose next group is `start`'s, its Log Start
    /// in `slot`, nothing in flight.
    fn new(start: Start, slot: u64) -> State {
        State {
            head: start.at,
            next_csn: start.csn,
            start,
            fenced: start,
            slot,
            unfenced: None,
            durable_to: start,
            passed: VecDeque::new(),
            last_g: start.g,
            flights: VecDeque::new(),
            ranges: VecDeque::new(),
            epochs: Default::default(),
            epochs_prune_at: EPOCHS_MIN,
            touched: Default::default(),
            prune_at: PRUNE_MIN,
            groups: Vec::new(),
            written: Vec::new(),
            written_prune_at: PRUNE_MIN,
            applied: start.csn - 1,
            claims: Vec::new(),
            early: Vec::new(),
            advancing: false,
            draining: false,
            broken: None,
        }
    }

    /// Commits reserved and not yet counted applied (written back in
    /// order, or ahead and waiting for the groups before them).
    fn inflight(&self) -> u64 {
        self.next_csn - 1 - self.applied
    }

    /// `Err(Poisoned)` once a commit failed midway.
    fn usable(&self) -> Result<(), Error> {
        match &self.broken {
            Some(cause) => Err(Error::Poisoned {
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Whether a group that recovery could replay (one the durable Log
    /// Start does not cover) wrote a line of `off..off + len`: probing each
    /// line or scanning the map, whichever is shorter. `values(csn, at,
    /// out)` gives the value ranges of group `csn` at virtual position `at`
    /// ([`Ring::value_ranges`]); a group it cannot read counts as
    /// touching every line (the caller drains: never wrong, only slower).
    fn touches(
        &mut self,
        off: u64,
        len: u64,
        values: impl FnMut(u64, u64, &mut Vec<(u64, u64)>) -> Result<(), Error>,
    ) -> bool {
        if len == 0 {
            return false;
        }
        if self.index_written(values).is_err() {
            return true;
        }
        let (first, last) = (off / LINE, (off + len - 1) / LINE);
        let from = self.fenced.csn;
        if last - first < self.touched.len() as u64 {
            (first..=last).any(|l| self.touched.get(l).is_some_and(|c| c >= from))
        } else {
            self.touched
                .iter()
                .any(|(l, c)| c >= from && (first..=last).contains(&l))
        }
    }

    /// Moves the lines of `groups` and `written` that a group recovery
    /// could still replay wrote into `touched` (a line keeping the latest
    /// group's sequence number), and prunes `touched` once it has grown.
    /// (Such a group is still whole in the ring: its space is reused only
    /// once the durable Log Start has passed it.)
    fn index_written(
        &mut self,
        mut values: impl FnMut(u64, u64, &mut Vec<(u64, u64)>) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let from = self.fenced.csn;
        let mut ranges = Vec::new();
        for i in 0..self.groups.len() {
            let (csn, at) = self.groups[i];
            if csn < from {
                continue;
            }
            ranges.clear();
            values(csn, at, &mut ranges)?;
            for &(target, len) in &ranges {
                self.note_written(target, len, csn);
            }
        }
        self.groups.clear();
        let touched = &mut self.touched;
        for &(first, last, csn) in self.written.iter().filter(|w| w.2 >= from) {
            for l in first..=last {
                // (Groups record in sequence order; only a mutated engine,
                // which skips the wait for earlier groups, does not.)
                if let Some(later) = touched.replace(l, csn).filter(|&c| c > csn) {
                    touched.set(l, later);
                }
            }
        }
        self.written.clear();
        if self.touched.len() > self.prune_at {
            self.touched.retain(|c| c >= from);
            self.prune_at = (2 * self.touched.len()).max(PRUNE_MIN);
        }
        Ok(())
    }

    /// Notes in `written` the lines of `len` bytes at `target` that group
    /// `csn` wrote (none for an empty range).
    fn note_written(&mut self, target: u64, len: u64, csn: u64) {
        if len > 0 {
            self.written
                .push((target / LINE, (target + len - 1) / LINE, csn));
        }
    }

    /// Drops the ranges of `written` that groups behind the durable Log
    /// Start wrote (no replay writes them again).
    fn prune_written(&mut self) {
        let from = self.fenced.csn;
        self.groups.retain(|g| g.0 >= from);
        self.written.retain(|w| w.2 >= from);
        let held = self.groups.len() + self.written.len();
        self.written_prune_at = (2 * held).max(PRUNE_MIN);
    }

    /// Group `csn` written back in order: the applied count passes it, and
    /// the groups after it already written back ahead of it (their ranges
    /// moved from `early` to `ranges`, in order).
    #[inline]
    fn record_in_order(&mut self, first: u64, csn: u64, n: usize) {
        self.flights[(csn - first) as usize].ranges = n;
        self.applied = csn;
        if !self.early.is_empty() {
            self.record_early(first);
        }
    }

    /// The groups written back ahead that the applied count now reaches,
    /// recorded in order.
    #[inline(never)]
    fn record_early(&mut self, first: u64) {
        while let Some(f) =
            (self.flights.get((self.applied + 1 - first) as usize)).filter(|f| f.applied)
        {
            let next = f.csn;
            let i = (self.early.iter().position(|e| e.0 == next))
                .expect("a group written back ahead keeps its ranges");
            let (_, ranges) = self.early.swap_remove(i);
            self.flights[(next - first) as usize].ranges = ranges.len();
            self.ranges.extend(ranges);
            self.applied = next;
        }
    }

    /// Whether group `csn` (of values alone, its fence done) may be written
    /// back now: every earlier group not written back yet is durable (as
    /// `durable` says) and published its byte ranges, none of which meets
    /// one of `b`'s. Otherwise the first earlier group in the way.
    fn may_write_back(
        &self,
        csn: u64,
        b: &Builder,
        durable: impl Fn(u64) -> bool,
    ) -> Result<(), Blocker> {
        let first = self.flights.front().map_or(csn, |f| f.csn);
        let earlier = self.flights.iter().take((csn - first) as usize);
        for f in earlier.filter(|f| f.csn > self.applied && !f.applied) {
            if !f.claims {
                return Err(Blocker::WriteBack(f.csn));
            }
            if !durable(f.csn) {
                return Err(Blocker::Fence(f.csn));
            }
        }
        let mine = || b.values().map(|(t, v)| (t, t + v.len() as u64));
        match (self.claims.iter())
            .filter(|c| c.0 < csn)
            .find(|&&(_, s, e)| mine().any(|(t, end)| t < e && s < end))
        {
            Some(&(c, _, _)) => Err(Blocker::WriteBack(c)),
            None => Ok(()),
        }
    }

    /// The batches of write-backs thread `tag` has made durable.
    fn epoch(&self, tag: u64) -> u64 {
        self.epochs
            .iter()
            .find(|&&(t, _)| t == tag)
            .map_or(0, |&(_, n)| n)
    }

    /// Thread `tag` tells that its fences have made `durable` batches
    /// durable: its count rises to it (counts never fall).
    fn raise_epoch(&mut self, tag: u64, durable: u64) {
        let i = match self.epochs.iter().position(|&(t, _)| t == tag) {
            Some(i) => i,
            None => {
                if self.epochs.len() >= self.epochs_prune_at {
                    // A thread with no group in flight needs no count: it
                    // tells one again with its next group.
                    let flights = &self.flights;
                    self.epochs
                        .retain(|&(t, _)| flights.iter().any(|f| f.writer == t));
                    self.epochs_prune_at = (2 * self.epochs.len()).max(EPOCHS_MIN);
                }
                self.epochs.push((tag, 0));
                self.epochs.len() - 1
            }
        };
        let known = &mut self.epochs[i].1;
        *known = (*known).max(durable);
    }
}

/// What keeps a group from being written back ahead of earlier ones
/// ([`State::may_write_back`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Blocker {
    /// This earlier group's fence is not done.
    Fence(u64),
    /// This earlier group must be written back first (it writes some of
    /// the same bytes, or did not say which it writes).
    WriteBack(u64),
}

/// A commit's write-back of one bits entry (block, size, set): the ranges
/// it wrote (see [`Ring::commit`]).
pub type ApplyBits<'a> = dyn FnMut(u64, u64, bool) -> Result<[(u64, u64); 2], Error> + 'a;

/// Bytes per cache line (what `State::touched` counts in).
const LINE: u64 = group::LINE as u64;

/// The most value entries a group publishes in `State::claims`: a larger
/// group is written back in order (comparing its entries with every
/// earlier group's would cost more than the wait).
const MAX_CLAIMS: u32 = 16;

/// The least `State::epochs_prune_at`.
const EPOCHS_MIN: usize = 16;

/// The least `State::prune_at`.
const PRUNE_MIN: usize = 4096;

/// Most places a Log Start may stop at that a lane keeps
/// (`State::passed`).
const PASSED_MAX: usize = 64;

/// Spins of a commit waiting for an earlier group before it parks.
const SPINS: u32 = 2000;

/// The same on a disk (Msync).
const SPINS_DISK: u32 = 50;

/// A lane's durable Log Start, as recovery leaves it: the next group's
/// sequence number and position, the slot that holds it, its watermark.
#[derive(Clone, Copy, Debug)]
pub(super) struct LaneStart {
    pub csn: u64,
    pub at: u64,
    pub slot: u64,
    pub w: u64,
}

/// What recovery found in the ring.
#[derive(Clone, Copy, Debug, Default)]
pub struct Replayed {
    /// Groups replayed.
    pub groups: u64,
    /// Value entries stored in place (bits entries not counted).
    pub entries: u64,
}

/// The ring of one commit lane.
///
/// Its fields are laid out so that threads committing at once share no
/// cache line they do not need to: the latch and the state it guards on
/// lines of their own, the words read without the latch (a commit waiting
/// for an earlier group spins on `applied`) on another, the ring's place
/// (read by every commit, written by none) on a third.
pub struct Ring {
    off: u64,
    len: u64,
    /// Its lane: the Log Start slots it stores, its low word of `order`.
    lane: u64,
    /// The global commit numbers all lanes take (`log/lanes.rs`).
    order: std::sync::Arc<Order>,
    state: Padded<Mutex<State>>,
    watch: Padded<Watch>,
    /// Signalled under the latch when a group is written back, a drain
    /// ends or the ring closes.
    cv: Condvar,
    /// The commits parked for an earlier group, by that group's csn
    /// modulo [`ORDER_SLOTS`]: applying group `n` wakes only the commit
    /// waiting for `n` (and the rare one sharing its slot), not every
    /// commit in flight, which would then take the latch to see that its
    /// own group is not due yet (a herd of wake-ups per group).
    order_cv: [Condvar; ORDER_SLOTS],
    /// Where a commit in order records its write-back without the latch,
    /// by sequence number modulo [`DONE_SLOTS`] (see [`Ring::commit`]).
    done: Box<[Done]>,
}

/// A commit's write-back, recorded without the latch on a domain whose
/// commits go in order (`Domain::commits_in_order`): the thread that wrote
/// it back, and the byte ranges its bits entries wrote (at most
/// [`DONE_RANGES`]; a group with more records under the latch; its value
/// ranges are its entries in the ring). The latch's next holder folds it
/// into the ring's state ([`Ring::fold`]).
///
/// The slot of group `n` (`n % DONE_SLOTS`) is written only by the commit
/// of group `n`, after its turn came (every earlier group counted applied)
/// and before it stores `Watch::applied = n` (Release); it is read only
/// under the latch, after an Acquire load of `Watch::applied >= n` and
/// before the state's applied count passes `n`. The slot's next writer,
/// group `n + DONE_SLOTS`, was reserved under the latch once the state's
/// applied count had passed `n` (`Ring::commit`, step 1), so after that
/// read ended. Relaxed atomic stores and loads are plain moves: no locked
/// instruction.
struct Done {
    /// The group's [`WriteBack`].
    writer: AtomicU64,
    ticket: AtomicU64,
    durable: AtomicU64,
    count: AtomicU64,
    /// (first byte, length) of each bits range, two words each.
    words: Box<[AtomicU64]>,
}

impl Default for Done {
    fn default() -> Done {
        Done {
            writer: AtomicU64::new(0),
            ticket: AtomicU64::new(0),
            durable: AtomicU64::new(0),
            count: AtomicU64::new(0),
            words: (0..2 * DONE_RANGES).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl Done {
    /// The ranges recorded.
    fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let n = self.count.load(Ordering::Relaxed) as usize;
        (self.words[..2 * n].chunks_exact(2))
            .map(|w| (w[0].load(Ordering::Relaxed), w[1].load(Ordering::Relaxed)))
    }
}

/// Who wrote a group back in place and when it is durable there: the
/// writer's batch of deferred write-backs that holds its values (the
/// ticket of `Domain::store_flush_lazy_at`), and the batches the writer
/// had made durable when it recorded the group (`Domain::batches_durable`,
/// after its commit's fence).
#[derive(Clone, Copy, Debug)]
struct WriteBack {
    writer: u64,
    ticket: u64,
    durable: u64,
}

/// The slots of [`Ring::done`]: more than the commits usually in flight
/// at once (a reservation that would reuse a slot not yet folded waits).
const DONE_SLOTS: usize = 64;

/// The most bits ranges a commit records in its slot of [`Ring::done`].
const DONE_RANGES: usize = 128;

/// How long a commit parked for an earlier group, or a drain waiting for
/// the commits in flight, sleeps before it looks again: a group recorded
/// without the latch wakes the sleepers it sees, and one that looked just
/// before a sleeper joined is caught by this bound (see [`Ring::commit`]).
const PARK_RECHECK: std::time::Duration = std::time::Duration::from_micros(200);

/// The slots of [`Watch::durable`]: more than the commits usually in
/// flight at once.
const DURABLE_SLOTS: usize = 64;

/// The condition variables of [`Ring::order`]: more than the commits
/// usually in flight at once, so a slot rarely wakes a commit that is not
/// due.
const ORDER_SLOTS: usize = 32;

/// What commits read without the latch.
struct Watch {
    /// Groups the durable Log Start does not cover exist: a drain has
    /// work.
    pending: AtomicBool,
    /// `State::unfenced` is set.
    unfenced: AtomicBool,
    /// `State::applied`.
    applied: AtomicU64,
    /// Group `n`'s fence is done once slot `n % DURABLE_SLOTS` holds `n`
    /// (stored by its thread after its fence, without the latch; a slot
    /// taken by a later group only makes a waiter wait longer).
    durable: [AtomicU64; DURABLE_SLOTS],
    /// On a disk: group `n`'s range was recorded under the number in
    /// `recorded[n % DURABLE_SLOTS]` while `recorded_by` there holds `n`
    /// (written `0`, number, `n`; read `n`, number, `n`), and it is durable
    /// once a device flush covered that number, before its thread has run
    /// again ([`Ring::durable`]).
    recorded_by: [AtomicU64; DURABLE_SLOTS],
    recorded: [AtomicU64; DURABLE_SLOTS],
    /// `State::broken` is set.
    broken: AtomicBool,
    /// `State::inflight`: more commits in flight than processors, and a
    /// commit waiting for an earlier group yields rather than spins (the
    /// group's thread may be waiting for a processor).
    inflight: AtomicU64,
    /// Threads asleep (or about to sleep) on `Ring::cv` or an order
    /// condition variable for the applied count: a commit that records its
    /// write-back without the latch takes it to wake them only then.
    sleepers: AtomicU64,
}

impl Ring {
    /// The ring of lane `lane`, `len` bytes at pool offset `off`, whose
    /// next group is `csn` at virtual position `at` (the durable Log Start
    /// in `slot`, holding watermark `w`), nothing in flight.
    pub(super) fn new(
        off: u64,
        len: u64,
        lane: u64,
        order: std::sync::Arc<Order>,
        at: LaneStart,
    ) -> Ring {
        let LaneStart { csn, at, slot, w } = at;
        let start = Start { csn, at, g: 0, w };
        Ring {
            off,
            len,
            lane,
            order,
            state: Padded(Mutex::new(State::new(start, slot))),
            watch: Padded(Watch {
                pending: AtomicBool::new(false),
                unfenced: AtomicBool::new(false),
                applied: AtomicU64::new(csn - 1),
                durable: std::array::from_fn(|_| AtomicU64::new(0)),
                recorded_by: std::array::from_fn(|_| AtomicU64::new(0)),
                recorded: std::array::from_fn(|_| AtomicU64::new(0)),
                broken: AtomicBool::new(false),
                inflight: AtomicU64::new(0),
                sleepers: AtomicU64::new(0),
            }),
            cv: Condvar::new(),
            order_cv: std::array::from_fn(|_| Condvar::new()),
            done: (0..DONE_SLOTS).map(|_| Done::default()).collect(),
        }
    }

    /// Visits, in order, the header of every group recovery finds in the
    /// lane of `len` bytes at `off` from position `pos` and sequence
    /// number `csn` (the scan and wrap rule of `docs/format.md`), each with
    /// its position. Returns the position and
    /// sequence number after the last group, and the groups visited.
    pub(super) fn walk(
        d: &Domain,
        off: u64,
        len: u64,
        pos: u64,
        csn: u64,
        visit: &mut dyn FnMut(&Head, u64) -> Result<(), Error>,
    ) -> Result<(u64, u64, u64), Error> {
        let (mut at, mut next, mut groups) = (pos, csn, 0);
        let mut scanned = 0u64;
        let mut entries_buf = Vec::new();
        loop {
            let found = match Self::group_at(d, off, len, at, next, &mut entries_buf)? {
                Some(h) => Some((at, h)),
                None if at != 0 => {
                    Self::group_at(d, off, len, 0, next, &mut entries_buf)?.map(|h| (0, h))
                }
                None => None,
            };
            let Some((p, head)) = found else { break };
            let size = head.size();
            scanned += size + if p == at { 0 } else { len - at };
            if scanned > len {
                // More than a lap of valid groups: impossible for groups
                // one writer placed.
                return Err(Error::LogCorrupt {
                    offset: off + p,
                    reason: "commit ring holds more than a lap of groups",
                });
            }
            visit(&head, p)?;
            groups += 1;
            at = (p + size) % len;
            next += 1;
        }
        Ok((at, next, groups))
    }

    /// The group at ring position `at` if it is sequence number `csn`,
    /// fits before the end and its CRC matches; its entries in `buf`.
    pub(super) fn group_at(
        d: &Domain,
        off: u64,
        len: u64,
        at: u64,
        csn: u64,
        buf: &mut Vec<u8>,
    ) -> Result<Option<Head>, Error> {
        if len - at < group::LINE as u64 {
            return Ok(None);
        }
        let mut h = [0u8; group::HEADER];
        d.read(off + at, &mut h)?;
        let Some(head) = Head::decode(&h) else {
            return Ok(None);
        };
        if head.csn != csn || head.size() > len - at {
            return Ok(None);
        }
        buf.resize(head.bytes as usize, 0);
        d.read(off + at + group::HEADER as u64, buf)?;
        Ok(head.verify(&h, buf).then_some(head))
    }

    /// The entries of group `csn` at ring position `at` ([`group_at`](Self::group_at)),
    /// decoded from `buf`; `missing` is the `LogCorrupt` reason when the
    /// group is not there.
    pub(super) fn entries_at<'b>(
        d: &Domain,
        off: u64,
        len: u64,
        at: u64,
        csn: u64,
        buf: &'b mut Vec<u8>,
        missing: &'static str,
    ) -> Result<Vec<group::Entry<'b>>, Error> {
        let head = Self::group_at(d, off, len, at, csn, buf)?.ok_or(Error::LogCorrupt {
            offset: off + at,
            reason: missing,
        })?;
        group::entries(buf, head.count, off + at)
    }

    /// Whether a group of `size` bytes is committed here (at most half
    /// the ring).
    pub fn fits(&self, size: usize) -> bool {
        size as u64 <= self.len / 2
    }

    /// Commits the group in `b` (sealed here with the next sequence
    /// number): placed, written, one fence, then written back in place
    /// with no fence. Returns its sequence number, or `None` when the ring
    /// has no room before the durable Log Start: the transaction then
    /// commits through the bucket log, whose first append drains the ring
    /// (and whose fences make that Log Start durable), so that no commit
    /// ever writes over ring space whose Log Start is not yet durable.
    ///
    /// The latch is held only to reserve (position, sequence number, a
    /// lagged Log Start to store) and to record the write-back: the group
    /// is written and fenced outside it, so concurrent commits fence at
    /// once (see the module docs, **Concurrent commits**).
    ///
    /// A group may carry bits entries (allocations and frees): at
    /// write-back, before the group's values, a zeroed allocation's block
    /// is zeroed, and `bits(block, size, set)` sets or clears the block's
    /// bitmap bit in place (under the allocator's latch, with its check
    /// word), all with no fence; it returns the ranges it wrote: like the
    /// zeroed blocks, they are written back again by a drain of another
    /// thread and kept from stores in place as the values are.
    pub(super) fn commit(
        &self,
        d: &Domain,
        b: &mut Builder,
        bits: &mut ApplyBits<'_>,
        lanes: &Lanes,
    ) -> Result<Option<u64>, Error> {
        let mut bit_ranges: Vec<(u64, u64)> = Vec::new();
        let size = b.size() as u64;
        debug_assert!(self.fits(size as usize));
        let me = super::thread_tag();
        // 1. Reserve, under the latch.
        let (csn, g, at, advance, batch, lag) = {
            let mut st = self.state.lock();
            // The commits recorded without the latch are folded in, and
            // the groups durable in place learnt, in batches: when the
            // ring's head is an eighth past the durable Log Start (a new
            // one may be due), or half of `done`'s slots wait. Until then
            // the reservation reads only what no record changes (the head,
            // the durable Log Start), and touches fewer of the state's
            // lines, which the threads committing hand to one another.
            // (A slot of `done` is reused only once its group is folded:
            // never, short of `DONE_SLOTS` commits in flight at once.)
            let batched = !st.draining
                && st.broken.is_none()
                && st.next_csn <= st.applied + DONE_SLOTS as u64 / 2
                && st.head - st.fenced.at < self.len / 8;
            // The lines of the thread's batch of deferred write-backs
            // that this commit's write-back writes back once it holds as
            // many (see `Domain::store_flush_lazy_at`): an eighth of the
            // lane's worth of groups of one line each.
            let mut batch = (self.len / 8 / group::LINE as u64) as usize;
            if !batched {
                st = self.wait_while(d, st, |st| {
                    (st.draining || st.next_csn > st.applied + DONE_SLOTS as u64)
                        && st.broken.is_none()
                });
                self.learn(&mut st);
                // Groups not known durable in place fill an eighth of the
                // lane: the Log Start cannot pass them until their
                // writers' batches are written back, so this one's goes
                // now.
                if st.head - st.durable_to.at >= self.len / 8 {
                    batch = 1;
                }
            }
            let st = &mut *st;
            st.usable()?;
            let at = self.place(st.head, size);
            if at + size - st.fenced.at > self.len {
                return Ok(None);
            }
            let csn = st.next_csn;
            st.head = at + size;
            st.next_csn = csn + 1;
            let idle = st.flights.is_empty().then_some(st.last_g + 1);
            let g = self.order.take(self.lane, idle);
            st.last_g = g;
            // Lagged reclamation: the slot not in use takes the end of the
            // groups known durable that the watermark covers, made durable
            // by this commit's fence (one commit at a time; a drain's
            // unfenced store to the same slot is superseded).
            let advance = match !st.advancing && st.durable_to.at - st.fenced.at >= self.len / 8 {
                true => self.advance_to(d, st, lanes),
                false => None,
            };
            let advance = advance.map(|to| {
                st.advancing = true;
                st.unfenced = None;
                self.watch.unfenced.store(false, Ordering::Release);
                (st.slot ^ 1, to)
            });
            // (The applied count as commits store it: the state's may lag.)
            let applied = (self.watch.applied.load(Ordering::Acquire)).max(st.applied);
            let inflight = st.next_csn - 1 - applied;
            self.watch.inflight.store(inflight, Ordering::Relaxed);
            // With a commit in flight before it, a group of values alone
            // publishes them, so that a later group that writes none of
            // their bytes need not wait for its write-back.
            let claims = inflight > 1
                && d.writes_back_ahead()
                && b.bits().next().is_none()
                && b.count() <= MAX_CLAIMS;
            if claims {
                for (t, v) in b.values() {
                    st.claims.push((csn, t, t + v.len() as u64));
                }
            }
            st.flights.push_back(Flight {
                csn,
                g,
                at,
                end: at + size,
                writer: me,
                epoch: 0,
                ranges: 0,
                applied: false,
                claims,
            });
            // (`inflight` is the group's lag: every group of the lane up
            // to `csn - inflight` is written back; see `Head::written_back`.)
            (csn, g, at, advance, batch, inflight)
        };
        // 2. Write and fence, without the latch: the commit point, the
        // group durable (and the Log Start stored with it).
        let written = (|| {
            let bytes = b.seal(csn, g, lag);
            if let Some(n) = d.store_nt_numbered(self.off + at % self.len, bytes)? {
                let i = (csn % DURABLE_SLOTS as u64) as usize;
                self.watch.recorded_by[i].store(0, Ordering::Release);
                self.watch.recorded[i].store(n, Ordering::Release);
                self.watch.recorded_by[i].store(csn, Ordering::Release);
            }
            if let Some((slot, start)) = advance {
                self.store_slot(d, slot, start)?;
            }
            d.fence_commit_at(sites::RING_COMMIT)
        })();
        // 3. Wait until every earlier group is durable and written back:
        // recovery replays groups in order and stops at the first one
        // missing, so this one counts only once they all do, and in-place
        // stores go in sequence order (a later group's value of the same
        // bytes lands last, as at replay).
        let turn = written.and_then(|()| match d.mutated(sites::RING_ORDER) {
            true => Ok(()),
            false => self.wait_turn(d, csn, b),
        });
        // 4. Write-back: stores, their clwbs in the thread's batch, no fence
        // (the fence after the batch's write-back makes them durable: the
        // ticket); allocations first, so a new block is
        // zeroed before the values written into it.
        let done = turn.and_then(|()| {
            for e in b.bits() {
                if e.zero {
                    zero_block(d, e.off, e.size, sites::RING_WRITE_BACK, true)?;
                    bit_ranges.push((e.off, e.size));
                }
                bit_ranges.extend(bits(e.off, e.size, e.set)?);
            }
            d.store_flush_lazy_at(b.values(), sites::RING_WRITE_BACK, batch)
        });
        // 5. Record the write-back and let the next group go. In order on
        // persistent memory (every earlier group is applied: this one's
        // turn came), without the latch: the ranges into this group's slot
        // of `done`, then the applied count, with plain stores (a locked
        // instruction right after the fence would wait for the group's
        // non-temporal stores to drain, and the latch is what every commit
        // of every thread takes); the latch's next holder folds the slot
        // into the state. A commit parked for this group is woken only if
        // one said it sleeps (`Watch::sleepers`); one that joined just as
        // this commit looked wakes at its next look (`PARK_RECHECK`).
        // (Its values' batch, and the batches this thread's fences, its
        // commit's last, have made durable.)
        let wb = WriteBack {
            writer: me,
            ticket: *done.as_ref().unwrap_or(&u64::MAX),
            durable: d.batches_durable(),
        };
        if done.is_ok()
            && advance.is_none()
            && bit_ranges.len() <= DONE_RANGES
            && d.commits_in_order()
            && !d.mutated(sites::RING_ORDER)
        {
            // (This commit owns its group's slot now: see `Done`.)
            let slot = &self.done[(csn % DONE_SLOTS as u64) as usize];
            let mut n = 0;
            for (&(t, len), w) in bit_ranges.iter().zip(slot.words.chunks_exact(2)) {
                w[0].store(t, Ordering::Relaxed);
                w[1].store(len, Ordering::Relaxed);
                n += 1;
            }
            slot.count.store(n, Ordering::Relaxed);
            slot.writer.store(wb.writer, Ordering::Relaxed);
            slot.ticket.store(wb.ticket, Ordering::Relaxed);
            slot.durable.store(wb.durable, Ordering::Relaxed);
            self.watch.applied.store(csn, Ordering::Release);
            if !self.watch.pending.load(Ordering::Relaxed) {
                self.watch.pending.store(true, Ordering::Release);
            }
            if self.watch.sleepers.load(Ordering::Relaxed) > 0 {
                let _latch = self.state.lock();
                self.order_cv(csn).notify_all();
                self.cv.notify_all();
            }
            return Ok(Some(csn));
        }
        // Otherwise under the latch: a failed commit, one that moves the
        // Log Start, and every commit on a disk or a simulator that writes
        // back ahead.
        let mut st = self.state.lock();
        self.fold(d, &mut st);
        let st = &mut *st;
        if let Err(e) = done {
            // Later groups can never be replayed past this one: the ring
            // is closed until the pool is reopened.
            if st.broken.is_none() {
                st.broken = Some(e.to_string());
            }
            self.watch.broken.store(true, Ordering::Release);
            self.notify_all();
            return Err(e);
        }
        if let Some((_, start)) = advance {
            st.slot ^= 1;
            st.fenced = start;
            st.start = st.start.max_by_csn(start);
            st.advancing = false;
        }
        let before = st.applied;
        self.record(d, st, csn, wb, bit_ranges.iter().copied());
        self.watch.applied.store(st.applied, Ordering::Release);
        self.watch.inflight.store(st.inflight(), Ordering::Relaxed);
        // (Stored only when it changes: a store to a line other threads
        // read takes it from their caches.)
        if !self.watch.pending.load(Ordering::Relaxed) {
            self.watch.pending.store(true, Ordering::Release);
        }
        // The commits parked for each group the applied count passed (any
        // `ORDER_SLOTS` groups in a row name every slot).
        for c in (before + 1..=st.applied).take(ORDER_SLOTS) {
            self.order_cv(c).notify_all();
        }
        self.cv.notify_all();
        Ok(Some(csn))
    }

    /// Records, under the latch, group `csn`'s write-back by thread
    /// `writer`, its bits entries' write-back `ranges` with it (its value
    /// entries are in the ring: the group is recorded, not each range): in
    /// order (the applied count passes it, and any groups after it already
    /// written back ahead), or ahead of an earlier group (`may_write_back`;
    /// or a mutated engine, which skips the wait).
    fn record(
        &self,
        d: &Domain,
        st: &mut State,
        csn: u64,
        wb: WriteBack,
        ranges: impl Iterator<Item = (u64, u64)>,
    ) {
        st.raise_epoch(wb.writer, wb.durable);
        let in_order = st.applied + 1 == csn;
        let mut early = Vec::new();
        let mut n = 0;
        for (target, len) in ranges {
            match in_order {
                true => st.ranges.push_back((target, len)),
                false => early.push((target, len)),
            }
            st.note_written(target, len, csn);
            n += 1;
        }
        let first = st.flights.front().map_or(csn, |f| f.csn);
        let at = st.flights[(csn - first) as usize].at;
        st.groups.push((csn, at));
        if st.groups.len() + st.written.len() > st.written_prune_at {
            st.prune_written();
        }
        let f = &mut st.flights[(csn - first) as usize];
        debug_assert_eq!(f.csn, csn);
        f.epoch = wb.ticket;
        f.applied = true;
        if f.claims {
            st.claims.retain(|c| c.0 != csn);
        }
        if in_order {
            st.record_in_order(first, csn, n);
        } else {
            st.early.push((csn, early));
            d.count_write_back_ahead();
        }
    }

    /// Folds into the state the write-backs that commits recorded without
    /// the latch (their slots of `done`, up to the applied count), in
    /// sequence order: what a holder of the latch does first when it reads
    /// the recorded state, so that what it reads (ranges, lines written,
    /// epochs, the applied count) is as if each commit had recorded under
    /// it.
    fn fold(&self, d: &Domain, st: &mut State) {
        let to = self.watch.applied.load(Ordering::Acquire);
        while st.applied < to {
            let c = st.applied + 1;
            // Group `c` is counted applied (the Acquire load above): its
            // commit wrote the slot and is done with it (see `Done`).
            let slot = &self.done[(c % DONE_SLOTS as u64) as usize];
            let wb = WriteBack {
                writer: slot.writer.load(Ordering::Relaxed),
                ticket: slot.ticket.load(Ordering::Relaxed),
                durable: slot.durable.load(Ordering::Relaxed),
            };
            self.record(d, st, c, wb, slot.ranges());
        }
    }

    /// After group `csn`'s fence: waits until it may be written back.
    /// That is once every earlier group is written back (the applied
    /// count), or, for a group of values alone, once every earlier group
    /// not yet written back is durable and writes none of its bytes
    /// ([`State::may_write_back`]): recovery replays them
    /// all then, and only bytes two groups write need the order of their
    /// write-backs. On a disk, where one device flush makes a crowd of
    /// groups durable at once, the groups so no longer wait for one
    /// another's write-back in turn.
    fn wait_turn(&self, d: &Domain, csn: u64, b: &Builder) -> Result<(), Error> {
        let due = self.watch.applied.load(Ordering::Acquire) >= csn - 1;
        if d.writes_back_ahead() && (!due || self.watch.inflight.load(Ordering::Relaxed) > 1) {
            // Said, so that a later group may be written back beside this
            // one rather than after it (alone, no group is told).
            let slot = &self.watch.durable[(csn % DURABLE_SLOTS as u64) as usize];
            slot.store(csn, Ordering::Release);
        }
        if due {
            return Ok(());
        }
        if b.bits().next().is_some() || !d.writes_back_ahead() {
            // Bits entries rewrite bitmap words that other groups share.
            return self.wait_applied(d, csn - 1);
        }
        let durable = |c| self.durable(d, c);
        let mut yielded = false;
        loop {
            let blocker = {
                let st = self.state.lock();
                st.usable()?;
                if st.applied >= csn - 1 {
                    break;
                }
                match st.may_write_back(csn, b, durable) {
                    Ok(()) => break,
                    Err(blocker) => blocker,
                }
            };
            // Until the group in the way is out of it: spinning, and
            // yielding where processors are crowded, as for the applied
            // count; then in order (`wait_applied`, which parks).
            let cleared = || {
                let applied = self.watch.applied.load(Ordering::Acquire);
                applied >= csn - 1
                    || self.watch.broken.load(Ordering::Acquire)
                    || match blocker {
                        Blocker::Fence(c) => durable(c),
                        Blocker::WriteBack(c) => applied >= c,
                    }
            };
            if d.schedule_point() {
                continue;
            }
            let (crowded, limit) = self.wait_bounds(d);
            if (0..limit).any(|_| {
                std::hint::spin_loop();
                cleared()
            }) {
                continue;
            }
            if crowded && !yielded {
                yielded = true;
                if backoff::yield_until(backoff::YIELD_MAX, cleared) {
                    continue;
                }
            }
            return self.wait_applied(d, csn - 1);
        }
        d.count_order_wait(false);
        Ok(())
    }

    /// How a commit waits for another group here: whether the processors
    /// are crowded (the wait yields before it sleeps), and how many spins
    /// it makes first.
    fn wait_bounds(&self, d: &Domain) -> (bool, u32) {
        let crowded = match d.lazy_write_back() {
            true => d.crowded(),
            false => backoff::crowded(self.watch.inflight.load(Ordering::Relaxed)),
        };
        let limit = match d.lazy_write_back() || crowded {
            true => SPINS_DISK,
            false => SPINS,
        };
        (crowded, limit)
    }

    /// Whether group `c`'s fence is done, or (on a disk) a device flush
    /// made its range durable: `false` when its slot says nothing of it.
    fn durable(&self, d: &Domain, c: u64) -> bool {
        let i = (c % DURABLE_SLOTS as u64) as usize;
        if self.watch.durable[i].load(Ordering::Acquire) == c {
            return true;
        }
        let by = &self.watch.recorded_by[i];
        if by.load(Ordering::Acquire) != c {
            return false;
        }
        let n = self.watch.recorded[i].load(Ordering::Acquire);
        by.load(Ordering::Acquire) == c && d.record_durable(n)
    }

    /// Waits until group `csn` is durable and written back (every group
    /// up to it is then too): spinning briefly, then parked on the
    /// latch's condition variable (under the crash explorer, at its
    /// scheduling points, which pass the turn to the thread it waits for).
    /// A wait is counted (`Counters::order_waits`, `order_parks`).
    fn wait_applied(&self, d: &Domain, csn: u64) -> Result<(), Error> {
        if self.watch.applied.load(Ordering::Acquire) >= csn {
            return Ok(());
        }
        // On a disk the group waited for is behind a device flush: spinning
        // for it would only take the processor from the threads that have
        // work, and the domain says whether its last flush's group held
        // more threads than processors. On persistent memory the same holds
        // with more commits in flight than processors: the group's thread
        // may be waiting for one (16 threads on 2 processors spun, then
        // slept on nearly every commit: 35 µs a commit against 0.4 µs
        // alone). Crowded, a waiter spins briefly and yields before it
        // sleeps.
        let (crowded, limit) = self.wait_bounds(d);
        let mut spins = 0u32;
        let mut yielded = false;
        let (r, parked) = loop {
            if self.watch.applied.load(Ordering::Acquire) >= csn {
                break (Ok(()), false);
            }
            if self.watch.broken.load(Ordering::Acquire) {
                break (self.state.lock().usable(), false);
            }
            if d.schedule_point() {
                continue;
            }
            spins += 1;
            if spins <= limit {
                std::hint::spin_loop();
                continue;
            }
            // On a disk, the groups before it were made durable by the
            // same device flush and are being written back now: yield
            // until they are, before sleeping (`persist::backoff`).
            if !yielded && crowded {
                yielded = true;
                backoff::yield_until(backoff::YIELD_MAX, || {
                    self.watch.applied.load(Ordering::Acquire) >= csn
                        || self.watch.broken.load(Ordering::Acquire)
                });
                continue;
            }
            let st = self.state.lock();
            let st = self.wait_on(d, st, self.order_cv(csn), |st| {
                st.applied < csn && st.broken.is_none()
            });
            break (st.usable(), true);
        };
        d.count_order_wait(parked);
        r
    }

    /// Waits, with the latch released, while `blocked` holds; returns with
    /// the latch held. Every change a waiter may wait for (a group written
    /// back, a drain ended, the ring closed) notifies under the latch.
    fn wait_while<'a>(
        &'a self,
        d: &Domain,
        st: MutexGuard<'a, State>,
        blocked: impl Fn(&State) -> bool,
    ) -> MutexGuard<'a, State> {
        self.wait_on(d, st, &self.cv, blocked)
    }

    /// [`wait_while`](Self::wait_while) on the condition variable `cv`.
    fn wait_on<'a>(
        &'a self,
        d: &Domain,
        mut st: MutexGuard<'a, State>,
        cv: &Condvar,
        blocked: impl Fn(&State) -> bool,
    ) -> MutexGuard<'a, State> {
        loop {
            self.fold(d, &mut st);
            if !blocked(&st) {
                return st;
            }
            // Under the crash explorer the thread waited for runs only
            // when this one passes the turn, at a scheduling point;
            // otherwise the condition is tested and waited for under the
            // latch. A commit that records without the latch wakes the
            // sleepers it sees; the bound catches one that looked just
            // before this thread said it sleeps.
            if d.has_schedule() {
                MutexGuard::unlocked(&mut st, || d.schedule_point());
                continue;
            }
            self.watch.sleepers.fetch_add(1, Ordering::SeqCst);
            self.fold(d, &mut st);
            if blocked(&st) {
                cv.wait_for(&mut st, PARK_RECHECK);
            }
            self.watch.sleepers.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Where a commit waiting for group `csn` to be applied parks.
    fn order_cv(&self, csn: u64) -> &Condvar {
        &self.order_cv[(csn % ORDER_SLOTS as u64) as usize]
    }

    /// Wakes every waiter: the ring closed.
    fn notify_all(&self) {
        self.cv.notify_all();
        for cv in &self.order_cv {
            cv.notify_all();
        }
    }

    /// The virtual position a group of `size` bytes takes at `head`.
    fn place(&self, head: u64, size: u64) -> u64 {
        if head % self.len + size > self.len {
            head.div_ceil(self.len) * self.len
        } else {
            head
        }
    }

    /// Moves the groups whose writer has fenced since their write-back
    /// into the durable prefix.
    /// (Its lane's low word follows: the first group left in flight.)
    fn learn(&self, st: &mut State) {
        let before = st.durable_to.csn;
        while let Some(f) = st.flights.front() {
            if f.csn > st.applied || st.epoch(f.writer) < f.epoch {
                break;
            }
            st.durable_to = Start {
                csn: f.csn + 1,
                at: f.end,
                g: f.g,
                w: 0,
            };
            let n = f.ranges;
            st.flights.pop_front();
            st.ranges.drain(..n);
        }
        if st.durable_to.csn != before {
            st.passed.push_back(st.durable_to);
            if st.passed.len() > PASSED_MAX {
                // (Fewer places to stop at, none lost at the ends.)
                st.passed.remove(PASSED_MAX / 2);
            }
        }
        self.order
            .set_low(self.lane, st.flights.front().map(|f| f.g));
    }

    /// Where a commit may move this lane's Log Start: the last end of
    /// groups durable in place whose global commit numbers the watermark
    /// covers (so that recovery, which replays only groups above the
    /// largest watermark stored, replays every group this one passed
    /// over none of them: `log/lanes.rs`), with the watermark to store.
    fn advance_to(&self, d: &Domain, st: &mut State, lanes: &Lanes) -> Option<Start> {
        let need = st.passed.back()?.g;
        let w = match d.mutated(sites::RING_WATERMARK) {
            // (A lane that counts only its own groups.)
            true => need,
            false => lanes.watermark(d, self.lane, need),
        };
        let i = st.passed.iter().rposition(|s| s.g <= w)?;
        let to = st.passed[i];
        st.passed.drain(..=i);
        (to.at > st.fenced.at).then_some(Start { w, ..to })
    }

    /// Folds and learns what commits recorded (another lane computing the
    /// watermark: only if no thread holds this lane's latch).
    pub(super) fn refresh(&self, d: &Domain) {
        if let Some(mut st) = self.state.try_lock() {
            self.fold(d, &mut st);
            self.learn(&mut st);
        }
    }

    /// Whether a drain has work here: groups the durable Log Start does not
    /// cover, or a Log Start a drain stored and no fence has made durable.
    pub(super) fn has_work(&self) -> bool {
        self.watch.pending.load(Ordering::Acquire) || self.watch.unfenced.load(Ordering::Acquire)
    }

    /// Whether a group that recovery could still replay wrote a line of
    /// `off..off + len` (the lines of groups recorded without the latch
    /// count too).
    pub(super) fn touches(&self, d: &Domain, off: u64, len: u64) -> bool {
        if !self.has_work() {
            return false;
        }
        let mut st = self.state.lock();
        self.fold(d, &mut st);
        st.touches(off, len, |csn, at, out| self.value_ranges(d, csn, at, out))
    }

    /// The byte ranges that group `csn`, at virtual position `at`, writes
    /// back in place for its value entries, read from the ring into `out`
    /// as recovery reads it ([`group_at`](Self::group_at)); its bits
    /// entries' ranges are the allocator's, recorded apart. The group must
    /// be one the durable Log Start does not cover yet, whose place no
    /// later group can have taken; anything else there is `LogCorrupt`.
    fn value_ranges(
        &self,
        d: &Domain,
        csn: u64,
        at: u64,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<(), Error> {
        let mut buf = Vec::new();
        let missing = "a commit group not yet covered by the Log Start is missing from the ring";
        for e in Self::entries_at(d, self.off, self.len, at % self.len, csn, &mut buf, missing)? {
            if let group::Entry::Value(t, v) = e {
                out.push((t, v.len() as u64));
            }
        }
        Ok(())
    }

    /// Bars this lane for a drain (`log/lanes.rs`): waits for another
    /// drain of it to end, then holds new commits back (at their
    /// reservation) and waits for those in flight to be applied. The
    /// drain keeps the latch to its end, then [`unbar`](Self::unbar)s.
    pub(super) fn bar(&self, d: &Domain) -> Result<MutexGuard<'_, State>, Error> {
        let st = self.state.lock();
        let mut st = self.wait_while(d, st, |st| st.draining && st.broken.is_none());
        st.usable()?;
        st.draining = true;
        let st = self.wait_while(d, st, |st| st.inflight() > 0 && st.broken.is_none());
        Ok(st)
    }

    /// Ends a drain of this lane: commits may reserve again.
    pub(super) fn unbar(&self, st: &mut State) {
        st.draining = false;
        self.cv.notify_all();
    }

    /// A drain's first step, the lane barred: the lines of groups other
    /// threads wrote back and have not fenced are written back again by
    /// this thread (a fence orders only its own thread's write-backs).
    /// Whether the lane has groups that the drain's fence must make durable
    /// in place.
    pub(super) fn drain_flush(&self, d: &Domain, st: &mut State, me: u64) -> Result<bool, Error> {
        st.usable()?;
        self.learn(st);
        if st.start.csn == st.next_csn || st.flights.is_empty() {
            return Ok(false);
        }
        let mut values = Vec::new();
        let mut i = 0;
        for f in &st.flights {
            let bits = st.ranges.range(i..i + f.ranges);
            i += f.ranges;
            if f.writer == me {
                continue;
            }
            values.clear();
            self.value_ranges(d, f.csn, f.at, &mut values)?;
            for &(target, len) in values.iter().chain(bits) {
                d.flush_at(target, len, sites::RING_DRAIN_FLUSH)?;
            }
        }
        Ok(true)
    }

    /// A drain's last step, after the fence that made every group of every
    /// lane durable in place (`fenced`: this lane had groups it covered):
    /// the Log Start at the head, with watermark `w`, with no fence of its
    /// own. Until it is durable a crash replays, from the older one, groups
    /// whose values are durable already, in order (harmless); ring space
    /// behind it is reused only once it is known durable (`fenced_by_me`,
    /// or a later commit's fenced store to the same slot).
    pub(super) fn drain_store(
        &self,
        st: &mut State,
        d: &Domain,
        me: u64,
        w: u64,
        fenced: bool,
    ) -> Result<(), Error> {
        let head = Start {
            csn: st.next_csn,
            at: st.head,
            g: st.last_g,
            w,
        };
        if st.start.csn == head.csn {
            if let Some((start, by)) = st.unfenced {
                if by != me {
                    // Another thread's drain stored this Log Start and has
                    // not fenced since; a fence orders only its own
                    // thread's stores, so this thread stores it again (the
                    // same slot), durable at its own next fence: until then
                    // a crash replays only groups already durable in place,
                    // over stores of this thread that no fence has made
                    // durable yet.
                    self.store_slot(d, st.slot ^ 1, start)?;
                    st.unfenced = Some((start, me));
                }
            }
            self.watch.pending.store(false, Ordering::Release);
            return Ok(());
        }
        if fenced && !st.flights.is_empty() {
            st.raise_epoch(me, d.batches_durable());
        }
        self.store_slot(d, st.slot ^ 1, head)?;
        st.unfenced = Some((head, me));
        self.watch.unfenced.store(true, Ordering::Release);
        st.start = head;
        st.durable_to = head;
        st.passed.clear();
        st.flights.clear();
        st.ranges.clear();
        self.order.set_low(self.lane, None);
        self.watch.pending.store(false, Ordering::Release);
        Ok(())
    }

    /// Stores Log Start slot `i` of this lane (sequence number, position
    /// in the lane, watermark, check word) with non-temporal stores:
    /// durable at this thread's next fence.
    fn store_slot(&self, d: &Domain, i: u64, s: Start) -> Result<(), Error> {
        let slot = meta::RingSlot {
            csn: s.csn,
            pos: s.at % self.len,
            w: s.w,
        };
        d.store_nt(
            meta::ring_slot_off(self.lane, i),
            &meta::encode_ring_slot(slot),
        )
    }

    /// After a fence of the calling thread (its append to the bucket log):
    /// the Log Start its drain stored, if no later store replaced it, is
    /// durable, and ring space before it may be reused.
    pub(super) fn fenced_by_me(&self, d: &Domain) {
        if !self.watch.unfenced.load(Ordering::Acquire) {
            return;
        }
        let me = super::thread_tag();
        let mut st = self.state.lock();
        self.fold(d, &mut st);
        if let Some((start, by)) = st.unfenced {
            if by == me {
                st.slot ^= 1;
                st.fenced = start;
                st.unfenced = None;
                self.watch.unfenced.store(false, Ordering::Release);
            }
        }
    }

    /// Whether some thread holds the latch (the crash explorer's scheduler
    /// never makes a thread wait while it holds one).
    #[cfg(feature = "testing")]
    pub(crate) fn latched(&self) -> bool {
        self.state.is_locked()
    }
}

/// Whether `off..off + len` lies in a chunk the log blocks hold now. A
/// block a commit group freed returns to the free lists without a drain,
/// so its chunk, once all its blocks are free, may be taken by the log
/// before an older group that wrote into the block is behind the Log
/// Start: replay must not write into the log's chunk (the block's later
/// owner is the log, whose bytes are the truth). Any other later owner of
/// the block allocated it in a later group, replayed after, or through the
/// log blocks, whose first append drained the ring.
pub(super) fn now_log(d: &Domain, l: &Layout, off: u64, len: u64) -> Result<bool, Error> {
    crate::alloc::run_in_log_chunk(d, l, off, len)
}

/// Zeroes `size` bytes at `off`, written back at `site` (`lazy`: with the
/// write-back's lazy flush, durable at the next fence; on a disk, at the
/// next drain).
pub(super) fn zero_block(
    d: &Domain,
    off: u64,
    size: u64,
    site: sites::Site,
    lazy: bool,
) -> Result<(), Error> {
    const Z: [u8; 4096] = [0; 4096];
    let mut done = 0;
    while done < size {
        let n = (size - done).min(Z.len() as u64);
        d.store(off + done, &Z[..n as usize])?;
        done += n;
    }
    if lazy {
        d.flush_lazy_at(off, size, site)
    } else {
        d.flush_at(off, size, site)
    }
}

/// A replayed entry must land in the heap or on the root words.
pub(super) fn check_target(l: &Layout, target: u64, len: u64, at: u64) -> Result<(), Error> {
    let end = target.checked_add(len);
    let meta = target >= META_ROOT_OFF && end.is_some_and(|e| e <= META_ROOT_END);
    let heap = target >= l.heap_off && end.is_some_and(|e| e <= l.heap_end());
    if meta || heap {
        Ok(())
    } else {
        Err(Error::LogCorrupt {
            offset: at,
            reason: "commit group entry targets memory outside the heap",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state with group 1 applied, groups 2 and 3 in flight and group 4
    /// reserved; group 3 published its value at 128, group 2 its value at
    /// 64 or nothing.
    fn three(claims: bool) -> State {
        let start = Start {
            csn: 1,
            at: 0,
            g: 0,
            w: 0,
        };
        let mut st = State::new(start, 0);
        for csn in 1..=4 {
            st.flights.push_back(Flight {
                csn,
                g: csn,
                at: 64 * (csn - 1),
                end: 64 * csn,
                writer: csn,
                epoch: 0,
                ranges: 0,
                applied: csn == 1,
                claims: csn == 3 || (csn == 2 && claims),
            });
        }
        st.applied = 1;
        if claims {
            st.claims.push((2, 64, 72));
        }
        st.claims.push((3, 128, 136));
        st
    }

    /// Threads that come and go leave no count behind once there are
    /// many: only the writers of groups in flight keep theirs.
    #[test]
    fn the_counts_of_threads_with_no_group_in_flight_are_dropped() {
        let mut st = three(false);
        st.raise_epoch(2, 5);
        for tag in 100..100 + EPOCHS_MIN as u64 {
            st.raise_epoch(tag, 1);
        }
        assert_eq!(st.epochs.len(), 2, "writer 2, and the last thread to come");
        assert_eq!(
            st.epoch(2),
            5,
            "a writer of a group in flight keeps its count"
        );
        assert_eq!(st.epoch(100), 0, "a thread gone");
        assert_eq!(st.epoch(100 + EPOCHS_MIN as u64 - 1), 1);
    }

    fn one_value(target: u64) -> Builder {
        let mut b = Builder::default();
        b.begin();
        b.push(target, &[1; 8]);
        b
    }

    #[test]
    fn a_group_goes_ahead_only_of_durable_groups_that_write_none_of_its_bytes() {
        let b = one_value(72);
        let all = |_| true;
        assert_eq!(three(true).may_write_back(4, &b, all), Ok(()));
        // Group 2's fence not done: recovery could stop before group 4.
        let not_2 = |c| c != 2;
        assert_eq!(
            three(true).may_write_back(4, &b, not_2),
            Err(Blocker::Fence(2))
        );
        // Group 2 did not say what it writes.
        assert_eq!(
            three(false).may_write_back(4, &b, all),
            Err(Blocker::WriteBack(2))
        );
        // Bytes group 2 or 3 writes: their order is replay's.
        assert_eq!(
            three(true).may_write_back(4, &one_value(68), all),
            Err(Blocker::WriteBack(2))
        );
        assert_eq!(
            three(true).may_write_back(4, &one_value(124), all),
            Err(Blocker::WriteBack(3))
        );
        // Only earlier groups count.
        assert_eq!(three(true).may_write_back(3, &one_value(200), all), Ok(()));
    }

    #[test]
    fn groups_written_back_ahead_join_the_applied_count_in_order() {
        let mut st = three(true);
        // Groups 3 and 4 written back ahead of group 2.
        for (csn, at) in [(3, 128), (4, 256)] {
            st.flights[(csn - 1) as usize].applied = true;
            st.early.push((csn, vec![(at, 8)]));
        }
        st.early.swap(0, 1);
        st.ranges.push_back((0, 8));
        st.flights[0].ranges = 1;
        // Group 2 written back now, its range recorded, in order.
        st.flights[1].applied = true;
        st.ranges.push_back((64, 8));
        st.record_in_order(1, 2, 1);
        assert_eq!(st.applied, 4);
        assert!(st.early.is_empty());
        let ranges: Vec<usize> = st.flights.iter().map(|f| f.ranges).collect();
        assert_eq!(ranges, [1, 1, 1, 1]);
        let ranges: Vec<(u64, u64)> = st.ranges.iter().copied().collect();
        assert_eq!(ranges, [(0, 8), (64, 8), (128, 8), (256, 8)]);
    }
}
