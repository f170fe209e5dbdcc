//! Model tests: random programs of transactions over the collections, run
//! against the std collections. Some transactions abort (their effects
//! must be absent), every operation's result must match the model's, and
//! after the program the pool is closed, reopened and compared again. The
//! B+-tree's invariants are checked after every transaction.
//!
//! Every program runs under every log variant × commit policy.

use std::collections::{BTreeMap as StdBTreeMap, HashMap as StdHashMap};
use std::path::Path;

use proptest::prelude::*;
use rewind::{PPtr, Pod, Pool, PoolConfig, Zeroable};
use rewind_collections::{BTreeMap, Error, HashMap, Vec as PVec};

const POOL: u64 = 16 << 20;

mod common;
use common::{aborted, configs};

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct Root {
    map: PPtr<BTreeMap<u32, u64>>,
    vec: PPtr<PVec<u64>>,
    hash: PPtr<HashMap<u32, u64>>,
}

#[derive(Clone, Debug)]
enum MapOp {
    Insert(u32, u64),
    Remove(u32),
    Get(u32),
    Range(u32, u32),
}

fn map_op() -> impl Strategy<Value = MapOp> {
    let key = 0..400u32;
    prop_oneof![
        6 => (key.clone(), any::<u64>()).prop_map(|(k, v)| MapOp::Insert(k, v)),
        3 => key.clone().prop_map(MapOp::Remove),
        1 => key.clone().prop_map(MapOp::Get),
        1 => (key.clone(), key).prop_map(|(a, b)| MapOp::Range(a.min(b), a.max(b))),
    ]
}

/// A program: transactions of operations, each `true` if it aborts.
fn programs<T: std::fmt::Debug>(
    op: impl Strategy<Value = T>,
) -> impl Strategy<Value = Vec<(Vec<T>, bool)>> {
    prop::collection::vec(
        (prop::collection::vec(op, 1..16), prop::bool::weighted(0.25)),
        1..14,
    )
}

fn map_contents(pool: &Pool, map: BTreeMap<u32, u64>) -> Vec<(u32, u64)> {
    map.iter(pool).unwrap().collect::<Result<_, _>>().unwrap()
}

fn run_map(path: &Path, cfg: &PoolConfig, fanout: usize, prog: &[(Vec<MapOp>, bool)]) {
    let pool = Pool::create(path, "model", POOL, cfg).unwrap();
    let map = pool
        .transaction(|tx| {
            let map = BTreeMap::<u32, u64>::create_with_fanout(tx, fanout)?;
            let root = tx.root::<Root>()?;
            tx.write(
                root,
                &Root {
                    map: map.as_ptr(),
                    ..Zeroable::zeroed()
                },
            )?;
            Ok::<_, Error>(map)
        })
        .unwrap();
    let mut model = StdBTreeMap::new();
    for (ops, abort) in prog {
        let mut next = model.clone();
        let r = pool.transaction(|tx| {
            for op in ops {
                match *op {
                    MapOp::Insert(k, v) => assert_eq!(map.insert(tx, k, v)?, next.insert(k, v)),
                    MapOp::Remove(k) => assert_eq!(map.remove(tx, &k)?, next.remove(&k)),
                    MapOp::Get(k) => assert_eq!(map.get_tx(tx, &k)?, next.get(&k).copied()),
                    MapOp::Range(..) => {}
                }
                assert_eq!(map.len_tx(tx)?, next.len() as u64);
            }
            if *abort {
                return Err(aborted());
            }
            Ok(())
        });
        match r {
            Ok(()) => model = next,
            Err(Error::Pool(rewind::Error::Aborted)) if *abort => {}
            Err(e) => panic!("transaction failed: {e}"),
        }
        map.check_invariants(&pool).unwrap();
        assert_eq!(map.len(&pool).unwrap(), model.len() as u64);
        for op in ops {
            if let MapOp::Range(a, b) = *op {
                let got: Vec<_> = map
                    .range(&pool, a..b)
                    .unwrap()
                    .map(Result::unwrap)
                    .collect();
                let want: Vec<_> = model.range(a..b).map(|(k, v)| (*k, *v)).collect();
                assert_eq!(got, want);
                let got: Vec<_> = map
                    .range(&pool, a..=b)
                    .unwrap()
                    .map(Result::unwrap)
                    .collect();
                let want: Vec<_> = model.range(a..=b).map(|(k, v)| (*k, *v)).collect();
                assert_eq!(got, want);
            }
        }
    }
    let want: Vec<_> = model.iter().map(|(k, v)| (*k, *v)).collect();
    assert_eq!(map_contents(&pool, map), want);
    pool.close().unwrap();

    let pool = Pool::open(path, "model", &Default::default()).unwrap();
    let root: Root = pool.read(pool.root::<Root>().unwrap().unwrap()).unwrap();
    let map = BTreeMap::from_ptr(root.map);
    map.check_invariants(&pool).unwrap();
    assert_eq!(map_contents(&pool, map), want);
    for (k, v) in &model {
        assert_eq!(map.get(&pool, k).unwrap(), Some(*v));
    }
    pool.close().unwrap();
}

#[derive(Clone, Debug)]
enum VecOp {
    Push(u64),
    Pop,
    Set(u64, u64),
    Get(u64),
    Clear,
}

fn vec_op() -> impl Strategy<Value = VecOp> {
    prop_oneof![
        8 => any::<u64>().prop_map(VecOp::Push),
        3 => Just(VecOp::Pop),
        2 => (0..40u64, any::<u64>()).prop_map(|(i, v)| VecOp::Set(i, v)),
        2 => (0..40u64).prop_map(VecOp::Get),
        1 => Just(VecOp::Clear),
    ]
}

fn run_vec(path: &Path, cfg: &PoolConfig, prog: &[(Vec<VecOp>, bool)]) {
    let pool = Pool::create(path, "model", POOL, cfg).unwrap();
    let v = pool
        .transaction(|tx| {
            let v = PVec::<u64>::create(tx)?;
            let root = tx.root::<Root>()?;
            tx.write(
                root,
                &Root {
                    vec: v.as_ptr(),
                    ..Zeroable::zeroed()
                },
            )?;
            Ok::<_, Error>(v)
        })
        .unwrap();
    let mut model: Vec<u64> = Vec::new();
    for (ops, abort) in prog {
        let mut next = model.clone();
        let r = pool.transaction(|tx| {
            for op in ops {
                match *op {
                    VecOp::Push(x) => {
                        v.push(tx, x)?;
                        next.push(x);
                    }
                    VecOp::Pop => assert_eq!(v.pop(tx)?, next.pop()),
                    VecOp::Set(i, x) => match next.get_mut(i as usize) {
                        Some(slot) => {
                            *slot = x;
                            v.set(tx, i, x)?;
                        }
                        None => assert!(matches!(
                            v.set(tx, i, x),
                            Err(Error::IndexOutOfBounds { .. })
                        )),
                    },
                    VecOp::Get(i) => assert_eq!(v.get_tx(tx, i)?, next.get(i as usize).copied()),
                    VecOp::Clear => {
                        v.clear(tx)?;
                        next.clear();
                    }
                }
                assert_eq!(v.len_tx(tx)?, next.len() as u64);
            }
            if *abort {
                return Err(aborted());
            }
            Ok(())
        });
        match r {
            Ok(()) => model = next,
            Err(Error::Pool(rewind::Error::Aborted)) if *abort => {}
            Err(e) => panic!("transaction failed: {e}"),
        }
        assert_eq!(v.to_vec(&pool).unwrap(), model);
    }
    pool.close().unwrap();
    let pool = Pool::open(path, "model", &Default::default()).unwrap();
    let root: Root = pool.read(pool.root::<Root>().unwrap().unwrap()).unwrap();
    let v = PVec::from_ptr(root.vec);
    assert_eq!(v.to_vec(&pool).unwrap(), model);
    pool.close().unwrap();
}

#[derive(Clone, Debug)]
enum HashOp {
    Insert(u32, u64),
    Remove(u32),
    Get(u32),
}

fn hash_op() -> impl Strategy<Value = HashOp> {
    let key = 0..300u32;
    prop_oneof![
        6 => (key.clone(), any::<u64>()).prop_map(|(k, v)| HashOp::Insert(k, v)),
        3 => key.clone().prop_map(HashOp::Remove),
        1 => key.prop_map(HashOp::Get),
    ]
}

fn sorted(mut v: Vec<(u32, u64)>) -> Vec<(u32, u64)> {
    v.sort_unstable();
    v
}

fn run_hash(path: &Path, cfg: &PoolConfig, prog: &[(Vec<HashOp>, bool)]) {
    let pool = Pool::create(path, "model", POOL, cfg).unwrap();
    let m = pool
        .transaction(|tx| {
            let m = HashMap::<u32, u64>::create(tx)?;
            let root = tx.root::<Root>()?;
            tx.write(
                root,
                &Root {
                    hash: m.as_ptr(),
                    ..Zeroable::zeroed()
                },
            )?;
            Ok::<_, Error>(m)
        })
        .unwrap();
    let mut model = StdHashMap::new();
    for (ops, abort) in prog {
        let mut next = model.clone();
        let r = pool.transaction(|tx| {
            for op in ops {
                match *op {
                    HashOp::Insert(k, v) => assert_eq!(m.insert(tx, k, v)?, next.insert(k, v)),
                    HashOp::Remove(k) => assert_eq!(m.remove(tx, &k)?, next.remove(&k)),
                    HashOp::Get(k) => assert_eq!(m.get_tx(tx, &k)?, next.get(&k).copied()),
                }
                assert_eq!(m.len_tx(tx)?, next.len() as u64);
            }
            if *abort {
                return Err(aborted());
            }
            Ok(())
        });
        match r {
            Ok(()) => model = next,
            Err(Error::Pool(rewind::Error::Aborted)) if *abort => {}
            Err(e) => panic!("transaction failed: {e}"),
        }
        m.check_invariants(&pool).unwrap();
    }
    let want = sorted(model.iter().map(|(k, v)| (*k, *v)).collect());
    assert_eq!(sorted(m.entries(&pool).unwrap()), want);
    pool.close().unwrap();
    let pool = Pool::open(path, "model", &Default::default()).unwrap();
    let root: Root = pool.read(pool.root::<Root>().unwrap().unwrap()).unwrap();
    let m = HashMap::from_ptr(root.hash);
    m.check_invariants(&pool).unwrap();
    assert_eq!(sorted(m.entries(&pool).unwrap()), want);
    for (k, v) in &model {
        assert_eq!(m.get(&pool, k).unwrap(), Some(*v));
    }
    pool.close().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn btree_matches_std(prog in programs(map_op()), wide in prop::bool::weighted(0.25)) {
        let fanout = if wide { 32 } else { 4 };
        for (i, cfg) in configs().iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            run_map(&dir.path().join(format!("map{i}.pool")), cfg, fanout, &prog);
        }
    }

    #[test]
    fn vec_matches_std(prog in programs(vec_op())) {
        for (i, cfg) in configs().iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            run_vec(&dir.path().join(format!("vec{i}.pool")), cfg, &prog);
        }
    }

    #[test]
    fn hash_map_matches_std(prog in programs(hash_op())) {
        for (i, cfg) in configs().iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            run_hash(&dir.path().join(format!("hash{i}.pool")), cfg, &prog);
        }
    }
}
