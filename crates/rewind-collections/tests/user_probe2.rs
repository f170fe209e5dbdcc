//! A new user's programs with the collections (second round), written
//! from the README and `docs/collections.md`: scans through `&Pool` begun
//! inside a transaction that changes the collection as it goes, and
//! collections kept as values of other collections (maps in maps). Each
//! must give the documented answer or a typed error, never a panic, a
//! policy-dependent answer or a damaged collection.

mod common;

use rewind::{Error as PoolError, LogVariant, OpenOptions, PPtr, Policy, Pool, PoolConfig};
use rewind_collections::{BTreeMap, Blob, Error, HashMap, List, Vec as PVec};

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

/// Users and their maps: the outer map's values are the inner maps.
type Users = BTreeMap<String, PPtr<BTreeMap<u64, u64>>>;

/// Collections as values of other collections, as `docs/collections.md`
/// says a handle's `as_ptr()` may be stored "in any other persistent
/// object": a map of maps, a hash map of lists, a map of blobs (empty
/// ones too), a vector of hash maps; kept across a reopen, the types
/// checked (a map of other inner types is `TypeMismatch` naming both),
/// and destroyed with nothing leaked. Found by this probe: no pointer to a
/// collection was a `Stored` type, so none of these compiled (a program
/// had to store `as_ptr().offset()` as a bare `u64`, which no type check
/// covers).
#[test]
fn collections_are_values_of_collections() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nest.pool");
    let p = Pool::create(&path, "nest", 16 << 20, &PoolConfig::default()).unwrap();
    let before = common::allocated(&p);
    let users = p
        .transaction(|tx| {
            let users = Users::create(tx)?;
            let root = tx.root::<PPtr<Users>>()?;
            tx.write(root, &users.as_ptr())?;
            for u in 0..20u64 {
                let inner = BTreeMap::<u64, u64>::create(tx)?;
                for k in 0..u * 3 {
                    inner.insert(tx, k, u * k)?;
                }
                users.insert(tx, format!("user-{u:02}"), inner.as_ptr())?;
            }
            Ok::<_, Error>(users)
        })
        .unwrap();
    let (lists, blobs, maps) = p
        .transaction(|tx| {
            let lists = HashMap::<u64, PPtr<List<u32>>>::create(tx)?;
            let blobs = BTreeMap::<u64, PPtr<Blob>>::create(tx)?;
            let maps = PVec::<PPtr<HashMap<u64, u64>>>::create(tx)?;
            for i in 0..8u64 {
                let l = List::<u32>::create(tx)?;
                for j in 0..i as u32 {
                    l.push_back(tx, j)?;
                }
                lists.insert(tx, i, l.as_ptr())?;
                let b = Blob::create_from(tx, &vec![i as u8; i as usize * 100])?;
                blobs.insert(tx, i, b.as_ptr())?;
                let h = HashMap::<u64, u64>::create(tx)?;
                h.insert(tx, i, i * i)?;
                maps.push(tx, h.as_ptr())?;
            }
            Ok::<_, Error>((lists, blobs, maps))
        })
        .unwrap();
    p.close().unwrap();

    let p = Pool::open(&path, "nest", &OpenOptions::default()).unwrap();
    let made = users;
    let users = Users::from_ptr(p.read(p.root::<PPtr<Users>>().unwrap().unwrap()).unwrap());
    assert_eq!(users.as_ptr().offset(), made.as_ptr().offset());
    assert_eq!(users.len(&p).unwrap(), 20);
    for e in users.iter(&p).unwrap() {
        let (name, inner) = e.unwrap();
        let u: u64 = name["user-".len()..].parse().unwrap();
        let inner = BTreeMap::from_ptr(inner);
        assert_eq!(inner.len(&p).unwrap(), u * 3, "{name}");
        assert_eq!(
            inner.last_key_value(&p).unwrap(),
            u.checked_sub(1).map(|_| (u * 3 - 1, u * (u * 3 - 1)))
        );
        inner.check_invariants(&p).unwrap();
    }
    for i in 0..8u64 {
        let l = List::from_ptr(lists.get(&p, &i).unwrap().unwrap());
        assert_eq!(l.iter(&p).unwrap().count() as u64, i);
        let b = Blob::from_ptr(blobs.get(&p, &i).unwrap().unwrap());
        assert_eq!(b.read(&p).unwrap(), vec![i as u8; i as usize * 100]);
        let h = HashMap::from_ptr(maps.get(&p, i).unwrap().unwrap());
        assert_eq!(h.get(&p, &i).unwrap(), Some(i * i));
    }
    // The inner types are part of the outer map's value type.
    let wrong = BTreeMap::<String, PPtr<BTreeMap<u64, i64>>>::from_ptr(users.as_ptr().cast());
    let e = wrong.get(&p, "user-01").unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::TypeMismatch { .. }), "{e:?}");
    assert!(msg.contains("PPtr<BTreeMap<u64, u64>>"), "{msg}");
    let bare = BTreeMap::<String, u64>::from_ptr(users.as_ptr().cast());
    assert!(matches!(
        bare.get(&p, "user-01"),
        Err(Error::TypeMismatch { .. })
    ));

    // Everything destroyed, inner collections first: no block left.
    p.transaction(|tx| {
        while let Some((_, inner)) = users.pop_first(tx)? {
            BTreeMap::from_ptr(inner).destroy(tx)?;
        }
        users.destroy(tx)?;
        for i in 0..8u64 {
            List::from_ptr(lists.remove(tx, &i)?.unwrap()).destroy(tx)?;
            Blob::from_ptr(blobs.remove(tx, &i)?.unwrap()).destroy(tx)?;
            HashMap::from_ptr(maps.pop(tx)?.unwrap()).destroy(tx)?;
        }
        lists.destroy(tx)?;
        blobs.destroy(tx)?;
        maps.destroy(tx)?;
        let root = tx.root::<PPtr<Users>>()?;
        Ok::<_, Error>(tx.write(root, &PPtr::null())?)
    })
    .unwrap();
    let mut after = common::allocated(&p);
    after.retain(|b| !before.contains(b));
    // The root object alone is new.
    assert!(after.len() <= 1, "leaked blocks: {after:?}");
}

/// A collection under a name of the pool's catalog: a pointer to it is a
/// typed named root (`rewind::Pointee`), found again after a reopen by
/// its name, and looked up with other types it is a type mismatch. None
/// of this compiled: a program kept the offset in a `PPtr<u64>` root,
/// which no type check covers.
#[test]
fn a_collection_is_a_named_root() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("named.pool");
    {
        let pool = Pool::create(&path, "named", 8 << 20, &PoolConfig::default()).unwrap();
        pool.transaction(|tx| {
            let accounts = BTreeMap::<String, u64>::create(tx)?;
            accounts.insert(tx, "alice".into(), 100)?;
            let root = tx.root_named::<PPtr<BTreeMap<String, u64>>>("accounts")?;
            tx.write(root, &accounts.as_ptr())?;
            let jobs = List::<u32>::create(tx)?;
            jobs.push_back(tx, 7)?;
            let root = tx.root_named::<PPtr<List<u32>>>("jobs")?;
            tx.write(root, &jobs.as_ptr())?;
            Ok::<_, Error>(())
        })
        .unwrap();
        pool.close().unwrap();
    }
    let pool = Pool::open(&path, "named", &OpenOptions::default()).unwrap();
    let root = (pool.root_named::<PPtr<BTreeMap<String, u64>>>("accounts"))
        .unwrap()
        .expect("the root made");
    let accounts = BTreeMap::from_ptr(pool.read(root).unwrap());
    assert_eq!(accounts.get(&pool, "alice").unwrap(), Some(100));
    let root = pool.root_named::<PPtr<List<u32>>>("jobs").unwrap().unwrap();
    let jobs = List::from_ptr(pool.read(root).unwrap());
    assert_eq!(jobs.len(&pool).unwrap(), 1);
    let other = pool.root_named::<PPtr<BTreeMap<u64, u64>>>("accounts");
    assert!(
        matches!(other, Err(PoolError::TypeMismatch { .. })),
        "{other:?}"
    );
    let in_tx = pool.transaction(|tx| {
        tx.root_named::<PPtr<HashMap<u64, u64>>>("accounts")
            .map(|_| ())
    });
    assert!(
        matches!(in_tx, Err(PoolError::TypeMismatch { .. })),
        "{in_tx:?}"
    );
}
