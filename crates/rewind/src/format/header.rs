//! The pool header: the first 4 KiB, written once at create, verified on
//! every open before anything trusts the file. Little-endian, fixed offsets:
//!
//! ```text
//! off  size  field
//!   0     8  magic "REWINDPL"
//!   8     4  format version (4)
//!  12     4  flags (0)
//!  16    64  layout name, UTF-8, zero-padded
//!  80     8  pool size
//!  88    16  uuid
//! 104     1  log variant (1 simple, 2 optimized, 3 batch, 4 two-layer)
//! 105     1  policy (1 force, 2 no-force, 3 redo)
//! 106     1  backend created with (1 pmem, 2 msync, 3 sim)
//! 107     1  Batch group size as log2 (3..=6: 8..64 records); 0 otherwise
//! 108     4  bucket cells
//! 112     8  log block size
//! 120     8  allocator offset
//! 128     8  bitmap offset
//! 136     8  log offset
//! 144     8  log blocks
//! 152     8  heap offset
//! 160     8  heap chunks
//! 168     4  CRC-32 of bytes 0..168
//! ```

use std::path::Path;

use super::layout::{Layout, CHUNK, HEADER_SIZE, MAX_BUCKET_CELLS, META_END};
use super::{Backend, LogVariant, Policy};
use crate::error::Error;

/// Pool magic.
pub const MAGIC: [u8; 8] = *b"REWINDPL";
/// Format version this build writes and reads. 2: the log grows into heap
/// chunks, checked allocator and list metadata, the backend recorded.
/// 3: records carry their transaction's previous lsn, CLRs their undo-next.
/// 6: the commit ring (redo commit groups) between the log and the heap,
/// and its Log Start slots in the meta page.
pub const VERSION: u32 = 6;
/// Longest layout name.
pub const MAX_LAYOUT: usize = 63;
const CRC_OFF: usize = 168;

/// A decoded, verified header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Layout name given at create.
    pub layout_name: String,
    /// Pool identity.
    pub uuid: [u8; 16],
    /// Log variant fixed at create.
    pub variant: LogVariant,
    /// Commit policy fixed at create.
    pub policy: Policy,
    /// Backend given at create: the default at open.
    pub backend: Backend,
    /// Records per Batch group (one fence each); 0 for the other logs.
    pub group: u32,
    /// Region geometry.
    pub layout: Layout,
}

fn put(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

fn get(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

impl Header {
    /// Encodes the header page.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_SIZE as usize];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[16..16 + self.layout_name.len()].copy_from_slice(self.layout_name.as_bytes());
        let l = &self.layout;
        put(&mut b, 80, l.pool_size);
        b[88..104].copy_from_slice(&self.uuid);
        b[104] = self.variant.code();
        b[105] = self.policy.code();
        b[106] = self.backend.code();
        b[107] = if self.group == 0 {
            0
        } else {
            self.group.trailing_zeros() as u8
        };
        b[108..112].copy_from_slice(&(l.bucket_cells as u32).to_le_bytes());
        put(&mut b, 112, l.log_block_size);
        put(&mut b, 120, l.alloc_off);
        put(&mut b, 128, l.bitmap_off);
        put(&mut b, 136, l.log_off);
        put(&mut b, 144, l.log_blocks);
        put(&mut b, 152, l.heap_off);
        put(&mut b, 160, l.heap_chunks);
        let crc = crc32fast::hash(&b[..CRC_OFF]);
        b[CRC_OFF..CRC_OFF + 4].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and verifies a header from the first bytes of a file of
    /// `file_len` bytes. Checks magic, checksum, version, and that every
    /// region lies inside the file without overlapping another.
    pub fn decode(path: &Path, b: &[u8], file_len: u64) -> Result<Header, Error> {
        if (b.len() as u64) < HEADER_SIZE || file_len < HEADER_SIZE {
            return Err(Error::Truncated {
                path: path.to_path_buf(),
                what: "pool header",
                found: file_len.min(b.len() as u64),
                expected: HEADER_SIZE,
            });
        }
        let magic: [u8; 8] = b[0..8].try_into().expect("8 bytes");
        if magic != MAGIC {
            return Err(Error::NotAPool {
                path: path.to_path_buf(),
                found: magic,
                expected: MAGIC,
            });
        }
        let stored = u32::from_le_bytes(b[CRC_OFF..CRC_OFF + 4].try_into().expect("4 bytes"));
        let computed = crc32fast::hash(&b[..CRC_OFF]);
        if stored != computed {
            return Err(Error::ChecksumMismatch {
                what: "pool header",
                offset: 0,
                stored,
                computed,
            });
        }
        let version = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
        if version != VERSION {
            return Err(Error::UnsupportedVersion {
                found: version,
                supported: VERSION,
            });
        }
        let name_bytes = &b[16..80];
        let name_len = name_bytes.iter().position(|&c| c == 0).unwrap_or(64);
        let layout_name = std::str::from_utf8(&name_bytes[..name_len])
            .map_err(|_| Error::BadHeader {
                field: "layout name",
                value: name_len as u64,
                reason: "not UTF-8",
            })?
            .to_string();
        let variant = LogVariant::from_code(b[104]).ok_or(Error::BadHeader {
            field: "log variant",
            value: b[104] as u64,
            reason: "expected 1, 2, 3 or 4",
        })?;
        let policy = Policy::from_code(b[105]).ok_or(Error::BadHeader {
            field: "policy",
            value: b[105] as u64,
            reason: "expected 1, 2 or 3",
        })?;
        let backend = Backend::from_code(b[106]).ok_or(Error::BadHeader {
            field: "backend",
            value: b[106] as u64,
            reason: "expected 1, 2 or 3",
        })?;
        let group = match (variant, b[107]) {
            (LogVariant::Batch, g @ 3..=6) => 1u32 << g,
            (LogVariant::Simple | LogVariant::Optimized | LogVariant::TwoLayer, 0) => 0,
            (_, g) => {
                return Err(Error::BadHeader {
                    field: "group size",
                    value: g as u64,
                    reason: "expected 3..=6 (log2 of 8..64) for a Batch log, 0 otherwise",
                })
            }
        };
        let cells = u32::from_le_bytes(b[108..112].try_into().expect("4 bytes")) as u64;
        let layout = Layout {
            pool_size: get(b, 80),
            log_block_size: get(b, 112),
            alloc_off: get(b, 120),
            bitmap_off: get(b, 128),
            log_off: get(b, 136),
            log_blocks: get(b, 144),
            heap_off: get(b, 152),
            heap_chunks: get(b, 160),
            bucket_cells: cells,
        };
        validate(&layout, variant)?;
        // Not covered by the CRC: must be zero.
        if let Some(i) = b[CRC_OFF + 4..HEADER_SIZE as usize]
            .iter()
            .position(|&x| x != 0)
        {
            return Err(Error::BadHeader {
                field: "reserved bytes",
                value: (CRC_OFF + 4 + i) as u64,
                reason: "the header page past the checksum must be zero",
            });
        }
        if layout.pool_size > file_len {
            return Err(Error::Truncated {
                path: path.to_path_buf(),
                what: "pool size recorded in the header",
                found: file_len,
                expected: layout.pool_size,
            });
        }
        Ok(Header {
            layout_name,
            uuid: b[88..104].try_into().expect("16 bytes"),
            variant,
            policy,
            backend,
            group,
            layout,
        })
    }
}

/// The checksum guards against damage, but a header written by a buggy or
/// hostile tool could still be inconsistent: check the geometry itself.
fn validate(l: &Layout, variant: LogVariant) -> Result<(), Error> {
    let bad = |field, value, reason| {
        Err(Error::BadHeader {
            field,
            value,
            reason,
        })
    };
    if l.bucket_cells == 0 || l.bucket_cells > MAX_BUCKET_CELLS {
        return bad("bucket cells", l.bucket_cells, "expected 1..=2048");
    }
    if (variant == LogVariant::Simple) != (l.bucket_cells == 1) {
        return bad(
            "bucket cells",
            l.bucket_cells,
            "simple log has 1 cell per node",
        );
    }
    if l.log_block_size != Layout::block_size_for(l.bucket_cells) {
        return bad(
            "log block size",
            l.log_block_size,
            "does not match bucket cells",
        );
    }
    if l.alloc_off != META_END {
        return bad("allocator offset", l.alloc_off, "expected 8192");
    }
    let chunk_meta_end = l
        .heap_chunks
        .checked_mul(super::layout::DESC_BYTES)
        .and_then(|x| x.checked_add(l.alloc_off));
    match chunk_meta_end {
        Some(e) if e <= l.bitmap_off => {}
        _ => return bad("bitmap offset", l.bitmap_off, "overlaps chunk descriptors"),
    }
    let bitmap_end = l
        .heap_chunks
        .checked_mul(super::layout::BITMAP_BYTES)
        .and_then(|x| x.checked_add(l.bitmap_off));
    match bitmap_end {
        Some(e) if e <= l.log_off => {}
        _ => return bad("log offset", l.log_off, "overlaps allocator bitmaps"),
    }
    if l.log_blocks == 0 {
        return bad("log blocks", 0, "expected at least one");
    }
    let log_end = l
        .log_blocks
        .checked_mul(l.log_block_size)
        .and_then(|x| x.checked_add(l.log_off));
    match log_end {
        Some(e) if e <= l.heap_off => {}
        _ => return bad("heap offset", l.heap_off, "overlaps the log"),
    }
    let heap_end = l
        .heap_chunks
        .checked_mul(CHUNK)
        .and_then(|x| x.checked_add(l.heap_off));
    match heap_end {
        Some(e) if e <= l.pool_size && l.heap_chunks > 0 => {}
        _ => {
            return bad(
                "heap chunks",
                l.heap_chunks,
                "heap does not fit in the pool",
            )
        }
    }
    // The geometry is a function of size, log blocks and cells: a header
    // edited with a recomputed checksum (a smaller heap, say) shows here.
    let planned = l
        .log_blocks
        .checked_mul(l.log_block_size)
        .and_then(|log| Layout::plan(l.pool_size, log, l.bucket_cells));
    if planned != Some(*l) {
        return bad(
            "heap chunks",
            l.heap_chunks,
            "the regions are not the ones create lays out for this pool size and log",
        );
    }
    Ok(())
}
