//! Offline inspection, like `pmempool info | check`: never writes the file.
//!
//! The pool's recorded size is mapped privately (copy on write), never read
//! whole: recovery is tried on that private copy, and only the pages it
//! touches (metadata and log) take memory, so a 4 MiB pool whose file was
//! extended to a sparse terabyte is inspected in a few MiB. The reports
//! derive `serde::Serialize` (`rewind info --json`, `check --json`,
//! `dump-log --json`).
//!
//! A pool in use (another process holds its lock) is not recovered or
//! scanned: its log and heap change under the reader. [`info`] then
//! reports the header, which never changes after create, and says the pool
//! is in use; [`check`] and [`dump_log`] refuse it (`PoolInUse`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::Serialize;

use crate::alloc;
use crate::alloc::catalog::NamedRoot;
use crate::error::Error;
use crate::format::header::{Header, VERSION};
use crate::format::layout::{HEADER_SIZE, META_ROOT_OFF, META_ROOT_SIZE};
use crate::format::meta;
use crate::format::record::{Kind, END_COMMITTED};
use crate::log::{Log, Scanned};
use crate::persist::Domain;
use crate::pool::{file, Pool};
use crate::{Backend, LogVariant, Policy};

/// What `info` shows.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct PoolInfo {
    /// The verified header.
    #[serde(skip)]
    pub(crate) header: Header,
    /// Layout name given at create.
    pub layout: String,
    /// UUID, hex.
    pub uuid_hex: String,
    /// On-media format version.
    pub format_version: u32,
    /// Pool size at create, as the header records it.
    pub size: u64,
    /// The size the pool may grow to (its chunk table's).
    pub max_size: u64,
    /// File size (a file may be longer than its pool; it grows with the heap).
    pub file_len: u64,
    /// Log variant, commit policy, backend recorded at create.
    pub log_variant: String,
    /// Commit policy.
    pub commit_policy: String,
    /// Backend recorded at create.
    pub created_backend: String,
    /// Log region: offset, blocks, block size, cells per block.
    pub log_region: (u64, u64, u64, u64),
    /// Commit ring: offset, lanes, bytes per lane.
    pub commit_ring: (u64, u64, u64),
    /// Heap: offset and chunk count (now, after recovery; at create for
    /// a pool in use).
    pub heap: (u64, u64),
    /// Another opener holds the pool: only the header is shown (the log
    /// and heap change under a reader).
    pub in_use: bool,
    /// Records in the log (awaiting recovery or a checkpoint); `None` for
    /// a pool in use.
    pub log_records: Option<u64>,
    /// Blocks in the log list; `None` for a pool in use.
    pub log_blocks_used: Option<u64>,
    /// Root object offset (0 = none) and size; `None` for a pool in use.
    pub root: Option<(u64, u64)>,
    /// Heap usage after recovery; `None` for a pool in use or one whose
    /// recovery fails.
    pub heap_usage: Option<HeapUsage>,
    /// The named roots (the catalog) after recovery; `None` as for
    /// `heap_usage`.
    pub roots: Option<Vec<NamedRoot>>,
}

/// Heap usage: chunks, and bytes allocated and free (see [`crate::AllocStats`]).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct HeapUsage {
    /// Blocks allocated.
    pub blocks: u64,
    /// Bytes in allocated blocks.
    pub bytes_used: u64,
    /// Bytes free (free chunks and free blocks of class chunks).
    pub bytes_free: u64,
    /// Free chunks of the total.
    pub free_chunks: u64,
    /// Chunks in the heap.
    pub total_chunks: u64,
}

impl PoolInfo {
    fn new(header: Header, file_len: u64) -> PoolInfo {
        let l = header.layout;
        PoolInfo {
            layout: header.layout_name.clone(),
            uuid_hex: header.uuid.iter().map(|b| format!("{b:02x}")).collect(),
            format_version: VERSION,
            size: header.size,
            max_size: l.pool_size,
            file_len,
            log_variant: header.variant.to_string(),
            commit_policy: header.policy.to_string(),
            created_backend: header.backend.to_string(),
            log_region: (l.log_off, l.log_blocks, l.log_block_size, l.bucket_cells),
            commit_ring: (l.ring_off(), l.lanes, l.lane_len()),
            heap: (l.heap_off, header.initial_chunks()),
            in_use: false,
            log_records: None,
            log_blocks_used: None,
            root: None,
            heap_usage: None,
            roots: None,
            header,
        }
    }

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

    /// The pool size at create the header records.
    pub fn pool_size(&self) -> u64 {
        self.header.size
    }
}

impl fmt::Display for PoolInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = &self.header;
        let l = &h.layout;
        if self.in_use {
            writeln!(f, "IN USE         another opener holds the pool: header only (the log and heap change under a reader)")?;
        }
        writeln!(f, "layout name    {}", h.layout_name)?;
        writeln!(f, "uuid           {}", self.uuid_hex)?;
        writeln!(f, "format         version {}", self.format_version)?;
        writeln!(
            f,
            "pool size      {} bytes at create, {} at most (file {})",
            self.size, self.max_size, self.file_len
        )?;
        writeln!(f, "log            {} / {}", h.variant, h.policy)?;
        writeln!(f, "backend        {} (recorded at create)", h.backend)?;
        write!(
            f,
            "log region     {:#x}: {} blocks of {} bytes, {} cells each",
            l.log_off, l.log_blocks, l.log_block_size, l.bucket_cells,
        )?;
        if let (Some(b), Some(r)) = (self.log_blocks_used, self.log_records) {
            write!(f, "; {b} in use, {r} records")?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "commit ring    {:#x}: {} lane(s) of {} bytes",
            l.ring_off(),
            l.lanes,
            l.lane_len()
        )?;
        write!(
            f,
            "heap           {:#x}: {} chunks of 256 KiB",
            self.heap.0, self.heap.1
        )?;
        if let Some(u) = self.heap_usage {
            write!(
                f,
                "; {} blocks, {} bytes used, {} free; {} chunks free",
                u.blocks, u.bytes_used, u.bytes_free, u.free_chunks
            )?;
        }
        if let Some((off, size)) = self.root {
            write!(f, "\nroot object    {off:#x} ({size} bytes)")?;
        }
        for r in self.roots.iter().flatten() {
            // Escaped: a name's control characters cannot break the layout
            // or drive the terminal.
            let name = r.name.escape_debug().to_string();
            write!(
                f,
                "\nroot `{name}`{:w$} {:#x}: {}",
                "",
                r.offset,
                r.fingerprint,
                w = 12usize.saturating_sub(name.len())
            )?;
        }
        Ok(())
    }
}

/// What `check` found.
#[derive(Clone, Debug, Default, Serialize)]
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

/// Where the bytes come from: a pool file (mapped privately, a fresh
/// mapping for each use) or an image in memory.
enum Source<'a> {
    File(&'a Path),
    Image(&'a [u8]),
}

impl Source<'_> {
    /// The verified header and the file's length.
    fn header(&self) -> Result<(Header, u64), Error> {
        match self {
            Source::File(path) => {
                let (f, len) = file::open(path, file::Access::Shared)?;
                let page = file::read_prefix(path, &f, HEADER_SIZE)?;
                Ok((Header::decode(path, &page, len)?, len))
            }
            Source::Image(b) => {
                let page = &b[..b.len().min(HEADER_SIZE as usize)];
                let h = Header::decode(Path::new("<image>"), page, b.len() as u64)?;
                Ok((h, b.len() as u64))
            }
        }
    }

    /// For a file: whether its open stamp names another file (a copy taken
    /// while its pool was open, or crashed and not yet recovered).
    fn stamp_of_another_file(&self) -> Result<bool, Error> {
        let path = match self {
            Source::File(path) => path,
            // An image has no file identity: any stamp was an opener's.
            Source::Image(b) => {
                let at = meta::STAMP as usize;
                return Ok(b.len() >= at + 8 && b[at..at + 8] != [0u8; 8]);
            }
        };
        let (f, _) = file::open(path, file::Access::Unlocked)?;
        let id = file::identity(path, &f)?;
        let mut w = [0u8; 8];
        use std::os::unix::fs::FileExt;
        f.read_exact_at(&mut w, meta::STAMP)
            .map_err(|e| Error::io(path, e))?;
        let stamp = u64::from_le_bytes(w);
        Ok(stamp != 0 && stamp != id)
    }

    /// A domain over the pool's bytes whose stores stay private.
    fn domain(&self, h: &Header) -> Result<Domain, Error> {
        // The pool's bytes: the file's, up to the maximum size (a file
        // may be longer than its pool; the heap size word says how much
        // of it the heap holds).
        let max = h.layout.pool_size;
        match self {
            Source::File(path) => {
                let (f, len) = file::open(path, file::Access::Shared)?;
                Domain::map_private(path, f.into_file(), len.min(max))
            }
            Source::Image(b) => Ok(Domain::sim_from_image(
                b[..(b.len() as u64).min(max) as usize].to_vec(),
            )),
        }
    }
}

fn scan(src: &Source<'_>, header: &Header) -> Result<(Vec<Scanned>, u64, bool), Error> {
    let dom = src.domain(header)?;
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

/// Header and usage of a pool file. A pool in use shows its header only,
/// with `in_use` set.
pub fn info(path: &Path) -> Result<PoolInfo, Error> {
    let src = Source::File(path);
    let (header, len) = match src.header() {
        Err(Error::PoolInUse { .. }) => {
            // The header never changes after create: safe to read unlocked.
            let (f, len) = file::open(path, file::Access::Unlocked)?;
            let page = file::read_prefix(path, &f, HEADER_SIZE)?;
            let mut info = PoolInfo::new(Header::decode(path, &page, len)?, len);
            info.in_use = true;
            return Ok(info);
        }
        r => r?,
    };
    let mut info = PoolInfo::new(header, len);
    let (records, blocks, _) = scan(&src, &info.header)?;
    info.log_records = Some(records.len() as u64);
    info.log_blocks_used = Some(blocks);
    let dom = src.domain(&info.header)?;
    info.root = Some((dom.read_u64(META_ROOT_OFF)?, dom.read_u64(META_ROOT_SIZE)?));
    if let Ok(pool) = Pool::from_domain(src.domain(&info.header)?, &info.header.layout_name) {
        info.heap_usage = heap_usage(&pool).ok();
        if let Some(u) = info.heap_usage {
            info.heap.1 = u.total_chunks;
        }
        info.roots = pool.roots().ok();
    }
    Ok(info)
}

fn heap_usage(pool: &Pool) -> Result<HeapUsage, Error> {
    let blocks = alloc::allocated_blocks(&pool.eng.dom, &pool.eng.hdr.layout)?;
    let s = pool.alloc_stats();
    Ok(HeapUsage {
        blocks: blocks.len() as u64,
        bytes_used: s.bytes_used,
        bytes_free: s.bytes_free,
        free_chunks: s.free_chunks,
        total_chunks: s.total_chunks,
    })
}

/// Verifies header, log and allocator, and that recovery would succeed.
/// `Err` when the header itself cannot be read.
pub fn check(path: &Path) -> Result<CheckReport, Error> {
    let src = Source::File(path);
    let (header, _) = src.header()?;
    Ok(check_source(&src, &header, false))
}

/// A deep check of one named root's object (a collection's invariants):
/// the problems found, none when it is sound. Registered by the type name
/// its fingerprint records ([`register_deep_check`]).
pub type DeepCheck = fn(&Pool, &NamedRoot) -> Vec<String>;

static DEEP_CHECKS: std::sync::Mutex<Vec<(String, DeepCheck)>> = std::sync::Mutex::new(Vec::new());

/// Registers `check` for the named roots whose type fingerprint's name is
/// `type_name` (a collection crate or a program registers its types; the
/// `rewind` command registers those it knows). A later registration of the
/// same name replaces the earlier one.
pub fn register_deep_check(type_name: &str, check: DeepCheck) {
    let mut g = DEEP_CHECKS.lock().unwrap_or_else(|p| p.into_inner());
    g.retain(|(n, _)| n != type_name);
    g.push((type_name.to_string(), check));
}

/// [`check`], then every named root (the catalog) whose type has a
/// registered deep check is checked by it; a root without one is a note.
pub fn check_deep(path: &Path) -> Result<CheckReport, Error> {
    let src = Source::File(path);
    let (header, _) = src.header()?;
    Ok(check_source(&src, &header, true))
}

fn deep(pool: &Pool, r: &mut CheckReport) {
    let roots = match pool.roots() {
        Ok(roots) => roots,
        Err(e) => return r.problems.push(format!("catalog: {e}")),
    };
    let checks = DEEP_CHECKS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    for root in &roots {
        let name = root.fingerprint.name();
        match checks.iter().find(|(n, _)| *n == name) {
            Some((_, f)) => r.problems.extend(
                f(pool, root)
                    .into_iter()
                    .map(|p| format!("root `{}` ({name}): {p}", root.name.escape_debug())),
            ),
            None => r.notes.push(format!(
                "root `{}` ({name}): no deep check registered for its type",
                root.name.escape_debug()
            )),
        }
    }
}

/// [`check`] on a pool image in memory (a copy of a pool file's bytes).
pub fn check_image(bytes: &[u8]) -> Result<CheckReport, Error> {
    let src = Source::Image(bytes);
    let (header, _) = src.header()?;
    Ok(check_source(&src, &header, false))
}

fn check_source(src: &Source<'_>, header: &Header, deep_check: bool) -> CheckReport {
    let mut r = CheckReport::default();
    match src.stamp_of_another_file() {
        Ok(false) => {}
        Ok(true) => r.problems.push(
            "this file is a copy of a pool taken while the pool was open (or had crashed and \
             was not yet recovered): its open stamp names another file. A copy of a live pool \
             (cp) may be torn: nothing can tell; use Pool::backup_to or `rewind copy`"
                .into(),
        ),
        Err(e) => r.problems.push(format!("open stamp: {e}")),
    }
    match scan(src, header) {
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
    // One private domain: the ring surveyed first, then recovery tried on
    // it. (A ring that cannot be read is the recovery attempt's problem.)
    let dom = src.domain(header);
    let to_replay = (dom.as_ref().ok())
        .and_then(|d| crate::log::lanes::Lanes::to_replay(d, &header.layout).ok());
    if let Some(n @ 1..) = to_replay {
        r.notes.push(format!(
            "the commit ring holds {n} commit groups to replay; opening the pool replays them"
        ));
    }
    if !r.is_ok() {
        return r;
    }
    match dom.and_then(|d| Pool::from_domain(d, &header.layout_name)) {
        Ok(pool) => {
            check_open(&pool, &mut r);
            if deep_check && r.is_ok() {
                deep(&pool, &mut r);
            }
        }
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
    match heap_usage(pool) {
        Ok(u) => r.notes.push(format!(
            "heap: {} blocks allocated ({} bytes), {} bytes free; {} of {} chunks free",
            u.blocks, u.bytes_used, u.bytes_free, u.free_chunks, u.total_chunks
        )),
        Err(e) => r.problems.push(format!("heap: {e}")),
    }
}

/// One log record, as `dump-log` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct LogRecord {
    /// Log sequence number.
    pub lsn: u64,
    /// Kind (UPDATE, CLR, END, ...).
    pub kind: &'static str,
    /// Flags byte.
    pub flags: u8,
    /// Target offset (0: none).
    pub target: u64,
    /// Bytes in its value.
    pub len: u64,
    /// Aux word.
    pub aux: u64,
    /// The transaction's previous record.
    pub prev: u64,
    /// Where it is: log block and cell.
    pub block: u64,
    /// Its cell in the block.
    pub cell: u64,
}

/// A transaction's records in the log and what recovery does with it, or
/// a commit group of the commit ring (the redo policies' commits).
#[derive(Clone, Debug, Serialize)]
pub struct LogTransaction {
    /// Transaction id (0: checkpoint records); for a commit group, its
    /// global commit number (a group names no transaction).
    pub tx: u64,
    /// `committed`, `rolled back`, `rolling back` (recovery finishes the
    /// rollback), `in flight` (recovery undoes it), `torn commit`
    /// (a redo group without its END: discarded), or `checkpoint`; for a
    /// commit group, `committed` (recovery replays it) or `in place`
    /// (durable in place already: recovery skips it).
    pub status: &'static str,
    /// Its records, in log order; for a commit group, its entries:
    /// `VALUE` (`target`, `len`), `ALLOC` and `FREE` (the block, its size
    /// in `len`), with `block` the group's pool offset and `cell` the
    /// entry's index.
    pub records: Vec<LogRecord>,
    /// For a commit group: where it is in the commit ring.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<GroupPlace>,
}

/// Where a commit group is: its lane of the commit ring and its sequence
/// number there.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct GroupPlace {
    /// Its commit lane.
    pub lane: u64,
    /// Its sequence number in the lane.
    pub csn: u64,
    /// Its pool offset.
    pub offset: u64,
}

impl fmt::Display for LogTransaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(g) = &self.group {
            write!(
                f,
                "commit group {} (lane {}, group {}, at {:#x}) — {} ({} entries)",
                self.tx,
                g.lane,
                g.csn,
                g.offset,
                self.status,
                self.records.len()
            )?;
            for r in &self.records {
                write!(
                    f,
                    "\n  {:<10} target {:#010x}  len {:>4}",
                    r.kind, r.target, r.len
                )?;
            }
            return Ok(());
        }
        write!(
            f,
            "tx {} — {} ({} records)",
            self.tx,
            self.status,
            self.records.len()
        )?;
        for r in &self.records {
            write!(
                f,
                "\n  lsn {:>6}  {:<10} target {:#010x}  len {:>4}  aux {}  prev {}  (block {:#x} cell {})",
                r.lsn, r.kind, r.target, r.len, r.aux, r.prev, r.block, r.cell
            )?;
        }
        Ok(())
    }
}

/// The log's records grouped by transaction (in the order of each one's
/// first record), with each transaction's status, then the commit ring's
/// groups (in global commit order: every group from each lane's durable
/// Log Start to its first missing one, those recovery replays and those
/// already in place).
pub fn dump_log(path: &Path) -> Result<Vec<LogTransaction>, Error> {
    let src = Source::File(path);
    let (header, _) = src.header()?;
    let mut txs = log_transactions(&src, &header)?;
    let dom = src.domain(&header)?;
    let groups = crate::log::lanes::Lanes::found(&dom, &header.layout)?;
    txs.extend(groups.into_iter().map(commit_group));
    Ok(txs)
}

/// A commit group as `dump_log` lists it.
fn commit_group(g: crate::log::lanes::FoundGroup) -> LogTransaction {
    use crate::log::lanes::FoundEntry;
    let records = (g.entries.iter().enumerate())
        .map(|(i, e)| {
            let (kind, target, len) = match *e {
                FoundEntry::Value { target, len } => ("VALUE", target, len),
                FoundEntry::Bits { off, size, set } => {
                    (if set { "ALLOC" } else { "FREE" }, off, size)
                }
            };
            LogRecord {
                lsn: 0,
                kind,
                flags: 0,
                target,
                len,
                aux: 0,
                prev: 0,
                block: g.at,
                cell: i as u64,
            }
        })
        .collect();
    LogTransaction {
        tx: g.gcn,
        status: if g.replays { "committed" } else { "in place" },
        records,
        group: Some(GroupPlace {
            lane: g.lane,
            csn: g.csn,
            offset: g.at,
        }),
    }
}

/// The bucket log's records grouped by transaction, as [`dump_log`] lists
/// them.
fn log_transactions(src: &Source<'_>, header: &Header) -> Result<Vec<LogTransaction>, Error> {
    let (mut records, _, _) = scan(src, header)?;
    records.sort_by_key(|s| s.rec.lsn);
    let mut order = Vec::new();
    let mut by_tx: BTreeMap<u64, Vec<&Scanned>> = BTreeMap::new();
    for s in &records {
        let e = by_tx.entry(s.rec.tx).or_default();
        if e.is_empty() {
            order.push(s.rec.tx);
        }
        e.push(s);
    }
    Ok(order
        .into_iter()
        .map(|tx| {
            let recs = &by_tx[&tx];
            let has = |k: Kind| recs.iter().any(|s| s.rec.kind == k);
            let committed = recs
                .iter()
                .any(|s| s.rec.kind == Kind::End && s.rec.flags & END_COMMITTED != 0);
            let status = if tx == 0 {
                "checkpoint"
            } else if committed {
                "committed"
            } else if has(Kind::End) {
                "rolled back"
            } else if has(Kind::Rollback) {
                "rolling back"
            } else if has(Kind::Redo) && recs.iter().all(|s| s.rec.kind == Kind::Redo) {
                "torn commit"
            } else {
                "in flight"
            };
            LogTransaction {
                tx,
                status,
                records: recs
                    .iter()
                    .map(|s| LogRecord {
                        lsn: s.rec.lsn,
                        kind: s.rec.kind.name(),
                        flags: s.rec.flags,
                        target: s.rec.target,
                        len: s.rec.new.len() as u64,
                        aux: s.rec.aux,
                        prev: s.rec.prev,
                        block: s.cell.block,
                        cell: s.cell.idx as u64,
                    })
                    .collect(),
                group: None,
            }
        })
        .collect())
}
