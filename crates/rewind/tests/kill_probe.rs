//! Process kills and several processes, probed from outside, in every log
//! variant × policy: a child process (this test binary again, running only
//! `kill_probe_child`, a no-op unless `KILL_PROBE_ROLE` is set) runs
//! transactions of word writes, savepoints with rollbacks to them, nested
//! top actions, allocations and frees, and is SIGKILLed, either at a
//! seeded fence of its own (`persist::kill_at_fence`: inside recovery,
//! a commit, a growth, a checkpoint, a sync or a close) or by the parent
//! once it has read a seeded number of commit reports. The parent then
//! checks, before and after reopening: `inspect::check` and
//! `inspect::info` on the killed file, exactly the reported commits (the
//! one in flight all or nothing), what nested top actions left, and the
//! allocated blocks equal to the reachable ones. Also: a create killed at
//! each of its fences, recovery killed again and again, and a second
//! process opening a pool another holds (or held when it was killed).
//!
//! Child protocol (stdout, one line each):
//!
//! ```text
//! ready <next>       the pool is open (recovery done)
//! begin <id>         transaction <id> starts
//! committed <id>     its commit returned
//! aborted <id>       it rolled back on purpose
//! op <name>          an operation (grow, sync, ...) starts
//! opdone <name>      it returned
//! inside             (hold) a transaction is half done and waits
//! created            (create) the pool was created
//! ```
//!
//! Knob: `REWIND_PROBE_CASES` multiplies the number of kills (default 1).

mod common;

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{Error, OpenOptions, PPtr, Pod, Pool, PoolConfig, Zeroable};

use common::{configs, spawn_test_child};

const LAYOUT: &str = "kill-probe";
const POOL_SIZE: u64 = 4 << 20;
const MAX_SIZE: u64 = 32 << 20;
const SLOTS: usize = 48;
const NTA_SLOTS: usize = 8;
/// A child left alone stops after this many transactions.
const CHILD_TXS: u64 = 300;

const ENV_ROLE: &str = "KILL_PROBE_ROLE";
const ENV_POOL: &str = "KILL_PROBE_POOL";
const ENV_CFG: &str = "KILL_PROBE_CFG";
const ENV_SEED: &str = "KILL_PROBE_SEED";
const ENV_FENCE: &str = "KILL_PROBE_FENCE";
const ENV_OP: &str = "KILL_PROBE_OP";
const ENV_OP_AFTER: &str = "KILL_PROBE_OP_AFTER";
const ENV_TXS: &str = "KILL_PROBE_TXS";
const ENV_OPTS: &str = "KILL_PROBE_OPTS";
const ENV_RACER: &str = "KILL_PROBE_RACER";
/// Open, three commits, close: a racer's rounds.
const RACER_ROUNDS: u64 = 12;

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct Root {
    next: u64,
    obj: PPtr<[u64; 4]>,
    slots: [u64; SLOTS],
    nta: [u64; NTA_SLOTS],
}

fn slot(rp: PPtr<Root>, i: usize) -> PPtr<u64> {
    PPtr::from_offset(rp.offset() + 16 + 8 * i as u64)
}

fn nta_slot(rp: PPtr<Root>, i: usize) -> PPtr<u64> {
    PPtr::from_offset(rp.offset() + 16 + 8 * (SLOTS + i) as u64)
}

/// Transaction `id`: writes kept, writes after a savepoint that are rolled
/// back (with an allocation), writes in a nested top action, whether it
/// replaces the object, and whether it aborts at the end.
struct Plan {
    kept: Vec<(usize, u64)>,
    undone: Vec<(usize, u64)>,
    undone_alloc: bool,
    nta: Vec<(usize, u64)>,
    realloc: bool,
    abort: bool,
}

fn plan(seed: u64, id: u64) -> Plan {
    let mut rng = SmallRng::seed_from_u64(seed ^ id.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let writes = |n: usize, rng: &mut SmallRng, slots: usize| -> Vec<(usize, u64)> {
        (0..n)
            .map(|_| (rng.gen_range(0..slots), rng.gen::<u64>() | 1))
            .collect()
    };
    // One in twelve is large: the log grows into the heap (and gives the
    // chunks back), and kills fall inside its commit or rollback.
    let n = if rng.gen_ratio(1, 12) {
        rng.gen_range(200..1500)
    } else {
        rng.gen_range(1..12)
    };
    let kept = writes(n, &mut rng, SLOTS);
    let (undone, undone_alloc) = if rng.gen_ratio(1, 3) {
        let n = rng.gen_range(1..6);
        (writes(n, &mut rng, SLOTS), rng.gen_bool(0.5))
    } else {
        (Vec::new(), false)
    };
    let nta = if rng.gen_ratio(1, 4) {
        let n = rng.gen_range(1..4);
        writes(n, &mut rng, NTA_SLOTS)
    } else {
        Vec::new()
    };
    Plan {
        kept,
        undone,
        undone_alloc,
        nta,
        realloc: rng.gen_ratio(1, 3),
        abort: rng.gen_ratio(1, 6),
    }
}

fn cfg_of(i: usize) -> PoolConfig {
    let (v, p) = configs()[i];
    PoolConfig::default().log(v).policy(p).max_size(MAX_SIZE)
}

fn cfg_name(i: usize) -> String {
    let (v, p) = configs()[i];
    format!("{v}/{p}")
}

/// The child's open options, by name: `msync` (the Msync backend over a
/// pool created for Pmem), `lru` (redo-async's write-back keeping up to 16
/// lines), or the defaults.
fn open_options(name: &str) -> OpenOptions {
    match name {
        "msync" => OpenOptions::default().backend(rewind::Backend::Msync),
        "lru" => OpenOptions::default().write_back(rewind::WriteBack::Lru { lines: 16 }),
        _ => OpenOptions::default(),
    }
}

/// Open options drawn for a run.
fn draw_options(rng: &mut SmallRng) -> &'static str {
    ["", "", "msync", "lru"][rng.gen_range(0..4)]
}

fn say(out: &mut impl Write, line: &str) {
    if writeln!(out, "{line}").and_then(|_| out.flush()).is_err() {
        std::process::exit(0);
    }
}

fn env_u64(name: &str) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// One transaction of the plan. `Err(Aborted)` when it aborts on purpose.
fn run_tx(pool: &Pool, rp: PPtr<Root>, id: u64, p: &Plan) -> Result<(), Error> {
    pool.transaction(|tx| {
        for &(i, v) in &p.kept {
            tx.write(slot(rp, i), &v)?;
        }
        if !p.nta.is_empty() {
            tx.nested_top_action(|tx| {
                for &(i, v) in &p.nta {
                    tx.write(nta_slot(rp, i), &v)?;
                }
                Ok::<_, Error>(())
            })?;
        }
        if !p.undone.is_empty() {
            let sp = tx.savepoint()?;
            for &(i, v) in &p.undone {
                tx.write(slot(rp, i), &(v ^ 0xdead))?;
            }
            if p.undone_alloc {
                let o = tx.alloc::<[u64; 4]>()?;
                tx.write(o, &[id; 4])?;
                tx.write(field_obj(rp), &o)?;
            }
            tx.rollback_to(sp)?;
        }
        if p.realloc {
            let old = tx.read(field_obj(rp))?;
            let o = tx.alloc::<[u64; 4]>()?;
            tx.write(o, &[id, !id, id, !id])?;
            tx.write(field_obj(rp), &o)?;
            if !old.is_null() {
                tx.free(old)?;
            }
        }
        tx.write(PPtr::<u64>::from_offset(rp.offset()), &(id + 1))?;
        if p.abort {
            return Err(Error::Aborted);
        }
        Ok(())
    })
}

fn field_obj(rp: PPtr<Root>) -> PPtr<PPtr<[u64; 4]>> {
    PPtr::from_offset(rp.offset() + 8)
}

/// The child. A no-op in a normal test run.
#[test]
fn kill_probe_child() {
    let Ok(role) = std::env::var(ENV_ROLE) else {
        return;
    };
    let path = PathBuf::from(std::env::var_os(ENV_POOL).unwrap());
    let cfg = cfg_of(env_u64(ENV_CFG) as usize);
    let fence = env_u64(ENV_FENCE);
    let mut out = std::io::stdout().lock();
    // A newline first: the harness has printed `test kill_probe_child ... `.
    say(&mut out, "");
    match role.as_str() {
        "create" => {
            if fence > 0 {
                rewind::persist::kill_at_fence(fence);
            }
            let pool = Pool::create(&path, LAYOUT, POOL_SIZE, &cfg)
                .unwrap_or_else(|e| panic!("child: create: {e}"));
            say(&mut out, "created");
            pool.transaction(|tx| tx.root::<Root>().map(drop))
                .unwrap_or_else(|e| panic!("child: root: {e}"));
            drop(pool);
        }
        "work" => {
            let seed = env_u64(ENV_SEED);
            let op = std::env::var(ENV_OP).unwrap_or_default();
            let op_after = env_u64(ENV_OP_AFTER);
            let txs = std::env::var(ENV_TXS).map_or(CHILD_TXS, |v| v.parse().unwrap());
            // A fence count without an operation counts from the start
            // (the open's recovery included); with one, from the op.
            if op.is_empty() && fence > 0 {
                rewind::persist::kill_at_fence(fence);
            }
            let pool = open_pool(&path).unwrap_or_else(|e| panic!("child: open: {e}"));
            let rp = pool.root::<Root>().unwrap().expect("root");
            let first = pool.read(rp).unwrap().next;
            say(&mut out, &format!("ready {first}"));
            let mut pool = Some(pool);
            for (n, id) in (first..first + txs).enumerate() {
                if n as u64 == op_after && !op.is_empty() {
                    say(&mut out, &format!("op {op}"));
                    if fence > 0 {
                        rewind::persist::kill_at_fence(fence);
                    }
                    let p = pool.as_ref().unwrap();
                    let r = match op.as_str() {
                        "grow" => p.grow(4 << 20).map(drop),
                        "sync" => p.sync(),
                        "checkpoint" => p.checkpoint(),
                        "close" => pool.take().unwrap().close(),
                        "drop" => {
                            drop(pool.take());
                            Ok(())
                        }
                        o => panic!("child: no op {o}"),
                    };
                    r.unwrap_or_else(|e| panic!("child: {op}: {e}"));
                    say(&mut out, &format!("opdone {op}"));
                    if pool.is_none() {
                        // Reopened: what a program does next.
                        pool =
                            Some(open_pool(&path).unwrap_or_else(|e| panic!("child: reopen: {e}")));
                    }
                }
                let p = plan(seed, id);
                say(&mut out, &format!("begin {id}"));
                match run_tx(pool.as_ref().unwrap(), rp, id, &p) {
                    Ok(()) => say(&mut out, &format!("committed {id}")),
                    Err(Error::Aborted) if p.abort => say(&mut out, &format!("aborted {id}")),
                    Err(e) => panic!("child: transaction {id}: {e}"),
                }
            }
        }
        "hold" => {
            let pool = open_pool(&path).unwrap_or_else(|e| panic!("child: open: {e}"));
            let rp = pool.root::<Root>().unwrap().expect("root");
            let _ = pool.transaction(|tx| {
                for i in 0..SLOTS {
                    tx.write(slot(rp, i), &0x4141)?;
                }
                let o = tx.alloc::<[u64; 4]>()?;
                tx.write(field_obj(rp), &o)?;
                say(&mut out, "inside");
                // Until the parent kills it.
                loop {
                    std::thread::park();
                }
                #[allow(unreachable_code)]
                Ok::<_, Error>(())
            });
        }
        "racer" => {
            // Opens (or creates) the pool whenever it is free, commits a
            // few increments, closes it, again and again.
            let me = env_u64(ENV_RACER) as usize;
            for _ in 0..RACER_ROUNDS {
                let pool = when_free(|| Pool::open_or_create(&path, LAYOUT, POOL_SIZE, &cfg))
                    .unwrap_or_else(|e| panic!("racer {me}: open_or_create: {e}"));
                for _ in 0..3 {
                    pool.transaction(|tx| {
                        let rp = tx.root::<Root>()?;
                        let total = tx.read(slot(rp, 0))?;
                        tx.write(slot(rp, 0), &(total + 1))?;
                        let mine = tx.read(slot(rp, 1 + me))?;
                        tx.write(slot(rp, 1 + me), &(mine + 1))
                    })
                    .unwrap_or_else(|e| panic!("racer {me}: transaction: {e}"));
                    say(&mut out, "committed 0");
                }
                if me.is_multiple_of(2) {
                    pool.close()
                        .unwrap_or_else(|e| panic!("racer {me}: close: {e}"));
                }
            }
        }
        r => panic!("child: no role {r}"),
    }
}

/// What a child showed.
#[derive(Debug, Default)]
struct Run {
    ready: Option<u64>,
    committed: Vec<u64>,
    /// Ended (committed or aborted), in order.
    ended: Vec<u64>,
    in_flight: Option<u64>,
    op_started: bool,
    op_done: bool,
    created: bool,
    killed: bool,
}

/// Runs a child; SIGKILLs it once `kill_after` commits were reported (0:
/// never, the child kills itself or ends).
fn run_child(role: &str, path: &Path, envs: &[(&str, String)], kill_after: u64) -> Run {
    let mut all: Vec<(&str, OsString)> = vec![
        (ENV_ROLE, role.into()),
        (ENV_POOL, path.as_os_str().to_owned()),
    ];
    all.extend(envs.iter().map(|(k, v)| (*k, OsString::from(v))));
    let mut child = spawn_test_child("kill_probe_child", &all);
    let stdout = child.stdout.take().expect("piped");
    let mut run = Run::default();
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let mut w = line.split_whitespace();
        let (word, arg) = (w.next().unwrap_or(""), w.next().unwrap_or(""));
        let id = arg.parse::<u64>().ok();
        match word {
            "ready" => run.ready = id,
            "created" => run.created = true,
            "op" => run.op_started = true,
            "opdone" => run.op_done = true,
            "begin" => {
                assert_eq!(run.in_flight, None, "begin inside a transaction");
                run.in_flight = id;
            }
            "committed" | "aborted" => {
                assert_eq!(run.in_flight, id, "{line} without its begin");
                run.in_flight = None;
                run.ended.push(id.unwrap());
                if word == "committed" {
                    run.committed.push(id.unwrap());
                    if run.committed.len() as u64 == kill_after {
                        child.kill().expect("SIGKILL");
                    }
                }
            }
            _ => {}
        }
    }
    let status = child.wait().expect("wait");
    run.killed = status.signal() == Some(9);
    assert!(
        run.killed || status.success(),
        "{role} child failed: {status}; {run:?}"
    );
    run
}

/// The parent's model: the words every committed transaction left (a pure
/// function of the next id) and the nested top actions' words (tracked).
struct Model {
    seed: u64,
    next: u64,
    nta: [u64; NTA_SLOTS],
}

fn slots_after(seed: u64, next: u64) -> [u64; SLOTS] {
    let mut s = [0; SLOTS];
    for id in 0..next {
        let p = plan(seed, id);
        if p.abort {
            continue;
        }
        for &(i, v) in &p.kept {
            s[i] = v;
        }
    }
    s
}

fn apply_nta(nta: &mut [u64; NTA_SLOTS], p: &Plan) {
    for &(i, v) in &p.nta {
        nta[i] = v;
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

/// Opens the pool with the options the parent passed. No retry while it is
/// in use: a pool closed (or its process ended) is free at once, even while
/// a sibling test's forked child holds a copy of its descriptor.
fn open_pool(path: &Path) -> Result<Pool, Error> {
    let opts = open_options(&std::env::var(ENV_OPTS).unwrap_or_default());
    Pool::open(path, LAYOUT, &opts)
}

/// `f` again while the pool is in use: the racers contend for it on
/// purpose.
fn when_free<T>(f: impl FnMut() -> Result<T, Error>) -> Result<T, Error> {
    common::retry_while(f, |r| matches!(r, Err(Error::PoolInUse { .. })))
}

fn open(path: &Path) -> Pool {
    open_pool(path).unwrap_or_else(|e| panic!("recovery of {}: {e}", path.display()))
}

fn new_pool(path: &Path, c: usize) {
    new_pool_with(path, &cfg_of(c));
}

/// A configuration's tight form: small buckets, the smallest log (it
/// grows into the heap at once), Batch groups of 64.
fn tight(cfg: PoolConfig) -> PoolConfig {
    cfg.bucket_cells(8).log_size(1).group_size(64)
}

fn new_pool_with(path: &Path, cfg: &PoolConfig) {
    let pool = Pool::create(path, LAYOUT, POOL_SIZE, cfg).unwrap();
    pool.transaction(|tx| tx.root::<Root>().map(drop)).unwrap();
    pool.close().unwrap();
}

/// Checks the killed file from outside, reopens it (recovery) and checks
/// it against the model and the run; updates the model.
fn verify(path: &Path, what: &str, m: &mut Model, run: &Run) -> Pool {
    // Inspection of the killed file: never a panic, never a problem.
    let info = rewind::inspect::info(path).unwrap_or_else(|e| panic!("{what}: info: {e}"));
    assert!(!info.in_use, "{what}: a killed opener still holds the pool");
    let report = rewind::inspect::check(path).unwrap_or_else(|e| panic!("{what}: check: {e}"));
    assert!(report.is_ok(), "{what}: check of the killed pool: {report}");
    let pool = open(path);
    let rp = pool.root::<Root>().unwrap().expect("root");
    let root = pool.read(rp).unwrap();
    // Every reported commit is in; the one in flight may be, whole.
    let known = run.committed.last().map_or(m.next, |c| c + 1);
    let mut allowed = vec![known];
    if let Some(id) = run.in_flight {
        if !plan(m.seed, id).abort {
            allowed.push(id + 1);
        }
    }
    assert!(
        allowed.contains(&root.next),
        "{what}: recovered next {} not in {allowed:?} ({run:?})",
        root.next
    );
    assert_eq!(
        root.slots,
        slots_after(m.seed, root.next),
        "{what}: words after next {}",
        root.next
    );
    // Nested top actions: every ended transaction's stays, the one in
    // flight's may.
    let mut nta = m.nta;
    for &id in &run.ended {
        apply_nta(&mut nta, &plan(m.seed, id));
    }
    let mut with = nta;
    if let Some(id) = run.in_flight {
        apply_nta(&mut with, &plan(m.seed, id));
    }
    assert!(
        root.nta == nta || root.nta == with,
        "{what}: nested top actions' words {:x?}, want {nta:x?} or {with:x?} ({run:?})",
        root.nta
    );
    if root.next == known + 1 {
        assert_eq!(
            root.nta, with,
            "{what}: committed without its nested top action"
        );
    }
    m.nta = root.nta;
    m.next = root.next;
    // The object: the last committed reallocation's, and the allocated
    // blocks are exactly the root and it.
    let want_obj = (0..root.next).rev().find(|&id| {
        let p = plan(m.seed, id);
        p.realloc && !p.abort
    });
    match want_obj {
        Some(id) => {
            assert!(!root.obj.is_null(), "{what}: object lost");
            assert_eq!(pool.read(root.obj).unwrap(), [id, !id, id, !id], "{what}");
        }
        None => assert!(root.obj.is_null(), "{what}: object {:?}", root.obj),
    }
    let mut owned = vec![rp.offset()];
    if !root.obj.is_null() {
        owned.push(root.obj.offset());
    }
    owned.sort_unstable();
    let allocated: Vec<u64> = rewind::alloc::allocated_blocks(pool.domain(), pool.layout())
        .unwrap()
        .into_iter()
        .map(|(off, _)| off)
        .collect();
    assert_eq!(allocated, owned, "{what}: leaked or lost blocks ({run:?})");
    let report = rewind::inspect::check_pool(&pool);
    assert!(report.is_ok(), "{what}: check after recovery: {report}");
    pool
}

fn cases() -> u64 {
    env_u64("REWIND_PROBE_CASES").max(1)
}

fn work_envs(c: usize, seed: u64, fence: u64) -> Vec<(&'static str, String)> {
    // The options drawn from the seed and fence: the same run each time.
    let mut rng = SmallRng::seed_from_u64(seed ^ fence.wrapping_mul(0x2545_f491_4f6c_dd1d));
    vec![
        (ENV_CFG, c.to_string()),
        (ENV_SEED, seed.to_string()),
        (ENV_FENCE, fence.to_string()),
        (ENV_OPTS, draw_options(&mut rng).to_string()),
    ]
}

/// Kills at seeded fences (a fifth of them inside the open, recovering the
/// previous kill) and by the parent after a seeded number of commits, then
/// recovery killed again one to three times before the parent reopens.
#[test]
fn kills_at_seeded_points_then_kills_during_recovery() {
    let dir = tempfile::tempdir_in(pool_dir()).unwrap();
    let (mut kills, mut in_open) = (0, 0);
    for (c, tightly) in (0..configs().len()).flat_map(|c| [(c, false), (c, true)]) {
        let seed = 0x6b70_0000 ^ (c as u64) << 24 ^ u64::from(tightly) << 20;
        let path = dir.path().join(format!("w{c}-{tightly}.pool"));
        let what = match tightly {
            true => {
                let cfg = tight(cfg_of(c));
                new_pool_with(&path, &cfg);
                format!("{} tight", cfg_name(c))
            }
            false => {
                new_pool(&path, c);
                cfg_name(c)
            }
        };
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut m = Model {
            seed,
            next: 0,
            nta: [0; NTA_SLOTS],
        };
        for cycle in 0..4 * cases() {
            let what = format!("{what} cycle {cycle}");
            // The workload, killed.
            let (fence, kill_after) = match rng.gen_range(0..5) {
                0 => (1 + rng.gen_range(0..6), 0),
                1 | 2 => (7 + rng.gen_range(0..600), 0),
                _ => (0, 1 + rng.gen_range(0..60)),
            };
            let run = run_child("work", &path, &work_envs(c, seed, fence), kill_after);
            kills += u64::from(run.killed);
            match run.ready {
                Some(r) => assert_eq!(r, m.next, "{what}: child started at {r}"),
                None => in_open += 1,
            }
            // Recovery killed at its first fences, a few times over (the
            // children run no transaction: the state stays the one the
            // workload left): each must leave a pool the next open
            // recovers to one of the same outcomes.
            for _ in 0..rng.gen_range(0..3) {
                let mut envs = work_envs(c, seed, 1 + rng.gen_range(0..8));
                envs.push((ENV_TXS, "0".into()));
                let r = run_child("work", &path, &envs, 0);
                match r.ready {
                    Some(ready) => {
                        let known = run.committed.last().map_or(m.next, |c| c + 1);
                        assert!(
                            ready == known || run.in_flight.is_some_and(|id| ready == id + 1),
                            "{what}: recovered to {ready} after {run:?}"
                        );
                    }
                    None => in_open += 1,
                }
                kills += u64::from(r.killed);
            }
            drop(verify(&path, &what, &mut m, &run));
        }
    }
    eprintln!("{kills} kills, {in_open} during open");
}

/// A kill at each fence of `grow`, `sync`, `checkpoint`, `close` and a
/// drop (and in the transactions after them): every commit reported before
/// is there, the size is the old or the new one, and a transaction after
/// reopening commits and survives the next open.
#[test]
fn kills_inside_grow_sync_checkpoint_and_close() {
    let dir = tempfile::tempdir_in(pool_dir()).unwrap();
    let ops = ["grow", "sync", "checkpoint", "close", "drop"];
    let mut op_kills = 0;
    let only = std::env::var("KILL_PROBE_ONLY").unwrap_or_default();
    for c in 0..configs().len() {
        let seed = 0x6f70_0000 ^ (c as u64) << 24;
        let mut rng = SmallRng::seed_from_u64(seed);
        for (o, op) in ops.iter().enumerate() {
            if !only.is_empty() && !format!("{} {op}", cfg_name(c)).contains(&only) {
                continue;
            }
            let path = dir.path().join(format!("o{c}-{o}.pool"));
            new_pool(&path, c);
            let mut m = Model {
                seed,
                next: 0,
                nta: [0; NTA_SLOTS],
            };
            for cycle in 0..2 * cases() {
                let what = format!("{} {op} cycle {cycle}", cfg_name(c));
                // The heap's chunks say whether a growth happened: a kill
                // after the file was extended but before the heap size
                // word was stored leaves a longer file (`size`) around the
                // old heap, which the next growth uses.
                let chunks = |p: &Pool| p.alloc_stats().total_chunks;
                let mut before = chunks(&open(&path));
                if open(&path).size() + (8 << 20) > MAX_SIZE {
                    // Grown to its maximum: a fresh pool.
                    std::fs::remove_file(&path).unwrap();
                    new_pool(&path, c);
                    m = Model {
                        seed,
                        next: 0,
                        nta: [0; NTA_SLOTS],
                    };
                    before = chunks(&open(&path));
                }
                let fence = 1 + rng.gen_range(0..12);
                let mut envs = work_envs(c, seed, fence);
                envs.push((ENV_OP, op.to_string()));
                envs.push((ENV_OP_AFTER, rng.gen_range(0..8).to_string()));
                envs.push((ENV_TXS, "20".into()));
                let run = run_child("work", &path, &envs, 0);
                assert!(run.op_started, "{what}: {run:?}");
                if run.killed && !run.op_done {
                    op_kills += 1;
                }
                let pool = verify(&path, &what, &mut m, &run);
                let after = chunks(&pool);
                if *op == "grow" {
                    // 4 MiB: 16 chunks, all or none (a large transaction's
                    // log may have grown the heap by itself too).
                    assert!(after >= before, "{what}: {after} chunks, {before} before");
                    if run.op_done {
                        assert!(after >= before + 16, "{what}: growth lost ({run:?})");
                    }
                    let want = pool.layout().heap_off + after * (256 << 10);
                    assert!(pool.size() >= want, "{what}: file shorter than its heap");
                } else {
                    // A large transaction's log may have grown the heap.
                    assert!(after >= before, "{what}: {after} chunks, {before} before");
                }
                drop(pool);
            }
        }
    }
    eprintln!("{op_kills} kills inside an operation");
    assert!(op_kills > 0);
}

/// A create killed at each of its fences leaves no file, or a pool that
/// opens (empty) and works; `open_or_create` gets a pool either way, and
/// inspection never panics on what is left.
#[test]
fn create_killed_at_each_fence() {
    let dir = tempfile::tempdir_in(pool_dir()).unwrap();
    let (mut killed, mut left) = (0, 0);
    for c in 0..configs().len() {
        let mut fence = 1;
        loop {
            let what = format!("{} create killed at fence {fence}", cfg_name(c));
            let path = dir.path().join(format!("c{c}-{fence}.pool"));
            let envs = vec![(ENV_CFG, c.to_string()), (ENV_FENCE, fence.to_string())];
            let run = run_child("create", &path, &envs, 0);
            if !run.killed {
                assert!(run.created, "{what}: {run:?}");
                break;
            }
            // Killed in the create, or in the close after it.
            killed += 1;
            let names: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|n| n.starts_with(&format!("c{c}-{fence}")) || n.contains(".creating"))
                .collect();
            assert!(names.len() <= 1, "{what}: left {names:?}");
            if path.exists() {
                left += 1;
                let report =
                    rewind::inspect::check(&path).unwrap_or_else(|e| panic!("{what}: check: {e}"));
                assert!(report.is_ok(), "{what}: {report}");
                rewind::inspect::info(&path).unwrap_or_else(|e| panic!("{what}: info: {e}"));
            }
            let pool = Pool::open_or_create(&path, LAYOUT, POOL_SIZE, &cfg_of(c))
                .unwrap_or_else(|e| panic!("{what}: open_or_create: {e}"));
            pool.transaction(|tx| {
                let r = tx.root::<Root>()?;
                tx.write(slot(r, 0), &7)
            })
            .unwrap_or_else(|e| panic!("{what}: first transaction: {e}"));
            pool.close().unwrap();
            let pool = open(&path);
            let r = pool.root::<Root>().unwrap().unwrap();
            assert_eq!(pool.read(slot(r, 0)).unwrap(), 7, "{what}");
            drop(pool);
            std::fs::remove_file(&path).unwrap();
            fence += 1;
            assert!(fence < 10_000, "{what}: create never ends");
        }
    }
    eprintln!("{killed} creates killed, {left} left a file");
    assert!(killed > 0);
}

/// A second process opening a pool another holds gets `PoolInUse` (and
/// inspection refuses it, `info` shows the header only), never a
/// recovery of a live pool; once the holder is killed inside a
/// transaction, the lock is gone: inspection and open see the pool, and
/// recovery undoes the half-done transaction.
#[test]
fn second_opener_while_held_and_after_the_holder_is_killed() {
    let dir = tempfile::tempdir_in(pool_dir()).unwrap();
    for c in 0..configs().len() {
        let what = cfg_name(c);
        let path = dir.path().join(format!("h{c}.pool"));
        new_pool(&path, c);
        let mut m = Model {
            seed: 0x686f_6c64 + c as u64,
            next: 0,
            nta: [0; NTA_SLOTS],
        };
        // Some committed history first.
        let mut envs = work_envs(c, m.seed, 0);
        envs.push((ENV_TXS, "15".into()));
        let run = run_child("work", &path, &envs, 0);
        assert!(!run.killed);
        drop(verify(&path, &what, &mut m, &run));
        let all = [
            (ENV_ROLE, OsString::from("hold")),
            (ENV_POOL, path.as_os_str().to_owned()),
            (ENV_CFG, OsString::from(c.to_string())),
        ];
        let mut child = spawn_test_child("kill_probe_child", &all);
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let inside = lines.any(|l| l.is_ok_and(|l| l == "inside"));
        assert!(inside, "{what}: the holder never got inside");
        let e = Pool::open(&path, LAYOUT, &OpenOptions::default())
            .expect_err("a second open of a held pool");
        assert!(matches!(e, Error::PoolInUse { .. }), "{what}: {e}");
        let e = Pool::open_or_create(&path, LAYOUT, POOL_SIZE, &cfg_of(c))
            .expect_err("open_or_create of a held pool");
        assert!(matches!(e, Error::PoolInUse { .. }), "{what}: {e}");
        let e = rewind::inspect::check(&path).expect_err("check of a held pool");
        assert!(matches!(e, Error::PoolInUse { .. }), "{what}: {e}");
        let info = rewind::inspect::info(&path).unwrap();
        assert!(info.in_use, "{what}");
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(9), "{what}");
        let run = Run::default();
        let pool = verify(&path, &what, &mut m, &run);
        // And it goes on.
        let rp = pool.root::<Root>().unwrap().unwrap();
        let p = plan(m.seed, m.next);
        match run_tx(&pool, rp, m.next, &p) {
            Ok(()) => assert!(!p.abort),
            Err(Error::Aborted) => assert!(p.abort),
            Err(e) => panic!("{what}: transaction after recovery: {e}"),
        }
    }
}

/// Three processes race to create and open one pool, each committing a few
/// increments between its open and its close and retrying while another
/// holds it; some are SIGKILLed after a seeded number of their commits
/// (inside a create, an open's recovery, a transaction or a close). Each
/// racer's acknowledged increments are all there (plus perhaps the one in
/// flight when it was killed), and the shared total is their sum: no
/// racer ever recovered or changed a pool another held.
#[test]
fn racing_openers_some_killed() {
    let dir = tempfile::tempdir_in(pool_dir()).unwrap();
    const RACERS: usize = 3;
    let (mut kills, mut acked_all) = (0, 0);
    for c in 0..configs().len() {
        for round in 0..cases() {
            let what = format!("{} round {round}", cfg_name(c));
            let seed = 0x7261_6365 ^ (c as u64) << 16 ^ round;
            let mut rng = SmallRng::seed_from_u64(seed);
            let path = dir.path().join(format!("r{c}-{round}.pool"));
            let results: Vec<(u64, bool)> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..RACERS)
                    .map(|me| {
                        // Killed after 0 (at once: perhaps inside the
                        // create), some or none of its commits.
                        let kill_after = match rng.gen_range(0..4) {
                            0 => None,
                            1 => Some(0),
                            _ => Some(rng.gen_range(1..3 * RACER_ROUNDS)),
                        };
                        let path = &path;
                        s.spawn(move || race(path, c, me, kill_after))
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            if !path.exists() {
                // Every racer killed before its create named the file.
                assert!(results.iter().all(|&(a, k)| a == 0 && k), "{what}");
                kills += RACERS as u64;
                continue;
            }
            let pool = open(&path);
            let rp = pool.root::<Root>().unwrap();
            let root = rp.map(|rp| pool.read(rp).unwrap());
            let (mut sum, mut lo, mut hi) = (0, 0, 0);
            for (me, &(acked, killed)) in results.iter().enumerate() {
                let mine = root.map_or(0, |r| r.slots[1 + me]);
                assert!(
                    mine == acked || (killed && mine == acked + 1),
                    "{what}: racer {me} has {mine} increments, acknowledged {acked} (killed: {killed})"
                );
                sum += mine;
                lo += acked;
                hi += acked + u64::from(killed);
                kills += u64::from(killed);
            }
            let total = root.map_or(0, |r| r.slots[0]);
            assert_eq!(total, sum, "{what}: total against the racers' own counts");
            assert!((lo..=hi).contains(&total), "{what}");
            acked_all += lo;
            let report = rewind::inspect::check_pool(&pool);
            assert!(report.is_ok(), "{what}: {report}");
        }
    }
    eprintln!("{kills} racers killed, {acked_all} increments acknowledged");
    assert!(kills > 0);
}

/// Runs racer `me` (killed once it reported `kill_after` commits); returns
/// its acknowledged commits and whether it was killed.
fn race(path: &Path, c: usize, me: usize, kill_after: Option<u64>) -> (u64, bool) {
    let all = [
        (ENV_ROLE, OsString::from("racer")),
        (ENV_POOL, path.as_os_str().to_owned()),
        (ENV_CFG, OsString::from(c.to_string())),
        (ENV_RACER, OsString::from(me.to_string())),
    ];
    let mut child = spawn_test_child("kill_probe_child", &all);
    let mut acked = 0;
    if kill_after == Some(0) {
        child.kill().unwrap();
    }
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let Ok(line) = line else { break };
        if line.starts_with("committed") {
            acked += 1;
            if Some(acked) == kill_after {
                child.kill().unwrap();
            }
        }
    }
    let status = child.wait().unwrap();
    let killed = status.signal() == Some(9);
    assert!(killed || status.success(), "racer {me}: {status}");
    (acked, killed)
}

/// What a create killed by a tool other than this library's leaves (or a
/// pool file cut short by a killed copy): the first bytes of a pool, or
/// none. `open`, `open_or_create` and inspection give typed errors, never
/// a panic, and never recreate over the file.
#[test]
fn cut_pool_files_are_typed_errors() {
    let dir = tempfile::tempdir_in(pool_dir()).unwrap();
    let whole = dir.path().join("whole.pool");
    new_pool(&whole, 0);
    let bytes = std::fs::read(&whole).unwrap();
    for len in [
        0,
        1,
        100,
        4095,
        4096,
        4097,
        8192,
        65536,
        bytes.len() / 2,
        bytes.len() - 1,
    ] {
        let path = dir.path().join(format!("cut{len}.pool"));
        std::fs::write(&path, &bytes[..len]).unwrap();
        let what = format!("a pool cut to {len} bytes");
        match Pool::open(&path, LAYOUT, &OpenOptions::default()) {
            Ok(_) => panic!("{what}: opened"),
            Err(e) => assert!(!matches!(e, Error::PoolInUse { .. }), "{what}: {e}"),
        }
        let e = Pool::open_or_create(&path, LAYOUT, POOL_SIZE, &cfg_of(0))
            .err()
            .unwrap_or_else(|| panic!("{what}: open_or_create made a pool over it"));
        assert!(!e.to_string().is_empty());
        assert_eq!(
            std::fs::read(&path).unwrap(),
            &bytes[..len],
            "{what}: changed"
        );
        let _ = rewind::inspect::info(&path);
        if let Ok(r) = rewind::inspect::check(&path) {
            assert!(!r.is_ok(), "{what}: check passes it");
        }
    }
}
