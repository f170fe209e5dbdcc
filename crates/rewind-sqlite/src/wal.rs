//! The WAL file SQLite sees, kept in the pool.
//!
//! SQLite's WAL module reads and writes a file: a 32-byte header, then
//! frames of a 24-byte header (page number, commit flag, salts, checksums)
//! and a page. This module presents that file and keeps what it means in the
//! pool ([`WalLog`]): frames are buffered in memory until SQLite has written
//! a transaction's last frame (the one whose header carries the commit
//! flag), and then committed as one transaction of differential records
//! under one fence. A transaction that spills pages early, overwrites a
//! frame of its own or rolls back only ever changes the buffer.
//!
//! **When a transaction is complete.** In `sqlite3WalFrames` the frame with
//! the commit flag is always appended last, after every in-place rewrite of
//! the transaction's earlier frames; the only writes that may follow are the
//! header rewrites of `walRewriteChecksums`, which change checksums alone.
//! So the commit point is the write that completes the commit frame's page,
//! whatever `PRAGMA synchronous` says: `xSync` has nothing left to do.
//!
//! **Checksums.** The pool keeps no SQLite checksum. While the pool is open
//! the frame headers are the ones SQLite wrote (and rewrote); when it is
//! opened they are computed from the recovered pages and the WAL header with
//! SQLite's algorithm, so that they are right even when a crash came between
//! a commit and SQLite's rewrite of the checksums. SQLite verifies them when
//! it rebuilds its wal-index from this file.
//!
//! **Stale frames.** A WAL file keeps the frames a rolled-back spill
//! wrote past its last commit until they are written over or the file is
//! truncated, and SQLite may read them: after a `ROLLBACK TO` that
//! discards frames of which one was overwritten in place, SQLite 3.46
//! keeps the frame number where checksums must be recomputed from
//! (`iReCksum`), and at the commit reads the checksum of the frame before
//! it, past the frames of the transaction. So frames past the last commit
//! stay here too (in memory, not in the pool) until a restart or a
//! truncation: a read of one that failed made the `COMMIT` fail after
//! the pool had committed it.
//!
//! **Restart and truncation.** SQLite writes a new WAL header only when a
//! checkpoint has copied every frame into the database file; a truncation
//! to 0 likewise. Both become a new generation of the log, which frees the
//! blocks, after the database file has been made durable (`fdatasync`),
//! whatever `PRAGMA synchronous` said.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::error::Error;
use crate::log::{page_size, Out, WalHeader, WalLog};

/// Bytes of SQLite's WAL header.
pub const WAL_HDR: u64 = 32;
/// Bytes of SQLite's frame header.
pub const FRAME_HDR: usize = 24;

/// What the log wrote, for benchmarks and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Transactions committed to the pool.
    pub commits: u64,
    /// Frames committed.
    pub frames: u64,
    /// Bytes of records written (headers, ranges, padding).
    pub record_bytes: u64,
    /// Bytes SQLite's own WAL file would have written for the same frames
    /// (24-byte header and whole page each).
    pub whole_frame_bytes: u64,
    /// Generations started (WAL restarts and truncations).
    pub restarts: u64,
    /// The pool's counters (fences, lines written) since it was opened.
    pub pool: rewind::Counters,
    /// The commits' copies and one fence each: their time and counters.
    pub persist: crate::log::Persist,
    /// Blocks in the log's chain now (1 after a restart).
    pub blocks: u64,
}

struct Slot {
    hdr: [u8; FRAME_HDR],
    data: Box<[u8]>,
}

impl Slot {
    fn pgno(&self) -> u32 {
        u32::from_be_bytes([self.hdr[0], self.hdr[1], self.hdr[2], self.hdr[3]])
    }
    fn ntrunc(&self) -> u32 {
        u32::from_be_bytes([self.hdr[4], self.hdr[5], self.hdr[6], self.hdr[7]])
    }
}

/// SQLite's WAL checksum (`walChecksumBytes`): `big` is the header magic's
/// low bit (words read big-endian), `bytes` a multiple of 8.
pub fn checksum(big: bool, bytes: &[u8], mut s: [u32; 2]) -> [u32; 2] {
    for w in bytes.chunks_exact(8) {
        let (a, b) = if big {
            (
                u32::from_be_bytes([w[0], w[1], w[2], w[3]]),
                u32::from_be_bytes([w[4], w[5], w[6], w[7]]),
            )
        } else {
            (
                u32::from_le_bytes([w[0], w[1], w[2], w[3]]),
                u32::from_le_bytes([w[4], w[5], w[6], w[7]]),
            )
        };
        s[0] = s[0].wrapping_add(a).wrapping_add(s[1]);
        s[1] = s[1].wrapping_add(b).wrapping_add(s[0]);
    }
    s
}

/// Makes the database file at `db` durable (its data: `fdatasync`),
/// keeping the process's locks on it (`db_sync`).
pub(crate) fn sync_db(db: &std::path::Path) -> std::io::Result<()> {
    crate::db_sync::sync_data(db)
}

/// Whether a WAL header holds SQLite's magic and its own checksum (as
/// `walIndexRecover` checks it before it reads any frame).
pub(crate) fn header_checks(h: &WalHeader) -> bool {
    let magic = be32(h, 0);
    if magic & !1 != 0x377f_0682 {
        return false;
    }
    checksum(magic & 1 == 1, &h[..24], [0, 0]) == [be32(h, 24), be32(h, 28)]
}

/// One database's WAL file, shared by every connection that opens it.
pub struct WalFile {
    log: WalLog,
    db_path: PathBuf,
    /// The database file's identity when the WAL was opened: a restart
    /// syncs that file whatever its name is by then.
    db_id: Option<crate::db_sync::FileId>,
    differential: bool,
    header: Option<WalHeader>,
    page: usize,
    /// Committed frames first, then the open transaction's.
    frames: Vec<Slot>,
    committed: usize,
    /// Each page's last committed frame (index in `frames`).
    latest: HashMap<u32, usize>,
    /// SQLite's running checksum while recovered frames are sealed.
    cksum: [u32; 2],
    stats: Stats,
    /// Page buffers of dropped frames, for new ones (no allocation).
    spare: Vec<Box<[u8]>>,
    /// Half the heap the pool has at its maximum size: log blocks past it
    /// want a checkpoint ([`wants_checkpoint`](Self::wants_checkpoint)).
    checkpoint_at: u64,
    /// The pool file's identity, when found as it was opened.
    pub(crate) pool_id: Option<crate::db_sync::FileId>,
}

/// Whether the pool failed for want of room (`SQLITE_FULL`).
fn no_room(e: &rewind::Error) -> bool {
    matches!(
        e,
        rewind::Error::OutOfMemory { .. }
            | rewind::Error::NoSpaceToGrow { .. }
            | rewind::Error::LogFull { .. }
    )
}

/// A lower bound of the bytes of records the frames `outs` take in the
/// log: their changed bytes (every byte under whole frames) and one
/// record header each.
fn least_record_bytes(outs: &[Out<'_>], differential: bool) -> u64 {
    outs.iter()
        .map(|o| {
            let changed: usize = o.ranges(differential).iter().map(|&(_, len)| len).sum();
            (changed + crate::record::REC_HDR) as u64
        })
        .sum()
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl WalFile {
    /// Wraps the log recovered from a pool.
    pub fn open(
        log: WalLog,
        rec: crate::log::Recovered,
        db_path: PathBuf,
        differential: bool,
    ) -> WalFile {
        let checkpoint_at = log.pool().max_heap() / 2;
        let db_id = crate::db_sync::id_of(&db_path).ok();
        if let Some(id) = db_id {
            crate::db_sync::prepare(id, &db_path);
        }
        let mut w = WalFile {
            checkpoint_at,
            log,
            db_id,
            db_path,
            differential,
            header: None,
            page: 0,
            frames: Vec::new(),
            committed: 0,
            latest: HashMap::new(),
            cksum: [0; 2],
            stats: Stats::default(),
            spare: Vec::new(),
            pool_id: None,
        };
        if let Some(h) = rec.header {
            w.set_header(h);
            for f in rec.frames {
                if f.image.len() != w.page {
                    break;
                }
                let mut slot = Slot {
                    hdr: [0; FRAME_HDR],
                    data: f.image.into_boxed_slice(),
                };
                slot.hdr[..4].copy_from_slice(&f.pgno.to_be_bytes());
                slot.hdr[4..8].copy_from_slice(&f.ntrunc.to_be_bytes());
                w.frames.push(slot);
                w.seal(w.frames.len() - 1);
            }
            w.committed = w.frames.len();
        }
        w
    }

    fn set_header(&mut self, h: WalHeader) {
        self.page = page_size(&h);
        self.cksum = [be32(&h, 24), be32(&h, 28)];
        self.header = Some(h);
    }

    /// Completes recovered frame `i`'s header (salts and checksums, from
    /// the running checksum) and records it as its page's latest.
    fn seal(&mut self, i: usize) {
        let h = self.header.expect("frames follow a header");
        let big = be32(&h, 0) & 1 == 1;
        let slot = &mut self.frames[i];
        slot.hdr[8..16].copy_from_slice(&h[16..24]);
        let s = checksum(big, &slot.hdr[..8], self.cksum);
        let s = checksum(big, &slot.data, s);
        slot.hdr[16..20].copy_from_slice(&s[0].to_be_bytes());
        slot.hdr[20..24].copy_from_slice(&s[1].to_be_bytes());
        self.cksum = s;
        let pgno = slot.pgno();
        self.latest.insert(pgno, i);
    }

    fn frame_size(&self) -> u64 {
        (FRAME_HDR + self.page) as u64
    }

    /// The file's size.
    pub fn size(&self) -> u64 {
        match self.header {
            None => 0,
            Some(_) => WAL_HDR + self.frames.len() as u64 * self.frame_size(),
        }
    }

    /// Reads `buf.len()` bytes at `off`; `false` when the file ends first
    /// (the rest is zeroed).
    pub fn read(&self, off: u64, buf: &mut [u8]) -> bool {
        let Some(h) = &self.header else {
            buf.fill(0);
            return false;
        };
        let mut o = off;
        let mut at = 0;
        while at < buf.len() {
            let out = &mut buf[at..];
            let n;
            if o < WAL_HDR {
                let src = &h[o as usize..];
                n = src.len().min(out.len());
                out[..n].copy_from_slice(&src[..n]);
            } else {
                let fs = self.frame_size();
                let idx = ((o - WAL_HDR) / fs) as usize;
                let within = ((o - WAL_HDR) % fs) as usize;
                let Some(slot) = self.frames.get(idx) else {
                    out.fill(0);
                    return false;
                };
                if within < FRAME_HDR {
                    n = (FRAME_HDR - within).min(out.len());
                    out[..n].copy_from_slice(&slot.hdr[within..within + n]);
                } else {
                    let d = within - FRAME_HDR;
                    n = (self.page - d).min(out.len());
                    out[..n].copy_from_slice(&slot.data[d..d + n]);
                }
            }
            at += n;
            o += n as u64;
        }
        true
    }

    /// Writes `data` at `off`.
    pub fn write(&mut self, off: u64, data: &[u8]) -> Result<(), Error> {
        let bad = |why| Error::UnexpectedWrite {
            offset: off,
            len: data.len(),
            why,
        };
        if off < WAL_HDR {
            if off != 0 || data.len() != WAL_HDR as usize {
                return Err(bad("the WAL header is written whole"));
            }
            let mut h = [0u8; 32];
            h.copy_from_slice(data);
            let p = page_size(&h);
            if !(512..=65536).contains(&p) || !p.is_power_of_two() {
                return Err(bad("the WAL header names no valid page size"));
            }
            return self.restart(Some(h));
        }
        if self.header.is_none() {
            return Err(bad("a frame before the WAL header"));
        }
        let fs = self.frame_size();
        let mut o = off;
        let mut d = data;
        while !d.is_empty() {
            let idx = ((o - WAL_HDR) / fs) as usize;
            let within = ((o - WAL_HDR) % fs) as usize;
            let n = d.len().min(fs as usize - within);
            let (piece, rest) = d.split_at(n);
            if idx < self.committed {
                // Only walRewriteChecksums writes here: a header with the
                // same page and commit flag, and its final checksums.
                let slot = &mut self.frames[idx];
                if within != 0 || n != FRAME_HDR || piece[..8] != slot.hdr[..8] {
                    return Err(bad("a committed frame changes"));
                }
                slot.hdr.copy_from_slice(piece);
            } else {
                while self.frames.len() <= idx {
                    // A frame written whole (as SQLite writes them) needs
                    // no zeroed page first.
                    let whole = idx == self.frames.len() && within == 0 && n == fs as usize;
                    let data = match self.spare.pop() {
                        Some(mut b) if b.len() == self.page => {
                            if !whole {
                                b.fill(0);
                            }
                            b
                        }
                        _ if whole => Box::from(&piece[FRAME_HDR..]),
                        _ => vec![0u8; self.page].into_boxed_slice(),
                    };
                    self.frames.push(Slot {
                        hdr: [0; FRAME_HDR],
                        data,
                    });
                }
                let slot = &mut self.frames[idx];
                let mut p = piece;
                let mut w = within;
                if w < FRAME_HDR {
                    let k = (FRAME_HDR - w).min(p.len());
                    slot.hdr[w..w + k].copy_from_slice(&p[..k]);
                    p = &p[k..];
                    w += k;
                }
                if !p.is_empty() {
                    let s = w - FRAME_HDR;
                    slot.data[s..s + p.len()].copy_from_slice(p);
                }
                if within + n == fs as usize && within < fs as usize && slot.ntrunc() != 0 {
                    self.commit(idx)?;
                }
            }
            o += n as u64;
            d = rest;
        }
        Ok(())
    }

    /// Commits frames `committed..=last` to the pool.
    fn commit(&mut self, last: usize) -> Result<(), Error> {
        let first = self.committed;
        let mut overlay: HashMap<u32, usize> = HashMap::new();
        let mut outs = Vec::with_capacity(last + 1 - first);
        for i in first..=last {
            let slot = &self.frames[i];
            let pgno = slot.pgno();
            if pgno == 0 {
                return Err(Error::UnexpectedWrite {
                    offset: WAL_HDR + i as u64 * self.frame_size(),
                    len: FRAME_HDR,
                    why: "a frame of page 0",
                });
            }
            let base = if self.differential {
                overlay
                    .get(&pgno)
                    .or_else(|| self.latest.get(&pgno))
                    .map(|&j| &self.frames[j].data[..])
            } else {
                None
            };
            overlay.insert(pgno, i);
            outs.push(Out {
                pgno,
                ntrunc: if i == last { slot.ntrunc() } else { 0 },
                image: &slot.data,
                base,
            });
        }
        let whole = outs.len() as u64 * self.frame_size();
        let before = self.log.bytes_written();
        match self.log.commit(&outs, self.differential) {
            Ok(()) => {}
            Err(Error::Pool(source)) if no_room(&source) => {
                // A transaction whose changed bytes alone pass the heap of
                // the pool at its maximum size fits after no checkpoint:
                // said so (before, with committed frames in the WAL, the
                // error promised that a checkpoint let writes go on, and
                // the same transaction failed again after one).
                let bytes = least_record_bytes(&outs, self.differential);
                let max_heap = self.log.pool().max_heap();
                if bytes > max_heap {
                    return Err(Error::TooLarge {
                        bytes,
                        max_heap,
                        source,
                    });
                }
                // No room while committed frames hold blocks: the way out
                // (a checkpoint once no reader holds an older snapshot) is
                // named.
                if first > 0 {
                    return Err(Error::Full {
                        frames: first,
                        source,
                    });
                }
                return Err(Error::Pool(source));
            }
            Err(e) => return Err(e),
        }
        self.stats.record_bytes += self.log.bytes_written() - before;
        self.stats.whole_frame_bytes += whole;
        self.stats.commits += 1;
        self.stats.frames += (last + 1 - first) as u64;
        // Frames past the commit frame were left by a rolled-back spill.
        // They stay, as they stay in a WAL file (see "Stale frames"), until
        // a restart or a truncation. The headers stay as SQLite wrote them
        // (it rewrites the checksums of a transaction that overwrote a
        // frame of its own next).
        for i in first..=last {
            let pgno = self.frames[i].pgno();
            self.latest.insert(pgno, i);
        }
        self.committed = last + 1;
        Ok(())
    }

    /// A new WAL header (or none: truncated to nothing) starts a new
    /// generation, once the database file is durable.
    fn restart(&mut self, header: Option<WalHeader>) -> Result<(), Error> {
        if self.committed > 0 {
            let synced = match self.db_id {
                Some(id) => crate::db_sync::sync_file(id, &self.db_path),
                None => sync_db(&self.db_path),
            };
            synced.map_err(|source| Error::Io {
                path: self.db_path.clone(),
                source,
            })?;
        }
        self.log.restart(header.as_ref())?;
        // A header written again before any commit of its generation (a
        // ROLLBACK TO back past a restart) leaves the frames spilled after
        // the first one where they are, as a WAL file would ("Stale
        // frames"); anything else ends them.
        let same_page = header.as_ref().is_some_and(|h| page_size(h) == self.page);
        if self.committed > 0 || !same_page {
            self.drop_frames(0);
        }
        self.latest.clear();
        self.committed = 0;
        self.header = None;
        self.page = 0;
        if let Some(h) = header {
            self.set_header(h);
        }
        self.stats.restarts += 1;
        Ok(())
    }

    /// Truncates the file to `size` bytes.
    pub fn truncate(&mut self, size: u64) -> Result<(), Error> {
        if size == 0 {
            if self.header.is_some() {
                self.restart(None)?;
            }
            return Ok(());
        }
        if size >= self.size() {
            return Ok(());
        }
        let keep = (size.saturating_sub(WAL_HDR)).div_ceil(self.frame_size()) as usize;
        if keep < self.committed {
            return Err(Error::UnexpectedWrite {
                offset: size,
                len: 0,
                why: "a truncation through committed frames",
            });
        }
        self.drop_frames(keep);
        Ok(())
    }

    /// Drops the frames from `keep` on, keeping their page buffers (a
    /// generation's worth at most) for new frames.
    fn drop_frames(&mut self, keep: usize) {
        if keep >= self.frames.len() {
            return;
        }
        let room = self.frames.len().saturating_sub(self.spare.len());
        let page = self.page;
        self.spare.extend(
            self.frames
                .drain(keep..)
                .map(|s| s.data)
                .filter(|d| d.len() == page)
                .take(room),
        );
    }

    /// What the log wrote so far.
    pub fn stats(&self) -> Stats {
        Stats {
            blocks: self.log.blocks() as u64,
            ..self.stats
        }
    }

    /// Whether the log's blocks, with room for one more transaction of the
    /// last one's size, hold half the pool's heap at its maximum size or
    /// more: a checkpoint now (which lets the next writer restart the WAL
    /// and free its blocks) keeps a pool of bounded size from filling with
    /// frames SQLite's auto-checkpoint, counted in frames, would reach too
    /// late. The last transaction's room counts because a load committed
    /// in pieces (as the crate's docs advise for large ones) sends pieces
    /// of one size: counting the blocks held alone, a piece of 40% of a
    /// 2 MiB pool's heap found 45% held by the piece before (under half:
    /// no checkpoint) and failed with `SQLITE_FULL`, and so did every
    /// second piece after it, where an empty log held it.
    pub fn wants_checkpoint(&self) -> bool {
        self.log.bytes_held() + self.log.last_span() >= self.checkpoint_at
    }

    /// The backend the pool runs on.
    pub(crate) fn backend(&self) -> rewind::Backend {
        self.log.pool().backend()
    }

    /// The pool's counters.
    pub fn counters(&self) -> rewind::Counters {
        self.log.pool().counters()
    }

    /// The commits' copies and fences.
    pub fn persist(&self) -> crate::log::Persist {
        self.log.persist()
    }

    /// Committed frames (for tests).
    pub fn committed(&self) -> usize {
        self.committed
    }

    /// The database file this WAL is of.
    pub fn db_path(&self) -> &std::path::Path {
        &self.db_path
    }

    /// Closes the pool.
    pub fn close(self) -> Result<(), Error> {
        self.log.close()
    }
}
