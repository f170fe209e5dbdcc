//! Several threads on one collection with no lock of the program's: each
//! operation locks its collection until the transaction ends, so the result
//! is exactly the committed transactions, whatever the interleaving. The
//! tests count; none depends on timing.

use std::collections::BTreeMap as Model;

use rewind::{Error as PoolError, Policy, Pool, PoolConfig};
use rewind_collections::{BTreeMap, Error, HashMap};

const THREADS: u64 = 8;
const EACH: u64 = 300;

fn pool(dir: &tempfile::TempDir, policy: Policy) -> Pool {
    let cfg = PoolConfig::default().policy(policy);
    let pool = Pool::create(dir.path().join("c.pool"), "concurrent", 64 << 20, &cfg).unwrap();
    // No outcome may hang on the machine's speed: a waiter is never failed
    // by the bound here, only served in turn (or told of a deadlock).
    pool.set_lock_timeout(std::time::Duration::MAX);
    pool
}

/// Eight threads inserting into one tree, some transactions rolled back,
/// and read-modify-writes of a shared counter key: the tree ends with
/// exactly the committed entries and a clean structure.
#[test]
fn eight_threads_on_one_btree_keep_exactly_the_committed_entries() {
    for policy in [Policy::Force, Policy::Redo] {
        let dir = tempfile::tempdir().unwrap();
        let pool = pool(&dir, policy);
        let map = pool.transaction(BTreeMap::<u64, u64>::create).unwrap();
        let committed: Vec<Vec<(u64, u64)>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let pool = &pool;
                    s.spawn(move || {
                        let mut mine = Vec::new();
                        for i in 0..EACH {
                            let k = 1 + t * EACH + i;
                            let abort = i % 7 == 3;
                            let r = pool.transaction(|tx| {
                                map.insert(tx, k, k * 10)?;
                                // The shared counter at key 0: a lost update
                                // would show as a wrong total.
                                let c = map.get_tx(tx, &0)?.unwrap_or(0);
                                map.insert(tx, 0, c + 1)?;
                                if abort {
                                    return Err(Error::from(PoolError::Aborted));
                                }
                                Ok(())
                            });
                            match r {
                                Ok(()) => mine.push((k, k * 10)),
                                Err(Error::Pool(PoolError::Aborted)) if abort => {}
                                Err(e) => panic!("{policy:?}: {e}"),
                            }
                        }
                        mine
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut model: Model<u64, u64> = committed.into_iter().flatten().collect();
        let n = model.len() as u64;
        model.insert(0, n);
        map.check_invariants(&pool).unwrap();
        let found: Model<u64, u64> = map.iter(&pool).unwrap().map(|e| e.unwrap()).collect();
        assert_eq!(found, model, "{policy:?}");
        assert_eq!(map.len(&pool).unwrap(), model.len() as u64);
    }
}

#[test]
fn eight_threads_on_one_hash_map_keep_exactly_the_committed_entries() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(&dir, Policy::Force);
    let map = pool.transaction(HashMap::<u64, u64>::create).unwrap();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let pool = &pool;
            s.spawn(move || {
                for i in 0..EACH {
                    let k = t * EACH + i;
                    pool.transaction(|tx| {
                        map.insert(tx, k, k + 1)?;
                        if i % 2 == 1 {
                            map.remove(tx, &(k - 1))?;
                        }
                        Ok::<_, Error>(())
                    })
                    .unwrap();
                }
            });
        }
    });
    map.check_invariants(&pool).unwrap();
    let found: Model<u64, u64> = map.iter(&pool).unwrap().map(|e| e.unwrap()).collect();
    let model: Model<u64, u64> = (0..THREADS * EACH)
        .filter(|k| k % 2 == 1)
        .map(|k| (k, k + 1))
        .collect();
    assert_eq!(found, model);
}

/// Readers outside transactions (`map.get(&pool, k)`, `len`, `to_vec`)
/// beside writers. Each writer transaction writes one key of a tree with
/// a value naming its transaction, inserts and removes churn keys (so
/// nodes split and merge under the readers) and pushes onto a vector the
/// index it pushes at; one in three rolls back, and its value is odd. A
/// reader must never see a value no commit wrote (an odd one), a torn
/// vector (an element that is not its index), or an error, however its
/// reads interleave with the writers' stores in place (under force and
/// no-force those come before the commit; under redo during its
/// write-back). Counted, not timed: each reader reads `EACH` rounds, and
/// the writers write `EACH` transactions each.
#[test]
fn readers_outside_transactions_see_only_whole_commits() {
    use rewind_collections::Vec as PVec;
    for policy in [
        Policy::Redo,
        Policy::Force,
        Policy::NoForce,
        Policy::RedoAsync,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let pool = pool(&dir, policy);
        let (map, vec) = pool
            .transaction(|tx| {
                let map = BTreeMap::<u64, u64>::create_with_fanout(tx, 4)?;
                for k in 0..64 {
                    map.insert(tx, k, 0)?;
                }
                Ok::<_, Error>((map, PVec::<u64>::create(tx)?))
            })
            .unwrap();
        std::thread::scope(|s| {
            for t in 0..2u64 {
                let pool = &pool;
                s.spawn(move || {
                    for i in 0..EACH {
                        let abort = i % 3 == 2;
                        let r = pool.transaction(|tx| {
                            let n = t * EACH + i;
                            map.insert(tx, n % 64, 2 * n + u64::from(abort))?;
                            map.insert(tx, 10_000 + n % 50, n)?;
                            if n.is_multiple_of(2) {
                                map.remove(tx, &(10_000 + (n + 25) % 50))?;
                            }
                            let len = vec.len_tx(tx)?;
                            vec.push(tx, len)?;
                            if abort {
                                return Err(Error::from(PoolError::Aborted));
                            }
                            Ok(())
                        });
                        match r {
                            Ok(()) | Err(Error::Pool(PoolError::Aborted)) => {}
                            Err(e) => panic!("{policy:?}: writer: {e}"),
                        }
                    }
                });
            }
            for _ in 0..2 {
                let pool = &pool;
                s.spawn(move || {
                    for _ in 0..EACH {
                        for k in 0..64 {
                            let v = map.get(pool, &k);
                            let v = v.unwrap_or_else(|e| panic!("{policy:?}: get: {e}"));
                            let v = v.unwrap_or_else(|| panic!("{policy:?}: key {k} missing"));
                            assert_eq!(v % 2, 0, "{policy:?}: a value no commit wrote");
                        }
                        let v = vec.to_vec(pool);
                        let v = v.unwrap_or_else(|e| panic!("{policy:?}: to_vec: {e}"));
                        for (i, &x) in v.iter().enumerate() {
                            assert_eq!(x, i as u64, "{policy:?}: a torn vector");
                        }
                        map.len(pool).unwrap();
                    }
                });
            }
        });
        map.check_invariants(&pool).unwrap();
        let v = vec.to_vec(&pool).unwrap();
        assert_eq!(v.len() as u64, 2 * (EACH - EACH / 3), "{policy:?}");
    }
}
