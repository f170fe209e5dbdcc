//! The Batch group size (8, 16, 32 or 64 records per fence): recorded in
//! the pool, fewer fences per transaction for larger groups, and every
//! crash point of a commit and of a rollback recovers to before or after.

use rewind::{Backend, Error, LogVariant, PPtr, Policy, Pool, PoolConfig};

const LAYOUT: &str = "group-size";

fn pool(group: u32, p: Policy) -> (Pool, PPtr<u64>) {
    let cfg = PoolConfig::default()
        .log(LogVariant::Batch)
        .policy(p)
        .backend(Backend::Sim)
        .bucket_cells(16)
        .group_size(group);
    let pool = Pool::create_sim(LAYOUT, 4 << 20, &cfg).unwrap();
    let arr = pool
        .transaction(|tx| tx.root::<[u64; 256]>())
        .unwrap()
        .cast::<u64>();
    (pool, arr)
}

fn writes(tx: &mut rewind::Tx<'_>, arr: PPtr<u64>, n: u64, v: u64) -> Result<(), Error> {
    for i in 0..n {
        tx.write(arr.at(i * 3 % 256), &(v + i))?;
    }
    Ok(())
}

fn state(pool: &Pool, arr: PPtr<u64>) -> Vec<u64> {
    (0..256).map(|i| pool.read(arr.at(i)).unwrap()).collect()
}

#[test]
fn larger_groups_fence_less() {
    let (mut fences, mut reopened) = (Vec::new(), Vec::new());
    for g in [8, 16, 32, 64] {
        let (pool, arr) = pool(g, Policy::Force);
        let before = pool.counters();
        pool.transaction(|tx| writes(tx, arr, 64, 1)).unwrap();
        let used = pool.counters().since(&before).fences;
        fences.push(used);
        // Reopened, the pool keeps its group size.
        let img = pool.domain().with_sim(|s| s.image_all_pending()).unwrap();
        let again = Pool::open_image(img, LAYOUT).unwrap();
        let before = again.counters();
        again.transaction(|tx| writes(tx, arr, 64, 2)).unwrap();
        reopened.push(again.counters().since(&before).fences);
    }
    println!("fences for a 64-write transaction by group size 8/16/32/64: {fences:?}");
    for f in [&fences, &reopened] {
        assert!(
            f.windows(2).all(|w| w[1] < w[0]),
            "fences for 64 writes by group size 8/16/32/64: {fences:?}, reopened {reopened:?}"
        );
    }
}

#[test]
fn every_crash_point_recovers_to_before_or_after() {
    for g in [16, 64] {
        for p in Policy::ALL {
            for commit in [true, false] {
                let probe = pool(g, p);
                let fences = |pl: &Pool| pl.domain().with_sim(|s| s.fences()).unwrap();
                let start = fences(&probe.0);
                let run = |pool: &Pool, arr: PPtr<u64>| {
                    let _ = pool.transaction(|tx| {
                        writes(tx, arr, 100, 1000)?;
                        if commit {
                            Ok(())
                        } else {
                            Err(Error::TxMisuse("abort"))
                        }
                    });
                };
                let before = state(&probe.0, probe.1);
                run(&probe.0, probe.1);
                let after = state(&probe.0, probe.1);
                let end = fences(&probe.0);
                for k in start + 1..=end {
                    let (pool, arr) = pool(g, p);
                    pool.domain().with_sim_mut(|s| s.capture_at_fence(k, k));
                    run(&pool, arr);
                    let images = pool.domain().with_sim_mut(|s| s.take_captured()).unwrap();
                    assert_eq!(images.len(), 3, "fence {k} not reached");
                    for (i, img) in images.into_iter().enumerate() {
                        let rec = Pool::open_image(img, LAYOUT)
                            .unwrap_or_else(|e| panic!("g{g} {p} fence {k} image {i}: {e}"));
                        let got = state(&rec, arr);
                        assert!(
                            got == before || got == after,
                            "g{g} {p} commit={commit} fence {k} image {i}: neither before nor after"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn other_group_sizes_are_refused() {
    for g in [0, 1, 7, 9, 12, 128] {
        let cfg = PoolConfig::default().backend(Backend::Sim).group_size(g);
        let e = Pool::create_sim(LAYOUT, 4 << 20, &cfg).err().unwrap();
        assert!(
            matches!(
                e,
                Error::InvalidConfig {
                    what: "group size",
                    ..
                }
            ),
            "{e}"
        );
    }
}
