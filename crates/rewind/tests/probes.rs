//! Defects found by black-box probing of the public API, each kept as a
//! named scenario. Counts only, never time.

use rewind::{LogVariant, PPtr, Policy, Pool, PoolConfig, WriteBack};

/// Under redo-async the Simple and two-layer logs commit through the log
/// blocks, and a committed transaction's records stay there until
/// write-back has put its values in place. A pool whose write-back lags
/// (here: the simulated domain, which runs no write-back thread) filled
/// its log with such records, and the next transaction's allocation
/// failed with `LogFull` although writing back would have made room: a
/// program filling a 4 MiB pool with hash-map entries got `LogFull` at a
/// third to two thirds of what the other configurations hold, whenever its
/// commits outran the write-back thread. Now an append that finds the log
/// full writes back first, as a write set's entry already did.
#[test]
fn redo_async_log_full_of_committed_groups_is_written_back_not_full() {
    for v in [LogVariant::Simple, LogVariant::TwoLayer] {
        let cfg = PoolConfig::default()
            .log(v)
            .policy(Policy::RedoAsync)
            .log_size(64 << 10);
        let pool = Pool::create_sim("probe", 2 << 20, &cfg).unwrap();
        // The root: the last block allocated and how many came before.
        let root: PPtr<[u64; 2]> = pool.transaction(|tx| tx.root()).unwrap();
        // Far more records than the log and the heap hold at once: each
        // transaction allocates a block, writes it and frees the last one.
        for i in 1..=5_000u64 {
            pool.transaction(|tx| {
                let [last, _] = tx.read(root)?;
                let b = tx.alloc::<[u64; 8]>()?;
                tx.write(b, &[i; 8])?;
                if last != 0 {
                    tx.free(PPtr::<[u64; 8]>::from_offset(last))?;
                }
                tx.write(root, &[b.offset(), i])
            })
            .unwrap_or_else(|e| panic!("{v}: commit {i}: {e}"));
        }
        pool.sync().unwrap();
        let [last, n] = pool.read(root).unwrap();
        assert_eq!(n, 5_000, "{v}");
        assert_eq!(
            pool.read(PPtr::<[u64; 8]>::from_offset(last)).unwrap(),
            [n; 8]
        );
    }
}

/// `WriteBack::Lru { lines }` takes any count of at least 16; the cache's
/// back-pressure limit was `2 * lines`, which overflowed for counts above
/// `usize::MAX / 2` and panicked in the first commit (debug builds), or
/// wrapped to a limit of 0 or so (release). A count that large means
/// "hold as many lines as you can": the limit saturates.
#[test]
fn lru_write_back_of_any_size_commits() {
    for lines in [usize::MAX, usize::MAX / 2 + 1] {
        let cfg = PoolConfig::default()
            .policy(Policy::RedoAsync)
            .write_back(WriteBack::Lru { lines });
        let pool = Pool::create_sim("probe", 2 << 20, &cfg).unwrap();
        let slot: PPtr<u64> = pool.transaction(|tx| tx.root()).unwrap();
        for i in 0..100u64 {
            pool.transaction(|tx| tx.write(slot, &i)).unwrap();
        }
        assert_eq!(pool.read(slot).unwrap(), 99);
        pool.sync().unwrap();
        assert_eq!(pool.write_back_pending(), 0, "{lines}");
    }
}

/// A log size below the log's least (four blocks of its bucket) is taken
/// as that least; when the pool has no room for it and the heap's first
/// chunk, the error says so, and says how to make room, instead of asking
/// for a log "small enough" while the request was already below the least.
#[test]
fn a_log_too_large_for_a_small_pool_names_the_size_taken() {
    let dir = tempfile::tempdir().unwrap();
    // 2,048 cells a bucket: blocks of about 200 KiB, four of them.
    let cfg = PoolConfig::default().bucket_cells(2048).log_size(4096);
    match Pool::create(dir.path().join("small.pool"), "probe", 1 << 20, &cfg) {
        Err(rewind::Error::InvalidConfig {
            what: "log size",
            value,
            expected,
        }) => {
            assert!(value.starts_with("4096 (taken as "), "{value}");
            assert!(expected.contains("fewer bucket cells"), "{expected}");
        }
        r => panic!("{:?}", r.map(|_| ())),
    }
    // Fewer cells per bucket: smaller blocks, and the pool has room.
    let cfg = cfg.bucket_cells(8);
    Pool::create(dir.path().join("fits.pool"), "probe", 1 << 20, &cfg).unwrap();
}

/// The catalog of named roots is a block of the heap that `open` checks
/// whole. A program writing through a wild pointer (here: a word at every
/// 1024th offset of the pool, through each way a program writes) could
/// land in it, and the pool no longer opened (`MetaCorrupt`): every named
/// root lost for one stray store. A program's write into that block is
/// now `NotAllocated`, as one outside any block is; the engine's own
/// writes of the catalog go on, and the damaged words of the program's
/// blocks are the program's own.
#[test]
fn a_stray_write_into_the_catalog_of_named_roots_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stray.pool");
    let size = 4 << 20;
    for policy in [Policy::Redo, Policy::Force] {
        let cfg = PoolConfig::default().policy(policy);
        let _ = std::fs::remove_file(&path);
        let pool = Pool::create(&path, "stray", size, &cfg).unwrap();
        // 40 roots: the catalog has grown once (31 entries at first).
        for i in 0..40u64 {
            pool.transaction(|tx| {
                let p = tx.root_named::<[u64; 4]>(&format!("root{i}"))?;
                tx.write(p, &[i; 4])
            })
            .unwrap();
        }
        let (mut refused, mut catalog) = (0, 0);
        for off in (0..size).step_by(1024) {
            let w = [0xABu8; 8];
            let results = [
                pool.transaction(|tx| tx.write_bytes(off, &w)),
                pool.atomic_write_bytes(off, &w),
                pool.write_unlogged(off, &w).and_then(|()| pool.fence()),
            ];
            for r in results {
                match r {
                    Ok(()) => {}
                    Err(rewind::Error::NotAllocated { reason, .. }) => {
                        refused += 1;
                        catalog += usize::from(reason.contains("catalog"));
                    }
                    Err(
                        rewind::Error::NotInHeap { .. }
                        | rewind::Error::NullPointer { .. }
                        | rewind::Error::OutOfBounds { .. },
                    ) => refused += 1,
                    Err(e) => panic!("{policy}: a write at {off}: {e}"),
                }
            }
        }
        assert!(refused > 0);
        // The catalog's 8 KiB block, at 8 offsets, by each of three ways.
        assert!(
            catalog >= 3 * 8,
            "{policy}: {catalog} writes refused as the catalog's"
        );
        // Named roots still work in the running pool.
        pool.transaction(|tx| tx.root_named::<u64>("after").map(|_| ()))
            .unwrap();
        drop(pool);
        let pool = Pool::open(&path, "stray", &rewind::OpenOptions::default()).unwrap();
        let names: Vec<String> = pool.roots().unwrap().into_iter().map(|r| r.name).collect();
        assert_eq!(names.len(), 41, "{policy}");
        assert!(names.iter().any(|n| n == "root39") && names.iter().any(|n| n == "after"));
    }
}

/// A nested top action stays when its enclosing transaction rolls back,
/// and that rollback is physical: it restores each byte the transaction
/// wrote to its value from before. An action that wrote the same bytes
/// after the transaction did had its value undone by the rollback (a
/// collection changed by the transaction and then by an action inside it
/// was left corrupt, under all 16 configurations). Such a write is now
/// `TxMisuse`, refused before anything changes: the action fails, the
/// transaction goes on; bytes the transaction did not write (the other
/// word of the same line) are the action's to write.
#[test]
fn a_nested_top_action_writing_bytes_its_transaction_wrote_is_refused() {
    for variant in LogVariant::ALL {
        for policy in Policy::ALL {
            let cfg = PoolConfig::default().log(variant).policy(policy);
            let pool = Pool::create_sim("nta", 4 << 20, &cfg).unwrap();
            let root: PPtr<[u64; 2]> = pool.transaction(|tx| tx.root()).unwrap();
            let x = PPtr::<u64>::from_offset(root.offset());
            let y = PPtr::<u64>::from_offset(root.offset() + 8);
            let r: Result<(), rewind::Error> = pool.transaction(|tx| {
                tx.write(x, &1)?;
                let refused = tx.nested_top_action(|tx| tx.write(x, &2));
                assert!(
                    matches!(refused, Err(rewind::Error::TxMisuse(m)) if m.contains("nested top action")),
                    "{variant}-{policy}: {refused:?}"
                );
                // The transaction goes on, and the action may write the
                // word the transaction did not.
                assert_eq!(tx.read(x)?, 1, "{variant}-{policy}");
                tx.nested_top_action(|tx| tx.write(y, &7))?;
                Err(rewind::Error::Aborted)
            });
            assert!(
                matches!(r, Err(rewind::Error::Aborted)),
                "{variant}-{policy}: {r:?}"
            );
            // The rollback restored the transaction's word; the action's stays.
            assert_eq!(pool.read(root).unwrap(), [0, 7], "{variant}-{policy}");
            // Committed, the transaction's word and the action's.
            pool.transaction(|tx| {
                tx.write(x, &3)?;
                tx.nested_top_action(|tx| tx.write(y, &8))
            })
            .unwrap();
            assert_eq!(pool.read(root).unwrap(), [3, 8], "{variant}-{policy}");
        }
    }
}
