//! The meta page (offset 4096): its words other than the log's, their
//! checks, and the page a new pool starts with. Drawn byte by byte in
//! `docs/format.md`:
//!
//! ```text
//! off   size  field
//! 4096     8  root object offset (0: none)
//! 4104     8  root object size
//! 4112     8  root check: offset ^ size ^ ROOT_SALT
//! 4120     8  catalog offset (0: none)
//! 4128     8  catalog check: offset ^ CATALOG_SALT
//! 4136     8  meta magic "REWINDMT" (written at create, never changed)
//! 4144     8  open stamp: the identity of the file that has the pool open; 0 after a clean close
//! 4152     8  heap size: chunks in the heap (bits 0..40) and their check (bits 40..64)
//! 4160   192  the log's words (see log/adll.rs, log/tree.rs)
//! 4352     8  Log Start: lsn (bits 0..56) and its CRC-8 (bits 56..64)
//! 4416    24  commit ring Log Start, slot 0: csn, position, check
//! 4440    24  commit ring Log Start, slot 1: the same
//! ```
//!
//! Every word is checked: a zeroed root line or a zeroed meta page fails
//! its check (the salts make the all-zero line invalid), a changed Log
//! Start fails its check byte, a changed heap size its check bits. The root and catalog words are written by
//! transactions (logged like user data); Log Start by redo-async's
//! write-back with one 8-byte store, so value and check never tear. The
//! commit ring's Log Start is two 24-byte slots written alternately
//! (`log/ring.rs`), so a torn store leaves the other slot valid; each
//! carries a mixed check word ([`ring_slot_check`]), and a new pool has
//! both slots valid (sequence number 1 at position 0), so a zeroed slot is
//! a torn or damaged one, never an empty ring.

use super::layout::{
    MAX_LANES, META_END, META_LOG_START, META_OFF, META_RING_START, META_ROOT_OFF, RING_SLOT,
};
use crate::error::Error;

/// Meta: root object offset.
pub const ROOT: u64 = META_ROOT_OFF;
/// Meta: root object size.
pub const ROOT_SIZE: u64 = ROOT + 8;
/// Meta: the root words' check.
pub const ROOT_CHECK: u64 = ROOT_SIZE + 8;
/// Meta: the catalog's offset.
pub const CATALOG: u64 = ROOT_CHECK + 8;
/// Meta: the catalog word's check.
pub const CATALOG_CHECK: u64 = CATALOG + 8;
/// Meta: end of the words transactions write (root and catalog).
pub const TX_WORDS_END: u64 = CATALOG_CHECK + 8;
/// Meta: the meta magic.
pub const MAGIC_OFF: u64 = TX_WORDS_END;
/// Meta: the open stamp.
pub const STAMP: u64 = MAGIC_OFF + 8;
/// Meta: the heap size word (chunks in the heap, checked): the heap
/// grows by one 8-byte store of it (`alloc`).
pub const HEAP: u64 = STAMP + 8;
/// Meta: end of the words this module owns (the log's line follows).
pub const WORDS_END: u64 = HEAP + 8;

/// The meta magic.
pub const MAGIC: [u8; 8] = *b"REWINDMT";
/// Mixed into the root check, so the all-zero root line is invalid.
pub const ROOT_SALT: u64 = 0x524f_4f54_4c49_4e45;
/// Mixed into the catalog check.
pub const CATALOG_SALT: u64 = 0x4341_5441_4c4f_4721;
/// Largest Log Start (56 bits: at 10^9 commits a second, 2 years).
pub const LOG_START_MAX: u64 = (1 << 56) - 1;

/// Mixed into the heap size word's check.
pub const HEAP_SALT: u64 = 0x4845_4150_4348_4e4b;
/// Most chunks the heap size word holds (40 bits: 2^58 bytes of heap).
pub const HEAP_MAX: u64 = (1 << 40) - 1;

/// Mixed into a ring Log Start slot's check.
pub const RING_SALT: u64 = 0x5249_4e47_5354_5254;

/// SplitMix64's finaliser: every input bit changes about half the output.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The check word of a commit ring Log Start slot holding sequence number
/// `csn` and ring position `pos`: both words mixed with a salt, so an
/// all-zero slot, swapped words or one bit changed in two words fail it
/// (but for a 64-bit coincidence), unlike an XOR of the words.
pub fn ring_slot_check(csn: u64, pos: u64, w: u64) -> u64 {
    mix64(mix64(mix64(csn ^ RING_SALT) ^ pos) ^ w)
}

/// Offset of Log Start slot `i` (0 or 1) of commit lane `lane`: a line
/// per lane.
pub fn ring_slot_off(lane: u64, i: u64) -> u64 {
    META_RING_START + (lane % MAX_LANES) * 2 * RING_SLOT + (i & 1) * RING_SLOT
}

/// What a lane's Log Start slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingSlot {
    /// The lane sequence number of the next group.
    pub csn: u64,
    /// Its position in the lane.
    pub pos: u64,
    /// The watermark: every group of every lane whose global commit
    /// number is at most this is durable in place.
    pub w: u64,
}

/// The bytes of a lane's Log Start slot.
pub fn encode_ring_slot(s: RingSlot) -> [u8; RING_SLOT as usize] {
    let mut w = [0u8; RING_SLOT as usize];
    w[..8].copy_from_slice(&s.csn.to_le_bytes());
    w[8..16].copy_from_slice(&s.pos.to_le_bytes());
    w[16..24].copy_from_slice(&s.w.to_le_bytes());
    w[24..].copy_from_slice(&ring_slot_check(s.csn, s.pos, s.w).to_le_bytes());
    w
}

/// What a lane's Log Start slot holds, `None` when its check word fails
/// (a slot torn while it was stored, damaged, or zeroed).
pub fn decode_ring_slot(w: &[u8; RING_SLOT as usize]) -> Option<RingSlot> {
    let word = |i: usize| u64::from_le_bytes(w[i..i + 8].try_into().expect("8 bytes"));
    let (csn, pos, wm) = (word(0), word(8), word(16));
    (word(24) == ring_slot_check(csn, pos, wm)).then_some(RingSlot { csn, pos, w: wm })
}

/// The slot of a new lane: sequence number 1 at position 0, watermark 0.
pub const FIRST_SLOT: RingSlot = RingSlot {
    csn: 1,
    pos: 0,
    w: 0,
};

/// The root words' check.
pub fn root_check(off: u64, size: u64) -> u64 {
    off ^ size ^ ROOT_SALT
}

/// The catalog word's check.
pub fn catalog_check(off: u64) -> u64 {
    off ^ CATALOG_SALT
}

/// CRC-8 (polynomial 0x07, initial value 0xff) of the lsn's seven
/// little-endian bytes: every change of one byte (a burst of at most 8
/// bits) is detected, other changes but for 1 in 256; 0 has a nonzero
/// check, so a zeroed word is damage.
fn log_start_check(lsn: u64) -> u64 {
    let mut crc: u8 = 0xff;
    for &b in &lsn.to_le_bytes()[..7] {
        crc ^= b;
        for _ in 0..8 {
            crc = if crc & 0x80 != 0 {
                crc << 1 ^ 0x07
            } else {
                crc << 1
            };
        }
    }
    crc as u64
}

/// The Log Start word for `lsn` (at most [`LOG_START_MAX`]).
pub fn encode_log_start(lsn: u64) -> u64 {
    let lsn = lsn.min(LOG_START_MAX);
    lsn | log_start_check(lsn) << 56
}

/// The lsn a Log Start word holds, or `MetaCorrupt` when its check byte
/// does not match (a damaged or zeroed word).
pub fn decode_log_start(word: u64) -> Result<u64, Error> {
    let lsn = word & LOG_START_MAX;
    if word >> 56 != log_start_check(lsn) {
        return Err(Error::MetaCorrupt {
            offset: META_LOG_START,
            reason: "the Log Start word fails its check byte (damaged)",
        });
    }
    Ok(lsn)
}

/// The heap size word for a heap of `chunks` chunks (at most
/// [`HEAP_MAX`]): the count in bits 0..40, bits 40..64 the top 24 bits of
/// `mix64(chunks XOR HEAP_SALT)`, so a zeroed word and any change of the
/// count are damage (but for 1 in 2^24). One 8-byte store: never torn.
pub fn encode_heap(chunks: u64) -> u64 {
    let c = chunks & HEAP_MAX;
    c | mix64(c ^ HEAP_SALT) & !HEAP_MAX
}

/// The chunk count a heap size word holds, or `MetaCorrupt` when its
/// check bits do not match.
pub fn decode_heap(word: u64) -> Result<u64, Error> {
    let c = word & HEAP_MAX;
    if word != encode_heap(c) {
        return Err(Error::MetaCorrupt {
            offset: HEAP,
            reason: "the heap size word fails its check (damaged)",
        });
    }
    Ok(c)
}

/// The meta page of a new pool of `heap_chunks` chunks and `lanes` commit
/// lanes: no root, no catalog, the magic, closed, Log Start 0, both Log
/// Start slots of each lane at sequence number 1, position 0, watermark
/// 0 (the empty lane; the slots of lanes past the count zero); the log's
/// words zero.
pub fn initial_page(heap_chunks: u64, lanes: u64) -> Vec<u8> {
    let mut p = vec![0u8; (META_END - META_OFF) as usize];
    let mut put = |off: u64, v: u64| {
        let at = (off - META_OFF) as usize;
        p[at..at + 8].copy_from_slice(&v.to_le_bytes());
    };
    put(ROOT_CHECK, root_check(0, 0));
    put(CATALOG_CHECK, catalog_check(0));
    put(MAGIC_OFF, u64::from_le_bytes(MAGIC));
    put(HEAP, encode_heap(heap_chunks));
    put(META_LOG_START, encode_log_start(0));
    for lane in 0..lanes.min(MAX_LANES) {
        for i in 0..2 {
            let at = (ring_slot_off(lane, i) - META_OFF) as usize;
            p[at..at + RING_SLOT as usize].copy_from_slice(&encode_ring_slot(FIRST_SLOT));
        }
    }
    p
}

/// Checks the words of a meta page (`page`: its 4096 bytes) this module
/// owns, in a pool of `lanes` commit lanes: the magic, the root and
/// catalog checks, the heap size word's check, Log Start, a valid slot
/// per lane. The log checks its own words; the caller checks the rest is
/// zero (the slots of lanes past the count among them).
pub fn check_words(page: &[u8], lanes: u64) -> Result<(), Error> {
    let word = |off: u64| {
        let at = (off - META_OFF) as usize;
        u64::from_le_bytes(page[at..at + 8].try_into().expect("8 bytes"))
    };
    let bad = |offset, reason| Err(Error::MetaCorrupt { offset, reason });
    if word(MAGIC_OFF).to_le_bytes() != MAGIC {
        return bad(
            MAGIC_OFF,
            "the meta page's magic is missing (a zeroed or overwritten meta page)",
        );
    }
    if word(ROOT_CHECK) != root_check(word(ROOT), word(ROOT_SIZE)) {
        return bad(ROOT, "root object words do not match their check word");
    }
    if word(CATALOG_CHECK) != catalog_check(word(CATALOG)) {
        return bad(CATALOG, "catalog word does not match its check word");
    }
    decode_log_start(word(META_LOG_START))?;
    let slot = |lane: u64, i: u64| {
        let at = (ring_slot_off(lane, i) - META_OFF) as usize;
        decode_ring_slot(
            page[at..at + RING_SLOT as usize]
                .try_into()
                .expect("a slot"),
        )
    };
    // One slot of a lane may be torn (a crash while it was stored), never
    // both.
    let mut lanes = 0..lanes.min(MAX_LANES);
    if let Some(lane) = lanes.find(|&l| slot(l, 0).is_none() && slot(l, 1).is_none()) {
        return bad(
            ring_slot_off(lane, 0),
            "both Log Start slots of a commit lane fail their check word (damaged or zeroed)",
        );
    }
    decode_heap(word(HEAP))?;
    Ok(())
}

/// A nonzero identity for an open pool file: its device and inode, mixed.
/// A copy of the file (`cp`) has another inode, so a copy taken while the
/// pool was open carries a stamp that is not its own.
pub fn file_identity(dev: u64, ino: u64) -> u64 {
    mix64(dev.rotate_left(32) ^ ino ^ 0x4f50_454e_5354_414d) | 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_start_round_trips_and_rejects_zero_and_changes() {
        for lsn in [0, 1, 22, 1 << 40, LOG_START_MAX] {
            assert_eq!(decode_log_start(encode_log_start(lsn)).unwrap(), lsn);
        }
        assert!(decode_log_start(0).is_err());
        assert!(decode_log_start(u64::MAX).is_err());
        // Every change of one byte fails the check byte.
        for lsn in [0u64, 1000, 1 << 40] {
            let w = encode_log_start(lsn);
            for byte in 0..8 {
                for x in 1..=255u64 {
                    assert!(
                        decode_log_start(w ^ x << (8 * byte)).is_err(),
                        "{lsn} {byte} {x}"
                    );
                }
            }
        }
    }

    #[test]
    fn docs_format_md_draws_the_meta_words_the_code_uses() {
        let doc = include_str!("../../../../docs/format.md");
        let rows = crate::format::header::tests::table(doc, "## Meta page (offset 4096)");
        for (off, name) in [
            (ROOT, "root object offset"),
            (ROOT_SIZE, "root object size"),
            (ROOT_CHECK, "root check"),
            (CATALOG, "catalog offset"),
            (CATALOG_CHECK, "catalog check"),
            (MAGIC_OFF, "meta magic"),
            (STAMP, "open stamp"),
            (HEAP, "heap size"),
            (META_LOG_START, "log start"),
        ] {
            let row = rows.iter().find(|r| r.0 == off);
            let row = row.unwrap_or_else(|| panic!("docs/format.md has no meta row at {off}"));
            assert_eq!(row.1, 8, "{name}");
            assert!(
                row.2.to_lowercase().contains(name),
                "{off}: `{}` is not {name}",
                row.2
            );
        }
        assert_eq!(WORDS_END, crate::format::layout::META_ADLL);
        assert!(doc.contains("0x4845415043484e4b") && HEAP_SALT == 0x4845_4150_4348_4e4b);
        assert!(doc.contains("0x524f4f544c494e45") && ROOT_SALT == 0x524f_4f54_4c49_4e45);
        assert!(doc.contains("0x434154414c4f4721") && CATALOG_SALT == 0x4341_5441_4c4f_4721);
    }

    #[test]
    fn the_heap_word_round_trips_and_rejects_zero_and_changes() {
        for c in [1, 18, 4096, HEAP_MAX] {
            assert_eq!(decode_heap(encode_heap(c)).unwrap(), c);
        }
        assert!(decode_heap(0).is_err());
        assert!(decode_heap(u64::MAX).is_err());
        let w = encode_heap(18);
        for bit in 0..64 {
            assert!(decode_heap(w ^ 1 << bit).is_err(), "bit {bit}");
        }
        // A larger count needs its own check bits.
        assert!(decode_heap(w - 18 + 4096).is_err());
    }

    #[test]
    fn ring_slots_round_trip_and_reject_zero_swaps_and_paired_flips() {
        let slot = |csn, pos, w| RingSlot { csn, pos, w };
        for s in [
            slot(1, 0, 0),
            slot(2, 64, 9),
            slot(1 << 40, 4096, 1 << 33),
            slot(u64::MAX, 0, u64::MAX),
        ] {
            assert_eq!(decode_ring_slot(&encode_ring_slot(s)), Some(s));
        }
        assert_eq!(decode_ring_slot(&[0; RING_SLOT as usize]), None);
        let w = encode_ring_slot(slot(7, 640, 12));
        let mut swapped = w;
        swapped[..8].copy_from_slice(&w[8..16]);
        swapped[8..16].copy_from_slice(&w[..8]);
        assert_eq!(decode_ring_slot(&swapped), None);
        // The same bit flipped in two words (which an XOR check misses).
        for bit in 0..256 {
            for other in [(bit + 64) % 256, (bit + 128) % 256, (bit + 192) % 256] {
                let mut t = w;
                t[bit / 8] ^= 1 << (bit % 8);
                t[other / 8] ^= 1 << (other % 8);
                assert_eq!(decode_ring_slot(&t), None, "bits {bit} and {other}");
            }
        }
    }

    #[test]
    fn each_lane_has_its_own_line_of_slots() {
        let lines: std::collections::HashSet<u64> =
            (0..MAX_LANES).map(|l| ring_slot_off(l, 0) / 64).collect();
        assert_eq!(lines.len() as u64, MAX_LANES);
        for l in 0..MAX_LANES {
            assert_eq!(ring_slot_off(l, 1) / 64, ring_slot_off(l, 0) / 64);
        }
        assert!(ring_slot_off(MAX_LANES - 1, 1) + RING_SLOT <= META_END);
    }

    #[test]
    fn the_initial_page_checks_and_a_zeroed_one_does_not() {
        let p = initial_page(3, 2);
        check_words(&p, 2).unwrap();
        assert!(check_words(&p, 3).is_err(), "lane 2's slots are zero");
        assert!(check_words(&vec![0u8; p.len()], 2).is_err());
        let mut q = p.clone();
        q[(ROOT - META_OFF) as usize..(TX_WORDS_END - META_OFF) as usize].fill(0);
        assert!(check_words(&q, 2).is_err());
    }
}
