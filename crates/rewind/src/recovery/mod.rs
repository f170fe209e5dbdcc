//! Recovery (REWIND §4.5), run at every open once the log structure itself
//! is recovered (`log::Log::open`): `analysis`, `redo`, `undo`
//! (Algorithm 2), the bitmap parities of what they rewrote, END records for
//! the rolled-back, and a cleared log.
//!
//! Every step is safe to interrupt and rerun: the ADLL redoes only its own
//! interrupted operation; redo reapplies values, never deltas; undo writes a
//! CLR before each undo and skips what earlier CLRs already compensated; and
//! an END makes a rolled-back transaction finished for good.

use std::collections::BTreeMap;
use std::fmt;

use crate::alloc;
use crate::error::Error;
use crate::format::layout::Layout;
use crate::format::record::{self, clr};
use crate::format::Policy;
use crate::log::{Kind, Log, Record, Scanned};
use crate::persist::{sites, Domain};

mod analysis;
mod redo;
mod undo;

/// What recovery did when the pool was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// Valid records found in the log.
    pub records: u64,
    /// Transactions found committed (their END was in the log).
    pub committed: u64,
    /// Transactions rolled back by recovery.
    pub rolled_back: u64,
    /// Records redone.
    pub redone: u64,
    /// Records undone (CLRs written).
    pub undone: u64,
    /// An interrupted ADLL append or removal was redone.
    pub adll_repaired: bool,
    /// Commit groups replayed from the commit ring (counted in
    /// `committed`, their entries in `redone`).
    pub ring_groups: u64,
    /// The file's open stamp named another file: it is a copy of a pool
    /// taken while that pool was open (or had crashed and was not yet
    /// recovered). A copy of a crashed pool recovers whole; one of a live
    /// pool (a `cp` while it ran) may be torn, and nothing can tell:
    /// copy pools with `Pool::backup_to` or `rewind copy`.
    pub copied_while_open: bool,
}

impl fmt::Display for RecoveryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // (A commit group's entries are redone as records are.)
        let (groups, redone) = match self.ring_groups {
            0 => (String::new(), "records"),
            n => (
                format!(", {n} commit groups replayed"),
                "records and group entries",
            ),
        };
        write!(
            f,
            "{} log records{groups}: {} committed transactions, {} rolled back ({} {redone} redone, {} undone){}",
            self.records,
            self.committed,
            self.rolled_back,
            self.redone,
            self.undone,
            if self.adll_repaired {
                "; interrupted log operation repaired"
            } else {
                ""
            }
        )?;
        if self.copied_while_open {
            write!(
                f,
                "; this file is a copy of a pool taken while it was open: a copy of a live pool \
                 may be torn (use Pool::backup_to or `rewind copy`)"
            )?;
        }
        Ok(())
    }
}

/// Reads the record whose body is at `off`.
pub(crate) fn read_record(d: &Domain, off: u64) -> Result<Record, Error> {
    let mut h = [0u8; record::HEADER];
    d.read(off, &mut h)?;
    let n = record::payload_len(&h).ok_or(Error::LogCorrupt {
        offset: off,
        reason: "unknown record kind",
    })?;
    let mut buf = vec![0u8; record::HEADER + n];
    d.read(off, &mut buf)?;
    record::decode(&buf, off)
}

fn size_word(bytes: &[u8], at: u64) -> Result<u64, Error> {
    let b: [u8; 8] = bytes.try_into().map_err(|_| Error::LogCorrupt {
        offset: at,
        reason: "allocation record without a size",
    })?;
    Ok(u64::from_le_bytes(b))
}

/// Applies a CLR's compensation and flushes it. Allocator bits are changed
/// without the allocator's latch: only for recovery, which runs alone.
pub(crate) fn apply_clr(
    d: &Domain,
    l: &Layout,
    what: u8,
    target: u64,
    bytes: &[u8],
) -> Result<(), Error> {
    match what {
        clr::BYTES => {
            d.store(target, bytes)?;
            d.flush_at(target, bytes.len() as u64, sites::UNDO_FLUSH)
        }
        clr::FREE => alloc::mark(d, l, target, size_word(bytes, target)?, false),
        clr::ALLOCATED => alloc::mark(d, l, target, size_word(bytes, target)?, true),
        clr::NONE => Ok(()),
        _ => Err(Error::LogCorrupt {
            offset: target,
            reason: "unknown CLR action",
        }),
    }
}

/// Every small block's bitmap bit a record in the log names (ALLOC,
/// DELETE, or a CLR that frees or allocates), by chunk, sorted: the only
/// bits a crash can have torn from their chunk's bitmap check, and the
/// only ones redo and undo rewrite (see `alloc::table`).
fn named_bits(l: &Layout, records: &[Scanned]) -> BTreeMap<u64, Vec<u64>> {
    let mut named: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for s in records {
        let r = &s.rec;
        let size = match r.kind {
            Kind::Alloc | Kind::Delete => r.aux,
            Kind::Clr if matches!(r.flags, clr::FREE | clr::ALLOCATED) => {
                match size_word(&r.new, r.target) {
                    Ok(size) => size,
                    Err(_) => continue,
                }
            }
            _ => continue,
        };
        if let Some((chunk, slot)) = alloc::bitmap_slot(l, r.target, size) {
            named.entry(chunk).or_default().push(slot);
        }
    }
    for slots in named.values_mut() {
        slots.sort_unstable();
        slots.dedup();
    }
    named
}

fn check_target(l: &Layout, r: &Record) -> Result<(), Error> {
    let len = match r.kind {
        Kind::Clr if r.flags == clr::NONE => return Ok(()),
        Kind::Update | Kind::Clr | Kind::Redo => r.new.len() as u64,
        Kind::Alloc | Kind::Delete => r.aux,
        _ => return Ok(()),
    };
    let meta = r.target >= crate::format::layout::META_ROOT_OFF
        && r.target
            .checked_add(len)
            .is_some_and(|e| e <= crate::format::layout::META_ROOT_END);
    let heap =
        r.target >= l.heap_off && r.target.checked_add(len).is_some_and(|e| e <= l.heap_end());
    if meta || heap {
        Ok(())
    } else {
        Err(Error::LogCorrupt {
            offset: r.target,
            reason: "log record targets memory outside the heap",
        })
    }
}

/// Runs recovery over the records the log scan found.
pub(crate) fn recover(
    d: &Domain,
    l: &Layout,
    log: &Log,
    records: &[Scanned],
    policy: Policy,
    log_start: u64,
) -> Result<RecoveryReport, Error> {
    let mut report = RecoveryReport {
        records: records.len() as u64,
        ..Default::default()
    };
    let mut a = analysis::analyse(l, records)?;
    a.log_start = log_start;
    report.committed = a.committed();
    // A crash may have persisted a bitmap bit without its chunk's check
    // word, or the reverse, only for bits the log's records name: each such
    // chunk's check must be explained by them before any bit changes (else
    // the bitmap is damaged). Redo and undo then rewrite bits alone, and
    // the checks are recomputed from the bits, before any END can make
    // those records' transactions finished (see alloc::table).
    let named = named_bits(l, records);
    for (&chunk, slots) in &named {
        alloc::verify_torn_check(d, l, chunk, slots)?;
    }
    report.redone = redo::redo(d, l, records, &a, crate::policy::of(policy))?;
    let (mut losers, undone) = undo::undo(d, l, log, records, &mut a)?;
    report.undone = undone;
    for &chunk in named.keys() {
        alloc::recompute_check(d, l, chunk)?;
    }
    undo::end_losers(d, log, &mut losers)?;
    report.rolled_back = losers.len() as u64;
    // Everything redone or undone is flushed; persistent before the log goes.
    d.fence_at(sites::RECOVERY_APPLIED)?;
    log.clear_all(d)?;
    Ok(report)
}
