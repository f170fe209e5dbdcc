//! Collection headers whose type tags this thread found right, remembered
//! while the pool frees no block ([`Tx::free_epoch`](rewind::Tx::free_epoch)).
//!
//! A header's tags never change after `create`, and its block cannot hold
//! another collection until it is freed, which changes the epoch. So an
//! operation through a transaction checks the key and value tags of a
//! header once per epoch, not once per operation; it still reads and
//! checks the header's magic and the fields it uses every time. (A tag
//! overwritten on purpose through `Tx::write_bytes` is found at the next
//! epoch, or by an operation outside a transaction, which always checks.)

use std::any::TypeId;
use std::cell::RefCell;

use crate::error::Result;
use crate::mem::{check_magic, read_header, Mem, OldLayout};

/// Headers remembered per thread: a program works with a few collections
/// at once.
const WAYS: usize = 8;

/// `(epoch, header offset, handle type)`.
type Entry = Option<(u64, u64, TypeId)>;

thread_local! {
    static CHECKED: RefCell<([Entry; WAYS], usize)> = const { RefCell::new(([None; WAYS], 0)) };
}

/// Reads the header of `h.len()` bytes at `hdr` for a handle of type `T`,
/// checked: its magic every time, its type tags (`h[tags_at..]`, checked
/// by `tags`) once per free epoch through a transaction, and every time
/// outside one. In the epoch's later operations only the bytes before
/// `tags_at` are read.
#[allow(clippy::too_many_arguments)]
pub(crate) fn read_checked_header<T: 'static, M: Mem + ?Sized>(
    m: &mut M,
    what: &'static str,
    hdr: u64,
    h: &mut [u8],
    tags_at: usize,
    magic: [u8; 8],
    old: OldLayout,
    tags: impl FnOnce(&[u8]) -> Result<()>,
) -> Result<()> {
    let epoch = m.free_epoch();
    if epoch.is_some_and(|e| known::<T>(e, hdr)) {
        m.read_at(hdr, &mut h[..tags_at])?;
        return check_magic(what, hdr, h, magic);
    }
    read_header(m, what, hdr, h, magic, old)?;
    tags(&h[tags_at..])?;
    if let Some(e) = epoch {
        remember::<T>(e, hdr);
    }
    Ok(())
}

/// True when the header at `hdr` was found right for the handle type `T`
/// by this thread in free epoch `epoch`.
#[inline]
fn known<T: 'static>(epoch: u64, hdr: u64) -> bool {
    let id = TypeId::of::<T>();
    CHECKED
        .try_with(|c| c.borrow().0.contains(&Some((epoch, hdr, id))))
        .unwrap_or(false)
}

/// Remembers that the header at `hdr` is right for `T` in `epoch`.
fn remember<T: 'static>(epoch: u64, hdr: u64) {
    let id = TypeId::of::<T>();
    let _ = CHECKED.try_with(|c| {
        let (entries, next) = &mut *c.borrow_mut();
        // The same header's entry of an older epoch is replaced first.
        let i = entries
            .iter()
            .position(|e| matches!(e, Some((_, h, t)) if *h == hdr && *t == id))
            .unwrap_or_else(|| {
                let i = *next;
                *next = (i + 1) % WAYS;
                i
            });
        entries[i] = Some((epoch, hdr, id));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_only_in_the_epoch_for_the_type() {
        remember::<u64>(7, 4096);
        assert!(known::<u64>(7, 4096));
        assert!(!known::<u32>(7, 4096), "another handle type");
        assert!(!known::<u64>(8, 4096), "another epoch");
        assert!(!known::<u64>(7, 8192), "another header");
        remember::<u64>(8, 4096);
        assert!(known::<u64>(8, 4096));
        assert!(!known::<u64>(7, 4096), "replaced by the newer epoch");
    }
}
