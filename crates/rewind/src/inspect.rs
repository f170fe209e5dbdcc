//! Offline inspection, like `pmempool info | check`: reads a pool file's
//! bytes and never writes the file. Recovery is tried on an in-memory copy.

use std::fmt;
use std::path::Path;

use crate::alloc;
use crate::error::Error;
use crate::format::header::Header;
use crate::format::layout::{META_ROOT_OFF, META_ROOT_SIZE};
use crate::log::{Log, Scanned};
use crate::persist::Domain;
use crate::pool::{read_file, Pool};
use crate::{Backend, LogVariant, Policy};

/// What `info` shows.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PoolInfo {
    /// The verified header.
    pub(crate) header: Header,
    /// File size.
    pub file_len: u64,
    /// Records in the log (awaiting recovery or a checkpoint).
    pub log_records: u64,
    /// Blocks in the log list.
    pub log_blocks_used: u64,
    /// Root object offset (0 = none) and size.
    pub root: (u64, u64),
}

impl PoolInfo {
    /// The layout name.
    pub fn layout_name(&self) -> &str {
        &self.header.layout_name
    }

    /// The pool's UUID.
    pub fn uuid(&self) -> [u8; 16] {
        self.header.uuid
    }

    /// The log variant.
    pub fn variant(&self) -> LogVariant {
        self.header.variant
    }

    /// The commit policy.
    pub fn policy(&self) -> Policy {
        self.header.policy
    }

    /// The backend the pool was created with.
    pub fn backend(&self) -> Backend {
        self.header.backend
    }

    /// The pool size the header records.
    pub fn pool_size(&self) -> u64 {
        self.header.layout.pool_size
    }
}

impl fmt::Display for PoolInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = &self.header;
        let l = &h.layout;
        let uuid: String = h.uuid.iter().map(|b| format!("{b:02x}")).collect();
        writeln!(f, "layout name    {}", h.layout_name)?;
        writeln!(f, "uuid           {uuid}")?;
        writeln!(
            f,
            "pool size      {} bytes (file {})",
            l.pool_size, self.file_len
        )?;
        writeln!(f, "log            {} / {}", h.variant, h.policy)?;
        writeln!(f, "backend        {} (recorded at create)", h.backend)?;
        writeln!(
            f,
            "log region     {:#x}: {} blocks of {} bytes, {} cells each; {} in use, {} records",
            l.log_off,
            l.log_blocks,
            l.log_block_size,
            l.bucket_cells,
            self.log_blocks_used,
            self.log_records
        )?;
        writeln!(
            f,
            "heap           {:#x}: {} chunks of 256 KiB",
            l.heap_off, l.heap_chunks
        )?;
        write!(
            f,
            "root object    {:#x} ({} bytes)",
            self.root.0, self.root.1
        )
    }
}

/// What `check` found.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct CheckReport {
    /// Inconsistencies; empty means the pool is consistent.
    pub problems: Vec<String>,
    /// Facts worth knowing that are not problems.
    pub notes: Vec<String>,
}

impl CheckReport {
    /// True when no problem was found.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        for p in &self.problems {
            writeln!(f, "problem: {p}")?;
        }
        if self.is_ok() {
            write!(f, "consistent")
        } else {
            write!(f, "{} problem(s) found", self.problems.len())
        }
    }
}

fn scan(header: &Header, bytes: &[u8]) -> Result<(Vec<Scanned>, u64, bool), Error> {
    let dom = Domain::sim_from_image(bytes[..header.layout.pool_size as usize].to_vec());
    let opened = Log::open(
        &dom,
        &header.layout,
        header.variant,
        crate::log::adll::List::LOG,
        std::sync::Arc::new(crate::log::Lsns::new()),
    )?;
    let blocks = opened.log.stats().blocks_used;
    Ok((
        opened.records,
        blocks,
        opened.repair.append || opened.repair.remove,
    ))
}

fn word(bytes: &[u8], off: u64) -> u64 {
    u64::from_le_bytes(bytes[off as usize..off as usize + 8].try_into().expect("8"))
}

/// Header and usage of a pool file.
pub fn info(path: &Path) -> Result<PoolInfo, Error> {
    let (header, bytes) = read_file(path)?;
    let (records, blocks, _) = scan(&header, &bytes)?;
    Ok(PoolInfo {
        file_len: bytes.len() as u64,
        log_records: records.len() as u64,
        log_blocks_used: blocks,
        root: (word(&bytes, META_ROOT_OFF), word(&bytes, META_ROOT_SIZE)),
        header,
    })
}

/// Verifies header, log and allocator, and that recovery would succeed.
/// `Err` when the header itself cannot be read.
pub fn check(path: &Path) -> Result<CheckReport, Error> {
    let (header, bytes) = read_file(path)?;
    Ok(check_bytes(&header, &bytes))
}

/// [`check`] on a pool image in memory (a copy of a pool file's bytes).
pub fn check_image(bytes: &[u8]) -> Result<CheckReport, Error> {
    let page = &bytes[..bytes.len().min(crate::format::layout::HEADER_SIZE as usize)];
    let header = Header::decode(Path::new("<image>"), page, bytes.len() as u64)?;
    Ok(check_bytes(&header, bytes))
}

fn check_bytes(header: &Header, bytes: &[u8]) -> CheckReport {
    let mut r = CheckReport::default();
    match scan(header, bytes) {
        Ok((records, _, repaired)) => {
            if repaired {
                r.notes
                    .push("an interrupted log operation will be redone at open".into());
            }
            if !records.is_empty() {
                r.notes.push(format!(
                    "the log holds {} records; opening the pool recovers them",
                    records.len()
                ));
            }
        }
        Err(e) => r.problems.push(format!("log: {e}")),
    }
    if !r.is_ok() {
        return r;
    }
    let image = bytes[..header.layout.pool_size as usize].to_vec();
    match Pool::from_image(image, &header.layout_name) {
        Ok(pool) => check_open(&pool, &mut r),
        Err(e) => r.problems.push(format!("recovery would fail: {e}")),
    }
    r
}

/// Checks an open (so recovered) pool: its log list, its root object and
/// its allocator metadata. The crash explorer runs it on every image it
/// recovers.
pub fn check_pool(pool: &Pool) -> CheckReport {
    let mut r = CheckReport::default();
    if let Err(e) = pool.eng.log.check_list(&pool.eng.dom) {
        r.problems.push(format!("log: {e}"));
    }
    check_open(pool, &mut r);
    r
}

fn check_open(pool: &Pool, r: &mut CheckReport) {
    let d = &pool.eng.dom;
    let l = &pool.eng.hdr.layout;
    let root = d.read_u64(META_ROOT_OFF).unwrap_or(0);
    if root != 0 {
        let rsize = d.read_u64(META_ROOT_SIZE).unwrap_or(0);
        match alloc::allocated_size(d, l, root) {
            Ok(b) if b >= rsize => {}
            Ok(b) => r.problems.push(format!(
                "root object at {root:#x} is {rsize} bytes but its block is only {b}"
            )),
            Err(e) => r.problems.push(format!("root object at {root:#x}: {e}")),
        }
    }
    match alloc::allocated_blocks(d, l) {
        Ok(blocks) => {
            let s = pool.alloc_stats();
            r.notes.push(format!(
                "heap: {} blocks allocated; {} of {} chunks free",
                blocks.len(),
                s.free_chunks,
                s.total_chunks
            ));
        }
        Err(e) => r.problems.push(format!("heap: {e}")),
    }
}

/// One line per log record, in log order.
pub fn dump_log(path: &Path) -> Result<Vec<String>, Error> {
    let (header, bytes) = read_file(path)?;
    let (records, _, _) = scan(&header, &bytes)?;
    Ok(records
        .iter()
        .map(|s| {
            let r = &s.rec;
            format!(
                "lsn {:>6}  tx {:>6}  {:<10} target {:#010x}  len {:>4}  aux {}  (block {:#x} cell {})",
                r.lsn,
                r.tx,
                r.kind.name(),
                r.target,
                r.new.len(),
                r.aux,
                s.cell.block,
                s.cell.idx
            )
        })
        .collect())
}
