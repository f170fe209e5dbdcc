//! SQLite's behaviour is unchanged by the VFS: the same seeded statements
//! (inserts, updates, deletes, queries, transactions committed and rolled
//! back, checkpoints, a reopen) run on stock SQLite in WAL mode and on the
//! VFS, and every result is compared.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rusqlite::{Connection, OpenFlags};

const VFS: &str = "rewind-differential";

mod common;
use common::run;

fn vfs() {
    common::register_once(VFS, &rewind_sqlite::Config::default().pool_size(16 << 20));
}

fn open(path: &std::path::Path, ours: bool) -> Connection {
    let c = if ours {
        vfs();
        Connection::open_with_flags_and_vfs(path, OpenFlags::default(), VFS).unwrap()
    } else {
        Connection::open(path).unwrap()
    };
    c.pragma_update(None, "journal_mode", "WAL").unwrap();
    // Small caches and frequent checkpoints: spills, in-place frame
    // rewrites and WAL restarts happen often.
    c.pragma_update(None, "cache_size", 10).unwrap();
    c.pragma_update(None, "wal_autocheckpoint", 25).unwrap();
    // Results do not depend on it; the stock side's fsyncs would dominate.
    c.pragma_update(None, "synchronous", "NORMAL").unwrap();
    c
}

fn statement(r: &mut SmallRng, in_tx: &mut bool) -> String {
    let k = r.gen_range(0..1000);
    let blob = r.gen_range(1..2000);
    match r.gen_range(0..14) {
        0..=3 => format!(
            "INSERT INTO t(a, b, c) VALUES ({k}, 'text {k}', CAST(printf('%0{blob}d', {k}) AS BLOB))"
        ),
        4 => format!("INSERT OR REPLACE INTO t(id, a, b) VALUES ({}, {k}, 'replaced')", k % 300),
        5 | 6 => format!("UPDATE t SET b = b || '+', a = a + 1 WHERE a % 7 = {}", k % 7),
        7 => format!("DELETE FROM t WHERE a % 11 = {}", k % 11),
        8 => "SELECT count(*), sum(a), max(length(c)), group_concat(b, ',') FROM t".to_string(),
        9 => format!("SELECT id, a, b FROM t WHERE a BETWEEN {k} AND {} ORDER BY id", k + 50),
        10 if !*in_tx => {
            *in_tx = true;
            "BEGIN".to_string()
        }
        11 if *in_tx => {
            *in_tx = false;
            if r.gen_ratio(1, 3) { "ROLLBACK" } else { "COMMIT" }.to_string()
        }
        12 if !*in_tx => {
            ["PRAGMA wal_checkpoint(PASSIVE)", "PRAGMA wal_checkpoint(TRUNCATE)", "PRAGMA wal_checkpoint(RESTART)"]
                [r.gen_range(0..3)]
            .to_string()
        }
        13 => format!("INSERT INTO u SELECT a, b FROM t WHERE id % 5 = {}", k % 5),
        _ => "SELECT a, count(*) FROM u GROUP BY a ORDER BY a LIMIT 20".to_string(),
    }
}

#[test]
fn the_same_statements_give_the_same_results() {
    for seed in 0..2u64 {
        let dir = tempfile::tempdir().unwrap();
        let (stock_path, ours_path) = (dir.path().join("stock.db"), dir.path().join("ours.db"));
        let mut stock = open(&stock_path, false);
        let mut ours = open(&ours_path, true);
        let schema = "CREATE TABLE t(id INTEGER PRIMARY KEY, a INTEGER, b TEXT, c BLOB);
                      CREATE INDEX ta ON t(a);
                      CREATE TABLE u(a, b);";
        stock.execute_batch(schema).unwrap();
        ours.execute_batch(schema).unwrap();
        let mut r = SmallRng::seed_from_u64(seed);
        let mut in_tx = false;
        for i in 0..1500 {
            if i == 700 {
                if in_tx {
                    stock.execute_batch("COMMIT").unwrap();
                    ours.execute_batch("COMMIT").unwrap();
                    in_tx = false;
                }
                drop((stock, ours));
                stock = open(&stock_path, false);
                ours = open(&ours_path, true);
            }
            let sql = statement(&mut r, &mut in_tx);
            let (a, b) = (run(&stock, &sql), run(&ours, &sql));
            assert_eq!(a, b, "seed {seed}, statement {i}: {sql}");
        }
        for sql in [
            "PRAGMA integrity_check",
            "SELECT * FROM t ORDER BY id",
            "SELECT * FROM u ORDER BY rowid",
        ] {
            assert_eq!(run(&stock, sql), run(&ours, sql), "seed {seed}: {sql}");
        }
    }
}
