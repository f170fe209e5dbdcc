//! The recovery scan of the bucket log (REWIND §4.5, "we must first
//! recover the log itself"): the list walked in order, every cell's record
//! read and its checksum verified, the volatile bucket state rebuilt. A
//! Batch group whose index never persisted, and a one-fence commit's record
//! whose body a crash lost, are made gaps here.

use crate::error::Error;
use crate::format::layout::Layout;
use crate::format::record::{self, Record};
use crate::format::LogVariant;
use crate::persist::Domain;

use super::blocks::Blocks;
use super::{adll, two_layer, Bucket, Buckets, CellRef, Scanned, CELLS, GAP, INDEX, OFF_BITS, TAG};

pub(super) type ScanResult = (Vec<u64>, Buckets, Vec<Scanned>);

/// Reads and checks the record a cell points at (`off`, inside a body
/// ending at `body_end`).
pub(super) fn read_cell_record(
    d: &Domain,
    off: u64,
    body_end: u64,
    buf: &mut Vec<u8>,
) -> Result<Record, Error> {
    let mut h = [0u8; record::HEADER];
    d.read(off, &mut h)?;
    let payload = record::payload_len(&h).ok_or(Error::LogCorrupt {
        offset: off,
        reason: "unknown record kind",
    })?;
    let total = record::HEADER as u64 + payload as u64;
    if off + total > body_end {
        return Err(Error::LogCorrupt {
            offset: off,
            reason: "log record runs past its bucket",
        });
    }
    buf.resize(total as usize, 0);
    d.read(off, buf)?;
    record::decode(buf, off)
}

/// Walks the list and reads every valid record, verifying each checksum.
pub(super) fn scan(
    d: &Domain,
    l: &Layout,
    blocks: &Blocks,
    variant: LogVariant,
    list: adll::List,
) -> Result<ScanResult, Error> {
    let order = list.walk(d, blocks)?;
    let mut buckets = Buckets::default();
    let mut records: Vec<Scanned> = Vec::new();
    let mut cells = vec![0u8; (l.bucket_cells * 8) as usize];
    let mut buf = Vec::new();
    for &block in &order {
        d.read(block + CELLS, &mut cells)?;
        let limit = match variant {
            LogVariant::Batch => {
                let n = d.read_u64(block + INDEX)?;
                if n > l.bucket_cells {
                    return Err(Error::LogCorrupt {
                        offset: block + INDEX,
                        reason: "bucket index past its last cell",
                    });
                }
                n
            }
            _ => l.bucket_cells,
        };
        let mut b = Bucket {
            next_cell: 0,
            live: 0,
            body_used: l.body_start(),
            tagged: Vec::new(),
        };
        let body_end = block + l.log_block_size;
        for idx in 0..l.bucket_cells {
            let v = u64::from_le_bytes(
                cells[idx as usize * 8..idx as usize * 8 + 8]
                    .try_into()
                    .expect("8"),
            );
            if v == 0 {
                continue;
            }
            let cell = CellRef {
                block,
                idx: idx as u32,
            };
            if v == GAP {
                b.next_cell = idx as u32 + 1;
                continue;
            }
            let tagged = v & TAG != 0;
            if !tagged && idx >= limit {
                // Batch: a group whose index never persisted; its cell is
                // made a gap, so that an index a later group moves past it
                // cannot make it valid.
                d.store_nt_u64(cell.off(), GAP)?;
                continue;
            }
            let off = if tagged { v & OFF_BITS & !7 } else { v };
            if off < block + l.body_start()
                || off
                    .checked_add(record::HEADER as u64)
                    .is_none_or(|e| e > body_end)
                || off % 8 != 0
            {
                return Err(Error::LogCorrupt {
                    offset: cell.off(),
                    reason: "log cell points outside its bucket's body",
                });
            }
            b.next_cell = idx as u32 + 1;
            let rec = read_cell_record(d, off, body_end, &mut buf);
            let rec = match rec {
                Ok(r) if !tagged || r.lsn & 0xffff == v >> 48 => r,
                // A one-fence commit's record whose body a crash lost (or
                // an older record left at its offset): that commit is not
                // whole, so never redone; the cell becomes a gap.
                Ok(_) | Err(Error::LogCorrupt { .. } | Error::ChecksumMismatch { .. })
                    if tagged =>
                {
                    d.store_nt_u64(cell.off(), GAP)?;
                    continue;
                }
                Ok(_) => unreachable!("untagged records are taken as they are"),
                Err(e) => return Err(e),
            };
            if records.last().is_some_and(|p| p.rec.lsn >= rec.lsn) {
                return Err(Error::LogCorrupt {
                    offset: off,
                    reason: "record ids do not increase in log order",
                });
            }
            if tagged {
                b.tagged.push(off);
            }
            b.live += 1;
            b.body_used = b.body_used.max(off + two_layer::rec_size(&rec) - block);
            records.push(Scanned { rec, cell });
        }
        if variant == LogVariant::Batch {
            b.next_cell = b.next_cell.max(limit as u32);
        }
        buckets.insert(block, b);
    }
    Ok((order, buckets, records))
}
