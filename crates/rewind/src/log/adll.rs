//! The Atomic Doubly-Linked List (REWIND §3.2, Algorithm 1).
//!
//! The list links log blocks (one record per node in the Simple log, a
//! bucket of cells in the Optimized and Batch logs). Its state is five
//! words in one cache line of the meta page:
//!
//! ```text
//! META_ADLL +0 head   +8 tail   +16 lastTail   +24 toAppend   +32 toRemove
//! ```
//!
//! A node's first two words are `prev` and `next`. Every write is a
//! non-temporal store; `toAppend` / `toRemove` name the operation in flight,
//! so recovery redoes only that one, and redoing it again after a crash
//! during recovery is harmless: the redo reads only words the operation
//! never changes (`lastTail`, the node's own `prev`/`next`).

use super::blocks::Blocks;
use crate::error::Error;
use crate::persist::{sites, Domain};
use crate::pool::layout::META_ADLL;

const HEAD: u64 = META_ADLL;
const TAIL: u64 = META_ADLL + 8;
const LAST_TAIL: u64 = META_ADLL + 16;
const TO_APPEND: u64 = META_ADLL + 24;
const TO_REMOVE: u64 = META_ADLL + 32;

/// Offset of a node's `prev` word.
pub const PREV: u64 = 0;
/// Offset of a node's `next` word.
pub const NEXT: u64 = 8;

/// The list's head and tail as stored.
pub fn ends(d: &Domain) -> Result<(u64, u64), Error> {
    Ok((d.read_u64(HEAD)?, d.read_u64(TAIL)?))
}

/// Appends node `n`, whose contents the caller has written with
/// non-temporal stores but not yet fenced (Algorithm 1).
pub fn append(d: &Domain, n: u64) -> Result<(), Error> {
    let tail = d.read_u64(TAIL)?;
    d.store_nt_u64(n + PREV, tail)?; // line 2: n.prior = tail
    d.store_nt_u64(n + NEXT, 0)?;
    d.store_nt_u64(LAST_TAIL, tail)?; // line 4
                                      // The node and lastTail must be persistent before toAppend names them.
    d.fence_at(sites::ADLL_APPEND_NODE)?;
    d.store_nt_u64(TO_APPEND, n)?; // line 5: the critical update
                                   // toAppend persistent before the links change: recovery can redo them.
    d.fence_at(sites::ADLL_APPEND_TO_APPEND)?;
    link(d, n, tail)?; // lines 6-8
                       // The links persistent before toAppend is cleared.
    d.fence_at(sites::ADLL_APPEND_LINKS)?;
    d.store_nt_u64(TO_APPEND, 0)?; // line 10
                                   // Cleared before the next operation, or its recovery would redo this one.
    d.fence_at(sites::ADLL_APPEND_CLEAR)
}

fn link(d: &Domain, n: u64, last_tail: u64) -> Result<(), Error> {
    if last_tail == 0 {
        d.store_nt_u64(HEAD, n)?;
    } else {
        d.store_nt_u64(last_tail + NEXT, n)?;
    }
    d.store_nt_u64(TAIL, n)
}

/// Removes node `n` from the list.
pub fn remove(d: &Domain, n: u64) -> Result<(), Error> {
    d.store_nt_u64(TO_REMOVE, n)?;
    // toRemove persistent before the links change.
    d.fence_at(sites::ADLL_REMOVE_TO_REMOVE)?;
    unlink(d, n)?;
    d.fence_at(sites::ADLL_REMOVE_LINKS)?;
    d.store_nt_u64(TO_REMOVE, 0)?;
    // Cleared before the node can be reused.
    d.fence_at(sites::ADLL_REMOVE_CLEAR)
}

fn unlink(d: &Domain, n: u64) -> Result<(), Error> {
    let prev = d.read_u64(n + PREV)?;
    let next = d.read_u64(n + NEXT)?;
    if prev == 0 {
        d.store_nt_u64(HEAD, next)?;
    } else {
        d.store_nt_u64(prev + NEXT, next)?;
    }
    if next == 0 {
        d.store_nt_u64(TAIL, prev)
    } else {
        d.store_nt_u64(next + PREV, prev)
    }
}

/// What [`recover`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Repair {
    /// An interrupted append was redone.
    pub append: bool,
    /// An interrupted removal was redone.
    pub remove: bool,
}

/// Redoes the operation a crash interrupted, if any (§3.2 "ADLL recovery").
pub fn recover(d: &Domain, l: &Blocks) -> Result<Repair, Error> {
    let mut r = Repair::default();
    let check = |off: u64, what| {
        if off != 0 && !l.is_block(off) {
            Err(Error::LogCorrupt {
                offset: off,
                reason: what,
            })
        } else {
            Ok(())
        }
    };
    let (head, tail) = ends(d)?;
    check(head, "ADLL head is not a log block")?;
    check(tail, "ADLL tail is not a log block")?;
    let n = d.read_u64(TO_APPEND)?;
    if n != 0 {
        check(n, "ADLL toAppend is not a log block")?;
        let last_tail = d.read_u64(LAST_TAIL)?;
        check(last_tail, "ADLL lastTail is not a log block")?;
        link(d, n, last_tail)?;
        d.fence_at(sites::ADLL_RECOVER_APPEND_LINKS)?;
        d.store_nt_u64(TO_APPEND, 0)?;
        d.fence_at(sites::ADLL_RECOVER_APPEND_CLEAR)?;
        r.append = true;
    }
    let n = d.read_u64(TO_REMOVE)?;
    if n != 0 {
        check(n, "ADLL toRemove is not a log block")?;
        for w in [PREV, NEXT] {
            check(d.read_u64(n + w)?, "ADLL node link is not a log block")?;
        }
        unlink(d, n)?;
        d.fence_at(sites::ADLL_RECOVER_REMOVE_LINKS)?;
        d.store_nt_u64(TO_REMOVE, 0)?;
        d.fence_at(sites::ADLL_RECOVER_REMOVE_CLEAR)?;
        r.remove = true;
    }
    Ok(r)
}

/// The nodes from head to tail, checking that links are blocks, that
/// `prev` mirrors `next`, and that the walk ends (no cycle).
pub fn walk(d: &Domain, l: &Blocks) -> Result<Vec<u64>, Error> {
    let (head, tail) = ends(d)?;
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
