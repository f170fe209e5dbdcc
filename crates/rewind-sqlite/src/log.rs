//! The WAL in the pool: NVWAL's user-level heap of blocks (§3.3), its
//! differential frame records (§3.2) and its lazy synchronization with a
//! checksummed commit mark (§4.2).
//!
//! **Blocks.** The log is a list of blocks from the root. A block is
//! allocated and linked to the tail by one rewind transaction, and the
//! blocks of a generation are freed, and the root moved to the next
//! generation, by one more: the allocator and its log make both atomic, so
//! a crash never leaks a block nor leaves one linked and free. (NVWAL marks
//! each block free, pending or in use and sweeps them at recovery; here the
//! pool's allocator is that state.) Blocks linked by a transaction that
//! never committed stay in the list and are written over by the next.
//!
//! **Commit.** A SQLite transaction's frames become records ([`record`]),
//! built in memory with the commit mark last, then copied into their blocks
//! with non-temporal stores and no ordering ([`Pool::write_unlogged`]); one
//! fence ([`Pool::fence`]) makes them durable. That fence is the commit
//! point. A crash before it can leave any subset of the lines: the commit
//! record's crc, chained from the previous commit's, then fails, and
//! recovery ends the log at the previous commit.
//!
//! **Recovery** reads the blocks in order, applies each record's ranges to
//! the page's previous image, and keeps the frames of every transaction
//! whose commit record checks; the first one that does not ends the log,
//! unless a commit that checks follows it (chained from its stored crc, or
//! from the crc its records give): a crash tears only the last commit, so
//! that is damage after the commit, `Error::Damaged`, not a silent end.
//!
//! **Generations.** SQLite restarts its WAL (new salts, frame numbers from 1)
//! once a checkpoint has copied every frame into the database file. The
//! restart is one rewind transaction: the new WAL header in the root, the
//! generation counter up, and every block but the first moved to the
//! root's reclaim chain; then transactions of at most
//! [`FREE_BATCH`] frees each take the blocks off that chain's front and
//! free them (so a restart needs a bounded amount of the pool's log
//! however many blocks a WAL grew to, even when a transaction that failed
//! with `SQLITE_FULL` left no free heap for the pool's log to grow into).
//! Open finishes a reclaim chain a crash interrupted. Blocks are
//! not zeroed, so a block holds records of earlier generations after this
//! one's: each record carries its generation, and the scan ends at the
//! first that is not the log's ([`record`]'s "Stale records"). The crc
//! chain is seeded from the generation and header as well.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rewind::{PPtr, Pool};

use crate::error::Error;
use crate::record::{self, Header, Kind, BLOCK_HDR, CRC_OFF, RANGE_HDR, REC_HDR};

/// The root object's bytes.
type RootBytes = [u8; ROOT_SIZE];
const ROOT_SIZE: usize = 128;
/// Root: "NVWAL" and the format version.
const MAGIC_OFF: u64 = 0;
/// Root: generation, from 1.
const GEN_OFF: u64 = MAGIC_OFF + 8;
/// Root: the first block.
const HEAD_OFF: u64 = GEN_OFF + 8;
/// Root: bytes per block.
const BLOCK_SIZE_OFF: u64 = HEAD_OFF + 8;
/// Root: 1 when `header` holds SQLite's WAL header, 0 for an empty WAL file.
const HAS_HEADER_OFF: u64 = BLOCK_SIZE_OFF + 8;
/// Root: SQLite's 32-byte WAL header.
const HEADER_OFF: u64 = HAS_HEADER_OFF + 8;
/// Root: the first block of the reclaim chain (blocks of an earlier
/// generation linked as they were, still allocated, freed front first),
/// 0 when empty.
const RECLAIM_OFF: u64 = HEADER_OFF + 32;
/// Root: CRC-32 of the bytes before it (magic to reclaim chain), u32.
/// Every field is read only once it checks: a flipped bit in the
/// generation or the header flag otherwise opened an empty WAL, every
/// committed frame dropped without a word.
const ROOT_CRC_OFF: u64 = RECLAIM_OFF + 8;
/// Root bytes every root transaction writes: the fields and their crc.
const ROOT_SEALED: usize = ROOT_CRC_OFF as usize + 4;
const _: () = assert!(ROOT_SEALED <= ROOT_SIZE);
/// Blocks a restart frees per rewind transaction: 4 KiB of commit-group
/// entries, well inside half the commit ring of the smallest pool.
pub const FREE_BATCH: usize = 256;
/// Bytes of a cache line: a commit ends on one.
const LINE: u64 = 64;
/// Version 4: the root's crc (3 had none, and is read and upgraded at
/// open; 2 freed a generation's blocks in one transaction; 1 had 24-byte
/// record headers and zeroed blocks).
const MAGIC: u64 = u64::from_le_bytes(*b"NVWAL\0\0\x04");
/// Version 3: the same root without its crc.
const MAGIC_V3: u64 = u64::from_le_bytes(*b"NVWAL\0\0\x03");
/// The magic's bytes before the version.
const MAGIC_MASK: u64 = 0x0000_ffff_ffff_ffff;

/// SQLite's WAL header.
pub type WalHeader = [u8; 32];

/// A frame rebuilt by recovery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Database page number.
    pub pgno: u32,
    /// Database size in pages after the transaction, on its last frame.
    pub ntrunc: u32,
    /// The page's bytes.
    pub image: Vec<u8>,
}

/// A frame to commit.
pub struct Out<'a> {
    /// Database page number.
    pub pgno: u32,
    /// Commit flag: the database size on the transaction's last frame.
    pub ntrunc: u32,
    /// The page.
    pub image: &'a [u8],
    /// The page's previous frame in this generation, if any.
    pub base: Option<&'a [u8]>,
}

impl Out<'_> {
    /// The byte ranges of the page its record holds: with `differential`,
    /// those that differ from the page's previous frame (from zeros for a
    /// page with none, NVWAL); otherwise the whole page (a baseline).
    pub fn ranges(&self, differential: bool) -> Vec<(usize, usize)> {
        if !differential {
            return record::whole(self.image.len());
        }
        match self.base {
            Some(base) => record::diff(base, self.image),
            None => record::diff(&vec![0u8; self.image.len()], self.image),
        }
    }
}

/// What recovery found.
pub struct Recovered {
    /// SQLite's WAL header, if the WAL file has one.
    pub header: Option<WalHeader>,
    /// Every committed frame, in order (frame 1 first).
    pub frames: Vec<Frame>,
}

/// The page size a WAL header names (0 when it names none).
pub fn page_size(h: &WalHeader) -> usize {
    let v = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
    if v == 1 {
        65536
    } else {
        v
    }
}

/// The log of one database's WAL in its pool.
pub struct WalLog {
    pool: Pool,
    root: u64,
    block_size: u64,
    /// The chain, head first.
    blocks: Vec<u64>,
    /// The reclaim chain, front first: blocks still to free.
    reclaim: Vec<u64>,
    /// Blocks freed per rewind transaction ([`FREE_BATCH`]).
    free_batch: usize,
    /// Where the next record goes: `blocks[cur] + pos`.
    cur: usize,
    pos: u64,
    gen: u64,
    /// SQLite's WAL header in the root (none: an empty WAL file).
    header: Option<WalHeader>,
    /// The last commit's crc (the generation's seed before any).
    chain: u32,
    /// The current frame number (frames committed in this generation).
    frames: u32,
    /// Record bytes written so far.
    bytes_written: u64,
    persist: Persist,
    /// The pool's counters at open, plus what block links and restarts
    /// did since: the rest is the commits' copies and fences (taken so,
    /// rather than around each commit, to keep two sums of the pool's
    /// counter stripes off the commit path).
    not_commits: rewind::Counters,
    /// Bytes of the blocks the last commit's records reached into.
    last_span: u64,
}

/// What the commits' copies and fences cost (NVWAL Fig. 6), apart from
/// building records and linking blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Persist {
    /// Time in `write_unlogged` and `fence`.
    pub time: Duration,
    /// Their counters (fences, lines).
    pub counters: rewind::Counters,
    /// Blocks linked by rewind transactions.
    pub blocks_linked: u64,
}

/// The root's fields as one transaction writes them, sealed with their
/// crc ([`ROOT_CRC_OFF`]).
fn root_image(
    gen: u64,
    head: u64,
    block_size: u64,
    header: Option<&WalHeader>,
    reclaim: u64,
) -> [u8; ROOT_SEALED] {
    let mut r = [0u8; ROOT_SEALED];
    let mut put = |off: u64, bytes: &[u8]| {
        let o = off as usize;
        r[o..o + bytes.len()].copy_from_slice(bytes);
    };
    put(MAGIC_OFF, &MAGIC.to_le_bytes());
    put(GEN_OFF, &gen.to_le_bytes());
    put(HEAD_OFF, &head.to_le_bytes());
    put(BLOCK_SIZE_OFF, &block_size.to_le_bytes());
    put(HAS_HEADER_OFF, &(header.is_some() as u64).to_le_bytes());
    put(HEADER_OFF, header.unwrap_or(&[0u8; 32]));
    put(RECLAIM_OFF, &reclaim.to_le_bytes());
    let at = ROOT_CRC_OFF as usize;
    let crc = crc32fast::hash(&r[..at]);
    r[at..].copy_from_slice(&crc.to_le_bytes());
    r
}

fn seed(gen: u64, header: Option<&WalHeader>) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&gen.to_le_bytes());
    h.update(header.map_or(&[0u8; 32][..], |h| &h[..]));
    h.finalize()
}

/// The blocks linked from `first` through each block's `next` word, in
/// order; `seen` holds the blocks of chains read before (a block in two
/// chains, or twice in one, is damage).
fn chain(
    pool: &Pool,
    first: u64,
    seen: &mut std::collections::HashSet<u64>,
) -> Result<Vec<u64>, Error> {
    let mut blocks = Vec::new();
    let mut next = first;
    while next != 0 {
        if !seen.insert(next) {
            return Err(Error::Damaged {
                what: "a block is linked twice (a cycle, or in both the log and its reclaim chain)",
            });
        }
        blocks.push(next);
        let mut word = [0u8; 8];
        pool.read_bytes(next, &mut word)?;
        next = u64::from_le_bytes(word);
    }
    Ok(blocks)
}

/// Refuses a root whose generation is older than a record of the head
/// block's: the head block is zeroed when the log is made and never
/// freed, and its first record always starts at [`BLOCK_HDR`], so the
/// record there is one a generation up to the root's wrote (stale ones
/// carry smaller generations). One of a later generation means the root's
/// generation was damaged, and the scan would otherwise end at that record
/// and drop every committed frame without a word.
fn check_head_generation(pool: &Pool, head: u64, block_size: u64, gen: u64) -> Result<(), Error> {
    let mut h = [0u8; REC_HDR];
    pool.read_bytes(head + BLOCK_HDR, &mut h)?;
    match Header::decode(&h, (block_size - BLOCK_HDR) as usize) {
        Some(r) if r.gen > gen => Err(Error::Damaged {
            what: "the root's generation is older than a record of its log",
        }),
        _ => Ok(()),
    }
}

/// Whether `block_size` is one a log block may have: a multiple of 64 of
/// at least 4096 (`register` refuses others; a pool of the maximum size
/// must also hold two).
pub(crate) fn block_size_shaped(block_size: u64) -> bool {
    block_size >= 4096 && block_size.is_multiple_of(64)
}

impl WalLog {
    /// Opens the log in `pool` (creating it in an empty pool) and recovers
    /// its committed frames.
    pub fn open(pool: Pool, block_size: u64) -> Result<(WalLog, Recovered), Error> {
        let root = match pool.root::<RootBytes>()? {
            Some(r) => r.offset(),
            None => pool.transaction(|tx| {
                let root = tx.root::<RootBytes>()?.offset();
                let head = tx.alloc_bytes(block_size)?;
                tx.write_bytes(root, &root_image(1, head, block_size, None, 0))?;
                Ok::<_, rewind::Error>(root)
            })?,
        };
        let mut r = [0u8; ROOT_SIZE];
        pool.read_bytes(root, &mut r)?;
        let word = |off: u64| {
            let o = off as usize;
            u64::from_le_bytes(r[o..o + 8].try_into().expect("8 bytes"))
        };
        let magic = word(MAGIC_OFF);
        let v3 = magic == MAGIC_V3;
        if magic & MAGIC_MASK == MAGIC & MAGIC_MASK && magic != MAGIC && !v3 {
            return Err(Error::UnsupportedVersion {
                found: magic >> 56,
                expected: MAGIC >> 56,
            });
        }
        if magic != MAGIC && !v3 {
            return Err(Error::NotAWalPool { found: magic });
        }
        let block_size = word(BLOCK_SIZE_OFF);
        // What `register` accepts and `grow` allocates: a damaged root
        // must be an error, not an out-of-range index or a huge buffer.
        if !block_size_shaped(block_size) || block_size > pool.max_size() / 2 {
            return Err(Error::Damaged {
                what: "the root's block size is not one a log was made with",
            });
        }
        if word(HEAD_OFF) == 0 {
            return Err(Error::Damaged {
                what: "the root names no head block",
            });
        }
        let gen = word(GEN_OFF);
        // A log starts at generation 1 and a restart moves it up by one:
        // 0 was never written, and the largest cannot be moved up (a
        // restart would overflow).
        if gen == 0 || gen == u64::MAX {
            return Err(Error::Damaged {
                what: "the root's generation is 0 or cannot be moved up",
            });
        }
        let header = match word(HAS_HEADER_OFF) {
            0 => None,
            1 => {
                let o = HEADER_OFF as usize;
                let mut h = [0u8; 32];
                h.copy_from_slice(&r[o..o + 32]);
                let p = page_size(&h);
                if !(512..=65536).contains(&p) || !p.is_power_of_two() {
                    return Err(Error::Damaged {
                        what: "the root's WAL header names no valid page size",
                    });
                }
                Some(h)
            }
            _ => {
                return Err(Error::Damaged {
                    what: "the root's header flag is neither 0 nor 1",
                })
            }
        };
        // (The checks above name what they find; any other damage to a
        // field is found here.)
        let crc_at = ROOT_CRC_OFF as usize;
        let stored = u32::from_le_bytes(r[crc_at..crc_at + 4].try_into().expect("4 bytes"));
        if !v3 && stored != crc32fast::hash(&r[..crc_at]) {
            return Err(Error::Damaged {
                what: "the root fails its checksum (its generation, header, head block or \
                       reclaim chain was changed after it was written)",
            });
        }
        let mut seen = std::collections::HashSet::new();
        let blocks = chain(&pool, word(HEAD_OFF), &mut seen)?;
        let reclaim = match word(RECLAIM_OFF) {
            0 => Vec::new(),
            first => chain(&pool, first, &mut seen)?,
        };
        check_head_generation(&pool, word(HEAD_OFF), block_size, gen)?;
        let mut log = WalLog {
            pool,
            root,
            block_size,
            blocks,
            reclaim,
            free_batch: FREE_BATCH,
            cur: 0,
            pos: BLOCK_HDR,
            gen,
            header,
            chain: seed(gen, header.as_ref()),
            frames: 0,
            bytes_written: 0,
            persist: Persist::default(),
            not_commits: rewind::Counters::default(),
            last_span: 0,
        };
        let frames = match &header {
            Some(h) => log.scan(page_size(h))?,
            None => Vec::new(),
        };
        log.frames = frames.len() as u32;
        if v3 {
            // Sealed with its crc, as version 4.
            let image = log.root_image(log.gen, log.header.as_ref(), word(RECLAIM_OFF));
            log.pool.transaction(|tx| tx.write_bytes(root, &image))?;
        }
        log.free_reclaimed()?;
        log.not_commits = log.pool.counters();
        Ok((log, Recovered { header, frames }))
    }

    /// The root as a transaction of this log writes it: `gen` and
    /// `header`, the log's head block and block size, the reclaim chain
    /// from `reclaim`.
    fn root_image(&self, gen: u64, header: Option<&WalHeader>, reclaim: u64) -> [u8; ROOT_SEALED] {
        root_image(gen, self.blocks[0], self.block_size, header, reclaim)
    }

    /// Sets how many blocks a restart frees per rewind transaction (at
    /// least 1; [`FREE_BATCH`] by default).
    pub fn set_free_batch(&mut self, n: usize) {
        self.free_batch = n.max(1);
    }

    /// Frees the reclaim chain, front first, [`free_batch`](Self::set_free_batch)
    /// blocks per rewind transaction, each moving the root's reclaim
    /// pointer past the blocks it frees: a crash between two leaves the
    /// rest of the chain for the next open.
    fn free_reclaimed(&mut self) -> Result<(), Error> {
        let root = self.root;
        while !self.reclaim.is_empty() {
            let n = self.free_batch.min(self.reclaim.len());
            let rest = self.reclaim.get(n).copied().unwrap_or(0);
            let batch = &self.reclaim[..n];
            let image = self.root_image(self.gen, self.header.as_ref(), rest);
            self.pool.transaction(|tx| {
                for &b in batch {
                    tx.free(PPtr::<u8>::from_offset(b))?;
                }
                tx.write_bytes(root, &image)
            })?;
            self.reclaim.drain(..n);
        }
        Ok(())
    }

    /// The pool (its counters, for benchmarks).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Reads the blocks in order and keeps every committed transaction's
    /// frames; leaves the write position after the last commit.
    fn scan(&mut self, page: usize) -> Result<Vec<Frame>, Error> {
        let mut frames: Vec<Frame> = Vec::new();
        // Index in `frames` of each page's last frame.
        let mut latest: HashMap<u32, usize> = HashMap::new();
        // The transaction being read: its frames, their pages' last frame.
        let mut pending: Vec<Frame> = Vec::new();
        let mut pending_latest: HashMap<u32, usize> = HashMap::new();
        let mut working: Option<(u32, Frame)> = None;
        let mut crc = crc32fast::Hasher::new_with_initial(self.chain);
        let (mut cur, mut pos) = (0usize, BLOCK_HDR);
        let mut block = vec![0u8; self.block_size as usize];
        self.pool.read_bytes(self.blocks[0], &mut block)?;
        loop {
            let room = (self.block_size - pos) as usize;
            let at = pos as usize;
            let h = if room < REC_HDR {
                None
            } else {
                match Header::decode(&block[at..], room) {
                    Some(h) => Some(h),
                    None => break,
                }
            };
            if h.is_some_and(|h| h.gen != self.gen) {
                // A record of an earlier use of this block: the log ends.
                break;
            }
            if h.is_none_or(|h| h.kind == Kind::Jump) {
                if let Some(h) = h {
                    crc.update(&block[at..at + h.len]);
                }
                if cur + 1 == self.blocks.len() {
                    break;
                }
                cur += 1;
                pos = BLOCK_HDR;
                self.pool.read_bytes(self.blocks[cur], &mut block)?;
                continue;
            }
            let h = h.expect("checked");
            let next_frame = (frames.len() + pending.len() + 1) as u32;
            let (num, mut f) = match working.take() {
                Some((num, f)) if num == h.frame && f.pgno == h.pgno => (num, f),
                Some(_) => break,
                None if h.frame == next_frame && h.pgno != 0 => {
                    let base = pending_latest
                        .get(&h.pgno)
                        .map(|&i| &pending[i].image)
                        .or_else(|| latest.get(&h.pgno).map(|&i| &frames[i].image));
                    let image = base.cloned().unwrap_or_else(|| vec![0u8; page]);
                    (
                        h.frame,
                        Frame {
                            pgno: h.pgno,
                            ntrunc: 0,
                            image,
                        },
                    )
                }
                None => break,
            };
            if !record::apply(&block[at + REC_HDR..at + h.len], h.nranges, &mut f.image) {
                break;
            }
            hash_record(&mut crc, &block[at..at + h.len], h.kind);
            pos += h.len as u64;
            match h.kind {
                Kind::Part => working = Some((num, f)),
                Kind::End => {
                    pending_latest.insert(f.pgno, pending.len());
                    pending.push(f);
                }
                Kind::Commit => {
                    let sum = std::mem::replace(&mut crc, crc32fast::Hasher::new()).finalize();
                    // (Seeded with the crc stored, or with the one the
                    // records give when it is the stored crc that was hit.)
                    if sum != h.crc
                        && (self.commit_follows(cur, pos, &block, h.crc)?
                            || self.commit_follows(cur, pos, &block, sum)?)
                    {
                        return Err(Error::Damaged {
                            what: "a committed transaction's records fail their checksum, and \
                                   committed transactions follow them: the log was damaged \
                                   after its commit (a crash tears only the last commit)",
                        });
                    }
                    if sum != h.crc || h.ntrunc == 0 {
                        break;
                    }
                    f.ntrunc = h.ntrunc;
                    pending.push(f);
                    for f in pending.drain(..) {
                        latest.insert(f.pgno, frames.len());
                        frames.push(f);
                    }
                    pending_latest.clear();
                    self.chain = sum;
                    (self.cur, self.pos) = (cur, pos);
                    crc = crc32fast::Hasher::new_with_initial(sum);
                }
                Kind::Jump => unreachable!("handled above"),
            }
        }
        Ok(frames)
    }

    /// Whether a commit whose crc checks lies past the commit record ending
    /// at `pos` of block `cur` (read into `block`), whose stored crc,
    /// `seed`, failed: the writer chained the next commit from that stored
    /// crc, and wrote it only after the failed one's fence, so one that
    /// checks means the failed one was damaged after its commit, not torn
    /// by a crash. Records are hashed as [`scan`](Self::scan) hashes them;
    /// any record that does not decode ends the search (no).
    fn commit_follows(
        &self,
        mut cur: usize,
        mut pos: u64,
        block: &[u8],
        seed: u32,
    ) -> Result<bool, Error> {
        let mut crc = crc32fast::Hasher::new_with_initial(seed);
        let mut block = block.to_vec();
        loop {
            let room = (self.block_size - pos) as usize;
            let at = pos as usize;
            let h = match room < REC_HDR {
                true => None,
                false => match Header::decode(&block[at..], room) {
                    Some(h) if h.gen == self.gen => Some(h),
                    _ => return Ok(false),
                },
            };
            if h.is_none_or(|h| h.kind == Kind::Jump) {
                if let Some(h) = h {
                    crc.update(&block[at..at + h.len]);
                }
                if cur + 1 == self.blocks.len() {
                    return Ok(false);
                }
                cur += 1;
                pos = BLOCK_HDR;
                self.pool.read_bytes(self.blocks[cur], &mut block)?;
                continue;
            }
            let h = h.expect("checked");
            hash_record(&mut crc, &block[at..at + h.len], h.kind);
            if h.kind == Kind::Commit {
                let sum = std::mem::replace(&mut crc, crc32fast::Hasher::new()).finalize();
                if sum == h.crc && h.ntrunc != 0 {
                    return Ok(true);
                }
                crc = crc32fast::Hasher::new_with_initial(h.crc);
            }
            pos += h.len as u64;
        }
    }

    /// Links a new block after the last one (one rewind transaction). The
    /// block is not zeroed (128 lines of 8 KiB): only its first line is
    /// written (`next` = 0); stale records after it fail the scan's
    /// generation check ([`record`]).
    fn grow(&mut self) -> Result<(), Error> {
        let tail = *self.blocks.last().expect("head");
        let size = self.block_size;
        let c0 = self.pool.counters();
        let b = self.pool.transaction(|tx| {
            let b = tx.alloc_bytes_unzeroed(size)?;
            tx.write_bytes(b, &[0u8; BLOCK_HDR as usize])?;
            tx.write_bytes(tail, &b.to_le_bytes())?;
            Ok::<_, rewind::Error>(b)
        })?;
        self.not_commits = self.not_commits + self.pool.counters().since(&c0);
        self.blocks.push(b);
        self.persist.blocks_linked += 1;
        Ok(())
    }

    /// Writes one transaction's frames (the last one carrying SQLite's
    /// commit flag) and makes them durable with one fence. On an error
    /// nothing of it is committed.
    ///
    /// `differential`: records hold the bytes that differ from the page's
    /// previous frame (NVWAL); otherwise the whole page (a baseline).
    pub fn commit(&mut self, frames: &[Out<'_>], differential: bool) -> Result<(), Error> {
        let Some(last) = frames.last() else {
            return Ok(());
        };
        if last.ntrunc == 0 {
            return Err(Error::NoCommitFlag);
        }
        // (block index, offset in block, bytes)
        let mut segs: Vec<(usize, u64, Vec<u8>)> = Vec::new();
        let (mut cur, mut pos) = (self.cur, self.pos);
        let (mut seg, mut seg_start) = (Vec::new(), pos);
        let mut commit_at = (0usize, 0usize);
        for (i, f) in frames.iter().enumerate() {
            let mut rest = f.ranges(differential);
            let mut ri = 0;
            let frame = self.frames + 1 + i as u32;
            loop {
                let room = (self.block_size - pos) as usize;
                let mut take = Vec::new();
                if room >= REC_HDR {
                    let mut left = room - REC_HDR;
                    while let Some(&(off, len)) = rest.get(ri) {
                        if RANGE_HDR + len <= left {
                            take.push((off, len));
                            left -= RANGE_HDR + len;
                            ri += 1;
                        } else {
                            // Split the range: what fits, a multiple of 8.
                            let k = left.saturating_sub(RANGE_HDR) / 8 * 8;
                            if k > 0 {
                                take.push((off, k));
                                rest[ri] = (off + k, len - k);
                            }
                            break;
                        }
                    }
                }
                let done = ri == rest.len();
                if room < REC_HDR || (take.is_empty() && !done) {
                    // The rest of this block stays unused: a JUMP record
                    // says so, unless too few bytes are left for one.
                    if room >= REC_HDR {
                        record::encode_record(&mut seg, Header::jump(self.gen), &[], &[]);
                    }
                    segs.push((cur, seg_start, std::mem::take(&mut seg)));
                    cur += 1;
                    if cur == self.blocks.len() {
                        self.grow()?;
                    }
                    (pos, seg_start) = (BLOCK_HDR, BLOCK_HDR);
                    continue;
                }
                let kind = match (done, i + 1 == frames.len()) {
                    (false, _) => Kind::Part,
                    (true, false) => Kind::End,
                    (true, true) => Kind::Commit,
                };
                let h = Header {
                    kind,
                    frame,
                    pgno: f.pgno,
                    ntrunc: if kind == Kind::Commit { f.ntrunc } else { 0 },
                    ..Header::jump(self.gen)
                };
                let start = seg.len();
                record::encode_record(&mut seg, h, &take, f.image);
                pos += (seg.len() - start) as u64;
                if kind == Kind::Commit {
                    commit_at = (segs.len(), start);
                }
                if done {
                    break;
                }
            }
        }
        // The COMMIT record ends on a line boundary when the block has the
        // room (zero padding inside the record): the next transaction then
        // starts a fresh line rather than writing this one's last line
        // again (a one-row insert: 3 lines rather than 3.6 on average).
        let line = LINE - (self.blocks[cur] + pos) % LINE;
        if line < LINE && pos + line <= self.block_size && commit_at.0 == segs.len() {
            let at = commit_at.1;
            let len = u32::from_le_bytes(seg[at..at + 4].try_into().expect("4 bytes"));
            seg[at..at + 4].copy_from_slice(&(len + line as u32).to_le_bytes());
            seg.resize(seg.len() + line as usize, 0);
            pos += line;
        }
        segs.push((cur, seg_start, seg));
        // The commit mark: the crc of every byte above, chained.
        let mut crc = crc32fast::Hasher::new_with_initial(self.chain);
        for (_, _, b) in &segs {
            crc.update(b);
        }
        let sum = crc.finalize();
        let (si, at) = commit_at;
        segs[si].2[at + CRC_OFF..at + CRC_OFF + 4].copy_from_slice(&sum.to_le_bytes());
        // Copies without ordering, then the one fence: the commit point.
        let t0 = Instant::now();
        for (b, off, bytes) in segs.iter().filter(|s| !s.2.is_empty()) {
            self.pool.write_unlogged(self.blocks[*b] + off, bytes)?;
            self.bytes_written += bytes.len() as u64;
        }
        self.pool.fence()?;
        self.persist.time += t0.elapsed();
        self.last_span = (cur - self.cur + 1) as u64 * self.block_size;
        (self.cur, self.pos, self.chain) = (cur, pos, sum);
        self.frames += frames.len() as u32;
        Ok(())
    }

    /// Starts a new generation: `header` (or none, an empty WAL file) in the
    /// root, the generation counter up, every block but the first freed;
    /// one rewind transaction. The caller has made the database file hold
    /// every committed frame durably.
    pub fn restart(&mut self, header: Option<&WalHeader>) -> Result<(), Error> {
        let (root, head) = (self.root, self.blocks[0]);
        // (open refuses the one generation that cannot move up)
        let gen = self.gen.checked_add(1).ok_or(Error::Damaged {
            what: "the log's generation cannot be moved up",
        })?;
        let c0 = self.pool.counters();
        // A reclaim chain a failed restart left is freed first: the root
        // has one.
        self.free_reclaimed()?;
        let first = self.blocks.get(1).copied().unwrap_or(0);
        let image = self.root_image(gen, header, first);
        self.pool.transaction(|tx| {
            tx.write_bytes(head, &0u64.to_le_bytes())?;
            tx.write_bytes(root, &image)?;
            Ok::<_, rewind::Error>(())
        })?;
        self.reclaim = self.blocks.split_off(1);
        (self.cur, self.pos, self.gen) = (0, BLOCK_HDR, gen);
        self.header = header.copied();
        self.chain = seed(gen, header);
        self.frames = 0;
        let freed = self.free_reclaimed();
        self.not_commits = self.not_commits + self.pool.counters().since(&c0);
        freed
    }

    /// Closes the pool.
    pub fn close(self) -> Result<(), Error> {
        Ok(self.pool.close()?)
    }

    /// What the commits' copies and fences cost since open.
    pub fn persist(&self) -> Persist {
        Persist {
            counters: self.pool.counters().since(&self.not_commits),
            ..self.persist
        }
    }

    /// Record bytes written since open.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// Blocks in the list (for tests).
    pub fn blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Bytes of the blocks the last commit's records reached into (0
    /// before any commit since open).
    pub fn last_span(&self) -> u64 {
        self.last_span
    }

    /// Bytes of the log's blocks: those in the list and those a restart
    /// has yet to free.
    pub fn bytes_held(&self) -> u64 {
        (self.blocks.len() + self.reclaim.len()) as u64 * self.block_size
    }
}

/// Feeds record `rec` (of kind `kind`) to a commit's crc as the writer
/// did: a COMMIT with its crc field zeroed.
fn hash_record(crc: &mut crc32fast::Hasher, rec: &[u8], kind: Kind) {
    if kind == Kind::Commit {
        let mut rec = rec.to_vec();
        rec[CRC_OFF..CRC_OFF + 4].fill(0);
        crc.update(&rec);
    } else {
        crc.update(rec);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rewind::PoolConfig;

    const PAGE: usize = 1024;

    fn header(salt: u32) -> WalHeader {
        let mut h = [0u8; 32];
        h[..4].copy_from_slice(&0x377f_0682u32.to_be_bytes());
        h[8..12].copy_from_slice(&(PAGE as u32).to_be_bytes());
        h[16..20].copy_from_slice(&salt.to_be_bytes());
        h
    }

    /// Commits one frame of page `pgno` (1..=4) with bytes `t` at a spot
    /// that depends on `t`; returns the new image.
    fn one(log: &mut WalLog, pages: &mut [Vec<u8>], pgno: u32, t: u32) -> Frame {
        let i = pgno as usize - 1;
        let mut image = pages[i].clone();
        let at = (t as usize * 37) % (PAGE - 64);
        image[at..at + 48].fill(t as u8 | 1);
        log.commit(
            &[Out {
                pgno,
                ntrunc: 4,
                image: &image,
                base: Some(&pages[i]),
            }],
            true,
        )
        .unwrap();
        pages[i] = image.clone();
        Frame {
            pgno,
            ntrunc: 4,
            image,
        }
    }

    /// The pool as a crash now would leave it (nothing pending persisted),
    /// opened again.
    fn crashed_pool(log: &WalLog) -> Pool {
        let img = log
            .pool()
            .domain()
            .with_sim(|s| s.image_none_pending())
            .unwrap();
        Pool::open_image(img, crate::LAYOUT).unwrap()
    }

    fn reopen(log: &WalLog) -> Vec<Frame> {
        WalLog::open(crashed_pool(log), 4096).unwrap().1.frames
    }

    /// A COMMIT record of page 1 that would be the log's next valid commit
    /// but for its generation `gen`; written at the write position.
    fn forge(log: &WalLog, gen: u64) {
        let mut image = vec![0u8; PAGE];
        image[..8].fill(0xee);
        let h = Header {
            kind: Kind::Commit,
            frame: log.frames + 1,
            pgno: 1,
            ntrunc: 4,
            ..Header::jump(gen)
        };
        let mut rec = Vec::new();
        record::encode_record(&mut rec, h, &[(0, 8)], &image);
        let mut crc = crc32fast::Hasher::new_with_initial(log.chain);
        crc.update(&rec);
        let sum = crc.finalize();
        rec[CRC_OFF..CRC_OFF + 4].copy_from_slice(&sum.to_le_bytes());
        let at = log.blocks[log.cur] + log.pos;
        log.pool.write_unlogged(at, &rec).unwrap();
        log.pool.fence().unwrap();
    }

    #[test]
    fn a_block_reused_after_a_checkpoint_never_yields_its_old_records() {
        let cfg = PoolConfig::default().policy(rewind::Policy::Redo);
        let pool = Pool::create_sim(crate::LAYOUT, 1 << 20, &cfg).unwrap();
        let (mut log, _) = WalLog::open(pool, 4096).unwrap();
        log.restart(Some(&header(1))).unwrap();
        // The old generation: records fill several blocks, the last one
        // most of the way.
        let mut pages = vec![vec![0u8; PAGE]; 4];
        let mut t = 0;
        while log.blocks.len() < 5 || log.pos < 3000 {
            one(&mut log, &mut pages, t % 4 + 1, t);
            t += 1;
        }
        let old_gen = log.gen;
        let old_blocks = log.blocks.clone();
        assert_eq!(reopen(&log).len(), t as usize);
        // A checkpoint: a new generation, the blocks but the head freed.
        log.restart(Some(&header(2))).unwrap();
        let mut pages = vec![vec![0u8; PAGE]; 4];
        let mut new = Vec::new();
        // Until the log has reused a freed block, then one record more.
        let mut u = 0;
        while log.blocks.len() < 2 || log.pos < BLOCK_HDR + 200 {
            new.push(one(&mut log, &mut pages, u % 4 + 1, 1000 + u));
            u += 1;
        }
        assert!(
            old_blocks[1..].contains(&log.blocks[1]),
            "the second block is a reused one"
        );
        // What follows the new records is the old generation's: not zero.
        let mut rest = vec![0u8; (4096 - log.pos) as usize];
        log.pool
            .read_bytes(log.blocks[log.cur] + log.pos, &mut rest)
            .unwrap();
        assert!(rest.iter().any(|&b| b != 0), "stale bytes follow");
        assert_eq!(reopen(&log), new, "only the new generation's frames");
        // A stale record crafted to check against the chain is still
        // refused: its generation is not the log's.
        forge(&log, old_gen);
        assert_eq!(reopen(&log), new, "a stale commit with a valid crc");
        // The same record with the log's generation is a valid commit, so
        // the generation alone refused the stale one.
        forge(&log, log.gen);
        assert_eq!(reopen(&log).len(), new.len() + 1);
    }

    /// A pool of version 3 (the root without its crc) opens with its
    /// frames and is sealed as version 4, which opens again.
    #[test]
    fn a_pool_of_format_version_3_opens_and_is_upgraded() {
        let cfg = PoolConfig::default().policy(rewind::Policy::Redo);
        let pool = Pool::create_sim(crate::LAYOUT, 1 << 20, &cfg).unwrap();
        let (mut log, _) = WalLog::open(pool, 4096).unwrap();
        log.restart(Some(&header(1))).unwrap();
        let mut pages = vec![vec![0u8; PAGE]; 4];
        let want: Vec<Frame> = (0..5)
            .map(|t| one(&mut log, &mut pages, t % 4 + 1, t))
            .collect();
        let mut v3 = [0u8; 12];
        v3[..8].copy_from_slice(&MAGIC_V3.to_le_bytes());
        log.pool
            .transaction(|tx| {
                tx.write_bytes(log.root + MAGIC_OFF, &v3[..8])?;
                tx.write_bytes(log.root + ROOT_CRC_OFF, &v3[8..])
            })
            .unwrap();
        let (log, rec) = WalLog::open(crashed_pool(&log), 4096).unwrap();
        assert_eq!(rec.frames, want);
        let mut r = [0u8; ROOT_SEALED];
        log.pool.read_bytes(log.root, &mut r).unwrap();
        assert_eq!(r[..8], MAGIC.to_le_bytes());
        assert_eq!(r, log.root_image(log.gen, log.header.as_ref(), 0));
        assert_eq!(reopen(&log), want);
    }

    #[test]
    fn a_pool_of_format_version_2_is_a_clear_error() {
        let cfg = PoolConfig::default().policy(rewind::Policy::Redo);
        let pool = Pool::create_sim(crate::LAYOUT, 1 << 20, &cfg).unwrap();
        let (log, _) = WalLog::open(pool, 4096).unwrap();
        let v2 = u64::from_le_bytes(*b"NVWAL\0\0\x02");
        log.pool
            .transaction(|tx| tx.write_bytes(log.root + MAGIC_OFF, &v2.to_le_bytes()))
            .unwrap();
        match WalLog::open(crashed_pool(&log), 4096) {
            Err(Error::UnsupportedVersion { found, expected }) => {
                assert_eq!((found, expected), (2, 4))
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("a version 2 pool opened"),
        }
    }
}
