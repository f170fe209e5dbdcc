//! The persistence domain: store, non-temporal store, flush, fence.
//!
//! Every byte `rewind` writes to a pool goes through a [`Domain`], and every
//! ordering point (a flush of a cache line, a fence) is a call on it. Nothing
//! above this module issues a flush or fence instruction directly, so each
//! backend — and the crash simulator — sees every ordering point.
//!
//! Three backends are chosen at open time ([`Backend`]) and dispatched by an
//! `enum` match per operation, never through a boxed trait object:
//!
//! * **Pmem** — real instructions: `clwb` (else `clflushopt`, else `clflush`),
//!   `sfence`, `movnti`. Correct on DAX-mapped persistent memory and on any
//!   mapped file for process crashes. Optionally emulates NVM's latencies
//!   ([`NvmLatency`]) by busy-waiting, as REWIND's evaluation did (§5.1).
//! * **Msync** — any file on any filesystem, where a fence is a device flush.
//!   A non-temporal store (the logs' records, commit groups and Log Start
//!   slots) is written to the file with `pwrite`, not through the mapping
//!   (the page cache holds one copy of a page, so the mapping sees it at
//!   once, and a page no mapped store dirtied takes no write fault: on
//!   ext4 a write fault starts a journal handle for the mapping's mtime);
//!   `flush` records the range of cached stores. A `fence` makes every
//!   recorded range durable with **one** `msync(MS_SYNC)` over the
//!   page-aligned span that covers them: the kernel writes back the dirty
//!   pages of that span only and then flushes the device's write cache
//!   once (`vfs_fsync_range`: on ext4, a journal commit only when metadata
//!   the data needs changed). Write-backs a fence may leave behind
//!   ([`Domain::flush_lazy_at`]: a commit group's values stored in place)
//!   wait for [`Domain::fence_lazy_at`], so a redo commit pays one device
//!   flush for its group alone. Counted in [`Counters::device_flushes`].
//!   Fences of several threads share device flushes (group commit): a
//!   fence that finds one in flight waits for it and then, if its own
//!   ranges came too late for it, for the next, which one of the waiters
//!   leads for all of them, once the threads fencing now have joined it
//!   (bounded by half a flush; a lone thread never waits: `Flushes`;
//!   [`Counters::grouped_fences`]).
//! * **Sim** — a simulated domain in ordinary memory (see [`sim`]) that keeps,
//!   per 64-byte line, the persisted contents apart from the stores not yet
//!   guaranteed persistent (a flush is completed only by a fence of the
//!   thread that issued it), and builds the images a power failure could
//!   leave. Its operations are scheduling points ([`Domain::set_schedule`]).
//!
//! Counters of fences, flushed lines, lines written by non-temporal stores
//! and emulated NVM writes are kept for every backend; they are the
//! noise-free numbers the benchmarks report beside times.
//!
//! **NVM emulation** (REWIND §5.1). An NVM write is a line written back by a
//! flush, or a line written by non-temporal stores, where consecutive
//! non-temporal stores of one thread to one line are one write (they meet in
//! a write-combining buffer; a fence drains it, so the next store to that
//! line is a new write). Each costs [`NvmLatency::write_ns`], each fence
//! [`NvmLatency::fence_ns`], spent busy-waiting when the operation is
//! issued (Pmem only). The writes are counted on every backend, charged or
//! not (`Counters::nvm_writes`).

pub(crate) mod backoff;
mod locked;
// The mapping and the flush/fence instructions: the engine's unsafe code.
#[allow(unsafe_code)]
mod mapping;
#[allow(unsafe_code)]
mod pmem;
pub mod sim;
pub mod sites;

use std::cell::RefCell;
use std::fs::OpenOptions;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use thread_local::ThreadLocal;

use crate::error::Error;
pub use crate::format::Backend;
pub(crate) use locked::Locked;
use mapping::Mapping;
pub use pmem::FlushInstr;
use sim::SimState;
pub use sites::Site;

/// Size of a cache line, the unit of flushing and of crash atomicity tracking.
pub const LINE: u64 = 64;

/// A snapshot of a domain's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counters {
    /// Fences (`sfence`, or `msync` rounds on Msync).
    pub fences: u64,
    /// Cache lines written back by flush instructions.
    pub flushed_lines: u64,
    /// Cache lines written by non-temporal stores.
    pub nt_lines: u64,
    /// NVM writes, as the emulation counts (and, with a latency, charges)
    /// them: flushed lines, plus non-temporal lines with consecutive stores
    /// of a thread to one line counted once.
    pub nvm_writes: u64,
    /// Device flushes: `msync` calls on Msync, one per fence with anything
    /// to make durable (0 on the other backends).
    pub device_flushes: u64,
    /// Msync fences made durable by another thread's device flush (group
    /// commit): the fence waited for a flush in flight, or for the next
    /// one that another thread led, instead of issuing its own.
    pub grouped_fences: u64,
    /// Pages the device flushes covered (Msync: the page-aligned spans
    /// given to `msync`).
    pub synced_pages: u64,
    /// Redo commits that, their group durable, found an earlier group not
    /// yet written back and waited for it (the commit ring's order).
    pub order_waits: u64,
    /// Of those, the waits that outlasted the spin and slept.
    pub order_parks: u64,
    /// Redo commits written back ahead of an earlier group that was
    /// durable and writes none of their bytes, instead of after its
    /// write-back (the commit ring's order kept only where bytes meet).
    pub ahead_write_backs: u64,
    /// Requests for a lock of the pool's lock table (`Tx::lock`, a
    /// collection's operation, an isolated read behind a writer) that
    /// found it held in a conflicting mode and waited.
    pub lock_waits: u64,
    /// Of those, the waits that outlasted the spin and slept.
    pub lock_sleeps: u64,
}

impl std::ops::Add for Counters {
    type Output = Counters;
    fn add(self, o: Counters) -> Counters {
        Counters {
            fences: self.fences + o.fences,
            flushed_lines: self.flushed_lines + o.flushed_lines,
            nt_lines: self.nt_lines + o.nt_lines,
            nvm_writes: self.nvm_writes + o.nvm_writes,
            device_flushes: self.device_flushes + o.device_flushes,
            grouped_fences: self.grouped_fences + o.grouped_fences,
            synced_pages: self.synced_pages + o.synced_pages,
            order_waits: self.order_waits + o.order_waits,
            order_parks: self.order_parks + o.order_parks,
            ahead_write_backs: self.ahead_write_backs + o.ahead_write_backs,
            lock_waits: self.lock_waits + o.lock_waits,
            lock_sleeps: self.lock_sleeps + o.lock_sleeps,
        }
    }
}

/// Emulated NVM latencies (REWIND §5.1: 150 ns per write). Zero: none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NvmLatency {
    /// Per NVM write (a flushed line, or a line of non-temporal stores).
    pub write_ns: u64,
    /// Per fence.
    pub fence_ns: u64,
}

impl NvmLatency {
    /// The largest latency a pool takes, per write and per fence (1 ms):
    /// `Pool::create` and `Pool::open` refuse more with
    /// `Error::InvalidConfig`.
    pub const MAX_NS: u64 = 1_000_000;

    /// `write_ns` per NVM write and `fence_ns` per fence.
    pub fn new(write_ns: u64, fence_ns: u64) -> NvmLatency {
        NvmLatency { write_ns, fence_ns }
    }
}

impl Counters {
    /// `self - earlier`, field by field.
    pub fn since(&self, earlier: &Counters) -> Counters {
        Counters {
            fences: self.fences - earlier.fences,
            flushed_lines: self.flushed_lines - earlier.flushed_lines,
            nt_lines: self.nt_lines - earlier.nt_lines,
            nvm_writes: self.nvm_writes - earlier.nvm_writes,
            device_flushes: self.device_flushes - earlier.device_flushes,
            grouped_fences: self.grouped_fences - earlier.grouped_fences,
            synced_pages: self.synced_pages - earlier.synced_pages,
            order_waits: self.order_waits - earlier.order_waits,
            order_parks: self.order_parks - earlier.order_parks,
            ahead_write_backs: self.ahead_write_backs - earlier.ahead_write_backs,
            lock_waits: self.lock_waits - earlier.lock_waits,
            lock_sleeps: self.lock_sleeps - earlier.lock_sleeps,
        }
    }
}

/// Counters without locked instructions: a `lock`-prefixed read-modify-write
/// drains the write-combining buffers, which would split every partial-line
/// non-temporal store into its own memory write and distort what we measure.
/// Each thread owns a slot (threads get slot numbers in order of first use),
/// updated with a plain load and store; reading sums the slots.
struct AtomicCounters {
    slots: Box<[Slot]>,
}

#[derive(Default)]
#[repr(align(64))]
struct Slot {
    fences: AtomicU64,
    flushed_lines: AtomicU64,
    nt_lines: AtomicU64,
    /// NVM writes of non-temporal stores; each flushed line is one more
    /// (a flush then bumps one counter, not two: each bump is a store,
    /// and a store queued behind one that missed the cache delays it).
    nt_writes: AtomicU64,
    device_flushes: AtomicU64,
    grouped_fences: AtomicU64,
    synced_pages: AtomicU64,
    order_waits: AtomicU64,
    order_parks: AtomicU64,
    ahead_write_backs: AtomicU64,
}

const SLOTS: usize = 64;

/// The most lines of a thread's batch of deferred write-backs (see
/// [`Domain::store_flush_lazy_at`]): a commit ring asks for fewer when its
/// lane is small (see `Ring::commit`), since the groups of a batch not yet
/// written back keep the lane's Log Start from passing them.
const BATCH_MAX: usize = 256;

/// The batch of the simulator, whatever the ring asks: a few lines, so
/// that the crash explorer's short programs leave commits' values
/// unwritten across later commits and fences, and explore those states.
const SIM_BATCH: usize = 3;

/// Slots of a batch's filter of the lines it holds (a power of two).
const RECENT: usize = 32;

/// A thread's write-backs that wait (see [`Domain::store_flush_lazy_at`]),
/// and how many batches of them it has written back and made durable.
#[derive(Default)]
struct Deferred {
    /// The lines stored in place and not written back yet.
    lines: Vec<u64>,
    /// A direct-mapped filter of lines in `lines` (line + 1; 0: none): a
    /// line that commits of a batch write again and again (a tree's
    /// header, a counter) is kept once, and written back once.
    recent: [u64; RECENT],
    /// Batches written back so far (`clwb`s issued, or flushes marked in
    /// the simulator): the batch being filled is number `issued + 1`.
    issued: u64,
    /// `issued` at the thread's last fence: every batch up to it is
    /// durable.
    durable: u64,
    /// The batch is written back at the thread's next fence, a commit's
    /// included (a batch of one line, or a commit's write-back of a few
    /// lines: see [`Domain::store_flush_lazy_at`]).
    due: bool,
}

impl Deferred {
    /// Whether the filter says the batch holds line `l` (the offset of
    /// its first byte); if not, it does from now.
    #[inline]
    fn seen(&mut self, l: u64) -> bool {
        let h = ((l / LINE).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 59) as usize % RECENT;
        let seen = self.recent[h] == l + 1;
        self.recent[h] = l + 1;
        seen
    }
}

/// A write-back of this many lines or more is not batched: it is issued
/// at once (or, below [`AT_NEXT_FENCE`], with the next fence). A
/// transaction that wrote as many leaves time for them to complete
/// before its thread's next locked instruction (the next commit's latch),
/// while a batch of many such commits would make one of them wait for
/// all (`examples/txloop batch redo K`, µs per transaction, at once /
/// batched: K=8 0.433 / 0.454, K=64 1.92 / 2.06; K=1 0.326 / 0.251 is
/// batched).
const AT_ONCE: usize = 8;

/// A write-back of [`AT_ONCE`] lines or more but fewer than this goes just
/// before the thread's next fence instead (the next commit's, usually),
/// with that commit's non-temporal stores under its one fence, as the
/// physical floor's loop does: issued at once, its lines were still
/// draining when the next commit's latch and commit number (locked
/// instructions, which wait for them) came, short as the transaction
/// between was. Larger ones go at once: they drain during the next
/// transaction's own writes, and the fence would wait for them all.
/// `examples/txloop batch redo K`, µs per transaction, medians of 6
/// alternating runs, at once / at the next fence: K=8 0.348 / 0.333, K=9
/// 0.352 / 0.345 (the builds before and after); with the bound read from
/// the environment, K=10 0.352 / 0.351, K=12 0.367 / 0.383, K=16 0.40 /
/// 0.44, K=64 1.07 / 1.14.
const AT_NEXT_FENCE: usize = 10;

#[inline]
fn slot_index() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SLOTS;
    }
    INDEX.with(|i| *i)
}

#[inline]
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

impl Default for AtomicCounters {
    fn default() -> Self {
        AtomicCounters {
            slots: (0..SLOTS).map(|_| Slot::default()).collect(),
        }
    }
}

impl AtomicCounters {
    #[inline]
    fn slot(&self) -> &Slot {
        &self.slots[slot_index()]
    }

    fn sum(&self, f: impl Fn(&Slot) -> &AtomicU64) -> u64 {
        self.slots
            .iter()
            .map(|s| f(s).load(Ordering::Relaxed))
            .sum()
    }
}

enum Kind {
    Pmem {
        instr: FlushInstr,
    },
    /// `flush`: the ranges the next device flush makes durable (flushed
    /// cached stores, and non-temporal stores, already written to the
    /// file) and the group commit's bookkeeping (see [`Flushes`]);
    /// `flushed`: signalled when a device flush ends; `lazy`: ranges only
    /// [`Domain::fence_lazy_at`] makes durable (see
    /// [`Domain::flush_lazy_at`]).
    Msync(Box<Msync>),
    Sim(Box<Sim>),
}

/// Msync's state (boxed: a `Domain` stays small).
struct Msync {
    flush: Mutex<Flushes>,
    /// Signalled when a device flush ends.
    flushed: parking_lot::Condvar,
    /// Signalled when a gathering leader's group is complete.
    gathered: parking_lot::Condvar,
    /// `Flushes::joined`, read without the lock by a gathering leader that
    /// yields (`backoff`) rather than sleeps.
    joined: AtomicU64,
    /// Device flushes ended (or failed): what a fence waiting for the
    /// flush in flight watches while it yields (`backoff`) before it
    /// sleeps on `flushed`.
    ended: AtomicU64,
    /// `Flushes::durable`, read without the lock
    /// ([`Domain::record_durable`]).
    durable: AtomicU64,
    /// The last group of fences held more threads than there are
    /// processors: waiters yield before they sleep (`backoff`).
    crowded: std::sync::atomic::AtomicBool,
    lazy: Mutex<Vec<(u64, u64)>>,
}

/// Msync's group commit. Every range recorded for a fence gets a number
/// (`recorded` counts them); a device flush takes every range recorded so
/// far and, once its `msync` returns, `durable` is the count it covered. A
/// fence waits until `durable` reaches the count at its start: it leads a
/// flush itself when none is in flight, and otherwise waits for the one in
/// flight and, if that one started before its ranges were recorded, for
/// the next, which the first waiter to wake leads. So fences that arrive
/// while a flush is in flight share the next one: one device flush for a
/// whole group of commits.
///
/// **Gathering.** Left at that, `T` threads committing in a loop settle
/// into two cohorts of `T / 2` that alternate: the threads one flush
/// releases come back while the next one is in flight. So a leader first
/// waits for the threads that are committing now to join its group: the
/// group the last flush made durable plus the fences that joined while it
/// was in flight (`expect`, at most the number of threads fencing). It
/// waits until that many have joined (the last one to join wakes it) or
/// for at most half the last flush's duration, whichever comes first;
/// while more threads commit than there are processors, it yields the
/// processor to them (`backoff`) instead of sleeping, watching `joined`,
/// so that no futex wake stands between the last fence to join and the
/// flush. A lone thread expects only itself and never waits; a thread
/// that stops committing costs the next leader at most that bound once,
/// as the next group is then smaller.
#[derive(Default)]
struct Flushes {
    dirty: Vec<(u64, u64)>,
    recorded: u64,
    durable: u64,
    busy: bool,
    /// The count of recorded ranges the flush in flight (or the last one)
    /// took: a fence whose count is higher joins the next group.
    taken: u64,
    /// Fences in the next group so far.
    joined: u64,
    /// Fences the next leader gathers before it flushes (see above).
    expect: u64,
    /// A leader is waiting for `expect` fences to join.
    gathering: bool,
    /// How long the last device flush took: the gathering's bound is half.
    last_flush: std::time::Duration,
    /// A device flush failed: the page cache may have dropped the dirty
    /// pages it could not write, so no later fence can promise anything
    /// (every fence fails from then on).
    failed: Option<String>,
}

impl Flushes {
    /// Records a range; returns its number.
    fn record(&mut self, off: u64, len: u64) -> u64 {
        self.dirty.push((off, len));
        self.recorded += 1;
        self.recorded
    }
}

/// A callback run by a simulated domain at each store, flush and fence,
/// before the simulator's lock is taken: a scheduling point where the crash
/// explorer may block the calling thread to let another one run.
pub type Schedule = Arc<dyn Fn() + Send + Sync>;

struct Sim {
    state: Mutex<SimState>,
    schedule: RwLock<Option<Schedule>>,
    /// Redo commits are written back in sequence order, as on persistent
    /// memory ([`Domain::set_sim_ordered`]).
    ordered: std::sync::atomic::AtomicBool,
}

impl Sim {
    /// The scheduling point, then the simulator state.
    fn lock(&self) -> parking_lot::MutexGuard<'_, SimState> {
        // Cloned out so the callback runs without this lock held: it may
        // block, and the thread it waits for may pass here too.
        let s = self.schedule.read().clone();
        if let Some(s) = s {
            s();
        }
        self.state.lock()
    }
}

/// A persistence domain over one contiguous region (a pool).
pub struct Domain {
    // Declared before `map`, so the simulator (which views the mapping) is
    // dropped first.
    kind: Kind,
    map: Mapping,
    counters: AtomicCounters,
    latency: NvmLatency,
    mutation: Option<Site>,
    /// Fault injection (tests): fences after this many more fail.
    failing: AtomicU64,
    /// Fault injection (tests): the next extensions of the file fail as
    /// a full disk would.
    full_disk: std::sync::atomic::AtomicBool,
    /// Bytes of the region that may be accessed: the file's length (the
    /// mapping may reserve more, see [`Domain::extend`]).
    valid: AtomicU64,
    /// The file behind a file-backed domain, kept open so the pool's
    /// advisory lock lives as long as the mapping (and is released
    /// explicitly with it, see [`Locked`]); on Msync, non-temporal stores
    /// are written to it.
    file: Option<Locked>,
    /// Per thread, the lines its commits stored in place and have not
    /// written back yet (see [`Domain::store_flush_lazy_at`]; persistent
    /// memory and the simulator).
    deferred: Box<ThreadLocal<crate::padded::Padded<RefCell<Deferred>>>>,
}

/// Testing: a point at which this process kills itself with SIGKILL: the
/// `n`-th [`tick`](Self::tick) after [`arm`](Self::arm)`(n)`. Counted
/// without synchronisation: for single-threaded processes.
#[cfg(feature = "testing")]
pub struct KillPoint(AtomicU64);

#[cfg(feature = "testing")]
impl KillPoint {
    /// Disarmed.
    pub const fn new() -> KillPoint {
        KillPoint(AtomicU64::new(u64::MAX))
    }

    /// Kill at the `n`-th tick from now (1: the next one).
    pub fn arm(&self, n: u64) {
        self.0.store(n.max(1), Ordering::Relaxed);
    }

    /// Counts one event; kills the process if it is the armed one.
    #[inline]
    pub fn tick(&self) {
        let left = self.0.load(Ordering::Relaxed);
        if left == u64::MAX {
            return;
        }
        if left > 1 {
            self.0.store(left - 1, Ordering::Relaxed);
            return;
        }
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        // SIGKILL cannot be caught; should it not have been delivered yet:
        std::process::abort();
    }
}

#[cfg(feature = "testing")]
impl Default for KillPoint {
    fn default() -> Self {
        KillPoint::new()
    }
}

/// Testing: killed at just before a fence of any domain.
#[cfg(feature = "testing")]
static KILL_AT_FENCE: KillPoint = KillPoint::new();

/// Testing: this process kills itself with SIGKILL at its `n`-th fence from
/// now (1: the next one), just before the fence: a process crash at an
/// exact point of the persistence protocol, the same on every run (the
/// kill-torture test's children use it instead of a kill at a random
/// instant). Fences of every thread count, without synchronisation: for
/// single-threaded processes.
#[cfg(feature = "testing")]
pub fn kill_at_fence(n: u64) {
    KILL_AT_FENCE.arm(n);
}

/// Whether a file operation failed for want of room: the file system is
/// full (`ENOSPC`), or the file may not be that long (`EFBIG`: the
/// process's `RLIMIT_FSIZE`, or the file system's largest file). Such a
/// failure is `NoSpace` (a new file) or `NoSpaceToGrow` (a growth), not
/// `Io`.
pub(crate) fn no_room(e: rustix::io::Errno) -> bool {
    matches!(e, rustix::io::Errno::NOSPC | rustix::io::Errno::FBIG)
}

/// Bytes free to this user on the filesystem of `file`; `None` where it
/// cannot say. Asked before `fallocate`, because ext4 allocates what it
/// can before it answers `ENOSPC`: the disk would be full, for every
/// process on it, until the refused file is removed or truncated.
pub(crate) fn free_bytes(file: &std::fs::File) -> Option<u64> {
    let st = rustix::fs::fstatvfs(file).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// What `fallocate` does, for a filesystem without it (ext2, ext4 without
/// extents, some network filesystems), as glibc's `posix_fallocate` does
/// it: a zero byte written into each block of `[from, to)` that reads zero
/// there (a block with another byte has its block already; a zero written
/// over a zero changes nothing). So that a store into the mapping never
/// meets a full disk (a `SIGBUS`): `ENOSPC` here instead. For a file no
/// other opener writes (a pool being created, or opened under its lock).
pub(crate) fn write_blocks(file: &std::fs::File, from: u64, to: u64) -> std::io::Result<()> {
    let block = rustix::fs::fstatvfs(file)
        .map(|st| st.f_frsize)
        .unwrap_or(512)
        .clamp(512, 4096);
    use std::os::unix::fs::FileExt;
    let mut start = from - from % block;
    while start < to {
        let at = start.max(from);
        let mut b = [0u8];
        if file.read_at(&mut b, at)? == 0 || b[0] == 0 {
            file.write_all_at(&[0], at)?;
        }
        start += block;
    }
    Ok(())
}

/// No line.
const NO_LINE: (usize, u64) = (0, u64::MAX);

thread_local! {
    /// The last line (domain base address, line index) this thread wrote
    /// with a non-temporal store since its last fence.
    static LAST_NT_LINE: std::cell::Cell<(usize, u64)> = const { std::cell::Cell::new(NO_LINE) };
}

#[inline]
fn lines_of(off: u64, len: u64) -> u64 {
    if len == 0 {
        return 0;
    }
    (off + len - 1) / LINE - off / LINE + 1
}

impl Domain {
    /// Creates a new file of `len` bytes (it must not exist) and maps it:
    /// a raw persistence domain over a plain file, for baselines that
    /// measure durable stores without a log. Not a pool.
    pub fn create_file(path: &Path, len: u64, backend: Backend) -> Result<Domain, Error> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        file.set_len(len).map_err(|e| Error::io(path, e))?;
        Domain::map(path, file, backend)
    }

    /// Maps an open read-write file, keeping it (and any lock on it) open
    /// for the domain's lifetime. `Sim` is refused: a simulated domain
    /// keeps nothing in the file.
    pub fn map(path: &Path, file: std::fs::File, backend: Backend) -> Result<Domain, Error> {
        let file = Locked::new(file);
        if backend == Backend::Sim {
            return Err(Error::InvalidConfig {
                what: "backend",
                value: "sim".into(),
                expected: "pmem or msync for a file (sim keeps its pool in memory)",
            });
        }
        let map = Mapping::map_file(&file).map_err(|e| Error::io(path, e))?;
        let mut d = Domain::with(map, backend);
        d.file = Some(file);
        Ok(d)
    }

    /// [`map`](Self::map) reserving `reserve` bytes of address space (a
    /// pool's maximum size), so the mapping never moves when the file
    /// grows ([`extend`](Self::extend)); accesses are bounded by the
    /// file's length (or `reserve`, if the file is longer).
    pub fn map_reserved(
        path: &Path,
        file: std::fs::File,
        backend: Backend,
        reserve: u64,
    ) -> Result<Domain, Error> {
        if backend == Backend::Sim {
            return Domain::map(path, file, backend);
        }
        let file = Locked::new(file);
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let reserve = usize::try_from(reserve.max(len)).map_err(|_| Error::OutOfBounds {
            offset: 0,
            len: reserve,
            size: usize::MAX as u64,
        })?;
        let map = Mapping::map_file_len(&file, reserve).map_err(|e| Error::io(path, e))?;
        let mut d = Domain::with(map, backend);
        d.valid = AtomicU64::new(len);
        d.file = Some(file);
        Ok(d)
    }

    /// Extends the region to `len` bytes (nothing when it is that long
    /// already): the file is extended with its blocks allocated
    /// (`fallocate`, so a full disk is [`Error::NoSpaceToGrow`] here, never a
    /// SIGBUS at a later store), its new length made durable
    /// (`fdatasync`), and only then may the new bytes be accessed. A
    /// simulated domain only admits bytes of its buffer. Beyond the
    /// reserved mapping: `OutOfBounds`.
    pub fn extend(&self, len: u64) -> Result<(), Error> {
        let now = self.len();
        if len <= now {
            return Ok(());
        }
        if len > self.map.len() as u64 {
            return Err(Error::OutOfBounds {
                offset: now,
                len: len - now,
                size: self.map.len() as u64,
            });
        }
        if self.full_disk.load(Ordering::Relaxed) {
            return Err(Error::NoSpaceToGrow { needed: len - now });
        }
        if let Some(file) = &self.file {
            let path = Path::new("<pool file>");
            use rustix::fs::{fallocate, FallocateFlags};
            if free_bytes(file).is_some_and(|free| free < len - now) {
                return Err(Error::NoSpaceToGrow { needed: len - now });
            }
            match fallocate(&**file, FallocateFlags::empty(), now, len - now) {
                Ok(()) => {}
                Err(e) if no_room(e) => return Err(Error::NoSpaceToGrow { needed: len - now }),
                // A filesystem without fallocate: the new blocks written
                // (a file left sparse would fault at a store on a full
                // disk), or the file back to its length.
                Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::NOSYS) => {
                    let no_space = |e: std::io::Error| {
                        if rustix::io::Errno::from_io_error(&e).is_some_and(no_room) {
                            Error::NoSpaceToGrow { needed: len - now }
                        } else {
                            Error::io(path, e)
                        }
                    };
                    file.set_len(len).map_err(no_space)?;
                    if let Err(e) = write_blocks(file, now, len) {
                        let _ = file.set_len(now);
                        return Err(no_space(e));
                    }
                }
                Err(e) => return Err(Error::io(path, e.into())),
            }
            // The length durable before anything (the heap size word)
            // names the new bytes.
            file.sync_data().map_err(|e| Error::io(path, e))?;
        }
        self.valid.store(len, Ordering::Release);
        Ok(())
    }

    /// Fault injection for tests: while `on`, [`extend`](Self::extend)
    /// fails with [`Error::NoSpaceToGrow`], as on a full disk.
    #[cfg(feature = "testing")]
    pub fn set_full_disk(&self, on: bool) {
        self.full_disk.store(on, Ordering::Relaxed);
    }

    /// A simulated domain of `reserve` zero bytes of which the first
    /// `len` may be accessed until [`extend`](Self::extend) admits more
    /// (a pool created below its maximum size).
    pub fn sim_reserved(len: u64, reserve: u64) -> Domain {
        let d = Domain::sim(reserve.max(len) as usize);
        d.valid.store(len, Ordering::Relaxed);
        d
    }

    /// The first `len` bytes of a pool file, mapped privately (copy on
    /// write): recovery can run on it for inspection while the file stays
    /// untouched, and only the pages it touches take memory. Fences and
    /// flushes do nothing a file would keep.
    pub fn map_private(path: &Path, file: std::fs::File, len: u64) -> Result<Domain, Error> {
        let file = Locked::new(file);
        let len = usize::try_from(len).map_err(|_| Error::OutOfBounds {
            offset: 0,
            len,
            size: usize::MAX as u64,
        })?;
        let map = Mapping::map_file_private(&file, len).map_err(|e| Error::io(path, e))?;
        let mut d = Domain::with(map, Backend::Pmem);
        d.valid = AtomicU64::new(len as u64);
        d.file = Some(file);
        Ok(d)
    }

    /// A simulated domain of `len` zero bytes.
    pub fn sim(len: usize) -> Domain {
        Domain::sim_from_image(vec![0; len])
    }

    /// A simulated domain whose persisted (and live) contents are `image`.
    pub fn sim_from_image(image: Vec<u8>) -> Domain {
        let map = Mapping::owned(image);
        let state = SimState::new(map.view());
        Domain {
            valid: AtomicU64::new(map.len() as u64),
            full_disk: Default::default(),
            map,
            kind: Kind::Sim(Box::new(Sim {
                state: Mutex::new(state),
                schedule: RwLock::new(None),
                ordered: Default::default(),
            })),
            counters: AtomicCounters::default(),
            latency: NvmLatency::default(),
            mutation: None,
            failing: AtomicU64::new(u64::MAX),
            file: None,
            deferred: Box::default(),
        }
    }

    fn with(map: Mapping, backend: Backend) -> Domain {
        let kind = match backend {
            Backend::Pmem => Kind::Pmem {
                instr: FlushInstr::detect(),
            },
            Backend::Msync => Kind::Msync(Box::new(Msync {
                flush: Mutex::new(Flushes::default()),
                flushed: parking_lot::Condvar::new(),
                gathered: parking_lot::Condvar::new(),
                joined: AtomicU64::new(0),
                ended: AtomicU64::new(0),
                durable: AtomicU64::new(0),
                crowded: std::sync::atomic::AtomicBool::new(false),
                lazy: Mutex::new(Vec::new()),
            })),
            Backend::Sim => unreachable!("sim domains are built by Domain::sim"),
        };
        Domain {
            valid: AtomicU64::new(map.len() as u64),
            full_disk: Default::default(),
            map,
            kind,
            counters: AtomicCounters::default(),
            latency: NvmLatency::default(),
            mutation: None,
            failing: AtomicU64::new(u64::MAX),
            file: None,
            deferred: Box::default(),
        }
    }

    /// Emulates NVM latencies (Pmem only; see the module doc).
    pub fn set_latency(&mut self, latency: NvmLatency) {
        self.latency = latency;
    }

    /// The emulated latencies.
    pub fn latency(&self) -> NvmLatency {
        self.latency
    }

    /// Counts `n` NVM writes of non-temporal stores and charges their
    /// latency.
    #[inline]
    fn nt_writes(&self, slot: &Slot, n: u64) {
        bump(&slot.nt_writes, n);
        self.charge_writes(n);
    }

    /// Charges the latency of `n` NVM writes (lines written back are
    /// counted once, as `flushed_lines`: each is one NVM write).
    #[inline(always)]
    fn charge_writes(&self, n: u64) {
        if self.latency.write_ns > 0 && matches!(self.kind, Kind::Pmem { .. }) {
            spin_ns(n.saturating_mul(self.latency.write_ns));
        }
    }

    /// The backend this domain runs on.
    pub fn backend(&self) -> Backend {
        match self.kind {
            Kind::Pmem { .. } => Backend::Pmem,
            Kind::Msync(_) => Backend::Msync,
            Kind::Sim(_) => Backend::Sim,
        }
    }

    /// Size of the region in bytes: what may be accessed (a file's
    /// length, which [`extend`](Self::extend) grows).
    #[inline]
    pub fn len(&self) -> u64 {
        self.valid.load(Ordering::Acquire)
    }

    /// True when the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    fn check(&self, off: u64, len: usize) -> Result<(), Error> {
        match off.checked_add(len as u64) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(Error::OutOfBounds {
                offset: off,
                len: len as u64,
                size: self.len(),
            }),
        }
    }

    /// Copies `buf.len()` bytes at `off` into `buf` (the live contents).
    #[inline]
    pub fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), Error> {
        self.check(off, buf.len())?;
        self.map.read(off as usize, buf);
        Ok(())
    }

    /// Reads a little-endian u64 at `off`.
    pub fn read_u64(&self, off: u64) -> Result<u64, Error> {
        let mut b = [0u8; 8];
        self.read(off, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// An ordinary (cached) store: persistent only after a flush of its
    /// lines and a fence, or whenever the cache evicts them.
    #[inline]
    pub fn store(&self, off: u64, bytes: &[u8]) -> Result<(), Error> {
        self.check(off, bytes.len())?;
        match &self.kind {
            Kind::Sim(sim) => {
                let mut s = sim.lock();
                s.record(off, bytes.len(), false);
                self.map.write(off as usize, bytes);
                s.stored();
            }
            _ => self.map.write(off as usize, bytes),
        }
        Ok(())
    }

    /// A cached store of 1, 2, 4 or 8 bytes at an offset aligned to its
    /// size, made by one instruction, so a crash leaves it whole or not at
    /// all (the simulator's unit is the aligned 8-byte word).
    pub fn store_word(&self, off: u64, bytes: &[u8]) -> Result<(), Error> {
        self.check(off, bytes.len())?;
        if !matches!(bytes.len(), 1 | 2 | 4 | 8) || !off.is_multiple_of(bytes.len() as u64) {
            return Err(Error::InvalidConfig {
                what: "single-store write",
                value: format!("{} bytes at offset {off}", bytes.len()),
                expected: "1, 2, 4 or 8 bytes at an offset aligned to that size",
            });
        }
        match &self.kind {
            Kind::Sim(sim) => {
                let mut s = sim.lock();
                s.record(off, bytes.len(), false);
                self.map.write_word(off as usize, bytes);
                s.stored();
            }
            _ => self.map.write_word(off as usize, bytes),
        }
        Ok(())
    }

    /// Stores a little-endian u64 at `off`.
    #[inline]
    pub fn store_u64(&self, off: u64, v: u64) -> Result<(), Error> {
        self.store(off, &v.to_le_bytes())
    }

    /// A non-temporal store: bypasses the cache and is persistent after the
    /// next fence.
    pub fn store_nt(&self, off: u64, bytes: &[u8]) -> Result<(), Error> {
        self.store_nt_numbered(off, bytes).map(|_| ())
    }

    /// [`store_nt`](Self::store_nt), and on Msync the number its range was
    /// recorded under: durable once [`record_durable`](Self::record_durable)
    /// says so, whichever thread's fence made it so.
    pub(crate) fn store_nt_numbered(&self, off: u64, bytes: &[u8]) -> Result<Option<u64>, Error> {
        self.check(off, bytes.len())?;
        let lines = lines_of(off, bytes.len() as u64);
        // This thread's counters, found once per call.
        let slot = self.counters.slot();
        bump(&slot.nt_lines, lines);
        if lines > 0 {
            // Consecutive non-temporal stores of this thread to one line
            // are one NVM write (a line is named by its domain and offset).
            let first = (self.map.addr(0), off / LINE);
            let last = (first.0, first.1 + lines - 1);
            let merged = LAST_NT_LINE.with(|l| l.replace(last)) == first;
            self.nt_writes(slot, lines - merged as u64);
        }
        match &self.kind {
            Kind::Pmem { instr, .. } => {
                self.map.write_nt(off as usize, bytes, *instr);
                Ok(None)
            }
            Kind::Msync(m) => {
                self.write_file(off, bytes)?;
                Ok(Some(m.flush.lock().record(off, bytes.len() as u64)))
            }
            Kind::Sim(sim) => {
                let mut s = sim.lock();
                s.record(off, bytes.len(), true);
                self.map.write(off as usize, bytes);
                s.stored();
                Ok(None)
            }
        }
    }

    /// Whether the range recorded as `n` ([`store_nt_numbered`]) is
    /// durable: a device flush that covered it has ended (Msync only).
    ///
    /// [`store_nt_numbered`]: Self::store_nt_numbered
    pub(crate) fn record_durable(&self, n: u64) -> bool {
        match &self.kind {
            Kind::Msync(m) => m.durable.load(Ordering::Acquire) >= n,
            _ => false,
        }
    }

    /// Msync's non-temporal store: `bytes` written at `off` with `pwrite`
    /// (see the module doc), visible through the mapping at once and
    /// durable at the next fence. A domain without a file (none is built
    /// on Msync) stores through the mapping.
    fn write_file(&self, off: u64, bytes: &[u8]) -> Result<(), Error> {
        let Some(file) = &self.file else {
            self.map.write(off as usize, bytes);
            return Ok(());
        };
        let fail = |e: std::io::Error| Error::io(Path::new("<pool file>"), e);
        let mut done = 0;
        while done < bytes.len() {
            match rustix::io::pwrite(&**file, &bytes[done..], off + done as u64) {
                Ok(0) => return Err(fail(std::io::ErrorKind::WriteZero.into())),
                Ok(n) => done += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(fail(e.into())),
            }
        }
        Ok(())
    }

    /// Non-temporal store of a little-endian u64.
    pub fn store_nt_u64(&self, off: u64, v: u64) -> Result<(), Error> {
        self.store_nt(off, &v.to_le_bytes())
    }

    /// Disables the flush or fence at `site` (crash-test mutations): the
    /// operation becomes a no-op, as if the line were never written.
    pub fn set_mutation(&mut self, site: Option<Site>) {
        self.mutation = site;
    }

    /// Whether the ordering point at `site` is disabled (a crash-test
    /// mutation): for ordering points that are not a flush or a fence (a
    /// commit's wait for the earlier ones).
    pub(crate) fn mutated(&self, site: Site) -> bool {
        self.mutation == Some(site)
    }

    /// Starts writing back every line of `[off, off+len)`; the write-back is
    /// guaranteed complete at the next fence.
    #[inline]
    pub fn flush(&self, off: u64, len: u64) -> Result<(), Error> {
        self.flush_at(off, len, sites::USER)
    }

    /// [`flush`](Self::flush), naming the engine's ordering point.
    ///
    /// Persistent memory's path is inlined into the caller whole: a call
    /// per flushed line costs more than the `clwb` where the line's store
    /// missed the cache, since its stack stores queue in the store buffer
    /// behind the missing store, and fewer of the loop's missing stores
    /// then overlap (measured: the no-log baseline at 64 random lines per
    /// fence took 3.3x the plain C loop's time with the call, a second
    /// counter per flush and its loop's state on the stack; 1.7x without
    /// them).
    #[inline(always)]
    pub fn flush_at(&self, off: u64, len: u64, site: Site) -> Result<(), Error> {
        if self.mutation == Some(site) || len == 0 {
            return Ok(());
        }
        self.check(off, len as usize)?;
        let Kind::Pmem { instr, .. } = &self.kind else {
            self.record_flush(off, len);
            return Ok(());
        };
        let n = lines_of(off, len);
        self.count_flushed(n);
        let first = off / LINE * LINE;
        for i in 0..n {
            self.map.flush_line((first + i * LINE) as usize, *instr);
        }
        Ok(())
    }

    /// Counts `n` lines written back.
    #[inline(always)]
    fn count_flushed(&self, n: u64) {
        bump(&self.counters.slot().flushed_lines, n);
        self.charge_writes(n);
    }

    /// [`flush_at`](Self::flush_at)'s flush of a checked range, out of
    /// line, on Msync and the simulator (persistent memory's lines are
    /// written back by `flush_at` itself).
    #[inline(never)]
    fn record_flush(&self, off: u64, len: u64) {
        match &self.kind {
            Kind::Pmem { .. } => return,
            Kind::Msync(m) => {
                m.flush.lock().record(off, len);
            }
            Kind::Sim(sim) => sim.lock().flush(off, len),
        }
        self.count_flushed(lines_of(off, len));
    }

    /// Brings the lines of `[off, off+len)` toward the cache ahead of a
    /// store there (persistent memory only; a hint: no store, flush or
    /// fence, nothing counted). The redo write set calls it as a write
    /// arrives, so that the commit's write-back finds its lines cached
    /// instead of waiting for them after its fence.
    #[inline]
    pub fn prefetch(&self, off: u64, len: u64) {
        if let Kind::Pmem { .. } = self.kind {
            if len > 0 && off.checked_add(len).is_some_and(|e| e <= self.len()) {
                let mut l = off / LINE * LINE;
                while l < off + len {
                    self.map.prefetch(l as usize);
                    l += LINE;
                }
            }
        }
    }

    /// Whether write-backs made with [`flush_lazy_at`](Self::flush_lazy_at)
    /// wait for [`fence_lazy_at`](Self::fence_lazy_at) (Msync: data pages
    /// reach the disk at checkpoints, not at every fence).
    pub fn lazy_write_back(&self) -> bool {
        matches!(self.kind, Kind::Msync(_))
    }

    /// Whether a redo commit may be written back ahead of earlier groups
    /// that write none of its bytes (`log::ring`): on a disk, where the
    /// wait for them is behind a device flush, and on the simulator, whose
    /// crash images prove it. Not on persistent memory: the wait there is
    /// for another thread's fence, not a device flush (two threads on
    /// their own trees wait for none: `examples/threadloop.rs`), so the
    /// byte ranges each group would publish under the ring's latch would
    /// be work for nothing.
    pub(crate) fn writes_back_ahead(&self) -> bool {
        match &self.kind {
            Kind::Pmem { .. } => false,
            Kind::Sim(sim) => !sim.ordered.load(Ordering::Relaxed),
            Kind::Msync(_) => true,
        }
    }

    /// Whether every redo commit is written back in sequence order and its
    /// write-back is durable at its thread's next fence (persistent memory,
    /// and a simulator told so): a commit then records its write-back
    /// without the ring's latch (`log::ring`).
    pub(crate) fn commits_in_order(&self) -> bool {
        !self.writes_back_ahead() && !self.lazy_write_back()
    }

    /// Makes a simulated domain order redo commits as persistent memory
    /// does (no write-back ahead of an earlier group), so that the crash
    /// explorer covers that path too. Set before any commit; nothing on
    /// other backends.
    pub fn set_sim_ordered(&self, ordered: bool) {
        if let Kind::Sim(sim) = &self.kind {
            sim.ordered.store(ordered, Ordering::Relaxed);
        }
    }

    /// Whether a thread waiting for another commit should yield the
    /// processor before it sleeps: on Msync, while more threads commit at
    /// once than there are processors (see `backoff`).
    pub(crate) fn crowded(&self) -> bool {
        match &self.kind {
            Kind::Msync(m) => m.crowded.load(Ordering::Relaxed),
            _ => false,
        }
    }

    /// [`flush_at`](Self::flush_at) of a write-back that may wait: on
    /// Msync the range is synced only by the next
    /// [`fence_lazy_at`](Self::fence_lazy_at), so an ordinary fence stays one
    /// device flush of its own ranges; on the other backends, a flush.
    pub fn flush_lazy_at(&self, off: u64, len: u64, site: Site) -> Result<(), Error> {
        match &self.kind {
            Kind::Msync(m) if self.mutation != Some(site) && len > 0 => {
                self.check(off, len as usize)?;
                m.lazy.lock().push((off, len));
                Ok(())
            }
            Kind::Msync(_) => Ok(()),
            _ => self.flush_at(off, len, site),
        }
    }

    /// Stores each `(offset, bytes)` in place and writes its lines back as
    /// [`flush_lazy_at`](Self::flush_lazy_at) does (a commit's write-back),
    /// in a batch: returns the ticket that [`batches_durable`](Self::batches_durable)
    /// reaches once they are durable.
    ///
    /// On persistent memory and the simulator the lines join the calling
    /// thread's batch (each line once), and the batch is written back
    /// (`clwb`, no fence) once it holds `batch` lines (at most
    /// [`BATCH_MAX`]; the simulator's batch is its own), or just before any
    /// fence of the thread but a commit's ([`fence_commit_at`](Self::fence_commit_at));
    /// a batch of one line, just before the thread's next fence, whichever.
    /// A write-back of [`AT_ONCE`] lines or more goes at once, or, if
    /// fewer than [`AT_NEXT_FENCE`], just before the thread's next fence.
    /// So most commits' fences wait for their groups' non-temporal stores
    /// alone, and a line that many commits of a batch write (a tree's
    /// header) is written back once. (A line may reach the media earlier,
    /// as any cache line may be evicted at any time; never later than the
    /// fence after its batch is written back.) The ticket is the batch's
    /// number: the values are durable once the thread's fences have made
    /// batch `ticket` durable.
    ///
    /// On Msync the write-backs are lazy as [`flush_lazy_at`](Self::flush_lazy_at)'s,
    /// and no fence of the thread alone makes them durable (a drain does):
    /// the ticket is `u64::MAX`.
    pub fn store_flush_lazy_at<'a>(
        &self,
        values: impl Iterator<Item = (u64, &'a [u8])>,
        site: Site,
        batch: usize,
    ) -> Result<u64, Error> {
        if let Kind::Msync(_) = &self.kind {
            for (off, bytes) in values {
                self.store(off, bytes)?;
                self.flush_lazy_at(off, bytes.len() as u64, site)?;
            }
            return Ok(u64::MAX);
        }
        let flush = self.mutation != Some(site);
        let mut d = self.deferred.get_or_default().borrow_mut();
        let before = d.lines.len();
        for (off, bytes) in values {
            match &self.kind {
                Kind::Sim(_) => self.store(off, bytes)?,
                _ => {
                    self.check(off, bytes.len())?;
                    self.map.write(off as usize, bytes);
                }
            }
            if flush && !bytes.is_empty() {
                let first = off / LINE * LINE;
                for i in 0..lines_of(off, bytes.len() as u64) {
                    let line = first + i * LINE;
                    // (Consecutive values in one line: written back once.)
                    if d.lines.last() != Some(&line) {
                        d.lines.push(line);
                    }
                }
            }
        }
        let ticket = d.issued + 1;
        let (batch, at_once) = match &self.kind {
            Kind::Sim(_) => (SIM_BATCH, usize::MAX),
            _ => (batch.clamp(1, BATCH_MAX), AT_ONCE),
        };
        let added = d.lines.len() - before;
        // Written back at the next fence, just before it, which then waits
        // for them with its own stores, rather than now, which would make
        // the next latch wait for them: a batch of one line (a small lane,
        // or one the Log Start waits on), or a commit's few lines past a
        // batch's.
        let due = if added < at_once {
            // A few lines: those the batch holds already leave.
            let mut kept = before;
            for i in before..d.lines.len() {
                let l = d.lines[i];
                if !d.seen(l) {
                    d.lines[kept] = l;
                    kept += 1;
                }
            }
            d.lines.truncate(kept);
            if d.lines.len() < batch {
                return Ok(ticket);
            }
            batch == 1
        } else {
            added < AT_NEXT_FENCE
        };
        match due {
            true => d.due = true,
            false => self.write_back(&mut d),
        }
        Ok(ticket)
    }

    /// The batches of deferred write-backs ([`store_flush_lazy_at`](Self::store_flush_lazy_at))
    /// the calling thread has made durable: a ticket up to it is durable.
    pub(crate) fn batches_durable(&self) -> u64 {
        self.deferred.get().map_or(0, |d| d.borrow().durable)
    }

    /// Writes back the calling thread's batch of deferred lines (no
    /// fence): the batch is issued.
    fn write_back(&self, d: &mut Deferred) {
        if d.lines.is_empty() {
            return;
        }
        match &self.kind {
            Kind::Pmem { instr } => {
                for &l in d.lines.iter() {
                    self.map.flush_line(l as usize, *instr);
                }
            }
            Kind::Sim(sim) => {
                let mut s = sim.lock();
                for &l in d.lines.iter() {
                    s.flush(l, LINE);
                }
            }
            Kind::Msync(_) => {}
        }
        self.count_flushed(d.lines.len() as u64);
        d.lines.clear();
        d.recent = [0; RECENT];
        d.issued += 1;
        d.due = false;
    }

    /// [`fence_at`](Self::fence_at) that also makes every lazy write-back
    /// durable (Msync).
    pub fn fence_lazy_at(&self, site: Site) -> Result<(), Error> {
        if let Kind::Msync(m) = &self.kind {
            if self.mutation != Some(site) {
                let l = std::mem::take(&mut *m.lazy.lock());
                let mut f = m.flush.lock();
                for (off, len) in l {
                    f.record(off, len);
                }
            }
        }
        self.fence_at(site)
    }

    /// Orders and completes every earlier flush and non-temporal store of
    /// the calling thread.
    #[inline]
    pub fn fence(&self) -> Result<(), Error> {
        self.fence_at(sites::USER)
    }

    /// [`fence`](Self::fence), naming the engine's ordering point. The
    /// thread's batch of deferred write-backs is written back first.
    #[inline]
    pub fn fence_at(&self, site: Site) -> Result<(), Error> {
        self.fence_batch_at(site, true)
    }

    /// A commit's fence: [`fence_at`](Self::fence_at) that leaves the
    /// thread's batch of deferred write-backs to fill (it makes durable
    /// only the batches written back before it, and a batch of one line).
    #[inline]
    pub(crate) fn fence_commit_at(&self, site: Site) -> Result<(), Error> {
        self.fence_batch_at(site, false)
    }

    #[inline]
    fn fence_batch_at(&self, site: Site, write_back: bool) -> Result<(), Error> {
        if self.mutation == Some(site) {
            return Ok(());
        }
        if self.failing.load(Ordering::Relaxed) != u64::MAX
            && self.failing.fetch_sub(1, Ordering::Relaxed) == 0
        {
            self.failing.store(0, Ordering::Relaxed);
            return Err(Error::io(
                Path::new("<injected fault>"),
                std::io::Error::other("injected fence failure"),
            ));
        }
        #[cfg(feature = "testing")]
        KILL_AT_FENCE.tick();
        bump(&self.counters.slot().fences, 1);
        // A fence drains the write-combining buffers: the next
        // non-temporal store to any line is a new NVM write.
        LAST_NT_LINE.with(|l| l.set(NO_LINE));
        match &self.kind {
            Kind::Pmem { .. } => {
                self.batch_fence(write_back, || self.map.sfence());
                if self.latency.fence_ns > 0 {
                    spin_ns(self.latency.fence_ns);
                }
            }
            Kind::Msync(m) => self.group_fence(m)?,
            Kind::Sim(sim) => self.batch_fence(write_back, || sim.lock().fence()),
        }
        Ok(())
    }

    /// A fence of persistent memory or the simulator, `fence`, with the
    /// calling thread's batch of deferred write-backs: written back just
    /// before it if `write_back` (or it is due), and every batch written
    /// back before it durable after it.
    #[inline]
    fn batch_fence(&self, write_back: bool, fence: impl FnOnce()) {
        let Some(d) = self.deferred.get() else {
            return fence();
        };
        let mut d = d.borrow_mut();
        if write_back || d.due {
            self.write_back(&mut d);
        }
        fence();
        d.durable = d.issued;
    }

    /// Msync's fence: every range recorded before it durable, by a device
    /// flush of its own or one another thread leads (see [`Flushes`]).
    fn group_fence(&self, m: &Msync) -> Result<(), Error> {
        let fail = |m: &str| {
            Error::io(
                Path::new("<pool mapping>"),
                std::io::Error::other(m.to_string()),
            )
        };
        let mut f = m.flush.lock();
        let want = f.recorded;
        if let Some(m) = &f.failed {
            return Err(fail(m));
        }
        if f.durable >= want {
            // Nothing of its own to make durable.
            return Ok(());
        }
        if want > f.taken {
            // No flush started yet covers it: it joins the next group.
            f.joined += 1;
            m.joined.store(f.joined, Ordering::Release);
            if f.gathering && f.joined >= f.expect {
                m.gathered.notify_one();
            }
        }
        let mut led = false;
        let mut yielded = None;
        loop {
            if let Some(m) = &f.failed {
                return Err(fail(m));
            }
            if f.durable >= want {
                break;
            }
            if f.busy {
                // The flush in flight ends within about its duration (a
                // few, on a busy disk): yield until it does before
                // sleeping (`backoff`), once per flush waited for.
                let ended = m.ended.load(Ordering::Acquire);
                if yielded != Some(ended) && m.crowded.load(Ordering::Relaxed) {
                    yielded = Some(ended);
                    let bound = (f.last_flush * 4).min(backoff::YIELD_MAX);
                    parking_lot::MutexGuard::unlocked(&mut f, || {
                        backoff::yield_until(bound, || m.ended.load(Ordering::Acquire) != ended)
                    });
                } else {
                    m.flushed.wait(&mut f);
                }
                continue;
            }
            // Lead a flush of every range recorded so far (this fence's
            // and those of every fence waiting behind the last flush),
            // once the threads committing now have joined (bounded).
            f.busy = true;
            led = true;
            if f.joined < f.expect {
                let deadline = std::time::Instant::now() + f.last_flush / 2;
                f.gathering = true;
                if m.crowded.load(Ordering::Relaxed) {
                    // The fences to come need the processors: the leader
                    // yields to them (`backoff`) rather than sleep, and the
                    // last one to join wakes nobody (a futex wake, on this
                    // flush's critical path).
                    let expect = f.expect;
                    parking_lot::MutexGuard::unlocked(&mut f, || {
                        let bound = deadline.saturating_duration_since(std::time::Instant::now());
                        backoff::yield_until(bound, || m.joined.load(Ordering::Acquire) >= expect)
                    });
                } else {
                    while f.joined < f.expect
                        && !m.gathered.wait_until(&mut f, deadline).timed_out()
                    {
                    }
                }
                f.gathering = false;
            }
            let group = std::mem::take(&mut f.joined);
            m.joined.store(0, Ordering::Release);
            let ranges = std::mem::take(&mut f.dirty);
            let upto = f.recorded;
            f.taken = upto;
            let r = match sync_span(&ranges, self.len()) {
                // One msync, one device flush, for every range: dirty
                // pages between them are written back early, which a
                // crash could have shown anyway (a line may reach the
                // media at any time before its fence).
                Some((s, e)) => {
                    bump(&self.counters.slot().device_flushes, 1);
                    bump(&self.counters.slot().synced_pages, (e - s).div_ceil(PAGE));
                    let start = std::time::Instant::now();
                    let r = parking_lot::MutexGuard::unlocked(&mut f, || {
                        self.map.msync(s as usize, (e - s) as usize)
                    });
                    f.last_flush = start.elapsed();
                    r
                }
                None => Ok(()),
            };
            f.busy = false;
            // The threads fencing now: this group, and the fences that
            // joined the next one while it was in flight.
            f.expect = group + f.joined;
            m.crowded
                .store(backoff::crowded(f.expect), Ordering::Relaxed);
            match r {
                Ok(()) => {
                    f.durable = f.durable.max(upto);
                    m.durable.store(f.durable, Ordering::Release);
                }
                Err(e) => f.failed = Some(format!("msync failed: {e}")),
            }
            m.ended.fetch_add(1, Ordering::Release);
            m.flushed.notify_all();
        }
        if !led {
            bump(&self.counters.slot().grouped_fences, 1);
        }
        Ok(())
    }

    /// Fault injection for tests: after `n` more successful fences, every
    /// fence fails with an I/O error (as an `msync` failure would) and does
    /// nothing.
    #[cfg(feature = "testing")]
    pub fn fail_fences_after(&self, n: u64) {
        self.failing.store(n, Ordering::Relaxed);
    }

    /// The counters so far.
    pub fn counters(&self) -> Counters {
        // Each flushed line is also one NVM write.
        let flushed_lines = self.counters.sum(|s| &s.flushed_lines);
        Counters {
            fences: self.counters.sum(|s| &s.fences),
            flushed_lines,
            nt_lines: self.counters.sum(|s| &s.nt_lines),
            nvm_writes: flushed_lines + self.counters.sum(|s| &s.nt_writes),
            device_flushes: self.counters.sum(|s| &s.device_flushes),
            grouped_fences: self.counters.sum(|s| &s.grouped_fences),
            synced_pages: self.counters.sum(|s| &s.synced_pages),
            order_waits: self.counters.sum(|s| &s.order_waits),
            order_parks: self.counters.sum(|s| &s.order_parks),
            ahead_write_backs: self.counters.sum(|s| &s.ahead_write_backs),
            // The pool's lock table counts its own (`Pool::counters`).
            lock_waits: 0,
            lock_sleeps: 0,
        }
    }

    /// Counts a redo commit's wait for an earlier group
    /// ([`Counters::order_waits`]), and whether it slept.
    pub(crate) fn count_order_wait(&self, parked: bool) {
        let slot = self.counters.slot();
        bump(&slot.order_waits, 1);
        bump(&slot.order_parks, parked as u64);
    }

    /// Counts a redo commit written back ahead of an earlier group
    /// ([`Counters::ahead_write_backs`]).
    pub(crate) fn count_write_back_ahead(&self) {
        bump(&self.counters.slot().ahead_write_backs, 1);
    }

    /// A scheduling point outside any store, flush or fence (a thread
    /// waiting for another one's commit): runs a simulated domain's
    /// callback, if one is set, and says whether it did.
    pub(crate) fn schedule_point(&self) -> bool {
        match &self.kind {
            Kind::Sim(sim) => {
                let s = sim.schedule.read().clone();
                match s {
                    Some(s) => {
                        s();
                        true
                    }
                    None => false,
                }
            }
            _ => false,
        }
    }

    /// Whether a simulated domain has a scheduling callback set (see
    /// [`set_schedule`](Self::set_schedule)).
    pub(crate) fn has_schedule(&self) -> bool {
        match &self.kind {
            Kind::Sim(sim) => sim.schedule.read().is_some(),
            _ => false,
        }
    }

    /// Runs `f` on the simulator state; `None` on other backends.
    pub fn with_sim<R>(&self, f: impl FnOnce(&SimState) -> R) -> Option<R> {
        match &self.kind {
            Kind::Sim(sim) => Some(f(&sim.state.lock())),
            _ => None,
        }
    }

    /// Runs `f` on the mutable simulator state; `None` on other backends.
    pub fn with_sim_mut<R>(&self, f: impl FnOnce(&mut SimState) -> R) -> Option<R> {
        match &self.kind {
            Kind::Sim(sim) => Some(f(&mut sim.state.lock())),
            _ => None,
        }
    }

    /// Sets (or, with `None`, removes) the callback a simulated domain runs
    /// at each store, flush and fence before taking its lock. Returns false
    /// on other backends, which have no scheduling points.
    pub fn set_schedule(&self, schedule: Option<Schedule>) -> bool {
        match &self.kind {
            Kind::Sim(sim) => {
                *sim.schedule.write() = schedule;
                true
            }
            _ => false,
        }
    }
}

/// Size of the pages an msync range is aligned to.
const PAGE: u64 = 4096;

/// The page-aligned span `[start, end)` that covers every range of
/// `ranges` (`(offset, length)`, inside a region of `len` bytes), or `None`
/// when none holds a byte.
fn sync_span(ranges: &[(u64, u64)], len: u64) -> Option<(u64, u64)> {
    let (s, e) = (ranges.iter())
        .filter(|r| r.1 > 0)
        .map(|&(off, n)| (off, off + n))
        .reduce(|(a, b), (s, e)| (a.min(s), b.max(e)))?;
    Some((s / PAGE * PAGE, (e.div_ceil(PAGE) * PAGE).min(len)))
}

fn spin_ns(ns: u64) {
    let start = std::time::Instant::now();
    while (start.elapsed().as_nanos() as u64) < ns {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How the emulation counts NVM writes (the latencies follow the
    /// counts; their time is not tested).
    #[test]
    fn nvm_writes_group_consecutive_nt_stores_to_a_line_until_a_fence() {
        let d = Domain::sim(4096);
        let n = |d: &Domain| d.counters().nvm_writes;
        d.store_nt_u64(64, 1).unwrap();
        d.store_nt_u64(72, 2).unwrap(); // same line: one write
        assert_eq!(n(&d), 1);
        d.store_nt(120, &[0; 16]).unwrap(); // line 1 again, then line 2
        assert_eq!(n(&d), 2);
        d.store_nt_u64(128, 3).unwrap(); // line 2, consecutive
        assert_eq!(n(&d), 2);
        d.fence().unwrap();
        d.store_nt_u64(136, 4).unwrap(); // after a fence: a new write
        assert_eq!(n(&d), 3);
        d.store_nt_u64(0, 5).unwrap(); // another line
        d.store_nt_u64(144, 6).unwrap(); // back to line 2: not consecutive
        assert_eq!(n(&d), 5);
        d.store(256, &[1; 130]).unwrap();
        d.flush(256, 130).unwrap(); // three lines written back
        assert_eq!(n(&d), 8);
        assert_eq!(d.counters().flushed_lines, 3);
        assert_eq!(d.counters().nt_lines, 8);
    }

    /// The batched write-back stores and counts what a store and a lazy
    /// flush per value do, on persistent memory and on the simulator, and
    /// refuses a range outside the region before storing it.
    #[test]
    fn a_batched_write_back_stores_and_counts_as_one_call_per_value() {
        let dir = tempfile::tempdir().unwrap();
        let values: [(u64, &[u8]); 3] = [(60, &[1; 8]), (128, &[2; 130]), (4000, &[])];
        let pmem =
            |name: &str| Domain::create_file(&dir.path().join(name), 8192, Backend::Pmem).unwrap();
        for (one, batched) in [
            (pmem("a"), pmem("b")),
            (Domain::sim(8192), Domain::sim(8192)),
        ] {
            for &(off, bytes) in &values {
                one.store(off, bytes).unwrap();
                one.flush_lazy_at(off, bytes.len() as u64, sites::RING_WRITE_BACK)
                    .unwrap();
            }
            batched
                .store_flush_lazy_at(values.iter().copied(), sites::RING_WRITE_BACK, BATCH_MAX)
                .unwrap();
            if batched.backend() == Backend::Pmem {
                // Deferred: written back by the thread's next fence.
                assert_eq!(batched.counters().flushed_lines, 0);
            }
            one.fence().unwrap();
            batched.fence().unwrap();
            let (a, b) = (one.counters(), batched.counters());
            assert_eq!(b.flushed_lines, 5, "2 lines of the first, 3 of the second");
            assert_eq!(
                (a.flushed_lines, a.nvm_writes),
                (b.flushed_lines, b.nvm_writes)
            );
            let (mut x, mut y) = (vec![0; 8192], vec![0; 8192]);
            one.read(0, &mut x).unwrap();
            batched.read(0, &mut y).unwrap();
            assert_eq!(x, y);
            assert_eq!(y[60..68], [1; 8]);
            let out = [(8190u64, &[0u8; 8][..])];
            assert!(matches!(
                batched.store_flush_lazy_at(out.iter().copied(), sites::RING_WRITE_BACK, BATCH_MAX),
                Err(Error::OutOfBounds { .. })
            ));
        }
    }

    /// A commit's write-back on persistent memory waits for its thread's
    /// next fence: another thread's fence does not write it back (an
    /// `sfence` orders only its own thread's `clwb`s), its own does.
    #[test]
    fn deferred_write_backs_go_with_their_own_threads_next_fence() {
        let dir = tempfile::tempdir().unwrap();
        let d = Domain::create_file(&dir.path().join("p"), 8192, Backend::Pmem).unwrap();
        let values: [(u64, &[u8]); 2] = [(0, &[7; 8]), (100, &[8; 60])];
        d.store_flush_lazy_at(values.iter().copied(), sites::RING_WRITE_BACK, BATCH_MAX)
            .unwrap();
        assert_eq!(d.counters().flushed_lines, 0, "deferred");
        std::thread::scope(|s| {
            s.spawn(|| d.fence().unwrap());
        });
        assert_eq!(d.counters().flushed_lines, 0, "another thread's fence");
        d.fence().unwrap();
        assert_eq!(d.counters().flushed_lines, 3, "lines 0, 1 and 2");
        d.fence().unwrap();
        assert_eq!(d.counters().flushed_lines, 3, "written back once");
        let mut b = [0u8; 8];
        d.read(100, &mut b).unwrap();
        assert_eq!(b, [8; 8]);
    }

    /// A thread's deferred lines are written back once its batch holds as
    /// many as the commit asks for (each line once), or at any fence but
    /// a commit's; the ticket tells when they are durable.
    #[test]
    fn a_batch_is_written_back_once_full_or_at_a_fence_not_a_commits() {
        let dir = tempfile::tempdir().unwrap();
        let d = Domain::create_file(&dir.path().join("p"), 8192, Backend::Pmem).unwrap();
        let one = |off: u64| {
            let v: [(u64, &[u8]); 1] = [(off, &[1; 8])];
            d.store_flush_lazy_at(v.iter().copied(), sites::RING_WRITE_BACK, 3)
                .unwrap()
        };
        assert_eq!((one(0), d.batches_durable()), (1, 0));
        d.fence_commit_at(sites::RING_COMMIT).unwrap();
        assert_eq!(d.counters().flushed_lines, 0, "one line of a batch of 3");
        assert_eq!(d.batches_durable(), 0);
        assert_eq!(one(0), 1, "the same line, the same batch");
        assert_eq!(one(64), 1);
        d.fence_commit_at(sites::RING_COMMIT).unwrap();
        assert_eq!(d.counters().flushed_lines, 0, "two lines");
        assert_eq!(one(128), 1, "the third line fills the batch");
        assert_eq!(d.counters().flushed_lines, 3, "written back at once");
        assert_eq!(d.batches_durable(), 0, "not fenced yet");
        d.fence_commit_at(sites::RING_COMMIT).unwrap();
        assert_eq!(d.batches_durable(), 1, "the ticket is durable");
        assert_eq!(one(192), 2, "the next batch");
        d.fence().unwrap();
        assert_eq!(d.counters().flushed_lines, 4, "any other fence");
        assert_eq!(d.batches_durable(), 2);
    }

    /// A batch of one line waits for the thread's next fence, a commit's
    /// included, and is written back just before it.
    #[test]
    fn a_batch_of_one_line_goes_with_the_next_fence() {
        let dir = tempfile::tempdir().unwrap();
        let d = Domain::create_file(&dir.path().join("p"), 8192, Backend::Pmem).unwrap();
        let v: [(u64, &[u8]); 1] = [(64, &[2; 8])];
        let ticket = d
            .store_flush_lazy_at(v.iter().copied(), sites::RING_WRITE_BACK, 1)
            .unwrap();
        assert_eq!(d.counters().flushed_lines, 0, "not at once");
        d.fence_commit_at(sites::RING_COMMIT).unwrap();
        assert_eq!(d.counters().flushed_lines, 1);
        assert_eq!(d.batches_durable(), ticket);
    }

    /// A commit's write-back of a few lines past a batch's (`AT_ONCE` up
    /// to `AT_NEXT_FENCE`) goes with the thread's next fence, a commit's
    /// included, with the lines the batch held; a larger one goes at once.
    /// Either way its ticket is durable after the next fence.
    #[test]
    fn a_few_lines_go_with_the_next_fence_and_many_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let d = Domain::create_file(&dir.path().join("p"), 1 << 16, Backend::Pmem).unwrap();
        let words = |lines: std::ops::Range<u64>| -> Vec<(u64, [u8; 8])> {
            lines.map(|l| (l * 64, [3; 8])).collect()
        };
        let store = |lines: std::ops::Range<u64>| {
            let w = words(lines);
            d.store_flush_lazy_at(
                w.iter().map(|(o, b)| (*o, &b[..])),
                sites::RING_WRITE_BACK,
                64,
            )
            .unwrap()
        };
        // One line into the batch (of 64), then a commit of AT_ONCE lines.
        assert_eq!(store(0..1), 1);
        let few = store(1..1 + AT_ONCE as u64);
        assert_eq!(few, 1, "the batch's ticket");
        assert_eq!(d.counters().flushed_lines, 0, "not at once");
        d.fence_commit_at(sites::RING_COMMIT).unwrap();
        let flushed = 1 + AT_ONCE as u64;
        assert_eq!(
            d.counters().flushed_lines,
            flushed,
            "with the next fence, the batch's line too"
        );
        assert_eq!(d.batches_durable(), few);
        // AT_NEXT_FENCE lines: at once, durable at the next fence.
        let many = store(100..100 + AT_NEXT_FENCE as u64);
        assert_eq!(
            d.counters().flushed_lines,
            flushed + AT_NEXT_FENCE as u64,
            "at once"
        );
        assert_eq!(d.batches_durable(), few, "not fenced yet");
        d.fence_commit_at(sites::RING_COMMIT).unwrap();
        assert_eq!(d.batches_durable(), many);
    }

    /// The simulator defers a batch of its own size, so that the crash
    /// explorer sees values unwritten across later commits.
    #[test]
    fn the_simulator_keeps_a_commits_lines_pending_until_its_batch_is_written_back() {
        let d = Domain::sim(8192);
        let v: [(u64, &[u8]); 1] = [(0, &[9; 8])];
        d.store_flush_lazy_at(v.iter().copied(), sites::RING_WRITE_BACK, 1)
            .unwrap();
        d.fence_commit_at(sites::RING_COMMIT).unwrap();
        let pending = d.with_sim(|s| s.pending_lines()).unwrap();
        assert_eq!(pending.len(), 1, "line 0 still pending: {pending:?}");
        d.fence().unwrap();
        let pending = d.with_sim(|s| s.pending_lines()).unwrap();
        assert!(pending.is_empty(), "written back and fenced: {pending:?}");
    }

    #[test]
    fn the_sync_span_covers_every_range_in_whole_pages_inside_the_region() {
        assert_eq!(sync_span(&[], 1 << 20), None);
        assert_eq!(sync_span(&[(5000, 0)], 1 << 20), None);
        assert_eq!(sync_span(&[(5000, 8)], 1 << 20), Some((4096, 8192)));
        let ranges = [(70_000, 64), (100, 24), (8192, 4096)];
        assert_eq!(sync_span(&ranges, 1 << 20), Some((0, 73_728)));
        // The last page of a region whose length is not a whole page.
        assert_eq!(sync_span(&[(9000, 10)], 9010), Some((8192, 9010)));
    }

    /// On Msync a non-temporal store is written to the file at once (the
    /// mapping and the file agree before any fence), and a fence makes
    /// every recorded range durable with one device flush, however far
    /// apart the ranges lie; lazy write-backs wait for `fence_lazy_at`.
    #[test]
    fn an_msync_fence_is_one_device_flush_for_all_its_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d");
        let d = Domain::create_file(&path, 1 << 20, Backend::Msync).unwrap();
        let flushes = |d: &Domain| d.counters().device_flushes;
        d.store_nt_u64(64, 7).unwrap();
        assert_eq!(d.read_u64(64).unwrap(), 7);
        let file = std::fs::read(&path).unwrap();
        assert_eq!(file[64..72], 7u64.to_le_bytes());
        d.store_u64(900_000, 9).unwrap();
        d.flush(900_000, 8).unwrap();
        d.fence().unwrap();
        assert_eq!(flushes(&d), 1);
        // Nothing recorded: a fence syncs nothing.
        d.fence().unwrap();
        assert_eq!(flushes(&d), 1);
        // A lazy write-back waits for fence_lazy_at.
        d.store_u64(500_000, 3).unwrap();
        d.flush_lazy_at(500_000, 8, sites::RING_WRITE_BACK).unwrap();
        d.fence().unwrap();
        assert_eq!(flushes(&d), 1);
        d.store_nt_u64(128, 8).unwrap();
        d.fence_lazy_at(sites::RING_DRAIN_LINES).unwrap();
        assert_eq!(flushes(&d), 2);
        assert_eq!(d.counters().fences, 4);
        drop(d);
        let file = std::fs::read(&path).unwrap();
        let word = |o: usize| u64::from_le_bytes(file[o..o + 8].try_into().unwrap());
        assert_eq!([64, 128, 500_000, 900_000].map(word), [7, 8, 3, 9]);
    }

    /// Fences of several threads on Msync (a gathering leader among them):
    /// each either led one device flush or was made durable by another
    /// thread's, and all of them return (counts, not times).
    #[test]
    fn concurrent_msync_fences_each_lead_a_flush_or_share_one() {
        // More threads than processors, so that waiters and gathering
        // leaders yield (`backoff::crowded`) on any machine.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        let threads: u64 = (2 * cores + 2).max(6);
        const EACH: u64 = 40;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d");
        let d = Domain::create_file(&path, 1 << 20, Backend::Msync).unwrap();
        std::thread::scope(|s| {
            for t in 0..threads {
                let d = &d;
                s.spawn(move || {
                    for k in 0..EACH {
                        let off = t * 4096 + k * 8;
                        d.store_u64(off, t << 32 | k).unwrap();
                        d.flush(off, 8).unwrap();
                        d.fence().unwrap();
                    }
                });
            }
        });
        let c = d.counters();
        assert_eq!(c.fences, threads * EACH);
        assert_eq!(c.device_flushes + c.grouped_fences, threads * EACH);
        assert!(c.device_flushes >= 1);
        assert!(backoff::crowded(threads));
        for t in 0..threads {
            for k in 0..EACH {
                assert_eq!(d.read_u64(t * 4096 + k * 8).unwrap(), t << 32 | k);
            }
        }
        // A fence with nothing recorded neither flushes nor counts as grouped.
        d.fence().unwrap();
        assert_eq!(d.counters().since(&c).device_flushes, 0);
        assert_eq!(d.counters().since(&c).grouped_fences, 0);
    }
}
