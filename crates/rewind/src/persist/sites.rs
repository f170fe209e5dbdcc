//! Named ordering points. Every flush and fence the engine issues names its
//! site, so the crash explorer can disable one (a *mutation*) and show that
//! it then finds violations: proof that the harness can fail, and that each
//! ordering point is needed. A site whose removal cannot break consistency
//! says why (`redundant`).

use crate::format::{LogVariant, Policy};

/// Which configurations' code paths reach a site: a set of (log variant,
/// policy) pairs, bit `5 * variant code + policy code`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reach(u32);

const SIMPLE: u8 = 1 << 1;
const OPTIMIZED: u8 = 1 << 2;
const BATCH: u8 = 1 << 3;
const TWO_LAYER: u8 = 1 << 4;
const VARIANTS: u8 = SIMPLE | OPTIMIZED | BATCH | TWO_LAYER;
const FORCE: u8 = 1 << 1;
const NO_FORCE: u8 = 1 << 2;
const REDO: u8 = 1 << 3;
const REDO_ASYNC: u8 = 1 << 4;
const POLICIES: u8 = FORCE | NO_FORCE | REDO | REDO_ASYNC;

impl Reach {
    /// Every variant and policy.
    pub const ANY: Reach = Reach::of(VARIANTS, POLICIES);
    /// The no-force policy (checkpoints, redo of committed work).
    pub const NO_FORCE: Reach = Reach::of(VARIANTS, NO_FORCE);
    /// The policies whose in-place stores are written back as made: force,
    /// and redo for what it stores before commit (a savepoint's writes, a
    /// nested top action's) and for atomic writes.
    pub const FORCE: Reach = Reach::of(VARIANTS, FORCE | REDO | REDO_ASYNC);
    /// The Batch log.
    pub const BATCH: Reach = Reach::of(BATCH, POLICIES);
    /// The Simple and Optimized logs.
    pub const NOT_BATCH: Reach = Reach::of(SIMPLE | OPTIMIZED, POLICIES);
    /// A commit group's stores after its commit point: Batch under force,
    /// and the redo policy on every log.
    pub const COMMIT_GROUP: Reach = Reach::of(BATCH, FORCE).or(Reach::of(VARIANTS, REDO));
    /// A redo commit group, written back at commit or later.
    pub const REDO_GROUP: Reach = Reach::of(VARIANTS, REDO | REDO_ASYNC);
    /// Asynchronous write-back: the redo-async policy.
    pub const ASYNC: Reach = Reach::of(VARIANTS, REDO_ASYNC);
    /// A redo-async commit under one fence in the bucket log: the
    /// Optimized and Batch logs.
    pub const ONE_FENCE: Reach = Reach::of(OPTIMIZED | BATCH, REDO_ASYNC);
    /// The commit ring: the redo policy, on every log.
    pub const RING: Reach = Reach::of(VARIANTS, REDO);
    /// The two-layer log.
    pub const TWO_LAYER: Reach = Reach::of(TWO_LAYER, POLICIES);

    /// Every pair of the variants and policies given as code bits.
    const fn of(variants: u8, policies: u8) -> Reach {
        let mut bits = 0u32;
        let mut v = 0;
        while v < 8 {
            let mut p = 0;
            while p < 5 {
                if variants & (1 << v) != 0 && policies & (1 << p) != 0 {
                    bits |= 1 << (5 * v + p);
                }
                p += 1;
            }
            v += 1;
        }
        Reach(bits)
    }

    const fn or(self, other: Reach) -> Reach {
        Reach(self.0 | other.0)
    }

    /// Whether a configuration's code path reaches the site.
    pub fn contains(self, v: LogVariant, p: Policy) -> bool {
        let bit = 5 * v.code() as u32 + p.code() as u32;
        bit < 32 && self.0 & (1 << bit) != 0
    }
}

/// An ordering point in the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Site(pub &'static str);

/// One entry of the registry.
#[derive(Clone, Copy, Debug)]
pub struct SiteInfo {
    /// The site.
    pub site: Site,
    /// What must be persistent before the next step.
    pub what: &'static str,
    /// Why disabling it cannot break consistency, when that is so.
    pub redundant: Option<&'static str>,
    /// The configurations whose code path reaches it.
    pub reach: Reach,
}

macro_rules! sites {
    ($( $id:ident = $name:literal : $what:literal $(, reach: $reach:ident)? $(, redundant: $why:literal)? ;)*) => {
        $(
            #[doc = $what]
            pub const $id: Site = Site($name);
        )*
        /// Every site, in the order of the write path.
        pub const ALL: &[SiteInfo] = &[
            $( SiteInfo {
                site: $id,
                what: $what,
                redundant: sites!(@why $($why)?),
                reach: sites!(@reach $($reach)?),
            }, )*
        ];
    };
    (@why) => { None };
    (@why $why:literal) => { Some($why) };
    (@reach) => { Reach::ANY };
    (@reach $r:ident) => { Reach::$r };
}

sites! {
    USER = "user": "a fence or flush issued through the public Domain API, outside the engine",
        redundant: "not an engine ordering point";
    STREAM_FENCE = "pool.stream.fence": "a program's unlogged stream (Pool::write_unlogged) persistent: its own commit point, such as rewind-sqlite's commit mark",
        redundant: "not an engine ordering point: the program's format decides what it orders, and its own tests crash it";
    POOL_HEADER_FLUSH = "pool.header.flush": "the header written back at create",
        redundant: "a simulated pool's header (a file pool's is written and made durable under a temporary name before the file is renamed into place, so a crash leaves no pool or a whole one); exploration starts from a created pool";
    POOL_HEADER_FENCE = "pool.header.fence": "the header persistent before the pool is used",
        redundant: "a simulated pool's header (see pool.header.flush)";
    POOL_STAMP_FLUSH = "pool.stamp.flush": "the open stamp (the identity of the file holding the pool open, or 0 at a clean close) written back",
        redundant: "the stamp only tells a copy of a pool taken while it was open from the pool itself (rewind check reports such a copy); recovery never reads it, so a crash before it persists changes nothing it does";
    POOL_STAMP_FENCE = "pool.stamp.fence": "the open stamp persistent",
        redundant: "see pool.stamp.flush";
    ADLL_APPEND_NODE = "adll.append.node": "new node (prev, next, zeroed cells) and the toAppend check word persistent before toAppend names the node";
    ADLL_APPEND_TO_APPEND = "adll.append.to_append": "toAppend persistent before the links change, so recovery can redo them";
    ADLL_APPEND_LINKS = "adll.append.links": "head/tail/next links persistent before toAppend is cleared";
    ADLL_APPEND_CLEAR = "adll.append.clear": "toAppend = 0 persistent before the next list operation",
        redundant: "toAppend shares a cache line with the check words, which the next list operation stores before its own fence: per-line program order persists the clear first, and redoing a completed append is idempotent";
    ADLL_REMOVE_TO_REMOVE = "adll.remove.to_remove": "toRemove persistent before the links change";
    ADLL_REMOVE_LINKS = "adll.remove.links": "unlinked neighbours persistent before toRemove is cleared";
    ADLL_REMOVE_CLEAR = "adll.remove.clear": "toRemove = 0 persistent before the node can be reused",
        redundant: "reusing the node starts with the toAppend check word, stored in toRemove's cache line before a fence: per-line program order persists the clear first";
    ADLL_RECOVER_APPEND_LINKS = "adll.recover.append.links": "recovery: redone append links persistent before toAppend is cleared";
    ADLL_RECOVER_APPEND_CLEAR = "adll.recover.append.clear": "recovery: toAppend = 0 persistent",
        redundant: "as adll.append.clear";
    ADLL_RECOVER_REMOVE_LINKS = "adll.recover.remove.links": "recovery: redone unlink persistent before toRemove is cleared";
    ADLL_RECOVER_REMOVE_CLEAR = "adll.recover.remove.clear": "recovery: toRemove = 0 persistent",
        redundant: "as adll.remove.clear";
    LOG_RECORD_BODY = "log.record.body": "Simple/Optimized: a record's body persistent before its cell points at it", reach: NOT_BATCH;
    LOG_RECORD_CELL = "log.record.cell": "Simple/Optimized: the cell persistent before the in-place store it covers (WAL)", reach: NOT_BATCH;
    LOG_GROUP_BODY = "log.group.body": "Batch: a group's bodies and cells persistent before the index makes them valid", reach: BATCH;
    LOG_GROUP_SPAN = "log.group.span": "Batch: when a group spans two buckets, the earlier bucket's index persistent before the later one's (the group becomes valid in log order)", reach: BATCH;
    LOG_GROUP_INDEX = "log.group.index": "Batch: the index persistent before the group's in-place stores (WAL)", reach: BATCH;
    WB_FLUSH = "wb.flush": "redo-async: a written-back line flushed, so the step's fence makes it durable", reach: ASYNC;
    WB_FENCE = "wb.fence": "redo-async: the lines a step wrote back durable before their groups' records are released", reach: ASYNC;
    RING_COMMIT = "ring.commit": "redo: a commit group in the ring (and a Log Start slot stored with it) durable, the commit point, before its values are stored in place", reach: RING;
    RING_WRITE_BACK = "ring.write_back": "redo: a committed value written back in place, so this thread's next fence makes it durable before the Log Start can pass its group", reach: RING;
    RING_ORDER = "ring.order": "redo: a commit waits, after its fence, until every earlier group is durable and written back (the applied watermark) before it stores its values in place and returns: recovery stops at the first group missing", reach: RING;
    RING_WATERMARK = "ring.watermark": "redo, lanes: a lane's Log Start passes only groups numbered up to the watermark (every lane's groups up to it durable in place), not merely its own durable groups: recovery replays only groups above the largest watermark stored, so a group of another lane below it must be in place", reach: RING;
    RING_DRAIN_FLUSH = "ring.drain.flush": "redo: a line another thread wrote back and has not fenced, written back again by the draining thread", reach: RING;
    RING_DRAIN_LINES = "ring.drain.lines": "redo: every ring group's written-back lines durable before a Log Start past them is stored", reach: RING;
    RING_RECOVER_FLUSH = "ring.recover.flush": "recovery: a replayed commit group's value written back", reach: RING;
    RING_RECOVER_APPLIED = "ring.recover.applied": "recovery: the replayed values durable before the Log Start passes their groups", reach: RING;
    RING_RECOVER_START = "ring.recover.start": "recovery: the Log Start past the replayed groups durable before the pool is used", reach: RING,
        redundant: "until it is durable a crash replays the same groups again from the older Log Start, which is idempotent (values, in order), and the new groups follow them in the ring with the next sequence numbers; ring space behind the older Log Start is reused only after a later Log Start is stored in the other slot and fenced (a commit's lagged advance or a drain), which supersedes both";
    LOG_ONE_FENCE = "log.one_fence": "redo-async: a one-fence commit's records, cells and END persistent (the commit point) before its in-place stores or its return", reach: ONE_FENCE;
    TREE_OP_BODY = "tree.op.body": "two-layer: a tree operation's records (and the new nodes' bodies) persistent before their cells make them valid", reach: TWO_LAYER;
    TREE_OP_CELLS = "tree.op.cells": "two-layer: a tree operation complete in its log before any tree word changes", reach: TWO_LAYER;
    TREE_APPLY_FLUSH = "tree.apply.flush": "two-layer: a tree word written back", reach: TWO_LAYER;
    TREE_OP_APPLIED = "tree.op.applied": "two-layer: a tree operation's words persistent before its records are cleared", reach: TWO_LAYER;
    TREE_RECOVER_FLUSH = "tree.recover.flush": "two-layer recovery: a redone tree word written back", reach: TWO_LAYER;
    TREE_RECOVER_APPLIED = "tree.recover.applied": "two-layer recovery: redone tree operations persistent before their records leave the log", reach: TWO_LAYER,
        redundant: "the first ADLL removal's fence (adll.remove.to_remove) completes the flushes before any record leaves the log";
    ALLOC_OPEN_RESET_FLUSH = "alloc.open.reset.flush": "an empty class chunk reset to free at open",
        redundant: "the reset is an optimisation: either descriptor is consistent with an empty bitmap";
    ALLOC_OPEN_RESET_FENCE = "alloc.open.reset.fence": "the resets persistent",
        redundant: "as alloc.open.reset.flush";
    ALLOC_FORMAT_BITMAP = "alloc.format.bitmap": "a chunk's cleared bitmap written back when it takes a size class",
        redundant: "a free chunk's bitmap is already all zero (a class chunk returns to free only when its bitmap is empty), so the clearing changes no persistent byte";
    ALLOC_FORMAT_DESC = "alloc.format.desc": "a chunk's class descriptor written back",
        redundant: "the descriptor shares its cache line with the chunk's parity word, which the mark of the first block allocated there writes back before that allocation can commit; and recovery's redo of an ALLOC rewrites the descriptor";
    ALLOC_FORMAT_FENCE = "alloc.format.fence": "bitmap and descriptor persistent before an ALLOC record can name a block of the chunk",
        redundant: "the next step on the same thread appends that ALLOC record, whose own fences complete these flushes before the record can be valid";
    ALLOC_HEAP_GROW = "alloc.heap.grow": "the heap size word naming the chunks a growth added written back (the file extended, its length durable, before)";
    ALLOC_HEAP_GROW_FENCE = "alloc.heap.grow.fence": "the heap size word persistent before a block of the new chunks can be allocated (a record naming one, and its data, beyond the recorded heap would be lost)";
    ALLOC_RECLAIM = "alloc.reclaim": "an empty class chunk's descriptor set free written back when another class or a large run needs the chunk",
        redundant: "either descriptor is consistent with the chunk's empty bitmap (an empty class chunk is reset at open), and the chunk's next use writes and fences its descriptor before it holds data";
    ALLOC_RECLAIM_FENCE = "alloc.reclaim.fence": "the reclaimed descriptors persistent",
        redundant: "as alloc.reclaim";
    ALLOC_MARK_BIT = "alloc.mark.bit": "a block's bitmap bit written back when it is allocated or freed";
    ALLOC_MARK_RUN = "alloc.mark.run": "a large run's descriptors written back when it is allocated or freed";
    ALLOC_LOG_GROW = "alloc.log.grow": "a chunk's descriptor marked as a log chunk written back";
    ALLOC_LOG_GROW_FENCE = "alloc.log.grow.fence": "the log chunk persistent before its blocks count as log space (recovery's reservations rely on them, and a list node in an unmarked chunk is corruption)",
        redundant: "the log grows inside an append, whose own fences (same thread) complete the descriptor's write-back before any record of that append, or any list node in the chunk, can be valid";
    ALLOC_LOG_SHRINK = "alloc.log.shrink": "a log chunk's descriptor marked free written back when the log gives it back",
        redundant: "a log chunk with no block in the list is freed at the next open anyway, and any reuse of the chunk writes and fences its descriptor before it holds data";
    ALLOC_LOG_SHRINK_FENCE = "alloc.log.shrink.fence": "the freed descriptor persistent",
        redundant: "as alloc.log.shrink";
    TX_FRESH_FLUSH = "tx.fresh.flush": "a write into memory this transaction allocated written back (no record covers it)";
    TX_ZERO_FLUSH = "tx.zero.flush": "a new allocation's zeroing written back";
    TX_STORE_FLUSH = "tx.store.flush": "force: an in-place store written back, so commit's fence makes it durable", reach: FORCE;
    TX_COMMIT_STORES = "tx.commit.stores": "Batch force and redo: the commit group's in-place stores persistent before its records are cleared", reach: COMMIT_GROUP;
    ATOMIC_FLUSH = "atomic.flush": "force: an atomic_write's single store written back", reach: FORCE;
    ATOMIC_FENCE = "atomic.fence": "force: an atomic_write's store persistent before it returns", reach: FORCE;
    UNDO_FLUSH = "undo.flush": "a compensation (rollback or recovery undo) written back before END";
    CHECKPOINT_FLUSH = "checkpoint.flush": "a finished transaction's changes written back by a checkpoint", reach: NO_FORCE;
    CHECKPOINT_FLUSHED = "checkpoint.flushed": "those changes persistent before the CHECKPOINT record", reach: NO_FORCE,
        redundant: "the CHECKPOINT record's own append fences (body before cell, or group before index) complete the flushes before the record can be valid";
    CHECKPOINT_GAPS = "checkpoint.gaps": "checkpointed records cleared persistently before their END records", reach: NO_FORCE;
    CHECKPOINT_ENDS = "checkpoint.ends": "END records cleared persistently before the CHECKPOINT record", reach: NO_FORCE,
        redundant: "once every other record of those transactions is gone, their END records are inert: nothing to redo or undo";
    RECOVERY_REDO_FLUSH = "recovery.redo.flush": "a redone record's effect written back before the log is cleared", reach: NO_FORCE;
    RECOVERY_APPLIED = "recovery.applied": "everything redone and undone persistent before the log is cleared",
        redundant: "the first ADLL removal's fence (adll.remove.to_remove) completes these flushes before any record leaves the log";
}

/// Looks a site up by name.
pub fn find(name: &str) -> Option<&'static SiteInfo> {
    ALL.iter().find(|s| s.site.0 == name)
}
