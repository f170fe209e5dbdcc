//! Engine behaviour met through the collections (`crates/rewind`), found
//! by probing them as a user: `cargo test -p rewind-collections --test
//! engine_probe`.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};

use rewind::{Pool, PoolConfig};
use rewind_collections::{BTreeMap, Error, HashMap};

/// The README's read-modify-write (`get_tx`, then `insert`) on two
/// collections, taken in opposite orders by half of eight threads, each
/// transaction retried at once on `Deadlock`, as the docs advise. The
/// request that closes a cycle is refused, and a retry at once, in the
/// same program order, closed the next one: these 320 commits met 1.9
/// million refusals (7 s in a release build; 180 s in the test profile on
/// the shared 2-core VM). The engine now backs a thread off after a
/// refusal, longer with each in a row (`engine/locks.rs`,
/// `after_transaction`): 45 to 146 refusals in five runs. Bound asserted:
/// 10 refusals per commit, a count, not a time.
#[test]
fn opposite_order_upgrades_make_progress() {
    const THREADS: u64 = 8;
    const TXS: u64 = 40;
    let dir = tempfile::tempdir().unwrap();
    let pool = Pool::create(
        dir.path().join("upgrade.pool"),
        "engine-probe",
        16 << 20,
        &PoolConfig::default(),
    )
    .unwrap();
    let (m, h) = pool
        .transaction(|tx| {
            let m = BTreeMap::<u64, u64>::create(tx)?;
            m.insert(tx, 1, 0)?;
            let h = HashMap::<u64, u64>::create(tx)?;
            h.insert(tx, 1, 0)?;
            Ok::<_, Error>((m, h))
        })
        .unwrap();
    let refused = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (pool, refused) = (&pool, &refused);
            s.spawn(move || {
                for _ in 0..TXS {
                    loop {
                        let r = pool.transaction(|tx| {
                            if t % 2 == 0 {
                                let a = m.get_tx(tx, &1)?.unwrap_or(0);
                                let b = h.get_tx(tx, &1)?.unwrap_or(0);
                                m.insert(tx, 1, a + 1)?;
                                h.insert(tx, 1, b + 1)?;
                            } else {
                                let b = h.get_tx(tx, &1)?.unwrap_or(0);
                                h.insert(tx, 1, b + 1)?;
                                let a = m.get_tx(tx, &1)?.unwrap_or(0);
                                m.insert(tx, 1, a + 1)?;
                            }
                            Ok::<_, Error>(())
                        });
                        match r {
                            Ok(()) => break,
                            Err(Error::Pool(rewind::Error::Deadlock { .. })) => {
                                refused.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => panic!("{e:?}"),
                        }
                    }
                }
            });
        }
    });
    let commits = THREADS * TXS;
    assert_eq!(m.get(&pool, &1).unwrap(), Some(commits));
    assert_eq!(h.get(&pool, &1).unwrap(), Some(commits));
    let refused = refused.into_inner();
    println!("{refused} Deadlock refusals for {commits} commits");
    assert!(
        refused <= 10 * commits,
        "{refused} Deadlock refusals for {commits} commits"
    );
}
