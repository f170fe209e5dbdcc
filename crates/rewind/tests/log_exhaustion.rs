//! A transaction that outgrows the configured log: the log grows into the
//! heap, and when the heap is full too the transaction fails with a typed
//! error, is rolled back whole, and the pool stays usable and reopens. For
//! every log variant × policy, in process and at crash points near
//! exhaustion (every fence sampled by count, as a process kill would leave
//! it and as a power failure would).

mod common;
use common::configs;

use std::sync::{Arc, Mutex};

use rewind::persist::sim::Point;
use rewind::{Backend, Error, LogVariant, PPtr, Policy, Pool, PoolConfig};

const LAYOUT: &str = "log-exhaustion";
/// Words in the root array.
const WORDS: u64 = 4096;

/// A simulated pool with a tiny log (four buckets of 16 cells) and an
/// array of `WORDS` words as its root.
fn pool(v: LogVariant, p: Policy, size: u64) -> (Pool, PPtr<u64>) {
    let cfg = PoolConfig::default()
        .log(v)
        .policy(p)
        .backend(Backend::Sim)
        .bucket_cells(16)
        .log_size(4096);
    let pool = Pool::create_sim(LAYOUT, size, &cfg).unwrap();
    let arr = pool
        .transaction(|tx| tx.root::<[u64; WORDS as usize]>())
        .unwrap()
        .cast::<u64>();
    (pool, arr)
}

fn words(pool: &Pool, arr: PPtr<u64>, n: u64) -> Vec<u64> {
    (0..n).map(|i| pool.read(arr.at(i)).unwrap()).collect()
}

/// Reopens the pool from what a process kill now would leave.
fn reopen(pool: &Pool) -> Pool {
    let img = pool.domain().with_sim(|s| s.image_all_pending()).unwrap();
    Pool::open_image(img, LAYOUT).unwrap()
}

/// Writes word after word (round after round over the array) until a write
/// fails or `limit` writes are done; returns the writes that succeeded and
/// the error.
fn write_until_full(tx: &mut rewind::Tx<'_>, arr: PPtr<u64>, limit: u64) -> (u64, Option<Error>) {
    for k in 0..limit {
        if let Err(e) = tx.write(arr.at(k % WORDS), &(k + 1)) {
            return (k, Some(e));
        }
    }
    (limit, None)
}

#[test]
fn a_transaction_outgrowing_the_log_commits_because_the_log_grows() {
    for (v, p) in configs() {
        let (pool, arr) = pool(v, p, 8 << 20);
        let before = pool.log_stats().blocks_total;
        let n = 3000; // about 300 KiB of records against a 6 KiB log
        pool.transaction(|tx| {
            let (done, e) = write_until_full(tx, arr, n);
            assert_eq!((done, e.map(|e| e.to_string())), (n, None), "{v}-{p}");
            Ok::<_, Error>(())
        })
        .unwrap_or_else(|e| panic!("{v}-{p}: {e}"));
        let want: Vec<u64> = (0..WORDS).map(|i| if i < n { i + 1 } else { 0 }).collect();
        assert_eq!(words(&pool, arr, WORDS), want, "{v}-{p}");
        if p == Policy::NoForce {
            pool.checkpoint().unwrap();
        }
        // Redo-async: the records go once write-back has put the values
        // in place.
        pool.sync().unwrap();
        let after = pool.log_stats();
        assert_eq!(after.live_records, 0, "{v}-{p}");
        assert!(after.blocks_total <= before + 2 * 151, "{v}-{p}: {after:?}");
        let reopened = reopen(&pool);
        assert_eq!(words(&reopened, arr, WORDS), want, "{v}-{p}");
        // Every chunk the log took went back to the heap.
        let s = reopened.alloc_stats();
        assert_eq!(s.free_chunks, s.total_chunks - 1, "{v}-{p}: {s:?}");
        assert!(rewind::inspect::check_pool(&reopened).is_ok(), "{v}-{p}");
    }
}

#[test]
fn a_full_heap_dooms_the_transaction_and_the_pool_stays_usable() {
    for (v, p) in configs() {
        if matches!(p, Policy::Redo | Policy::RedoAsync) && redo_write_set_fits(v) {
            continue;
        }
        for keep_going in [false, true] {
            let (pool, arr) = pool(v, p, 2 << 20);
            pool.transaction(|tx| tx.write(arr.at(0), &7)).unwrap();
            let r = pool.transaction(|tx| {
                let (done, e) = write_until_full(tx, arr, 1_000_000);
                let e = e.unwrap_or_else(|| panic!("{v}-{p}: {done} writes and no error"));
                assert!(matches!(e, Error::LogFull { .. }), "{v}-{p}: {e}");
                if keep_going {
                    // Writes after the failure fail the same way, and the
                    // closure's Ok cannot commit a doomed transaction.
                    let again = tx.write(arr.at(1), &99).unwrap_err();
                    assert!(matches!(again, Error::LogFull { .. }), "{again}");
                    Ok(())
                } else {
                    Err(e)
                }
            });
            let e = r.expect_err("a doomed transaction must not commit");
            assert!(matches!(e, Error::LogFull { .. }), "{v}-{p}: {e}");
            // Rolled back whole: nothing of it is visible.
            let mut want = vec![0u64; WORDS as usize];
            want[0] = 7;
            assert_eq!(
                words(&pool, arr, WORDS),
                want,
                "{v}-{p} keep_going={keep_going}"
            );
            // The pool goes on: another transaction commits.
            pool.transaction(|tx| tx.write(arr.at(2), &3)).unwrap();
            want[2] = 3;
            let reopened = reopen(&pool);
            assert_eq!(words(&reopened, arr, WORDS), want, "{v}-{p}");
            assert!(rewind::inspect::check_pool(&reopened).is_ok(), "{v}-{p}");
            let s = reopened.alloc_stats();
            assert_eq!(s.free_chunks, s.total_chunks - 1, "{v}-{p}: {s:?}");
        }
    }
}

#[test]
fn five_thousand_allocations_in_one_transaction() {
    for (v, p) in configs() {
        let (pool, arr) = pool(v, p, 8 << 20);
        let r = pool.transaction(|tx| {
            let mut last = PPtr::<u64>::null();
            for i in 0..5000u64 {
                last = tx.alloc::<u64>()?;
                tx.write(last, &i)?;
            }
            tx.write(arr.at(0), &last.offset())
        });
        match r {
            Ok(()) => {
                let last = PPtr::<u64>::from_offset(pool.read(arr.at(0)).unwrap());
                assert_eq!(pool.read(last).unwrap(), 4999, "{v}-{p}");
            }
            Err(e) => assert!(
                matches!(e, Error::LogFull { .. } | Error::OutOfMemory { .. }),
                "{v}-{p}: {e}"
            ),
        }
        let reopened = reopen(&pool);
        assert!(rewind::inspect::check_pool(&reopened).is_ok(), "{v}-{p}");
        reopened.transaction(|tx| tx.write(arr.at(1), &1)).unwrap();
    }
}

/// Under the redo policy a write of the same word edits the write set's
/// entry: 1,000,000 writes over the array's 4,096 words are 4,096 entries.
/// Whether they fit in this pool's log (then they commit, with the last
/// value of each word, and no write ever fills the log).
fn redo_write_set_fits(v: LogVariant) -> bool {
    let (pool, arr) = pool(v, Policy::Redo, 2 << 20);
    let r = pool.transaction(|tx| {
        let (done, e) = write_until_full(tx, arr, 1_000_000);
        match e {
            Some(e) => Err(e),
            None => Ok(done),
        }
    });
    match r {
        Ok(done) => {
            // Word i holds the value of the last write k < done with
            // k = i modulo WORDS: k + 1.
            let want: Vec<u64> = (0..WORDS)
                .map(|i| i + WORDS * ((done - 1 - i) / WORDS) + 1)
                .collect();
            assert!(words(&pool, arr, WORDS) == want, "{v}-redo: wrong values");
            let reopened = reopen(&pool);
            assert!(words(&reopened, arr, WORDS) == want, "{v}-redo: reopened");
            true
        }
        Err(e) => {
            assert!(matches!(e, Error::LogFull { .. }), "{v}-redo: {e}");
            false
        }
    }
}

/// Crash images of a run: what a process kill leaves (every store made)
/// and what a power failure may leave (nothing pending persisted), at every
/// `every`-th fence.
fn crash_images(pool: &Pool, every: u64) -> Arc<Mutex<Vec<Vec<u8>>>> {
    let imgs: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let sink = imgs.clone();
    pool.domain().with_sim_mut(|s| {
        s.set_hook(
            Box::new(move |sim, at| {
                if let Point::Fence(n) = at {
                    if n % every == 0 {
                        let mut g = sink.lock().unwrap();
                        g.push(sim.image_all_pending());
                        g.push(sim.image_none_pending());
                    }
                }
            }),
            0,
        )
    });
    imgs
}

#[test]
fn a_crash_near_exhaustion_recovers_the_committed_state() {
    for (v, p) in configs() {
        if matches!(p, Policy::Redo | Policy::RedoAsync) && redo_write_set_fits(v) {
            continue;
        }
        let (pool, arr) = pool(v, p, 2 << 20);
        pool.transaction(|tx| {
            for i in 0..100 {
                tx.write(arr.at(i), &(i + 1))?;
            }
            Ok::<_, Error>(())
        })
        .unwrap();
        let committed = words(&pool, arr, WORDS);
        // Fences in the doomed transaction, to sample ~60 points of it.
        let fences = |pool: &Pool| pool.domain().with_sim(|s| s.fences()).unwrap();
        let f0 = fences(&pool);
        let (probe, parr) = self::pool(v, p, 2 << 20);
        let _ = probe.transaction(|tx| {
            write_until_full(tx, parr, 1_000_000);
            Ok::<_, Error>(())
        });
        let span = fences(&probe).max(1);
        let imgs = crash_images(&pool, (span / 60).max(1));
        let r = pool.transaction(|tx| {
            write_until_full(tx, arr, 1_000_000);
            Ok::<_, Error>(())
        });
        assert!(r.is_err(), "{v}-{p}");
        pool.domain().with_sim_mut(|s| s.clear_hook());
        let imgs = std::mem::take(&mut *imgs.lock().unwrap());
        if !matches!(p, Policy::Redo | Policy::RedoAsync) {
            // A redo transaction writes nothing to the log before it
            // commits: its only fences are the log's growth.
            assert!(imgs.len() >= 60, "{v}-{p}: only {} images", imgs.len());
        }
        for (i, img) in imgs.into_iter().enumerate() {
            let rec = Pool::open_image(img, LAYOUT)
                .unwrap_or_else(|e| panic!("{v}-{p} image {i}: recovery failed: {e}"));
            assert_eq!(words(&rec, arr, WORDS), committed, "{v}-{p} image {i}");
            let c = rewind::inspect::check_pool(&rec);
            assert!(c.is_ok(), "{v}-{p} image {i}: {c}");
            rec.transaction(|tx| tx.write(arr.at(WORDS - 1), &5))
                .unwrap_or_else(|e| panic!("{v}-{p} image {i}: pool unusable: {e}"));
        }
        let _ = f0;
    }
}

/// No-force with the checkpoint fill at 1 (the most the docs allow): the
/// automatic checkpoint runs once the records fill the log's own region,
/// so a long run of small transactions never lets the log eat the heap
/// (found by a user: the log grew into every free chunk, then every
/// transaction failed with `LogFull` and every allocation with
/// `OutOfMemory`). A fill out of (0, 1] is refused and changes nothing.
#[test]
fn a_checkpoint_fill_of_one_still_checkpoints_and_nan_is_refused() {
    for variant in LogVariant::ALL {
        let cfg = PoolConfig::default()
            .log(variant)
            .policy(Policy::NoForce)
            .log_size(64 << 10);
        let mut pool = Pool::create_sim(LAYOUT, 4 << 20, &cfg).unwrap();
        for bad in [f64::NAN, f64::INFINITY, 0.0, -0.5, 1.5] {
            let e = pool.set_checkpoint_fill(bad).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::InvalidConfig {
                        what: "checkpoint fill",
                        ..
                    }
                ),
                "{e}"
            );
        }
        pool.set_checkpoint_fill(1.0).unwrap();
        let blk: PPtr<[u64; 32]> = pool.transaction(|tx| tx.alloc()).unwrap();
        let free = pool.alloc_stats().free_chunks;
        for i in 0..20_000u64 {
            pool.transaction(|tx| tx.write(blk, &[i; 32]))
                .unwrap_or_else(|e| panic!("{variant:?}: transaction {i}: {e}"));
        }
        assert_eq!(pool.read(blk).unwrap(), [19_999; 32]);
        assert!(
            pool.alloc_stats().free_chunks + 1 >= free,
            "{variant:?}: the log kept the heap's chunks"
        );
        pool.transaction(|tx| tx.alloc_bytes(64)).unwrap();
    }
}
