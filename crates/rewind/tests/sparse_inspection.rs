//! Inspection maps the pool's recorded size privately and never reads the
//! file whole: a 4 MiB pool whose file was extended to a sparse terabyte is
//! inspected (`info`, `check`, `dump_log`) within 100 MiB of memory, and
//! the file is not changed. One test in its own binary, so the peak memory
//! it reads (`VmHWM`) is its own.

use rewind::{PPtr, Pool, PoolConfig};

fn peak_rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn a_pool_extended_to_a_sparse_terabyte_is_inspected_in_little_memory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sparse.pool");
    let pool = Pool::create(&path, "sparse", 4 << 20, &PoolConfig::default()).unwrap();
    let root: PPtr<u64> = pool.transaction(|tx| tx.root()).unwrap();
    pool.transaction(|tx| tx.write(root, &7)).unwrap();
    drop(pool);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    if f.set_len(1 << 40).is_err() {
        eprintln!("the filesystem refuses a 1 TiB sparse file: skipped");
        return;
    }
    drop(f);
    let info = rewind::inspect::info(&path).unwrap();
    assert_eq!((info.size, info.file_len), (4 << 20, 1 << 40));
    assert!(!info.in_use);
    let report = rewind::inspect::check(&path).unwrap();
    assert!(report.is_ok(), "{report}");
    assert!(rewind::inspect::dump_log(&path).unwrap().is_empty());
    let peak = peak_rss_kib();
    eprintln!("peak resident memory: {peak} KiB");
    assert!(peak < 100 * 1024, "peak resident memory {peak} KiB");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 1 << 40);
    let pool = Pool::open(&path, "sparse", &Default::default()).unwrap();
    assert_eq!(pool.read(root).unwrap(), 7);
}
