//! Log records (REWIND §4.1): physical records with old and new bytes.
//!
//! ```text
//! off  size  field
//!   0     8  lsn (record id, increasing in log order)
//!   8     8  transaction id (0: CHECKPOINT)
//!  16     1  kind (1 UPDATE, 2 CLR, 3 END, 4 DELETE, 5 ALLOC, 6 CHECKPOINT, 7 ROLLBACK,
//!              8 TREE: a two-layer log's tree operation, 9 REDO: a redo
//!              policy's write, new bytes only)
//!  17     1  flags (CLR: what it compensates; END: 1 committed, 0 aborted;
//!              UPDATE, REDO: 0x80 in the commit group)
//!  18     2  len: payload length of one value (at most 256)
//!  20     4  CRC-32 of bytes 0..20, 24..48 and the payload
//!  24     8  target offset in the pool
//!  32     8  aux: CLR undo-next lsn; ALLOC/DELETE size; CHECKPOINT bound lsn;
//!              END: records in the commit group; TREE: records in the operation
//!  40     8  prev: lsn of the transaction's previous record (0: its first)
//!  48     …  payload: UPDATE old[len] new[len]; CLR, REDO value[len]; TREE (word, value)
//!              pairs; each padded to 8
//! ```
//!
//! As in ARIES, a transaction's records form a chain through `prev`, and a
//! CLR's undo-next (`aux`) is the `prev` of the record it compensates: the
//! next record a rollback still has to undo. A rollback, partial or whole,
//! and recovery follow these chains; a CLR is never undone.

use crate::error::Error;

/// Size of the fixed record header.
pub const HEADER: usize = 48;

/// Record kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// A physical write: old and new bytes.
    Update = 1,
    /// Compensation: the undo of one record, logged before it is applied.
    Clr = 2,
    /// The transaction finished (committed or rolled back).
    End = 3,
    /// A free, applied at once and undone by re-marking the block allocated.
    Delete = 4,
    /// An allocation, undone by marking the block free.
    Alloc = 5,
    /// Records of transactions that ended at or before `aux` are in place.
    Checkpoint = 6,
    /// The transaction started rolling back.
    Rollback = 7,
    /// A two-layer log's tree operation: (word, new value) pairs; `tx` is
    /// the operation's id, `aux` how many records it has.
    Tree = 8,
    /// A committed write of the redo policy: the new bytes only.
    Redo = 9,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Update,
            2 => Kind::Clr,
            3 => Kind::End,
            4 => Kind::Delete,
            5 => Kind::Alloc,
            6 => Kind::Checkpoint,
            7 => Kind::Rollback,
            8 => Kind::Tree,
            9 => Kind::Redo,
            _ => return None,
        })
    }

    /// Name used by `dump-log`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Update => "UPDATE",
            Kind::Clr => "CLR",
            Kind::End => "END",
            Kind::Delete => "DELETE",
            Kind::Alloc => "ALLOC",
            Kind::Checkpoint => "CHECKPOINT",
            Kind::Rollback => "ROLLBACK",
            Kind::Tree => "TREE",
            Kind::Redo => "REDO",
        }
    }
}

/// CLR flag: what the compensation does when (re)applied.
pub mod clr {
    /// Restores bytes (undo of UPDATE).
    pub const BYTES: u8 = 0;
    /// Marks a block free (undo of ALLOC).
    pub const FREE: u8 = 1;
    /// Marks a block allocated (undo of DELETE).
    pub const ALLOCATED: u8 = 2;
    /// Compensates nothing: ends a nested top action, so a rollback skips
    /// from here to the record before the action began (its undo-next).
    pub const NONE: u8 = 3;
}

/// END flag: the transaction committed.
pub const END_COMMITTED: u8 = 1;

/// END flag, with [`END_COMMITTED`]: a one-fence commit (NVWAL §4.3). The
/// commit group (its REDO records and this END) went out under a single
/// fence, so a crash may have left any part of it; END's payload is its
/// commit sequence number and a checksum of the group's records
/// ([`group_checksum`]), and the group is committed only when all `aux`
/// records before END are found and the checksum matches.
pub const END_ONE_FENCE: u8 = 2;

/// Bytes of a one-fence END's payload: commit sequence number, checksum.
pub const ONE_FENCE_PAYLOAD: usize = 16;

/// The checksum a one-fence END carries over its group: CRC-32 of each
/// record's lsn and stored CRC (which covers the whole record), in lsn
/// order.
pub fn group_checksum(records: impl IntoIterator<Item = (u64, u32)>) -> u64 {
    let mut h = GroupChecksum::default();
    for (lsn, crc) in records {
        h.add(lsn, crc);
    }
    h.value()
}

/// [`group_checksum`] built record by record, as the log encodes them.
#[derive(Clone, Default)]
pub struct GroupChecksum(crc32fast::Hasher);

impl GroupChecksum {
    /// Adds the next record of the group: its lsn and stored CRC.
    pub fn add(&mut self, lsn: u64, crc: u32) {
        self.0.update(&lsn.to_le_bytes());
        self.0.update(&crc.to_le_bytes());
    }

    /// The checksum of the records added so far.
    pub fn value(&self) -> u64 {
        self.0.clone().finalize() as u64
    }
}

/// UPDATE flag: the record travelled in its transaction's commit group
/// (Batch), so its in-place store may follow the commit point; END's aux
/// holds how many such records the group had.
pub const IN_COMMIT_GROUP: u8 = 0x80;

/// A record to append (lsn assigned by the log).
#[derive(Clone, Copy, Debug)]
pub struct Draft<'a> {
    /// Transaction id.
    pub tx: u64,
    /// Kind.
    pub kind: Kind,
    /// Flags.
    pub flags: u8,
    /// Target offset.
    pub target: u64,
    /// Aux word.
    pub aux: u64,
    /// Old bytes (UPDATE only).
    pub old: &'a [u8],
    /// New bytes (UPDATE), or the value a CLR restores.
    pub new: &'a [u8],
}

/// A decoded record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Record id.
    pub lsn: u64,
    /// Transaction id.
    pub tx: u64,
    /// Kind.
    pub kind: Kind,
    /// Flags.
    pub flags: u8,
    /// Target offset.
    pub target: u64,
    /// Aux word (a CLR's undo-next).
    pub aux: u64,
    /// The transaction's previous record (0: none).
    pub prev: u64,
    /// Old bytes (UPDATE).
    pub old: Vec<u8>,
    /// New bytes (UPDATE) or the CLR's value.
    pub new: Vec<u8>,
    /// Its stored CRC-32 (checked when decoded).
    pub crc: u32,
}

fn pad8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

impl<'a> Draft<'a> {
    /// A record with no target and no payload (ROLLBACK, or an END of a
    /// rolled-back transaction).
    pub fn bare(tx: u64, kind: Kind) -> Draft<'static> {
        Draft {
            tx,
            kind,
            flags: 0,
            target: 0,
            aux: 0,
            old: &[],
            new: &[],
        }
    }

    /// An UPDATE of `new.len()` bytes at `target`, whose bytes were `old`.
    pub fn update(tx: u64, target: u64, old: &'a [u8], new: &'a [u8]) -> Draft<'a> {
        Draft {
            target,
            old,
            new,
            ..Draft::bare(tx, Kind::Update)
        }
    }

    /// A REDO record: the redo policy's write of `new` at `target`, in its
    /// transaction's commit group.
    pub fn redo(tx: u64, target: u64, new: &'a [u8]) -> Draft<'a> {
        Draft {
            target,
            new,
            flags: IN_COMMIT_GROUP,
            ..Draft::bare(tx, Kind::Redo)
        }
    }

    /// An END: `committed`, with the number of records that travelled in
    /// the commit group (Batch; 0 otherwise).
    pub fn end(tx: u64, committed: bool, group: u64) -> Draft<'static> {
        Draft {
            flags: if committed { END_COMMITTED } else { 0 },
            aux: group,
            ..Draft::bare(tx, Kind::End)
        }
    }

    /// The END of a one-fence commit of `group` records, whose payload is
    /// `payload`: the commit sequence number then the group's checksum,
    /// little-endian ([`END_ONE_FENCE`]).
    pub fn end_one_fence(tx: u64, group: u64, payload: &'a [u8; ONE_FENCE_PAYLOAD]) -> Draft<'a> {
        Draft {
            flags: END_COMMITTED | END_ONE_FENCE,
            aux: group,
            new: payload,
            ..Draft::bare(tx, Kind::End)
        }
    }

    /// An ALLOC or DELETE of the block at `off` of `size` bytes.
    pub fn block(tx: u64, kind: Kind, off: u64, size: u64) -> Draft<'static> {
        debug_assert!(matches!(kind, Kind::Alloc | Kind::Delete));
        Draft {
            target: off,
            aux: size,
            ..Draft::bare(tx, kind)
        }
    }

    /// A CLR compensating a record whose `prev` was `undo_next`: `what` (a
    /// [`clr`] action) with `value` (the old bytes, or the block size) at
    /// `target`.
    pub fn clr(tx: u64, what: u8, target: u64, undo_next: u64, value: &'a [u8]) -> Draft<'a> {
        Draft {
            flags: what,
            target,
            aux: undo_next,
            new: value,
            ..Draft::bare(tx, Kind::Clr)
        }
    }

    /// The CLR that ends a nested top action begun after the record
    /// `undo_next`: a rollback skips the action's records.
    pub fn nta_end(tx: u64, undo_next: u64) -> Draft<'static> {
        Draft {
            flags: clr::NONE,
            aux: undo_next,
            ..Draft::bare(tx, Kind::Clr)
        }
    }

    /// A CHECKPOINT: transactions that ended at or before `bound` are
    /// durable in place.
    pub fn checkpoint(bound: u64) -> Draft<'static> {
        Draft {
            aux: bound,
            ..Draft::bare(0, Kind::Checkpoint)
        }
    }

    /// Encoded size in bytes.
    pub fn size(&self) -> usize {
        HEADER + pad8(self.old.len()) + pad8(self.new.len())
    }

    /// Encodes into `out` (cleared first) with the given lsn and the lsn
    /// of the transaction's previous record.
    pub fn encode(&self, lsn: u64, prev: u64, out: &mut Vec<u8>) {
        debug_assert!(self.old.is_empty() || self.old.len() == self.new.len());
        out.clear();
        out.resize(self.size(), 0);
        out[0..8].copy_from_slice(&lsn.to_le_bytes());
        out[8..16].copy_from_slice(&self.tx.to_le_bytes());
        out[16] = self.kind as u8;
        out[17] = self.flags;
        debug_assert!(self.new.len() <= u16::MAX as usize);
        out[18..20].copy_from_slice(&(self.new.len() as u16).to_le_bytes());
        out[24..32].copy_from_slice(&self.target.to_le_bytes());
        out[32..40].copy_from_slice(&self.aux.to_le_bytes());
        out[40..48].copy_from_slice(&prev.to_le_bytes());
        let mut p = HEADER;
        if !self.old.is_empty() {
            out[p..p + self.old.len()].copy_from_slice(self.old);
            p += pad8(self.old.len());
        }
        out[p..p + self.new.len()].copy_from_slice(self.new);
        let crc = checksum(out);
        out[CRC..CRC + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

/// The CRC-32 an encoded record stores.
pub fn stored_crc(encoded: &[u8]) -> u32 {
    u32::from_le_bytes(encoded[CRC..CRC + 4].try_into().expect("4"))
}

/// Offset of the CRC-32 in the header.
const CRC: usize = 20;

/// CRC-32 of a whole encoded record, its own 4 bytes left out.
fn checksum(rec: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&rec[..CRC]);
    h.update(&rec[CRC + 4..]);
    h.finalize()
}

fn value_len(header: &[u8]) -> usize {
    u16::from_le_bytes([header[18], header[19]]) as usize
}

/// Reads the payload length from a record header (to know how much to read).
pub fn payload_len(header: &[u8; HEADER]) -> Option<usize> {
    let kind = Kind::from_u8(header[16])?;
    let len = value_len(header);
    let values = if kind == Kind::Update { 2 } else { 1 };
    Some(values * pad8(len))
}

/// Decodes a record whose header and payload are `bytes`; `at` is its
/// offset, for the error.
pub fn decode(bytes: &[u8], at: u64) -> Result<Record, Error> {
    let corrupt = |reason| Error::LogCorrupt { offset: at, reason };
    if bytes.len() < HEADER {
        return Err(corrupt("record shorter than its header"));
    }
    let kind = Kind::from_u8(bytes[16]).ok_or(corrupt("unknown record kind"))?;
    let len = value_len(bytes);
    let values = if kind == Kind::Update { 2 } else { 1 };
    let total = HEADER + values * pad8(len);
    if bytes.len() < total {
        return Err(corrupt("record payload runs past its block"));
    }
    let stored = u32::from_le_bytes(bytes[CRC..CRC + 4].try_into().expect("4"));
    let computed = checksum(&bytes[..total]);
    if stored != computed {
        return Err(Error::ChecksumMismatch {
            what: "log record",
            offset: at,
            stored,
            computed,
        });
    }
    let word = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().expect("8"));
    let (old, new) = if kind == Kind::Update {
        let o = bytes[HEADER..HEADER + len].to_vec();
        let n0 = HEADER + pad8(len);
        (o, bytes[n0..n0 + len].to_vec())
    } else {
        (Vec::new(), bytes[HEADER..HEADER + len].to_vec())
    };
    Ok(Record {
        lsn: word(0),
        tx: word(8),
        kind,
        flags: bytes[17],
        target: word(24),
        aux: word(32),
        prev: word(40),
        old,
        new,
        crc: stored,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_roundtrips() {
        let d = Draft {
            tx: 7,
            kind: Kind::Update,
            flags: 0,
            target: 4096,
            aux: 0,
            old: &[1, 2, 3],
            new: &[4, 5, 6],
        };
        let mut b = Vec::new();
        d.encode(42, 41, &mut b);
        assert_eq!(b.len(), d.size());
        let r = decode(&b, 0).unwrap();
        assert_eq!(
            (r.lsn, r.prev, r.tx, r.kind, r.target),
            (42, 41, 7, Kind::Update, 4096)
        );
        assert_eq!(
            (r.old.as_slice(), r.new.as_slice()),
            (&[1, 2, 3][..], &[4, 5, 6][..])
        );
    }

    #[test]
    fn flipped_byte_is_detected() {
        let d = Draft {
            tx: 1,
            kind: Kind::Clr,
            flags: clr::BYTES,
            target: 64,
            aux: 3,
            old: &[],
            new: &[9; 8],
        };
        let mut b = Vec::new();
        d.encode(5, 2, &mut b);
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x10;
            assert!(decode(&c, 0).is_err(), "flip at {i} not detected");
        }
    }
}
