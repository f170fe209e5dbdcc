//! The chunk table: one 32-byte entry per heap chunk, and one bitmap per
//! chunk. Every byte is checked before it is trusted.
//!
//! ```text
//! entry +0   descriptor  byte 7 kind, byte 6 check, bytes 0..6 value
//!       +8   bitmap check: Σ mix(i, word i) − mix(i, 0), mod 2^64
//!       +16  zero
//!       +24  zero
//! ```
//!
//! The check byte makes the XOR of the descriptor's eight bytes zero, so a
//! change of any one byte is detected; the all-zero descriptor (a free
//! chunk) is valid, so a new pool needs no formatting. A descriptor is
//! written with one aligned 8-byte store, so a crash never tears it.
//!
//! The bitmap check is an additive multiset hash of the chunk's 64 bitmap
//! words: word `i` holding `w` adds `mix(i, w) − mix(i, 0)`, where `mix` is
//! a strong 64-bit mixer (SplitMix64's finaliser over `w` and `i`). An empty
//! bitmap's check is 0 (so a free chunk needs no formatting either), and a
//! change of a word updates it with one addition ([`check_update`]): one
//! word written per allocation, as the parities were. Unlike XOR parities,
//! no change of two or more words cancels except by a 64-bit coincidence
//! (zeroing two all-ones words, which cancelled both parities, does not).
//!
//! A bit and its check are stores in different cache lines, so a crash can
//! persist one without the other; but a bit changes only under an ALLOC,
//! DELETE or CLR record that stays in the log until both are persistent.
//! Every check word stored was the check of the bitmap at that moment, a
//! bitmap that differs from the one on media only in bits such records
//! name. Recovery so first verifies each named chunk ([`verify_torn`]:
//! the stored check must be the check of the media bitmap with some subset
//! of the named bits flipped; anything else is damage), then redoes and
//! undoes the bits alone ([`set_bit`] without the check: an incremental
//! update from a torn check would carry the tear, the hash not being
//! linear in bits), then recomputes each named chunk's check from its
//! words ([`recompute_check`]). A crash during recovery leaves the same
//! kind of state (bits named by the same records, a check of some such
//! bitmap), which the next recovery verifies the same way. With more than
//! 16 candidate bits in one chunk (a transaction that allocated or freed
//! that many blocks of it and did not finish) the subsets are too many to
//! try: the check is then recomputed without that verification.

use crate::error::Error;
use crate::format::layout::{Layout, BITMAP_BYTES, CHUNK, DESC_BYTES};
use crate::persist::{sites, Domain};

/// A chunk's kind, the descriptor's top byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChunkKind {
    /// Not in use.
    Free,
    /// Blocks of one small class (the value is the class index).
    Small,
    /// The first chunk of a large run (the value is its length in chunks).
    Large,
    /// A later chunk of a large run.
    Cont,
    /// Blocks of the log.
    Log,
}

impl ChunkKind {
    fn code(self) -> u64 {
        match self {
            ChunkKind::Free => 0,
            ChunkKind::Small => 1,
            ChunkKind::Large => 2,
            ChunkKind::Cont => 3,
            ChunkKind::Log => 4,
        }
    }

    fn from_code(c: u64) -> Option<ChunkKind> {
        Some(match c {
            0 => ChunkKind::Free,
            1 => ChunkKind::Small,
            2 => ChunkKind::Large,
            3 => ChunkKind::Cont,
            4 => ChunkKind::Log,
            _ => return None,
        })
    }
}

const KIND_SHIFT: u32 = 56;
const CHECK_SHIFT: u32 = 48;
const VALUE_MASK: u64 = (1 << CHECK_SHIFT) - 1;

fn xor_bytes(v: u64) -> u64 {
    v.to_le_bytes().iter().fold(0, |a, &b| a ^ b) as u64
}

/// Encodes a descriptor.
pub(crate) fn encode(kind: ChunkKind, value: u64) -> u64 {
    debug_assert!(value <= VALUE_MASK);
    let v = kind.code() << KIND_SHIFT | value & VALUE_MASK;
    v | xor_bytes(v) << CHECK_SHIFT
}

/// Decodes a descriptor, `None` when its check byte does not match or its
/// kind is unknown.
pub(crate) fn decode(v: u64) -> Option<(ChunkKind, u64)> {
    if xor_bytes(v) != 0 {
        return None;
    }
    Some((ChunkKind::from_code(v >> KIND_SHIFT)?, v & VALUE_MASK))
}

/// Offset of chunk `c`'s descriptor.
pub(crate) fn desc_off(l: &Layout, c: u64) -> u64 {
    l.alloc_off + c * DESC_BYTES
}

/// Offset of chunk `c`'s bitmap check word.
pub(crate) fn check_off(l: &Layout, c: u64) -> u64 {
    desc_off(l, c) + 8
}

/// Offset of chunk `c`'s bitmap.
pub(crate) fn bitmap_off(l: &Layout, c: u64) -> u64 {
    l.bitmap_off + c * BITMAP_BYTES
}

/// Offset of chunk `c` itself.
pub(crate) fn chunk_start(l: &Layout, c: u64) -> u64 {
    l.heap_off + c * CHUNK
}

/// Reads and verifies chunk `c`'s descriptor.
pub(crate) fn read(d: &Domain, l: &Layout, c: u64) -> Result<(ChunkKind, u64), Error> {
    let off = desc_off(l, c);
    // The error is built only when the check fails: `ok_or` built it and
    // dropped it on every read (an access check reads a descriptor on
    // every miss of its cache).
    match decode(d.read_u64(off)?) {
        Some(v) => Ok(v),
        None => Err(Error::HeapCorrupt {
            offset: off,
            reason: "chunk descriptor fails its check byte (damaged)",
        }),
    }
}

/// Stores chunk `c`'s descriptor (written back by the caller).
pub(crate) fn write(
    d: &Domain,
    l: &Layout,
    c: u64,
    kind: ChunkKind,
    value: u64,
) -> Result<(), Error> {
    d.store_u64(desc_off(l, c), encode(kind, value))
}

/// The mixer of the bitmap check: SplitMix64's finaliser over the word
/// and its index.
fn mix(i: u64, w: u64) -> u64 {
    let mut z = w ^ (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What word `i` holding `w` adds to its bitmap's check.
fn term(i: u64, w: u64) -> u64 {
    mix(i, w).wrapping_sub(mix(i, 0))
}

/// The check of a bitmap (its 64 words): 0 for an empty one.
pub(crate) fn check_of(bits: &[u8]) -> u64 {
    bits.chunks_exact(8).enumerate().fold(0u64, |a, (i, w)| {
        let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        a.wrapping_add(term(i as u64, w))
    })
}

/// The new check word of a bitmap whose word `word` (0..64) changes from
/// `old` to `new`: one addition, whatever else the bitmap holds. For a
/// writer that logs the check word with the bit (a redo commit group).
pub fn check_update(check: u64, word: u64, old: u64, new: u64) -> u64 {
    check
        .wrapping_add(term(word, new))
        .wrapping_sub(term(word, old))
}

/// Verifies chunk `c`'s bitmap against its check; for a chunk that holds
/// no small blocks, also that the bitmap is empty. `bits` is scratch.
pub(crate) fn verify_bitmap(
    d: &Domain,
    l: &Layout,
    c: u64,
    kind: ChunkKind,
    bits: &mut [u8],
) -> Result<(), Error> {
    d.read(bitmap_off(l, c), bits)?;
    let zero = d.read_u64(desc_off(l, c) + 16)? | d.read_u64(desc_off(l, c) + 24)?;
    if zero != 0 || d.read_u64(check_off(l, c))? != check_of(bits) {
        return Err(Error::HeapCorrupt {
            offset: bitmap_off(l, c),
            reason: "allocator bitmap does not match its check word (damaged)",
        });
    }
    if kind != ChunkKind::Small && bits.iter().any(|&b| b != 0) {
        return Err(Error::HeapCorrupt {
            offset: bitmap_off(l, c),
            reason: "a chunk without small blocks has bitmap bits set",
        });
    }
    Ok(())
}

/// Sets one bit of chunk `c`'s bitmap to `on`, written back; with
/// `update_check`, also its check word (one addition: the check on media
/// must be the bitmap's, as it is outside recovery). Recovery passes
/// `false` and recomputes the check afterwards ([`recompute_check`]).
pub(crate) fn set_bit(
    d: &Domain,
    l: &Layout,
    c: u64,
    slot: u64,
    on: bool,
    update_check: bool,
) -> Result<(), Error> {
    let word_off = bitmap_off(l, c) + slot / 64 * 8;
    let old = d.read_u64(word_off)?;
    let new = if on {
        old | 1 << (slot % 64)
    } else {
        old & !(1 << (slot % 64))
    };
    if new == old {
        return Ok(());
    }
    let byte_off = bitmap_off(l, c) + slot / 8;
    d.store(byte_off, &[(new >> (slot / 8 % 8 * 8)) as u8])?;
    d.flush_at(byte_off, 1, sites::ALLOC_MARK_BIT)?;
    if !update_check {
        return Ok(());
    }
    let check = d.read_u64(check_off(l, c))?;
    d.store_u64(check_off(l, c), check_update(check, slot / 64, old, new))?;
    d.flush_at(check_off(l, c), 8, sites::ALLOC_MARK_BIT)
}

/// Most candidate bits [`verify_torn`] tries the subsets of.
const MAX_TORN_BITS: usize = 16;

/// Before recovery changes any bit of chunk `c`: its stored check must be
/// the check of its bitmap with some subset of `slots` flipped. `slots`
/// are the bits the log's allocation records name (ALLOC, DELETE, CLR):
/// the only bits a crash can have persisted without the check word that
/// went with them, or the reverse (each check word stored was the check of
/// the bitmap then, a bitmap that differs from the one on media only in
/// bits such records name). Anything else is damage. With more than 16
/// candidate bits in one chunk (a transaction that allocated or freed that
/// many blocks of it and did not finish) the subsets are too many to try:
/// the check is then not verified here ([`recompute_check`] still makes it
/// right).
pub(crate) fn verify_torn(d: &Domain, l: &Layout, c: u64, slots: &[u64]) -> Result<(), Error> {
    let mut bits = vec![0u8; BITMAP_BYTES as usize];
    d.read(bitmap_off(l, c), &mut bits)?;
    let now = check_of(&bits);
    let stored = d.read_u64(check_off(l, c))?;
    let slots: Vec<u64> = slots
        .iter()
        .copied()
        .filter(|&s| s < BITMAP_BYTES * 8)
        .collect();
    if stored == now || slots.len() > MAX_TORN_BITS {
        return Ok(());
    }
    let word = |i: u64| {
        let at = i as usize * 8;
        u64::from_le_bytes(bits[at..at + 8].try_into().expect("8 bytes"))
    };
    let mut words: Vec<u64> = slots.iter().map(|s| s / 64).collect();
    words.sort_unstable();
    words.dedup();
    let explained = (1u64..1 << slots.len()).any(|subset| {
        let mut flips = [0u64; 64];
        for (k, &s) in slots.iter().enumerate() {
            if subset >> k & 1 != 0 {
                flips[(s / 64) as usize] ^= 1 << (s % 64);
            }
        }
        let h = words.iter().fold(now, |h, &w| {
            let old = word(w);
            check_update(h, w, old, old ^ flips[w as usize])
        });
        h == stored
    });
    if explained {
        Ok(())
    } else {
        Err(Error::HeapCorrupt {
            offset: bitmap_off(l, c),
            reason: "allocator bitmap does not match its check word (damaged)",
        })
    }
}

/// Recomputes chunk `c`'s check from its bitmap's words and stores it,
/// written back (recovery, after redo and undo rewrote the named bits
/// without touching the check: see [`set_bit`]).
pub(crate) fn recompute_check(d: &Domain, l: &Layout, c: u64) -> Result<(), Error> {
    let mut bits = vec![0u8; BITMAP_BYTES as usize];
    d.read(bitmap_off(l, c), &mut bits)?;
    let now = check_of(&bits);
    if d.read_u64(check_off(l, c))? != now {
        d.store_u64(check_off(l, c), now)?;
        d.flush_at(check_off(l, c), 8, sites::RECOVERY_REDO_FLUSH)?;
    }
    Ok(())
}

/// Verifies that the chunk table past the heap's `chunks` chunks (the
/// entries of chunks the heap may grow into, then the alignment padding
/// before the first bitmap) is zero: a descriptor set there belongs to no
/// chunk of the heap (a damaged table, a header whose chunk count was
/// changed, or a heap size word that lost a growth). Read in steps, so a
/// table planned for a large maximum costs no large buffer.
pub(crate) fn verify_padding(d: &Domain, l: &Layout, chunks: u64) -> Result<(), Error> {
    verify_zero(
        d,
        desc_off(l, chunks),
        l.bitmap_off,
        "a chunk descriptor past the heap's last chunk is set (damaged table, a header whose chunk count was changed, or a lost growth)",
    )
}

/// Before the heap grows from `from` to `to` chunks: their table entries
/// and bitmaps must be zero (`HeapCorrupt` otherwise).
pub(crate) fn verify_unused(d: &Domain, l: &Layout, from: u64, to: u64) -> Result<(), Error> {
    let why = "a chunk past the heap has a descriptor or bitmap set (damaged)";
    verify_zero(d, desc_off(l, from), desc_off(l, to), why)?;
    verify_zero(d, bitmap_off(l, from), bitmap_off(l, to), why)
}

/// `HeapCorrupt` naming the first nonzero byte of `[start, end)`.
fn verify_zero(d: &Domain, start: u64, end: u64, reason: &'static str) -> Result<(), Error> {
    let mut buf = vec![0u8; (end.saturating_sub(start)).min(1 << 16) as usize];
    let mut at = start;
    while at < end {
        let n = ((end - at) as usize).min(buf.len());
        d.read(at, &mut buf[..n])?;
        if let Some(i) = buf[..n].iter().position(|&b| b != 0) {
            return Err(Error::HeapCorrupt {
                offset: at + i as u64,
                reason,
            });
        }
        at += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_change_of_two_words_cancels_in_the_check() {
        let mut bits = vec![0u8; BITMAP_BYTES as usize];
        bits[..16].fill(0xff);
        let full = check_of(&bits);
        // Zeroing two all-ones words (which cancelled both XOR parities).
        let mut z = bits.clone();
        z[..16].fill(0);
        assert_ne!(check_of(&z), full);
        assert_eq!(check_of(&z), 0);
        // Every pair of single-bit changes in distinct or equal words.
        for a in (0..512).step_by(7) {
            for b in (0..512).step_by(11) {
                let mut t = bits.clone();
                t[a / 8] ^= 1 << (a % 8);
                if a != b {
                    t[b / 8] ^= 1 << (b % 8);
                }
                assert_ne!(check_of(&t), full, "bits {a} and {b}");
            }
        }
        // Words swapped between positions.
        let mut s = vec![0u8; BITMAP_BYTES as usize];
        s[0] = 1;
        let mut u = vec![0u8; BITMAP_BYTES as usize];
        u[8] = 1;
        assert_ne!(check_of(&s), check_of(&u));
        // The update of one word agrees with the whole recomputation.
        let old = u64::from_le_bytes(bits[8..16].try_into().unwrap());
        let mut t = bits.clone();
        t[8..16].copy_from_slice(&0x1234u64.to_le_bytes());
        assert_eq!(check_update(full, 1, old, 0x1234), check_of(&t));
    }

    /// A small pool's layout and a simulated domain holding it, chunk 0
    /// formatted as a class-0 chunk (empty bitmap, check 0).
    fn domain() -> (Domain, Layout) {
        let l = Layout::plan(4 << 20, 1 << 20, 16).expect("plan");
        let d = Domain::sim(l.pool_size as usize);
        write(&d, &l, 0, ChunkKind::Small, 0).unwrap();
        (d, l)
    }

    fn stored_check(d: &Domain, l: &Layout) -> u64 {
        d.read_u64(check_off(l, 0)).unwrap()
    }

    #[test]
    fn a_torn_bitmap_word_is_explained_by_the_named_bits_and_recomputed() {
        let (d, l) = domain();
        // Blocks 3 and 5 (one word) and 70 (another) allocated, with checks.
        for slot in [3, 5, 70] {
            set_bit(&d, &l, 0, slot, true, true).unwrap();
        }
        let whole = stored_check(&d, &l);
        verify_bitmap(&d, &l, 0, ChunkKind::Small, &mut [0; 512]).unwrap();
        // A transaction allocates block 9 and frees block 5, both in word 0,
        // and a crash persists the word (both bits) but neither check store:
        // the media check is the bitmap's before the transaction.
        set_bit(&d, &l, 0, 9, true, true).unwrap();
        set_bit(&d, &l, 0, 5, false, true).unwrap();
        d.store_u64(check_off(&l, 0), whole).unwrap();
        assert!(verify_bitmap(&d, &l, 0, ChunkKind::Small, &mut [0; 512]).is_err());
        verify_torn(&d, &l, 0, &[5, 9]).unwrap();
        // Recovery undoes both (bits only), then recomputes the check: the
        // bitmap is the one before the transaction, and checks again.
        set_bit(&d, &l, 0, 9, false, false).unwrap();
        set_bit(&d, &l, 0, 5, true, false).unwrap();
        recompute_check(&d, &l, 0).unwrap();
        assert_eq!(stored_check(&d, &l), whole);
        verify_bitmap(&d, &l, 0, ChunkKind::Small, &mut [0; 512]).unwrap();

        // The reverse tear: both checks persisted, one bit (9) did not.
        set_bit(&d, &l, 0, 9, true, true).unwrap();
        set_bit(&d, &l, 0, 5, false, true).unwrap();
        set_bit(&d, &l, 0, 9, false, false).unwrap();
        verify_torn(&d, &l, 0, &[5, 9]).unwrap();
        // Updating the torn check incrementally (what recovery did before)
        // leaves a check no subset of the named bits explains: the bug
        // this order of verify, bits, recompute avoids.
        let mut e = d.read_u64(bitmap_off(&l, 0)).unwrap();
        let torn = stored_check(&d, &l);
        d.store_u64(check_off(&l, 0), check_update(torn, 0, e, e | 1 << 9))
            .unwrap();
        e |= 1 << 9;
        d.store_u64(bitmap_off(&l, 0), e).unwrap();
        set_bit(&d, &l, 0, 9, false, false).unwrap();
        assert!(verify_torn(&d, &l, 0, &[5, 9]).is_err());
        d.store_u64(check_off(&l, 0), torn).unwrap();
        // Redo of the allocation of 9 and the free of 5, bits alone.
        set_bit(&d, &l, 0, 9, true, false).unwrap();
        recompute_check(&d, &l, 0).unwrap();
        verify_bitmap(&d, &l, 0, ChunkKind::Small, &mut [0; 512]).unwrap();
    }

    #[test]
    fn damage_outside_the_named_bits_is_not_explained() {
        let (d, l) = domain();
        for slot in [3, 5, 70] {
            set_bit(&d, &l, 0, slot, true, true).unwrap();
        }
        // Block 70's bit cleared by damage while the log names 3 and 9.
        set_bit(&d, &l, 0, 70, false, false).unwrap();
        assert!(verify_torn(&d, &l, 0, &[3, 9]).is_err());
        // Two all-ones words zeroed (which cancelled both XOR parities).
        let (d, l) = domain();
        for slot in 0..128 {
            set_bit(&d, &l, 0, slot, true, true).unwrap();
        }
        d.store(bitmap_off(&l, 0), &[0; 16]).unwrap();
        assert!(verify_torn(&d, &l, 0, &[200]).is_err());
        assert!(verify_bitmap(&d, &l, 0, ChunkKind::Small, &mut [0; 512]).is_err());
        // Too many named bits to try: accepted, the check recomputed.
        let many: Vec<u64> = (0..17).collect();
        verify_torn(&d, &l, 0, &many).unwrap();
    }

    #[test]
    fn every_single_byte_change_of_a_descriptor_is_detected() {
        for (k, v) in [
            (ChunkKind::Free, 0),
            (ChunkKind::Small, 3),
            (ChunkKind::Large, 17),
            (ChunkKind::Cont, 0),
            (ChunkKind::Log, 0),
        ] {
            let d = encode(k, v);
            assert_eq!(decode(d), Some((k, v)));
            for byte in 0..8 {
                for x in 1..=255u64 {
                    assert_eq!(decode(d ^ x << (8 * byte)), None, "{k:?} byte {byte} ^ {x}");
                }
            }
        }
        assert_eq!(encode(ChunkKind::Free, 0), 0);
    }
}
