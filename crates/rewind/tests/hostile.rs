//! Hostile but legal use of the API, as an outside tester would try it:
//! offsets at and past the ends of blocks and of the address space,
//! allocation sizes that overflow, frees repeated or undone, closures that
//! panic, a pool filled to its last block, a log filled by one
//! transaction. Every case must end in `Ok` or a typed error, leave the
//! pool usable and consistent, and reopen to exactly what was committed.

mod common;
use common::configs;

use std::panic::{catch_unwind, AssertUnwindSafe};

use rewind::{Backend, Error, LogVariant, PPtr, Policy, Pool, PoolConfig};

const LAYOUT: &str = "hostile";

fn cfg(v: LogVariant, p: Policy) -> PoolConfig {
    PoolConfig::default().log(v).policy(p).backend(Backend::Sim)
}

fn sim(v: LogVariant, p: Policy, size: u64) -> Pool {
    Pool::create_sim(LAYOUT, size, &cfg(v, p)).unwrap()
}

/// What a process kill now would leave, reopened (recovery run).
fn reopen(pool: &Pool) -> Pool {
    pool.sync().unwrap();
    let img = pool.domain().with_sim(|s| s.image_all_pending()).unwrap();
    Pool::open_image(img, LAYOUT).unwrap()
}

/// The pool's allocated bytes, from its statistics.
fn used(pool: &Pool) -> u64 {
    pool.alloc_stats().bytes_used
}

/// A typed error, with a message.
fn typed<T: std::fmt::Debug>(r: Result<T, Error>) -> Error {
    let e = r.expect_err("expected an error");
    assert!(!e.to_string().is_empty(), "{e:?}");
    e
}

/// Offsets at the ends of a block and of the address space, lengths of 0
/// and lengths that overflow `off + len`: reads and writes through a
/// transaction, `Pool::read_bytes` and `Pool::atomic_write_bytes` give
/// typed errors (or succeed where the range is the block's), never a
/// panic, and a refused access does not doom the transaction.
#[test]
fn accesses_at_the_edges_of_blocks_and_of_the_address_space() {
    for (v, p) in configs() {
        let pool = sim(v, p, 4 << 20);
        let blk = pool.transaction(|tx| tx.alloc_bytes(64)).unwrap();
        let size = pool.size();
        let edges = [
            0,
            1,
            8,
            4095,
            4096,
            blk - 1,
            blk,
            blk + 63,
            blk + 64,
            size - 1,
            size,
            size + 1,
            u64::MAX / 2,
            u64::MAX - 64,
            u64::MAX - 8,
            u64::MAX - 1,
            u64::MAX,
        ];
        for &off in &edges {
            for len in [0usize, 1, 8, 64, 65, 300] {
                let inside =
                    off >= blk && off.checked_add(len as u64).is_some_and(|e| e <= blk + 64);
                let mut buf = vec![0u8; len];
                let r = pool.read_bytes(off, &mut buf);
                assert!(
                    r.is_ok() == inside || len == 0,
                    "{v:?}/{p:?} read {off:#x}+{len}: {r:?}"
                );
                let r = pool.transaction(|tx| {
                    let w = tx.write_bytes(off, &vec![7u8; len]);
                    let mut b = vec![0u8; len];
                    let r = tx.read_bytes(off, &mut b);
                    // The transaction is not doomed: it still writes its block.
                    tx.write_bytes(blk, &[1])?;
                    Ok::<_, Error>((w, r))
                });
                let (w, r) = r.unwrap_or_else(|e| panic!("{v:?}/{p:?} {off:#x}+{len}: {e:?}"));
                if !inside && len > 0 {
                    typed(w);
                    typed(r);
                }
                let r = pool.atomic_write_bytes(off, &vec![9u8; len]);
                if !inside && len > 0 {
                    typed(r);
                }
            }
        }
        // Nothing outside the block changed: the pool reopens clean.
        let again = reopen(&pool);
        let mut b = [0u8; 1];
        again.read_bytes(blk, &mut b).unwrap();
        assert!(b[0] == 1 || b[0] == 9, "{v:?}/{p:?}: {b:?}");
    }
}

/// Allocation sizes of 0, of one more than the pool, of an `alloc_array`
/// count whose byte size overflows, and of `u64::MAX`: typed errors (or a
/// block for 0), the transaction goes on, nothing leaks.
#[test]
fn allocation_sizes_that_overflow_or_exceed_the_pool() {
    for (v, p) in configs() {
        let pool = sim(v, p, 4 << 20);
        pool.transaction(|tx| tx.root::<u64>()).unwrap();
        let before = used(&pool);
        let r = pool.transaction(|tx| {
            let zero = tx.alloc_bytes(0);
            let zero_u = tx.alloc_bytes_unzeroed(0);
            for n in [u64::MAX, u64::MAX / 2, 1 << 61, (1 << 60) + 1, 1 << 40] {
                typed(tx.alloc_array::<[u64; 4]>(n));
                typed(tx.alloc_array::<u8>(n));
                typed(tx.alloc_bytes(n));
                typed(tx.alloc_bytes_unzeroed(n));
            }
            typed(tx.alloc_bytes(pool.size() + 1));
            typed(tx.alloc_array::<u64>(pool.size() / 8));
            // Still usable.
            let b = tx.alloc::<u64>()?;
            tx.write(b, &5)?;
            Ok::<_, Error>((zero.is_ok(), zero_u.is_ok(), b))
        });
        let (_, _, b) = r.unwrap_or_else(|e| panic!("{v:?}/{p:?}: {e:?}"));
        assert_eq!(pool.read(b).unwrap(), 5);
        // An aborted transaction of huge and zero sizes leaks nothing.
        let mid = used(&pool);
        let _ = pool.transaction(|tx| {
            let _ = tx.alloc_bytes(0);
            let _ = tx.alloc_bytes(1 << 62);
            let _ = tx.alloc_array::<u64>(3);
            Err::<(), _>(Error::Aborted)
        });
        assert_eq!(used(&pool), mid, "{v:?}/{p:?}");
        assert!(mid > before);
        let again = reopen(&pool);
        assert_eq!(again.read(b).unwrap(), 5);
        assert_eq!(used(&again), mid, "{v:?}/{p:?}");
    }
}

/// Frees repeated in one transaction, in the next, of an interior
/// pointer, of the null pointer, of metadata and of `u64::MAX`: typed
/// errors, and the block is freed once (allocated bytes drop once).
#[test]
fn frees_repeated_or_of_what_is_no_block() {
    for (v, p) in configs() {
        let pool = sim(v, p, 4 << 20);
        pool.transaction(|tx| tx.root::<u64>()).unwrap();
        let base = used(&pool);
        for size in [8u64, 4096, 70_000, 300_000] {
            let b = pool.transaction(|tx| tx.alloc_bytes(size)).unwrap();
            let with = used(&pool);
            assert!(with > base);
            pool.transaction(|tx| {
                tx.free(PPtr::<u8>::from_offset(b))?;
                typed(tx.free(PPtr::<u8>::from_offset(b)));
                typed(tx.free(PPtr::<u8>::from_offset(b + 8)));
                typed(tx.free(PPtr::<u8>::from_offset(0)));
                typed(tx.free(PPtr::<u8>::from_offset(4096)));
                typed(tx.free(PPtr::<u8>::from_offset(u64::MAX)));
                typed(tx.free(PPtr::<u8>::from_offset(u64::MAX - 63)));
                Ok::<_, Error>(())
            })
            .unwrap_or_else(|e| panic!("{v:?}/{p:?} {size}: {e:?}"));
            assert_eq!(used(&pool), base, "{v:?}/{p:?} {size}");
            let r = pool.transaction(|tx| tx.free(PPtr::<u8>::from_offset(b)));
            typed(r);
            assert_eq!(used(&pool), base, "{v:?}/{p:?} {size}");
            // Allocated and freed twice in one transaction.
            let r = pool.transaction(|tx| {
                let c = tx.alloc_bytes(size)?;
                tx.free(PPtr::<u8>::from_offset(c))?;
                typed(tx.free(PPtr::<u8>::from_offset(c)));
                let mut x = [0u8; 8];
                typed(tx.read_bytes(c, &mut x));
                Ok::<_, Error>(())
            });
            r.unwrap_or_else(|e| panic!("{v:?}/{p:?} {size}: {e:?}"));
            assert_eq!(used(&pool), base, "{v:?}/{p:?} {size}");
        }
        let again = reopen(&pool);
        assert_eq!(used(&again), base, "{v:?}/{p:?}");
    }
}

/// A block freed after a savepoint and brought back by `rollback_to` is
/// allocated again: readable, freeable once more, and not handed out by a
/// later allocation while it is still in use.
#[test]
fn a_free_undone_by_a_savepoint_keeps_the_block() {
    for (v, p) in configs() {
        for size in [8u64, 4096, 300_000] {
            let pool = sim(v, p, 4 << 20);
            let root = pool.transaction(|tx| tx.root::<u64>()).unwrap();
            let b = pool
                .transaction(|tx| {
                    let b = tx.alloc_bytes(size)?;
                    tx.write_bytes(b, &[0xab; 8])?;
                    tx.write(root, &b)?;
                    Ok::<_, Error>(b)
                })
                .unwrap();
            let with = used(&pool);
            pool.transaction(|tx| {
                let sp = tx.savepoint()?;
                tx.free(PPtr::<u8>::from_offset(b))?;
                tx.rollback_to(sp)?;
                let mut x = [0u8; 8];
                tx.read_bytes(b, &mut x)?;
                assert_eq!(x, [0xab; 8]);
                Ok::<_, Error>(())
            })
            .unwrap_or_else(|e| panic!("{v:?}/{p:?} {size}: {e:?}"));
            assert_eq!(used(&pool), with, "{v:?}/{p:?} {size}");
            // New allocations of the same size never land on it.
            let others: Vec<u64> = pool
                .transaction(|tx| {
                    (0..4)
                        .map(|_| tx.alloc_bytes(size))
                        .collect::<Result<_, _>>()
                })
                .unwrap();
            assert!(!others.contains(&b), "{v:?}/{p:?} {size}: {b:#x} reused");
            let mut x = [0u8; 8];
            pool.read_bytes(b, &mut x).unwrap();
            assert_eq!(x, [0xab; 8]);
            // Freed again, in one transaction, twice over a savepoint.
            pool.transaction(|tx| {
                let sp = tx.savepoint()?;
                tx.free(PPtr::<u8>::from_offset(b))?;
                tx.rollback_to(sp)?;
                tx.free(PPtr::<u8>::from_offset(b))?;
                typed(tx.free(PPtr::<u8>::from_offset(b)));
                Ok::<_, Error>(())
            })
            .unwrap_or_else(|e| panic!("{v:?}/{p:?} {size}: {e:?}"));
            let again = reopen(&pool);
            assert_eq!(used(&again), used(&pool), "{v:?}/{p:?} {size}");
            typed(again.read_bytes(b, &mut x));
        }
    }
}

/// Nested top actions that fail, inside one another and beside
/// savepoints: what a failed action did is gone, what the enclosing one
/// did after it stays, and the pool reopens to the committed state.
#[test]
fn nested_top_actions_that_fail() {
    for (v, p) in configs() {
        let pool = sim(v, p, 4 << 20);
        let root = pool.transaction(|tx| tx.root::<[u64; 4]>()).unwrap();
        let w = |i: u64| root.cast::<u64>().at(i);
        let before = used(&pool);
        let r = pool.transaction(|tx| {
            let r: Result<(), Error> = tx.nested_top_action(|tx| {
                tx.write(w(0), &1)?;
                let leak = tx.alloc_bytes(100)?;
                tx.write_bytes(leak, &[1; 8])?;
                let inner: Result<(), Error> = tx.nested_top_action(|tx| {
                    tx.write(w(1), &2)?;
                    tx.alloc_bytes(5000)?;
                    Err(Error::Aborted)
                });
                assert!(matches!(inner, Err(Error::Aborted)));
                tx.write(w(2), &3)?;
                Err(Error::Aborted)
            });
            assert!(matches!(r, Err(Error::Aborted)), "{r:?}");
            // An action that fails with a refused access of its own.
            let r: Result<(), Error> = tx.nested_top_action(|tx| {
                tx.write(w(3), &4)?;
                tx.write_bytes(u64::MAX - 3, &[1; 8])
            });
            typed(r);
            let ok: Result<(), Error> = tx.nested_top_action(|tx| tx.write(w(3), &5));
            ok?;
            Ok::<_, Error>(())
        });
        r.unwrap_or_else(|e| panic!("{v:?}/{p:?}: {e:?}"));
        assert_eq!(pool.read(root).unwrap(), [0, 0, 0, 5], "{v:?}/{p:?}");
        assert_eq!(used(&pool), before, "{v:?}/{p:?}");
        let again = reopen(&pool);
        assert_eq!(again.read(root).unwrap(), [0, 0, 0, 5], "{v:?}/{p:?}");
        assert_eq!(used(&again), before, "{v:?}/{p:?}");
    }
}

/// A closure that panics (at the top level, inside a nested top action,
/// after a savepoint, after allocating and freeing): the panic reaches the
/// caller, the transaction is rolled back whole, and the pool stays usable
/// and reopens to the committed state.
#[test]
fn a_panicking_closure_rolls_back_and_leaves_the_pool_usable() {
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    for (v, p) in configs() {
        let pool = sim(v, p, 4 << 20);
        let root = pool.transaction(|tx| tx.root::<[u64; 4]>()).unwrap();
        let kept = pool
            .transaction(|tx| {
                let k = tx.alloc_bytes(256)?;
                tx.write_bytes(k, &[3; 256])?;
                tx.write(root, &[1, 2, 3, k])?;
                Ok::<_, Error>(k)
            })
            .unwrap();
        let base = used(&pool);
        for shape in 0..4 {
            let r = catch_unwind(AssertUnwindSafe(|| {
                pool.transaction(|tx| {
                    tx.write(root, &[9, 9, 9, 9])?;
                    let a = tx.alloc_bytes(1000)?;
                    tx.write_bytes(a, &[5; 1000])?;
                    tx.free(PPtr::<u8>::from_offset(kept))?;
                    match shape {
                        0 => panic!("at the top level"),
                        1 => {
                            let _sp = tx.savepoint()?;
                            tx.write(root.cast::<u64>(), &7)?;
                            panic!("after a savepoint")
                        }
                        2 => {
                            let _: Result<(), Error> = tx.nested_top_action(|tx| {
                                tx.alloc_bytes(64)?;
                                panic!("inside a nested top action")
                            });
                            unreachable!()
                        }
                        _ => {
                            let _: Result<(), Error> = tx.nested_top_action(|tx| {
                                tx.write(root.cast::<u64>().at(1), &8)?;
                                Ok(())
                            });
                            panic!("after a nested top action")
                        }
                    }
                    #[allow(unreachable_code)]
                    Ok::<_, Error>(())
                })
            }));
            assert!(r.is_err(), "{v:?}/{p:?} shape {shape}: no panic");
            // Usable: a plain transaction commits, reads see the old state.
            let now = pool.read(root).unwrap();
            assert_eq!(now[0], 1, "{v:?}/{p:?} shape {shape}: {now:?}");
            assert_eq!(now[3], kept);
            let mut x = [0u8; 256];
            pool.read_bytes(kept, &mut x)
                .unwrap_or_else(|e| panic!("{v:?}/{p:?} shape {shape}: {e:?}"));
            assert_eq!(x, [3; 256]);
            pool.transaction(|tx| tx.write(root.cast::<u64>().at(2), &(10 + shape)))
                .unwrap_or_else(|e| panic!("{v:?}/{p:?} shape {shape}: {e:?}"));
        }
        // The nested top actions of shapes 2 and 3 may keep their effects;
        // nothing else of the panicking transactions is there.
        let extra = used(&pool) - base;
        assert!(extra <= 64, "{v:?}/{p:?}: {extra} bytes more in use");
        let again = reopen(&pool);
        assert_eq!(used(&again), used(&pool), "{v:?}/{p:?}");
        let now = again.read(root).unwrap();
        assert_eq!((now[0], now[2], now[3]), (1, 13, kept), "{v:?}/{p:?}");
    }
    std::panic::set_hook(quiet);
}

/// A pool filled to its last block with blocks of several sizes: the
/// allocation that does not fit is a typed error, the transaction that
/// met it can still commit what it did, and freeing everything makes room
/// for the same blocks again.
#[test]
fn a_pool_filled_to_the_last_block_then_emptied() {
    for (v, p) in configs() {
        let pool = sim(v, p, 2 << 20);
        let root = pool.transaction(|tx| tx.root::<u64>()).unwrap();
        let base = used(&pool);
        let mut rounds = Vec::new();
        for round in 0..2 {
            let mut blocks = Vec::new();
            let mut size = 300_000u64;
            let mut failures = 0;
            while failures < 12 {
                let r = pool.transaction(|tx| {
                    let mut got = Vec::new();
                    for _ in 0..16 {
                        match tx.alloc_bytes(size) {
                            Ok(b) => {
                                tx.write_bytes(b, &size.to_le_bytes())?;
                                got.push(b);
                            }
                            Err(e @ Error::OutOfMemory { .. }) if got.is_empty() => return Err(e),
                            Err(Error::OutOfMemory { .. }) => break,
                            Err(e) => return Err(e),
                        }
                    }
                    tx.write(root, &(got.len() as u64))?;
                    Ok(got)
                });
                match r {
                    Ok(got) => blocks.extend(got.into_iter().map(|b| (b, size))),
                    Err(Error::OutOfMemory { .. }) | Err(Error::LogFull { .. }) => {
                        failures += 1;
                        size = (size / 3).max(1);
                    }
                    Err(e) => panic!("{v:?}/{p:?} round {round}: {e:?}"),
                }
            }
            for &(b, size) in &blocks {
                let mut x = [0u8; 8];
                pool.read_bytes(b, &mut x).unwrap();
                assert_eq!(u64::from_le_bytes(x), size, "{v:?}/{p:?}");
            }
            rounds.push(blocks.len());
            for chunk in blocks.chunks(32) {
                pool.transaction(|tx| {
                    for &(b, _) in chunk {
                        tx.free(PPtr::<u8>::from_offset(b))?;
                    }
                    Ok::<_, Error>(())
                })
                .unwrap_or_else(|e| panic!("{v:?}/{p:?} freeing: {e:?}"));
            }
            assert_eq!(used(&pool), base, "{v:?}/{p:?} round {round}");
        }
        assert!(rounds[1] * 10 >= rounds[0] * 9, "{v:?}/{p:?}: {rounds:?}");
        let again = reopen(&pool);
        assert_eq!(used(&again), base, "{v:?}/{p:?}");
    }
}

/// One transaction that writes until the log is full: a typed error, the
/// whole transaction rolled back, the pool usable and reopening to the
/// committed state; then one that writes one giant range.
#[test]
fn a_log_filled_by_one_giant_transaction() {
    for (v, p) in configs() {
        let pool =
            Pool::create_sim(LAYOUT, 2 << 20, &cfg(v, p).bucket_cells(16).log_size(4096)).unwrap();
        let root = pool.transaction(|tx| tx.root::<u64>()).unwrap();
        pool.transaction(|tx| tx.write(root, &1)).unwrap();
        let base = used(&pool);
        let r = pool.transaction(|tx| {
            let arr = tx.alloc_array::<u64>(8192)?;
            tx.write(root, &2)?;
            // Not fresh: written again after a savepoint, so logged.
            let _sp = tx.savepoint()?;
            for round in 0..1000u64 {
                for i in 0..8192 {
                    tx.write(arr.at(i), &(round * i + 1))?;
                }
            }
            Ok::<_, Error>(())
        });
        let e = typed(r);
        assert!(
            matches!(e, Error::LogFull { .. } | Error::OutOfMemory { .. }),
            "{v:?}/{p:?}: {e:?}"
        );
        assert_eq!(pool.read(root).unwrap(), 1, "{v:?}/{p:?}");
        assert_eq!(used(&pool), base, "{v:?}/{p:?}");
        // One write of 1.5 MiB from a buffer.
        let big = vec![0x5au8; 3 << 19];
        let r = pool.transaction(|tx| {
            let b = tx.alloc_bytes(big.len() as u64)?;
            tx.write(root, &3)?;
            let _sp = tx.savepoint()?;
            tx.write_bytes(b, &big)?;
            tx.write_bytes(b, &big)
        });
        match r {
            Ok(()) => assert_eq!(pool.read(root).unwrap(), 3),
            Err(e) => {
                assert!(
                    matches!(e, Error::LogFull { .. } | Error::OutOfMemory { .. }),
                    "{v:?}/{p:?}: {e:?}"
                );
                assert_eq!(pool.read(root).unwrap(), 1, "{v:?}/{p:?}");
                assert_eq!(used(&pool), base, "{v:?}/{p:?}");
            }
        }
        let committed = pool.read(root).unwrap();
        pool.transaction(|tx| tx.write(root, &(committed + 10)))
            .unwrap_or_else(|e| panic!("{v:?}/{p:?}: {e:?}"));
        let again = reopen(&pool);
        assert_eq!(again.read(root).unwrap(), committed + 10, "{v:?}/{p:?}");
        assert_eq!(used(&again), used(&pool), "{v:?}/{p:?}");
    }
}

/// A pointer of one pool used in another: it names a block there or not;
/// either way a typed error or that pool's own bytes, never another
/// pool's memory, and the other pool is unchanged.
#[test]
fn a_pointer_of_one_pool_used_in_another() {
    let a = sim(LogVariant::Batch, Policy::Redo, 4 << 20);
    let b = Pool::create_sim(
        LAYOUT,
        8 << 20,
        &PoolConfig::default().backend(Backend::Sim),
    )
    .unwrap();
    let big = a.transaction(|tx| tx.alloc_bytes(600_000)).unwrap();
    let small = a.transaction(|tx| tx.alloc::<u64>()).unwrap();
    a.transaction(|tx| tx.write(small, &77)).unwrap();
    typed(b.read(small));
    typed(b.read_bytes(big + 500_000, &mut [0u8; 8]));
    typed(b.transaction(|tx| tx.write(small, &1)));
    typed(b.transaction(|tx| tx.free(small)));
    assert_eq!(a.read(small).unwrap(), 77);
}

/// Savepoints and nested top actions misused: a savepoint of an earlier
/// transaction, one taken inside an action that ended, one a rollback to
/// an earlier one destroyed, a rollback to the same savepoint twice.
#[test]
fn savepoints_misused() {
    for (v, p) in configs() {
        let pool = sim(v, p, 4 << 20);
        let root = pool.transaction(|tx| tx.root::<[u64; 2]>()).unwrap();
        let old = pool.transaction(|tx| tx.savepoint()).unwrap();
        let r = pool.transaction(|tx| {
            // The first word only: the action below writes the second,
            // which a write of the transaction before it would forbid.
            tx.write(root.cast::<u64>(), &1)?;
            assert!(matches!(
                tx.rollback_to(old),
                Err(Error::InvalidSavepoint { .. })
            ));
            let sp1 = tx.savepoint()?;
            tx.write(root, &[2, 2])?;
            let sp2 = tx.savepoint()?;
            tx.write(root, &[3, 3])?;
            tx.rollback_to(sp1)?;
            assert!(matches!(
                tx.rollback_to(sp2),
                Err(Error::InvalidSavepoint { .. })
            ));
            tx.rollback_to(sp1)?;
            tx.rollback_to(sp1)?;
            let mut inner = None;
            tx.nested_top_action(|tx| {
                inner = Some(tx.savepoint()?);
                tx.write(root.cast::<u64>().at(1), &4)
            })?;
            assert!(matches!(
                tx.rollback_to(inner.unwrap()),
                Err(Error::InvalidSavepoint { .. })
            ));
            let r: Result<(), Error> = tx.nested_top_action(|tx| tx.rollback_to(sp1));
            assert!(matches!(r, Err(Error::InvalidSavepoint { .. })));
            Ok::<_, Error>(())
        });
        r.unwrap_or_else(|e| panic!("{v:?}/{p:?}: {e:?}"));
        assert_eq!(pool.read(root).unwrap(), [1, 4], "{v:?}/{p:?}");
        assert_eq!(reopen(&pool).read(root).unwrap(), [1, 4], "{v:?}/{p:?}");
    }
}

/// Transactions that end with nothing to commit give back what they held.
/// Found by this file: under `Redo` a transaction that allocated a small
/// block and freed it again (a bits entry reserved, then dropped) and
/// wrote nothing else kept the block reserved in the allocator until the
/// pool was closed: 28,671 such transactions filled a 2 MiB pool
/// (`OutOfMemory` with 64 bytes in use). Under `RedoAsync` (whose writes
/// reserve log space as they are made) a transaction whose writes a
/// `rollback_to` or a failed nested top action dropped kept their log
/// space reserved: after 3,082 of them every transaction was `LogFull`
/// with nothing in the log. Both came from `Tx::finish`'s read-only path,
/// which returned without releasing either.
#[test]
fn transactions_left_with_nothing_to_commit_release_what_they_reserved() {
    type Case = fn(&Pool, PPtr<u64>) -> Result<(), Error>;
    let cases: [(&str, Case); 4] = [
        ("alloc then free", |pool, _| {
            pool.transaction(|tx| {
                let c = tx.alloc_bytes(8)?;
                tx.free(PPtr::<u8>::from_offset(c))
            })
        }),
        ("write then rollback_to", |pool, root| {
            pool.transaction(|tx| {
                let sp = tx.savepoint()?;
                tx.write(root, &5)?;
                tx.rollback_to(sp)
            })
        }),
        ("a failed nested top action's write", |pool, root| {
            pool.transaction(|tx| {
                let r: Result<(), Error> = tx.nested_top_action(|tx| {
                    tx.write(root, &5)?;
                    Err(Error::Aborted)
                });
                assert!(matches!(r, Err(Error::Aborted)));
                Ok(())
            })
        }),
        ("a failed nested top action's allocation", |pool, _| {
            pool.transaction(|tx| {
                let _: Result<(), Error> = tx.nested_top_action(|tx| {
                    tx.alloc_bytes(100)?;
                    Err(Error::Aborted)
                });
                Ok(())
            })
        }),
    ];
    for (v, p) in configs() {
        for (what, case) in cases {
            let pool =
                Pool::create_sim(LAYOUT, 2 << 20, &cfg(v, p).bucket_cells(16).log_size(4096))
                    .unwrap();
            let root = pool.transaction(|tx| tx.root::<u64>()).unwrap();
            let base = used(&pool);
            // More than the 3,082 that filled this log.
            for i in 0..5000 {
                case(&pool, root).unwrap_or_else(|e| panic!("{v:?}/{p:?} {what}: {i}: {e:?}"));
                assert_eq!(used(&pool), base, "{v:?}/{p:?} {what}: {i}");
            }
            pool.transaction(|tx| tx.write(root, &9))
                .unwrap_or_else(|e| panic!("{v:?}/{p:?} {what}: {e:?}"));
        }
    }
}
