//! Model test of the list against `VecDeque`: random programs of
//! transactions (some aborting) of pushes and pops at both ends, removals
//! at an index and at a cursor, and reads, under every log variant ×
//! policy. After every transaction the list, read front to back and back to
//! front, equals the model, and its links check; after the program the
//! pool is reopened and compared again.

mod common;

use std::collections::VecDeque;
use std::path::Path;

use proptest::prelude::*;
use rewind::{PPtr, Pool, PoolConfig};
use rewind_collections::{Error, List};

use common::{aborted, configs, name};

const POOL: u64 = 16 << 20;

#[derive(Clone, Debug)]
enum Op {
    PushFront(u64),
    PushBack(u64),
    PopFront,
    PopBack,
    /// Index modulo the length (+1, so an out-of-bounds index is tried too).
    Remove(u64),
    /// Removal through a cursor found in the transaction.
    RemoveAt(u64),
    Get(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<u64>().prop_map(Op::PushFront),
        4 => any::<u64>().prop_map(Op::PushBack),
        2 => Just(Op::PopFront),
        2 => Just(Op::PopBack),
        2 => any::<u64>().prop_map(Op::Remove),
        2 => any::<u64>().prop_map(Op::RemoveAt),
        1 => any::<u64>().prop_map(Op::Get),
    ]
}

fn programs() -> impl Strategy<Value = Vec<(Vec<Op>, bool)>> {
    prop::collection::vec(
        (
            prop::collection::vec(op(), 1..16),
            prop::bool::weighted(0.25),
        ),
        1..14,
    )
}

fn check(pool: &Pool, l: List<u64>, model: &VecDeque<u64>, cfg: &PoolConfig) {
    l.check_invariants(pool).unwrap();
    let fwd: Vec<u64> = l.iter(pool).unwrap().map(Result::unwrap).collect();
    let back: Vec<u64> = l.iter(pool).unwrap().rev().map(Result::unwrap).collect();
    let want: Vec<u64> = model.iter().copied().collect();
    let want_back: Vec<u64> = model.iter().rev().copied().collect();
    assert_eq!(fwd, want, "{}", name(cfg));
    assert_eq!(back, want_back, "{}", name(cfg));
    assert_eq!(l.len(pool).unwrap(), model.len() as u64);
    assert_eq!(l.front(pool).unwrap(), model.front().copied());
    assert_eq!(l.back(pool).unwrap(), model.back().copied());
    // Cursors walk the same way.
    if let Some(mut c) = l.cursor(pool, 0).unwrap() {
        for (i, want) in model.iter().enumerate() {
            assert_eq!(l.value(pool, c).unwrap(), *want);
            match l.next(pool, c).unwrap() {
                Some(n) => {
                    assert_eq!(l.prev(pool, n).unwrap(), Some(c));
                    c = n;
                }
                None => assert_eq!(i + 1, model.len()),
            }
        }
    }
}

fn run(path: &Path, cfg: &PoolConfig, prog: &[(Vec<Op>, bool)]) {
    let pool = Pool::create(path, "model", POOL, cfg).unwrap();
    let l = pool
        .transaction(|tx| {
            let l = List::<u64>::create(tx)?;
            let root = tx.root::<PPtr<List<u64>>>()?;
            tx.write(root, &l.as_ptr())?;
            Ok::<_, Error>(l)
        })
        .unwrap();
    let mut model = VecDeque::new();
    for (ops, abort) in prog {
        let mut next = model.clone();
        let r = pool.transaction(|tx| {
            for op in ops {
                match *op {
                    Op::PushFront(v) => {
                        l.push_front(tx, v)?;
                        next.push_front(v);
                    }
                    Op::PushBack(v) => {
                        l.push_back(tx, v)?;
                        next.push_back(v);
                    }
                    Op::PopFront => assert_eq!(l.pop_front(tx)?, next.pop_front()),
                    Op::PopBack => assert_eq!(l.pop_back(tx)?, next.pop_back()),
                    Op::Remove(i) => {
                        let i = i % (next.len() as u64 + 1);
                        match next.remove(i as usize) {
                            Some(v) => assert_eq!(l.remove(tx, i)?, v),
                            None => assert!(matches!(
                                l.remove(tx, i),
                                Err(Error::IndexOutOfBounds { .. })
                            )),
                        }
                    }
                    Op::RemoveAt(i) => {
                        let i = i % (next.len() as u64 + 1);
                        match l.cursor_tx(tx, i)? {
                            Some(c) => {
                                assert_eq!(Some(l.remove_at(tx, c)?), next.remove(i as usize));
                                // The same cursor again: its element is gone.
                                assert!(matches!(
                                    l.remove_at(tx, c),
                                    Err(Error::InvalidCursor { .. })
                                ));
                            }
                            None => assert_eq!(i, next.len() as u64),
                        }
                    }
                    Op::Get(i) => {
                        let i = i % (next.len() as u64 + 1);
                        assert_eq!(l.get_tx(tx, i)?, next.get(i as usize).copied());
                    }
                }
                assert_eq!(l.len_tx(tx)?, next.len() as u64);
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
        check(&pool, l, &model, cfg);
    }
    pool.close().unwrap();
    let pool = Pool::open(path, "model", &Default::default()).unwrap();
    let l = List::<u64>::from_ptr(pool.read(pool.root().unwrap().unwrap()).unwrap());
    check(&pool, l, &model, cfg);
    pool.close().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn list_matches_vec_deque(prog in programs()) {
        for (i, cfg) in configs().iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            run(&dir.path().join(format!("list{i}.pool")), cfg, &prog);
        }
    }
}
