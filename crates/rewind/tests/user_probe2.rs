//! More of a user's programs probed from outside (after `user_probe.rs`):
//! each test is a defect once found, kept as a named scenario. Counts
//! only, never time.

use rewind::{Error, LogVariant, PPtr, Policy, Pool, PoolConfig};
use std::sync::Barrier;

const LAYOUT: &str = "probe2";

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
