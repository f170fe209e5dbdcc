//! Undo (REWIND §4.5, Algorithm 2, with ARIES's chains): every loser is
//! rolled back by following its chain of records backwards from its latest.
//! A forward record gets a CLR, persistent before its undo is applied, whose
//! undo-next is the record's `prev`; a CLR sends the walk to its undo-next,
//! so what a partial rollback, an interrupted rollback or a nested top
//! action settled is never undone twice. As in ARIES the losers are undone
//! together, latest record first. Then an END for each.

use std::collections::{BinaryHeap, HashMap};

use super::analysis::{Analysis, Status};
use super::apply_clr;
use crate::error::Error;
use crate::format::layout::Layout;
use crate::format::record::clr;
use crate::log::{Draft, Kind, Log, Record, Reservation, Scanned};
use crate::persist::Domain;

/// The backward walk; returns the losers (with the head of each one's
/// chain) and the records undone.
pub(super) fn undo(
    d: &Domain,
    l: &Layout,
    log: &Log,
    records: &[Scanned],
    a: &mut Analysis,
) -> Result<(Vec<(u64, Reservation)>, u64), Error> {
    let by_lsn: HashMap<u64, &Record> = records.iter().map(|s| (s.rec.lsn, &s.rec)).collect();
    let mut losers: Vec<u64> = a.table.keys().copied().filter(|&t| a.loser(t)).collect();
    losers.sort_unstable();
    let mut chains: HashMap<u64, Reservation> = HashMap::new();
    let mut todo = BinaryHeap::new();
    let mut placed = Vec::new();
    for &tx in &losers {
        let only_redo = a.only_redo(tx);
        let e = a.table.get_mut(&tx).expect("loser is in the table");
        let mut chain = Reservation::none(e.last);
        if e.status == Status::Running {
            e.status = Status::Aborting;
            let rb = Draft::bare(tx, Kind::Rollback);
            log.append(d, &[rb], &mut placed, &mut chain)?;
        }
        chains.insert(tx, chain);
        // REDO records are never undone, and a torn one-fence commit may
        // have lost any of them: its chain is not walked.
        if !only_redo {
            todo.push((e.last, tx));
        }
    }
    let mut undone = 0;
    while let Some((lsn, tx)) = todo.pop() {
        let r = match by_lsn.get(&lsn) {
            Some(r) if r.tx == tx => *r,
            _ => {
                return Err(Error::LogCorrupt {
                    offset: lsn,
                    reason: "a transaction's record chain points at a record not in the log",
                })
            }
        };
        let next = match r.kind {
            // Compensated already: on to what is still to undo.
            Kind::Clr => r.aux,
            // Analysis refused TREE records; a REDO record was never
            // applied before its transaction committed.
            Kind::Tree | Kind::Redo => r.prev,
            Kind::Update | Kind::Alloc | Kind::Delete => {
                let size = r.aux.to_le_bytes();
                let (what, bytes): (u8, &[u8]) = match r.kind {
                    Kind::Update => (clr::BYTES, &r.old),
                    Kind::Alloc => (clr::FREE, &size),
                    _ => (clr::ALLOCATED, &size),
                };
                let c = Draft::clr(tx, what, r.target, r.prev, bytes);
                let chain = chains.get_mut(&tx).expect("chain of a loser");
                // The CLR persistent before its undo is applied.
                log.append(d, &[c], &mut placed, chain)?;
                apply_clr(d, l, what, r.target, bytes)?;
                undone += 1;
                r.prev
            }
            Kind::Rollback => r.prev,
            Kind::End | Kind::Checkpoint => {
                return Err(Error::LogCorrupt {
                    offset: lsn,
                    reason: "an unfinished transaction's chain holds an END or CHECKPOINT",
                })
            }
        };
        if next >= lsn {
            return Err(Error::LogCorrupt {
                offset: lsn,
                reason: "a CLR's undo-next is not below its own lsn",
            });
        }
        if next != 0 {
            todo.push((next, tx));
        }
    }
    let chains = losers.iter().map(|tx| (*tx, chains[tx])).collect();
    Ok((chains, undone))
}

/// END for every rolled-back transaction; the append's first fence makes
/// every undo store persistent before the END can be.
pub(super) fn end_losers(
    d: &Domain,
    log: &Log,
    losers: &mut [(u64, Reservation)],
) -> Result<(), Error> {
    let mut placed = Vec::new();
    for (tx, chain) in losers {
        log.append(d, &[Draft::end(*tx, false, 0)], &mut placed, chain)?;
    }
    Ok(())
}
