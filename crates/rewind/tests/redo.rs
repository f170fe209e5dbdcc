//! The redo policy's write set, every log variant: reads see it, an abort
//! logs nothing, a rewrite of the same bytes edits its entry, writes that
//! follow one another in memory coalesce into one REDO record, and a
//! committed group still in the log is what recovery redoes.
//!
//! A commit's records are cleared by the next append, so with the bucketed
//! logs an image taken right after a commit holds its whole group: its
//! recovery report counts the group's REDO records (`redone`). (A Simple
//! log's one-record blocks leave the list as their records are cleared, and
//! the two-layer log removes them from its tree at once.)

use rand::{rngs::SmallRng, Rng, SeedableRng};
use rewind::{Backend, LogVariant, PPtr, Policy, Pool, PoolConfig};

const LAYOUT: &str = "redo";

fn pool(v: LogVariant) -> (Pool, PPtr<[u64; 64]>) {
    let cfg = PoolConfig::default()
        .log(v)
        .policy(Policy::Redo)
        .backend(Backend::Sim);
    let pool = Pool::create_sim(LAYOUT, 4 << 20, &cfg).unwrap();
    let root = pool.transaction(|tx| tx.root::<[u64; 64]>()).unwrap();
    // The root's allocation is a commit group of its own in the ring:
    // drained, so that a recovery report counts the test's groups only.
    pool.sync().unwrap();
    (pool, root)
}

/// Recovery of what a process kill would leave now.
fn recovered(pool: &Pool) -> Pool {
    let img = pool.domain().with_sim(|s| s.image_all_pending()).unwrap();
    Pool::open_image(img, LAYOUT).unwrap()
}

#[test]
fn reads_see_the_write_set_and_an_abort_logs_nothing() {
    for v in LogVariant::ALL {
        let (pool, root) = pool(v);
        let words = root.cast::<u64>();
        let before = pool.counters();
        let r = pool.transaction(|tx| {
            tx.write(words.at(3), &7)?;
            tx.write(words.at(3), &8)?;
            assert_eq!(
                tx.read(words.at(3))?,
                8,
                "{v}: the transaction reads its write"
            );
            // Not in place before commit.
            assert_eq!(pool.domain().read_u64(words.at(3).offset())?, 0, "{v}");
            Err::<(), _>(rewind::Error::Aborted)
        });
        assert!(matches!(r, Err(rewind::Error::Aborted)), "{v}");
        let c = pool.counters().since(&before);
        assert_eq!(
            (c.fences, c.nt_lines),
            (0, 0),
            "{v}: an abort logged something"
        );
        assert_eq!(pool.read(words.at(3)).unwrap(), 0, "{v}");
    }
}

#[test]
fn a_rewrite_edits_its_entry_and_adjacent_writes_coalesce() {
    for v in LogVariant::ALL {
        let (pool, root) = pool(v);
        let words = root.cast::<u64>();
        pool.transaction(|tx| {
            // One word written 100 times: one entry, the last value.
            for i in 0..100u64 {
                tx.write(words.at(40), &i)?;
            }
            // Four adjacent words, one after another: one record.
            for i in 0..4u64 {
                tx.write(words.at(i), &(10 + i))?;
            }
            Ok::<_, rewind::Error>(())
        })
        .unwrap();
        let rec = recovered(&pool);
        let report = rec.recovery_report();
        if matches!(v, LogVariant::Optimized | LogVariant::Batch) {
            // Two REDO records: the rewritten word's and the four words'.
            assert_eq!(report.redone, 2, "{v}: {report}");
        }
        let got = rec.read(root).unwrap();
        assert_eq!(&got[..4], &[10, 11, 12, 13], "{v}");
        assert_eq!(got[40], 99, "{v}");
    }
}

#[test]
fn coalescing_keeps_write_order_where_writes_overlap() {
    for v in LogVariant::ALL {
        let (pool, root) = pool(v);
        let words = root.cast::<u64>();
        pool.transaction(|tx| {
            tx.write(words.at(0), &1)?;
            tx.write(words.at(1), &2)?;
            // Overlaps the first two: a new entry, replayed after them.
            tx.write_bytes(words.at(0).offset() + 4, &[0xff; 8])?;
            // The first word again: a later entry overlaps it, so it cannot
            // be edited in place; a new entry wins.
            tx.write(words.at(0), &5)?;
            assert_eq!(tx.read(words.at(0))?, 5);
            Ok::<_, rewind::Error>(())
        })
        .unwrap();
        let want = {
            let mut b = [0u8; 16];
            b[..8].copy_from_slice(&5u64.to_le_bytes());
            b[8..].copy_from_slice(&2u64.to_le_bytes());
            b[8..12].copy_from_slice(&[0xff; 4]);
            b
        };
        for p in [&pool, &recovered(&pool)] {
            let mut got = [0u8; 16];
            p.read_bytes(words.offset(), &mut got).unwrap();
            assert_eq!(got, want, "{v}");
        }
    }
}

/// A read over several lines that one entry wrote whole is taken from it
/// alone, unless a later entry wrote any of those lines: then each byte's
/// latest value, whichever line the later entry is on (first, middle,
/// last), and also inside a savepoint rolled back to.
#[test]
fn a_read_over_lines_one_entry_wrote_sees_every_later_write() {
    let (pool, root) = pool(LogVariant::Batch);
    let base = root.offset();
    let whole: Vec<u8> = (0..256u32).map(|i| i as u8).collect();
    for later in [0u64, 100, 250, 300] {
        pool.transaction(|tx| {
            tx.write_bytes(base, &whole)?;
            let mut got = vec![0u8; 200];
            tx.read_bytes(base + 20, &mut got)?;
            assert_eq!(got, whole[20..220], "one entry");
            let sp = tx.savepoint()?;
            tx.write_bytes(base + later, &[0xee; 4])?;
            let mut want = whole.clone();
            want.resize(512, 0);
            want[later as usize..later as usize + 4].fill(0xee);
            for (from, len) in [(0usize, 256usize), (0, 300), (64, 128)] {
                let mut got = vec![0u8; len];
                tx.read_bytes(base + from as u64, &mut got)?;
                assert_eq!(got, want[from..from + len], "a later write at {later}");
            }
            tx.rollback_to(sp)?;
            let mut got = vec![0u8; 256];
            tx.read_bytes(base, &mut got)?;
            assert_eq!(got, whole, "rolled back, at {later}");
            Ok::<_, rewind::Error>(())
        })
        .unwrap();
        // Zeroed again for the next case.
        pool.transaction(|tx| tx.write_bytes(base, &[0u8; 512]))
            .unwrap();
    }
}

fn async_pool(v: LogVariant) -> (Pool, PPtr<[u64; 64]>) {
    let cfg = PoolConfig::default()
        .log(v)
        .policy(Policy::RedoAsync)
        .backend(Backend::Sim);
    let pool = Pool::create_sim(LAYOUT, 4 << 20, &cfg).unwrap();
    let root = pool.transaction(|tx| tx.root::<[u64; 64]>()).unwrap();
    // The root's allocation is a commit group of its own in the ring:
    // drained, so that a recovery report counts the test's groups only.
    pool.sync().unwrap();
    (pool, root)
}

/// Redo-async on the simulated domain (write-back only at explicit steps):
/// a committed value is read back before it is in place, a crash before
/// write-back recovers it from the log, and a step puts it in place and
/// releases the records.
#[test]
fn async_commit_is_read_back_and_recovered_before_write_back() {
    for v in LogVariant::ALL {
        let (pool, root) = async_pool(v);
        let words = root.cast::<u64>();
        let before = pool.counters();
        pool.transaction(|tx| tx.write(words.at(5), &55)).unwrap();
        let c = pool.counters().since(&before);
        if v.one_fence() {
            assert_eq!(c.fences, 1, "{v}: a one-fence commit");
        }
        assert_eq!(
            pool.read(words.at(5)).unwrap(),
            55,
            "{v}: read through the cache"
        );
        assert_eq!(
            pool.domain().read_u64(words.at(5).offset()).unwrap(),
            0,
            "{v}: not in place yet"
        );
        assert!(pool.write_back_pending() >= 1, "{v}");
        let r = recovered(&pool);
        assert_eq!(r.read(words.at(5)).unwrap(), 55, "{v}: redone by recovery");
        assert!(pool.write_back_step().unwrap(), "{v}");
        assert_eq!(pool.write_back_pending(), 0, "{v}");
        assert_eq!(
            pool.domain().read_u64(words.at(5).offset()).unwrap(),
            55,
            "{v}: in place"
        );
        let r = recovered(&pool);
        assert_eq!(r.read(words.at(5)).unwrap(), 55, "{v}: after write-back");
    }
}

/// Redo-async on a real file with its write-back thread, LRU-held so that
/// write-back lags: a reader on another thread, told of each commit after
/// it returns, always reads that commit's value or a later one, whole
/// (every word of a 64-byte record from one commit), while the values wait
/// in the write cache; `sync` then puts them in place, and the reopened
/// pool has the last one.
#[test]
fn async_readers_never_see_torn_or_stale_values_while_write_back_lags() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    const COMMITS: u64 = 1500;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lag.pool");
    let cfg = PoolConfig::default()
        .policy(Policy::RedoAsync)
        .write_back(rewind::WriteBack::Lru { lines: 1024 });
    let pool = Pool::create(&path, LAYOUT, 16 << 20, &cfg).unwrap();
    let rec = pool.transaction(|tx| tx.root::<[u64; 8]>()).unwrap();
    let published = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let (mut reads, mut lagging) = (0u64, 0u64);
    std::thread::scope(|s| {
        s.spawn(|| {
            for v in 1..=COMMITS {
                pool.transaction(|tx| tx.write(rec, &[v; 8])).unwrap();
                published.store(v, Ordering::Release);
            }
            done.store(true, Ordering::Release);
        });
        while !done.load(Ordering::Acquire) || reads == 0 {
            let seen = published.load(Ordering::Acquire);
            let r = pool.read(rec).unwrap();
            assert!(r.iter().all(|&w| w == r[0]), "torn read: {r:?}");
            assert!(r[0] >= seen, "stale read: {} after commit {seen}", r[0]);
            reads += 1;
            if pool.write_back_pending() > 0 {
                lagging += 1;
            }
        }
    });
    assert!(lagging > 0, "write-back never lagged ({reads} reads)");
    assert!(
        pool.write_back_pending() > 0,
        "the LRU cache holds the hot line"
    );
    pool.sync().unwrap();
    assert_eq!(pool.write_back_pending(), 0);
    assert_eq!(
        pool.domain().read_u64(rec.offset()).unwrap(),
        COMMITS,
        "in place after sync"
    );
    pool.close().unwrap();
    let pool = Pool::open(&path, LAYOUT, &Default::default()).unwrap();
    assert_eq!(pool.read(rec).unwrap(), [COMMITS; 8]);
}

/// A redo-async commit the write-back has not reached survives a crash of
/// the process (the pool dropped as a crash would), and the log space the
/// groups held is given back by write-back: many more commits than the log
/// could hold at once go through.
#[test]
fn async_commits_survive_a_crash_and_write_back_reclaims_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.pool");
    let cfg = PoolConfig::default()
        .policy(Policy::RedoAsync)
        .log_size(64 << 10);
    let pool = Pool::create(&path, LAYOUT, 8 << 20, &cfg).unwrap();
    let arr = pool.transaction(|tx| tx.alloc_array::<u64>(4096)).unwrap();
    let root = pool.transaction(|tx| tx.root::<u64>()).unwrap();
    pool.transaction(|tx| tx.write(root, &arr.offset()))
        .unwrap();
    for i in 0..20_000u64 {
        pool.transaction(|tx| {
            tx.write(arr.at(i % 4096), &i)?;
            tx.write(arr.at((i * 7) % 4096), &(i + 1))
        })
        .unwrap();
    }
    let want: Vec<u64> = (0..4096).map(|j| pool.read(arr.at(j)).unwrap()).collect();
    pool.crash();
    let pool = Pool::open(&path, LAYOUT, &Default::default()).unwrap();
    let got: Vec<u64> = (0..4096).map(|j| pool.read(arr.at(j)).unwrap()).collect();
    assert_eq!(got, want);
}

/// Reads inside a transaction see the write set's latest bytes wherever
/// writes of every length and alignment overlap (entries spanning lines,
/// rewrites edited in place, later entries over parts of earlier ones):
/// after each of 400 seeded writes over 512 bytes, a read of a seeded range
/// agrees with a plain byte model; the commit leaves the model in place.
#[test]
fn reads_overlay_overlapping_writes_across_lines_as_a_byte_model() {
    for v in LogVariant::ALL {
        let (pool, root) = pool(v);
        let base = root.offset();
        let mut model = [0u8; 512];
        let mut rng = SmallRng::seed_from_u64(0x2545_f491_4f6c_dd1d);
        let mut next = |n: u64| rng.gen_range(0..n);
        pool.transaction(|tx| {
            for step in 0..400u64 {
                // Short writes mostly, now and then one of several lines;
                // a rewrite of the previous range every fifth step.
                let len = if next(8) == 0 {
                    1 + next(200)
                } else {
                    1 + next(16)
                };
                let at = next(512 - len);
                let bytes: Vec<u8> = (0..len).map(|_| next(256) as u8).collect();
                tx.write_bytes(base + at, &bytes)?;
                model[at as usize..(at + len) as usize].copy_from_slice(&bytes);
                if step % 5 == 0 {
                    let again: Vec<u8> = bytes.iter().map(|b| b ^ 0x5a).collect();
                    tx.write_bytes(base + at, &again)?;
                    model[at as usize..(at + len) as usize].copy_from_slice(&again);
                }
                let rlen = 1 + next(130);
                let rat = next(512 - rlen);
                let mut got = vec![0u8; rlen as usize];
                tx.read_bytes(base + rat, &mut got)?;
                assert_eq!(
                    got,
                    model[rat as usize..(rat + rlen) as usize],
                    "{v}: step {step}, read of {rlen} at {rat}"
                );
            }
            Ok::<_, rewind::Error>(())
        })
        .unwrap();
        let mut got = [0u8; 512];
        pool.read_bytes(base, &mut got).unwrap();
        assert_eq!(got, model, "{v}: committed");
    }
}
