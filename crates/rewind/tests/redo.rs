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

use rewind::{Backend, LogVariant, PPtr, Policy, Pool, PoolConfig};

const LAYOUT: &str = "redo";

fn pool(v: LogVariant) -> (Pool, PPtr<[u64; 64]>) {
    let cfg = PoolConfig::default()
        .log(v)
        .policy(Policy::Redo)
        .backend(Backend::Sim);
    let pool = Pool::create_sim(LAYOUT, 4 << 20, &cfg).unwrap();
    let root = pool.transaction(|tx| tx.root::<[u64; 64]>()).unwrap();
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

fn async_pool(v: LogVariant) -> (Pool, PPtr<[u64; 64]>) {
    let cfg = PoolConfig::default()
        .log(v)
        .policy(Policy::RedoAsync)
        .backend(Backend::Sim);
    let pool = Pool::create_sim(LAYOUT, 4 << 20, &cfg).unwrap();
    let root = pool.transaction(|tx| tx.root::<[u64; 64]>()).unwrap();
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
