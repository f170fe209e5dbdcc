//! Collections filled until their pool is full, under every log variant ×
//! policy: the insert that fails returns a typed error and leaves the
//! collection exactly as it was, whether the closure hands the error on
//! (the transaction rolls back) or swallows it and commits what came
//! before; the space freed by removals serves new inserts; a reopened pool
//! holds exactly the committed entries.

mod common;
use common::{configs, name};

use std::collections::BTreeMap as Std;

use rewind::{Pool, PoolConfig};
use rewind_collections::{BTreeMap, Blob, Error, HashMap, List, Vec as PVec};

const LAYOUT: &str = "full-probe";

/// A small simulated pool: exhaustion comes after a few thousand entries.
fn sim(cfg: &PoolConfig, size: u64) -> Pool {
    let cfg = cfg.clone().backend(rewind::Backend::Sim);
    Pool::create_sim(LAYOUT, size, &cfg).unwrap()
}

/// The pool a process kill now would leave, recovered.
fn reopen(pool: &Pool) -> Pool {
    let img = pool.domain().with_sim(|s| s.image_all_pending()).unwrap();
    Pool::open_image(img, LAYOUT).unwrap()
}

fn is_full(e: &Error) -> bool {
    matches!(
        e,
        Error::Pool(rewind::Error::OutOfMemory { .. } | rewind::Error::LogFull { .. })
    )
}

/// The key and value of entry `i`: keys and values of every length class
/// (inline up to 36 bytes, in a block of their own beyond).
fn entry(i: u64) -> (String, std::vec::Vec<u8>) {
    let klen = [3usize, 20, 36, 37, 90, 300][(i % 6) as usize];
    let vlen = [0usize, 8, 36, 40, 200, 700, 1500][(i % 7) as usize];
    let mut k = format!("{i:08}-");
    while k.len() < klen {
        k.push((b'a' + (i % 26) as u8) as char);
    }
    (k, vec![(i % 251) as u8; vlen])
}

fn btree_contents(
    map: &BTreeMap<String, std::vec::Vec<u8>>,
    pool: &Pool,
) -> Std<String, std::vec::Vec<u8>> {
    map.iter(pool).unwrap().map(|r| r.unwrap()).collect()
}

/// Inserts entries one transaction each until one fails for want of space;
/// `swallow`: the closure drops the error and returns `Ok`, so the
/// transaction commits whatever the failed insert left. Returns the
/// failures seen (a few, past the first, to probe several split points).
fn fill_btree(
    pool: &Pool,
    map: &BTreeMap<String, std::vec::Vec<u8>>,
    model: &mut Std<String, std::vec::Vec<u8>>,
    from: u64,
    swallow: bool,
    who: &str,
) -> u64 {
    let mut failures = 0;
    let mut i = from;
    while failures < 8 {
        let (k, v) = entry(i);
        let r = pool.transaction(|tx| match map.insert(tx, k.clone(), v.clone()) {
            Ok(_) => Ok(true),
            Err(e) if swallow && is_full(&e) => Ok(false),
            Err(e) => Err(e),
        });
        match r {
            Ok(true) => {
                model.insert(k, v);
            }
            Ok(false) => failures += 1,
            Err(e) => {
                assert!(is_full(&e), "{who}: insert {i}: untyped error {e}");
                failures += 1;
            }
        }
        i += 1;
        assert!(i < from + 200_000, "{who}: the pool never filled");
    }
    i
}

fn check_btree(
    pool: &Pool,
    map: &BTreeMap<String, std::vec::Vec<u8>>,
    model: &Std<String, std::vec::Vec<u8>>,
    who: &str,
) {
    map.check_invariants(pool)
        .unwrap_or_else(|e| panic!("{who}: invariants: {e}"));
    assert_eq!(map.len(pool).unwrap(), model.len() as u64, "{who}: len");
    let got = btree_contents(map, pool);
    assert!(&got == model, "{who}: contents differ from the model");
    let c = rewind::inspect::check_pool(pool);
    assert!(c.is_ok(), "{who}: {c}");
}

#[test]
fn a_btree_filled_until_full_stays_whole_and_reuses_freed_space() {
    for cfg in configs() {
        for swallow in [false, true] {
            let who = format!("{} swallow={swallow}", name(&cfg));
            let pool = sim(&cfg, 2 << 20);
            let map = pool
                .transaction(BTreeMap::<String, std::vec::Vec<u8>>::create)
                .unwrap();
            let mut model = Std::new();
            let next = fill_btree(&pool, &map, &mut model, 0, swallow, &who);
            assert!(model.len() > 100, "{who}: only {} entries", model.len());
            check_btree(&pool, &map, &model, &who);
            // Remove half (every other key, one transaction each), then fill
            // again: the freed space serves the new entries.
            let keys: std::vec::Vec<String> = model.keys().step_by(2).cloned().collect();
            for k in &keys {
                pool.transaction(|tx| map.remove(tx, k.as_str()))
                    .unwrap_or_else(|e| panic!("{who}: remove: {e}"));
                model.remove(k);
            }
            check_btree(&pool, &map, &model, &who);
            let before = model.len();
            fill_btree(&pool, &map, &mut model, next, swallow, &who);
            assert!(
                model.len() > before + keys.len() / 4,
                "{who}: {} entries after refill, {before} before, {} removed",
                model.len(),
                keys.len()
            );
            check_btree(&pool, &map, &model, &who);
            let again = reopen(&pool);
            check_btree(&again, &map, &model, &format!("{who} reopened"));
        }
    }
}

/// Runs `op` in transactions of `batch` calls each until `failures`
/// calls have failed for want of space; with `swallow` the closure drops
/// the failing call's error and commits the calls before it. `ok(i)`
/// records call `i` in the model once its transaction committed.
fn fill<F, M>(pool: &Pool, batch: u64, swallow: bool, who: &str, mut op: F, mut ok: M) -> u64
where
    F: FnMut(&mut rewind::Tx<'_>, u64) -> Result<(), Error>,
    M: FnMut(u64),
{
    let mut failures = 0;
    let mut i = 0u64;
    while failures < 6 {
        let start = i;
        let r = pool.transaction(|tx| {
            let mut done = 0;
            for j in start..start + batch {
                match op(tx, j) {
                    Ok(()) => done += 1,
                    Err(e) if swallow && is_full(&e) => return Ok((done, true)),
                    Err(e) => return Err(e),
                }
            }
            Ok((done, false))
        });
        match r {
            Ok((done, failed)) => {
                (start..start + done).for_each(&mut ok);
                i = start + done + u64::from(failed);
                failures += u64::from(failed);
            }
            Err(e) => {
                if std::env::var("PROBE_VERBOSE").is_ok() {
                    eprintln!("{who}: call {start}: {e} {:?}", pool.alloc_stats());
                }
                assert!(is_full(&e), "{who}: call {start}: untyped error {e}");
                failures += 1;
                i = start + 1;
            }
        }
        assert!(i < 2_000_000, "{who}: the pool never filled");
    }
    i
}

#[test]
fn a_hash_map_filled_until_full_through_its_doublings_stays_whole() {
    let only = std::env::var("PROBE_ONLY").ok();
    for cfg in configs() {
        if only.as_ref().is_some_and(|o| *o != name(&cfg)) {
            continue;
        }
        for swallow in [false, true] {
            let who = format!("{} swallow={swallow}", name(&cfg));
            let pool = sim(&cfg, 2 << 20);
            let map = pool.transaction(HashMap::<u64, [u64; 6]>::create).unwrap();
            let mut model = Std::new();
            let key = |i: u64| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20;
            fill(
                &pool,
                7,
                swallow,
                &who,
                |tx, i| map.insert(tx, key(i), [i; 6]).map(|_| ()),
                |i| {
                    model.insert(key(i), [i; 6]);
                },
            );
            let check = |pool: &Pool, model: &Std<u64, [u64; 6]>, who: &str| {
                map.check_invariants(pool)
                    .unwrap_or_else(|e| panic!("{who}: invariants: {e}"));
                let mut got = map.entries(pool).unwrap();
                got.sort_unstable();
                let want: std::vec::Vec<(u64, [u64; 6])> =
                    model.iter().map(|(&k, &v)| (k, v)).collect();
                assert!(
                    got == want,
                    "{who}: {} entries, {} in the model",
                    got.len(),
                    want.len()
                );
                let c = rewind::inspect::check_pool(pool);
                assert!(c.is_ok(), "{who}: {c}");
            };
            check(&pool, &model, &who);
            assert!(model.len() > 1000, "{who}: only {}", model.len());
            // Free a third, refill.
            let gone: std::vec::Vec<u64> = model.keys().step_by(3).copied().collect();
            for chunk in gone.chunks(50) {
                pool.transaction(|tx| {
                    for k in chunk {
                        map.remove(tx, k)?;
                    }
                    Ok::<_, Error>(())
                })
                .unwrap_or_else(|e| panic!("{who}: remove: {e}"));
            }
            for k in &gone {
                model.remove(k);
            }
            check(&pool, &model, &who);
            let before = model.len();
            let base = 10_000_000u64;
            fill(
                &pool,
                5,
                swallow,
                &who,
                |tx, i| map.insert(tx, key(base + i), [base + i; 6]).map(|_| ()),
                |i| {
                    model.insert(key(base + i), [base + i; 6]);
                },
            );
            assert!(model.len() > before + gone.len() / 4, "{who}: refill");
            check(&pool, &model, &who);
            check(&reopen(&pool), &model, &format!("{who} reopened"));
        }
    }
}

#[test]
fn a_list_a_vec_and_a_blob_filled_until_full_stay_whole() {
    for cfg in configs() {
        for swallow in [false, true] {
            let who = format!("{} swallow={swallow}", name(&cfg));
            // Each size class takes chunks of 256 KiB: 4 MiB leaves room
            // for the classes the three use.
            let pool = sim(&cfg, 4 << 20);
            let (list, vec, blob) = pool
                .transaction(|tx| {
                    Ok::<_, Error>((
                        List::<[u64; 4]>::create(tx)?,
                        PVec::<[u64; 3]>::create(tx)?,
                        Blob::create(tx)?,
                    ))
                })
                .unwrap();
            let mut lm: std::vec::Vec<[u64; 4]> = std::vec::Vec::new();
            let mut vm: std::vec::Vec<[u64; 3]> = std::vec::Vec::new();
            let mut bm: std::vec::Vec<u8> = std::vec::Vec::new();
            let piece = |i: u64| vec![(i % 253) as u8; 1000 + (i % 7) as usize * 300];
            // Round-robin: list, vec, blob, so each meets the full pool.
            fill(
                &pool,
                3,
                swallow,
                &who,
                |tx, i| match i % 3 {
                    0 => list.push_back(tx, [i; 4]),
                    1 => vec.push(tx, [i; 3]),
                    _ => blob.append(tx, &piece(i)),
                },
                |i| match i % 3 {
                    0 => lm.push([i; 4]),
                    1 => vm.push([i; 3]),
                    _ => bm.extend_from_slice(&piece(i)),
                },
            );
            let check = |pool: &Pool, lm: &[[u64; 4]], vm: &[[u64; 3]], bm: &[u8], who: &str| {
                list.check_invariants(pool)
                    .unwrap_or_else(|e| panic!("{who}: list invariants: {e}"));
                let got: std::vec::Vec<[u64; 4]> =
                    list.iter(pool).unwrap().map(|r| r.unwrap()).collect();
                assert!(got == lm, "{who}: list {} vs {}", got.len(), lm.len());
                let got = vec.to_vec(pool).unwrap();
                assert!(got == vm, "{who}: vec {} vs {}", got.len(), vm.len());
                let got = blob.read(pool).unwrap();
                assert!(got == bm, "{who}: blob {} vs {}", got.len(), bm.len());
                let c = rewind::inspect::check_pool(pool);
                assert!(c.is_ok(), "{who}: {c}");
            };
            check(&pool, &lm, &vm, &bm, &who);
            // Free: pop half the list and truncate the blob, then push again.
            let n = lm.len() / 2;
            pool.transaction(|tx| {
                for _ in 0..n {
                    list.pop_front(tx)?;
                }
                blob.truncate(tx, bm.len() as u64 / 4)
            })
            .unwrap_or_else(|e| panic!("{who}: free: {e}"));
            // A smaller buffer: there may be no free block of its class
            // (the list's freed blocks are of another), then an error that
            // changes nothing.
            if let Err(e) = pool.transaction(|tx| blob.shrink_to_fit(tx)) {
                assert!(is_full(&e), "{who}: shrink: {e}");
            }
            lm.drain(..n);
            bm.truncate(bm.len() / 4);
            check(&pool, &lm, &vm, &bm, &who);
            let before = lm.len();
            let mut pushed = 0;
            for i in 0..n as u64 {
                let r = pool.transaction(|tx| list.push_back(tx, [i + 1_000_000; 4]));
                match r {
                    Ok(()) => {
                        lm.push([i + 1_000_000; 4]);
                        pushed += 1;
                    }
                    Err(e) => {
                        assert!(is_full(&e), "{who}: {e}");
                        assert!(
                            pushed > 0,
                            "{who}: freed space not reused: {e} {:?}",
                            pool.alloc_stats()
                        );
                        break;
                    }
                }
            }
            assert!(
                pushed > 0 && lm.len() > before,
                "{who}: freed space not reused: n={n} before={before} vec={} blob={}",
                vm.len(),
                bm.len()
            );
            check(&pool, &lm, &vm, &bm, &who);
            check(&reopen(&pool), &lm, &vm, &bm, &format!("{who} reopened"));
        }
    }
}

/// A hash map of 4,000 entries (about 300 KiB with its table) in a 2 MiB
/// pool, under every configuration, in transactions of 1, 3 and 7
/// inserts. Under redo-async the Simple and two-layer logs (a log block or
/// a tree node per record) grew into the heap with records waiting for
/// write-back, and an insert failed with `OutOfMemory` after 1,000 to
/// 4,000 entries instead of draining them; before that, the freed tables'
/// values written back over the log's chunks broke the map.
#[test]
fn a_hash_map_of_4000_entries_fits_a_2_mib_pool_under_every_configuration() {
    for cfg in configs() {
        for batch in [1u64, 3, 7] {
            let who = format!("{} batch={batch}", name(&cfg));
            let pool = sim(&cfg, 2 << 20);
            let map = pool.transaction(HashMap::<u64, [u64; 6]>::create).unwrap();
            let key = |i: u64| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20;
            let mut i = 0;
            while i < 4000 {
                pool.transaction(|tx| {
                    for j in i..i + batch {
                        map.insert(tx, key(j), [j; 6])?;
                    }
                    Ok::<_, Error>(())
                })
                .unwrap_or_else(|e| panic!("{who}: inserting from {i}: {e}"));
                i += batch;
            }
            map.check_invariants(&pool)
                .unwrap_or_else(|e| panic!("{who}: {e}"));
            assert_eq!(map.len(&pool).unwrap(), i, "{who}");
            let again = reopen(&pool);
            map.check_invariants(&again)
                .unwrap_or_else(|e| panic!("{who} reopened: {e}"));
            assert_eq!(
                map.get(&again, &key(i - 1)).unwrap(),
                Some([i - 1; 6]),
                "{who}"
            );
        }
    }
}
