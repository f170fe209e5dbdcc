//! Redo (REWIND §4.5): one forward pass that repeats what the crash may
//! have lost; the policy decides which records (`policy`): no-force
//! repeats history, except for transactions a checkpoint already made
//! durable in place; force redoes whole Batch commit groups and the CLRs of
//! interrupted rollbacks (a crash between a CLR and its store).

use super::analysis::{Analysis, Status};
use super::apply_clr;
use crate::alloc;
use crate::error::Error;
use crate::format::layout::Layout;
use crate::format::record::{clr, IN_COMMIT_GROUP};
use crate::log::{Kind, Record, Scanned};
use crate::persist::{sites, Domain};
use crate::policy::{Durability, RedoFacts};

/// The forward pass; returns the records redone.
pub(super) fn redo(
    d: &Domain,
    l: &Layout,
    records: &[Scanned],
    a: &Analysis,
    policy: &dyn Durability,
) -> Result<u64, Error> {
    let mut redone = 0;
    for s in records {
        let r = &s.rec;
        if r.kind == Kind::Checkpoint {
            continue;
        }
        let bytes = matches!(r.kind, Kind::Update | Kind::Redo)
            || (r.kind == Kind::Clr && r.flags == clr::BYTES);
        if bytes && a.superseded(r) {
            continue;
        }
        // History of a chunk the log has taken since: the log's use of it
        // is newer than any record about it.
        let targets = bytes || matches!(r.kind, Kind::Alloc | Kind::Delete | Kind::Clr);
        let run = match r.kind {
            Kind::Alloc | Kind::Delete => r.aux,
            Kind::Clr if r.flags == clr::FREE || r.flags == clr::ALLOCATED => {
                super::size_word(&r.new, r.target)?
            }
            _ => 1,
        };
        if targets && r.target != 0 && alloc::run_in_log_chunk(d, l, r.target, run)? {
            continue;
        }
        let e = a.table[&r.tx];
        let facts = RedoFacts {
            checkpointed: matches!(e.status, Status::Committed | Status::Aborted)
                && e.end <= a.bound,
            whole_commit_group: matches!(r.kind, Kind::Update | Kind::Redo)
                && r.flags & IN_COMMIT_GROUP != 0
                && a.whole_group(r.tx),
            unsettled_clr: a.unsettled_clr(r),
        };
        let needed = policy.redo(&facts);
        if needed && apply(d, l, r)? {
            redone += 1;
        }
    }
    Ok(redone)
}

/// Redoes one record, flushing what it changes; `false` for records with
/// nothing to redo.
fn apply(d: &Domain, l: &Layout, r: &Record) -> Result<bool, Error> {
    match r.kind {
        Kind::Update | Kind::Redo => {
            d.store(r.target, &r.new)?;
            d.flush_at(r.target, r.new.len() as u64, sites::RECOVERY_REDO_FLUSH)?;
        }
        Kind::Clr if r.flags == clr::NONE => return Ok(false),
        Kind::Clr => apply_clr(d, l, r.flags, r.target, &r.new)?,
        Kind::Alloc => alloc::mark(d, l, r.target, r.aux, true)?,
        Kind::Delete => alloc::mark(d, l, r.target, r.aux, false)?,
        // Analysis refused TREE records.
        Kind::End | Kind::Checkpoint | Kind::Rollback | Kind::Tree => return Ok(false),
    }
    Ok(true)
}
