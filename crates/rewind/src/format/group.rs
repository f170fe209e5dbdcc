//! A redo commit group, as it lies in the commit ring (`log/ring.rs`):
//! one 32-byte header, then packed entries, padded to whole 64-byte lines.
//! Drawn byte by byte in `docs/format.md`; the offsets here are the source
//! of truth.
//!
//! ```text
//! header   0   4  magic "RGRP" (0x50524752)
//!          4   4  entry bytes (after the header, a multiple of 8)
//!          8   8  commit sequence number
//!         16   8  transaction id
//!         24   4  entry count
//!         28   4  CRC-32C of bytes 0..28, then of the entry bytes
//! entry    0   8  target offset (bits 0..48) | value length (bits 48..64)
//!          8   …  value, zero-padded to 8 bytes
//! ```
//!
//! A group is valid only when its CRC matches: it is written with
//! non-temporal stores and made durable by one fence, so a crash before
//! that fence leaves a torn group, which the CRC refuses.

use crate::error::Error;

/// Group magic, "RGRP" little-endian.
pub const MAGIC: u32 = u32::from_le_bytes(*b"RGRP");
/// Header: magic.
pub const MAGIC_OFF: usize = 0;
/// Header: bytes of entries after the header.
pub const BYTES_OFF: usize = MAGIC_OFF + 4;
/// Header: commit sequence number.
pub const CSN_OFF: usize = BYTES_OFF + 4;
/// Header: transaction id.
pub const TX_OFF: usize = CSN_OFF + 8;
/// Header: entry count.
pub const COUNT_OFF: usize = TX_OFF + 8;
/// Header: CRC-32C of the header before it and of the entries.
pub const CRC_OFF: usize = COUNT_OFF + 4;
/// Bytes of the header.
pub const HEADER: usize = CRC_OFF + 4;
/// Bytes of an entry's word (target and length).
pub const ENTRY_WORD: usize = 8;
/// Groups are written and placed in whole lines.
pub const LINE: usize = 64;
/// Longest value one entry carries.
pub const MAX_VALUE: usize = u16::MAX as usize;
/// Target offsets fit below this (pools are smaller than 2^48).
const TARGET_BITS: u64 = (1 << 48) - 1;

/// Bytes an entry of `len` value bytes takes.
pub fn entry_size(len: usize) -> usize {
    ENTRY_WORD + len.div_ceil(8) * 8
}

/// Builds one group in a reused buffer: [`begin`](Self::begin), then
/// [`push`](Self::push) per entry, then [`seal`](Self::seal) with the
/// sequence number.
#[derive(Default)]
pub struct Builder {
    /// The header and the entries; the last entry's value is not padded
    /// yet (it may grow: see [`push`](Self::push)).
    buf: Vec<u8>,
    count: u32,
    /// Each entry's target, and where its value lies in `buf`.
    values: Vec<(u64, usize, usize)>,
}

impl Builder {
    /// Starts a group of transaction `tx`.
    pub fn begin(&mut self, tx: u64) {
        self.buf.clear();
        self.buf.resize(HEADER, 0);
        self.buf[TX_OFF..TX_OFF + 8].copy_from_slice(&tx.to_le_bytes());
        self.count = 0;
        self.values.clear();
    }

    /// Appends an entry: `value` goes to `target`. A value that starts
    /// where the last entry's ends (and fits beside it in one entry) joins
    /// that entry instead: the bytes replay the same, in the same order.
    pub fn push(&mut self, target: u64, value: &[u8]) {
        debug_assert!(value.len() <= MAX_VALUE && target <= TARGET_BITS);
        if let Some((t, at, len)) = self.values.last_mut() {
            if *t + *len as u64 == target && *len + value.len() <= MAX_VALUE {
                *len += value.len();
                let word = *t | (*len as u64) << 48;
                let w = *at - ENTRY_WORD;
                self.buf[w..w + ENTRY_WORD].copy_from_slice(&word.to_le_bytes());
                self.buf.extend_from_slice(value);
                return;
            }
        }
        self.pad();
        let word = target | (value.len() as u64) << 48;
        self.buf.extend_from_slice(&word.to_le_bytes());
        self.values.push((target, self.buf.len(), value.len()));
        match <&[u8; 8]>::try_from(value) {
            // A word (most writes): a copy of known size, no call.
            Ok(w) => self.buf.extend_from_slice(w),
            Err(_) => self.buf.extend_from_slice(value),
        }
        self.count += 1;
    }

    /// Pads the last entry's value to 8 bytes.
    #[inline]
    fn pad(&mut self) {
        let len = self.buf.len();
        if !len.is_multiple_of(8) {
            self.buf.resize(len.div_ceil(8) * 8, 0);
        }
    }

    /// The size the group takes in the ring (whole lines).
    pub fn size(&self) -> usize {
        self.buf.len().div_ceil(LINE) * LINE
    }

    /// The entries, in order: (target, value).
    pub fn values(&self) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        self.values
            .iter()
            .map(|&(t, at, len)| (t, &self.buf[at..at + len]))
    }

    /// Fills in the header with sequence number `csn` and the CRC, pads to
    /// whole lines, and returns the bytes to write.
    pub fn seal(&mut self, csn: u64) -> &[u8] {
        self.pad();
        let bytes = (self.buf.len() - HEADER) as u32;
        self.buf[MAGIC_OFF..MAGIC_OFF + 4].copy_from_slice(&MAGIC.to_le_bytes());
        self.buf[BYTES_OFF..BYTES_OFF + 4].copy_from_slice(&bytes.to_le_bytes());
        self.buf[CSN_OFF..CSN_OFF + 8].copy_from_slice(&csn.to_le_bytes());
        self.buf[COUNT_OFF..COUNT_OFF + 4].copy_from_slice(&self.count.to_le_bytes());
        let crc = crc(&self.buf[..CRC_OFF], &self.buf[HEADER..]);
        self.buf[CRC_OFF..CRC_OFF + 4].copy_from_slice(&crc.to_le_bytes());
        let size = self.size();
        self.buf.resize(size, 0);
        &self.buf
    }
}

/// The group's checksum: CRC-32C of the header's first bytes, then of the
/// entries (`format/crc.rs`).
fn crc(head: &[u8], entries: &[u8]) -> u32 {
    super::crc::update(super::crc::update(0, head), entries)
}

/// A group's header, read before its entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// Commit sequence number.
    pub csn: u64,
    /// Transaction id.
    pub tx: u64,
    /// Entries.
    pub count: u32,
    /// Bytes of entries.
    pub bytes: u32,
    crc: u32,
}

impl Head {
    /// Decodes a header; `None` without the magic (no group here).
    pub fn decode(h: &[u8; HEADER]) -> Option<Head> {
        let u32_at = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().expect("4"));
        let u64_at = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().expect("8"));
        (u32_at(MAGIC_OFF) == MAGIC).then(|| Head {
            csn: u64_at(CSN_OFF),
            tx: u64_at(TX_OFF),
            count: u32_at(COUNT_OFF),
            bytes: u32_at(BYTES_OFF),
            crc: u32_at(CRC_OFF),
        })
    }

    /// Bytes the whole group takes in the ring (whole lines).
    pub fn size(&self) -> u64 {
        (HEADER as u64 + self.bytes as u64).div_ceil(LINE as u64) * LINE as u64
    }

    /// Whether `entries` (the bytes after the header) match the CRC.
    pub fn verify(&self, header: &[u8; HEADER], entries: &[u8]) -> bool {
        entries.len() == self.bytes as usize && crc(&header[..CRC_OFF], entries) == self.crc
    }
}

/// The entries of a verified group, in order: (target, value). A
/// malformed one (a CRC that matches bytes no writer produced) is
/// `LogCorrupt` at `at`.
pub fn entries(bytes: &[u8], count: u32, at: u64) -> Result<Vec<(u64, &[u8])>, Error> {
    let bad = |reason| Error::LogCorrupt { offset: at, reason };
    let mut out = Vec::with_capacity(count as usize);
    let mut i = 0;
    for _ in 0..count {
        let word = bytes
            .get(i..i + ENTRY_WORD)
            .ok_or(bad("commit group entry runs past the group"))?;
        let word = u64::from_le_bytes(word.try_into().expect("8"));
        let (target, len) = (word & TARGET_BITS, (word >> 48) as usize);
        let value = bytes
            .get(i + ENTRY_WORD..i + ENTRY_WORD + len)
            .ok_or(bad("commit group entry runs past the group"))?;
        out.push((target, value));
        i += entry_size(len);
    }
    if i != bytes.len() {
        return Err(bad("commit group length does not match its entries"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_round_trips_and_a_flipped_byte_fails() {
        let mut b = Builder::default();
        b.begin(7);
        b.push(1 << 20, &5u64.to_le_bytes());
        b.push((1 << 20) + 4096, &[1, 2, 3]);
        let bytes = b.seal(42).to_vec();
        assert_eq!(bytes.len(), 64, "32 + 16 + 16 bytes: one line");
        let h: [u8; HEADER] = bytes[..HEADER].try_into().unwrap();
        let head = Head::decode(&h).unwrap();
        assert_eq!((head.csn, head.tx, head.count), (42, 7, 2));
        let ents = &bytes[HEADER..HEADER + head.bytes as usize];
        assert!(head.verify(&h, ents));
        let e = entries(ents, head.count, 0).unwrap();
        assert_eq!(e[0], (1 << 20, &5u64.to_le_bytes()[..]));
        assert_eq!(e[1], ((1 << 20) + 4096, &[1u8, 2, 3][..]));
        let mut torn = ents.to_vec();
        torn[9] ^= 1;
        assert!(!head.verify(&h, &torn));
    }

    #[test]
    fn k_words_take_the_floor_in_lines() {
        for (k, lines) in [(1, 1), (8, 3), (64, 17)] {
            let mut b = Builder::default();
            b.begin(1);
            for i in 0..k {
                b.push(4096 * i, &[0; 8]);
            }
            assert_eq!(b.size() / LINE, lines, "K = {k}");
        }
    }
}
