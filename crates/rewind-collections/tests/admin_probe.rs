//! The collections under administrative calls: writer threads find (or
//! race to create) a B+-tree, a hash map, a list and a vector by named
//! roots, then commit transactions that each take the next sequence
//! number from the hash map and add one entry to all four, some removing
//! the oldest entry, some rolled back by `Err`, some panicking in the
//! closure; beside them one thread calls `sync`, `checkpoint`, `grow` and
//! `backup_to` and checks every copy, and one reads through `&Pool`
//! (`get`, `len`: each collection's committed state, never going back).
//!
//! A committed state here is: the vector holds, at position `s`, the
//! writer and count of the transaction that took sequence number `s`, and
//! each writer's counts are `0..n` in order (a prefix of its
//! transactions); the tree and the hash map hold the same keys, the last
//! sequence numbers, the list holds them in order. A backup holds such a
//! state with, for each writer, between the transactions acknowledged
//! before it and those started after; after a close and a reopen the pool
//! holds exactly the acknowledged ones, at the sequence numbers their
//! writers were told. Counts and seeds only (`REWIND_HANG_LIMIT_SECS`
//! arms a watchdog for runs by hand; `REWIND_PROBE_CASES` sets the
//! transactions per writer).

mod common;

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{inspect, Backend, LogVariant, OpenOptions, PPtr, Policy, Pool, PoolConfig};
use rewind_collections::{BTreeMap, Error, HashMap, List, Vec as PVec};

const LAYOUT: &str = "admin-probe";
const WRITERS: usize = 2;
/// The hash map's key holding the next sequence number.
const NEXT: u64 = u64::MAX;

fn txs() -> u64 {
    std::env::var("REWIND_PROBE_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40)
}

fn tempdir() -> tempfile::TempDir {
    match Path::new("/dev/shm").is_dir() {
        true => tempfile::tempdir_in("/dev/shm").unwrap(),
        false => tempfile::tempdir().unwrap(),
    }
}

/// Tells the test's thread that a thread ended, however it ended.
struct Ended(mpsc::Sender<()>);

impl Drop for Ended {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

/// Waits for `n` threads to end ([`common::recv_watched`]: as long as it
/// takes, or, with `REWIND_HANG_LIMIT_SECS=N`, an abort of the process
/// naming the case after N seconds of silence: hung threads could not be
/// joined).
fn wait_ended(rx: &mpsc::Receiver<()>, n: usize, what: &str) {
    for _ in 0..n {
        if let Err(mpsc::RecvTimeoutError::Timeout) = common::recv_watched(rx) {
            let msg = format!("HANG: {what}: a thread hung (REWIND_HANG_LIMIT_SECS)\n");
            // Past the test harness's capture, which the abort would lose.
            let _ = std::io::Write::write_all(&mut std::io::stderr(), msg.as_bytes());
            std::process::abort();
        }
    }
}

fn retryable(e: &Error) -> bool {
    matches!(
        e,
        Error::Pool(rewind::Error::Deadlock { .. } | rewind::Error::LockTimeout { .. })
    )
}

#[derive(Clone, Copy)]
struct Colls {
    tree: BTreeMap<u64, u64>,
    hash: HashMap<u64, u64>,
    list: List<u64>,
    vec: PVec<u64>,
}

/// The collections, found by their names or created (several threads
/// may race here: each name names one collection).
fn open_colls(pool: &Pool) -> Colls {
    loop {
        let r = pool.transaction(|tx| {
            // The collections' offsets (their handles are not `Typed`).
            let t: PPtr<u64> = tx.root_named("tree")?;
            let h: PPtr<u64> = tx.root_named("hash")?;
            let l: PPtr<u64> = tx.root_named("list")?;
            let v: PPtr<u64> = tx.root_named("vec")?;
            for p in [t, h, l, v] {
                tx.lock(p)?;
            }
            let mut c = [tx.read(t)?, tx.read(h)?];
            let mut d = [tx.read(l)?, tx.read(v)?];
            if c[0] == 0 {
                c[0] = BTreeMap::<u64, u64>::create(tx)?.as_ptr().offset();
                tx.write(t, &c[0])?;
            }
            if c[1] == 0 {
                let m = HashMap::<u64, u64>::create(tx)?;
                m.insert(tx, NEXT, 0)?;
                c[1] = m.as_ptr().offset();
                tx.write(h, &c[1])?;
            }
            if d[0] == 0 {
                d[0] = List::<u64>::create(tx)?.as_ptr().offset();
                tx.write(l, &d[0])?;
            }
            if d[1] == 0 {
                d[1] = PVec::<u64>::create(tx)?.as_ptr().offset();
                tx.write(v, &d[1])?;
            }
            Ok::<_, Error>(Colls {
                tree: BTreeMap::from_ptr(PPtr::from_offset(c[0])),
                hash: HashMap::from_ptr(PPtr::from_offset(c[1])),
                list: List::from_ptr(PPtr::from_offset(d[0])),
                vec: PVec::from_ptr(PPtr::from_offset(d[1])),
            })
        });
        match r {
            Ok(c) => return c,
            Err(e) if retryable(&e) => continue,
            Err(e) => panic!("opening the collections: {e:?}"),
        }
    }
}

/// Checks a committed state; returns each writer's count of commits.
fn check_state(pool: &Pool, what: &str) -> [u64; WRITERS] {
    let report = inspect::check_pool(pool);
    assert!(report.is_ok(), "{what}: check_pool: {:?}", report.problems);
    let Some(tp) = pool.root_named::<u64>("tree").unwrap() else {
        return [0; WRITERS];
    };
    let c = open_colls(pool);
    assert_eq!(pool.read(tp).unwrap(), c.tree.as_ptr().offset());
    c.tree.check_invariants(pool).unwrap();
    c.hash.check_invariants(pool).unwrap();
    c.list.check_invariants(pool).unwrap();
    let all = c.vec.to_vec(pool).unwrap();
    let next = c.hash.get(pool, &NEXT).unwrap().unwrap();
    assert_eq!(next, all.len() as u64, "{what}: next sequence number");
    let mut done = [0; WRITERS];
    for (s, &w) in all.iter().enumerate() {
        let (t, n) = ((w >> 32) as usize, w & 0xffff_ffff);
        assert!(
            t < WRITERS && n == done[t],
            "{what}: vec[{s}] = {w:#x}, {done:?}"
        );
        done[t] += 1;
    }
    let tree: Vec<(u64, u64)> = c.tree.iter(pool).unwrap().map(|e| e.unwrap()).collect();
    let mut hash: Vec<(u64, u64)> = c.hash.entries(pool).unwrap();
    hash.retain(|&(k, _)| k != NEXT);
    hash.sort();
    let list: Vec<u64> = c.list.iter(pool).unwrap().map(|e| e.unwrap()).collect();
    let first = next - tree.len() as u64;
    let want: Vec<(u64, u64)> = (first..next).map(|s| (s, all[s as usize])).collect();
    assert_eq!(tree, want, "{what}: the tree");
    assert_eq!(hash, want, "{what}: the hash map");
    assert_eq!(list, (first..next).collect::<Vec<_>>(), "{what}: the list");
    done
}

struct Counts {
    started: [AtomicU64; WRITERS],
    acked: [AtomicU64; WRITERS],
}

fn snapshot(c: &[AtomicU64; WRITERS]) -> [u64; WRITERS] {
    std::array::from_fn(|t| c[t].load(Ordering::SeqCst))
}

#[derive(Debug)]
enum TestErr {
    Coll(Error),
    Abort,
}

impl From<Error> for TestErr {
    fn from(e: Error) -> TestErr {
        TestErr::Coll(e)
    }
}

impl From<rewind::Error> for TestErr {
    fn from(e: rewind::Error) -> TestErr {
        TestErr::Coll(e.into())
    }
}

/// A writer: `txs()` commits; returns the sequence number of each.
fn writer(pool: &Pool, t: usize, seed: u64, counts: &Counts) -> Vec<u64> {
    let c = open_colls(pool);
    let mut rng = SmallRng::seed_from_u64(seed ^ (t as u64 + 1) << 36);
    let mut seqs = Vec::new();
    while (seqs.len() as u64) < txs() {
        let n = seqs.len() as u64;
        let end = rng.gen_range(0..10);
        let pop = rng.gen_ratio(1, 3);
        loop {
            counts.started[t].fetch_add(1, Ordering::SeqCst);
            let run = |tx: &mut rewind::Tx<'_>| -> Result<u64, TestErr> {
                let s = c.hash.get_tx(tx, &NEXT)?.expect("the next sequence number");
                c.hash.insert(tx, NEXT, s + 1)?;
                let w = (t as u64) << 32 | n;
                c.vec.push(tx, w)?;
                assert_eq!(c.tree.insert(tx, s, w)?, None);
                assert_eq!(c.hash.insert(tx, s, w)?, None);
                c.list.push_back(tx, s)?;
                if pop {
                    if let Some(old) = c.list.pop_front(tx)? {
                        let v = c.tree.remove(tx, &old)?;
                        assert!(v.is_some());
                        assert_eq!(c.hash.remove(tx, &old)?, v);
                    }
                }
                match end {
                    0 => Err(TestErr::Abort),
                    1 => panic!("admin-probe: a planned panic"),
                    _ => Ok(s),
                }
            };
            let r = std::panic::catch_unwind(AssertUnwindSafe(|| pool.transaction(run)));
            match (end, r) {
                (_, Ok(Err(TestErr::Coll(e)))) if retryable(&e) => continue,
                (2.., Ok(Ok(s))) => {
                    counts.acked[t].fetch_add(1, Ordering::SeqCst);
                    seqs.push(s);
                }
                (0, Ok(Err(TestErr::Abort))) | (1, Err(_)) => {}
                (_, Ok(r)) => panic!("writer {t}: {r:?}"),
                (_, Err(p)) => std::panic::resume_unwind(p),
            }
            break;
        }
    }
    seqs
}

/// A reader through `&Pool` (which may be the one to create the
/// collections): each collection's committed state, never going back.
fn reader(pool: &Pool, rounds: u64) {
    let c = open_colls(pool);
    let (mut next, mut len) = (0, 0);
    for _ in 0..rounds {
        let n = c.hash.get(pool, &NEXT).unwrap().unwrap();
        assert!(n >= next, "the next sequence number went back");
        next = n;
        let l = c.vec.len(pool).unwrap();
        assert!(l >= len, "the vector shrank");
        len = l;
        if l > 0 {
            let w = c.vec.get(pool, l - 1).unwrap().unwrap();
            assert!((w >> 32) < WRITERS as u64, "vec[{}] = {w:#x}", l - 1);
        }
        if let Some(s) = next.checked_sub(1) {
            // A key of a commit: present unless removed since.
            if let Some(w) = c.tree.get(pool, &s).unwrap() {
                assert!((w >> 32) < WRITERS as u64);
            }
        }
        let _ = (c.tree.len(pool).unwrap(), c.list.len(pool).unwrap());
        let _ = (pool.counters(), pool.alloc_stats(), pool.log_stats());
        assert!(pool.root_named::<u64>("tree").unwrap().is_some());
    }
}

fn admin(pool: &Pool, dir: &Path, what: &str, rounds: usize, counts: &Counts) {
    for i in 0..rounds {
        pool.sync().unwrap();
        pool.checkpoint().unwrap();
        match pool.grow(256 << 10) {
            Ok(_) | Err(rewind::Error::OutOfMemory { .. }) => {}
            Err(e) => panic!("{what}: grow: {e:?}"),
        }
        let copy = dir.join(format!("copy-{i}.pool"));
        let lo = snapshot(&counts.acked);
        pool.backup_to(&copy).unwrap();
        let hi = snapshot(&counts.started);
        let report = inspect::check(&copy).unwrap();
        assert!(report.is_ok(), "{what}: backup {i}: {:?}", report.problems);
        let c = Pool::open(&copy, LAYOUT, &OpenOptions::default()).unwrap();
        let done = check_state(&c, &format!("{what}: backup {i}"));
        for t in 0..WRITERS {
            assert!(
                lo[t] <= done[t] && done[t] <= hi[t],
                "{what}: backup {i}: writer {t} has {} commits, outside [{}, {}]",
                done[t],
                lo[t],
                hi[t]
            );
        }
        c.close().unwrap();
        std::fs::remove_file(&copy).unwrap();
    }
}

fn run(what: &str, cfg: &PoolConfig, seed: u64) {
    let dir = tempdir();
    let path = dir.path().join("live.pool");
    let cfg = cfg.clone().max_size(8 << 20);
    let pool = Pool::create(&path, LAYOUT, 4 << 20, &cfg).unwrap();
    let counts = Counts {
        started: Default::default(),
        acked: Default::default(),
    };
    let (tx_done, rx_done) = mpsc::channel();
    let seqs = std::thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|t| {
                let (pool, counts, ended) = (&pool, &counts, tx_done.clone());
                s.spawn(move || {
                    let _ended = Ended(ended);
                    writer(pool, t, seed, counts)
                })
            })
            .collect();
        let (p, ended) = (&pool, tx_done.clone());
        s.spawn(move || {
            let _ended = Ended(ended);
            reader(p, 2 * txs());
        });
        let (p, c, ended, d) = (&pool, &counts, tx_done.clone(), dir.path());
        s.spawn(move || {
            let _ended = Ended(ended);
            admin(p, d, what, 2 + txs() as usize / 40, c);
        });
        drop(tx_done);
        wait_ended(&rx_done, WRITERS + 2, what);
        writers
            .into_iter()
            .map(|w| w.join().unwrap())
            .collect::<Vec<_>>()
    });
    let acked = snapshot(&counts.acked);
    match pool.policy() {
        Policy::RedoAsync => drop(pool),
        _ => pool.close().unwrap(),
    }
    let report = inspect::check(&path).unwrap();
    assert!(report.is_ok(), "{what}: after close: {:?}", report.problems);
    let pool = Pool::open(&path, LAYOUT, &OpenOptions::default()).unwrap();
    assert_eq!(check_state(&pool, what), acked, "{what}: the reopened pool");
    let c = open_colls(&pool);
    for (t, seqs) in seqs.iter().enumerate() {
        for (n, &s) in seqs.iter().enumerate() {
            let w = c.vec.get(&pool, s).unwrap();
            assert_eq!(w, Some((t as u64) << 32 | n as u64), "{what}: sequence {s}");
        }
    }
    pool.close().unwrap();
}

/// Quiets the planned panics' messages (others still print).
fn quiet_planned_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let planned = info
                .payload()
                .downcast_ref::<&str>()
                .is_some_and(|s| s.starts_with("admin-probe"));
            if !planned {
                hook(info);
            }
        }));
    });
}

#[test]
fn collections_beside_backups_and_admin_calls_every_config() {
    quiet_planned_panics();
    for (i, cfg) in common::configs().into_iter().enumerate() {
        run(&common::name(&cfg), &cfg, 0xc011 + i as u64);
    }
}

/// Redo-async with its write-back holding hot lines.
#[test]
fn collections_beside_backups_and_admin_calls_lru_write_back() {
    quiet_planned_panics();
    let cfg = PoolConfig::default()
        .policy(Policy::RedoAsync)
        .write_back(rewind::WriteBack::Lru { lines: 64 });
    run("lru", &cfg, 0x1a0);
}

#[test]
fn collections_beside_backups_and_admin_calls_msync() {
    quiet_planned_panics();
    for (v, p) in [
        (LogVariant::Batch, Policy::Redo),
        (LogVariant::Optimized, Policy::NoForce),
    ] {
        let cfg = PoolConfig::default()
            .log(v)
            .policy(p)
            .backend(Backend::Msync);
        run(&format!("msync {v:?}/{p:?}"), &cfg, 0x3517);
    }
}
