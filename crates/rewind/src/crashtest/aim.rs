//! Which configurations and program shapes can show a mutation: a disabled
//! ordering point is only exercised by programs whose code path reaches it.

use crate::log::LogVariant;
use crate::persist::{sites, Site};
use crate::tx::Policy;

use super::{Config, Shape};

/// Whether a configuration's code path reaches an ordering point (the
/// others cannot show its mutation), as the site registry records it.
pub fn reaches(site: Site, v: LogVariant, p: Policy) -> bool {
    sites::find(site.0).is_some_and(|i| i.reach.contains(v, p))
}

/// The program shape that exercises a site most: log growth for the log's
/// chunks; allocation churn for the
/// allocator's points and the writes into new blocks (a block must be
/// freed and reused to show lost zeroing); frequent checkpoints of
/// transactions whose records cross cache lines for the checkpoint's points
/// and no-force redo; transaction control and atomic updates for the
/// atomic updates' points; mixed programs otherwise.
fn shape_for(site: Site) -> Shape {
    let n = site.0;
    if n.starts_with("alloc.log.") {
        Shape::Grow
    } else if n.starts_with("alloc.") || n == "tx.zero.flush" || n == "tx.fresh.flush" {
        Shape::Churn
    } else if n.starts_with("checkpoint.") || n == "recovery.redo.flush" {
        Shape::Checkpoints
    } else if n == "ring.drain" {
        // Ring space is reused, and its Log Start needed, only when the ring
        // is full: the smallest log has the smallest ring.
        Shape::Grow
    } else if n.starts_with("atomic.") {
        Shape::Control
    } else {
        Shape::Mixed
    }
}

/// Whether a configuration that reaches `site` can show its mutation. The
/// Simple log cannot show `checkpoint.gaps`: each record has its own
/// block, which leaves the list (with the removal's own fences) as soon as
/// its record is cleared, so the records' gaps are persistent before any
/// END is cleared even without that fence. Nor can the two-layer log: its
/// records leave the tree by tree operations, each fenced on its own, END
/// last.
fn shows(site: Site, v: LogVariant, p: Policy) -> bool {
    reaches(site, v, p)
        && !(site == sites::CHECKPOINT_GAPS
            && matches!(v, LogVariant::Simple | LogVariant::TwoLayer))
}

/// The one-thread configurations to explore a mutation of `site` in: every
/// variant × policy that can show it, with the shape aimed at it, Batch
/// first, then Optimized, then Simple (fewest crash points per transaction
/// first, so a program costs the fewest images; the two-layer log last),
/// force before no-force.
pub fn aim(site: Site) -> Vec<Config> {
    let shape = shape_for(site);
    // Only another thread's unfenced write-back shows a lost re-flush, and
    // only another thread's group in flight a commit that does not wait.
    // Only another lane's group not yet in place shows a Log Start that
    // passes the watermark.
    let two = site == sites::RING_DRAIN_FLUSH
        || site == sites::RING_ORDER
        || site == sites::RING_WATERMARK;
    let mut out = Vec::new();
    for v in [
        LogVariant::Batch,
        LogVariant::Optimized,
        LogVariant::Simple,
        LogVariant::TwoLayer,
    ] {
        for p in Policy::ALL {
            if shows(site, v, p) {
                let c = Config {
                    shape,
                    mutation: Some(site),
                    ..Config::new(v, p)
                };
                out.push(if two { c.two_threads(shape) } else { c });
            }
        }
    }
    out
}
