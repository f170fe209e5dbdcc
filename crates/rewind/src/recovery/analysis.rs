//! Analysis (REWIND §4.5, ARIES): one forward pass over the records that
//! builds the transaction table, finds the last checkpoint's bound, the
//! blocks allocated anew, and which Batch commit groups are whole.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::check_target;
use crate::error::Error;
use crate::format::layout::Layout;
use crate::format::record::{
    clr, group_checksum, END_COMMITTED, END_ONE_FENCE, IN_COMMIT_GROUP, ONE_FENCE_PAYLOAD,
};
use crate::log::{Kind, Record, Scanned};

/// Where a transaction stood at the crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Status {
    /// Records, no ROLLBACK, no END.
    Running,
    /// A ROLLBACK record, no END.
    Aborting,
    /// An END that says committed.
    Committed,
    /// An END that says rolled back.
    Aborted,
}

/// A transaction in the table.
#[derive(Clone, Copy, Debug)]
pub(super) struct Entry {
    pub(super) status: Status,
    /// Its END's lsn (0 without one).
    pub(super) end: u64,
    /// Its latest record: where its chain starts.
    pub(super) last: u64,
    /// Its latest record that is not a compensation (a CLR that undoes
    /// something): compensations after it may have been interrupted before
    /// their stores were persistent; those before it were made durable by
    /// the fence of the append that followed them.
    pub(super) last_plain: u64,
}

/// What analysis found.
pub(super) struct Analysis {
    /// The transaction table.
    pub(super) table: HashMap<u64, Entry>,
    /// Transactions finished at or before this lsn are durable in place.
    pub(super) bound: u64,
    /// Transactions to roll back.
    losing: HashSet<u64>,
    /// Blocks allocated by an ALLOC record: offset -> (size, lsn).
    reborn: BTreeMap<u64, (u64, u64)>,
    /// Per transaction: records flagged as in its commit group, and the
    /// group size its END records.
    group: HashMap<u64, u64>,
    group_end: HashMap<u64, u64>,
    /// Per transaction: the (lsn, CRC) of its commit group's records, for
    /// a one-fence END's checksum.
    group_sums: HashMap<u64, Vec<(u64, u32)>>,
    /// Records per transaction, END and ROLLBACK aside.
    records: HashMap<u64, u64>,
    /// Redo-async's Log Start: committed groups whose END is at or below
    /// it are in place.
    pub(super) log_start: u64,
}

impl Analysis {
    /// Transactions found committed.
    pub(super) fn committed(&self) -> u64 {
        self.table
            .values()
            .filter(|e| e.status == Status::Committed)
            .count() as u64
    }

    /// Whether `tx` must be rolled back.
    pub(super) fn loser(&self, tx: u64) -> bool {
        self.losing.contains(&tx)
    }

    /// Whether `r`, a CLR of a transaction being rolled back, may have been
    /// logged without its store reaching persistence (see [`Entry`]).
    pub(super) fn unsettled_clr(&self, r: &Record) -> bool {
        r.kind == Kind::Clr && self.loser(r.tx) && r.lsn > self.table[&r.tx].last_plain
    }

    /// A block allocated anew holds what its new owner wrote there, without
    /// records (writes to fresh memory are not logged): bytes logged for
    /// the block's earlier life must not be redone over them.
    pub(super) fn superseded(&self, r: &Record) -> bool {
        self.reborn
            .range(..=r.target)
            .next_back()
            .is_some_and(|(&off, &(size, lsn))| r.target < off + size && lsn > r.lsn)
    }

    /// Whether all of `tx`'s records found are REDO records of its commit
    /// group (a redo transaction with nothing logged before its commit).
    pub(super) fn only_redo(&self, tx: u64) -> bool {
        let redo = self.group_sums.get(&tx).map_or(0, |v| v.len() as u64);
        redo > 0 && self.records.get(&tx).copied() == Some(redo)
    }

    /// A Batch commit makes END valid before its last group's stores. The
    /// group is redone under force only while every record of it is still
    /// in the log: its records are cleared after those stores are durable,
    /// so a missing one proves they are (and redoing a subset could replay
    /// an old value without the newer one that superseded it).
    pub(super) fn whole_group(&self, tx: u64) -> bool {
        // Written back by redo-async, and maybe partly cleared since.
        let in_place = self.table.get(&tx).is_some_and(|e| e.end <= self.log_start);
        !in_place
            && self
                .group_end
                .get(&tx)
                .is_some_and(|&n| n > 0 && self.group.get(&tx) == Some(&n))
    }
}

/// A one-fence END's commit sequence number (checked to increase in log
/// order) and checksum.
fn one_fence_end(r: &Record, last_csn: &mut u64) -> Result<(u64, u64), Error> {
    let corrupt = |reason| Error::LogCorrupt {
        offset: r.lsn,
        reason,
    };
    if r.new.len() != ONE_FENCE_PAYLOAD {
        return Err(corrupt(
            "a one-fence END without its sequence number and checksum",
        ));
    }
    let word = |o: usize| u64::from_le_bytes(r.new[o..o + 8].try_into().expect("8"));
    let (csn, sum) = (word(0), word(8));
    if csn <= *last_csn || csn >= r.lsn {
        return Err(corrupt("commit sequence numbers out of order"));
    }
    *last_csn = csn;
    Ok((csn, sum))
}

/// The forward pass.
pub(super) fn analyse(l: &Layout, records: &[Scanned]) -> Result<Analysis, Error> {
    let mut a = Analysis {
        table: HashMap::new(),
        bound: 0,
        losing: HashSet::new(),
        reborn: BTreeMap::new(),
        group: HashMap::new(),
        group_end: HashMap::new(),
        group_sums: HashMap::new(),
        records: HashMap::new(),
        log_start: 0,
    };
    // The last one-fence commit's sequence number: they increase in log
    // order, the order recovery redoes them in.
    let mut last_csn = 0;
    for s in records {
        let r = &s.rec;
        check_target(l, r)?;
        if r.kind == Kind::Tree {
            return Err(Error::LogCorrupt {
                offset: r.target,
                reason: "a tree operation record among transaction records",
            });
        }
        if r.prev >= r.lsn || (r.kind == Kind::Checkpoint && r.prev != 0) {
            return Err(Error::LogCorrupt {
                offset: r.lsn,
                reason: "a record's previous lsn is not below its own",
            });
        }
        match r.kind {
            Kind::Checkpoint => {
                a.bound = a.bound.max(r.aux);
                continue;
            }
            // What a rollback would walk: not END, nor ROLLBACK (which an
            // interrupted recovery's rollback of a torn commit writes).
            Kind::End | Kind::Rollback => {}
            _ => *a.records.entry(r.tx).or_default() += 1,
        }
        match r.kind {
            Kind::Alloc => {
                a.reborn.insert(r.target, (r.aux, r.lsn));
            }
            Kind::Update | Kind::Redo if r.flags & IN_COMMIT_GROUP != 0 => {
                *a.group.entry(r.tx).or_default() += 1;
                if r.kind == Kind::Redo {
                    a.group_sums.entry(r.tx).or_default().push((r.lsn, r.crc));
                }
            }
            Kind::End if r.flags == END_COMMITTED => {
                a.group_end.insert(r.tx, r.aux);
            }
            Kind::End if r.flags == END_COMMITTED | END_ONE_FENCE => {
                let csn = one_fence_end(r, &mut last_csn)?;
                // Whole only with every record of the group, and exactly
                // them: the records just before END, matching its checksum.
                // Otherwise the commit was torn (or its records were
                // cleared after their stores were durable): not redone.
                let sums = a.group_sums.get(&r.tx).map_or(&[][..], |v| &v[..]);
                let whole = sums.len() as u64 == r.aux
                    && sums
                        .iter()
                        .enumerate()
                        .all(|(i, &(lsn, _))| lsn + (sums.len() - i) as u64 == r.lsn)
                    && group_checksum(sums.iter().copied()) == csn.1;
                a.group_end.insert(r.tx, if whole { r.aux } else { 0 });
                if a.records.get(&r.tx).copied().unwrap_or(0) != sums.len() as u64 {
                    return Err(Error::LogCorrupt {
                        offset: r.lsn,
                        reason: "a one-fence commit of a transaction with other records",
                    });
                }
            }
            _ => {}
        }
        let e = a.table.entry(r.tx).or_insert(Entry {
            status: Status::Running,
            end: 0,
            last: 0,
            last_plain: 0,
        });
        e.last = r.lsn;
        if r.kind != Kind::Clr || r.flags == clr::NONE {
            e.last_plain = r.lsn;
        }
        match r.kind {
            Kind::Rollback => e.status = Status::Aborting,
            Kind::End => {
                e.end = r.lsn;
                e.status = if r.flags & END_COMMITTED != 0 {
                    Status::Committed
                } else {
                    Status::Aborted
                };
            }
            _ => {}
        }
    }
    a.losing = a
        .table
        .iter()
        .filter(|(_, e)| matches!(e.status, Status::Running | Status::Aborting))
        .map(|(&tx, _)| tx)
        .collect();
    Ok(a)
}
