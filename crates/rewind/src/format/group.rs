//! A redo commit group, as it lies in the commit ring (`log/ring.rs`):
//! one 32-byte header, then packed entries, padded to whole 64-byte lines.
//! Drawn byte by byte in `docs/format.md`; the offsets here are the source
//! of truth.
//!
//! ```text
//! header   0   2  magic "RG" (0x4752)
//!          2   2  lag: groups of the lane not yet written back in place
//!                 when it was reserved, itself included (0xFFFF: as many
//!                 or more)
//!          4   4  entry bytes (after the header, a multiple of 8)
//!          8   8  lane sequence number
//!         16   8  global commit number (the order of all lanes' groups)
//!         24   4  entry count
//!         28   4  CRC-32C of bytes 0..28, then of the entry bytes
//! entry    0   8  target offset (bits 0..48) | value length (bits 48..64)
//!          8   …  value, zero-padded to 8 bytes
//! bits     0   8  block offset (bits 0..48) | 0xFFFF / 0xFFFD / 0xFFFE
//!          8   8  block size
//! ```
//!
//! A bits entry (format version 10) is an allocation made by the group's
//! transaction (0xFFFF: zero the block, then set its allocator bitmap bit;
//! 0xFFFD: set the bit only, an allocation not zeroed) or a free (0xFFFE:
//! clear the bit): replay and write-back set or clear the block's bit,
//! never store a bitmap word, since concurrent groups change other bits of
//! the same word. The writer puts the bits entries before the values, so a
//! block is zeroed before the values written into it.
//!
//! A group is valid only when its CRC matches: it is written with
//! non-temporal stores and made durable by one fence, so a crash before
//! that fence leaves a torn group, which the CRC refuses.

use crate::error::Error;

/// Group magic, "RG" little-endian.
pub const MAGIC: u16 = u16::from_le_bytes(*b"RG");
/// Header: magic.
pub const MAGIC_OFF: usize = 0;
/// Header: the group's lag (see [`Head::written_back`]).
pub const LAG_OFF: usize = MAGIC_OFF + 2;
/// Header: bytes of entries after the header.
pub const BYTES_OFF: usize = LAG_OFF + 2;
/// Header: commit sequence number.
pub const CSN_OFF: usize = BYTES_OFF + 4;
/// Header: global commit number.
pub const GCN_OFF: usize = CSN_OFF + 8;
/// Header: entry count.
pub const COUNT_OFF: usize = GCN_OFF + 8;
/// Header: CRC-32C of the header before it and of the entries.
pub const CRC_OFF: usize = COUNT_OFF + 4;
/// Bytes of the header.
pub const HEADER: usize = CRC_OFF + 4;
/// Bytes of an entry's word (target and length).
pub const ENTRY_WORD: usize = 8;
/// Groups are written and placed in whole lines.
pub const LINE: usize = 64;
/// Longest value one entry carries (the three lengths above it mark bits
/// entries).
pub const MAX_VALUE: usize = u16::MAX as usize - 3;
/// Length field of a bits entry that zeroes a block and sets its bit.
const BITS_ZERO_SET: u64 = u16::MAX as u64;
/// Length field of a bits entry that clears a block's bit.
const BITS_CLEAR: u64 = u16::MAX as u64 - 1;
/// Length field of a bits entry that sets a block's bit (not zeroed).
const BITS_SET: u64 = u16::MAX as u64 - 2;
/// Bytes of a bits entry.
pub const BITS_ENTRY: usize = 16;
/// Target offsets fit below this (pools are smaller than 2^48).
const TARGET_BITS: u64 = (1 << 48) - 1;

/// Bytes an entry of `len` value bytes takes.
pub fn entry_size(len: usize) -> usize {
    ENTRY_WORD + len.div_ceil(8) * 8
}

/// Builds one group in a reused buffer: [`begin`](Self::begin), then
/// [`push`](Self::push) per entry, then [`seal`](Self::seal) with the
/// sequence number. The redo write set (`tx/handle.rs`) is kept in one,
/// each write pushed as it comes, so that a commit seals it in place: no
/// copy of the write set into a group at commit.
pub struct Builder {
    /// The header and the entries; the last entry's value is not padded
    /// yet (it may grow: see [`push`](Self::push)).
    buf: Vec<u8>,
    count: u32,
    /// Where the entries [`push`](Self::push) placed start in `buf`: after
    /// the header and the bits entries [`insert_bits`](Self::insert_bits)
    /// put before them.
    base: usize,
    /// The last entry's target, and where its value lies in `buf` (from
    /// `base`) while it is a value entry that a value may join. (No list
    /// of the entries: [`values`](Self::values) reads them from `buf`.)
    last: Option<(u64, usize, usize)>,
    /// The bits entries.
    bits: Vec<Bits>,
}

impl Default for Builder {
    /// A builder begun.
    fn default() -> Builder {
        let mut b = Builder {
            buf: Vec::new(),
            count: 0,
            base: HEADER,
            last: None,
            bits: Vec::new(),
        };
        b.begin();
        b
    }
}

impl Builder {
    /// Starts a group.
    pub fn begin(&mut self) {
        self.buf.clear();
        self.buf.resize(HEADER, 0);
        self.count = 0;
        self.base = HEADER;
        self.last = None;
        self.bits.clear();
    }

    /// Entries pushed since [`begin`](Self::begin) (a value joined to the
    /// one before it not counted).
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Appends a bits entry (an allocation or a free of the block). Commits
    /// insert theirs before the values ([`insert_bits`](Self::insert_bits));
    /// tests build groups with bits between values, a layout the decoder
    /// reads all the same.
    #[cfg(test)]
    pub fn push_bits(&mut self, b: Bits) {
        self.pad();
        self.buf.extend_from_slice(&bits_entry(b));
        self.bits.push(b);
        self.count += 1;
        self.last = None;
    }

    /// Puts bits entries before every entry pushed so far (a block is
    /// zeroed before the values written into it); the values keep their
    /// places as [`value`](Self::value) finds them.
    pub fn insert_bits(&mut self, bits: &[Bits]) {
        if bits.is_empty() {
            return;
        }
        let at = self.base;
        let new: Vec<u8> = bits.iter().flat_map(|&b| bits_entry(b)).collect();
        self.buf.splice(at..at, new);
        self.base += BITS_ENTRY * bits.len();
        self.bits.extend_from_slice(bits);
        self.count += bits.len() as u32;
    }

    /// The bits entries, in order.
    pub fn bits(&self) -> impl Iterator<Item = Bits> + '_ {
        self.bits.iter().copied()
    }

    /// Appends an entry: `value` goes to `target`. A value that starts
    /// where the last entry's ends (and fits beside it in one entry) joins
    /// that entry instead: the bytes replay the same, in the same order.
    /// Returns where the value lies, for [`value`](Self::value).
    #[inline(always)]
    pub fn push(&mut self, target: u64, value: &[u8]) -> usize {
        debug_assert!(value.len() <= MAX_VALUE && target <= TARGET_BITS);
        if let Some((t, at, len)) = &mut self.last {
            if *t + *len as u64 == target && *len + value.len() <= MAX_VALUE {
                let joined = *at + *len;
                *len += value.len();
                let word = *t | (*len as u64) << 48;
                let w = self.base + *at - ENTRY_WORD;
                self.buf[w..w + ENTRY_WORD].copy_from_slice(&word.to_le_bytes());
                self.buf.extend_from_slice(value);
                return joined;
            }
        }
        self.pad();
        let word = (target | (value.len() as u64) << 48).to_le_bytes();
        let at = self.buf.len() + ENTRY_WORD - self.base;
        self.last = Some((target, at, value.len()));
        match <&[u8; 8]>::try_from(value) {
            // A word (most writes): the entry in one copy of known size.
            Ok(w) => {
                let mut e = [0; ENTRY_WORD + 8];
                e[..ENTRY_WORD].copy_from_slice(&word);
                e[ENTRY_WORD..].copy_from_slice(w);
                self.buf.extend_from_slice(&e);
            }
            Err(_) => {
                self.buf.extend_from_slice(&word);
                self.buf.extend_from_slice(value);
            }
        }
        self.count += 1;
        at
    }

    /// The `len` value bytes at `at` ([`push`](Self::push)'s place).
    #[inline]
    pub fn value(&self, at: usize, len: usize) -> &[u8] {
        &self.buf[self.base + at..self.base + at + len]
    }

    /// The same, to change (a later write of the same bytes).
    #[inline]
    pub fn value_mut(&mut self, at: usize, len: usize) -> &mut [u8] {
        &mut self.buf[self.base + at..self.base + at + len]
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

    /// The value entries, in order: (target, value), read from the
    /// entries as laid out (bits entries skipped).
    pub fn values(&self) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        // The bits entries inserted before `base` are not read; those
        // pushed among the values (tests) are skipped. `left` counts the
        // entries still to read: the line's padding after `seal` is none.
        let mut left = self.count - (self.base - HEADER) as u32 / BITS_ENTRY as u32;
        let mut rest = &self.buf[self.base..];
        std::iter::from_fn(move || loop {
            left = left.checked_sub(1)?;
            let (word, after) = rest.split_first_chunk::<ENTRY_WORD>()?;
            let word = u64::from_le_bytes(*word);
            let (target, len) = (word & TARGET_BITS, (word >> 48) as usize);
            if len as u64 >= BITS_SET {
                rest = &after[BITS_ENTRY - ENTRY_WORD..];
                continue;
            }
            let value = &after[..len];
            // (The last value may be unpadded until `seal`.)
            rest = after.get(len.div_ceil(8) * 8..).unwrap_or(&[]);
            return Some((target, value));
        })
    }

    /// Fills in the header with lane sequence number `csn`, global commit
    /// number `gcn`, its `lag` (groups of the lane not yet written back in
    /// place when it was reserved, itself included: see
    /// [`Head::written_back`]) and the CRC, pads to whole lines, and
    /// returns the bytes to write.
    pub fn seal(&mut self, csn: u64, gcn: u64, lag: u64) -> &[u8] {
        self.pad();
        let bytes = (self.buf.len() - HEADER) as u32;
        let lag = u16::try_from(lag).unwrap_or(u16::MAX);
        self.buf[MAGIC_OFF..MAGIC_OFF + 2].copy_from_slice(&MAGIC.to_le_bytes());
        self.buf[LAG_OFF..LAG_OFF + 2].copy_from_slice(&lag.to_le_bytes());
        self.buf[BYTES_OFF..BYTES_OFF + 4].copy_from_slice(&bytes.to_le_bytes());
        self.buf[CSN_OFF..CSN_OFF + 8].copy_from_slice(&csn.to_le_bytes());
        self.buf[GCN_OFF..GCN_OFF + 8].copy_from_slice(&gcn.to_le_bytes());
        self.buf[COUNT_OFF..COUNT_OFF + 4].copy_from_slice(&self.count.to_le_bytes());
        let crc = crc(&self.buf[..CRC_OFF], &self.buf[HEADER..]);
        self.buf[CRC_OFF..CRC_OFF + 4].copy_from_slice(&crc.to_le_bytes());
        let size = self.size();
        self.buf.resize(size, 0);
        &self.buf
    }
}

/// A bits entry's bytes.
fn bits_entry(b: Bits) -> [u8; BITS_ENTRY] {
    debug_assert!(b.off <= TARGET_BITS);
    let code = match (b.set, b.zero) {
        (true, true) => BITS_ZERO_SET,
        (true, false) => BITS_SET,
        (false, _) => BITS_CLEAR,
    };
    let mut e = [0; BITS_ENTRY];
    e[..8].copy_from_slice(&(b.off | code << 48).to_le_bytes());
    e[8..].copy_from_slice(&b.size.to_le_bytes());
    e
}

/// The group's checksum: CRC-32C of the header's first bytes, then of the
/// entries (`format/crc.rs`).
fn crc(head: &[u8], entries: &[u8]) -> u32 {
    super::crc::of_two(head, entries)
}

/// A group's header, read before its entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// Lane sequence number.
    pub csn: u64,
    /// Groups of the lane not yet written back when it was reserved,
    /// itself included (`u16::MAX`: as many or more).
    pub lag: u16,
    /// Global commit number.
    pub gcn: u64,
    /// Entries.
    pub count: u32,
    /// Bytes of entries.
    pub bytes: u32,
    crc: u32,
}

impl Head {
    /// Decodes a header; `None` without the magic (no group here).
    pub fn decode(h: &[u8; HEADER]) -> Option<Head> {
        let u16_at = |o: usize| u16::from_le_bytes(h[o..o + 2].try_into().expect("2"));
        let u32_at = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().expect("4"));
        let u64_at = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().expect("8"));
        (u16_at(MAGIC_OFF) == MAGIC).then(|| Head {
            csn: u64_at(CSN_OFF),
            lag: u16_at(LAG_OFF),
            gcn: u64_at(GCN_OFF),
            count: u32_at(COUNT_OFF),
            bytes: u32_at(BYTES_OFF),
            crc: u32_at(CRC_OFF),
        })
    }

    /// Every group of the lane numbered up to this was written back in
    /// place before this one was reserved, so its own group had been whole
    /// and durable in the ring (a group is written back only after its
    /// fence). Recovery tells damage from a crash by it: a crash tears only
    /// groups whose fence had not returned, and a group reserved while
    /// such a group was in flight names a number below it.
    pub fn written_back(&self) -> u64 {
        match self.lag {
            u16::MAX => 0,
            lag => self.csn.saturating_sub(lag as u64),
        }
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

/// A bits entry: an allocation or a free of a small block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bits {
    /// The block's offset.
    pub off: u64,
    /// The block's size.
    pub size: u64,
    /// Set its bitmap bit (an allocation), or clear it (a free).
    pub set: bool,
    /// An allocation whose block is zeroed first.
    pub zero: bool,
}

/// One entry of a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry<'a> {
    /// `value` goes to `target`.
    Value(u64, &'a [u8]),
    /// An allocation or a free.
    Bits(Bits),
}

/// The entries of a verified group, in order. A malformed one (a CRC that
/// matches bytes no writer produced) is `LogCorrupt` at `at`.
pub fn entries(bytes: &[u8], count: u32, at: u64) -> Result<Vec<Entry<'_>>, Error> {
    let bad = |reason| Error::LogCorrupt { offset: at, reason };
    let mut out = Vec::with_capacity(count as usize);
    let mut i = 0;
    for _ in 0..count {
        let word = bytes
            .get(i..i + ENTRY_WORD)
            .ok_or(bad("commit group entry runs past the group"))?;
        let word = u64::from_le_bytes(word.try_into().expect("8"));
        let (target, len) = (word & TARGET_BITS, (word >> 48) as usize);
        if len as u64 >= BITS_SET {
            let size = bytes
                .get(i + ENTRY_WORD..i + BITS_ENTRY)
                .ok_or(bad("commit group entry runs past the group"))?;
            let size = u64::from_le_bytes(size.try_into().expect("8"));
            let code = len as u64;
            out.push(Entry::Bits(Bits {
                off: target,
                size,
                set: code != BITS_CLEAR,
                zero: code == BITS_ZERO_SET,
            }));
            i += BITS_ENTRY;
            continue;
        }
        let value = bytes
            .get(i + ENTRY_WORD..i + ENTRY_WORD + len)
            .ok_or(bad("commit group entry runs past the group"))?;
        out.push(Entry::Value(target, value));
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
        b.begin();
        b.push(1 << 20, &5u64.to_le_bytes());
        b.push((1 << 20) + 4096, &[1, 2, 3]);
        let bytes = b.seal(42, 7, 1).to_vec();
        assert_eq!(bytes.len(), 64, "32 + 16 + 16 bytes: one line");
        let h: [u8; HEADER] = bytes[..HEADER].try_into().unwrap();
        let head = Head::decode(&h).unwrap();
        assert_eq!((head.csn, head.gcn, head.count), (42, 7, 2));
        assert_eq!((head.lag, head.written_back()), (1, 41));
        let ents = &bytes[HEADER..HEADER + head.bytes as usize];
        assert!(head.verify(&h, ents));
        let e = entries(ents, head.count, 0).unwrap();
        assert_eq!(e[0], Entry::Value(1 << 20, &5u64.to_le_bytes()[..]));
        assert_eq!(e[1], Entry::Value((1 << 20) + 4096, &[1u8, 2, 3][..]));
        let mut torn = ents.to_vec();
        torn[9] ^= 1;
        assert!(!head.verify(&h, &torn));
    }

    #[test]
    fn bits_entries_round_trip_and_no_value_joins_across_them() {
        let mut b = Builder::default();
        b.begin();
        b.push(1 << 20, &[1; 8]);
        let alloc = Bits {
            off: 1 << 21,
            size: 1024,
            set: true,
            zero: true,
        };
        let free = Bits {
            off: 1 << 22,
            size: 64,
            set: false,
            zero: false,
        };
        let unzeroed = Bits {
            off: 1 << 23,
            size: 128,
            set: true,
            zero: false,
        };
        b.push_bits(alloc);
        b.push((1 << 20) + 8, &[2; 8]);
        b.push_bits(free);
        b.push_bits(unzeroed);
        // A lag past the field's range claims nothing written back.
        let bytes = b.seal(9, 3, 1 << 20).to_vec();
        let h: [u8; HEADER] = bytes[..HEADER].try_into().unwrap();
        let head = Head::decode(&h).unwrap();
        assert_eq!(
            head.count, 5,
            "the value after a bits entry is one of its own"
        );
        assert_eq!((head.lag, head.written_back()), (u16::MAX, 0));
        let ents = &bytes[HEADER..HEADER + head.bytes as usize];
        assert!(head.verify(&h, ents));
        let e = entries(ents, head.count, 0).unwrap();
        assert_eq!(
            e,
            vec![
                Entry::Value(1 << 20, &[1; 8][..]),
                Entry::Bits(alloc),
                Entry::Value((1 << 20) + 8, &[2; 8][..]),
                Entry::Bits(free),
                Entry::Bits(unzeroed),
            ]
        );
        assert_eq!(b.bits().count(), 3);
        assert_eq!(b.values().count(), 2);
    }

    #[test]
    fn bits_inserted_after_the_values_go_before_them_and_the_values_stay_found() {
        let mut b = Builder::default();
        let a0 = b.push(1 << 20, &[1; 8]);
        let a1 = b.push((1 << 20) + 8, &[2; 3]); // joins the first
        let a2 = b.push(1 << 21, &[3; 8]);
        let alloc = Bits {
            off: 1 << 22,
            size: 256,
            set: true,
            zero: true,
        };
        b.insert_bits(&[alloc]);
        b.value_mut(a2, 8).copy_from_slice(&[4; 8]);
        assert_eq!(b.value(a0, 8), &[1; 8]);
        assert_eq!(b.value(a1, 3), &[2; 3]);
        let bytes = b.seal(11, 5, 1).to_vec();
        let h: [u8; HEADER] = bytes[..HEADER].try_into().unwrap();
        let head = Head::decode(&h).unwrap();
        assert_eq!((head.csn, head.gcn, head.count), (11, 5, 3));
        let ents = &bytes[HEADER..HEADER + head.bytes as usize];
        assert!(head.verify(&h, ents));
        let joined: Vec<u8> = [[1u8; 8].as_slice(), &[2; 3]].concat();
        assert_eq!(
            entries(ents, head.count, 0).unwrap(),
            vec![
                Entry::Bits(alloc),
                Entry::Value(1 << 20, &joined[..]),
                Entry::Value(1 << 21, &[4; 8][..]),
            ]
        );
        let values: Vec<_> = b.values().collect();
        assert_eq!(
            values,
            vec![(1 << 20, &joined[..]), (1 << 21, &[4u8; 8][..])]
        );
    }

    #[test]
    fn k_words_take_the_floor_in_lines() {
        for (k, lines) in [(1, 1), (8, 3), (64, 17)] {
            let mut b = Builder::default();
            b.begin();
            for i in 0..k {
                b.push(4096 * i, &[0; 8]);
            }
            assert_eq!(b.size() / LINE, lines, "K = {k}");
        }
    }
}
