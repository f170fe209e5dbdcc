//! More of a user's programs probed from outside (after `user_probe.rs`):
//! each test is a defect once found, kept as a named scenario. Counts
//! only, never time.

mod common;

use rewind::{Error, LogVariant, OpenOptions, PPtr, Policy, Pool, PoolConfig};
use std::path::Path;
use std::sync::Barrier;

const LAYOUT: &str = "probe2";

/// The pool a child process opens (a test that is a no-op without it).
const ENV_POOL: &str = "USER_PROBE2_POOL";

/// Two threads that free the same block in transactions running at once
/// (a program's race: two deleters of one node) must not both succeed:
/// each found the block allocated before either's free reached the
/// bitmap, both committed, and the block went back to the free list
/// twice, so that two later allocations were handed the same memory
/// (two live objects overwriting each other, which no check of the pool
/// sees: the free lists are volatile). The second free is now
/// `InvalidFree`, at the call, leaving its transaction usable.
#[test]
fn a_block_freed_by_two_transactions_at_once_is_freed_once() {
    let dir = tempfile::tempdir().unwrap();
    for (v, p) in [
        (LogVariant::Batch, Policy::Redo),
        (LogVariant::Batch, Policy::Force),
        (LogVariant::Simple, Policy::NoForce),
        (LogVariant::TwoLayer, Policy::RedoAsync),
    ] {
        let who = format!("{v}/{p}");
        let cfg = PoolConfig::default().log(v).policy(p);
        let pool = Pool::create(
            dir.path().join(format!("{v}-{p}.pool")),
            LAYOUT,
            8 << 20,
            &cfg,
        )
        .unwrap();
        let (mut both, mut refused) = (0, 0);
        for round in 0..64u64 {
            let size = if round % 2 == 0 { 128 } else { 100_000 };
            let b = pool.transaction(|tx| tx.alloc_bytes(size)).unwrap();
            // Both transactions are inside before either frees.
            let inside = Barrier::new(2);
            let rs: Vec<Result<(), Error>> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..2)
                    .map(|_| {
                        s.spawn(|| {
                            pool.transaction(|tx| {
                                inside.wait();
                                tx.free(PPtr::<u8>::from_offset(b))
                            })
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            match (&rs[0], &rs[1]) {
                (Ok(()), Ok(())) => both += 1,
                (Ok(()), Err(e)) | (Err(e), Ok(())) => {
                    assert!(matches!(e, Error::InvalidFree { .. }), "{who}: {e}");
                    refused += 1;
                }
                (Err(a), Err(b)) => panic!("{who} round {round}: neither freed: {a}; {b}"),
            }
            // Three blocks of that size now are three blocks.
            let blocks: Vec<u64> = pool
                .transaction(|tx| (0..3).map(|_| tx.alloc_bytes(size)).collect())
                .unwrap();
            assert!(
                blocks[0] != blocks[1] && blocks[0] != blocks[2] && blocks[1] != blocks[2],
                "{who} round {round}: one block handed out twice: {blocks:x?}"
            );
            pool.transaction(|tx| {
                blocks
                    .iter()
                    .try_for_each(|&b| tx.free(PPtr::<u8>::from_offset(b)))
            })
            .unwrap();
        }
        assert_eq!((both, refused), (0, 64), "{who}: both frees committed");
        let c = rewind::inspect::check_pool(&pool);
        assert!(c.is_ok(), "{who}: {c}");
    }
}

extern "C" {
    /// libc's `signal(2)`.
    fn signal(signum: i32, handler: usize) -> usize;
}

/// Linux's `SIGXFSZ`, and `SIG_IGN`.
const SIGXFSZ: i32 = 25;
const SIG_IGN: usize = 1;

/// The child of the test below: under an `RLIMIT_FSIZE` of 6 MiB (its
/// pool file is 8 MiB, written through the mapping), every call that
/// needs a longer file gets the typed error of a full disk, and the pool
/// goes on. A no-op in a normal test run.
#[test]
fn file_size_limit_child() {
    let Some(path) = std::env::var_os(ENV_POOL) else {
        return;
    };
    let path = Path::new(&path);
    let dir = path.parent().unwrap();
    // SAFETY: `signal` with `SIG_IGN` installs no handler; the signal that
    // a write past the limit raises is ignored, and the call fails with
    // `EFBIG` instead of killing the process.
    unsafe { signal(SIGXFSZ, SIG_IGN) };
    let limit = 6 << 20;
    let lim = rustix::process::Rlimit {
        current: Some(limit),
        maximum: Some(limit),
    };
    rustix::process::setrlimit(rustix::process::Resource::Fsize, lim).unwrap();
    let pool = Pool::open(path, LAYOUT, &OpenOptions::default()).unwrap();
    let slot = pool.root::<u64>().unwrap().unwrap();
    // A pool, or a backup, larger than the limit: `NoSpace`, no file left.
    let e = Pool::create(
        dir.join("new.pool"),
        LAYOUT,
        8 << 20,
        &PoolConfig::default(),
    )
    .map(drop)
    .unwrap_err();
    assert!(matches!(e, Error::NoSpace { .. }), "create: {e:?}");
    let e = pool.backup_to(dir.join("copy.pool")).unwrap_err();
    assert!(matches!(e, Error::NoSpace { .. }), "backup_to: {e:?}");
    let e = pool.grow(1 << 20).unwrap_err();
    assert!(matches!(e, Error::NoSpaceToGrow { .. }), "grow: {e:?}");
    pool.transaction(|tx| tx.write(slot, &2)).unwrap();
    pool.sync().unwrap();
    pool.close().unwrap();
}

/// A process whose files may not be as long as a pool (`RLIMIT_FSIZE`,
/// as a test or a service manager sets it, or a filesystem's largest
/// file) got `Error::Io` ("File too large") from `Pool::create` and
/// `backup_to`, where a growth refused the same way is `NoSpaceToGrow`:
/// now `NoSpace`, which says to create a smaller pool, and nothing is
/// left behind.
#[test]
fn a_pool_longer_than_the_file_size_limit_is_no_space() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limited.pool");
    let cfg = PoolConfig::default().max_size(64 << 20);
    let pool = Pool::create(&path, LAYOUT, 4 << 20, &cfg).unwrap();
    pool.grow_to(8 << 20).unwrap();
    let slot = pool.transaction(|tx| tx.root::<u64>()).unwrap();
    pool.transaction(|tx| tx.write(slot, &1)).unwrap();
    pool.close().unwrap();
    let child =
        common::spawn_test_child("file_size_limit_child", &[(ENV_POOL, path.clone().into())]);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "child: {}", out.status);
    let pool = Pool::open(&path, LAYOUT, &OpenOptions::default()).unwrap();
    assert_eq!(pool.read(slot).unwrap(), 2);
    let c = rewind::inspect::check_pool(&pool);
    assert!(c.is_ok(), "{c}");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["limited.pool"]);
}

/// A two-layer no-force pool whose log filled while eight threads ran
/// large transactions (some committing, most refused `LogFull`, one thread
/// checkpointing after each of its own) could be left, once every thread
/// had ended, with its log full of committed transactions' records and no
/// room for a CHECKPOINT record: the checkpoint's reservation, spent by
/// the last checkpoint, is held again only by the next forward append,
/// which a full log refuses. Every later transaction, however small, was
/// `LogFull` until the pool was reopened, and the checkpoint dropped the
/// finished transactions it had taken. Such a checkpoint now clears their
/// records one at a time (`Engine::clear_in_order`). Seen in about one of
/// 30 pools before.
#[test]
fn a_two_layer_log_filled_by_threads_is_checkpointed_not_left_full() {
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    for iter in 0..30 {
        let path = dir.path().join(format!("{iter}.pool"));
        let cfg = PoolConfig::default()
            .log(LogVariant::TwoLayer)
            .policy(Policy::NoForce);
        let pool = Arc::new(Pool::create(&path, LAYOUT, 8 << 20, &cfg).unwrap());
        let root: PPtr<[u64; 64]> = pool.transaction(|tx| tx.root()).unwrap();
        let blocks: Vec<u64> = (0..8)
            .map(|_| pool.transaction(|tx| tx.alloc_bytes(600 << 10)).unwrap())
            .collect();
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let (pool, b) = (pool.clone(), blocks[t as usize]);
                std::thread::spawn(move || {
                    for round in 0..6u64 {
                        let r = pool.transaction(|tx| {
                            for i in 0..40 + (round * 37 + t * 11) % 110 {
                                tx.write_bytes(b + i * 4096, &[round as u8 + 1; 4096])?;
                                if i == 10 {
                                    let sp = tx.savepoint()?;
                                    tx.write_bytes(b, &[9; 64])?;
                                    tx.rollback_to(sp)?;
                                }
                            }
                            if round == 3 {
                                tx.nested_top_action(|tx| {
                                    let x = tx.alloc_bytes(128)?;
                                    tx.free(PPtr::<u8>::from_offset(x))
                                })?;
                            }
                            tx.write(root.cast::<u64>().at(t), &round)
                        });
                        let full =
                            matches!(r, Err(Error::LogFull { .. } | Error::OutOfMemory { .. }));
                        assert!(r.is_ok() || full, "{r:?}");
                        if t == 0 {
                            // (Itself `LogFull` at times, the same defect.)
                            let ck = pool.checkpoint();
                            assert!(matches!(ck, Ok(()) | Err(Error::LogFull { .. })), "{ck:?}");
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // Nothing runs now: a checkpoint, then a one-word transaction.
        let ck = pool.checkpoint();
        let r = pool.transaction(|tx| tx.write(root.cast::<u64>().at(63), &7));
        assert!(
            ck.is_ok() && r.is_ok(),
            "iteration {iter}: checkpoint {ck:?}, then {r:?}, with {:?}",
            pool.log_stats()
        );
    }
}
