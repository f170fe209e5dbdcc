//! A user's fifth round: several pools at once (reads of one inside a
//! transaction of another, threads nesting transactions of two pools),
//! tiny pools filled by every collection, huge keys and values, and a
//! child process on two pools SIGKILLed.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{PPtr, Pool, PoolConfig};
use rewind_collections::{BTreeMap, Blob, Error, HashMap, List, Vec as PVec};

fn is_full(e: &Error) -> bool {
    matches!(
        e,
        Error::Pool(rewind::Error::OutOfMemory { .. } | rewind::Error::LogFull { .. })
    )
}

fn retryable(e: &Error) -> bool {
    matches!(
        e,
        Error::Pool(rewind::Error::Deadlock { .. } | rewind::Error::LockTimeout { .. })
    )
}

#[derive(Clone, Copy)]
struct Colls {
    map: BTreeMap<u64, u64>,
    smap: BTreeMap<String, std::vec::Vec<u8>>,
    hash: HashMap<u64, u64>,
    list: List<u64>,
    vec: PVec<u64>,
    blob: Blob,
}

fn make(pool: &Pool) -> Result<Colls, Error> {
    pool.transaction(|tx| {
        let c = Colls {
            map: BTreeMap::create(tx)?,
            smap: BTreeMap::create(tx)?,
            hash: HashMap::create(tx)?,
            list: List::create(tx)?,
            vec: PVec::create(tx)?,
            blob: Blob::create(tx)?,
        };
        let r = tx.root_named::<PPtr<BTreeMap<u64, u64>>>("map")?;
        tx.write(r, &c.map.as_ptr())?;
        let r = tx.root_named::<PPtr<BTreeMap<String, std::vec::Vec<u8>>>>("smap")?;
        tx.write(r, &c.smap.as_ptr())?;
        let r = tx.root_named::<PPtr<HashMap<u64, u64>>>("hash")?;
        tx.write(r, &c.hash.as_ptr())?;
        let r = tx.root_named::<PPtr<List<u64>>>("list")?;
        tx.write(r, &c.list.as_ptr())?;
        let r = tx.root_named::<PPtr<PVec<u64>>>("vec")?;
        tx.write(r, &c.vec.as_ptr())?;
        let r = tx.root_named::<PPtr<Blob>>("blob")?;
        tx.write(r, &c.blob.as_ptr())?;
        Ok(c)
    })
}

fn find(pool: &Pool) -> Colls {
    Colls {
        map: BTreeMap::from_ptr(
            pool.read(
                pool.root_named::<PPtr<BTreeMap<u64, u64>>>("map")
                    .unwrap()
                    .unwrap(),
            )
            .unwrap(),
        ),
        smap: BTreeMap::from_ptr(
            pool.read(
                pool.root_named::<PPtr<BTreeMap<String, std::vec::Vec<u8>>>>("smap")
                    .unwrap()
                    .unwrap(),
            )
            .unwrap(),
        ),
        hash: HashMap::from_ptr(
            pool.read(
                pool.root_named::<PPtr<HashMap<u64, u64>>>("hash")
                    .unwrap()
                    .unwrap(),
            )
            .unwrap(),
        ),
        list: List::from_ptr(
            pool.read(pool.root_named::<PPtr<List<u64>>>("list").unwrap().unwrap())
                .unwrap(),
        ),
        vec: PVec::from_ptr(
            pool.read(pool.root_named::<PPtr<PVec<u64>>>("vec").unwrap().unwrap())
                .unwrap(),
        ),
        blob: Blob::from_ptr(
            pool.read(pool.root_named::<PPtr<Blob>>("blob").unwrap().unwrap())
                .unwrap(),
        ),
    }
}

/// Every read through `&Pool` of each collection, and its checks.
fn read_all(pool: &Pool, c: &Colls) -> Result<String, Error> {
    let mut s = String::new();
    s += &format!("map {} {:?};", c.map.len(pool)?, c.map.get(pool, &3)?);
    let m: std::vec::Vec<_> = c.map.iter(pool)?.collect::<Result<_, _>>()?;
    s += &format!("{m:?};");
    let sm: std::vec::Vec<_> = c.smap.iter(pool)?.collect::<Result<_, _>>()?;
    s += &format!("{sm:?};");
    let mut h = c.hash.entries(pool)?;
    h.sort_unstable();
    s += &format!("{h:?} {:?};", c.hash.get(pool, &3)?);
    let l: std::vec::Vec<_> = c.list.iter(pool)?.collect::<Result<_, _>>()?;
    s += &format!("{l:?} {:?};", c.list.front(pool)?);
    s += &format!("{:?};", c.vec.to_vec(pool)?);
    s += &format!("{:?};", c.blob.read(pool)?);
    c.map.check_invariants(pool)?;
    c.smap.check_invariants(pool)?;
    c.hash.check_invariants(pool)?;
    c.list.check_invariants(pool)?;
    for b in [
        c.map.blocks(pool)?,
        c.smap.blocks(pool)?,
        c.hash.blocks(pool)?,
        c.list.blocks(pool)?,
        c.vec.blocks(pool)?,
        c.blob.blocks(pool)?,
    ] {
        s += &format!("{};", b.len());
    }
    Ok(s)
}

fn fill_some(pool: &Pool, c: &Colls, n: u64) -> Result<(), Error> {
    pool.transaction(|tx| {
        for i in 0..n {
            c.map.insert(tx, i, i * 10)?;
            c.smap.insert(tx, format!("{i:060}"), vec![i as u8; 50])?;
            c.hash.insert(tx, i, i + 1)?;
            c.list.push_back(tx, i)?;
            c.vec.push(tx, i)?;
            c.blob.append(tx, &[i as u8])?;
        }
        Ok(())
    })
}

/// Reads of pool B's collections through `&Pool` inside a transaction of
/// pool A are other pools' reads: answered, as outside, not
/// `NestedTransaction`; A's own, also from a transaction of B nested in A's,
/// are refused.
#[test]
fn reads_of_another_pool_inside_a_transaction_are_answered() {
    for cfg in common::configs() {
        let dir = tempfile::tempdir().unwrap();
        let a = Pool::create(dir.path().join("a.pool"), "five", 8 << 20, &cfg).unwrap();
        let b = Pool::create(dir.path().join("b.pool"), "five", 8 << 20, &cfg).unwrap();
        let ca = make(&a).unwrap();
        let cb = make(&b).unwrap();
        fill_some(&a, &ca, 40).unwrap();
        fill_some(&b, &cb, 70).unwrap();
        let want_b = read_all(&b, &cb).unwrap();
        read_all(&a, &ca).unwrap();
        let name = common::name(&cfg);
        a.transaction(|tx| {
            ca.map.insert(tx, 1000, 1)?;
            let got = read_all(&b, &cb).unwrap_or_else(|e| panic!("{name}: B inside A: {e}"));
            assert_eq!(got, want_b, "{name}");
            // A's own &Pool reads here are refused.
            assert!(matches!(
                ca.map.get(&a, &1),
                Err(Error::Pool(rewind::Error::NestedTransaction))
            ));
            // A transaction of B nested here, with B's reads of A inside.
            b.transaction(|tb| {
                cb.map.insert(tb, 2000, 2)?;
                cb.list.push_front(tb, 9)?;
                assert_eq!(cb.map.get_tx(tb, &2000)?, Some(2));
                // A's reads here are inside A's transaction (the outer one,
                // on this thread): refused, as directly inside it.
                assert!(
                    matches!(
                        read_all(&a, &ca),
                        Err(Error::Pool(rewind::Error::NestedTransaction))
                    ),
                    "{name}"
                );
                Ok::<_, Error>(())
            })?;
            Ok::<_, Error>(())
        })
        .unwrap();
        assert_eq!(ca.map.get(&a, &1000).unwrap(), Some(1), "{name}");
        assert_eq!(cb.map.get(&b, &2000).unwrap(), Some(2), "{name}");
        assert_eq!(cb.list.front(&b).unwrap(), Some(9), "{name}");
        read_all(&a, &ca).unwrap();
        read_all(&b, &cb).unwrap();
    }
}

const ACCOUNTS: u64 = 8;
const START: u64 = 1000;

/// Four threads move amounts between accounts of a B+-tree in pool A and,
/// in a transaction of pool B nested in A's, between the accounts of a hash
/// map in B; two nest A then B, two B then A (a cycle across the pools is
/// a lock timeout, rolled back). Each pool's balances keep their sum, and
/// each pool's commit counter is exactly the commits its transactions
/// reported.
#[test]
fn threads_nesting_transactions_of_two_pools_keep_both_pools_exact() {
    for (ci, cfg) in [
        PoolConfig::default(),
        PoolConfig::default().policy(rewind::Policy::Force),
        PoolConfig::default().policy(rewind::Policy::NoForce),
        PoolConfig::default().policy(rewind::Policy::RedoAsync),
    ]
    .into_iter()
    .enumerate()
    {
        let dir = tempfile::tempdir().unwrap();
        let pa = Pool::create(dir.path().join("a.pool"), "five", 8 << 20, &cfg).unwrap();
        let pb = Pool::create(dir.path().join("b.pool"), "five", 8 << 20, &cfg).unwrap();
        for p in [&pa, &pb] {
            p.set_lock_timeout(Duration::from_millis(20));
        }
        let (ma, hb) = {
            let ma = pa
                .transaction(|tx| {
                    let m = BTreeMap::<u64, u64>::create_with_fanout(tx, 4)?;
                    for k in 0..ACCOUNTS {
                        m.insert(tx, k, START)?;
                    }
                    m.insert(tx, u64::MAX, 0)?; // the commit counter
                    Ok::<_, Error>(m)
                })
                .unwrap();
            let hb = pb
                .transaction(|tx| {
                    let h = HashMap::<u64, u64>::create(tx)?;
                    for k in 0..ACCOUNTS {
                        h.insert(tx, k, START)?;
                    }
                    h.insert(tx, u64::MAX, 0)?;
                    Ok::<_, Error>(h)
                })
                .unwrap();
            (ma, hb)
        };
        let commits_a = AtomicU64::new(0);
        let commits_b = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (pa, pb, commits_a, commits_b) = (&pa, &pb, &commits_a, &commits_b);
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(ci as u64 * 100 + t);
                    let move_a = |tx: &mut rewind::Tx<'_>, f: u64, to: u64, n: u64| {
                        let x = ma.get_tx(tx, &f)?.unwrap();
                        let n = n.min(x);
                        ma.insert(tx, f, x - n)?;
                        ma.update(tx, &to, |v| *v += n)?.unwrap();
                        ma.update(tx, &u64::MAX, |v| *v += 1)?.unwrap();
                        Ok::<_, Error>(())
                    };
                    let move_b = |tx: &mut rewind::Tx<'_>, f: u64, to: u64, n: u64| {
                        let x = hb.get_tx(tx, &f)?.unwrap();
                        let n = n.min(x);
                        hb.insert(tx, f, x - n)?;
                        let y = hb.get_tx(tx, &to)?.unwrap();
                        hb.insert(tx, to, y + n)?;
                        let c = hb.get_tx(tx, &u64::MAX)?.unwrap();
                        hb.insert(tx, u64::MAX, c + 1)?;
                        Ok::<_, Error>(())
                    };
                    let mut done = 0;
                    while done < 60 {
                        let (f, to, n) = (
                            rng.gen_range(0..ACCOUNTS),
                            rng.gen_range(0..ACCOUNTS),
                            rng.gen_range(0..300),
                        );
                        let (g, go, m) = (
                            rng.gen_range(0..ACCOUNTS),
                            rng.gen_range(0..ACCOUNTS),
                            rng.gen_range(0..300),
                        );
                        let abort_outer = rng.gen_ratio(1, 5);
                        // Which pool's transaction committed.
                        let mut inner_ok = false;
                        let r = if t % 2 == 0 {
                            pa.transaction(|ta| {
                                move_a(ta, f, to, n)?;
                                pb.transaction(|tb| move_b(tb, g, go, m))?;
                                inner_ok = true;
                                if abort_outer {
                                    return Err(common::aborted());
                                }
                                Ok(())
                            })
                        } else {
                            pb.transaction(|tb| {
                                move_b(tb, g, go, m)?;
                                pa.transaction(|ta| move_a(ta, f, to, n))?;
                                inner_ok = true;
                                if abort_outer {
                                    return Err(common::aborted());
                                }
                                Ok(())
                            })
                        };
                        let (outer, inner) = if t % 2 == 0 {
                            (commits_a, commits_b)
                        } else {
                            (commits_b, commits_a)
                        };
                        if inner_ok {
                            inner.fetch_add(1, Ordering::SeqCst);
                        }
                        match r {
                            Ok(()) => {
                                outer.fetch_add(1, Ordering::SeqCst);
                                done += 1;
                            }
                            Err(Error::Pool(rewind::Error::Aborted)) if abort_outer => done += 1,
                            Err(e) if retryable(&e) => {}
                            Err(e) => panic!("thread {t}: {e}"),
                        }
                    }
                });
            }
        });
        let sum_a: u64 = (0..ACCOUNTS)
            .map(|k| ma.get(&pa, &k).unwrap().unwrap())
            .sum();
        let sum_b: u64 = (0..ACCOUNTS)
            .map(|k| hb.get(&pb, &k).unwrap().unwrap())
            .sum();
        assert_eq!(sum_a, ACCOUNTS * START, "cfg {ci}: pool A's sum");
        assert_eq!(sum_b, ACCOUNTS * START, "cfg {ci}: pool B's sum");
        assert_eq!(
            ma.get(&pa, &u64::MAX).unwrap(),
            Some(commits_a.load(Ordering::SeqCst)),
            "cfg {ci}: pool A's commits"
        );
        assert_eq!(
            hb.get(&pb, &u64::MAX).unwrap(),
            Some(commits_b.load(Ordering::SeqCst)),
            "cfg {ci}: pool B's commits"
        );
        ma.check_invariants(&pa).unwrap();
        hb.check_invariants(&pb).unwrap();
        // And after reopening both.
        let (a_path, b_path) = (dir.path().join("a.pool"), dir.path().join("b.pool"));
        pa.close().unwrap();
        pb.close().unwrap();
        let pa = Pool::open(&a_path, "five", &rewind::OpenOptions::default()).unwrap();
        let pb = Pool::open(&b_path, "five", &rewind::OpenOptions::default()).unwrap();
        let sum_a: u64 = (0..ACCOUNTS)
            .map(|k| ma.get(&pa, &k).unwrap().unwrap())
            .sum();
        let sum_b: u64 = (0..ACCOUNTS)
            .map(|k| hb.get(&pb, &k).unwrap().unwrap())
            .sum();
        assert_eq!((sum_a, sum_b), (ACCOUNTS * START, ACCOUNTS * START));
        ma.check_invariants(&pa).unwrap();
        hb.check_invariants(&pb).unwrap();
    }
}

/// Pools from the smallest the engine creates upwards: every collection
/// created and filled until the pool refuses, each refusal a typed
/// `OutOfMemory` or `LogFull` (or, for the pool itself, a typed error at
/// create), then the pool reopened: every collection that was made reads
/// whole, passes its checks, and the engine's check finds the file sound.
#[test]
fn tiny_pools_filled_by_every_collection_refuse_typed_and_reopen_sound() {
    for cfg in common::configs() {
        let name = common::name(&cfg);
        for size in [
            0u64,
            4096,
            64 << 10,
            256 << 10,
            512 << 10,
            768 << 10,
            1 << 20,
            2 << 20,
        ] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("tiny.pool");
            let pool = match Pool::create(&path, "five", size, &cfg) {
                Ok(p) => p,
                Err(e) => {
                    let text = e.to_string();
                    assert!(!text.is_empty(), "{name} {size}");
                    continue;
                }
            };
            let c = match make(&pool) {
                Ok(c) => c,
                Err(e) => {
                    assert!(is_full(&e), "{name} {size}: create: {e}");
                    drop(pool);
                    let pool = Pool::open(&path, "five", &rewind::OpenOptions::default())
                        .unwrap_or_else(|e| panic!("{name} {size}: reopen: {e}"));
                    assert!(
                        pool.root_named::<PPtr<BTreeMap<u64, u64>>>("map")
                            .unwrap()
                            .is_none(),
                        "{name} {size}"
                    );
                    drop(pool);
                    let r = rewind::inspect::check(&path).unwrap();
                    assert!(r.is_ok(), "{name} {size}: {r}");
                    continue;
                }
            };
            let mut model = (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
            // Round robin, one operation per transaction, until each of the
            // six has been refused twice in a row.
            let mut refused = [0u32; 6];
            let mut i = 0u64;
            while refused.iter().any(|&r| r < 2) {
                i += 1;
                for (k, r) in refused.iter_mut().enumerate() {
                    if *r >= 2 {
                        continue;
                    }
                    let res = pool.transaction(|tx| match k {
                        0 => c.map.insert(tx, i, i).map(drop),
                        1 => c
                            .smap
                            .insert(tx, format!("{i:080}"), vec![7; 100])
                            .map(drop),
                        2 => c.hash.insert(tx, i, i).map(drop),
                        3 => c.list.push_back(tx, i),
                        4 => c.vec.push(tx, i),
                        _ => c.blob.append(tx, &[1u8; 1000]),
                    });
                    match res {
                        Ok(()) => {
                            *r = 0;
                            match k {
                                0 => model.0 += 1,
                                1 => model.1 += 1,
                                2 => model.2 += 1,
                                3 => model.3 += 1,
                                4 => model.4 += 1,
                                _ => model.5 += 1000,
                            }
                        }
                        Err(e) => {
                            assert!(is_full(&e), "{name} {size}: op {k}: {e}");
                            *r += 1;
                        }
                    }
                }
                assert!(i < 1_000_000, "{name} {size}: never full");
            }
            let check = |pool: &Pool, what: &str, model: (u64, u64, u64, u64, u64, u64)| {
                let c = find(pool);
                assert_eq!(c.map.len(pool).unwrap(), model.0, "{name} {size} {what}");
                assert_eq!(c.smap.len(pool).unwrap(), model.1, "{name} {size} {what}");
                assert_eq!(c.hash.len(pool).unwrap(), model.2, "{name} {size} {what}");
                assert_eq!(c.list.len(pool).unwrap(), model.3, "{name} {size} {what}");
                assert_eq!(c.vec.len(pool).unwrap(), model.4, "{name} {size} {what}");
                assert_eq!(c.blob.len(pool).unwrap(), model.5, "{name} {size} {what}");
                read_all(pool, &c).unwrap_or_else(|e| panic!("{name} {size} {what}: {e}"));
            };
            check(&pool, "full", model);
            // Emptied again, one per transaction, in the full pool.
            let c2 = c;
            for k in 0..6 {
                loop {
                    let r = pool.transaction(|tx| {
                        Ok::<_, Error>(match k {
                            0 => c2.map.pop_first(tx)?.is_some(),
                            1 => c2.smap.pop_last(tx)?.is_some(),
                            2 => {
                                let k = c2.hash.iter_tx(tx)?.next().transpose()?.map(|e| e.0);
                                match k {
                                    Some(k) => c2.hash.remove(tx, &k)?.is_some(),
                                    None => false,
                                }
                            }
                            3 => c2.list.pop_front(tx)?.is_some(),
                            4 => c2.vec.pop(tx)?.is_some(),
                            _ => {
                                let n = c2.blob.len_tx(tx)?;
                                c2.blob.truncate(tx, n.saturating_sub(4000))?;
                                n > 0
                            }
                        })
                    });
                    match r {
                        Ok(true) => {}
                        Ok(false) => break,
                        Err(e) => panic!("{name} {size}: emptying {k} in a full pool: {e}"),
                    }
                }
            }
            let model = (0, 0, 0, 0, 0, 0);
            check(&pool, "emptied", model);
            pool.close().unwrap();
            let r = rewind::inspect::check(&path).unwrap();
            assert!(r.is_ok(), "{name} {size}: {r}");
            let pool = Pool::open(&path, "five", &rewind::OpenOptions::default()).unwrap();
            check(&pool, "reopened", model);
        }
    }
}

/// Keys and values of megabytes in a B+-tree, a blob of most of the pool
/// rewritten in place (its undo larger than the log under force), and
/// ranges bounded by huge keys.
#[test]
fn huge_keys_and_values_are_stored_or_refused_typed() {
    for cfg in common::configs() {
        let name = common::name(&cfg);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("huge.pool");
        let pool = Pool::create(&path, "five", 24 << 20, &cfg).unwrap();
        let c = make(&pool).unwrap();
        let big = |n: usize, b: u8| -> String {
            let mut s = String::with_capacity(n);
            for i in 0..n {
                s.push((b'a' + ((i as u8).wrapping_add(b) % 26)) as char);
            }
            s
        };
        let keys: std::vec::Vec<String> =
            (0..4).map(|i| big((1 << 20) + i * 4099, i as u8)).collect();
        let mut model = std::collections::BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            let v = vec![i as u8; (3 << 19) + i];
            match pool.transaction(|tx| c.smap.insert(tx, k.clone(), v.clone())) {
                Ok(_) => {
                    model.insert(k.clone(), v);
                }
                Err(e) => assert!(is_full(&e), "{name}: {e}"),
            }
        }
        // A key equal to another's prefix but longer by one byte.
        let mut longer = keys[0].clone();
        longer.push('z');
        match pool.transaction(|tx| c.smap.insert(tx, longer.clone(), vec![1])) {
            Ok(_) => {
                model.insert(longer.clone(), vec![1]);
            }
            Err(e) => assert!(is_full(&e), "{name}: {e}"),
        }
        assert!(model.len() >= 2, "{name}: {} stored", model.len());
        let got: std::vec::Vec<_> = c.smap.iter(&pool).unwrap().map(|e| e.unwrap()).collect();
        let want: std::vec::Vec<_> = model.clone().into_iter().collect();
        assert!(got == want, "{name}: contents differ");
        for (k, v) in &model {
            assert_eq!(c.smap.get(&pool, k).unwrap().as_ref(), Some(v), "{name}");
        }
        use std::ops::Bound::*;
        let r: std::vec::Vec<_> = c
            .smap
            .range(
                &pool,
                (Excluded(keys[0].as_str()), Included(longer.as_str())),
            )
            .unwrap()
            .map(|e| e.unwrap().0.len())
            .collect();
        let w: std::vec::Vec<_> = model
            .range::<String, _>((Excluded(&keys[0]), Included(&longer)))
            .map(|e| e.0.len())
            .collect();
        assert_eq!(r, w, "{name}");
        c.smap.check_invariants(&pool).unwrap();
        // A blob of 8 MiB, rewritten in place in one transaction.
        let blob_ok = pool.transaction(|tx| c.blob.replace(tx, &vec![3u8; 8 << 20]));
        match blob_ok {
            Ok(()) => {
                let r = pool.transaction(|tx| c.blob.write_at(tx, 0, &vec![4u8; 8 << 20]));
                let want = match r {
                    Ok(()) => 4u8,
                    Err(e) => {
                        assert!(is_full(&e), "{name}: write_at: {e}");
                        3u8
                    }
                };
                let b = c.blob.read(&pool).unwrap();
                assert!(b.len() == 8 << 20 && b.iter().all(|&x| x == want), "{name}");
            }
            Err(e) => assert!(is_full(&e), "{name}: replace: {e}"),
        }
        let blob_len = c.blob.len(&pool).unwrap();
        pool.close().unwrap();
        let pool = Pool::open(&path, "five", &rewind::OpenOptions::default()).unwrap();
        let c = find(&pool);
        assert_eq!(c.blob.len(&pool).unwrap(), blob_len, "{name}");
        let got: std::vec::Vec<_> = c.smap.iter(&pool).unwrap().map(|e| e.unwrap()).collect();
        assert!(got == want, "{name}: contents differ after reopen");
        // All removed: the tree's blocks are its header and one leaf.
        for k in model.keys() {
            pool.transaction(|tx| c.smap.remove(tx, k))
                .unwrap()
                .unwrap();
        }
        assert_eq!(c.smap.blocks(&pool).unwrap().len(), 2, "{name}");
        c.smap.check_invariants(&pool).unwrap();
    }
}

/// A child process of four threads, each committing transactions on pool
/// A, on pool B, or on A with one of B nested in it (some rolled back after
/// B's committed), SIGKILLed after a seeded number of acknowledgements:
/// after recovery each pool holds exactly the transactions it committed
/// (every acknowledged one, at most the one in flight, whole; B's part of a
/// nested one whose A part was lost stays in B only), its collections pass
/// their checks and its allocated blocks are exactly theirs.
mod two_pools_killed {
    use super::*;
    use std::collections::BTreeSet;
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::process::ExitStatusExt;
    use std::path::{Path, PathBuf};
    use std::process::{Command, Stdio};
    use std::sync::Mutex;

    const THREADS: usize = 4;
    const LAYOUT: &str = "two-pools";
    const ENV_DIR: &str = "USER_PROBE5_KILL_DIR";
    const ENV_SEED: &str = "USER_PROBE5_KILL_SEED";
    const CHILD_TXS: u64 = 100_000;

    #[derive(Clone, Copy, rewind::Pod, rewind::Zeroable)]
    #[repr(C)]
    struct Root {
        done: [u64; THREADS],
        map: PPtr<BTreeMap<u64, u64>>,
        hash: PPtr<HashMap<u64, u64>>,
        list: PPtr<List<u64>>,
    }

    #[derive(Clone, Copy, PartialEq, Debug)]
    enum Kind {
        A,
        B,
        Nested,
    }

    #[derive(Clone, Copy, Debug)]
    struct Plan {
        kind: Kind,
        abort: bool,
        /// More keys of the B+-tree: a commit group of a few hundred
        /// bytes up to several KiB (past half a small commit lane).
        extra: u64,
    }

    fn plan(seed: u64, t: usize, id: u64) -> Plan {
        let mut r = SmallRng::seed_from_u64(seed ^ (t as u64) << 40 ^ id.wrapping_mul(0x9e37_79b9));
        let kind = match r.gen_range(0..3) {
            0 => Kind::A,
            1 => Kind::B,
            _ => Kind::Nested,
        };
        let abort = r.gen_ratio(1, 6);
        let extra = if r.gen_ratio(1, 4) {
            r.gen_range(1..60)
        } else {
            0
        };
        Plan { kind, abort, extra }
    }

    /// Whether transaction `id` of thread `t`, when it ran to its end,
    /// left its keys in pool `b` (false: A, true: B).
    fn lands(p: Plan, b: bool) -> bool {
        match (p.kind, b) {
            (Kind::A, false) | (Kind::B, true) => !p.abort,
            (Kind::Nested, true) => true, // B's nested commit outlives A's abort
            (Kind::Nested, false) => !p.abort,
            _ => false,
        }
    }

    fn key(t: usize, id: u64) -> u64 {
        (t as u64) << 32 | id
    }

    /// The B+-tree's keys of transaction `id`: its key, and `extra` more.
    fn map_keys(p: Plan, t: usize, id: u64) -> impl Iterator<Item = u64> {
        (0..=p.extra).map(move |j| key(t, id) | j << 20)
    }

    fn open_retrying(path: &Path) -> Pool {
        loop {
            match Pool::open(path, LAYOUT, &rewind::OpenOptions::default()) {
                Err(rewind::Error::PoolInUse { .. }) => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                r => return r.unwrap_or_else(|e| panic!("open {path:?}: {e}")),
            }
        }
    }

    fn colls(pool: &Pool) -> (PPtr<Root>, Root) {
        let rp = pool.root::<Root>().unwrap().expect("root");
        (rp, pool.read(rp).unwrap())
    }

    fn add(
        tx: &mut rewind::Tx<'_>,
        rp: PPtr<Root>,
        r: &Root,
        p: Plan,
        t: usize,
        id: u64,
    ) -> Result<(), Error> {
        let k = key(t, id);
        for mk in map_keys(p, t, id) {
            BTreeMap::from_ptr(r.map).insert(tx, mk, mk & 0xffff_ffff)?;
        }
        HashMap::from_ptr(r.hash).insert(tx, k, !id)?;
        List::from_ptr(r.list).push_back(tx, k)?;
        let done = PPtr::<u64>::from_offset(rp.offset() + 8 * t as u64);
        tx.write(done, &(id + 1))?;
        Ok(())
    }

    #[test]
    fn two_pools_kill_child() {
        let Some(dir) = std::env::var_os(ENV_DIR) else {
            return;
        };
        let seed: u64 = std::env::var(ENV_SEED).unwrap().parse().unwrap();
        let dir = PathBuf::from(dir);
        let a = open_retrying(&dir.join("a.pool"));
        let b = open_retrying(&dir.join("b.pool"));
        for p in [&a, &b] {
            p.set_lock_timeout(Duration::MAX);
        }
        let (ra, root_a) = colls(&a);
        let (rb, root_b) = colls(&b);
        let out = Mutex::new(std::io::stdout());
        writeln!(out.lock().unwrap(), "\nready").unwrap();
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (a, b, out) = (&a, &b, &out);
                s.spawn(move || {
                    let first = root_a.done[t].max(root_b.done[t]);
                    for id in first..first + CHILD_TXS {
                        let p = plan(seed, t, id);
                        let r = loop {
                            let r = match p.kind {
                                Kind::A | Kind::B => {
                                    let (pool, rp, root) = if p.kind == Kind::A {
                                        (a, ra, &root_a)
                                    } else {
                                        (b, rb, &root_b)
                                    };
                                    pool.transaction(|tx| {
                                        add(tx, rp, root, p, t, id)?;
                                        if p.abort {
                                            return Err(common::aborted());
                                        }
                                        Ok(())
                                    })
                                }
                                Kind::Nested => a.transaction(|tx| {
                                    add(tx, ra, &root_a, p, t, id)?;
                                    b.transaction(|tb| add(tb, rb, &root_b, p, t, id))?;
                                    if p.abort {
                                        return Err(common::aborted());
                                    }
                                    Ok(())
                                }),
                            };
                            match r {
                                Err(e) if retryable(&e) => continue,
                                r => break r,
                            }
                        };
                        let word = match r {
                            Ok(()) => "c",
                            Err(Error::Pool(rewind::Error::Aborted)) if p.abort => "a",
                            Err(e) => panic!("child: thread {t} transaction {id}: {e}"),
                        };
                        writeln!(out.lock().unwrap(), "{word} {t} {id}").unwrap();
                    }
                });
            }
        });
    }

    fn run_child(dir: &Path, seed: u64, kill: u64) -> [Option<u64>; THREADS] {
        let exe = std::env::current_exe().expect("current_exe");
        let mut child = Command::new(exe)
            .args([
                "--exact",
                "two_pools_killed::two_pools_kill_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ENV_DIR, dir)
            .env(ENV_SEED, seed.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn child");
        let mut ended = [None; THREADS];
        let mut acks = 0;
        let mut killed = false;
        for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
            let Ok(line) = line else { break };
            let mut w = line.split_whitespace();
            if !matches!(w.next(), Some("c" | "a")) {
                continue;
            }
            let t: usize = w.next().and_then(|x| x.parse().ok()).expect("thread");
            let id: u64 = w.next().and_then(|x| x.parse().ok()).expect("id");
            ended[t] = Some(id);
            acks += 1;
            if acks == kill && !killed {
                child.kill().expect("SIGKILL");
                killed = true;
            }
        }
        let status = child.wait().expect("wait");
        assert_eq!(
            status.signal(),
            Some(9),
            "child not killed after {kill} acks: {status}"
        );
        ended
    }

    fn kills(name: &str, cfg: &PoolConfig, seed: u64, cycles: u64) {
        let dir = tempfile::tempdir().unwrap();
        for f in ["a.pool", "b.pool"] {
            // A pool that may grow starts at 1 MiB: the child grows it.
            let size = if cfg.max_size.is_some() {
                1 << 20
            } else {
                8 << 20
            };
            let pool = Pool::create(dir.path().join(f), LAYOUT, size, cfg).unwrap();
            pool.transaction(|tx| {
                let rp: PPtr<Root> = tx.root()?;
                let r = Root {
                    done: [0; THREADS],
                    map: BTreeMap::<u64, u64>::create_with_fanout(tx, 4)?.as_ptr(),
                    hash: HashMap::<u64, u64>::create(tx)?.as_ptr(),
                    list: List::<u64>::create(tx)?.as_ptr(),
                };
                tx.write(rp, &r)?;
                Ok::<_, Error>(())
            })
            .unwrap();
        }
        // The keys each pool must hold.
        let mut want: [BTreeSet<u64>; 2] = [BTreeSet::new(), BTreeSet::new()];
        let mut want_map: [BTreeSet<u64>; 2] = [BTreeSet::new(), BTreeSet::new()];
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut start = [0u64; THREADS];
        let mut prev = [[0u64; THREADS]; 2];
        for cycle in 0..cycles {
            let kill = rng.gen_range(1..400);
            let ended = run_child(dir.path(), seed, kill);
            let pools = [
                open_retrying(&dir.path().join("a.pool")),
                open_retrying(&dir.path().join("b.pool")),
            ];
            let roots = [colls(&pools[0]).1, colls(&pools[1]).1];
            for t in 0..THREADS {
                // Ids start[t]..=e ended (acknowledged); n is in flight.
                let n = ended[t].map_or(start[t], |e| e + 1);
                for (pi, root) in roots.iter().enumerate() {
                    let b = pi == 1;
                    let acked = (start[t]..n).rev().find(|&i| lands(plan(seed, t, i), b));
                    let mut allowed = vec![];
                    if lands(plan(seed, t, n), b) {
                        allowed.push(n + 1);
                    }
                    allowed.push(acked.map_or(prev[pi][t], |i| i + 1));
                    assert!(
                        allowed.contains(&root.done[t]) && root.done[t] <= n + 1,
                        "{name} cycle {cycle} (kill after {kill}): pool {pi} thread {t}: done {} not in {allowed:?} (start {}, in flight {n}, {:?})",
                        root.done[t],
                        start[t],
                        plan(seed, t, n)
                    );
                    if root.done[t] > start[t] {
                        for id in start[t]..root.done[t] {
                            let p = plan(seed, t, id);
                            if lands(p, b) {
                                want[pi].insert(key(t, id));
                                want_map[pi].extend(map_keys(p, t, id));
                            }
                        }
                    }
                }
                for pi in 0..2 {
                    prev[pi][t] = roots[pi].done[t];
                }
                // Nested: A's part only with B's.
                if plan(seed, t, n).kind == Kind::Nested && roots[0].done[t] == n + 1 {
                    assert_eq!(
                        roots[1].done[t],
                        n + 1,
                        "{name} cycle {cycle}: A's part without B's"
                    );
                }
                start[t] = roots[0].done[t].max(roots[1].done[t]).max(start[t]);
            }
            for (pi, pool) in pools.iter().enumerate() {
                let (rp, r) = colls(pool);
                let map = BTreeMap::<u64, u64>::from_ptr(r.map);
                let hash = HashMap::<u64, u64>::from_ptr(r.hash);
                let list = List::<u64>::from_ptr(r.list);
                map.check_invariants(pool).unwrap();
                hash.check_invariants(pool).unwrap();
                list.check_invariants(pool).unwrap();
                let w: std::vec::Vec<(u64, u64)> =
                    want_map[pi].iter().map(|&k| (k, k & 0xffff_ffff)).collect();
                let got: std::vec::Vec<(u64, u64)> =
                    map.iter(pool).unwrap().map(|e| e.unwrap()).collect();
                assert!(
                    got == w,
                    "{name} cycle {cycle}: pool {pi}'s map: {} entries, want {}",
                    got.len(),
                    w.len()
                );
                let mut h = hash.entries(pool).unwrap();
                h.sort_unstable();
                let wh: std::vec::Vec<(u64, u64)> =
                    want[pi].iter().map(|&k| (k, !(k & 0xffff_ffff))).collect();
                assert!(h == wh, "{name} cycle {cycle}: pool {pi}'s hash map");
                let mut l: std::vec::Vec<u64> =
                    list.iter(pool).unwrap().map(|e| e.unwrap()).collect();
                l.sort_unstable();
                assert!(
                    l.iter().eq(want[pi].iter()),
                    "{name} cycle {cycle}: pool {pi}'s list"
                );
                let mut owned = map.blocks(pool).unwrap();
                owned.extend(hash.blocks(pool).unwrap());
                owned.extend(list.blocks(pool).unwrap());
                owned.push(rp.offset());
                owned.sort_unstable();
                assert_eq!(
                    common::allocated(pool),
                    owned,
                    "{name} cycle {cycle}: pool {pi}: leaked or lost blocks"
                );
            }
        }
        assert!(
            want[0].len() + want[1].len() > 0,
            "{name}: nothing committed"
        );
        let sizes: std::vec::Vec<u64> = ["a.pool", "b.pool"]
            .iter()
            .map(|f| std::fs::metadata(dir.path().join(f)).unwrap().len())
            .collect();
        if cfg.max_size.is_some() {
            assert!(
                sizes.iter().all(|&s| s > 1 << 20),
                "{name}: never grew: {sizes:?}"
            );
        }
        println!(
            "{name}: {cycles} kills; pool A {} / {} keys, pool B {} / {}, sizes {sizes:?}",
            want[0].len(),
            want_map[0].len(),
            want[1].len(),
            want_map[1].len()
        );
    }

    #[test]
    fn two_pools_killed_keep_exactly_their_commits() {
        for (i, cfg) in [
            PoolConfig::default(),
            PoolConfig::default().policy(rewind::Policy::Force),
            PoolConfig::default().policy(rewind::Policy::NoForce),
            PoolConfig::default()
                .log(rewind::LogVariant::TwoLayer)
                .policy(rewind::Policy::RedoAsync),
            // Sixteen commit lanes in an 8 MiB pool: small lanes, so the
            // larger groups commit through the bucket log beside them.
            PoolConfig::default().lanes(16),
            PoolConfig::default()
                .lanes(16)
                .policy(rewind::Policy::RedoAsync),
            // Tight: the smallest log (it grows into the heap), small buckets.
            PoolConfig::default().bucket_cells(8).log_size(1),
            PoolConfig::default()
                .policy(rewind::Policy::NoForce)
                .bucket_cells(8)
                .log_size(1)
                .group_size(64),
            // Pools that grow by themselves while the child commits.
            PoolConfig::default().max_size(32 << 20),
            PoolConfig::default()
                .policy(rewind::Policy::Force)
                .max_size(32 << 20),
        ]
        .iter()
        .enumerate()
        {
            kills(&common::name(cfg), cfg, 0x5eed + i as u64, 12);
        }
    }
}

/// A value of key `k` at version `v`: inline or out of line by version,
/// its length and filler derived from both, so that a torn or misplaced
/// value shows.
fn versioned(k: u64, v: u64) -> String {
    let len = [5usize, 30, 36, 37, 64, 200, 1000][(v % 7) as usize];
    let mut s = format!("{k}:{v}:");
    let c = (b'a' + ((k + v) % 26) as u8) as char;
    while s.len() < len {
        s.push(c);
    }
    s
}

fn well_formed(k: u64, s: &str) -> bool {
    let mut parts = s.splitn(3, ':');
    let (Some(a), Some(b)) = (parts.next(), parts.next()) else {
        return false;
    };
    a.parse::<u64>().ok() == Some(k) && b.parse::<u64>().is_ok_and(|v| versioned(k, v) == s)
}

/// Four writer threads replace, grow and shrink `String` values of a
/// B+-tree (moving them between inline slots and blocks of their own,
/// each replacement freeing the old block), remove and re-insert keys,
/// some transactions rolled back, while two readers ask `get`,
/// `first_key_value` and `last_key_value` through `&Pool`: every answer is
/// a whole value its key had, never another key's bytes or a torn one;
/// at the end the tree holds exactly the last committed version of each
/// key and no block is leaked, under redo, force and no-force.
#[test]
fn one_answer_reads_of_string_values_beside_writers_are_whole() {
    const KEYS: u64 = 48;
    for cfg in [
        PoolConfig::default(),
        PoolConfig::default().policy(rewind::Policy::Force),
        PoolConfig::default().policy(rewind::Policy::NoForce),
        PoolConfig::default().policy(rewind::Policy::RedoAsync),
    ] {
        let name = common::name(&cfg);
        let dir = tempfile::tempdir().unwrap();
        let pool = Pool::create(dir.path().join("s.pool"), "five", 16 << 20, &cfg).unwrap();
        let (map, seq) = pool
            .transaction(|tx| {
                let m = BTreeMap::<u64, String>::create_with_fanout(tx, 6)?;
                for k in 0..KEYS {
                    m.insert(tx, k, versioned(k, 0))?;
                }
                let seq = tx.alloc::<u64>()?;
                Ok::<_, Error>((m, seq))
            })
            .unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let reads = AtomicU64::new(0);
        // Per key: (sequence number of the commit, version or None).
        let log = std::sync::Mutex::new(std::vec::Vec::<(u64, u64, Option<u64>)>::new());
        std::thread::scope(|s| {
            let writers: std::vec::Vec<_> = (0..4u64)
                .map(|t| {
                    let (pool, log, name) = (&pool, &log, &name);
                    s.spawn(move || {
                        let mut rng = SmallRng::seed_from_u64(t + 77);
                        let mut n = 0;
                        while n < 150 {
                            let k = rng.gen_range(0..KEYS);
                            let v = rng.gen_range(1..1_000_000u64);
                            let op = rng.gen_range(0..10);
                            let abort = rng.gen_ratio(1, 5);
                            let r = pool.transaction(|tx| {
                                let out = match op {
                                    0 => {
                                        map.remove(tx, &k)?;
                                        None
                                    }
                                    1..=4 => {
                                        map.insert(tx, k, versioned(k, v))?;
                                        Some(v)
                                    }
                                    _ => map.update(tx, &k, |s| *s = versioned(k, v))?.map(|()| v),
                                };
                                // The commit order: a word every transaction
                                // writes, under the tree's lock.
                                let q = tx.read(seq)? + 1;
                                tx.write(seq, &q)?;
                                if abort {
                                    return Err(common::aborted());
                                }
                                Ok((q, out))
                            });
                            match r {
                                Ok((q, out)) => {
                                    log.lock().unwrap().push((q, k, out));
                                    n += 1;
                                }
                                Err(Error::Pool(rewind::Error::Aborted)) if abort => n += 1,
                                Err(e) if retryable(&e) => {}
                                Err(e) => panic!("{name}: writer {t}: {e}"),
                            }
                        }
                    })
                })
                .collect();
            for r in 0..2u64 {
                let (pool, stop, reads, name) = (&pool, &stop, &reads, &name);
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(r + 1000);
                    let mut i = 0u64;
                    while !stop.load(Ordering::SeqCst) || i < 200 {
                        i += 1;
                        let k = rng.gen_range(0..KEYS);
                        let got = match i % 5 {
                            0 => map.first_key_value(pool),
                            1 => map.last_key_value(pool),
                            _ => map.get(pool, &k).map(|v| v.map(|v| (k, v))),
                        };
                        match got {
                            Ok(Some((k, v))) => {
                                assert!(well_formed(k, &v), "{name}: key {k} read {v:?}")
                            }
                            Ok(None) => {}
                            Err(e) => panic!("{name}: reader: {e}"),
                        }
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            for w in writers {
                w.join().unwrap();
            }
            stop.store(true, Ordering::SeqCst);
        });
        let mut log = log.into_inner().unwrap();
        log.sort_unstable();
        let mut want: std::collections::BTreeMap<u64, String> =
            (0..KEYS).map(|k| (k, versioned(k, 0))).collect();
        for (i, &(q, k, out)) in log.iter().enumerate() {
            assert_eq!(q, i as u64 + 1, "{name}: commit order");
            match out {
                Some(v) => {
                    want.insert(k, versioned(k, v));
                }
                None => {
                    want.remove(&k);
                }
            }
        }
        let got: std::collections::BTreeMap<u64, String> =
            map.iter(&pool).unwrap().map(|e| e.unwrap()).collect();
        assert!(
            got == want,
            "{name}: contents differ from the committed transactions"
        );
        map.check_invariants(&pool).unwrap();
        let mut owned = map.blocks(&pool).unwrap();
        owned.push(seq.offset());
        owned.sort_unstable();
        let mut alloc = common::allocated(&pool);
        alloc.sort_unstable();
        assert_eq!(alloc, owned, "{name}: leaked or lost blocks");
        assert!(reads.load(Ordering::Relaxed) >= 400, "{name}");
    }
}

/// A lock timeout of zero (and of one nanosecond): every wait for a held
/// collection ends at once with `LockTimeout`, rolled back; retried, the
/// four threads' increments of shared counters in a B+-tree and a hash
/// map end exactly at the number of commits, and reads through `&Pool`
/// that meet a writer are answered or `LockTimeout`, never wrong.
#[test]
fn a_zero_lock_timeout_refuses_waits_typed_and_keeps_counts_exact() {
    for timeout in [Duration::ZERO, Duration::from_nanos(1)] {
        let dir = tempfile::tempdir().unwrap();
        let pool = Pool::create(
            dir.path().join("z.pool"),
            "five",
            8 << 20,
            &PoolConfig::default(),
        )
        .unwrap();
        let (m, h) = pool
            .transaction(|tx| {
                let m = BTreeMap::<u64, u64>::create(tx)?;
                let h = HashMap::<u64, u64>::create(tx)?;
                m.insert(tx, 0, 0)?;
                h.insert(tx, 0, 0)?;
                Ok::<_, Error>((m, h))
            })
            .unwrap();
        pool.set_lock_timeout(timeout);
        let commits = AtomicU64::new(0);
        let refusals = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (pool, commits, refusals) = (&pool, &commits, &refusals);
                s.spawn(move || {
                    let mut done = 0;
                    let mut i = 0u64;
                    while done < 200 {
                        i += 1;
                        let r = pool.transaction(|tx| {
                            // Opposite orders in alternate threads.
                            if t % 2 == 0 {
                                m.update(tx, &0, |v| *v += 1)?;
                                let x = h.get_tx(tx, &0)?.unwrap();
                                h.insert(tx, 0, x + 1)?;
                            } else {
                                let x = h.get_tx(tx, &0)?.unwrap();
                                h.insert(tx, 0, x + 1)?;
                                m.update(tx, &0, |v| *v += 1)?;
                            }
                            Ok::<_, Error>(())
                        });
                        match r {
                            Ok(()) => {
                                done += 1;
                                commits.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(e) if retryable(&e) => {
                                refusals.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => panic!("{timeout:?}: thread {t}: {e}"),
                        }
                        if i.is_multiple_of(3) {
                            match (m.get(pool, &0), h.get(pool, &0)) {
                                (Ok(a), Ok(b)) => assert!(a.is_some() && b.is_some()),
                                (a, b) => {
                                    for r in [a, b] {
                                        if let Err(e) = r {
                                            assert!(retryable(&e), "{timeout:?}: read: {e}");
                                        }
                                    }
                                }
                            }
                        }
                    }
                });
            }
        });
        let n = commits.load(Ordering::SeqCst);
        assert_eq!(n, 800);
        assert_eq!(m.get(&pool, &0).unwrap(), Some(n), "{timeout:?}");
        assert_eq!(h.get(&pool, &0).unwrap(), Some(n), "{timeout:?}");
        m.check_invariants(&pool).unwrap();
        h.check_invariants(&pool).unwrap();
        println!("{timeout:?}: {} refusals", refusals.load(Ordering::Relaxed));
    }
}

/// A lock timeout under a millisecond (`Duration::from_micros(900)`) is
/// kept as a bound of that long, not none (`Pool::lock_timeout`, to the
/// microsecond), and a transaction that meets the map held by another
/// (held until this one's request has ended, so the request must time
/// out) fails with `LockTimeout`, as does a read through `&Pool` that
/// meets it, changing nothing. (Until 8637d51 the bound was kept in whole
/// milliseconds, so any timeout under one was zero and every wait failed
/// at once: this probe met that first, by timing the waits. The bound is
/// read back instead: no outcome depends on the clock.)
#[test]
fn a_lock_timeout_under_a_millisecond_is_kept_and_ends_in_lock_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let pool = Pool::create(
        dir.path().join("t.pool"),
        "five",
        8 << 20,
        &PoolConfig::default(),
    )
    .unwrap();
    let m = pool
        .transaction(|tx| {
            let m = BTreeMap::<u64, u64>::create(tx)?;
            m.insert(tx, 1, 1)?;
            Ok::<_, Error>(m)
        })
        .unwrap();
    for bound in [
        Duration::from_micros(900),
        Duration::from_micros(1500),
        Duration::from_nanos(300_001),
    ] {
        pool.set_lock_timeout(bound);
        let kept = pool.lock_timeout();
        assert!(
            kept > Duration::ZERO && kept == Duration::from_micros(bound.as_micros() as u64),
            "{bound:?} kept as {kept:?}"
        );
        let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let mut seen = std::vec::Vec::new();
        std::thread::scope(|s| {
            let pool = &pool;
            s.spawn(move || {
                pool.transaction(|tx| {
                    m.insert(tx, 2, 2)?;
                    held_tx.send(()).unwrap();
                    // Held until the other thread's requests have ended
                    // (or it failed: its sender dropped).
                    let _ = done_rx.recv();
                    Ok::<_, Error>(())
                })
                .unwrap();
            });
            held_rx.recv().unwrap();
            // (Moved in: dropped however this closure ends.)
            let done_tx = done_tx;
            for what in ["insert", "get"] {
                let r = match what {
                    "insert" => pool.transaction(|tx| m.insert(tx, 3, 3)).map(drop),
                    _ => m.get(pool, &1).map(drop),
                };
                seen.push((what, r));
            }
            drop(done_tx);
        });
        for (what, r) in seen {
            match r {
                Err(Error::Pool(rewind::Error::LockTimeout { .. })) => {}
                r => panic!("{bound:?}: {what}: {r:?}, not LockTimeout"),
            }
        }
        assert_eq!(m.get(&pool, &2).unwrap(), Some(2));
        assert_eq!(m.get(&pool, &3).unwrap(), None);
    }
}

/// Four threads fill a pool that grows by itself (created at 1 MiB, at most
/// 6 MiB) with every collection at once until the pool is at its maximum
/// and full: every refusal is typed (`OutOfMemory`, `LogFull`), the pool
/// holds exactly the committed entries, passes its checks, reopens, and
/// after emptying takes as many again.
#[test]
fn threads_filling_a_growing_pool_to_its_maximum_keep_exactly_their_commits() {
    for cfg in [
        PoolConfig::default(),
        PoolConfig::default().policy(rewind::Policy::Force),
        PoolConfig::default().policy(rewind::Policy::NoForce),
        PoolConfig::default().policy(rewind::Policy::RedoAsync),
    ] {
        let name = common::name(&cfg);
        let cfg = cfg.max_size(6 << 20);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.pool");
        let pool = Pool::create(&path, "five", 1 << 20, &cfg).unwrap();
        let c = make(&pool).unwrap();
        // The blocks that are no collection's (the catalog of names).
        let owned = |pool: &Pool| -> std::collections::BTreeSet<u64> {
            let c = find(pool);
            [
                c.map.blocks(pool).unwrap(),
                c.smap.blocks(pool).unwrap(),
                c.hash.blocks(pool).unwrap(),
                c.list.blocks(pool).unwrap(),
                c.vec.blocks(pool).unwrap(),
                c.blob.blocks(pool).unwrap(),
            ]
            .concat()
            .into_iter()
            .collect()
        };
        let all = |pool: &Pool| -> std::collections::BTreeSet<u64> {
            common::allocated(pool).into_iter().collect()
        };
        let others: std::collections::BTreeSet<u64> =
            all(&pool).difference(&owned(&pool)).copied().collect();
        let fill = |pool: &Pool, round: u64| -> [u64; 4] {
            let mut counts = [0u64; 4];
            std::thread::scope(|s| {
                let hs: std::vec::Vec<_> = (0..4u64)
                    .map(|t| {
                        let (c, name) = (c, &name);
                        s.spawn(move || {
                            let mut n = 0u64;
                            let mut refused = 0;
                            while refused < 3 {
                                let k = round << 40 | t << 32 | n;
                                let r = pool.transaction(|tx| {
                                    match t {
                                        0 => drop(c.map.insert(tx, k, k)?),
                                        1 => drop(c.smap.insert(
                                            tx,
                                            format!("{k:060}"),
                                            vec![t as u8; 90],
                                        )?),
                                        2 => drop(c.hash.insert(tx, k, k)?),
                                        _ => {
                                            c.list.push_back(tx, k)?;
                                            c.vec.push(tx, k)?;
                                        }
                                    }
                                    Ok::<_, Error>(())
                                });
                                match r {
                                    Ok(()) => {
                                        n += 1;
                                        refused = 0;
                                    }
                                    Err(e) if is_full(&e) => refused += 1,
                                    Err(e) if retryable(&e) => {}
                                    Err(e) => panic!("{name}: thread {t}: {e}"),
                                }
                            }
                            n
                        })
                    })
                    .collect();
                for (t, h) in hs.into_iter().enumerate() {
                    counts[t] = h.join().unwrap();
                }
            });
            counts
        };
        let counts = fill(&pool, 0);
        assert!(
            pool.size() > 5 << 20,
            "{name}: grew to {} only",
            pool.size()
        );
        let check = |pool: &Pool, counts: [u64; 4], what: &str| {
            let c = find(pool);
            assert_eq!(c.map.len(pool).unwrap(), counts[0], "{name} {what}");
            assert_eq!(c.smap.len(pool).unwrap(), counts[1], "{name} {what}");
            assert_eq!(c.hash.len(pool).unwrap(), counts[2], "{name} {what}");
            assert_eq!(c.list.len(pool).unwrap(), counts[3], "{name} {what}");
            assert_eq!(c.vec.len(pool).unwrap(), counts[3], "{name} {what}");
            read_all(pool, &c).unwrap_or_else(|e| panic!("{name} {what}: {e}"));
        };
        check(&pool, counts, "full");
        pool.close().unwrap();
        let r = rewind::inspect::check(&path).unwrap();
        assert!(r.is_ok(), "{name}: {r}");
        let pool = Pool::open(&path, "five", &rewind::OpenOptions::default()).unwrap();
        check(&pool, counts, "reopened");
        let c = find(&pool);
        // Emptied in batches, then filled again: as many entries fit.
        for k in 0..5 {
            loop {
                let r = pool.transaction(|tx| {
                    let mut any = false;
                    for _ in 0..200 {
                        any |= match k {
                            0 => c.map.pop_first(tx)?.is_some(),
                            1 => c.smap.pop_last(tx)?.is_some(),
                            2 => {
                                let k = c.hash.iter_tx(tx)?.next().transpose()?.map(|e| e.0);
                                match k {
                                    Some(k) => c.hash.remove(tx, &k)?.is_some(),
                                    None => false,
                                }
                            }
                            3 => c.list.pop_back(tx)?.is_some(),
                            _ => c.vec.pop(tx)?.is_some(),
                        };
                    }
                    Ok::<_, Error>(any)
                });
                match r {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => panic!("{name}: emptying {k}: {e}"),
                }
            }
        }
        check(&pool, [0; 4], "emptied");
        // Emptied, the pool holds the collections' blocks and the catalog's,
        // nothing else: no block leaked by the refused operations.
        let leaked: std::vec::Vec<u64> = all(&pool)
            .difference(&owned(&pool))
            .filter(|b| !others.contains(b))
            .copied()
            .collect();
        assert!(leaked.is_empty(), "{name}: {} blocks leaked", leaked.len());
        let again = fill(&pool, 1);
        check(&pool, again, "refilled");
        // (How the space is shared among the threads is a race.)
        assert!(again.iter().sum::<u64>() > 0, "{name}: nothing fits again");
    }
}

/// A cursor whose element was removed, its node's block then taken by an
/// element pushed into the same list, is `InvalidCursor` for `value`,
/// `remove_at`, `next` and `prev`, under every policy; the new element
/// stays. (The cursor was only the node's offset, and the block looked
/// like a node of this list again: `value` gave the new element's value
/// and `remove_at` removed it, where the docs promise `InvalidCursor` for
/// a removed element, "also once its block holds other bytes".) A cursor
/// at an element that stays works before and after.
#[test]
fn a_cursor_whose_block_holds_a_new_element_of_its_list_is_invalid() {
    for policy in rewind::Policy::ALL {
        let dir = tempfile::tempdir().unwrap();
        let pool = Pool::create(
            dir.path().join("l.pool"),
            "five",
            8 << 20,
            &PoolConfig::default().policy(policy),
        )
        .unwrap();
        let l = pool
            .transaction(|tx| {
                let l = List::<u64>::create(tx)?;
                for i in 1..=3 {
                    l.push_back(tx, i)?;
                }
                Ok::<_, Error>(l)
            })
            .unwrap();
        let c = l.cursor(&pool, 1).unwrap().unwrap();
        let keep = l.cursor(&pool, 2).unwrap().unwrap();
        assert_eq!(l.value(&pool, c).unwrap(), 2);
        // Another thread's transactions, as it were: element 2 removed,
        // then pushes until one takes its block.
        pool.transaction(|tx| l.remove(tx, 1)).unwrap();
        let mut reused = false;
        for v in 10..40u64 {
            pool.transaction(|tx| l.push_back(tx, v)).unwrap();
            let n = l.len(&pool).unwrap();
            let at: std::vec::Vec<u64> = (0..n)
                .map(|i| l.cursor(&pool, i).unwrap().unwrap().offset())
                .collect();
            if at.contains(&c.offset()) {
                reused = true;
                break;
            }
        }
        assert!(
            reused,
            "{policy:?}: the removed node's block was never reused"
        );
        let before: std::vec::Vec<u64> = l.iter(&pool).unwrap().map(|e| e.unwrap()).collect();
        let invalid = |r: Result<String, Error>, what: &str| match r {
            Err(Error::InvalidCursor { .. }) => {}
            r => panic!("{policy:?}: {what} of a removed element's cursor: {r:?}"),
        };
        invalid(l.value(&pool, c).map(|v| format!("{v}")), "value");
        invalid(l.next(&pool, c).map(|v| format!("{v:?}")), "next");
        invalid(l.prev(&pool, c).map(|v| format!("{v:?}")), "prev");
        invalid(
            pool.transaction(|tx| l.remove_at(tx, c))
                .map(|v| format!("{v}")),
            "remove_at",
        );
        let after: std::vec::Vec<u64> = l.iter(&pool).unwrap().map(|e| e.unwrap()).collect();
        assert_eq!(after, before, "{policy:?}: the list changed");
        // The cursor of an element that stayed still works.
        assert_eq!(l.value(&pool, keep).unwrap(), 3, "{policy:?}");
        let n = l.next(&pool, keep).unwrap().unwrap();
        assert_eq!(l.prev(&pool, n).unwrap(), Some(keep), "{policy:?}");
        assert_eq!(pool.transaction(|tx| l.remove_at(tx, keep)).unwrap(), 3);
        l.check_invariants(&pool).unwrap();
        // A list of the layout without numbers is refused, named.
        pool.transaction(|tx| tx.write_bytes(l.as_ptr().offset(), b"RWLIST02"))
            .unwrap();
        match l.len(&pool) {
            Err(Error::UnsupportedLayout {
                found: "RWLIST02",
                expected: "RWLIST04",
                ..
            }) => {}
            r => panic!("{policy:?}: an RWLIST02 header: {r:?}"),
        }
    }
}

/// A cursor taken, in a transaction that then rolls back, at the element
/// that transaction pushed is `InvalidCursor` once the next push takes the
/// same block (and the same count, given back by the rollback), under
/// every policy; the new element stays.
#[test]
fn a_cursor_to_a_rolled_back_push_is_invalid() {
    for policy in rewind::Policy::ALL {
        let dir = tempfile::tempdir().unwrap();
        let pool = Pool::create(
            dir.path().join("l.pool"),
            "five",
            8 << 20,
            &PoolConfig::default().policy(policy),
        )
        .unwrap();
        let l = pool
            .transaction(|tx| {
                let l = List::<u64>::create(tx)?;
                l.push_back(tx, 1)?;
                Ok::<_, Error>(l)
            })
            .unwrap();
        let mut c = None;
        let r = pool.transaction(|tx| {
            l.push_back(tx, 5)?;
            c = l.cursor_tx(tx, 1)?;
            Err::<(), Error>(common::aborted())
        });
        assert!(matches!(r, Err(Error::Pool(rewind::Error::Aborted))));
        let c = c.expect("a cursor at the pushed element");
        pool.transaction(|tx| l.push_back(tx, 6)).unwrap();
        let now = l.cursor(&pool, 1).unwrap().unwrap();
        assert_eq!(
            now.offset(),
            c.offset(),
            "{policy:?}: the block was not reused"
        );
        match l.value(&pool, c) {
            Err(Error::InvalidCursor { .. }) => {}
            r => panic!("{policy:?}: value of a rolled-back push's cursor: {r:?}"),
        }
        match pool.transaction(|tx| l.remove_at(tx, c)) {
            Err(Error::InvalidCursor { .. }) => {}
            r => panic!("{policy:?}: remove_at of a rolled-back push's cursor: {r:?}"),
        }
        assert_eq!(l.value(&pool, now).unwrap(), 6, "{policy:?}");
        let all: std::vec::Vec<u64> = l.iter(&pool).unwrap().map(|e| e.unwrap()).collect();
        assert_eq!(all, [1, 6], "{policy:?}");
    }
}
