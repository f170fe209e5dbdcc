//! A new user's programs with the collections, written from the README and
//! `docs/collections.md` only: the whole API of each collection called the
//! documented way, with the inputs a user tries first (empty and very long
//! keys, keys of every `Storable` type, empty and inverted ranges, indices
//! past the end, handles destroyed, of another type or from another pool).
//! Each must give the documented answer or a typed error, never a panic or
//! a wrong answer.

use std::collections::BTreeMap as StdMap;
use std::ops::Bound;

use rewind::{OpenOptions, PPtr, Pool, PoolConfig};
use rewind_collections::{BTreeMap, Blob, Error, FixedBytes, HashMap, List, Storable, Vec as PVec};

fn pool(dir: &std::path::Path, name: &str) -> Pool {
    Pool::create(dir.join(name), "probe", 16 << 20, &PoolConfig::default()).unwrap()
}

fn new_map<K: Storable, V: Storable>(p: &Pool) -> BTreeMap<K, V>
where
    K::Ref: Ord,
{
    p.transaction(|tx| BTreeMap::<K, V>::create(tx)).unwrap()
}

/// A map of `K` keys filled with `keys` (values their index), compared
/// against std through every read.
fn check_keys<K>(p: &Pool, keys: &[K])
where
    K: Storable + Ord + Clone + std::fmt::Debug + std::borrow::Borrow<K::Ref>,
    K::Ref: Ord,
{
    let map = new_map::<K, u64>(p);
    let mut model = StdMap::new();
    for (i, k) in keys.iter().enumerate() {
        let old = p
            .transaction(|tx| map.insert(tx, k.clone(), i as u64))
            .unwrap();
        assert_eq!(old, model.insert(k.clone(), i as u64), "{k:?}");
    }
    assert_eq!(map.len(p).unwrap(), model.len() as u64);
    let got: Vec<(K, u64)> = map.iter(p).unwrap().map(|e| e.unwrap()).collect();
    let want: Vec<(K, u64)> = model.iter().map(|(k, v)| (k.clone(), *v)).collect();
    assert_eq!(got, want);
    let rev: Vec<(K, u64)> = map.iter(p).unwrap().rev().map(|e| e.unwrap()).collect();
    assert_eq!(rev, want.iter().rev().cloned().collect::<Vec<_>>());
    for (k, v) in &model {
        assert_eq!(map.get(p, k.borrow()).unwrap(), Some(*v), "{k:?}");
    }
    map.check_invariants(p).unwrap();
    // Remove every other key, then the rest.
    for (i, k) in model.keys().enumerate() {
        if i % 2 == 0 {
            let v = p.transaction(|tx| map.remove(tx, k.borrow())).unwrap();
            assert!(v.is_some(), "{k:?}");
        }
    }
    map.check_invariants(p).unwrap();
    p.transaction(|tx| map.clear(tx)).unwrap();
    assert!(map.is_empty(p).unwrap());
    assert_eq!(map.iter(p).unwrap().count(), 0);
    p.transaction(|tx| map.destroy(tx)).unwrap();
}

#[test]
fn keys_of_every_storable_type_order_as_std() {
    let dir = tempfile::tempdir().unwrap();
    let p = pool(dir.path(), "k.pool");
    check_keys::<u8>(&p, &(0..=255).rev().collect::<Vec<u8>>());
    check_keys::<i8>(&p, &(-128..=127).collect::<Vec<i8>>());
    check_keys::<i16>(&p, &[i16::MIN, -1, 0, 1, i16::MAX, -300, 300]);
    check_keys::<i32>(&p, &[i32::MIN, -1, 0, 1, i32::MAX]);
    let i64s: Vec<i64> = (0..300).map(|i| (i - 150) * 1_000_000_007).collect();
    check_keys::<i64>(&p, &i64s);
    check_keys::<i128>(&p, &[i128::MIN, -1, 0, 1, i128::MAX]);
    check_keys::<u128>(&p, &[0, 1, u128::MAX, 1 << 64, (1 << 64) - 1]);
    check_keys::<isize>(&p, &[isize::MIN, -5, 0, 5, isize::MAX]);
    check_keys::<usize>(&p, &[0, 5, usize::MAX]);
    check_keys::<u64>(
        &p,
        &(0..500u64)
            .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .collect::<Vec<_>>(),
    );
    check_keys::<[u8; 3]>(&p, &[[0, 0, 0], [255, 0, 0], [0, 0, 255], [1, 2, 3]]);
    check_keys::<[u64; 2]>(&p, &[[0, 1], [1, 0], [u64::MAX, 0], [0, u64::MAX]]);
    check_keys::<FixedBytes<8>>(
        &p,
        &["", "a", "ab", "abc", "b", "zzzzzzzz", "\0", "\0\0"]
            .iter()
            .map(|s| FixedBytes::new(s).unwrap())
            .collect::<Vec<_>>(),
    );
    check_keys::<FixedBytes<0>>(&p, &[FixedBytes::new("").unwrap()]);
    let mut strings: Vec<String> = vec![
        String::new(),
        "a".into(),
        "\0".into(),
        "é".into(),
        "x".repeat(27),
        "x".repeat(28),
        "x".repeat(29),
        "x".repeat(35),
        "x".repeat(36),
        "x".repeat(37),
        "x".repeat(100_000),
    ];
    for i in 0..60 {
        strings.push(format!("{}{i:03}", "p".repeat(40)));
    }
    check_keys::<String>(&p, &strings);
    let bytes: Vec<Vec<u8>> = strings
        .iter()
        .map(|s| s.clone().into_bytes())
        .chain([vec![0xff; 40], vec![0xff; 36], vec![0, 0xff]])
        .collect();
    check_keys::<Vec<u8>>(&p, &bytes);
}

#[test]
fn empty_and_very_long_keys_and_values_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let p = pool(dir.path(), "l.pool");
    let map = new_map::<String, Vec<u8>>(&p);
    let long_key = "k".repeat(1 << 20);
    let long_val = vec![7u8; 3 << 20];
    p.transaction(|tx| {
        map.insert(tx, String::new(), Vec::new())?;
        map.insert(tx, long_key.clone(), long_val.clone())
    })
    .unwrap();
    assert_eq!(map.get(&p, "").unwrap(), Some(Vec::new()));
    assert_eq!(map.get(&p, &long_key).unwrap().as_ref(), Some(&long_val));
    assert!(map.contains_key(&p, "").unwrap());
    assert!(!map.contains_key(&p, &long_key[1..]).unwrap());
    assert_eq!(
        map.first_key_value(&p).unwrap(),
        Some((String::new(), Vec::new()))
    );
    assert_eq!(map.last_key_value(&p).unwrap().unwrap().0, long_key);
    // A value larger than the pool can hold is OutOfMemory (or LogFull),
    // the transaction rolls back, the map is as it was.
    let e = p
        .transaction(|tx| map.insert(tx, "big".into(), vec![1u8; 64 << 20]))
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Pool(rewind::Error::OutOfMemory { .. } | rewind::Error::LogFull { .. })
        ),
        "{e:?}"
    );
    assert_eq!(map.len(&p).unwrap(), 2);
    assert_eq!(map.get(&p, "big").unwrap(), None);
    map.check_invariants(&p).unwrap();
    // Replacing a long value with an empty one and back frees and
    // allocates its block.
    let blocks = p.alloc_stats().bytes_used;
    p.transaction(|tx| map.insert(tx, long_key.clone(), Vec::new()))
        .unwrap();
    assert!(p.alloc_stats().bytes_used < blocks);
    p.transaction(|tx| map.remove(tx, &long_key)).unwrap();
    p.transaction(|tx| map.remove(tx, "")).unwrap();
    assert!(map.is_empty(&p).unwrap());
}

#[test]
fn ranges_of_every_shape_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let p = pool(dir.path(), "r.pool");
    let map = p
        .transaction(|tx| BTreeMap::<u64, u64>::create_with_fanout(tx, 4))
        .unwrap();
    p.transaction(|tx| {
        for k in (0..200).step_by(2) {
            map.insert(tx, k, k * 10)?;
        }
        Ok::<_, Error>(())
    })
    .unwrap();
    let model: StdMap<u64, u64> = (0..200).step_by(2).map(|k| (k, k * 10)).collect();
    let bounds = |x: u64| [Bound::Included(x), Bound::Excluded(x), Bound::Unbounded];
    for a in [0u64, 1, 50, 51, 198, 199, 500, u64::MAX] {
        for b in [0u64, 1, 50, 51, 198, 199, 500, u64::MAX] {
            for lo in bounds(a) {
                for hi in bounds(b) {
                    let got: Result<Vec<(u64, u64)>, Error> =
                        map.range(&p, (lo, hi)).and_then(|it| it.collect());
                    // std panics on an inverted or empty-excluded range;
                    // here it is empty or an InvalidArgument.
                    let inverted = match (lo, hi) {
                        (Bound::Included(x), Bound::Included(y)) => x > y,
                        (Bound::Included(x) | Bound::Excluded(x), Bound::Excluded(y))
                        | (Bound::Excluded(x), Bound::Included(y)) => {
                            x > y
                                || x == y
                                    && matches!((lo, hi), (Bound::Excluded(_), Bound::Excluded(_)))
                        }
                        _ => false,
                    };
                    if inverted {
                        match got {
                            Ok(v) => assert!(v.is_empty(), "{lo:?}..{hi:?}: {v:?}"),
                            Err(e) => assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}"),
                        }
                        continue;
                    }
                    let want: Vec<(u64, u64)> =
                        model.range((lo, hi)).map(|(k, v)| (*k, *v)).collect();
                    assert_eq!(got.unwrap(), want, "{lo:?}..{hi:?}");
                    let back: Vec<(u64, u64)> = map
                        .range(&p, (lo, hi))
                        .unwrap()
                        .rev()
                        .map(|e| e.unwrap())
                        .collect();
                    assert_eq!(back, want.iter().rev().copied().collect::<Vec<_>>());
                }
            }
        }
    }
    // Both ends of one iterator meet once.
    let mut it = map.iter(&p).unwrap();
    let mut seen = 0;
    loop {
        let f = it.next();
        let b = it.next_back();
        seen += f.is_some() as usize + b.is_some() as usize;
        if f.is_none() && b.is_none() {
            break;
        }
    }
    assert_eq!(seen, 100);
    // String ranges.
    let smap = new_map::<String, u64>(&p);
    p.transaction(|tx| {
        for s in ["", "a", "ab", "b", "ba", "c"] {
            smap.insert(tx, s.into(), 1)?;
        }
        Ok::<_, Error>(())
    })
    .unwrap();
    let keys = |r: (Bound<&str>, Bound<&str>)| -> Vec<String> {
        smap.range(&p, r).unwrap().map(|e| e.unwrap().0).collect()
    };
    assert_eq!(
        keys((Bound::Included("a"), Bound::Excluded("b"))),
        ["a", "ab"]
    );
    assert_eq!(
        keys((Bound::Excluded(""), Bound::Included("b"))),
        ["a", "ab", "b"]
    );
    assert_eq!(
        keys((Bound::Unbounded, Bound::Excluded(""))),
        Vec::<String>::new()
    );
    let r: Result<Vec<_>, _> = smap
        .range(&p, (Bound::Included("c"), Bound::Included("a")))
        .and_then(|it| it.collect());
    match r {
        Ok(v) => assert!(v.is_empty()),
        Err(e) => assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}"),
    }
}

#[test]
fn the_std_like_calls_on_empty_and_full_maps() {
    let dir = tempfile::tempdir().unwrap();
    let p = pool(dir.path(), "s.pool");
    let map = new_map::<u64, [u64; 3]>(&p);
    assert_eq!(map.first_key_value(&p).unwrap(), None);
    assert_eq!(map.last_key_value(&p).unwrap(), None);
    p.transaction(|tx| {
        assert_eq!(map.pop_first(tx)?, None);
        assert_eq!(map.pop_last(tx)?, None);
        assert_eq!(map.remove(tx, &1)?, None);
        assert_eq!(map.update(tx, &1, |v| v[0] += 1)?, None);
        map.retain(tx, |_, _| false)?;
        map.clear(tx)?;
        assert_eq!(map.len_tx(tx)?, 0);
        assert_eq!(map.first_key_value_tx(tx)?, None);
        Ok::<_, Error>(())
    })
    .unwrap();
    p.transaction(|tx| {
        for k in 0..1000u64 {
            assert_eq!(map.insert(tx, k, [k; 3])?, None);
        }
        assert_eq!(map.insert(tx, 5, [0; 3])?, Some([5; 3]));
        assert_eq!(
            map.update(tx, &6, |v| {
                v[1] = 66;
                v[1]
            })?,
            Some(66)
        );
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(map.get(&p, &6).unwrap(), Some([6, 66, 6]));
    assert_eq!(map.get(&p, &5).unwrap(), Some([0; 3]));
    p.transaction(|tx| {
        assert_eq!(map.pop_first(tx)?, Some((0, [0; 3])));
        assert_eq!(map.pop_last(tx)?, Some((999, [999; 3])));
        map.retain(tx, |k, _| k % 3 == 0)
    })
    .unwrap();
    let keys: Vec<u64> = map.iter(&p).unwrap().map(|e| e.unwrap().0).collect();
    let want: Vec<u64> = (1..999).filter(|k| k % 3 == 0).collect();
    assert_eq!(keys, want);
    map.check_invariants(&p).unwrap();
    // A rolled-back transaction's changes are gone, its reads saw them.
    let e = p
        .transaction(|tx| {
            map.clear(tx)?;
            assert_eq!(map.len_tx(tx)?, 0);
            assert_eq!(map.iter_tx(tx)?.count(), 0);
            Err::<(), _>(Error::Pool(rewind::Error::Aborted))
        })
        .unwrap_err();
    assert!(matches!(e, Error::Pool(rewind::Error::Aborted)));
    assert_eq!(map.len(&p).unwrap(), want.len() as u64);
    // clear, then reuse; destroy, then the handle is refused.
    p.transaction(|tx| map.clear(tx)).unwrap();
    p.transaction(|tx| map.insert(tx, 1, [1; 3])).unwrap();
    assert_eq!(map.len(&p).unwrap(), 1);
    p.transaction(|tx| map.destroy(tx)).unwrap();
    assert!(map.len(&p).is_err());
    assert!(map.get(&p, &1).is_err());
    assert!(p.transaction(|tx| map.insert(tx, 2, [2; 3])).is_err());
    assert!(map
        .iter(&p)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .is_err());
}

#[test]
fn handles_of_another_type_kind_or_pool_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let a = pool(dir.path(), "a.pool");
    let b = pool(dir.path(), "b.pool");
    let map = new_map::<u64, u64>(&a);
    a.transaction(|tx| map.insert(tx, 1, 1)).unwrap();
    // Other types of the same size.
    let wrong = BTreeMap::<i64, u64>::from_ptr(map.as_ptr().cast());
    let e = wrong.get(&a, &1).unwrap_err();
    assert!(matches!(e, Error::TypeMismatch { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("i64") && msg.contains("u64"), "{msg}");
    let e = a.transaction(|tx| wrong.insert(tx, 1, 1)).unwrap_err();
    assert!(matches!(e, Error::TypeMismatch { .. }), "{e:?}");
    // Another kind of collection.
    let h = HashMap::<u64, u64>::from_ptr(map.as_ptr().cast());
    let e = h.get(&a, &1).unwrap_err();
    assert!(matches!(e, Error::WrongMagic { .. }), "{e:?}");
    let v = PVec::<u64>::from_ptr(map.as_ptr().cast());
    assert!(matches!(v.len(&a).unwrap_err(), Error::WrongMagic { .. }));
    let l = List::<u64>::from_ptr(map.as_ptr().cast());
    assert!(matches!(l.len(&a).unwrap_err(), Error::WrongMagic { .. }));
    let bl = Blob::from_ptr(map.as_ptr().cast());
    assert!(matches!(bl.len(&a).unwrap_err(), Error::WrongMagic { .. }));
    // Null and absurd handles.
    for off in [0u64, 8, 1 << 40, u64::MAX] {
        let m = BTreeMap::<u64, u64>::from_ptr(PPtr::from_offset(off));
        assert!(m.get(&a, &1).is_err());
        assert!(m
            .iter(&a)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .is_err());
        assert!(a.transaction(|tx| m.insert(tx, 1, 1)).is_err());
        assert!(a.transaction(|tx| m.destroy(tx)).is_err());
        let hm = HashMap::<u64, u64>::from_ptr(PPtr::from_offset(off));
        assert!(hm.get(&a, &1).is_err());
        let v = PVec::<u64>::from_ptr(PPtr::from_offset(off));
        assert!(v.get(&a, 0).is_err());
        let l = List::<u64>::from_ptr(PPtr::from_offset(off));
        assert!(l.front(&a).is_err());
        let bl = Blob::from_ptr(PPtr::from_offset(off));
        assert!(bl.read(&a).is_err());
    }
    // The handle used with another pool: an error, and that pool intact.
    b.transaction(|tx| {
        let r: PPtr<u64> = tx.root()?;
        tx.write(r, &9)
    })
    .unwrap();
    assert!(map.get(&b, &1).is_err());
    assert!(map.len(&b).is_err());
    assert!(b.transaction(|tx| map.insert(tx, 2, 2)).is_err());
    assert!(b.transaction(|tx| map.clear(tx)).is_err());
    assert!(b.transaction(|tx| map.destroy(tx)).is_err());
    assert_eq!(b.read(b.root::<u64>().unwrap().unwrap()).unwrap(), 9);
    assert_eq!(map.get(&a, &1).unwrap(), Some(1));
    // A map of pool `b` at the same offset as `a`'s (both made first):
    // same types, so a handle of one reads the other; the user's to keep
    // apart (a handle is an offset). Only check nothing breaks.
    let mb = new_map::<u64, u64>(&b);
    let _ = mb.get(&a, &1);
}

#[test]
fn vec_list_blob_hash_edges() {
    let dir = tempfile::tempdir().unwrap();
    let p = pool(dir.path(), "v.pool");
    // Vec.
    let v = p.transaction(PVec::<u64>::create).unwrap();
    assert_eq!(v.get(&p, 0).unwrap(), None);
    assert_eq!(v.get(&p, u64::MAX).unwrap(), None);
    let e = p.transaction(|tx| v.set(tx, 0, 1)).unwrap_err();
    assert!(matches!(e, Error::IndexOutOfBounds { .. }), "{e:?}");
    assert_eq!(p.transaction(|tx| v.pop(tx)).unwrap(), None);
    p.transaction(|tx| {
        for i in 0..100 {
            v.push(tx, i)?;
        }
        v.set(tx, 99, 7)
    })
    .unwrap();
    let e = p.transaction(|tx| v.set(tx, 100, 1)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::IndexOutOfBounds {
                index: 100,
                len: 100,
                ..
            }
        ),
        "{e:?}"
    );
    let e = p.transaction(|tx| v.set(tx, u64::MAX, 1)).unwrap_err();
    assert!(matches!(e, Error::IndexOutOfBounds { .. }), "{e:?}");
    assert_eq!(v.get(&p, 99).unwrap(), Some(7));
    assert_eq!(v.to_vec(&p).unwrap().len(), 100);
    p.transaction(|tx| v.clear(tx)).unwrap();
    assert!(v.is_empty(&p).unwrap());
    p.transaction(|tx| v.destroy(tx)).unwrap();
    assert!(v.len(&p).is_err());
    // List.
    let l = p.transaction(List::<u32>::create).unwrap();
    let other = p.transaction(List::<u32>::create).unwrap();
    assert_eq!(l.front(&p).unwrap(), None);
    assert_eq!(l.cursor(&p, 0).unwrap(), None);
    assert_eq!(p.transaction(|tx| l.pop_front(tx)).unwrap(), None);
    let e = p.transaction(|tx| l.remove(tx, 0)).unwrap_err();
    assert!(matches!(e, Error::IndexOutOfBounds { .. }), "{e:?}");
    p.transaction(|tx| {
        for i in 0..10 {
            l.push_back(tx, i)?;
            other.push_front(tx, i)?;
        }
        Ok::<_, Error>(())
    })
    .unwrap();
    let c = l.cursor(&p, 3).unwrap().unwrap();
    let oc = other.cursor(&p, 3).unwrap().unwrap();
    // A cursor at an element inside another list of the same type (its
    // neighbours link to it): refused, and neither list changes. (It was
    // unlinked from the other list through this one's header.)
    let e = p.transaction(|tx| l.remove_at(tx, oc)).unwrap_err();
    assert!(matches!(e, Error::InvalidCursor { .. }), "{e:?}");
    assert!(matches!(l.value(&p, oc), Err(Error::InvalidCursor { .. })));
    for end in [0, 9] {
        let oc = other.cursor(&p, end).unwrap().unwrap();
        let e = p.transaction(|tx| l.remove_at(tx, oc)).unwrap_err();
        assert!(matches!(e, Error::InvalidCursor { .. }), "{e:?}");
    }
    assert_eq!(l.len(&p).unwrap(), 10);
    assert_eq!(other.len(&p).unwrap(), 10);
    other.check_invariants(&p).unwrap();
    l.check_invariants(&p).unwrap();
    // Every cursor of the list itself is accepted.
    for i in 0..10 {
        let c = l.cursor(&p, i).unwrap().unwrap();
        assert_eq!(l.value(&p, c).unwrap(), i as u32);
    }
    assert_eq!(p.transaction(|tx| l.remove_at(tx, c)).unwrap(), 3);
    let e = p.transaction(|tx| l.remove_at(tx, c)).unwrap_err();
    assert!(matches!(e, Error::InvalidCursor { .. }), "{e:?}");
    assert!(l.value(&p, c).is_err());
    assert!(l.next(&p, c).is_err());
    let e = p.transaction(|tx| l.remove(tx, 9)).unwrap_err();
    assert!(matches!(e, Error::IndexOutOfBounds { .. }), "{e:?}");
    let all: Vec<u32> = l.iter(&p).unwrap().map(|e| e.unwrap()).collect();
    assert_eq!(all, [0, 1, 2, 4, 5, 6, 7, 8, 9]);
    l.check_invariants(&p).unwrap();
    // Blob.
    let b = p.transaction(Blob::create).unwrap();
    assert_eq!(b.read(&p).unwrap(), Vec::<u8>::new());
    let mut one = [0u8; 1];
    let e = b.read_at(&p, 0, &mut one).unwrap_err();
    assert!(matches!(e, Error::IndexOutOfBounds { .. }), "{e:?}");
    b.read_at(&p, 0, &mut []).unwrap();
    let e = p.transaction(|tx| b.write_at(tx, 1, b"x")).unwrap_err();
    assert!(matches!(e, Error::IndexOutOfBounds { .. }), "{e:?}");
    let e = p
        .transaction(|tx| b.write_at(tx, u64::MAX, b"x"))
        .unwrap_err();
    assert!(matches!(e, Error::IndexOutOfBounds { .. }), "{e:?}");
    p.transaction(|tx| b.append(tx, b"")).unwrap();
    p.transaction(|tx| b.append(tx, b"hello")).unwrap();
    let e = b.read_at(&p, u64::MAX, &mut one).unwrap_err();
    assert!(matches!(e, Error::IndexOutOfBounds { .. }), "{e:?}");
    p.transaction(|tx| b.truncate(tx, 100)).map_or_else(
        |e| assert!(matches!(e, Error::IndexOutOfBounds { .. }), "{e:?}"),
        |()| (),
    );
    assert_eq!(b.read(&p).unwrap(), b"hello");
    p.transaction(|tx| b.truncate(tx, 0)).unwrap();
    p.transaction(|tx| b.shrink_to_fit(tx)).unwrap();
    assert!(b.is_empty(&p).unwrap());
    let big = vec![3u8; 5 << 20];
    p.transaction(|tx| b.replace(tx, &big)).unwrap();
    assert_eq!(b.read(&p).unwrap(), big);
    let e = p
        .transaction(|tx| b.append(tx, &vec![0u8; 64 << 20]))
        .unwrap_err();
    assert!(matches!(e, Error::Pool(_)), "{e:?}");
    assert_eq!(b.len(&p).unwrap(), 5 << 20);
    // HashMap with FixedBytes keys, empty and full.
    let h = p
        .transaction(HashMap::<FixedBytes<16>, u64>::create)
        .unwrap();
    let k = |s: &str| FixedBytes::<16>::new(s).unwrap();
    assert!(matches!(
        FixedBytes::<16>::new("x".repeat(17)),
        Err(Error::TooLong {
            len: 17,
            max: 16,
            ..
        })
    ));
    p.transaction(|tx| {
        assert_eq!(h.insert(tx, k(""), 1)?, None);
        assert_eq!(h.insert(tx, k(""), 2)?, Some(1));
        assert_eq!(h.insert(tx, k(&"y".repeat(16)), 3)?, None);
        assert_eq!(h.remove(tx, &k("nope"))?, None);
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(h.get(&p, &k("")).unwrap(), Some(2));
    let mut entries = h.entries(&p).unwrap();
    entries.sort();
    assert_eq!(entries.len(), 2);
    h.check_invariants(&p).unwrap();
    p.transaction(|tx| h.destroy(tx)).unwrap();
    assert!(h.get(&p, &k("")).is_err());
}

#[test]
fn a_reopened_pool_keeps_every_collection() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("re.pool");
    let p = Pool::create(&path, "probe", 16 << 20, &PoolConfig::default()).unwrap();
    let (m, s) = p
        .transaction(|tx| {
            let m = BTreeMap::<u64, u64>::create(tx)?;
            let s = BTreeMap::<String, String>::create(tx)?;
            let r: PPtr<[PPtr<u8>; 2]> = tx.root_named("maps")?;
            tx.write(r, &[m.as_ptr().cast(), s.as_ptr().cast()])?;
            m.insert(tx, 1, 2)?;
            s.insert(tx, "k".repeat(50), "v".repeat(50))?;
            Ok::<_, Error>((m, s))
        })
        .unwrap();
    drop(p);
    let p = Pool::open(&path, "probe", &OpenOptions::default()).unwrap();
    let r = p.root_named::<[PPtr<u8>; 2]>("maps").unwrap().unwrap();
    let [a, b] = p.read(r).unwrap();
    assert_eq!(a.offset(), m.as_ptr().offset());
    let m2 = BTreeMap::<u64, u64>::from_ptr(a.cast());
    let s2 = BTreeMap::<String, String>::from_ptr(b.cast());
    assert_eq!(m2.get(&p, &1).unwrap(), Some(2));
    assert_eq!(s2.get(&p, &"k".repeat(50)).unwrap(), Some("v".repeat(50)));
    assert_eq!(s.len(&p).unwrap(), 1);
    // The String tree read as Vec<u8>: TypeMismatch naming both.
    let wrong = BTreeMap::<Vec<u8>, String>::from_ptr(b.cast());
    let e = wrong.get(&p, b"k").unwrap_err();
    assert!(matches!(e, Error::TypeMismatch { .. }), "{e:?}");
    assert!(
        e.to_string().contains("String") && e.to_string().contains("Vec<u8>"),
        "{e}"
    );
}

#[test]
fn zero_sized_and_huge_element_types() {
    let dir = tempfile::tempdir().unwrap();
    let p = pool(dir.path(), "zs.pool");
    // A set: values of no bytes.
    let set = new_map::<u64, [u8; 0]>(&p);
    p.transaction(|tx| {
        for k in 0..300 {
            set.insert(tx, k, [])?;
        }
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(set.len(&p).unwrap(), 300);
    assert_eq!(set.get(&p, &7).unwrap(), Some([]));
    set.check_invariants(&p).unwrap();
    // Keys of no bytes: one key.
    let unit = new_map::<[u8; 0], u64>(&p);
    p.transaction(|tx| {
        assert_eq!(unit.insert(tx, [], 1)?, None);
        assert_eq!(unit.insert(tx, [], 2)?, Some(1));
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(unit.len(&p).unwrap(), 1);
    assert_eq!(unit.iter(&p).unwrap().count(), 1);
    // A Vec, List and HashMap of zero-sized elements.
    let v = p.transaction(PVec::<[u8; 0]>::create).unwrap();
    p.transaction(|tx| {
        for _ in 0..10 {
            v.push(tx, [])?;
        }
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(v.len(&p).unwrap(), 10);
    assert_eq!(v.get(&p, 9).unwrap(), Some([]));
    assert_eq!(v.to_vec(&p).unwrap().len(), 10);
    assert_eq!(p.transaction(|tx| v.pop(tx)).unwrap(), Some([]));
    p.transaction(|tx| v.destroy(tx)).unwrap();
    let l = p.transaction(List::<[u8; 0]>::create).unwrap();
    p.transaction(|tx| l.push_back(tx, [])).unwrap();
    assert_eq!(l.front(&p).unwrap(), Some([]));
    let h = p.transaction(HashMap::<[u8; 0], [u8; 0]>::create).unwrap();
    p.transaction(|tx| h.insert(tx, [], [])).unwrap();
    assert_eq!(h.len(&p).unwrap(), 1);
    assert_eq!(h.iter(&p).unwrap().count(), 1);
    // Keys and values larger than a 64 KiB block: nodes of whole chunks.
    let big = new_map::<[u8; 40_000], [u8; 30_000]>(&p);
    p.transaction(|tx| {
        for i in 0..12u8 {
            big.insert(tx, [i; 40_000], [i; 30_000])?;
        }
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(big.get(&p, &[5; 40_000]).unwrap(), Some([5; 30_000]));
    big.check_invariants(&p).unwrap();
    p.transaction(|tx| big.destroy(tx)).unwrap();
    let fb = new_map::<FixedBytes<65_535>, u8>(&p);
    let long = FixedBytes::<65_535>::new(vec![b'z'; 65_535]).unwrap();
    p.transaction(|tx| fb.insert(tx, long, 1)).unwrap();
    assert_eq!(fb.get(&p, &long).unwrap(), Some(1));
    // Elements that do not fit the pool: an error, the vector as it was.
    let hv = p.transaction(PVec::<[u8; 1 << 20]>::create).unwrap();
    let r = p.transaction(|tx| {
        for _ in 0..64 {
            hv.push(tx, [1; 1 << 20])?;
        }
        Ok::<_, Error>(())
    });
    assert!(matches!(r, Err(Error::Pool(_))), "{r:?}");
    assert_eq!(hv.len(&p).unwrap(), 0);
}

#[test]
fn a_scan_outliving_its_tree_ends_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = pool(dir.path(), "sc.pool");
    let map = p
        .transaction(|tx| BTreeMap::<u64, u64>::create_with_fanout(tx, 4))
        .unwrap();
    p.transaction(|tx| {
        for k in 0..200 {
            map.insert(tx, k, k)?;
        }
        Ok::<_, Error>(())
    })
    .unwrap();
    let mut it = map.iter(&p).unwrap();
    assert_eq!(it.next().unwrap().unwrap(), (0, 0));
    p.transaction(|tx| map.destroy(tx)).unwrap();
    // The nodes are freed: the scan ends with an error or stops, never
    // yields a made-up entry or panics.
    let mut n = 0;
    for e in it.by_ref() {
        match e {
            Ok((k, v)) => assert_eq!(k, v),
            Err(_) => break,
        }
        n += 1;
        assert!(n < 200);
    }
    let mut back = map.iter(&p);
    if let Ok(it) = back.as_mut() {
        assert!(it.next().is_none_or(|e| e.is_err()));
    }
    // The same with a hash map and a list.
    let h = p.transaction(HashMap::<u64, u64>::create).unwrap();
    let l = p.transaction(List::<u64>::create).unwrap();
    p.transaction(|tx| {
        for k in 0..100 {
            h.insert(tx, k, k)?;
            l.push_back(tx, k)?;
        }
        Ok::<_, Error>(())
    })
    .unwrap();
    let mut hi = h.iter(&p).unwrap();
    let mut li = l.iter(&p).unwrap();
    hi.next().unwrap().unwrap();
    li.next().unwrap().unwrap();
    p.transaction(|tx| {
        h.destroy(tx)?;
        l.destroy(tx)
    })
    .unwrap();
    assert!(hi.take(200).all(|e| e.map_or(true, |(k, v)| k == v)));
    assert!(li.take(200).filter(|e| e.is_ok()).count() < 100);
}

/// A small seeded generator (no wall clock, no dependency).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Multi-byte characters placed across the 28-byte prefix and the 36-byte
/// inline bounds, with shared prefixes, so separators are cut near
/// character boundaries.
fn utf8_key(rng: &mut Rng) -> String {
    const PARTS: [&str; 8] = ["a", "é", "€", "𝄞", "z", "ß", "\u{7f}", "\u{80}"];
    let lead = ["", "x", "xx", "xxx"][rng.below(4) as usize];
    let mut s = format!("{lead}{}", "p".repeat(24 + rng.below(14) as usize));
    for _ in 0..rng.below(6) {
        s.push_str(PARTS[rng.below(8) as usize]);
    }
    s
}

#[test]
fn string_keys_with_multibyte_characters_at_every_bound_agree_with_std() {
    let cases: u64 = std::env::var("REWIND_PROBE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    for seed in 1..=cases {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("u.pool");
        let p = Pool::create(&path, "probe", 16 << 20, &PoolConfig::default()).unwrap();
        let map = p
            .transaction(|tx| BTreeMap::<String, String>::create_with_fanout(tx, 4))
            .unwrap();
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut model: StdMap<String, String> = StdMap::new();
        for step in 0..400 {
            let k = utf8_key(&mut rng);
            if rng.below(3) == 0 && !model.is_empty() {
                let victim = model
                    .keys()
                    .nth(rng.below(model.len() as u64) as usize)
                    .cloned()
                    .unwrap();
                let got = p.transaction(|tx| map.remove(tx, &victim)).unwrap();
                assert_eq!(got, model.remove(&victim), "seed {seed} step {step}");
            } else {
                let v = k.repeat(1 + rng.below(2) as usize);
                let got = p
                    .transaction(|tx| map.insert(tx, k.clone(), v.clone()))
                    .unwrap();
                assert_eq!(got, model.insert(k, v), "seed {seed} step {step}");
            }
        }
        map.check_invariants(&p).unwrap();
        let got: Vec<(String, String)> = map.iter(&p).unwrap().map(|e| e.unwrap()).collect();
        let want: Vec<(String, String)> = model.clone().into_iter().collect();
        assert_eq!(got, want, "seed {seed}");
        // Ranges bounded by keys cut inside their characters' bytes
        // (prefixes of stored keys at char boundaries).
        for k in model.keys().take(40) {
            let cut: String = k.chars().take(k.chars().count() / 2).collect();
            let lo = Bound::Included(cut.as_str());
            let got: Vec<String> = map
                .range(&p, (lo, Bound::Unbounded))
                .unwrap()
                .map(|e| e.unwrap().0)
                .collect();
            let want: Vec<String> = model
                .range::<str, _>((lo, Bound::Unbounded))
                .map(|(k, _)| k.clone())
                .collect();
            assert_eq!(got, want, "seed {seed} from {cut:?}");
        }
        drop(p);
        let p = Pool::open(&path, "probe", &OpenOptions::default()).unwrap();
        assert_eq!(map.len(&p).unwrap(), model.len() as u64);
        for (k, v) in &model {
            assert_eq!(map.get(&p, k).unwrap().as_ref(), Some(v), "seed {seed}");
        }
    }
}

/// A user's type of high alignment: slots, entries and nodes place it at
/// offsets that are not multiples of 64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, rewind::Pod, rewind::Zeroable)]
#[bytemuck(crate = "rewind::bytemuck")]
#[repr(C, align(64))]
struct Wide {
    words: [u64; 8],
}
impl rewind_collections::Stored for Wide {
    fn type_name() -> std::borrow::Cow<'static, str> {
        "probe::Wide".into()
    }
}

#[test]
fn values_and_keys_of_high_alignment_in_every_collection() {
    let dir = tempfile::tempdir().unwrap();
    let p = pool(dir.path(), "al.pool");
    let w = |i: u64| Wide { words: [i; 8] };
    let (m, k, h, v, l) = p
        .transaction(|tx| {
            let m = BTreeMap::<u8, Wide>::create(tx)?;
            let k = BTreeMap::<Wide, u8>::create(tx)?;
            let h = HashMap::<u8, Wide>::create(tx)?;
            let v = PVec::<Wide>::create(tx)?;
            let l = List::<Wide>::create(tx)?;
            for i in 0..100u8 {
                m.insert(tx, i, w(i.into()))?;
                k.insert(tx, w(i.into()), i)?;
                h.insert(tx, i, w(i.into()))?;
                v.push(tx, w(i.into()))?;
                l.push_back(tx, w(i.into()))?;
            }
            Ok::<_, Error>((m, k, h, v, l))
        })
        .unwrap();
    for i in 0..100u8 {
        assert_eq!(m.get(&p, &i).unwrap(), Some(w(i.into())));
        assert_eq!(k.get(&p, &w(i.into())).unwrap(), Some(i));
        assert_eq!(h.get(&p, &i).unwrap(), Some(w(i.into())));
        assert_eq!(v.get(&p, i.into()).unwrap(), Some(w(i.into())));
        assert_eq!(l.get(&p, i.into()).unwrap(), Some(w(i.into())));
    }
    let ks: Vec<Wide> = k.iter(&p).unwrap().map(|e| e.unwrap().0).collect();
    assert_eq!(ks, (0..100).map(w).collect::<Vec<_>>());
    p.transaction(|tx| {
        assert_eq!(m.update(tx, &3, |x| x.words[7] = 9)?, Some(()));
        assert_eq!(l.pop_front(tx)?, Some(w(0)));
        assert_eq!(v.pop(tx)?, Some(w(99)));
        assert_eq!(h.remove(tx, &5)?, Some(w(5)));
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(
        m.get(&p, &3).unwrap().unwrap().words,
        [3, 3, 3, 3, 3, 3, 3, 9]
    );
}

#[test]
fn an_insert_refused_for_space_leaves_nothing_behind_when_the_transaction_goes_on() {
    for policy in rewind::Policy::ALL {
        let dir = tempfile::tempdir().unwrap();
        let cfg = PoolConfig::default().policy(policy);
        let p = Pool::create(dir.path().join("oom.pool"), "probe", 16 << 20, &cfg).unwrap();
        let map = new_map::<String, Vec<u8>>(&p);
        p.transaction(|tx| map.insert(tx, "a".repeat(50), vec![1; 50]))
            .unwrap();
        let used = p.alloc_stats().bytes_used;
        let blocks = map.blocks(&p).unwrap();
        // The program ignores the error (OutOfMemory does not doom the
        // transaction) and commits the rest.
        p.transaction(|tx| {
            let e = map
                .insert(tx, "k".repeat(100), vec![0; 64 << 20])
                .unwrap_err();
            assert!(
                matches!(e, Error::Pool(rewind::Error::OutOfMemory { .. })),
                "{e:?}"
            );
            let e = map
                .insert(tx, "a".repeat(50), vec![0; 64 << 20])
                .unwrap_err();
            assert!(
                matches!(e, Error::Pool(rewind::Error::OutOfMemory { .. })),
                "{e:?}"
            );
            Ok::<_, Error>(())
        })
        .unwrap();
        assert_eq!(map.len(&p).unwrap(), 1, "{policy:?}");
        assert_eq!(map.get(&p, &"a".repeat(50)).unwrap(), Some(vec![1; 50]));
        assert_eq!(map.get(&p, &"k".repeat(100)).unwrap(), None);
        map.check_invariants(&p).unwrap();
        assert_eq!(map.blocks(&p).unwrap(), blocks, "{policy:?}");
        assert_eq!(
            p.alloc_stats().bytes_used,
            used,
            "{policy:?}: a block leaked"
        );
    }
}

/// Fills `map` in one transaction until an insert fails, commits what
/// went in, and checks the map holds exactly the inserts that returned Ok.
fn fill_until_full<K, V>(
    p: &Pool,
    map: BTreeMap<K, V>,
    key: impl Fn(u64) -> K,
    val: impl Fn(u64) -> V,
) -> u64
where
    K: Storable + Clone + std::fmt::Debug + std::borrow::Borrow<K::Ref>,
    K::Ref: Ord,
    V: Storable + PartialEq + std::fmt::Debug,
{
    // Transactions of 16 inserts; the one that meets a full pool commits
    // the inserts before it (OutOfMemory does not doom the transaction).
    let mut ok = 0u64;
    let mut full = false;
    while !full {
        let mut n = ok;
        let r = p.transaction(|tx| {
            n = ok;
            for _ in 0..16 {
                match map.insert(tx, key(n), val(n)) {
                    Ok(_) => n += 1,
                    Err(Error::Pool(rewind::Error::OutOfMemory { .. })) => {
                        full = true;
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
            Ok::<_, Error>(())
        });
        match r {
            Ok(()) => ok = n,
            Err(Error::Pool(rewind::Error::LogFull { .. })) => full = true,
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(map.len(p).unwrap(), ok);
    map.check_invariants(p).unwrap();
    for i in 0..ok {
        assert_eq!(
            map.get(p, key(i).borrow()).unwrap(),
            Some(val(i)),
            "entry {i} of {ok}"
        );
    }
    ok
}

#[test]
fn inserts_until_the_pool_is_full_commit_exactly_those_that_succeeded() {
    for policy in rewind::Policy::ALL {
        for fanout in [4, 5, 8] {
            let dir = tempfile::tempdir().unwrap();
            let cfg = PoolConfig::default().policy(policy);
            let p = Pool::create(dir.path().join("full.pool"), "probe", 2 << 20, &cfg).unwrap();
            let map = p
                .transaction(|tx| BTreeMap::<u64, [u64; 4]>::create_with_fanout(tx, fanout))
                .unwrap();
            let n = fill_until_full(
                &p,
                map,
                |i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                |i| [i; 4],
            );
            assert!(n > 100, "{policy:?}");
            let p = Pool::create(dir.path().join("full2.pool"), "probe", 2 << 20, &cfg).unwrap();
            let map = p
                .transaction(|tx| BTreeMap::<String, u64>::create_with_fanout(tx, fanout))
                .unwrap();
            fill_until_full(&p, map, |i| format!("{:040}{i}", i * 7919 % 1000), |i| i);
        }
    }
}

/// Takes every free block of every size, in transactions that commit.
fn exhaust(p: &Pool) {
    for size in [1 << 18, 1 << 16, 4096, 1024, 256, 64] {
        while p.transaction(|tx| tx.alloc_bytes(size).map(|_| ())).is_ok() {}
    }
}

#[test]
fn removals_and_clear_in_a_full_pool_fail_whole_or_succeed_whole() {
    for policy in rewind::Policy::ALL {
        let dir = tempfile::tempdir().unwrap();
        let cfg = PoolConfig::default().policy(policy);
        let p = Pool::create(dir.path().join("rm.pool"), "probe", 2 << 20, &cfg).unwrap();
        let map = p
            .transaction(|tx| BTreeMap::<String, u64>::create_with_fanout(tx, 8))
            .unwrap();
        // Keys sharing 40 bytes: every separator is out of line (a block).
        let key = |i: u64| format!("{}{i:07}", "s".repeat(40));
        // Ascending inserts leave leaves of 4 (keys 10·4j .. 10·(4j+3));
        // four more keys fill each odd leaf to 8.
        let leaves = 100u64;
        let mut model = StdMap::new();
        p.transaction(|tx| {
            for i in 0..leaves * 4 {
                map.insert(tx, key(i * 10), i)?;
                model.insert(key(i * 10), i);
            }
            for j in (1..leaves).step_by(2) {
                for i in 4 * j..4 * j + 4 {
                    map.insert(tx, key(i * 10 + 5), i)?;
                    model.insert(key(i * 10 + 5), i);
                }
            }
            Ok::<_, Error>(())
        })
        .unwrap();
        map.check_invariants(&p).unwrap();
        exhaust(&p);
        // Three removals empty an even leaf to one entry: it shares
        // entries with a full neighbour, which takes a new separator's
        // block, and the pool has none. Each removal is committed whatever
        // it returned.
        let mut refused = 0;
        for j in (0..leaves - 1).step_by(2) {
            for i in 4 * j..4 * j + 3 {
                let k = key(i * 10);
                let r = p
                    .transaction(|tx| Ok::<_, Error>(map.remove(tx, &k)))
                    .unwrap();
                match r {
                    Ok(v) => assert_eq!(v, model.remove(&k), "{policy:?}"),
                    Err(Error::Pool(rewind::Error::OutOfMemory { .. })) => refused += 1,
                    Err(e) => panic!("{policy:?}: {e:?}"),
                }
                // What the removal freed is taken too: the pool stays full.
                exhaust(&p);
            }
            map.check_invariants(&p).unwrap();
        }
        let got: Vec<(String, u64)> = map.iter(&p).unwrap().map(|e| e.unwrap()).collect();
        assert_eq!(
            got,
            model.clone().into_iter().collect::<Vec<_>>(),
            "{policy:?}"
        );
        assert!(refused > 0, "{policy:?}: no removal met a full pool");
        // clear in the full pool: all or nothing.
        let r = p.transaction(|tx| Ok::<_, Error>(map.clear(tx))).unwrap();
        match r {
            Ok(()) => assert!(map.is_empty(&p).unwrap()),
            Err(Error::Pool(rewind::Error::OutOfMemory { .. })) => {
                assert_eq!(map.len(&p).unwrap(), model.len() as u64);
            }
            Err(e) => panic!("{policy:?}: {e:?}"),
        }
        map.check_invariants(&p).unwrap();
    }
}

#[test]
fn savepoints_rolled_back_across_splits_and_merges_keep_a_sound_tree() {
    for log in rewind::LogVariant::ALL {
        for policy in rewind::Policy::ALL {
            let dir = tempfile::tempdir().unwrap();
            let cfg = PoolConfig::default().log(log).policy(policy);
            let p = Pool::create(dir.path().join("sp.pool"), "probe", 8 << 20, &cfg).unwrap();
            let base = p.alloc_stats().bytes_used;
            let map = p
                .transaction(|tx| BTreeMap::<String, u64>::create_with_fanout(tx, 4))
                .unwrap();
            let s = |k: u64| format!("{}{k:04}", "q".repeat(k as usize % 60));
            let mut model = StdMap::new();
            let mut rng = Rng(0x1234_5678 ^ (log as u64) << 8 ^ policy as u64);
            for round in 0..6 {
                let keys: Vec<u64> = (0..60).map(|_| rng.below(200)).collect();
                p.transaction(|tx| {
                    for &k in &keys[..20] {
                        map.insert(tx, s(k), round)?;
                    }
                    let sp = tx.savepoint()?;
                    for &k in &keys[20..40] {
                        map.insert(tx, s(k), 1000 + round)?;
                    }
                    for &k in &keys[..30] {
                        map.remove(tx, &s(k))?;
                    }
                    tx.rollback_to(sp)?;
                    for &k in &keys[40..] {
                        map.remove(tx, &s(k))?;
                    }
                    Ok::<_, Error>(())
                })
                .unwrap();
                for &k in &keys[..20] {
                    model.insert(s(k), round);
                }
                for &k in &keys[40..] {
                    model.remove(&s(k));
                }
                map.check_invariants(&p).unwrap();
                let got: Vec<(String, u64)> = map.iter(&p).unwrap().map(|e| e.unwrap()).collect();
                assert_eq!(
                    got,
                    model
                        .iter()
                        .map(|(k, v)| (k.clone(), *v))
                        .collect::<Vec<_>>(),
                    "{log:?} {policy:?} round {round}"
                );
            }
            // Every block the rolled-back work took went back: destroying
            // the tree leaves the pool as before it.
            p.transaction(|tx| map.destroy(tx)).unwrap();
            assert_eq!(p.alloc_stats().bytes_used, base, "{log:?} {policy:?}");
        }
    }
}

fn check_hash_keys<K>(p: &Pool, keys: &[K])
where
    K: rewind_collections::Stored + Eq + std::hash::Hash + Clone + std::fmt::Debug,
{
    let h = p.transaction(HashMap::<K, u64>::create).unwrap();
    let mut model = std::collections::HashMap::new();
    p.transaction(|tx| {
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(
                h.insert(tx, *k, i as u64)?,
                model.insert(*k, i as u64),
                "{k:?}"
            );
            assert_eq!(h.get_tx(tx, k)?, Some(i as u64));
        }
        assert_eq!(h.len_tx(tx)?, model.len() as u64);
        assert_eq!(h.iter_tx(tx)?.count(), model.len());
        Ok::<_, Error>(())
    })
    .unwrap();
    for (k, v) in &model {
        assert_eq!(h.get(p, k).unwrap(), Some(*v), "{k:?}");
        assert!(h.contains_key(p, k).unwrap());
    }
    let mut got: Vec<(K, u64)> = h.iter(p).unwrap().map(|e| e.unwrap()).collect();
    got.sort_by_key(|e| e.1);
    let mut want: Vec<(K, u64)> = model.into_iter().collect();
    want.sort_by_key(|e| e.1);
    assert_eq!(got, want);
    h.check_invariants(p).unwrap();
    p.transaction(|tx| h.destroy(tx)).unwrap();
}

#[test]
fn hash_map_keys_of_every_stored_type_and_the_tx_reads_of_every_collection() {
    let dir = tempfile::tempdir().unwrap();
    let p = pool(dir.path(), "hk.pool");
    check_hash_keys::<u8>(&p, &(0..=255).collect::<Vec<u8>>());
    check_hash_keys::<i64>(
        &p,
        &(-500..500).map(|i| i * 7_777_777).collect::<Vec<i64>>(),
    );
    check_hash_keys::<u128>(&p, &[0, 1, u128::MAX, 1 << 64]);
    check_hash_keys::<[u8; 0]>(&p, &[[]]);
    check_hash_keys::<[u16; 3]>(&p, &[[0, 0, 0], [1, 2, 3], [3, 2, 1], [u16::MAX; 3]]);
    let fb: Vec<FixedBytes<4>> = ["", "a", "ab", "abcd", "b", "\0"]
        .iter()
        .map(|s| FixedBytes::new(s).unwrap())
        .collect();
    check_hash_keys::<FixedBytes<4>>(&p, &fb);
    // The `_tx` reads see the transaction's own writes, before it commits.
    let (v, l, b) = p
        .transaction(|tx| {
            let v = PVec::<u64>::create(tx)?;
            let l = List::<u64>::create(tx)?;
            let b = Blob::create_from(tx, b"abc")?;
            v.push(tx, 1)?;
            l.push_back(tx, 2)?;
            b.append(tx, b"def")?;
            assert_eq!(v.get_tx(tx, 0)?, Some(1));
            assert_eq!(v.len_tx(tx)?, 1);
            assert_eq!(l.get_tx(tx, 0)?, Some(2));
            assert_eq!(l.len_tx(tx)?, 1);
            let c = l.cursor_tx(tx, 0)?.unwrap();
            assert_eq!(l.remove_at(tx, c)?, 2);
            assert_eq!(l.len_tx(tx)?, 0);
            assert_eq!(b.read_tx(tx)?, b"abcdef");
            assert_eq!(b.len_tx(tx)?, 6);
            Ok::<_, Error>((v, l, b))
        })
        .unwrap();
    assert_eq!(v.to_vec(&p).unwrap(), [1]);
    assert!(l.is_empty(&p).unwrap());
    assert_eq!(b.read(&p).unwrap(), b"abcdef");
    let mut mid = [0u8; 2];
    b.read_at(&p, 2, &mut mid).unwrap();
    assert_eq!(&mid, b"cd");
    p.transaction(|tx| b.write_at(tx, 4, b"EF")).unwrap();
    assert_eq!(b.read(&p).unwrap(), b"abcdEF");
    let e = p.transaction(|tx| b.write_at(tx, 5, b"GH")).unwrap_err();
    assert!(matches!(e, Error::IndexOutOfBounds { .. }), "{e:?}");
    assert!(b.capacity(&p).unwrap() >= 6);
}
