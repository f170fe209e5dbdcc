//! A pool file with holes (a copy made by `cp` or `rsync --sparse`, which
//! leave out the blocks a pool never wrote, or a file extended past its
//! heap) gets its blocks at open: a store into a hole of the mapping on a
//! full disk would otherwise kill the process with `SIGBUS`. Where the
//! disk has no room for them, open is `NoSpace`, refused before any block
//! is taken.

mod common;

use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use rewind::{Error, OpenOptions, PPtr, Pool, PoolConfig};

const LAYOUT: &str = "sparse";

/// Bytes of `path` that have blocks on the disk.
fn allocated(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().blocks() * 512
}

/// Rewrites `path` as `cp --sparse=always` would: only its non-zero pages.
fn make_sparse(path: &Path) {
    let bytes = std::fs::read(path).unwrap();
    let tmp = path.with_extension("sparse");
    let f = std::fs::File::create(&tmp).unwrap();
    f.set_len(bytes.len() as u64).unwrap();
    for (i, page) in bytes.chunks(4096).enumerate() {
        if page.iter().any(|&b| b != 0) {
            f.write_all_at(page, i as u64 * 4096).unwrap();
        }
    }
    f.sync_all().unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn a_sparse_pool_file_has_its_blocks_allocated_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.pool");
    let pool = Pool::create(&path, LAYOUT, 16 << 20, &PoolConfig::default()).unwrap();
    let r: PPtr<u64> = pool.transaction(|tx| tx.root()).unwrap();
    pool.transaction(|tx| tx.write(r, &7)).unwrap();
    pool.close().unwrap();
    make_sparse(&path);
    let len = std::fs::metadata(&path).unwrap().len();
    if allocated(&path) >= len {
        eprintln!("filesystem without sparse files: skipped");
        return;
    }
    let pool = Pool::open(&path, LAYOUT, &OpenOptions::default()).unwrap();
    assert!(
        allocated(&path) >= len,
        "{} of {len} bytes allocated after open",
        allocated(&path)
    );
    assert_eq!(pool.read(r).unwrap(), 7);
    pool.transaction(|tx| tx.write(r, &8)).unwrap();
}

#[test]
fn a_sparse_pool_larger_than_the_free_space_is_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.pool");
    let Some((pool, free)) = common::pool_beyond_free_space(&path, LAYOUT) else {
        return;
    };
    let r: PPtr<u64> = pool.transaction(|tx| tx.root()).unwrap();
    pool.transaction(|tx| tx.write(r, &7)).unwrap();
    pool.close().unwrap();
    // A hole past the heap, larger than the disk's free space, inside the
    // maximum size: a growth would store into it without allocating.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let len = free + (512 << 20);
    if f.set_len(len).is_err() {
        eprintln!("filesystem without such large files: skipped");
        return;
    }
    drop(f);
    if allocated(&path) >= len {
        eprintln!("filesystem without sparse files: skipped");
        return;
    }
    match Pool::open(&path, LAYOUT, &OpenOptions::default()) {
        Err(Error::NoSpace { .. }) => {}
        Err(e) => panic!("unexpected error: {e}"),
        Ok(_) => panic!("a pool with holes larger than the free space opened"),
    }
    // Nothing was taken: the file keeps its length and its blocks.
    assert_eq!(std::fs::metadata(&path).unwrap().len(), len);
    assert!(allocated(&path) < free);
}
