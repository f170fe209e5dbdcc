//! What a user met: scans through `&Pool` beside changes, `&Pool` reads
//! inside a transaction, and `clear` on a full pool.

use rewind::{LogVariant, Policy, Pool, PoolConfig};
use rewind_collections::{BTreeMap, Error, HashMap, List};

fn configs() -> [(LogVariant, Policy); 3] {
    [
        (LogVariant::Batch, Policy::Redo),
        (LogVariant::Batch, Policy::Force),
        (LogVariant::Optimized, Policy::NoForce),
    ]
}

/// Drains a scan that ran beside changes: every error it yields is
/// `Changed`.
fn ends_changed<T>(scan: impl IntoIterator<Item = Result<T, Error>>, what: &str) {
    for e in scan {
        if let Err(e) = e {
            assert!(matches!(e, Error::Changed { .. }), "{what}: {e:?}");
        }
    }
}

/// A hash map grown by inserts committed between the steps of a scan
/// (one thread): the scan meets a chain longer than the length it began
/// with, or a table the doubling freed. That is `Changed`, never
/// `Corrupt`; the map is whole.
#[test]
fn a_hash_scan_beside_inserts_ends_changed_not_corrupt() {
    for (variant, policy) in configs() {
        let cfg = PoolConfig::default().log(variant).policy(policy);
        let pool = Pool::create_sim("scan", 16 << 20, &cfg).unwrap();
        for n in [100u64, 1000, 3000] {
            let map = pool.transaction(HashMap::<u64, u64>::create).unwrap();
            pool.transaction(|tx| {
                for k in 0..n {
                    map.insert(tx, k, k)?;
                }
                Ok::<_, Error>(())
            })
            .unwrap();
            let mut next = 1_000_000 * n;
            let mut ended = None;
            for e in map.iter(&pool).unwrap() {
                match e {
                    Ok(_) => {
                        pool.transaction(|tx| map.insert(tx, next, next)).unwrap();
                        next += 1;
                    }
                    Err(e) => ended = Some(e),
                }
            }
            // (Every entry the scan yielded brought one more: it ends on an
            // error, or on the last bucket.)
            ends_changed(
                ended.map(Err::<(), _>),
                &format!("{variant:?} {policy:?} {n}"),
            );
            map.check_invariants(&pool).unwrap();
        }
    }
}

/// A B+-tree emptied by a commit while a scan through `&Pool` is on its
/// way: the scan's next leaf was freed (and maybe reused). It ends with
/// `Changed`, or yields entries; never `Corrupt`.
#[test]
fn a_btree_scan_beside_removals_ends_changed_not_corrupt() {
    for (variant, policy) in configs() {
        let cfg = PoolConfig::default().log(variant).policy(policy);
        let pool = Pool::create_sim("scan", 16 << 20, &cfg).unwrap();
        let map = pool
            .transaction(|tx| BTreeMap::<u64, u64>::create_with_fanout(tx, 8))
            .unwrap();
        pool.transaction(|tx| {
            for k in 0..2000 {
                map.insert(tx, k, k)?;
            }
            Ok::<_, Error>(())
        })
        .unwrap();
        let mut it = map.iter(&pool).unwrap();
        assert_eq!(it.next().unwrap().unwrap(), (0, 0));
        // Everything removed: the scan's next leaf is freed.
        pool.transaction(|tx| map.clear(tx)).unwrap();
        let rest: Vec<_> = it.collect();
        assert!(
            matches!(rest.last(), Some(Err(Error::Changed { .. }))),
            "{variant:?} {policy:?}: {:?}",
            rest.last()
        );
        ends_changed(rest, &format!("{variant:?} {policy:?}"));
        // The space reused by a new map, under a second scan.
        let mut it = map.iter(&pool).unwrap();
        pool.transaction(|tx| {
            for k in 0..2000 {
                map.insert(tx, k, k)?;
            }
            Ok::<_, Error>(())
        })
        .unwrap();
        assert!(
            it.next().is_none_or(|e| e.is_ok()),
            "an empty leaf, read first"
        );
        pool.transaction(|tx| map.clear(tx)).unwrap();
        let other = pool
            .transaction(|tx| BTreeMap::<u64, u64>::create_with_fanout(tx, 8))
            .unwrap();
        pool.transaction(|tx| {
            for k in 0..2000 {
                other.insert(tx, k, u64::MAX - k)?;
            }
            Ok::<_, Error>(())
        })
        .unwrap();
        ends_changed(it, &format!("{variant:?} {policy:?}"));
        map.check_invariants(&pool).unwrap();
        assert_eq!(map.len(&pool).unwrap(), 0);
        other.check_invariants(&pool).unwrap();
    }
}

/// A list whose nodes a commit freed while a scan through `&Pool` was on
/// its way: `Changed` or entries, never `Corrupt`.
#[test]
fn a_list_scan_beside_removals_ends_changed_not_corrupt() {
    for (variant, policy) in configs() {
        let cfg = PoolConfig::default().log(variant).policy(policy);
        let pool = Pool::create_sim("scan", 16 << 20, &cfg).unwrap();
        let list = pool.transaction(List::<u64>::create).unwrap();
        pool.transaction(|tx| {
            for k in 0..500 {
                list.push_back(tx, k)?;
            }
            Ok::<_, Error>(())
        })
        .unwrap();
        let mut it = list.iter(&pool).unwrap();
        assert_eq!(it.next().unwrap().unwrap(), 0);
        pool.transaction(|tx| {
            while list.pop_front(tx)?.is_some() {}
            for k in 0..500 {
                list.push_back(tx, u64::MAX - k)?;
            }
            Ok::<_, Error>(())
        })
        .unwrap();
        ends_changed(it, &format!("{variant:?} {policy:?}"));
        list.check_invariants(&pool).unwrap();
    }
}

/// Without a change, a scan's errors are what they were: a damaged map
/// is `Corrupt`, not `Changed`.
#[test]
fn a_scan_of_a_damaged_map_with_no_writer_is_corrupt() {
    let pool = Pool::create_sim("scan", 16 << 20, &PoolConfig::default()).unwrap();
    let map = pool.transaction(HashMap::<u64, u64>::create).unwrap();
    pool.transaction(|tx| {
        for k in 0..100 {
            map.insert(tx, k, k)?;
        }
        Ok::<_, Error>(())
    })
    .unwrap();
    // The stored length made smaller than the chains, by a write that
    // takes no lock (damage, as a stray write would do).
    let len_off = map.as_ptr().offset() + 8;
    let len: u64 = pool
        .read(rewind::PPtr::<u64>::from_offset(len_off))
        .unwrap();
    assert_eq!(len, 100, "the length word of the layout");
    pool.atomic_write(rewind::PPtr::<u64>::from_offset(len_off), &10)
        .unwrap();
    let errors: Vec<Error> = map.iter(&pool).unwrap().filter_map(|e| e.err()).collect();
    assert!(
        matches!(errors.as_slice(), [Error::Corrupt { .. }]),
        "{errors:?}"
    );
}

/// Inside a transaction, a read through `&Pool` would see that
/// transaction's stores under the undo policies and not under redo: it is
/// refused under every policy, and the `_tx` read answers.
#[test]
fn a_pool_read_inside_a_transaction_is_refused_under_every_policy() {
    for (variant, policy) in configs() {
        let cfg = PoolConfig::default().log(variant).policy(policy);
        let pool = Pool::create_sim("inside", 8 << 20, &cfg).unwrap();
        let map = pool.transaction(BTreeMap::<u64, u64>::create).unwrap();
        let r = pool.transaction(|tx| {
            map.insert(tx, 1, 1)?;
            let by_pool = map.get(&pool, &1);
            assert!(
                matches!(by_pool, Err(Error::Pool(rewind::Error::NestedTransaction))),
                "{variant:?} {policy:?}: {by_pool:?}"
            );
            assert!(matches!(
                map.len(&pool),
                Err(Error::Pool(rewind::Error::NestedTransaction))
            ));
            assert_eq!(map.get_tx(tx, &1)?, Some(1));
            Err::<(), _>(Error::Pool(rewind::Error::Aborted))
        });
        assert!(r.is_err());
        assert_eq!(map.get(&pool, &1).unwrap(), None, "rolled back");
    }
}

/// A map that filled the pool: `clear` allocates nothing (the first leaf
/// stays, emptied), so it never fails for want of memory. Its log holds a
/// free per node: where the log cannot grow (no free chunk) it may be
/// `LogFull`, with the map unchanged, until smaller transactions have
/// removed some entries; it then frees the map whole, and the space serves
/// the next inserts.
#[test]
fn clear_frees_a_map_that_filled_the_pool() {
    for (variant, policy) in configs() {
        let cfg = PoolConfig::default().log(variant).policy(policy);
        let pool = Pool::create_sim("full", 8 << 20, &cfg).unwrap();
        let map = pool.transaction(BTreeMap::<u64, u64>::create).unwrap();
        let mut n = 0u64;
        let full = loop {
            match pool.transaction(|tx| {
                for k in n..n + 100 {
                    map.insert(tx, k, k)?;
                }
                Ok::<_, Error>(())
            }) {
                Ok(()) => n += 100,
                Err(e) => break e,
            }
        };
        assert!(
            matches!(
                full,
                Error::Pool(rewind::Error::OutOfMemory { .. } | rewind::Error::LogFull { .. })
            ),
            "{variant:?} {policy:?}: {full:?}"
        );
        assert!(n >= 1000, "{variant:?} {policy:?}: only {n} entries");
        let mut left = n;
        loop {
            match pool.transaction(|tx| map.clear(tx)) {
                Ok(()) => break,
                Err(Error::Pool(rewind::Error::LogFull { .. })) => {
                    assert_eq!(
                        map.len(&pool).unwrap(),
                        left,
                        "a failed clear changes nothing"
                    );
                    // A sixteenth of the entries, 500 a transaction.
                    for _ in 0..n / 16 / 500 {
                        pool.transaction(|tx| {
                            for _ in 0..500 {
                                map.pop_first(tx)?;
                            }
                            Ok::<_, Error>(())
                        })
                        .unwrap_or_else(|e| panic!("{variant:?} {policy:?}: removal: {e}"));
                        left -= 500;
                    }
                    assert!(left >= n / 2, "{variant:?} {policy:?}: clear still refused");
                }
                Err(e) => panic!("{variant:?} {policy:?}: clear of {left}: {e}"),
            }
        }
        assert_eq!(map.len(&pool).unwrap(), 0);
        assert_eq!(map.iter(&pool).unwrap().count(), 0);
        map.check_invariants(&pool).unwrap();
        assert_eq!(map.blocks(&pool).unwrap().len(), 2, "header and one leaf");
        for at in (0..n / 2).step_by(100) {
            pool.transaction(|tx| {
                for k in at..at + 100 {
                    map.insert(tx, k, k)?;
                }
                Ok::<_, Error>(())
            })
            .unwrap_or_else(|e| panic!("{variant:?} {policy:?}: refill at {at}: {e}"));
        }
        map.check_invariants(&pool).unwrap();
    }
}
