//! Model test of the blob against `Vec<u8>`: random programs of
//! transactions (some aborting) of replaces, appends, truncations, writes
//! in place (some past the end: typed errors) and shrinks, under every log
//! variant × policy. After every transaction the bytes equal the model;
//! after the program the pool is reopened and compared again.

mod common;

use std::path::Path;

use proptest::prelude::*;
use rewind::{PPtr, Pool, PoolConfig};
use rewind_collections::{Blob, Error};

use common::{aborted, configs, name};

const POOL: u64 = 16 << 20;

#[derive(Clone, Debug)]
enum Op {
    Replace(Vec<u8>),
    Append(Vec<u8>),
    Truncate(u64),
    WriteAt(u64, Vec<u8>),
    Shrink,
    ReadAt(u64, u64),
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => prop::collection::vec(any::<u8>(), 0..40),
        1 => prop::collection::vec(any::<u8>(), 0..3000),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => bytes().prop_map(Op::Replace),
        4 => bytes().prop_map(Op::Append),
        2 => (0..4000u64).prop_map(Op::Truncate),
        3 => (0..4000u64, bytes()).prop_map(|(a, b)| Op::WriteAt(a, b)),
        1 => Just(Op::Shrink),
        1 => (0..4000u64, 0..64u64).prop_map(|(a, n)| Op::ReadAt(a, n)),
    ]
}

fn programs() -> impl Strategy<Value = Vec<(Vec<Op>, bool)>> {
    prop::collection::vec(
        (
            prop::collection::vec(op(), 1..10),
            prop::bool::weighted(0.25),
        ),
        1..12,
    )
}

fn run(path: &Path, cfg: &PoolConfig, prog: &[(Vec<Op>, bool)]) {
    let pool = Pool::create(path, "model", POOL, cfg).unwrap();
    let b = pool
        .transaction(|tx| {
            let b = Blob::create(tx)?;
            let root = tx.root::<PPtr<Blob>>()?;
            tx.write(root, &b.as_ptr())?;
            Ok::<_, Error>(b)
        })
        .unwrap();
    let mut model: Vec<u8> = Vec::new();
    for (ops, abort) in prog {
        let mut next = model.clone();
        let r = pool.transaction(|tx| {
            for op in ops {
                match op {
                    Op::Replace(v) => {
                        b.replace(tx, v)?;
                        next.clone_from(v);
                    }
                    Op::Append(v) => {
                        b.append(tx, v)?;
                        next.extend_from_slice(v);
                    }
                    Op::Truncate(n) => {
                        b.truncate(tx, *n)?;
                        next.truncate(*n as usize);
                    }
                    Op::WriteAt(at, v) => {
                        let at = *at as usize;
                        if at + v.len() <= next.len() {
                            b.write_at(tx, at as u64, v)?;
                            next[at..at + v.len()].copy_from_slice(v);
                        } else {
                            let r = b.write_at(tx, at as u64, v);
                            assert!(
                                matches!(r, Err(Error::IndexOutOfBounds { index, len, .. })
                                    if index == (at + v.len()) as u64 && len == next.len() as u64),
                                "{r:?}"
                            );
                        }
                    }
                    Op::Shrink => b.shrink_to_fit(tx)?,
                    Op::ReadAt(..) => {}
                }
                assert_eq!(b.read_tx(tx)?, next);
                assert_eq!(b.len_tx(tx)?, next.len() as u64);
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
        assert_eq!(b.read(&pool).unwrap(), model, "{}", name(cfg));
        assert!(b.capacity(&pool).unwrap() >= model.len() as u64);
        for op in ops {
            if let Op::ReadAt(at, n) = *op {
                let mut buf = vec![0u8; n as usize];
                let r = b.read_at(&pool, at, &mut buf);
                match model.get(at as usize..(at + n) as usize) {
                    Some(want) => {
                        r.unwrap();
                        assert_eq!(buf, want);
                    }
                    None => assert!(matches!(r, Err(Error::IndexOutOfBounds { .. }))),
                }
            }
        }
    }
    pool.close().unwrap();
    let pool = Pool::open(path, "model", &Default::default()).unwrap();
    let b = Blob::from_ptr(pool.read(pool.root().unwrap().unwrap()).unwrap());
    assert_eq!(b.read(&pool).unwrap(), model, "{}", name(cfg));
    pool.close().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn blob_matches_vec(prog in programs()) {
        for (i, cfg) in configs().iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            run(&dir.path().join(format!("blob{i}.pool")), cfg, &prog);
        }
    }
}
