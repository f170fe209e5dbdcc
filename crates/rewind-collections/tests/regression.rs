//! Bugs found once, kept as named scenarios.

use std::collections::BTreeMap as Std;

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;
use rewind::{LogVariant, Policy, Pool, PoolConfig};
use rewind_collections::{BTreeMap, Error};

/// A seeded generator (SplitMix64, value-stable across versions).
struct Rng(SplitMix64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(SplitMix64::seed_from_u64(seed))
    }

    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A removal emptied a leaf; the leaf merged, its parent underflowed and
/// merged with its right sibling, and so did the grandparent. The
/// grandparent's write started at the merge point and missed its own
/// first separator, which the removal of the parent's separator had
/// changed: a key outside its parent's separators. Found by the kill test
/// (seeded transactions of inserts and removals, fan-out 4, some aborted);
/// the invariants are checked after every transaction. Four seeds of
/// 600 transactions each: fan-out 4 over 300 keys merges on two and three
/// levels many times in each.
#[test]
fn merges_on_two_levels_write_the_whole_change() {
    for (variant, policy, seed) in [
        (LogVariant::Optimized, Policy::Force, 12345),
        (LogVariant::Batch, Policy::Redo, 12345),
        (LogVariant::Optimized, Policy::Force, 7),
        (LogVariant::Batch, Policy::Redo, 99),
    ] {
        let cfg = PoolConfig::default().log(variant).policy(policy);
        let pool = Pool::create_sim("regression", 8 << 20, &cfg).unwrap();
        let t = pool
            .transaction(|tx| BTreeMap::<u64, u64>::create_with_fanout(tx, 4))
            .unwrap();
        let mut model = Std::new();
        let mut rng = Rng::new(seed);
        for id in 0..600 {
            let n = 1 + rng.below(6);
            let ops: Vec<(u64, Option<u64>)> = (0..n)
                .map(|_| {
                    let k = rng.below(300);
                    let v = rng.next();
                    (k, (rng.below(4) != 0).then_some(v))
                })
                .collect();
            let abort = rng.below(5) == 0;
            let r = pool.transaction(|tx| {
                for &(k, v) in &ops {
                    match v {
                        Some(v) => t.insert(tx, k, v)?,
                        None => t.remove(tx, &k)?,
                    };
                }
                if abort {
                    return Err(Error::from(rewind::Error::Aborted));
                }
                Ok(())
            });
            if !abort {
                r.unwrap();
                for &(k, v) in &ops {
                    match v {
                        Some(v) => model.insert(k, v),
                        None => model.remove(&k),
                    };
                }
            }
            t.check_invariants(&pool)
                .unwrap_or_else(|e| panic!("{variant}/{policy}, transaction {id}: {e}"));
            let got: Vec<(u64, u64)> = t.iter(&pool).unwrap().map(Result::unwrap).collect();
            let want: Vec<(u64, u64)> = model.iter().map(|(k, v)| (*k, *v)).collect();
            assert_eq!(got, want, "{variant}/{policy}, transaction {id}");
        }
    }
}
