//! Commit lanes (REWIND §5.3's distributed log): the commit ring split
//! into `Layout::lanes` lanes, each a [`Ring`] of its own (its latch, its
//! sequence numbers, its Log Start slots, its in-order write-back), so
//! that threads committing at once in different lanes wait for none of
//! one another's groups. `format/layout.rs` places them; `docs/format.md`
//! draws a lane's slots.
//!
//! **Which lane.** A thread commits in the lane it claimed at its first
//! commit in the pool: the one fewest live threads hold (the lowest of
//! those). Its claim ends when the thread ends, so lanes are taken and
//! given back as threads come and go; with more threads than lanes, some
//! share one (a lane takes concurrent commits, in its own order). No
//! lane's space is lost on a crash: every lane is recovered at open.
//!
//! **On a disk** (the Msync backend) every thread claims the first lane.
//! There a commit waits for a device flush, shared by the commits that
//! arrive while one is in flight (group commit), and the commits of one
//! lane wait for none of one another's write-backs either (they are
//! written back ahead, `log::ring`); lanes would save nothing, and each
//! lane in use adds a page, apart from the others, to every device flush:
//! at eight threads in four lanes (`examples/threadloop.rs redo 8 1 1000
//! msync /tmp one`, `strace -e msync`) a flush was an `msync` of 112 pages
//! holding four lanes' pages, and in one lane 1,191 of 1,305 flushes are
//! one page. (Timed, one lane gave 22.7–27.2 k commits/s against
//! 20.5–27.2 k with four: within the VM's noise.) The other lanes are
//! recovered and drained as on persistent memory, and hold back no
//! watermark (an unused lane has no group in flight); a pool moved to
//! persistent memory uses them all.
//!
//! **Order across lanes.** Each group carries a global commit number,
//! taken under its lane's latch at its reservation from one counter
//! ([`Order`]). Recovery replays the valid prefix of every lane (from its
//! durable Log Start, in its own sequence, to its first missing group)
//! merged by global commit number. A group replays even when another
//! lane's earlier group is missing: a transaction that depends on
//! another (through a lock, or its thread's program order) begins only
//! after that one's commit returned, its group durable and written back,
//! so it took a larger number, and two transactions that touch the same
//! bytes are so ordered. A commit waits only for its own lane's earlier
//! groups.
//!
//! **Watermark.** A lane's Log Start must not pass a group whose values a
//! replay of another lane's *older* group could still write over: with
//! group 5 in lane A not yet durable in place and group 8 of lane B (the
//! same bytes, later) reclaimed, a replay of 5 alone would bring back the
//! older value. So every Log Start slot holds a watermark `W`: every group
//! of every lane numbered up to `W` is durable in place. A lane's Log
//! Start passes only groups numbered up to the `W` stored with it, and
//! recovery takes the largest `W` of all valid slots and replays only the
//! groups above it. Each lane publishes its *low* word: the number of its
//! first group in flight (reserved and not known durable in place), or
//! none. `W` is the least of the lanes' low words and the counter, less
//! one. A lane with nothing in flight stores the counter in its low word
//! before it takes a number, a number no larger than the one it takes
//! (one past its last: sequentially consistent, a computation of `W` that
//! reads the low word before that store read the counter before the lane
//! took its number, hence no larger than it; one that reads it after
//! sees a low word no larger than it), then raises its low word to the
//! number it took.
//!
//! **Drain.** A drain (before a transaction logs in the bucket log, at
//! `sync` and close, before a store in place over a line a group could
//! still replay into) bars every lane in order, writes back again the
//! lines other threads wrote back and have not fenced, fences once, and
//! stores each lane's Log Start at its head with `W` the counter less one
//! (every group reserved is then durable in place).
//!
//! **Recovery** also moves each lane it finds groups in (or a torn slot, or
//! a stale group past its end: one a crash left durable after a missing
//! one) to a sequence number a lap of groups ahead, so that no stale group
//! left in the lane ever reads as the next one.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::MutexGuard;

use crate::error::Error;
use crate::format::group::{self, Builder, Entry, Head};
use crate::format::layout::{Layout, RING_SLOT};
use crate::format::meta;
use crate::persist::{sites, Domain};

use super::ring::{
    check_target, now_log, zero_block, ApplyBits, LaneStart, Padded, Replayed, Ring, State,
};

/// The global commit numbers every lane takes, and each lane's low word.
pub(super) struct Order {
    /// The next global commit number.
    next: Padded<AtomicU64>,
    /// Per lane: the number of its first group in flight, or `u64::MAX`
    /// with none.
    low: Box<[Padded<AtomicU64>]>,
}

impl Order {
    /// A number for a group of lane `lane` (under its latch). `idle`: the
    /// lane has no group in flight, and says first what it may take, a
    /// number no larger than the one it will take: one past the last it
    /// took (the counter only grows), not the counter read now, so that
    /// a commit moves the counter's line between cores once, for the
    /// `fetch_add`, not once more for a load (threads of one pool in
    /// lanes of their own: `examples/threadloop.rs`). Once it has its
    /// number the low word is raised to it, which keeps the watermark of
    /// the other lanes as high as it was.
    #[inline]
    pub(super) fn take(&self, lane: u64, idle: Option<u64>) -> u64 {
        let low = &self.low[lane as usize].0;
        if let Some(floor) = idle {
            low.store(floor, Ordering::SeqCst);
        }
        let g = self.next.0.fetch_add(1, Ordering::SeqCst);
        // (A lane's last number is below the counter: recovery sets the
        // counter past every number a Log Start slot or a group holds.)
        debug_assert!(
            idle.is_none_or(|floor| floor <= g),
            "lane {lane}: low word {idle:?} above its number {g}"
        );
        if idle.is_some_and(|floor| floor < g) {
            low.store(g, Ordering::Release);
        }
        g
    }

    /// Lane `lane`'s first group in flight is now `first` (under its
    /// latch).
    pub(super) fn set_low(&self, lane: u64, first: Option<u64>) {
        let word = &self.low[lane as usize].0;
        let v = first.unwrap_or(u64::MAX);
        if word.load(Ordering::Relaxed) != v {
            word.store(v, Ordering::SeqCst);
        }
    }

    /// The watermark: every group numbered up to it is durable in place.
    fn watermark(&self) -> u64 {
        let next = self.next.0.load(Ordering::SeqCst);
        let low = (self.low.iter().map(|l| l.0.load(Ordering::SeqCst))).min();
        next.min(low.unwrap_or(u64::MAX)) - 1
    }
}

/// The threads that claimed each lane of one pool.
struct Users(Box<[AtomicUsize]>);

/// A thread's claim of a lane of one pool: given back when the thread
/// ends.
struct Claim {
    users: Weak<Users>,
    lane: usize,
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(u) = self.users.upgrade() {
            u.0[self.lane].fetch_sub(1, Ordering::Relaxed);
        }
    }
}

thread_local! {
    /// The calling thread's lanes, one per pool it committed in.
    static CLAIMS: RefCell<Vec<Claim>> = const { RefCell::new(Vec::new()) };
}

/// The commit lanes of one pool.
pub struct Lanes {
    rings: Box<[Ring]>,
    /// The lanes threads claim: all of them, or on a disk only the first
    /// (see the module docs).
    claimed: usize,
    order: Arc<Order>,
    users: Arc<Users>,
    /// Bytes of a lane.
    len: u64,
}

/// One lane's recovery: its durable Log Start, and where its valid groups
/// end.
struct Scan {
    start: LaneStart,
    torn: bool,
    /// Position and sequence number after its last valid group; groups.
    end: (u64, u64),
    groups: u64,
    /// A group header past its end, numbered within a lap after it.
    stale: bool,
}

/// Every lane's recovery, and the groups to replay: what
/// [`Lanes::survey`] finds, read once at open for
/// [`Lanes::recheck_bitmaps`] and [`Lanes::open`].
pub struct Survey {
    lanes: Vec<Scan>,
    /// The largest watermark a valid slot holds.
    w: u64,
    /// (global commit number, lane, position, lane sequence number) of
    /// every valid group, in global order.
    groups: Vec<(u64, u64, u64, u64)>,
}

/// A group found in a lane's valid prefix, as `rewind dump-log` lists it
/// ([`Lanes::found`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundGroup {
    /// Its lane.
    pub lane: u64,
    /// Its sequence number in the lane.
    pub csn: u64,
    /// Its global commit number.
    pub gcn: u64,
    /// Its pool offset.
    pub at: u64,
    /// Whether recovery replays it (its global commit number is above
    /// the largest watermark stored); otherwise it is durable in place.
    pub replays: bool,
    /// Its entries: a value's (target, length), or an allocation's or a
    /// free's (block, size, `true` for an allocation).
    pub entries: Vec<FoundEntry>,
}

/// An entry of a [`FoundGroup`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoundEntry {
    /// A value for `target`.
    Value {
        /// Where it goes.
        target: u64,
        /// Its bytes.
        len: u64,
    },
    /// A block's bitmap bit set (an allocation) or cleared (a free).
    Bits {
        /// The block's offset.
        off: u64,
        /// The block's size.
        size: u64,
        /// An allocation (else a free).
        set: bool,
    },
}

impl Survey {
    /// Visits, in global commit order, each group recovery replays (those
    /// above the watermark): its entries, and its pool offset.
    fn each_replayed(
        &self,
        d: &Domain,
        l: &Layout,
        mut visit: impl FnMut(Vec<Entry<'_>>, u64) -> Result<(), Error>,
    ) -> Result<(), Error> {
        self.each(
            d,
            l,
            |g| self.replays(g),
            |_, entries, at| visit(entries, at),
        )
    }

    /// Whether recovery replays the group at `g` (global commit number,
    /// lane, position, lane sequence number): one above the largest
    /// watermark stored (the groups up to it are durable in place).
    fn replays(&self, g: &(u64, u64, u64, u64)) -> bool {
        g.0 > self.w
    }

    /// Visits, in global commit order, the groups `pick` takes (given
    /// their (global commit number, lane, position, lane sequence
    /// number)): that place, their entries, and their pool offsets.
    fn each(
        &self,
        d: &Domain,
        l: &Layout,
        pick: impl Fn(&(u64, u64, u64, u64)) -> bool,
        mut visit: impl FnMut(&(u64, u64, u64, u64), Vec<Entry<'_>>, u64) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let mut buf = Vec::new();
        for g @ &(_, lane, pos, csn) in self.groups.iter().filter(|g| pick(g)) {
            let missing = "a commit group changed while recovery read it";
            let entries = Ring::entries_at(
                d,
                l.lane_off(lane),
                l.lane_len(),
                pos,
                csn,
                &mut buf,
                missing,
            )?;
            visit(g, entries, l.lane_off(lane) + pos)?;
        }
        Ok(())
    }
}

impl Lanes {
    /// Recovers the lanes of the pool laid out as `l`: replays, merged by
    /// global commit number, every group above the watermark in each
    /// lane's valid prefix (their values stored and written back), fences,
    /// and stores each lane's Log Start past them. Safe to interrupt and
    /// rerun: a Log Start moves only once the replay is durable.
    /// `survey` is [`survey`](Self::survey)'s, taken before the log
    /// blocks' recovery (which stores nothing in the lanes or their Log
    /// Start slots).
    pub fn open(d: &Domain, l: &Layout, survey: Survey) -> Result<(Lanes, Replayed), Error> {
        let len = l.lane_len();
        let mut rep = Replayed::default();
        let mut bit_chunks: Vec<u64> = Vec::new();
        survey.each_replayed(d, l, |entries, at| {
            for e in entries {
                match e {
                    Entry::Value(target, value) => {
                        check_target(l, target, value.len() as u64, at)?;
                        if !now_log(d, l, target, value.len() as u64)? {
                            d.store(target, value)?;
                            d.flush_at(target, value.len() as u64, sites::RING_RECOVER_FLUSH)?;
                        }
                        rep.entries += 1;
                    }
                    Entry::Bits(b) => {
                        if b.zero {
                            check_target(l, b.off, b.size, at)?;
                            if !now_log(d, l, b.off, b.size)? {
                                zero_block(d, b.off, b.size, sites::RING_RECOVER_FLUSH, false)?;
                            }
                        }
                        let chunk = crate::alloc::replay_bits(d, l, b.off, b.size, b.set, at)?;
                        if !bit_chunks.contains(&chunk) {
                            bit_chunks.push(chunk);
                        }
                    }
                }
            }
            rep.groups += 1;
            Ok(())
        })?;
        // The bits were set and cleared without their chunks' check
        // words (a crash may have persisted a bit without its check, or
        // the reverse): each check is the bitmap's again.
        for &c in &bit_chunks {
            crate::alloc::recompute_check(d, l, c)?;
        }
        if rep.groups > 0 {
            // The replay durable before a Log Start passes it.
            d.fence_at(sites::RING_RECOVER_APPLIED)?;
        }
        let top = (survey.groups.iter().map(|g| g.0).max())
            .unwrap_or(0)
            .max(survey.w);
        let lap = lap(len);
        let order = Arc::new(Order {
            next: Padded(AtomicU64::new(top + 1)),
            low: (0..l.lanes)
                .map(|_| Padded(AtomicU64::new(u64::MAX)))
                .collect(),
        });
        let mut rings = Vec::with_capacity(l.lanes as usize);
        let mut stored = false;
        for (lane, scan) in survey.lanes.iter().enumerate() {
            let lane = lane as u64;
            let mut start = scan.start;
            let (at, next) = scan.end;
            let moved = scan.groups > 0 || scan.stale;
            if moved || scan.torn {
                // Moved: past its groups, a lap of sequence numbers on,
                // with a watermark covering every group found (all
                // durable in place now). Torn alone: the valid slot
                // copied over the torn one, so that the next crash still
                // finds one valid. The slot not in use takes it: a crash
                // while it is stored leaves the other.
                if moved {
                    start = LaneStart {
                        csn: next + lap,
                        at,
                        slot: start.slot,
                        w: top,
                    };
                }
                let slot = meta::RingSlot {
                    csn: start.csn,
                    pos: start.at,
                    w: start.w,
                };
                start.slot ^= u64::from(moved);
                let i = if moved { start.slot } else { start.slot ^ 1 };
                d.store_nt(meta::ring_slot_off(lane, i), &meta::encode_ring_slot(slot))?;
                stored = true;
            }
            rings.push(Ring::new(l.lane_off(lane), len, lane, order.clone(), start));
        }
        if stored {
            d.fence_at(sites::RING_RECOVER_START)?;
        }
        let users = Arc::new(Users((0..l.lanes).map(|_| AtomicUsize::new(0)).collect()));
        let lanes = Lanes {
            claimed: match d.lazy_write_back() {
                true => 1,
                false => rings.len(),
            },
            rings: rings.into(),
            order,
            users,
            len,
        };
        Ok((lanes, rep))
    }

    /// Every group in the lanes' valid prefixes (from each durable Log
    /// Start to the first missing group), in global commit order, without
    /// changing anything: what recovery would find (`rewind dump-log`).
    pub fn found(d: &Domain, l: &Layout) -> Result<Vec<FoundGroup>, Error> {
        let survey = Self::survey(d, l)?;
        let mut found = Vec::with_capacity(survey.groups.len());
        survey.each(
            d,
            l,
            |_| true,
            |g @ &(gcn, lane, _, csn), entries, at| {
                let entries = (entries.into_iter())
                    .map(|e| match e {
                        Entry::Value(target, v) => FoundEntry::Value {
                            target,
                            len: v.len() as u64,
                        },
                        Entry::Bits(b) => FoundEntry::Bits {
                            off: b.off,
                            size: b.size,
                            set: b.set,
                        },
                    })
                    .collect();
                found.push(FoundGroup {
                    lane,
                    csn,
                    gcn,
                    at,
                    replays: survey.replays(g),
                    entries,
                });
                Ok(())
            },
        )?;
        Ok(found)
    }

    /// How many groups recovery would replay (those [`found`](Self::found)
    /// marks `replays`), from the survey alone: no group's entries decoded.
    pub fn to_replay(d: &Domain, l: &Layout) -> Result<usize, Error> {
        let survey = Self::survey(d, l)?;
        Ok(survey.groups.iter().filter(|g| survey.replays(g)).count())
    }

    /// Before the log blocks' recovery checks the allocator bitmaps: the
    /// check word of every chunk whose bits a group recovery will replay
    /// changes is made the bitmap's. Such a group's write-back may have
    /// left a bit durable without its check word (or the reverse), which
    /// the log blocks' records cannot explain; its replay recomputes the
    /// check again afterwards.
    pub fn recheck_bitmaps(d: &Domain, l: &Layout, survey: &Survey) -> Result<(), Error> {
        let mut chunks: Vec<u64> = Vec::new();
        survey.each_replayed(d, l, |entries, _| {
            for e in entries {
                if let Entry::Bits(b) = e {
                    if let Some(c) = crate::alloc::small_chunk(l, b.off, b.size) {
                        if !chunks.contains(&c) {
                            chunks.push(c);
                        }
                    }
                }
            }
            Ok(())
        })?;
        for c in chunks {
            crate::alloc::recompute_check(d, l, c)?;
        }
        Ok(())
    }

    /// Every lane's durable Log Start and valid groups, the largest
    /// watermark.
    pub fn survey(d: &Domain, l: &Layout) -> Result<Survey, Error> {
        let len = l.lane_len();
        let mut survey = Survey {
            lanes: Vec::with_capacity(l.lanes as usize),
            w: 0,
            groups: Vec::new(),
        };
        for lane in 0..l.lanes {
            let (start, torn) = log_start(d, len, lane)?;
            survey.w = survey.w.max(start.w);
            let groups = &mut survey.groups;
            let mut visit = |h: &Head, pos: u64| {
                groups.push((h.gcn, lane, pos, h.csn));
                Ok(())
            };
            let (at, next, n) =
                Ring::walk(d, l.lane_off(lane), len, start.at, start.csn, &mut visit)?;
            let stale = past_end(d, l, lane, at, next)?;
            survey.lanes.push(Scan {
                start,
                torn,
                end: (at, next),
                groups: n,
                stale,
            });
        }
        survey.groups.sort_unstable();
        Ok(survey)
    }

    /// Whether a group of `size` bytes is committed here (at most half a
    /// lane).
    pub fn fits(&self, size: usize) -> bool {
        size as u64 <= self.len / 2
    }

    /// Commits the group in `b` in the calling thread's lane (see
    /// [`Ring::commit`]): its sequence number in the lane, or `None` when
    /// the lane has no room before its durable Log Start.
    pub fn commit(
        &self,
        d: &Domain,
        b: &mut Builder,
        bits: &mut ApplyBits<'_>,
    ) -> Result<Option<u64>, Error> {
        let ring = &self.rings[self.lane()];
        ring.commit(d, b, bits, self)
    }

    /// The calling thread's lane: the one it claimed, or a claim now of
    /// the lane fewest threads hold.
    #[inline]
    fn lane(&self) -> usize {
        if self.rings.len() == 1 {
            return 0;
        }
        let me = Arc::as_ptr(&self.users);
        let found = CLAIMS.try_with(|c| {
            let c = c.borrow();
            c.iter().find(|c| c.users.as_ptr() == me).map(|c| c.lane)
        });
        match found {
            Ok(Some(lane)) => lane,
            Ok(None) => self.claim(),
            // The thread's claims are gone: a transaction in a thread-local
            // destructor run after theirs, as the thread ends (see
            // `pool/nesting.rs`). The lane fewest threads hold, unclaimed.
            Err(_) => self.fewest(),
        }
    }

    /// The lane fewest threads hold.
    fn fewest(&self) -> usize {
        let counts = &self.users.0;
        (0..self.claimed)
            .min_by_key(|&i| counts[i].load(Ordering::Relaxed))
            .unwrap_or(0)
    }

    #[cold]
    fn claim(&self) -> usize {
        let lane = self.fewest();
        let _ = CLAIMS.try_with(|c| {
            let mut c = c.borrow_mut();
            // Claims of pools closed since are dropped here.
            c.retain(|c| c.users.strong_count() > 0);
            self.users.0[lane].fetch_add(1, Ordering::Relaxed);
            c.push(Claim {
                users: Arc::downgrade(&self.users),
                lane,
            });
        });
        lane
    }

    /// The watermark, for lane `me` (its latch held) that needs it to
    /// reach `need`: if it does not, the other lanes whose latch is free
    /// learn what their commits recorded first.
    pub(super) fn watermark(&self, d: &Domain, me: u64, need: u64) -> u64 {
        let w = self.order.watermark();
        if w >= need {
            return w;
        }
        for (i, r) in self.rings.iter().enumerate() {
            if i as u64 != me {
                r.refresh(d);
            }
        }
        self.order.watermark()
    }

    /// Makes every committed group of every lane durable in place and
    /// moves each lane's Log Start to its head (see the module docs):
    /// before a transaction logs in the bucket log, and at `sync` and
    /// close.
    pub fn drain(&self, d: &Domain) -> Result<(), Error> {
        if !self.rings.iter().any(|r| r.has_work()) {
            return Ok(());
        }
        let mut barred: Vec<MutexGuard<'_, State>> = Vec::with_capacity(self.rings.len());
        let mut r = Ok(());
        for ring in self.rings.iter() {
            match ring.bar(d) {
                Ok(st) => barred.push(st),
                Err(e) => {
                    r = Err(e);
                    break;
                }
            }
        }
        if r.is_ok() {
            r = self.drain_barred(d, &mut barred);
        }
        for (ring, st) in self.rings.iter().zip(barred.iter_mut()) {
            ring.unbar(st);
        }
        r
    }

    /// A drain with every lane barred: one fence for all.
    fn drain_barred(&self, d: &Domain, barred: &mut [MutexGuard<'_, State>]) -> Result<(), Error> {
        let me = super::thread_tag();
        let mut fence = false;
        for (ring, st) in self.rings.iter().zip(barred.iter_mut()) {
            fence |= ring.drain_flush(d, st, me)?;
        }
        if fence {
            // Every group durable in place before a Log Start can pass it
            // (one fence for both could persist a slot without a line).
            d.fence_lazy_at(sites::RING_DRAIN_LINES)?;
        }
        // Nothing in flight anywhere: every number taken is in place.
        let w = self.order.next.0.load(Ordering::SeqCst) - 1;
        for (ring, st) in self.rings.iter().zip(barred.iter_mut()) {
            ring.drain_store(st, d, me, w, fence)?;
        }
        Ok(())
    }

    /// Before a store in place of `off..off + len` that no ring group
    /// covers (a fresh block's zeroing and writes, `Pool::write_unlogged`):
    /// a [`drain`](Self::drain) only if a group of some lane that recovery
    /// could still replay wrote one of those lines. A replay writes only
    /// the lines its groups wrote, so a store elsewhere needs none, and no
    /// fence.
    pub fn drain_for(&self, d: &Domain, off: u64, len: u64) -> Result<(), Error> {
        if self.rings.iter().any(|r| r.touches(d, off, len)) {
            self.drain(d)
        } else {
            Ok(())
        }
    }

    /// After a fence of the calling thread (its append to the bucket log):
    /// the Log Starts its drain stored, if no later store replaced them,
    /// are durable, and lane space before them may be reused.
    pub fn fenced_by_me(&self, d: &Domain) {
        for r in self.rings.iter() {
            r.fenced_by_me(d);
        }
    }

    /// The live threads holding each lane.
    pub fn threads(&self) -> Vec<usize> {
        (self.users.0.iter())
            .map(|n| n.load(Ordering::Relaxed))
            .collect()
    }

    /// Whether some thread holds a lane's latch (the crash explorer's
    /// scheduler never makes a thread wait while it holds one).
    #[cfg(feature = "testing")]
    pub(crate) fn latched(&self) -> bool {
        self.rings.iter().any(|r| r.latched())
    }
}

/// Lane `lane`'s durable Log Start (with the largest watermark of its
/// valid slots), and whether a slot failed its check word.
fn log_start(d: &Domain, len: u64, lane: u64) -> Result<(LaneStart, bool), Error> {
    let read = |i| -> Result<Option<meta::RingSlot>, Error> {
        let mut w = [0u8; RING_SLOT as usize];
        d.read(meta::ring_slot_off(lane, i), &mut w)?;
        Ok(meta::decode_ring_slot(&w))
    };
    let slots = [read(0)?, read(1)?];
    let (slot, s) = match slots {
        [Some(a), Some(b)] if b.csn > a.csn => (1, b),
        [Some(a), _] => (0, a),
        [None, Some(b)] => (1, b),
        [None, None] => return Err(Error::LogCorrupt {
            offset: meta::ring_slot_off(lane, 0),
            reason:
                "both Log Start slots of a commit lane fail their check word (damaged or zeroed)",
        }),
    };
    if s.pos >= len || s.pos % group::LINE as u64 != 0 || s.csn == 0 {
        return Err(Error::LogCorrupt {
            offset: meta::ring_slot_off(lane, slot),
            reason: "Log Start names no group boundary of its commit lane",
        });
    }
    let start = LaneStart {
        csn: s.csn,
        at: s.pos,
        slot,
        w: slots.iter().flatten().map(|s| s.w).max().unwrap_or(0),
    };
    Ok((start, slots.iter().any(|s| s.is_none())))
}

/// Sequence numbers a lane of `len` bytes can hold at once, and one more:
/// recovery moves a lane on by this many, past any stale group in it.
fn lap(len: u64) -> u64 {
    len / group::LINE as u64 + 1
}

/// What lane `lane` holds past its valid groups (its scan stopped at
/// sequence number `next`, at position `at`): whether a group header
/// numbered within a lap after `next` is there (a group a crash left
/// durable after a missing one, which a new group of the same size at the
/// same place would make the next valid one: recovery moves the lane on).
///
/// `LogCorrupt` when group `next` was damaged after it was written, not
/// torn by a crash: a whole group of the lane numbered within that lap was
/// reserved once group `next` had been written back in place
/// ([`Head::written_back`]), which happens only after its fence. A crash
/// tears only groups whose fence had not returned, and the groups reserved
/// while one was in flight name a number below it, so no crash makes this
/// error. Without it recovery would stop at the damaged group and replay
/// the groups before it over the values that group and the later ones had
/// stored in place: older values, and no error.
fn past_end(d: &Domain, l: &Layout, lane: u64, at: u64, next: u64) -> Result<bool, Error> {
    let len = l.lane_len();
    let off = l.lane_off(lane);
    let lap = lap(len);
    let mut h = [0u8; group::HEADER];
    let mut buf = Vec::new();
    let mut stale = false;
    let mut p = 0;
    while p + group::LINE as u64 <= len {
        d.read(off + p, &mut h)?;
        if let Some(head) = Head::decode(&h).filter(|h| h.csn > next && h.csn <= next + lap) {
            stale = true;
            if head.written_back() >= next
                && Ring::group_at(d, off, len, p, head.csn, &mut buf)?.is_some()
            {
                return Err(Error::LogCorrupt {
                    offset: off + at,
                    reason: "a commit group fails its check, yet a later group of its lane \
                             was written after it was written back in place: the commit \
                             ring is damaged (not torn by a crash)",
                });
            }
        }
        p += group::LINE as u64;
    }
    Ok(stale)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lanes taking numbers (their low word first one past their last
    /// number, not the counter) while another thread computes the
    /// watermark: numbers grow, a lane's low word is its number once
    /// taken, a watermark never reaches a number in flight throughout its
    /// computation (published after the take, withdrawn before the lane's
    /// low word is cleared), and the counter counts every take. (The
    /// window inside `take`, before the number is known, rests on the
    /// argument in the module docs: no test can name its number.)
    #[test]
    fn the_watermark_stays_below_every_number_in_flight() {
        const LANES: usize = 2;
        const TAKES: u64 = 20_000;
        let order = Order {
            next: Padded(AtomicU64::new(1)),
            low: (0..LANES)
                .map(|_| Padded(AtomicU64::new(u64::MAX)))
                .collect(),
        };
        let inflight: Vec<AtomicU64> = (0..LANES).map(|_| AtomicU64::new(0)).collect();
        // Takers that ended (a drop: a failed one too, so the watcher
        // stops and the failure is reported, not a hang).
        let ended = AtomicUsize::new(0);
        struct Ended<'a>(&'a AtomicUsize);
        impl Drop for Ended<'_> {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        std::thread::scope(|s| {
            let (order, inflight, ended) = (&order, &inflight, &ended);
            let takers: Vec<_> = (0..LANES)
                .map(|lane| {
                    s.spawn(move || {
                        let _ended = Ended(ended);
                        let mut last = 0;
                        for _ in 0..TAKES {
                            let g = order.take(lane as u64, Some(last + 1));
                            assert!(g > last, "numbers grow");
                            assert_eq!(order.low[lane].0.load(Ordering::SeqCst), g);
                            inflight[lane].store(g, Ordering::SeqCst);
                            std::hint::spin_loop();
                            inflight[lane].store(0, Ordering::SeqCst);
                            order.set_low(lane as u64, None);
                            last = g;
                        }
                    })
                })
                .collect();
            let watcher = s.spawn(move || {
                let mut checked = 0u64;
                while ended.load(Ordering::SeqCst) < LANES {
                    for lane in inflight {
                        let before = lane.load(Ordering::SeqCst);
                        let w = order.watermark();
                        if before != 0 && lane.load(Ordering::SeqCst) == before {
                            assert!(w < before, "watermark {w} reached {before} in flight");
                            checked += 1;
                        }
                    }
                }
                checked
            });
            // (How many checks found a number in flight depends on the
            // scheduling; the assertions are the test.)
            let _ = watcher.join().unwrap();
            for t in takers {
                t.join().unwrap();
            }
        });
        assert_eq!(
            order.next.0.load(Ordering::SeqCst),
            1 + LANES as u64 * TAKES
        );
    }
}
