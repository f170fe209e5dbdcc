//! Damaged WAL pools handed to the VFS: each must fail the open with
//! `SQLITE_CANTOPEN` and a reason in `last_error`, never abort the process
//! (a panic in a VFS callback cannot unwind into SQLite) nor open with the
//! committed frames silently dropped.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

const VFS: &str = "rewind-hostile";

mod common;

fn vfs() {
    common::register_once(VFS, &rewind_sqlite::Config::default().pool_size(8 << 20));
}

/// A database whose 40 committed transactions are all in its WAL pool (the
/// files copied while the connection had them open, as a crash leaves
/// them): the database file and the pool's bytes.
fn crashed_db(dir: &Path) -> (Vec<u8>, Vec<u8>) {
    vfs();
    let path = dir.join("src.db");
    let c = Connection::open_with_flags_and_vfs(&path, OpenFlags::default(), VFS).unwrap();
    c.pragma_update(None, "journal_mode", "WAL").unwrap();
    c.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
    c.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
        .unwrap();
    for i in 0..40 {
        c.execute("INSERT INTO t(v) VALUES (?1)", [vec![i as u8; 3000]])
            .unwrap();
    }
    let db = std::fs::read(&path).unwrap();
    let pool = std::fs::read(rewind_sqlite::pool_path(&dir.join("src.db-wal"))).unwrap();
    (db, pool)
}

/// Writes the crashed database as `name`.db, with `damage` applied to its
/// pool through the pool's own API (the root object's bytes at `off`).
fn damaged(dir: &Path, name: &str, files: &(Vec<u8>, Vec<u8>), off: u64, bytes: &[u8]) -> PathBuf {
    copy_with(dir, name, files, |_, root| (root + off, bytes.to_vec()))
}

/// Writes the crashed database as `name`.db, with every bit of the root's
/// byte at `off` flipped. (A random byte, a salt's or the CRC's, overwritten
/// with a constant was no damage in 1 run of 256: it held that constant
/// already, and the copy opened whole, failing the test.)
fn flipped(dir: &Path, name: &str, files: &(Vec<u8>, Vec<u8>), off: u64) -> PathBuf {
    copy_with(dir, name, files, |p, root| {
        let mut b = [0u8; 1];
        p.read_bytes(root + off, &mut b).unwrap();
        (root + off, vec![!b[0]])
    })
}

/// Writes the crashed database as `name`.db, with `poke(pool, root)`'s
/// bytes written at its offset in the pool through the pool's own API.
fn copy_with(
    dir: &Path,
    name: &str,
    files: &(Vec<u8>, Vec<u8>),
    poke: impl FnOnce(&rewind::Pool, u64) -> (u64, Vec<u8>),
) -> PathBuf {
    let path = dir.join(format!("{name}.db"));
    let pool = rewind_sqlite::pool_path(&dir.join(format!("{name}.db-wal")));
    std::fs::write(&path, &files.0).unwrap();
    std::fs::write(&pool, &files.1).unwrap();
    let p = rewind::Pool::open(
        &pool,
        rewind_sqlite::LAYOUT,
        &rewind::OpenOptions::default(),
    )
    .unwrap();
    let root = p.root::<[u8; 128]>().unwrap().unwrap().offset();
    let (at, bytes) = poke(&p, root);
    p.transaction(|tx| tx.write_bytes(at, &bytes)).unwrap();
    p.close().unwrap();
    path
}

fn open_and_count(path: &Path) -> Result<i64, String> {
    vfs();
    Connection::open_with_flags_and_vfs(path, OpenFlags::default(), VFS)
        .and_then(|c| c.query_row("SELECT count(*) FROM t", [], |r| r.get(0)))
        .map_err(|e| format!("{e} / {}", rewind_sqlite::last_error().unwrap_or_default()))
}

#[test]
fn the_undamaged_copy_opens_with_every_commit() {
    let dir = tempfile::tempdir().unwrap();
    let files = crashed_db(dir.path());
    // Rewriting the generation with its own value changes nothing.
    let p = damaged(dir.path(), "same", &files, 8, &2u64.to_le_bytes());
    assert_eq!(open_and_count(&p), Ok(40));
}

/// Root fields (see `docs/design.md`: magic 0, generation 8, head 16, block
/// size 24, has-header 32, SQLite's WAL header 40..72, reclaim chain 72).
#[test]
fn a_damaged_root_is_an_error_never_an_abort_or_a_silent_loss() {
    let dir = tempfile::tempdir().unwrap();
    let files = crashed_db(dir.path());
    let cases: &[(&str, u64, &[u8])] = &[
        ("no-head", 16, &0u64.to_le_bytes()),
        ("block-size-0", 24, &0u64.to_le_bytes()),
        ("block-size-32", 24, &32u64.to_le_bytes()),
        ("block-size-100", 24, &100u64.to_le_bytes()),
        ("block-size-huge", 24, &(1u64 << 40).to_le_bytes()),
        ("has-header-2", 32, &2u64.to_le_bytes()),
        // SQLite's header: page size 0, 3, and another valid one (whose
        // checksum then fails); a flipped salt; a flipped magic.
        ("page-size-0", 48, &0u32.to_be_bytes()),
        ("page-size-3", 48, &3u32.to_be_bytes()),
        ("page-size-1024", 48, &1024u32.to_be_bytes()),
        ("magic", 40, &[0x00]),
    ];
    let salt = flipped(dir.path(), "salt", &files, 56);
    let cases = cases
        .iter()
        .map(|&(name, off, bytes)| (name, damaged(dir.path(), name, &files, off, bytes)))
        .chain([("salt", salt)]);
    for (name, p) in cases {
        let e = open_and_count(&p).expect_err(name);
        assert!(
            e.starts_with("unable to open database file") && e.contains("damaged"),
            "{name}: {e}"
        );
    }
}

/// The root's generation (offset 8): the records of the crashed database
/// are of generation 2. A generation older than a record of the head
/// block's, 0, or one a restart cannot move up is damage: before, 1 opened
/// an empty database (every commit dropped without a word) and `u64::MAX`
/// opened, then aborted the process at the next checkpoint (an overflow
/// panic inside a VFS callback).
#[test]
fn a_damaged_generation_is_an_error_never_an_abort_or_a_silent_loss() {
    let dir = tempfile::tempdir().unwrap();
    let files = crashed_db(dir.path());
    for (name, gen) in [("gen-1", 1u64), ("gen-0", 0), ("gen-max", u64::MAX)] {
        let p = damaged(dir.path(), name, &files, 8, &gen.to_le_bytes());
        let e = open_and_count(&p).expect_err(name);
        assert!(
            e.starts_with("unable to open database file") && e.contains("generation"),
            "{name}: {e}"
        );
    }
}

/// One flipped bit in a committed transaction's record, with committed
/// transactions after it: a crash tears only the last commit, so that is
/// damage, an error, not a log silently ended before it (as SQLite's own
/// WAL would end at the first frame that fails its checksum).
#[test]
fn a_flipped_bit_in_a_committed_record_is_an_error_not_a_shorter_log() {
    let dir = tempfile::tempdir().unwrap();
    let files = crashed_db(dir.path());
    for (name, at) in [("early", 1000u64), ("later", 5000)] {
        // A bit of the head block's byte `at` flipped.
        let path = copy_with(dir.path(), name, &files, |p, root| {
            let mut head = [0u8; 8];
            p.read_bytes(root + 16, &mut head).unwrap();
            let byte = u64::from_le_bytes(head) + at;
            let mut b = [0u8; 1];
            p.read_bytes(byte, &mut b).unwrap();
            (byte, vec![b[0] ^ 0x10])
        });
        let r = open_and_count(&path);
        assert!(
            r.as_ref().is_err_and(|e| e.contains("damaged")),
            "{name}: {r:?}"
        );
    }
}

/// Root damage no range check can see: a generation raised (the records
/// are of generation 2, and a restart leaves a generation above its head
/// block's records too), the header flag cleared, the reclaim chain or
/// the root's crc itself changed. The root's crc finds each: before it, a
/// raised generation or a cleared flag opened an empty WAL, every commit
/// dropped without a word ("no such table").
#[test]
fn a_raised_generation_or_a_cleared_header_flag_is_an_error_not_an_empty_wal() {
    let dir = tempfile::tempdir().unwrap();
    let files = crashed_db(dir.path());
    let cases: &[(&str, u64, &[u8])] = &[
        ("gen-3", 8, &3u64.to_le_bytes()),
        ("gen-100", 8, &100u64.to_le_bytes()),
        ("has-header-0", 32, &0u64.to_le_bytes()),
        ("reclaim-0x40", 72, &0x40u64.to_le_bytes()),
    ];
    let crc = flipped(dir.path(), "crc", &files, 80);
    let cases = cases
        .iter()
        .map(|&(name, off, bytes)| (name, damaged(dir.path(), name, &files, off, bytes)))
        .chain([("crc", crc)]);
    for (name, p) in cases {
        let e = open_and_count(&p).expect_err(name);
        assert!(
            e.starts_with("unable to open database file") && e.contains("checksum"),
            "{name}: {e}"
        );
    }
}
