//! The chunk table: one 16-byte entry per heap chunk, and one bitmap per
//! chunk. Every byte is checked before it is trusted.
//!
//! ```text
//! entry +0   descriptor  byte 7 kind, byte 6 check, bytes 0..6 value
//!       +8   bitmap parity: XOR of the chunk's 64 bitmap words
//!       +16  rotated parity: XOR of word i rotated left by i
//!       +24  zero
//! ```
//!
//! The check byte makes the XOR of the descriptor's eight bytes zero, so a
//! change of any one byte is detected; the all-zero descriptor (a free
//! chunk) is valid, so a new pool needs no formatting. A descriptor is
//! written with one aligned 8-byte store, so a crash never tears it.
//!
//! The parity words change with every bitmap word (`parity ^= old ^ new`),
//! again so that any one changed byte of a bitmap or of its parity shows.
//! A bit and its parity are stores in different cache lines, so a crash can
//! persist one without the other; but a bit changes only under an ALLOC,
//! DELETE or CLR record that stays in the log until both are persistent,
//! and recovery rewrites every bit such a record names and then recomputes
//! the parity ([`repair_parity`]). It accepts a disagreement only at the
//! positions those bits occupy in both parities, so damage elsewhere in
//! the chunk still shows (the rotated parity tells apart bits at the same
//! position of different words).

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

/// Offset of chunk `c`'s bitmap parity word.
pub(crate) fn parity_off(l: &Layout, c: u64) -> u64 {
    desc_off(l, c) + 8
}

/// Offset of chunk `c`'s rotated bitmap parity word.
pub(crate) fn parity2_off(l: &Layout, c: u64) -> u64 {
    desc_off(l, c) + 16
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
    decode(d.read_u64(off)?).ok_or(Error::HeapCorrupt {
        offset: off,
        reason: "chunk descriptor fails its check byte (damaged)",
    })
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

/// The two parities of a bitmap: the XOR of its 64 words, and the XOR of
/// word `i` rotated left by `i`.
pub(crate) fn parity_of(bits: &[u8]) -> (u64, u64) {
    bits.chunks_exact(8)
        .enumerate()
        .fold((0, 0), |(a, b), (i, w)| {
            let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
            (a ^ w, b ^ w.rotate_left(i as u32))
        })
}

/// The parity positions of bitmap slot `slot`: its bit in each parity.
pub(crate) fn positions(slot: u64) -> (u64, u64) {
    let bit = 1u64 << (slot % 64);
    (bit, bit.rotate_left((slot / 64) as u32))
}

fn stored_parity(d: &Domain, l: &Layout, c: u64) -> Result<(u64, u64), Error> {
    Ok((
        d.read_u64(parity_off(l, c))?,
        d.read_u64(parity2_off(l, c))?,
    ))
}

/// Verifies chunk `c`'s bitmap against its parity; for a chunk that holds
/// no small blocks, also that the bitmap is empty. `bits` is scratch.
pub(crate) fn verify_bitmap(
    d: &Domain,
    l: &Layout,
    c: u64,
    kind: ChunkKind,
    bits: &mut [u8],
) -> Result<(), Error> {
    d.read(bitmap_off(l, c), bits)?;
    if d.read_u64(desc_off(l, c) + 24)? != 0 || stored_parity(d, l, c)? != parity_of(bits) {
        return Err(Error::HeapCorrupt {
            offset: bitmap_off(l, c),
            reason: "allocator bitmap does not match its parity word (damaged)",
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

/// Sets one bit of chunk `c`'s bitmap (byte at `byte_off`) to `on`, with
/// its parity, both written back.
pub(crate) fn set_bit(d: &Domain, l: &Layout, c: u64, slot: u64, on: bool) -> Result<(), Error> {
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
    let (p, q) = stored_parity(d, l, c)?;
    let delta = old ^ new;
    d.store_u64(parity_off(l, c), p ^ delta)?;
    d.store_u64(parity2_off(l, c), q ^ delta.rotate_left((slot / 64) as u32))?;
    d.flush_at(parity_off(l, c), 16, sites::ALLOC_MARK_BIT)
}

/// Recomputes chunk `c`'s parity from its bitmap (recovery, after the
/// bits named by log records are redone or undone), written back. Only
/// the bit positions in `named` (bit `slot % 64` of each slot a record
/// names) may disagree: a crash can tear a bit from its parity only there,
/// so any other disagreement is damage.
pub(crate) fn repair_parity(
    d: &Domain,
    l: &Layout,
    c: u64,
    named: (u64, u64),
) -> Result<(), Error> {
    let mut bits = vec![0u8; BITMAP_BYTES as usize];
    d.read(bitmap_off(l, c), &mut bits)?;
    let (p, q) = parity_of(&bits);
    let (sp, sq) = stored_parity(d, l, c)?;
    if (sp ^ p) & !named.0 != 0 || (sq ^ q) & !named.1 != 0 {
        return Err(Error::HeapCorrupt {
            offset: bitmap_off(l, c),
            reason: "allocator bitmap does not match its parity word (damaged)",
        });
    }
    if (sp, sq) != (p, q) {
        d.store_u64(parity_off(l, c), p)?;
        d.store_u64(parity2_off(l, c), q)?;
        d.flush_at(parity_off(l, c), 16, sites::RECOVERY_REDO_FLUSH)?;
    }
    Ok(())
}

/// Verifies that the bytes between the last entry and the first bitmap
/// (alignment padding) are zero.
pub(crate) fn verify_padding(d: &Domain, l: &Layout) -> Result<(), Error> {
    let start = desc_off(l, l.heap_chunks);
    let mut pad = vec![0u8; (l.bitmap_off - start) as usize];
    d.read(start, &mut pad)?;
    match pad.iter().position(|&b| b != 0) {
        None => Ok(()),
        Some(i) => Err(Error::HeapCorrupt {
            offset: start + i as u64,
            reason: "a chunk descriptor past the heap's last chunk is set (damaged table, or a header whose chunk count was changed)",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
