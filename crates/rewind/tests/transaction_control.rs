//! MARS's transaction control, every log variant × policy: savepoints and
//! rollbacks to them, nested top actions, single-write atomic updates, and
//! what a pool of the previous format version gets. (Crash states of the
//! same operations: the explorer's control programs and `tests/model.rs`.)

mod common;
use common::configs;

use rewind::{
    Backend, Error, LogVariant, OpenOptions, PPtr, Pod, Policy, Pool, PoolConfig, Zeroable,
};

const LAYOUT: &str = "control";

#[derive(Clone, Copy, Pod, Zeroable, Debug, PartialEq, Eq)]
#[repr(C)]
struct Root {
    a: u64,
    b: u64,
    obj: u64,
    kept: u64,
    big: [u8; 600],
}

fn pool(dir: &std::path::Path, v: LogVariant, p: Policy) -> (Pool, PPtr<Root>) {
    let path = dir.join(format!("{v}-{p}.pool"));
    let cfg = PoolConfig::default()
        .log(v)
        .policy(p)
        .backend(Backend::Msync);
    let pool = Pool::create(&path, LAYOUT, 4 << 20, &cfg).unwrap();
    let root = pool.transaction(|tx| tx.root::<Root>()).unwrap();
    (pool, root)
}

/// The pool reopened (recovery runs), with its root.
fn reopen(pool: Pool, dir: &std::path::Path, v: LogVariant, p: Policy) -> Pool {
    drop(pool);
    let path = dir.join(format!("{v}-{p}.pool"));
    let pool = Pool::open(&path, LAYOUT, &OpenOptions::default()).unwrap();
    assert!(rewind::inspect::check_pool(&pool).is_ok(), "{v}-{p}: check");
    pool
}

#[test]
fn rollback_to_a_savepoint_undoes_writes_allocations_and_frees_and_the_transaction_commits() {
    let dir = tempfile::tempdir().unwrap();
    for (v, p) in configs() {
        let (pool, root) = pool(dir.path(), v, p);
        let old = pool
            .transaction(|tx| {
                let o = tx.alloc::<[u64; 4]>()?;
                tx.write(o, &[7; 4])?;
                tx.write(
                    root,
                    &Root {
                        a: 1,
                        b: 2,
                        obj: o.offset(),
                        ..Root::zeroed()
                    },
                )?;
                Ok::<_, Error>(o)
            })
            .unwrap();
        // Heap figures are compared as rebuilt at open.
        let pool = reopen(pool, dir.path(), v, p);
        let baseline = pool.alloc_stats();
        pool.transaction(|tx| {
            tx.write(root.cast::<u64>(), &10)?;
            // A block allocated before the savepoint, written after it.
            let early = tx.alloc::<u64>()?;
            tx.write(early, &5)?;
            let sp = tx.savepoint()?;
            tx.write(root.cast::<u64>().at(1), &20)?;
            tx.write(early, &6)?;
            tx.write_bytes(root.offset() + 32, &[9; 600])?;
            let fresh = tx.alloc::<[u64; 8]>()?;
            tx.write(fresh, &[3; 8])?;
            tx.free(old)?;
            tx.rollback_to(sp)?;
            assert_eq!(tx.read(root)?.b, 2, "{v}-{p}: read after rollback_to");
            assert_eq!(tx.read(early)?, 5, "{v}-{p}: write into an earlier block");
            // The savepoint stays valid; the transaction goes on.
            tx.write(root.cast::<u64>().at(1), &30)?;
            tx.rollback_to(sp)?;
            tx.write(root.cast::<u64>().at(3), &early.offset())?;
            Ok::<_, Error>(())
        })
        .unwrap();
        let pool = reopen(pool, dir.path(), v, p);
        let r = pool.read(root).unwrap();
        assert_eq!((r.a, r.b, r.obj), (10, 2, old.offset()), "{v}-{p}");
        assert_eq!(r.big, [0; 600], "{v}-{p}: byte range");
        assert_eq!(
            pool.read(old).unwrap(),
            [7; 4],
            "{v}-{p}: freed then restored"
        );
        assert_eq!(pool.read(PPtr::<u64>::from_offset(r.kept)).unwrap(), 5);
        // Only `early` is new: the allocation after the savepoint went back.
        pool.transaction(|tx| tx.free(PPtr::<u64>::from_offset(r.kept)))
            .unwrap();
        let pool = reopen(pool, dir.path(), v, p);
        assert_eq!(pool.alloc_stats(), baseline, "{v}-{p}: heap");
    }
}

#[test]
fn savepoints_that_cannot_be_rolled_back_to_are_refused_and_the_transaction_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    for (v, p) in configs() {
        let (pool, root) = pool(dir.path(), v, p);
        let other = pool.transaction(|tx| tx.savepoint()).unwrap();
        pool.transaction(|tx| {
            assert!(matches!(
                tx.rollback_to(other),
                Err(Error::InvalidSavepoint { .. })
            ));
            let sp1 = tx.savepoint()?;
            tx.write(root.cast::<u64>(), &1)?;
            let sp2 = tx.savepoint()?;
            tx.write(root.cast::<u64>(), &2)?;
            tx.rollback_to(sp1)?;
            tx.write(root.cast::<u64>().at(1), &3)?;
            // sp2 was undone by the rollback to sp1.
            assert!(matches!(
                tx.rollback_to(sp2),
                Err(Error::InvalidSavepoint { .. })
            ));
            // A savepoint of the enclosing transaction inside a nested top action.
            let r = tx.nested_top_action(|tx| tx.rollback_to(sp1));
            assert!(matches!(r, Err(Error::InvalidSavepoint { .. })), "{r:?}");
            tx.write(root.cast::<u64>().at(2), &4)?;
            Ok::<_, Error>(())
        })
        .unwrap();
        let r = pool.read(root).unwrap();
        assert_eq!((r.a, r.b, r.obj), (0, 3, 4), "{v}-{p}");
    }
}

#[test]
fn a_savepoint_of_another_pool_or_of_a_closed_handle_is_refused() {
    // Transaction ids are counted per handle (from 1 again after a clean
    // close), so a savepoint of another pool's transaction, or of this
    // pool's before it was closed, could carry the id of the transaction
    // it was handed to: it was taken, and the rollback to it undid that
    // transaction's writes without a word.
    let dir = tempfile::tempdir().unwrap();
    for (v, p) in configs() {
        let (a, ra) = pool(dir.path(), v, p);
        let cfg = PoolConfig::default().log(v).policy(p);
        let b = Pool::create_sim(LAYOUT, 4 << 20, &cfg).unwrap();
        let rb = b.transaction(|tx| tx.root::<u64>()).unwrap();
        a.transaction(|ta| {
            let sp = ta.savepoint()?;
            ta.write(ra.cast::<u64>(), &1)?;
            b.transaction(|tb| {
                tb.write(rb, &2)?;
                let r = tb.rollback_to(sp);
                assert!(
                    matches!(&r, Err(Error::InvalidSavepoint { reason }) if reason.contains("another pool")),
                    "{v}-{p}: {r:?}"
                );
                assert_eq!(tb.read(rb)?, 2, "{v}-{p}");
                Ok::<_, Error>(())
            })
        })
        .unwrap();
        assert_eq!(a.read(ra).unwrap().a, 1, "{v}-{p}");
        assert_eq!(b.read(rb).unwrap(), 2, "{v}-{p}");
        // A savepoint taken by the first transaction after an open, kept
        // past a clean close, offered to the first transaction after the
        // next open.
        let a = reopen(a, dir.path(), v, p);
        let old = a.transaction(|tx| tx.savepoint()).unwrap();
        let a = reopen(a, dir.path(), v, p);
        a.transaction(|tx| {
            tx.write(ra.cast::<u64>(), &5)?;
            let r = tx.rollback_to(old);
            assert!(
                matches!(r, Err(Error::InvalidSavepoint { .. })),
                "{v}-{p}: {r:?}"
            );
            Ok::<_, Error>(())
        })
        .unwrap();
        assert_eq!(a.read(ra).unwrap().a, 5, "{v}-{p}");
        drop(a);
        std::fs::remove_file(dir.path().join(format!("{v}-{p}.pool"))).unwrap();
    }
}

#[test]
fn a_nested_top_action_survives_the_abort_of_its_transaction() {
    let dir = tempfile::tempdir().unwrap();
    for (v, p) in configs() {
        let (pool, root) = pool(dir.path(), v, p);
        // Heap figures are compared as rebuilt at open.
        let pool = reopen(pool, dir.path(), v, p);
        let baseline = pool.alloc_stats();
        let r: Result<(), Error> = pool.transaction(|tx| {
            tx.write(root.cast::<u64>(), &1)?;
            let mine = tx.alloc::<u64>()?;
            // Like a B-tree split: a new node, linked in, kept whatever
            // becomes of the insert that caused it.
            tx.nested_top_action(|tx| {
                let node = tx.alloc::<[u64; 8]>()?;
                tx.write(node, &[42; 8])?;
                tx.write(root.cast::<u64>().at(3), &node.offset())?;
                // Not the enclosing transaction's block: refused, the action goes on.
                let e = tx.free(mine);
                assert!(matches!(e, Err(Error::InvalidFree { .. })), "{e:?}");
                Ok::<_, Error>(())
            })?;
            // A failing action is undone; the transaction goes on.
            let e = tx.nested_top_action(|tx| {
                tx.write(root.cast::<u64>().at(1), &77)?;
                Err::<(), _>(Error::Aborted)
            });
            assert!(matches!(e, Err(Error::Aborted)));
            assert_eq!(tx.read(root)?.b, 0, "{v}-{p}: failed action undone");
            // Written after the action: undone by the abort (back to the
            // action's value).
            tx.write(root.cast::<u64>().at(3), &0)?;
            Err(Error::Aborted)
        });
        assert!(matches!(r, Err(Error::Aborted)));
        let kept = pool.read(root).unwrap().kept;
        assert_ne!(kept, 0, "{v}-{p}: the action's link");
        assert_eq!(pool.read(root).unwrap().a, 0, "{v}-{p}: enclosing write");
        let node = PPtr::<[u64; 8]>::from_offset(kept);
        assert_eq!(pool.read(node).unwrap(), [42; 8]);
        let pool = reopen(pool, dir.path(), v, p);
        assert_eq!(pool.read(root).unwrap().kept, kept, "{v}-{p}: after reopen");
        assert_eq!(pool.read(node).unwrap(), [42; 8]);
        // The node is the only block still allocated: freeing it restores the heap.
        pool.transaction(|tx| {
            tx.free(node)?;
            tx.write(root.cast::<u64>().at(3), &0)
        })
        .unwrap();
        let pool = reopen(pool, dir.path(), v, p);
        assert_eq!(pool.alloc_stats(), baseline, "{v}-{p}: heap");
    }
}

/// A nested top action whose closure panics, the panic caught inside the
/// transaction: the action is undone as after an error, the transaction
/// goes on in its own frame (a savepoint of its top level can be rolled
/// back to) and commits without the action's writes, whether the action
/// is the transaction's first work (a group of its own under redo) or not.
#[test]
fn a_panic_caught_from_a_nested_top_action_undoes_it_and_the_transaction_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|info| {
        if info.payload().downcast_ref::<&str>() != Some(&"planned") {
            eprintln!("{info}");
        }
    }));
    for (v, p) in configs() {
        let (pool, root) = pool(dir.path(), v, p);
        for first in [true, false] {
            pool.transaction(|tx| {
                if !first {
                    tx.write(root.cast::<u64>(), &1)?;
                }
                let sp = tx.savepoint()?;
                let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let _ = tx.nested_top_action(|tx| {
                        tx.write(root.cast::<u64>().at(1), &77)?;
                        let node = tx.alloc::<u64>()?;
                        tx.write(root.cast::<u64>().at(3), &node.offset())?;
                        panic!("planned");
                        #[allow(unreachable_code)]
                        Ok::<_, Error>(())
                    });
                }));
                assert!(caught.is_err());
                let r = tx.read(root)?;
                assert_eq!((r.b, r.kept), (0, 0), "{v}-{p} {first}: the action undone");
                tx.write(root.cast::<u64>().at(2), &5)?;
                tx.rollback_to(sp)?;
                tx.write(root.cast::<u64>().at(2), &9)
            })
            .unwrap_or_else(|e| panic!("{v}-{p} {first}: {e:?}"));
            let pool2 = &pool;
            let r = pool2.read(root).unwrap();
            assert_eq!((r.b, r.obj, r.kept), (0, 9, 0), "{v}-{p} {first}");
            assert_eq!(r.a, u64::from(!first), "{v}-{p} {first}");
            pool.transaction(|tx| tx.write(root, &Root::zeroed()))
                .unwrap();
        }
        // The root is the only block allocated, live and as rebuilt at open.
        let used = pool.alloc_stats().bytes_used;
        let pool = reopen(pool, dir.path(), v, p);
        let r = pool.read(root).unwrap();
        assert_eq!(
            (r.a, r.b, r.obj, r.kept),
            (0, 0, 0, 0),
            "{v}-{p}: after reopen"
        );
        let after = pool.alloc_stats().bytes_used;
        assert_eq!((used, after), (1024, 1024), "{v}-{p}: no block leaked");
    }
    std::panic::set_hook(quiet);
}

#[test]
fn atomic_write_takes_one_fence_for_an_aligned_word_under_force_and_redo_and_a_transaction_otherwise(
) {
    let dir = tempfile::tempdir().unwrap();
    for (v, p) in configs() {
        let (pool, root) = pool(dir.path(), v, p);
        let word = root.cast::<u64>();
        // Redo-async: the root's line still waits for write-back, and a
        // store in place outside it drains the cache first.
        pool.sync().unwrap();
        let before = pool.counters();
        pool.atomic_write(word, &0x1122_3344_5566_7788).unwrap();
        let fences = pool.counters().since(&before).fences;
        if p != Policy::NoForce {
            assert_eq!(fences, 1, "{v}-{p}");
        } else {
            // A transaction of one write.
            assert!(fences >= 2, "{v}-{p}: {fences}");
        }
        // Narrower aligned values, and a long unaligned range (a transaction).
        pool.atomic_write(PPtr::<u32>::from_offset(word.offset() + 8), &9)
            .unwrap();
        pool.atomic_write_bytes(root.offset() + 33, &[5; 500])
            .unwrap();
        // Null is NullPointer, as for a transaction's write; the header
        // past it is outside the heap.
        assert!(matches!(
            pool.atomic_write_bytes(0, &[1; 8]),
            Err(Error::NullPointer { .. })
        ));
        assert!(matches!(
            pool.atomic_write_bytes(8, &[1; 8]),
            Err(Error::NotInHeap { .. })
        ));
        let pool = reopen(pool, dir.path(), v, p);
        let r = pool.read(root).unwrap();
        assert_eq!((r.a, r.b), (0x1122_3344_5566_7788, 9), "{v}-{p}");
        assert_eq!(r.big[0], 0);
        assert!(r.big[1..501].iter().all(|&b| b == 5), "{v}-{p}: range");
    }
}

/// An atomic write lands only in a block allocated now, as a
/// transaction's write does, whatever the policy and size: a freed block
/// and a heap offset never allocated are refused, and neither is written.
#[test]
fn atomic_write_refuses_freed_and_never_allocated_memory_under_every_policy() {
    let dir = tempfile::tempdir().unwrap();
    for (v, p) in configs() {
        let (pool, _) = pool(dir.path(), v, p);
        let freed: PPtr<u64> = pool.transaction(|tx| tx.alloc()).unwrap();
        pool.transaction(|tx| tx.free(freed)).unwrap();
        let never = PPtr::<u64>::from_offset(freed.offset() + (1 << 20));
        for target in [freed, never] {
            for r in [
                pool.atomic_write(target, &0x5555),
                pool.atomic_write(target.cast::<u32>(), &0x55),
                pool.atomic_write_bytes(target.offset(), &[0x55; 24]),
            ] {
                assert!(
                    matches!(r, Err(Error::NotAllocated { .. })),
                    "{v}-{p}: {r:?}"
                );
            }
        }
        let pool = reopen(pool, dir.path(), v, p);
        let again: PPtr<u64> = pool.transaction(|tx| tx.alloc()).unwrap();
        assert_eq!(
            pool.read(again).unwrap(),
            0,
            "{v}-{p}: a fresh block is zero"
        );
    }
}

/// A program's lock names an object of the heap.
#[test]
fn a_lock_outside_the_heap_is_refused_and_the_transaction_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, root) = pool(dir.path(), LogVariant::Batch, Policy::Redo);
    pool.transaction(|tx| {
        assert!(matches!(
            tx.lock(PPtr::<u64>::null()),
            Err(Error::NullPointer { .. })
        ));
        for off in [8, u64::MAX] {
            let p = PPtr::<u64>::from_offset(off);
            assert!(matches!(tx.lock(p), Err(Error::NotInHeap { .. })));
            assert!(matches!(tx.lock_shared(p), Err(Error::NotInHeap { .. })));
        }
        tx.lock(root)?;
        tx.write(root.cast::<u64>(), &7)
    })
    .unwrap();
    assert_eq!(pool.read(root).unwrap().a, 7);
}

#[test]
fn a_pool_of_the_previous_format_version_is_refused_naming_both_versions() {
    use rewind::format::header::{CRC_OFF, VERSION};
    let dir = tempfile::tempdir().unwrap();
    let (pool, _) = pool(dir.path(), LogVariant::Batch, Policy::Force);
    drop(pool);
    let path = dir.path().join("batch-force.pool");
    let mut bytes = std::fs::read(&path).unwrap();
    let old = VERSION - 1;
    bytes[8..12].copy_from_slice(&old.to_le_bytes());
    let crc = crc32fast::hash(&bytes[..CRC_OFF]);
    bytes[CRC_OFF..CRC_OFF + 4].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    match Pool::open(&path, LAYOUT, &OpenOptions::default()) {
        Err(e @ Error::UnsupportedVersion { found, supported })
            if (found, supported) == (old, VERSION) =>
        {
            let text = e.to_string();
            assert!(
                text.contains(&format!("version {old}"))
                    && text.contains(&format!("version {VERSION}")),
                "{text}"
            );
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a version {old} pool opened"),
    }
}
