//! Redo-async's write cache and stores in place outside write-back.
//!
//! A write-back step stores a committed group's lines in place and stores
//! the Log Start that covers the group without a fence of its own (the next
//! step's fence makes it durable). Until then recovery can still redo the
//! group, so a store in place over one of its lines (a nested top action's
//! undo-logged write, a fresh block's, `Pool::write_unlogged`) must drain
//! first: otherwise a crash (or a kill between the step's removal of the
//! line and its Log Start store) redoes the old group over the newer bytes.
//! This was seen as a B+-tree "key outside its parent's separators" after
//! kills under redo-async (rewind-collections' kill test).

use rewind::{LogVariant, Policy, Pool, PoolConfig};

fn pool(v: LogVariant) -> (Pool, u64) {
    let cfg = PoolConfig::default().log(v).policy(Policy::RedoAsync);
    let pool = Pool::create_sim("write-back", 4 << 20, &cfg).unwrap();
    let root = pool.transaction(|tx| tx.root::<[u64; 8]>()).unwrap();
    pool.sync().unwrap();
    (pool, root.offset())
}

#[test]
fn a_store_over_a_line_whose_log_start_is_not_durable_drains_first() {
    for v in [
        LogVariant::Batch,
        LogVariant::TwoLayer,
        LogVariant::Optimized,
    ] {
        let (pool, root) = pool(v);
        let word = rewind::PPtr::<u64>::from_offset(root);
        pool.transaction(|tx| tx.write(word, &1)).unwrap();
        // One step: the value in place, its Log Start stored, not durable.
        assert!(
            pool.write_back_step().unwrap(),
            "{v}: the commit waits in the cache"
        );
        let before = pool.counters();
        pool.write_unlogged(root + 8, &7u64.to_le_bytes()).unwrap();
        let drained = pool.counters().since(&before);
        assert!(
            drained.fences >= 1,
            "{v}: a store over the group's line must first make its Log Start durable (a step's fence)"
        );
        pool.fence().unwrap();
        // Now covered: another store over that line needs no drain.
        let before = pool.counters();
        pool.write_unlogged(root + 16, &9u64.to_le_bytes()).unwrap();
        assert_eq!(
            pool.counters().since(&before).fences,
            0,
            "{v}: covered lines are stored at once"
        );
        pool.fence().unwrap();
        let got: [u64; 8] = pool.read(rewind::PPtr::from_offset(root)).unwrap();
        assert_eq!(&got[..3], &[1, 7, 9], "{v}");
        // And a crash now recovers the same bytes.
        let img = pool.domain().with_sim(|s| s.image_none_pending()).unwrap();
        let back = Pool::open_image(img, "write-back").unwrap();
        let got: [u64; 8] = back.read(rewind::PPtr::from_offset(root)).unwrap();
        assert_eq!(&got[..3], &[1, 7, 9], "{v}: after recovery");
    }
}
