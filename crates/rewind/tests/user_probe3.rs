//! A third round of a user's programs probed from outside (after
//! `user_probe.rs` and `user_probe2.rs`): transaction control mixed under
//! every configuration, transactions used after the errors they returned,
//! lock cycles of several threads. Counts and barriers only, never time.

mod common;
use common::{configs, SmallFs};

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Barrier, Mutex};

use rewind::{Backend, Error, LogVariant, PPtr, Policy, Pool, PoolConfig};

const LAYOUT: &str = "probe3";

fn cfg(v: LogVariant, p: Policy) -> PoolConfig {
    PoolConfig::default().log(v).policy(p).backend(Backend::Sim)
}

/// What a process kill now would leave, reopened (recovery run).
fn reopen(pool: &Pool) -> Pool {
    pool.sync().unwrap();
    let img = pool.domain().with_sim(|s| s.image_all_pending()).unwrap();
    Pool::open_image(img, LAYOUT).unwrap()
}

/// Panics whose payload is "planned" print nothing.
fn quiet_planned_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<&str>() != Some(&"planned") {
                prev(info);
            }
        }));
    });
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, rewind::Pod, rewind::Zeroable)]
#[repr(C)]
struct Root {
    a: u64,
    b: u64,
    x: u64,
    n1: u64,
    n2: u64,
    n3: u64,
    z: u64,
    c: u64,
}

fn field(root: PPtr<Root>, i: u64) -> PPtr<u64> {
    root.cast::<u64>().at(i)
}

/// One program mixing savepoints, partial rollbacks, nested top actions
/// (one that fails, one inside another), allocations and frees, and an
/// error return, under every log and policy: the pool holds exactly what
/// committed, in memory and reopened, and its heap figures are the same
/// before and after the reopen.
#[test]
fn a_mixed_program_under_every_config_reopens_to_what_committed() {
    quiet_planned_panics();
    for (v, p) in configs() {
        let who = format!("{v:?}/{p:?}");
        let pool = Pool::create_sim(LAYOUT, 4 << 20, &cfg(v, p)).unwrap();
        let root = pool.transaction(|tx| tx.root::<Root>()).unwrap();
        let base = pool.alloc_stats().bytes_used;
        // A: commits X and N1; Y is rolled back by the savepoint.
        pool.transaction(|tx| {
            let x = tx.alloc::<[u64; 16]>()?;
            tx.write(x, &[1; 16])?;
            let sp = tx.savepoint()?;
            let y = tx.alloc::<[u64; 4]>()?;
            tx.write(y, &[2; 4])?;
            tx.write(field(root, 0), &99)?;
            tx.nested_top_action(|tx| {
                let n1 = tx.alloc::<[u64; 8]>()?;
                tx.write(n1, &[3; 8])?;
                tx.write(field(root, 3), &n1.offset())
            })?;
            tx.rollback_to(sp)?;
            assert_eq!(tx.read(field(root, 0))?, 0, "{who}: rolled back");
            assert_ne!(tx.read(field(root, 3))?, 0, "{who}: action kept");
            tx.write(field(root, 2), &x.offset())?;
            tx.write(field(root, 0), &1)
        })
        .unwrap_or_else(|e| panic!("{who}: A {e:?}"));
        let r = pool.read(root).unwrap();
        assert_eq!((r.a, r.b), (1, 0), "{who}");
        let x = PPtr::<[u64; 16]>::from_offset(r.x);
        let n1 = PPtr::<[u64; 8]>::from_offset(r.n1);
        assert_eq!(pool.read(x).unwrap(), [1; 16], "{who}");
        assert_eq!(pool.read(n1).unwrap(), [3; 8], "{who}");
        let after_a = pool.alloc_stats().bytes_used;
        assert_eq!(
            after_a - base,
            128 + 64,
            "{who}: X and N1 only (their blocks)"
        );

        // B: an error return after an action inside an action, a failed
        // action, a free of X and an allocation of Z: only the actions stay.
        let e = pool.transaction(|tx| {
            tx.write(field(root, 0), &5)?;
            let sp = tx.savepoint()?;
            tx.nested_top_action(|tx| {
                let n2 = tx.alloc::<[u64; 2]>()?;
                tx.write(n2, &[4; 2])?;
                tx.write(field(root, 4), &n2.offset())?;
                // An action inside the action, then the outer action fails:
                // the inner one's work is the outer one's to undo or keep.
                tx.nested_top_action(|tx| {
                    let n3 = tx.alloc::<u64>()?;
                    tx.write(n3, &6)?;
                    tx.write(field(root, 5), &n3.offset())
                })
            })?;
            tx.free(x)?;
            let z = tx.alloc::<u64>()?;
            tx.write(z, &7)?;
            tx.write(field(root, 6), &z.offset())?;
            let failed = tx.nested_top_action(|tx| {
                tx.write(field(root, 1), &8)?;
                Err::<(), _>(Error::Aborted)
            });
            assert!(matches!(failed, Err(Error::Aborted)), "{who}: {failed:?}");
            assert_eq!(tx.read(field(root, 1))?, 0, "{who}: failed action undone");
            tx.rollback_to(sp)?;
            assert_eq!(tx.read(field(root, 6))?, 0, "{who}: Z rolled back");
            tx.free(x)?;
            Err::<(), _>(Error::Aborted)
        });
        assert!(matches!(e, Err(Error::Aborted)), "{who}: {e:?}");
        let r = pool.read(root).unwrap();
        assert_eq!((r.a, r.b, r.z), (1, 0, 0), "{who}: {r:?}");
        assert_eq!(r.x, x.offset(), "{who}");
        assert_eq!(pool.read(x).unwrap(), [1; 16], "{who}: X kept");
        assert_ne!(r.n2, 0, "{who}: the action stays");
        assert_eq!(
            pool.read(PPtr::<[u64; 2]>::from_offset(r.n2)).unwrap(),
            [4; 2],
            "{who}"
        );
        assert_ne!(r.n3, 0, "{who}: the inner action stays");
        assert_eq!(pool.read(PPtr::<u64>::from_offset(r.n3)).unwrap(), 6);
        let after_b = pool.alloc_stats().bytes_used;
        assert_eq!(
            after_b - after_a,
            2 * 64,
            "{who}: N2 and N3 only (64-byte blocks)"
        );

        // C: a panic after a lock, an action and a free.
        let c = catch_unwind(AssertUnwindSafe(|| {
            pool.transaction(|tx| {
                tx.lock(root)?;
                tx.nested_top_action(|tx| tx.write(field(root, 7), &11))?;
                tx.free(n1)?;
                tx.write(field(root, 0), &12)?;
                if tx.read(field(root, 0))? == 12 {
                    panic!("planned");
                }
                Ok::<_, Error>(())
            })
        }));
        assert!(c.is_err(), "{who}: the panic goes on");
        let r = pool.read(root).unwrap();
        assert_eq!((r.a, r.c), (1, 11), "{who}: {r:?}");
        assert_eq!(pool.read(n1).unwrap(), [3; 8], "{who}: N1 kept");
        // The lock was released: another transaction takes it.
        pool.transaction(|tx| {
            tx.lock(root)?;
            tx.write(field(root, 1), &13)
        })
        .unwrap_or_else(|e| panic!("{who}: {e:?}"));
        let stats = pool.alloc_stats();
        assert_eq!(stats.bytes_used, after_b, "{who}");
        let again = reopen(&pool);
        assert_eq!(again.read(root).unwrap(), pool.read(root).unwrap(), "{who}");
        assert_eq!(again.alloc_stats(), stats, "{who}: heap after reopen");
        assert_eq!(again.read(x).unwrap(), [1; 16], "{who}");
        // Everything allocated can be freed once, and the heap is back.
        again
            .transaction(|tx| {
                let r = tx.read(root)?;
                for off in [r.x, r.n1, r.n2, r.n3] {
                    tx.free(PPtr::<u8>::from_offset(off))?;
                }
                Ok::<_, Error>(())
            })
            .unwrap_or_else(|e| panic!("{who}: {e:?}"));
        assert_eq!(again.alloc_stats().bytes_used, base, "{who}");
        let third = reopen(&again);
        assert_eq!(third.alloc_stats().bytes_used, base, "{who}");
    }
}

/// A transaction whose closure swallows the `Deadlock` error its lock
/// returned and goes on to write and return `Ok` still rolls back: the
/// error dooms it, its later calls are refused, `transaction` returns the
/// deadlock, and none of its writes is seen. Three threads in a cycle.
#[test]
fn a_swallowed_deadlock_still_rolls_back_and_a_cycle_of_three_resolves() {
    for (v, p) in configs() {
        let who = format!("{v:?}/{p:?}");
        let pool = Pool::create_sim(LAYOUT, 4 << 20, &cfg(v, p)).unwrap();
        let objs: [PPtr<u64>; 3] = pool
            .transaction(|tx| Ok::<_, Error>([tx.alloc()?, tx.alloc()?, tx.alloc()?]))
            .unwrap();
        let marks = pool.transaction(|tx| tx.alloc::<[u64; 3]>()).unwrap();
        let holding = Barrier::new(3);
        let later: Mutex<Vec<String>> = Mutex::new(Vec::new());
        let results: Vec<Result<(), Error>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3u64)
                .map(|t| {
                    let (pool, holding, later, who) = (&pool, &holding, &later, &who);
                    s.spawn(move || {
                        let mut first = true;
                        pool.transaction(|tx| {
                            tx.lock(objs[t as usize])?;
                            tx.write(objs[t as usize], &(t + 1))?;
                            if std::mem::take(&mut first) {
                                holding.wait();
                            }
                            match tx.lock(objs[(t as usize + 1) % 3]) {
                                Ok(()) => {}
                                Err(Error::Deadlock { .. }) => {
                                    // Swallowed: the program goes on.
                                    let w = tx.write(marks.cast::<u64>().at(t), &1);
                                    later.lock().unwrap().push(format!("{w:?}"));
                                    return Ok(());
                                }
                                Err(e) => panic!("{who}: {e:?}"),
                            }
                            tx.write(objs[(t as usize + 1) % 3], &(t + 10))?;
                            Ok(())
                        })
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let refused = results
            .iter()
            .filter(|r| matches!(r, Err(Error::Deadlock { .. })))
            .count();
        assert!(
            results
                .iter()
                .all(|r| r.is_ok() || matches!(r, Err(Error::Deadlock { .. }))),
            "{who}: {results:?}"
        );
        assert!(
            refused >= 1,
            "{who}: a cycle of three needs a victim: {results:?}"
        );
        // Every write a doomed transaction tried was refused.
        for w in later.lock().unwrap().iter() {
            assert!(
                w.starts_with("Err"),
                "{who}: a doomed transaction wrote: {w}"
            );
        }
        assert_eq!(
            pool.read(marks).unwrap(),
            [0; 3],
            "{who}: doomed writes seen"
        );
        // Each committed transaction's two writes are there; each refused
        // one's are not.
        let vals: Vec<u64> = objs.iter().map(|&o| pool.read(o).unwrap()).collect();
        for (t, r) in results.iter().enumerate() {
            let next = (t + 1) % 3;
            if r.is_ok() {
                assert_eq!(vals[next], t as u64 + 10, "{who}: {vals:?} {results:?}");
            } else {
                let prev = (t + 2) % 3;
                if results[prev].is_err() {
                    assert_eq!(vals[t], 0, "{who}: {vals:?} {results:?}");
                }
            }
        }
        // No lock is left held: one transaction takes all three.
        pool.transaction(|tx| {
            for o in objs {
                tx.lock(o)?;
                tx.write(o, &100)?;
            }
            Ok::<_, Error>(())
        })
        .unwrap_or_else(|e| panic!("{who}: {e:?}"));
        let again = reopen(&pool);
        for o in objs {
            assert_eq!(again.read(o).unwrap(), 100, "{who}");
        }
        assert_eq!(again.alloc_stats(), pool.alloc_stats(), "{who}");
    }
}

/// A transaction doomed by a full log, used on: every later call
/// (savepoint, rollback to an earlier savepoint, nested top action,
/// allocation, free, lock, read, write) is an error or harmless, never a
/// panic; the transaction returns the log's error; the pool goes on and
/// closes cleanly, and its file reopens to what committed.
#[test]
fn a_transaction_used_after_its_log_filled_gets_errors_and_the_pool_closes() {
    let dir = tempfile::tempdir().unwrap();
    for (v, p) in configs() {
        let who = format!("{v:?}/{p:?}");
        let path = dir.path().join(format!("{v:?}-{p:?}.pool"));
        let c = PoolConfig::default()
            .log(v)
            .policy(p)
            .bucket_cells(16)
            .log_size(4096);
        let pool = Pool::create(&path, LAYOUT, 2 << 20, &c).unwrap();
        let root = pool.transaction(|tx| tx.root::<Root>()).unwrap();
        let kept = pool.transaction(|tx| tx.alloc::<u64>()).unwrap();
        pool.transaction(|tx| tx.write(field(root, 0), &1)).unwrap();
        let base = pool.alloc_stats();
        let mut after = Vec::new();
        let r = pool.transaction(|tx| {
            let sp = tx.savepoint()?;
            tx.write(field(root, 0), &2)?;
            let arr = tx.alloc_array::<u64>(16384)?;
            let _sp2 = tx.savepoint()?;
            let mut full = None;
            'fill: for round in 1..1000u64 {
                for i in 0..16384 {
                    if let Err(e) = tx.write(arr.at(i), &(round + i)) {
                        full = Some(e);
                        break 'fill;
                    }
                }
            }
            let full = full.expect("the log never filled");
            after.push(format!("full: {full:?}"));
            after.push(format!("savepoint: {:?}", tx.savepoint().map(|_| ())));
            after.push(format!("rollback_to: {:?}", tx.rollback_to(sp)));
            after.push(format!(
                "nta: {:?}",
                tx.nested_top_action(|tx| tx.write(field(root, 1), &3))
            ));
            after.push(format!("alloc: {:?}", tx.alloc::<u64>().map(|_| ())));
            after.push(format!("free: {:?}", tx.free(kept)));
            after.push(format!("lock: {:?}", tx.lock(root)));
            after.push(format!("write: {:?}", tx.write(field(root, 1), &4)));
            after.push(format!("read: {:?}", tx.read(field(root, 0))));
            Ok::<_, Error>(())
        });
        let e = r.expect_err(&who);
        assert!(
            matches!(e, Error::LogFull { .. } | Error::OutOfMemory { .. }),
            "{who}: {e:?}"
        );
        for line in &after[1..after.len() - 1] {
            assert!(
                line.contains("Err("),
                "{who}: a doomed transaction did {line}"
            );
        }
        let r = pool.read(root).unwrap();
        assert_eq!((r.a, r.b), (1, 0), "{who}: {r:?} {after:?}");
        assert_eq!(pool.alloc_stats().bytes_used, base.bytes_used, "{who}");
        pool.transaction(|tx| tx.write(field(root, 0), &20))
            .unwrap_or_else(|e| panic!("{who}: {e:?}"));
        pool.transaction(|tx| tx.free(kept))
            .unwrap_or_else(|e| panic!("{who}: {e:?}"));
        pool.close()
            .unwrap_or_else(|e| panic!("{who}: close {e:?}"));
        let again = Pool::open(&path, LAYOUT, &Default::default()).unwrap();
        let r = again.read(root).unwrap();
        assert_eq!((r.a, r.b), (20, 0), "{who}");
        again.close().unwrap();
    }
}

/// After a transaction that grew the log into the heap fails for room,
/// the heap it took is the program's again: an allocation that fit
/// before the failure fits after it (and after a reopen). Under no-force
/// the rolled-back transaction's records held the log's heap chunks until
/// a checkpoint, which only a commit (or a full log) started: the next
/// allocation of 1 MiB in a 2 MiB pool was `OutOfMemory` with five of the
/// heap's seven chunks the log's, though a checkpoint would have freed
/// them.
#[test]
fn the_heap_a_failed_giant_transaction_lent_the_log_comes_back() {
    for (v, p) in configs() {
        let who = format!("{v:?}/{p:?}");
        let c = cfg(v, p).bucket_cells(16).log_size(4096);
        let pool = Pool::create_sim(LAYOUT, 2 << 20, &c).unwrap();
        let root = pool.transaction(|tx| tx.root::<u64>()).unwrap();
        let free0 = pool.alloc_stats();
        // Fits before.
        let big = pool.transaction(|tx| tx.alloc_bytes(1 << 20)).unwrap();
        pool.transaction(|tx| tx.free(PPtr::<u8>::from_offset(big)))
            .unwrap();
        let r = pool.transaction(|tx| {
            let arr = tx.alloc_array::<u64>(16384)?;
            let _sp = tx.savepoint()?;
            for round in 1..1000u64 {
                for i in 0..16384 {
                    tx.write(arr.at(i), &(round + i))?;
                }
            }
            tx.write(root, &1)
        });
        assert!(
            matches!(r, Err(Error::LogFull { .. } | Error::OutOfMemory { .. })),
            "{who}: {r:?}"
        );
        let free1 = pool.alloc_stats();
        let again = pool.transaction(|tx| tx.alloc_bytes(1 << 20));
        assert!(
            again.is_ok(),
            "{who}: {again:?}\nbefore {} free chunks, after {}",
            free0.free_chunks,
            free1.free_chunks
        );
        pool.transaction(|tx| tx.free(PPtr::<u8>::from_offset(again.unwrap())))
            .unwrap();
        let re = reopen(&pool);
        re.transaction(|tx| tx.alloc_bytes(1 << 20))
            .unwrap_or_else(|e| panic!("{who}: after reopen {e:?}"));
    }
}

// ---------------------------------------------------------------------
// Threads that allocate, free and run nested top actions, SIGKILLed.

const KT: usize = 3;
const KNTA: usize = 24;
const ENV_KPOOL: &str = "USER_PROBE3_KILL_POOL";
const ENV_KSEED: &str = "USER_PROBE3_KILL_SEED";
const ENV_KSCRATCH: &str = "USER_PROBE3_KILL_SCRATCH";

#[derive(Clone, Copy, rewind::Pod, rewind::Zeroable)]
#[repr(C)]
struct KRoot {
    shared: u64,
    done: [u64; KT],
    cur: [u64; KT],
    nta_n: [u64; KT],
    nta: [[u64; KNTA]; KT],
}

fn kword(root: PPtr<KRoot>, at: usize) -> PPtr<u64> {
    PPtr::from_offset(root.offset() + at as u64)
}

/// Transaction `id` of thread `t`: (rolls a savepoint back, runs a
/// nested top action, aborts).
fn kplan(seed: u64, t: usize, id: u64) -> (bool, bool, bool) {
    let mut x = seed ^ ((t as u64) << 40) ^ id.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 31;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 29;
    (
        x.is_multiple_of(5),
        (x >> 8).is_multiple_of(7),
        (x >> 16).is_multiple_of(6),
    )
}

fn nta_value(t: usize, k: u64) -> u64 {
    (t as u64) << 32 | k
}

/// The child: `KT` threads, each replacing its own block (allocated
/// new, the old one freed) under a shared counter's lock, some with a
/// savepoint rolled back over an allocation and a free, some with a
/// nested top action that allocates a block and records it, some
/// rolling back; each reports "c t id" or "a t id" once its transaction
/// ended.
#[test]
fn user_probe3_kill_child() {
    use std::io::Write;
    let Some(path) = std::env::var_os(ENV_KPOOL) else {
        return;
    };
    let seed: u64 = std::env::var(ENV_KSEED).unwrap().parse().unwrap();
    // Up to this many bytes more, allocated, written and freed by each
    // transaction (0: none): pressure on a small pool's heap and log.
    let scratch: u64 = std::env::var(ENV_KSCRATCH).map_or(0, |s| s.parse().unwrap());
    let pool = Pool::open(&path, LAYOUT, &Default::default()).unwrap();
    pool.set_lock_timeout(std::time::Duration::MAX);
    let root = pool.root::<KRoot>().unwrap().unwrap();
    let out = Mutex::new(std::io::stdout());
    writeln!(out.lock().unwrap(), "\nready").unwrap();
    std::thread::scope(|s| {
        for t in 0..KT {
            let (pool, out) = (&pool, &out);
            s.spawn(move || {
                let first = pool.read(root).unwrap().done[t];
                for id in first..first + 100_000 {
                    let abort = kplan(seed, t, id).2;
                    let r = ktx(pool, root, (t, id, seed), scratch, 0);
                    let w = match r {
                        Ok(()) => "c",
                        Err(Error::Aborted) if abort => "a",
                        Err(Error::OutOfMemory { .. } | Error::LogFull { .. }) if scratch > 0 => {
                            "a"
                        }
                        Err(e) => panic!("child thread {t} tx {id}: {e}"),
                    };
                    writeln!(out.lock().unwrap(), "{w} {t} {id}").unwrap();
                }
            });
        }
    });
}

/// Transaction `id` of thread `t` of the kill test (see
/// [`user_probe3_kill_child`]); `panic_at` 1, 2 or 3 panics after the
/// shared lock, inside the nested top action (when it allocates) or at the
/// end.
fn ktx(
    pool: &Pool,
    root: PPtr<KRoot>,
    (t, id, seed): (usize, u64, u64),
    scratch: u64,
    panic_at: u64,
) -> Result<(), Error> {
    let (sp, nta, abort) = kplan(seed, t, id);
    pool.transaction(|tx| {
        let done = kword(root, std::mem::offset_of!(KRoot, done) + 8 * t);
        let cur = kword(root, std::mem::offset_of!(KRoot, cur) + 8 * t);
        let shared = kword(root, 0);
        tx.lock(shared)?;
        let n = tx.read(shared)?;
        tx.write(shared, &(n + 1))?;
        if panic_at == 1 {
            panic!("planned");
        }
        let old = PPtr::<[u64; 8]>::from_offset(tx.read(cur)?);
        let new = tx.alloc::<[u64; 8]>()?;
        tx.write(new, &[id + 1; 8])?;
        if scratch > 0 {
            let n = 1 + id.wrapping_mul(0x9e37_79b9_7f4a_7c15) % scratch;
            let b = tx.alloc_bytes(n)?;
            tx.write_bytes(b, &vec![id as u8; n.min(4096) as usize])?;
            tx.free(PPtr::<u8>::from_offset(b))?;
        }
        if sp {
            let s = tx.savepoint()?;
            let extra = tx.alloc::<[u64; 8]>()?;
            tx.write(extra, &[7; 8])?;
            tx.free(old)?;
            tx.write(cur, &extra.offset())?;
            tx.rollback_to(s)?;
        }
        if nta {
            tx.nested_top_action(|tx| {
                let nn = kword(root, std::mem::offset_of!(KRoot, nta_n) + 8 * t);
                let k = tx.read(nn)?;
                if k < KNTA as u64 {
                    let b = tx.alloc::<[u64; 16]>()?;
                    tx.write(b, &[nta_value(t, k); 16])?;
                    let slot = std::mem::offset_of!(KRoot, nta) + 8 * (t * KNTA + k as usize);
                    tx.write(kword(root, slot), &b.offset())?;
                    tx.write(nn, &(k + 1))?;
                    if panic_at == 2 {
                        panic!("planned");
                    }
                }
                Ok::<_, Error>(())
            })?;
        }
        tx.free(old)?;
        tx.write(cur, &new.offset())?;
        tx.write(done, &(id + 1))?;
        if panic_at == 3 {
            panic!("planned");
        }
        if abort {
            return Err(Error::Aborted);
        }
        Ok(())
    })
}

/// What the parent knows of each thread of the kill test: the `done`
/// word the child started from, and how many transactions committed
/// over all the children so far.
#[derive(Clone, Copy, Default)]
struct Known {
    done: [u64; KT],
    commits: u64,
}

/// Checks a recovered pool of the kill test against the child's
/// acknowledgements (`acked`: per thread, each transaction it reported
/// ended, in order, and whether it committed): each thread's `done` word
/// is one past its last acknowledged commit, or past the transaction in
/// flight; the shared counter counts exactly those commits; each block
/// holds its transaction's values, and the heap's allocated bytes are the
/// reachable blocks. Returns what is known now.
fn kverify(who: &str, pool: &Pool, known: Known, acked: &[Vec<(u64, bool)>], base: u64) -> Known {
    let root = pool.root::<KRoot>().unwrap().unwrap();
    let st = pool.read(root).unwrap();
    let mut commits = known.commits;
    let mut live = base;
    for (t, acked) in acked.iter().enumerate() {
        let start = known.done[t];
        let want = acked
            .iter()
            .rev()
            .find(|&&(_, c)| c)
            .map_or(start, |&(id, _)| id + 1);
        let next = acked.last().map_or(start, |&(id, _)| id + 1);
        let got = st.done[t];
        assert!(
            got == want || got == next + 1,
            "{who} thread {t}: done {got}, acknowledged commits up to {want}, in flight {next}"
        );
        commits += acked.iter().filter(|&&(_, c)| c).count() as u64;
        if got != want {
            commits += 1; // the one in flight committed
        }
        // The thread's block holds its last commit's value.
        let cur = PPtr::<[u64; 8]>::from_offset(st.cur[t]);
        assert_eq!(pool.read(cur).unwrap(), [got; 8], "{who} thread {t}: block");
        live += 64;
        let n = st.nta_n[t];
        assert!(n <= KNTA as u64, "{who}");
        for k in 0..n {
            let b = PPtr::<[u64; 16]>::from_offset(st.nta[t][k as usize]);
            assert_eq!(
                pool.read(b).unwrap(),
                [nta_value(t, k); 16],
                "{who} thread {t}: action block {k}"
            );
            live += 128;
        }
        for k in n as usize..KNTA {
            assert_eq!(
                st.nta[t][k], 0,
                "{who} thread {t}: action slot {k} past the count"
            );
        }
    }
    assert_eq!(st.shared, commits, "{who}: shared counter");
    assert_eq!(
        pool.alloc_stats().bytes_used,
        live,
        "{who}: allocated bytes are the reachable blocks (a leak or a lost block)"
    );
    Known {
        done: st.done,
        commits,
    }
}

fn run_kill_child(
    path: &std::path::Path,
    seed: u64,
    kill: u64,
    scratch: u64,
) -> Vec<Vec<(u64, bool)>> {
    use std::io::BufRead;
    use std::os::unix::process::ExitStatusExt;
    let mut child = common::spawn_test_child(
        "user_probe3_kill_child",
        &[
            (ENV_KPOOL, path.into()),
            (ENV_KSEED, seed.to_string().into()),
            (ENV_KSCRATCH, scratch.to_string().into()),
        ],
    );
    let mut acked = vec![Vec::new(); KT];
    let mut acks = 0;
    for line in std::io::BufReader::new(child.stdout.take().unwrap()).lines() {
        let Ok(line) = line else { break };
        let mut w = line.split_whitespace();
        let committed = match w.next() {
            Some("c") => true,
            Some("a") => false,
            _ => continue,
        };
        let t: usize = w.next().unwrap().parse().unwrap();
        let id: u64 = w.next().unwrap().parse().unwrap();
        acked[t].push((id, committed));
        acks += 1;
        if acks == kill {
            child.kill().unwrap();
        }
    }
    let status = child.wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(9),
        "child ended before its kill: {status}"
    );
    acked
}

/// A pool of the kill test: the root and each thread's first block.
/// Returns the allocated bytes besides the threads' blocks.
fn kpool(path: &std::path::Path, size: u64, c: &PoolConfig) -> u64 {
    let pool = Pool::create(path, LAYOUT, size, c).unwrap();
    pool.transaction(|tx| {
        let root = tx.root::<KRoot>()?;
        for t in 0..KT {
            let b = tx.alloc::<[u64; 8]>()?;
            tx.write(
                kword(root, std::mem::offset_of!(KRoot, cur) + 8 * t),
                &b.offset(),
            )?;
        }
        Ok::<_, Error>(())
    })
    .unwrap();
    pool.alloc_stats().bytes_used - KT as u64 * 64
}

/// Every log × policy: three threads allocating, freeing, rolling back
/// to savepoints and running nested top actions, SIGKILLed after a
/// seeded number of acknowledgements (twice for a third of them); after each
/// recovery exactly the acknowledged transactions are there (or the one
/// in flight), each thread's block holds its last commit, the actions'
/// blocks hold theirs, and the heap's allocated bytes are exactly the
/// reachable blocks.
#[test]
fn threads_allocating_freeing_and_acting_killed_keep_a_leak_free_heap() {
    let dir = tempfile::tempdir().unwrap();
    for (i, (v, p)) in configs().into_iter().enumerate() {
        let c = PoolConfig::default().log(v).policy(p);
        // Settings at their edges, one set per configuration.
        let (c, set) = match i % 4 {
            0 => (c, "defaults"),
            1 => (
                c.bucket_cells(8).group_size(64).lanes(8),
                "8 cells, groups of 64, 8 lanes",
            ),
            2 => (c.bucket_cells(2048).lanes(1), "2048 cells, 1 lane"),
            _ => (
                c.backend(Backend::Msync).group_size(16),
                "msync, groups of 16",
            ),
        };
        let who = format!("{v:?}/{p:?} ({set})");
        let path = dir.path().join(format!("{i}.pool"));
        let base = kpool(&path, 4 << 20, &c);
        let seed = 0x5eed_0000 + i as u64;
        let mut known = Known::default();
        // A second kill (after a recovery) for a third of the pools, to
        // keep the file quick; USER_PROBE3_CYCLES=N runs N for each.
        let cycles = std::env::var("USER_PROBE3_CYCLES")
            .map_or(1 + u64::from(i % 3 == 0), |c| c.parse().unwrap());
        for cycle in 0..cycles {
            let kill = 20 + (seed * 31 + cycle * 97) % 160;
            let acked = run_kill_child(&path, seed, kill, 0);
            let pool = Pool::open(&path, LAYOUT, &Default::default())
                .unwrap_or_else(|e| panic!("{who}: recovery {e}"));
            known = kverify(&format!("{who} cycle {cycle}"), &pool, known, &acked, base);
        }
    }
}

/// The same three threads on a 2 MiB pool, each transaction also
/// allocating, writing and freeing a block of up to 300 KiB, so that
/// transactions find the heap or the log full (rolled back, `OutOfMemory`
/// or `LogFull`) and the no-force log is checkpointed in the middle of
/// transactions: after each SIGKILL the same exact oracle holds.
#[test]
fn threads_on_a_full_small_pool_killed_keep_exactly_their_commits() {
    let dir = tempfile::tempdir().unwrap();
    for (i, (v, p)) in configs().into_iter().enumerate() {
        let who = format!("{v:?}/{p:?}");
        let path = dir.path().join(format!("{i}.pool"));
        let c = PoolConfig::default().log(v).policy(p).log_size(32 << 10);
        let base = kpool(&path, 2 << 20, &c);
        let seed = 0xf011_0000 + i as u64;
        let mut known = Known::default();
        let cycles = std::env::var("USER_PROBE3_CYCLES")
            .map_or(1 + u64::from(i % 4 == 1), |c| c.parse().unwrap());
        for cycle in 0..cycles {
            let kill = 30 + (seed * 17 + cycle * 131) % 300;
            let acked = run_kill_child(&path, seed + cycle, kill, 900 << 10);
            let pool = Pool::open(&path, LAYOUT, &Default::default())
                .unwrap_or_else(|e| panic!("{who}: recovery {e}"));
            known = kverify(&format!("{who} cycle {cycle}"), &pool, known, &acked, base);
        }
    }
}

/// Three threads on a small pool allocating blocks of many sizes until
/// the heap and the log run out, freeing some of theirs, some
/// transactions rolled back, under every log and policy: every failure is
/// a typed error of room, every committed block holds what its
/// transaction wrote, and once every block is freed the heap is back to
/// its first figure (nothing leaked, nothing freed twice), in memory and
/// reopened.
#[test]
fn threads_filling_a_small_pool_leak_nothing() {
    for (i, (v, p)) in configs().into_iter().enumerate() {
        let who = format!("{v:?}/{p:?}");
        let pool = Pool::create_sim(LAYOUT, 2 << 20, &cfg(v, p).log_size(32 << 10)).unwrap();
        let base = pool.alloc_stats().bytes_used;
        let lives: Vec<Vec<(u64, u64, u8)>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3u64)
                .map(|t| {
                    let (pool, who) = (&pool, &who);
                    s.spawn(move || {
                        let mut x = 0x9e37_79b9u64 ^ (i as u64) << 20 ^ t;
                        let mut next = || {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            x
                        };
                        let mut live: Vec<(u64, u64, u8)> = Vec::new();
                        let (mut full, mut ok) = (0, 0);
                        for round in 0..120u64 {
                            let r0 = next();
                            let n = 1 + r0 % 4;
                            let abort = r0 % 9 == 0;
                            let frees = if live.is_empty() { 0 } else { (r0 >> 8) % 3 };
                            let mut free_idx = Vec::new();
                            for _ in 0..frees {
                                let k = (next() % live.len() as u64) as usize;
                                if !free_idx.contains(&k) {
                                    free_idx.push(k);
                                }
                            }
                            let sizes: Vec<u64> = (0..n)
                                .map(|_| {
                                    let r = next();
                                    match r % 10 {
                                        0 => 70_000 + r % 200_000,
                                        1..=3 => 1000 + r % 8000,
                                        _ => 8 + r % 600,
                                    }
                                })
                                .collect();
                            let fill = (round as u8) ^ (t as u8) << 6;
                            let r = pool.transaction(|tx| {
                                let mut made = Vec::new();
                                for &sz in &sizes {
                                    let b = tx.alloc_bytes(sz)?;
                                    tx.write_bytes(b, &vec![fill; sz as usize])?;
                                    made.push((b, sz, fill));
                                }
                                for &k in &free_idx {
                                    tx.free(PPtr::<u8>::from_offset(live[k].0))?;
                                }
                                if abort {
                                    return Err(Error::Aborted);
                                }
                                Ok(made)
                            });
                            match r {
                                Ok(made) => {
                                    ok += 1;
                                    free_idx.sort_unstable();
                                    for k in free_idx.into_iter().rev() {
                                        live.swap_remove(k);
                                    }
                                    live.extend(made);
                                }
                                Err(Error::Aborted) if abort => {}
                                Err(Error::OutOfMemory { .. } | Error::LogFull { .. }) => {
                                    full += 1;
                                    // Room is made by freeing the oldest (which
                                    // may itself find the log full while the
                                    // other threads' transactions hold it).
                                    if !live.is_empty() {
                                        let (b, _, _) = live[0];
                                        match pool
                                            .transaction(|tx| tx.free(PPtr::<u8>::from_offset(b)))
                                        {
                                            Ok(()) => {
                                                live.remove(0);
                                            }
                                            Err(Error::LogFull { .. }) => {}
                                            Err(e) => panic!("{who}: free {e:?}"),
                                        }
                                    }
                                }
                                Err(e) => panic!("{who} thread {t}: {e:?}"),
                            }
                        }
                        assert!(ok > 0, "{who} thread {t}: nothing committed ({full} full)");
                        live
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let all: Vec<(u64, u64, u8)> = lives.into_iter().flatten().collect();
        let check = |pool: &Pool, what: &str| {
            for &(b, sz, fill) in &all {
                let mut buf = vec![0u8; sz as usize];
                pool.read_bytes(b, &mut buf)
                    .unwrap_or_else(|e| panic!("{who} {what}: block {b}: {e:?}"));
                assert!(
                    buf.iter().all(|&x| x == fill),
                    "{who} {what}: block {b} of {sz}"
                );
            }
        };
        check(&pool, "in memory");
        let again = reopen(&pool);
        check(&again, "reopened");
        assert_eq!(
            again.alloc_stats().bytes_used,
            pool.alloc_stats().bytes_used,
            "{who}"
        );
        for chunk in all.chunks(16) {
            again
                .transaction(|tx| {
                    for &(b, _, _) in chunk {
                        tx.free(PPtr::<u8>::from_offset(b))?;
                    }
                    Ok::<_, Error>(())
                })
                .unwrap_or_else(|e| panic!("{who}: freeing all {e:?}"));
        }
        assert_eq!(again.alloc_stats().bytes_used, base, "{who}: a leak");
        let third = reopen(&again);
        assert_eq!(
            third.alloc_stats().bytes_used,
            base,
            "{who}: a leak after reopen"
        );
        // And the room is there again: a large block fits.
        third
            .transaction(|tx| tx.alloc_bytes(1 << 20))
            .unwrap_or_else(|e| panic!("{who}: {e:?} {:?}", third.alloc_stats()));
    }
}

/// Under the redo policies a nested top action begun first in its
/// transaction commits as a group of its own, and becomes an ordinary
/// action from its start when it takes a savepoint, runs an action of its
/// own, or outgrows the ring. Each way, with an allocation, a free and a
/// partial rollback inside it, then the enclosing transaction rolled
/// back: the action's effects (and only they) are there, in memory and
/// reopened, and the heap holds exactly its blocks.
#[test]
fn a_first_action_that_stops_being_a_ring_group_keeps_exactly_its_effects() {
    for v in LogVariant::ALL {
        for p in [
            Policy::Redo,
            Policy::RedoAsync,
            Policy::Force,
            Policy::NoForce,
        ] {
            for way in 0..4u32 {
                let who = format!("{v:?}/{p:?} way {way}");
                let pool = Pool::create_sim(LAYOUT, 8 << 20, &cfg(v, p)).unwrap();
                let root = pool.transaction(|tx| tx.root::<Root>()).unwrap();
                let old = pool.transaction(|tx| tx.alloc::<[u64; 8]>()).unwrap();
                pool.transaction(|tx| tx.write(field(root, 2), &old.offset()))
                    .unwrap();
                let base = pool.alloc_stats().bytes_used;
                let big = vec![0xabu8; 1 << 20];
                let r = pool.transaction(|tx| {
                    tx.nested_top_action(|tx| {
                        let n = tx.alloc::<[u64; 8]>()?;
                        tx.write(n, &[5; 8])?;
                        tx.write(field(root, 3), &n.offset())?;
                        tx.free(old)?;
                        tx.write(field(root, 2), &0)?;
                        match way {
                            0 => {
                                let sp = tx.savepoint()?;
                                tx.write(field(root, 0), &1)?;
                                let gone = tx.alloc::<[u64; 8]>()?;
                                tx.write(field(root, 6), &gone.offset())?;
                                tx.rollback_to(sp)?;
                            }
                            1 => {
                                tx.nested_top_action(|tx| {
                                    let m = tx.alloc::<u64>()?;
                                    tx.write(m, &9)?;
                                    tx.write(field(root, 4), &m.offset())
                                })?;
                                let e = tx.nested_top_action(|tx| {
                                    tx.write(field(root, 0), &1)?;
                                    Err::<(), _>(Error::Aborted)
                                });
                                assert!(matches!(e, Err(Error::Aborted)));
                            }
                            2 => {
                                // Larger than the ring.
                                let b = tx.alloc_bytes(big.len() as u64)?;
                                tx.write_bytes(b, &big)?;
                                tx.write(field(root, 5), &b)?;
                            }
                            _ => {
                                let b = tx.alloc_bytes(big.len() as u64)?;
                                tx.write(field(root, 5), &b)?;
                                let sp = tx.savepoint()?;
                                tx.write_bytes(b, &big)?;
                                tx.rollback_to(sp)?;
                            }
                        }
                        Ok::<_, Error>(())
                    })?;
                    tx.write(field(root, 7), &77)?;
                    Err::<(), _>(Error::Aborted)
                });
                assert!(matches!(r, Err(Error::Aborted)), "{who}: {r:?}");
                for (what, pool) in [("in memory", &pool), ("reopened", &reopen(&pool))] {
                    let r = pool.read(root).unwrap();
                    assert_eq!((r.a, r.x, r.z, r.c), (0, 0, 0, 0), "{who} {what}: {r:?}");
                    assert_ne!(r.n1, 0, "{who} {what}");
                    assert_eq!(
                        pool.read(PPtr::<[u64; 8]>::from_offset(r.n1)).unwrap(),
                        [5; 8],
                        "{who} {what}"
                    );
                    assert!(pool.read(old).is_err(), "{who} {what}: the action's free");
                    // The action freed OLD and allocated N1 of the same size.
                    let mut used = base;
                    if way == 1 {
                        assert_eq!(
                            pool.read(PPtr::<u64>::from_offset(r.n2)).unwrap(),
                            9,
                            "{who} {what}"
                        );
                        used += 64;
                    } else {
                        assert_eq!(r.n2, 0, "{who} {what}");
                    }
                    if way >= 2 {
                        let mut buf = vec![0u8; big.len()];
                        pool.read_bytes(r.n3, &mut buf).unwrap();
                        let want = if way == 2 { 0xab } else { 0 };
                        assert!(buf.iter().all(|&b| b == want), "{who} {what}: big block");
                        assert!(
                            pool.alloc_stats().bytes_used >= used + big.len() as u64,
                            "{who} {what}"
                        );
                    } else {
                        assert_eq!(r.n3, 0, "{who} {what}");
                        assert_eq!(pool.alloc_stats().bytes_used, used, "{who} {what}");
                    }
                }
            }
        }
    }
}

/// Two transactions that both hold a lock shared and both ask for it
/// exclusively (two readers turned writers) wait for each other: one is
/// a `Deadlock`, rolls back, and its retry succeeds; the other upgrades.
/// The same with the upgrade asked inside a nested top action: the
/// action fails with the deadlock, the enclosing transaction is doomed
/// and rolls back, and an action it completed before stays.
#[test]
fn two_shared_holders_upgrading_at_once_are_a_deadlock_not_a_hang() {
    for (v, p) in configs() {
        for in_action in [false, true] {
            let who = format!("{v:?}/{p:?} in action {in_action}");
            let pool = Pool::create_sim(LAYOUT, 4 << 20, &cfg(v, p)).unwrap();
            pool.set_lock_timeout(std::time::Duration::MAX);
            let root = pool.transaction(|tx| tx.root::<Root>()).unwrap();
            let x = field(root, 0);
            let both = Barrier::new(2);
            let rs: Vec<(Result<(), Error>, u32)> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..2u64)
                    .map(|t| {
                        let (pool, both) = (&pool, &both);
                        s.spawn(move || {
                            let mut tries = 0u32;
                            let mut first = None;
                            loop {
                                tries += 1;
                                let r = pool.transaction(|tx| {
                                    tx.nested_top_action(|tx| {
                                        let k = tx.read(field(root, 4 + t))?;
                                        tx.write(field(root, 4 + t), &(k + 1))
                                    })?;
                                    tx.lock_shared(x)?;
                                    let n = tx.read(x)?;
                                    if tries == 1 {
                                        both.wait();
                                    }
                                    if in_action {
                                        tx.nested_top_action(|tx| {
                                            tx.lock(x)?;
                                            tx.write(field(root, 2 + t), &1)
                                        })?;
                                    } else {
                                        tx.lock(x)?;
                                    }
                                    tx.write(x, &(n + 1))
                                });
                                match r {
                                    Ok(()) => return (first.unwrap_or(Ok(())), tries),
                                    Err(Error::Deadlock { .. }) => {
                                        first.get_or_insert(r);
                                    }
                                    Err(e) => panic!("{e:?}"),
                                }
                            }
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let deadlocks = rs.iter().filter(|(r, _)| r.is_err()).count();
            assert!(deadlocks >= 1, "{who}: {rs:?}");
            let r = pool.read(root).unwrap();
            assert_eq!(r.a, 2, "{who}: both increments, one after its retry");
            let tries: u64 = rs.iter().map(|&(_, n)| n as u64).sum();
            // Every try's first action stayed, the doomed ones' too.
            assert_eq!(r.n2 + r.n3, tries, "{who}: {r:?} {rs:?}");
            let again = reopen(&pool);
            assert_eq!(again.read(root).unwrap(), r, "{who}");
        }
    }
}

/// A pool file longer than its recorded size, the tail full of garbage
/// (what a crash during a growth, a tool or a copy can leave): the pool
/// opens, and its growth over the tail gives zeroed, consistent memory:
/// allocations there read back zeros, hold what is written, the pool
/// checks clean and reopens with everything, under every log and policy.
#[test]
fn growth_over_a_garbage_tail_of_the_file_starts_clean() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    for (i, (v, p)) in configs().into_iter().enumerate() {
        let who = format!("{v:?}/{p:?}");
        let path = dir.path().join(format!("{i}.pool"));
        let c = PoolConfig::default().log(v).policy(p).max_size(64 << 20);
        let pool = Pool::create(&path, LAYOUT, 4 << 20, &c).unwrap();
        let root = pool.transaction(|tx| tx.root::<Root>()).unwrap();
        pool.transaction(|tx| tx.write(field(root, 0), &1)).unwrap();
        let size = pool.size();
        pool.close().unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        let junk: Vec<u8> = (0..(12u32 << 20))
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 | 1)
            .collect();
        f.write_all(&junk).unwrap();
        drop(f);
        let pool = Pool::open(&path, LAYOUT, &Default::default())
            .unwrap_or_else(|e| panic!("{who}: open {e:?}"));
        let mut blocks = Vec::new();
        for k in 0..6u64 {
            let b = pool
                .transaction(|tx| {
                    let b = tx.alloc_bytes(1 << 20)?;
                    let mut buf = vec![0u8; 1 << 20];
                    tx.read_bytes(b, &mut buf)?;
                    assert!(
                        buf.iter().all(|&x| x == 0),
                        "{who}: a fresh block is not zeroed"
                    );
                    tx.write_bytes(b, &vec![k as u8 + 1; 1 << 20])?;
                    let s = tx.alloc::<[u64; 8]>()?;
                    assert_eq!(tx.read(s)?, [0; 8], "{who}: small block not zeroed");
                    tx.write(s, &[k; 8])?;
                    Ok::<_, Error>((b, s))
                })
                .unwrap_or_else(|e| panic!("{who}: {e:?}"));
            blocks.push(b);
        }
        assert!(pool.size() > size, "{who}: grew");
        let report = rewind::inspect::check_pool(&pool);
        assert!(report.is_ok(), "{who}: {report:?}");
        pool.close().unwrap();
        let report = rewind::inspect::check(&path).unwrap();
        assert!(report.is_ok(), "{who}: {report:?}");
        let pool = Pool::open(&path, LAYOUT, &Default::default()).unwrap();
        for (k, &(b, s)) in blocks.iter().enumerate() {
            let mut buf = vec![0u8; 1 << 20];
            pool.read_bytes(b, &mut buf).unwrap();
            assert!(buf.iter().all(|&x| x == k as u8 + 1), "{who}: block {k}");
            assert_eq!(pool.read(s).unwrap(), [k as u64; 8], "{who}");
        }
        assert_eq!(pool.read(field(root, 0)).unwrap(), 1);
    }
}

/// The same on a pool that may grow but whose file system is full: the
/// allocation after the rolled-back giant transaction must find the heap
/// the log held, not `NoSpaceToGrow` (the growth it tried first).
#[test]
fn the_heap_a_failed_giant_transaction_lent_the_log_comes_back_on_a_full_disk() {
    let Some(fs) = SmallFs::mount(6) else {
        return;
    };
    for (i, (v, p)) in configs().into_iter().enumerate() {
        let who = format!("{v:?}/{p:?}");
        let path = fs.path().join(format!("{i}.pool"));
        let c = PoolConfig::default()
            .log(v)
            .policy(p)
            .bucket_cells(16)
            .log_size(4096)
            .max_size(64 << 20);
        let pool = Pool::create(&path, LAYOUT, 2 << 20, &c).unwrap();
        // The file system has room for this pool and little more.
        let filler = fs.path().join("filler");
        let st = rustix::fs::statvfs(fs.path()).unwrap();
        let free = st.f_bavail * st.f_frsize;
        std::fs::write(&filler, vec![1u8; (free - (64 << 10)) as usize]).unwrap();
        let root = pool.transaction(|tx| tx.root::<u64>()).unwrap();
        let big = pool.transaction(|tx| tx.alloc_bytes(1 << 20)).unwrap();
        pool.transaction(|tx| tx.free(PPtr::<u8>::from_offset(big)))
            .unwrap();
        let r = pool.transaction(|tx| {
            let arr = tx.alloc_array::<u64>(16384)?;
            let _sp = tx.savepoint()?;
            for round in 1..1000u64 {
                for i in 0..16384 {
                    tx.write(arr.at(i), &(round + i))?;
                }
            }
            tx.write(root, &1)
        });
        assert!(
            matches!(
                r,
                Err(Error::LogFull { .. }
                    | Error::OutOfMemory { .. }
                    | Error::NoSpaceToGrow { .. })
            ),
            "{who}: {r:?}"
        );
        let again = pool.transaction(|tx| tx.alloc_bytes(1 << 20));
        assert!(again.is_ok(), "{who}: {again:?} {:?}", pool.alloc_stats());
        drop(pool);
        std::fs::remove_file(&filler).unwrap();
        std::fs::remove_file(&path).unwrap();
    }
}

/// Under redo-async a committed transaction that logged through the log
/// blocks (it took a savepoint) leaves records that hold the log's heap
/// chunks until write-back puts its values in place (the simulated domain
/// runs no write-back thread: the lag is as long as it can be). Small
/// blocks allocated afterwards, each as a commit group's entry, must find
/// the room a write-back makes: as many fit as after a `sync`.
#[test]
fn redo_async_small_allocations_find_the_room_write_back_makes() {
    for v in LogVariant::ALL {
        let mut counts = Vec::new();
        for sync_first in [true, false] {
            let c = cfg(v, Policy::RedoAsync).log_size(16 << 10);
            let pool = Pool::create_sim(LAYOUT, 4 << 20, &c).unwrap();
            let root = pool.transaction(|tx| tx.root::<u64>()).unwrap();
            let arr = pool
                .transaction(|tx| tx.alloc_array::<u64>(1 << 15))
                .unwrap();
            pool.transaction(|tx| {
                let _sp = tx.savepoint()?;
                for k in 0..(1u64 << 15) / 128 {
                    let piece: Vec<u8> = (k * 128..(k + 1) * 128)
                        .flat_map(|i| (i + 1).to_le_bytes())
                        .collect();
                    tx.write_bytes(arr.at(k * 128).offset(), &piece)?;
                }
                tx.write(root, &1)
            })
            .unwrap_or_else(|e| panic!("{v:?}: {e:?}"));
            if sync_first {
                pool.sync().unwrap();
            }
            let mut n = 0u64;
            loop {
                match pool.transaction(|tx| tx.alloc_bytes(32 << 10)) {
                    Ok(_) => n += 1,
                    Err(Error::OutOfMemory { .. } | Error::LogFull { .. }) => break,
                    Err(e) => panic!("{v:?}: {e:?}"),
                }
            }
            counts.push(n);
            pool.sync().unwrap();
            assert_eq!(pool.read(arr.at(77)).unwrap(), 78, "{v:?}");
        }
        assert_eq!(
            counts[1], counts[0],
            "{v:?}: 32 KiB blocks after a sync, without one"
        );
    }
}

/// On a growable pool whose file system is full, the log that needs a
/// chunk asks the heap, which tries to grow the file: `NoSpaceToGrow`.
/// Under no-force a log holding a rolled-back giant transaction's records
/// must then be checkpointed, as when it is full (`LogFull`), so that the
/// next transaction's writes find room, under every log variant.
#[test]
fn writes_after_a_failed_giant_transaction_on_a_full_disk_find_the_log_checkpointed() {
    let Some(fs) = SmallFs::mount(6) else {
        return;
    };
    for (i, (v, p)) in configs().into_iter().enumerate() {
        let who = format!("{v:?}/{p:?}");
        let path = fs.path().join(format!("{i}.pool"));
        let c = PoolConfig::default()
            .log(v)
            .policy(p)
            .bucket_cells(16)
            .log_size(4096)
            .max_size(64 << 20);
        let pool = Pool::create(&path, LAYOUT, 2 << 20, &c).unwrap();
        let root = pool.transaction(|tx| tx.root::<u64>()).unwrap();
        let data = pool.transaction(|tx| tx.alloc_bytes(256 << 10)).unwrap();
        let filler = fs.path().join("filler");
        let st = rustix::fs::statvfs(fs.path()).unwrap();
        let free = st.f_bavail * st.f_frsize;
        std::fs::write(&filler, vec![1u8; (free - (64 << 10)) as usize]).unwrap();
        let r = pool.transaction(|tx| {
            let arr = tx.alloc_array::<u64>(16384)?;
            let _sp = tx.savepoint()?;
            for round in 1..1000u64 {
                for i in 0..16384 {
                    tx.write(arr.at(i), &(round + i))?;
                }
            }
            tx.write(root, &1)
        });
        assert!(
            matches!(
                r,
                Err(Error::LogFull { .. }
                    | Error::OutOfMemory { .. }
                    | Error::NoSpaceToGrow { .. })
            ),
            "{who}: {r:?}"
        );
        let bytes = vec![0x3cu8; 32 << 10];
        let w = pool.transaction(|tx| {
            tx.write(root, &2)?;
            tx.write_bytes(data, &bytes)
        });
        assert!(
            w.is_ok(),
            "{who}: {w:?} {:?} {:?}",
            pool.log_stats(),
            pool.alloc_stats()
        );
        assert_eq!(pool.read(root).unwrap(), 2, "{who}");
        drop(pool);
        std::fs::remove_file(&filler).unwrap();
        std::fs::remove_file(&path).unwrap();
    }
}

/// Four threads each locking two to four of six objects in a random
/// order, some shared (read) and some exclusive (incremented), some
/// shared first and upgraded: every cycle is a `Deadlock` the thread
/// retries, no wait outlives its holder (a missed cycle would end only at
/// the lock timeout, set far beyond any wait here), and no increment is
/// lost or doubled, in memory and reopened.
#[test]
fn random_lock_orders_of_four_threads_resolve_and_lose_nothing() {
    const OBJS: usize = 6;
    for (i, (v, p)) in configs().into_iter().enumerate() {
        let who = format!("{v:?}/{p:?}");
        let pool = Pool::create_sim(LAYOUT, 4 << 20, &cfg(v, p)).unwrap();
        pool.set_lock_timeout(std::time::Duration::from_secs(600));
        let objs: Vec<PPtr<u64>> = pool
            .transaction(|tx| (0..OBJS).map(|_| tx.alloc::<u64>()).collect())
            .unwrap();
        let per: Vec<([u64; OBJS], u64)> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4u64)
                .map(|t| {
                    let (pool, objs, who) = (&pool, &objs, &who);
                    s.spawn(move || {
                        let mut x = 0x2545_f491_4f6c_dd1du64 ^ (i as u64) << 32 ^ t;
                        let mut next = move || {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            x
                        };
                        let mut added = [0u64; OBJS];
                        let mut deadlocks = 0;
                        for _ in 0..400 {
                            // (object, mode): 0 shared, 1 exclusive, 2 shared then upgraded.
                            let n = 2 + (next() % 3) as usize;
                            let mut plan: Vec<(usize, u64)> = Vec::new();
                            while plan.len() < n {
                                let o = (next() % OBJS as u64) as usize;
                                if plan.iter().all(|&(q, _)| q != o) {
                                    plan.push((o, next() % 3));
                                }
                            }
                            loop {
                                let r = pool.transaction(|tx| {
                                    for &(o, mode) in &plan {
                                        match mode {
                                            0 => {
                                                tx.lock_shared(objs[o])?;
                                                tx.read(objs[o])?;
                                            }
                                            1 => {
                                                tx.lock(objs[o])?;
                                                let v = tx.read(objs[o])?;
                                                tx.write(objs[o], &(v + 1))?;
                                            }
                                            _ => {
                                                tx.lock_shared(objs[o])?;
                                                let v = tx.read(objs[o])?;
                                                tx.lock(objs[o])?;
                                                tx.write(objs[o], &(v + 1))?;
                                            }
                                        }
                                    }
                                    Ok::<_, Error>(())
                                });
                                match r {
                                    Ok(()) => break,
                                    Err(Error::Deadlock { .. }) => deadlocks += 1,
                                    Err(e) => panic!("{who} thread {t}: {e:?}"),
                                }
                            }
                            for &(o, mode) in &plan {
                                if mode != 0 {
                                    added[o] += 1;
                                }
                            }
                        }
                        (added, deadlocks)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (what, pool) in [("in memory", &pool), ("reopened", &reopen(&pool))] {
            for o in 0..OBJS {
                let want: u64 = per.iter().map(|(a, _)| a[o]).sum();
                assert_eq!(
                    pool.read(objs[o]).unwrap(),
                    want,
                    "{who} {what}: object {o}"
                );
            }
        }
    }
}

/// The kill test's threads in this process, some transactions panicking
/// (after the shared lock, inside the nested top action, at the end), the
/// panics caught outside `transaction`: each panicked transaction is
/// rolled back whole (its action too), its locks are released (the other
/// threads go on), nothing leaks, and the pool reopens to the same state,
/// under every log and policy.
#[test]
fn panics_of_several_threads_inside_transactions_roll_back_whole() {
    quiet_planned_panics();
    let dir = tempfile::tempdir().unwrap();
    for (i, (v, p)) in configs().into_iter().enumerate() {
        let who = format!("{v:?}/{p:?}");
        let path = dir.path().join(format!("panic-{i}.pool"));
        let c = PoolConfig::default().log(v).policy(p);
        let base = kpool(&path, 4 << 20, &c);
        let pool = Pool::open(&path, LAYOUT, &Default::default()).unwrap();
        pool.set_lock_timeout(std::time::Duration::MAX);
        let root = pool.root::<KRoot>().unwrap().unwrap();
        let seed = 0x9a41c + i as u64;
        let acked: Vec<Vec<(u64, bool)>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..KT)
                .map(|t| {
                    let (pool, who) = (&pool, &who);
                    s.spawn(move || {
                        let mut outcomes = Vec::new();
                        for (id, n) in (0..120u64).enumerate() {
                            let id = id as u64;
                            let panic_at = match (n * 7 + t as u64 * 3 + seed) % 9 {
                                1 => 1,
                                4 => 2,
                                7 => 3,
                                _ => 0,
                            };
                            let r = catch_unwind(AssertUnwindSafe(|| {
                                ktx(pool, root, (t, id, seed), 0, panic_at)
                            }));
                            let committed = match r {
                                Ok(Ok(())) => true,
                                Ok(Err(Error::Aborted)) => false,
                                Ok(Err(e)) => panic!("{who} thread {t}: {e:?}"),
                                Err(_) => false,
                            };
                            outcomes.push((id, committed));
                        }
                        assert!(
                            outcomes.iter().filter(|o| o.1).count() > 40,
                            "{who} thread {t}: too few commits"
                        );
                        outcomes
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        // Every outcome is known: no transaction in flight.
        let want = kverify(
            &format!("{who} in memory"),
            &pool,
            Known::default(),
            &acked,
            base,
        );
        pool.close().unwrap();
        let again = Pool::open(&path, LAYOUT, &Default::default()).unwrap();
        let got = kverify(
            &format!("{who} reopened"),
            &again,
            Known::default(),
            &acked,
            base,
        );
        assert_eq!(got.done, want.done, "{who}");
    }
}

/// A block another transaction allocated and has not committed, freed by
/// a second transaction (a program that published the pointer before its
/// commit), after which the allocating transaction rolls back. The free
/// succeeded and committed under every policy but redo (whose allocation
/// sets no bit before the commit), the rollback freed the block again,
/// and it went back to the free lists twice: two later allocations were
/// handed the same 64-byte block (silently: the lists are volatile). The
/// same under redo once the allocating transaction moved its ring
/// allocations to the log blocks (a larger allocation after it), which
/// sets their bits before the commit too. The
/// free is now `InvalidFree`; every later allocation is a distinct block,
/// the heap figures in memory are those rebuilt at reopen, and once the
/// blocks are freed the heap is back where it began.
#[test]
fn a_free_of_another_transactions_uncommitted_allocation_frees_it_once() {
    use std::sync::mpsc;
    for (v, p) in configs() {
        // (`settle`: the allocating transaction then allocates a block too
        // large for the commit ring, which moves its ring allocations to
        // the log blocks, setting their bits before the commit.)
        for (size, second_commits, settle) in [
            (64u64, true, false),
            (64, false, false),
            (100_000, true, false),
            (64, true, true),
        ] {
            let who =
                format!("{v:?}/{p:?} size {size} second commits {second_commits} settled {settle}");
            let pool = Pool::create_sim(LAYOUT, 16 << 20, &cfg(v, p)).unwrap();
            let base = pool.alloc_stats().bytes_used;
            let (to_b, from_a) = mpsc::channel::<u64>();
            let (to_a, from_b) = mpsc::channel::<String>();
            let pool = &pool;
            let (ra, rb) = std::thread::scope(|s| {
                let a = s.spawn(move || {
                    pool.transaction(|tx| {
                        let x = tx.alloc_bytes(size)?;
                        if settle {
                            tx.alloc_bytes(100_000)?;
                        }
                        to_b.send(x).unwrap();
                        let _ = from_b.recv().unwrap();
                        Err::<(), _>(Error::Aborted)
                    })
                });
                let b = s.spawn(move || {
                    let x = from_a.recv().unwrap();
                    let r = pool.transaction(|tx| {
                        let f = tx.free(PPtr::<u8>::from_offset(x));
                        if second_commits {
                            f
                        } else {
                            f.and(Err(Error::Aborted))
                        }
                    });
                    to_a.send(format!("{r:?}")).unwrap();
                    r
                });
                (a.join().unwrap(), b.join().unwrap())
            });
            assert!(matches!(ra, Err(Error::Aborted)), "{who}: {ra:?}");
            // The free is refused, and the program is told why.
            assert!(
                matches!(rb, Err(Error::InvalidFree { .. })),
                "{who}: the free of an uncommitted allocation: {rb:?}"
            );
            // Each later allocation a distinct block.
            let mut seen = std::collections::HashSet::new();
            for _ in 0..32 {
                let b = pool.transaction(|tx| tx.alloc_bytes(size)).unwrap();
                assert!(
                    seen.insert(b),
                    "{who}: block {b} handed out twice (b: {rb:?})"
                );
            }
            let again = reopen(pool);
            assert_eq!(
                again.alloc_stats(),
                pool.alloc_stats(),
                "{who}: heap after reopen"
            );
            // Freed once each, the heap is back where it began.
            for &b in &seen {
                again
                    .transaction(|tx| tx.free(PPtr::<u8>::from_offset(b)))
                    .unwrap_or_else(|e| panic!("{who}: {e:?}"));
            }
            assert_eq!(
                again.alloc_stats().bytes_used,
                base,
                "{who}: left allocated"
            );
        }
    }
}

/// Threads that share pointers before their transactions commit (a
/// program's race, but a legal one): each transaction allocates blocks of
/// several sizes and publishes them at once, frees blocks others
/// published (committed or not), and commits, rolls back, or rolls back
/// to a savepoint. Whatever each call answers, the allocator never holds
/// one block twice: the blocks the committed transactions left allocated
/// are distinct, each frees once, and then the heap is back where it
/// began, in memory and reopened.
///
/// It failed intermittently (about one run in 20 to 30 in a debug build)
/// until three fixes: `claim_alloc` on the bucket log's path, and for the
/// ring allocations a transaction moves to the log blocks (seen before
/// them: a block whose only allocation was undone by its transaction's
/// `rollback_to` freed `Ok` by another thread's committed transaction,
/// "allocated -1 times over"; blocks the media bitmap holds allocated
/// that no committed transaction left allocated; heap figures in memory
/// and rebuilt at reopen one block apart); then the allocation's bit and
/// its claim made one step under the allocator's latch
/// (`Allocator::mark_allocated_for`): a free of a stale pointer to the
/// block between the two claimed it, and the allocation's claim then
/// replaced that one. After it: 0 failures in 510 debug runs and 400
/// release runs (1 in 60 debug runs of the code before it).
/// On a failure it prints each disagreeing block's history (`DBG`);
/// `ONLY=Log/Policy`, `THREADS` and `ROUNDS` narrow a run.
#[test]
fn threads_freeing_each_others_unpublished_blocks_never_double_free() {
    use std::collections::HashSet;
    for (i, (v, p)) in configs().into_iter().enumerate() {
        if let Ok(only) = std::env::var("ONLY") {
            if format!("{v:?}/{p:?}") != only {
                continue;
            }
        }
        let who = format!("{v:?}/{p:?}");
        let pool = Pool::create_sim(LAYOUT, 16 << 20, &cfg(v, p)).unwrap();
        let base = pool.alloc_stats().bytes_used;
        // Offsets published by any transaction, committed or not.
        let board: Mutex<Vec<u64>> = Mutex::new(Vec::new());
        let events: Mutex<Vec<String>> = Mutex::new(Vec::new());
        // Per thread: blocks its committed transactions allocated, and
        // blocks they freed.
        let logs: Vec<(Vec<u64>, Vec<u64>)> = std::thread::scope(|s| {
            let nthreads: u64 = std::env::var("THREADS").map_or(3, |n| n.parse().unwrap());
            let hs: Vec<_> = (0..nthreads)
                .map(|t| {
                    let (pool, board, who, events) = (&pool, &board, &who, &events);
                    s.spawn(move || {
                        let mut x = 0x853c_49e6_748f_ea9bu64 ^ (i as u64) << 24 ^ t << 8;
                        let mut next = move || {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            x
                        };
                        let (mut made, mut gone) = (Vec::new(), Vec::new());
                        for _ in 0..std::env::var("ROUNDS").map_or(150, |n| n.parse().unwrap()) {
                            let r0 = next();
                            let picks: Vec<u64> = {
                                let b = board.lock().unwrap();
                                if b.is_empty() {
                                    Vec::new()
                                } else {
                                    (0..1 + r0 % 3)
                                        .map(|k| b[((r0 >> (8 + k)) as usize) % b.len()])
                                        .collect()
                                }
                            };
                            let sizes: Vec<u64> = (0..1 + (r0 >> 20) % 3)
                                .map(|k| match (r0 >> (24 + 4 * k)) % 8 {
                                    0 => 70_000,
                                    1 => 3000,
                                    _ => 64,
                                })
                                .collect();
                            let end = (r0 >> 40) % 4; // 0,1: commit, 2: abort, 3: savepoint
                            let mut ev = Vec::new();
                            let r = pool.transaction(|tx| {
                                ev.clear();
                                let (mut mine, mut freed) = (Vec::new(), Vec::new());
                                let sp = if end == 3 {
                                    Some(tx.savepoint()?)
                                } else {
                                    None
                                };
                                for &sz in &sizes {
                                    let b = tx.alloc_bytes(sz)?;
                                    ev.push(format!("alloc {b}"));
                                    board.lock().unwrap().push(b);
                                    mine.push(b);
                                }
                                for &b in &picks {
                                    let fr = tx.free(PPtr::<u8>::from_offset(b));
                                    ev.push(format!("free {b} {fr:?}"));
                                    match fr {
                                        Ok(()) => freed.push(b),
                                        Err(
                                            Error::InvalidFree { .. } | Error::NotAllocated { .. },
                                        ) => {}
                                        Err(e) => return Err(e),
                                    }
                                }
                                if let Some(sp) = sp {
                                    ev.push("rollback_to".into());
                                    tx.rollback_to(sp)?;
                                    mine.clear();
                                    freed.clear();
                                }
                                if end == 2 {
                                    return Err(Error::Aborted);
                                }
                                Ok((mine, freed))
                            });
                            events.lock().unwrap().push(format!(
                                "T{t} {}: {ev:?}",
                                match &r {
                                    Ok(_) => "commit",
                                    Err(_) => "abort",
                                }
                            ));
                            match r {
                                Ok((mine, freed)) => {
                                    made.extend(mine);
                                    gone.extend(freed);
                                }
                                Err(
                                    Error::Aborted
                                    | Error::OutOfMemory { .. }
                                    | Error::LogFull { .. },
                                ) => {}
                                Err(e) => panic!("{who} thread {t}: {e:?}"),
                            }
                        }
                        (made, gone)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut live: HashSet<u64> = HashSet::new();
        let made: Vec<u64> = logs.iter().flat_map(|l| l.0.iter().copied()).collect();
        let gone: Vec<u64> = logs.iter().flat_map(|l| l.1.iter().copied()).collect();
        // A block may be allocated, freed and allocated again: count them.
        let mut count: std::collections::HashMap<u64, i64> = Default::default();
        for &b in &made {
            *count.entry(b).or_default() += 1;
        }
        for &b in &gone {
            *count.entry(b).or_default() -= 1;
        }
        for (&b, &n) in &count {
            assert!(
                (0..=1).contains(&n),
                "{who}: block {b} allocated {n} times over"
            );
            if n == 1 {
                live.insert(b);
            }
        }
        {
            let bd = board.lock().unwrap().clone();
            for &b in &bd {
                let media = pool.read(PPtr::<u8>::from_offset(b)).is_ok();
                if media != live.contains(&b) {
                    eprintln!(
                        "DBG {who}: block {b} media allocated {media}, live {}",
                        live.contains(&b)
                    );
                    for e in events.lock().unwrap().iter() {
                        if e.contains(&b.to_string()) {
                            eprintln!("DBG   {e}");
                        }
                    }
                }
            }
        }
        let again = reopen(&pool);
        assert_eq!(
            again.alloc_stats(),
            pool.alloc_stats(),
            "{who}: heap after reopen"
        );
        for &b in &live {
            again
                .transaction(|tx| tx.free(PPtr::<u8>::from_offset(b)))
                .unwrap_or_else(|e| panic!("{who}: live block {b}: {e:?}"));
        }
        assert_eq!(
            again.alloc_stats().bytes_used,
            base,
            "{who}: left allocated"
        );
    }
}
