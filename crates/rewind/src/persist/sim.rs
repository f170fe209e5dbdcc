//! The simulated persistence domain (DESIGN §2, x86 rules).
//!
//! The simulator keeps the *persisted* image apart from the stores that are
//! not yet guaranteed persistent. Stores are split into aligned 8-byte units,
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

use super::LINE;

/// One aligned 8-byte unit of a store: `mask` bit `i` set means byte `i` of
/// the unit was written.
#[derive(Clone, Copy, Debug)]
struct Unit {
    off: u64,
    bytes: [u8; 8],
    mask: u8,
}

#[derive(Default, Debug)]
struct Line {
    stores: Vec<Unit>,
    /// `stores[..flushed]` are guaranteed persistent at the next fence.
    flushed: usize,
}

/// Simulator state: the persisted image and the pending stores per line.
pub struct SimState {
    durable: Vec<u8>,
    lines: BTreeMap<u64, Line>,
    fences: u64,
    capture: Option<Capture>,
    captured: Vec<Vec<u8>>,
}

/// A request to save crash images when a given fence is reached.
#[derive(Clone, Copy, Debug)]
struct Capture {
    fence: u64,
    seed: u64,
}

impl SimState {
    pub(super) fn new(image: Vec<u8>) -> SimState {
        SimState {
            durable: image,
            lines: BTreeMap::new(),
            fences: 0,
            capture: None,
            captured: Vec::new(),
        }
    }

    pub(super) fn store(&mut self, off: u64, bytes: &[u8], nt: bool) {
        let mut i = 0usize;
        while i < bytes.len() {
            let p = off + i as u64;
            let base = p / 8 * 8;
            let start = (p - base) as usize;
            let n = (8 - start).min(bytes.len() - i);
            let mut unit = Unit {
                off: base,
                bytes: [0; 8],
                mask: 0,
            };
            unit.bytes[start..start + n].copy_from_slice(&bytes[i..i + n]);
            for k in start..start + n {
                unit.mask |= 1 << k;
            }
            let line = self.lines.entry(base / LINE).or_default();
            line.stores.push(unit);
            if nt {
                // A non-temporal store to a line writes the line back with it.
                line.flushed = line.stores.len();
            }
            i += n;
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
        let durable = &mut self.durable;
        self.lines.retain(|_, line| {
            for u in &line.stores[..line.flushed] {
                apply(durable, u);
            }
            line.stores.drain(..line.flushed);
            line.flushed = 0;
            !line.stores.is_empty()
        });
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
        let mut img = self.durable.clone();
        for (l, line) in &self.lines {
            let k = prefix(*l, line.stores.len()).min(line.stores.len());
            for u in &line.stores[..k] {
                apply(&mut img, u);
            }
        }
        img
    }

    /// The image if nothing pending persisted.
    pub fn image_none_pending(&self) -> Vec<u8> {
        self.durable.clone()
    }

    /// The image if every pending store persisted (equals the live contents).
    pub fn image_all_pending(&self) -> Vec<u8> {
        self.image_with(|_, n| n)
    }
}

fn apply(img: &mut [u8], u: &Unit) {
    for k in 0..8 {
        if u.mask & (1 << k) != 0 {
            img[u.off as usize + k] = u.bytes[k];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_is_pending_until_flush_and_fence() {
        let mut s = SimState::new(vec![0; 256]);
        s.store(8, &[1; 8], false);
        assert_eq!(s.image_none_pending()[8], 0);
        assert_eq!(s.image_all_pending()[8], 1);
        s.fence();
        assert_eq!(
            s.image_none_pending()[8],
            0,
            "fence without flush persists nothing"
        );
        s.flush(8, 8);
        s.fence();
        assert_eq!(s.image_none_pending()[8], 1);
        assert!(s.pending_lines().is_empty());
    }

    #[test]
    fn nt_store_persists_at_next_fence() {
        let mut s = SimState::new(vec![0; 128]);
        s.store(64, &[7; 16], true);
        s.fence();
        assert_eq!(&s.image_none_pending()[64..80], &[7; 16]);
    }

    #[test]
    fn line_prefixes_follow_program_order() {
        let mut s = SimState::new(vec![0; 128]);
        s.store(0, &[1; 8], false);
        s.store(8, &[2; 8], false);
        s.store(64, &[3; 8], false);
        assert_eq!(s.pending_lines(), vec![(0, 2), (1, 1)]);
        let img = s.image_with(|l, _| if l == 0 { 1 } else { 0 });
        assert_eq!((img[0], img[8], img[64]), (1, 0, 0));
    }

    #[test]
    fn unaligned_store_splits_into_units() {
        let mut s = SimState::new(vec![0; 64]);
        s.store(6, &[9; 4], false);
        assert_eq!(s.pending_lines(), vec![(0, 2)]);
        let img = s.image_with(|_, _| 1);
        assert_eq!(&img[5..11], &[0, 9, 9, 0, 0, 0]);
    }

    #[test]
    fn stores_after_flush_stay_pending() {
        let mut s = SimState::new(vec![0; 64]);
        s.store(0, &[1; 8], false);
        s.flush(0, 8);
        s.store(8, &[2; 8], false);
        s.fence();
        assert_eq!(s.image_none_pending()[0], 1);
        assert_eq!(s.image_none_pending()[8], 0);
        assert_eq!(s.pending_lines(), vec![(0, 1)]);
    }
}
