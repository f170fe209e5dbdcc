//! Crash test of the B+-tree on the simulated persistence domain: for each
//! transaction of a program of inserts and removals (some aborting, most
//! splitting nodes at fan-out 4), crash images are captured at fences
//! spread over the transaction (nothing pending persisted, everything
//! pending persisted, a random prefix per cache line). Every image must
//! recover to a tree whose invariants hold and whose entries equal the
//! model before the transaction or after it.

use std::collections::BTreeMap as StdBTreeMap;

use rewind::{PPtr, Pool, PoolConfig};
mod common;
use rewind_collections::{BTreeMap, Error};

const SIZE: u64 = 4 << 20;
const LAYOUT: &str = "crash";
/// Fences per transaction at which images are captured (at most).
const SAMPLES: u64 = 12;

type Map = BTreeMap<u32, u64>;
type Model = StdBTreeMap<u32, u64>;

#[derive(Clone, Debug)]
enum Op {
    Insert(u32, u64),
    Remove(u32),
}

/// A deterministic program: `txs` transactions of 1 to 12 operations,
/// every fourth one aborting.
fn program(txs: usize, mut seed: u64) -> Vec<(Vec<Op>, bool)> {
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    (0..txs)
        .map(|t| {
            let n = 1 + next() % 12;
            let ops = (0..n)
                .map(|_| {
                    let k = (next() % 120) as u32;
                    if next() % 4 == 0 {
                        Op::Remove(k)
                    } else {
                        Op::Insert(k, next())
                    }
                })
                .collect();
            (ops, t % 4 == 3)
        })
        .collect()
}

fn map_of(pool: &Pool) -> Map {
    let root: PPtr<PPtr<Map>> = pool.root().unwrap().expect("root set at setup");
    BTreeMap::from_ptr(pool.read(root).unwrap())
}

fn contents(pool: &Pool) -> Model {
    let map = map_of(pool);
    map.check_invariants(pool).unwrap();
    map.iter(pool).unwrap().map(Result::unwrap).collect()
}

fn run(pool: &Pool, ops: &[Op], abort: bool) {
    let map = map_of(pool);
    let r = pool.transaction(|tx| {
        for op in ops {
            match *op {
                Op::Insert(k, v) => map.insert(tx, k, v)?,
                Op::Remove(k) => map.remove(tx, &k)?,
            };
        }
        if abort {
            return Err(Error::from(rewind::Error::Aborted));
        }
        Ok(())
    });
    assert_eq!(r.is_err(), abort, "{r:?}");
}

fn fences(pool: &Pool) -> u64 {
    pool.domain().with_sim(|s| s.fences()).unwrap()
}

fn image(pool: &Pool) -> Vec<u8> {
    pool.domain().with_sim(|s| s.image_all_pending()).unwrap()
}

fn crash_program(cfg: &PoolConfig, prog: &[(Vec<Op>, bool)]) -> usize {
    let pool = Pool::create_sim(LAYOUT, SIZE, cfg).unwrap();
    pool.transaction(|tx| {
        let map = Map::create_with_fanout(tx, 4)?;
        let root = tx.root::<PPtr<Map>>()?;
        tx.write(root, &map.as_ptr())?;
        Ok::<_, Error>(())
    })
    .unwrap();
    let mut model = Model::new();
    let mut checked = 0;
    for (t, (ops, abort)) in prog.iter().enumerate() {
        let mut after = model.clone();
        if !abort {
            for op in ops {
                match *op {
                    Op::Insert(k, v) => after.insert(k, v),
                    Op::Remove(k) => after.remove(&k),
                };
            }
        }
        let base = image(&pool);
        // The transaction on a copy, to count its fences.
        let copy = Pool::open_image(base.clone(), LAYOUT).unwrap();
        let start = fences(&copy);
        run(&copy, ops, *abort);
        let n = fences(&copy) - start;
        assert_eq!(contents(&copy), after);
        for f in (1..=n).step_by(n.div_ceil(SAMPLES).max(1) as usize) {
            let p = Pool::open_image(base.clone(), LAYOUT).unwrap();
            let at = fences(&p) + f;
            p.domain()
                .with_sim_mut(|s| s.capture_at_fence(at, f))
                .unwrap();
            run(&p, ops, *abort);
            let imgs = p.domain().with_sim_mut(|s| s.take_captured()).unwrap();
            assert!(!imgs.is_empty(), "tx {t}: fence {f} of {n} never reached");
            for img in imgs {
                let got = contents(&Pool::open_image(img, LAYOUT).unwrap());
                assert!(
                    got == model || got == after,
                    "tx {t} ({ops:?}, abort {abort}): crash at fence {f} of {n} recovered to {got:?}"
                );
                checked += 1;
            }
            p.crash();
        }
        copy.crash();
        run(&pool, ops, *abort);
        assert_eq!(contents(&pool), after);
        model = after;
    }
    pool.close().unwrap_or(());
    checked
}

#[test]
fn btree_recovers_from_crashes() {
    let prog = program(24, 0x9e37_79b9_7f4a_7c15);
    for cfg in &common::configs() {
        let checked = crash_program(cfg, &prog);
        assert!(checked > 24 * 3, "only {checked} images");
    }
}
