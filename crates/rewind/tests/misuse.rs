//! Misuse is a typed error, never `Ok`: null pointers, memory never
//! allocated, blocks freed (before or in this transaction), writes across
//! the end of a block, bad write-back sizes, and `open_or_create` asked for
//! a pool unlike the one it finds.

use rewind::{Error, PPtr, Policy, Pool, PoolConfig, WriteBack};

fn pool() -> Pool {
    Pool::create_sim("misuse", 4 << 20, &PoolConfig::default()).unwrap()
}

#[test]
fn null_pointer_reads_and_writes_are_errors() {
    let p = pool();
    let null = PPtr::<u64>::null();
    assert!(matches!(p.read(null), Err(Error::NullPointer { len: 8 })));
    let e = p.transaction(|tx| tx.read(null)).unwrap_err();
    assert!(matches!(e, Error::NullPointer { .. }), "{e}");
    let e = p.transaction(|tx| tx.write(null, &1)).unwrap_err();
    assert!(matches!(e, Error::NullPointer { .. }), "{e}");
}

/// The messages say what happened: a read outside the heap is an access,
/// not a write; an array whose size overflows is not a pool to enlarge.
#[test]
fn messages_name_reads_as_accesses_and_overflowing_sizes_as_such() {
    let p = pool();
    let header = PPtr::<u64>::from_offset(8);
    let e = p.read(header).unwrap_err();
    assert!(matches!(e, Error::NotInHeap { .. }), "{e:?}");
    assert!(e.to_string().starts_with("access to [8, 8+8)"), "{e}");
    let e = p
        .transaction(|tx| tx.alloc_array::<u64>(u64::MAX / 8 + 1))
        .unwrap_err();
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e:?}");
    assert!(e.to_string().contains("overflows"), "{e}");
    assert!(!e.to_string().contains("max_size"), "{e}");
}

#[test]
fn memory_never_allocated_is_refused() {
    let p = pool();
    let a = p.transaction(|tx| tx.alloc::<[u64; 4]>()).unwrap();
    // The next 64-byte slot of the same chunk was never allocated.
    let next = PPtr::<u64>::from_offset(a.offset() + 64);
    let e = p.transaction(|tx| tx.write(next, &7)).unwrap_err();
    assert!(matches!(e, Error::NotAllocated { .. }), "{e}");
    assert!(matches!(p.read(next), Err(Error::NotAllocated { .. })));
    // A chunk no allocation ever used.
    let far = PPtr::<u64>::from_offset(p.layout().heap_end() - 4096);
    assert!(matches!(p.read(far), Err(Error::NotAllocated { .. })));
}

#[test]
fn a_write_across_the_end_of_its_block_is_refused() {
    let p = pool();
    let root: PPtr<u64> = p.transaction(|tx| tx.root()).unwrap();
    let neighbour = p.transaction(|tx| tx.alloc::<u64>()).unwrap();
    p.transaction(|tx| tx.write(neighbour, &5)).unwrap();
    // root.at(100) lies 800 bytes on: in another 64-byte block.
    let e = p.transaction(|tx| tx.write(root.at(100), &1)).unwrap_err();
    assert!(matches!(e, Error::NotAllocated { .. }), "{e}");
    // A range that starts inside the block and runs past its end.
    let e = p
        .transaction(|tx| tx.write_bytes(root.offset() + 60, &[1u8; 8]))
        .unwrap_err();
    assert!(matches!(e, Error::NotAllocated { .. }), "{e}");
    assert_eq!(p.read(neighbour).unwrap(), 5);
}

#[test]
fn freed_blocks_are_refused_in_and_after_the_freeing_transaction() {
    let p = pool();
    let a = p.transaction(|tx| tx.alloc::<u64>()).unwrap();
    let e = p
        .transaction(|tx| {
            tx.free(a)?;
            tx.write(a, &3)
        })
        .unwrap_err();
    assert!(matches!(e, Error::NotAllocated { .. }), "{e}");
    // That transaction rolled back: the block is still allocated.
    p.transaction(|tx| tx.write(a, &4)).unwrap();
    p.transaction(|tx| tx.free(a)).unwrap();
    let e = p.transaction(|tx| tx.write(a, &5)).unwrap_err();
    assert!(matches!(e, Error::NotAllocated { .. }), "{e}");
    assert!(matches!(p.read(a), Err(Error::NotAllocated { .. })));
}

/// A transaction remembers the blocks its accesses found allocated; every
/// way it can make one unallocated must make it forget them.
#[test]
fn blocks_accessed_then_freed_or_unallocated_are_refused() {
    let p = pool();
    let (a, b) = p
        .transaction(|tx| Ok::<_, Error>((tx.alloc::<u64>()?, tx.alloc::<u64>()?)))
        .unwrap();
    // Read and written (remembered), then freed by the same transaction.
    let e = p
        .transaction(|tx| {
            tx.write(a, &1)?;
            assert_eq!(tx.read(a)?, 1);
            tx.free(a)?;
            tx.read(a)
        })
        .unwrap_err();
    assert!(matches!(e, Error::NotAllocated { .. }), "{e}");
    // Freed in a nested top action, whose frees are final at once.
    let e = p
        .transaction(|tx| {
            tx.write(b, &2)?;
            tx.nested_top_action(|tx| tx.free(b))?;
            tx.write(b, &3)
        })
        .unwrap_err();
    assert!(matches!(e, Error::NotAllocated { .. }), "{e}");
    // Allocated after a savepoint, accessed, and undone by a rollback to it.
    let e = p
        .transaction(|tx| {
            let sp = tx.savepoint()?;
            let c = tx.alloc::<u64>()?;
            tx.write(c, &4)?;
            assert_eq!(tx.read(c)?, 4);
            tx.rollback_to(sp)?;
            tx.read(c)
        })
        .unwrap_err();
    assert!(matches!(e, Error::NotAllocated { .. }), "{e}");
    // Allocated by this transaction and read (remembered before anything
    // marks it allocated on media: under redo, its commit group would),
    // then freed by it, or undone by a failed nested top action.
    for policy in Policy::ALL {
        let p = Pool::create_sim("misuse", 4 << 20, &PoolConfig::default().policy(policy)).unwrap();
        let e = p
            .transaction(|tx| {
                let c = tx.alloc::<[u64; 4]>()?;
                tx.write(c, &[6; 4])?;
                assert_eq!(tx.read(c)?, [6; 4]);
                tx.free(c)?;
                tx.read(c)
            })
            .unwrap_err();
        assert!(matches!(e, Error::NotAllocated { .. }), "{policy}: {e}");
        let mut c = None;
        let got = p.transaction(|tx| {
            let r: Result<(), Error> = tx.nested_top_action(|tx| {
                let n = tx.alloc::<u64>()?;
                tx.write(n, &7)?;
                assert_eq!(tx.read(n)?, 7);
                c = Some(n);
                Err(Error::Aborted)
            });
            assert!(r.is_err());
            Ok::<_, Error>(tx.read(c.unwrap()))
        });
        let got = got.unwrap();
        assert!(
            matches!(got, Err(Error::NotAllocated { .. })),
            "{policy}: {got:?}"
        );
        assert!(matches!(
            p.read(c.unwrap()),
            Err(Error::NotAllocated { .. })
        ));
    }
}

/// The blocks a thread's transactions found allocated are remembered
/// across its transactions while no block of the pool is freed: a free by
/// any transaction (of this thread or another), an aborted allocation, a
/// free in a nested top action, all make the next transaction check again,
/// so a freed block is never accessed through a stale entry.
#[test]
fn a_block_freed_after_earlier_transactions_accessed_it_is_refused() {
    for policy in Policy::ALL {
        let p = Pool::create_sim("misuse", 4 << 20, &PoolConfig::default().policy(policy)).unwrap();
        let refused = |r: Result<u64, Error>| {
            assert!(
                matches!(r, Err(Error::NotAllocated { .. })),
                "{policy}: {r:?}"
            );
        };
        let (a, b, c) = p
            .transaction(|tx| {
                Ok::<_, Error>((tx.alloc::<u64>()?, tx.alloc::<u64>()?, tx.alloc::<u64>()?))
            })
            .unwrap();
        // Remembered by this thread's transactions, then freed by one.
        for v in 1..4 {
            p.transaction(|tx| tx.write(a, &v)).unwrap();
            assert_eq!(p.transaction(|tx| tx.read(a)).unwrap(), v);
        }
        p.transaction(|tx| tx.free(a)).unwrap();
        refused(p.transaction(|tx| tx.read(a)));
        refused(p.transaction(|tx| tx.write(a, &9).map(|()| 0)));
        // Remembered here, freed by another thread's transaction.
        assert_eq!(p.transaction(|tx| tx.read(b)).unwrap(), 0);
        std::thread::scope(|s| {
            s.spawn(|| p.transaction(|tx| tx.free(b)).unwrap());
        });
        refused(p.transaction(|tx| tx.read(b)));
        // Freed in a nested top action of a transaction that aborts.
        assert_eq!(p.transaction(|tx| tx.read(c)).unwrap(), 0);
        let r: Result<(), Error> = p.transaction(|tx| {
            tx.nested_top_action(|tx| tx.free(c))?;
            Err(Error::Aborted)
        });
        assert!(r.is_err());
        refused(p.transaction(|tx| tx.read(c)));
        // Allocated, accessed, and undone by the transaction's abort.
        let mut d = None;
        let r: Result<(), Error> = p.transaction(|tx| {
            let n = tx.alloc::<u64>()?;
            tx.write(n, &5)?;
            assert_eq!(tx.read(n)?, 5);
            d = Some(n);
            Err(Error::Aborted)
        });
        assert!(r.is_err());
        refused(p.transaction(|tx| tx.read(d.unwrap())));
    }
}

#[test]
fn a_refused_access_does_not_doom_the_transaction() {
    let p = pool();
    let a = p.transaction(|tx| tx.alloc::<u64>()).unwrap();
    p.transaction(|tx| {
        assert!(tx.write(PPtr::<u64>::null(), &1).is_err());
        assert!(tx.write(a.at(8), &1).is_err()); // the next 64-byte block
        tx.write(a, &9)
    })
    .unwrap();
    assert_eq!(p.read(a).unwrap(), 9);
}

/// A maximum size whose chunk table cannot fit the pool's first size is
/// named as the cause, not the log size the program never set.
#[test]
fn a_maximum_size_too_large_for_the_first_size_is_named() {
    let dir = tempfile::tempdir().unwrap();
    for (name, cfg, cause) in [
        ("a", PoolConfig::default().max_size(1 << 47), "max size"),
        ("b", PoolConfig::default().log_size(8 << 20), "log size"),
    ] {
        match Pool::create(dir.path().join(name), "x", 4 << 20, &cfg) {
            Err(Error::InvalidConfig { what, .. }) => assert_eq!(what, cause),
            r => panic!("{cause}: {:?}", r.err()),
        }
    }
}

#[test]
fn lru_write_back_below_its_minimum_is_refused() {
    let cfg = PoolConfig::default()
        .policy(Policy::RedoAsync)
        .write_back(WriteBack::Lru { lines: 0 });
    let e = Pool::create_sim("x", 4 << 20, &cfg).err().unwrap();
    assert!(matches!(e, Error::InvalidConfig { .. }), "{e}");
    let cfg = cfg.write_back(WriteBack::Lru { lines: 16 });
    Pool::create_sim("x", 4 << 20, &cfg).unwrap();
}

#[test]
fn open_or_create_says_what_it_did_and_refuses_another_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.pool");
    let cfg = PoolConfig::default();
    let p = Pool::open_or_create(&path, "x", 4 << 20, &cfg).unwrap();
    assert!(p.created());
    drop(p);
    let p = Pool::open_or_create(&path, "x", 4 << 20, &cfg).unwrap();
    assert!(!p.created());
    drop(p);
    for (what, other, size) in [
        ("size", cfg.clone(), 8 << 20),
        ("policy", cfg.clone().policy(Policy::Force), 4 << 20),
        ("log", cfg.clone().log(rewind::LogVariant::Simple), 4 << 20),
        ("log size", cfg.clone().log_size(1 << 20), 4 << 20),
        ("bucket cells", cfg.clone().bucket_cells(64), 4 << 20),
        ("max size", cfg.clone().max_size(64 << 20), 4 << 20),
    ] {
        match Pool::open_or_create(&path, "x", size, &other) {
            Err(Error::ConfigMismatch { what: w, .. }) => assert_eq!(w, what),
            Err(e) => panic!("{what}: {e}"),
            Ok(_) => panic!("{what}: opened"),
        }
    }
    // A pool that grew is still the one asked for: its size at create
    // and its maximum are what the config says.
    let path = dir.path().join("g.pool");
    let grows = cfg.clone().max_size(16 << 20);
    let p = Pool::open_or_create(&path, "x", 4 << 20, &grows).unwrap();
    p.grow(4 << 20).unwrap();
    drop(p);
    let p = Pool::open_or_create(&path, "x", 4 << 20, &grows).unwrap();
    assert!(!p.created() && p.size() > 4 << 20);
}

#[test]
fn open_or_create_names_a_commit_lane_count_unlike_the_pools() {
    // The lanes were compared only as part of the whole layout, and their
    // mismatch was reported as one of the log size, naming the same size
    // twice ("log size is 8325120 bytes, but 8325120 bytes was asked for").
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.pool");
    let cfg = PoolConfig::default();
    let p = Pool::open_or_create(&path, "x", 64 << 20, &cfg).unwrap();
    let lanes = p.lane_threads().len() as u64;
    assert!(lanes > 2, "{lanes}");
    drop(p);
    match Pool::open_or_create(&path, "x", 64 << 20, &cfg.clone().lanes(2)) {
        Err(e @ Error::ConfigMismatch { .. }) => {
            let Error::ConfigMismatch { what, found, asked } = &e else {
                unreachable!()
            };
            assert_eq!(
                (*what, found.as_str(), asked.as_str()),
                ("commit lanes", lanes.to_string().as_str(), "2")
            );
            assert!(e.to_string().contains("commit lanes"), "{e}");
        }
        r => panic!("{r:?}"),
    }
    // Asked for the count it has, the pool opens.
    let same = cfg.clone().lanes(lanes);
    assert!(!Pool::open_or_create(&path, "x", 64 << 20, &same)
        .unwrap()
        .created());
}

#[test]
fn create_leaves_no_temporary_file_and_refuses_an_existing_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.pool");
    drop(Pool::create(&path, "x", 4 << 20, &PoolConfig::default()).unwrap());
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("p.pool")]);
    let e = Pool::create(&path, "x", 4 << 20, &PoolConfig::default())
        .err()
        .unwrap();
    assert!(matches!(e, Error::Io { .. }), "{e}");
    // The existing pool is untouched.
    drop(Pool::open(&path, "x", &Default::default()).unwrap());
}

#[test]
fn a_create_killed_before_its_rename_leaves_a_usable_state() {
    // What a create killed midway leaves: a zeroed file under the
    // temporary name, never one under the pool's name.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.pool");
    let stale = dir.path().join(".p.pool.4242.0.creating");
    std::fs::write(&stale, vec![0u8; 4 << 20]).unwrap();
    let p = Pool::open_or_create(&path, "x", 4 << 20, &PoolConfig::default()).unwrap();
    assert!(p.created());
    let r: PPtr<u64> = p.transaction(|tx| tx.root()).unwrap();
    p.transaction(|tx| tx.write(r, &1)).unwrap();
    drop(p);
    let p = Pool::open(&path, "x", &Default::default()).unwrap();
    assert_eq!(p.read(r).unwrap(), 1);
}
