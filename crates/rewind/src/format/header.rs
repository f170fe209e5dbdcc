//! The pool header: the first 4 KiB, written once at create, verified on
//! every open before anything trusts the file. Little-endian, at the named
//! offsets below (each the previous one plus its size, as redb's header
//! does), encoded and decoded through `format::le`; `docs/format.md` draws
//! the same table, and a test compares the two:
//!
//! ```text
//! off  size  field
//!   0     8  magic "REWINDPL"
//!   8     4  format version (8)
//!  12     4  flags (0)
//!  16    64  layout name, UTF-8, zero-padded
//!  80     8  maximum size (the regions are planned for it)
//!  88    16  uuid
//! 104     1  log variant (1 simple, 2 optimized, 3 batch, 4 two-layer)
//! 105     1  policy (1 force, 2 no-force, 3 redo, 4 redo-async)
//! 106     1  backend created with (1 pmem, 2 msync, 3 sim)
//! 107     1  Batch group size as log2 (3..=6: 8..64 records); 0 otherwise
//! 108     4  bucket cells
//! 112     8  log block size
//! 120     8  allocator offset
//! 128     8  bitmap offset
//! 136     8  log offset
//! 144     8  log blocks
//! 152     8  heap offset
//! 160     8  heap chunks at the maximum size (the chunk table's entries)
//! 168     8  size at create
//! 176     4  CRC-32 of bytes 0..176
//! ```

use std::path::Path;

use super::layout::{Layout, CHUNK, HEADER_SIZE, MAX_BUCKET_CELLS, META_END};
use super::le::{get_u32, get_u64, put_u32, put_u64};
use super::{Backend, LogVariant, Policy};
use crate::error::Error;

/// Pool magic.
pub const MAGIC: [u8; 8] = *b"REWINDPL";
/// Format version this build writes and reads. 2: the log grows into heap
/// chunks, checked allocator and list metadata, the backend recorded.
/// 3: records carry their transaction's previous lsn, CLRs their undo-next.
/// 4: the two-layer log and the redo policy. 5: one-fence commits.
/// 6: the commit ring (redo commit groups) between the log and the heap,
/// and its Log Start slots in the meta page. 7: checked meta words (magic,
/// salted root check, catalog, open stamp, Log Start's check byte, a mixed
/// check in each ring Log Start slot, both slots written at create), a
/// hash per bitmap instead of parities, large runs' continuations naming
/// their distance to the head. 8: growth (the header's pool size is the
/// maximum, the regions planned for it, the size at create recorded; the
/// meta page's checked heap size word). 9: a commit group's checksum is
/// CRC-32C (the SSE4.2 instruction), no longer CRC-32. 10: commit groups
/// carry bits entries (a redo transaction's allocations and frees).
/// 11: commit lanes (the ring split into lanes, the count in the header;
/// a group carries its global commit number; a Log Start slot per lane
/// pair, each with the watermark). 12: a group's magic is two bytes,
/// and two bytes say how many groups of its lane were not yet written back
/// when it was reserved (recovery tells a damaged group from a torn one).
pub const VERSION: u32 = 12;
/// Longest layout name.
pub const MAX_LAYOUT: usize = 63;

/// Header: the magic.
pub const MAGIC_OFF: usize = 0;
/// Header: the format version (u32).
pub const VERSION_OFF: usize = MAGIC_OFF + 8;
/// Header: flags (u32, zero).
pub const FLAGS_OFF: usize = VERSION_OFF + 4;
/// Header: the layout name, 64 bytes.
pub const LAYOUT_NAME_OFF: usize = FLAGS_OFF + 4;
/// Bytes of the layout name field.
pub const LAYOUT_NAME_LEN: usize = 64;
/// Header: the maximum pool size (the regions are planned for it).
pub const POOL_SIZE_OFF: usize = LAYOUT_NAME_OFF + LAYOUT_NAME_LEN;
/// Header: the UUID, 16 bytes.
pub const UUID_OFF: usize = POOL_SIZE_OFF + 8;
/// Header: the log variant code (u8).
pub const VARIANT_OFF: usize = UUID_OFF + 16;
/// Header: the policy code (u8).
pub const POLICY_OFF: usize = VARIANT_OFF + 1;
/// Header: the backend code (u8).
pub const BACKEND_OFF: usize = POLICY_OFF + 1;
/// Header: the Batch group size as log2 (u8).
pub const GROUP_OFF: usize = BACKEND_OFF + 1;
/// Header: cells per log block (u32).
pub const CELLS_OFF: usize = GROUP_OFF + 1;
/// Header: the log block size.
pub const BLOCK_SIZE_OFF: usize = CELLS_OFF + 4;
/// Header: the allocator's offset.
pub const ALLOC_OFF_OFF: usize = BLOCK_SIZE_OFF + 8;
/// Header: the bitmaps' offset.
pub const BITMAP_OFF_OFF: usize = ALLOC_OFF_OFF + 8;
/// Header: the log region's offset.
pub const LOG_OFF_OFF: usize = BITMAP_OFF_OFF + 8;
/// Header: the log region's block count.
pub const LOG_BLOCKS_OFF: usize = LOG_OFF_OFF + 8;
/// Header: the heap's offset.
pub const HEAP_OFF_OFF: usize = LOG_BLOCKS_OFF + 8;
/// Header: the heap's chunk count at the maximum size.
pub const HEAP_CHUNKS_OFF: usize = HEAP_OFF_OFF + 8;
/// Header: the pool size at create.
pub const CREATE_SIZE_OFF: usize = HEAP_CHUNKS_OFF + 8;
/// Header: the commit lanes (u32).
pub const LANES_OFF: usize = CREATE_SIZE_OFF + 8;
/// Header: CRC-32 of the bytes before it (u32).
pub const CRC_OFF: usize = LANES_OFF + 4;
/// Header: first byte past the CRC (the rest of the page is zero).
pub const HEADER_END: usize = CRC_OFF + 4;

/// Every header field, `(offset, size, name)`, in order: what
/// `docs/format.md`'s table must say (checked by this module's tests).
#[cfg(any(test, feature = "testing"))]
pub const FIELDS: [(usize, usize, &str); 21] = [
    (MAGIC_OFF, 8, "magic"),
    (VERSION_OFF, 4, "format version"),
    (FLAGS_OFF, 4, "flags"),
    (LAYOUT_NAME_OFF, LAYOUT_NAME_LEN, "layout name"),
    (POOL_SIZE_OFF, 8, "maximum size"),
    (UUID_OFF, 16, "uuid"),
    (VARIANT_OFF, 1, "log variant"),
    (POLICY_OFF, 1, "policy"),
    (BACKEND_OFF, 1, "backend"),
    (GROUP_OFF, 1, "batch group size"),
    (CELLS_OFF, 4, "cells per log block"),
    (BLOCK_SIZE_OFF, 8, "log block size"),
    (ALLOC_OFF_OFF, 8, "allocator offset"),
    (BITMAP_OFF_OFF, 8, "bitmap offset"),
    (LOG_OFF_OFF, 8, "log offset"),
    (LOG_BLOCKS_OFF, 8, "log block count"),
    (HEAP_OFF_OFF, 8, "heap offset"),
    (HEAP_CHUNKS_OFF, 8, "heap chunk count"),
    (CREATE_SIZE_OFF, 8, "size at create"),
    (LANES_OFF, 4, "commit lanes"),
    (CRC_OFF, 4, "crc"),
];

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
    /// Region geometry, planned for the maximum size (`layout.pool_size`).
    pub layout: Layout,
    /// The pool's size at create: the file is at least this long, and
    /// its heap held `(size - heap_off) / CHUNK` chunks then.
    pub size: u64,
}

impl Header {
    /// Encodes the header page.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_SIZE as usize];
        b[MAGIC_OFF..MAGIC_OFF + 8].copy_from_slice(&MAGIC);
        put_u32(&mut b, VERSION_OFF, VERSION);
        let name = self.layout_name.as_bytes();
        b[LAYOUT_NAME_OFF..LAYOUT_NAME_OFF + name.len()].copy_from_slice(name);
        let l = &self.layout;
        put_u64(&mut b, POOL_SIZE_OFF, l.pool_size);
        b[UUID_OFF..UUID_OFF + 16].copy_from_slice(&self.uuid);
        b[VARIANT_OFF] = self.variant.code();
        b[POLICY_OFF] = self.policy.code();
        b[BACKEND_OFF] = self.backend.code();
        b[GROUP_OFF] = if self.group == 0 {
            0
        } else {
            self.group.trailing_zeros() as u8
        };
        put_u32(&mut b, CELLS_OFF, l.bucket_cells as u32);
        put_u64(&mut b, BLOCK_SIZE_OFF, l.log_block_size);
        put_u64(&mut b, ALLOC_OFF_OFF, l.alloc_off);
        put_u64(&mut b, BITMAP_OFF_OFF, l.bitmap_off);
        put_u64(&mut b, LOG_OFF_OFF, l.log_off);
        put_u64(&mut b, LOG_BLOCKS_OFF, l.log_blocks);
        put_u64(&mut b, HEAP_OFF_OFF, l.heap_off);
        put_u64(&mut b, HEAP_CHUNKS_OFF, l.heap_chunks);
        put_u64(&mut b, CREATE_SIZE_OFF, self.size);
        put_u32(&mut b, LANES_OFF, l.lanes as u32);
        let crc = crc32fast::hash(&b[..CRC_OFF]);
        put_u32(&mut b, CRC_OFF, crc);
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
        let magic: [u8; 8] = b[MAGIC_OFF..MAGIC_OFF + 8].try_into().expect("8 bytes");
        if magic != MAGIC {
            return Err(Error::NotAPool {
                path: path.to_path_buf(),
                found: magic,
                expected: MAGIC,
            });
        }
        let stored = get_u32(b, CRC_OFF);
        let computed = crc32fast::hash(&b[..CRC_OFF]);
        if stored != computed {
            return Err(Error::ChecksumMismatch {
                what: "pool header",
                offset: 0,
                stored,
                computed,
            });
        }
        let version = get_u32(b, VERSION_OFF);
        if version != VERSION {
            return Err(Error::UnsupportedVersion {
                found: version,
                supported: VERSION,
            });
        }
        // No flag is defined: a set one is a feature of another build
        // that this one would not honour.
        let flags = get_u32(b, FLAGS_OFF);
        if flags != 0 {
            return Err(Error::BadHeader {
                field: "flags",
                value: flags as u64,
                reason: "expected 0 (this build knows no flags)",
            });
        }
        let name_bytes = &b[LAYOUT_NAME_OFF..LAYOUT_NAME_OFF + LAYOUT_NAME_LEN];
        let name_len = name_bytes
            .iter()
            .position(|&c| c == 0)
            .unwrap_or(LAYOUT_NAME_LEN);
        if name_len == 0 || name_len > MAX_LAYOUT {
            return Err(Error::BadHeader {
                field: "layout name",
                value: name_len as u64,
                reason: "expected 1 to 63 bytes, zero-padded",
            });
        }
        if let Some(i) = name_bytes[name_len..].iter().position(|&c| c != 0) {
            return Err(Error::BadHeader {
                field: "layout name",
                value: (LAYOUT_NAME_OFF + name_len + i) as u64,
                reason: "not zero-padded: a byte after the name's end is not zero",
            });
        }
        let layout_name = std::str::from_utf8(&name_bytes[..name_len])
            .map_err(|_| Error::BadHeader {
                field: "layout name",
                value: name_len as u64,
                reason: "not UTF-8",
            })?
            .to_string();
        let variant = LogVariant::from_code(b[VARIANT_OFF]).ok_or(Error::BadHeader {
            field: "log variant",
            value: b[VARIANT_OFF] as u64,
            reason: "expected 1, 2, 3 or 4",
        })?;
        let policy = Policy::from_code(b[POLICY_OFF]).ok_or(Error::BadHeader {
            field: "policy",
            value: b[POLICY_OFF] as u64,
            reason: "expected 1, 2, 3 or 4",
        })?;
        let backend = Backend::from_code(b[BACKEND_OFF]).ok_or(Error::BadHeader {
            field: "backend",
            value: b[BACKEND_OFF] as u64,
            reason: "expected 1, 2 or 3",
        })?;
        let group = match (variant, b[GROUP_OFF]) {
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
        let cells = get_u32(b, CELLS_OFF) as u64;
        let layout = Layout {
            pool_size: get_u64(b, POOL_SIZE_OFF),
            log_block_size: get_u64(b, BLOCK_SIZE_OFF),
            alloc_off: get_u64(b, ALLOC_OFF_OFF),
            bitmap_off: get_u64(b, BITMAP_OFF_OFF),
            log_off: get_u64(b, LOG_OFF_OFF),
            log_blocks: get_u64(b, LOG_BLOCKS_OFF),
            heap_off: get_u64(b, HEAP_OFF_OFF),
            heap_chunks: get_u64(b, HEAP_CHUNKS_OFF),
            bucket_cells: cells,
            lanes: get_u32(b, LANES_OFF) as u64,
        };
        validate(&layout, variant)?;
        // Not covered by the CRC: must be zero.
        if let Some(i) = b[HEADER_END..HEADER_SIZE as usize]
            .iter()
            .position(|&x| x != 0)
        {
            return Err(Error::BadHeader {
                field: "reserved bytes",
                value: (HEADER_END + i) as u64,
                reason: "the header page past the checksum must be zero",
            });
        }
        let size = get_u64(b, CREATE_SIZE_OFF);
        if size > layout.pool_size || initial_chunks(&layout, size).is_none() {
            return Err(Error::BadHeader {
                field: "size at create",
                value: size,
                reason: "not between a heap of one chunk and the maximum size",
            });
        }
        if size > file_len {
            return Err(Error::Truncated {
                path: path.to_path_buf(),
                what: "pool size recorded in the header",
                found: file_len,
                expected: size,
            });
        }
        Ok(Header {
            layout_name,
            uuid: b[UUID_OFF..UUID_OFF + 16].try_into().expect("16 bytes"),
            variant,
            policy,
            backend,
            group,
            layout,
            size,
        })
    }

    /// Chunks in the heap of a new pool (of [`size`](Self::size) bytes).
    pub fn initial_chunks(&self) -> u64 {
        initial_chunks(&self.layout, self.size).unwrap_or(0)
    }
}

/// Chunks the heap of a pool of `size` bytes planned as `l` holds: those
/// that fit before `size`, at most the table's; `None` when not one does.
pub fn initial_chunks(l: &Layout, size: u64) -> Option<u64> {
    let n = (size.checked_sub(l.heap_off)? / CHUNK).min(l.heap_chunks);
    (n > 0).then_some(n)
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
    if !l.lanes_fit(l.lanes) {
        return bad(
            "commit lanes",
            l.lanes,
            "expected 1 to 16 lanes of at least 512 bytes of the commit ring",
        );
    }
    // The geometry is a function of size, log blocks and cells (and the
    // lanes chosen): a header edited with a recomputed checksum (a smaller
    // heap, say) shows here.
    let planned = l
        .log_blocks
        .checked_mul(l.log_block_size)
        .and_then(|log| Layout::plan(l.pool_size, log, l.bucket_cells))
        .map(|p| Layout {
            lanes: l.lanes,
            ..p
        });
    if planned != Some(*l) {
        return bad(
            "heap chunks",
            l.heap_chunks,
            "the regions are not the ones create lays out for this pool size and log",
        );
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The rows `| off | size | field |` of the markdown table under
    /// `heading` in `doc`.
    pub(crate) fn table(doc: &str, heading: &str) -> Vec<(u64, u64, String)> {
        let at = doc
            .find(heading)
            .unwrap_or_else(|| panic!("{heading} in docs/format.md"));
        doc[at..]
            .lines()
            .skip(1)
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .filter_map(|l| {
                let cols: Vec<&str> = l.split('|').map(str::trim).collect();
                Some((
                    cols.get(1)?.parse().ok()?,
                    cols.get(2)?.parse().ok()?,
                    cols.get(3)?.to_string(),
                ))
            })
            .collect()
    }

    #[test]
    fn docs_format_md_draws_the_header_the_code_encodes() {
        let doc = include_str!("../../../../docs/format.md");
        let rows = table(doc, "## Header (offset 0)");
        let want: Vec<(u64, u64)> = FIELDS
            .iter()
            .map(|&(o, s, _)| (o as u64, s as u64))
            .collect();
        let got: Vec<(u64, u64)> = rows.iter().map(|r| (r.0, r.1)).collect();
        assert_eq!(
            got, want,
            "docs/format.md's header table and format/header.rs differ"
        );
        for (row, field) in rows.iter().zip(FIELDS) {
            assert!(
                row.2.to_lowercase().contains(&field.2.to_lowercase()),
                "offset {}: the doc says `{}`, the code `{}`",
                row.0,
                row.2,
                field.2
            );
        }
        let version = rows.iter().find(|r| r.0 == VERSION_OFF as u64).unwrap();
        assert!(version.2.contains(&VERSION.to_string()), "{}", version.2);
        assert!(doc.starts_with(&format!("# On-media format (version {VERSION})")));
        let policy = &rows.iter().find(|r| r.0 == POLICY_OFF as u64).unwrap().2;
        for p in [
            Policy::Force,
            Policy::NoForce,
            Policy::Redo,
            Policy::RedoAsync,
        ] {
            assert!(
                policy.contains(&format!("{} {p}", p.code())),
                "{policy} lacks {p}"
            );
        }
        // Offsets chain: each field starts where the previous one ends.
        for w in FIELDS.windows(2) {
            assert_eq!(w[0].0 + w[0].1, w[1].0);
        }
        assert_eq!(CRC_OFF, 180);
    }
}
