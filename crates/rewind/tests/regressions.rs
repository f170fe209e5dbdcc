//! Bugs found once, kept as named tests.

use rewind::{Backend, LogVariant, PPtr, Pod, Policy, Pool, PoolConfig, Zeroable};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Root {
    p: PPtr<u64>,
}

fn cfg(log: LogVariant, policy: Policy) -> PoolConfig {
    PoolConfig::default()
        .log(log)
        .policy(policy)
        .backend(Backend::Sim)
}

/// No-force recovery redid an old committed UPDATE of a block that was
/// later freed and allocated again, overwriting the new owner's (unlogged,
/// fresh-memory) contents. Found by the demo's no-force run.
#[test]
fn noforce_redo_does_not_clobber_a_reallocated_block() {
    for log in LogVariant::ALL {
        for policy in Policy::ALL {
            let pool = Pool::create_sim("regress", 4 << 20, &cfg(log, policy)).unwrap();
            let root = pool
                .transaction(|tx| {
                    let r = tx.root::<Root>()?;
                    let a = tx.alloc::<u64>()?;
                    tx.write(r, &Root { p: a })?;
                    Ok::<_, rewind::Error>(r)
                })
                .unwrap();
            let a = pool.read(root).unwrap().p;
            pool.transaction(|tx| tx.write(a, &1u64)).unwrap();
            pool.transaction(|tx| {
                tx.write(root, &Root { p: PPtr::null() })?;
                tx.free(a)
            })
            .unwrap();
            let b = pool
                .transaction(|tx| {
                    let b = tx.alloc::<u64>()?;
                    tx.write(b, &2u64)?;
                    tx.write(root, &Root { p: b })?;
                    Ok::<_, rewind::Error>(b)
                })
                .unwrap();
            assert_eq!(a, b, "the freed block is reused");
            for img in pool
                .domain()
                .with_sim(|s| vec![s.image_none_pending(), s.image_all_pending()])
                .unwrap()
            {
                let p2 = Pool::open_image(img, "regress").unwrap();
                let r = p2.read(p2.root::<Root>().unwrap().unwrap()).unwrap();
                assert_eq!(
                    p2.read(r.p).unwrap(),
                    2,
                    "{log}/{policy}: {}",
                    p2.recovery_report()
                );
            }
        }
    }
}

/// A cleanly closed pool left records in its log (the last END under
/// force; everything since the last checkpoint under no-force).
#[test]
fn clean_close_leaves_an_empty_log() {
    let dir = tempfile::tempdir().unwrap();
    for log in LogVariant::ALL {
        for policy in Policy::ALL {
            let path = dir.path().join(format!("{log}-{policy}.pool"));
            let c = cfg(log, policy).backend(Backend::Pmem);
            let pool = Pool::create(&path, "regress", 4 << 20, &c).unwrap();
            for i in 0..5u64 {
                pool.transaction(|tx| {
                    let r = tx.root::<[u64; 4]>()?;
                    tx.write(r, &[i; 4])
                })
                .unwrap();
            }
            drop(pool);
            let info = rewind::inspect::info(&path).unwrap();
            assert_eq!(info.log_records, Some(0), "{log}/{policy}");
            let pool = Pool::open(&path, "regress", &rewind::OpenOptions::default()).unwrap();
            assert_eq!(
                pool.read(pool.root::<[u64; 4]>().unwrap().unwrap())
                    .unwrap(),
                [4; 4]
            );
        }
    }
}

/// No-force recovery repeats history: redoing an aborted transaction's
/// large-run ALLOC and its CLR left the run's chunk marked free, although a
/// later transaction had formatted that chunk for a small class (not logged)
/// and allocated a block in it. Found by `rewind crashtest`
/// (simple-no-force, seed 14).
#[test]
fn noforce_redo_keeps_a_chunk_reformatted_after_an_aborted_large_run() {
    for log in LogVariant::ALL {
        let pool = Pool::create_sim("regress", 2 << 20, &cfg(log, Policy::NoForce)).unwrap();
        let root = pool.transaction(|tx| tx.root::<Root>()).unwrap();
        // A large run, rolled back: its chunk becomes free again.
        let r: Result<(), rewind::Error> = pool.transaction(|tx| {
            tx.alloc_bytes(200_000)?;
            Err(rewind::Error::TxMisuse("abort"))
        });
        assert!(r.is_err());
        // A small block of a class no chunk holds yet: it formats the lowest
        // free chunk, the one the run used.
        let small = pool
            .transaction(|tx| {
                let p = PPtr::<u64>::from_offset(tx.alloc_bytes(100)?);
                tx.write(p, &7)?;
                tx.write(root, &Root { p })?;
                Ok::<_, rewind::Error>(p)
            })
            .unwrap();
        let img = pool.domain().with_sim(|s| s.image_all_pending()).unwrap();
        let p2 = Pool::open_image(img, "regress").unwrap();
        assert_eq!(p2.read(p2.read(root).unwrap().p).unwrap(), 7, "{log}");
        let blocks = rewind::alloc::allocated_blocks(p2.domain(), p2.layout()).unwrap();
        assert!(
            blocks.iter().any(|&(off, _)| off == small.offset()),
            "{log}: the reachable block {:#x} is free after recovery",
            small.offset()
        );
    }
}
