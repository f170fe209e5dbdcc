//! A commit or rollback that fails midway (an I/O error at a fence, as an
//! `msync` failure would give) leaves nothing of the transaction visible:
//! the handle is poisoned, every later call says so, and reopening the pool
//! recovers the transaction whole or not at all. Fault injected at every
//! fence of the commit, for every log variant × policy.

use rewind::{Backend, Error, LogVariant, PPtr, Policy, Pool, PoolConfig};

const LAYOUT: &str = "failed-commit";

fn pool(v: LogVariant, p: Policy) -> (Pool, PPtr<u64>) {
    let cfg = PoolConfig::default()
        .log(v)
        .policy(p)
        .backend(Backend::Sim)
        .bucket_cells(16);
    let pool = Pool::create_sim(LAYOUT, 2 << 20, &cfg).unwrap();
    let arr = pool
        .transaction(|tx| {
            let a = tx.root::<[u64; 32]>()?.cast::<u64>();
            for i in 0..32 {
                tx.write(a.at(i), &1)?;
            }
            Ok::<_, Error>(a)
        })
        .unwrap();
    (pool, arr)
}

fn state(pool: &Pool, arr: PPtr<u64>) -> Vec<u64> {
    (0..32).map(|i| pool.read(arr.at(i)).unwrap()).collect()
}

/// The transaction under test: 20 writes, the fault armed before commit.
fn run(pool: &Pool, arr: PPtr<u64>, fail_after: u64, commit: bool) -> Result<(), Error> {
    pool.transaction(|tx| {
        for i in 0..20 {
            tx.write(arr.at(i), &2)?;
        }
        pool.domain().fail_fences_after(fail_after);
        if commit {
            Ok(())
        } else {
            Err(Error::TxMisuse("abort on purpose"))
        }
    })
}

#[test]
fn a_commit_or_rollback_failing_at_any_fence_leaves_a_recoverable_pool() {
    let old = vec![1u64; 32];
    let mut new = old.clone();
    new[..20].fill(2);
    for v in LogVariant::ALL {
        for p in Policy::ALL {
            for commit in [true, false] {
                let mut poisoned = 0;
                for k in 0..64 {
                    let (pool, arr) = pool(v, p);
                    let r = run(&pool, arr, k, commit);
                    let images = pool
                        .domain()
                        .with_sim(|s| [s.image_all_pending(), s.image_none_pending()])
                        .unwrap();
                    match r {
                        Ok(()) => {
                            assert!(commit, "{v}-{p}: an abort returned Ok");
                            assert_eq!(state(&pool, arr), new, "{v}-{p} k={k}");
                        }
                        Err(Error::TxMisuse(_)) => {
                            assert!(!commit);
                            assert_eq!(state(&pool, arr), old, "{v}-{p} k={k}");
                        }
                        Err(e) => {
                            assert!(matches!(e, Error::Io { .. }), "{v}-{p} k={k}: {e}");
                            poisoned += 1;
                            let again = pool.read(arr).unwrap_err();
                            assert!(matches!(again, Error::Poisoned { .. }), "{again}");
                            let again = pool.transaction(|tx| tx.write(arr, &9)).unwrap_err();
                            assert!(matches!(again, Error::Poisoned { .. }), "{again}");
                        }
                    }
                    for (i, img) in images.into_iter().enumerate() {
                        let rec = Pool::open_image(img, LAYOUT).unwrap_or_else(|e| {
                            panic!("{v}-{p} k={k} image {i}: recovery failed: {e}")
                        });
                        let got = state(&rec, arr);
                        assert!(
                            got == old || (commit && got == new),
                            "{v}-{p} k={k} image {i}: {got:?}"
                        );
                        let c = rewind::inspect::check_pool(&rec);
                        assert!(c.is_ok(), "{v}-{p} k={k} image {i}: {c}");
                    }
                }
                if matches!(p, Policy::Redo | Policy::RedoAsync) && !commit {
                    // A redo transaction's abort discards its write set:
                    // no record, no fence, nothing to fail.
                    assert_eq!(poisoned, 0, "{v}-{p}: an abort wrote to the log");
                } else {
                    assert!(poisoned > 0, "{v}-{p}: no fault was ever hit");
                }
            }
        }
    }
}
