//! The floor of one durable write on a disk: 64 bytes at the next place of
//! a small circular log in a file, made durable by one of the primitives a
//! log on a plain file can use, each exactly one device flush. `rewind
//! bench disk` runs them beside rewind's `Msync` commit, so the cost of
//! the flush itself is measured in the same run as the systems.
//!
//! The file is written whole with zeros and synced when it is created, so
//! that no later write changes the metadata its data needs (no hole, no
//! unwritten extent): a write and its flush are all a record costs.
//! `sync_file_range` is not among the primitives: it writes pages back
//! but never flushes the device's write cache, so it is not durable.

use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice, Write};
use std::path::Path;

use memmap2::MmapMut;
use rustix::io::ReadWriteFlags;

/// Bytes of a record.
const RECORD: u64 = 64;
/// Bytes of the circular log the records go to (16 pages).
const LOG: u64 = 64 << 10;

/// How a record is written and made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Primitive {
    /// `pwrite`, then `fdatasync` (every dirty page of the file, then a
    /// device flush).
    PwriteFdatasync,
    /// `pwritev2(RWF_DSYNC)`: the write, the write-back of its own range
    /// and a device flush, in one call.
    PwriteDsync,
    /// A store through a shared mapping, then `msync(MS_SYNC)` of its page.
    StoreMsync,
    /// `pwrite`, then `msync(MS_SYNC)` of its page (what rewind's `Msync`
    /// backend does for a commit group).
    PwriteMsync,
}

impl Primitive {
    /// Every primitive.
    pub const ALL: [Primitive; 4] = [
        Primitive::PwriteFdatasync,
        Primitive::PwriteDsync,
        Primitive::StoreMsync,
        Primitive::PwriteMsync,
    ];

    /// Its name in a report.
    pub fn name(self) -> &'static str {
        match self {
            Primitive::PwriteFdatasync => "pwrite-fdatasync",
            Primitive::PwriteDsync => "pwritev2-dsync",
            Primitive::StoreMsync => "store-msync",
            Primitive::PwriteMsync => "pwrite-msync",
        }
    }
}

/// A log file of [`LOG`] bytes, mapped shared, and the next record's place.
pub struct DiskFloor {
    file: File,
    map: MmapMut,
    next: u64,
}

impl DiskFloor {
    /// Creates `path` (replacing any file there): [`LOG`] zero bytes
    /// written and synced, then mapped.
    pub fn create(path: &Path) -> io::Result<DiskFloor> {
        let _ = std::fs::remove_file(path);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        file.write_all(&vec![0; LOG as usize])?;
        file.sync_all()?;
        drop(file);
        let (file, map) = crate::mapped::open(path)?;
        Ok(DiskFloor { file, map, next: 0 })
    }

    /// Writes one record holding `value` at the next place and makes it
    /// durable with `how`: one device flush.
    pub fn write(&mut self, how: Primitive, value: u64) -> io::Result<()> {
        let at = self.next;
        self.next = (self.next + RECORD) % LOG;
        let mut rec = [0u8; RECORD as usize];
        rec[..8].copy_from_slice(&value.to_le_bytes());
        rec[8..16].copy_from_slice(&at.to_le_bytes());
        let page = (at / 4096 * 4096) as usize;
        match how {
            Primitive::PwriteFdatasync => {
                pwrite_all(&self.file, &rec, at)?;
                rustix::fs::fdatasync(&self.file)?;
            }
            Primitive::PwriteDsync => {
                let n = rustix::io::pwritev2(
                    &self.file,
                    &[IoSlice::new(&rec)],
                    at,
                    ReadWriteFlags::DSYNC,
                )?;
                if n != rec.len() {
                    return Err(io::Error::other(format!("pwritev2 wrote {n} of 64 bytes")));
                }
            }
            Primitive::StoreMsync => {
                let at = at as usize;
                self.map[at..at + rec.len()].copy_from_slice(&rec);
                self.map.flush_range(page, 4096)?;
            }
            Primitive::PwriteMsync => {
                pwrite_all(&self.file, &rec, at)?;
                self.map.flush_range(page, 4096)?;
            }
        }
        Ok(())
    }

    /// The value of the last record written, read back through the mapping.
    pub fn last(&self) -> u64 {
        let at = ((self.next + LOG - RECORD) % LOG) as usize;
        u64::from_le_bytes(self.map[at..at + 8].try_into().expect("8 bytes"))
    }
}

fn pwrite_all(file: &File, mut buf: &[u8], mut at: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match rustix::io::pwrite(file, buf, at) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                buf = &buf[n..];
                at += n as u64;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_primitive_writes_its_record_where_the_mapping_and_the_file_see_it() {
        let (_dir, path) = crate::scratch("floor.log");
        let mut f = DiskFloor::create(&path).unwrap();
        for (i, how) in Primitive::ALL.into_iter().enumerate() {
            f.write(how, 100 + i as u64).unwrap();
            assert_eq!(f.last(), 100 + i as u64, "{how:?}");
        }
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, LOG);
        let word = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
        assert_eq!([0, 64, 128, 192].map(word), [100, 101, 102, 103]);
        assert_eq!(word(200), 192);
        // The log wraps.
        for v in 0..LOG / RECORD {
            f.write(Primitive::PwriteDsync, v).unwrap();
        }
        assert_eq!(f.last(), LOG / RECORD - 1);
    }
}
