//! Undo (REWIND §4.5, Algorithm 2): one backward scan over every loser.
//! A ROLLBACK record at a loser's first sighting; its latest CLR names the
//! lowest record already compensated; each forward record below it gets a
//! CLR, persistent before its undo is applied. Then an END for each.

use std::collections::{BTreeMap, HashMap};

use super::analysis::{Analysis, Status};
use super::{apply_clr, name_block};
use crate::error::Error;
use crate::format::layout::Layout;
use crate::format::record::clr;
use crate::log::{Draft, Kind, Log, Reservation, Scanned};
use crate::persist::Domain;

/// The backward scan; returns the losers and the records undone.
pub(super) fn undo(
    d: &Domain,
    l: &Layout,
    log: &Log,
    records: &[Scanned],
    a: &mut Analysis,
    named: &mut BTreeMap<u64, (u64, u64)>,
) -> Result<(Vec<u64>, u64), Error> {
    let mut undo_next: HashMap<u64, u64> = HashMap::new();
    let mut losers: Vec<u64> = Vec::new();
    let mut placed = Vec::new();
    let mut undone = 0;
    for s in records.iter().rev() {
        let r = &s.rec;
        if !a.loser(r.tx) {
            continue;
        }
        let st = a.table.get_mut(&r.tx).expect("loser is in the table");
        if st.0 == Status::Running {
            st.0 = Status::Aborting;
            let rb = Draft::bare(r.tx, Kind::Rollback);
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
                let c = Draft::clr(r.tx, what, r.target, r.lsn, bytes);
                // The CLR persistent before its undo is applied.
                log.append(d, &[c], &mut placed, &mut Reservation::none())?;
                apply_clr(d, l, what, r.target, bytes)?;
                undone += 1;
                name_block(l, r, named)?;
            }
            _ => {}
        }
    }
    losers.sort_unstable();
    Ok((losers, undone))
}

/// END for every rolled-back transaction; the append's first fence makes
/// every undo store persistent before the END can be.
pub(super) fn end_losers(d: &Domain, log: &Log, losers: &[u64]) -> Result<(), Error> {
    let mut placed = Vec::new();
    for &tx in losers {
        log.append(
            d,
            &[Draft::end(tx, false, 0)],
            &mut placed,
            &mut Reservation::none(),
        )?;
    }
    Ok(())
}
