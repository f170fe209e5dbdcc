//! A new user's programs, written from the README and the API docs only:
//! every public call made the documented way, with the edge inputs a user
//! tries first (zero and huge sizes, empty arrays, pointers past a block,
//! freed or from another pool, roots of the wrong type, bad files, sizes
//! at and past the limits, every configuration). Each must give the
//! documented answer or a typed error, never a panic or a wrong answer.

use std::path::{Path, PathBuf};

use rewind::{
    field, Backend, Error, LogVariant, NvmLatency, OpenOptions, PPtr, Pod, Policy, Pool,
    PoolConfig, Typed, WriteBack, Zeroable, MAX_POOL, MIN_POOL,
};

fn configs() -> Vec<PoolConfig> {
    let mut v = Vec::new();
    for log in LogVariant::ALL {
        for policy in Policy::ALL {
            v.push(PoolConfig::default().log(log).policy(policy));
        }
    }
    v
}

fn create(dir: &Path, name: &str, cfg: &PoolConfig) -> (PathBuf, Pool) {
    let path = dir.join(name);
    let pool = Pool::create(&path, "probe", 4 << 20, cfg).unwrap();
    (path, pool)
}

#[derive(Clone, Copy, Pod, Zeroable, Debug, PartialEq)]
#[bytemuck(crate = "rewind::bytemuck")]
#[repr(C)]
struct Account {
    id: u64,
    balance: u64,
}
impl Typed for Account {
    fn type_name() -> String {
        "bank::Account".into()
    }
}

#[derive(Clone, Copy, Pod, Zeroable, Debug, PartialEq)]
#[bytemuck(crate = "rewind::bytemuck")]
#[repr(C, align(64))]
struct Line {
    words: [u64; 8],
}

#[test]
fn zero_sized_and_empty_allocations_are_typed_errors_that_do_not_doom() {
    for cfg in configs() {
        let dir = tempfile::tempdir().unwrap();
        let (_, pool) = create(dir.path(), "z.pool", &cfg);
        let r: PPtr<u64> = pool.transaction(|tx| tx.root()).unwrap();
        pool.transaction(|tx| {
            // A zero-byte block, an empty array, a zero-sized type.
            let e = tx.alloc_bytes(0).unwrap_err();
            assert!(matches!(e, Error::InvalidConfig { .. }), "{cfg:?}: {e:?}");
            let e = tx.alloc_bytes_unzeroed(0).unwrap_err();
            assert!(matches!(e, Error::InvalidConfig { .. }), "{cfg:?}: {e:?}");
            let e = tx.alloc_array::<u64>(0).unwrap_err();
            assert!(matches!(e, Error::InvalidConfig { .. }), "{cfg:?}: {e:?}");
            let e = tx.alloc::<()>().unwrap_err();
            assert!(matches!(e, Error::InvalidConfig { .. }), "{cfg:?}: {e:?}");
            assert!(e.to_string().contains("allocation size"), "{e}");
            // Empty reads and writes of a real block are no-ops.
            tx.write_bytes(r.offset(), &[])?;
            tx.read_bytes(r.offset(), &mut [])?;
            tx.write(r, &11)
        })
        .unwrap();
        assert_eq!(pool.read(r).unwrap(), 11, "{cfg:?}");
        // A zero-sized root is a root of one byte, found again.
        let z: PPtr<()> = pool.transaction(|tx| tx.root_named("unit")).unwrap();
        pool.read(z).unwrap();
        pool.transaction(|tx| tx.write(z, &())).unwrap();
        assert_eq!(pool.root_named::<()>("unit").unwrap(), Some(z));
        pool.close().unwrap();
    }
}

#[test]
fn huge_allocations_are_out_of_memory_and_the_pool_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (_, pool) = create(dir.path(), "h.pool", &PoolConfig::default());
    for size in [
        5 << 20,
        1 << 40,
        MAX_POOL,
        u64::MAX / 2,
        u64::MAX - 63,
        u64::MAX,
    ] {
        let e = pool.transaction(|tx| tx.alloc_bytes(size)).unwrap_err();
        assert!(matches!(e, Error::OutOfMemory { .. }), "{size}: {e:?}");
        let e = pool
            .transaction(|tx| tx.alloc_bytes_unzeroed(size))
            .unwrap_err();
        assert!(matches!(e, Error::OutOfMemory { .. }), "{size}: {e:?}");
    }
    let e = pool
        .transaction(|tx| tx.alloc_array::<u64>(u64::MAX / 4))
        .unwrap_err();
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e:?}");
    let e = pool
        .transaction(|tx| tx.alloc_array::<u64>(u64::MAX))
        .unwrap_err();
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e:?}");
    // A huge request in a growable pool: out of memory, not a growth to
    // past its maximum.
    let cfg = PoolConfig::default().max_size(16 << 20);
    let (_, big) = create(dir.path(), "g.pool", &cfg);
    let e = big.transaction(|tx| tx.alloc_bytes(1 << 40)).unwrap_err();
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e:?}");
    assert!(big.size() <= 16 << 20);
    // Both pools still work.
    for p in [&pool, &big] {
        let x: PPtr<u64> = p.transaction(|tx| tx.root()).unwrap();
        p.transaction(|tx| tx.write(x, &7)).unwrap();
        assert_eq!(p.read(x).unwrap(), 7);
    }
}

#[test]
fn indexing_past_an_array_is_a_typed_error_in_and_out_of_transactions() {
    for cfg in configs() {
        let dir = tempfile::tempdir().unwrap();
        let (_, pool) = create(dir.path(), "i.pool", &cfg);
        let arr: PPtr<u64> = pool.transaction(|tx| tx.alloc_array(4)).unwrap();
        pool.transaction(|tx| tx.write(arr.at(3), &3)).unwrap();
        assert_eq!(pool.read(arr.at(3)).unwrap(), 3);
        // The block is rounded up to 64 bytes: index 4..8 lie in it (the
        // docs promise only "inside one allocated block"), but 8 and
        // beyond, and absurd indices, never reach another block.
        for i in [8u64, 1000, 1 << 40, u64::MAX / 8, u64::MAX] {
            let p = arr.at(i);
            let e = pool.read(p).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::NotAllocated { .. }
                        | Error::NotInHeap { .. }
                        | Error::OutOfBounds { .. }
                ),
                "{cfg:?} read at {i}: {e:?}"
            );
            let e = pool.transaction(|tx| tx.write(p, &1)).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::NotAllocated { .. }
                        | Error::NotInHeap { .. }
                        | Error::OutOfBounds { .. }
                ),
                "{cfg:?} write at {i}: {e:?}"
            );
            let e = pool.transaction(|tx| tx.read(p)).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::NotAllocated { .. }
                        | Error::NotInHeap { .. }
                        | Error::OutOfBounds { .. }
                ),
                "{cfg:?} tx read at {i}: {e:?}"
            );
        }
        assert_eq!(arr.checked_at(u64::MAX), None);
        // A refused access does not doom the transaction.
        pool.transaction(|tx| {
            assert!(tx.write(arr.at(1 << 20), &9).is_err());
            tx.write(arr, &9)
        })
        .unwrap();
        assert_eq!(pool.read(arr).unwrap(), 9);
        pool.close().unwrap();
    }
}

#[test]
fn freed_blocks_null_pointers_and_bad_frees_are_typed_errors() {
    for cfg in configs() {
        let dir = tempfile::tempdir().unwrap();
        let (_, pool) = create(dir.path(), "f.pool", &cfg);
        let p: PPtr<Account> = pool.transaction(|tx| tx.alloc()).unwrap();
        pool.transaction(|tx| tx.free(p)).unwrap();
        let e = pool.read(p).unwrap_err();
        assert!(matches!(e, Error::NotAllocated { .. }), "{cfg:?}: {e:?}");
        let e = pool
            .transaction(|tx| tx.write(p, &Account { id: 1, balance: 1 }))
            .unwrap_err();
        assert!(matches!(e, Error::NotAllocated { .. }), "{cfg:?}: {e:?}");
        let e = pool.transaction(|tx| tx.free(p)).unwrap_err();
        assert!(matches!(e, Error::InvalidFree { .. }), "{cfg:?}: {e:?}");
        // atomic_write through the freed block (before anything reuses it).
        let e = pool.atomic_write(p.cast::<u64>(), &1).unwrap_err();
        assert!(matches!(e, Error::NotAllocated { .. }), "{cfg:?}: {e:?}");
        // Null.
        let null = PPtr::<u64>::null();
        assert!(matches!(pool.read(null), Err(Error::NullPointer { .. })));
        let e = pool.transaction(|tx| tx.write(null, &1)).unwrap_err();
        assert!(matches!(e, Error::NullPointer { .. }), "{cfg:?}: {e:?}");
        let e = pool.atomic_write(null, &1).unwrap_err();
        assert!(matches!(e, Error::NullPointer { .. }), "{cfg:?}: {e:?}");
        let e = pool.transaction(|tx| tx.free(null)).unwrap_err();
        assert!(matches!(e, Error::InvalidFree { .. }), "{cfg:?}: {e:?}");
        // Inside a block but not its start.
        let q: PPtr<[u64; 8]> = pool.transaction(|tx| tx.alloc()).unwrap();
        let inner = q.cast::<u64>().at(1);
        let e = pool.transaction(|tx| tx.free(inner)).unwrap_err();
        assert!(matches!(e, Error::InvalidFree { .. }), "{cfg:?}: {e:?}");
        // The header, the log, past the end.
        for off in [8u64, 4096, (4 << 20) - 8, 4 << 20, 1 << 50] {
            let bad = PPtr::<u64>::from_offset(off);
            assert!(pool.read(bad).is_err(), "{cfg:?} read {off}");
            assert!(
                pool.transaction(|tx| tx.write(bad, &1)).is_err(),
                "{cfg:?} write {off}"
            );
            assert!(pool.atomic_write(bad, &1).is_err(), "{cfg:?} atomic {off}");
            let e = pool.transaction(|tx| tx.free(bad)).unwrap_err();
            assert!(
                matches!(e, Error::InvalidFree { .. }),
                "{cfg:?} free {off}: {e:?}"
            );
        }
        // The root cannot be freed.
        let r: PPtr<u64> = pool.transaction(|tx| tx.root()).unwrap();
        let e = pool.transaction(|tx| tx.free(r)).unwrap_err();
        assert!(matches!(e, Error::InvalidFree { .. }), "{cfg:?}: {e:?}");
        pool.close().unwrap();
    }
}

#[test]
fn a_pointer_from_another_pool_never_reaches_unallocated_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (_, a) = create(dir.path(), "a.pool", &PoolConfig::default());
    let (_, b) = create(dir.path(), "b.pool", &PoolConfig::default());
    // Allocate more in `a` so its pointers land where `b` has nothing.
    let ptrs: Vec<PPtr<[u64; 8]>> = a
        .transaction(|tx| (0..50).map(|_| tx.alloc()).collect::<Result<Vec<_>, _>>())
        .unwrap();
    let last = *ptrs.last().unwrap();
    let e = b.read(last).unwrap_err();
    assert!(matches!(e, Error::NotAllocated { .. }), "{e:?}");
    let e = b.transaction(|tx| tx.write(last, &[1; 8])).unwrap_err();
    assert!(matches!(e, Error::NotAllocated { .. }), "{e:?}");
    let e = b.transaction(|tx| tx.free(last)).unwrap_err();
    assert!(matches!(e, Error::InvalidFree { .. }), "{e:?}");
}

#[test]
fn roots_of_the_wrong_type_are_typed_errors_after_reopen() {
    for cfg in configs() {
        let dir = tempfile::tempdir().unwrap();
        let (path, pool) = create(dir.path(), "r.pool", &cfg);
        let acc: PPtr<Account> = pool.transaction(|tx| tx.root_named("accounts")).unwrap();
        pool.transaction(|tx| tx.write(field!(acc, Account, balance), &100))
            .unwrap();
        let plain: PPtr<u64> = pool.transaction(|tx| tx.root()).unwrap();
        pool.transaction(|tx| tx.write(plain, &5)).unwrap();
        pool.close().unwrap();

        let pool = Pool::open(&path, "probe", &OpenOptions::default()).unwrap();
        assert_eq!(pool.read(acc).unwrap().balance, 100, "{cfg:?}");
        assert_eq!(pool.root_named::<Account>("accounts").unwrap(), Some(acc));
        // Same size, other name.
        let e = pool
            .transaction(|tx| tx.root_named::<[u64; 2]>("accounts"))
            .unwrap_err();
        assert!(matches!(e, Error::TypeMismatch { .. }), "{cfg:?}: {e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains("bank::Account") && msg.contains("[u64; 2]") && msg.contains("accounts"),
            "{msg}"
        );
        let e = pool.root_named::<u128>("accounts").unwrap_err();
        assert!(matches!(e, Error::TypeMismatch { .. }), "{cfg:?}: {e:?}");
        // Missing: None outside, created inside.
        assert_eq!(pool.root_named::<u64>("missing").unwrap(), None);
        // The unnamed root under another size.
        let e = pool.transaction(|tx| tx.root::<[u64; 2]>()).unwrap_err();
        assert!(matches!(e, Error::RootMismatch { .. }), "{cfg:?}: {e:?}");
        let e = pool.root::<u32>().unwrap_err();
        assert!(matches!(e, Error::RootMismatch { .. }), "{cfg:?}: {e:?}");
        assert_eq!(pool.read(pool.root::<u64>().unwrap().unwrap()).unwrap(), 5);
        let names: Vec<String> = pool.roots().unwrap().into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["accounts"], "{cfg:?}");
        pool.close().unwrap();
    }
}

#[test]
fn root_names_out_of_range_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (_, pool) = create(dir.path(), "n.pool", &PoolConfig::default());
    let long = "x".repeat(48);
    for bad in ["", long.as_str()] {
        let e = pool
            .transaction(|tx| tx.root_named::<u64>(bad))
            .unwrap_err();
        assert!(!matches!(e, Error::Io { .. }), "{bad:?}: {e:?}");
        assert!(pool.root_named::<u64>(bad).is_err(), "{bad:?}");
    }
    // 47 bytes, and multi-byte characters, are names.
    let ok47 = "y".repeat(47);
    let p: PPtr<u64> = pool.transaction(|tx| tx.root_named(&ok47)).unwrap();
    assert_eq!(pool.root_named::<u64>(&ok47).unwrap(), Some(p));
    let q: PPtr<u64> = pool.transaction(|tx| tx.root_named("κόσμε")).unwrap();
    assert_ne!(p, q);
    assert_eq!(pool.root_named::<u64>("κόσμε").unwrap(), Some(q));
    // Many names.
    for i in 0..200 {
        let r: PPtr<u64> = pool
            .transaction(|tx| tx.root_named(&format!("r{i}")))
            .unwrap();
        pool.transaction(|tx| tx.write(r, &i)).unwrap();
    }
    for i in 0..200 {
        let r = pool.root_named::<u64>(&format!("r{i}")).unwrap().unwrap();
        assert_eq!(pool.read(r).unwrap(), i);
    }
    assert_eq!(pool.roots().unwrap().len(), 202);
}

#[test]
fn opening_what_is_not_a_pool_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let o = OpenOptions::default();
    // Missing.
    let e = Pool::open(dir.path().join("none"), "probe", &o).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    // Empty.
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    let e = Pool::open(&empty, "probe", &o).unwrap_err();
    assert!(matches!(e, Error::Truncated { .. }), "{e:?}");
    // Text.
    let text = dir.path().join("text");
    std::fs::write(&text, "hello\n".repeat(100_000)).unwrap();
    let e = Pool::open(&text, "probe", &o).unwrap_err();
    assert!(matches!(e, Error::NotAPool { .. }), "{e:?}");
    // A directory.
    let e = Pool::open(dir.path(), "probe", &o).unwrap_err();
    assert!(matches!(e, Error::NotAFile { .. }), "{e:?}");
    // open_or_create on a non-pool file and on a directory: never
    // replaced, never created over.
    let e = Pool::open_or_create(&text, "probe", 4 << 20, &PoolConfig::default()).unwrap_err();
    assert!(matches!(e, Error::NotAPool { .. }), "{e:?}");
    let e = Pool::open_or_create(&empty, "probe", 4 << 20, &PoolConfig::default()).unwrap_err();
    assert!(matches!(e, Error::Truncated { .. }), "{e:?}");
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0);
    let e = Pool::open_or_create(dir.path(), "probe", 4 << 20, &PoolConfig::default()).unwrap_err();
    assert!(matches!(e, Error::NotAFile { .. }), "{e:?}");
    // A path under a file, and in a missing directory.
    let e = Pool::create(text.join("x"), "probe", 4 << 20, &PoolConfig::default()).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    let e = Pool::create(
        dir.path().join("no/such/dir/p"),
        "probe",
        4 << 20,
        &PoolConfig::default(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    // A symlink to a pool opens it.
    let (real, pool) = create(dir.path(), "real.pool", &PoolConfig::default());
    pool.close().unwrap();
    let link = dir.path().join("link.pool");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    Pool::open(&link, "probe", &o).unwrap().close().unwrap();
}

#[test]
fn layout_names_are_checked_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let (path, pool) = create(dir.path(), "l.pool", &PoolConfig::default());
    pool.close().unwrap();
    for other in ["", "Probe", "probe ", "probeprobe", &"p".repeat(10_000)] {
        let e = Pool::open(&path, other, &OpenOptions::default()).unwrap_err();
        assert!(
            matches!(
                e,
                Error::LayoutMismatch { .. } | Error::InvalidConfig { .. }
            ),
            "{other:?}: {e:?}"
        );
        let e = Pool::open_or_create(&path, other, 4 << 20, &PoolConfig::default()).unwrap_err();
        assert!(
            matches!(
                e,
                Error::LayoutMismatch { .. } | Error::InvalidConfig { .. }
            ),
            "{other:?}: {e:?}"
        );
    }
    // Layout names that cannot be recorded are refused at create.
    for bad in ["", &"p".repeat(10_000)] {
        match Pool::create(
            dir.path().join(format!("b{}", bad.len())),
            bad,
            4 << 20,
            &PoolConfig::default(),
        ) {
            Ok(p) => {
                p.close().unwrap();
                let again = Pool::open(
                    dir.path().join(format!("b{}", bad.len())),
                    bad,
                    &OpenOptions::default(),
                );
                assert!(
                    again.is_ok(),
                    "created with {:?} but cannot open: {:?}",
                    bad.len(),
                    again.err()
                );
            }
            Err(e) => assert!(matches!(e, Error::InvalidConfig { .. }), "{e:?}"),
        }
    }
    let e = Pool::open(&path, "nope", &OpenOptions::default()).unwrap_err();
    assert!(
        e.to_string().contains("probe") && e.to_string().contains("nope"),
        "{e}"
    );
}

#[test]
fn pool_sizes_at_and_past_the_limits() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = PoolConfig::default();
    // The minimum works for every configuration.
    for (i, c) in configs().iter().enumerate() {
        let p = Pool::create(dir.path().join(format!("min{i}")), "probe", MIN_POOL, c).unwrap();
        let r: PPtr<u64> = p.transaction(|tx| tx.root()).unwrap();
        p.transaction(|tx| tx.write(r, &1)).unwrap();
        p.close().unwrap();
    }
    for size in [0, 1, 4096, MIN_POOL - 1] {
        let e = Pool::create(dir.path().join(format!("s{size}")), "probe", size, &cfg).unwrap_err();
        assert!(matches!(e, Error::InvalidConfig { .. }), "{size}: {e:?}");
        assert!(!dir.path().join(format!("s{size}")).exists());
    }
    // Larger than the filesystem: NoSpace, no file left, nothing filled.
    for size in [1 << 40, MAX_POOL - (1 << 20)] {
        let e = Pool::create(dir.path().join("huge"), "probe", size, &cfg).unwrap_err();
        assert!(matches!(e, Error::NoSpace { .. }), "{size}: {e:?}");
        assert!(!dir.path().join("huge").exists());
    }
    for size in [MAX_POOL, MAX_POOL + 1, u64::MAX] {
        let e = Pool::create(dir.path().join("big"), "probe", size, &cfg).unwrap_err();
        assert!(
            matches!(e, Error::InvalidConfig { .. } | Error::NoSpace { .. }),
            "{size}: {e:?}"
        );
        assert!(!dir.path().join("big").exists());
    }
    // A size not a multiple of a page.
    let odd = MIN_POOL + 12_345;
    match Pool::create(dir.path().join("odd"), "probe", odd, &cfg) {
        Ok(p) => {
            assert!(p.size() >= MIN_POOL);
            p.close().unwrap();
            Pool::open(dir.path().join("odd"), "probe", &OpenOptions::default())
                .unwrap()
                .close()
                .unwrap();
        }
        Err(e) => assert!(matches!(e, Error::InvalidConfig { .. }), "{e:?}"),
    }
    // max_size below the size, and past the maximum.
    for m in [MIN_POOL, 0, MAX_POOL + 1, u64::MAX] {
        let c = PoolConfig::default().max_size(m);
        let e = Pool::create(dir.path().join("m"), "probe", 4 << 20, &c).unwrap_err();
        assert!(matches!(e, Error::InvalidConfig { .. }), "{m}: {e:?}");
        assert!(!dir.path().join("m").exists());
    }
}

#[test]
fn every_config_option_out_of_range_is_invalid_config() {
    let dir = tempfile::tempdir().unwrap();
    let bad = [
        PoolConfig::default().bucket_cells(0),
        PoolConfig::default().bucket_cells(7),
        PoolConfig::default().bucket_cells(2049),
        PoolConfig::default().bucket_cells(u32::MAX),
        PoolConfig::default().group_size(0),
        PoolConfig::default().group_size(7),
        PoolConfig::default().group_size(12),
        PoolConfig::default().group_size(128),
        PoolConfig::default().log_size(4 << 20),
        PoolConfig::default().log_size(u64::MAX),
        PoolConfig::default()
            .policy(Policy::RedoAsync)
            .write_back(WriteBack::Lru { lines: 0 }),
        PoolConfig::default()
            .policy(Policy::RedoAsync)
            .write_back(WriteBack::Lru { lines: 15 }),
    ];
    for (i, c) in bad.iter().enumerate() {
        let path = dir.path().join(format!("c{i}"));
        let e = Pool::create(&path, "probe", 4 << 20, c)
            .map(|_| ())
            .expect_err(&format!("{c:?} accepted"));
        assert!(matches!(e, Error::InvalidConfig { .. }), "{c:?}: {e:?}");
        assert!(!path.exists(), "{c:?}");
    }
    // The bounds themselves are fine, for every log variant.
    let good = [
        PoolConfig::default().bucket_cells(8),
        PoolConfig::default().bucket_cells(2048),
        PoolConfig::default().group_size(16),
        PoolConfig::default().group_size(32),
        PoolConfig::default().group_size(64),
        PoolConfig::default().backend(Backend::Msync),
        PoolConfig::default().nvm_latency(NvmLatency::new(1, 1)),
        PoolConfig::default()
            .policy(Policy::RedoAsync)
            .write_back(WriteBack::Lru { lines: 16 }),
        PoolConfig::default().log_size(64 << 10),
        // Below the least log: taken as the least.
        PoolConfig::default().log_size(0),
        PoolConfig::default().log_size(1),
    ];
    for log in LogVariant::ALL {
        for (i, c) in good.iter().enumerate() {
            let c = c.clone().log(log);
            let path = dir.path().join(format!("g{log:?}{i}"));
            let pool =
                Pool::create(&path, "probe", 4 << 20, &c).unwrap_or_else(|e| panic!("{c:?}: {e}"));
            let r: PPtr<[u64; 4]> = pool.transaction(|tx| tx.root()).unwrap();
            for k in 0..50u64 {
                pool.transaction(|tx| tx.write(r, &[k; 4])).unwrap();
            }
            pool.close().unwrap();
            let pool = Pool::open(&path, "probe", &OpenOptions::default()).unwrap();
            assert_eq!(pool.read(r).unwrap(), [49; 4], "{c:?}");
            pool.close().unwrap();
        }
    }
}

#[test]
fn open_or_create_on_a_pool_of_another_config_is_config_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cm.pool");
    let base = PoolConfig::default();
    Pool::create(&path, "probe", 4 << 20, &base)
        .unwrap()
        .close()
        .unwrap();
    let others = [
        base.clone().log(LogVariant::Simple),
        base.clone().policy(Policy::Force),
        base.clone().bucket_cells(8),
        base.clone().group_size(16),
        base.clone().log_size(64 << 10),
        base.clone().max_size(64 << 20),
    ];
    for c in &others {
        let e = Pool::open_or_create(&path, "probe", 4 << 20, c).unwrap_err();
        assert!(matches!(e, Error::ConfigMismatch { .. }), "{c:?}: {e:?}");
    }
    let e = Pool::open_or_create(&path, "probe", 8 << 20, &base).unwrap_err();
    assert!(matches!(e, Error::ConfigMismatch { .. }), "{e:?}");
    // Pool::open takes the pool as it is, whatever was asked at create;
    // the backend is the one recorded, or the override.
    let p = Pool::open(&path, "probe", &OpenOptions::default()).unwrap();
    assert_eq!(p.variant(), LogVariant::Batch);
    assert_eq!(p.policy(), Policy::Redo);
    p.close().unwrap();
    let p = Pool::open(
        &path,
        "probe",
        &OpenOptions::default().backend(Backend::Msync),
    )
    .unwrap();
    let r: PPtr<u64> = p.transaction(|tx| tx.root()).unwrap();
    p.transaction(|tx| tx.write(r, &3)).unwrap();
    p.close().unwrap();
    let p = Pool::open_or_create(&path, "probe", 4 << 20, &base).unwrap();
    assert!(!p.created());
    assert_eq!(p.read(r).unwrap(), 3);
}

#[test]
fn types_of_high_alignment_round_trip() {
    for cfg in configs() {
        let dir = tempfile::tempdir().unwrap();
        let (path, pool) = create(dir.path(), "a.pool", &cfg);
        let lines: PPtr<Line> = pool.transaction(|tx| tx.alloc_array(3)).unwrap();
        assert_eq!(lines.offset() % 64, 0, "{cfg:?}");
        let v = Line {
            words: [0xdead_beef; 8],
        };
        pool.transaction(|tx| tx.write(lines.at(2), &v)).unwrap();
        let r: PPtr<PPtr<Line>> = pool.transaction(|tx| tx.root()).unwrap();
        pool.transaction(|tx| tx.write(r, &lines)).unwrap();
        pool.close().unwrap();
        let pool = Pool::open(&path, "probe", &OpenOptions::default()).unwrap();
        let lines = pool
            .read(pool.root::<PPtr<Line>>().unwrap().unwrap())
            .unwrap();
        assert_eq!(pool.read(lines.at(2)).unwrap(), v);
        assert_eq!(pool.read(lines.at(0)).unwrap(), Line::zeroed());
        // A misaligned pointer to an aligned type is read as bytes (or
        // refused), never a fault.
        let odd = PPtr::<u64>::from_offset(lines.at(2).offset() + 3);
        match pool.read(odd) {
            Ok(x) => assert_eq!(x, 0xadbe_ef00_0000_00de, "{cfg:?}"),
            Err(e) => assert!(!matches!(e, Error::Io { .. }), "{e:?}"),
        }
        let _ = pool.transaction(|tx| tx.write(odd, &1));
        let _ = pool.atomic_write(odd, &1);
        pool.close().unwrap();
    }
}

#[test]
fn transactions_misused_inside_transactions_are_errors() {
    for cfg in configs() {
        let dir = tempfile::tempdir().unwrap();
        let (_, pool) = create(dir.path(), "t.pool", &cfg);
        let r: PPtr<u64> = pool.transaction(|tx| tx.root()).unwrap();
        let e = pool
            .transaction(|_tx| pool.transaction(|tx2| tx2.write(r, &1)))
            .unwrap_err();
        assert!(matches!(e, Error::NestedTransaction), "{cfg:?}: {e:?}");
        let e = pool
            .transaction(|_tx| pool.atomic_write(r, &1))
            .unwrap_err();
        assert!(matches!(e, Error::NestedTransaction), "{cfg:?}: {e:?}");
        let e = pool
            .read_isolated(r.offset(), |_| pool.transaction(|tx| tx.write(r, &1)))
            .unwrap_err();
        assert!(matches!(e, Error::NestedTransaction), "{cfg:?}: {e:?}");
        // Savepoints: one from another transaction, one rolled past.
        let sp = pool.transaction(|tx| tx.savepoint()).unwrap();
        let e = pool.transaction(|tx| tx.rollback_to(sp)).unwrap_err();
        assert!(
            matches!(e, Error::InvalidSavepoint { .. }),
            "{cfg:?}: {e:?}"
        );
        pool.transaction(|tx| {
            tx.write(r, &1)?;
            let a = tx.savepoint()?;
            tx.write(r, &2)?;
            let b = tx.savepoint()?;
            tx.write(r, &3)?;
            tx.rollback_to(a)?;
            assert!(matches!(
                tx.rollback_to(b),
                Err(Error::InvalidSavepoint { .. })
            ));
            tx.rollback_to(a)?;
            tx.write(r, &4)
        })
        .unwrap();
        assert_eq!(pool.read(r).unwrap(), 4, "{cfg:?}");
        // Aborted, panicking closures leave nothing.
        let e = pool
            .transaction(|tx| {
                tx.write(r, &5)?;
                Err::<(), _>(Error::Aborted)
            })
            .unwrap_err();
        assert!(matches!(e, Error::Aborted));
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.transaction(|tx| -> Result<(), Error> {
                tx.write(r, &6)?;
                panic!("user panic")
            })
        }));
        assert!(caught.is_err());
        assert_eq!(pool.read(r).unwrap(), 4, "{cfg:?}");
        pool.transaction(|tx| tx.write(r, &7)).unwrap();
        assert_eq!(pool.read(r).unwrap(), 7, "{cfg:?}");
        pool.close().unwrap();
    }
}

#[test]
fn grow_and_checkpoint_edges() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = PoolConfig::default().max_size(16 << 20);
    let (_, pool) = create(dir.path(), "gr.pool", &cfg);
    assert_eq!(pool.size(), 4 << 20);
    assert_eq!(pool.max_size(), 16 << 20);
    let s = pool.grow(0).unwrap();
    assert_eq!(s, 4 << 20);
    // Below the size: no shrink.
    let s = pool.grow_to(1 << 20).unwrap();
    assert_eq!(s, 4 << 20);
    let e = pool.grow(1 << 40).unwrap_err();
    assert!(
        matches!(e, Error::InvalidConfig { .. } | Error::OutOfMemory { .. }),
        "{e:?}"
    );
    let e = pool.grow(u64::MAX).unwrap_err();
    assert!(
        matches!(e, Error::InvalidConfig { .. } | Error::OutOfMemory { .. }),
        "{e:?}"
    );
    let e = pool.grow_to(u64::MAX).unwrap_err();
    assert!(
        matches!(e, Error::InvalidConfig { .. } | Error::OutOfMemory { .. }),
        "{e:?}"
    );
    assert_eq!(pool.size(), 4 << 20);
    // To the maximum: as far as whole chunks go (the heap's end, not the
    // file's), and nothing more past it.
    let s = pool.grow_to(16 << 20).unwrap();
    assert!(s > 15 << 20 && s <= 16 << 20, "{s}");
    assert_eq!(pool.grow_to(16 << 20).unwrap(), s);
    let e = pool.grow(256 << 10).unwrap_err();
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e:?}");
    // Checkpoint and sync under every policy.
    for c in configs() {
        let (_, mut p) = create(dir.path(), &format!("cp{:?}{:?}.pool", c.log, c.policy), &c);
        let r: PPtr<u64> = p.transaction(|tx| tx.root()).unwrap();
        p.transaction(|tx| tx.write(r, &1)).unwrap();
        p.checkpoint().unwrap();
        p.sync().unwrap();
        for fill in [f64::NAN, -1.0, 0.0, 1.5, f64::INFINITY] {
            match p.set_checkpoint_fill(fill) {
                Ok(()) => assert!((0.0..=1.0).contains(&fill), "{fill} accepted"),
                Err(e) => assert!(matches!(e, Error::InvalidConfig { .. }), "{e:?}"),
            }
        }
        p.set_checkpoint_fill(0.5).unwrap();
        p.set_lock_timeout(std::time::Duration::ZERO);
        p.transaction(|tx| tx.write(r, &2)).unwrap();
        p.set_lock_timeout(std::time::Duration::MAX);
        p.transaction(|tx| tx.write(r, &3)).unwrap();
        assert_eq!(p.read(r).unwrap(), 3);
        p.close().unwrap();
    }
}

#[test]
fn read_bytes_and_atomic_write_bytes_edges() {
    let dir = tempfile::tempdir().unwrap();
    let (_, pool) = create(dir.path(), "rb.pool", &PoolConfig::default());
    let b = pool.transaction(|tx| tx.alloc_bytes(100)).unwrap();
    let mut buf = [0u8; 0];
    pool.read_bytes(b, &mut buf).unwrap();
    let mut big = vec![0u8; 1 << 20];
    assert!(pool.read_bytes(b, &mut big).is_err());
    pool.atomic_write_bytes(b, &[]).unwrap();
    pool.atomic_write_bytes(b, &[1, 2, 3]).unwrap();
    let mut three = [0u8; 3];
    pool.read_bytes(b, &mut three).unwrap();
    assert_eq!(three, [1, 2, 3]);
    assert!(pool.atomic_write_bytes(b, &big).is_err());
    assert!(pool.atomic_write_bytes(u64::MAX - 1, &[1, 2]).is_err());
    assert!(pool.read_bytes(u64::MAX - 1, &mut three).is_err());
    let mut r = pool.reader();
    assert!(r.read_bytes(u64::MAX - 1, &mut three).is_err());
    r.read_bytes(b, &mut three).unwrap();
    assert_eq!(three, [1, 2, 3]);
    // A large write through a transaction, in pieces.
    let big_block = pool.transaction(|tx| tx.alloc_bytes(100_000)).unwrap();
    let data: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
    pool.transaction(|tx| tx.write_bytes(big_block, &data))
        .unwrap();
    let mut back = vec![0u8; 100_000];
    pool.read_bytes(big_block, &mut back).unwrap();
    assert_eq!(back, data);
}

#[test]
fn error_messages_name_the_problem_and_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let (path, pool) = create(dir.path(), "m.pool", &PoolConfig::default());
    let e = Pool::open(&path, "probe", &OpenOptions::default()).unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains("in use") && m.contains(&*path.to_string_lossy()),
        "{m}"
    );
    let e = pool.transaction(|tx| tx.alloc_bytes(1 << 40)).unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains("out of pool memory") && m.contains("max_size"),
        "{m}"
    );
    let e = Pool::create(dir.path().join("x"), "probe", 10, &PoolConfig::default()).unwrap_err();
    let m = e.to_string();
    assert!(m.contains("10"), "{m}");
    let e = pool.read(PPtr::<u64>::null()).unwrap_err();
    assert!(e.to_string().contains("null"), "{e}");
}

// The README's code blocks for `rewind`, word for word between the markers
// (the test below compares them), run as a user runs them. The
// named-roots block backs up to "/backups/bank-copy.pool"; here to a
// temporary path named `backup`, which the comparison puts back.

#[rustfmt::skip]
#[allow(clippy::needless_borrows_for_generic_args)] // the README's `&path`
fn readme_named_roots(path: &Path, backup: &Path) -> Result<(), Error> {
    // README begin
    use rewind::{field, Error, PPtr, Pod, Pool, PoolConfig, Typed, Zeroable};

    #[derive(Clone, Copy, Pod, Zeroable)]
    #[bytemuck(crate = "rewind::bytemuck")]
    #[repr(C)]
    struct Account { id: u64, balance: u64 }
    impl Typed for Account {
        fn type_name() -> String { "bank::Account".into() }
    }

    let pool = Pool::open_or_create(&path, "bank", 64 << 20, &PoolConfig::default())?;
    let acc: PPtr<Account> = pool.transaction(|tx| tx.root_named("accounts"))?;
    pool.transaction(|tx| tx.write(field!(acc, Account, balance), &100))?;
    assert!(matches!(
        pool.transaction(|tx| tx.root_named::<[u64; 2]>("accounts")),
        Err(Error::TypeMismatch { .. })
    ));
    pool.backup_to(backup)?; // one committed state, others keep committing
    // README end
    pool.close()?;
    let copy = Pool::open(backup, "bank", &OpenOptions::default())?;
    let acc = copy.root_named::<Account>("accounts")?.expect("in the copy");
    assert_eq!(copy.read(acc)?.balance, 100);
    assert_eq!(copy.read(acc)?.id, 0);
    Ok(())
}

#[rustfmt::skip]
#[allow(unused_variables)]
#[allow(clippy::needless_borrows_for_generic_args)] // the README's `&path`
fn readme_growth(path: &Path) -> Result<(), Error> {
    // README begin
    let cfg = PoolConfig::default().max_size(1 << 30);
    let pool = Pool::create(&path, "big", 8 << 20, &cfg)?;
    let block = pool.transaction(|tx| tx.alloc_bytes(256 << 20))?; // the file grows
    assert!(pool.size() > 256 << 20);
    // README end
    Ok(())
}

#[rustfmt::skip]
fn readme_savepoint(pool: &Pool) -> Result<(), Error> {
    // README begin
    let slot: PPtr<u64> = pool.transaction(|tx| tx.root())?;
    pool.transaction(|tx| {
        tx.write(slot, &1)?;
        let sp = tx.savepoint()?;
        tx.write(slot, &2)?;
        tx.rollback_to(sp)?;                                     // slot is 1 again, crash-safe
        tx.write(slot, &3)                                       // commits 3
    })?;
    assert_eq!(pool.read(slot)?, 3);
    // README end
    Ok(())
}

/// The `rust` blocks of README.md after the first (the collections'
/// example, `rewind-collections/examples/readme.rs`) and before the
/// SQLite one (`rewind-sqlite/examples/readme.rs`).
fn readme_blocks() -> Vec<String> {
    let readme = include_str!("../../../README.md");
    readme
        .split("```rust\n")
        .skip(1)
        .map(|b| b[..b.find("```").expect("a closed block")].to_string())
        .collect()
}

/// This file's copies of them, unindented.
fn our_blocks() -> Vec<String> {
    let src = include_str!("user_probe.rs");
    src.split("    // README begin\n")
        .skip(1)
        .map(|b| {
            let b = &b[..b.find("    // README end").expect("an end marker")];
            b.lines()
                .map(|l| l.strip_prefix("    ").unwrap_or(l))
                .map(|l| {
                    l.replace(
                        "backup_to(backup)",
                        "backup_to(\"/backups/bank-copy.pool\")",
                    )
                })
                .map(|l| l + "\n")
                .collect()
        })
        .collect()
}

#[test]
fn readme_rewind_examples_are_these_word_for_word() {
    let readme = readme_blocks();
    let ours = our_blocks();
    assert_eq!(
        readme.len(),
        5,
        "README's rust blocks changed: update this test"
    );
    assert_eq!(ours.len(), 3);
    assert_eq!(ours[0], readme[1], "README's named-roots block");
    assert_eq!(ours[1], readme[2], "README's growth block");
    assert_eq!(ours[2], readme[3], "README's savepoint block");
}

#[test]
fn readme_rewind_examples_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bank.pool");
    readme_named_roots(&path, &dir.path().join("bank-copy.pool")).unwrap();
    // Again on the pool it made: open_or_create opens it and the root is
    // found; a backup path that exists is refused, never replaced.
    let e = readme_named_roots(&path, &dir.path().join("bank-copy.pool")).unwrap_err();
    assert!(
        matches!(&e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists),
        "{e:?}"
    );
    readme_named_roots(&path, &dir.path().join("bank-copy-2.pool")).unwrap();
    readme_growth(&dir.path().join("big.pool")).unwrap();
    let pool = Pool::create(
        dir.path().join("sp.pool"),
        "sp",
        4 << 20,
        &PoolConfig::default(),
    )
    .unwrap();
    readme_savepoint(&pool).unwrap();
    readme_savepoint(&pool).unwrap();
}

#[test]
fn nested_top_actions_and_savepoints_used_across_their_frames() {
    for cfg in configs() {
        let dir = tempfile::tempdir().unwrap();
        let (path, pool) = create(dir.path(), "nta.pool", &cfg);
        let r: PPtr<[u64; 4]> = pool.transaction(|tx| tx.root()).unwrap();
        let w = |i: u64| r.cast::<u64>().at(i);
        // An action's effects outlive the enclosing transaction's abort;
        // a savepoint from inside it is dead once it ends; one from
        // outside cannot be rolled back to from inside.
        let e = pool
            .transaction(|tx| {
                tx.write(w(0), &1)?;
                let outer = tx.savepoint()?;
                let inner = tx.nested_top_action(|tx| {
                    tx.write(w(1), &2)?;
                    let e = tx.rollback_to(outer).unwrap_err();
                    assert!(matches!(e, Error::InvalidSavepoint { .. }), "{e:?}");
                    let sp = tx.savepoint()?;
                    tx.write(w(2), &3)?;
                    Ok::<_, Error>(sp)
                })?;
                let e = tx.rollback_to(inner).unwrap_err();
                assert!(matches!(e, Error::InvalidSavepoint { .. }), "{e:?}");
                // Nested in a nested one.
                tx.nested_top_action(|tx| {
                    tx.nested_top_action(|tx| tx.write(w(3), &4))?;
                    Ok::<_, Error>(())
                })?;
                Err::<(), _>(Error::Aborted)
            })
            .unwrap_err();
        assert!(matches!(e, Error::Aborted), "{cfg:?}: {e:?}");
        assert_eq!(pool.read(r).unwrap(), [0, 2, 3, 4], "{cfg:?}");
        // An action that fails is undone whole; the transaction goes on.
        pool.transaction(|tx| {
            let e = tx
                .nested_top_action(|tx| {
                    tx.write(w(1), &20)?;
                    Err::<(), _>(Error::Aborted)
                })
                .unwrap_err();
            assert!(matches!(e, Error::Aborted));
            tx.write(w(0), &10)
        })
        .unwrap();
        assert_eq!(pool.read(r).unwrap(), [10, 2, 3, 4], "{cfg:?}");
        // A panic inside an action rolls the whole transaction back and
        // leaves the pool usable.
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.transaction(|tx| -> Result<(), Error> {
                tx.write(w(0), &99)?;
                tx.nested_top_action(|tx| -> Result<(), Error> {
                    tx.write(w(1), &99)?;
                    panic!("user panic in an action")
                })
            })
        }));
        assert!(caught.is_err());
        let now = pool.read(r).unwrap();
        assert_eq!(now[0], 10, "{cfg:?}");
        // The action had not ended: it is undone with the transaction.
        assert_eq!(now[1], 2, "{cfg:?}: {now:?}");
        pool.transaction(|tx| tx.write(w(2), &30)).unwrap();
        pool.close().unwrap();
        let pool = Pool::open(&path, "probe", &OpenOptions::default()).unwrap();
        let after = pool.read(r).unwrap();
        assert_eq!(after, [10, now[1], 30, 4], "{cfg:?}");
        pool.close().unwrap();
    }
}

#[test]
fn locks_on_bad_objects_and_isolated_reads_of_bad_keys() {
    let dir = tempfile::tempdir().unwrap();
    let (_, pool) = create(dir.path(), "lk.pool", &PoolConfig::default());
    let r: PPtr<u64> = pool.transaction(|tx| tx.root()).unwrap();
    pool.transaction(|tx| {
        let e = tx.lock(PPtr::<u64>::null()).unwrap_err();
        assert!(matches!(e, Error::NullPointer { .. }), "{e:?}");
        let e = tx.lock_shared(PPtr::<u64>::from_offset(8)).unwrap_err();
        assert!(matches!(e, Error::NotInHeap { .. }), "{e:?}");
        let e = tx.lock(PPtr::<u64>::from_offset(u64::MAX)).unwrap_err();
        assert!(matches!(e, Error::NotInHeap { .. }), "{e:?}");
        // Twice, and shared then exclusive: the holder's own.
        tx.lock_shared(r)?;
        tx.lock(r)?;
        tx.lock(r)?;
        tx.lock_shared(r)?;
        tx.write(r, &1)
    })
    .unwrap();
    for key in [0u64, 8, u64::MAX, r.offset()] {
        let v = pool.read_isolated(key, |rd| {
            let mut b = [0u8; 8];
            rd.read_bytes(r.offset(), &mut b)?;
            Ok::<_, Error>(u64::from_le_bytes(b))
        });
        match v {
            Ok(v) => assert_eq!(v, 1),
            Err(e) => assert!(
                matches!(e, Error::NullPointer { .. } | Error::NotInHeap { .. }),
                "{key}: {e:?}"
            ),
        }
    }
}

#[test]
fn bad_root_names_and_layout_names_are_invalid_config() {
    let dir = tempfile::tempdir().unwrap();
    let (_, pool) = create(dir.path(), "nm.pool", &PoolConfig::default());
    // 46 bytes and a 2-byte character: 48 bytes.
    let over = format!("{}é", "a".repeat(46));
    for bad in ["a\0b", over.as_str()] {
        let e = pool
            .transaction(|tx| tx.root_named::<u64>(bad))
            .unwrap_err();
        assert!(matches!(e, Error::InvalidConfig { .. }), "{bad:?}: {e:?}");
        let e = pool.root_named::<u64>(bad).unwrap_err();
        assert!(matches!(e, Error::InvalidConfig { .. }), "{bad:?}: {e:?}");
    }
    let fits = format!("{}é", "a".repeat(45));
    pool.transaction(|tx| tx.root_named::<u64>(&fits)).unwrap();
    for bad in ["a\0b".to_string(), "l".repeat(64)] {
        let e = Pool::create(
            dir.path().join("x.pool"),
            &bad,
            4 << 20,
            &PoolConfig::default(),
        )
        .unwrap_err();
        assert!(matches!(e, Error::InvalidConfig { .. }), "{bad:?}: {e:?}");
        assert!(!dir.path().join("x.pool").exists());
    }
    let ok = "l".repeat(63);
    Pool::create(
        dir.path().join("y.pool"),
        &ok,
        4 << 20,
        &PoolConfig::default(),
    )
    .unwrap()
    .close()
    .unwrap();
    Pool::open(dir.path().join("y.pool"), &ok, &OpenOptions::default())
        .unwrap()
        .close()
        .unwrap();
    // Create over an existing pool or file: refused, the file kept.
    let e = Pool::create(
        dir.path().join("y.pool"),
        "other",
        4 << 20,
        &PoolConfig::default(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    Pool::open(dir.path().join("y.pool"), &ok, &OpenOptions::default())
        .unwrap()
        .close()
        .unwrap();
    // A zero-filled file of a pool's size, and a pool cut in half.
    let zeros = dir.path().join("zeros");
    std::fs::write(&zeros, vec![0u8; 4 << 20]).unwrap();
    let e = Pool::open(&zeros, "probe", &OpenOptions::default()).unwrap_err();
    assert!(matches!(e, Error::NotAPool { .. }), "{e:?}");
    let half = dir.path().join("half");
    std::fs::copy(dir.path().join("y.pool"), &half).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&half).unwrap();
    f.set_len(2 << 20).unwrap();
    drop(f);
    let e = Pool::open(&half, &ok, &OpenOptions::default()).unwrap_err();
    assert!(matches!(e, Error::Truncated { .. }), "{e:?}");
    // Open options out of range.
    let e = Pool::open(
        dir.path().join("y.pool"),
        &ok,
        &OpenOptions::default().write_back(WriteBack::Lru { lines: 1 }),
    );
    match e {
        Ok(p) => p.close().unwrap(), // not RedoAsync: unused
        Err(e) => assert!(matches!(e, Error::InvalidConfig { .. }), "{e:?}"),
    }
}

#[test]
fn every_log_and_policy_on_msync_reopens_with_its_data_under_any_backend() {
    let dir = tempfile::tempdir().unwrap();
    for (i, cfg) in configs().into_iter().enumerate() {
        let cfg = cfg.backend(Backend::Msync);
        let path = dir.path().join(format!("ms{i}.pool"));
        let pool = Pool::open_or_create(&path, "probe", MIN_POOL * 2, &cfg).unwrap();
        assert!(pool.created());
        let r: PPtr<[u64; 2]> = pool.transaction(|tx| tx.root_named("pair")).unwrap();
        for k in 0..20u64 {
            pool.transaction(|tx| tx.write(r, &[k, k + 1])).unwrap();
        }
        pool.atomic_write(r.cast::<u64>(), &100).unwrap();
        pool.sync().unwrap();
        drop(pool); // no close: the drop closes
        for opts in [
            OpenOptions::default(),
            OpenOptions::default().backend(Backend::Pmem),
            OpenOptions::default().write_back(WriteBack::Lru { lines: 64 }),
        ] {
            let pool = Pool::open(&path, "probe", &opts).unwrap();
            let r = pool.root_named::<[u64; 2]>("pair").unwrap().unwrap();
            assert_eq!(pool.read(r).unwrap(), [100, 20], "{cfg:?} {opts:?}");
            pool.close().unwrap();
        }
        let pool = Pool::open_or_create(&path, "probe", MIN_POOL * 2, &cfg).unwrap();
        assert!(!pool.created());
        pool.close().unwrap();
    }
}

#[test]
fn open_or_create_after_growth_takes_the_size_given_at_create() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("grown.pool");
    let cfg = PoolConfig::default().max_size(64 << 20);
    let pool = Pool::open_or_create(&path, "probe", 4 << 20, &cfg).unwrap();
    let big = pool.transaction(|tx| tx.alloc_bytes(20 << 20)).unwrap();
    pool.transaction(|tx| tx.write_bytes(big + (20 << 20) - 3, b"end"))
        .unwrap();
    let grown = pool.size();
    assert!(grown > 20 << 20);
    pool.close().unwrap();
    // The same call as the program's first: opens the grown pool.
    let pool = Pool::open_or_create(&path, "probe", 4 << 20, &cfg).unwrap();
    assert!(!pool.created());
    assert_eq!(pool.size(), grown);
    let mut end = [0u8; 3];
    pool.read_bytes(big + (20 << 20) - 3, &mut end).unwrap();
    assert_eq!(&end, b"end");
    pool.close().unwrap();
    // Its grown size is not its size at create.
    let e = Pool::open_or_create(&path, "probe", grown, &cfg).unwrap_err();
    assert!(matches!(e, Error::ConfigMismatch { .. }), "{e:?}");
}
