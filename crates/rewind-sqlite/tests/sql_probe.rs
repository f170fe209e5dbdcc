//! SQLite workloads probed as a user of SQLite would, each statement run
//! on stock SQLite (a plain file) and through the VFS: schema changes
//! (ALTER TABLE, DROP, indexes built on full tables, views, ANALYZE,
//! VACUUM INTO), values of megabytes and incremental blob I/O, the
//! pragmas users set, connections of one process beside a writer, and
//! large transactions rolled back. After every step the files as they
//! are (a crash image: the database and its pool copied while the
//! connection is open) are opened through the VFS elsewhere and must hold
//! exactly stock SQLite's committed rows.
//!
//! Deterministic by seeds and counts; busy handlers wait as long as it
//! takes, and no outcome depends on how long a step takes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, DatabaseName, OpenFlags};

mod common;
use common::run;

const VFS: &str = "rewind-sql-probe";

fn cfg() -> rewind_sqlite::Config {
    rewind_sqlite::Config::default().pool_size(4 << 20)
}

/// A connection through the VFS (or stock SQLite), with a busy handler
/// that waits as long as it takes, not yet in WAL mode.
fn connect(path: &Path, ours: bool) -> Connection {
    let c = if ours {
        common::register_once(VFS, &cfg());
        Connection::open_with_flags_and_vfs(path, OpenFlags::default(), VFS).unwrap()
    } else {
        Connection::open(path).unwrap()
    };
    c.busy_handler(Some(|_| {
        std::thread::sleep(Duration::from_micros(200));
        true
    }))
    .unwrap();
    c
}

fn wal(c: &Connection) {
    let mode: String = c
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
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
    assert_eq!(run(&c, "PRAGMA integrity_check"), "T[111, 107]|\n", "{what}");
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
