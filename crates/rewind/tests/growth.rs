//! Pool growth (issue 21): a pool created small takes far more than its
//! size, a crash at every fence of a growth recovers to the old or the new
//! heap size with nothing lost, a full disk is a typed error that leaves
//! the pool usable, hostile heap size words are typed errors, and freed
//! chunks serve every size class.

use std::os::unix::fs::FileExt;
use std::path::Path;

use rewind::format::layout::CHUNK;
use rewind::format::meta;
use rewind::{Backend, Error, OpenOptions, PPtr, Pod, Pool, PoolConfig, Zeroable};

const LAYOUT: &str = "growth";

/// Blocks the 1 GiB workload allocates, of [`BLOCK`] bytes each.
const BLOCKS: u64 = 1024;
const BLOCK: u64 = 1 << 20;

fn tag(i: u64) -> u64 {
    (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct Dir {
    count: u64,
    blocks: PPtr<u64>,
}

/// Bytes free to an unprivileged writer on `dir`'s filesystem.
fn free_bytes(dir: &Path) -> u64 {
    rustix::fs::statvfs(dir)
        .map(|s| s.f_bavail.saturating_mul(s.f_frsize))
        .unwrap_or(0)
}

/// A fresh directory for `blocks` blocks of the workload and the number of
/// blocks it has room for: tmpfs (the stand-in for persistent memory)
/// when it has room for them all and a margin, else the temporary
/// directory (a disk) if it has, else whichever has more room, with the
/// workload cut to half of that room (growth takes its blocks with
/// `fallocate`, and the tests beside this one need disk too).
fn roomy_dir(blocks: u64) -> (tempfile::TempDir, u64) {
    let need = blocks * BLOCK + (256 << 20);
    let shm = Path::new("/dev/shm");
    let mut dirs = vec![(free_bytes(shm), shm.to_path_buf())];
    let tmp = std::env::temp_dir();
    dirs.push((free_bytes(&tmp), tmp));
    let (room, at) = match dirs.iter().find(|(free, _)| *free >= need) {
        Some(d) => d.clone(),
        None => dirs.into_iter().max().unwrap(),
    };
    let fits = (room / 2 / BLOCK).min(blocks);
    (tempfile::tempdir_in(at).unwrap(), fits)
}

/// The case: created at 8 MiB, the pool takes 1 GiB of allocations
/// (1024 blocks of 1 MiB, each tagged at both ends; the blocks are not
/// zeroed, so the file stays mostly unwritten), growing as allocations
/// find no room, and reopened holds every block. On a machine without
/// 1.25 GiB free on tmpfs or on the temporary directory's disk, the
/// workload is cut to what half the free space holds (and says so), at
/// least 32 blocks (a pool four times its created size); a full disk
/// during growth is a test of its own below.
#[test]
fn a_pool_created_at_8_mib_takes_1_gib_and_reopened_holds_everything() {
    let (dir, blocks) = roomy_dir(BLOCKS);
    let blocks = blocks / 16 * 16;
    assert!(
        blocks >= 32,
        "no filesystem has 64 MiB free: {}",
        dir.path().display()
    );
    if blocks < BLOCKS {
        println!(
            "only room for {blocks} of {BLOCKS} blocks on {}",
            dir.path().display()
        );
    }
    let path = dir.path().join("grow.pool");
    let cfg = PoolConfig::default().max_size(blocks * BLOCK + (64 << 20));
    let pool = Pool::create(&path, LAYOUT, 8 << 20, &cfg).unwrap();
    assert_eq!(pool.size(), 8 << 20);
    let chunks0 = pool.alloc_stats().total_chunks;
    let d = pool
        .transaction(|tx| {
            let d = tx.root::<Dir>()?;
            let blocks = tx.alloc_array::<u64>(blocks)?;
            tx.write(d, &Dir { count: 0, blocks })?;
            Ok::<_, Error>(d)
        })
        .unwrap();
    let mut sizes = vec![pool.size()];
    for t in 0..blocks / 16 {
        pool.transaction(|tx| {
            let dir: Dir = tx.read(d)?;
            for k in 0..16 {
                let i = t * 16 + k;
                let b = tx.alloc_bytes_unzeroed(BLOCK)?;
                tx.write_bytes(b, &tag(i).to_le_bytes())?;
                tx.write_bytes(b + BLOCK - 8, &(!tag(i)).to_le_bytes())?;
                tx.write(dir.blocks.at(i), &b)?;
            }
            tx.write(
                d,
                &Dir {
                    count: (t + 1) * 16,
                    ..dir
                },
            )?;
            Ok::<_, Error>(())
        })
        .unwrap();
        if pool.size() != *sizes.last().unwrap() {
            sizes.push(pool.size());
        }
    }
    let stats = pool.alloc_stats();
    assert!(stats.bytes_used >= blocks * BLOCK, "{stats:?}");
    assert!(pool.size() > blocks * BLOCK && pool.size() <= pool.max_size());
    println!(
        "grew from {chunks0} to {} chunks in {} growths: sizes {sizes:?}",
        stats.total_chunks,
        sizes.len() - 1
    );
    let size = pool.size();
    pool.close().unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), size);

    let pool = Pool::open(&path, LAYOUT, &OpenOptions::default()).unwrap();
    assert_eq!(pool.size(), size);
    assert_eq!(pool.alloc_stats().total_chunks, stats.total_chunks);
    let dir: Dir = pool.read(d).unwrap();
    assert_eq!(dir.count, blocks);
    for i in 0..blocks {
        let b = pool.read(dir.blocks.at(i)).unwrap();
        assert_eq!(
            pool.read(PPtr::<u64>::from_offset(b)).unwrap(),
            tag(i),
            "block {i}"
        );
        let end = PPtr::<u64>::from_offset(b + BLOCK - 8);
        assert_eq!(pool.read(end).unwrap(), !tag(i), "block {i}");
    }
    let report = rewind::inspect::check_pool(&pool);
    assert!(report.is_ok(), "{report}");
}

/// A simulated pool of 1 MiB that may grow to 4 MiB: three heap chunks.
fn small_sim() -> Pool {
    let cfg = PoolConfig::default()
        .backend(Backend::Sim)
        .bucket_cells(16)
        .log_size(128 << 10)
        .max_size(4 << 20);
    Pool::create_sim(LAYOUT, 1 << 20, &cfg).unwrap()
}

#[derive(Clone, Copy, Pod, Zeroable, Debug, PartialEq)]
#[repr(C)]
struct Objs {
    off: [u64; 8],
}

/// The state a reopened pool shows: each object's offset and its first
/// and last word.
fn state(pool: &Pool) -> Vec<(u64, u64, u64)> {
    let root = pool.root::<Objs>().unwrap().unwrap();
    let objs = pool.read(root).unwrap();
    objs.off
        .iter()
        .filter(|&&o| o != 0)
        .map(|&o| {
            let w = |at| pool.read(PPtr::<u64>::from_offset(at)).unwrap();
            (o, w(o), w(o + 200_000 - 8))
        })
        .collect()
}

/// Allocates object `i` (200,000 bytes, a chunk) and tags it.
fn add(pool: &Pool, i: usize) -> Result<(), Error> {
    pool.transaction(|tx| {
        let root = tx.root::<Objs>()?;
        let o = tx.alloc_bytes(200_000)?;
        tx.write_bytes(o, &tag(i as u64).to_le_bytes())?;
        tx.write_bytes(o + 200_000 - 8, &tag(i as u64 + 99).to_le_bytes())?;
        let mut objs = tx.read(root)?;
        objs.off[i] = o;
        tx.write(root, &objs)
    })
}

/// The pool the crash test starts from: its heap full (the root's chunk
/// and two objects).
fn full_sim() -> Pool {
    let pool = small_sim();
    add(&pool, 0).unwrap();
    add(&pool, 1).unwrap();
    assert_eq!(
        pool.alloc_stats().free_chunks,
        0,
        "{:?}",
        pool.alloc_stats()
    );
    pool
}

fn reopen(image: Vec<u8>) -> Pool {
    Pool::open_image(image, LAYOUT).expect("a crash image recovers")
}

/// A crash at every fence of a transaction whose allocation grows the heap
/// (the file extended, the heap size word stored, flushed, fenced, then
/// the allocation): every image recovers to the state before (the old or
/// the new heap size, the objects before) or after (the new size and the
/// new object), nothing lost, and the recovered pool allocates again.
#[test]
fn a_crash_at_every_fence_of_a_growth_recovers_the_old_or_the_new_size() {
    let probe = full_sim();
    let before = state(&probe);
    let chunks = probe.alloc_stats().total_chunks;
    let start = probe.domain().with_sim(|s| s.fences()).unwrap();
    add(&probe, 2).unwrap();
    let end = probe.domain().with_sim(|s| s.fences()).unwrap();
    let after = state(&probe);
    let grown = probe.alloc_stats().total_chunks;
    assert!(grown > chunks, "the allocation did not grow the heap");
    let (mut old, mut new, mut images) = (0, 0, 0);
    for k in start + 1..=end {
        let pool = full_sim();
        pool.domain().with_sim_mut(|s| s.capture_at_fence(k, k));
        add(&pool, 2).unwrap();
        let captured = pool.domain().with_sim_mut(|s| s.take_captured()).unwrap();
        assert_eq!(captured.len(), 3, "fence {k} not reached");
        for (i, img) in captured.into_iter().enumerate() {
            let p = reopen(img);
            let got = state(&p);
            assert!(
                got == before || got == after,
                "crash at fence {k}, image {i}: {got:?}"
            );
            let n = p.alloc_stats().total_chunks;
            assert!(n == chunks || n == grown, "fence {k}: {n} chunks");
            if n == chunks {
                old += 1;
            } else {
                new += 1;
            }
            assert!(rewind::inspect::check_pool(&p).is_ok());
            // The recovered pool grows (again) and allocates.
            add(&p, 3).unwrap();
            assert_eq!(state(&p).len(), got.len() + 1);
            images += 1;
        }
    }
    println!("{images} crash images: {old} at the old heap size, {new} at the new");
    assert!(old > 0 && new > 0);
}

/// A crash at every fence of `Pool::grow`: the old or the new size, the
/// objects intact.
#[test]
fn a_crash_at_every_fence_of_pool_grow_recovers_the_old_or_the_new_size() {
    let probe = full_sim();
    let before = state(&probe);
    let chunks = probe.alloc_stats().total_chunks;
    let start = probe.domain().with_sim(|s| s.fences()).unwrap();
    probe.grow(3 * CHUNK).unwrap();
    let end = probe.domain().with_sim(|s| s.fences()).unwrap();
    assert_eq!(probe.alloc_stats().total_chunks, chunks + 3);
    assert!(end > start);
    for k in start + 1..=end {
        let pool = full_sim();
        pool.domain().with_sim_mut(|s| s.capture_at_fence(k, k));
        pool.grow(3 * CHUNK).unwrap();
        for img in pool.domain().with_sim_mut(|s| s.take_captured()).unwrap() {
            let p = reopen(img);
            assert_eq!(state(&p), before);
            let n = p.alloc_stats().total_chunks;
            assert!(n == chunks || n == chunks + 3, "fence {k}: {n} chunks");
        }
    }
}

/// A full disk during growth is `NoSpaceToGrow`: nothing changes, the pool
/// stays usable, and once there is room the same allocation grows it.
#[test]
fn a_full_disk_during_growth_is_a_typed_error_and_the_pool_stays_usable() {
    let pool = full_sim();
    let before = state(&pool);
    let size = pool.size();
    pool.domain().set_full_disk(true);
    let e = add(&pool, 2).unwrap_err();
    assert!(matches!(e, Error::NoSpaceToGrow { .. }), "{e}");
    let e = pool.grow(CHUNK).unwrap_err();
    assert!(matches!(e, Error::NoSpaceToGrow { .. }), "{e}");
    assert_eq!(pool.size(), size);
    assert_eq!(state(&pool), before);
    // Still usable: a transaction on what exists commits.
    pool.transaction(|tx| {
        let root = tx.root::<Objs>()?;
        tx.write_bytes(before[0].0, &7u64.to_le_bytes())?;
        tx.read(root).map(|_| ())
    })
    .unwrap();
    pool.domain().set_full_disk(false);
    add(&pool, 2).unwrap();
    assert!(pool.size() > size);
    assert_eq!(state(&pool).len(), 3);
    let img = pool.domain().with_sim(|s| s.image_all_pending()).unwrap();
    assert_eq!(state(&reopen(img)).len(), 3);
}

/// On a file: the same growth, and past the maximum an allocation is
/// `OutOfMemory` (the pool stays usable).
#[test]
fn a_file_pool_grows_to_its_maximum_and_no_further() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("max.pool");
    let cfg = PoolConfig::default().max_size(6 << 20);
    let pool = Pool::create(&path, LAYOUT, 2 << 20, &cfg).unwrap();
    let mut n = 0u64;
    let e = loop {
        match pool.transaction(|tx| tx.alloc_bytes(CHUNK)) {
            Ok(_) => n += 1,
            Err(e) => break e,
        }
    };
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
    assert!(n >= 16, "only {n} chunks before the maximum");
    assert!(pool.size() <= 6 << 20);
    assert!(matches!(pool.grow(CHUNK), Err(Error::OutOfMemory { .. })));
    let size = pool.size();
    drop(pool);
    let pool = Pool::open(&path, LAYOUT, &OpenOptions::default()).unwrap();
    assert_eq!(pool.size(), size);
    // A smaller maximum than the size is refused at create.
    let bad = PoolConfig::default().max_size(1 << 20);
    let e = Pool::create(dir.path().join("b.pool"), LAYOUT, 2 << 20, &bad)
        .err()
        .unwrap();
    assert!(matches!(e, Error::InvalidConfig { .. }), "{e}");
}

/// Growing to the maximum size grows as far as whole chunks go, and again
/// does nothing; past it is `OutOfMemory` (found by a user: the heap never
/// ends exactly at the maximum, so `grow_to(max_size())` always failed).
#[test]
fn grow_to_the_maximum_size_reaches_it_and_past_it_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = PoolConfig::default().max_size(64 << 20);
    let pool = Pool::create(dir.path().join("gm.pool"), LAYOUT, 8 << 20, &cfg).unwrap();
    let size = pool.grow_to(pool.max_size()).unwrap();
    assert!(
        size <= pool.max_size() && size > pool.max_size() - CHUNK,
        "{size}"
    );
    assert_eq!(pool.grow_to(pool.max_size()).unwrap(), size, "nothing more");
    assert!(matches!(
        pool.grow_to(pool.max_size() + 1),
        Err(Error::OutOfMemory { .. })
    ));
    // A maximum past what a pool can be names the maximum, not the size.
    let e = Pool::create(
        dir.path().join("x.pool"),
        LAYOUT,
        8 << 20,
        &PoolConfig::default().max_size(u64::MAX),
    )
    .err()
    .unwrap();
    assert!(
        matches!(
            e,
            Error::InvalidConfig {
                what: "max size",
                ..
            }
        ),
        "{e}"
    );
}

/// Stores `word` as the heap size word of the (closed) pool file.
fn set_heap_word(path: &std::path::Path, word: u64) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(&word.to_le_bytes(), meta::HEAP).unwrap();
}

fn heap_word(path: &std::path::Path) -> u64 {
    let f = std::fs::File::open(path).unwrap();
    let mut w = [0u8; 8];
    f.read_exact_at(&mut w, meta::HEAP).unwrap();
    meta::decode_heap(u64::from_le_bytes(w)).unwrap()
}

fn open_err(path: &std::path::Path) -> Error {
    Pool::open(path, LAYOUT, &OpenOptions::default()).expect_err("the pool must not open")
}

/// Hostile heap size words: past the file, past the maximum, damaged; and
/// a file truncated after a growth. Each is a typed error at open (and a
/// problem `rewind check` reports), never a fault; a file longer than its
/// heap (a crash between extending and recording) opens, and the next
/// growth reuses the extension.
#[test]
fn hostile_heap_size_words_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.pool");
    let cfg = PoolConfig::default().max_size(16 << 20);
    drop(Pool::create(&path, LAYOUT, 4 << 20, &cfg).unwrap());
    let n = heap_word(&path);
    let good = meta::encode_heap(n);
    let cases = [
        ("past the file", meta::encode_heap(n + 8)),
        ("past the maximum", meta::encode_heap(1 << 30)),
        ("zero chunks", meta::encode_heap(0)),
        ("a flipped bit", good ^ 1 << 3),
        ("zeroed", 0),
    ];
    for (what, word) in cases {
        set_heap_word(&path, word);
        let e = open_err(&path);
        assert!(matches!(e, Error::MetaCorrupt { .. }), "{what}: {e}");
        let report = rewind::inspect::check(&path).unwrap();
        assert!(!report.is_ok(), "{what}: check passed");
    }
    set_heap_word(&path, good);

    // A file longer than its heap opens; growth reuses the extension.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(12 << 20).unwrap();
    let pool = Pool::open(&path, LAYOUT, &OpenOptions::default()).unwrap();
    assert_eq!(pool.alloc_stats().total_chunks, n);
    pool.grow(CHUNK).unwrap();
    assert_eq!(pool.size(), 12 << 20);
    drop(pool);
    assert_eq!(heap_word(&path), n + 1);

    // Truncated below the recorded heap (but not below the size at
    // create): the heap size word names chunks past the file's end.
    let pool = Pool::open(&path, LAYOUT, &OpenOptions::default()).unwrap();
    pool.grow(24 * CHUNK).unwrap();
    drop(pool);
    f.set_len(4 << 20).unwrap();
    let e = open_err(&path);
    assert!(matches!(e, Error::MetaCorrupt { .. }), "{e}");
}

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct Many {
    off: [u64; 4096],
}

/// Freed chunks serve every class: a heap filled with 1 KiB blocks, one
/// chunk's worth of them freed, then 128-byte blocks (another class) and a
/// large run fit (they failed before: a freed chunk stayed with its class).
#[test]
fn freed_chunks_serve_every_class() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("classes.pool");
    let pool = Pool::create(&path, LAYOUT, 4 << 20, &PoolConfig::default()).unwrap();
    let root = pool.transaction(|tx| tx.root::<Many>()).unwrap();
    let mut n = 0usize;
    'fill: loop {
        let r = pool.transaction(|tx| {
            let mut m = tx.read(root)?;
            for _ in 0..64 {
                if n == m.off.len() {
                    break;
                }
                m.off[n] = tx.alloc_bytes(1024)?;
                n += 1;
            }
            tx.write(root, &m)
        });
        match r {
            Ok(()) if n < 4096 => {}
            Ok(()) => panic!("4096 blocks of 1 KiB fit in a 4 MiB pool"),
            Err(Error::OutOfMemory { .. }) => break 'fill,
            Err(e) => panic!("{e}"),
        }
    }
    let m = pool.read(root).unwrap();
    let n = m.off.iter().take_while(|&&o| o != 0).count();
    // Free the 256 blocks of one chunk (the first: a class's chunk is
    // used up before the next is taken).
    let heap = pool.layout().heap_off;
    let chunk_of = |o: u64| (o - heap) / CHUNK;
    let c = chunk_of(m.off[0]);
    let victims: Vec<usize> = (0..n).filter(|&i| chunk_of(m.off[i]) == c).collect();
    assert_eq!(victims.len(), 256);
    pool.transaction(|tx| {
        let mut m = tx.read(root)?;
        for &i in &victims {
            tx.free(PPtr::<u8>::from_offset(m.off[i]))?;
            m.off[i] = 0;
        }
        tx.write(root, &m)
    })
    .unwrap();
    // 128-byte blocks take the chunk: 2048 of them (no chunk was free:
    // without the reclaim the first one failed).
    assert_eq!(pool.alloc_stats().free_chunks, 0);
    for _ in 0..2048 / 64 {
        pool.transaction(|tx| {
            for _ in 0..64 {
                tx.alloc_bytes(128)?;
            }
            Ok::<_, Error>(())
        })
        .unwrap();
    }
    // Free every 1 KiB block: a run of chunks for a large allocation.
    let m = pool.read(root).unwrap();
    let live: Vec<u64> = m.off.iter().copied().filter(|&o| o != 0).collect();
    for part in live.chunks(128) {
        pool.transaction(|tx| {
            for &o in part {
                tx.free(PPtr::<u8>::from_offset(o))?;
            }
            Ok::<_, Error>(())
        })
        .unwrap();
    }
    pool.transaction(|tx| tx.alloc_bytes(2 << 20)).unwrap();
    drop(pool);
    let pool = Pool::open(&path, LAYOUT, &OpenOptions::default()).unwrap();
    assert!(rewind::inspect::check_pool(&pool).is_ok());
}
