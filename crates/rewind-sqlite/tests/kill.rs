//! Process-kill torture: a child process runs SQLite transactions through
//! the VFS (inserts, updates, deletes, multi-statement ones, some rolled
//! back, checkpoints of every kind) and reports each commit on its stdout;
//! the parent SIGKILLs it at a random instant, reopens the database, and
//! checks `PRAGMA integrity_check` and that the table holds exactly the
//! acknowledged transactions (or one more: the one whose commit returned
//! but whose report the kill cut off).
//!
//! Budgeted by counts: `REWIND_SQLITE_KILLS` kills (default 60), seeded by
//! `REWIND_SQLITE_SEED`. The child is this test binary again, running the
//! ignored test `kill_child` with the directory in its environment.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rusqlite::{params, Connection};

const VFS: &str = "rewind-kill";
const CHILD_DIR: &str = "REWIND_SQLITE_KILL_DIR";
const CHILD_SEED: &str = "REWIND_SQLITE_KILL_SEED";
/// Transactions a child runs at most (it is normally killed long before).
const CHILD_TXS: u64 = 20_000;

mod common;

fn open(path: &Path) -> Connection {
    let cfg = rewind_sqlite::Config::default().pool_size(16 << 20);
    common::open_wal(VFS, &cfg, path)
}

/// One statement of a transaction, decided by the seed and the
/// transaction's number alone, applied the same way to SQLite and to the
/// model (`nth` picks an existing row by its rank in id order).
#[derive(Clone, Debug)]
enum Op {
    Insert { id: i64, len: usize, fill: u8 },
    Update { nth: u64, len: usize, fill: u8 },
    Delete { nth: u64 },
}

/// What transaction `i` does: a rolled-back attempt first (its statements
/// must leave no trace), then the statements that commit.
fn plan(seed: u64, i: u64) -> (Option<Vec<Op>>, Vec<Op>) {
    let mut r = SmallRng::seed_from_u64(seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let ops = |r: &mut SmallRng, base: i64| -> Vec<Op> {
        match r.gen_range(0..10) {
            0..=3 => vec![Op::Insert {
                id: base,
                len: 100,
                fill: r.gen(),
            }],
            4 | 5 => vec![Op::Update {
                nth: r.gen(),
                len: 100,
                fill: r.gen(),
            }],
            6 => vec![Op::Delete { nth: r.gen() }],
            7 | 8 => vec![
                Op::Insert {
                    id: base,
                    len: 100,
                    fill: r.gen(),
                },
                Op::Insert {
                    id: base + 1,
                    len: 300,
                    fill: r.gen(),
                },
                Op::Update {
                    nth: r.gen(),
                    len: 50,
                    fill: r.gen(),
                },
                Op::Delete { nth: r.gen() },
            ],
            // Large: more pages than the child's cache holds, so SQLite
            // spills frames before the commit and rewrites some in place.
            _ => (0..40)
                .map(|j| Op::Insert {
                    id: base + j,
                    len: 900,
                    fill: r.gen(),
                })
                .collect(),
        }
    };
    let rolled = r
        .gen_ratio(1, 8)
        .then(|| ops(&mut r, -(i as i64) * 100 - 1000));
    let commit = ops(&mut r, i as i64 * 100);
    (rolled, commit)
}

fn apply_sql(c: &Connection, ops: &[Op]) -> rusqlite::Result<()> {
    for op in ops {
        match *op {
            Op::Insert { id, len, fill } => {
                c.execute(
                    "INSERT INTO t(id, v) VALUES (?1, ?2)",
                    params![id, vec![fill; len]],
                )?;
            }
            Op::Update { nth, len, fill } => {
                let n: i64 = c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))?;
                if n > 0 {
                    c.execute(
                        "UPDATE t SET v = ?1 WHERE id = (SELECT id FROM t ORDER BY id LIMIT 1 OFFSET ?2)",
                        params![vec![fill; len], (nth % n as u64) as i64],
                    )?;
                }
            }
            Op::Delete { nth } => {
                let n: i64 = c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))?;
                if n > 0 {
                    c.execute(
                        "DELETE FROM t WHERE id = (SELECT id FROM t ORDER BY id LIMIT 1 OFFSET ?1)",
                        params![(nth % n as u64) as i64],
                    )?;
                }
            }
        }
    }
    Ok(())
}

fn apply_model(m: &mut BTreeMap<i64, Vec<u8>>, ops: &[Op]) {
    for op in ops {
        match *op {
            Op::Insert { id, len, fill } => {
                m.insert(id, vec![fill; len]);
            }
            Op::Update { nth, len, fill } => {
                if !m.is_empty() {
                    let k = *m.keys().nth((nth % m.len() as u64) as usize).unwrap();
                    m.insert(k, vec![fill; len]);
                }
            }
            Op::Delete { nth } => {
                if !m.is_empty() {
                    let k = *m.keys().nth((nth % m.len() as u64) as usize).unwrap();
                    m.remove(&k);
                }
            }
        }
    }
}

fn setup(c: &Connection) {
    c.execute_batch(
        "CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v BLOB NOT NULL);
         CREATE TABLE IF NOT EXISTS meta(k INTEGER PRIMARY KEY, n INTEGER NOT NULL);
         INSERT OR IGNORE INTO meta VALUES (0, 0);",
    )
    .unwrap();
}

/// The child: runs transactions from the one after the last committed,
/// printing `ack N` once transaction N's commit returned, and `ckpt`
/// before each explicit checkpoint.
#[test]
#[ignore = "the kill test's child process; runs only with its environment"]
fn kill_child() {
    let (Ok(dir), Ok(seed)) = (std::env::var(CHILD_DIR), std::env::var(CHILD_SEED)) else {
        return;
    };
    let seed: u64 = seed.parse().unwrap();
    let c = open(&Path::new(&dir).join("k.db"));
    c.pragma_update(None, "cache_size", 8).unwrap();
    c.pragma_update(None, "wal_autocheckpoint", 40).unwrap();
    setup(&c);
    let start: u64 = c.query_row("SELECT n FROM meta", [], |r| r.get(0)).unwrap();
    let mut out = std::io::stdout().lock();
    // The harness printed the test's name without a newline.
    writeln!(out).unwrap();
    let mut r = SmallRng::seed_from_u64(seed.wrapping_add(start));
    for i in start + 1..start + CHILD_TXS {
        let (rolled, ops) = plan(seed, i);
        if let Some(rolled) = rolled {
            c.execute_batch("BEGIN").unwrap();
            apply_sql(&c, &rolled).unwrap();
            c.execute_batch("ROLLBACK").unwrap();
        }
        c.execute_batch("BEGIN").unwrap();
        apply_sql(&c, &ops).unwrap();
        c.execute("UPDATE meta SET n = ?1", [i as i64]).unwrap();
        c.execute_batch("COMMIT").unwrap();
        writeln!(out, "ack {i}").unwrap();
        out.flush().unwrap();
        if r.gen_ratio(1, 6) {
            writeln!(out, "ckpt").unwrap();
            out.flush().unwrap();
            let mode = ["PASSIVE", "FULL", "RESTART", "TRUNCATE"][r.gen_range(0..4)];
            c.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |_| Ok(()))
                .unwrap();
        }
    }
}

/// What a kill found.
struct Round {
    acked: u64,
    committed: u64,
    in_checkpoint: bool,
}

fn one_kill(exe: &Path, dir: &Path, seed: u64, r: &mut SmallRng) -> Round {
    let mut child = Command::new(exe)
        .args([
            "kill_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir)
        .env(CHILD_SEED, seed.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let target = r.gen_range(1..30u64);
    let at_ckpt = r.gen_ratio(1, 4);
    let (mut acked, mut seen, mut in_checkpoint) = (0, 0, false);
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(n) = line.strip_prefix("ack ") {
            acked = n.parse().unwrap();
            seen += 1;
            in_checkpoint = false;
        } else if line == "ckpt" {
            in_checkpoint = true;
            if at_ckpt && seen >= target / 2 {
                break;
            }
        }
        if seen >= target && !at_ckpt {
            break;
        }
    }
    // A few microseconds more, at random, so that the kill lands anywhere
    // in the next transaction or checkpoint.
    let spin = r.gen_range(0..20_000u32);
    for k in 0..spin {
        std::hint::black_box(k);
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // The reports the child wrote before it died are still in the pipe.
    for line in lines {
        let Ok(line) = line else { break };
        if let Some(n) = line.strip_prefix("ack ") {
            acked = n.parse().unwrap();
            in_checkpoint = false;
        } else if line == "ckpt" {
            in_checkpoint = true;
        }
    }
    Round {
        acked,
        committed: 0,
        in_checkpoint,
    }
}

#[test]
fn sigkill_at_random_instants_loses_and_adds_nothing() {
    let kills: u32 = std::env::var("REWIND_SQLITE_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let seed: u64 = std::env::var("REWIND_SQLITE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(19);
    let exe = std::env::current_exe().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("k.db");
    let mut r = SmallRng::seed_from_u64(seed);
    let mut model: BTreeMap<i64, Vec<u8>> = BTreeMap::new();
    let mut done = 0u64; // transactions applied to the model
    let (mut ckpt_kills, mut extra) = (0, 0);
    for k in 0..kills {
        let mut round = one_kill(&exe, dir.path(), seed, &mut r);
        let c = open(&db);
        let ok: String = c
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(ok, "ok", "kill {k}: integrity_check");
        setup(&c);
        round.committed = c.query_row("SELECT n FROM meta", [], |r| r.get(0)).unwrap();
        let (acked, n) = (round.acked.max(done), round.committed);
        assert!(
            n == acked || n == acked + 1,
            "kill {k}: {n} transactions committed, {acked} acknowledged"
        );
        extra += (n == acked + 1) as u32;
        ckpt_kills += round.in_checkpoint as u32;
        while done < n {
            done += 1;
            apply_model(&mut model, &plan(seed, done).1);
        }
        let mut rows = BTreeMap::new();
        let mut st = c.prepare("SELECT id, v FROM t ORDER BY id").unwrap();
        let mut q = st.query([]).unwrap();
        while let Some(row) = q.next().unwrap() {
            rows.insert(
                row.get::<_, i64>(0).unwrap(),
                row.get::<_, Vec<u8>>(1).unwrap(),
            );
        }
        assert!(
            rows == model,
            "kill {k}: the table differs from the {n} acknowledged transactions"
        );
    }
    eprintln!(
        "{kills} kills: {done} transactions, {ckpt_kills} kills during a checkpoint, {extra} with a commit whose report was cut off"
    );
    assert!(done > kills as u64, "the children made progress");
    assert!(ckpt_kills > 0, "some kills landed in checkpoints");
}
