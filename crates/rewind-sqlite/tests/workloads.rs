//! Real SQLite workloads through the VFS, probed from outside: schemas
//! with secondary indexes, triggers, foreign keys, WITHOUT ROWID tables
//! and overflow pages, compared statement by statement with stock SQLite
//! at several page sizes (with VACUUM, incremental vacuum and nested
//! savepoints); ATTACH of two databases of the VFS; a WAL that outgrows
//! its pool; journal mode switched away from WAL and back; readers beside
//! checkpoints of every mode; several processes taking turns at one
//! database; writers that kill themselves at seeded points; a full disk.
//!
//! Deterministic by seeds and counts; nothing depends on how long a step
//! takes (busy handlers wait as long as it takes).

use std::path::Path;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rusqlite::{Connection, OpenFlags};

mod common;
use common::{run, wal};

const VFS: &str = "rewind-workloads";

fn cfg() -> rewind_sqlite::Config {
    rewind_sqlite::Config::default().pool_size(4 << 20)
}

/// A connection through the VFS (or stock SQLite), not yet in WAL mode.
fn connect(path: &Path, ours: bool) -> Connection {
    common::connect(VFS, &cfg(), path, ours)
}

/// Every table's rows, in a stable order, as text.
fn dump(c: &Connection) -> String {
    let mut out = String::new();
    let tables: Vec<String> = c
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    for t in tables {
        out.push_str(&format!("== {t}\n"));
        out.push_str(&run(c, &format!("SELECT * FROM \"{t}\" ORDER BY 1, 2")));
    }
    out
}

const RICH_SCHEMA: &str = "
    CREATE TABLE parent(id INTEGER PRIMARY KEY, name TEXT UNIQUE, n INTEGER DEFAULT 0);
    CREATE TABLE child(id INTEGER PRIMARY KEY, pid INTEGER REFERENCES parent(id) ON DELETE CASCADE,
                       body BLOB, k INTEGER);
    CREATE INDEX child_pid ON child(pid, k);
    CREATE INDEX child_k ON child(k DESC) WHERE k % 3 = 0;
    CREATE TABLE kv(k TEXT PRIMARY KEY, v BLOB, w INTEGER) WITHOUT ROWID;
    CREATE INDEX kv_w ON kv(w);
    CREATE TABLE audit(seq INTEGER PRIMARY KEY AUTOINCREMENT, what TEXT, pid INTEGER);
    CREATE TRIGGER child_ins AFTER INSERT ON child BEGIN
        UPDATE parent SET n = n + 1 WHERE id = new.pid;
        INSERT INTO audit(what, pid) VALUES ('ins ' || new.id, new.pid);
    END;
    CREATE TRIGGER child_del AFTER DELETE ON child BEGIN
        UPDATE parent SET n = n - 1 WHERE id = old.pid;
        INSERT INTO audit(what, pid) VALUES ('del ' || old.id, old.pid);
    END;
    WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < 39)
    INSERT INTO parent(id, name) SELECT i, 'p' || i FROM s;
";

/// One statement of the rich workload. `depth` is the savepoint depth
/// (0: no transaction), kept the same on both sides.
fn rich_statement(r: &mut SmallRng, depth: &mut u32) -> String {
    let k = r.gen_range(0..400);
    // Blobs from a few bytes to several pages: overflow chains.
    let len = match r.gen_range(0..10) {
        0..=5 => r.gen_range(1..300),
        6..=8 => r.gen_range(300..9000),
        _ => r.gen_range(9000..70000),
    };
    match r.gen_range(0..24) {
        0..=2 => format!("INSERT OR IGNORE INTO parent(id, name) VALUES ({}, 'p{k}')", k % 40),
        3..=6 => format!(
            "INSERT INTO child(pid, body, k) VALUES ({}, CAST(printf('%.*c', {len}, 'x') || '{k}' AS BLOB), {k})",
            k % 45
        ),
        7 => format!("UPDATE child SET body = CAST(substr(body, 1, {len}) || 'y' AS BLOB), k = k + 1 WHERE k % 13 = {}", k % 13),
        8 => format!("DELETE FROM child WHERE k % 17 = {}", k % 17),
        9 => format!("DELETE FROM parent WHERE id = {}", k % 40),
        10 | 11 => format!(
            "INSERT OR REPLACE INTO kv VALUES ('key{}', CAST(printf('%.*c', {len}, 'z') || '{}' AS BLOB), {k})",
            k % 120,
            k % 256
        ),
        12 => format!("DELETE FROM kv WHERE w BETWEEN {k} AND {}", k + 20),
        13 => "SELECT p.id, p.n, count(c.id), sum(length(c.body)) FROM parent p LEFT JOIN child c ON c.pid = p.id GROUP BY p.id ORDER BY p.id".into(),
        14 => format!("SELECT k, length(v), w FROM kv WHERE w >= {k} ORDER BY w, k LIMIT 15"),
        15 => "SELECT count(*), max(seq) FROM audit".into(),
        16 => "PRAGMA foreign_key_check".into(),
        17 if *depth == 0 => {
            *depth = 1;
            "BEGIN".into()
        }
        17 | 18 if *depth > 0 && *depth < 4 => {
            *depth += 1;
            format!("SAVEPOINT s{}", *depth)
        }
        19 if *depth > 1 => {
            let d = *depth;
            *depth -= 1;
            if r.gen_ratio(1, 2) {
                // ROLLBACK TO keeps the savepoint open: release it after.
                format!("ROLLBACK TO s{d}; RELEASE s{d}")
            } else {
                format!("RELEASE s{d}")
            }
        }
        20 if *depth > 0 => {
            *depth = 0;
            if r.gen_ratio(1, 3) { "ROLLBACK" } else { "COMMIT" }.into()
        }
        21 if *depth == 0 => ["PRAGMA wal_checkpoint(PASSIVE)", "PRAGMA wal_checkpoint(FULL)",
                              "PRAGMA wal_checkpoint(RESTART)", "PRAGMA wal_checkpoint(TRUNCATE)"]
            [r.gen_range(0..4)]
        .into(),
        22 if *depth == 0 => {
            if r.gen_ratio(1, 3) {
                "VACUUM".into()
            } else {
                format!("PRAGMA incremental_vacuum({})", r.gen_range(1..20))
            }
        }
        _ => format!("SELECT id, pid, k, length(body) FROM child WHERE pid = {} ORDER BY k, id", k % 45),
    }
}

/// Runs `sql` (one statement or a `;`-separated pair) on both sides.
fn both(stock: &Connection, ours: &Connection, sql: &str, what: &str) {
    for part in sql.split("; ") {
        let (mut a, mut b) = (run(stock, part), run(ours, part));
        if part.contains("wal_checkpoint") {
            // Only whether it was blocked: how many frames the WAL holds
            // depends on when the transactions spilled pages, and with
            // SQLITE_ENABLE_MEMORY_MANAGEMENT (rusqlite's bundled build)
            // the page cache is one for the process, shared with the
            // other tests' connections.
            a.truncate(a.find('|').unwrap_or(a.len()));
            b.truncate(b.find('|').unwrap_or(b.len()));
        }
        assert_eq!(a, b, "{what}: {part}");
    }
}

/// Stock SQLite and the VFS, given the same statements on a schema with
/// indexes (partial and descending), triggers, cascading foreign keys, a
/// WITHOUT ROWID table and blobs of up to 70 KB (overflow chains), under
/// nested savepoints rolled back and released, checkpoints of every
/// mode, VACUUM and incremental vacuum, at page sizes 512, 4096 and 65536
/// chosen before the first table, with reopens: every result the same.
#[test]
fn a_rich_schema_gives_stock_sqlites_results_at_every_page_size() {
    for (seed, page) in [(1u64, 512u32), (2, 4096), (3, 65536)] {
        let dir = tempfile::tempdir().unwrap();
        let (sp, op) = (dir.path().join("stock.db"), dir.path().join("ours.db"));
        let setup = |c: &Connection| {
            c.execute_batch(&format!(
                "PRAGMA page_size = {page}; PRAGMA auto_vacuum = INCREMENTAL;"
            ))
            .unwrap();
            wal(c);
            c.execute_batch(
                "PRAGMA foreign_keys = ON; PRAGMA cache_size = 20; PRAGMA wal_autocheckpoint = 30;
                 PRAGMA synchronous = NORMAL;",
            )
            .unwrap();
        };
        let (mut stock, mut ours) = (connect(&sp, false), connect(&op, true));
        setup(&stock);
        setup(&ours);
        both(&stock, &ours, "PRAGMA page_size", "page size");
        stock.execute_batch(RICH_SCHEMA).unwrap();
        ours.execute_batch(RICH_SCHEMA).unwrap();
        let mut r = SmallRng::seed_from_u64(seed);
        let mut depth = 0;
        let n = if page == 65536 { 500 } else { 900 };
        for i in 0..n {
            if i % 300 == 299 {
                if depth > 0 {
                    both(&stock, &ours, "COMMIT", "close the transaction");
                    depth = 0;
                }
                drop((stock, ours));
                (stock, ours) = (connect(&sp, false), connect(&op, true));
                setup(&stock);
                setup(&ours);
            }
            let sql = rich_statement(&mut r, &mut depth);
            both(&stock, &ours, &sql, &format!("page {page}, statement {i}"));
        }
        if depth > 0 {
            both(&stock, &ours, "COMMIT", "close the transaction");
        }
        for sql in [
            "PRAGMA integrity_check",
            "PRAGMA foreign_key_check",
            "PRAGMA freelist_count",
            "PRAGMA page_count",
        ] {
            both(&stock, &ours, sql, &format!("page {page}, at the end"));
        }
        assert_eq!(dump(&stock), dump(&ours), "page {page}: the tables");
        drop(ours);
        let ours = connect(&op, true);
        assert_eq!(
            dump(&stock),
            dump(&ours),
            "page {page}: the tables, reopened"
        );
        assert_eq!(run(&ours, "PRAGMA integrity_check"), "T[111, 107]|\n");
    }
}

/// Two databases of the VFS attached to one connection: transactions
/// over both commit (and roll back) in each, with checkpoints, and each
/// database holds its part once reopened alone, as stock SQLite's do.
#[test]
fn attached_databases_commit_and_roll_back_together() {
    let dir = tempfile::tempdir().unwrap();
    let mut results = Vec::new();
    for ours in [false, true] {
        let sub = dir.path().join(if ours { "ours" } else { "stock" });
        std::fs::create_dir(&sub).unwrap();
        let (a, b) = (sub.join("a.db"), sub.join("b.db"));
        // The second database in WAL mode first, on its own.
        let cb = connect(&b, ours);
        wal(&cb);
        drop(cb);
        let c = connect(&a, ours);
        wal(&c);
        let vfs = if ours { VFS } else { "unix" };
        c.execute(
            &format!("ATTACH DATABASE 'file:{}?vfs={vfs}' AS other", b.display()),
            [],
        )
        .unwrap();
        assert_eq!(run(&c, "PRAGMA other.journal_mode"), "T[119, 97, 108]|\n");
        c.execute_batch(
            "CREATE TABLE main.t(id INTEGER PRIMARY KEY, v BLOB);
             CREATE TABLE other.u(id INTEGER PRIMARY KEY, v BLOB);",
        )
        .unwrap();
        let mut r = SmallRng::seed_from_u64(7);
        let mut out = String::new();
        for i in 0..300 {
            let len = r.gen_range(1..6000);
            let roll = r.gen_ratio(1, 4);
            c.execute_batch(&format!(
                "BEGIN;
                 INSERT INTO t(v) VALUES (zeroblob({len}));
                 INSERT INTO other.u(v) SELECT v FROM t ORDER BY id DESC LIMIT 1;
                 UPDATE other.u SET v = v || x'01' WHERE id % 7 = {};
                 DELETE FROM t WHERE id % 11 = {};
                 {}",
                i % 7,
                i % 11,
                if roll { "ROLLBACK" } else { "COMMIT" }
            ))
            .unwrap();
            if i % 37 == 0 {
                let mode = ["PASSIVE", "FULL", "RESTART", "TRUNCATE"][i / 37 % 4];
                out.push_str(&run(&c, &format!("PRAGMA main.wal_checkpoint({mode})")));
                out.push_str(&run(&c, &format!("PRAGMA other.wal_checkpoint({mode})")));
            }
        }
        out.push_str(&run(&c, "SELECT count(*), sum(length(v)) FROM t"));
        out.push_str(&run(&c, "SELECT count(*), sum(length(v)) FROM other.u"));
        out.push_str(&run(&c, "PRAGMA other.integrity_check"));
        drop(c);
        // Each database alone, reopened.
        let ca = connect(&a, ours);
        let cb = connect(&b, ours);
        out.push_str(&run(&ca, "SELECT count(*), sum(length(v)) FROM t"));
        out.push_str(&run(&cb, "SELECT count(*), sum(length(v)) FROM u"));
        out.push_str(&run(&ca, "PRAGMA integrity_check"));
        out.push_str(&run(&cb, "PRAGMA integrity_check"));
        results.push(out);
    }
    assert_eq!(results[0], results[1]);
}

const SMALL: &str = "rewind-workloads-small";

fn small_cfg() -> rewind_sqlite::Config {
    rewind_sqlite::Config::default()
        .pool_size(1 << 20)
        .max_pool_size(2 << 20)
}

fn connect_small(path: &Path) -> Connection {
    common::register_once(SMALL, &small_cfg());
    let c = Connection::open_with_flags_and_vfs(path, OpenFlags::default(), SMALL).unwrap();
    wal(&c);
    c
}

/// Many small commits with checkpoints off fill a pool of 2 MiB at its
/// maximum: the commit that does not fit is `SQLITE_FULL` (never a panic
/// or another error), the transactions before it are all there, the
/// connection goes on after a checkpoint, and a reopen holds exactly the
/// acknowledged rows; at page sizes 4096 and 65536.
#[test]
fn a_wal_of_small_commits_past_the_pool_is_sqlite_full_and_keeps_every_commit() {
    for page in [4096u32, 65536] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.db");
        let c = {
            common::register_once(SMALL, &small_cfg());
            let c =
                Connection::open_with_flags_and_vfs(&path, OpenFlags::default(), SMALL).unwrap();
            c.execute_batch(&format!("PRAGMA page_size = {page}"))
                .unwrap();
            wal(&c);
            c
        };
        c.execute_batch(
            "PRAGMA wal_autocheckpoint = 0;
             CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);
             CREATE INDEX tv ON t(v);",
        )
        .unwrap();
        let mut acked = 0i64;
        let mut full = None;
        for i in 1..100_000i64 {
            match c.execute("INSERT INTO t VALUES (?1, randomblob(700))", [i]) {
                Ok(_) => acked = i,
                Err(e) => {
                    full = Some(e);
                    break;
                }
            }
        }
        let e = full.expect("the pool fills");
        assert_eq!(
            e.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DiskFull),
            "page {page}: {e} ({:?})",
            rewind_sqlite::last_error()
        );
        assert!(
            acked > 100,
            "page {page}: {acked} commits before the pool filled"
        );
        let n: i64 = c
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(
            n, acked,
            "page {page}: the failed commit is gone, the others stay"
        );
        // A checkpoint makes room; writes go on.
        let busy: i64 = c
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
            .unwrap();
        assert_eq!(busy, 0, "page {page}");
        for i in 0..20 {
            c.execute(
                "INSERT INTO t VALUES (?1, randomblob(700))",
                [acked + 1 + i],
            )
            .unwrap();
        }
        drop(c);
        let c = connect_small(&path);
        let n: i64 = c
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, acked + 20, "page {page}: reopened");
        assert_eq!(run(&c, "PRAGMA integrity_check"), "T[111, 107]|\n");
    }
}

/// The same, killed rather than closed after `SQLITE_FULL`: a database
/// whose WAL pool is at its maximum, with no checkpoint, opens again
/// (recovery needs no room) with exactly the acknowledged commits.
#[test]
fn a_full_pool_reopens_after_a_crash_with_every_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.db");
    let c = connect_small(&path);
    c.execute_batch(
        "PRAGMA wal_autocheckpoint = 0;
         CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);",
    )
    .unwrap();
    let mut acked = 0i64;
    for i in 1..100_000i64 {
        match c.execute("INSERT INTO t VALUES (?1, randomblob(3000))", [i]) {
            Ok(_) => acked = i,
            Err(e) => {
                assert_eq!(
                    e.sqlite_error_code(),
                    Some(rusqlite::ErrorCode::DiskFull),
                    "{e}"
                );
                break;
            }
        }
    }
    // A crash: the connection is never closed (no checkpoint, no unlock
    // of the pool's file lock but by the process... so copy the files as
    // they are, as a crash would leave them).
    let crash = dir.path().join("crash");
    std::fs::create_dir(&crash).unwrap();
    for f in ["f.db", "f.db-wal.rewind"] {
        std::fs::copy(dir.path().join(f), crash.join(f)).unwrap();
    }
    drop(c);
    let c = connect_small(&crash.join("f.db"));
    let n: i64 = c
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, acked);
    assert_eq!(run(&c, "PRAGMA integrity_check"), "T[111, 107]|\n");
    c.execute("INSERT INTO t VALUES (?1, x'00')", [acked + 1])
        .unwrap();
}

fn count(c: &Connection, table: &str) -> i64 {
    c.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

fn mode(c: &Connection, m: &str) -> String {
    c.pragma_update_and_check(None, "journal_mode", m, |r| r.get(0))
        .unwrap()
}

/// `journal_mode` switched from WAL to each rollback mode and back, with
/// writes in every mode, a second connection of the process that holds
/// the database open meanwhile (the switch away from WAL waits for it:
/// SQLite leaves WAL mode only under an exclusive lock), and frames not
/// yet checkpointed at each switch: no write is lost, the pool is gone
/// after each switch away from WAL, and the other connection reads the
/// same rows whatever mode the first left the file in.
#[test]
fn journal_mode_switched_from_wal_and_back_keeps_every_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let pool = rewind_sqlite::pool_path(&dir.path().join("j.db-wal"));
    let c1 = connect(&path, true);
    wal(&c1);
    c1.execute_batch(
        "PRAGMA wal_autocheckpoint = 0;
         CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB, m TEXT);
         CREATE INDEX tm ON t(m);",
    )
    .unwrap();
    let mut expect = 0;
    let mut insert = |c: &Connection, m: &str, n: i64| {
        for _ in 0..n {
            c.execute("INSERT INTO t(v, m) VALUES (zeroblob(1500), ?1)", [m])
                .unwrap();
        }
        expect += n;
        expect
    };
    for (round, other) in ["DELETE", "TRUNCATE", "PERSIST", "MEMORY", "DELETE"]
        .iter()
        .enumerate()
    {
        let n = insert(&c1, "wal", 40);
        assert!(pool.exists(), "round {round}: the WAL's pool");
        // A second connection, reading in WAL mode, holds its lock: the
        // switch cannot happen under it.
        let c2 = connect(&path, true);
        c2.busy_handler(None).unwrap();
        assert_eq!(count(&c2, "t"), n, "round {round}: c2 in WAL mode");
        c1.busy_handler(None).unwrap();
        let stuck =
            c1.pragma_update_and_check(None, "journal_mode", other, |r| r.get::<_, String>(0));
        match &stuck {
            Ok(m) => assert_eq!(m, "wal", "round {round}: the switch waits for c2"),
            Err(e) => assert_eq!(
                e.sqlite_error_code(),
                Some(rusqlite::ErrorCode::DatabaseBusy),
                "round {round}: {e}"
            ),
        }
        drop(c2);
        assert_eq!(mode(&c1, other), other.to_lowercase(), "round {round}");
        assert!(
            !pool.exists(),
            "round {round}: no pool once out of WAL mode"
        );
        let n = insert(&c1, other, 25);
        // Another connection reads the rollback-mode file, then turns it
        // back to WAL while c1 stays open.
        let c3 = connect(&path, true);
        assert_eq!(count(&c3, "t"), n, "round {round}: c3 in {other} mode");
        let n = insert(&c3, other, 5);
        if *other != "MEMORY" {
            // (MEMORY is the connection's own setting, not the file's.)
            wal(&c3);
            assert_eq!(
                count(&c1, "t"),
                n,
                "round {round}: c1 after c3 turned WAL on"
            );
            let n = insert(&c3, "wal3", 7);
            assert_eq!(
                count(&c1, "t"),
                n,
                "round {round}: c1 sees c3's WAL commits"
            );
            drop(c3);
            // c1 follows the file into WAL mode.
            assert_eq!(mode(&c1, "WAL"), "wal");
        } else {
            drop(c3);
            assert_eq!(mode(&c1, "WAL"), "wal");
        }
        c1.execute_batch("PRAGMA wal_autocheckpoint = 0").unwrap();
    }
    let n = insert(&c1, "end", 3);
    assert_eq!(count(&c1, "t"), n);
    drop(c1);
    let c = connect(&path, true);
    assert_eq!(count(&c, "t"), n, "reopened");
    assert_eq!(run(&c, "PRAGMA integrity_check"), "T[111, 107]|\n");
}

/// Readers that hold their snapshot across checkpoints of every mode
/// (PASSIVE, FULL, RESTART, TRUNCATE, from a thread of their own, beside
/// a writer moving amounts between accounts): each snapshot is whole
/// (the accounts' sum never changes, a reread inside one read
/// transaction gives the same rows), and the database ends with every
/// transfer, reopened too.
#[test]
fn readers_keep_their_snapshots_across_checkpoints_of_every_mode() {
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
    const ACCOUNTS: i64 = 50;
    const TRANSFERS: i64 = 400;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    let setup = connect(&path, true);
    wal(&setup);
    setup
        .execute_batch(&format!(
            "PRAGMA wal_autocheckpoint = 0;
             CREATE TABLE acct(id INTEGER PRIMARY KEY, bal INTEGER, pad BLOB);
             CREATE TABLE log(id INTEGER PRIMARY KEY, src INTEGER, dst INTEGER, amt INTEGER);
             WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {ACCOUNTS})
             INSERT INTO acct SELECT i, 1000, zeroblob(600) FROM s;"
        ))
        .unwrap();
    let total = ACCOUNTS * 1000;
    // Threads still running but the checkpointer: a writer, two readers.
    let running = AtomicU64::new(3);
    let checkpoints = AtomicU64::new(0);
    let snapshot = |c: &Connection| -> (i64, i64, String) {
        let (sum, n): (i64, i64) = c
            .query_row(
                "SELECT sum(bal), (SELECT count(*) FROM log) FROM acct",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        (
            sum,
            n,
            run(c, "SELECT id, bal FROM acct ORDER BY bal, id LIMIT 5"),
        )
    };
    std::thread::scope(|s| {
        let path = &path;
        let (running, checkpoints) = (&running, &checkpoints);
        s.spawn(move || {
            let mut c = connect(path, true);
            let mut r = SmallRng::seed_from_u64(11);
            for i in 0..TRANSFERS {
                let (a, b) = (r.gen_range(1..=ACCOUNTS), r.gen_range(1..=ACCOUNTS));
                let amt = r.gen_range(1..100);
                let tx = c
                    .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                    .unwrap();
                tx.execute("UPDATE acct SET bal = bal - ?2 WHERE id = ?1", [a, amt])
                    .unwrap();
                tx.execute("UPDATE acct SET bal = bal + ?2 WHERE id = ?1", [b, amt])
                    .unwrap();
                tx.execute("INSERT INTO log VALUES (?1, ?2, ?3, ?4)", [i, a, b, amt])
                    .unwrap();
                tx.commit().unwrap();
            }
            running.fetch_sub(1, SeqCst);
        });
        s.spawn(move || {
            let c = connect(path, true);
            // A checkpoint that waits for readers gives up after a while
            // (it then reports itself blocked); nothing checked depends
            // on whether it did.
            c.busy_handler(Some(|n| {
                std::thread::sleep(Duration::from_micros(200));
                n < 500
            }))
            .unwrap();
            let mut k = 0;
            while running.load(SeqCst) > 0 || k < 8 {
                let m = ["PASSIVE", "FULL", "RESTART", "TRUNCATE"][k % 4];
                let (busy, log, ckpt): (i64, i64, i64) = c
                    .query_row(&format!("PRAGMA wal_checkpoint({m})"), [], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                    })
                    .unwrap();
                assert!(ckpt <= log, "{m}: {busy} {log} {ckpt}");
                checkpoints.fetch_add(1, SeqCst);
                k += 1;
            }
        });
        for reader in 0..2 {
            s.spawn(move || {
                let c = connect(path, true);
                let mut last = 0;
                for _ in 0..60 {
                    c.execute_batch("BEGIN").unwrap();
                    let first = snapshot(&c);
                    assert_eq!(first.0, total, "reader {reader}: a torn snapshot");
                    assert!(first.1 >= last, "reader {reader}: time went back");
                    last = first.1;
                    // Hold the snapshot until a checkpoint or two ran.
                    let ck = checkpoints.load(SeqCst);
                    for _ in 0..200 {
                        if checkpoints.load(SeqCst) > ck + 1 {
                            break;
                        }
                        std::thread::sleep(Duration::from_micros(300));
                    }
                    assert_eq!(snapshot(&c), first, "reader {reader}: the snapshot moved");
                    c.execute_batch("COMMIT").unwrap();
                }
                running.fetch_sub(1, SeqCst);
            });
        }
    });
    assert_eq!(snapshot(&setup).0, total);
    assert_eq!(count(&setup, "log"), TRANSFERS);
    drop(setup);
    let c = connect(&path, true);
    assert_eq!((snapshot(&c).0, count(&c, "log")), (total, TRANSFERS));
    assert_eq!(run(&c, "PRAGMA integrity_check"), "T[111, 107]|\n");
}

const PROC_DIR: &str = "REWIND_WORKLOADS_PROC_DIR";
const PROC_ID: &str = "REWIND_WORKLOADS_PROC_ID";
const PROCS: u64 = 3;
const PROC_COMMITS: u64 = 30;

/// This test binary again, running the ignored test `name` with `envs`.
fn child(name: &str, envs: &[(&str, String)]) -> std::process::Command {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        name,
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd
}

/// A child of `processes_taking_turns_keep_every_acknowledged_commit`:
/// commits its rows one transaction at a time, each through a fresh
/// connection (so that the others get their turn at the WAL), retrying a
/// transaction that could not start because another process has the WAL
/// open or the database locked (`SQLITE_BUSY`; `SQLITE_CANTOPEN` is
/// counted too, as an earlier build reported a WAL in use);
/// prints `ack P I` once its commit returned, `error ...` for any other
/// outcome.
#[test]
#[ignore = "child process of processes_taking_turns_keep_every_acknowledged_commit"]
fn proc_child() {
    use std::io::Write;
    let (Ok(dir), Ok(id)) = (std::env::var(PROC_DIR), std::env::var(PROC_ID)) else {
        return;
    };
    let id: u64 = id.parse().unwrap();
    let path = Path::new(&dir).join("p.db");
    common::register_once(VFS, &cfg());
    let mut out = std::io::stdout().lock();
    writeln!(out).unwrap();
    let (mut cantopen, mut busy) = (0u64, 0u64);
    for i in 0..PROC_COMMITS {
        let mut tries = 0;
        loop {
            tries += 1;
            assert!(
                tries < 200_000,
                "process {id}: commit {i} never got its turn"
            );
            let c = Connection::open_with_flags_and_vfs(&path, OpenFlags::default(), VFS).unwrap();
            let r = c
                .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0))
                .and_then(|m| {
                    assert_eq!(m, "wal");
                    c.execute_batch(&format!(
                        "BEGIN IMMEDIATE;
                         CREATE TABLE IF NOT EXISTS t(p INTEGER, i INTEGER, v BLOB, PRIMARY KEY (p, i));
                         INSERT INTO t VALUES ({id}, {i}, zeroblob({}));
                         COMMIT;",
                        100 + (i * 997 + id * 131) % 3000
                    ))
                });
            match r {
                Ok(()) => {
                    writeln!(out, "ack {id} {i}").unwrap();
                    out.flush().unwrap();
                    if i % 4 == 3 {
                        c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                            .ok();
                    }
                    match c.close() {
                        Ok(()) => {}
                        Err((_, e)) => writeln!(out, "error close: {e}").unwrap(),
                    }
                    break;
                }
                Err(e) => {
                    let _ = c.execute_batch("ROLLBACK");
                    match e.sqlite_error_code() {
                        Some(rusqlite::ErrorCode::CannotOpen) => cantopen += 1,
                        Some(rusqlite::ErrorCode::DatabaseBusy) => busy += 1,
                        _ => {
                            writeln!(
                                out,
                                "error {id} {i}: {e} ({:?}; last error {:?})",
                                e.sqlite_error_code(),
                                rewind_sqlite::last_error()
                            )
                            .unwrap();
                            out.flush().unwrap();
                        }
                    }
                    drop(c);
                    std::thread::sleep(Duration::from_micros(300));
                }
            }
        }
    }
    writeln!(out, "done {id} cantopen {cantopen} busy {busy}").unwrap();
}

/// Three processes commit into one database by turns (one process at a
/// time has the WAL open; the others wait with `SQLITE_BUSY` and try
/// again): every acknowledged commit is in the
/// database at the end, nothing else, `integrity_check` ok, and no
/// process met any other error.
#[test]
fn processes_taking_turns_keep_every_acknowledged_commit() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let kids: Vec<_> = (0..PROCS)
        .map(|id| {
            child(
                "proc_child",
                &[
                    (PROC_DIR, dir.path().display().to_string()),
                    (PROC_ID, id.to_string()),
                ],
            )
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    let mut acked = std::collections::BTreeSet::new();
    let mut errors = Vec::new();
    for mut k in kids {
        let out = k.stdout.take().unwrap();
        for line in std::io::BufReader::new(out).lines() {
            let line = line.unwrap();
            if let Some(rest) = line.strip_prefix("ack ") {
                let (p, i) = rest.split_once(' ').unwrap();
                acked.insert((p.parse::<i64>().unwrap(), i.parse::<i64>().unwrap()));
            } else if line.starts_with("error") {
                errors.push(line);
            } else if line.starts_with("done") {
                eprintln!("{line}");
            }
        }
        assert!(k.wait().unwrap().success(), "a child failed");
    }
    assert_eq!(errors, Vec::<String>::new(), "the children's errors");
    assert_eq!(acked.len() as u64, PROCS * PROC_COMMITS);
    let c = connect(&path, true);
    wal(&c);
    let rows: std::collections::BTreeSet<(i64, i64)> = c
        .prepare("SELECT p, i FROM t")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(rows, acked);
    assert_eq!(run(&c, "PRAGMA integrity_check"), "T[111, 107]|\n");
}

const KILL_DIR: &str = "REWIND_WORKLOADS_KILL_DIR";
const KILL_AT: &str = "REWIND_WORKLOADS_KILL_AT";

/// The blob transaction `i` writes into row `id` (its length and fill
/// depend on both, so every version of a row differs).
fn blob(i: i64, id: i64) -> Vec<u8> {
    let len = 50 + ((i * 7919 + id * 104_729) % 9000) as usize;
    vec![(i * 31 + id) as u8; len]
}

/// What transaction `i` does to the table: inserts row `i`, rewrites row
/// `i / 2`, deletes row `i - 5` every third transaction; `(id, Some(v))`
/// writes, `(id, None)` deletes.
fn kill_tx(i: i64) -> Vec<(i64, Option<Vec<u8>>)> {
    let mut ops = vec![(i, Some(blob(i, i)))];
    if i / 2 >= 1 {
        ops.push((i / 2, Some(blob(i, i / 2))));
    }
    if i % 3 == 0 && i > 5 {
        ops.push((i - 5, None));
    }
    ops
}

/// The child of `self_kills_at_exact_points_lose_and_add_nothing`: runs
/// transactions from the one after the last committed, each acknowledged
/// on stdout (`ack I`) once its commit returned, with checkpoints of every
/// mode, and kills itself with SIGKILL at a point given by counts:
/// `fence N` just before the pool's `N`th fence from the start of the
/// first transaction (inside a commit, a block link, a WAL restart or the
/// freeing of its blocks), or `hook N` inside SQLite's commit hook of the
/// `N`th transaction (its frames written to the WAL buffer, not yet to
/// the pool).
#[test]
#[ignore = "child process of self_kills_at_exact_points_lose_and_add_nothing"]
fn kill_point_child() {
    use std::io::Write;
    let (Ok(dir), Ok(at)) = (std::env::var(KILL_DIR), std::env::var(KILL_AT)) else {
        return;
    };
    let (kind, n) = at.split_once(' ').unwrap();
    let n: u64 = n.parse().unwrap();
    let c = connect(&Path::new(&dir).join("k.db"), true);
    wal(&c);
    c.execute_batch(
        "PRAGMA cache_size = 6; PRAGMA wal_autocheckpoint = 20;
         CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v BLOB NOT NULL);
         CREATE TABLE IF NOT EXISTS meta(k INTEGER PRIMARY KEY, n INTEGER NOT NULL);
         INSERT OR IGNORE INTO meta VALUES (0, 0);",
    )
    .unwrap();
    let start: i64 = c.query_row("SELECT n FROM meta", [], |r| r.get(0)).unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(out).unwrap();
    out.flush().unwrap();
    match kind {
        "fence" => rewind::persist::kill_at_fence(n),
        "hook" => {
            use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
            static LEFT: AtomicU64 = AtomicU64::new(0);
            unsafe extern "C" fn hook(_: *mut std::ffi::c_void) -> std::ffi::c_int {
                if LEFT.fetch_sub(1, SeqCst) == 1 {
                    // SAFETY: raise only sends this process a signal.
                    unsafe { libc::raise(libc::SIGKILL) };
                }
                0
            }
            LEFT.store(n, SeqCst);
            // SAFETY: the connection's handle is open for the hook's
            // life (this function's), and the hook takes no argument.
            unsafe {
                rusqlite::ffi::sqlite3_commit_hook(c.handle(), Some(hook), std::ptr::null_mut())
            };
        }
        _ => panic!("{kind}"),
    }
    for i in start + 1..start + 200 {
        c.execute_batch("BEGIN").unwrap();
        for (id, v) in kill_tx(i) {
            match v {
                Some(v) => c
                    .execute(
                        "INSERT OR REPLACE INTO t VALUES (?1, ?2)",
                        rusqlite::params![id, v],
                    )
                    .unwrap(),
                None => c.execute("DELETE FROM t WHERE id = ?1", [id]).unwrap(),
            };
        }
        c.execute("UPDATE meta SET n = ?1", [i]).unwrap();
        c.execute_batch("COMMIT").unwrap();
        writeln!(out, "ack {i}").unwrap();
        out.flush().unwrap();
        if i % 5 == 0 {
            let m = ["PASSIVE", "FULL", "RESTART", "TRUNCATE"][(i / 5 % 4) as usize];
            c.query_row(&format!("PRAGMA wal_checkpoint({m})"), [], |_| Ok(()))
                .unwrap();
        }
    }
    writeln!(out, "finished").unwrap();
}

/// A writer killed (SIGKILL) at exact points chosen by a seed, counted in
/// the pool's fences (every fence of commits, block links, WAL restarts
/// and frees is a candidate) and in SQLite's commit hooks, then reopened:
/// `integrity_check` ok, and the table holds exactly the acknowledged
/// transactions (or one more, whose commit the kill cut off from its
/// report).
#[test]
fn self_kills_at_exact_points_lose_and_add_nothing() {
    use std::collections::BTreeMap;
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.db");
    let mut r = SmallRng::seed_from_u64(23);
    let mut model: BTreeMap<i64, Vec<u8>> = BTreeMap::new();
    let mut done = 0i64;
    let mut finished = 0;
    for round in 0..30 {
        let at = if round % 4 == 3 {
            format!("hook {}", r.gen_range(1..12))
        } else {
            format!("fence {}", r.gen_range(1..120))
        };
        let mut kid = child(
            "kill_point_child",
            &[
                (KILL_DIR, dir.path().display().to_string()),
                (KILL_AT, at.clone()),
            ],
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
        let mut acked = done;
        for line in std::io::BufReader::new(kid.stdout.take().unwrap()).lines() {
            let line = line.unwrap();
            if let Some(i) = line.strip_prefix("ack ") {
                acked = i.parse().unwrap();
            } else if line == "finished" {
                finished += 1;
            }
        }
        let status = kid.wait().unwrap();
        let c = connect(&path, true);
        assert_eq!(
            run(&c, "PRAGMA integrity_check"),
            "T[111, 107]|\n",
            "round {round} ({at}, {status})"
        );
        let n: i64 = c.query_row("SELECT n FROM meta", [], |r| r.get(0)).unwrap();
        assert!(
            n == acked || n == acked + 1,
            "round {round} ({at}): {n} committed, {acked} acknowledged"
        );
        while done < n {
            done += 1;
            for (id, v) in kill_tx(done) {
                match v {
                    Some(v) => model.insert(id, v),
                    None => model.remove(&id),
                };
            }
        }
        let rows: BTreeMap<i64, Vec<u8>> = c
            .prepare("SELECT id, v FROM t")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        assert!(
            rows == model,
            "round {round} ({at}): the rows differ from the {n} transactions"
        );
    }
    assert!(done > 30, "the children made progress: {done}");
    assert!(
        finished < 10,
        "most children were killed: {finished} finished"
    );
}

/// A small tmpfs mounted for a test (root only), unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(bytes: u64) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs { dir })
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

const DISK: &str = "rewind-workloads-disk";

/// Row `i`'s bytes in the full-disk test: not zeros (a differential frame
/// of a zeroed page costs nothing), some of several pages.
fn disk_blob(i: i64) -> Vec<u8> {
    let len = if i % 10 == 0 { 30_000 } else { 1500 };
    (0..len).map(|k| (k as i64 * 7 + i) as u8 | 1).collect()
}

/// A full disk (a 6 MiB tmpfs, where the test may mount one; skipped
/// otherwise) under a writer with checkpoints on: every failure is an
/// error SQLite reports (`SQLITE_FULL`), never a panic or an abort, and
/// once space is back, the database opens with exactly the acknowledged
/// commits and `integrity_check` ok.
#[test]
fn a_full_disk_is_an_error_and_loses_no_acknowledged_commit() {
    let Some(fs) = Tmpfs::mount(6 << 20) else {
        eprintln!("skipped: no tmpfs could be mounted (not root?)");
        return;
    };
    let cfg = rewind_sqlite::Config::default()
        .pool_size(1 << 20)
        .max_pool_size(32 << 20);
    common::register_once(DISK, &cfg);
    let path = fs.path().join("d.db");
    // Room given back at the end.
    let ballast = fs.path().join("ballast");
    std::fs::write(&ballast, vec![1u8; 1 << 20]).unwrap();
    let open = || {
        let c = Connection::open_with_flags_and_vfs(&path, OpenFlags::default(), DISK).unwrap();
        wal(&c);
        c
    };
    let c = open();
    c.execute_batch(
        "PRAGMA wal_autocheckpoint = 200;
         CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);",
    )
    .unwrap();
    let mut acked = 0i64;
    let mut errors = std::collections::BTreeMap::new();
    let mut i = 0i64;
    // Until ten writes in a row failed.
    let mut failed_in_a_row = 0;
    while failed_in_a_row < 10 {
        i += 1;
        assert!(i < 100_000, "the disk never filled");
        match c.execute(
            "INSERT INTO t VALUES (?1, ?2)",
            rusqlite::params![i, disk_blob(i)],
        ) {
            Ok(_) => {
                acked = i;
                failed_in_a_row = 0;
            }
            Err(e) => {
                failed_in_a_row += 1;
                *errors
                    .entry(format!("{:?}", e.sqlite_error_code()))
                    .or_insert(0) += 1;
                let _ = c.execute_batch("ROLLBACK");
                if failed_in_a_row % 3 == 0 {
                    // A checkpoint may free the log, or fail itself.
                    let _ = c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
                }
            }
        }
    }
    assert!(acked > 20, "{acked} commits before the disk filled");
    assert_eq!(
        errors.keys().cloned().collect::<Vec<_>>(),
        ["Some(DiskFull)"],
        "every failure is SQLITE_FULL: {errors:?}, last {:?}",
        rewind_sqlite::last_error()
    );
    let rows = |c: &Connection| -> Vec<(i64, bool)> {
        c.prepare("SELECT id, v FROM t ORDER BY id")
            .unwrap()
            .query_map([], |r| {
                Ok((r.get(0)?, r.get::<_, Vec<u8>>(1)? == disk_blob(r.get(0)?)))
            })
            .unwrap()
            .map(|r| r.unwrap())
            .collect()
    };
    let before = rows(&c);
    assert_eq!(
        before.len() as i64,
        acked - errors.values().sum::<i64>() + failed_in_a_row
    );
    drop(c);
    std::fs::remove_file(&ballast).unwrap();
    let c = open();
    assert_eq!(run(&c, "PRAGMA integrity_check"), "T[111, 107]|\n");
    let after = rows(&c);
    assert_eq!(after, before, "the rows seen before the close");
    assert!(after.iter().all(|r| r.1), "every row holds its bytes");
    assert_eq!(after.last().map(|r| r.0), Some(acked));
    // Writes go on now there is room.
    c.execute("INSERT INTO t VALUES (?1, x'00')", [i + 1])
        .unwrap();
}

/// Settings that change how SQLite sizes and keeps its WAL, each beside
/// stock SQLite with the same statements: `journal_size_limit` (the WAL
/// truncated after the first commit of a restarted log), persistent WAL
/// (`SQLITE_FCNTL_PERSIST_WAL`: truncated to nothing at close rather than
/// deleted), exclusive locking mode (SQLite's wal-index on its heap), and
/// the page size changed by a VACUUM outside WAL mode between two WAL
/// sessions.
#[test]
fn wal_size_limits_persistent_wal_exclusive_mode_and_page_size_changes_match_stock() {
    let dir = tempfile::tempdir().unwrap();
    let mut results = Vec::new();
    for ours in [false, true] {
        let path = dir.path().join(if ours { "ours.db" } else { "stock.db" });
        let mut out = String::new();
        let work = |c: &Connection, out: &mut String, tag: i64| {
            for i in 0..60 {
                c.execute(
                    "INSERT INTO t(v, tag) VALUES (?1, ?2)",
                    rusqlite::params![vec![(i + tag) as u8; 200 + (i as usize * 37) % 3000], tag],
                )
                .unwrap();
                if i % 20 == 19 {
                    let m = ["RESTART", "PASSIVE", "TRUNCATE"][(i / 20) as usize % 3];
                    let busy: i64 = c
                        .query_row(&format!("PRAGMA wal_checkpoint({m})"), [], |r| r.get(0))
                        .unwrap();
                    out.push_str(&format!("{m} {busy}\n"));
                }
            }
            out.push_str(&run(
                c,
                "SELECT tag, count(*), sum(length(v)), hex(max(v)) FROM t GROUP BY tag",
            ));
        };
        // journal_size_limit, at two limits.
        let c = connect(&path, ours);
        wal(&c);
        c.execute_batch(
            "PRAGMA journal_size_limit = 0; PRAGMA wal_autocheckpoint = 15;
             CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB, tag INTEGER);",
        )
        .unwrap();
        work(&c, &mut out, 1);
        c.execute_batch("PRAGMA journal_size_limit = 20000")
            .unwrap();
        work(&c, &mut out, 2);
        // Persistent WAL: the close truncates rather than deletes.
        let mut on: std::ffi::c_int = 1;
        // SAFETY: the handle is open; PERSIST_WAL reads and writes an int.
        let rc = unsafe {
            rusqlite::ffi::sqlite3_file_control(
                c.handle(),
                c"main".as_ptr(),
                rusqlite::ffi::SQLITE_FCNTL_PERSIST_WAL,
                &mut on as *mut _ as *mut std::ffi::c_void,
            )
        };
        assert_eq!(rc, 0);
        work(&c, &mut out, 3);
        drop(c);
        let c = connect(&path, ours);
        wal(&c);
        work(&c, &mut out, 4);
        drop(c);
        // Exclusive locking mode: the wal-index in SQLite's heap.
        let c = connect(&path, ours);
        c.execute_batch("PRAGMA locking_mode = EXCLUSIVE").unwrap();
        wal(&c);
        work(&c, &mut out, 5);
        drop(c);
        // The page size changed outside WAL mode, then WAL again.
        let c = connect(&path, ours);
        out.push_str(&mode(&c, "DELETE"));
        c.execute_batch("PRAGMA page_size = 1024; VACUUM;").unwrap();
        out.push_str(&run(&c, "PRAGMA page_size"));
        wal(&c);
        work(&c, &mut out, 6);
        c.execute_batch("PRAGMA wal_autocheckpoint = 0").unwrap();
        work(&c, &mut out, 7);
        drop(c);
        let c = connect(&path, ours);
        out.push_str(&run(&c, "PRAGMA page_size"));
        out.push_str(&run(&c, "PRAGMA integrity_check"));
        out.push_str(&run(
            &c,
            "SELECT tag, count(*), sum(length(v)), hex(max(v)) FROM t GROUP BY tag",
        ));
        results.push(out);
    }
    assert_eq!(results[0], results[1]);
}

/// A WAL of more than 12,000 frames (checkpoints off, 512-byte pages):
/// the wal-index spans several of its 32 KiB regions, in process memory;
/// a second connection reads it whole, a reopen rebuilds it from the pool,
/// and a read-only connection, alone and beside a writer, sees the same.
#[test]
fn a_wal_of_many_frames_and_read_only_connections_read_every_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let c = connect(&path, true);
    c.execute_batch("PRAGMA page_size = 512").unwrap();
    wal(&c);
    c.execute_batch(
        "PRAGMA wal_autocheckpoint = 0;
         CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);
         CREATE INDEX tv ON t(v);",
    )
    .unwrap();
    let v = |i: i64| vec![(i % 251) as u8; 100 + (i % 300) as usize];
    let sum = |c: &Connection| -> (i64, i64, String) {
        c.query_row(
            "SELECT count(*), sum(length(v)), hex(max(v)) FROM t",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap()
    };
    for i in 0..3000i64 {
        c.execute("INSERT INTO t VALUES (?1, ?2)", rusqlite::params![i, v(i)])
            .unwrap();
    }
    let frames = rewind_sqlite::stats(&path).unwrap().frames;
    assert!(frames > 12_000, "{frames} frames");
    let want = sum(&c);
    let c2 = connect(&path, true);
    assert_eq!(sum(&c2), want);
    drop((c, c2));
    // Read-only, alone: the pool was removed at the close.
    let ro = |p: &Path| {
        common::register_once(VFS, &cfg());
        Connection::open_with_flags_and_vfs(p, OpenFlags::SQLITE_OPEN_READ_ONLY, VFS).unwrap()
    };
    let r = ro(&path);
    assert_eq!(sum(&r), want, "read-only, alone");
    // Beside a writer that fills the WAL again.
    let w = connect(&path, true);
    w.execute_batch("PRAGMA wal_autocheckpoint = 0").unwrap();
    for i in 3000..4000i64 {
        w.execute("INSERT INTO t VALUES (?1, ?2)", rusqlite::params![i, v(i)])
            .unwrap();
    }
    let want = sum(&w);
    assert_eq!(sum(&r), want, "read-only, beside the writer");
    // A crash: the files as they are, opened elsewhere, read-only first.
    let crash = dir.path().join("crash");
    std::fs::create_dir(&crash).unwrap();
    for f in ["m.db", "m.db-wal.rewind"] {
        std::fs::copy(dir.path().join(f), crash.join(f)).unwrap();
    }
    let r2 = ro(&crash.join("m.db"));
    assert_eq!(sum(&r2), want, "read-only, recovering a crashed WAL");
    let w2 = connect(&crash.join("m.db"), true);
    assert_eq!(sum(&w2), want);
    assert_eq!(run(&w2, "PRAGMA integrity_check"), "T[111, 107]|\n");
}

/// Threads whose transactions start as readers and upgrade to writers
/// (`BEGIN DEFERRED`, a read, then an increment): an upgrade on a stale
/// snapshot must fail (`SQLITE_BUSY`, as SQLite's `BUSY_SNAPSHOT`) and be
/// retried, never commit over another's increment, so the counter ends
/// at exactly the number of acknowledged commits; with checkpoints of
/// every mode from another thread meanwhile.
#[test]
fn deferred_transactions_upgrading_on_stale_snapshots_lose_no_increment() {
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
    const THREADS: u64 = 4;
    const INCS: u64 = 60;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    let setup = connect(&path, true);
    wal(&setup);
    setup
        .execute_batch(
            "PRAGMA wal_autocheckpoint = 10;
             CREATE TABLE c(id INTEGER PRIMARY KEY, n INTEGER, pad BLOB);
             INSERT INTO c VALUES (1, 0, zeroblob(3000));
             CREATE TABLE h(t INTEGER, k INTEGER, seen INTEGER);",
        )
        .unwrap();
    let running = AtomicU64::new(THREADS);
    let retries = AtomicU64::new(0);
    std::thread::scope(|s| {
        let (path, running, retries) = (&path, &running, &retries);
        for t in 0..THREADS {
            s.spawn(move || {
                let c = connect(path, true);
                for k in 0..INCS {
                    loop {
                        c.execute_batch("BEGIN DEFERRED").unwrap();
                        let n: i64 = c
                            .query_row("SELECT n FROM c WHERE id = 1", [], |r| r.get(0))
                            .unwrap();
                        // Let the others move on from this snapshot now
                        // and then.
                        if k % 3 == t % 3 {
                            std::thread::yield_now();
                        }
                        let r = c
                            .execute(
                                "UPDATE c SET n = ?1, pad = randomblob(3000) WHERE id = 1",
                                [n + 1],
                            )
                            .and_then(|_| {
                                c.execute(
                                    "INSERT INTO h VALUES (?1, ?2, ?3)",
                                    [t as i64, k as i64, n],
                                )
                            })
                            .and_then(|_| c.execute_batch("COMMIT"));
                        match r {
                            Ok(_) => break,
                            Err(e) => {
                                assert_eq!(
                                    e.sqlite_error_code(),
                                    Some(rusqlite::ErrorCode::DatabaseBusy),
                                    "thread {t}: {e}"
                                );
                                let _ = c.execute_batch("ROLLBACK");
                                retries.fetch_add(1, SeqCst);
                            }
                        }
                    }
                }
                running.fetch_sub(1, SeqCst);
            });
        }
        s.spawn(move || {
            let c = connect(path, true);
            c.busy_handler(Some(|n| {
                std::thread::sleep(Duration::from_micros(100));
                n < 100
            }))
            .unwrap();
            let mut k = 0;
            while running.load(SeqCst) > 0 {
                let m = ["PASSIVE", "FULL", "RESTART", "TRUNCATE"][k % 4];
                c.query_row(&format!("PRAGMA wal_checkpoint({m})"), [], |_| Ok(()))
                    .unwrap();
                k += 1;
                std::thread::sleep(Duration::from_micros(500));
            }
        });
    });
    let total = (THREADS * INCS) as i64;
    let n: i64 = setup
        .query_row("SELECT n FROM c", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, total, "{} retries", retries.load(SeqCst));
    // Each commit saw the one before it: the values seen are 0..total.
    let seen: Vec<i64> = setup
        .prepare("SELECT seen FROM h ORDER BY seen")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(seen, (0..total).collect::<Vec<_>>());
    drop(setup);
    let c = connect(&path, true);
    assert_eq!(
        c.query_row("SELECT n FROM c", [], |r| r.get::<_, i64>(0))
            .unwrap(),
        total
    );
    assert_eq!(run(&c, "PRAGMA integrity_check"), "T[111, 107]|\n");
}

/// Transactions that spill pages into the WAL (a cache of 5 pages) and
/// then fail with `SQLITE_FULL` at their commit (a pool of 2 MiB at its
/// maximum), between small ones that commit, with savepoints rolled back
/// inside the large ones: the later commits reuse the frames the failed
/// ones left in the WAL's buffer, and the rows stay exactly stock
/// SQLite's for the same committed statements, after a crash (the files
/// copied as they are) and a reopen too.
#[test]
fn commits_after_spilled_transactions_that_failed_full_match_stock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let stock = connect(&dir.path().join("stock.db"), false);
    wal(&stock);
    let c = connect_small(&path);
    let schema = "PRAGMA cache_size = 5; PRAGMA wal_autocheckpoint = 0;
                  CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB, w INTEGER);
                  CREATE INDEX tw ON t(w);";
    stock.execute_batch(schema).unwrap();
    c.execute_batch(schema).unwrap();
    let mut r = SmallRng::seed_from_u64(5);
    let mut fulls = 0;
    for round in 0..40 {
        let big = round % 4 == 1;
        let n = if big { 700 } else { r.gen_range(1..6) };
        let mut stmts = vec!["BEGIN".to_string()];
        for k in 0..n {
            let id = r.gen_range(0..400);
            let len = r.gen_range(10..(if big { 4000 } else { 1500 }));
            stmts.push(format!(
                "INSERT OR REPLACE INTO t VALUES ({id}, CAST(printf('%.*c', {len}, '{}') AS BLOB), {})",
                (b'a' + (k % 26) as u8) as char,
                r.gen_range(0..50)
            ));
            if k % 50 == 10 {
                stmts.push("SAVEPOINT s".into());
            }
            if k % 50 == 30 {
                stmts.push("ROLLBACK TO s".into());
                stmts.push("RELEASE s".into());
            }
        }
        stmts.push(format!("DELETE FROM t WHERE w = {}", r.gen_range(0..50)));
        stmts.push("COMMIT".into());
        let mut failed = false;
        for s in &stmts {
            if let Err(e) = c.execute_batch(s) {
                assert_eq!(
                    e.sqlite_error_code(),
                    Some(rusqlite::ErrorCode::DiskFull),
                    "round {round}: {s}: {e}"
                );
                failed = true;
                break;
            }
        }
        if failed {
            let _ = c.execute_batch("ROLLBACK");
            fulls += 1;
            // Room again for what follows.
            let busy: i64 = c
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
                .unwrap();
            assert_eq!(busy, 0);
        } else {
            for s in &stmts {
                stock.execute_batch(s).unwrap();
            }
        }
        assert_eq!(dump(&stock), dump(&c), "round {round}");
    }
    assert!(fulls >= 3, "{fulls} transactions failed with SQLITE_FULL");
    let crash = dir.path().join("crash");
    std::fs::create_dir(&crash).unwrap();
    for f in ["s.db", "s.db-wal.rewind"] {
        std::fs::copy(dir.path().join(f), crash.join(f)).unwrap();
    }
    drop(c);
    for p in [path, crash.join("s.db")] {
        let c = connect_small(&p);
        assert_eq!(dump(&stock), dump(&c), "{}", p.display());
        assert_eq!(run(&c, "PRAGMA integrity_check"), "T[111, 107]|\n");
    }
}
