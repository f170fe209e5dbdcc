//! The two-layer log (REWIND §3.4): the records live in the nodes of an
//! Atomic AVL Tree ([`tree`](super::tree)) keyed by (transaction, lsn), and
//! the tree's own updates are logged in an ADLL of their own
//! ([`List::TREE`]), the bottom layer.
//!
//! **Nodes** are placed in the buckets of the log's main list like the
//! records of the one-layer logs, but no cell points at them: a node is
//! live while the tree reaches it. A bucket leaves the list when the tree
//! no longer reaches any of its nodes.
//!
//! **Tree operations.** An insertion or removal is computed first
//! ([`tree::Shadow`]): the words it writes and their new values. Then, as
//! one atomic step:
//!
//! 1. the operation's TREE records (pairs of word and new value, the last
//!    record naming how many the operation has) and the bodies of the new
//!    nodes are stored, and fenced;
//! 2. the records' cells are stored, and fenced: the operation is now
//!    complete in the log, and recovery redoes it;
//! 3. the words are stored in place, flushed, and fenced;
//! 4. the cells become gaps, without a fence: the next operation's first
//!    fence persists them (another thread's are stored again first, as
//!    Batch does), and redoing the latest operation again is harmless, since
//!    nothing changes the tree between operations.
//!
//! Recovery redoes every complete operation in lsn order (an incomplete
//! one was never applied), empties this list, then walks the tree, checking
//! it, to find the records. Operations are single-threaded under the log's
//! latch, and their log is cleared after each, as REWIND's is.
//!
//! **Space.** An operation is at most [`MAX_OP_PAIRS`] words (removals of
//! many nodes are split into several), and the log holds enough free
//! blocks for the largest one at all times (`hold`), so a tree operation
//! never finds the log full.

use super::tree::{self, Shadow};
use super::{
    adll, gap_cells, store_cells, thread_tag, Blocks, Bucket, Buckets, CellRef, Log, Placed,
    Scanned, State, CELLS, INDEX,
};
use crate::error::Error;
use crate::format::layout::{Layout, META_OFF};
use crate::format::record::{self, Draft, Kind};
use crate::persist::{sites, Domain};

/// The first word of the tree's update log's list.
const TREE_LIST: u64 = META_OFF + 128;

/// An operation is split once it writes this many words.
const OP_SPLIT: usize = 256;
/// The most words one operation writes: a split point plus one insertion or
/// removal on the tallest tree (at most 11 words a level).
pub const MAX_OP_PAIRS: usize = OP_SPLIT + 11 * tree::MAX_HEIGHT as usize + 16;
/// Word/value pairs per TREE record.
const PAIRS_PER_RECORD: usize = 32;

/// The tree's update log.
pub(super) struct Inner {
    pub(super) list: adll::List,
    /// Its blocks, in list order.
    pub(super) order: Vec<u64>,
    /// The block records go to, its next cell and body offset.
    tail: Option<(u64, u32, u64)>,
    /// Blocks kept for it: enough for the largest operation.
    pub(super) hold: u64,
}

impl Inner {
    /// The update log of a one-layer log: never used.
    pub(super) fn none() -> Inner {
        Inner {
            list: adll::List::TREE,
            order: Vec::new(),
            tail: None,
            hold: 0,
        }
    }

    /// The update log of a two-layer log whose blocks are laid out as `l`.
    fn new(l: &Layout) -> Inner {
        let per_record = record::HEADER as u64 + 16 * PAIRS_PER_RECORD as u64;
        let body = l.log_block_size - l.body_start();
        let per_block = (body / per_record).min(l.bucket_cells).max(1);
        let records = MAX_OP_PAIRS.div_ceil(PAIRS_PER_RECORD) as u64;
        Inner {
            // The operation's blocks plus the tail it may find full.
            hold: records.div_ceil(per_block) + 1,
            ..Inner::none()
        }
    }
}

/// What opening a two-layer log found.
pub(super) struct Recovered {
    pub(super) inner: Inner,
    pub(super) records: Vec<Scanned>,
    /// The highest lsn the update log used.
    pub(super) max_lsn: u64,
}

impl Log {
    /// Inserts the new leaves `nodes` (their bodies stored) into the tree.
    pub(super) fn tree_insert(
        &self,
        d: &Domain,
        st: &mut State,
        nodes: &[Placed],
    ) -> Result<(), Error> {
        let mut op = Shadow::new(d);
        for p in nodes {
            op.insert(p.cell.node())?;
            if op.writes() >= OP_SPLIT {
                let w = op.take();
                self.tree_op(d, st, &w)?;
            }
        }
        let w = op.take();
        self.tree_op(d, st, &w)
    }

    /// Removes the nodes `cells` name from the tree, in order.
    pub(super) fn tree_remove(
        &self,
        d: &Domain,
        st: &mut State,
        cells: impl Iterator<Item = CellRef>,
    ) -> Result<(), Error> {
        let mut op = Shadow::new(d);
        for c in cells {
            op.remove(c.node())?;
            if op.writes() >= OP_SPLIT {
                let w = op.take();
                self.tree_op(d, st, &w)?;
            }
        }
        let w = op.take();
        self.tree_op(d, st, &w)
    }

    /// Makes one tree operation atomic (see the module doc).
    pub(super) fn tree_op(
        &self,
        d: &Domain,
        st: &mut State,
        writes: &[(u64, u64)],
    ) -> Result<(), Error> {
        if writes.is_empty() {
            return Ok(());
        }
        if writes.len() > MAX_OP_PAIRS {
            return Err(Error::LogCorrupt {
                offset: tree::ROOT,
                reason: "two-layer log tree operation larger than any AVL tree needs",
            });
        }
        st.store_others_clears(d)?;
        let n = writes.len().div_ceil(PAIRS_PER_RECORD) as u64;
        let first = self.lsns.take(n);
        let mut placed: Vec<(CellRef, u64)> = Vec::with_capacity(n as usize);
        let mut payload = Vec::with_capacity(16 * PAIRS_PER_RECORD);
        let mut rec = Vec::new();
        for (lsn, pairs) in (first..).zip(writes.chunks(PAIRS_PER_RECORD)) {
            payload.clear();
            for &(a, v) in pairs {
                payload.extend_from_slice(&a.to_le_bytes());
                payload.extend_from_slice(&v.to_le_bytes());
            }
            let draft = Draft {
                aux: n,
                new: &payload,
                ..Draft::bare(first, Kind::Tree)
            };
            draft.encode(lsn, 0, &mut rec);
            let (cell, off) = self.inner_room(d, st, rec.len() as u64)?;
            d.store_nt(off, &rec)?;
            placed.push((cell, off));
        }
        // New nodes' bodies and the operation's records persistent before
        // the cells make the records valid.
        d.fence_at(sites::TREE_OP_BODY)?;
        store_cells(d, &mut st.words, &placed)?;
        // The operation complete in the log before any word changes.
        d.fence_at(sites::TREE_OP_CELLS)?;
        for &(a, v) in writes {
            d.store_u64(a, v)?;
            d.flush_at(a, 8, sites::TREE_APPLY_FLUSH)?;
        }
        // The words in place before their records are cleared.
        d.fence_at(sites::TREE_OP_APPLIED)?;
        let cells: Vec<CellRef> = placed.iter().map(|&(c, _)| c).collect();
        gap_cells(d, &mut st.words, &mut st.sorted, &cells)?;
        let me = thread_tag();
        st.unfenced_clears.extend(cells.iter().map(|&c| (me, c)));
        // Every block before the tail holds only cleared records.
        let tail = st.inner.tail.map(|t| t.0);
        let old: Vec<u64> = st
            .inner
            .order
            .iter()
            .copied()
            .filter(|&b| Some(b) != tail)
            .collect();
        for b in old {
            self.inner_unlist(d, st, b)?;
        }
        Ok(())
    }

    /// Room for a TREE record of `size` bytes: a cell and body space in the
    /// update log's tail, or in a new block appended to its list.
    fn inner_room(&self, d: &Domain, st: &mut State, size: u64) -> Result<(CellRef, u64), Error> {
        let cells = self.layout.bucket_cells;
        if let Some((block, next, used)) = &mut st.inner.tail {
            if (*next as u64) < cells && *used + size <= self.layout.log_block_size {
                let at = (
                    CellRef {
                        block: *block,
                        idx: *next,
                    },
                    *block + *used,
                );
                *next += 1;
                *used += size;
                return Ok(at);
            }
        }
        let State { free, blocks, .. } = &mut *st;
        let block = free.pop_first(blocks).ok_or(Error::LogFull {
            needed: size,
            free: 0,
        })?;
        let zeros = vec![0u8; (cells * 8) as usize];
        d.store_nt(block + CELLS, &zeros)?;
        d.store_nt_u64(block + INDEX, 0)?;
        st.inner.list.append(d, block)?;
        st.inner.order.push(block);
        st.inner.tail = Some((block, 0, self.layout.body_start()));
        self.inner_room(d, st, size)
    }

    /// Takes `block` out of the update log's list; it becomes free.
    pub(super) fn inner_unlist(&self, d: &Domain, st: &mut State, block: u64) -> Result<(), Error> {
        st.inner.list.remove(d, block)?;
        st.inner.order.retain(|&b| b != block);
        if st.inner.tail.is_some_and(|t| t.0 == block) {
            st.inner.tail = None;
        }
        let per_chunk = Blocks::per_chunk(&self.layout);
        st.free.insert(&st.blocks, per_chunk, block);
        st.unfenced_clears.retain(|(_, c)| c.block != block);
        Ok(())
    }
}

/// Opens a two-layer log once its main list was recovered and scanned
/// (`order`, `buckets`; `found`, the main list's cells, must be empty):
/// recovers the update log's list, redoes its complete operations, empties
/// it, then walks the tree. The nodes' buckets learn their live counts.
pub(super) fn recover(
    d: &Domain,
    l: &Layout,
    blocks: &Blocks,
    order: &[u64],
    buckets: &mut Buckets,
    found: &[Scanned],
) -> Result<(Recovered, adll::Repair), Error> {
    if let Some(s) = found.first() {
        return Err(Error::LogCorrupt {
            offset: s.cell.off(),
            reason: "a two-layer log bucket holds a record cell",
        });
    }
    let inner = Inner::new(l);
    let repair = inner.list.recover(d, blocks)?;
    let (iorder, _, ops) = super::scan(
        d,
        l,
        blocks,
        crate::format::LogVariant::Optimized,
        inner.list,
    )?;
    let all: Vec<u64> = order.iter().chain(&iorder).copied().collect();
    adll::List::LOG.check_unlinked(d, blocks, &all)?;
    // Redo every complete operation, in log order.
    let mut i = 0;
    let mut redone = false;
    while i < ops.len() {
        let id = ops[i].rec.tx;
        let count = ops[i].rec.aux;
        let j = i + ops[i..].iter().take_while(|s| s.rec.tx == id).count();
        if (j - i) as u64 == count {
            for s in &ops[i..j] {
                for pair in s.rec.new.chunks_exact(16) {
                    let a = u64::from_le_bytes(pair[..8].try_into().expect("8"));
                    let v = u64::from_le_bytes(pair[8..].try_into().expect("8"));
                    check_word_target(l, blocks, a)?;
                    d.store_u64(a, v)?;
                    d.flush_at(a, 8, sites::TREE_RECOVER_FLUSH)?;
                    redone = true;
                }
            }
        }
        i = j;
    }
    if redone {
        // The redone words in place before their records leave the log.
        d.fence_at(sites::TREE_RECOVER_APPLIED)?;
    }
    for &b in iorder.iter() {
        inner.list.remove(d, b)?;
    }
    // The tree: every node in a bucket of the main list.
    let in_list: std::collections::HashSet<u64> = order.iter().copied().collect();
    let valid = |n: u64| {
        blocks.containing(n).is_some_and(|b| {
            in_list.contains(&b)
                && n >= b + l.body_start()
                && n + tree::NODE + record::HEADER as u64 <= b + l.log_block_size
        })
    };
    let nodes = tree::walk(d, &valid)?;
    let mut records = Vec::with_capacity(nodes.len());
    for n in nodes {
        let at = n + tree::NODE;
        let block = blocks.containing(n).expect("checked by walk");
        let rec = read_node_record(d, at, block + l.log_block_size)?;
        if rec.kind == Kind::Tree {
            return Err(Error::LogCorrupt {
                offset: at,
                reason: "a tree operation record in the two-layer log's tree",
            });
        }
        let b = buckets.entry(block).or_insert(Bucket {
            next_cell: 0,
            live: 0,
            body_used: l.body_start(),
            tagged: Vec::new(),
        });
        // The room after the last live node is free again (what lies there
        // is unreachable), as a one-layer bucket's is after its last valid
        // record: recovery has at least the room the crashed log had.
        b.live += 1;
        b.next_cell += 1;
        b.body_used = b.body_used.max(at + rec_size(&rec) - block);
        records.push(Scanned {
            rec,
            cell: CellRef::node_at(block, n),
        });
    }
    records.sort_by_key(|s| s.rec.lsn);
    let max_lsn = ops.last().map_or(0, |s| s.rec.lsn);
    Ok((
        Recovered {
            inner,
            records,
            max_lsn,
        },
        repair,
    ))
}

/// Reads the record of a node, which must end by `end` (its block's end).
fn read_node_record(d: &Domain, at: u64, end: u64) -> Result<record::Record, Error> {
    let mut h = [0u8; record::HEADER];
    d.read(at, &mut h)?;
    let payload = record::payload_len(&h).ok_or(Error::LogCorrupt {
        offset: at,
        reason: "unknown record kind",
    })?;
    let total = (record::HEADER + payload) as u64;
    if at + total > end {
        return Err(Error::LogCorrupt {
            offset: at,
            reason: "log record runs past its bucket",
        });
    }
    let mut buf = vec![0u8; total as usize];
    d.read(at, &mut buf)?;
    record::decode(&buf, at)
}

/// A one-layer log leaves the tree's words zero.
pub(super) fn check_unused(d: &Domain) -> Result<(), Error> {
    for off in (TREE_LIST..tree::ROOT + 8).step_by(8) {
        if d.read_u64(off)? != 0 {
            return Err(Error::MetaCorrupt {
                offset: off,
                reason: "a two-layer log word is set in a one-layer pool",
            });
        }
    }
    Ok(())
}

pub(super) fn rec_size(r: &record::Record) -> u64 {
    let pad = |n: usize| n.div_ceil(8) * 8;
    (record::HEADER + pad(r.old.len()) + pad(r.new.len())) as u64
}

/// A TREE record may only write the root word or a word of a node header
/// in a log block.
fn check_word_target(l: &Layout, blocks: &Blocks, a: u64) -> Result<(), Error> {
    let ok = a == tree::ROOT
        || (a.is_multiple_of(8)
            && blocks
                .containing(a)
                .is_some_and(|b| a >= b + l.body_start() && a < b + l.log_block_size));
    if ok {
        Ok(())
    } else {
        Err(Error::LogCorrupt {
            offset: a,
            reason: "a two-layer log tree operation writes outside the log",
        })
    }
}
