//! SQLite workloads probed as a user of SQLite would, each statement run
//! on stock SQLite (a plain file) and through the VFS: schema changes
//! (ALTER TABLE, DROP, indexes built on full tables, views, ANALYZE,
//! VACUUM INTO), values of megabytes and incremental blob I/O, the
//! pragmas users set, connections of one process beside a writer, a
//! second process, every `Config` variant, many small transactions, and
//! large transactions that spill and roll back (whole or to a savepoint;
//! the one defect found here, a `COMMIT` failing after a `ROLLBACK TO`,
//! is kept as a named test). After every step the files as they are (a
//! crash image: the database and its pool copied while the connection is
//! open) are opened through the VFS elsewhere and must hold exactly stock
//! SQLite's committed rows.
//!
//! Deterministic by seeds and counts; busy handlers wait as long as it
//! takes, and no outcome depends on how long a step takes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, DatabaseName, OpenFlags};

mod common;
use common::{run, wal};

const VFS: &str = "rewind-sql-probe";

fn cfg() -> rewind_sqlite::Config {
    rewind_sqlite::Config::default().pool_size(4 << 20)
}

/// A connection through the VFS (or stock SQLite), not yet in WAL mode.
fn connect(path: &Path, ours: bool) -> Connection {
    common::connect(VFS, &cfg(), path, ours)
}

/// The schema, the header fields users set, and every table's rows in a
/// stable order, as text.
fn dump(c: &Connection) -> String {
    let mut out = run(
        c,
        "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY type, name",
    );
    for p in [
        "user_version",
        "application_id",
        "page_size",
        "page_count",
        "freelist_count",
        "journal_mode",
    ] {
        out.push_str(&format!("{p}: {}", run(c, &format!("PRAGMA {p}"))));
    }
    let tables: Vec<String> = c
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    for t in tables {
        let n = c
            .prepare(&format!("SELECT * FROM \"{t}\""))
            .unwrap()
            .column_count();
        let order: Vec<String> = (1..=n).map(|i| i.to_string()).collect();
        out.push_str(&format!("== {t}\n"));
        out.push_str(&run(
            c,
            &format!("SELECT * FROM \"{t}\" ORDER BY {}", order.join(", ")),
        ));
    }
    out
}

/// Asserts two dumps are the same, showing the first line that differs.
#[track_caller]
fn same(a: &str, b: &str, what: &str) {
    if a == b {
        return;
    }
    let (la, lb): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    let i = (0..la.len().max(lb.len()))
        .find(|&i| la.get(i) != lb.get(i))
        .unwrap_or(0);
    panic!(
        "{what}: line {i} differs ({} and {} lines)\n  left: {:?}\n right: {:?}",
        la.len(),
        lb.len(),
        la.get(i),
        lb.get(i)
    );
}

/// The database and its pool copied as they are (a crash image) into a
/// new folder under `dir`; the copy's database path.
fn crash_copy(dir: &Path, db: &Path, n: usize) -> PathBuf {
    let to = dir.join(format!("crash{n}"));
    std::fs::create_dir(&to).unwrap();
    let name = db.file_name().unwrap().to_str().unwrap();
    for f in [name.to_string(), format!("{name}-wal.rewind")] {
        let from = db.with_file_name(&f);
        if from.exists() {
            std::fs::copy(&from, to.join(&f)).unwrap();
        }
    }
    to.join(name)
}

/// Opens the crash image of `db` through the VFS and checks it holds
/// `want` (a [`dump`]) and passes `integrity_check`.
fn recovers(dir: &Path, db: &Path, n: usize, want: &str, what: &str) {
    let copy = crash_copy(dir, db, n);
    let c = connect(&copy, true);
    same(&dump(&c), want, &format!("{what}: the crash image"));
    assert_eq!(
        run(&c, "PRAGMA integrity_check"),
        "T[111, 107]|\n",
        "{what}"
    );
}

/// A result with a checkpoint's counts cut off: only whether it was
/// blocked (how many frames the WAL holds depends on when transactions
/// spilled, and the bundled SQLite's page cache is shared by the
/// process's connections).
fn cut_checkpoint(sql: &str, mut out: String) -> String {
    if sql.contains("wal_checkpoint") {
        out.truncate(out.find('|').unwrap_or(out.len()));
    }
    out
}

/// Schema changes of every kind, one step at a time, on stock SQLite and
/// through the VFS: the same results, the same tables (schema, header
/// fields, rows), and after every step the crash image recovers them.
/// Ends with VACUUM INTO, whose output opens the same on both sides.
#[test]
fn schema_changes_match_stock_and_every_crash_image_recovers_them() {
    let dir = tempfile::tempdir().unwrap();
    let (sp, op) = (dir.path().join("stock.db"), dir.path().join("ours.db"));
    let (stock, ours) = (connect(&sp, false), connect(&op, true));
    for c in [&stock, &ours] {
        c.execute_batch("PRAGMA page_size = 8192").unwrap();
        wal(c);
        c.execute_batch("PRAGMA foreign_keys = ON; PRAGMA wal_autocheckpoint = 50")
            .unwrap();
    }
    let steps: &[&str] = &[
        "CREATE TABLE a(id INTEGER PRIMARY KEY, name TEXT, v BLOB, n INTEGER)",
        "CREATE TABLE b(k TEXT PRIMARY KEY, a_id INTEGER REFERENCES a(id) ON DELETE SET NULL, x REAL) WITHOUT ROWID",
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 3000)
         INSERT INTO a(id, name, v, n) SELECT i, 'name ' || (i * 7919 % 3001), CAST(printf('%.*c', i % 900, 'v') AS BLOB), i % 37 FROM s",
        "CREATE INDEX a_name ON a(name)",
        "CREATE INDEX a_n ON a(n, id DESC) WHERE n > 3",
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 2000)
         INSERT INTO b SELECT 'k' || i, i * 3 % 3000 + 1, i / 7.0 FROM s",
        "CREATE UNIQUE INDEX b_x ON b(x, k)",
        "CREATE VIEW big AS SELECT a.id, a.name, count(b.k) AS refs FROM a LEFT JOIN b ON b.a_id = a.id GROUP BY a.id HAVING refs > 0",
        "SELECT count(*), sum(refs), max(name) FROM big",
        "CREATE TABLE log(seq INTEGER PRIMARY KEY AUTOINCREMENT, what TEXT)",
        "CREATE TRIGGER a_upd AFTER UPDATE OF name ON a BEGIN INSERT INTO log(what) VALUES (old.name || ' -> ' || new.name); END",
        "UPDATE a SET name = name || '!' WHERE id % 97 = 0",
        "ALTER TABLE a ADD COLUMN extra INTEGER DEFAULT 7",
        "UPDATE a SET extra = id * 2 WHERE id % 3 = 0",
        "ALTER TABLE a RENAME COLUMN name TO label",
        "SELECT sql FROM sqlite_schema WHERE name IN ('a', 'a_name', 'big', 'a_upd') ORDER BY name",
        "ALTER TABLE b RENAME TO bb",
        "DELETE FROM a WHERE id % 5 = 0",
        "SELECT count(*), count(a_id) FROM bb",
        "ALTER TABLE a DROP COLUMN extra",
        "ANALYZE",
        "SELECT * FROM sqlite_stat1 ORDER BY tbl, idx",
        "PRAGMA user_version = 42",
        "PRAGMA application_id = 1234567",
        "PRAGMA wal_checkpoint(PASSIVE)",
        "DROP INDEX a_name",
        "DROP VIEW big",
        "DROP TABLE bb",
        "SELECT count(*) FROM sqlite_schema",
        "PRAGMA freelist_count",
        "VACUUM",
        "PRAGMA freelist_count",
        "PRAGMA wal_checkpoint(TRUNCATE)",
        "CREATE TABLE c AS SELECT id, label, length(v) AS len FROM a WHERE n < 5",
        "CREATE INDEX c_len ON c(len)",
        "REINDEX",
        "BEGIN; DELETE FROM c; DROP TABLE a; ROLLBACK",
        "BEGIN; DROP TABLE log; CREATE TABLE log(x); INSERT INTO log VALUES (1); COMMIT",
        "PRAGMA wal_checkpoint(FULL)",
        "PRAGMA integrity_check",
        "PRAGMA foreign_key_check",
    ];
    for (i, sql) in steps.iter().enumerate() {
        let (a, b) = if sql.contains("; ") {
            let a = stock.execute_batch(sql).map_err(|e| e.to_string());
            let b = ours.execute_batch(sql).map_err(|e| e.to_string());
            (format!("{a:?}"), format!("{b:?}"))
        } else {
            (
                cut_checkpoint(sql, run(&stock, sql)),
                cut_checkpoint(sql, run(&ours, sql)),
            )
        };
        assert_eq!(a, b, "step {i}: {sql}");
        let want = dump(&stock);
        same(&want, &dump(&ours), &format!("step {i}: {sql}"));
        recovers(dir.path(), &op, i, &want, &format!("step {i}: {sql}"));
    }
    // VACUUM INTO a new file, on each side; each output opens the same
    // through stock SQLite and through the VFS.
    let mut outs = Vec::new();
    for (c, name) in [(&stock, "stock-into.db"), (&ours, "ours-into.db")] {
        let into = dir.path().join(name);
        c.execute("VACUUM INTO ?1", [into.to_str().unwrap()])
            .unwrap();
        outs.push(into);
    }
    // (VACUUM INTO leaves out an empty sqlite_sequence: the copy's
    // reference is stock SQLite's copy, read by stock SQLite.)
    let reference = dump(&connect(&outs[0], false));
    for into in &outs {
        for vfs in [false, true] {
            let c = connect(into, vfs);
            assert_eq!(
                run(&c, "PRAGMA integrity_check"),
                "T[111, 107]|\n",
                "{}",
                into.display()
            );
            same(
                &dump(&c),
                &reference,
                &format!("{} via vfs {vfs}", into.display()),
            );
        }
    }
    let want = dump(&stock);
    // And the source, reopened.
    drop(ours);
    let ours = connect(&op, true);
    same(&dump(&ours), &want, "reopened");
}

/// A pattern of `len` bytes, different for each `seed`.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Values of one to several megabytes (long overflow chains), as TEXT and
/// BLOB, written whole and through incremental blob I/O
/// (`sqlite3_blob_write` into a `zeroblob`), read back in pieces, updated,
/// rolled back and deleted, on stock SQLite and through the VFS: the same
/// bytes, and every crash image recovers them.
#[test]
fn megabyte_values_and_incremental_blob_io_match_stock() {
    use std::io::{Read, Seek, SeekFrom, Write};
    let dir = tempfile::tempdir().unwrap();
    let (sp, op) = (dir.path().join("stock.db"), dir.path().join("ours.db"));
    let (stock, ours) = (connect(&sp, false), connect(&op, true));
    for c in [&stock, &ours] {
        wal(c);
        c.execute_batch(
            "PRAGMA cache_size = 50;
             CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB, s TEXT);",
        )
        .unwrap();
    }
    let mut step = 0;
    let mut check = |what: &str| {
        let want = dump(&stock);
        same(&want, &dump(&ours), what);
        recovers(dir.path(), &op, step, &want, what);
        step += 1;
    };
    const MB: usize = 1 << 20;
    for c in [&stock, &ours] {
        c.execute("INSERT INTO t VALUES (1, ?1, NULL)", [pattern(1, MB + 17)])
            .unwrap();
        c.execute(
            "INSERT INTO t VALUES (2, NULL, printf('%.*c', ?1, 'q'))",
            [3 * MB],
        )
        .unwrap();
        c.execute("INSERT INTO t VALUES (3, zeroblob(?1), 'z')", [2 * MB + 5])
            .unwrap();
    }
    check("inserted");
    // Incremental writes into the zeroblob, at unaligned offsets across
    // pages, in one transaction each.
    for c in [&stock, &ours] {
        let mut b = c.blob_open(DatabaseName::Main, "t", "v", 3, false).unwrap();
        for (k, at) in [0usize, 4095, 70_001, MB - 3, 2 * MB - 1000]
            .iter()
            .enumerate()
        {
            b.seek(SeekFrom::Start(*at as u64)).unwrap();
            b.write_all(&pattern(10 + k as u64, 5000.min(2 * MB + 5 - at)))
                .unwrap();
        }
    }
    check("blob writes");
    // Read back in pieces: the same bytes on both sides.
    let read = |c: &Connection| {
        let mut b = c.blob_open(DatabaseName::Main, "t", "v", 3, true).unwrap();
        let mut all = Vec::new();
        let mut piece = vec![0u8; 77_777];
        loop {
            let n = b.read(&mut piece).unwrap();
            if n == 0 {
                break;
            }
            all.extend_from_slice(&piece[..n]);
        }
        all
    };
    let got = read(&ours);
    assert_eq!(got.len(), 2 * MB + 5);
    assert!(got == read(&stock), "the blob read in pieces");
    // Blob writes inside a transaction that rolls back leave nothing;
    // inside one that commits, with a savepoint rolled back within.
    for c in [&stock, &ours] {
        c.execute_batch("BEGIN").unwrap();
        {
            let mut b = c.blob_open(DatabaseName::Main, "t", "v", 1, false).unwrap();
            b.write_all(&pattern(99, MB)).unwrap();
        }
        c.execute_batch("ROLLBACK").unwrap();
        c.execute_batch("BEGIN; SAVEPOINT a").unwrap();
        {
            let mut b = c.blob_open(DatabaseName::Main, "t", "v", 1, false).unwrap();
            b.seek(SeekFrom::Start(1000)).unwrap();
            b.write_all(&pattern(98, 300_000)).unwrap();
        }
        c.execute_batch("ROLLBACK TO a").unwrap();
        {
            let mut b = c.blob_open(DatabaseName::Main, "t", "v", 1, false).unwrap();
            b.seek(SeekFrom::Start(500_000)).unwrap();
            b.write_all(&pattern(97, 300_000)).unwrap();
        }
        c.execute_batch("RELEASE a; COMMIT").unwrap();
    }
    check("blob writes rolled back and committed");
    // Updates that grow and shrink the values, several megabytes in one
    // transaction, then a checkpoint and deletes.
    for c in [&stock, &ours] {
        c.execute_batch(
            "BEGIN;
             UPDATE t SET s = s || printf('%.*c', 1500000, 'r') WHERE id = 2;
             UPDATE t SET v = substr(v, 1, 100000) WHERE id = 1;
             INSERT INTO t SELECT 4, v || v, upper(s) FROM t WHERE id = 3;
             COMMIT;",
        )
        .unwrap();
    }
    check("updated");
    for c in [&stock, &ours] {
        let busy: i64 = c
            .query_row("PRAGMA wal_checkpoint(RESTART)", [], |r| r.get(0))
            .unwrap();
        assert_eq!(busy, 0);
        c.execute_batch("DELETE FROM t WHERE id IN (2, 3)").unwrap();
    }
    check("deleted");
    for sql in [
        "SELECT id, length(v), length(s), hex(substr(v, 999990, 20)) FROM t ORDER BY id",
        "PRAGMA integrity_check",
    ] {
        assert_eq!(run(&stock, sql), run(&ours, sql), "{sql}");
    }
    drop(ours);
    let ours = connect(&op, true);
    same(&dump(&stock), &dump(&ours), "reopened");
}

/// A statement's outcome as text: its rows, or its error's code.
fn outcome(c: &Connection, sql: &str) -> String {
    let r = c.prepare(sql).and_then(|mut st| {
        let n = st.column_count();
        let mut rows = st.query([])?;
        let mut out = String::new();
        while let Some(row) = rows.next()? {
            for i in 0..n {
                out.push_str(&format!("{:?}|", row.get_ref(i)?));
            }
            out.push('\n');
        }
        Ok(out)
    });
    match r {
        Ok(s) => s,
        Err(e) => format!(
            "error {:?} ({:?})",
            e.sqlite_error_code(),
            e.sqlite_error().map(|e| e.extended_code)
        ),
    }
}

/// The pragmas users set and read, and two connections of one process
/// beside each other (a reader's snapshot while the other commits, a
/// writer's lock against another writer without a busy handler, a stale
/// snapshot's upgrade, `data_version`, checkpoints blocked by a reader,
/// memory-mapped reads), on stock SQLite and through the VFS: the same
/// outcomes, error codes included; then every crash image recovers the
/// committed rows.
#[test]
fn pragmas_and_connections_side_by_side_match_stock() {
    let dir = tempfile::tempdir().unwrap();
    let mut results = Vec::new();
    for ours in [false, true] {
        let path = dir.path().join(if ours { "ours.db" } else { "stock.db" });
        let a = connect(&path, ours);
        let mut out = String::new();
        let mut both = |a: &Connection, b: &Connection, sqls: &[(bool, &str)]| {
            for (on_a, sql) in sqls {
                let c = if *on_a { a } else { b };
                out.push_str(&format!(
                    "{} {sql}: {}",
                    if *on_a { 'A' } else { 'B' },
                    outcome(c, sql)
                ));
            }
        };
        // Settings before the database exists, and their values read back.
        both(
            &a,
            &a,
            &[
                (true, "PRAGMA page_size = 16384"),
                (true, "PRAGMA journal_mode"),
                (true, "PRAGMA journal_mode = WAL"),
                (true, "PRAGMA journal_mode"),
                (true, "PRAGMA main.journal_mode"),
                (true, "PRAGMA page_size"),
                (true, "PRAGMA synchronous = OFF"),
                (true, "PRAGMA synchronous"),
                (true, "PRAGMA synchronous = EXTRA"),
                (true, "PRAGMA synchronous"),
                (true, "PRAGMA synchronous = NORMAL"),
                (true, "PRAGMA cache_size = -512"),
                (true, "PRAGMA cache_size"),
                (true, "PRAGMA wal_autocheckpoint = 0"),
                (true, "PRAGMA wal_autocheckpoint"),
                (true, "PRAGMA journal_size_limit = 100000"),
                (true, "PRAGMA mmap_size = 8388608"),
                (
                    true,
                    "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT, pad BLOB)",
                ),
                (
                    true,
                    "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 400)
                        INSERT INTO t SELECT i, 'v' || i, zeroblob(i * 37 % 5000) FROM s",
                ),
                (true, "PRAGMA user_version = 7"),
                (true, "PRAGMA user_version"),
                (true, "PRAGMA schema_version"),
                (true, "PRAGMA wal_checkpoint(PASSIVE)"),
                (true, "PRAGMA wal_checkpoint(PASSIVE)"),
                (true, "INSERT INTO t VALUES (1000, 'after', x'00')"),
                (true, "PRAGMA wal_checkpoint(FULL)"),
                (true, "PRAGMA wal_checkpoint(TRUNCATE)"),
                (true, "PRAGMA integrity_check"),
                (true, "PRAGMA quick_check"),
            ],
        );
        let b = connect(&path, ours);
        // No busy handlers: a lock a connection cannot take is
        // SQLITE_BUSY at once.
        a.busy_handler(None::<fn(i32) -> bool>).unwrap();
        b.busy_handler(None::<fn(i32) -> bool>).unwrap();
        b.execute_batch("PRAGMA mmap_size = 8388608").unwrap();
        both(
            &a,
            &b,
            &[
                (false, "PRAGMA journal_mode"),
                (false, "PRAGMA user_version"),
                (false, "PRAGMA data_version"),
                (true, "PRAGMA data_version"),
                // A reader's snapshot while A commits.
                (false, "BEGIN"),
                (false, "SELECT count(*), sum(length(pad)) FROM t"),
                (
                    true,
                    "INSERT INTO t VALUES (1001, 'while B reads', zeroblob(9000))",
                ),
                (true, "UPDATE t SET v = v || '+' WHERE id % 10 = 0"),
                (false, "SELECT count(*), sum(length(pad)), max(v) FROM t"),
                // A checkpoint cannot pass B's snapshot.
                (true, "PRAGMA wal_checkpoint(TRUNCATE)"),
                (true, "PRAGMA wal_checkpoint(RESTART)"),
                // B's stale snapshot cannot become a write.
                (false, "INSERT INTO t VALUES (2000, 'stale', NULL)"),
                (false, "COMMIT"),
                (false, "PRAGMA data_version"),
                (true, "PRAGMA data_version"),
                (false, "SELECT count(*), sum(length(pad)), max(v) FROM t"),
                // A writer holds the write lock: B cannot write or begin
                // an immediate transaction, but reads the last commit.
                (true, "BEGIN IMMEDIATE"),
                (true, "DELETE FROM t WHERE id < 100"),
                (false, "INSERT INTO t VALUES (2001, 'blocked', NULL)"),
                (false, "BEGIN IMMEDIATE"),
                (false, "SELECT count(*) FROM t"),
                (false, "PRAGMA wal_checkpoint(PASSIVE)"),
                (true, "COMMIT"),
                (false, "INSERT INTO t VALUES (2002, 'after', NULL)"),
                (true, "SELECT count(*), max(id) FROM t"),
                // Exclusive transactions in WAL mode.
                (false, "BEGIN EXCLUSIVE"),
                (true, "SELECT count(*) FROM t"),
                (true, "INSERT INTO t VALUES (2003, 'blocked', NULL)"),
                (false, "ROLLBACK"),
                (true, "PRAGMA wal_checkpoint(TRUNCATE)"),
                (false, "PRAGMA schema_version"),
                (true, "CREATE INDEX tv ON t(v)"),
                (false, "SELECT count(*) FROM t WHERE v > 'v5'"),
                (false, "PRAGMA schema_version"),
                (true, "PRAGMA integrity_check"),
            ],
        );
        assert!(!out.contains("error Some(Unknown)"), "{out}");
        // One connection closed, one left open (a crash image of it).
        drop(b);
        let copy = crash_copy(dir.path(), &path, if ours { 1 } else { 0 });
        let want = dump(&a);
        drop(a);
        let c = connect(&path, ours);
        same(&dump(&c), &want, "reopened");
        out.push_str(&outcome(&c, "PRAGMA journal_mode"));
        if ours {
            let c = connect(&copy, true);
            same(&dump(&c), &want, "the crash image");
        }
        results.push(out);
    }
    same(&results[0], &results[1], "stock and the VFS");
}

/// Ways of opening a database users reach for, on stock SQLite and
/// through the VFS: one file attached twice to a connection, URI names
/// (shared cache, read-only), a database whose own name ends in `-wal`,
/// `:memory:` and temporary databases, and the backup API into and out
/// of a database in WAL mode. The same outcomes, and the files recover
/// the same rows.
#[test]
fn attach_uris_odd_names_and_backups_match_stock() {
    let dir = tempfile::tempdir().unwrap();
    let mut results = Vec::new();
    for ours in [false, true] {
        let sub = dir.path().join(if ours { "ours" } else { "stock" });
        std::fs::create_dir(&sub).unwrap();
        let mut out = String::new();
        let open_uri = |uri: &str, flags: OpenFlags| {
            let flags = flags | OpenFlags::SQLITE_OPEN_URI;
            if ours {
                common::register_once(VFS, &cfg());
                Connection::open_with_flags_and_vfs(uri, flags, VFS)
            } else {
                Connection::open_with_flags(uri, flags)
            }
        };
        // A name that ends in -wal, and a table in it.
        let odd = sub.join("data-wal");
        let c = connect(&odd, ours);
        wal(&c);
        c.execute_batch(
            "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);
             INSERT INTO t VALUES (1, 'one'), (2, 'two');",
        )
        .unwrap();
        // The same file attached a second time, written through one name
        // and read through the other.
        c.execute("ATTACH ?1 AS again", [odd.to_str().unwrap()])
            .unwrap();
        for sql in [
            "INSERT INTO again.t VALUES (3, 'three')",
            "SELECT * FROM main.t ORDER BY id",
            "BEGIN",
            "INSERT INTO main.t VALUES (4, 'four')",
            "SELECT count(*) FROM again.t",
            "COMMIT",
            "SELECT count(*) FROM again.t",
            "PRAGMA again.journal_mode",
            "PRAGMA main.wal_checkpoint(TRUNCATE)",
            "DETACH again",
        ] {
            out.push_str(&format!("{sql}: {}", outcome(&c, sql)));
        }
        // Shared cache through a URI, and a read-only URI beside a writer.
        let uri = format!("file:{}?cache=shared", odd.display());
        let s1 = open_uri(&uri, OpenFlags::default()).unwrap();
        let s2 = open_uri(&uri, OpenFlags::default()).unwrap();
        for (c, sql) in [
            (&s1, "INSERT INTO t VALUES (5, 'shared')"),
            (&s2, "SELECT count(*), max(v) FROM t"),
            (&s2, "PRAGMA journal_mode"),
        ] {
            out.push_str(&format!("{sql}: {}", outcome(c, sql)));
        }
        let ro = open_uri(
            &format!("file:{}?mode=ro", odd.display()),
            OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .unwrap();
        c.execute("INSERT INTO t VALUES (6, 'six')", []).unwrap();
        for sql in [
            "SELECT count(*), max(id) FROM t",
            "INSERT INTO t VALUES (7, 'refused')",
        ] {
            out.push_str(&format!("ro {sql}: {}", outcome(&ro, sql)));
        }
        drop((s1, s2, ro));
        // :memory: and temporary databases through the VFS: no WAL.
        for name in [":memory:", ""] {
            let m = open_uri(name, OpenFlags::default()).unwrap();
            for sql in [
                "PRAGMA journal_mode = WAL",
                "CREATE TABLE m(x)",
                "INSERT INTO m VALUES (1), (2)",
                "SELECT sum(x) FROM m",
            ] {
                out.push_str(&format!("{name:?} {sql}: {}", outcome(&m, sql)));
            }
        }
        // Backups: from the WAL database into a new file, and from a
        // plain file into a second WAL database (replacing its pages).
        let copy = sub.join("copy.db");
        {
            let mut dst = connect(&copy, ours);
            let b = rusqlite::backup::Backup::new(&c, &mut dst).unwrap();
            b.run_to_completion(7, Duration::ZERO, None).unwrap();
        }
        let dst = connect(&copy, ours);
        out.push_str(&format!("copy: {}", dump(&dst)));
        let target = sub.join("target.db");
        let mut t = connect(&target, ours);
        wal(&t);
        t.execute_batch("CREATE TABLE gone(x); INSERT INTO gone VALUES (1);")
            .unwrap();
        let src = Connection::open_in_memory().unwrap();
        src.execute_batch(
            "CREATE TABLE fresh(id INTEGER PRIMARY KEY, v BLOB);
             WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 300)
             INSERT INTO fresh SELECT i, zeroblob(i * 13) FROM s;",
        )
        .unwrap();
        {
            let b = rusqlite::backup::Backup::new(&src, &mut t).unwrap();
            b.run_to_completion(5, Duration::ZERO, None).unwrap();
        }
        let want = dump(&t);
        out.push_str(&format!("target: {want}"));
        if ours {
            for (n, db) in [(10, &target), (11, &odd)] {
                let w = dump(&connect(db, true));
                recovers(dir.path(), db, n, &w, &db.display().to_string());
            }
        }
        drop((c, dst, t));
        let t = connect(&target, ours);
        same(&dump(&t), &want, "target reopened");
        let c = connect(&odd, ours);
        out.push_str(&format!("odd reopened: {}", dump(&c)));
        results.push(out);
    }
    same(&results[0], &results[1], "stock and the VFS");
}

/// One statement of the configuration workload (`depth`: savepoints
/// open, 0 outside a transaction).
fn config_statement(r: &mut rand::rngs::SmallRng, depth: &mut u32) -> String {
    use rand::Rng;
    let k = r.gen_range(0..500);
    let len = match r.gen_range(0..8) {
        0..=4 => r.gen_range(1..400),
        5 | 6 => r.gen_range(400..20_000),
        _ => r.gen_range(20_000..200_000),
    };
    match r.gen_range(0..16) {
        0..=4 => format!(
            "INSERT OR REPLACE INTO t VALUES ({k}, CAST(printf('%.*c', {len}, char(65 + {k} % 26)) AS BLOB), {})",
            k % 17
        ),
        5 => format!("UPDATE t SET v = CAST(substr(v, 1, {len}) || 'u' AS BLOB) WHERE w = {}", k % 17),
        6 => format!("UPDATE t SET w = w + 1 WHERE id % 7 = {}", k % 7),
        7 => format!("DELETE FROM t WHERE id % 11 = {}", k % 11),
        8 => "SELECT w, count(*), sum(length(v)) FROM t GROUP BY w ORDER BY w".into(),
        9 if *depth == 0 => {
            *depth = 1;
            "BEGIN".into()
        }
        10 if *depth > 0 && *depth < 3 => {
            *depth += 1;
            format!("SAVEPOINT s{depth}")
        }
        11 if *depth > 1 => {
            let d = *depth;
            *depth -= 1;
            format!("ROLLBACK TO s{d}; RELEASE s{d}")
        }
        12 if *depth > 0 => {
            *depth = 0;
            if r.gen_ratio(1, 3) { "ROLLBACK" } else { "COMMIT" }.into()
        }
        13 if *depth == 0 => ["PRAGMA wal_checkpoint(PASSIVE)", "PRAGMA wal_checkpoint(FULL)",
                              "PRAGMA wal_checkpoint(RESTART)", "PRAGMA wal_checkpoint(TRUNCATE)"]
            [r.gen_range(0..4)]
        .into(),
        14 if *depth == 0 && r.gen_ratio(1, 4) => "VACUUM".into(),
        _ => format!("SELECT id, w, length(v), hex(substr(v, -3)) FROM t WHERE w = {} ORDER BY id", k % 17),
    }
}

/// The configurations `Config` offers beyond the default, each with a
/// workload of savepoints, values up to 200 KB, checkpoints and VACUUM
/// at the page sizes that stress it: whole-page frames
/// (`differential(false)`), the smallest block (4 KiB) under 64 KiB pages
/// (a frame spans many blocks), a pool on a disk (`Backend::Msync`), and
/// the smallest pool with large blocks (grown at once). The same results
/// as stock SQLite, and the crash image recovers the committed rows every
/// few statements.
#[test]
fn every_configuration_gives_stock_sqlites_results_and_recovers() {
    use rand::SeedableRng;
    let cases: [(&'static str, rewind_sqlite::Config, u32); 5] = [
        (
            "rewind-sql-probe-whole",
            rewind_sqlite::Config::default()
                .pool_size(4 << 20)
                .differential(false),
            4096,
        ),
        (
            "rewind-sql-probe-4k",
            rewind_sqlite::Config::default()
                .pool_size(4 << 20)
                .block_size(4096),
            65536,
        ),
        (
            "rewind-sql-probe-4k-512",
            rewind_sqlite::Config::default()
                .pool_size(4 << 20)
                .block_size(4096),
            512,
        ),
        (
            "rewind-sql-probe-msync",
            rewind_sqlite::Config::default()
                .pool_size(4 << 20)
                .backend(rewind::Backend::Msync),
            8192,
        ),
        (
            "rewind-sql-probe-tiny",
            rewind_sqlite::Config::default()
                .pool_size(1 << 20)
                .block_size(256 << 10),
            4096,
        ),
    ];
    let n: usize = std::env::var("REWIND_PROBE_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    for (seed, (name, cfg, page)) in cases.into_iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let (sp, op) = (dir.path().join("stock.db"), dir.path().join("ours.db"));
        let open_ours = || {
            common::register_once(name, &cfg);
            let c = Connection::open_with_flags_and_vfs(&op, OpenFlags::default(), name).unwrap();
            c.busy_handler(Some(|_| {
                std::thread::sleep(Duration::from_micros(200));
                true
            }))
            .unwrap();
            c
        };
        let setup = |c: &Connection| {
            c.execute_batch(&format!("PRAGMA page_size = {page}"))
                .unwrap();
            wal(c);
            c.execute_batch(
                "PRAGMA cache_size = 30; PRAGMA wal_autocheckpoint = 40;
                 CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v BLOB, w INTEGER);
                 CREATE INDEX IF NOT EXISTS tw ON t(w);",
            )
            .unwrap();
        };
        let (mut stock, mut ours) = (connect(&sp, false), open_ours());
        setup(&stock);
        setup(&ours);
        let mut r = rand::rngs::SmallRng::seed_from_u64(seed as u64 + 100);
        let mut depth = 0;
        for i in 0..n {
            let sql = config_statement(&mut r, &mut depth);
            for part in sql.split("; ") {
                let (a, b) = (
                    cut_checkpoint(part, run(&stock, part)),
                    cut_checkpoint(part, run(&ours, part)),
                );
                assert_eq!(a, b, "{name}, statement {i}: {part}");
            }
            if i % 25 == 24 && depth == 0 {
                let want = dump(&stock);
                same(&want, &dump(&ours), &format!("{name}, statement {i}"));
                let copy = crash_copy(dir.path(), &op, i);
                common::register_once(name, &cfg);
                let c =
                    Connection::open_with_flags_and_vfs(&copy, OpenFlags::default(), name).unwrap();
                same(
                    &dump(&c),
                    &want,
                    &format!("{name}, statement {i}: the crash image"),
                );
                assert_eq!(run(&c, "PRAGMA integrity_check"), "T[111, 107]|\n");
            }
            if i % 100 == 99 && depth == 0 {
                // Both reopened: a statement's change count is the
                // connection's last.
                drop((stock, ours));
                (stock, ours) = (connect(&sp, false), open_ours());
                setup(&stock);
                setup(&ours);
            }
        }
        if depth > 0 {
            stock.execute_batch("COMMIT").unwrap();
            ours.execute_batch("COMMIT").unwrap();
        }
        let want = dump(&stock);
        same(&want, &dump(&ours), name);
        drop(ours);
        same(&want, &dump(&open_ours()), &format!("{name}: reopened"));
    }
}

/// Large transactions that spill pages into the WAL (a cache of 20
/// pages) and roll back, whole or to a savepoint; connections leaked
/// without a close (`mem::forget`) beside new ones; interleaved with
/// readers holding snapshots and checkpoints of every mode. After every
/// step the crash image holds exactly stock SQLite's committed rows.
#[test]
fn spilled_rollbacks_leaked_connections_and_checkpoints_recover_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (sp, op) = (dir.path().join("stock.db"), dir.path().join("ours.db"));
    let mut step = 0;
    let (stock, ours) = (connect(&sp, false), connect(&op, true));
    for c in [&stock, &ours] {
        wal(c);
        c.execute_batch(
            "PRAGMA cache_size = 20; PRAGMA wal_autocheckpoint = 0;
             CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB, w INTEGER);
             CREATE INDEX tw ON t(w);
             INSERT INTO t VALUES (1, x'01', 1);",
        )
        .unwrap();
    }
    let mut check = |stock: &Connection, ours: &Connection, what: &str| {
        let want = dump(stock);
        same(&want, &dump(ours), what);
        recovers(dir.path(), &op, step, &want, what);
        step += 1;
    };
    check(&stock, &ours, "setup");
    let big = "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 1500)
               INSERT INTO t SELECT 100 + i, zeroblob(6000 + i), i % 9 FROM s";
    for c in [&stock, &ours] {
        // About 9 MB, spilled, then rolled back whole.
        c.execute_batch("BEGIN").unwrap();
        c.execute_batch(big).unwrap();
        c.execute_batch("ROLLBACK").unwrap();
    }
    check(&stock, &ours, "a spilled transaction rolled back");
    for c in [&stock, &ours] {
        // Committed, with a savepoint of 9 MB rolled back inside.
        c.execute_batch("BEGIN; INSERT INTO t VALUES (2, x'02', 2); SAVEPOINT s")
            .unwrap();
        c.execute_batch(big).unwrap();
        c.execute_batch("ROLLBACK TO s; RELEASE s; INSERT INTO t VALUES (3, x'03', 3); COMMIT")
            .unwrap();
    }
    check(&stock, &ours, "a savepoint rolled back inside a commit");
    for c in [&stock, &ours] {
        c.execute_batch(big).unwrap();
    }
    check(&stock, &ours, "the large transaction committed");
    // A reader holds a snapshot; a second connection is leaked.
    let (rs, ro) = (connect(&sp, false), connect(&op, true));
    for r in [&rs, &ro] {
        r.execute_batch("BEGIN").unwrap();
        r.query_row("SELECT count(*) FROM t", [], |_| Ok(()))
            .unwrap();
    }
    for (path, ours_side) in [(&sp, false), (&op, true)] {
        let leak = connect(path, ours_side);
        leak.execute("UPDATE t SET w = w + 100 WHERE id % 2 = 0", [])
            .unwrap();
        std::mem::forget(leak);
    }
    check(&stock, &ours, "a leaked connection's commit");
    for c in [&stock, &ours] {
        // A large update rolled back, then a checkpoint the reader stops
        // short.
        c.execute_batch("BEGIN; UPDATE t SET v = zeroblob(7000) WHERE w < 50; ROLLBACK")
            .unwrap();
    }
    check(&stock, &ours, "a large update rolled back");
    // No busy handlers: a checkpoint the reader blocks returns at once.
    for c in [&stock, &ours] {
        c.busy_handler(None::<fn(i32) -> bool>).unwrap();
    }
    for mode in ["PASSIVE", "FULL", "RESTART", "TRUNCATE"] {
        let sql = format!("PRAGMA wal_checkpoint({mode})");
        let (a, b) = (outcome(&stock, &sql), outcome(&ours, &sql));
        assert_eq!(a.split('|').next(), b.split('|').next(), "{sql}");
        check(&stock, &ours, &sql);
        for c in [&stock, &ours] {
            c.execute("DELETE FROM t WHERE id % 10 = ?1", [mode.len() as i64])
                .unwrap();
        }
        check(&stock, &ours, &format!("a delete after {sql}"));
    }
    let count = |c: &Connection| -> i64 {
        c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(count(&rs), count(&ro), "the readers' snapshots");
    assert_eq!(count(&ro), 1503, "the reader's snapshot");
    drop((rs, ro));
    for c in [&stock, &ours] {
        let r: (i64, i64, i64) = c
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .unwrap();
        assert_eq!(r, (0, 0, 0));
    }
    check(&stock, &ours, "truncated with no reader");
    // A new connection beside the leaked one, closed: the leaked one
    // keeps the WAL open, and everything is there.
    let again = connect(&op, true);
    again
        .execute("INSERT INTO t VALUES (4, x'04', 4)", [])
        .unwrap();
    drop(again);
    stock
        .execute("INSERT INTO t VALUES (4, x'04', 4)", [])
        .unwrap();
    check(&stock, &ours, "after a connection beside the leaked one");
    drop(ours);
    let ours = connect(&op, true);
    same(
        &dump(&stock),
        &dump(&ours),
        "reopened beside the leaked connection",
    );
}

/// Regression: a statement that spills pages into the WAL and overwrites
/// one of its own spilled frames in place, rolled back by `ROLLBACK TO`,
/// left SQLite 3.46 a frame number to recompute checksums from
/// (`iReCksum`) past the frames the transaction went on to write; at the
/// `COMMIT` it read the checksum of the frame before it. The VFS had
/// dropped the frames past the commit frame, so the read failed
/// (`SQLITE_IOERR_SHORT_READ`): the `COMMIT` failed after the pool had
/// committed the transaction (a crash then brought back a transaction
/// reported failed), and every later write of the process failed
/// (`SQLITE_IOERR_WRITE`: "a committed frame changes") until its
/// connections closed. The same with the savepoint opened before the
/// spill restarted the WAL (the header written again before any commit).
/// Now the commits succeed, as on stock SQLite, and the crash image holds
/// them.
#[test]
fn a_rollback_to_past_a_spilled_frame_overwritten_in_place_commits() {
    let dir = tempfile::tempdir().unwrap();
    let big = "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 600)
               INSERT INTO t SELECT 100 + i, zeroblob(3000 + i), i % 9 FROM s";
    for restart in [false, true] {
        let name = if restart { "restart" } else { "plain" };
        let (sp, op) = (
            dir.path().join(format!("stock-{name}.db")),
            dir.path().join(format!("ours-{name}.db")),
        );
        let (stock, ours) = (connect(&sp, false), connect(&op, true));
        for c in [&stock, &ours] {
            wal(c);
            c.execute_batch(
                "PRAGMA cache_size = 10; PRAGMA wal_autocheckpoint = 0;
                 CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB, w INTEGER);
                 CREATE INDEX tw ON t(w);
                 INSERT INTO t VALUES (1, x'01', 1);",
            )
            .unwrap();
            if restart {
                // Every frame copied back: the next write restarts the WAL.
                let r: i64 = c
                    .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(0))
                    .unwrap();
                assert_eq!(r, 0);
            }
        }
        for (c, side) in [(&stock, "stock"), (&ours, "ours")] {
            for sql in [
                "BEGIN",
                "INSERT INTO t VALUES (2, x'02', 2)",
                "SAVEPOINT s",
                big,
                "ROLLBACK TO s",
                "RELEASE s",
                "INSERT INTO t VALUES (3, x'03', 3)",
                "COMMIT",
                "INSERT INTO t VALUES (4, x'04', 4)",
            ] {
                c.execute_batch(sql).unwrap_or_else(|e| {
                    panic!(
                        "{name}, {side}: {}: {e} ({:?})",
                        &sql[..sql.len().min(30)],
                        rewind_sqlite::last_error()
                    )
                });
            }
        }
        let want = dump(&stock);
        same(&want, &dump(&ours), name);
        assert!(want.contains("Integer(4)|B1:"), "{want}");
        recovers(dir.path(), &op, restart as usize, &want, name);
        drop(ours);
        same(
            &want,
            &dump(&connect(&op, true)),
            &format!("{name}: reopened"),
        );
    }
}

/// One statement of the spill workload: statements of a few rows to
/// hundreds (spilling a cache of 8 pages), under nested savepoints rolled
/// back and released, and checkpoints between transactions.
fn spill_statement(r: &mut rand::rngs::SmallRng, depth: &mut u32) -> String {
    use rand::Rng;
    let k = r.gen_range(0..2000);
    match r.gen_range(0..14) {
        0..=2 => format!(
            "INSERT OR REPLACE INTO t VALUES ({k}, zeroblob({}), {})",
            r.gen_range(1..3000),
            k % 13
        ),
        3 => format!(
            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {})
             INSERT OR REPLACE INTO t SELECT {k} + i * 7 % 2000, zeroblob({} + i), i % 13 FROM s",
            r.gen_range(50..400),
            r.gen_range(100..4000)
        ),
        4 => format!(
            "UPDATE t SET v = zeroblob(length(v) / 2 + {}), w = w + 1 WHERE w = {}",
            k % 500,
            k % 13
        ),
        5 => format!("DELETE FROM t WHERE id % 17 = {}", k % 17),
        6 => "SELECT w, count(*), sum(length(v)) FROM t GROUP BY w ORDER BY w".into(),
        7 if *depth == 0 => {
            *depth = 1;
            "BEGIN".into()
        }
        8 | 9 if *depth > 0 && *depth < 4 => {
            *depth += 1;
            format!("SAVEPOINT s{depth}")
        }
        10 if *depth > 1 => {
            let d = *depth;
            if r.gen_ratio(1, 2) {
                // ROLLBACK TO keeps the savepoint open.
                format!("ROLLBACK TO s{d}")
            } else {
                *depth -= 1;
                format!("RELEASE s{d}")
            }
        }
        11 if *depth > 0 => {
            *depth = 0;
            if r.gen_ratio(1, 4) {
                "ROLLBACK"
            } else {
                "COMMIT"
            }
            .into()
        }
        12 if *depth == 0 => [
            "PRAGMA wal_checkpoint(PASSIVE)",
            "PRAGMA wal_checkpoint(RESTART)",
            "PRAGMA wal_checkpoint(TRUNCATE)",
        ][r.gen_range(0..3)]
        .into(),
        _ => format!(
            "SELECT count(*), sum(length(v)) FROM t WHERE w = {}",
            k % 13
        ),
    }
}

/// Seeded workloads of statements that spill, nested savepoints rolled
/// back to and released, whole rollbacks and checkpoints (the ground of
/// the `ROLLBACK TO` defect above), on stock SQLite and through the VFS:
/// the same results, and the crash image every 20 statements outside a
/// transaction holds the committed rows. `REWIND_PROBE_CASES` sets the
/// statements per seed.
#[test]
fn seeded_spills_and_savepoints_match_stock_and_recover() {
    use rand::SeedableRng;
    let n: usize = std::env::var("REWIND_PROBE_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    for seed in 0..3u64 {
        let dir = tempfile::tempdir().unwrap();
        let (sp, op) = (dir.path().join("stock.db"), dir.path().join("ours.db"));
        let (stock, ours) = (connect(&sp, false), connect(&op, true));
        for c in [&stock, &ours] {
            wal(c);
            c.execute_batch(
                "PRAGMA cache_size = 8; PRAGMA wal_autocheckpoint = 200;
                 CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB, w INTEGER);
                 CREATE INDEX tw ON t(w);",
            )
            .unwrap();
        }
        let mut r = rand::rngs::SmallRng::seed_from_u64(seed);
        let mut depth = 0;
        let mut copies = 0;
        for i in 0..n {
            let sql = spill_statement(&mut r, &mut depth);
            let (a, b) = (
                cut_checkpoint(&sql, run(&stock, &sql)),
                cut_checkpoint(&sql, run(&ours, &sql)),
            );
            assert_eq!(
                a,
                b,
                "seed {seed}, statement {i}: {sql} ({:?})",
                rewind_sqlite::last_error()
            );
            if i % 20 == 19 && depth == 0 {
                let want = dump(&stock);
                same(&want, &dump(&ours), &format!("seed {seed}, statement {i}"));
                recovers(
                    dir.path(),
                    &op,
                    copies,
                    &want,
                    &format!("seed {seed}, statement {i}"),
                );
                copies += 1;
            }
        }
        if depth > 0 {
            stock.execute_batch("COMMIT").unwrap();
            ours.execute_batch("COMMIT").unwrap();
        }
        let want = dump(&stock);
        same(&want, &dump(&ours), &format!("seed {seed}"));
        drop(ours);
        same(
            &want,
            &dump(&connect(&op, true)),
            &format!("seed {seed}: reopened"),
        );
    }
}

const CHILD_DB: &str = "REWIND_SQL_PROBE_DB";
const CHILD_SQL: &str = "REWIND_SQL_PROBE_SQL";

/// The other process of `a_second_process_meets_a_clear_error_or_shares`:
/// opens the database through the VFS, runs the `;`-separated statements
/// of `CHILD_SQL` printing each outcome, says "ready", and keeps the
/// connection until a line arrives on its standard input.
#[test]
#[ignore = "child process of a_second_process_meets_a_clear_error_or_shares"]
fn sql_probe_child() {
    use std::io::BufRead;
    let (Ok(db), Ok(sqls)) = (std::env::var(CHILD_DB), std::env::var(CHILD_SQL)) else {
        return;
    };
    // The harness printed the test's name without a newline.
    println!();
    common::register_once(VFS, &cfg());
    match Connection::open_with_flags_and_vfs(&db, OpenFlags::default(), VFS) {
        Ok(c) => {
            // No busy handler: a WAL the parent holds is SQLITE_BUSY at
            // once (rusqlite's default waits five seconds first).
            c.busy_timeout(std::time::Duration::ZERO).unwrap();
            for sql in sqls.split(';') {
                println!("outcome {sql}: {}", outcome(&c, sql).trim_end());
            }
            println!("ready");
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line).unwrap();
            drop(c);
        }
        Err(e) => println!("open failed: {e}"),
    }
    println!("done");
}

/// A second process beside a first on one database, each through the
/// VFS: while one process has the WAL open, the other's statements fail
/// with a clear error (`SQLITE_BUSY`, once its busy handler gives up;
/// nothing removed, nothing changed), and once it has closed, the other shares the database as
/// usual, seeing every commit; a database in rollback mode is shared by
/// both, and switched to WAL under the other's open connection.
#[test]
fn a_second_process_meets_a_clear_error_or_shares() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    // The parent's connection, in rollback mode.
    let p = connect(&path, true);
    p.busy_handler(None::<fn(i32) -> bool>).unwrap();
    p.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
        .unwrap();
    let start = |sqls: &str| {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "sql_probe_child",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_DB, &path)
            .env(CHILD_SQL, sqls)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut seen = Vec::new();
        loop {
            let mut line = String::new();
            assert!(out.read_line(&mut line).unwrap() > 0, "{seen:?}");
            let line = line.trim_end().to_string();
            if line == "ready" || line.starts_with("open failed") {
                break;
            }
            if line.starts_with("outcome") {
                seen.push(line);
            }
        }
        (child, out, seen)
    };
    let finish = |(mut child, mut out, _): (std::process::Child, BufReader<_>, Vec<String>)| {
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
        assert!(child.wait().unwrap().success(), "{rest}");
        assert!(rest.contains("done"), "{rest}");
    };
    let count = |c: &Connection| outcome(c, "SELECT count(*), sum(x) FROM t");
    // Rollback mode: both processes read and write.
    let child = start("INSERT INTO t VALUES (2);SELECT count(*), sum(x) FROM t");
    assert_eq!(
        child.2,
        [
            "outcome INSERT INTO t VALUES (2):",
            "outcome SELECT count(*), sum(x) FROM t: Integer(2)|Integer(3)|"
        ]
    );
    assert_eq!(count(&p), "Integer(2)|Integer(3)|\n");
    finish(child);
    // The child switches the database to WAL under the parent's open
    // connection and keeps its WAL open: the parent's reads and writes
    // fail with SQLITE_BUSY and change nothing.
    let child = start("PRAGMA journal_mode = WAL;INSERT INTO t VALUES (4)");
    assert_eq!(
        child.2,
        [
            "outcome PRAGMA journal_mode = WAL: Text([119, 97, 108])|",
            "outcome INSERT INTO t VALUES (4):"
        ]
    );
    let pool = rewind_sqlite::pool_path(&dir.path().join("p.db-wal"));
    assert!(pool.exists());
    for sql in ["SELECT count(*), sum(x) FROM t", "INSERT INTO t VALUES (8)"] {
        let o = outcome(&p, sql);
        assert!(o.contains("DatabaseBusy"), "{sql}: {o}");
        assert!(
            rewind_sqlite::last_error().is_some_and(|e| e.contains("in use")),
            "{:?}",
            rewind_sqlite::last_error()
        );
    }
    assert!(pool.exists(), "the other process's pool stays");
    finish(child);
    // Gone: the parent sees the child's commit and writes in WAL mode.
    assert_eq!(count(&p), "Integer(3)|Integer(7)|\n");
    p.execute("INSERT INTO t VALUES (16)", []).unwrap();
    assert_eq!(
        outcome(&p, "PRAGMA journal_mode"),
        "Text([119, 97, 108])|\n"
    );
    // Now the parent holds the WAL: the child cannot open it, nor leave
    // WAL mode, nor remove the parent's pool.
    let child =
        start("SELECT count(*) FROM t;PRAGMA journal_mode = DELETE;INSERT INTO t VALUES (32)");
    for line in &child.2 {
        assert!(line.contains("DatabaseBusy"), "{line}");
    }
    finish(child);
    assert!(pool.exists());
    assert_eq!(count(&p), "Integer(4)|Integer(23)|\n");
    drop(p);
    // After the parent's close, a new process reads every commit.
    let child = start("SELECT count(*), sum(x) FROM t;PRAGMA integrity_check");
    assert_eq!(
        child.2,
        [
            "outcome SELECT count(*), sum(x) FROM t: Integer(4)|Integer(23)|",
            "outcome PRAGMA integrity_check: Text([111, 107])|"
        ]
    );
    finish(child);
}

/// Many small transactions (one row each) with SQLite's default
/// automatic checkpoints: the log's blocks are reused generation after
/// generation (the pool does not grow), the rows are stock SQLite's, and
/// the crash image at the end holds every commit.
#[test]
fn many_small_transactions_reuse_the_pool_and_keep_every_commit() {
    let n: i64 = std::env::var("REWIND_PROBE_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6000);
    let dir = tempfile::tempdir().unwrap();
    let (sp, op) = (dir.path().join("stock.db"), dir.path().join("ours.db"));
    let (stock, ours) = (connect(&sp, false), connect(&op, true));
    for c in [&stock, &ours] {
        wal(c);
        c.execute_batch(
            "PRAGMA synchronous = OFF;
             CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT, w INTEGER);
             CREATE INDEX tw ON t(w);",
        )
        .unwrap();
    }
    let pool = rewind_sqlite::pool_path(&dir.path().join("ours.db-wal"));
    let mut most = 0;
    for i in 0..n {
        for c in [&stock, &ours] {
            c.execute(
                "INSERT INTO t(v, w) VALUES (printf('row %d', ?1), ?1 % 97)",
                [i],
            )
            .unwrap();
            if i % 7 == 3 {
                c.execute("DELETE FROM t WHERE id = ?1", [i / 2]).unwrap();
            }
        }
        if i % 500 == 499 {
            let s = rewind_sqlite::stats(&op).unwrap();
            most = most.max(s.blocks);
            assert!(s.restarts > 0, "{s:?}");
        }
    }
    // 1000 frames of 4 KiB pages hold about 4 MB: a generation's blocks
    // (8 KiB each, differential records far smaller) stay a few hundred.
    assert!(most < 1000, "{most} blocks in a generation");
    assert_eq!(
        std::fs::metadata(&pool).unwrap().len(),
        4 << 20,
        "the pool did not grow"
    );
    let want = dump(&stock);
    same(&want, &dump(&ours), "the rows");
    recovers(dir.path(), &op, 0, &want, "the crash image");
}
