//! On a filesystem without `fallocate` (ext2, ext4 without extents, some
//! network filesystems) a pool's blocks are still allocated at create and
//! at growth, by writing them: a pool file left sparse there killed the
//! process with `SIGBUS` at its first store into a hole once another file
//! had taken the disk's free space. Needs root (a loop-mounted ext2 image);
//! skipped elsewhere.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use rewind::{Error, OpenOptions, PPtr, Pool, PoolConfig};

const LAYOUT: &str = "no-fallocate";

/// A small ext2 filesystem, unmounted when dropped.
struct Ext2 {
    _dir: tempfile::TempDir,
    mnt: PathBuf,
}

impl Ext2 {
    fn mount(bytes: u64) -> Option<Ext2> {
        let dir = tempfile::tempdir().ok()?;
        let img = dir.path().join("fs.img");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).ok()?;
        std::fs::File::create(&img).ok()?.set_len(bytes).ok()?;
        let ok = |c: &mut Command| c.output().map(|o| o.status.success()).unwrap_or(false);
        if !ok(Command::new("mkfs.ext2").arg("-q").arg("-F").arg(&img)) {
            return None;
        }
        if !ok(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&img)
            .arg(&mnt))
        {
            return None;
        }
        Some(Ext2 { _dir: dir, mnt })
    }
}

impl Drop for Ext2 {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
    }
}

/// Writes a file until the disk is full.
fn fill_disk(dir: &Path) {
    let mut f = std::fs::File::create(dir.join("filler")).unwrap();
    let block = vec![1u8; 64 << 10];
    while f.write_all(&block).is_ok() {}
    let _ = f.sync_all();
}

/// Allocates and writes 4 KiB blocks until an allocation fails; returns
/// the error and the blocks committed.
fn use_until_full(pool: &Pool) -> (Error, Vec<u64>) {
    let mut blocks = Vec::new();
    loop {
        let r = pool.transaction(|tx| {
            let b = tx.alloc_bytes(4096)?;
            tx.write_bytes(b, &[7u8; 4096])?;
            Ok::<_, Error>(b)
        });
        match r {
            Ok(b) => blocks.push(b),
            Err(e) => return (e, blocks),
        }
    }
}

#[test]
fn pools_on_a_filesystem_without_fallocate_never_fault_on_a_full_disk() {
    let Some(fs) = Ext2::mount(24 << 20) else {
        eprintln!("no loop-mounted ext2 here (needs root and mkfs.ext2): skipped");
        return;
    };
    // A pool of fixed size, then one that grows.
    for (name, size, max) in [
        ("fixed.pool", 8u64 << 20, 8u64 << 20),
        ("grows.pool", 2 << 20, 64 << 20),
    ] {
        let path = fs.mnt.join(name);
        let cfg = PoolConfig::default().max_size(max);
        let pool = Pool::create(&path, LAYOUT, size, &cfg).unwrap();
        let r: PPtr<u64> = pool.transaction(|tx| tx.root()).unwrap();
        pool.transaction(|tx| tx.write(r, &5)).unwrap();
        if name == "grows.pool" {
            pool.grow(4 << 20).unwrap();
        }
        fill_disk(&fs.mnt);
        let (e, blocks) = use_until_full(&pool);
        assert!(
            matches!(
                e,
                Error::OutOfMemory { .. } | Error::NoSpaceToGrow { .. } | Error::LogFull { .. }
            ),
            "{name}: {e}"
        );
        pool.close().unwrap();
        let pool = Pool::open(&path, LAYOUT, &OpenOptions::default()).unwrap();
        assert_eq!(pool.read(r).unwrap(), 5);
        for &b in &blocks {
            let mut back = [0u8; 4096];
            pool.read_bytes(b, &mut back).unwrap();
            assert_eq!(back, [7u8; 4096], "{name}");
        }
        drop(pool);
        std::fs::remove_file(fs.mnt.join("filler")).unwrap();
        std::fs::remove_file(&path).unwrap();
    }
}
