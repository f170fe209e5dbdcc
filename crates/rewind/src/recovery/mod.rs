//! Recovery (REWIND §4.5): recover the log structure, then analysis, redo
//! (no-force only), and one backward undo scan (Algorithm 2), END records
//! for the rolled-back, and a cleared log.
//!
//! Every step is safe to interrupt and rerun: the ADLL redoes only its own
//! interrupted operation; redo reapplies values, never deltas; undo writes a
//! CLR before each undo and skips what earlier CLRs already compensated; and
//! an END makes a rolled-back transaction finished for good.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use crate::alloc;
use crate::error::Error;
use crate::format::layout::Layout;
use crate::format::record::{self, clr, END_COMMITTED, IN_COMMIT_GROUP};
use crate::format::Policy;
use crate::log::{Draft, Kind, Log, Record, Reservation, Scanned};
use crate::persist::{sites, Domain};

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
}

impl fmt::Display for RecoveryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} log records: {} committed transactions, {} rolled back ({} records redone, {} undone){}",
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
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Running,
    Aborting,
    Committed,
    Aborted,
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
        _ => Err(Error::LogCorrupt {
            offset: target,
            reason: "unknown CLR action",
        }),
    }
}

/// Notes the allocation bit a redone or undone record rewrote.
fn name_block(l: &Layout, r: &Record, named: &mut BTreeMap<u64, (u64, u64)>) -> Result<(), Error> {
    let size = match r.kind {
        Kind::Alloc | Kind::Delete => r.aux,
        Kind::Clr if r.flags != clr::BYTES => size_word(&r.new, r.target)?,
        _ => return Ok(()),
    };
    let (chunk, (p, q)) = alloc::parity_position(l, r.target, size)?;
    let e = named.entry(chunk).or_default();
    *e = (e.0 | p, e.1 | q);
    Ok(())
}

/// Redoes a record (repeating history), flushing what it changes.
fn redo(d: &Domain, l: &Layout, r: &Record) -> Result<bool, Error> {
    match r.kind {
        Kind::Update => {
            d.store(r.target, &r.new)?;
            d.flush_at(r.target, r.new.len() as u64, sites::RECOVERY_REDO_FLUSH)?;
        }
        Kind::Clr => apply_clr(d, l, r.flags, r.target, &r.new)?,
        Kind::Alloc => alloc::mark(d, l, r.target, r.aux, true)?,
        Kind::Delete => alloc::mark(d, l, r.target, r.aux, false)?,
        Kind::End | Kind::Checkpoint | Kind::Rollback => return Ok(false),
    }
    Ok(true)
}

fn check_target(l: &Layout, r: &Record) -> Result<(), Error> {
    let len = match r.kind {
        Kind::Update | Kind::Clr => r.new.len() as u64,
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
) -> Result<RecoveryReport, Error> {
    let mut report = RecoveryReport {
        records: records.len() as u64,
        ..Default::default()
    };
    // Analysis: the transaction table, and the last checkpoint's bound.
    let mut table: HashMap<u64, (Status, u64)> = HashMap::new();
    let mut bound = 0;
    for s in records {
        let r = &s.rec;
        check_target(l, r)?;
        if r.kind == Kind::Checkpoint {
            bound = bound.max(r.aux);
            continue;
        }
        let e = table.entry(r.tx).or_insert((Status::Running, 0));
        match r.kind {
            Kind::Rollback => e.0 = Status::Aborting,
            Kind::End => {
                *e = if r.flags == END_COMMITTED {
                    (Status::Committed, r.lsn)
                } else {
                    (Status::Aborted, r.lsn)
                }
            }
            _ => {}
        }
    }
    report.committed = table.values().filter(|e| e.0 == Status::Committed).count() as u64;
    let losing: std::collections::HashSet<u64> = table
        .iter()
        .filter(|(_, e)| matches!(e.0, Status::Running | Status::Aborting))
        .map(|(&tx, _)| tx)
        .collect();
    let loser = |tx: u64| losing.contains(&tx);

    // A block allocated anew holds what its new owner wrote there, without
    // records (writes to fresh memory are not logged): bytes logged for the
    // block's earlier life must not be redone over them.
    let mut reborn: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for s in records {
        if s.rec.kind == Kind::Alloc {
            reborn.insert(s.rec.target, (s.rec.aux, s.rec.lsn));
        }
    }
    let superseded = |r: &Record| {
        reborn
            .range(..=r.target)
            .next_back()
            .is_some_and(|(&off, &(size, lsn))| r.target < off + size && lsn > r.lsn)
    };

    // A Batch commit makes END valid before its last group's stores. The
    // group is redone under force only while every record of it is still
    // in the log: its records are cleared after those stores are durable,
    // so a missing one proves they are (and redoing a subset could replay
    // an old value without the newer one that superseded it).
    let mut group: HashMap<u64, u64> = HashMap::new();
    let mut group_end: HashMap<u64, u64> = HashMap::new();
    for s in records {
        let r = &s.rec;
        if r.kind == Kind::Update && r.flags & IN_COMMIT_GROUP != 0 {
            *group.entry(r.tx).or_default() += 1;
        }
        if r.kind == Kind::End && r.flags == END_COMMITTED {
            group_end.insert(r.tx, r.aux);
        }
    }
    let whole_group = |tx: u64| {
        group_end
            .get(&tx)
            .is_some_and(|&n| n > 0 && group.get(&tx) == Some(&n))
    };

    // Blocks whose allocation bits recovery rewrites, by chunk: only their
    // bitmap parity may have been torn by the crash (see alloc::table).
    let mut named: BTreeMap<u64, (u64, u64)> = BTreeMap::new();

    // Redo. No-force repeats history, except for transactions a checkpoint
    // already made durable in place. Force redoes whole Batch commit groups
    // (above) and the CLRs of interrupted rollbacks (a crash between a CLR
    // and its store).
    for s in records {
        let r = &s.rec;
        if r.kind == Kind::Checkpoint {
            continue;
        }
        let bytes = r.kind == Kind::Update || (r.kind == Kind::Clr && r.flags == clr::BYTES);
        if bytes && superseded(r) {
            continue;
        }
        let (status, end) = table[&r.tx];
        let needed = match policy {
            Policy::NoForce => {
                !(matches!(status, Status::Committed | Status::Aborted) && end <= bound)
            }
            Policy::Force => {
                (r.kind == Kind::Update && r.flags & IN_COMMIT_GROUP != 0 && whole_group(r.tx))
                    || (r.kind == Kind::Clr && loser(r.tx))
            }
        };
        if needed && redo(d, l, r)? {
            report.redone += 1;
            name_block(l, r, &mut named)?;
        }
    }

    // Undo (Algorithm 2): one backward scan over every loser.
    let mut undo_next: HashMap<u64, u64> = HashMap::new();
    let mut losers: Vec<u64> = Vec::new();
    let mut placed = Vec::new();
    for s in records.iter().rev() {
        let r = &s.rec;
        if !loser(r.tx) {
            continue;
        }
        let st = table.get_mut(&r.tx).expect("loser is in the table");
        if st.0 == Status::Running {
            st.0 = Status::Aborting;
            let rb = Draft {
                tx: r.tx,
                kind: Kind::Rollback,
                flags: 0,
                target: 0,
                aux: 0,
                old: &[],
                new: &[],
            };
            log.append(d, &[rb], &mut placed, &mut Reservation::none())?;
        }
        if !losers.contains(&r.tx) {
            losers.push(r.tx);
        }
        match r.kind {
            Kind::Clr => {
                // The latest CLR, seen first, names the lowest record undone.
                undo_next.entry(r.tx).or_insert(r.aux);
            }
            Kind::Update | Kind::Alloc | Kind::Delete => {
                if undo_next.get(&r.tx).is_some_and(|&u| r.lsn >= u) {
                    continue; // compensated before the crash
                }
                let size = r.aux.to_le_bytes();
                let (what, bytes): (u8, &[u8]) = match r.kind {
                    Kind::Update => (clr::BYTES, &r.old),
                    Kind::Alloc => (clr::FREE, &size),
                    _ => (clr::ALLOCATED, &size),
                };
                let c = Draft {
                    tx: r.tx,
                    kind: Kind::Clr,
                    flags: what,
                    target: r.target,
                    aux: r.lsn,
                    old: &[],
                    new: bytes,
                };
                // The CLR persistent before its undo is applied.
                log.append(d, &[c], &mut placed, &mut Reservation::none())?;
                apply_clr(d, l, what, r.target, bytes)?;
                report.undone += 1;
                name_block(l, r, &mut named)?;
            }
            _ => {}
        }
    }
    // A crash may have persisted a bitmap bit without its parity words, or
    // the reverse, only for blocks of records redone or undone above: their
    // bits are right now, so their chunks' parity is recomputed from them,
    // before any END can make those records' transactions finished.
    for (chunk, positions) in named {
        alloc::repair_parity(d, l, chunk, positions)?;
    }
    // END for every rolled-back transaction; the append's first fence makes
    // every undo store persistent before the END can be.
    losers.sort_unstable();
    for &tx in &losers {
        let end = Draft {
            tx,
            kind: Kind::End,
            flags: 0,
            target: 0,
            aux: 0,
            old: &[],
            new: &[],
        };
        log.append(d, &[end], &mut placed, &mut Reservation::none())?;
    }
    report.rolled_back = losers.len() as u64;
    // Everything redone or undone is flushed; persistent before the log goes.
    d.fence_at(sites::RECOVERY_APPLIED)?;
    log.clear_all(d)?;
    Ok(report)
}
