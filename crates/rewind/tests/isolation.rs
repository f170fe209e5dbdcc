//! Isolation: locks held until a transaction ends, deadlocks and waits past
//! the bound as typed errors that roll back, and no nested transaction of
//! one pool on one thread. Every test counts; none depends on timing (the
//! threads meet at barriers, and waits are observed through outcomes).

use std::sync::{Arc, Barrier};
use std::time::Duration;

use rewind::{Backend, Error, PPtr, Policy, Pool, PoolConfig};

fn pools() -> Vec<(Policy, Pool)> {
    Policy::ALL
        .iter()
        .map(|&p| {
            let cfg = PoolConfig::default().policy(p).backend(Backend::Sim);
            (p, Pool::create_sim("iso", 4 << 20, &cfg).unwrap())
        })
        .collect()
}

/// The reproduction of issue 17: the inner transaction used to commit and
/// then vanish with the outer one's abort.
#[test]
fn a_nested_transaction_is_refused_and_nothing_of_it_survives() {
    for (policy, pool) in pools() {
        let x: PPtr<u64> = pool.transaction(|tx| tx.root::<u64>()).unwrap();
        let r: Result<(), Error> = pool.transaction(|tx| {
            for _ in 0..9 {
                tx.write(x, &1)?;
            }
            pool.transaction(|tx| {
                let v = tx.read(x)?;
                tx.write(x, &(v + 10))
            })?;
            Err(Error::Aborted)
        });
        assert!(
            matches!(r, Err(Error::NestedTransaction)),
            "{policy:?}: {r:?}"
        );
        assert_eq!(pool.read(x).unwrap(), 0, "{policy:?}");
        // The refusal left the thread usable: a transaction after it runs.
        pool.transaction(|tx| tx.write(x, &5)).unwrap();
        assert_eq!(pool.read(x).unwrap(), 5);
        // An atomic write is a transaction of its own: refused inside one.
        let r = pool.transaction(|_| pool.atomic_write(x, &7));
        assert!(matches!(r, Err(Error::NestedTransaction)), "{r:?}");
        assert_eq!(pool.read(x).unwrap(), 5);
    }
}

#[test]
fn transactions_of_two_pools_nest() {
    let cfg = PoolConfig::default().backend(Backend::Sim);
    let a = Pool::create_sim("a", 4 << 20, &cfg).unwrap();
    let b = Pool::create_sim("b", 4 << 20, &cfg).unwrap();
    let pa: PPtr<u64> = a.transaction(|tx| tx.root()).unwrap();
    let pb: PPtr<u64> = b.transaction(|tx| tx.root()).unwrap();
    a.transaction(|ta| {
        ta.write(pa, &1)?;
        b.transaction(|tb| tb.write(pb, &2))
    })
    .unwrap();
    assert_eq!((a.read(pa).unwrap(), b.read(pb).unwrap()), (1, 2));
    // Inside a transaction of `a` and then of `b`, a transaction of
    // either is refused; a checkpoint of either (whose gate the thread
    // holds) runs; and once both end, the thread starts either again.
    let r: Result<(), Error> = a.transaction(|ta| {
        ta.write(pa, &3)?;
        b.transaction(|tb| {
            tb.write(pb, &4)?;
            a.checkpoint()?;
            b.checkpoint()?;
            let inner_a = a.transaction(|_| Ok::<_, Error>(()));
            let inner_b = b.transaction(|_| Ok::<_, Error>(()));
            assert!(
                matches!(inner_a, Err(Error::NestedTransaction)),
                "{inner_a:?}"
            );
            assert!(
                matches!(inner_b, Err(Error::NestedTransaction)),
                "{inner_b:?}"
            );
            Ok(())
        })
    });
    r.unwrap();
    assert_eq!((a.read(pa).unwrap(), b.read(pb).unwrap()), (3, 4));
    b.transaction(|tb| {
        a.transaction(|ta| ta.write(pa, &5))?;
        tb.write(pb, &6)
    })
    .unwrap();
    assert_eq!((a.read(pa).unwrap(), b.read(pb).unwrap()), (5, 6));
}

#[test]
fn locked_read_modify_writes_lose_no_increment() {
    const THREADS: u64 = 4;
    const EACH: u64 = 200;
    for (policy, pool) in pools() {
        pool.set_lock_timeout(Duration::MAX); // never times out: served in turn
        let counter: PPtr<u64> = pool.transaction(|tx| tx.root()).unwrap();
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    for _ in 0..EACH {
                        pool.transaction(|tx| {
                            tx.lock(counter)?;
                            let v = tx.read(counter)?;
                            tx.write(counter, &(v + 1))
                        })
                        .unwrap();
                    }
                });
            }
        });
        assert_eq!(pool.read(counter).unwrap(), THREADS * EACH, "{policy:?}");
    }
}

/// Two transactions that lock A then B and B then A: one of them is told
/// `Deadlock` at once (never a hang), rolls back, and its retry commits.
#[test]
fn a_crossed_pair_gets_a_deadlock_error_and_retries() {
    for (policy, pool) in pools() {
        pool.set_lock_timeout(Duration::MAX); // never times out: served in turn
        let (a, b): (PPtr<u64>, PPtr<u64>) = pool
            .transaction(|tx| Ok::<_, Error>((tx.alloc::<u64>()?, tx.alloc::<u64>()?)))
            .unwrap();
        let both_hold_one = Barrier::new(2);
        let run = |first: PPtr<u64>, second: PPtr<u64>| {
            let mut deadlocks = 0;
            let mut tries = 0;
            loop {
                tries += 1;
                let r = pool.transaction(|tx| {
                    tx.lock(first)?;
                    let v = tx.read(first)?;
                    tx.write(first, &(v + 1))?;
                    if tries == 1 {
                        both_hold_one.wait();
                    }
                    tx.lock(second)?;
                    let w = tx.read(second)?;
                    tx.write(second, &(w + 1))
                });
                match r {
                    Ok(()) => return deadlocks,
                    Err(Error::Deadlock { .. }) => deadlocks += 1,
                    Err(e) => panic!("{policy:?}: {e}"),
                }
            }
        };
        let deadlocks: usize = std::thread::scope(|s| {
            let run = &run;
            let t1 = s.spawn(move || run(a, b));
            let t2 = s.spawn(move || run(b, a));
            t1.join().unwrap() + t2.join().unwrap()
        });
        assert_eq!(deadlocks, 1, "{policy:?}");
        // Both committed once; the rolled-back attempt left nothing.
        assert_eq!(
            (pool.read(a).unwrap(), pool.read(b).unwrap()),
            (2, 2),
            "{policy:?}"
        );
    }
}

/// A holder that does not end its transaction makes a waiter fail with
/// `LockTimeout`, and the waiter's writes are rolled back.
#[test]
fn a_wait_past_the_bound_is_an_error_and_rolls_back() {
    for (policy, pool) in pools() {
        let (held, other): (PPtr<u64>, PPtr<u64>) = pool
            .transaction(|tx| Ok::<_, Error>((tx.alloc::<u64>()?, tx.alloc::<u64>()?)))
            .unwrap();
        pool.set_lock_timeout(Duration::ZERO);
        let locked = Barrier::new(2);
        let tried = Barrier::new(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                pool.transaction(|tx| {
                    tx.lock(held)?;
                    locked.wait();
                    tried.wait(); // holds the lock until the other has failed
                    tx.write(held, &1)
                })
                .unwrap();
            });
            locked.wait();
            let r = pool.transaction(|tx| {
                tx.write(other, &9)?;
                let e = tx.lock_shared(held);
                // Doomed: later calls fail the same way.
                assert!(matches!(
                    tx.write(other, &10),
                    Err(Error::LockTimeout { .. })
                ));
                e
            });
            tried.wait();
            assert!(
                matches!(r, Err(Error::LockTimeout { .. })),
                "{policy:?}: {r:?}"
            );
        });
        assert_eq!(pool.read(held).unwrap(), 1, "{policy:?}");
        assert_eq!(pool.read(other).unwrap(), 0, "{policy:?}: rolled back");
    }
}

/// Locks end with the transaction whichever way it ends: commit, abort,
/// or a panic in the closure.
#[test]
fn locks_are_released_by_commit_abort_and_panic() {
    let cfg = PoolConfig::default().backend(Backend::Sim);
    let pool = Arc::new(Pool::create_sim("rel", 4 << 20, &cfg).unwrap());
    let p: PPtr<u64> = pool.transaction(|tx| tx.root()).unwrap();
    pool.set_lock_timeout(Duration::ZERO); // any leftover lock fails the next take
    pool.transaction(|tx| tx.lock(p)).unwrap();
    let _ = pool.transaction(|tx| {
        tx.lock(p)?;
        Err::<(), _>(Error::Aborted)
    });
    let p2 = pool.clone();
    let panicked = std::thread::spawn(move || {
        let _ = p2.transaction(|tx| {
            tx.lock(p)?;
            panic!("on purpose");
            #[allow(unreachable_code)]
            Ok::<(), Error>(())
        });
    })
    .join();
    assert!(panicked.is_err());
    let other = std::thread::spawn(move || pool.transaction(|tx| tx.lock(p)));
    other.join().unwrap().unwrap();
}

#[test]
fn shared_locks_are_held_together_and_upgrade() {
    let cfg = PoolConfig::default().backend(Backend::Sim);
    let pool = Pool::create_sim("sh", 4 << 20, &cfg).unwrap();
    let p: PPtr<u64> = pool.transaction(|tx| tx.root()).unwrap();
    pool.set_lock_timeout(Duration::ZERO);
    let both = Barrier::new(2);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                pool.transaction(|tx| {
                    tx.lock_shared(p)?;
                    both.wait(); // both hold it shared at once
                    both.wait();
                    Ok::<_, Error>(())
                })
                .unwrap()
            });
        }
    });
    pool.transaction(|tx| {
        tx.lock_shared(p)?;
        tx.lock(p)?; // sole reader: upgraded
        tx.write(p, &3)
    })
    .unwrap();
    assert_eq!(pool.read(p).unwrap(), 3);
    let r = pool.transaction(|tx| tx.lock(PPtr::<u64>::null()));
    assert!(matches!(r, Err(Error::NullPointer { .. })), "{r:?}");
}

/// A transaction that holds a lock shared, alone, and asks for it
/// exclusively is upgraded even while another transaction waits in line
/// for it (found by a user: the upgrade waited for the request in line,
/// which waited for it, and was refused as a deadlock; four threads doing
/// `get_tx` then `insert` on one map met it on a third of their
/// transactions). The other one gets the lock once the first ends.
#[test]
fn a_sole_shared_holder_upgrades_past_a_waiting_writer() {
    let pool = Pool::create_sim("up", 4 << 20, &PoolConfig::default()).unwrap();
    pool.set_lock_timeout(Duration::MAX); // waits end by the holder, never the clock
    let x: PPtr<u64> = pool.transaction(|tx| tx.root()).unwrap();
    let waits = pool.counters().lock_waits;
    let held = Barrier::new(2);
    std::thread::scope(|s| {
        let first = s.spawn(|| {
            pool.transaction(|tx| {
                tx.lock_shared(x)?;
                held.wait();
                // Until the other transaction is in line (its request
                // counted as a wait), whatever the machine's speed.
                while pool.counters().lock_waits == waits {
                    std::thread::yield_now();
                }
                tx.lock(x)?; // the upgrade
                let v = tx.read(x)?;
                tx.write(x, &(v + 1))
            })
        });
        held.wait();
        let second = pool.transaction(|tx| {
            tx.lock(x)?;
            let v = tx.read(x)?;
            tx.write(x, &(v + 10))
        });
        assert!(second.is_ok(), "{second:?}");
        let first = first.join().unwrap();
        assert!(first.is_ok(), "the upgrade: {first:?}");
    });
    assert_eq!(pool.read(x).unwrap(), 11);
}

#[test]
fn a_write_watch_of_another_pool_says_written() {
    // A watch holds one pool's counts of exclusive holds; asked of another
    // pool, it was compared with that pool's counts: a writer there that
    // brought them to the same number (one hold each) went unseen, and a
    // reader took bytes it was changing as unchanged.
    for (policy, a) in pools() {
        let b = Pool::create_sim("iso", 4 << 20, &PoolConfig::default().policy(policy)).unwrap();
        let xa = a.transaction(|tx| tx.root::<u64>()).unwrap();
        let xb = b.transaction(|tx| tx.root::<u64>()).unwrap();
        assert_eq!(xa.offset(), xb.offset(), "the same key in both");
        a.transaction(|tx| {
            tx.lock(xa)?;
            tx.write(xa, &1)
        })
        .unwrap();
        let w = a.write_watch(xa.offset());
        assert!(!a.written_since(w), "{policy:?}");
        b.transaction(|tx| {
            tx.lock(xb)?;
            tx.write(xb, &1)
        })
        .unwrap();
        assert!(
            b.written_since(w),
            "{policy:?}: a watch of pool a asked of pool b"
        );
        assert!(!a.written_since(w), "{policy:?}: pool a was not written");
    }
}
