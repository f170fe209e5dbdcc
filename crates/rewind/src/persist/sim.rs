//! The simulated persistence domain (DESIGN §2, x86 rules).
//!
//! The simulator keeps the stores that are not yet guaranteed persistent
//! apart from the persisted image (which is the live memory with those
//! stores reverted: each pending unit remembers the bytes it overwrote, so
//! no second copy of the region is kept). Stores are split into aligned 8-byte units,
//! the unit of store atomicity on x86. Each 64-byte line keeps its pending
//! units in program order, because a line reaches the persistence domain in
//! program order: an eviction may write it back at any moment, carrying a
//! *prefix* of its stores. A flush (`clwb`/`clflushopt`) marks the line's
//! stores so far as written back at the next fence; a non-temporal store is
//! pending until the next fence; a fence makes every marked store persistent.
//!
//! A power failure at this instant may therefore leave, for each line with
//! pending stores independently, any prefix of them on top of the persisted
//! image. [`SimState::image_with`] builds exactly those images; the crash
//! explorer chooses the prefixes.

use std::collections::BTreeMap;

use super::mapping::View;
use super::LINE;

/// One aligned 8-byte unit of a store: `mask` bit `i` set means byte `i` of
/// the unit was written.
#[derive(Clone, Copy, Debug)]
struct Unit {
    off: u64,
    /// The word before the store (its masked bytes are what a revert restores).
    old: [u8; 8],
    mask: u8,
}

#[derive(Default, Debug)]
struct Line {
    stores: Vec<Unit>,
    /// `stores[..flushed]` are guaranteed persistent at the next fence.
    flushed: usize,
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
            fences: 0,
            stores: 0,
            capture: None,
            captured: Vec::new(),
            hook: None,
            store_every: 0,
        }
    }

    /// Records a store about to be made to the live memory (call before
    /// writing it, then [`stored`](Self::stored) after).
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
            };
            let line = self.lines.entry(base / LINE).or_default();
            line.stores.push(unit);
            if nt {
                // A non-temporal store to a line writes the line back with it.
                line.flushed = line.stores.len();
            }
            i += n;
        }
    }

    /// The store recorded last is now in the live memory.
    pub(super) fn stored(&mut self) {
        self.stores += 1;
        if self.store_every > 0 && self.stores % self.store_every == 0 {
            self.call_hook(Point::Store(self.stores));
        }
    }

    fn call_hook(&mut self, at: Point) {
        if let Some(mut h) = self.hook.take() {
            h(self, at);
            self.hook = Some(h);
        }
    }

    pub(super) fn flush(&mut self, off: u64, len: u64) {
        let (first, last) = (off / LINE, (off + len - 1) / LINE);
        for (_, line) in self.lines.range_mut(first..=last) {
            line.flushed = line.stores.len();
        }
    }

    pub(super) fn fence(&mut self) {
        self.fences += 1;
        self.call_hook(Point::Fence(self.fences));
        if let Some(c) = self.capture.filter(|c| c.fence == self.fences) {
            // A crash just before this fence completes: any prefix per line.
            let mut x = c.seed | 1;
            let mut rand = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let random = self.image_with(|_, n| (rand() % (n as u64 + 1)) as usize);
            self.captured = vec![self.image_none_pending(), self.image_all_pending(), random];
        }
        // The written-back stores are persistent: they leave the pending set.
        self.lines.retain(|_, line| {
            line.stores.drain(..line.flushed);
            line.flushed = 0;
            !line.stores.is_empty()
        });
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
}
