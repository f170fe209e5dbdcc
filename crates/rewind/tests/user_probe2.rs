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
