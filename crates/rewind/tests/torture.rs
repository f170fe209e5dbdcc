//! Process-kill torture: a child process runs random transactions on a pool
//! file (the `Pmem` backend) and is SIGKILLed at a seeded point: at its n-th
//! fence (the engine's ordering points, `persist::kill_at_fence`: the first
//! ones fall while it is still opening the pool, recovering from the previous
//! kill; the others in the middle of commits, rollbacks, checkpoints and log
//! growth) or before its n-th write in a transaction. The child kills itself
//! there, so every kill point, and every outcome, is a function of the seed,
//! never of timing. After each kill the parent
//! reopens the pool, which runs recovery, and checks that the state is
//! exactly the transactions the child reported committed, plus possibly the
//! one in flight applied whole, never in part.
//!
//! The child is this test binary again, running only `torture_child` (which
//! returns at once unless `REWIND_TORTURE_POOL` is set). Transaction `id` is
//! a pure function of `(seed, id)` ([`plan`]), so the parent replays a
//! volatile [`Model`] from the child's stdout protocol:
//!
//! ```text
//! opening 0        about to open the pool (and so run recovery)
//! ready <id>       pool opened (recovery done); the next transaction is <id>
//! begin <id>       about to run transaction <id>
//! committed <id>   its commit returned
//! aborted <id>     it returned Err on purpose and was rolled back
//! ```
//!
//! A committed transaction stores `next_id = id + 1` in the pool, an aborted
//! one changes nothing, so a restarted child resumes at the first
//! transaction not committed (re-running the aborted ones after it, which
//! abort again).
//!
//! Knobs: `REWIND_TORTURE_CYCLES` (kills, shared among every log variant × policy, default 402) and
//! `REWIND_TORTURE_PARENT_SEED` (the same transactions and kill points as a
//! failing run, printed on failure).

use std::io::{BufRead, BufReader, Write};
use std::mem::offset_of;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::mpsc;
use std::time::Instant;

mod common;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::persist::KillPoint;
use rewind::{
    AllocStats, Error, LogVariant, OpenOptions, PPtr, Pod, Policy, Pool, PoolConfig, Zeroable,
};

const LAYOUT: &str = "torture";
const POOL_SIZE: u64 = 8 << 20;
const SLOTS: usize = 512;
const OBJS: usize = 16;
/// Only the first few table entries may hold large (> 64 KiB) objects, so
/// the heap (about 27 chunks of 256 KiB) can never run out.
const BIG_OBJS: usize = 4;
const ENV_POOL: &str = "REWIND_TORTURE_POOL";
const ENV_SEED: &str = "REWIND_TORTURE_SEED";
const ENV_MODE: &str = "REWIND_TORTURE_MODE";
const ENV_KILL: &str = "REWIND_TORTURE_KILL";

/// Where a child kills itself (SIGKILL).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KillAt {
    /// At its n-th fence (1: the first, inside `Pool::open`).
    Fence(u64),
    /// Just before its n-th write inside a transaction.
    Write(u64),
}

impl KillAt {
    fn env(self) -> String {
        match self {
            KillAt::Fence(n) => format!("fence:{n}"),
            KillAt::Write(n) => format!("write:{n}"),
        }
    }

    fn from_env() -> Option<KillAt> {
        let v = std::env::var(ENV_KILL).ok()?;
        let (kind, n) = v.split_once(':')?;
        let n = n.parse().ok()?;
        match kind {
            "fence" => Some(KillAt::Fence(n)),
            "write" => Some(KillAt::Write(n)),
            _ => None,
        }
    }

    /// A seeded kill point: one in six among the first fences (in the open,
    /// i.e. in recovery), the rest spread over fences and writes; far enough
    /// in to reach past several transactions (near exhaustion, long ones).
    fn draw(rng: &mut SmallRng, mode: Mode) -> KillAt {
        let reach = match mode {
            Mode::Normal | Mode::Grow => 1,
            Mode::Exhaust => 20,
        };
        match rng.gen_range(0..12) {
            0 | 1 => KillAt::Fence(rng.gen_range(1..=2)),
            2..=6 => KillAt::Fence(rng.gen_range(3..=400 * reach)),
            _ => KillAt::Write(rng.gen_range(1..=200 * reach)),
        }
    }
}

/// The child's write kill point.
static BEFORE_WRITE: KillPoint = KillPoint::new();

/// Called before every write of a transaction.
fn before_write() {
    BEFORE_WRITE.tick();
}

/// What the transactions do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Small transactions on an 8 MiB pool.
    Normal,
    /// Near exhaustion: a 2 MiB pool with the smallest log, a third of the
    /// transactions of 300 to 1,500 writes. They grow the log into the
    /// heap, and with large objects in the heap some find no room and fail
    /// with `LogFull` (rolled back whole, reported as aborted).
    Exhaust,
    /// Small transactions on a 1 MiB pool that may grow to 16 MiB: their
    /// objects (some of them large runs) outgrow its two heap chunks, so
    /// the heap grows (and class chunks are reclaimed) while children are
    /// killed, inside growths too.
    Grow,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Normal => "normal",
            Mode::Exhaust => "exhaust",
            Mode::Grow => "grow",
        }
    }

    fn from_env() -> Mode {
        match std::env::var(ENV_MODE).as_deref() {
            Ok("exhaust") => Mode::Exhaust,
            Ok("grow") => Mode::Grow,
            _ => Mode::Normal,
        }
    }

    fn pool_size(self) -> u64 {
        match self {
            Mode::Normal => POOL_SIZE,
            Mode::Exhaust => 2 << 20,
            Mode::Grow => 1 << 20,
        }
    }
}
/// A child never runs more transactions than this, even if its parent
/// vanished: a count, not a time, and far past any kill point (at most
/// 400 fences or 200 writes per reach into a run), so a run's outcome never
/// depends on how fast the machine is.
const CHILD_MAX_TXS: u64 = 1_000_000;

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct Root {
    slots: [u64; SLOTS],
    next_id: u64,
    objs: [Obj; OBJS],
}

#[derive(Clone, Copy, Pod, Zeroable, Default, Debug, PartialEq)]
#[repr(C)]
struct Obj {
    ptr: u64,
    len: u64,
    fill: u64,
}

fn slot(root: PPtr<Root>, i: usize) -> PPtr<u64> {
    PPtr::from_offset(root.offset() + (offset_of!(Root, slots) + 8 * i) as u64)
}

fn next_id(root: PPtr<Root>) -> PPtr<u64> {
    PPtr::from_offset(root.offset() + offset_of!(Root, next_id) as u64)
}

fn entry(root: PPtr<Root>, k: usize) -> PPtr<Obj> {
    let at = offset_of!(Root, objs) + k * std::mem::size_of::<Obj>();
    PPtr::from_offset(root.offset() + at as u64)
}

// ---------------------------------------------------------------------------
// Transactions as a function of (seed, id), and the model they drive.

#[derive(Clone, Copy, Debug)]
enum ObjOp {
    None,
    /// Free what entry `k` holds (if anything), then allocate `len` bytes
    /// filled with `fill` and store it there.
    Alloc {
        k: usize,
        len: u64,
        fill: u8,
    },
    /// Free what entry `k` holds, if anything.
    Free {
        k: usize,
    },
}

#[derive(Clone, Debug)]
struct Plan {
    /// Slot writes before the object operation.
    before: Vec<(usize, u64)>,
    obj: ObjOp,
    /// Slot writes after it.
    after: Vec<(usize, u64)>,
    /// Return `Err` at the end: everything above is rolled back.
    abort: bool,
}

fn plan(seed: u64, id: u64, mode: Mode) -> Plan {
    let mut rng = SmallRng::seed_from_u64(seed ^ id.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let n = if mode == Mode::Exhaust && rng.gen_ratio(1, 3) {
        rng.gen_range(300..=1500u64)
    } else {
        rng.gen_range(1..=40u64)
    };
    // The value names its transaction and its place in it.
    let mut writes: Vec<(usize, u64)> = (0..n)
        .map(|j| (rng.gen_range(0..SLOTS), (id << 8) | j))
        .collect();
    let after = writes.split_off(rng.gen_range(0..=writes.len()));
    let fill = (id % 255) as u8 + 1;
    let obj = match rng.gen_range(0..8) {
        0 | 1 => {
            let k = rng.gen_range(0..OBJS);
            let len = if k < BIG_OBJS && rng.gen_ratio(1, 3) {
                rng.gen_range(65_537..=300_000) // a large run of 1 or 2 chunks
            } else {
                rng.gen_range(8..=600)
            };
            ObjOp::Alloc { k, len, fill }
        }
        2 => ObjOp::Free {
            k: rng.gen_range(0..OBJS),
        },
        _ => ObjOp::None,
    };
    Plan {
        before: writes,
        obj,
        after,
        abort: rng.gen_ratio(1, 10),
    }
}

/// What the pool must hold: object addresses aside, everything.
#[derive(Clone, Debug, PartialEq)]
struct Model {
    slots: Vec<u64>,
    next_id: u64,
    /// Per table entry: the object's length and fill byte.
    objs: [Option<(u64, u8)>; OBJS],
}

impl Model {
    fn new() -> Model {
        Model {
            slots: vec![0; SLOTS],
            next_id: 1,
            objs: [None; OBJS],
        }
    }

    /// Applies committed transaction `id`.
    fn apply(&mut self, id: u64, p: &Plan) {
        assert!(!p.abort, "transaction {id} aborts by plan");
        for &(s, v) in &p.before {
            self.slots[s] = v;
        }
        match p.obj {
            ObjOp::None => {}
            ObjOp::Alloc { k, len, fill } => self.objs[k] = Some((len, fill)),
            ObjOp::Free { k } => self.objs[k] = None,
        }
        for &(s, v) in &p.after {
            self.slots[s] = v;
        }
        self.next_id = id + 1;
    }

    fn diff(&self, want: &Model) -> String {
        let mut out = String::new();
        for (i, (g, w)) in self.slots.iter().zip(&want.slots).enumerate() {
            if g != w {
                out += &format!("  slot {i}: got {g:#x}, want {w:#x}\n");
            }
        }
        if self.next_id != want.next_id {
            out += &format!("  next_id: got {}, want {}\n", self.next_id, want.next_id);
        }
        for (k, (g, w)) in self.objs.iter().zip(&want.objs).enumerate() {
            if g != w {
                out += &format!("  entry {k}: got {g:?}, want {w:?}\n");
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------
// The child.

/// How a child transaction ends without committing.
#[derive(Debug)]
enum Abort {
    OnPurpose,
    Failed(Error),
}

impl From<Error> for Abort {
    fn from(e: Error) -> Abort {
        Abort::Failed(e)
    }
}

fn run_tx(pool: &Pool, root: PPtr<Root>, id: u64, p: &Plan) -> Result<(), Abort> {
    pool.transaction(|tx| {
        for &(s, v) in &p.before {
            before_write();
            tx.write(slot(root, s), &v)?;
        }
        match p.obj {
            ObjOp::None => {}
            ObjOp::Alloc { k, len, fill } => {
                let e = entry(root, k);
                let old = tx.read(e)?;
                if old.ptr != 0 {
                    tx.free(PPtr::<u8>::from_offset(old.ptr))?;
                }
                let at = tx.alloc_bytes(len)?;
                before_write();
                tx.write_bytes(at, &vec![fill; len as usize])?;
                let obj = Obj {
                    ptr: at,
                    len,
                    fill: fill as u64,
                };
                before_write();
                tx.write(e, &obj)?;
            }
            ObjOp::Free { k } => {
                let e = entry(root, k);
                let old = tx.read(e)?;
                if old.ptr != 0 {
                    tx.free(PPtr::<u8>::from_offset(old.ptr))?;
                    before_write();
                    tx.write(e, &Obj::default())?;
                }
            }
        }
        for &(s, v) in &p.after {
            before_write();
            tx.write(slot(root, s), &v)?;
        }
        before_write();
        tx.write(next_id(root), &(id + 1))?;
        if p.abort {
            Err(Abort::OnPurpose)
        } else {
            Ok(())
        }
    })
}

/// One protocol line, flushed; a closed pipe means the parent is gone.
fn say(out: &mut impl Write, word: &str, id: u64) {
    if writeln!(out, "{word} {id}")
        .and_then(|_| out.flush())
        .is_err()
    {
        std::process::exit(0);
    }
}

/// The child: runs transactions until killed. A no-op in a normal test run.
#[test]
fn torture_child() {
    let Some(path) = std::env::var_os(ENV_POOL) else {
        return;
    };
    let seed: u64 = std::env::var(ENV_SEED)
        .expect("seed")
        .parse()
        .expect("seed");
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match KillAt::from_env() {
        Some(KillAt::Fence(n)) => rewind::persist::kill_at_fence(n),
        Some(KillAt::Write(n)) => BEFORE_WRITE.arm(n),
        None => {}
    }
    // A newline first: the harness has printed `test torture_child ... `.
    say(&mut out, "\nopening", 0);
    let pool = Pool::open(Path::new(&path), LAYOUT, &OpenOptions::default())
        .unwrap_or_else(|e| panic!("child: open: {e}"));
    let root = pool.root::<Root>().expect("root").expect("root");
    let mode = Mode::from_env();
    let mut id = pool.read(next_id(root)).expect("next_id");
    say(&mut out, "ready", id);
    let last = id + CHILD_MAX_TXS;
    while id < last {
        let p = plan(seed, id, mode);
        say(&mut out, "begin", id);
        match run_tx(&pool, root, id, &p) {
            Ok(()) => say(&mut out, "committed", id),
            Err(Abort::OnPurpose) => say(&mut out, "aborted", id),
            // No room in the heap: rolled back whole, like an abort.
            Err(Abort::Failed(Error::LogFull { .. } | Error::OutOfMemory { .. })) => {
                say(&mut out, "aborted", id)
            }
            Err(Abort::Failed(e)) => panic!("child: transaction {id} failed: {e}"),
        }
        id += 1;
    }
}

// ---------------------------------------------------------------------------
// The parent.

#[derive(Clone, Copy, Debug, PartialEq)]
enum Event {
    Opening,
    Ready(u64),
    Begin(u64),
    Committed(u64),
    Aborted(u64),
}

fn parse(line: &str) -> Option<Event> {
    let (word, n) = line.split_once(' ')?;
    let n: u64 = n.trim().parse().ok()?;
    Some(match word {
        "opening" => Event::Opening,
        "ready" => Event::Ready(n),
        "begin" => Event::Begin(n),
        "committed" => Event::Committed(n),
        "aborted" => Event::Aborted(n),
        _ => return None, // the test harness's own lines
    })
}

/// Kills (SIGKILL) and reaps the child if the parent fails mid-cycle.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn pool_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Reopens the pool: free at once once closed or its process ended, even
/// while the other test's forked child holds a copy of its descriptor.
fn open(path: &Path) -> Pool {
    Pool::open(path, LAYOUT, &OpenOptions::default())
        .unwrap_or_else(|e| panic!("reopen (recovery) failed: {e}"))
}

fn read_byte(pool: &Pool, off: u64) -> u8 {
    let mut b = [0u8];
    pool.read_bytes(off, &mut b).unwrap();
    b[0]
}

/// Reads the pool's state, checking every live object: its block is
/// allocated and large enough, its bytes carry its fill, and no two blocks
/// (the root's included) overlap.
fn read_state(pool: &Pool) -> Model {
    let rp = pool.root::<Root>().unwrap().expect("root");
    let root: Root = pool.read(rp).unwrap();
    let (dom, layout) = (pool.domain(), pool.layout());
    let root_block = rewind::alloc::allocated_size(dom, layout, rp.offset()).unwrap();
    let mut blocks = vec![(rp.offset(), root_block)];
    let mut objs = [None; OBJS];
    for (k, o) in root.objs.iter().enumerate() {
        if o.ptr == 0 {
            assert_eq!(*o, Obj::default(), "entry {k}: null with fields set");
            continue;
        }
        let block = rewind::alloc::allocated_size(dom, layout, o.ptr)
            .unwrap_or_else(|e| panic!("entry {k} ({o:?}): {e}"));
        assert!(block >= o.len, "entry {k} ({o:?}) in a {block}-byte block");
        let fill = o.fill as u8;
        for at in [0, o.len / 2, o.len - 1] {
            let b = read_byte(pool, o.ptr + at);
            assert_eq!(b, fill, "entry {k} ({o:?}): byte {at} is {b}");
        }
        blocks.push((o.ptr, block));
        objs[k] = Some((o.len, fill));
    }
    blocks.sort();
    for w in blocks.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "blocks overlap: {w:?}");
    }
    Model {
        slots: root.slots.to_vec(),
        next_id: root.next_id,
        objs,
    }
}

/// What one child run showed.
struct Run {
    events: Vec<Event>,
}

impl Run {
    /// Killed between `opening` and `ready`: in the middle of `Pool::open`.
    fn killed_opening(&self) -> bool {
        self.events == [Event::Opening]
    }
}

/// Spawns a child that kills itself at `kill`, and returns its lines.
fn run_child(path: &Path, seed: u64, mode: Mode, kill: KillAt) -> Run {
    let child = common::spawn_test_child(
        "torture_child",
        &[
            (ENV_POOL, path.into()),
            (ENV_SEED, seed.to_string().into()),
            (ENV_MODE, mode.name().into()),
            (ENV_KILL, kill.env().into()),
        ],
    );
    let mut child = KillOnDrop(child);
    let stdout = child.0.stdout.take().expect("piped");
    let (send, recv) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(ev) = parse(&line) {
                if send.send(ev).is_err() {
                    break;
                }
            }
        }
    });
    let mut events = Vec::new();
    // Until the child's death closes the pipe (a long silence is a hang
    // only with REWIND_HANG_LIMIT_SECS set).
    loop {
        match common::recv_watched(&recv) {
            Ok(ev) => events.push(ev),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(e) => panic!(
                "child silent ({e:?}) after {events:?}; exit status {:?}",
                child.0.try_wait()
            ),
        }
    }
    let status = child.0.wait().expect("wait");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(9),
        "child ended otherwise than by its kill at {kill:?}: {status}; after {events:?}"
    );
    reader.join().expect("reader thread");
    Run { events }
}

#[derive(Default)]
struct Tally {
    kills: u64,
    in_flight: u64,
    in_flight_applied: u64,
    during_open: u64,
    recoveries_rolling_back: u64,
    committed: u64,
    aborted: u64,
    /// Transactions that found no room (log full, heap full) and rolled back.
    full: u64,
    checks: u64,
    /// Configurations whose heap grew.
    grown: u64,
}

/// Replays one run's events onto `model`, checking the protocol; returns
/// the transaction in flight at the kill, if any.
fn replay(run: &Run, model: &mut Model, seed: u64, mode: Mode, t: &mut Tally) -> Option<u64> {
    let mut expect = model.next_id; // the next id the child may name
    let mut in_flight = None;
    for (i, &ev) in run.events.iter().enumerate() {
        // `opening`, `ready <next_id>`, then begin/end pairs.
        let protocol = match i {
            0 => ev == Event::Opening,
            1 => ev == Event::Ready(model.next_id),
            _ => !matches!(ev, Event::Opening | Event::Ready(_)),
        };
        assert!(protocol, "unexpected line {ev:?}: {:?}", &run.events[..=i]);
        match ev {
            Event::Opening | Event::Ready(_) => {}
            Event::Begin(id) => {
                assert_eq!(id, expect, "begin out of order");
                assert!(in_flight.is_none(), "begin inside a transaction");
                in_flight = Some(id);
            }
            Event::Committed(id) | Event::Aborted(id) => {
                assert_eq!(in_flight, Some(id), "{ev:?} without its begin");
                let p = plan(seed, id, mode);
                if let Event::Committed(_) = ev {
                    model.apply(id, &p);
                    t.committed += 1;
                } else if p.abort {
                    t.aborted += 1;
                } else {
                    assert!(
                        mode == Mode::Exhaust,
                        "transaction {id} aborted but its plan commits"
                    );
                    t.full += 1;
                }
                in_flight = None;
                expect = id + 1;
            }
        }
    }
    in_flight
}

/// The number in the environment variable `var`, else `default`.
fn env_or(var: &str, default: u64) -> u64 {
    std::env::var(var).map_or(default, |s| s.parse().expect(var))
}

/// `cycles` kills shared among every log variant × policy, each
/// configuration's pool made by `cfg` from the default with its variant
/// and policy, its seed `seed` plus its index. Returns the tally and the
/// number of configurations.
fn torture_all(
    seed: u64,
    cycles: u64,
    mode: Mode,
    cfg: impl Fn(PoolConfig) -> PoolConfig,
) -> (Tally, usize) {
    let configs: Vec<(LogVariant, Policy)> = LogVariant::ALL
        .iter()
        .flat_map(|&v| Policy::ALL.iter().map(move |&p| (v, p)))
        .collect();
    let mut t = Tally::default();
    for (i, &(log, policy)) in configs.iter().enumerate() {
        let n =
            cycles / configs.len() as u64 + u64::from((i as u64) < cycles % configs.len() as u64);
        let cfg = cfg(PoolConfig::default().log(log).policy(policy));
        torture_config(&cfg, n, seed.wrapping_add(i as u64), mode, &mut t);
    }
    (t, configs.len())
}

#[test]
fn torture() {
    let seed = env_or("REWIND_TORTURE_PARENT_SEED", 0x7047_7572_6521);
    let cycles = env_or("REWIND_TORTURE_CYCLES", 402);
    let started = Instant::now();
    // A panic anywhere below names the seed that replays the run.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        eprintln!("torture: same transactions with REWIND_TORTURE_PARENT_SEED={seed}");
        hook(info)
    }));
    let (t, configs) = torture_all(seed, cycles, Mode::Normal, |c| c);

    let secs = started.elapsed().as_secs_f64();
    println!(
        "torture: {} kills over {} configurations ({} in a transaction, {} while opening (recovering) the pool), {} in-flight transactions found applied whole, {} recoveries rolled \
         back, {} transactions committed, {} aborted on purpose, {} checks, {:.1} s (seed {seed})",
        t.kills,
        configs,
        t.in_flight,
        t.during_open,
        t.in_flight_applied,
        t.recoveries_rolling_back,
        t.committed,
        t.aborted,
        t.checks,
        secs
    );
    assert!(
        t.in_flight >= t.kills / 8,
        "only {} of {} kills landed in a transaction",
        t.in_flight,
        t.kills
    );
    if t.kills >= 100 {
        assert!(
            t.during_open > 0,
            "no kill landed while the child was opening"
        );
    }
}

/// Kills near log and heap exhaustion (see [`Mode::Exhaust`]), shared among
/// every log variant × policy: `REWIND_TORTURE_EXHAUST_CYCLES` (default 240).
#[test]
fn torture_near_exhaustion() {
    let seed = env_or("REWIND_TORTURE_PARENT_SEED", 0x5eed_e4ba);
    let cycles = env_or("REWIND_TORTURE_EXHAUST_CYCLES", 240);
    let (t, _) = torture_all(seed, cycles, Mode::Exhaust, |c| c.log_size(0));
    println!(
        "torture near exhaustion: {} kills ({} in a transaction, {} while opening), {} committed, {} aborted on purpose, {} rolled back for want of room (seed {seed})",
        t.kills, t.in_flight, t.during_open, t.committed, t.aborted, t.full
    );
    assert!(t.full > 0, "no transaction ever ran out of room");
}

/// Kills on pools that grow (see [`Mode::Grow`]), shared among every log
/// variant × policy: `REWIND_TORTURE_GROW_CYCLES` (default 48).
#[test]
fn torture_growing() {
    let seed = env_or("REWIND_TORTURE_PARENT_SEED", 0x6772_6f77);
    let cycles = env_or("REWIND_TORTURE_GROW_CYCLES", 48);
    let (t, configs) = torture_all(seed, cycles, Mode::Grow, |c| c.max_size(16 << 20));
    println!(
        "torture growing: {} kills ({} in a transaction, {} while opening), {} committed, {} aborted on purpose, {} of {} configurations grew (seed {seed})",
        t.kills, t.in_flight, t.during_open, t.committed, t.aborted, t.grown, configs
    );
    assert!(t.grown > 0, "no pool grew");
}

/// The figures of the leak check: bytes and chunks in use, free blocks
/// per class. Free chunks are not compared, so a heap that grew compares
/// with its baseline (the new chunks are free).
fn in_use(s: &AllocStats) -> (u64, u64, u64, Vec<(u64, u64, u64)>) {
    (
        s.bytes_used,
        s.total_chunks - s.free_chunks,
        s.free_small_blocks,
        s.classes
            .iter()
            .map(|c| (c.chunks, c.bytes_used, c.bytes_free))
            .collect(),
    )
}

/// `cycles` kills on a fresh pool of configuration `cfg`.
fn torture_config(cfg: &PoolConfig, cycles: u64, seed: u64, mode: Mode, t: &mut Tally) {
    // Shown with a failure.
    eprintln!("torture: {}-{}, seed {seed:#x}", cfg.log, cfg.policy);
    let path = pool_dir().join(format!(
        "rewind-torture-{}-{seed:016x}.pool",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let _cleanup = RemoveOnDrop(path.clone());
    let pool = Pool::create(&path, LAYOUT, mode.pool_size(), cfg).unwrap();
    pool.transaction(|tx| {
        let r: PPtr<Root> = tx.root()?;
        tx.write(next_id(r), &1)
    })
    .unwrap();
    drop(pool);
    let baseline: AllocStats = open(&path).alloc_stats();

    let mut rng = SmallRng::seed_from_u64(seed);
    let mut model = Model::new();
    for cycle in 0..cycles {
        let run = run_child(&path, seed, mode, KillAt::draw(&mut rng, mode));
        t.kills += 1;
        t.during_open += run.killed_opening() as u64;
        let in_flight = replay(&run, &mut model, seed, mode, t);
        if in_flight.is_some() {
            t.in_flight += 1;
        }
        if cycle % 20 == 19 {
            // The crash image, before recovery: consistent, recoverable.
            let report = rewind::inspect::check(&path).unwrap();
            assert!(report.is_ok(), "cycle {cycle}: check: {report}");
            t.checks += 1;
        }
        let pool = open(&path);
        if pool.recovery_report().rolled_back > 0 {
            t.recoveries_rolling_back += 1;
        }
        let got = read_state(&pool);
        if got != model {
            // Only the transaction in flight may differ, and only whole.
            let whole = in_flight.and_then(|id| {
                let p = plan(seed, id, mode);
                (!p.abort).then(|| {
                    let mut m = model.clone();
                    m.apply(id, &p);
                    m
                })
            });
            match whole {
                Some(m) if got == m => {
                    model = m;
                    t.in_flight_applied += 1;
                    t.committed += 1;
                }
                _ => panic!(
                    "{}-{} cycle {cycle}: recovered state is neither the committed one nor it plus \
                     transaction {in_flight:?} ({}):\n{}",
                    cfg.log,
                    cfg.policy,
                    pool.recovery_report(),
                    got.diff(&model)
                ),
            }
        }
        drop(pool);
    }

    // No leak: free every object, and the heap is as right after setup.
    let pool = open(&path);
    let root = pool.root::<Root>().unwrap().unwrap();
    pool.transaction(|tx| {
        for k in 0..OBJS {
            let e = entry(root, k);
            let o = tx.read(e)?;
            if o.ptr != 0 {
                tx.free(PPtr::<u8>::from_offset(o.ptr))?;
                tx.write(e, &Obj::default())?;
            }
        }
        Ok::<_, Error>(())
    })
    .unwrap();
    drop(pool);
    let report = rewind::inspect::check(&path).unwrap();
    assert!(report.is_ok(), "final check: {report}");
    let after = open(&path).alloc_stats();
    assert_eq!(
        in_use(&after),
        in_use(&baseline),
        "{}-{}: heap leaked or double-freed",
        cfg.log,
        cfg.policy
    );
    t.grown += u64::from(after.total_chunks > baseline.total_chunks);
}
