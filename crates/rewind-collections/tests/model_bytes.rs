//! Model test of byte-string keys and values (`FixedBytes<N>`) in the
//! B+-tree (against `BTreeMap<Vec<u8>, Vec<u8>>`, so the order of the keys
//! is checked too) and the hash map, under every log variant × policy.
//! Some generated strings are longer than `N`: `FixedBytes::new` must
//! refuse them with `TooLong`, and nothing is inserted.

mod common;

use std::collections::{BTreeMap as StdBTreeMap, HashMap as StdHashMap};

use proptest::prelude::*;
use rewind::Pool;
use rewind_collections::{BTreeMap, Error, FixedBytes, HashMap};

use common::{aborted, configs, name};

const POOL: u64 = 16 << 20;
type Key = FixedBytes<10>;
type Val = FixedBytes<6>;

#[derive(Clone, Debug)]
enum Op {
    Insert(Vec<u8>, Vec<u8>),
    Remove(Vec<u8>),
    Range(Vec<u8>, Vec<u8>),
}

/// Strings over a small alphabet, 0 to 12 bytes: many shared prefixes,
/// some too long for a `Key`.
fn key() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(vec![b'a', b'b', b'c', 0, 0xff]), 0..13)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (key(), prop::collection::vec(any::<u8>(), 0..8)).prop_map(|(k, v)| Op::Insert(k, v)),
        3 => key().prop_map(Op::Remove),
        1 => (key(), key()).prop_map(|(a, b)| {
            if a <= b { Op::Range(a, b) } else { Op::Range(b, a) }
        }),
    ]
}

fn programs() -> impl Strategy<Value = Vec<(Vec<Op>, bool)>> {
    prop::collection::vec(
        (
            prop::collection::vec(op(), 1..16),
            prop::bool::weighted(0.25),
        ),
        1..10,
    )
}

/// The typed key, or the error `FixedBytes::new` must give.
fn typed<const N: usize>(b: &[u8]) -> Option<FixedBytes<N>> {
    match FixedBytes::<N>::new(b) {
        Ok(k) => {
            assert!(b.len() <= N);
            assert_eq!(k.as_bytes(), b);
            Some(k)
        }
        Err(Error::TooLong { len, max, .. }) => {
            assert_eq!((len, max), (b.len() as u64, N as u64));
            None
        }
        Err(e) => panic!("{e}"),
    }
}

fn run(cfg: &rewind::PoolConfig, prog: &[(Vec<Op>, bool)]) {
    let pool = Pool::create_sim("bytes", POOL, cfg).unwrap();
    let (tree, hash) = pool
        .transaction(|tx| {
            let t = BTreeMap::<Key, Val>::create_with_fanout(tx, 4)?;
            let h = HashMap::<Key, Val>::create(tx)?;
            Ok::<_, Error>((t, h))
        })
        .unwrap();
    let mut model: StdBTreeMap<Vec<u8>, Vec<u8>> = StdBTreeMap::new();
    for (ops, abort) in prog {
        let mut next = model.clone();
        let r = pool.transaction(|tx| {
            for op in ops {
                match op {
                    Op::Insert(k, v) => {
                        let (Some(tk), Some(tv)) = (typed::<10>(k), typed::<6>(v)) else {
                            continue;
                        };
                        let old = next.insert(k.clone(), v.clone());
                        let want = old.as_deref().map(|o| Val::new(o).unwrap());
                        assert_eq!(tree.insert(tx, tk, tv)?, want);
                        assert_eq!(hash.insert(tx, tk, tv)?, want);
                    }
                    Op::Remove(k) => {
                        let Some(tk) = typed::<10>(k) else { continue };
                        let want = next.remove(k).map(|o| Val::new(o).unwrap());
                        assert_eq!(tree.remove(tx, &tk)?, want);
                        assert_eq!(hash.remove(tx, &tk)?, want);
                    }
                    Op::Range(..) => {}
                }
            }
            if *abort {
                return Err(aborted());
            }
            Ok(())
        });
        match r {
            Ok(()) => model = next,
            Err(Error::Pool(rewind::Error::Aborted)) if *abort => {}
            Err(e) => panic!("{}: transaction failed: {e}", name(cfg)),
        }
        tree.check_invariants(&pool).unwrap();
        hash.check_invariants(&pool).unwrap();
        let got: Vec<(Vec<u8>, Vec<u8>)> = tree
            .iter(&pool)
            .unwrap()
            .map(|e| e.map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec())))
            .collect::<Result<_, _>>()
            .unwrap();
        let want: Vec<(Vec<u8>, Vec<u8>)> = model.clone().into_iter().collect();
        assert_eq!(got, want, "{}", name(cfg));
        let hashed: StdHashMap<Vec<u8>, Vec<u8>> = hash
            .entries(&pool)
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect();
        assert_eq!(hashed, model.clone().into_iter().collect());
        for op in ops {
            let Op::Range(a, b) = op else { continue };
            let (Some(ta), Some(tb)) = (typed::<10>(a), typed::<10>(b)) else {
                continue;
            };
            let got: Vec<Vec<u8>> = tree
                .range(&pool, ta..tb)
                .unwrap()
                .map(|e| e.unwrap().0.as_bytes().to_vec())
                .collect();
            let want: Vec<Vec<u8>> = model
                .range(a.clone()..b.clone())
                .map(|(k, _)| k.clone())
                .collect();
            assert_eq!(got, want);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn byte_strings_match_std(prog in programs()) {
        for cfg in configs() {
            run(&cfg, &prog);
        }
    }
}
