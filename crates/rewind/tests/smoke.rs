//! Every log variant × policy: commit, abort, panic, reopen after a crash.

use rewind::{Backend, LogVariant, PPtr, Policy, Pool, PoolConfig};

fn cfg(log: LogVariant, policy: Policy) -> PoolConfig {
    PoolConfig::default()
        .log(log)
        .policy(policy)
        .backend(Backend::Sim)
        .bucket_cells(64)
}

fn all() -> Vec<(LogVariant, Policy)> {
    LogVariant::ALL
        .iter()
        .flat_map(|&v| Policy::ALL.iter().map(move |&p| (v, p)))
        .collect()
}

#[test]
fn commit_abort_and_crash_every_config() {
    for (v, p) in all() {
        let pool = Pool::create_sim("smoke", 4 << 20, &cfg(v, p)).unwrap();
        let arr: PPtr<u64> = pool
            .transaction(|tx| {
                let root: PPtr<PPtr<u64>> = tx.root()?;
                let a = tx.alloc_array::<u64>(100)?;
                tx.write(root, &a)?;
                for i in 0..100 {
                    tx.write(a.at(i), &i)?;
                }
                Ok::<_, rewind::Error>(a)
            })
            .unwrap();
        // Committed updates.
        for round in 0..5u64 {
            pool.transaction(|tx| {
                for i in 0..20 {
                    tx.write(arr.at(i), &(1000 * round + i))?;
                }
                Ok::<_, rewind::Error>(())
            })
            .unwrap();
        }
        // An aborted one.
        let r: Result<(), rewind::Error> = pool.transaction(|tx| {
            for i in 0..30 {
                tx.write(arr.at(i), &7777)?;
            }
            Err(rewind::Error::TxMisuse("abort on purpose"))
        });
        assert!(r.is_err());
        for i in 0..100 {
            let want = if i < 20 { 4000 + i } else { i };
            assert_eq!(
                pool.read(arr.at(i)).unwrap(),
                want,
                "{v}/{p} after abort, i={i}"
            );
        }
        // An in-flight one, then a crash losing every unflushed store.
        let image = std::cell::RefCell::new(None);
        let _ = pool.transaction(|tx| {
            for i in 0..50 {
                tx.write(arr.at(i), &9999)?;
            }
            *image.borrow_mut() = pool
                .domain()
                .with_sim(|s| (s.image_none_pending(), s.image_all_pending()));
            Err::<(), _>(rewind::Error::TxMisuse("crash"))
        });
        let (none, all) = image.into_inner().unwrap();
        for img in [none, all] {
            let p2 = Pool::open_image(img, "smoke").unwrap();
            for i in 0..100 {
                let want = if i < 20 { 4000 + i } else { i };
                assert_eq!(
                    p2.read(arr.at(i)).unwrap(),
                    want,
                    "{v}/{p} after crash, i={i}: {}",
                    p2.recovery_report()
                );
            }
        }
    }
}
