//! The engine of one open pool (below the transaction API, above the log
//! and the allocator): what `Pool` is a façade over and what a `Tx` works
//! on. Opening runs recovery here before anything else can touch the pool;
//! checkpoints (`checkpoint`) own their state here.

pub(crate) mod checkpoint;
pub(crate) mod locks;
pub(crate) mod write_back;

use std::path::Path;

use bytemuck::Pod;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::alloc::Allocator;
use crate::error::Error;
use crate::format::header::Header;
use crate::format::layout::{
    Layout, HEADER_SIZE, META_ADLL, META_END, META_LOG_START, META_OFF, META_RING_START,
    META_ROOT_CHECK, META_ROOT_OFF, META_ROOT_SIZE, RING_SLOT,
};
use crate::format::{PPtr, Policy};
use crate::log::adll::List;
use crate::log::lanes::Lanes;
use crate::log::tree::ROOT as TREE_ROOT;
use crate::log::{Log, Lsns};
use crate::persist::Domain;
use crate::policy::{self, Durability, Finished};
use crate::recovery::{self, RecoveryReport};

/// Transaction ids a thread takes at a time ([`Engine::new_tx_id`]).
const TX_ID_BLOCK: u64 = 1024;

/// One open pool's machinery: its domain, header, log, allocator and
/// policy, the checkpointer's state, and whether the handle is poisoned.
pub(crate) struct Engine {
    pub(crate) dom: Domain,
    pub(crate) hdr: Header,
    pub(crate) log: Log,
    pub(crate) alloc: Arc<Allocator>,
    pub(crate) policy: Policy,
    /// The policy's strategy.
    pub(crate) durability: &'static dyn Durability,
    pub(crate) finished: Mutex<Vec<Finished>>,
    pub(crate) checkpoint_lock: Mutex<()>,
    pub(crate) checkpoint_fill: f64,
    /// The crash explorer's: every checkpoint clears as one that finds no
    /// room for its CHECKPOINT record does (`Engine::clear_in_order`), so
    /// that its crash points are explored too.
    #[cfg(feature = "testing")]
    pub(crate) checkpoint_in_order: std::sync::atomic::AtomicBool,
    /// The next block of transaction ids to hand a thread.
    next_tx: AtomicU64,
    /// Each thread's block of ids: (next, end), on lines of its own (two
    /// threads' cells side by side would pass their line back and forth
    /// at every transaction).
    tx_ids: thread_local::ThreadLocal<crate::padded::Padded<std::cell::Cell<(u64, u64)>>>,
    pub(crate) report: RecoveryReport,
    /// Why the handle is poisoned: a commit or rollback failed midway, so
    /// its records must stay for recovery and close leaves the log alone.
    pub(crate) poisoned: OnceLock<String>,
    /// The redo-async policy's write cache.
    pub(crate) write_back: Option<write_back::WriteCache>,
    /// The redo policy's commit ring.
    pub(crate) ring: Option<Lanes>,
    /// Transactions' locks on pool objects (two-phase, volatile).
    pub(crate) locks: locks::LockTable,
    /// A number no other engine of the process has, before or after
    /// (transaction ids are not: each handle counts its own, from 1 after
    /// a clean close): a savepoint names the handle it was taken in by it.
    pub(crate) serial: u64,
}

/// The last [`Engine::serial`] handed out.
static SERIALS: AtomicU64 = AtomicU64::new(0);

impl Engine {
    /// A new transaction id, unique in this handle's life and above every
    /// id in the log it opened. Each thread takes a block of
    /// [`TX_ID_BLOCK`] ids at a time, so that a transaction's start takes
    /// no locked instruction on a word every thread shares (one would come
    /// right after the previous commit's fence, and wait for its drain).
    pub(crate) fn new_tx_id(&self) -> u64 {
        let ids = self.tx_ids.get_or_default();
        let (mut next, mut end) = ids.get();
        if next == end {
            next = self.next_tx.fetch_add(TX_ID_BLOCK, Ordering::Relaxed);
            end = next + TX_ID_BLOCK;
        }
        ids.set((next + 1, end));
        next
    }

    /// Verifies the header of the pool in `dom`, runs recovery, checks the
    /// allocator and meta page, and returns the engine ready for use.
    pub(crate) fn start(
        dom: Domain,
        path: &Path,
        layout: &str,
        write_back: write_back::WriteBack,
    ) -> Result<Engine, Error> {
        let mut page = vec![0u8; HEADER_SIZE.min(dom.len()) as usize];
        dom.read(0, &mut page)?;
        let hdr = Header::decode(path, &page, dom.len())?;
        if hdr.layout_name != layout {
            return Err(Error::LayoutMismatch {
                found: hdr.layout_name,
                expected: layout.to_string(),
            });
        }
        let l = hdr.layout;
        let opened = Log::open(&dom, &l, hdr.variant, List::LOG, Arc::new(Lsns::new()))?;
        // Redo-async's Log Start names END lsns: later ones must be above it.
        let log_start = crate::format::meta::decode_log_start(dom.read_u64(META_LOG_START)?)?;
        opened.log.observe(log_start);
        // A commit group's bits written back without their check words
        // must not read as damage to the log blocks' recovery.
        // (The lanes read once: the log blocks' recovery stores nothing
        // in them.)
        let survey = Lanes::survey(&dom, &l)?;
        Lanes::recheck_bitmaps(&dom, &l, &survey)?;
        let mut report = recovery::recover(
            &dom,
            &l,
            &opened.log,
            &opened.records,
            hdr.policy,
            log_start,
        )?;
        report.adll_repaired = opened.repair.append || opened.repair.remove;
        // Recovery emptied the log: the chunks it grew into go back first.
        opened.log.release_chunks(&dom)?;
        // The commit ring's groups are newer than anything the bucket log
        // redid: every store in place outside the ring drained it first.
        let (ring, replayed) = Lanes::open(&dom, &l, survey)?;
        report.committed += replayed.groups;
        report.redone += replayed.entries;
        report.ring_groups = replayed.groups;
        let ring = (hdr.policy == Policy::Redo).then_some(ring);
        let alloc = Arc::new(Allocator::open(&dom, &l)?);
        check_meta(&dom, &l)?;
        opened.log.attach_heap(alloc.clone());
        let max_tx = opened.records.iter().map(|s| s.rec.tx).max().unwrap_or(0);
        let cache = policy::of(hdr.policy).write_back().then(|| {
            // The simulated domain runs write-back as explicit steps.
            let threaded = dom.backend() != crate::Backend::Sim;
            write_back::WriteCache::new(write_back, threaded, opened.log.next_csn())
        });
        Ok(Engine {
            policy: hdr.policy,
            durability: policy::of(hdr.policy),
            dom,
            hdr,
            log: opened.log,
            alloc,
            finished: Mutex::new(Vec::new()),
            checkpoint_lock: Mutex::new(()),
            checkpoint_fill: 0.5,
            #[cfg(feature = "testing")]
            checkpoint_in_order: Default::default(),
            next_tx: AtomicU64::new(max_tx + 1),
            tx_ids: Default::default(),
            report,
            poisoned: OnceLock::new(),
            write_back: cache,
            ring,
            locks: locks::LockTable::new(),
            serial: SERIALS.fetch_add(1, Ordering::Relaxed) + 1,
        })
    }

    /// Reads committed bytes: in place, with the write cache over them.
    #[inline]
    pub(crate) fn read_committed(&self, off: u64, buf: &mut [u8]) -> Result<(), Error> {
        match &self.write_back {
            Some(wb) => wb.read(&self.dom, off, buf),
            None => self.dom.read(off, buf),
        }
    }

    /// Before an in-place store outside write-back (see `write_back`) or
    /// outside the commit ring (see `log::ring`): drains only what could
    /// later be written over those bytes.
    pub(crate) fn before_store(&self, off: u64, len: u64) -> Result<(), Error> {
        match (&self.write_back, &self.ring) {
            (Some(wb), _) => wb.before_store(self, off, len),
            (None, Some(ring)) => ring.drain_for(&self.dom, off, len),
            (None, None) => Ok(()),
        }
    }

    /// Before a block freed by a committed transaction goes back to the
    /// allocator. Under redo-async its lines may still wait in the write
    /// cache (values committed before the free): drained first, with a
    /// durable Log Start covering them, so that neither write-back nor
    /// recovery stores them over the block's next use. An allocation's
    /// zeroing drains too, but a chunk the log grows into is written
    /// without one (its records are stored non-temporally, under the log's
    /// latch, where no drain can run), and stale values stored there broke
    /// the log list. (The commit ring's groups need nothing here: a
    /// transaction drains the ring before anything reaches the bucket log.)
    pub(crate) fn before_reuse(&self, off: u64, len: u64) -> Result<(), Error> {
        match &self.write_back {
            Some(wb) => wb.before_store(self, off, len),
            None => Ok(()),
        }
    }

    /// Before a transaction appends to the bucket log, whose records'
    /// stores in place no ring group covers: the ring drained.
    pub(crate) fn before_bucket_log(&self) -> Result<(), Error> {
        match &self.ring {
            Some(ring) => ring.drain(&self.dom),
            None => Ok(()),
        }
    }

    /// After a fence of the calling thread outside the log (`Pool::fence`):
    /// a Log Start its ring drain stored is durable.
    pub(crate) fn fenced_by_me(&self) {
        if let Some(ring) = &self.ring {
            ring.fenced_by_me(&self.dom);
        }
    }

    /// Gives back the log space that finished transactions still hold,
    /// where the policy leaves them some, and with it the heap chunks the
    /// log took: under redo-async, committed groups waiting for write-back
    /// (written back, their records go); under no-force, the records of
    /// finished transactions (a checkpoint clears them; not during a
    /// commit, whose own records it would clear). `false` when there is
    /// nothing to give back: a retry would fail the same way. Called once
    /// the log is full (`LogFull`) or the heap is (`OutOfMemory`, or
    /// `NoSpaceToGrow` on a full file system), before one retry.
    pub(crate) fn give_back_log_space(&self, committing: bool) -> Result<bool, Error> {
        if self.write_back.is_some() {
            self.sync()?;
            return Ok(true);
        }
        if self.durability.keeps_records() && !committing {
            self.checkpoint()?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Waits until every committed value is in place and durable.
    pub(crate) fn sync(&self) -> Result<(), Error> {
        match (&self.write_back, &self.ring) {
            (Some(wb), _) => wb.drain(self),
            (None, Some(ring)) => ring.drain(&self.dom),
            (None, None) => Ok(()),
        }
    }

    /// Poisons the handle after a commit or rollback failed midway.
    pub(crate) fn poison(&self, cause: &Error) {
        let _ = self.poisoned.set(cause.to_string());
    }

    /// `Err(Poisoned)` once the handle is poisoned.
    pub(crate) fn usable(&self) -> Result<(), Error> {
        match self.poisoned.get() {
            Some(cause) => Err(Error::Poisoned {
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    /// The root object, if one was created (see `Tx::root`).
    pub(crate) fn root<T: Pod>(&self) -> Result<Option<PPtr<T>>, Error> {
        self.usable()?;
        let (off, size) = self.root_words()?;
        root_of(off, size)
    }

    /// A clean close: a checkpoint under no-force, then an empty log and
    /// the log's heap chunks given back.
    pub(crate) fn clean_close(&self) -> Result<(), Error> {
        self.usable()?;
        self.sync()?;
        if self.durability.keeps_records() {
            self.checkpoint()?;
        }
        self.log.clear_all(&self.dom)?;
        self.log.release_chunks(&self.dom)
    }
}

impl Engine {
    /// The root object's words as committed (under redo-async they may
    /// still wait in the write cache).
    pub(crate) fn root_words(&self) -> Result<(u64, u64), Error> {
        let mut w = [0u8; ROOT_WORDS];
        self.read_committed(META_ROOT_OFF, &mut w)?;
        root_words_in(&w)
    }
}

/// Bytes of the root object's words in the meta page (offset, size, check).
pub(crate) const ROOT_WORDS: usize = 24;

/// The root object's (offset, size) from its words as read, checked
/// ([`check_root_words`]).
pub(crate) fn root_words_in(w: &[u8; ROOT_WORDS]) -> Result<(u64, u64), Error> {
    let word = |i: usize| u64::from_le_bytes(w[i * 8..i * 8 + 8].try_into().expect("8"));
    check_root_words(word(0), word(1), word(2))
}

/// The root object at `off` of `size` bytes as a `T` (none when `off` is
/// 0); another size is `RootMismatch`.
pub(crate) fn root_of<T: Pod>(off: u64, size: u64) -> Result<Option<PPtr<T>>, Error> {
    if off == 0 {
        return Ok(None);
    }
    let want = std::mem::size_of::<T>() as u64;
    if size != want {
        return Err(Error::RootMismatch {
            found: size,
            expected: want,
        });
    }
    Ok(Some(PPtr::from_offset(off)))
}

/// The root object's offset and size, verified against their check word.
pub(crate) fn root_words(d: &Domain) -> Result<(u64, u64), Error> {
    let (off, size) = (d.read_u64(META_ROOT_OFF)?, d.read_u64(META_ROOT_SIZE)?);
    check_root_words(off, size, d.read_u64(META_ROOT_CHECK)?)
}

pub(crate) fn check_root_words(off: u64, size: u64, check: u64) -> Result<(u64, u64), Error> {
    if check != crate::format::meta::root_check(off, size) {
        return Err(Error::MetaCorrupt {
            offset: META_ROOT_OFF,
            reason: "root object words do not match their check word",
        });
    }
    Ok((off, size))
}

/// Checks the meta page after recovery: reserved bytes zero, and a root
/// object (if any) that is an allocated block of its recorded size.
fn check_meta(d: &Domain, l: &Layout) -> Result<(), Error> {
    let mut page = vec![0u8; (META_END - META_OFF) as usize];
    d.read(META_OFF, &mut page)?;
    crate::format::meta::check_words(&page, l.lanes)?;
    // The main list's line, the tree update list's line and the tree root
    // (two-layer log) are checked by the log.
    let reserved = (crate::format::meta::WORDS_END..META_ADLL)
        .chain(TREE_ROOT + 8..META_LOG_START)
        .chain(META_LOG_START + 8..META_RING_START)
        .chain(META_RING_START + l.lanes * 2 * RING_SLOT..META_END);
    for off in reserved {
        if page[(off - META_OFF) as usize] != 0 {
            return Err(Error::MetaCorrupt {
                offset: off,
                reason: "a reserved byte of the meta page is not zero",
            });
        }
    }
    crate::alloc::catalog::read(d, l, &|o, b| d.read(o, b))?;
    let (off, size) = root_words(d)?;
    let bad = |reason| {
        Err(Error::MetaCorrupt {
            offset: META_ROOT_OFF,
            reason,
        })
    };
    if off == 0 {
        return if size == 0 {
            Ok(())
        } else {
            bad("root size recorded without a root object")
        };
    }
    if off < l.heap_off || off >= l.heap_end() {
        return bad("root object is outside the heap");
    }
    match crate::alloc::allocated_size(d, l, off) {
        Ok(b) if b == crate::alloc::block_size(size.max(1)) => Ok(()),
        Ok(_) => bad("root object's block is not the size recorded for it"),
        Err(_) => bad("root object is not an allocated block"),
    }
}
