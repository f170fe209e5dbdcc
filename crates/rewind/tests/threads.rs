//! Several threads run transactions on one pool at once (on disjoint data,
//! as REWIND §4.7 leaves isolation to the program); the result and every
//! crash image afterwards hold exactly the committed work.
//!
//! Regression: rollback once changed allocator bitmap bytes without the
//! allocator latch, losing a concurrent transaction's bit (InvalidFree).

use rewind::{Backend, LogVariant, PPtr, Policy, Pool, PoolConfig};

#[test]
fn concurrent_transactions_every_config() {
    const THREADS: u64 = 4;
    const TXS: u64 = 150;
    for v in LogVariant::ALL {
        for p in Policy::ALL {
            let cfg = PoolConfig::default()
                .log(v)
                .policy(p)
                .backend(Backend::Sim)
                .bucket_cells(32);
            let pool = Pool::create_sim("threads", 8 << 20, &cfg).unwrap();
            let arr: PPtr<u64> = pool.transaction(|tx| tx.alloc_array(THREADS * 8)).unwrap();
            std::thread::scope(|s| {
                for t in 0..THREADS {
                    let pool = &pool;
                    s.spawn(move || {
                        for i in 0..TXS {
                            let r = pool.transaction(|tx| {
                                let obj = tx.alloc::<u64>()?;
                                tx.write(obj, &i)?;
                                for k in 0..8 {
                                    tx.write(arr.at(t * 8 + k), &(i * 100 + k))?;
                                }
                                tx.free(obj)?;
                                if i % 7 == 3 {
                                    return Err(rewind::Error::TxMisuse("abort"));
                                }
                                Ok(())
                            });
                            assert_eq!(r.is_err(), i % 7 == 3, "{v}/{p} thread {t} tx {i}: {r:?}");
                        }
                    });
                }
            });
            let last = (0..TXS).rev().find(|i| i % 7 != 3).unwrap();
            let want: Vec<u64> = (0..THREADS * 8).map(|j| last * 100 + j % 8).collect();
            let got: Vec<u64> = (0..THREADS * 8)
                .map(|j| pool.read(arr.at(j)).unwrap())
                .collect();
            assert_eq!(got, want, "{v}/{p}");
            // Both crash images must rebuild the same allocator state: no block
            // leaked or doubly allocated in one of them.
            let mut stats = None;
            for img in pool
                .domain()
                .with_sim(|s| vec![s.image_none_pending(), s.image_all_pending()])
                .unwrap()
            {
                let p2 = Pool::open_image(img, "threads").unwrap();
                let got: Vec<u64> = (0..THREADS * 8)
                    .map(|j| p2.read(arr.at(j)).unwrap())
                    .collect();
                assert_eq!(got, want, "{v}/{p} after crash");
                let s2 = p2.alloc_stats();
                assert_eq!(*stats.get_or_insert(s2), s2, "{v}/{p} allocator differs");
                assert_eq!(
                    s2.free_chunks,
                    s2.total_chunks - 1,
                    "{v}/{p}: only the array's chunk is in use"
                );
            }
        }
    }
}

/// Group commit on a disk file (Msync) with more threads than processors,
/// so that fences and in-order write-backs take the yielding waits
/// (`persist/backoff.rs`) as well as the sleeping ones: a commit's values
/// are in place when it returns, and a reopen finds every thread's last
/// committed values (counts, not times).
#[test]
fn crowded_msync_group_commit_keeps_every_acknowledged_commit() {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get() as u64) * 3;
    const TXS: u64 = 60;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("group.pool");
    let cfg = PoolConfig::default()
        .policy(Policy::Redo)
        .backend(Backend::Msync);
    let pool = Pool::create(&path, "group", 8 << 20, &cfg).unwrap();
    let arr: PPtr<u64> = pool.transaction(|tx| tx.alloc_array(threads * 4)).unwrap();
    let before = pool.counters();
    std::thread::scope(|s| {
        for t in 0..threads {
            let pool = &pool;
            s.spawn(move || {
                for i in 1..=TXS {
                    pool.transaction(|tx| {
                        for k in 0..4 {
                            tx.write(arr.at(t * 4 + k), &(i * 10 + k))?;
                        }
                        Ok::<_, rewind::Error>(())
                    })
                    .unwrap();
                    // Committed values are in place once the commit returns.
                    assert_eq!(pool.read(arr.at(t * 4)).unwrap(), i * 10);
                }
            });
        }
    });
    let c = pool.counters().since(&before);
    // A fence per commit (and a few of the ring's drains); each one led a
    // device flush, shared another's, or had nothing to make durable.
    assert!(c.fences >= threads * TXS, "{c:?}");
    assert!(c.device_flushes + c.grouped_fences <= c.fences, "{c:?}");
    let want: Vec<u64> = (0..threads * 4).map(|j| TXS * 10 + j % 4).collect();
    // Dropped as a crash would (no drain): recovery replays the groups
    // still in the ring, those written back ahead of an earlier one among
    // them, in order; then closed and opened again.
    pool.crash();
    for _ in 0..2 {
        let pool = Pool::open(&path, "group", &rewind::OpenOptions::default()).unwrap();
        let got: Vec<u64> = (0..threads * 4)
            .map(|j| pool.read(arr.at(j)).unwrap())
            .collect();
        assert_eq!(got, want);
        pool.close().unwrap();
    }
}
