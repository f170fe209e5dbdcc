//! Single-write atomic updates (MARS's AtomicWrite): one write made atomic
//! and durable with the fewest fences the configuration allows.
//!
//! * **Force, a write of 1, 2, 4 or 8 bytes aligned to its size:** one
//!   store instruction, its flush and one fence; no log record. The
//!   persistence domain takes an aligned store of at most 8 bytes whole, and
//!   under force nothing in the log can be redone over it (committed records
//!   are cleared at commit; Batch's unfenced clears are stored again first).
//! * **Otherwise** (a longer write, or no-force, whose recovery repeats
//!   history from the log and so must see the write there): a transaction of
//!   that one write, with the configuration's commit protocol.

use crate::engine::Engine;
use crate::error::Error;
use crate::persist::sites;

use super::Tx;

/// Writes `bytes` at `off` atomically and durably.
pub(crate) fn atomic_write(eng: &Engine, off: u64, bytes: &[u8]) -> Result<(), Error> {
    eng.usable()?;
    let n = bytes.len() as u64;
    // Null is `NullPointer`, as for every other read and write.
    if off == 0 {
        return Err(Error::NullPointer { len: n });
    }
    eng.hdr.layout.check_in_heap(off, n)?;
    // A policy that keeps committed records for recovery to repeat would
    // redo an older logged value over an unlogged store.
    // Under redo, one word is a commit group of one entry: the same one
    // fence, and no drain of the commit ring.
    let unlogged = !eng.durability.keeps_records() && eng.ring.is_none();
    if unlogged && matches!(n, 1 | 2 | 4 | 8) && off.is_multiple_of(n) {
        let d = &eng.dom;
        // Inside one allocated block, as a transaction's write must be.
        crate::alloc::check_write(d, &eng.hdr.layout, off, n)?;
        // Redo-async: no committed value waiting in the write cache may
        // later be written over this one.
        eng.before_store(off, n)?;
        return eng.log.fenced_write(d, || {
            d.store_word(off, bytes)?;
            d.flush_at(off, n, sites::ATOMIC_FLUSH)?;
            d.fence_at(sites::ATOMIC_FENCE)
        });
    }
    let id = eng.new_tx_id();
    let mut tx = Tx::new(eng, id);
    match tx.write_bytes(off, bytes) {
        Ok(()) => tx.finish(),
        Err(e) => {
            tx.abort()?;
            Err(e)
        }
    }
}
