//! The simulated persistence domain (x86 persistence rules, per thread).
//!
//! The simulator keeps the stores that are not yet guaranteed persistent
//! apart from the persisted image (which is the live memory with those
//! stores reverted: each pending unit remembers the bytes it overwrote, so
//! no second copy of the region is kept). Stores are split into aligned
//! 8-byte units, the unit of store atomicity on x86. Each 64-byte line keeps
//! its pending units in program order, because a line reaches the
//! persistence domain in program order: an eviction may write it back at
//! any moment, carrying a *prefix* of its stores.
//!
//! Guarantees are per thread, as on x86, where `sfence` orders and
//! completes only the calling thread's own `clwb`/`clflushopt` and
//! non-temporal stores:
//!
//! * a flush of a line by thread T marks the line's stores so far — other
//!   threads' earlier stores included, since `clwb` writes back the whole
//!   line — as written back at T's next fence;
//! * a non-temporal store by T writes its line back with it: the line's
//!   stores up to and including it are persistent after T's next fence;
//! * a fence by T makes persistent exactly what T marked; what another
//!   thread flushed waits for that thread's fence.
//!
//! Locked instructions (which on x86 also drain a thread's write-combining
//! buffers) are not modelled as fences: the simulator allows every state
//! the fences alone allow, a superset of what hardware can leave.
//!
//! A power failure at this instant may therefore leave, for each line with
//! pending stores independently, any prefix of them on top of the persisted
//! image. [`SimState::image_with`] builds exactly those images; the crash
//! explorer chooses the prefixes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;

use super::mapping::View;
use super::LINE;

/// A small number naming the calling thread, unique in the process (the
/// simulator keys each thread's pending write-backs by it).
pub fn thread_index() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        static INDEX: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    INDEX.with(|i| *i)
}

/// One aligned 8-byte unit of a store: `mask` bit `i` set means byte `i` of
/// the unit was written.
#[derive(Clone, Copy, Debug)]
struct Unit {
    off: u64,
    /// The word before the store (its masked bytes are what a revert restores).
    old: [u8; 8],
    mask: u8,
    /// Position in the domain's global store order: a thread's mark on a
    /// line covers the units below it.
    seq: u64,
}

#[derive(Default, Debug)]
struct Line {
    /// Pending units, oldest first.
    stores: Vec<Unit>,
}

/// The lines one thread flushed (or non-temporally stored to) since its
/// last fence: line index → the units below this sequence number are
/// written back at the thread's next fence.
#[derive(Debug)]
struct Marks {
    thread: u64,
    lines: BTreeMap<u64, u64>,
}

/// Where a [`Hook`] is called: just before fence number `n` takes effect,
/// or just after store number `n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    /// Before the n-th fence (1-based) completes.
    Fence(u64),
    /// After the n-th store (1-based).
    Store(u64),
}

/// A callback that sees every crash point of a run (the crash explorer).
pub type Hook = Box<dyn FnMut(&SimState, Point) + Send>;

/// Simulator state: the persisted image and the pending stores per line.
pub struct SimState {
    live: View,
    lines: BTreeMap<u64, Line>,
    /// Per thread, what its next fence makes persistent.
    marks: Vec<Marks>,
    /// Units recorded so far (the next unit's `seq`).
    seq: u64,
    fences: u64,
    stores: u64,
    capture: Option<Capture>,
    captured: Vec<Vec<u8>>,
    hook: Option<Hook>,
    store_every: u64,
}

/// A request to save crash images when a given fence is reached.
#[derive(Clone, Copy, Debug)]
struct Capture {
    fence: u64,
    seed: u64,
}

impl SimState {
    pub(super) fn new(live: View) -> SimState {
        SimState {
            live,
            lines: BTreeMap::new(),
            marks: Vec::new(),
            seq: 0,
            fences: 0,
            stores: 0,
            capture: None,
            captured: Vec::new(),
            hook: None,
            store_every: 0,
        }
    }

    /// Records a store by the calling thread about to be made to the live
    /// memory (call before writing it, then [`stored`](Self::stored) after).
    pub(super) fn record(&mut self, off: u64, len: usize, nt: bool) {
        let mut i = 0usize;
        while i < len {
            let p = off + i as u64;
            let base = p / 8 * 8;
            let start = (p - base) as usize;
            let n = (8 - start).min(len - i);
            let mut mask = 0u8;
            for k in start..start + n {
                mask |= 1 << k;
            }
            let unit = Unit {
                off: base,
                old: self.live.word(base),
                mask,
                seq: self.seq,
            };
            self.seq += 1;
            self.lines.entry(base / LINE).or_default().stores.push(unit);
            if nt {
                // A non-temporal store to a line writes the line back with it.
                self.mark(base / LINE);
            }
            i += n;
        }
    }

    /// Where the calling thread's marks are, created on first use.
    fn my_marks(&mut self) -> usize {
        let t = thread_index();
        match self.marks.iter().position(|m| m.thread == t) {
            Some(i) => i,
            None => {
                self.marks.push(Marks {
                    thread: t,
                    lines: BTreeMap::new(),
                });
                self.marks.len() - 1
            }
        }
    }

    /// Line `l`'s units so far are written back at the calling thread's
    /// next fence.
    fn mark(&mut self, l: u64) {
        let i = self.my_marks();
        self.marks[i].lines.insert(l, self.seq);
    }

    /// The store recorded last is now in the live memory.
    pub(super) fn stored(&mut self) {
        self.stores += 1;
        if self.store_every > 0 && self.stores.is_multiple_of(self.store_every) {
            self.call_hook(Point::Store(self.stores));
        }
    }

    fn call_hook(&mut self, at: Point) {
        if let Some(mut h) = self.hook.take() {
            h(self, at);
            self.hook = Some(h);
        }
    }

    /// A flush by the calling thread: the pending units of the lines of
    /// `[off, off+len)` (whoever stored them) are written back at its next
    /// fence. Lines with nothing pending need no mark.
    pub(super) fn flush(&mut self, off: u64, len: u64) {
        let (first, last) = (off / LINE, (off + len - 1) / LINE);
        let i = self.my_marks();
        for l in self.lines.range(first..=last).map(|(l, _)| *l) {
            self.marks[i].lines.insert(l, self.seq);
        }
    }

    /// A fence by the calling thread: what it marked becomes persistent.
    pub(super) fn fence(&mut self) {
        self.fences += 1;
        self.call_hook(Point::Fence(self.fences));
        if let Some(c) = self.capture.filter(|c| c.fence == self.fences) {
            // A crash just before this fence completes: any prefix per line.
            let mut rng = SplitMix64::seed_from_u64(c.seed);
            let random = self.image_with(|_, n| (rng.next_u64() % (n as u64 + 1)) as usize);
            self.captured = vec![self.image_none_pending(), self.image_all_pending(), random];
        }
        let t = thread_index();
        let Some(i) = self.marks.iter().position(|m| m.thread == t) else {
            return;
        };
        // This thread's written-back units are persistent: they leave the
        // pending set. Other threads' marks stay until their own fences.
        for (l, end) in std::mem::take(&mut self.marks[i].lines) {
            if let Some(line) = self.lines.get_mut(&l) {
                let k = line.stores.partition_point(|u| u.seq < end);
                line.stores.drain(..k);
                if line.stores.is_empty() {
                    self.lines.remove(&l);
                }
            }
        }
        self.marks.swap_remove(i);
    }

    /// Calls `hook` at every fence (before it takes effect) and after every
    /// `store_every`-th store (0: never), until [`clear_hook`](Self::clear_hook).
    pub fn set_hook(&mut self, hook: Hook, store_every: u64) {
        self.hook = Some(hook);
        self.store_every = store_every;
    }

    /// Removes the hook.
    pub fn clear_hook(&mut self) {
        self.hook = None;
        self.store_every = 0;
    }

    /// Fences executed so far.
    pub fn fences(&self) -> u64 {
        self.fences
    }

    /// Asks for crash images (nothing pending, everything pending, and a
    /// random prefix per line from `seed`) at the moment fence number
    /// `fence` (1-based, counting from this domain's start) is issued.
    pub fn capture_at_fence(&mut self, fence: u64, seed: u64) {
        self.capture = Some(Capture { fence, seed });
        self.captured.clear();
    }

    /// The images saved by [`capture_at_fence`](Self::capture_at_fence),
    /// empty if that fence was never reached.
    pub fn take_captured(&mut self) -> Vec<Vec<u8>> {
        self.capture = None;
        std::mem::take(&mut self.captured)
    }

    /// Lines with stores not yet guaranteed persistent, as
    /// `(line index, number of pending stores)`, in address order.
    pub fn pending_lines(&self) -> Vec<(u64, usize)> {
        self.lines
            .iter()
            .map(|(l, line)| (*l, line.stores.len()))
            .collect()
    }

    /// The image a power failure now could leave when line `l` has persisted
    /// the first `prefix(l, pending)` of its pending stores (clamped).
    pub fn image_with(&self, mut prefix: impl FnMut(u64, usize) -> usize) -> Vec<u8> {
        let mut img = self.live.copy();
        for (l, line) in &self.lines {
            let k = prefix(*l, line.stores.len()).min(line.stores.len());
            for u in line.stores[k..].iter().rev() {
                revert(&mut img, u);
            }
        }
        img
    }

    /// The image if nothing pending persisted.
    pub fn image_none_pending(&self) -> Vec<u8> {
        self.image_with(|_, _| 0)
    }

    /// The image if every pending store persisted (equals the live contents).
    pub fn image_all_pending(&self) -> Vec<u8> {
        self.live.copy()
    }
}

fn revert(img: &mut [u8], u: &Unit) {
    for k in 0..8 {
        if u.mask & (1 << k) != 0 {
            img[u.off as usize + k] = u.old[k];
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::persist::Domain;

    fn none(d: &Domain) -> Vec<u8> {
        d.with_sim(|s| s.image_none_pending()).unwrap()
    }

    #[test]
    fn store_is_pending_until_flush_and_fence() {
        let d = Domain::sim(256);
        d.store(8, &[1; 8]).unwrap();
        assert_eq!(none(&d)[8], 0);
        assert_eq!(d.with_sim(|s| s.image_all_pending()).unwrap()[8], 1);
        d.fence().unwrap();
        assert_eq!(none(&d)[8], 0, "fence without flush persists nothing");
        d.flush(8, 8).unwrap();
        d.fence().unwrap();
        assert_eq!(none(&d)[8], 1);
        assert!(d.with_sim(|s| s.pending_lines()).unwrap().is_empty());
    }

    #[test]
    fn nt_store_persists_at_next_fence() {
        let d = Domain::sim(128);
        d.store_nt(64, &[7; 16]).unwrap();
        d.fence().unwrap();
        assert_eq!(&none(&d)[64..80], &[7; 16]);
    }

    #[test]
    fn line_prefixes_follow_program_order() {
        let d = Domain::sim(128);
        d.store(0, &[1; 8]).unwrap();
        d.store(8, &[2; 8]).unwrap();
        d.store(64, &[3; 8]).unwrap();
        assert_eq!(
            d.with_sim(|s| s.pending_lines()).unwrap(),
            vec![(0, 2), (1, 1)]
        );
        let img = d
            .with_sim(|s| s.image_with(|l, _| if l == 0 { 1 } else { 0 }))
            .unwrap();
        assert_eq!((img[0], img[8], img[64]), (1, 0, 0));
    }

    #[test]
    fn unaligned_store_splits_into_units() {
        let d = Domain::sim(64);
        d.store(6, &[9; 4]).unwrap();
        assert_eq!(d.with_sim(|s| s.pending_lines()).unwrap(), vec![(0, 2)]);
        let img = d.with_sim(|s| s.image_with(|_, _| 1)).unwrap();
        assert_eq!(&img[5..11], &[0, 9, 9, 0, 0, 0]);
    }

    #[test]
    fn stores_after_flush_stay_pending() {
        let d = Domain::sim(64);
        d.store(0, &[1; 8]).unwrap();
        d.flush(0, 8).unwrap();
        d.store(8, &[2; 8]).unwrap();
        d.fence().unwrap();
        assert_eq!(none(&d)[0], 1);
        assert_eq!(none(&d)[8], 0);
        assert_eq!(d.with_sim(|s| s.pending_lines()).unwrap(), vec![(0, 1)]);
    }

    #[test]
    fn overwrites_revert_in_order() {
        let d = Domain::sim_from_image(vec![5; 64]);
        d.store(0, &[1; 8]).unwrap();
        d.store(4, &[2; 8]).unwrap(); // straddles two units
        d.store(0, &[3; 2]).unwrap();
        let imgs: Vec<Vec<u8>> = (0..=4)
            .map(|k| d.with_sim(|s| s.image_with(|_, _| k)).unwrap())
            .collect();
        assert_eq!(&imgs[0][..12], &[5; 12]);
        assert_eq!(&imgs[1][..12], &[1, 1, 1, 1, 1, 1, 1, 1, 5, 5, 5, 5]);
        assert_eq!(&imgs[2][..12], &[1, 1, 1, 1, 2, 2, 2, 2, 5, 5, 5, 5]);
        assert_eq!(&imgs[3][..12], &[1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2]);
        assert_eq!(&imgs[4][..12], &[3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2]);
    }

    /// Runs `f` on another thread (a second simulated CPU) and waits for it.
    fn on_other_thread(f: impl FnOnce() + Send) {
        std::thread::scope(|s| {
            s.spawn(f);
        });
    }

    #[test]
    fn a_fence_does_not_persist_another_threads_flush() {
        let d = Domain::sim(256);
        on_other_thread(|| {
            d.store(0, &[1; 8]).unwrap();
            d.flush(0, 8).unwrap();
        });
        d.fence().unwrap();
        assert_eq!(none(&d)[0], 0, "B's flush waits for B's fence");
        on_other_thread(|| d.fence().unwrap());
        assert_eq!(
            none(&d)[0],
            0,
            "a fence on a thread that flushed nothing persists nothing"
        );
        on_other_thread(|| {
            d.flush(0, 8).unwrap();
            d.fence().unwrap();
        });
        assert_eq!(none(&d)[0], 1);
        assert!(d.with_sim(|s| s.pending_lines()).unwrap().is_empty());
    }

    #[test]
    fn a_fence_does_not_persist_another_threads_nt_store() {
        let d = Domain::sim(256);
        let b = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                d.store_nt(64, &[7; 8]).unwrap();
                b.wait(); // A fences now
                b.wait();
                d.fence().unwrap();
            });
            b.wait();
            d.fence().unwrap();
            assert_eq!(none(&d)[64], 0, "B's nt store waits for B's fence");
            b.wait();
        });
        assert_eq!(none(&d)[64], 7);
    }

    #[test]
    fn a_flush_writes_back_other_threads_stores_to_the_line() {
        let d = Domain::sim(256);
        on_other_thread(|| d.store(8, &[2; 8]).unwrap());
        d.store(0, &[1; 8]).unwrap();
        d.flush(0, 8).unwrap();
        on_other_thread(|| d.store(16, &[3; 8]).unwrap());
        d.fence().unwrap();
        let img = none(&d);
        assert_eq!(
            (img[0], img[8]),
            (1, 2),
            "clwb wrote back B's earlier store"
        );
        assert_eq!(img[16], 0, "B's store after A's flush stays pending");
        assert_eq!(d.with_sim(|s| s.pending_lines()).unwrap(), vec![(0, 1)]);
    }

    #[test]
    fn marks_of_two_threads_on_one_line_persist_their_own_prefixes() {
        let d = Domain::sim(128);
        on_other_thread(|| {
            d.store(0, &[1; 8]).unwrap();
            d.flush(0, 8).unwrap();
        });
        d.store(8, &[2; 8]).unwrap();
        d.flush(8, 8).unwrap();
        d.fence().unwrap();
        // A's flush covered B's earlier unit too: the whole line persisted,
        // and B's own later fence finds nothing left to do.
        assert_eq!(&none(&d)[..16], &[[1u8; 8], [2u8; 8]].concat()[..]);
        on_other_thread(|| d.fence().unwrap());
        assert!(d.with_sim(|s| s.pending_lines()).unwrap().is_empty());
    }
}
