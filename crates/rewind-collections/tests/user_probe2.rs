//! A new user's programs with the collections (second round), written
//! from the README and `docs/collections.md`: scans through `&Pool` begun
//! inside a transaction that changes the collection as it goes, and
//! collections kept as values of other collections (maps in maps). Each
//! must give the documented answer or a typed error, never a panic, a
//! policy-dependent answer or a damaged collection.

use rewind::{Error as PoolError, LogVariant, Policy, Pool, PoolConfig};
use rewind_collections::{BTreeMap, Error, HashMap, List};

fn nested(r: Result<impl Sized, Error>) -> bool {
    matches!(r, Err(Error::Pool(PoolError::NestedTransaction)))
}

/// A loop that scans a map through `&Pool` and changes it in the same
/// transaction (`for e in map.iter(&pool)? { map.remove(tx, ..) }`) gave
/// answers that depended on the policy (found by this probe): under redo
/// the scan saw the committed state and went to the end; under force,
/// no-force and redo-async it saw the transaction's own stores and ended
/// with `Changed` after two entries ("a transaction changed it while it
/// read: scan in a transaction"), in a transaction. A scan begun inside a
/// transaction of its pool is now `NestedTransaction` under every policy,
/// as the one-answer reads are; the `_tx` scans are the way there (the
/// list gained `iter_tx` for it).
#[test]
fn a_scan_through_the_pool_inside_a_transaction_is_nested_under_every_policy() {
    for policy in Policy::ALL {
        let dir = tempfile::tempdir().unwrap();
        let cfg = PoolConfig::default().log(LogVariant::Batch).policy(policy);
        let p = Pool::create(dir.path().join("n.pool"), "n", 16 << 20, &cfg).unwrap();
        let (map, h, l) = p
            .transaction(|tx| {
                let map = BTreeMap::<u64, u64>::create_with_fanout(tx, 4)?;
                let h = HashMap::<u64, u64>::create(tx)?;
                let l = List::<u64>::create(tx)?;
                for k in 0..100 {
                    map.insert(tx, k, k)?;
                    h.insert(tx, k, k)?;
                    l.push_back(tx, k)?;
                }
                Ok::<_, Error>((map, h, l))
            })
            .unwrap();
        p.transaction(|tx| {
            map.remove(tx, &0)?; // the transaction has changed the map
            assert!(nested(map.iter(&p)), "{policy:?}: BTreeMap::iter");
            assert!(nested(map.range(&p, 10..20)), "{policy:?}: BTreeMap::range");
            assert!(nested(h.iter(&p)), "{policy:?}: HashMap::iter");
            assert!(nested(l.iter(&p)), "{policy:?}: List::iter");
            // The transaction's own scans: its writes included.
            let keys: Vec<u64> = map
                .iter_tx(tx)?
                .map(|e| e.map(|(k, _)| k))
                .collect::<Result<_, _>>()?;
            assert_eq!(keys, (1..100).collect::<Vec<_>>(), "{policy:?}");
            for k in keys.iter().filter(|k| *k % 2 == 0) {
                map.remove(tx, k)?;
            }
            let hk: Vec<(u64, u64)> = h.iter_tx(tx)?.collect::<Result<_, _>>()?;
            assert_eq!(hk.len(), 100);
            for (k, _) in hk.iter().filter(|(k, _)| k % 2 == 0) {
                h.remove(tx, k)?;
            }
            l.pop_front(tx)?;
            let lv: Vec<u64> = l.iter_tx(tx)?.rev().collect::<Result<_, _>>()?;
            assert_eq!(lv, (1..100).rev().collect::<Vec<_>>(), "{policy:?}");
            Ok::<_, Error>(())
        })
        .unwrap();
        // Outside the transaction the scans read the committed state.
        let odd: Vec<u64> = (0..100).filter(|k| k % 2 == 1).collect();
        let got: Vec<u64> = map.iter(&p).unwrap().map(|e| e.unwrap().0).collect();
        assert_eq!(got, odd, "{policy:?}");
        assert_eq!(map.len(&p).unwrap(), 50);
        assert_eq!(h.iter(&p).unwrap().count(), 50);
        assert_eq!(l.iter(&p).unwrap().count(), 99);
        map.check_invariants(&p).unwrap();
        h.check_invariants(&p).unwrap();
        l.check_invariants(&p).unwrap();
    }
}
