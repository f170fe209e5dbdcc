//! The Atomic Doubly-Linked List (REWIND §3.2, Algorithm 1).
//!
//! The list links log blocks (one record per node in the Simple log, a
//! bucket of cells in the Optimized and Batch logs). A list is an instance
//! ([`List`]) over one cache line of the meta page; the pool's log list is
//! [`List::LOG`], at `META_ADLL`; the two-layer log's tree updates are
//! logged in [`List::TREE`], the line after:
//!
//! ```text
//! base +0 head  +8 tail  +16 (zero)  +24 toAppend  +32 toRemove
//!      +40 toAppend check  +48 toRemove check  +56 (zero)
//! ```
//!
//! A node's header holds `prev` (+0), `next` (+8) and a `linked` word
//! (+16): `n ^ LINKED` while the node is in the list, 0 otherwise. Every
//! write is a non-temporal store; `toAppend` / `toRemove` name the
//! operation in flight, so recovery redoes only that one, and redoing it
//! again after a crash during recovery is harmless: the redo reads only
//! words the operation never changes (the node's own `prev` and `next`).
//! Algorithm 1's `lastTail` is the appended node's `prev`, so it is not
//! stored twice.
//!
//! The list carries its own checks, so damage is found, not followed: a
//! check word (`n ^ CHECK`) is stored before `toAppend` / `toRemove` names
//! `n` (in the same cache line, which persists in program order; for an
//! append, before a fence too), and cleared after the name is; every link
//! must be a log block; every list node must be marked linked and every
//! other block not.

use super::blocks::Blocks;
use crate::error::Error;
use crate::format::layout::META_ADLL;
use crate::persist::{sites, Domain};

/// Offsets of the list's words from its base.
const HEAD: u64 = 0;
const TAIL: u64 = 8;
/// Zero: Algorithm 1's `lastTail` word, not stored (see the module doc).
const UNUSED_A: u64 = 16;
const TO_APPEND: u64 = 24;
const TO_REMOVE: u64 = 32;
const APPEND_CHECK: u64 = 40;
const REMOVE_CHECK: u64 = 48;
const UNUSED_B: u64 = 56;

/// One Atomic Doubly-Linked List: its words are the cache line at `base`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct List {
    base: u64,
}

/// Offset of a node's `prev` word.
pub const PREV: u64 = 0;
/// Offset of a node's `next` word.
pub const NEXT: u64 = 8;
/// Offset of a node's `linked` word.
pub const LINKED: u64 = 16;

const LINKED_MARK: u64 = 0x4c49_4e4b_4544_0000; // "LINKED"
const CHECK_MARK: u64 = 0xa5c3_96e1_7b5d_2f48;

/// The `linked` word of node `n` in the list.
fn linked(n: u64) -> u64 {
    n ^ LINKED_MARK
}

impl List {
    /// The pool's log list.
    pub const LOG: List = List { base: META_ADLL };

    /// The two-layer log's tree update list, the meta-page line after.
    pub const TREE: List = List {
        base: META_ADLL + 64,
    };

    /// Offset of the list word `off`.
    const fn w(self, off: u64) -> u64 {
        self.base + off
    }

    #[cfg(feature = "testing")]
    /// Whether a pool image holds an append or removal of this list in
    /// flight (its `toAppend` or `toRemove` set).
    pub fn in_flight(&self, image: &[u8]) -> bool {
        let word = |off: u64| {
            image
                .get(off as usize..off as usize + 8)
                .is_some_and(|b| b.iter().any(|&x| x != 0))
        };
        word(self.w(TO_APPEND)) || word(self.w(TO_REMOVE))
    }

    /// The list's head and tail as stored.
    pub fn ends(&self, d: &Domain) -> Result<(u64, u64), Error> {
        Ok((d.read_u64(self.w(HEAD))?, d.read_u64(self.w(TAIL))?))
    }

    /// Appends node `n`, whose contents the caller has written with
    /// non-temporal stores but not yet fenced (Algorithm 1).
    pub fn append(&self, d: &Domain, n: u64) -> Result<(), Error> {
        let tail = d.read_u64(self.w(TAIL))?;
        d.store_nt_u64(n + PREV, tail)?; // line 2: n.prior = tail (and lastTail)
        d.store_nt_u64(n + NEXT, 0)?;
        d.store_nt_u64(self.w(APPEND_CHECK), n ^ CHECK_MARK)?;
        // The node and the check word persistent before toAppend names it.
        d.fence_at(sites::ADLL_APPEND_NODE)?;
        d.store_nt_u64(self.w(TO_APPEND), n)?; // line 5: the critical update
                                               // toAppend persistent before the links change: recovery can redo them.
        d.fence_at(sites::ADLL_APPEND_TO_APPEND)?;
        self.link(d, n, tail)?; // lines 6-8
                                // The links persistent before toAppend is cleared.
        d.fence_at(sites::ADLL_APPEND_LINKS)?;
        d.store_nt_u64(self.w(TO_APPEND), 0)?; // line 10
                                               // Cleared before the next operation, or its recovery would redo this one.
        d.fence_at(sites::ADLL_APPEND_CLEAR)?;
        // Only after toAppend = 0 is persistent (persisted by a later fence).
        d.store_nt_u64(self.w(APPEND_CHECK), 0)
    }

    fn link(&self, d: &Domain, n: u64, last_tail: u64) -> Result<(), Error> {
        d.store_nt_u64(n + LINKED, linked(n))?;
        if last_tail == 0 {
            d.store_nt_u64(self.w(HEAD), n)?;
        } else {
            d.store_nt_u64(last_tail + NEXT, n)?;
        }
        d.store_nt_u64(self.w(TAIL), n)
    }

    /// Removes node `n` from the list.
    pub fn remove(&self, d: &Domain, n: u64) -> Result<(), Error> {
        // The check word first: it shares toRemove's cache line, which
        // persists in program order, so toRemove is never persistent without it.
        d.store_nt_u64(self.w(REMOVE_CHECK), n ^ CHECK_MARK)?;
        d.store_nt_u64(self.w(TO_REMOVE), n)?;
        // toRemove persistent before the links change.
        d.fence_at(sites::ADLL_REMOVE_TO_REMOVE)?;
        self.unlink(d, n)?;
        d.fence_at(sites::ADLL_REMOVE_LINKS)?;
        d.store_nt_u64(self.w(TO_REMOVE), 0)?;
        // Cleared before the node can be reused.
        d.fence_at(sites::ADLL_REMOVE_CLEAR)?;
        d.store_nt_u64(self.w(REMOVE_CHECK), 0)
    }

    fn unlink(&self, d: &Domain, n: u64) -> Result<(), Error> {
        let prev = d.read_u64(n + PREV)?;
        let next = d.read_u64(n + NEXT)?;
        d.store_nt_u64(n + LINKED, 0)?;
        if prev == 0 {
            d.store_nt_u64(self.w(HEAD), next)?;
        } else {
            d.store_nt_u64(prev + NEXT, next)?;
        }
        if next == 0 {
            d.store_nt_u64(self.w(TAIL), prev)
        } else {
            d.store_nt_u64(next + PREV, prev)
        }
    }

    /// Checks the list's words, then redoes the operation a crash
    /// interrupted, if any (§3.2 "ADLL recovery").
    pub fn recover(&self, d: &Domain, l: &Blocks) -> Result<Repair, Error> {
        let mut r = Repair::default();
        let corrupt = |offset, reason| Error::LogCorrupt { offset, reason };
        let check = |off: u64, what| {
            if off != 0 && !l.is_block(off) {
                Err(corrupt(off, what))
            } else {
                Ok(())
            }
        };
        let (head, tail) = self.ends(d)?;
        check(head, "ADLL head is not a log block")?;
        check(tail, "ADLL tail is not a log block")?;
        for w in [self.w(UNUSED_A), self.w(UNUSED_B)] {
            if d.read_u64(w)? != 0 {
                return Err(corrupt(
                    w,
                    "an unused ADLL word is not zero (damaged meta page)",
                ));
            }
        }
        // An operation word names a block, with its check word set; an idle
        // one is 0, with a check word of 0 or of the last operation (a crash
        // between clearing the two).
        for (word, check_word, what) in [
            (
                self.w(TO_APPEND),
                self.w(APPEND_CHECK),
                "ADLL toAppend does not match its check word (damaged meta page)",
            ),
            (
                self.w(TO_REMOVE),
                self.w(REMOVE_CHECK),
                "ADLL toRemove does not match its check word (damaged meta page)",
            ),
        ] {
            let (n, c) = (d.read_u64(word)?, d.read_u64(check_word)?);
            let ok = if n != 0 {
                c == n ^ CHECK_MARK && l.is_block(n)
            } else {
                // A crash just after the operation word was cleared leaves the
                // last operation's check (whose block may have left the log).
                c == 0 || l.plausible(c ^ CHECK_MARK)
            };
            if !ok {
                return Err(corrupt(word, what));
            }
        }
        let n = d.read_u64(self.w(TO_APPEND))?;
        if n != 0 {
            let last_tail = d.read_u64(n + PREV)?;
            check(last_tail, "ADLL appended node's prev is not a log block")?;
            self.link(d, n, last_tail)?;
            d.fence_at(sites::ADLL_RECOVER_APPEND_LINKS)?;
            d.store_nt_u64(self.w(TO_APPEND), 0)?;
            d.fence_at(sites::ADLL_RECOVER_APPEND_CLEAR)?;
            d.store_nt_u64(self.w(APPEND_CHECK), 0)?;
            r.append = true;
        }
        let n = d.read_u64(self.w(TO_REMOVE))?;
        if n != 0 {
            for w in [PREV, NEXT] {
                check(d.read_u64(n + w)?, "ADLL node link is not a log block")?;
            }
            self.unlink(d, n)?;
            d.fence_at(sites::ADLL_RECOVER_REMOVE_LINKS)?;
            d.store_nt_u64(self.w(TO_REMOVE), 0)?;
            d.fence_at(sites::ADLL_RECOVER_REMOVE_CLEAR)?;
            d.store_nt_u64(self.w(REMOVE_CHECK), 0)?;
            r.remove = true;
        }
        Ok(r)
    }

    /// The nodes from head to tail, checking that links are blocks, that
    /// `prev` mirrors `next`, and that the walk ends (no cycle).
    pub fn walk(&self, d: &Domain, l: &Blocks) -> Result<Vec<u64>, Error> {
        let (head, tail) = self.ends(d)?;
        let mut out = Vec::new();
        let (mut prev, mut cur) = (0u64, head);
        while cur != 0 {
            if !l.is_block(cur) {
                return Err(Error::LogCorrupt {
                    offset: cur,
                    reason: "ADLL link is not a log block",
                });
            }
            if d.read_u64(cur + PREV)? != prev {
                return Err(Error::LogCorrupt {
                    offset: cur,
                    reason: "ADLL node's prev does not match its predecessor",
                });
            }
            if d.read_u64(cur + LINKED)? != linked(cur) {
                return Err(Error::LogCorrupt {
                    offset: cur + LINKED,
                    reason: "ADLL node in the list is not marked linked (damaged)",
                });
            }
            out.push(cur);
            if out.len() as u64 > l.count() {
                return Err(Error::LogCorrupt {
                    offset: cur,
                    reason: "ADLL has a cycle",
                });
            }
            prev = cur;
            cur = d.read_u64(cur + NEXT)?;
        }
        if prev != tail {
            return Err(Error::LogCorrupt {
                offset: tail,
                reason: "ADLL tail is not the last node",
            });
        }
        Ok(out)
    }

    /// Checks that no block outside the list (`order`) is marked linked: a
    /// list whose head, tail or links were damaged would otherwise silently
    /// drop the records of the nodes it no longer reaches.
    pub fn check_unlinked(&self, d: &Domain, l: &Blocks, order: &[u64]) -> Result<(), Error> {
        let in_list: std::collections::HashSet<u64> = order.iter().copied().collect();
        for b in l.all() {
            if !in_list.contains(&b) && d.read_u64(b + LINKED)? == linked(b) {
                return Err(Error::LogCorrupt {
                    offset: b + LINKED,
                    reason: "log block marked linked is not reachable from the list (damaged list)",
                });
            }
        }
        Ok(())
    }
}

/// What [`List::recover`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Repair {
    /// An interrupted append was redone.
    pub append: bool,
    /// An interrupted removal was redone.
    pub remove: bool,
}
