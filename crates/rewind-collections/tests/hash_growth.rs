//! The hash map's table doubles a few buckets per change, so a map keeps
//! growing while its pool has room: no transaction logs the whole table.
//! Found by a user's program: a `HashMap` that doubled in one transaction
//! (a logged write per entry) stopped taking inserts at 65,536 entries in
//! a 16 MiB pool with 9 MB of heap free, every insert failing with
//! `LogFull`. Counts only: no timing.

use std::collections::HashMap as Std;

use rewind::{Policy, Pool, PoolConfig};
use rewind_collections::{Error, HashMap};

/// Inserts `n` keys, `per_tx` per transaction, into a new map in a pool of
/// `mib` MiB under `policy`; returns the pool, the map, and the most lines
/// any insert transaction wrote to its log (non-temporal lines: the data,
/// a new table zeroed among them, is written back apart).
fn filled(mib: u64, policy: Policy, n: u64, per_tx: u64) -> (Pool, HashMap<u64, u64>, u64) {
    let cfg = PoolConfig::default().policy(policy);
    let pool = Pool::create_sim("hash", mib << 20, &cfg).unwrap();
    let map = pool.transaction(HashMap::<u64, u64>::create).unwrap();
    let mut most = 0;
    for start in (0..n).step_by(per_tx as usize) {
        let before = pool.counters();
        pool.transaction(|tx| {
            for k in start..(start + per_tx).min(n) {
                map.insert(tx, k.wrapping_mul(0x9e37_79b9_7f4a_7c15), k)?;
            }
            Ok::<_, Error>(())
        })
        .unwrap_or_else(|e| panic!("{policy:?}: inserting from {start}: {e}"));
        let c = pool.counters().since(&before);
        most = most.max(c.nt_lines);
    }
    (pool, map, most)
}

#[test]
fn a_map_grows_until_its_pool_is_full_not_until_its_log_is() {
    for policy in [Policy::Force, Policy::Redo] {
        // One doubling in one transaction stopped at 16,384 entries in a
        // 4 MiB pool (the doubling's log did not fit); the map's blocks
        // alone take 3 MiB at 40,000.
        let (pool, map, most) = filled(4, policy, 36_000, 1);
        assert_eq!(map.len(&pool).unwrap(), 36_000, "{policy:?}");
        map.check_invariants(&pool).unwrap();
        // One insert logs the records of at most MOVE_STEP (8) buckets'
        // entries and heads, doubling or not: 222 lines under force, 168
        // under redo (a doubling in one transaction logged a record per
        // entry: 16,384 of them at the last one that fitted).
        assert!(most < 400, "{policy:?}: an insert logged {most} lines");
    }
}

/// While the table doubles, every read (committed or in a transaction),
/// the iterators, the block list and the invariant check see each entry
/// exactly once, and removals and replacements find their keys wherever
/// they are: checked after every change of a run that doubles the table
/// several times, against `std`'s map.
#[test]
fn every_read_sees_every_entry_while_the_table_doubles() {
    let pool = Pool::create_sim("hash", 8 << 20, &PoolConfig::default()).unwrap();
    let map = pool.transaction(HashMap::<u32, u64>::create).unwrap();
    let mut model = Std::new();
    for i in 0..1_200u32 {
        let k = i.wrapping_mul(2_654_435_761) % 1_000; // repeats: replacements
        let remove = i % 7 == 3;
        pool.transaction(|tx| {
            if remove {
                map.remove(tx, &(k / 2))?;
            } else {
                map.insert(tx, k, u64::from(i))?;
            }
            // The transaction's own view, mid-doubling.
            let seen = map.iter_tx(tx)?.count() as u64;
            assert_eq!(seen, map.len_tx(tx)?);
            Ok::<_, Error>(())
        })
        .unwrap();
        if remove {
            model.remove(&(k / 2));
        } else {
            model.insert(k, u64::from(i));
        }
        map.check_invariants(&pool).unwrap();
        assert_eq!(map.len(&pool).unwrap(), model.len() as u64);
        let mut entries = map.entries(&pool).unwrap();
        entries.sort_unstable();
        let mut want: Vec<(u32, u64)> = model.iter().map(|(&k, &v)| (k, v)).collect();
        want.sort_unstable();
        assert_eq!(entries, want, "after change {i}");
        assert_eq!(map.get(&pool, &k).unwrap(), model.get(&k).copied());
        // Header, table (and the old table while one is kept), entries.
        let blocks = map.blocks(&pool).unwrap().len() as u64;
        assert!(blocks == model.len() as u64 + 2 || blocks == model.len() as u64 + 3);
    }
}
