//! Bad pool files give a typed error with a clear message, never a panic.

use std::path::Path;

use rewind::{Backend, Error, OpenOptions, PPtr, Policy, Pool, PoolConfig};

fn make(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("good.pool");
    let cfg = PoolConfig::default().backend(Backend::Msync);
    let pool = Pool::create(&path, "bad-files", 4 << 20, &cfg).unwrap();
    pool.transaction(|tx| {
        let r: PPtr<[u64; 4]> = tx.root()?;
        tx.write(r, &[1, 2, 3, 4])
    })
    .unwrap();
    path
}

fn open(path: &Path) -> Result<Pool, Error> {
    Pool::open(path, "bad-files", &OpenOptions::default())
}

fn variant(dir: &Path, name: &str, f: impl FnOnce(&mut Vec<u8>)) -> std::path::PathBuf {
    let mut bytes = std::fs::read(make_once(dir)).unwrap();
    f(&mut bytes);
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn make_once(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("good.pool");
    if p.exists() {
        p
    } else {
        make(dir)
    }
}

#[test]
fn good_pool_opens_and_checks() {
    let dir = tempfile::tempdir().unwrap();
    let p = make_once(dir.path());
    let pool = open(&p).unwrap();
    let r = pool.root::<[u64; 4]>().unwrap().unwrap();
    assert_eq!(pool.read(r).unwrap(), [1, 2, 3, 4]);
    drop(pool);
    assert!(rewind::inspect::check(&p).unwrap().is_ok());
}

/// Creating where a directory or a symbolic link to nothing is says what
/// is there (`NotAFile`), as opening does; a file there is
/// `AlreadyExists`, never replaced.
#[test]
fn create_over_a_directory_or_a_dangling_link_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = PoolConfig::default();
    let sub = dir.path().join("d");
    std::fs::create_dir(&sub).unwrap();
    let link = dir.path().join("dangling.pool");
    std::os::unix::fs::symlink(dir.path().join("nothing"), &link).unwrap();
    for (path, kind) in [(&sub, "a directory"), (&link, "a symbolic link to nothing")] {
        for r in [
            Pool::create(path, "bad-files", 4 << 20, &cfg),
            Pool::open_or_create(path, "bad-files", 4 << 20, &cfg),
        ] {
            let e = r.err().unwrap();
            assert!(
                matches!(&e, Error::NotAFile { kind: k, .. } if *k == kind),
                "{e:?}"
            );
        }
    }
    assert!(
        !dir.path().join("nothing").exists(),
        "nothing made through the link"
    );
    let file = dir.path().join("notes");
    std::fs::write(&file, "x").unwrap();
    let e = Pool::create(&file, "bad-files", 4 << 20, &cfg)
        .err()
        .unwrap();
    assert!(
        matches!(&e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists),
        "{e:?}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
}

#[test]
fn missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(&dir.path().join("nope.pool")).err().unwrap();
    assert!(matches!(e, Error::Io { .. }), "{e}");
}

#[test]
fn truncated_to_5000_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let p = variant(dir.path(), "short.pool", |b| b.truncate(5000));
    let e = open(&p).err().unwrap();
    assert!(matches!(e, Error::Truncated { .. }), "{e}");
    assert!(e.to_string().contains("truncated"), "{e}");
    assert!(rewind::inspect::check(&p).is_err());
}

#[test]
fn shorter_than_a_header_and_empty() {
    let dir = tempfile::tempdir().unwrap();
    for n in [0usize, 7, 100, 4095] {
        let p = variant(dir.path(), &format!("s{n}.pool"), |b| b.truncate(n));
        let e = open(&p).err().unwrap();
        assert!(
            matches!(e, Error::Truncated { .. } | Error::NotAPool { .. }),
            "{n}: {e}"
        );
    }
}

#[test]
fn every_header_byte_flip_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(make_once(dir.path())).unwrap();
    for i in 0..172 {
        let mut b = good.clone();
        b[i] ^= 0x04;
        let p = dir.path().join("flip.pool");
        std::fs::write(&p, &b).unwrap();
        let e = open(&p)
            .err()
            .unwrap_or_else(|| panic!("flip at {i} opened"));
        assert!(
            matches!(e, Error::ChecksumMismatch { .. } | Error::NotAPool { .. }),
            "flip at {i}: {e}"
        );
    }
}

#[test]
fn foreign_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("foreign.pool");
    std::fs::write(&p, vec![0x5a; 8 << 20]).unwrap();
    let e = open(&p).err().unwrap();
    assert!(matches!(e, Error::NotAPool { .. }), "{e}");
    assert!(e.to_string().contains("not a rewind pool"));
}

#[test]
fn wrong_layout_name() {
    let dir = tempfile::tempdir().unwrap();
    let p = make_once(dir.path());
    let e = Pool::open(&p, "other", &OpenOptions::default())
        .err()
        .unwrap();
    assert!(matches!(e, Error::LayoutMismatch { .. }), "{e}");
}

#[test]
fn create_refuses_existing_file_and_bad_config() {
    let dir = tempfile::tempdir().unwrap();
    let p = make_once(dir.path());
    let e = Pool::create(&p, "bad-files", 4 << 20, &PoolConfig::default())
        .err()
        .unwrap();
    assert!(matches!(e, Error::Io { .. }), "{e}");
    let q = dir.path().join("tiny.pool");
    let e = Pool::create(&q, "x", 4096, &PoolConfig::default())
        .err()
        .unwrap();
    assert!(matches!(e, Error::InvalidConfig { .. }), "{e}");
    assert!(!q.exists(), "a refused create leaves no file");
    let e = Pool::create(&q, "", 4 << 20, &PoolConfig::default())
        .err()
        .unwrap();
    assert!(matches!(e, Error::InvalidConfig { .. }), "{e}");
    // Sizes that overflow any arithmetic are refused, not a panic or a
    // misleading header error.
    for (size, log, cells) in [
        (4 << 20, u64::MAX, 16),
        (u64::MAX, u64::MAX, 16),
        (4 << 20, u64::MAX / 2, 2048),
    ] {
        let cfg = PoolConfig::default().log_size(log).bucket_cells(cells);
        let e = Pool::create(&q, "x", size, &cfg).err().unwrap();
        assert!(matches!(e, Error::InvalidConfig { .. }), "{e}");
        assert!(!q.exists(), "a refused create leaves no file");
    }
    let e = Pool::create(&q, "x", 4 << 20, &PoolConfig::default().bucket_cells(4096))
        .err()
        .unwrap();
    assert!(
        matches!(
            e,
            Error::InvalidConfig {
                what: "bucket cells",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn damaged_log_record_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.pool");
    let cfg = PoolConfig::default()
        .backend(Backend::Msync)
        .policy(rewind::Policy::NoForce);
    let pool = Pool::create(&path, "bad-files", 4 << 20, &cfg).unwrap();
    pool.transaction(|tx| {
        let r: PPtr<[u64; 4]> = tx.root()?;
        tx.write(r, &[5, 6, 7, 8])
    })
    .unwrap();
    // No-force keeps the records: damage one record's payload.
    let log_off = pool.layout().log_off;
    let body = pool.layout().body_start();
    // A crash, not a clean close (which would checkpoint the log away).
    pool.crash();
    let mut b = std::fs::read(&path).unwrap();
    let rec = (log_off + body) as usize;
    b[rec + 50] ^= 0xff;
    std::fs::write(&path, &b).unwrap();
    let e = open(&path).err().unwrap();
    assert!(
        matches!(
            e,
            Error::ChecksumMismatch {
                what: "log record",
                ..
            }
        ),
        "{e}"
    );
    let report = rewind::inspect::check(&path).unwrap();
    assert!(!report.is_ok(), "{report}");
}

#[test]
fn writes_outside_the_heap_are_refused() {
    let pool = Pool::create_sim("x", 4 << 20, &PoolConfig::default()).unwrap();
    for off in [0u64, 100, 4096, pool.layout().log_off, u64::MAX - 3] {
        let e = pool
            .transaction(|tx| tx.write_bytes(off, &[1, 2, 3, 4]))
            .err()
            .unwrap();
        match off {
            0 => assert!(matches!(e, Error::NullPointer { len: 4 }), "{off}: {e}"),
            _ => assert!(matches!(e, Error::NotInHeap { .. }), "{off}: {e}"),
        }
    }
    let e = pool
        .transaction(|tx| tx.free(PPtr::<u64>::from_offset(12345)))
        .err()
        .unwrap();
    assert!(matches!(e, Error::InvalidFree { .. }), "{e}");
    let e = pool
        .transaction(|tx| tx.read_bytes(u64::MAX - 1, &mut [0; 4]))
        .err()
        .unwrap();
    assert!(matches!(e, Error::NotInHeap { .. }), "{e}");
}

#[test]
fn double_free_is_refused() {
    let pool = Pool::create_sim("x", 4 << 20, &PoolConfig::default()).unwrap();
    let p = pool.transaction(|tx| tx.alloc::<u64>()).unwrap();
    pool.transaction(|tx| tx.free(p)).unwrap();
    let e = pool.transaction(|tx| tx.free(p)).err().unwrap();
    assert!(matches!(e, Error::InvalidFree { .. }), "{e}");
}

#[test]
fn out_of_memory_and_log_full_are_errors() {
    // Force: 20,000 UPDATE records (old and new bytes) outgrow the log and
    // the heap it grows into.
    let cfg = PoolConfig::default()
        .policy(Policy::Force)
        .log_size(64 << 10);
    let pool = Pool::create_sim("x", 4 << 20, &cfg).unwrap();
    let e = pool
        .transaction(|tx| tx.alloc_bytes(1 << 30))
        .err()
        .unwrap();
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
    let arr = pool
        .transaction(|tx| tx.alloc_array::<u64>(20_000))
        .unwrap();
    let e = pool
        .transaction(|tx| {
            for i in 0..20_000 {
                tx.write(arr.at(i), &i)?;
            }
            Ok::<_, Error>(())
        })
        .err()
        .unwrap();
    assert!(matches!(e, Error::LogFull { .. }), "{e}");
    // The failed transaction rolled back and the pool still works.
    assert_eq!(pool.read(arr.at(5)).unwrap(), 0);
    pool.transaction(|tx| tx.write(arr.at(5), &5)).unwrap();
    assert_eq!(pool.read(arr.at(5)).unwrap(), 5);
}
