//! Pools: create, open (which runs recovery first), the root object, reads.
//!
//! A pool is one file (or a simulated region) holding the header, the meta
//! page, the allocator's metadata, the log and the heap (`layout`). Reads are
//! copies out of the mapping; writes go through a [`Tx`].

mod backup;
pub(crate) mod file;
mod gate;
mod nesting;
mod stream;

use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;

use bytemuck::Pod;

use crate::alloc::catalog::NamedRoot;
use crate::alloc::AllocStats;
use crate::engine::write_back::WriteBack;
use crate::engine::Engine;
use crate::error::Error;
use crate::format::header::{Header, MAX_LAYOUT};
use crate::format::layout::{Layout, HEADER_SIZE, MIN_POOL};
use crate::format::layout::{DEFAULT_GROUP, MAX_BUCKET_CELLS, MAX_POOL};
use crate::format::meta;
pub use crate::format::PPtr;
use crate::log::{LogStats, LogVariant};
use crate::persist::{sites, Backend, Counters, Domain, NvmLatency};
use crate::recovery::RecoveryReport;
use crate::tx::{Policy, Tx};

/// How to create a pool: `PoolConfig::default()` and the builder methods.
///
/// ```
/// use rewind::{Backend, LogVariant, Policy, PoolConfig};
/// let cfg = PoolConfig::default()
///     .log(LogVariant::Optimized)
///     .policy(Policy::NoForce)
///     .backend(Backend::Msync);
/// assert_eq!(cfg.policy, Policy::NoForce);
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PoolConfig {
    /// Log structure (default `Batch`).
    pub log: LogVariant,
    /// Commit policy (default `Redo`: the fastest measured on persistent
    /// memory, one fence per transaction that allocates and frees nothing).
    pub policy: Policy,
    /// Persistence backend (default `Pmem`), recorded in the pool and used
    /// by later opens unless they name another.
    pub backend: Backend,
    /// Cells per log bucket, 8 to 2048 (Optimized and Batch; Simple always
    /// uses 1; default 1000).
    pub bucket_cells: u32,
    /// Initial bytes of log (it grows into the heap when a transaction
    /// needs more); default: an eighth of the pool.
    pub log_size: Option<u64>,
    /// Emulated NVM latencies (Pmem only; default none): see
    /// [`NvmLatency`](crate::NvmLatency).
    pub nvm_latency: NvmLatency,
    /// Records a Batch group holds before its one fence: 8, 16, 32 or 64
    /// (default 8, one cache line of cells). Larger groups mean fewer
    /// fences per record in long transactions, and more records a crash
    /// can lose from the group in flight (never a committed one).
    pub group_size: u32,
    /// How `Policy::RedoAsync` writes committed values back (default
    /// eager); not recorded in the pool.
    pub write_back: WriteBack,
    /// The size the pool may grow to (default: its size at create, so it
    /// does not grow). The chunk table and bitmaps are laid out for this
    /// size at create (544 bytes per 256 KiB chunk: 0.2 % of it, taken
    /// from the pool's first bytes), and opening reserves this much
    /// address space, so the mapping never moves when the file grows.
    /// The heap grows when an allocation finds no room, or by
    /// [`Pool::grow`].
    pub max_size: Option<u64>,
    /// Commit lanes (the redo policy's commit ring split so that threads
    /// committing at once wait for none of one another's groups: one
    /// lane per thread, up to the count), 1 to 16, each at least 512 bytes
    /// of the ring (a sixty-fourth of the log). Default: lanes of 32 KiB,
    /// at most 8 (a 64 MiB pool has 4). A group larger than half a lane
    /// commits through the bucket log. On [`Backend::Msync`] every thread
    /// commits in the first lane (a commit there waits for a device flush
    /// the commits arriving meanwhile share; more lanes would only add
    /// pages to each flush); the pool keeps the count for a backend that
    /// uses them.
    pub lanes: Option<u64>,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            log: LogVariant::Batch,
            policy: Policy::Redo,
            backend: Backend::Pmem,
            bucket_cells: 1000,
            log_size: None,
            nvm_latency: NvmLatency::default(),
            group_size: DEFAULT_GROUP,
            write_back: WriteBack::default(),
            max_size: None,
            lanes: None,
        }
    }
}

impl PoolConfig {
    /// The heap of a pool created at `size` bytes with this configuration,
    /// once grown to its maximum size: the bytes of its whole 256 KiB
    /// chunks, what its allocations share. Checks what [`Pool::create`]
    /// checks before it touches a disk, so a configuration no pool of
    /// `size` bytes could be made with is the same
    /// [`Error::InvalidConfig`] here (for a library that takes a
    /// configuration now and creates pools later).
    ///
    /// ```
    /// use rewind::PoolConfig;
    /// let heap = PoolConfig::default().max_size(64 << 20).max_heap(16 << 20)?;
    /// assert!(heap > 48 << 20 && heap < 64 << 20);
    /// // A maximum whose chunk table does not fit a 4 MiB pool beside its log.
    /// assert!(PoolConfig::default().max_size(1 << 40).max_heap(4 << 20).is_err());
    /// # Ok::<(), rewind::Error>(())
    /// ```
    pub fn max_heap(&self, size: u64) -> Result<u64, Error> {
        Ok(plan("max-heap", size, self)?.layout.heap_max())
    }

    /// The write-back of `Policy::RedoAsync`.
    pub fn write_back(mut self, w: WriteBack) -> Self {
        self.write_back = w;
        self
    }

    /// The log structure.
    pub fn log(mut self, v: LogVariant) -> Self {
        self.log = v;
        self
    }

    /// The commit policy.
    pub fn policy(mut self, p: Policy) -> Self {
        self.policy = p;
        self
    }

    /// The persistence backend.
    pub fn backend(mut self, b: Backend) -> Self {
        self.backend = b;
        self
    }

    /// Cells per log bucket.
    pub fn bucket_cells(mut self, n: u32) -> Self {
        self.bucket_cells = n;
        self
    }

    /// Commit lanes (see [`PoolConfig::lanes`](PoolConfig#structfield.lanes)).
    pub fn lanes(mut self, n: u64) -> Self {
        self.lanes = Some(n);
        self
    }

    /// Initial log size in bytes.
    pub fn log_size(mut self, bytes: u64) -> Self {
        self.log_size = Some(bytes);
        self
    }

    /// Emulated NVM latencies (REWIND §5.1 used 150 ns per write).
    pub fn nvm_latency(mut self, l: NvmLatency) -> Self {
        self.nvm_latency = l;
        self
    }

    /// Records per Batch group (8, 16, 32 or 64).
    pub fn group_size(mut self, n: u32) -> Self {
        self.group_size = n;
        self
    }

    /// The size the pool may grow to.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use rewind::{Pool, PoolConfig};
    /// let cfg = PoolConfig::default().max_size(64 << 20);
    /// let pool = Pool::create(dir.path().join("g.pool"), "doc", 4 << 20, &cfg)?;
    /// // 8 MiB do not fit in a 4 MiB pool: the heap grows.
    /// let big = pool.transaction(|tx| tx.alloc_bytes(8 << 20))?;
    /// assert!(pool.size() > 8 << 20);
    /// # Ok::<(), rewind::Error>(())
    /// ```
    pub fn max_size(mut self, bytes: u64) -> Self {
        self.max_size = Some(bytes);
        self
    }
}

/// How to open a pool: `OpenOptions::default()` and the builder methods.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct OpenOptions {
    /// Persistence backend; `None` (the default): the one the pool was
    /// created with. Name another to override it (an `Msync` pool opened
    /// as `Pmem` for speed where only process crashes matter, say).
    pub backend: Option<Backend>,
    /// Emulated NVM latencies (Pmem only; default none).
    pub nvm_latency: NvmLatency,
    /// How `Policy::RedoAsync` writes committed values back (default eager).
    pub write_back: WriteBack,
}

impl OpenOptions {
    /// Runs on `b` instead of the backend recorded in the pool.
    pub fn backend(mut self, b: Backend) -> Self {
        self.backend = Some(b);
        self
    }

    /// Emulated NVM latencies.
    pub fn nvm_latency(mut self, l: NvmLatency) -> Self {
        self.nvm_latency = l;
        self
    }

    /// The write-back of `Policy::RedoAsync`.
    pub fn write_back(mut self, w: WriteBack) -> Self {
        self.write_back = w;
        self
    }
}

/// An open pool. `Send + Sync`: any number of threads may run transactions.
pub struct Pool {
    pub(crate) eng: Arc<Engine>,
    /// The redo-async policy's write-back thread.
    write_back: Option<std::thread::JoinHandle<()>>,
    /// This handle created the pool.
    created: bool,
    /// The open stamp this handle wrote (0: none, a simulated pool).
    stamp: u64,
    /// Entered by every transaction, atomic write, checkpoint and growth,
    /// closed by a backup (see `backup`, `gate`): a backup copies a pool in
    /// which nothing is half done.
    gate: gate::Gate,
}

/// What a pool is, for a program's `{:?}` of a value holding one (and
/// `Result::unwrap_err` on an open): its layout, configuration and size,
/// not its bytes.
impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("layout", &self.eng.hdr.layout_name)
            .field("log", &self.variant())
            .field("policy", &self.policy())
            .field("size", &self.size())
            .field("max_size", &self.max_size())
            .field("created", &self.created)
            .finish_non_exhaustive()
    }
}

fn check_layout_name(name: &str) -> Result<(), Error> {
    if name.is_empty() || name.len() > MAX_LAYOUT || name.contains('\0') {
        return Err(Error::InvalidConfig {
            what: "layout name",
            value: name.to_string(),
            expected: "1 to 63 bytes of UTF-8 without NUL",
        });
    }
    Ok(())
}

impl Pool {
    /// Wraps a started engine, with its write-back thread if it has one.
    fn start(eng: Engine) -> Pool {
        let eng = Arc::new(eng);
        let threaded = eng.write_back.as_ref().is_some_and(|wb| wb.threaded());
        // Without the thread (it could not be spawned), commits write back
        // when the cache or the log fills, and sync and close drain it.
        let write_back = threaded
            .then(|| {
                let e = eng.clone();
                std::thread::Builder::new()
                    .name("rewind-write-back".into())
                    .spawn(move || {
                        if let Some(wb) = &e.write_back {
                            wb.run(&e);
                        }
                    })
                    .ok()
            })
            .flatten();
        Pool {
            eng,
            write_back,
            created: false,
            stamp: 0,
            gate: gate::Gate::default(),
        }
    }

    /// Stops the write-back thread (what it left is drained by a clean
    /// close, or redone by recovery).
    fn stop_write_back(&mut self) {
        if let Some(wb) = &self.eng.write_back {
            wb.stop();
        }
        if let Some(t) = self.write_back.take() {
            let _ = t.join();
        }
    }

    /// Waits until every committed transaction's values are in place and
    /// durable. Under `Policy::RedoAsync` a commit returns once its log
    /// records are durable and the values follow (reads see them at
    /// once): `sync` waits for them, as `close` does. Under the other
    /// policies a commit's values are in place when it returns (no-force:
    /// durable through the log until a checkpoint), and `sync` does
    /// nothing.
    pub fn sync(&self) -> Result<(), Error> {
        self.eng.usable()?;
        let r = self.eng.sync();
        if let Err(e) = &r {
            self.eng.poison(e);
        }
        r
    }

    /// Creates a pool file of `size` bytes; the file must not exist.
    pub fn create(
        path: impl AsRef<Path>,
        layout: &str,
        size: u64,
        cfg: &PoolConfig,
    ) -> Result<Pool, Error> {
        let path = path.as_ref();
        let hdr = plan(layout, size, cfg)?;
        if cfg.backend == Backend::Sim {
            // Refused before the file exists: a simulated domain keeps
            // nothing in a file.
            return Err(Error::InvalidConfig {
                what: "backend",
                value: "sim".into(),
                expected: "pmem or msync for a file pool (Pool::create_sim makes a simulated one)",
            });
        }
        check_write_back(cfg.write_back)?;
        check_latency(cfg.nvm_latency)?;
        // The header and meta page are durable in the file before the
        // file has its name.
        let mut prefix = hdr.encode();
        prefix.extend(meta::initial_page(hdr.initial_chunks(), hdr.layout.lanes));
        let f = file::create(path, size, &prefix)?;
        let stamp = file::identity(path, &f)?;
        let reserve = hdr.layout.pool_size;
        let r =
            Domain::map_reserved(path, f.into_file(), cfg.backend, reserve).and_then(|mut dom| {
                dom.set_latency(cfg.nvm_latency);
                Engine::start(dom, path, layout, cfg.write_back)
                    .map(Pool::start)
                    .and_then(|p| p.stamped(stamp))
            });
        match r {
            Ok(mut p) => {
                p.created = true;
                Ok(p)
            }
            Err(e) => {
                let _ = std::fs::remove_file(path);
                Err(e)
            }
        }
    }

    /// Whether this handle created its pool (`create`, or `open_or_create`
    /// finding no file) rather than opening an existing one.
    pub fn created(&self) -> bool {
        self.created
    }

    /// Opens a pool file, verifying its header and running recovery, on
    /// the backend it was created with unless `opts` names another.
    pub fn open(path: impl AsRef<Path>, layout: &str, opts: &OpenOptions) -> Result<Pool, Error> {
        let path = path.as_ref();
        check_layout_name(layout)?;
        check_write_back(opts.write_back)?;
        check_latency(opts.nvm_latency)?;
        let (f, len) = file::open(path, file::Access::Exclusive)?;
        // The header verified before the file is mapped: a truncated or
        // foreign file is a typed error, not a failed mmap.
        let hdr = Header::decode(path, &file::read_prefix(path, &f, HEADER_SIZE)?, len)?;
        let backend = match (opts.backend, hdr.backend) {
            (Some(b), _) => b,
            // An image of a simulated pool saved to a file.
            (None, Backend::Sim) => Backend::Pmem,
            (None, b) => b,
        };
        // Blocks for every byte the pool may store to (up to its maximum
        // size: growth reuses a file longer than the heap without
        // allocating): a sparse copy is `NoSpace` now, not a `SIGBUS` later.
        file::allocate_holes(path, &f, len.min(hdr.layout.pool_size))?;
        let stamp = file::identity(path, &f)?;
        let mut dom = Domain::map_reserved(path, f.into_file(), backend, hdr.layout.pool_size)?;
        dom.set_latency(opts.nvm_latency);
        // The stamp an opener left: another file's, this is a copy of it.
        let left = dom.read_u64(meta::STAMP)?;
        Engine::start(dom, path, layout, opts.write_back)
            .map(|mut e| {
                e.report.copied_while_open = left != 0 && left != stamp;
                e
            })
            .map(Pool::start)
            .and_then(|p| p.stamped(stamp))
    }

    /// Records `stamp` (this file's identity) as the pool's open stamp, so
    /// that a copy of the file taken while it is open (a `cp`, which may be
    /// torn) shows as one: its stamp is not its own identity.
    fn stamped(mut self, stamp: u64) -> Result<Pool, Error> {
        self.write_stamp(stamp)?;
        self.stamp = stamp;
        Ok(self)
    }

    /// Stores the open stamp, durably.
    fn write_stamp(&self, v: u64) -> Result<(), Error> {
        let d = &self.eng.dom;
        d.store_u64(meta::STAMP, v)?;
        d.flush_at(meta::STAMP, 8, sites::POOL_STAMP_FLUSH)?;
        d.fence_at(sites::POOL_STAMP_FENCE)
    }

    /// After a clean close: the stamp back to 0 (closed).
    fn unstamp(&self) -> Result<(), Error> {
        if self.stamp == 0 {
            return Ok(());
        }
        self.write_stamp(0)
    }

    /// Opens the pool file at `path` if there is one, else creates it with
    /// `size` and `cfg`. A file another opener creates meanwhile is opened.
    /// [`created`](Self::created) says which happened. An existing pool
    /// must be the one asked for: another size (at create: a pool that
    /// grew since is the same pool), maximum size, log, policy, bucket cell
    /// count, group size, commit lane count (`cfg.lanes`, or its default
    /// for the log size) or log size is [`Error::ConfigMismatch`] naming
    /// the setting (never silently the old pool); it is opened on `cfg`'s
    /// backend, latencies and write-back.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("ooc.pool");
    /// use rewind::{Error, Policy, Pool, PoolConfig};
    /// let cfg = PoolConfig::default();
    /// assert!(Pool::open_or_create(&path, "doc", 4 << 20, &cfg)?.created());
    /// assert!(!Pool::open_or_create(&path, "doc", 4 << 20, &cfg)?.created());
    /// let other = cfg.clone().policy(Policy::NoForce);
    /// let e = Pool::open_or_create(&path, "doc", 4 << 20, &other).err().unwrap();
    /// assert!(matches!(e, Error::ConfigMismatch { what: "policy", .. }));
    /// # Ok::<(), rewind::Error>(())
    /// ```
    pub fn open_or_create(
        path: impl AsRef<Path>,
        layout: &str,
        size: u64,
        cfg: &PoolConfig,
    ) -> Result<Pool, Error> {
        let path = path.as_ref();
        let want = plan(layout, size, cfg)?;
        let opts = OpenOptions {
            backend: Some(cfg.backend),
            nvm_latency: cfg.nvm_latency,
            write_back: cfg.write_back,
        };
        let kind = |r: &Result<Pool, Error>| r.as_ref().err().and_then(Error::io_kind);
        // A pool its last holder removes between the create that found it
        // and the open (rewind-sqlite's empty WAL pools) is created again.
        let mut tries = 0;
        loop {
            let created = Pool::create(path, layout, size, cfg);
            if kind(&created) != Some(std::io::ErrorKind::AlreadyExists) {
                return created;
            }
            let opened = Pool::open(path, layout, &opts);
            tries += 1;
            if kind(&opened) != Some(std::io::ErrorKind::NotFound) || tries == 3 {
                let pool = opened?;
                same_config(&pool.eng.hdr, &want)?;
                return Ok(pool);
            }
        }
    }

    /// Closes the pool cleanly (a checkpoint under no-force, then an empty
    /// log), returning what went wrong; dropping the pool does the same and
    /// ignores errors. Whatever is left, the next open recovers.
    pub fn close(mut self) -> Result<(), Error> {
        self.stop_write_back();
        let r = self.eng.clean_close().and_then(|()| self.unstamp());
        // Done: the drop that follows must not repeat it.
        let _ = self.eng.poisoned.set("closed".into());
        r
    }

    /// Opens the pool in a domain of its own (inspection: a private
    /// mapping of a file, or an image), running recovery there.
    pub(crate) fn from_domain(dom: Domain, layout: &str) -> Result<Pool, Error> {
        check_layout_name(layout)?;
        Engine::start(dom, Path::new("<inspection>"), layout, WriteBack::default()).map(Pool::start)
    }

    /// Opens a pool image (a copy of a pool's bytes) in memory: crash
    /// images.
    #[cfg(feature = "testing")]
    pub(crate) fn from_image(image: Vec<u8>, layout: &str) -> Result<Pool, Error> {
        check_layout_name(layout)?;
        Engine::start(
            Domain::sim_from_image(image),
            Path::new("<image>"),
            layout,
            WriteBack::default(),
        )
        .map(Pool::start)
    }

    /// Runs `f` as one transaction. If `f` returns `Ok`, the transaction
    /// commits and its result is returned once it is durable; if `f`
    /// returns `Err` or panics, every change it made is rolled back (and
    /// the panic resumes). Called from a thread-local value's destructor
    /// as its thread ends, once the engine's per-thread state (transaction
    /// ids, the gate's counts) is gone, it is [`Error::TxMisuse`] and `f`
    /// does not run (so are `read_isolated`, `atomic_write`, `checkpoint`
    /// and `grow` there); a destructor that runs before works as anywhere.
    pub fn transaction<R, E: From<Error>>(
        &self,
        f: impl FnOnce(&mut Tx<'_>) -> Result<R, E>,
    ) -> Result<R, E> {
        self.eng.usable()?;
        nesting::thread_usable()?;
        let inside = nesting::InTransaction::enter(self.nesting_key())?;
        // Not entered yet: the thread was in no transaction of this pool.
        let gate = self.gate.enter(false);
        let id = self.eng.new_tx_id();
        nesting::watch_thread();
        let mut tx = Tx::new(&self.eng, id);
        let (r, deadlocked) = match panic::catch_unwind(AssertUnwindSafe(|| f(&mut tx))) {
            Ok(r) => {
                let deadlocked = tx.deadlocked();
                let r = match r {
                    Ok(v) => tx.finish().map(|()| v).map_err(E::from),
                    Err(e) => tx.abort().map_err(E::from).and(Err(e)),
                };
                (r, deadlocked)
            }
            Err(payload) => {
                // Roll back before unwinding further; a failure poisons the
                // handle and leaves the work to recovery at the next open.
                let _ = tx.abort();
                panic::resume_unwind(payload)
            }
        };
        drop((tx, gate, inside));
        crate::engine::locks::after_transaction(deadlocked);
        r
    }

    /// Writes one value atomically and durably, outside any transaction
    /// (MARS's AtomicWrite): after a crash the pool holds the old value or
    /// the new one, never a mix, and once the call returns the new one.
    ///
    /// Under the force policy a value of 1, 2, 4 or 8 bytes at an offset
    /// aligned to its size takes one store, one flush and one fence, and no
    /// log record. Anything else is a transaction of this one write. As
    /// with transactions, isolating concurrent writers of the same bytes is
    /// the program's job.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("aw.pool");
    /// use rewind::{Pool, PoolConfig};
    /// let pool = Pool::create(&path, "doc", 4 << 20, &PoolConfig::default())?;
    /// let counter = pool.transaction(|tx| tx.root::<u64>())?;
    /// let before = pool.counters().fences;
    /// pool.atomic_write(counter, &41)?;
    /// assert_eq!(pool.read(counter)?, 41);
    /// assert_eq!(pool.counters().fences - before, 1); // force, one aligned word
    /// # Ok::<(), rewind::Error>(())
    /// ```
    pub fn atomic_write<T: Pod>(&self, p: PPtr<T>, v: &T) -> Result<(), Error> {
        self.atomic_write_bytes(p.offset(), bytemuck::bytes_of(v))
    }

    /// [`atomic_write`](Self::atomic_write) of bytes at a pool offset.
    pub fn atomic_write_bytes(&self, off: u64, bytes: &[u8]) -> Result<(), Error> {
        // It is a transaction of its own: not inside one of this pool, nor
        // inside an isolated read of it (see `read_isolated`).
        let key = self.nesting_key();
        if nesting::InTransaction::active(key) || nesting::InRead::inside(key) {
            return Err(Error::NestedTransaction);
        }
        let _gate = self.enter()?;
        crate::tx::atomic::atomic_write(&self.eng, off, bytes)
    }

    /// The key of this pool in the thread's record of open transactions.
    pub(super) fn nesting_key(&self) -> usize {
        Arc::as_ptr(&self.eng) as usize
    }

    /// Sets how long a transaction waits for a lock another transaction
    /// holds ([`Tx::lock`]) before its request fails with
    /// [`Error::LockTimeout`] (default 10 s; `Duration::MAX` is kept as
    /// `u64::MAX` microseconds, a wait that never times out; a bound below a
    /// millisecond is kept to the microsecond). Deadlocks
    /// among this pool's transactions are found at once, whatever the
    /// bound; each pool has a lock table of its own, so a cycle through
    /// transactions of two pools (a thread inside a transaction of this
    /// pool waiting in a nested one of another pool for a thread that
    /// waits here) is seen by neither: it ends at the bound, as
    /// [`Error::LockTimeout`] (never under `Duration::MAX`). Threads that
    /// nest transactions of several pools take them in one order. Not
    /// recorded in the pool.
    pub fn set_lock_timeout(&self, timeout: std::time::Duration) {
        self.eng.locks.set_timeout(timeout);
    }

    /// The bound [`set_lock_timeout`](Self::set_lock_timeout) set, as the
    /// lock table keeps it: to the microsecond, `Duration::MAX` for a wait
    /// that never times out.
    pub fn lock_timeout(&self) -> std::time::Duration {
        self.eng.locks.timeout()
    }

    /// Reads a value (the committed state, plus any in-flight stores of
    /// concurrent transactions the program did not isolate).
    pub fn read<T: Pod>(&self, p: PPtr<T>) -> Result<T, Error> {
        self.eng.usable()?;
        let l = &self.eng.hdr.layout;
        crate::alloc::check_access(
            &self.eng.dom,
            l,
            p.offset(),
            std::mem::size_of::<T>() as u64,
        )?;
        let mut v = T::zeroed();
        self.eng
            .read_committed(p.offset(), bytemuck::bytes_of_mut(&mut v))?;
        Ok(v)
    }

    /// A reader of the committed state that checks each block it reads
    /// once (see [`Reader`](crate::Reader)): for a lookup of several small
    /// reads.
    pub fn reader(&self) -> crate::Reader<'_> {
        crate::Reader::new(&self.eng)
    }

    /// Runs `read` on a [`Reader`](crate::Reader), outside any
    /// transaction, isolated from the transactions that lock `key`
    /// exclusively ([`Tx::lock`]): what `read` returns was read while no
    /// such transaction was changing anything, so it is committed state,
    /// whole, as if read under [`Tx::lock_shared`]. While no writer is in
    /// the way it takes no lock (it costs three loads of a counter more
    /// than an unlocked read, and holds up no writer).
    ///
    /// `read` may run twice. It first runs with no lock taken, if no
    /// exclusive hold of `key` is in force, and its result counts if none
    /// began meanwhile. Otherwise (its result dropped, errors included:
    /// bytes read while a writer was changing them may look damaged) it
    /// runs under the lock taken shared, in line with the transactions
    /// that wait for it, and the pool's lock timeout applies
    /// (`Error::LockTimeout`).
    ///
    /// Called on a thread inside a transaction of this pool it is
    /// [`Error::NestedTransaction`], and `read` does not run: it could
    /// answer no consistent question there. It would see that
    /// transaction's own stores under the undo policies (they store in
    /// place) and not under the redo ones (the write set waits for the
    /// commit), and waiting for another writer while holding that
    /// transaction's locks could deadlock unseen. Read through the
    /// transaction instead (`tx.read`, a collection's `get_tx`).
    /// A transaction of this pool (or an atomic write) started inside
    /// `read` is [`Error::NestedTransaction`]: under the lock, taken shared
    /// by this thread, it could never lock `key` (and a
    /// [`backup_to`](Self::backup_to) there is [`Error::TxMisuse`]: it
    /// would wait for such a transaction). An isolated read of
    /// another key inside `read` (a collection's `get` inside another's)
    /// may, under its own lock, wait for a writer that waits for `key`:
    /// that wait is not seen as a deadlock and ends at the lock timeout
    /// ([`Error::LockTimeout`]); read several collections as of one moment
    /// in a transaction instead.
    ///
    /// This is how `rewind-collections` reads a collection outside a
    /// transaction (`map.get(&pool, k)`): every one of its operations
    /// locks the collection's header.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("iso.pool");
    /// use rewind::{Pool, PoolConfig};
    /// let pool = Pool::create(&path, "doc", 4 << 20, &PoolConfig::default())?;
    /// let pair = pool.transaction(|tx| tx.root::<[u64; 2]>())?;
    /// pool.transaction(|tx| {
    ///     tx.lock(pair)?; // writers of the pair lock it
    ///     tx.write(pair, &[1, 1])
    /// })?;
    /// // Both words from one commit, never half of one.
    /// let [a, b] = pool.read_isolated(pair.offset(), |r| r.read(pair))?;
    /// assert_eq!(a, b);
    /// # Ok::<(), rewind::Error>(())
    /// ```
    pub fn read_isolated<R, E: From<Error>>(
        &self,
        key: u64,
        read: impl FnMut(&mut crate::Reader<'_>) -> Result<R, E>,
    ) -> Result<R, E> {
        if nesting::InTransaction::active(self.nesting_key()) {
            return Err(Error::NestedTransaction.into());
        }
        self.isolated(key, read)
    }

    /// [`read_isolated`](Self::read_isolated) for the pool's own lookups
    /// (roots, the catalog), which a transaction may make too: inside one
    /// of this pool, `read` runs once, unchecked (that transaction may hold
    /// the lock itself).
    fn lookup_isolated<R>(
        &self,
        key: u64,
        mut read: impl FnMut(&mut crate::Reader<'_>) -> Result<R, Error>,
    ) -> Result<R, Error> {
        if nesting::InTransaction::active(self.nesting_key()) {
            return read(&mut self.reader());
        }
        self.isolated(key, read)
    }

    /// [`read_isolated`](Self::read_isolated) outside any transaction of
    /// this pool.
    fn isolated<R, E: From<Error>>(
        &self,
        key: u64,
        mut read: impl FnMut(&mut crate::Reader<'_>) -> Result<R, E>,
    ) -> Result<R, E> {
        nesting::thread_usable()?;
        // No transaction of this pool may start inside `read` (it would
        // wait for the lock the second run holds shared: for ever).
        let _reading = nesting::InRead::enter(self.nesting_key());
        if let Some(r) = self.eng.locks.read_quiet(key, || read(&mut self.reader())) {
            return r;
        }
        // A writer in the way: the lock, shared, under an id no
        // transaction has. A read holding no other lock closes no cycle;
        // one nested in an isolated read of this pool that holds a lock
        // waits under that read's id, so that a writer waiting for the
        // outer read's lock while holding this one's key is a cycle the
        // lock table sees (`Deadlock`), not two threads waiting for ever.
        let pool = self.nesting_key();
        // (`try_with`: in a thread-local destructor run after the list's
        // own, as the thread ends, there is none; see `nesting`.)
        let (outer, again) = READ_LOCKS
            .try_with(|h| {
                let h = h.borrow();
                let mine = h.iter().filter(|e| e.0 == pool);
                let again = mine.clone().any(|e| e.2 == key);
                (mine.map(|e| e.1).next(), again)
            })
            .unwrap_or((None, false));
        if again {
            // The enclosing read holds this key's lock: isolated already.
            return read(&mut self.reader());
        }
        let id = outer.unwrap_or_else(|| self.eng.new_tx_id());
        nesting::watch_thread();
        let locks = &self.eng.locks;
        locks.acquire(id, key, crate::engine::locks::Mode::Shared, None)?;
        // Released however `read` ends, a panic included.
        struct Held<'a>(&'a crate::engine::locks::LockTable, usize, u64, u64);
        impl Drop for Held<'_> {
            fn drop(&mut self) {
                let _ = READ_LOCKS.try_with(|h| {
                    let mut h = h.borrow_mut();
                    if let Some(i) = h.iter().rposition(|e| *e == (self.1, self.2, self.3)) {
                        h.remove(i);
                    }
                });
                self.0.release_all(self.2, std::iter::once(self.3));
            }
        }
        let _ = READ_LOCKS.try_with(|h| h.borrow_mut().push((pool, id, key)));
        let _held = Held(locks, pool, id, key);
        read(&mut self.reader())
    }

    /// The heap's bytes once grown to the maximum size (its whole 256 KiB
    /// chunks, what allocations share), as [`PoolConfig::max_heap`] gives
    /// it before the pool exists.
    pub fn max_heap(&self) -> u64 {
        self.eng.hdr.layout.heap_max()
    }

    /// The writers of the lock `key` ([`Tx::lock`]) as of now, for a
    /// reader that takes no lock (a scan through `&Pool`): when
    /// [`written_since`](Self::written_since) is false after its reads, no
    /// transaction held `key` exclusively while it read, so what it read
    /// no holder was changing. Locks share counters (a stripe of the lock
    /// table per key), so a writer of another key may also count.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("watch.pool");
    /// use rewind::{Pool, PoolConfig};
    /// let pool = Pool::create(&path, "doc", 4 << 20, &PoolConfig::default())?;
    /// let x = pool.transaction(|tx| tx.root::<u64>())?;
    /// let w = pool.write_watch(x.offset());
    /// assert!(!pool.written_since(w));
    /// pool.transaction(|tx| {
    ///     tx.lock(x)?;
    ///     tx.write(x, &1)
    /// })?;
    /// assert!(pool.written_since(w));
    /// # Ok::<(), rewind::Error>(())
    /// ```
    pub fn write_watch(&self, key: u64) -> crate::WriteWatch {
        let mut w = self.eng.locks.watch(key);
        w.pool = self.eng.serial;
        w
    }

    /// Whether a transaction held the lock of `w`'s key exclusively when
    /// `w` was taken ([`write_watch`](Self::write_watch)), or took it since.
    /// A watch taken from another pool (or another handle of this one)
    /// says nothing of this pool's writers: true, so that the reader reads
    /// again, under the lock.
    pub fn written_since(&self, w: crate::WriteWatch) -> bool {
        w.pool != self.eng.serial || self.eng.locks.written_since(w)
    }

    /// Reads bytes at a pool offset.
    pub fn read_bytes(&self, off: u64, buf: &mut [u8]) -> Result<(), Error> {
        self.eng.usable()?;
        crate::alloc::check_access(&self.eng.dom, &self.eng.hdr.layout, off, buf.len() as u64)?;
        self.eng.read_committed(off, buf)
    }

    /// The root named `name`, if a transaction created it (see
    /// [`Tx::root_named`]); [`Error::TypeMismatch`] when it was created as
    /// another type.
    pub fn root_named<T: crate::Typed>(&self, name: &str) -> Result<Option<PPtr<T>>, Error> {
        crate::alloc::catalog::check_name(name)?; // as `Tx::root_named` does
        let want = crate::TypeFingerprint::of::<T>();
        match self.roots()?.into_iter().find(|r| r.name == name) {
            None => Ok(None),
            Some(r) if r.fingerprint == want => Ok(Some(PPtr::from_offset(r.offset))),
            Some(r) => Err(Error::TypeMismatch {
                name: name.to_string(),
                found: r.fingerprint.to_string(),
                expected: want.to_string(),
            }),
        }
    }

    /// The named roots in the catalog, in the order they were created.
    /// Isolated from the transactions adding a root (they hold the
    /// catalog's lock until they end): a root of one still running, which
    /// may roll back, is not among them, nor is a catalog half rewritten
    /// (or freed and reused) read as a damaged one. Inside another
    /// isolated read it is an isolated read of another key (see
    /// [`read_isolated`](Self::read_isolated)'s lock timeout). Inside a
    /// transaction of this pool it reads the catalog as it is, unchecked
    /// (that transaction may hold its lock).
    pub fn roots(&self) -> Result<Vec<NamedRoot>, Error> {
        self.eng.usable()?;
        let e = &self.eng;
        self.lookup_isolated(meta::CATALOG, |_| {
            crate::alloc::catalog::read(&e.dom, &e.hdr.layout, &|o, b| e.read_committed(o, b))
        })
    }

    /// The root object, if one was created (see [`Tx::root`]); isolated,
    /// as [`roots`](Self::roots), from a transaction creating it.
    pub fn root<T: Pod>(&self) -> Result<Option<PPtr<T>>, Error> {
        self.lookup_isolated(meta::ROOT, |_| self.eng.root::<T>())
    }

    /// Fences, flushed lines and non-temporal lines so far.
    pub fn counters(&self) -> Counters {
        let mut c = self.eng.dom.counters();
        (c.lock_waits, c.lock_sleeps) = self.eng.locks.waits();
        c
    }

    /// The live threads that hold each commit lane now (a thread takes
    /// the lane fewest hold at its first commit and gives it back when it
    /// ends); empty unless the pool's policy is redo, the one that commits
    /// in lanes.
    pub fn lane_threads(&self) -> Vec<usize> {
        self.eng
            .ring
            .as_ref()
            .map_or_else(Vec::new, |r| r.threads())
    }

    /// What recovery did when this pool was opened.
    pub fn recovery_report(&self) -> RecoveryReport {
        self.eng.report
    }

    /// The log variant.
    pub fn variant(&self) -> LogVariant {
        self.eng.hdr.variant
    }

    /// The commit policy.
    pub fn policy(&self) -> Policy {
        self.eng.policy
    }

    /// Log usage.
    pub fn log_stats(&self) -> LogStats {
        self.eng.log.stats()
    }

    /// Heap usage.
    pub fn alloc_stats(&self) -> AllocStats {
        self.eng.alloc.stats(&self.eng.dom)
    }

    /// The pool's size now: its file's length (it grows up to
    /// [`max_size`](Self::max_size)).
    pub fn size(&self) -> u64 {
        self.eng.dom.len()
    }

    /// The size the pool may grow to ([`PoolConfig::max_size`]).
    pub fn max_size(&self) -> u64 {
        self.eng.hdr.layout.pool_size
    }

    /// The backend the pool was opened with ([`PoolConfig::backend`],
    /// [`OpenOptions::backend`]): what makes its commits durable.
    pub fn backend(&self) -> Backend {
        self.eng.dom.backend()
    }

    /// Grows the heap by at least `bytes` (whole 256 KiB chunks) now,
    /// rather than when an allocation finds no room; returns the pool's
    /// new size. Crash-safe: the file is extended first, then one checked
    /// word records the new heap size, so a crash leaves the old size or
    /// the new one. [`Error::OutOfMemory`] past the maximum size,
    /// [`Error::NoSpaceToGrow`] when the filesystem is full (the pool is
    /// unchanged and usable either way).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use rewind::{Pool, PoolConfig};
    /// let cfg = PoolConfig::default().max_size(16 << 20);
    /// let pool = Pool::create(dir.path().join("g.pool"), "doc", 4 << 20, &cfg)?;
    /// let before = pool.alloc_stats().total_chunks;
    /// let size = pool.grow(1 << 20)?;
    /// assert_eq!(pool.alloc_stats().total_chunks, before + 4);
    /// assert_eq!(size, pool.size());
    /// assert!(pool.grow(1 << 30).is_err()); // past the maximum
    /// # Ok::<(), rewind::Error>(())
    /// ```
    pub fn grow(&self, bytes: u64) -> Result<u64, Error> {
        self.grow_heap(|_| bytes)
    }

    /// Grows the heap until it ends at or past `size` bytes of the file
    /// (nothing when it does already); returns the pool's new size. Up to
    /// [`max_size`](Self::max_size) the heap grows as far as whole chunks
    /// go (to the maximum: as large as the pool can be); past it, as
    /// [`grow`](Self::grow), `OutOfMemory`.
    pub fn grow_to(&self, size: u64) -> Result<u64, Error> {
        let l = &self.eng.hdr.layout;
        let size = match size <= l.pool_size {
            true => size.min(l.heap_end()),
            false => size,
        };
        self.grow_heap(|heap_end| size.saturating_sub(heap_end))
    }

    /// Grows the heap by the bytes `more` asks for, given where the heap
    /// ends now (whole chunks; none for 0); returns the pool's new size.
    /// Where it ends is read under the allocator's lock: a `grow_to` beside
    /// another growth asks only for what is still missing.
    fn grow_heap(&self, more: impl FnOnce(u64) -> u64) -> Result<u64, Error> {
        self.eng.usable()?;
        let _gate = self.enter()?;
        let chunk = crate::format::layout::CHUNK;
        let heap_off = self.eng.hdr.layout.heap_off;
        self.eng.alloc.grow(&self.eng.dom, |chunks| {
            more(heap_off + chunks * chunk).div_ceil(chunk)
        })?;
        Ok(self.size())
    }

    /// Makes the work of every finished transaction durable in place and
    /// clears its log records (no-force; under force there is nothing to do).
    pub fn checkpoint(&self) -> Result<(), Error> {
        let _gate = self.enter()?;
        self.eng.checkpoint()
    }

    /// Sets the fraction of the log's own region (`PoolConfig::log_size`)
    /// whose filling with records triggers an automatic checkpoint after a
    /// no-force commit: in (0, 1], default 0.5. At 1 the checkpoint runs
    /// once the records fill the region: a transaction that needs more
    /// grows the log into the heap, and the checkpoint after its commit
    /// gives that space back. Anything else (0, a negative number, more
    /// than 1, NaN) is `InvalidConfig`, and the fraction stays.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use rewind::{Policy, Pool, PoolConfig};
    /// let cfg = PoolConfig::default().policy(Policy::NoForce);
    /// let mut pool = Pool::create(dir.path().join("c.pool"), "doc", 4 << 20, &cfg)?;
    /// pool.set_checkpoint_fill(0.8)?;
    /// assert!(pool.set_checkpoint_fill(f64::NAN).is_err());
    /// # Ok::<(), rewind::Error>(())
    /// ```
    pub fn set_checkpoint_fill(&mut self, fill: f64) -> Result<(), Error> {
        if !(fill > 0.0 && fill <= 1.0) {
            return Err(Error::InvalidConfig {
                what: "checkpoint fill",
                value: fill.to_string(),
                expected: "a fraction of the log in (0, 1]",
            });
        }
        // Shared only with a redo-async pool's write-back thread, and that
        // policy has no checkpoints.
        if let Some(eng) = Arc::get_mut(&mut self.eng) {
            eng.checkpoint_fill = fill;
        }
        Ok(())
    }
}

/// For rewind's own tests and tools (the `testing` feature): simulated
/// pools, crash images, the persistence domain and mutations.
#[cfg(feature = "testing")]
impl Pool {
    /// Creates a pool in a simulated persistence domain (no file).
    pub fn create_sim(layout: &str, size: u64, cfg: &PoolConfig) -> Result<Pool, Error> {
        let hdr = plan(layout, size, &cfg.clone().backend(Backend::Sim))?;
        check_write_back(cfg.write_back)?;
        let dom = Domain::sim_reserved(size, hdr.layout.pool_size);
        write_header(&dom, &hdr)?;
        let mut p =
            Engine::start(dom, Path::new("<sim>"), layout, cfg.write_back).map(Pool::start)?;
        p.created = true;
        Ok(p)
    }

    /// Opens a pool image (a crash image, say) in a simulated domain.
    pub fn open_image(image: Vec<u8>, layout: &str) -> Result<Pool, Error> {
        Pool::from_image(image, layout)
    }

    /// Opens the pool held by a simulated domain (to crash its recovery:
    /// arm a capture on the domain first).
    pub fn open_domain(dom: Domain, layout: &str) -> Result<Pool, Error> {
        check_layout_name(layout)?;
        Engine::start(dom, Path::new("<sim>"), layout, WriteBack::default()).map(Pool::start)
    }

    /// The region geometry.
    pub fn layout(&self) -> &Layout {
        &self.eng.hdr.layout
    }

    /// The persistence domain (crash images on Sim).
    pub fn domain(&self) -> &Domain {
        &self.eng.dom
    }

    /// Disables one ordering point of the engine (crash-test mutations).
    pub fn set_mutation(&mut self, site: Option<crate::persist::Site>) {
        // Simulated pools have no write-back thread to share the engine.
        if let Some(eng) = Arc::get_mut(&mut self.eng) {
            eng.dom.set_mutation(site);
        }
    }

    /// Drops the handle as a crash would: no checkpoint and no log
    /// clearing, so the next open runs recovery. The file and its lock are
    /// released (unlike `std::mem::forget`, which would keep the pool in use).
    pub fn crash(mut self) {
        let _ = self.eng.poisoned.set("simulated crash".into());
        self.stop_write_back();
    }

    /// Committed transactions whose values wait for write-back
    /// (redo-async; 0 otherwise).
    pub fn write_back_pending(&self) -> usize {
        self.eng.write_back.as_ref().map_or(0, |wb| wb.pending())
    }

    /// One step of the redo-async write-back (the crash explorer runs them
    /// as steps of its programs on the simulated domain); `false` when the
    /// cache was empty, and under the other policies.
    pub fn write_back_step(&self) -> Result<bool, Error> {
        match &self.eng.write_back {
            Some(wb) => wb.step(&self.eng, false),
            None => Ok(false),
        }
    }
}

fn plan(layout: &str, size: u64, cfg: &PoolConfig) -> Result<Header, Error> {
    check_layout_name(layout)?;
    if size < MIN_POOL {
        return Err(Error::InvalidConfig {
            what: "pool size",
            value: size.to_string(),
            expected: "at least 1 MiB",
        });
    }
    let max = cfg.max_size.unwrap_or(size);
    if max >= MAX_POOL {
        return Err(Error::InvalidConfig {
            what: match cfg.max_size {
                Some(_) => "max size",
                None => "pool size",
            },
            value: max.to_string(),
            expected: "below 256 TiB (log cells hold 48-bit offsets)",
        });
    }
    if max < size {
        return Err(Error::InvalidConfig {
            what: "max size",
            value: max.to_string(),
            expected: "at least the pool's size",
        });
    }
    let cells = match cfg.log {
        LogVariant::Simple => 1,
        _ => cfg.bucket_cells as u64,
    };
    // A bucket fits in one heap chunk, the unit the log grows by.
    if !(8..=MAX_BUCKET_CELLS).contains(&cells) && cfg.log != LogVariant::Simple {
        return Err(Error::InvalidConfig {
            what: "bucket cells",
            value: cells.to_string(),
            expected: "8 to 2048",
        });
    }
    let log_size = cfg.log_size.unwrap_or(size / 8);
    let plan = |max| {
        Layout::plan(max, log_size, cells)
            .filter(|l| crate::format::header::initial_chunks(l, size).is_some())
    };
    let mut l = match plan(max) {
        Some(l) => l,
        // The pool would fit at its own size: the maximum's chunk table
        // is what leaves no room.
        None if max > size && plan(size).is_some() => return Err(Error::InvalidConfig {
            what: "max size",
            value: max.to_string(),
            expected:
                "small enough for its chunk table to fit in the pool's first size beside the log",
        }),
        // The log takes at least four blocks of its bucket's size: a
        // request below that is rounded up, and the pool may be too small
        // for those and one heap chunk.
        None => {
            let least = 4 * Layout::block_size_for(cells);
            return Err(Error::InvalidConfig {
                what: "log size",
                value: match log_size < least {
                    true => format!(
                        "{log_size} (taken as {least}: four blocks of {cells} bucket cells)"
                    ),
                    false => log_size.to_string(),
                },
                expected: "a log that leaves room for the heap's first 256 KiB chunk (and the \
                           chunk table of the maximum size): a smaller log, fewer bucket cells \
                           or a larger pool",
            });
        }
    };
    if let Some(n) = cfg.lanes {
        if !l.lanes_fit(n) {
            return Err(Error::InvalidConfig {
                what: "commit lanes",
                value: n.to_string(),
                expected: match (1..=crate::format::layout::MAX_LANES).contains(&n) {
                    true => {
                        "lanes of at least 512 bytes of the commit ring (a sixty-fourth of \
                             the log): fewer lanes or a larger log"
                    }
                    false => "1 to 16",
                },
            });
        }
        l.lanes = n;
    }
    let mut uuid = [0u8; 16];
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    uuid.copy_from_slice(&(t ^ (std::process::id() as u128) << 64).to_le_bytes());
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut uuid);
    }
    let group = match cfg.log {
        LogVariant::Batch if matches!(cfg.group_size, 8 | 16 | 32 | 64) => cfg.group_size,
        LogVariant::Batch => {
            return Err(Error::InvalidConfig {
                what: "group size",
                value: cfg.group_size.to_string(),
                expected: "8, 16, 32 or 64",
            })
        }
        _ => 0,
    };
    Ok(Header {
        layout_name: layout.to_string(),
        uuid,
        backend: cfg.backend,
        group,
        variant: cfg.log,
        policy: cfg.policy,
        layout: l,
        size,
    })
}

/// `Err(ConfigMismatch)` naming the first setting of `want` (a planned
/// header) that the pool's header `have` does not have.
fn same_config(have: &Header, want: &Header) -> Result<(), Error> {
    let mismatch =
        |what, found: String, asked: String| Err(Error::ConfigMismatch { what, found, asked });
    let (h, w) = (&have.layout, &want.layout);
    if have.variant != want.variant {
        return mismatch(
            "log",
            format!("{:?}", have.variant),
            format!("{:?}", want.variant),
        );
    }
    if have.policy != want.policy {
        return mismatch(
            "policy",
            format!("{:?}", have.policy),
            format!("{:?}", want.policy),
        );
    }
    if have.size != want.size {
        return mismatch(
            "size",
            format!("{} bytes", have.size),
            format!("{} bytes", want.size),
        );
    }
    if h.pool_size != w.pool_size {
        return mismatch(
            "max size",
            format!("{} bytes", h.pool_size),
            format!("{} bytes", w.pool_size),
        );
    }
    if h.bucket_cells != w.bucket_cells {
        return mismatch(
            "bucket cells",
            h.bucket_cells.to_string(),
            w.bucket_cells.to_string(),
        );
    }
    if have.group != want.group {
        return mismatch("group size", have.group.to_string(), want.group.to_string());
    }
    let log = |l: &Layout| format!("{} bytes", l.log_blocks * l.log_block_size);
    if (h.log_blocks, h.log_block_size) != (w.log_blocks, w.log_block_size) {
        return mismatch("log size", log(h), log(w));
    }
    if h.lanes != w.lanes {
        // Named: a mismatch of the lanes alone was once called one of the
        // log size, giving the same size twice.
        return mismatch("commit lanes", h.lanes.to_string(), w.lanes.to_string());
    }
    if h != w {
        return mismatch("layout", format!("{h:?}"), format!("{w:?}"));
    }
    Ok(())
}

thread_local! {
    /// The locks this thread's isolated reads hold (in the slow path of
    /// [`Pool::read_isolated`]): (pool's nesting key, reader id, lock key),
    /// so that a read nested in another of the same pool waits under the
    /// outer one's id.
    static READ_LOCKS: std::cell::RefCell<Vec<(usize, u64, u64)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// `Err(InvalidConfig)` for a write-back the cache cannot honour.
fn check_write_back(w: WriteBack) -> Result<(), Error> {
    match w {
        WriteBack::Lru { lines } if lines < MIN_LRU_LINES => Err(Error::InvalidConfig {
            what: "LRU write-back lines",
            value: lines.to_string(),
            expected: "at least 16",
        }),
        _ => Ok(()),
    }
}

/// `Err(InvalidConfig)` for an emulated latency past
/// [`NvmLatency::MAX_NS`]: charged by spinning, per line written and per
/// fence, it would make every store of the pool (the create's own) a wait
/// of years.
fn check_latency(l: NvmLatency) -> Result<(), Error> {
    for (what, ns) in [
        ("NVM write latency", l.write_ns),
        ("fence latency", l.fence_ns),
    ] {
        if ns > NvmLatency::MAX_NS {
            return Err(Error::InvalidConfig {
                what,
                value: format!("{ns} ns"),
                expected: "at most 1,000,000 ns (1 ms)",
            });
        }
    }
    Ok(())
}

/// The fewest lines `WriteBack::Lru` holds.
const MIN_LRU_LINES: usize = 16;

#[cfg(feature = "testing")]
fn write_header(dom: &Domain, hdr: &Header) -> Result<(), Error> {
    let mut page = hdr.encode();
    page.extend(meta::initial_page(hdr.initial_chunks(), hdr.layout.lanes));
    dom.store(0, &page)?;
    dom.flush_at(0, page.len() as u64, sites::POOL_HEADER_FLUSH)?;
    // The header persistent before the pool is used.
    dom.fence_at(crate::persist::sites::POOL_HEADER_FENCE)
}

impl Drop for Pool {
    /// A clean close leaves an empty log: no-force work is checkpointed,
    /// then every block is removed, oldest first. No transaction runs now,
    /// so what remains belongs to finished ones (dead END records under
    /// force), and a crash during the removal leaves a suffix of it, which
    /// recovery finds finished. Errors are ignored: whatever is left is
    /// recovered at the next open.
    fn drop(&mut self) {
        self.stop_write_back();
        if self.eng.clean_close().is_ok() {
            let _ = self.unstamp();
        }
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn f<T: Send + Sync>() {}
    f::<Pool>();
}
