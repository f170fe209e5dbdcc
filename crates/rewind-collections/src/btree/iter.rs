//! Ordered scans in both directions: [`BTreeMap::range`], [`BTreeMap::iter`]
//! and their `_tx` forms, which read through a transaction and see its
//! own writes.
//!
//! The front end descends to the first leaf in range and follows the leaf
//! chain; the back end descends to the last one and, when it runs out,
//! descends again for the leaf before it (the rightmost one whose keys are
//! below the current leaf's lower separator): leaves have no back links to
//! keep. Each end holds one leaf's entries, sorted when read; the ends stop
//! when they meet.

use std::collections::VecDeque;
use std::ops::{Bound, RangeBounds};

use rewind::{Pool, Tx};

use super::node::{Geo, Raw};
use super::{BTreeMap, Header, MAX_DEPTH, WHAT};
use crate::error::{corrupt, Result};
use crate::mem::{Mem, ScanWatch};
use crate::storable::Storable;

impl<K: Storable, V: Storable> BTreeMap<K, V>
where
    K::Ref: Ord,
{
    /// The entries with keys in `range`, in key order, from either end
    /// (committed state). Bounds are of the lookup type: `10..20` for
    /// `u64` keys, `(Bound::Included("a"), Bound::Excluded("c"))` for
    /// `String` keys. Nodes are read as the iterator goes; a read
    /// error ends it after yielding the error. On a thread inside a
    /// transaction of `pool` it is `NestedTransaction` (see
    /// [`range_tx`](Self::range_tx)).
    pub fn range<'a>(
        &self,
        pool: &'a Pool,
        range: impl RangeBounds<K::Ref>,
    ) -> Result<Iter<'a, K, V>> {
        // (Taken before the header is read.)
        let watch = ScanWatch::start(pool, WHAT, self.hdr)?;
        let mut it = Iter::new(self, Box::new(pool), range).map_err(|e| watch.explain(e))?;
        it.watch = Some(watch);
        Ok(it)
    }

    /// Every entry, in key order (committed state); `.rev()` for
    /// descending order. Not isolated from writers (each leaf is read as
    /// the scan reaches it): beside a running transaction it can see part
    /// of a change, and a read that meets a node a commit freed or reused
    /// meanwhile ends it with [`Error::Changed`](crate::Error::Changed);
    /// [`iter_tx`](Self::iter_tx) scans under the map's lock, and is the
    /// scan inside a transaction (there this one is `NestedTransaction`).
    pub fn iter<'a>(&self, pool: &'a Pool) -> Result<Iter<'a, K, V>> {
        self.range(pool, ..)
    }

    /// [`range`](Self::range) as transaction `tx` sees the map, its own
    /// writes included.
    pub fn range_tx<'a, 'p: 'a>(
        &self,
        tx: &'a mut Tx<'p>,
        range: impl RangeBounds<K::Ref>,
    ) -> Result<Iter<'a, K, V>> {
        tx.lock_shared(self.as_ptr())?; // held until the transaction ends
        Iter::new(self, Box::new(tx), range)
    }

    /// [`iter`](Self::iter) as transaction `tx` sees the map.
    pub fn iter_tx<'a, 'p: 'a>(&self, tx: &'a mut Tx<'p>) -> Result<Iter<'a, K, V>> {
        tx.lock_shared(self.as_ptr())?; // held until the transaction ends
        self.range_tx(tx, ..)
    }

    /// The entry of the smallest key (committed state, isolated as
    /// [`get`](Self::get)).
    pub fn first_key_value(&self, pool: &Pool) -> Result<Option<(K, V)>> {
        pool.read_isolated(self.hdr, |r| {
            Iter::new(self, Box::new(r), ..)?.next().transpose()
        })
    }

    /// The entry of the largest key (committed state, isolated as
    /// [`get`](Self::get)).
    pub fn last_key_value(&self, pool: &Pool) -> Result<Option<(K, V)>> {
        pool.read_isolated(self.hdr, |r| {
            Iter::new(self, Box::new(r), ..)?.next_back().transpose()
        })
    }

    /// The entry of the smallest key, as `tx` sees it.
    pub fn first_key_value_tx(&self, tx: &mut Tx<'_>) -> Result<Option<(K, V)>> {
        tx.lock_shared(self.as_ptr())?; // held until the transaction ends
        self.iter_tx(tx)?.next().transpose()
    }

    /// The entry of the largest key, as `tx` sees it.
    pub fn last_key_value_tx(&self, tx: &mut Tx<'_>) -> Result<Option<(K, V)>> {
        tx.lock_shared(self.as_ptr())?; // held until the transaction ends
        self.iter_tx(tx)?.next_back().transpose()
    }
}

/// One end of a scan: the entries of one leaf not yet yielded, in order.
struct End<K, V> {
    entries: VecDeque<(K, V)>,
    /// Front: the next leaf (0: none). Back: the lower separator of the
    /// leaf the entries came from (`None`: it was the leftmost leaf).
    next: u64,
    lower: Option<K>,
    done: bool,
}

/// An iterator over a [`BTreeMap`]'s entries in key order, from either
/// end, reading leaves as it goes (from [`BTreeMap::range`],
/// [`BTreeMap::iter`] and their `_tx` forms).
pub struct Iter<'a, K, V> {
    mem: Box<dyn Mem + 'a>,
    map: BTreeMap<K, V>,
    h: Header,
    start: Bound<K>,
    end: Bound<K>,
    front: End<K, V>,
    back: End<K, V>,
    /// The last key each end yielded: the ends stop where they meet.
    front_key: Option<K>,
    back_key: Option<K>,
    /// Whether each end has read its first leaf.
    front_started: bool,
    back_started: bool,
    /// Entries yielded: more than the stored length is a cycle.
    yielded: u64,
    /// Entries passed over outside the range (`skip`).
    skipped: u64,
    /// The most entries the scan may yield (`count`): the stored length
    /// at first.
    limit: u64,
    /// A scan through `&Pool`: its errors while a writer held the map are
    /// `Changed`.
    watch: Option<ScanWatch<'a>>,
}

impl<'a, K: Storable, V: Storable> Iter<'a, K, V>
where
    K::Ref: Ord,
{
    fn new(
        map: &BTreeMap<K, V>,
        mut mem: Box<dyn Mem + 'a>,
        range: impl RangeBounds<K::Ref>,
    ) -> Result<Self> {
        let h = map.header(&mut *mem)?;
        let empty = || End {
            entries: VecDeque::new(),
            next: 0,
            lower: None,
            done: false,
        };
        Ok(Iter {
            mem,
            map: *map,
            limit: h.len,
            h,
            start: range.start_bound().map(|b| b.to_owned()),
            end: range.end_bound().map(|b| b.to_owned()),
            front: empty(),
            back: empty(),
            front_key: None,
            back_key: None,
            front_started: false,
            back_started: false,
            yielded: 0,
            skipped: 0,
            watch: None,
        })
    }

    /// `e` as [`ScanWatch::explain`] tells it for a scan through `&Pool`.
    fn explain(&self, e: crate::Error) -> crate::Error {
        match &self.watch {
            Some(w) => w.explain(e),
            None => e,
        }
    }

    fn below_start(&self, k: &K) -> bool {
        let k = k.borrowed();
        match &self.start {
            Bound::Included(s) => k < s.borrowed(),
            Bound::Excluded(s) => k <= s.borrowed(),
            Bound::Unbounded => false,
        }
    }

    fn above_end(&self, k: &K) -> bool {
        let k = k.borrowed();
        match &self.end {
            Bound::Included(e) => k > e.borrowed(),
            Bound::Excluded(e) => k >= e.borrowed(),
            Bound::Unbounded => false,
        }
    }

    /// The leaf holding the first key at or after the start bound.
    fn first_leaf(&mut self) -> Result<Raw> {
        let geo = self.h.geo;
        let key = match &self.start {
            Bound::Unbounded => return Raw::load(&mut *self.mem, &geo, self.h.first),
            Bound::Included(s) | Bound::Excluded(s) => s.clone(),
        };
        let (leaf, _) = self.descend(|m, n, geo| n.child_for::<K, _>(m, geo, key.borrowed()))?;
        Ok(leaf)
    }

    /// Descends choosing children with `pick`; returns the leaf and its
    /// lower separator (`None` for the leftmost leaf).
    fn descend(
        &mut self,
        pick: impl Fn(&mut dyn Mem, &Raw, &Geo) -> Result<usize>,
    ) -> Result<(Raw, Option<K>)> {
        let geo = self.h.geo;
        let mut node = Raw::load(&mut *self.mem, &geo, self.h.root)?;
        let mut lower = None;
        for _ in 0..MAX_DEPTH {
            if node.is_leaf() {
                return Ok((node, lower));
            }
            let i = pick(&mut *self.mem, &node, &geo)?;
            if i > 0 {
                lower = Some(K::load(&mut *self.mem, &node.ikey::<K>(&geo, i - 1))?);
            }
            node = Raw::load(&mut *self.mem, &geo, node.kid(&geo, i))?;
        }
        Err(corrupt(
            WHAT,
            self.h.root,
            "deeper than 64 levels (a cycle?)",
        ))
    }

    /// Fills the front end with the next leaf's entries; false at the end.
    fn refill_front(&mut self) -> Result<bool> {
        if let Some(w) = self.watch {
            w.outside()?;
        }
        let geo = self.h.geo;
        // A chain longer than any tree is a cycle: bounded by the leaves
        // the stored length could need, at least one per entry plus one.
        for _ in 0..=self.h.len.saturating_add(1) {
            let leaf = if !self.front_started {
                self.front_started = true;
                self.first_leaf()?
            } else if self.front.next == 0 {
                return Ok(false);
            } else {
                Raw::load(&mut *self.mem, &geo, self.front.next)?
            };
            if !leaf.is_leaf() {
                return Err(corrupt(
                    WHAT,
                    leaf.off,
                    "the leaf chain leads to an inner node",
                ));
            }
            self.front.next = leaf.next();
            self.front.entries = leaf.sorted_entries(&mut *self.mem, &geo)?.into();
            if !self.front.entries.is_empty() {
                return Ok(true);
            }
        }
        Err(corrupt(
            WHAT,
            self.h.first,
            "a leaf chain longer than the map (a cycle?)",
        ))
    }

    /// Fills the back end with the previous leaf's entries; false at the
    /// start.
    fn refill_back(&mut self) -> Result<bool> {
        if let Some(w) = self.watch {
            w.outside()?;
        }
        let geo = self.h.geo;
        for _ in 0..=self.h.len.saturating_add(1) {
            let (leaf, lower) = if !self.back_started {
                self.back_started = true;
                match self.end.clone() {
                    Bound::Unbounded => self.descend(|_, n, _| Ok(n.count()))?,
                    Bound::Included(e) => {
                        self.descend(|m, n, geo| n.child_for::<K, _>(m, geo, e.borrowed()))?
                    }
                    Bound::Excluded(e) => {
                        self.descend(|m, n, geo| n.child_before::<K, _>(m, geo, e.borrowed()))?
                    }
                }
            } else {
                let Some(lo) = self.back.lower.take() else {
                    return Ok(false);
                };
                let (leaf, lower) =
                    self.descend(|m, n, geo| n.child_before::<K, _>(m, geo, lo.borrowed()))?;
                if lower
                    .as_ref()
                    .is_some_and(|l| l.borrowed() >= lo.borrowed())
                {
                    return Err(corrupt(WHAT, leaf.off, "separators out of order"));
                }
                (leaf, lower)
            };
            self.back.lower = lower;
            self.back.entries = leaf.sorted_entries(&mut *self.mem, &geo)?.into();
            if !self.back.entries.is_empty() {
                return Ok(true);
            }
        }
        Err(corrupt(
            WHAT,
            self.h.root,
            "more leaves than the map (a cycle?)",
        ))
    }

    /// Counts an entry yielded: more than the map holds is a cycle. A scan
    /// through a transaction holds the map's lock, so its length stays;
    /// one outside (through `&Pool`) runs beside writers, whose inserts may
    /// add entries ahead of it and whose removals may take ones it yielded:
    /// its bound is twice the largest length seen, plus a leaf's worth, so
    /// that only a cycle reaches it, never a map that changed. (The largest
    /// length *read from the header*: a bound grown from the previous bound
    /// would double at every check and let a cycle run for ever.)
    fn count(&mut self) -> Result<()> {
        self.yielded += 1;
        if self.yielded > self.limit {
            let now = self.map.header(&mut *self.mem)?.len;
            self.limit = match self.mem.free_epoch() {
                Some(_) => now,
                None => {
                    self.h.len = self.h.len.max(now);
                    (self.h.len)
                        .saturating_mul(2)
                        .saturating_add(super::MAX_FANOUT as u64)
                }
            };
            if self.yielded > self.limit {
                return Err(corrupt(
                    WHAT,
                    self.h.root,
                    "more entries than the map's length",
                ));
            }
        }
        Ok(())
    }

    /// Counts an entry passed over outside the range. In a tree each end
    /// passes over at most the entries of its first leaf; past that
    /// allowance they count as entries yielded (`count`), so that a leaf
    /// chain that cycles through entries outside the range (a leaf whose
    /// `next` names itself, below a range's start) ends in `Corrupt`
    /// rather than being read for ever.
    fn skip(&mut self) -> Result<()> {
        self.skipped += 1;
        if self.skipped > 2 * super::MAX_FANOUT as u64 {
            return self.count();
        }
        Ok(())
    }

    fn step_front(&mut self) -> Result<Option<(K, V)>> {
        loop {
            if self.front.done {
                return Ok(None);
            }
            let Some((k, v)) = self.front.entries.pop_front() else {
                if !self.refill_front()? {
                    self.front.done = true;
                }
                continue;
            };
            // A key not past the last one this end yielded: beside writers
            // (a scan through `&Pool`), a commit that shared a leaf's
            // entries with its neighbour after this end read it moved them
            // into the leaf it reads next; yielded already, or passed.
            let passed = (self.front_key.as_ref()).is_some_and(|f| k.borrowed() <= f.borrowed());
            if passed || self.below_start(&k) {
                self.skip()?;
                continue;
            }
            let met = (self.back_key.as_ref()).is_some_and(|b| k.borrowed() >= b.borrowed());
            if met || self.above_end(&k) {
                self.front.done = true;
                return Ok(None);
            }
            self.front_key = Some(k.clone());
            self.count()?;
            return Ok(Some((k, v)));
        }
    }

    fn step_back(&mut self) -> Result<Option<(K, V)>> {
        loop {
            if self.back.done {
                return Ok(None);
            }
            let Some((k, v)) = self.back.entries.pop_back() else {
                if !self.refill_back()? {
                    self.back.done = true;
                }
                continue;
            };
            // (As the front: a key not below the last one this end yielded
            // was moved into the leaf before by a commit; the back end
            // finds that leaf by the lower separator it read before.)
            let passed = (self.back_key.as_ref()).is_some_and(|b| k.borrowed() >= b.borrowed());
            if passed || self.above_end(&k) {
                self.skip()?;
                continue;
            }
            let met = (self.front_key.as_ref()).is_some_and(|f| k.borrowed() <= f.borrowed());
            if met || self.below_start(&k) {
                self.back.done = true;
                return Ok(None);
            }
            self.back_key = Some(k.clone());
            self.count()?;
            return Ok(Some((k, v)));
        }
    }
}

impl<K: Storable, V: Storable> Iterator for Iter<'_, K, V>
where
    K::Ref: Ord,
{
    type Item = Result<(K, V)>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.step_front() {
            Ok(e) => e.map(Ok),
            Err(e) => {
                self.front.done = true;
                self.back.done = true;
                Some(Err(self.explain(e)))
            }
        }
    }
}

impl<K: Storable, V: Storable> DoubleEndedIterator for Iter<'_, K, V>
where
    K::Ref: Ord,
{
    fn next_back(&mut self) -> Option<Self::Item> {
        match self.step_back() {
            Ok(e) => e.map(Ok),
            Err(e) => {
                self.front.done = true;
                self.back.done = true;
                Some(Err(self.explain(e)))
            }
        }
    }
}
