//! The bytes of the log in the pool: block headers, frame records and their
//! byte-granularity differences (NVWAL §3.2).
//!
//! ```text
//! block (Config::block_size bytes, allocated by a rewind transaction)
//!   0   next      u64   pool offset of the next block, 0 = last
//!   8   (zero)    56 B  the rest of the first line
//!   64  records, packed, each 8-byte aligned; after them, until the
//!       block's end, whatever an earlier use of the block left (blocks
//!       are allocated without zeroing)
//!
//! record header (32 bytes, little-endian)
//!   0   len       u32   header + ranges + zero padding, a multiple of 8
//!                       (a COMMIT record's padding runs to the end of its
//!                       cache line when the block has the room)
//!   4   kind      u8    PART 1, END 2, COMMIT 3, JUMP 4
//!   5   (zero)    u8
//!   6   nranges   u16
//!   8   frame     u32   SQLite's frame number in this WAL generation (1..)
//!   12  pgno      u32   the database page the frame holds
//!   16  ntrunc    u32   COMMIT: the database size in pages after the
//!                       transaction (SQLite's commit flag); else 0
//!   20  crc       u32   COMMIT: CRC-32 of every byte of the transaction's
//!                       records (this field as 0), seeded with the previous
//!                       commit's crc; else 0
//!   24  gen       u64   the log's generation the record was written in
//! then nranges times: off u16, len u16, len bytes  (the changed bytes)
//! ```
//!
//! A frame is one record, or several when it does not fit the room left in
//! a block (PART, ..., END or COMMIT; each applies its ranges on top of the
//! previous). A frame's ranges are the bytes that differ from the page's
//! previous frame in this generation, or from a zeroed page for its first.
//! JUMP ends a block early: the scan goes on at the next block, as it does
//! when fewer than 32 bytes are left. The commit mark is the COMMIT record's
//! checksum: the chain of crcs makes a torn transaction fail it.
//!
//! **Stale records.** Blocks are allocated without zeroing, and the first
//! block is kept across generations, so a block holds records of earlier
//! generations after the current one's. Blocks are freed only after a
//! WAL restart moved the generation up (`log`'s reclaim chain), so
//! every stale record in a block of generation `g` was written in a
//! generation `< g`, and its `gen` field says so: the scan ends at the
//! first record whose `gen` is not the log's, whatever its checksum. No
//! stale record is ever read as valid, by construction rather than by a
//! checksum's odds.

/// Bytes of a block before its first record: the next pointer's line.
pub const BLOCK_HDR: u64 = 64;
/// Bytes of a record header.
pub const REC_HDR: usize = 32;
/// Offset of `len` in a record header.
pub const LEN_OFF: usize = 0;
/// Offset of `kind`.
pub const KIND_OFF: usize = LEN_OFF + 4;
/// Offset of `nranges`.
pub const NRANGES_OFF: usize = KIND_OFF + 2;
/// Offset of `frame`.
pub const FRAME_OFF: usize = NRANGES_OFF + 2;
/// Offset of `pgno`.
pub const PGNO_OFF: usize = FRAME_OFF + 4;
/// Offset of `ntrunc`.
pub const NTRUNC_OFF: usize = PGNO_OFF + 4;
/// Offset of `crc`.
pub const CRC_OFF: usize = NTRUNC_OFF + 4;
/// Offset of `gen`.
pub const GEN_OFF: usize = CRC_OFF + 4;
const _: () = assert!(GEN_OFF + 8 == REC_HDR);
/// Bytes of a range header.
pub const RANGE_HDR: usize = 4;
/// Longest range (its length must fit a u16).
pub const MAX_RANGE: usize = 32 * 1024;
/// Unchanged bytes between two changed runs that are copied rather than
/// starting a new range (a range header costs 4).
const MERGE_GAP: usize = RANGE_HDR;

/// A record's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Part of a frame; more records of it follow.
    Part = 1,
    /// The last record of a frame.
    End = 2,
    /// The last record of a transaction's last frame: the commit mark.
    Commit = 3,
    /// The rest of this block is unused.
    Jump = 4,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Part,
            2 => Kind::End,
            3 => Kind::Commit,
            4 => Kind::Jump,
            _ => return None,
        })
    }
}

/// A decoded record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Bytes of the record.
    pub len: usize,
    /// Its kind.
    pub kind: Kind,
    /// Ranges after the header.
    pub nranges: usize,
    /// SQLite frame number.
    pub frame: u32,
    /// Database page number.
    pub pgno: u32,
    /// Commit flag (database size in pages) on a COMMIT record.
    pub ntrunc: u32,
    /// The commit mark's chained crc on a COMMIT record.
    pub crc: u32,
    /// The log's generation when the record was written.
    pub gen: u64,
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

impl Header {
    /// Decodes a header from at least [`REC_HDR`] bytes, `room` bytes being
    /// left in the block; `None` when it cannot be a record (garbage, a
    /// stale or torn one is caught later by the commit checksum).
    pub fn decode(b: &[u8], room: usize) -> Option<Header> {
        let h = b.get(..REC_HDR)?;
        let len = u32_at(h, LEN_OFF) as usize;
        let kind = Kind::from_u8(h[KIND_OFF])?;
        if len < REC_HDR || !len.is_multiple_of(8) || len > room || h[KIND_OFF + 1] != 0 {
            return None;
        }
        Some(Header {
            len,
            kind,
            nranges: u16_at(h, NRANGES_OFF) as usize,
            frame: u32_at(h, FRAME_OFF),
            pgno: u32_at(h, PGNO_OFF),
            ntrunc: u32_at(h, NTRUNC_OFF),
            crc: u32_at(h, CRC_OFF),
            gen: u64::from_le_bytes(h[GEN_OFF..GEN_OFF + 8].try_into().expect("8 bytes")),
        })
    }

    /// Encodes the header into the first [`REC_HDR`] bytes of `out`.
    pub fn encode(&self, out: &mut [u8]) {
        out[LEN_OFF..LEN_OFF + 4].copy_from_slice(&(self.len as u32).to_le_bytes());
        out[KIND_OFF] = self.kind as u8;
        out[KIND_OFF + 1] = 0;
        out[NRANGES_OFF..NRANGES_OFF + 2].copy_from_slice(&(self.nranges as u16).to_le_bytes());
        out[FRAME_OFF..FRAME_OFF + 4].copy_from_slice(&self.frame.to_le_bytes());
        out[PGNO_OFF..PGNO_OFF + 4].copy_from_slice(&self.pgno.to_le_bytes());
        out[NTRUNC_OFF..NTRUNC_OFF + 4].copy_from_slice(&self.ntrunc.to_le_bytes());
        out[CRC_OFF..CRC_OFF + 4].copy_from_slice(&self.crc.to_le_bytes());
        out[GEN_OFF..GEN_OFF + 8].copy_from_slice(&self.gen.to_le_bytes());
    }

    /// A jump record of generation `gen`.
    pub fn jump(gen: u64) -> Header {
        Header {
            len: REC_HDR,
            kind: Kind::Jump,
            nranges: 0,
            frame: 0,
            pgno: 0,
            ntrunc: 0,
            crc: 0,
            gen,
        }
    }
}

/// Applies a record's ranges (the bytes after its header) to `page`;
/// `false` when they do not parse or fall outside the page.
pub fn apply(body: &[u8], nranges: usize, page: &mut [u8]) -> bool {
    let mut at = 0;
    for _ in 0..nranges {
        let Some(h) = body.get(at..at + RANGE_HDR) else {
            return false;
        };
        let (off, len) = (u16_at(h, 0) as usize, u16_at(h, 2) as usize);
        at += RANGE_HDR;
        let (Some(src), Some(dst)) = (body.get(at..at + len), page.get_mut(off..off + len)) else {
            return false;
        };
        dst.copy_from_slice(src);
        at += len;
    }
    true
}

/// The runs of `new` that differ from `base` (same length), as
/// `(offset, length)`, runs closer than a range header merged, none longer
/// than [`MAX_RANGE`].
pub fn diff(base: &[u8], new: &[u8]) -> Vec<(usize, usize)> {
    debug_assert_eq!(base.len(), new.len());
    let n = new.len();
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    let word = |b: &[u8], i: usize| u64::from_ne_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    while i < n {
        // Skip equal words fast: four at a time, then one.
        if i % 8 == 0 {
            while i + 32 <= n
                && (word(base, i) ^ word(new, i))
                    | (word(base, i + 8) ^ word(new, i + 8))
                    | (word(base, i + 16) ^ word(new, i + 16))
                    | (word(base, i + 24) ^ word(new, i + 24))
                    == 0
            {
                i += 32;
            }
            if i + 8 <= n && word(base, i) == word(new, i) {
                i += 8;
                continue;
            }
            if i >= n {
                break;
            }
        }
        if base[i] == new[i] {
            i += 1;
            continue;
        }
        let start = i;
        while i < n && base[i] != new[i] {
            i += 1;
        }
        match runs.last_mut() {
            Some((s, l)) if start - (*s + *l) <= MERGE_GAP => *l = i - *s,
            _ => runs.push((start, i - start)),
        }
    }
    // Split runs longer than a u16 can say.
    let mut out = Vec::with_capacity(runs.len());
    for (s, l) in runs {
        let mut o = 0;
        while o < l {
            let k = (l - o).min(MAX_RANGE);
            out.push((s + o, k));
            o += k;
        }
    }
    out
}

/// The ranges of a whole page of `len` bytes (whole-page frames).
pub fn whole(len: usize) -> Vec<(usize, usize)> {
    (0..len)
        .step_by(MAX_RANGE)
        .map(|s| (s, MAX_RANGE.min(len - s)))
        .collect()
}

/// Bytes a record of these ranges takes, padded to 8.
pub fn record_len(ranges: &[(usize, usize)]) -> usize {
    let body: usize = ranges.iter().map(|&(_, l)| RANGE_HDR + l).sum();
    (REC_HDR + body).div_ceil(8) * 8
}

/// Appends a record (header with `crc` 0, ranges of `page`, zero padding)
/// to `out`.
pub fn encode_record(out: &mut Vec<u8>, mut h: Header, ranges: &[(usize, usize)], page: &[u8]) {
    h.len = record_len(ranges);
    h.nranges = ranges.len();
    let start = out.len();
    out.resize(start + REC_HDR, 0);
    h.encode(&mut out[start..]);
    for &(off, len) in ranges {
        out.extend_from_slice(&(off as u16).to_le_bytes());
        out.extend_from_slice(&(len as u16).to_le_bytes());
        out.extend_from_slice(&page[off..off + len]);
    }
    out.resize(start + h.len, 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_then_apply_rebuilds_the_page() {
        let base = vec![0u8; 4096];
        let mut new = base.clone();
        new[3] = 1;
        new[5] = 2; // merged with byte 3 (gap 1)
        new[100..110].fill(9);
        new[4000..4096].fill(7);
        let ranges = diff(&base, &new);
        assert_eq!(ranges, vec![(3, 3), (100, 10), (4000, 96)]);
        let mut rec = Vec::new();
        let h = Header {
            kind: Kind::End,
            frame: 1,
            pgno: 2,
            ..Header::jump(1)
        };
        encode_record(&mut rec, h, &ranges, &new);
        assert_eq!(rec.len() % 8, 0);
        let d = Header::decode(&rec, rec.len()).unwrap();
        assert_eq!((d.kind, d.nranges, d.pgno), (Kind::End, 3, 2));
        let mut page = base.clone();
        assert!(apply(&rec[REC_HDR..d.len], d.nranges, &mut page));
        assert_eq!(page, new);
    }

    /// `diff` against the byte-at-a-time definition, on random pages.
    #[test]
    fn diff_is_the_changed_runs_merged() {
        use rand::{Rng, SeedableRng};
        let mut r = rand::rngs::SmallRng::seed_from_u64(5);
        for _ in 0..500 {
            let n = [512, 1024, 4096, 4100][r.gen_range(0..4)];
            let base: Vec<u8> = (0..n).map(|_| r.gen_range(0..3)).collect();
            let mut new = base.clone();
            for _ in 0..r.gen_range(0..6) {
                let at = r.gen_range(0..n);
                let len = r.gen_range(1..=(n - at).min(300));
                r.fill(&mut new[at..at + len]);
            }
            let mut want: Vec<(usize, usize)> = Vec::new();
            for i in (0..n).filter(|&i| base[i] != new[i]) {
                match want.last_mut() {
                    Some((s, l)) if i - (*s + *l) <= MERGE_GAP => *l = i + 1 - *s,
                    _ => want.push((i, 1)),
                }
            }
            assert_eq!(diff(&base, &new), want);
        }
    }

    #[test]
    fn a_whole_changed_page_splits_into_u16_ranges() {
        let base = vec![0u8; 65536];
        let new = vec![1u8; 65536];
        let r = diff(&base, &new);
        assert_eq!(r, vec![(0, MAX_RANGE), (MAX_RANGE, MAX_RANGE)]);
    }

    #[test]
    fn garbage_headers_are_refused() {
        assert!(Header::decode(&[0u8; 32], 1000).is_none());
        let mut b = [0u8; 32];
        Header::jump(7).encode(&mut b);
        assert_eq!(Header::decode(&b, 32).map(|h| h.gen), Some(7));
        assert!(Header::decode(&b, 24).is_none(), "longer than the room");
        let mut bad = b;
        bad[KIND_OFF] = 9;
        assert!(Header::decode(&bad, 100).is_none());
        let mut page = [0u8; 16];
        // A range past the page's end.
        let body = [10u8, 0, 10, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        assert!(!apply(&body, 1, &mut page));
    }
}
