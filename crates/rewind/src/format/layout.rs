//! Where everything lives in a pool file. Drawn byte by byte in
//! `docs/format.md`; the numbers here are the source of truth.
//!
//! ```text
//! 0        4 KiB   header (immutable after create, CRC-32C protected)
//! 4 KiB    4 KiB   meta: mutable words (root object, ADLL variables), the rest zero
//! 8 KiB    ...     allocator: chunk descriptors, then one bitmap per chunk
//! ...      ...     log: fixed-size blocks (ADLL nodes / buckets)
//! ...      ...     commit ring: the redo policy's commit groups (4 KiB aligned)
//! ...      ...     heap: 256 KiB chunks
//! ```

#![warn(clippy::unwrap_used, clippy::indexing_slicing)]

use crate::error::Error;

/// Size of the header page.
pub const HEADER_SIZE: u64 = 4096;
/// Offset of the meta page.
pub const META_OFF: u64 = 4096;
/// Meta: offset of the root object (0 = none).
pub const META_ROOT_OFF: u64 = META_OFF;
/// Meta: size of the root object.
pub const META_ROOT_SIZE: u64 = META_OFF + 8;
/// Meta: root check word, `offset ^ size` (0 with no root).
pub const META_ROOT_CHECK: u64 = META_OFF + 16;
/// Meta: end of the words transactions write (the root's and the
/// catalog's: see `format::meta`).
pub const META_ROOT_END: u64 = META_OFF + 40;
/// Meta: the ADLL variables, one cache line (see `log::adll`).
pub const META_ADLL: u64 = META_OFF + 64;
/// First byte after the meta page.
pub const META_END: u64 = META_OFF + 4096;
/// Redo-async's Log Start: committed redo groups whose END lsn is at most
/// this are in place (their records may be partly cleared); in a line of
/// its own.
pub const META_LOG_START: u64 = META_OFF + 256;
/// The commit lanes' Log Starts: a line per lane (of [`MAX_LANES`]), two
/// slots of (lane sequence number, lane position, watermark, check word)
/// each (`log/lanes.rs`).
pub const META_RING_START: u64 = META_OFF + 320;
/// Bytes of one Log Start slot.
pub const RING_SLOT: u64 = 32;
/// Most commit lanes a pool has.
pub const MAX_LANES: u64 = 16;
/// Smallest commit ring.
pub const MIN_RING: u64 = 1024;
/// Smallest lane of a ring split into several.
pub const MIN_LANE: u64 = 512;
/// A default ring is split into lanes of at least this many bytes.
pub const DEFAULT_LANE: u64 = 32 * 1024;
/// Most lanes a pool has by default.
pub const DEFAULT_LANES: u64 = 8;

/// Heap chunk size.
pub const CHUNK: u64 = 256 * 1024;
/// Smallest allocation class (one cache line, so user objects never share lines).
pub const MIN_CLASS: u64 = 64;
/// Bytes of a chunk table entry: descriptor, two bitmap parities, zero.
pub const DESC_BYTES: u64 = 32;
/// Bitmap bytes per chunk (one bit per smallest-class slot).
pub const BITMAP_BYTES: u64 = CHUNK / MIN_CLASS / 8;
/// Most cells per bucket: a bucket (64 + 8 + 96 bytes a cell) must fit in
/// one heap chunk, the unit the log grows by.
pub const MAX_BUCKET_CELLS: u64 = 2048;

/// Pools are smaller than this: a log cell holds a 48-bit record offset
/// (and, for a one-fence commit's records, 16 check bits above it).
pub const MAX_POOL: u64 = 1 << 48;
/// Records a Batch group holds before one fence, by default: a line of
/// cells. A pool may choose 8, 16, 32 or 64 (REWIND Fig. 10's knob).
pub const DEFAULT_GROUP: u32 = 8;
/// Smallest pool accepted by `create`.
pub const MIN_POOL: u64 = 1024 * 1024;

/// Geometry of one pool, decoded from (and encoded into) its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Total pool size in bytes.
    pub pool_size: u64,
    /// Allocator metadata: `heap_chunks` descriptors, then bitmaps.
    pub alloc_off: u64,
    /// Offset of the first bitmap.
    pub bitmap_off: u64,
    /// Log region.
    pub log_off: u64,
    /// Number of log blocks.
    pub log_blocks: u64,
    /// Size of one log block.
    pub log_block_size: u64,
    /// Cells per log block (1 for the Simple variant).
    pub bucket_cells: u64,
    /// Heap region (chunk-aligned to 4 KiB).
    pub heap_off: u64,
    /// Number of heap chunks.
    pub heap_chunks: u64,
    /// Commit lanes the ring is split into (1..=[`MAX_LANES`]).
    pub lanes: u64,
}

/// Largest data payload one log record carries; longer writes are split.
pub const MAX_RECORD_DATA: u64 = 256;
/// Bytes of a record header.
pub const RECORD_HEADER: u64 = 48;

fn round_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

impl Layout {
    /// Log block size for `cells` cells: a 64-byte block header, the cells,
    /// then a body area for the records (96 bytes per cell on average, and
    /// always room for one record of the largest size).
    pub fn block_size_for(cells: u64) -> u64 {
        let cells_bytes = round_up(cells * 8, 64);
        let max_record = RECORD_HEADER + 2 * MAX_RECORD_DATA;
        let body = (cells * 96).max(max_record);
        round_up(64 + cells_bytes + body, 64)
    }

    /// Offset of the body area inside a block.
    pub fn body_start(&self) -> u64 {
        64 + round_up(self.bucket_cells * 8, 64)
    }

    /// Plans a pool of `size` bytes with a log of about `log_size` bytes.
    /// `None` when they do not fit (checked arithmetic: any sizes a caller
    /// passes give an answer, never an overflow).
    pub fn plan(size: u64, log_size: u64, cells: u64) -> Option<Layout> {
        let block = Layout::block_size_for(cells);
        let log_blocks = (log_size / block).max(4);
        let log_bytes = log_blocks.checked_mul(block)?;
        let alloc_off = META_END;
        let ring = Layout::ring_size(log_bytes);
        // Find the largest chunk count that fits, accounting for its metadata.
        let fixed = alloc_off
            .checked_add(log_bytes)?
            .checked_add(ring)?
            .checked_add(3 * 4096)?;
        let per_chunk = CHUNK + DESC_BYTES + BITMAP_BYTES;
        let mut chunks = size.checked_sub(fixed)? / per_chunk;
        loop {
            let bitmap_off = alloc_off + round_up(chunks * DESC_BYTES, 64);
            let log_off = round_up(bitmap_off + chunks * BITMAP_BYTES, 4096);
            let ring_off = log_off.checked_add(log_bytes)?;
            let heap_off = round_up(ring_off.checked_add(ring)?, 4096);
            if heap_off.checked_add(chunks * CHUNK)? <= size {
                if chunks == 0 {
                    return None;
                }
                return Some(Layout {
                    pool_size: size,
                    alloc_off,
                    bitmap_off,
                    log_off,
                    log_blocks,
                    log_block_size: block,
                    bucket_cells: cells,
                    heap_off,
                    heap_chunks: chunks,
                    lanes: Layout::default_lanes(ring),
                });
            }
            chunks = chunks.checked_sub(1)?;
        }
    }

    /// End of the heap.
    pub fn heap_end(&self) -> u64 {
        self.heap_off + self.heap_max()
    }

    /// Bytes of the heap at the maximum size: its whole chunks.
    pub fn heap_max(&self) -> u64 {
        self.heap_chunks * CHUNK
    }

    /// `Err(NotInHeap)` unless `[off, off+len)` lies in the heap.
    pub fn check_in_heap(&self, off: u64, len: u64) -> Result<(), Error> {
        if off < self.heap_off || off.checked_add(len).is_none_or(|e| e > self.heap_end()) {
            return Err(Error::NotInHeap {
                offset: off,
                len,
                heap_start: self.heap_off,
                heap_end: self.heap_end(),
            });
        }
        Ok(())
    }

    /// Bytes of the commit ring for a log of `log_bytes`: a sixty-fourth of
    /// it in whole 64-byte lines (a 16 MiB log, 4096 lines), at least
    /// [`MIN_RING`]. The Log Start follows the commits by an eighth of it,
    /// so it wraps without draining.
    pub fn ring_size(log_bytes: u64) -> u64 {
        (log_bytes / 64 / 64 * 64).max(MIN_RING)
    }

    /// The lanes a ring of `ring` bytes is split into by default: lanes of
    /// at least [`DEFAULT_LANE`] bytes, at most [`DEFAULT_LANES`].
    pub fn default_lanes(ring: u64) -> u64 {
        (ring / DEFAULT_LANE).clamp(1, DEFAULT_LANES)
    }

    /// Whether the ring may be split into `lanes` lanes: 1 to
    /// [`MAX_LANES`], each of at least [`MIN_LANE`] bytes (one lane is the
    /// whole ring).
    pub fn lanes_fit(&self, lanes: u64) -> bool {
        lanes == 1 || ((2..=MAX_LANES).contains(&lanes) && self.ring_len() / lanes >= MIN_LANE)
    }

    /// Bytes of one commit lane (whole lines).
    pub fn lane_len(&self) -> u64 {
        self.ring_len() / self.lanes.max(1) / 64 * 64
    }

    /// Offset of commit lane `i`.
    pub fn lane_off(&self, i: u64) -> u64 {
        self.ring_off() + i * self.lane_len()
    }

    /// The commit ring: right after the log blocks (a line boundary: the
    /// log is page-aligned and blocks are whole lines).
    pub fn ring_off(&self) -> u64 {
        self.log_end()
    }

    /// Bytes of the commit ring.
    pub fn ring_len(&self) -> u64 {
        Layout::ring_size(self.log_blocks * self.log_block_size)
    }

    /// End of the log region.
    pub fn log_end(&self) -> u64 {
        self.log_off + self.log_blocks * self.log_block_size
    }

    /// True if `off` is the start of a log block.
    pub fn is_block(&self, off: u64) -> bool {
        off >= self.log_off
            && off < self.log_end()
            && (off - self.log_off).is_multiple_of(self.log_block_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_fits_and_does_not_overlap() {
        for &(size, cells) in &[
            (MIN_POOL, 1),
            (64 << 20, 1000),
            (8 << 20, 100),
            (1 << 30, 1000),
        ] {
            let l = Layout::plan(size, size / 8, cells).expect("plan");
            assert!(l.bitmap_off + l.heap_chunks * BITMAP_BYTES <= l.log_off);
            assert!(l.log_end() <= l.heap_off);
            assert!(l.ring_off() >= l.log_end() && l.ring_len() >= MIN_RING);
            assert!(l.ring_off() + l.ring_len() <= l.heap_off);
            assert!(l.heap_end() <= size);
            assert!(l.heap_chunks >= 1);
            assert!(l.lanes_fit(l.lanes));
            assert!(l.lane_off(l.lanes - 1) + l.lane_len() <= l.ring_off() + l.ring_len());
        }
    }

    #[test]
    fn huge_log_sizes_have_no_plan_and_no_overflow() {
        for cells in [1, 16, 1000] {
            assert!(Layout::plan(64 << 20, u64::MAX, cells).is_none());
            for (size, log) in [(u64::MAX, u64::MAX / 2), (u64::MAX, u64::MAX - 1)] {
                if let Some(l) = Layout::plan(size, log, cells) {
                    assert!(l.log_end() <= l.heap_off && l.heap_end() <= size);
                }
            }
        }
    }

    #[test]
    fn too_small_pool_has_no_plan() {
        assert!(Layout::plan(64 * 1024, 8192, 1000).is_none());
    }
}
