//! B+-tree scenarios: splits kept or undone on abort (by policy), wrong handles, a
//! full pool.

use rewind::{PPtr, Policy, Pool, PoolConfig};
use rewind_collections::{BTreeMap, Error, HashMap};

fn pool(dir: &tempfile::TempDir, size: u64) -> Pool {
    Pool::create(dir.path().join("t.pool"), "t", size, &PoolConfig::default()).unwrap()
}

fn aborted() -> Error {
    Error::from(rewind::Error::Aborted)
}

fn full_leaf(pool: &Pool) -> BTreeMap<u64, u64> {
    pool.transaction(|tx| {
        let map = BTreeMap::create_with_fanout(tx, 4)?;
        for k in 0..4 {
            map.insert(tx, k, k)?;
        }
        Ok::<_, Error>(map)
    })
    .unwrap()
}

/// Under the redo policies (the default) a split is part of the inserting
/// transaction (its commit group carries it, one fence in all): an aborted
/// insert leaves the tree as it was, split included. Under the undo
/// policies a split of committed nodes is a nested top action: it stays
/// when the insert that caused it aborts. Either way the tree is valid and
/// holds exactly the committed entries.
#[test]
fn split_of_clean_nodes_on_abort() {
    for policy in Policy::ALL {
        let dir = tempfile::tempdir().unwrap();
        let cfg = PoolConfig::default().policy(policy);
        let pool = Pool::create(dir.path().join("t.pool"), "t", 8 << 20, &cfg).unwrap();
        let map = full_leaf(&pool);
        assert_eq!(map.height(&pool).unwrap(), 1);
        let blocks = pool.alloc_stats().bytes_used;
        let r = pool.transaction(|tx| {
            map.insert(tx, 10, 10)?;
            assert_eq!(map.len_tx(tx)?, 5);
            Err::<(), _>(aborted())
        });
        assert!(matches!(r, Err(Error::Pool(rewind::Error::Aborted))));
        let redo = matches!(policy, Policy::Redo | Policy::RedoAsync);
        let height = if redo { 1 } else { 2 };
        assert_eq!(map.height(&pool).unwrap(), height, "{policy}");
        let grew = pool.alloc_stats().bytes_used > blocks;
        assert_eq!(grew, !redo, "{policy}: the split's leaf kept or freed");
        assert_eq!(map.len(&pool).unwrap(), 4);
        assert_eq!(map.get(&pool, &10).unwrap(), None);
        map.check_invariants(&pool).unwrap();
        let all: Vec<_> = map.iter(&pool).unwrap().map(Result::unwrap).collect();
        assert_eq!(all, [(0, 0), (1, 1), (2, 2), (3, 3)], "{policy}");
        pool.close().unwrap();
    }
}

/// A split of a node the transaction changed is part of the transaction
/// (a nested top action would be undone under it): it rolls back too.
#[test]
fn split_of_dirty_nodes_rolls_back() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(&dir, 8 << 20);
    let map = pool
        .transaction(|tx| BTreeMap::<u64, u64>::create_with_fanout(tx, 4))
        .unwrap();
    let r = pool.transaction(|tx| {
        for k in 0..40 {
            map.insert(tx, k, k)?;
        }
        assert_eq!(map.len_tx(tx)?, 40);
        Err::<(), _>(aborted())
    });
    assert!(r.is_err());
    assert_eq!(map.height(&pool).unwrap(), 1);
    assert!(map.is_empty(&pool).unwrap());
    map.check_invariants(&pool).unwrap();
}

/// Savepoints roll back inserts, splits included, and the tree goes on.
#[test]
fn rollback_to_savepoint() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(&dir, 8 << 20);
    let map = full_leaf(&pool);
    pool.transaction(|tx| {
        map.insert(tx, 100, 1)?;
        let sp = tx.savepoint()?;
        for k in 200..260 {
            map.insert(tx, k, k)?;
        }
        tx.rollback_to(sp)?;
        map.insert(tx, 101, 2)?;
        Ok::<_, Error>(())
    })
    .unwrap();
    map.check_invariants(&pool).unwrap();
    let keys: Vec<u64> = map.iter(&pool).unwrap().map(|e| e.unwrap().0).collect();
    assert_eq!(keys, [0, 1, 2, 3, 100, 101]);
}

#[test]
fn wrong_handles_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(&dir, 8 << 20);
    let map = full_leaf(&pool);
    let other = BTreeMap::<u64, u32>::from_ptr(map.as_ptr().cast());
    assert!(matches!(
        other.get(&pool, &1),
        Err(Error::TypeMismatch { part: "value", .. })
    ));
    let junk = pool.transaction(|tx| tx.alloc::<[u64; 8]>()).unwrap();
    let bogus = BTreeMap::<u64, u64>::from_ptr(junk.cast());
    assert!(matches!(bogus.len(&pool), Err(Error::WrongMagic { .. })));
    let null = BTreeMap::<u64, u64>::from_ptr(PPtr::null());
    assert!(null.len(&pool).is_err());
    let r = pool.transaction(|tx| BTreeMap::<u64, u64>::create_with_fanout(tx, 2));
    assert!(matches!(r, Err(Error::InvalidArgument { value: 2, .. })));
}

/// A header found right for its types through a transaction is not
/// checked again for them until the pool frees a block: a handle of other
/// types is still refused, in the next transaction and in the same one.
#[test]
fn type_checks_remembered_per_handle_type() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(&dir, 8 << 20);
    let map = full_leaf(&pool);
    let other = BTreeMap::<u64, u32>::from_ptr(map.as_ptr().cast());
    for _ in 0..2 {
        pool.transaction(|tx| map.insert(tx, 7, 7).map(drop))
            .unwrap();
        let r = pool.transaction(|tx| other.insert(tx, 8, 8).map(drop));
        assert!(
            matches!(r, Err(Error::TypeMismatch { part: "value", .. })),
            "{r:?}"
        );
        let r = pool.transaction(|tx| {
            map.insert(tx, 9, 9)?;
            other.get_tx(tx, &9)
        });
        assert!(
            matches!(r, Err(Error::TypeMismatch { part: "value", .. })),
            "{r:?}"
        );
    }
    assert_eq!(map.len(&pool).unwrap(), 5);
}

/// A header checked by a transaction that then aborted: its block goes
/// back to the allocator, and a map of other types created in it later is
/// not taken for the first one by a handle of the first one's types
/// (the remembered check ends with the allocation). B+-tree and hash map.
#[test]
fn a_check_remembered_in_an_aborted_transaction_ends_with_its_block() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(&dir, 16 << 20);
    macro_rules! reused_block {
        ($map:ident, $value:expr) => {{
            let mut off = 0;
            let r = pool.transaction(|tx| {
                let m = $map::<u64, u64>::create(tx)?;
                off = m.as_ptr().offset();
                m.len_tx(tx)?;
                Err::<(), Error>(aborted())
            });
            assert!(r.is_err());
            let real = pool
                .transaction(|tx| {
                    let m = $map::create(tx)?;
                    m.insert(tx, 7u64, $value)?;
                    Ok::<_, Error>(m)
                })
                .unwrap();
            assert_eq!(real.as_ptr().offset(), off, "the block is handed out again");
            let wrong = $map::<u64, u64>::from_ptr(PPtr::from_offset(off));
            for r in [
                pool.transaction(|tx| wrong.get_tx(tx, &7).map(drop)),
                pool.transaction(|tx| wrong.insert(tx, 8, 8).map(drop)),
            ] {
                assert!(matches!(r, Err(Error::TypeMismatch { .. })), "{r:?}");
            }
            real.check_invariants(&pool).unwrap();
            assert_eq!(real.get(&pool, &7).unwrap(), Some($value));
        }};
    }
    reused_block!(BTreeMap, [7u8; 200]);
    reused_block!(HashMap, [7u8; 64]);
}

/// Filling the pool gives an error, not a panic, and the tree stays whole.
#[test]
fn full_pool_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(&dir, 2 << 20);
    let map = pool
        .transaction(BTreeMap::<u64, [u64; 16]>::create)
        .unwrap();
    let mut inserted = 0u64;
    let err = loop {
        let r = pool.transaction(|tx| {
            for k in inserted..inserted + 100 {
                map.insert(tx, k, [k; 16])?;
            }
            Ok::<_, Error>(())
        });
        match r {
            Ok(()) => inserted += 100,
            Err(e) => break e,
        }
        assert!(inserted < 1_000_000, "a 2 MiB pool never filled");
    };
    assert!(
        matches!(
            err,
            Error::Pool(rewind::Error::OutOfMemory { .. } | rewind::Error::LogFull { .. })
        ),
        "{err}"
    );
    map.check_invariants(&pool).unwrap();
    assert_eq!(map.len(&pool).unwrap(), inserted);
    assert_eq!(
        map.get(&pool, &(inserted - 1)).unwrap(),
        Some([inserted - 1; 16])
    );
}

/// The case: a `BTreeMap<u64, u64>` reopened as
/// `BTreeMap<[u8; 8], f64>` has the same sizes but other types, and is a
/// `TypeMismatch` naming both, before anything is read or written.
#[test]
fn reopened_under_other_types_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pool");
    let pool = Pool::create(&path, "t", 8 << 20, &PoolConfig::default()).unwrap();
    let map = pool
        .transaction(|tx| {
            let map = BTreeMap::<u64, u64>::create(tx)?;
            map.insert(tx, 1, 2)?;
            let root = tx.root::<PPtr<BTreeMap<u64, u64>>>()?;
            tx.write(root, &map.as_ptr())?;
            Ok::<_, Error>(map)
        })
        .unwrap();
    pool.close().unwrap();
    let pool = Pool::open(&path, "t", &Default::default()).unwrap();
    let other = BTreeMap::<[u8; 8], f64>::from_ptr(map.as_ptr().cast());
    let e = other.get(&pool, &[0; 8]).unwrap_err();
    match &e {
        Error::TypeMismatch {
            part: "key",
            found,
            expected,
            ..
        } => {
            assert_eq!(found, "u64 (8 bytes, align 8)");
            assert_eq!(expected, "[u8; 8] (8 bytes, align 1)");
        }
        e => panic!("{e}"),
    }
    let wrong_value = BTreeMap::<u64, f64>::from_ptr(map.as_ptr().cast());
    let r = pool.transaction(|tx| wrong_value.insert(tx, 3, 1.5));
    assert!(
        matches!(&r, Err(Error::TypeMismatch { part: "value", found, expected, .. })
            if found.starts_with("u64") && expected.starts_with("f64")),
        "{r:?}"
    );
    // Nothing was written: the map is as it was.
    assert_eq!(
        map.iter(&pool)
            .unwrap()
            .map(Result::unwrap)
            .collect::<Vec<_>>(),
        [(1, 2)]
    );
}

/// A tree filled and emptied by removals gives its nodes back: it is one
/// empty leaf again, and the pool's allocated blocks are what they were
/// before the fill (`examples/space.rs` measures a million entries).
#[test]
fn emptied_tree_gives_its_space_back() {
    let pool = Pool::create_sim("space", 32 << 20, &PoolConfig::default()).unwrap();
    let allocated = |pool: &Pool| {
        rewind::alloc::allocated_blocks(pool.domain(), pool.layout())
            .unwrap()
            .len()
    };
    let map = pool.transaction(BTreeMap::<u64, [u8; 24]>::create).unwrap();
    let before = allocated(&pool);
    let n = 20_000u64;
    let key = |i: u64| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20;
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        pool.transaction(|tx| {
            for &i in chunk {
                map.insert(tx, key(i), [i as u8; 24])?;
            }
            Ok::<_, Error>(())
        })
        .unwrap();
    }
    assert!(map.height(&pool).unwrap() >= 3);
    let full = allocated(&pool);
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        pool.transaction(|tx| {
            for &i in chunk {
                map.remove(tx, &key(i))?;
            }
            Ok::<_, Error>(())
        })
        .unwrap();
    }
    assert!(map.is_empty(&pool).unwrap());
    assert_eq!(map.height(&pool).unwrap(), 1);
    map.check_invariants(&pool).unwrap();
    assert_eq!(map.blocks(&pool).unwrap().len(), 2, "header and one leaf");
    assert_eq!(allocated(&pool), before, "{full} blocks when full");
}

/// The hash map, the vector and the list check their types too.
#[test]
fn every_collection_checks_its_types() {
    use rewind_collections::{HashMap, List, Vec as PVec};
    let pool = Pool::create_sim("types", 4 << 20, &PoolConfig::default()).unwrap();
    let (h, v, l) = pool
        .transaction(|tx| {
            let h = HashMap::<u64, u32>::create(tx)?;
            let v = PVec::<u64>::create(tx)?;
            let l = List::<[u8; 4]>::create(tx)?;
            Ok::<_, Error>((h, v, l))
        })
        .unwrap();
    let mismatch = |r: Result<u64, Error>, want: &str| match r {
        Err(Error::TypeMismatch { found, .. }) => assert!(found.starts_with(want), "{found}"),
        r => panic!("{r:?}"),
    };
    mismatch(
        HashMap::<i64, u32>::from_ptr(h.as_ptr().cast()).len(&pool),
        "u64",
    );
    mismatch(
        HashMap::<u64, f32>::from_ptr(h.as_ptr().cast()).len(&pool),
        "u32",
    );
    mismatch(PVec::<f64>::from_ptr(v.as_ptr().cast()).len(&pool), "u64");
    mismatch(
        List::<u32>::from_ptr(l.as_ptr().cast()).len(&pool),
        "[u8; 4]",
    );
    assert_eq!(
        h.len(&pool).unwrap() + v.len(&pool).unwrap() + l.len(&pool).unwrap(),
        0
    );
}

/// A map in the layout of an earlier version (its header smaller than
/// today's) is `UnsupportedLayout` naming both layouts, not a misread.
#[test]
fn an_earlier_layout_is_a_typed_error() {
    use rewind_collections::HashMap;
    let pool = Pool::create_sim("old", 4 << 20, &PoolConfig::default()).unwrap();
    let old = |magic: &[u8; 8]| {
        pool.transaction(|tx| {
            let p = tx.alloc::<[u8; 48]>()?;
            let mut b = [0u8; 48];
            b[..8].copy_from_slice(magic);
            tx.write(p, &b)?;
            Ok::<_, rewind::Error>(p)
        })
        .unwrap()
    };
    let t = BTreeMap::<u64, u64>::from_ptr(old(b"RWBTREE1").cast());
    assert!(matches!(
        t.len(&pool),
        Err(Error::UnsupportedLayout {
            found: "RWBTREE1",
            expected: "RWBTREE2",
            ..
        })
    ));
    let h = HashMap::<u64, u64>::from_ptr(old(b"RWHASH01").cast());
    assert!(matches!(
        h.len(&pool),
        Err(Error::UnsupportedLayout {
            found: "RWHASH01",
            ..
        })
    ));
}

/// A scan through `&Pool` runs beside transactions: entries inserted ahead
/// of it while it runs are yielded, and the map outgrowing the length it
/// read at its start is no cycle (it was reported as `Corrupt`). Through a
/// transaction, which locks the map, the length is the bound still.
#[test]
fn a_scan_outside_transactions_sees_the_map_grow_ahead_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(&dir, 16 << 20);
    let map = pool
        .transaction(|tx| {
            let map = BTreeMap::<u64, u64>::create_with_fanout(tx, 4)?;
            for k in 0..10 {
                map.insert(tx, k, k)?;
            }
            Ok::<_, Error>(map)
        })
        .unwrap();
    let mut it = map.iter(&pool).unwrap();
    let mut seen = vec![it.next().unwrap().unwrap().0];
    // A thousand keys ahead of the scan, committed while it runs.
    for chunk in 0..10u64 {
        pool.transaction(|tx| {
            for k in 0..100 {
                map.insert(tx, 1_000 + chunk * 100 + k, k)?;
            }
            Ok::<_, Error>(())
        })
        .unwrap();
    }
    for e in it {
        seen.push(e.unwrap().0);
    }
    assert_eq!(seen.len(), 1_010);
    assert!(seen.windows(2).all(|w| w[0] < w[1]));
    map.check_invariants(&pool).unwrap();
}
