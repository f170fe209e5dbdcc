//! Concurrency probes of the engine with processes: four writer threads
//! and a thread calling `checkpoint` and `sync` beside them, in a child
//! SIGKILLed once the parent has read a seeded number of acknowledgements,
//! for every log variant × policy (the multi-threaded kill test,
//! `torture_threads.rs`, runs the default configuration only); and
//! processes racing to open or create one pool; a transaction started
//! inside an isolated read. Counts and seeds only.

use std::io::{BufRead, BufReader, Write};
use std::mem::offset_of;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

mod common;
use common::configs;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{Error, OpenOptions, PPtr, Pod, Pool, PoolConfig, Zeroable};

const LAYOUT: &str = "conc-probe";
const THREADS: usize = 4;
const SLOTS: usize = 16;
const ENV_POOL: &str = "CONC_PROBE_POOL";
const ENV_SEED: &str = "CONC_PROBE_SEED";
/// A child's thread stops after this many transactions.
const CHILD_TXS: u64 = 20_000;

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct Root {
    shared: u64,
    done: [u64; THREADS],
    slots: [[u64; SLOTS]; THREADS],
}

fn word(root: PPtr<Root>, at: usize) -> PPtr<u64> {
    PPtr::from_offset(root.offset() + at as u64)
}

fn shared(root: PPtr<Root>) -> PPtr<u64> {
    word(root, offset_of!(Root, shared))
}

fn done(root: PPtr<Root>, t: usize) -> PPtr<u64> {
    word(root, offset_of!(Root, done) + 8 * t)
}

fn slot(root: PPtr<Root>, t: usize, i: usize) -> PPtr<u64> {
    word(root, offset_of!(Root, slots) + 8 * (t * SLOTS + i))
}

/// Transaction `id` of thread `t`: the slot writes kept, those written
/// after a savepoint and rolled back to it, and whether it rolls back.
struct Plan {
    kept: Vec<(usize, u64)>,
    undone: Vec<(usize, u64)>,
    abort: bool,
}

fn plan(seed: u64, t: usize, id: u64) -> Plan {
    let mut rng = SmallRng::seed_from_u64(seed ^ (t as u64) << 48 ^ id.wrapping_mul(0x9e37_79b9));
    let writes = |n: usize, rng: &mut SmallRng| -> Vec<(usize, u64)> {
        (0..n)
            .map(|_| (rng.gen_range(0..SLOTS), id << 8 | rng.gen::<u8>() as u64))
            .collect()
    };
    let n = rng.gen_range(1..=4);
    let kept = writes(n, &mut rng);
    let undone = if rng.gen_ratio(1, 6) {
        let n = rng.gen_range(1..=3);
        writes(n, &mut rng)
    } else {
        Vec::new()
    };
    Plan {
        kept,
        undone,
        abort: rng.gen_ratio(1, 8),
    }
}

/// Thread `t`'s slots after its transactions `0..n`, and how many of
/// them committed.
fn model(seed: u64, t: usize, n: u64) -> ([u64; SLOTS], u64) {
    let mut s = [0; SLOTS];
    let mut committed = 0;
    for id in 0..n {
        let p = plan(seed, t, id);
        if p.abort {
            continue;
        }
        committed += 1;
        for (i, v) in p.kept {
            s[i] = v;
        }
    }
    (s, committed)
}

#[test]
fn conc_probe_child() {
    let Some(path) = std::env::var_os(ENV_POOL) else {
        return;
    };
    let seed: u64 = std::env::var(ENV_SEED).unwrap().parse().unwrap();
    let pool = open_pool(Path::new(&path)).unwrap_or_else(|e| panic!("child: open: {e}"));
    pool.set_lock_timeout(std::time::Duration::MAX);
    let root = pool.root::<Root>().expect("root").expect("root");
    let out = Mutex::new(std::io::stdout());
    writeln!(out.lock().unwrap(), "\nready").unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        // Checkpoints and syncs beside the commits.
        s.spawn(|| {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let r = if n.is_multiple_of(2) {
                    pool.checkpoint()
                } else {
                    pool.sync()
                };
                r.unwrap_or_else(|e| panic!("child: checkpoint/sync: {e}"));
                n += 1;
                std::thread::yield_now();
            }
        });
        let writers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (pool, out) = (&pool, &out);
                s.spawn(move || {
                    let first = pool.read(done(root, t)).expect("done");
                    for id in first..first + CHILD_TXS {
                        let p = plan(seed, t, id);
                        let r = pool.transaction(|tx| {
                            tx.lock(shared(root))?;
                            let n = tx.read(shared(root))?;
                            tx.write(shared(root), &(n + 1))?;
                            for &(i, v) in &p.kept {
                                tx.write(slot(root, t, i), &v)?;
                            }
                            if !p.undone.is_empty() {
                                let sp = tx.savepoint()?;
                                for &(i, v) in &p.undone {
                                    tx.write(slot(root, t, i), &v)?;
                                }
                                tx.rollback_to(sp)?;
                            }
                            tx.write(done(root, t), &(id + 1))?;
                            if p.abort {
                                return Err(Error::Aborted);
                            }
                            Ok(())
                        });
                        let word = match r {
                            Ok(()) => "c",
                            Err(Error::Aborted) if p.abort => "a",
                            Err(e) => panic!("child: thread {t} transaction {id}: {e}"),
                        };
                        writeln!(out.lock().unwrap(), "{word} {t} {id}").unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
    });
}

/// Opens the pool. No retry while it is in use: a pool closed (or its
/// process ended) is free at once, even while a sibling test's forked
/// child holds a copy of its descriptor.
fn open_pool(path: &Path) -> Result<Pool, Error> {
    Pool::open(path, LAYOUT, &OpenOptions::default())
}

/// Runs a child until `kill` acknowledgements were read, then SIGKILLs
/// it; returns per thread the last transaction it reported ended.
fn run_child(path: &Path, seed: u64, kill: u64) -> [Option<u64>; THREADS] {
    let mut child = common::spawn_test_child(
        "conc_probe_child",
        &[(ENV_POOL, path.into()), (ENV_SEED, seed.to_string().into())],
    );
    let mut ended = [None; THREADS];
    let mut acks = 0;
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
        if acks == kill {
            child.kill().expect("SIGKILL");
        }
    }
    let status = child.wait().expect("wait");
    assert_eq!(
        status.signal(),
        Some(9),
        "child not killed after {kill}: {status}"
    );
    ended
}

fn kills(cfg: &PoolConfig, seed: u64, cycles: u64) {
    let name = format!("{}/{}", cfg.log, cfg.policy);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.pool");
    let pool = Pool::create(&path, LAYOUT, 4 << 20, cfg).unwrap();
    pool.transaction(|tx| tx.root::<Root>().map(|_| ()))
        .unwrap();
    drop(pool);
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut known = [0u64; THREADS];
    for cycle in 0..cycles {
        let kill = rng.gen_range(1..200);
        let ended = run_child(&path, seed, kill);
        let pool =
            open_pool(&path).unwrap_or_else(|e| panic!("{name} cycle {cycle}: recovery: {e}"));
        let root = pool.root::<Root>().unwrap().expect("root");
        let state: Root = pool.read(root).unwrap();
        let mut committed = 0;
        for t in 0..THREADS {
            // The last commit reported, or before it all the thread did.
            let want = match ended[t] {
                None => known[t],
                Some(e) => (known[t]..=e)
                    .rev()
                    .find(|&i| !plan(seed, t, i).abort)
                    .map_or(known[t], |i| i + 1),
            };
            let next = ended[t].map_or(known[t], |e| e + 1);
            let mut allowed = vec![want];
            if !plan(seed, t, next).abort {
                allowed.push(next + 1);
            }
            let got = state.done[t];
            assert!(
                allowed.contains(&got),
                "{name} cycle {cycle} (kill after {kill}), thread {t}: done {got}, allowed {allowed:?}"
            );
            let (slots, n) = model(seed, t, got);
            assert_eq!(
                state.slots[t], slots,
                "{name} cycle {cycle}, thread {t}: slots"
            );
            committed += n;
            known[t] = got;
        }
        assert_eq!(
            state.shared, committed,
            "{name} cycle {cycle}: shared counter"
        );
    }
}

#[test]
fn threads_with_checkpoints_killed_keep_exactly_the_acknowledged_commits() {
    let cycles = std::env::var("P_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let seed: u64 = std::env::var("P_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    for (i, (v, p)) in configs().into_iter().enumerate() {
        kills(
            &PoolConfig::default().log(v).policy(p),
            seed + i as u64,
            cycles,
        );
    }
}

const ENV_RACE: &str = "CONC_PROBE_RACE";
/// Increments each racer makes once it holds the pool.
const RACE_TXS: u64 = 50;

/// A racer: waits for the parent's go (a line on stdin), then opens or
/// creates the pool, retrying while another process holds it
/// (`PoolInUse`, the only error allowed), makes its increments, closes.
#[test]
fn conc_probe_racer() {
    let Some(path) = std::env::var_os(ENV_RACE) else {
        return;
    };
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    let cfg = PoolConfig::default();
    let mut in_use = 0u64;
    let pool = loop {
        match Pool::open_or_create(Path::new(&path), LAYOUT, 4 << 20, &cfg) {
            Ok(p) => break p,
            Err(Error::PoolInUse { .. }) => {
                in_use += 1;
                std::thread::yield_now();
            }
            Err(e) => {
                println!("\nerror {e:?}");
                std::process::exit(3);
            }
        }
    };
    let created = pool.created();
    let counter = pool.transaction(|tx| tx.root::<u64>()).unwrap();
    for _ in 0..RACE_TXS {
        pool.transaction(|tx| {
            tx.lock(counter)?;
            let n = tx.read(counter)?;
            tx.write(counter, &(n + 1))
        })
        .unwrap();
    }
    pool.close().unwrap();
    println!("\nracer created={created} in_use={in_use}");
}

/// Processes racing to open or create one pool: one creates it, the
/// others open it after (never both at once: every increment is kept),
/// and none gets any error but `PoolInUse`.
#[test]
fn processes_racing_to_open_or_create_one_pool_take_turns() {
    const RACERS: usize = 4;
    for round in 0..4 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("race.pool");
        let mut children: Vec<_> = (0..RACERS)
            .map(|_| {
                let exe = std::env::current_exe().unwrap();
                std::process::Command::new(exe)
                    .args([
                        "--exact",
                        "conc_probe_racer",
                        "--nocapture",
                        "--test-threads=1",
                    ])
                    .env(ENV_RACE, &path)
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::inherit())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for c in &mut children {
            writeln!(c.stdin.take().unwrap(), "go").unwrap();
        }
        let mut created = 0;
        for c in children {
            let out = c.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "round {round}: racer failed: {}: {text}",
                out.status
            );
            if text.contains("created=true") {
                created += 1;
            }
        }
        assert_eq!(created, 1, "round {round}: pools created");
        let pool = open_pool(&path).unwrap();
        let counter = pool.root::<u64>().unwrap().expect("root");
        assert_eq!(
            pool.read(counter).unwrap(),
            RACERS as u64 * RACE_TXS,
            "round {round}"
        );
    }
}

/// A transaction started inside `Pool::read_isolated`'s read: its
/// exclusive hold of the key makes the read's first, unlocked run not
/// count, and the second run, under the lock taken shared, starts it again:
/// it waits for a lock its own thread holds, which no cycle of the lock
/// table shows (the reader waits for nothing), for ever under
/// `Duration::MAX` (and `LockTimeout` after the bound otherwise). Such a
/// transaction is nested in the read and refused as `NestedTransaction`.
#[test]
fn a_transaction_inside_an_isolated_read_is_refused_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let pool = Pool::create(
        dir.path().join("ri.pool"),
        LAYOUT,
        4 << 20,
        &PoolConfig::default(),
    )
    .unwrap();
    pool.set_lock_timeout(std::time::Duration::MAX);
    let obj = pool.transaction(|tx| tx.root::<u64>()).unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let pool = &pool;
    std::thread::scope(|s| {
        s.spawn(move || {
            let mut runs = 0;
            let r = pool.read_isolated(obj.offset(), |r| {
                runs += 1;
                let v = r.read(obj)?;
                let inner = pool.transaction(|tx| {
                    tx.lock(obj)?;
                    tx.write(obj, &(v + 10))
                });
                Ok::<_, Error>((v, inner))
            });
            done_tx.send((runs, r)).unwrap();
        });
        // The hang guard (`REWIND_HANG_LIMIT_SECS`), never a measurement:
        // by default it waits as long as it takes.
        let (runs, r) = common::recv_watched(&done_rx).unwrap_or_else(|_| {
            eprintln!("HANG: a transaction inside read_isolated waits for its own thread");
            std::process::abort()
        });
        let (v, inner) = r.unwrap();
        assert_eq!((runs, v), (1, 0));
        assert!(matches!(inner, Err(Error::NestedTransaction)), "{inner:?}");
    });
    assert_eq!(
        pool.read(obj).unwrap(),
        0,
        "the refused transaction changed nothing"
    );
    // Atomic writes are transactions too. The other way round, an
    // isolated read inside a transaction is refused too (it would see the
    // transaction's own stores under some policies): the transaction reads
    // through its `Tx` and commits, and a transaction after the read is
    // unaffected.
    let r = pool.read_isolated(obj.offset(), |_| Ok::<_, Error>(pool.atomic_write(obj, &5)));
    assert!(matches!(r, Ok(Err(Error::NestedTransaction))), "{r:?}");
    pool.transaction(|tx| {
        tx.lock(obj)?;
        let e = pool
            .read_isolated(obj.offset(), |r| r.read(obj))
            .unwrap_err();
        assert!(matches!(e, Error::NestedTransaction), "{e:?}");
        let v = tx.read(obj)?;
        tx.write(obj, &(v + 1))
    })
    .unwrap();
    assert_eq!(pool.read(obj).unwrap(), 1);
}
