//! Concurrency probes: many threads on several shared collections of one
//! pool, in one transaction each, with no lock of the program's.
//!
//! Every transaction locks what it touches (the collections' own locks)
//! and, last, a sequence word, so the order of the sequence numbers is a
//! serial order of the committed transactions (strict two-phase locking).
//! Each thread records, for every transaction whose commit returned, its
//! sequence number and what each of its operations returned; the test
//! then replays them in that order on std models and checks every result
//! and the final contents (and again after a reopen). Transactions take
//! the collections in seeded orders (deadlocks are typed errors, retried),
//! some roll back on purpose, some panic, some roll back to a savepoint,
//! some run a nested top action; readers beside them check that what a
//! read through `&Pool` returns is whole commits. Counts and seeds only:
//! nothing depends on time (`REWIND_HANG_LIMIT_SECS` arms a watchdog for
//! runs by hand).

mod common;

use std::collections::BTreeMap as Model;
use std::ops::Bound;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{
    Backend, Error as PoolError, LogVariant, PPtr, Pod, Policy, Pool, PoolConfig, Zeroable,
};
use rewind_collections::{BTreeMap, Error, HashMap, Vec as PVec};

const LAYOUT: &str = "conc-probe";
/// Accounts of the hash map: keys `0..ACCOUNTS`, their sum constant.
const ACCOUNTS: u64 = 8;
const START_BALANCE: u64 = 1000;
const TOTAL: u64 = ACCOUNTS * START_BALANCE;

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct Root {
    seq: u64,
    a: PPtr<BTreeMap<u64, u64>>,
    s: PPtr<BTreeMap<String, u64>>,
    h: PPtr<HashMap<u64, u64>>,
    v: PPtr<PVec<u64>>,
    n: PPtr<BTreeMap<u64, u64>>,
}

#[derive(Clone, Copy)]
struct Colls {
    root: PPtr<Root>,
    a: BTreeMap<u64, u64>,
    s: BTreeMap<String, u64>,
    h: HashMap<u64, u64>,
    v: PVec<u64>,
    n: BTreeMap<u64, u64>,
}

impl Colls {
    fn seq(&self) -> PPtr<u64> {
        PPtr::from_offset(self.root.offset() + std::mem::offset_of!(Root, seq) as u64)
    }
}

#[derive(Default, Clone, PartialEq, Debug)]
struct Models {
    a: Model<u64, u64>,
    s: Model<String, u64>,
    h: Model<u64, u64>,
    v: Vec<u64>,
    n: Model<u64, u64>,
}

#[derive(Clone, Debug)]
enum Op {
    AInsert(u64, u64),
    ARemove(u64),
    AGet(u64),
    ARange(u64, u64),
    ALen,
    AFirst,
    ALast,
    APopFirst,
    APopLast,
    ARetain(u64),
    AClear,
    AUpdate(u64),
    SInsert(String, u64),
    SRemove(String),
    SGet(String),
    SRange(String, String),
    SCount,
    HTransfer(u64, u64, u64),
    HInsert(u64, u64),
    HRemove(u64),
    HGet(u64),
    HLen,
    VPushPair(u64),
    VPopPair,
    VGet(u64),
    VLen,
    VSetPair(u64, u64),
}

/// A string key, long (out of line) for odd `n`.
fn skey(n: u64) -> String {
    if n % 2 == 1 {
        format!("key-{n:0>48}")
    } else {
        format!("k{n:03}")
    }
}

fn gen_op(rng: &mut SmallRng, coll: usize) -> Op {
    let k = |rng: &mut SmallRng| rng.gen_range(0..120u64);
    match coll {
        0 => match rng.gen_range(0..100) {
            0..=34 => Op::AInsert(k(rng), rng.gen()),
            35..=49 => Op::ARemove(k(rng)),
            50..=59 => Op::AGet(k(rng)),
            60..=64 => {
                let lo = k(rng);
                Op::ARange(lo, lo + rng.gen_range(0..30))
            }
            65..=69 => Op::ALen,
            70..=72 => Op::AFirst,
            73..=75 => Op::ALast,
            76..=79 => Op::APopFirst,
            80..=83 => Op::APopLast,
            84..=85 => Op::ARetain(rng.gen_range(2..9)),
            86 => Op::AClear,
            _ => Op::AUpdate(k(rng)),
        },
        1 => match rng.gen_range(0..100) {
            0..=44 => Op::SInsert(skey(rng.gen_range(0..60)), rng.gen()),
            45..=64 => Op::SRemove(skey(rng.gen_range(0..60))),
            65..=84 => Op::SGet(skey(rng.gen_range(0..60))),
            85..=94 => {
                let lo = rng.gen_range(0..60);
                Op::SRange(skey(lo), skey(lo + rng.gen_range(0..20)))
            }
            _ => Op::SCount,
        },
        2 => match rng.gen_range(0..100) {
            0..=44 => Op::HTransfer(
                rng.gen_range(0..ACCOUNTS),
                rng.gen_range(0..ACCOUNTS),
                rng.gen_range(1..300),
            ),
            45..=64 => Op::HInsert(100 + rng.gen_range(0..150), rng.gen()),
            65..=79 => Op::HRemove(100 + rng.gen_range(0..150)),
            80..=94 => Op::HGet(rng.gen_range(0..250)),
            _ => Op::HLen,
        },
        _ => match rng.gen_range(0..100) {
            0..=39 => Op::VPushPair(rng.gen()),
            40..=59 => Op::VPopPair,
            60..=74 => Op::VGet(rng.gen_range(0..40)),
            75..=84 => Op::VLen,
            _ => Op::VSetPair(rng.gen_range(0..20), rng.gen()),
        },
    }
}

fn apply_pool(c: &Colls, tx: &mut rewind::Tx<'_>, op: &Op) -> Result<String, Error> {
    Ok(match op {
        Op::AInsert(k, v) => format!("{:?}", c.a.insert(tx, *k, *v)?),
        Op::ARemove(k) => format!("{:?}", c.a.remove(tx, k)?),
        Op::AGet(k) => format!("{:?}", c.a.get_tx(tx, k)?),
        Op::ARange(lo, hi) => {
            let v: Result<Vec<_>, _> = c.a.range_tx(tx, *lo..*hi)?.collect();
            format!("{:?}", v?)
        }
        Op::ALen => format!("{}", c.a.len_tx(tx)?),
        Op::AFirst => format!("{:?}", c.a.first_key_value_tx(tx)?),
        Op::ALast => format!("{:?}", c.a.last_key_value_tx(tx)?),
        Op::APopFirst => format!("{:?}", c.a.pop_first(tx)?),
        Op::APopLast => format!("{:?}", c.a.pop_last(tx)?),
        Op::ARetain(m) => {
            c.a.retain(tx, |k, _| k % m != 0)?;
            String::new()
        }
        Op::AClear => {
            c.a.clear(tx)?;
            String::new()
        }
        Op::AUpdate(k) => format!(
            "{:?}",
            c.a.update(tx, k, |v| {
                *v = v.wrapping_add(1);
                *v
            })?
        ),
        Op::SInsert(k, v) => format!("{:?}", c.s.insert(tx, k.clone(), *v)?),
        Op::SRemove(k) => format!("{:?}", c.s.remove(tx, k.as_str())?),
        Op::SGet(k) => format!("{:?}", c.s.get_tx(tx, k.as_str())?),
        Op::SRange(lo, hi) => {
            let v: Result<Vec<_>, _> =
                c.s.range_tx(
                    tx,
                    (Bound::Included(lo.as_str()), Bound::Excluded(hi.as_str())),
                )?
                .collect();
            format!("{:?}", v?)
        }
        Op::SCount => format!("{}", c.s.iter_tx(tx)?.count()),
        Op::HTransfer(f, t, amt) => {
            let fb = c.h.get_tx(tx, f)?.expect("account");
            let tb = c.h.get_tx(tx, t)?.expect("account");
            if fb >= *amt && f != t {
                c.h.insert(tx, *f, fb - amt)?;
                c.h.insert(tx, *t, tb + amt)?;
                "moved".into()
            } else {
                "short".into()
            }
        }
        Op::HInsert(k, v) => format!("{:?}", c.h.insert(tx, *k, *v)?),
        Op::HRemove(k) => format!("{:?}", c.h.remove(tx, k)?),
        Op::HGet(k) => format!("{:?}", c.h.get_tx(tx, k)?),
        Op::HLen => format!("{}", c.h.len_tx(tx)?),
        Op::VPushPair(x) => {
            c.v.push(tx, *x)?;
            c.v.push(tx, *x)?;
            String::new()
        }
        Op::VPopPair => {
            let a = c.v.pop(tx)?;
            let b = c.v.pop(tx)?;
            format!("{a:?} {b:?}")
        }
        Op::VGet(i) => format!("{:?}", c.v.get_tx(tx, *i)?),
        Op::VLen => format!("{}", c.v.len_tx(tx)?),
        Op::VSetPair(j, x) => {
            if c.v.len_tx(tx)? >= 2 * j + 2 {
                c.v.set(tx, 2 * j, *x)?;
                c.v.set(tx, 2 * j + 1, *x)?;
                "set".into()
            } else {
                "short".into()
            }
        }
    })
}

fn apply_model(m: &mut Models, op: &Op) -> String {
    match op {
        Op::AInsert(k, v) => format!("{:?}", m.a.insert(*k, *v)),
        Op::ARemove(k) => format!("{:?}", m.a.remove(k)),
        Op::AGet(k) => format!("{:?}", m.a.get(k).copied()),
        Op::ARange(lo, hi) => format!(
            "{:?}",
            m.a.range(*lo..*hi)
                .map(|(k, v)| (*k, *v))
                .collect::<Vec<_>>()
        ),
        Op::ALen => format!("{}", m.a.len()),
        Op::AFirst => format!("{:?}", m.a.first_key_value().map(|(k, v)| (*k, *v))),
        Op::ALast => format!("{:?}", m.a.last_key_value().map(|(k, v)| (*k, *v))),
        Op::APopFirst => format!("{:?}", m.a.pop_first()),
        Op::APopLast => format!("{:?}", m.a.pop_last()),
        Op::ARetain(d) => {
            m.a.retain(|k, _| k % d != 0);
            String::new()
        }
        Op::AClear => {
            m.a.clear();
            String::new()
        }
        Op::AUpdate(k) => format!(
            "{:?}",
            m.a.get_mut(k).map(|v| {
                *v = v.wrapping_add(1);
                *v
            })
        ),
        Op::SInsert(k, v) => format!("{:?}", m.s.insert(k.clone(), *v)),
        Op::SRemove(k) => format!("{:?}", m.s.remove(k)),
        Op::SGet(k) => format!("{:?}", m.s.get(k).copied()),
        Op::SRange(lo, hi) => {
            let v: Vec<(String, u64)> = if lo <= hi {
                m.s.range(lo.clone()..hi.clone())
                    .map(|(k, v)| (k.clone(), *v))
                    .collect()
            } else {
                Vec::new()
            };
            format!("{v:?}")
        }
        Op::SCount => format!("{}", m.s.len()),
        Op::HTransfer(f, t, amt) => {
            let fb = m.h[f];
            let tb = m.h[t];
            if fb >= *amt && f != t {
                m.h.insert(*f, fb - amt);
                m.h.insert(*t, tb + amt);
                "moved".into()
            } else {
                "short".into()
            }
        }
        Op::HInsert(k, v) => format!("{:?}", m.h.insert(*k, *v)),
        Op::HRemove(k) => format!("{:?}", m.h.remove(k)),
        Op::HGet(k) => format!("{:?}", m.h.get(k).copied()),
        Op::HLen => format!("{}", m.h.len()),
        Op::VPushPair(x) => {
            m.v.push(*x);
            m.v.push(*x);
            String::new()
        }
        Op::VPopPair => {
            let a = m.v.pop();
            let b = m.v.pop();
            format!("{a:?} {b:?}")
        }
        Op::VGet(i) => format!("{:?}", m.v.get(*i as usize).copied()),
        Op::VLen => format!("{}", m.v.len()),
        Op::VSetPair(j, x) => {
            let j = *j as usize;
            if m.v.len() >= 2 * j + 2 {
                m.v[2 * j] = *x;
                m.v[2 * j + 1] = *x;
                "set".into()
            } else {
                "short".into()
            }
        }
    }
}

/// One transaction's plan.
struct Plan {
    /// Operations, in order; `sp`: a savepoint is taken before
    /// `ops[sp.0]`, and rolled back to after the last op if `sp.1`.
    ops: Vec<Op>,
    sp: Option<(usize, bool)>,
    /// A nested top action (an insert into `n`) before `ops[i]`.
    nta: Option<usize>,
    abort: bool,
    panic: bool,
}

fn plan(rng: &mut SmallRng, with_sp: bool) -> Plan {
    let mut colls = vec![0usize, 1, 2, 3];
    // A seeded order of a seeded subset: transactions cross.
    for i in (1..colls.len()).rev() {
        colls.swap(i, rng.gen_range(0..=i));
    }
    colls.truncate(rng.gen_range(1..=3));
    let mut ops = Vec::new();
    for &c in &colls {
        for _ in 0..rng.gen_range(1..=3) {
            ops.push(gen_op(rng, c));
        }
    }
    let sp =
        (with_sp && rng.gen_ratio(1, 5)).then(|| (rng.gen_range(0..ops.len()), rng.gen_bool(0.5)));
    let nta = rng.gen_ratio(1, 6).then(|| rng.gen_range(0..=ops.len()));
    Plan {
        ops,
        sp,
        nta,
        abort: rng.gen_ratio(1, 10),
        panic: rng.gen_ratio(1, 60),
    }
}

/// A committed transaction: its sequence number and each kept operation
/// with what it returned.
type Committed = (u64, Vec<(Op, String)>);

#[derive(Default)]
struct ThreadLog {
    committed: Vec<Committed>,
    /// Keys and values of nested top actions that returned Ok (they stay
    /// whatever their transaction did).
    ntas: Vec<(u64, u64)>,
    retries: u64,
}

fn is_retryable(e: &Error) -> bool {
    matches!(
        e,
        Error::Pool(PoolError::Deadlock { .. } | PoolError::LockTimeout { .. })
    )
}

fn writer(pool: &Pool, c: Colls, seed: u64, t: u64, txs: u64, with_sp: bool) -> ThreadLog {
    let mut rng = SmallRng::seed_from_u64(seed ^ (t + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut log = ThreadLog::default();
    for i in 0..txs {
        let p = plan(&mut rng, with_sp);
        let nta_key = t << 32 | i;
        loop {
            let mut kept: Vec<(Op, String)> = Vec::new();
            let mut nta_done = None;
            let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
                pool.transaction(|tx| {
                    let mut sp = None;
                    for (j, op) in p.ops.iter().enumerate() {
                        if p.nta == Some(j) {
                            tx.nested_top_action(|tx| c.n.insert(tx, nta_key, j as u64))?;
                            nta_done = Some((nta_key, j as u64));
                        }
                        if p.sp.is_some_and(|(at, _)| at == j) {
                            sp = Some((tx.savepoint()?, kept.len()));
                        }
                        let res = apply_pool(&c, tx, op)?;
                        kept.push((op.clone(), res));
                        if p.panic && j == p.ops.len() / 2 {
                            panic!("on purpose");
                        }
                    }
                    if p.nta == Some(p.ops.len()) {
                        tx.nested_top_action(|tx| c.n.insert(tx, nta_key, 99))?;
                        nta_done = Some((nta_key, 99));
                    }
                    if let (Some((sp, at)), Some((_, true))) = (sp, p.sp) {
                        tx.rollback_to(sp)?;
                        kept.truncate(at);
                    }
                    if p.abort {
                        return Err(Error::from(PoolError::Aborted));
                    }
                    tx.lock(c.seq())?;
                    let s = tx.read(c.seq())?;
                    tx.write(c.seq(), &(s + 1))?;
                    Ok(s)
                })
            }));
            if let Some(n) = nta_done {
                // Whatever happened after it, the action stays.
                if !log.ntas.contains(&n) {
                    log.ntas.push(n);
                }
            }
            match r {
                Err(_) => {
                    assert!(p.panic, "thread {t} tx {i}: an unplanned panic");
                    break;
                }
                Ok(Ok(s)) => {
                    assert!(!p.panic && !p.abort);
                    log.committed.push((s, kept));
                    break;
                }
                Ok(Err(Error::Pool(PoolError::Aborted))) if p.abort => break,
                Ok(Err(e)) if is_retryable(&e) => log.retries += 1,
                Ok(Err(e)) => panic!("thread {t} tx {i}: {e}"),
            }
        }
    }
    log
}

fn setup(pool: &Pool) -> Colls {
    pool.transaction(|tx| {
        let root: PPtr<Root> = tx.root()?;
        let a = BTreeMap::create_with_fanout(tx, 6)?;
        let s = BTreeMap::create_with_fanout(tx, 6)?;
        let h = HashMap::create(tx)?;
        let v = PVec::create(tx)?;
        let n = BTreeMap::create_with_fanout(tx, 6)?;
        for k in 0..ACCOUNTS {
            h.insert(tx, k, START_BALANCE)?;
        }
        tx.write(
            root,
            &Root {
                seq: 0,
                a: a.as_ptr(),
                s: s.as_ptr(),
                h: h.as_ptr(),
                v: v.as_ptr(),
                n: n.as_ptr(),
            },
        )?;
        Ok::<_, Error>(Colls {
            root,
            a,
            s,
            h,
            v,
            n,
        })
    })
    .unwrap()
}

fn open_colls(pool: &Pool) -> Colls {
    let root = pool.root::<Root>().unwrap().expect("root");
    let r = pool.read(root).unwrap();
    Colls {
        root,
        a: BTreeMap::from_ptr(r.a),
        s: BTreeMap::from_ptr(r.s),
        h: HashMap::from_ptr(r.h),
        v: PVec::from_ptr(r.v),
        n: BTreeMap::from_ptr(r.n),
    }
}

fn contents(pool: &Pool, c: &Colls) -> Models {
    let a = c.a.iter(pool).unwrap().map(|e| e.unwrap()).collect();
    let s = c.s.iter(pool).unwrap().map(|e| e.unwrap()).collect();
    let h = c.h.entries(pool).unwrap().into_iter().collect();
    let v = c.v.to_vec(pool).unwrap();
    let n = c.n.iter(pool).unwrap().map(|e| e.unwrap()).collect();
    c.a.check_invariants(pool).unwrap();
    c.s.check_invariants(pool).unwrap();
    c.h.check_invariants(pool).unwrap();
    c.n.check_invariants(pool).unwrap();
    Models { a, s, h, v, n }
}

/// Opens the pool, again while it is in use: a sibling test's child holds
/// a copy of its descriptor (and so its lock) from its fork until its exec.
fn open_retrying(path: &std::path::Path, layout: &str) -> Result<Pool, PoolError> {
    loop {
        match Pool::open(path, layout, &Default::default()) {
            Err(PoolError::PoolInUse { .. }) => std::thread::sleep(Duration::from_millis(1)),
            r => return r,
        }
    }
}

/// Runs `f`. With `REWIND_HANG_LIMIT_SECS=N` (a watchdog for runs by
/// hand), fails the process if `f` has not returned in N seconds; by
/// default it waits as long as it takes, so that no outcome depends on the
/// machine's speed (a true hang is left to the CI's own time limit).
fn with_watchdog<R>(what: &str, f: impl FnOnce() -> R) -> R {
    let Some(limit) = common::hang_limit() else {
        return f();
    };
    let (done, rx) = mpsc::channel::<()>();
    let what = what.to_string();
    let guard = std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
            eprintln!("HANG: {what} did not finish in {limit:?}");
            std::process::abort();
        }
    });
    let r = f();
    drop(done);
    guard.join().unwrap();
    r
}

/// The readers' checks of one isolated read each: the accounts' sum, the
/// vector's pairs, and (redo policies) an unlocked scan in key order.
fn reader(pool: &Pool, c: Colls, stop: &AtomicBool, redo: bool) -> u64 {
    let mut reads = 0;
    // A read through `&Pool` that met a writer waits for its lock, and
    // a wait past the bound is `LockTimeout`: skipped, not a failure.
    fn ok<T>(r: Result<T, Error>, what: &str) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) if is_retryable(&e) => None,
            Err(e) => panic!("{what}: {e}"),
        }
    }
    while !stop.load(Ordering::Acquire) || reads < 20 {
        if let Some(e) = ok(c.h.entries(pool), "entries") {
            let sum: u64 = e
                .iter()
                .filter(|(k, _)| *k < ACCOUNTS)
                .map(|(_, v)| v)
                .sum();
            assert_eq!(
                sum, TOTAL,
                "a read through &Pool saw a transfer in part: {e:?}"
            );
        }
        if let Some(v) = ok(c.v.to_vec(pool), "to_vec") {
            assert!(
                v.len() % 2 == 0 && v.chunks(2).all(|p| p[0] == p[1]),
                "a torn vector: {v:?}"
            );
        }
        ok(c.a.len(pool), "len");
        ok(c.a.first_key_value(pool), "first_key_value");
        ok(c.s.get(pool, skey(reads % 60).as_str()), "get");
        if redo {
            // Not isolated (docs/collections.md): a node a commit freed
            // meanwhile may end it with an error; what it yields before
            // is in key order.
            let keys: Vec<u64> =
                c.a.iter(pool)
                    .unwrap()
                    .map_while(|e| e.ok().map(|e| e.0))
                    .collect();
            assert!(
                keys.windows(2).all(|w| w[0] < w[1]),
                "scan out of order: {keys:?}"
            );
        }
        // A reader transaction: the accounts' sum under the lock.
        let sum = pool.transaction(|tx| {
            let mut sum = 0;
            for e in c.h.iter_tx(tx)? {
                let (k, v) = e?;
                if k < ACCOUNTS {
                    sum += v;
                }
            }
            Ok::<_, Error>(sum)
        });
        match sum {
            Ok(sum) => assert_eq!(sum, TOTAL),
            Err(e) if is_retryable(&e) => {}
            Err(e) => panic!("reader transaction: {e}"),
        }
        reads += 1;
    }
    reads
}

/// Sets its flag when a writer panics (dropped while unwinding).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Release);
        }
    }
}

fn run_config(name: &str, cfg: &PoolConfig, seed: u64, threads: u64, txs: u64) {
    run_config_with(name, cfg, seed, threads, txs, Duration::MAX);
}

fn run_config_with(
    name: &str,
    cfg: &PoolConfig,
    seed: u64,
    threads: u64,
    txs: u64,
    lock_timeout: Duration,
) {
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let (seed, threads, txs) = (
        env("P_SEED", seed),
        env("P_THREADS", threads),
        env("P_TXS", txs),
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.pool");
    let pool = Pool::create(&path, LAYOUT, 32 << 20, cfg).unwrap();
    pool.set_lock_timeout(lock_timeout);
    let c = setup(&pool);
    let redo = matches!(cfg.policy, Policy::Redo | Policy::RedoAsync);
    let stop = AtomicBool::new(false);
    let (logs, reads) = with_watchdog(name, || {
        std::thread::scope(|s| {
            let readers: Vec<_> = (0..2)
                .map(|_| s.spawn(|| reader(&pool, c, &stop, redo)))
                .collect();
            let writers: Vec<_> = (0..threads)
                .map(|t| {
                    let pool = &pool;
                    let stop = &stop;
                    s.spawn(move || {
                        // A writer that panics stops the readers too, so
                        // the test fails with its message, not hangs.
                        let _stop = StopOnDrop(stop);
                        writer(pool, c, seed, t, txs, true)
                    })
                })
                .collect();
            let logs: Vec<ThreadLog> = writers.into_iter().map(|w| w.join().unwrap()).collect();
            stop.store(true, Ordering::Release);
            let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
            (logs, reads)
        })
    });
    // The serial order: sequence numbers 0..n, each once.
    let mut all: Vec<&Committed> = logs.iter().flat_map(|l| &l.committed).collect();
    all.sort_by_key(|c| c.0);
    for (i, c) in all.iter().enumerate() {
        assert_eq!(c.0, i as u64, "{name}: sequence numbers");
    }
    let mut m = Models::default();
    for k in 0..ACCOUNTS {
        m.h.insert(k, START_BALANCE);
    }
    for (seq, ops) in &all {
        for (op, got) in ops {
            let want = apply_model(&mut m, op);
            assert_eq!(
                &want, got,
                "{name}: transaction {seq}, {op:?}: not a serial order"
            );
        }
    }
    for l in &logs {
        for &(k, v) in &l.ntas {
            m.n.insert(k, v);
        }
    }
    let root = pool.read(c.root).unwrap();
    assert_eq!(root.seq, all.len() as u64, "{name}: committed count");
    assert_eq!(contents(&pool, &c), m, "{name}: contents");
    pool.close().unwrap();
    let pool = open_retrying(&path, LAYOUT).unwrap();
    let c = open_colls(&pool);
    assert_eq!(contents(&pool, &c), m, "{name}: contents after reopen");
    let retries: u64 = logs.iter().map(|l| l.retries).sum();
    println!(
        "{name}: {} committed, {retries} retried (deadlocks), {} nested top actions, {reads} reads",
        all.len(),
        m.n.len()
    );
}

/// Lock waits bounded at a millisecond: many requests time out (typed,
/// rolled back, retried) and the outcome is still a serial order.
#[test]
fn mixed_threads_with_short_lock_waits_are_serializable() {
    for (name, policy) in [("redo/1ms", Policy::Redo), ("force/1ms", Policy::Force)] {
        run_config_with(
            name,
            &PoolConfig::default().policy(policy),
            6,
            6,
            100,
            Duration::from_millis(1),
        );
    }
}

#[test]
fn mixed_threads_on_several_collections_are_serializable_redo() {
    run_config("redo", &PoolConfig::default(), 1, 6, 120);
}

#[test]
fn mixed_threads_on_several_collections_are_serializable_redo_async() {
    run_config(
        "redo-async",
        &PoolConfig::default().policy(Policy::RedoAsync),
        2,
        6,
        120,
    );
}

#[test]
fn mixed_threads_on_several_collections_are_serializable_force() {
    run_config(
        "force",
        &PoolConfig::default().policy(Policy::Force),
        3,
        6,
        120,
    );
}

#[test]
fn mixed_threads_on_several_collections_are_serializable_no_force() {
    run_config(
        "no-force/optimized",
        &PoolConfig::default()
            .policy(Policy::NoForce)
            .log(LogVariant::Optimized),
        4,
        6,
        120,
    );
}

#[test]
fn mixed_threads_on_several_collections_are_serializable_msync() {
    run_config(
        "redo/msync",
        &PoolConfig::default().backend(Backend::Msync),
        5,
        4,
        60,
    );
}

// ---------------------------------------------------------------------
// Kills: a child process of four writer threads on shared collections,
// SIGKILLed once the parent has read a seeded number of acknowledgements.

mod kill {
    use std::collections::BTreeMap as Model;
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::process::ExitStatusExt;
    use std::path::{Path, PathBuf};
    use std::process::{Command, Stdio};
    use std::sync::Mutex;
    use std::time::Duration;

    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    use rewind::{Backend, PPtr, Pod, Policy, Pool, PoolConfig, Zeroable};
    use rewind_collections::{BTreeMap, Error, HashMap, Vec as PVec};

    use super::{is_retryable, with_watchdog};

    const LAYOUT: &str = "conc-kill";
    const THREADS: usize = 4;
    const ENV_POOL: &str = "CONC_KILL_POOL";
    const ENV_SEED: &str = "CONC_KILL_SEED";
    /// The shared counter's key in the tree (every transaction adds one).
    const COUNTER: u64 = u64::MAX;
    /// A child thread stops after this many transactions (far past any
    /// kill point).
    const CHILD_TXS: u64 = 5_000;

    #[derive(Clone, Copy, Pod, Zeroable)]
    #[repr(C)]
    struct Root {
        done: [u64; THREADS],
        a: PPtr<BTreeMap<u64, u64>>,
        h: PPtr<HashMap<u64, u64>>,
        v: PPtr<PVec<u64>>,
    }

    fn done(root: PPtr<Root>, t: usize) -> PPtr<u64> {
        PPtr::from_offset(root.offset() + 8 * t as u64)
    }

    /// Transaction `id` of thread `t`: tree and hash keys of its own
    /// (inserted with `Some`, removed with `None`), whether it pushes to
    /// the shared vector, the order it takes the collections in, and
    /// whether it rolls back on purpose.
    struct Plan {
        tree: Vec<(u64, Option<u64>)>,
        hash: Vec<(u64, Option<u64>)>,
        push: bool,
        hash_first: bool,
        abort: bool,
    }

    fn plan(seed: u64, t: usize, id: u64) -> Plan {
        let mut rng =
            SmallRng::seed_from_u64(seed ^ (t as u64) << 48 ^ id.wrapping_mul(0x9e37_79b9));
        let key = |rng: &mut SmallRng| (t as u64) << 40 | rng.gen_range(0..40u64);
        let ops = |rng: &mut SmallRng| {
            (0..rng.gen_range(0..4))
                .map(|_| {
                    let k = key(rng);
                    (
                        k,
                        rng.gen_bool(0.7).then(|| id << 8 | rng.gen::<u8>() as u64),
                    )
                })
                .collect::<Vec<_>>()
        };
        Plan {
            tree: ops(&mut rng),
            hash: ops(&mut rng),
            push: rng.gen_bool(0.5),
            hash_first: rng.gen_bool(0.5),
            abort: rng.gen_ratio(1, 8),
        }
    }

    #[derive(Debug, PartialEq)]
    struct State {
        tree: Model<u64, u64>,
        hash: Model<u64, u64>,
        pushed: Vec<u64>,
    }

    /// What the committed transactions `0..done[t]` of each thread leave.
    fn model(seed: u64, done: &[u64; THREADS]) -> State {
        let mut s = State {
            tree: Model::new(),
            hash: Model::new(),
            pushed: Vec::new(),
        };
        let total: u64 = (0..THREADS)
            .map(|t| {
                let mut n = 0;
                for id in 0..done[t] {
                    let p = plan(seed, t, id);
                    if p.abort {
                        continue;
                    }
                    n += 1;
                    for (m, ops) in [(&mut s.tree, &p.tree), (&mut s.hash, &p.hash)] {
                        for &(k, v) in ops {
                            match v {
                                Some(v) => m.insert(k, v),
                                None => m.remove(&k),
                            };
                        }
                    }
                    if p.push {
                        s.pushed.push((t as u64) << 32 | id);
                    }
                }
                n
            })
            .sum();
        if total > 0 {
            s.tree.insert(COUNTER, total);
        }
        s.pushed.sort_unstable();
        s
    }

    #[test]
    fn conc_kill_child() {
        let Some(path) = std::env::var_os(ENV_POOL) else {
            return;
        };
        let seed: u64 = std::env::var(ENV_SEED).unwrap().parse().unwrap();
        let pool = open_retrying(Path::new(&path)).unwrap_or_else(|e| panic!("child: open: {e}"));
        pool.set_lock_timeout(Duration::MAX);
        let rp = pool.root::<Root>().unwrap().expect("root");
        let root = pool.read(rp).unwrap();
        let (a, h, v) = (
            BTreeMap::<u64, u64>::from_ptr(root.a),
            HashMap::<u64, u64>::from_ptr(root.h),
            PVec::<u64>::from_ptr(root.v),
        );
        let out = Mutex::new(std::io::stdout());
        writeln!(out.lock().unwrap(), "\nready").unwrap();
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (pool, out) = (&pool, &out);
                s.spawn(move || {
                    let first = root.done[t];
                    for id in first..first + CHILD_TXS {
                        let p = plan(seed, t, id);
                        let r = loop {
                            let r = pool.transaction(|tx| {
                                let tree = |tx: &mut rewind::Tx<'_>| -> Result<(), Error> {
                                    for &(k, v) in &p.tree {
                                        match v {
                                            Some(v) => a.insert(tx, k, v)?,
                                            None => a.remove(tx, &k)?,
                                        };
                                    }
                                    a.update(tx, &COUNTER, |c| *c += 1)?
                                        .map_or_else(|| a.insert(tx, COUNTER, 1).map(drop), Ok)
                                };
                                let hash = |tx: &mut rewind::Tx<'_>| -> Result<(), Error> {
                                    for &(k, v) in &p.hash {
                                        match v {
                                            Some(v) => h.insert(tx, k, v)?,
                                            None => h.remove(tx, &k)?,
                                        };
                                    }
                                    Ok(())
                                };
                                if p.hash_first {
                                    hash(tx)?;
                                    tree(tx)?;
                                } else {
                                    tree(tx)?;
                                    hash(tx)?;
                                }
                                if p.push {
                                    v.push(tx, (t as u64) << 32 | id)?;
                                }
                                tx.write(done(rp, t), &(id + 1))?;
                                if p.abort {
                                    return Err(Error::from(rewind::Error::Aborted));
                                }
                                Ok(())
                            });
                            match r {
                                Err(e) if is_retryable(&e) => continue,
                                r => break r,
                            }
                        };
                        let word = match r {
                            Ok(()) => "c",
                            Err(Error::Pool(rewind::Error::Aborted)) if p.abort => "a",
                            Err(e) => panic!("child: thread {t} transaction {id}: {e}"),
                        };
                        writeln!(out.lock().unwrap(), "{word} {t} {id}").unwrap();
                    }
                });
            }
        });
    }

    /// Runs a child until the parent has read `kill` acknowledgements;
    /// returns, per thread, the last transaction reported ended.
    fn run_child(path: &Path, seed: u64, kill: u64) -> [Option<u64>; THREADS] {
        let exe = std::env::current_exe().expect("current_exe");
        let mut child = Command::new(exe)
            .args([
                "--exact",
                "kill::conc_kill_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ENV_POOL, path)
            .env(ENV_SEED, seed.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn child");
        let mut ended = [None; THREADS];
        let mut acks = 0;
        let mut killed = false;
        for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
            let Ok(line) = line else { break };
            let mut w = line.split_whitespace();
            if !matches!(w.next(), Some("c" | "a")) {
                continue;
            }
            let t: usize = w.next().and_then(|x| x.parse().ok()).expect("thread");
            let id: u64 = w.next().and_then(|x| x.parse().ok()).expect("id");
            assert!(
                ended[t].is_none_or(|e| id == e + 1),
                "thread {t}: {id} after {ended:?}"
            );
            ended[t] = Some(id);
            acks += 1;
            if acks == kill && !killed {
                child.kill().expect("SIGKILL");
                killed = true;
            }
        }
        let status = child.wait().expect("wait");
        assert_eq!(
            status.signal(),
            Some(9),
            "child not killed after {kill} acks: {status}"
        );
        ended
    }

    fn open_retrying(path: &Path) -> Result<Pool, rewind::Error> {
        super::open_retrying(path, LAYOUT)
    }

    fn pool_dir() -> PathBuf {
        let shm = Path::new("/dev/shm");
        if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        }
    }

    fn kills(name: &str, cfg: &PoolConfig, seed: u64, cycles: u64) {
        let dir = tempfile::tempdir_in(pool_dir()).unwrap();
        let path = dir.path().join("k.pool");
        let pool = Pool::create(&path, LAYOUT, 16 << 20, cfg).unwrap();
        pool.transaction(|tx| {
            let rp: PPtr<Root> = tx.root()?;
            let a = BTreeMap::<u64, u64>::create_with_fanout(tx, 6)?;
            let h = HashMap::<u64, u64>::create(tx)?;
            let v = PVec::<u64>::create(tx)?;
            tx.write(
                rp,
                &Root {
                    done: [0; THREADS],
                    a: a.as_ptr(),
                    h: h.as_ptr(),
                    v: v.as_ptr(),
                },
            )?;
            Ok::<_, Error>(())
        })
        .unwrap();
        drop(pool);
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut known = [0u64; THREADS];
        let (mut acked, mut in_flight) = (0, 0);
        for cycle in 0..cycles {
            let kill = rng.gen_range(1..150);
            let ended = run_child(&path, seed, kill);
            let pool = open_retrying(&path)
                .unwrap_or_else(|e| panic!("{name} cycle {cycle}: recovery: {e}"));
            let rp = pool.root::<Root>().unwrap().expect("root");
            let root = pool.read(rp).unwrap();
            for t in 0..THREADS {
                // Every acknowledged commit is in; the one in flight may
                // be, whole; nothing after it.
                let want = ended[t].map_or(known[t], |e| {
                    if plan(seed, t, e).abort {
                        // An abort reported; `done` is that of the last
                        // commit before it.
                        (0..=e)
                            .rev()
                            .find(|&i| !plan(seed, t, i).abort)
                            .map_or(0, |i| i + 1)
                            .max(known[t])
                    } else {
                        e + 1
                    }
                });
                let next = ended[t].map_or(known[t], |e| e + 1);
                let mut allowed = vec![want];
                if !plan(seed, t, next).abort {
                    allowed.push(next + 1);
                }
                assert!(
                    allowed.contains(&root.done[t]),
                    "{name} cycle {cycle} (kill after {kill} acks), thread {t}: done {} not in {allowed:?}",
                    root.done[t]
                );
                acked += want - known[t].min(want);
                in_flight += root.done[t] - want;
                known[t] = root.done[t];
            }
            let (a, h, v) = (
                BTreeMap::<u64, u64>::from_ptr(root.a),
                HashMap::<u64, u64>::from_ptr(root.h),
                PVec::<u64>::from_ptr(root.v),
            );
            a.check_invariants(&pool)
                .unwrap_or_else(|e| panic!("{name} cycle {cycle}: {e}"));
            h.check_invariants(&pool)
                .unwrap_or_else(|e| panic!("{name} cycle {cycle}: {e}"));
            let mut pushed = v.to_vec(&pool).unwrap();
            pushed.sort_unstable();
            let got = State {
                tree: a.iter(&pool).unwrap().collect::<Result<_, _>>().unwrap(),
                hash: h.entries(&pool).unwrap().into_iter().collect(),
                pushed,
            };
            assert_eq!(
                got,
                model(seed, &root.done),
                "{name} cycle {cycle} (kill after {kill} acks)"
            );
            let mut owned = a.blocks(&pool).unwrap();
            owned.extend(h.blocks(&pool).unwrap());
            owned.extend(v.blocks(&pool).unwrap());
            owned.push(rp.offset());
            owned.sort_unstable();
            let allocated: Vec<u64> = rewind::alloc::allocated_blocks(pool.domain(), pool.layout())
                .unwrap()
                .into_iter()
                .map(|(off, _)| off)
                .collect();
            assert_eq!(
                allocated, owned,
                "{name} cycle {cycle}: leaked or lost blocks"
            );
        }
        println!("{name}: {cycles} kills, {acked} acknowledged commits kept, {in_flight} in flight applied whole");
    }

    fn run(name: &str, cfg: PoolConfig, seed: u64) {
        let cycles = std::env::var("P_CYCLES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(8);
        let seed = std::env::var("P_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(seed);
        with_watchdog(name, || kills(name, &cfg, seed, cycles));
    }

    #[test]
    fn four_threads_killed_keep_exactly_the_acknowledged_commits_redo() {
        run("redo", PoolConfig::default(), 21);
    }

    #[test]
    fn four_threads_killed_keep_exactly_the_acknowledged_commits_redo_async() {
        run(
            "redo-async",
            PoolConfig::default().policy(Policy::RedoAsync),
            22,
        );
    }

    #[test]
    fn four_threads_killed_keep_exactly_the_acknowledged_commits_force() {
        run("force", PoolConfig::default().policy(Policy::Force), 23);
    }

    #[test]
    fn four_threads_killed_keep_exactly_the_acknowledged_commits_no_force() {
        run(
            "no-force",
            PoolConfig::default().policy(Policy::NoForce),
            24,
        );
    }

    #[test]
    fn four_threads_killed_keep_exactly_the_acknowledged_commits_msync() {
        run(
            "redo/msync",
            PoolConfig::default().backend(Backend::Msync),
            25,
        );
    }
}
