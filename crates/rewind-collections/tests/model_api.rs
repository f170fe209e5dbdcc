//! Model tests of the std-like API against `std::collections`: `update` in
//! place, double-ended
//! ranges with every kind of bound, `iter().rev()`, first/last, the pops,
//! `contains_key`, `len`, `retain`, `clear`, the hash map's iterator, and
//! reads inside a transaction that see its own writes. Random programs of
//! transactions (some abort); after every operation the transaction's view
//! (`*_tx`) is compared with the model including the transaction's own
//! changes, after every transaction the committed view with the model of
//! the committed transactions, and the invariants are checked.
//!
//! Every program runs under every log variant × commit policy, on the
//! simulated domain, at fan-out 4 (many splits and merges) and at the
//! fan-out `create` picks.

use std::collections::{BTreeMap as StdBTreeMap, HashMap as StdHashMap};
use std::ops::Bound;

use proptest::prelude::*;
use rewind::{Pool, Tx};
use rewind_collections::{BTreeMap, Error, HashMap};

mod common;
use common::{aborted, configs, name};

type Map = BTreeMap<u32, u64>;
type Model = StdBTreeMap<u32, u64>;

#[derive(Clone, Debug)]
enum Op {
    Insert(u32, u64),
    /// Changes the value in place (`update`): XORs it with the number
    /// (one byte, or a few, of the eight change).
    Update(u32, u64),
    Remove(u32),
    PopFirst,
    PopLast,
    /// Keeps the entries whose key is not divisible by the number.
    Retain(u32),
    Clear,
    /// A range read from both ends: the bounds, then the pattern of ends
    /// (bit i set: the i-th step takes from the back).
    Range(Bound<u32>, Bound<u32>, u32),
}

fn bound() -> impl Strategy<Value = Bound<u32>> {
    prop_oneof![
        Just(Bound::Unbounded),
        (0..300u32).prop_map(Bound::Included),
        (0..300u32).prop_map(Bound::Excluded),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0..300u32;
    prop_oneof![
        12 => (key.clone(), any::<u64>()).prop_map(|(k, v)| Op::Insert(k, v)),
        4 => (key.clone(), 0..64u32, 1..=0xffffu64).prop_map(|(k, s, x)| Op::Update(k, x << s)),
        6 => key.prop_map(Op::Remove),
        1 => Just(Op::PopFirst),
        1 => Just(Op::PopLast),
        1 => (2..7u32).prop_map(Op::Retain),
        1 => prop::bool::weighted(0.1).prop_map(|c| if c { Op::Clear } else { Op::PopFirst }),
        3 => (bound(), bound(), any::<u32>()).prop_map(|(a, b, p)| Op::Range(a, b, p)),
    ]
}

fn programs() -> impl Strategy<Value = Vec<(Vec<Op>, bool)>> {
    prop::collection::vec(
        (
            prop::collection::vec(op(), 1..40),
            prop::bool::weighted(0.25),
        ),
        1..10,
    )
}

/// Whether a range with these bounds is one std accepts (it panics on a
/// start after the end, or equal bounds both excluded).
fn valid(a: Bound<u32>, b: Bound<u32>) -> bool {
    use Bound::*;
    match (a, b) {
        (Included(s) | Excluded(s), Included(e) | Excluded(e)) if s > e => false,
        (Excluded(s), Excluded(e)) if s == e => false,
        _ => true,
    }
}

/// Reads the range from both ends as `pattern` says, through `take`.
fn both_ends<T>(mut it: impl DoubleEndedIterator<Item = T>, pattern: u32) -> (Vec<T>, Vec<T>) {
    let (mut front, mut back) = (Vec::new(), Vec::new());
    for step in 0.. {
        let from_back = step < 32 && pattern >> step & 1 == 1;
        let next = if from_back { it.next_back() } else { it.next() };
        match next {
            Some(x) if from_back => back.push(x),
            Some(x) => front.push(x),
            None => break,
        }
    }
    (front, back)
}

/// Checks the transaction's view against `m` (the model with its writes).
fn check_tx(tx: &mut Tx<'_>, map: Map, m: &Model) -> Result<(), Error> {
    assert_eq!(map.len_tx(tx)?, m.len() as u64);
    let all: Vec<(u32, u64)> = map.iter_tx(tx)?.collect::<Result<_, _>>()?;
    assert!(all
        .iter()
        .eq(m.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>().iter()));
    let rev: Vec<(u32, u64)> = map.iter_tx(tx)?.rev().collect::<Result<_, _>>()?;
    assert!(rev.iter().eq(m
        .iter()
        .rev()
        .map(|(k, v)| (*k, *v))
        .collect::<Vec<_>>()
        .iter()));
    assert_eq!(
        map.first_key_value_tx(tx)?,
        m.first_key_value().map(|(k, v)| (*k, *v))
    );
    assert_eq!(
        map.last_key_value_tx(tx)?,
        m.last_key_value().map(|(k, v)| (*k, *v))
    );
    Ok(())
}

/// Applies one operation to the map in `tx` and to the model, comparing
/// what each returns.
fn apply(tx: &mut Tx<'_>, map: Map, m: &mut Model, op: &Op) -> Result<(), Error> {
    match *op {
        Op::Insert(k, v) => {
            assert_eq!(map.insert(tx, k, v)?, m.insert(k, v));
            assert!(map.contains_key_tx(tx, &k)?);
            assert_eq!(map.get_tx(tx, &k)?, Some(v));
        }
        Op::Update(k, x) => {
            let want = m.get_mut(&k).map(|v| {
                let old = *v;
                *v ^= x;
                old
            });
            let got = map.update(tx, &k, |v| {
                let old = *v;
                *v ^= x;
                old
            })?;
            assert_eq!(got, want);
            assert_eq!(map.get_tx(tx, &k)?, m.get(&k).copied());
        }
        Op::Remove(k) => {
            assert_eq!(map.remove(tx, &k)?, m.remove(&k));
            assert!(!map.contains_key_tx(tx, &k)?);
        }
        Op::PopFirst => assert_eq!(map.pop_first(tx)?, m.pop_first()),
        Op::PopLast => assert_eq!(map.pop_last(tx)?, m.pop_last()),
        Op::Retain(d) => {
            map.retain(tx, |k, _| k % d != 0)?;
            m.retain(|k, _| k % d != 0);
        }
        Op::Clear => {
            map.clear(tx)?;
            m.clear();
        }
        Op::Range(a, b, pattern) => {
            if valid(a, b) {
                let got = both_ends(map.range_tx(tx, (a, b))?, pattern);
                let want = both_ends(m.range((a, b)).map(|(k, v)| Ok((*k, *v))), pattern);
                assert_eq!(
                    (
                        got.0.into_iter().collect::<Result<Vec<_>, Error>>()?,
                        got.1.into_iter().collect::<Result<Vec<_>, Error>>()?
                    ),
                    (
                        want.0.into_iter().collect::<Result<Vec<_>, Error>>()?,
                        want.1.into_iter().collect::<Result<Vec<_>, Error>>()?
                    ),
                    "range {a:?}..{b:?}, pattern {pattern:b}"
                );
            }
        }
    }
    check_tx(tx, map, m)
}

/// The committed view against the model, from both ends.
fn check_pool(pool: &Pool, map: Map, m: &Model) {
    map.check_invariants(pool).unwrap();
    assert_eq!(map.len(pool).unwrap(), m.len() as u64);
    let all: Vec<(u32, u64)> = map.iter(pool).unwrap().map(Result::unwrap).collect();
    let want: Vec<(u32, u64)> = m.iter().map(|(k, v)| (*k, *v)).collect();
    assert_eq!(all, want);
    let rev: Vec<(u32, u64)> = map.iter(pool).unwrap().rev().map(Result::unwrap).collect();
    assert!(rev.iter().eq(want.iter().rev()));
    assert_eq!(map.first_key_value(pool).unwrap(), want.first().copied());
    assert_eq!(map.last_key_value(pool).unwrap(), want.last().copied());
    for k in [0, 7, 150, 299] {
        assert_eq!(map.contains_key(pool, &k).unwrap(), m.contains_key(&k));
    }
}

fn run(prog: &[(Vec<Op>, bool)], fanout: Option<usize>) {
    for cfg in configs() {
        let pool = Pool::create_sim("model-api", 8 << 20, &cfg).unwrap();
        let map = pool
            .transaction(|tx| match fanout {
                Some(f) => Map::create_with_fanout(tx, f),
                None => Map::create(tx),
            })
            .unwrap();
        let mut model = Model::new();
        for (ops, abort) in prog {
            let mut m = model.clone();
            let r = pool.transaction(|tx| {
                for op in ops {
                    apply(tx, map, &mut m, op)?;
                }
                if *abort {
                    return Err(aborted());
                }
                Ok(())
            });
            match r {
                Ok(()) => model = m,
                Err(Error::Pool(rewind::Error::Aborted)) if *abort => {}
                Err(e) => panic!("{}: {e}", name(&cfg)),
            }
            check_pool(&pool, map, &model);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn btree_api_matches_std_at_fanout_4(prog in programs()) {
        run(&prog, Some(4));
    }

    #[test]
    fn btree_api_matches_std_at_the_chosen_fanout(prog in programs()) {
        run(&prog, None);
    }

    #[test]
    fn hash_iter_matches_std(
        prog in prop::collection::vec(
            (prop::collection::vec((0..200u32, any::<u64>(), prop::bool::ANY), 1..40),
             prop::bool::weighted(0.25)),
            1..8,
        )
    ) {
        let pool = Pool::create_sim("model-hash", 8 << 20, &Default::default()).unwrap();
        let h = pool.transaction(HashMap::<u32, u64>::create).unwrap();
        let mut model: StdHashMap<u32, u64> = StdHashMap::new();
        let sorted = |mut v: Vec<(u32, u64)>| {
            v.sort_unstable();
            v
        };
        for (ops, abort) in &prog {
            let mut m = model.clone();
            let r = pool.transaction(|tx| {
                for &(k, v, insert) in ops {
                    if insert {
                        assert_eq!(h.insert(tx, k, v)?, m.insert(k, v));
                    } else {
                        assert_eq!(h.remove(tx, &k)?, m.remove(&k));
                    }
                    assert_eq!(h.contains_key_tx(tx, &k)?, m.contains_key(&k));
                    let seen: Vec<(u32, u64)> = h.iter_tx(tx)?.collect::<Result<_, _>>()?;
                    assert_eq!(sorted(seen), sorted(m.iter().map(|(k, v)| (*k, *v)).collect()));
                }
                if *abort {
                    return Err(aborted());
                }
                Ok(())
            });
            if r.is_ok() {
                model = m;
            }
            let seen: Vec<(u32, u64)> = h.iter(&pool).unwrap().map(Result::unwrap).collect();
            prop_assert_eq!(sorted(seen), sorted(model.iter().map(|(k, v)| (*k, *v)).collect()));
            h.check_invariants(&pool).unwrap();
        }
    }
}
