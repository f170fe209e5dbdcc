//! A fourth round of a user's programs probed from outside (after
//! `user_probe.rs`, `user_probe2.rs` and `user_probe3.rs`): configuration
//! values at the ends of their types. Counts only, never time.

mod common;

use std::sync::mpsc;

use rewind::{Error, NvmLatency, OpenOptions, PPtr, Pool, PoolConfig};

const LAYOUT: &str = "probe4";

/// An emulated NVM latency past any the emulation means (the `rewind
/// bench` flags stop at 1 ms) is `InvalidConfig` at create and at open,
/// never a create or open that spins for centuries charging it (a debug
/// build overflowed multiplying it by the lines written). The bound
/// itself is taken. Run in a thread, so that the old hang shows as a
/// silence `REWIND_HANG_LIMIT_SECS` names.
#[test]
fn an_nvm_latency_past_a_millisecond_is_invalid_config_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let (send, recv) = mpsc::channel();
    let d = dir.path().to_path_buf();
    std::thread::spawn(move || {
        let huge = [
            NvmLatency::new(u64::MAX, 0),
            NvmLatency::new(0, u64::MAX),
            NvmLatency::new(1_000_001, 0),
            NvmLatency::new(0, 1_000_001),
        ];
        for (i, l) in huge.into_iter().enumerate() {
            let path = d.join(format!("c{i}.pool"));
            let cfg = PoolConfig::default().nvm_latency(l);
            let r = Pool::create(&path, LAYOUT, 4 << 20, &cfg).map(|_| ());
            send.send(format!("create {l:?}: {r:?}, file left: {}", path.exists()))
                .unwrap();
        }
        let path = d.join("ok.pool");
        let cfg = PoolConfig::default().nvm_latency(NvmLatency::new(1_000_000, 1_000_000));
        let pool = Pool::create(&path, LAYOUT, 4 << 20, &cfg).unwrap();
        let r: PPtr<u64> = pool.transaction(|tx| tx.root()).unwrap();
        pool.transaction(|tx| tx.write(r, &7)).unwrap();
        pool.close().unwrap();
        for l in huge {
            let opts = OpenOptions::default().nvm_latency(l);
            let r = Pool::open(&path, LAYOUT, &opts).map(|_| ());
            send.send(format!("open {l:?}: {r:?}")).unwrap();
        }
        let pool = Pool::open(&path, LAYOUT, &OpenOptions::default()).unwrap();
        send.send(format!("reopened: {:?}", pool.read(r))).unwrap();
        pool.close().unwrap();
    });
    let mut seen = Vec::new();
    for _ in 0..9 {
        match common::recv_watched(&recv) {
            Ok(s) => seen.push(s),
            Err(e) => panic!("no answer ({e:?}) after {seen:#?}"),
        }
    }
    for s in &seen[..8] {
        assert!(
            s.contains("InvalidConfig") && !s.contains("file left: true"),
            "{s}"
        );
    }
    assert_eq!(seen[8], "reopened: Ok(7)");
}

/// `Pool::write_unlogged` through a pointer that is no longer a block of
/// the program's (a block freed, whose chunk the log then took when it
/// grew into the heap) is `NotAllocated`, as `pool.read` through it is:
/// it copied the bytes over the log's records and list words, and the
/// pool never opened again ("log corrupt": every commit lost), under
/// every configuration whose log had grown into the heap. A block the
/// program allocated takes them as before.
#[test]
fn unlogged_writes_outside_allocated_blocks_are_refused_and_the_log_survives() {
    for (v, p) in common::configs() {
        let what = format!("{v:?}/{p:?}");
        let cfg = PoolConfig::default()
            .log(v)
            .policy(p)
            .backend(rewind::Backend::Sim);
        let mut pool = Pool::create_sim(LAYOUT, 4 << 20, &cfg).unwrap();
        pool.set_checkpoint_fill(1.0).unwrap();
        let r: PPtr<[u64; 512]> = pool.transaction(|tx| tx.root()).unwrap();
        let freed = pool.transaction(|tx| tx.alloc_bytes(300 << 10)).unwrap();
        pool.transaction(|tx| tx.free(PPtr::<u8>::from_offset(freed)))
            .unwrap();
        // Commits enough to grow the log into the heap where it keeps
        // records (no-force, redo-async), and a transaction too large for
        // it under the undo policies.
        for i in 1..=400u64 {
            pool.transaction(|tx| tx.write(r, &[i; 512])).unwrap();
        }
        let _ = pool.transaction(|tx| -> Result<(), rewind::Error> {
            for k in 0..200u64 {
                tx.write(r, &[k; 512])?;
            }
            Err(rewind::Error::Aborted)
        });
        let mine = pool.transaction(|tx| tx.alloc_bytes(4096)).unwrap();
        pool.write_unlogged(mine, &[7; 4096]).unwrap();
        let e = pool.write_unlogged(freed, &[0xa5; 64]).unwrap_err();
        assert!(matches!(e, Error::NotAllocated { .. }), "{what}: {e:?}");
        let e = pool.write_unlogged(mine + 4000, &[0xa5; 200]).unwrap_err();
        assert!(matches!(e, Error::NotAllocated { .. }), "{what}: {e:?}");
        // Every heap page no block holds.
        let heap = pool.layout().heap_off;
        let mut off = heap;
        while off + 4096 <= pool.size() {
            if pool.read_bytes(off, &mut [0u8; 8]).is_err() {
                let e = pool.write_unlogged(off, &[0xa5; 4096]).unwrap_err();
                assert!(
                    matches!(e, Error::NotAllocated { .. } | Error::NotInHeap { .. }),
                    "{what}: {off:#x}: {e:?}"
                );
            }
            off += 4096;
        }
        pool.fence().unwrap();
        let img = pool.domain().with_sim(|s| s.image_all_pending()).unwrap();
        let again = Pool::open_image(img, LAYOUT).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(again.read(r).unwrap(), [400; 512], "{what}");
        let mut back = [0u8; 4096];
        again.read_bytes(mine, &mut back).unwrap();
        assert_eq!(back, [7; 4096], "{what}");
    }
}

/// Waits until the pool has counted more lock waits than `before`: a
/// thread has joined the line for a lock (a count, not a time).
fn wait_for_waiters(pool: &Pool, before: u64) {
    while pool.counters().lock_waits <= before {
        std::thread::yield_now();
    }
}

/// An isolated read nested in another of the same pool, the outer one
/// holding its key's lock shared (a writer was in its way), waits for a
/// writer that holds the inner key and waits for the outer key: a cycle
/// of two threads. The lock table saw none (the readers had ids of their
/// own, and the outer one waited for nothing), so under a lock timeout of
/// `Duration::MAX`, with which deadlocks are documented to be found at
/// once, both threads waited for ever (with the default 10 s, the writer
/// failed with `LockTimeout` 10 s later). Now the nested read waits under
/// the outer one's id, and the cycle is `Deadlock` at once; the writer
/// then commits. Threads of their own, not scoped: a failure (the hang,
/// named when `REWIND_HANG_LIMIT_SECS` is set) must not wait for them.
#[test]
fn a_read_nested_in_an_isolated_read_closes_a_cycle_that_is_a_deadlock() {
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let pool = Arc::new(
        Pool::create(
            dir.path().join("nested.pool"),
            LAYOUT,
            8 << 20,
            &PoolConfig::default(),
        )
        .unwrap(),
    );
    pool.set_lock_timeout(std::time::Duration::MAX);
    let root: PPtr<[u64; 64]> = pool.transaction(|tx| tx.root()).unwrap();
    // Two keys on lines of their own.
    let (k1, k2) = (root.cast::<u64>(), root.cast::<u64>().at(32));
    let (done_send, done) = mpsc::channel();
    let (w1_has, w1_has_recv) = mpsc::channel();
    let (w1_go, w1_go_recv) = mpsc::channel::<()>();
    let (w2_has, w2_has_recv) = mpsc::channel();
    let (w2_go, w2_go_recv) = mpsc::channel::<()>();
    let (r_holds, r_holds_recv) = mpsc::channel();
    let (r_go, r_go_recv) = mpsc::channel::<()>();
    // W1 holds k1, so that the outer read takes the lock.
    let p = pool.clone();
    let w1 = std::thread::spawn(move || {
        p.transaction(|tx| {
            tx.lock(k1)?;
            w1_has.send(()).unwrap();
            w1_go_recv.recv().unwrap();
            tx.write(k1, &1)
        })
        .unwrap();
    });
    // W2 holds k2, then asks for k1.
    let (p, d) = (pool.clone(), done_send.clone());
    std::thread::spawn(move || {
        let r = p.transaction(|tx| {
            tx.lock(k2)?;
            tx.write(k2, &2)?;
            w2_has.send(()).unwrap();
            w2_go_recv.recv().unwrap();
            tx.lock(k1)?;
            tx.write(k1, &2)
        });
        d.send(format!("writer: {r:?}")).unwrap();
    });
    w1_has_recv.recv().unwrap();
    w2_has_recv.recv().unwrap();
    let waits = pool.counters().lock_waits;
    let (p, d) = (pool.clone(), done_send);
    std::thread::spawn(move || {
        let r = p.read_isolated(k1.offset(), |r| {
            let a = r.read(k1)?;
            r_holds.send(()).unwrap();
            r_go_recv.recv().unwrap();
            let b = p.read_isolated(k2.offset(), |r| r.read(k2));
            Ok::<_, Error>((a, b))
        });
        d.send(format!("reader: {r:?}")).unwrap();
    });
    // The outer read in line behind W1; W1 commits, the read holds k1.
    wait_for_waiters(&pool, waits);
    w1_go.send(()).unwrap();
    w1.join().unwrap();
    r_holds_recv.recv().unwrap();
    // W2 in line for k1 behind the read; then the nested read of k2.
    let waits = pool.counters().lock_waits;
    w2_go.send(()).unwrap();
    wait_for_waiters(&pool, waits);
    r_go.send(()).unwrap();
    let mut seen = Vec::new();
    for _ in 0..2 {
        match common::recv_watched(&done) {
            Ok(s) => seen.push(s),
            Err(e) => panic!("no answer ({e:?}) after {seen:?}: a deadlock waited for ever"),
        }
    }
    seen.sort();
    let deadlock = format!(
        "reader: Ok((1, Err(Deadlock {{ offset: {} }})))",
        k2.offset()
    );
    assert_eq!(seen, [deadlock, "writer: Ok(())".to_string()]);
    assert_eq!(pool.read(k1).unwrap(), 2);
    assert_eq!(pool.read(k2).unwrap(), 2);
}

/// Under the redo policies a write of the same bytes as an earlier one of
/// the transaction edits its entry of the write set; but it did so only
/// when that entry was the latest on its cache line, so a loop writing
/// two fields of one struct in turn (a count and a sum) made a new entry,
/// and a new reservation of log space, at every write: a transaction of
/// 13,915 such writes was `LogFull` in a 2 MiB pool (3,898 once the heap
/// was full, 520,940 in a 64 MiB one) where one field alone, or fields on
/// lines of their own, took any number. The edit now needs only that no
/// later entry writes any of the same bytes. 200,000 writes of two fields
/// in turn commit (with a read of each before it, which indexes the write
/// set, and without), under every log.
#[test]
fn fields_of_one_line_written_in_turn_reuse_their_write_set_entries() {
    for v in rewind::LogVariant::ALL {
        for p in [rewind::Policy::Redo, rewind::Policy::RedoAsync] {
            for read_first in [false, true] {
                let what = format!("{v:?}/{p:?}, reads {read_first}");
                let cfg = PoolConfig::default()
                    .log(v)
                    .policy(p)
                    .backend(rewind::Backend::Sim);
                let pool = Pool::create_sim(LAYOUT, 2 << 20, &cfg).unwrap();
                let root: PPtr<[u64; 8]> = pool.transaction(|tx| tx.root()).unwrap();
                let (count, sum) = (root.cast::<u64>(), root.cast::<u64>().at(1));
                pool.transaction(|tx| -> Result<(), Error> {
                    for i in 1..=100_000u64 {
                        let (c, s) = match read_first {
                            true => (tx.read(count)?, tx.read(sum)?),
                            false => (i - 1, (i - 1) * i / 2),
                        };
                        tx.write(count, &(c + 1))?;
                        tx.write(sum, &(s + i))?;
                    }
                    Ok(())
                })
                .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(pool.read(count).unwrap(), 100_000, "{what}");
                assert_eq!(pool.read(sum).unwrap(), 100_000 * 100_001 / 2, "{what}");
                pool.sync().unwrap();
                let img = pool.domain().with_sim(|s| s.image_all_pending()).unwrap();
                let again = Pool::open_image(img, LAYOUT).unwrap();
                assert_eq!(again.read(count).unwrap(), 100_000, "{what}");
                assert_eq!(again.read(sum).unwrap(), 100_000 * 100_001 / 2, "{what}");
            }
        }
    }
}

/// The write set's edits keep what a transaction reads and commits right:
/// seeded writes of 1 to 24 bytes at any offset of four cache lines (in
/// turn, over each other, across lines), reads of any range checked
/// against a model of the bytes after each write, under every log and
/// policy; the transaction commits exactly the model, or rolls back to
/// the bytes before it, in memory and in a crash image.
#[test]
fn overlapping_writes_in_one_transaction_read_and_commit_as_a_model() {
    use rand::{Rng, SeedableRng};
    for (v, p) in common::configs() {
        let cfg = PoolConfig::default()
            .log(v)
            .policy(p)
            .backend(rewind::Backend::Sim);
        let pool = Pool::create_sim(LAYOUT, 16 << 20, &cfg).unwrap();
        let root: PPtr<[u8; 256]> = pool.transaction(|tx| tx.root()).unwrap();
        let base = root.offset();
        let mut committed = [0u8; 256];
        for round in 0..6u64 {
            let what = format!("{v:?}/{p:?} round {round}");
            let mut rng = rand::rngs::SmallRng::seed_from_u64(round * 7 + 1);
            let mut model = committed;
            let keep = round % 3 != 2;
            let r = pool.transaction(|tx| -> Result<(), Error> {
                model = committed;
                for op in 0..1500 {
                    let len = rng.gen_range(1..=24usize);
                    // Mostly a few hot ranges, as fields are.
                    let at = match rng.gen_bool(0.7) {
                        true => [0usize, 8, 16, 60, 64, 120, 200][rng.gen_range(0..7)],
                        false => rng.gen_range(0..=256 - len),
                    }
                    .min(256 - len);
                    let bytes: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                    tx.write_bytes(base + at as u64, &bytes)?;
                    model[at..at + len].copy_from_slice(&bytes);
                    if op % 3 == 0 {
                        let (s, n) = (rng.gen_range(0..256), rng.gen_range(1..=64usize));
                        let n = n.min(256 - s);
                        let mut buf = vec![0u8; n];
                        tx.read_bytes(base + s as u64, &mut buf)?;
                        assert_eq!(buf, &model[s..s + n], "{what}: op {op} read {s}+{n}");
                    }
                }
                match keep {
                    true => Ok(()),
                    false => Err(Error::Aborted),
                }
            });
            assert_eq!(r.is_ok(), keep, "{what}: {r:?}");
            if keep {
                committed = model;
            }
            assert_eq!(pool.read(root).unwrap(), committed, "{what}");
        }
        pool.sync().unwrap();
        let img = pool.domain().with_sim(|s| s.image_all_pending()).unwrap();
        let again = Pool::open_image(img, LAYOUT).unwrap();
        assert_eq!(again.read(root).unwrap(), committed, "{v:?}/{p:?} reopened");
    }
}

/// A named root's object, or the catalog's block, freed through
/// `Tx::free` (a program done with the root, or a stray pointer) is
/// `InvalidFree`, as the root object's free is: the free committed, the
/// catalog then named a freed block, `Pool::roots` was `MetaCorrupt`, and
/// the pool never opened again ("a named root's object is not an
/// allocated block of its type's size"). A root created in the same
/// transaction is refused too, and the refusal leaves the transaction
/// able to commit.
#[test]
fn a_named_roots_object_and_the_catalog_cannot_be_freed() {
    for p in rewind::Policy::ALL {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("named.pool");
        let cfg = PoolConfig::default().policy(p);
        let pool = Pool::create(&path, LAYOUT, 4 << 20, &cfg).unwrap();
        let a: PPtr<u64> = pool.transaction(|tx| tx.root_named("a")).unwrap();
        let b: PPtr<[u64; 4]> = pool.transaction(|tx| tx.root_named("b")).unwrap();
        let e = pool.transaction(|tx| tx.free(a)).unwrap_err();
        assert!(matches!(e, Error::InvalidFree { .. }), "{p:?}: {e:?}");
        // The catalog's block: the one allocated block that is neither
        // root's object nor the unnamed root.
        let cat = pool
            .transaction(|tx| {
                let c: PPtr<u64> = tx.root_named("c")?;
                // Refused, and the transaction goes on to commit.
                let e = tx.free(c).unwrap_err();
                assert!(matches!(e, Error::InvalidFree { .. }), "{p:?}: {e:?}");
                tx.write(c, &3)?;
                Ok::<_, Error>(c)
            })
            .unwrap();
        assert_eq!(pool.read(cat).unwrap(), 3, "{p:?}");
        let roots = pool.roots().unwrap();
        assert_eq!(roots.len(), 3, "{p:?}");
        // The catalog block: find it as the block holding the names.
        let mut catalog = None;
        let mut off = pool.layout().heap_off;
        while catalog.is_none() && off < pool.size() {
            let mut w = [0u8; 8];
            if pool.read_bytes(off, &mut w).is_ok() && &w == b"RWROOTS1" {
                catalog = Some(off);
            }
            off += 64;
        }
        let catalog = catalog.expect("the catalog block");
        {
            let cat = catalog;
            let e = pool
                .transaction(|tx| tx.free(PPtr::<u8>::from_offset(cat)))
                .unwrap_err();
            assert!(matches!(e, Error::InvalidFree { .. }), "{p:?}: {e:?}");
        }
        pool.transaction(|tx| tx.write(b, &[4; 4])).unwrap();
        pool.close().unwrap();
        let pool = Pool::open(&path, LAYOUT, &OpenOptions::default()).unwrap();
        assert_eq!(pool.roots().unwrap().len(), 3, "{p:?}");
        assert_eq!(pool.read(b).unwrap(), [4; 4], "{p:?}");
        // Growing the catalog past its first 31 entries frees the old
        // block once the meta page names the new one.
        for k in 0..40 {
            pool.transaction(|tx| tx.root_named::<u64>(&format!("g{k}")))
                .unwrap();
        }
        let r = rewind::inspect::check_pool(&pool);
        assert!(r.is_ok(), "{p:?}: {:?}", r.problems);
        pool.close().unwrap();
        let pool = Pool::open(&path, LAYOUT, &OpenOptions::default()).unwrap();
        assert_eq!(pool.roots().unwrap().len(), 43, "{p:?}");
        let e = pool.transaction(|tx| tx.free(a)).unwrap_err();
        assert!(matches!(e, Error::InvalidFree { .. }), "{p:?}: {e:?}");
        pool.close().unwrap();
    }
}

/// The root object freed in the transaction that created it is
/// `InvalidFree`, as it is once committed: the check read the committed
/// root word, which that transaction had not yet written, so the free
/// was Ok, the commit left the root word naming a freed block, and every
/// later open refused the pool ("root object is not an allocated
/// block"), under every policy.
#[test]
fn the_root_object_cannot_be_freed_in_the_transaction_that_made_it() {
    for p in rewind::Policy::ALL {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("root.pool");
        let cfg = PoolConfig::default().policy(p);
        let pool = Pool::create(&path, LAYOUT, 4 << 20, &cfg).unwrap();
        let r = pool
            .transaction(|tx| {
                let r: PPtr<u64> = tx.root()?;
                let e = tx.free(r).unwrap_err();
                assert!(matches!(e, Error::InvalidFree { .. }), "{p:?}: {e:?}");
                tx.write(r, &5)?;
                Ok::<_, Error>(r)
            })
            .unwrap();
        pool.close().unwrap();
        let pool = Pool::open(&path, LAYOUT, &OpenOptions::default())
            .unwrap_or_else(|e| panic!("{p:?}: {e}"));
        assert_eq!(pool.root::<u64>().unwrap(), Some(r), "{p:?}");
        assert_eq!(pool.read(r).unwrap(), 5, "{p:?}");
        pool.close().unwrap();
    }
}
