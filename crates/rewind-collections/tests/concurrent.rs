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
