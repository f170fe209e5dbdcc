//! Isolation probes of the engine, fourth round: programs of several
//! threads using `tx.lock`, `tx.lock_shared` (and upgrades), short lock
//! timeouts, deadlocks, aborts, panics and isolated reads (nested ones
//! too), checked against what `docs/design.md` (Isolation) promises.
//! `cargo test --release -p rewind --test iso_probe4`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{Error, PPtr, Policy, Pool, PoolConfig};

const SLOTS: usize = 8;

fn retryable(e: &Error) -> bool {
    matches!(e, Error::Deadlock { .. } | Error::LockTimeout { .. })
}

/// Six threads, each transaction taking one to three of eight pairs in a
/// random order and mode (shared, then upgraded; or exclusive at once),
/// some aborted or panicking, under a lock timeout of a few milliseconds:
/// every pair's two words stay equal to the count of committed
/// increments of it, isolated readers (and readers nested in another
/// pair's isolated read) see the words equal, and at the end no lock is
/// left held (a transaction with a zero timeout takes every pair).
fn pairs(policy: Policy, timeout: Duration, seed: u64) {
    const THREADS: u64 = 6;
    const TXS: u64 = 400;
    let dir = tempfile::tempdir().unwrap();
    let cfg = PoolConfig::default().policy(policy);
    let pool = Pool::create(dir.path().join("pairs.pool"), "pairs", 16 << 20, &cfg).unwrap();
    pool.set_lock_timeout(timeout);
    let slots: Vec<PPtr<[u64; 2]>> = pool
        .transaction(|tx| (0..SLOTS).map(|_| tx.alloc::<[u64; 2]>()).collect())
        .unwrap();
    let committed: Vec<AtomicU64> = (0..SLOTS).map(|_| AtomicU64::new(0)).collect();
    let stop = AtomicBool::new(false);
    let refused = AtomicU64::new(0);
    std::thread::scope(|s| {
        let mut writers = Vec::new();
        for t in 0..THREADS {
            let (pool, slots, committed, refused) = (&pool, &slots, &committed, &refused);
            writers.push(s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(seed * 1000 + t);
                for n in 0..TXS {
                    let k = rng.gen_range(1..=3usize);
                    let mut pick: Vec<usize> = Vec::new();
                    while pick.len() < k {
                        let i = rng.gen_range(0..SLOTS);
                        if !pick.contains(&i) {
                            pick.push(i);
                        }
                    }
                    let modes: Vec<u32> = pick.iter().map(|_| rng.gen_range(0..3)).collect();
                    let fail = rng.gen_range(0..12u32);
                    loop {
                        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            pool.transaction(|tx| {
                                for (&i, &m) in pick.iter().zip(&modes) {
                                    let p = slots[i];
                                    match m {
                                        0 => tx.lock(p)?,
                                        _ => tx.lock_shared(p)?,
                                    }
                                    let [a, b] = tx.read(p)?;
                                    assert_eq!(a, b, "pair {i} torn inside a transaction");
                                }
                                // Upgrades (mode 1) and writes, in reverse order.
                                for (&i, &m) in pick.iter().zip(&modes).rev() {
                                    if m == 2 {
                                        continue;
                                    }
                                    let p = slots[i];
                                    tx.lock(p)?;
                                    let [a, _] = tx.read(p)?;
                                    tx.write(p, &[a + 1, a])?;
                                    tx.write(p, &[a + 1, a + 1])?;
                                }
                                match fail {
                                    0 => Err(Error::Aborted),
                                    1 => panic!("thread {t} panics in transaction {n}"),
                                    _ => Ok(()),
                                }
                            })
                        }));
                        match r {
                            Err(_) | Ok(Err(Error::Aborted)) => break,
                            Ok(Ok(())) => {
                                for (&i, &m) in pick.iter().zip(&modes) {
                                    if m != 2 {
                                        committed[i].fetch_add(1, Ordering::SeqCst);
                                    }
                                }
                                break;
                            }
                            Ok(Err(e)) if retryable(&e) => {
                                refused.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(Err(e)) => panic!("thread {t}: {e}"),
                        }
                    }
                }
            }));
        }
        let mut readers = Vec::new();
        for r in 0..2u64 {
            let (pool, slots, stop) = (&pool, &slots, &stop);
            readers.push(s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(seed * 7 + r);
                let mut seen = 0u64;
                while !stop.load(Ordering::Relaxed) || seen == 0 {
                    let i = rng.gen_range(0..SLOTS);
                    let j = rng.gen_range(0..SLOTS);
                    let p = slots[i];
                    let q = slots[j];
                    let res = pool.read_isolated(p.offset(), |rd| {
                        let [a, b] = rd.read(p)?;
                        // A nested isolated read of another pair.
                        let inner = if r == 1 {
                            Some(pool.read_isolated(q.offset(), |rd| rd.read(q))?)
                        } else {
                            None
                        };
                        Ok::<_, Error>(([a, b], inner))
                    });
                    match res {
                        Ok(([a, b], inner)) => {
                            assert_eq!(a, b, "isolated read of pair {i} torn");
                            if let Some([c, d]) = inner {
                                assert_eq!(c, d, "nested isolated read of pair {j} torn");
                            }
                            seen += 1;
                        }
                        Err(e) if retryable(&e) => {}
                        Err(e) => panic!("reader: {e}"),
                    }
                }
                seen
            }));
        }
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
    });
    for (i, &p) in slots.iter().enumerate() {
        let [a, b] = pool.read(p).unwrap();
        assert_eq!((a, b), (committed[i].load(Ordering::SeqCst), a), "pair {i}");
    }
    // No lock left held: every pair taken at once with no wait allowed.
    pool.set_lock_timeout(Duration::ZERO);
    pool.transaction(|tx| {
        for &p in &slots {
            tx.lock(p)?;
        }
        Ok::<_, Error>(())
    })
    .unwrap();
    for &p in &slots {
        pool.read_isolated(p.offset(), |r| r.read(p)).unwrap();
    }
}

/// Documented (design.md, Isolation) and covered by no other test:
/// isolated reads nested in another pair's isolated read, beside
/// transactions that upgrade shared locks and meet deadlocks and lock
/// timeouts of a few milliseconds, see only whole pairs; nothing leaks.
#[test]
fn pairs_with_upgrades_timeouts_and_nested_isolated_reads_stay_whole() {
    pairs(Policy::Redo, Duration::from_millis(2), 1);
    pairs(Policy::Force, Duration::from_millis(2), 2);
}

/// Two threads nest transactions of two pools in opposite orders, each
/// holding its outer pool's lock when it asks for the other's: a cycle
/// through two lock tables, which neither sees. It is not `Deadlock` (the
/// design says so: each pool has its own table) but a wait that ends at
/// the bound, `LockTimeout`, which rolls the outer transaction back too;
/// retried, both commit, and no lock is left held in either pool.
#[test]
fn a_cycle_through_two_pools_ends_at_the_lock_timeout_and_retries_commit() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = PoolConfig::default();
    let a = Pool::create(dir.path().join("a.pool"), "a", 4 << 20, &cfg).unwrap();
    let b = Pool::create(dir.path().join("b.pool"), "b", 4 << 20, &cfg).unwrap();
    for p in [&a, &b] {
        p.set_lock_timeout(Duration::from_millis(100));
    }
    let ka = a.transaction(|tx| tx.root::<u64>()).unwrap();
    let kb = b.transaction(|tx| tx.root::<u64>()).unwrap();
    let bar = std::sync::Barrier::new(2);
    let timeouts = AtomicU64::new(0);
    std::thread::scope(|s| {
        for side in 0..2 {
            let (a, b, bar, timeouts) = (&a, &b, &bar, &timeouts);
            s.spawn(move || {
                let (outer, inner, ko, ki) = match side {
                    0 => (a, b, ka, kb),
                    _ => (b, a, kb, ka),
                };
                for attempt in 0..50 {
                    let r = outer.transaction(|tx| {
                        tx.lock(ko)?;
                        let v = tx.read(ko)?;
                        tx.write(ko, &(v + 1))?;
                        if attempt == 0 {
                            // Both hold their outer lock before either
                            // asks for the other's.
                            bar.wait();
                        }
                        inner.transaction(|tx| {
                            tx.lock(ki)?;
                            let v = tx.read(ki)?;
                            tx.write(ki, &(v + 1))
                        })
                    });
                    match r {
                        Ok(()) => return,
                        Err(Error::LockTimeout { .. }) => {
                            timeouts.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => panic!("side {side}: {e}"),
                    }
                }
                panic!("side {side}: no commit in 50 attempts");
            });
        }
    });
    assert!(timeouts.load(Ordering::SeqCst) >= 1);
    // Each side's outer transaction committed once with its inner one;
    // every failed attempt rolled back whole (an inner commit of a failed
    // attempt cannot exist: the inner lock was never granted).
    assert_eq!(a.read(ka).unwrap(), 2);
    assert_eq!(b.read(kb).unwrap(), 2);
    for (p, k) in [(&a, ka), (&b, kb)] {
        p.set_lock_timeout(Duration::ZERO);
        p.transaction(|tx| tx.lock(k)).unwrap();
    }
}

/// What a thread-local value's destructor did with the pool as its thread
/// ended (`tls_child`).
static AT_EXIT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// A thread-local value that, dropped as its thread ends, commits a last
/// transaction (a buffer flushed on drop), reads isolated and checkpoints.
struct FlushAtExit(Option<(std::sync::Arc<Pool>, PPtr<u64>)>);

impl Drop for FlushAtExit {
    fn drop(&mut self) {
        let Some((pool, p)) = self.0.take() else {
            return;
        };
        let t = pool.transaction(|tx| {
            tx.lock(p)?;
            let v = tx.read(p)?;
            tx.write(p, &(v + 1))
        });
        let r = pool.read_isolated(p.offset(), |r| r.read(p));
        let c = pool.checkpoint();
        let name = |r: Result<(), Error>| match r {
            Ok(()) => "ok".to_string(),
            Err(Error::TxMisuse(_)) => "misuse".to_string(),
            Err(e) => format!("error {e}"),
        };
        AT_EXIT.lock().unwrap().push(format!(
            "transaction {} read {} checkpoint {}",
            name(t),
            name(r.map(|_| ())),
            name(c)
        ));
    }
}

thread_local! {
    static FLUSH: std::cell::RefCell<FlushAtExit> =
        const { std::cell::RefCell::new(FlushAtExit(None)) };
}

/// The child of `a_transaction_in_a_thread_local_destructor_is_an_error_not_an_abort`.
#[test]
fn tls_child() {
    if std::env::var_os("REWIND_ISO_PROBE4_TLS_CHILD").is_none() {
        return;
    }
    for policy in [Policy::Redo, Policy::Force, Policy::RedoAsync] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = PoolConfig::default().policy(policy).lanes(4);
        let pool = std::sync::Arc::new(
            Pool::create(dir.path().join("tls.pool"), "tls", 8 << 20, &cfg).unwrap(),
        );
        let p = pool.transaction(|tx| tx.root::<u64>()).unwrap();
        AT_EXIT.lock().unwrap().clear();
        // The value's destructor registered before the engine's state on
        // this thread: it runs after that state is gone.
        let early = pool.clone();
        std::thread::spawn(move || {
            FLUSH.with(|f| f.borrow_mut().0 = Some((early.clone(), p)));
            early.transaction(|tx| tx.lock(p)).unwrap();
        })
        .join()
        .unwrap();
        // Registered after: it runs while the engine's state is there.
        let late = pool.clone();
        std::thread::spawn(move || {
            late.transaction(|tx| tx.lock(p)).unwrap();
            late.read_isolated(p.offset(), |r| r.read(p)).unwrap();
            FLUSH.with(|f| f.borrow_mut().0 = Some((late.clone(), p)));
        })
        .join()
        .unwrap();
        let seen = AT_EXIT.lock().unwrap().clone();
        println!(
            "{policy:?}: {} | {} | value {}",
            seen[0],
            seen[1],
            pool.read(p).unwrap()
        );
    }
}

/// A program whose thread-local value commits a last transaction in its
/// destructor, as its thread ends: `Pool::transaction` panicked there
/// ('cannot access a Thread Local Storage value during or after
/// destruction', from the thread's nesting record, then from the
/// `thread_local` crate's thread id behind the transaction ids and the
/// gate), and a panic in a thread-local destructor aborts the process.
/// Now a destructor that runs after the engine's per-thread state is gone
/// gets `TxMisuse` (transaction, isolated read, checkpoint) and the
/// process goes on; one that runs before commits. Run in a child process
/// (the abort took the test binary).
#[test]
fn a_transaction_in_a_thread_local_destructor_is_an_error_not_an_abort() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "tls_child", "--nocapture", "--test-threads=1"])
        .env("REWIND_ISO_PROBE4_TLS_CHILD", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed: {stdout}\n{stderr}");
    for policy in ["Redo", "Force", "RedoAsync"] {
        let want = format!(
            "{policy}: transaction misuse read misuse checkpoint misuse \
             | transaction ok read ok checkpoint ok | value 1"
        );
        assert!(stdout.contains(&want), "{want}\nnot in:\n{stdout}");
    }
}

/// `backup_to` while another thread, inside an isolated read (whose
/// `grow` goes past a backup waiting for the gate, as designed: that
/// backup may wait for a transaction that waits for the read's lock),
/// grows the pool all along: the growths also went in while the backup
/// copied the pool's bytes, and a copy could hold a heap size word naming
/// chunks past its end ('meta page corrupt at offset 4152: the heap size
/// word names chunks past the end of the file (a truncated file)'), a
/// backup that does not open: 1 of 40 copies under redo, in each of the
/// runs made before the fix. Such an entry now waits for the copy's end
/// (`pool/gate.rs`, whose unit test shows it deterministically). Ignored:
/// the window is narrow (the growth must land between the copy's size
/// and its first bytes), so it takes 40 backups of a pool grown to 256
/// MiB, about 20 s; `cargo test --release -p rewind --test iso_probe4 --
/// --ignored`.
#[test]
#[ignore]
fn growths_inside_isolated_reads_beside_backups_leave_them_whole() {
    for policy in [Policy::Redo, Policy::NoForce] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = PoolConfig::default().policy(policy).max_size(256 << 20);
        let pool = Pool::create(dir.path().join("g.pool"), "g", 4 << 20, &cfg).unwrap();
        let k = pool.transaction(|tx| tx.root::<u64>()).unwrap();
        pool.transaction(|tx| tx.write(k, &42)).unwrap();
        let stop = AtomicBool::new(false);
        let mut torn = Vec::new();
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    match pool.read_isolated(k.offset(), |_| pool.grow(256 << 10)) {
                        Ok(_) => {}
                        Err(Error::OutOfMemory { .. }) => break,
                        Err(e) => panic!("{e}"),
                    }
                }
            });
            for b in 0..40 {
                let copy = dir.path().join(format!("copy-{b}.pool"));
                pool.backup_to(&copy).unwrap();
                match Pool::open(&copy, "g", &Default::default()) {
                    Ok(c) => {
                        assert_eq!(c.read(k).unwrap(), 42);
                        drop(c);
                        let report = rewind::inspect::check(&copy).unwrap();
                        if !report.is_ok() {
                            torn.push(format!("{b}: {:?}", report.problems));
                        }
                    }
                    Err(e) => torn.push(format!("{b}: {e}")),
                }
                std::fs::remove_file(&copy).unwrap();
            }
            stop.store(true, Ordering::Relaxed);
        });
        assert!(torn.is_empty(), "{policy:?}: torn copies {torn:?}");
    }
}
