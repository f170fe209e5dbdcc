//! Defects found by a fifth round of probing the VFS as users' programs
//! would, each kept as a named regression test: opens racing another
//! process's read-only close (which removes an empty pool), and a
//! process whose VFS has another configuration; `last_error` naming an
//! older failure; `register` taking configurations no pool takes; a
//! database through a bind mount of its directory; a forked child
//! joining its copy of the parent's open WAL. Then probes that
//! found none, kept as regression tests of what they check: a database
//! reached by relative paths and by symbolic links to it and to its
//! directory; pool files truncated anywhere; SIGKILLs of a process
//! committing to three attached databases, of a writer beside read-only
//! processes, and of one of three processes of threads moving amounts;
//! a program's own WAL hook.
//!
//! Children are this test binary again, running the ignored test
//! `probe5_child` with their role in the environment. No test sleeps:
//! children are bounded by counts, busy handlers yield.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use rusqlite::{Connection, ErrorCode, OpenFlags};

mod common;

const VFS: &str = "rewind-user-probe5";
const CHILD_ROLE: &str = "REWIND_PROBE5_ROLE";
const CHILD_DB: &str = "REWIND_PROBE5_DB";
const CHILD_SEED: &str = "REWIND_PROBE5_SEED";

fn cfg() -> rewind_sqlite::Config {
    rewind_sqlite::Config::default()
        .pool_size(1 << 20)
        .max_pool_size(8 << 20)
}

fn open(path: &Path) -> Connection {
    common::open_wal(VFS, &cfg(), path)
}

/// A connection whose busy handler waits as long as it takes (yielding:
/// no clock).
/// A VFS of another configuration (pools of 2 MiB), for another program
/// sharing the databases.
const OTHER_VFS: &str = "rewind-user-probe5-other";

/// Set in a child whose connections use [`OTHER_VFS`].
static OTHER: AtomicBool = AtomicBool::new(false);

fn patient(path: &Path, flags: OpenFlags) -> Connection {
    let vfs = match OTHER.load(Ordering::SeqCst) {
        true => {
            let other = rewind_sqlite::Config::default().pool_size(2 << 20);
            common::register_once(OTHER_VFS, &other);
            OTHER_VFS
        }
        false => {
            common::register_once(VFS, &cfg());
            VFS
        }
    };
    let c = Connection::open_with_flags_and_vfs(path, flags, vfs).unwrap();
    c.busy_handler(Some(|_| {
        std::thread::yield_now();
        true
    }))
    .unwrap();
    c
}

/// Starts this binary's child test as `role` on `db`, its stdout piped.
fn spawn(role: &str, db: &Path, seed: u64, cwd: Option<&Path>) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "probe5_child",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ROLE, role)
    .env(CHILD_DB, db)
    .env(CHILD_SEED, seed.to_string())
    .stdin(Stdio::null())
    .stdout(Stdio::piped());
    if let Some(d) = cwd {
        cmd.current_dir(d);
    }
    cmd.spawn().unwrap()
}

/// Waits for a child; its stdout, after checking it succeeded.
fn finish(ch: Child) -> String {
    let out = ch.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "child failed: {stdout}");
    stdout
}

/// The value after `key ` on the line of `out` that starts with it.
fn field(out: &str, key: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{key} ")))
        .unwrap_or_else(|| panic!("no {key} line in {out}"))
        .to_string()
}

/// The child processes of this file's tests.
#[test]
#[ignore]
fn probe5_child() {
    let Ok(role) = std::env::var(CHILD_ROLE) else {
        return;
    };
    // The harness printed the test's name without a newline.
    println!();
    let db = PathBuf::from(std::env::var(CHILD_DB).unwrap());
    let seed: u64 = std::env::var(CHILD_SEED).unwrap().parse().unwrap();
    match role.as_str() {
        "reader" | "writer" => churn_child(&db, role == "writer"),
        "acking-writer" => acking_writer_child(&db, seed),
        "bank" => bank_child(&db, seed),
        "fork" => fork_child(&db, seed == 1),
        "other-reader" => {
            OTHER.store(true, std::sync::atomic::Ordering::SeqCst);
            churn_child(&db, false)
        }
        "attached" => attached_child(&db, seed),
        "relative" => relative_child(),
        "leave" => leave_child(&db, seed),
        _ => panic!("unknown role {role}"),
    }
}

/// Transactions the writer of `read_only_processes_closing_beside_a_writer_never_fail_its_opens`
/// commits, each on a connection of its own.
const CHURN_WRITES: i64 = 1500;

/// A writer (`CHURN_WRITES` connections, each opened, one insert, closed)
/// or a read-only reader (connections opened, one count, closed, until
/// the writer is done): prints `errors N` and the first few errors.
fn churn_child(db: &Path, writer: bool) {
    let stop = db.with_extension("stop");
    let mut errors = 0;
    let mut i = 0;
    loop {
        if writer && i == CHURN_WRITES || !writer && (stop.exists() || i == 1_000_000) {
            break;
        }
        let flags = match writer {
            true => OpenFlags::default(),
            false => OpenFlags::SQLITE_OPEN_READ_ONLY,
        };
        let c = patient(db, flags);
        let r = match writer {
            true => c.execute("INSERT INTO t VALUES (?1)", [i]).map(|_| ()),
            false => c
                .query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0))
                .map(|_| ()),
        };
        if let Err(e) = r {
            errors += 1;
            if errors < 5 {
                println!("error {i}: {e} ({:?})", rewind_sqlite::last_error());
            }
        }
        i += 1;
    }
    if writer {
        std::fs::write(&stop, b"").unwrap();
    }
    println!("errors {errors}");
}

/// A read-only connection's last close removes a WAL pool that holds
/// nothing (`readonly_pool.rs`), under the pool's lock. Another process
/// opening the WAL meanwhile could find the pool there, then gone when it
/// opened it (or gone again after each create that found it there): its
/// statement failed with `SQLITE_CANTOPEN` ("No such file or
/// directory"), which no busy handler retries. A writer process beside
/// two processes reading read-only failed 1 to 4 of 1,500 inserts in
/// each of five runs; the readers failed too. Now a pool that vanishes
/// under an open is looked for again and created, and one that keeps
/// vanishing is `SQLITE_BUSY`: no statement fails, and every insert is
/// there.
#[test]
fn read_only_processes_closing_beside_a_writer_never_fail_its_opens() {
    churn(["reader", "writer", "reader"]);
}

/// The same, the readers' program registering its VFS with another
/// `pool_size`: a pool found missing and made by the other program
/// before this one's create is opened, as a pool found there is (it was
/// `SQLITE_CANTOPEN`, "the existing pool's size is 1048576 bytes, but
/// 2097152 bytes was asked for": 7 and 10 of some 1,500 opens of each
/// reader in two runs).
#[test]
fn processes_whose_vfs_configurations_differ_share_a_pool_made_under_their_opens() {
    churn(["other-reader", "writer", "other-reader"]);
}

/// Runs the churn children `roles` on one database; none may have had an
/// error, and every insert is there.
fn churn(roles: [&str; 3]) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("churn.db");
    open(&db).execute_batch("CREATE TABLE t(v)").unwrap();
    let kids: Vec<_> = roles
        .iter()
        .map(|role| (role, spawn(role, &db, 0, None)))
        .collect();
    for (role, ch) in kids {
        let out = finish(ch);
        assert_eq!(field(&out, "errors"), "0", "{role}: {out}");
    }
    let c = open(&db);
    assert_eq!(common::count(&c), CHURN_WRITES);
    common::intact(&c);
}

/// Opens `a.db` by relative names (the child's working directory is the
/// database's): each connection shares the one WAL.
fn relative_child() {
    let c = open(Path::new("a.db"));
    c.execute("INSERT INTO t VALUES (1)", []).unwrap();
    let c2 = open(Path::new("./sub/../a.db"));
    println!("count {}", common::count(&c2));
    let c3 = open(&std::env::current_dir().unwrap().join("a.db"));
    c3.execute("INSERT INTO t VALUES (2)", []).unwrap();
    println!("again {}", common::count(&c));
    println!("pools {}", pools(Path::new(".")).len());
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}

/// The WAL pools under `dir`.
fn pools(dir: &Path) -> Vec<PathBuf> {
    walk(dir)
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".rewind"))
        .collect()
}

/// One database reached by its path, through a symbolic link to its
/// directory, through one to the file, by relative names in a child
/// process, and attached by its link: one pool (beside the real file),
/// one wal-index, every connection sees every commit, and the last close
/// removes the pool.
#[test]
fn a_database_by_links_and_relative_names_has_one_wal() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir_all(real.join("sub")).unwrap();
    std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
    std::os::unix::fs::symlink(real.join("a.db"), dir.path().join("s.db")).unwrap();
    let c1 = open(&real.join("a.db"));
    c1.execute_batch("CREATE TABLE t(v); INSERT INTO t VALUES (0);")
        .unwrap();
    let c2 = open(&dir.path().join("link/a.db"));
    let c3 = open(&dir.path().join("s.db"));
    c2.execute("INSERT INTO t VALUES (1)", []).unwrap();
    c3.execute("INSERT INTO t VALUES (2)", []).unwrap();
    for c in [&c1, &c2, &c3] {
        assert_eq!(common::count(c), 3);
    }
    assert_eq!(pools(dir.path()), [real.join("a.db-wal.rewind")]);
    // A stock connection attaching it by its link meets the same WAL.
    let stock = Connection::open_in_memory().unwrap();
    let uri = format!("file:{}?vfs={VFS}", dir.path().join("s.db").display());
    stock
        .execute("ATTACH ?1 AS x", [uri])
        .unwrap_or_else(|e| panic!("{e}"));
    stock.execute("INSERT INTO x.t VALUES (3)", []).unwrap();
    assert_eq!(common::count(&c1), 4);
    drop(stock);
    drop((c1, c2, c3));
    assert_eq!(pools(dir.path()), Vec::<PathBuf>::new());
    // Relative names, in a child whose working directory is the database's.
    let out = finish(spawn("relative", &real.join("a.db"), 0, Some(&real)));
    assert_eq!(field(&out, "count"), "5", "{out}");
    assert_eq!(field(&out, "again"), "6", "{out}");
    assert_eq!(field(&out, "pools"), "1", "{out}");
    let c = open(&dir.path().join("link/a.db"));
    assert_eq!(common::count(&c), 6);
    common::intact(&c);
}

/// Commits transactions (200 small rows, or 6 of 500 KB, by `seed`) with
/// checkpoints off, and exits without closing anything: the pool keeps
/// every frame.
fn leave_child(db: &Path, seed: u64) {
    let c = open(db);
    c.execute_batch("PRAGMA wal_autocheckpoint=0; CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);")
        .unwrap();
    let (rows, len) = if seed == 0 { (200, 100) } else { (6, 500_000) };
    for i in 0..rows {
        c.execute("INSERT INTO t(v) VALUES (randomblob(?1))", [len + i])
            .unwrap();
    }
    println!("rows {rows}");
    std::mem::forget(c);
    // SAFETY: ends the process at once, as a crash would.
    #[allow(unsafe_code)]
    unsafe {
        libc::_exit(0)
    };
}

/// A pool holding every frame of a crashed process (one that never grew,
/// one that grew to 4 MiB), copied and truncated at every interesting
/// length: each cut that loses bytes of the pool is `SQLITE_CANTOPEN`
/// naming the pool, never a panic, a `SIGBUS` or a shorter table; the
/// whole copy and a longer one open with every row.
#[test]
fn a_truncated_pool_is_cantopen_never_fewer_rows() {
    for seed in [0u64, 1] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a.db");
        let out = finish(spawn("leave", &db, seed, None));
        let rows: i64 = field(&out, "rows").parse().unwrap();
        let pool = rewind_sqlite::pool_path(&dir.path().join("a.db-wal"));
        let len = std::fs::metadata(&pool).unwrap().len();
        assert!(seed == 0 || len > 2 << 20, "the pool grew: {len}");
        let cuts = [
            0,
            1,
            4095,
            4096,
            8192,
            1 << 20,
            len / 2,
            len - 4096,
            len - 1,
        ];
        for cut in cuts.into_iter().chain([len, len + 4096]) {
            let d2 = tempfile::tempdir().unwrap();
            let db2 = d2.path().join("a.db");
            std::fs::copy(&db, &db2).unwrap();
            let p2 = rewind_sqlite::pool_path(&d2.path().join("a.db-wal"));
            std::fs::copy(&pool, &p2).unwrap();
            std::fs::OpenOptions::new()
                .write(true)
                .open(&p2)
                .unwrap()
                .set_len(cut)
                .unwrap();
            common::register_once(VFS, &cfg());
            let c = Connection::open_with_flags_and_vfs(&db2, OpenFlags::default(), VFS).unwrap();
            let r = c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0));
            if cut >= len {
                assert_eq!(r.unwrap(), rows, "cut {cut} of {len}");
                common::intact(&c);
            } else {
                let e = r.unwrap_err();
                assert_eq!(
                    e.sqlite_error_code(),
                    Some(ErrorCode::CannotOpen),
                    "cut {cut} of {len}: {e}"
                );
                let why = rewind_sqlite::last_error().unwrap();
                assert!(why.contains(&*p2.to_string_lossy()), "{why}");
            }
        }
    }
}

/// Commits numbered transactions to a main database and two attached
/// ones (the same row in each; some transactions large enough to spill,
/// some rolled back first; checkpoints of an attached one, `VACUUM` of
/// another), printing `ack N` after each, until it is killed.
fn attached_child(db: &Path, seed: u64) {
    let c = patient(db, OpenFlags::default());
    common::wal(&c);
    let dir = db.parent().unwrap();
    for n in ["a", "b"] {
        let path = dir.join(format!("{n}.db"));
        c.execute(&format!("ATTACH ?1 AS {n}"), [path.to_str().unwrap()])
            .unwrap();
        c.query_row(&format!("PRAGMA {n}.journal_mode=WAL"), [], |_| Ok(()))
            .unwrap();
    }
    c.execute_batch("PRAGMA cache_size=10; PRAGMA a.cache_size=10; PRAGMA b.cache_size=10;")
        .unwrap();
    for n in DBS {
        c.execute_batch(&format!(
            "CREATE TABLE IF NOT EXISTS {n}.t(id INTEGER PRIMARY KEY, v BLOB)"
        ))
        .unwrap();
    }
    let start: i64 = c
        .query_row("SELECT coalesce(max(id), -1) + 1 FROM main.t", [], |r| {
            r.get(0)
        })
        .unwrap();
    let mut r = seed;
    for i in start.. {
        r = r
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let len = if (r >> 33).is_multiple_of(10) {
            60_000
        } else {
            200
        };
        let insert = |c: &Connection| {
            for n in DBS {
                c.execute(
                    &format!("INSERT INTO {n}.t VALUES (?1, zeroblob(?2))"),
                    [i, len],
                )
                .unwrap();
                c.execute(
                    &format!("UPDATE {n}.t SET v = randomblob(length(v)) WHERE id = ?1"),
                    [i],
                )
                .unwrap();
            }
        };
        c.execute_batch("BEGIN").unwrap();
        insert(&c);
        if (r >> 40).is_multiple_of(9) {
            c.execute_batch("ROLLBACK; BEGIN").unwrap();
            insert(&c);
        }
        c.execute_batch("COMMIT").unwrap();
        println!("ack {i}");
        match (r >> 20) % 23 {
            0 => c
                .query_row("PRAGMA a.wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                .unwrap(),
            1 => c
                .query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()))
                .unwrap(),
            2 => c.execute_batch("VACUUM b").unwrap(),
            _ => {}
        }
    }
}

const DBS: [&str; 3] = ["main", "a", "b"];

/// A process committing to three databases of the VFS at once (main and
/// two attached), SIGKILLed after a counted number of acknowledged
/// transactions, 10 times: in WAL mode SQLite commits each database on
/// its own, so each holds exactly the rows `0..=N` for `N` the last
/// acknowledged transaction or the one after, each passes
/// `integrity_check`; then the three are brought level for the next
/// child.
#[test]
fn sigkills_of_a_process_writing_three_attached_databases_keep_each_ones_acked() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let mut acked = -1i64;
    for round in 0..10u64 {
        let mut ch = spawn("attached", &db, round, None);
        let mut out = BufReader::new(ch.stdout.take().unwrap());
        let want = 5 + (round * 7919) % 40;
        let (mut n, mut line) = (0, String::new());
        while n < want {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "the child ended");
            if let Some(a) = line.trim().strip_prefix("ack ") {
                acked = a.parse().unwrap();
                n += 1;
            }
        }
        ch.kill().unwrap();
        ch.wait().unwrap();
        let mut rest = String::new();
        out.read_to_string(&mut rest).unwrap();
        if let Some(a) = rest
            .lines()
            .filter_map(|l| l.strip_prefix("ack "))
            .next_back()
        {
            acked = a.parse().unwrap();
        }
        let c = open(&db);
        for n in ["a", "b"] {
            let path = dir.path().join(format!("{n}.db"));
            c.execute(&format!("ATTACH ?1 AS {n}"), [path.to_str().unwrap()])
                .unwrap();
        }
        let mut maxes = vec![];
        for n in DBS {
            let (count, max): (i64, i64) = c
                .query_row(
                    &format!("SELECT count(*), coalesce(max(id), -1) FROM {n}.t"),
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .unwrap();
            assert_eq!(count, max + 1, "round {round}, {n}");
            assert!(
                max == acked || max == acked + 1,
                "round {round}, {n}: rows to {max}, acknowledged to {acked}"
            );
            let ok: String = c
                .query_row(&format!("PRAGMA {n}.integrity_check"), [], |r| r.get(0))
                .unwrap();
            assert_eq!(ok, "ok", "round {round}, {n}");
            maxes.push(max);
        }
        // Level: the attached ones to main's last row.
        for (n, &max) in ["a", "b"].iter().zip(&maxes[1..]) {
            if max > maxes[0] {
                c.execute(&format!("DELETE FROM {n}.t WHERE id > ?1"), [maxes[0]])
                    .unwrap();
            } else if max < maxes[0] {
                c.execute(&format!("INSERT INTO {n}.t VALUES (?1, x'00')"), [maxes[0]])
                    .unwrap();
            }
        }
        acked = maxes[0];
    }
}

/// `last_error` is the reason behind the calling thread's last failed
/// call, as its docs say, not an older one about another database: a
/// database that could not be opened for a reason of the default VFS's
/// (its directory missing), or a statement of a connection opened since
/// that fails for a reason of SQLite's own, finds no reason left by the
/// thread's earlier failure. Before, each found the earlier failure's
/// reason (here "not a rewind pool", naming another database's pool),
/// and a program that logged it beside the error blamed that database.
#[test]
fn last_error_names_no_older_failure_of_another_database() {
    let dir = tempfile::tempdir().unwrap();
    let damaged = dir.path().join("damaged.db");
    open(&damaged).execute_batch("CREATE TABLE t(v)").unwrap();
    let pool = rewind_sqlite::pool_path(&dir.path().join("damaged.db-wal"));
    std::fs::write(&pool, vec![7u8; 8192]).unwrap();
    common::register_once(VFS, &cfg());
    let c = Connection::open_with_flags_and_vfs(&damaged, OpenFlags::default(), VFS).unwrap();
    let e = c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0));
    assert_eq!(
        e.unwrap_err().sqlite_error_code(),
        Some(ErrorCode::CannotOpen)
    );
    let why = rewind_sqlite::last_error().unwrap();
    assert!(why.contains(&*pool.to_string_lossy()), "{why}");
    // A database in a directory that is not there: the default VFS's
    // failure, which the VFS has no reason for.
    let missing = dir.path().join("no such directory").join("b.db");
    let e = Connection::open_with_flags_and_vfs(&missing, OpenFlags::default(), VFS).unwrap_err();
    assert_eq!(e.sqlite_error_code(), Some(ErrorCode::CannotOpen), "{e}");
    assert_eq!(rewind_sqlite::last_error(), None);
    // Again after the damaged one, then a connection that opens and a
    // statement that fails for SQLite's own reason.
    let _ = c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0));
    assert!(rewind_sqlite::last_error().is_some());
    let fine = open(&dir.path().join("fine.db"));
    fine.execute_batch("CREATE TABLE u(v UNIQUE); INSERT INTO u VALUES (1);")
        .unwrap();
    let e = fine.execute("INSERT INTO u VALUES (1)", []).unwrap_err();
    assert_eq!(e.sqlite_error_code(), Some(ErrorCode::ConstraintViolation));
    assert_eq!(rewind_sqlite::last_error(), None);
    // A connection open before the failure.
    let _ = c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0));
    assert!(rewind_sqlite::last_error().is_some());
    let e = fine.execute("INSERT INTO u VALUES (1)", []).unwrap_err();
    assert_eq!(e.sqlite_error_code(), Some(ErrorCode::ConstraintViolation));
    assert_eq!(rewind_sqlite::last_error(), None);
}

/// Inserts numbered rows from `seed * 1,000_000` on, a connection opened
/// and closed for some (by the seed), printing `ack N` after each, until
/// it is killed.
fn acking_writer_child(db: &Path, seed: u64) {
    let mut c = Some(patient(db, OpenFlags::default()));
    for i in 0.. {
        let id = seed as i64 * 1_000_000 + i;
        let conn = c.get_or_insert_with(|| patient(db, OpenFlags::default()));
        conn.execute("INSERT INTO t VALUES (?1)", [id]).unwrap();
        println!("ack {id}");
        if (id ^ seed as i64) % 3 == 0 {
            c = None;
        }
    }
}

/// A writer process SIGKILLed after a counted number of acknowledged
/// inserts (at whatever it does then: a commit, its connection's close
/// that checkpoints and removes the pool, an open), 8 times, while two
/// processes open and close read-only connections throughout (their
/// last close removes an empty pool): the table holds exactly the
/// acknowledged rows, or one more each kill cut the ack of, and no
/// reader saw an error.
#[test]
fn sigkills_of_a_writer_beside_read_only_processes_keep_exactly_the_acked() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("k.db");
    open(&db).execute_batch("CREATE TABLE t(v)").unwrap();
    let readers: Vec<_> = (0..2).map(|_| spawn("reader", &db, 0, None)).collect();
    let mut acked = std::collections::BTreeSet::new();
    let mut maybe = std::collections::BTreeSet::new();
    for round in 1..=8u64 {
        let mut ch = spawn("acking-writer", &db, round, None);
        let mut out = BufReader::new(ch.stdout.take().unwrap());
        let want = 20 + (round * 37) % 60;
        let (mut n, mut line) = (0, String::new());
        while n < want {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "the writer ended");
            if let Some(a) = line.trim().strip_prefix("ack ") {
                acked.insert(a.parse::<i64>().unwrap());
                n += 1;
            }
        }
        ch.kill().unwrap();
        ch.wait().unwrap();
        let mut rest = String::new();
        out.read_to_string(&mut rest).unwrap();
        for a in rest.lines().filter_map(|l| l.strip_prefix("ack ")) {
            acked.insert(a.parse::<i64>().unwrap());
        }
        maybe.insert(acked.last().unwrap() + 1);
    }
    std::fs::write(db.with_extension("stop"), b"").unwrap();
    for ch in readers {
        let out = finish(ch);
        assert_eq!(field(&out, "errors"), "0", "{out}");
    }
    let c = patient(&db, OpenFlags::default());
    let rows: Vec<i64> = c
        .prepare("SELECT v FROM t ORDER BY v")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let missing: Vec<_> = acked
        .iter()
        .filter(|a| rows.binary_search(a).is_err())
        .collect();
    assert!(missing.is_empty(), "acknowledged rows lost: {missing:?}");
    let extra: Vec<_> = rows
        .iter()
        .filter(|r| !acked.contains(r) && !maybe.contains(r))
        .collect();
    assert!(extra.is_empty(), "rows never acknowledged: {extra:?}");
    common::intact(&c);
}

/// What a pool that vanishes under an open is not (`open_pool` looks
/// again for one of those, and calls one that keeps vanishing
/// `SQLITE_BUSY`): a symbolic link at the pool's name to nothing, or a
/// database whose directory was removed while a connection had it open,
/// is `SQLITE_CANTOPEN` at once with the reason, not `SQLITE_BUSY`, which
/// a busy handler that waits as long as it takes would retry for ever.
#[test]
fn a_pool_name_that_leads_nowhere_is_cantopen_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.db");
    open(&db)
        .execute_batch("CREATE TABLE t(v); INSERT INTO t VALUES (1);")
        .unwrap();
    let pool = rewind_sqlite::pool_path(&dir.path().join("l.db-wal"));
    assert!(!pool.exists());
    std::os::unix::fs::symlink(dir.path().join("nothing"), &pool).unwrap();
    static RETRIES: AtomicU32 = AtomicU32::new(0);
    common::register_once(VFS, &cfg());
    let c = Connection::open_with_flags_and_vfs(&db, OpenFlags::default(), VFS).unwrap();
    c.busy_handler(Some(|n| {
        RETRIES.store(n as u32 + 1, Ordering::SeqCst);
        n < 1000
    }))
    .unwrap();
    let e = c
        .query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0))
        .unwrap_err();
    assert_eq!(e.sqlite_error_code(), Some(ErrorCode::CannotOpen), "{e}");
    assert_eq!(RETRIES.load(Ordering::SeqCst), 0, "the busy handler ran");
    let why = rewind_sqlite::last_error().unwrap();
    assert!(why.contains(&*pool.to_string_lossy()), "{why}");
    // Gone, the database opens with its row.
    std::fs::remove_file(&pool).unwrap();
    assert_eq!(common::count(&c), 1);
    drop(c);
    // A connection whose database's directory is removed before its
    // first statement.
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let db = sub.join("d.db");
    open(&db)
        .execute_batch("CREATE TABLE t(v); INSERT INTO t VALUES (1);")
        .unwrap();
    let c = Connection::open_with_flags_and_vfs(&db, OpenFlags::default(), VFS).unwrap();
    c.busy_handler(Some(|n| {
        RETRIES.store(n as u32 + 1, Ordering::SeqCst);
        n < 1000
    }))
    .unwrap();
    std::fs::remove_dir_all(&sub).unwrap();
    let e = c
        .query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0))
        .unwrap_err();
    assert_eq!(e.sqlite_error_code(), Some(ErrorCode::CannotOpen), "{e}");
    assert_eq!(RETRIES.load(Ordering::SeqCst), 0, "the busy handler ran");
}

/// `register` refuses what no pool can be made with: an emulated NVM
/// latency past 1 ms per write or per fence, and the engine's simulated
/// backend (no file). Before, each registered: `PRAGMA journal_mode =
/// WAL` said `wal` (and wrote WAL mode into the database file), and every
/// statement after it failed with `SQLITE_CANTOPEN` ("invalid NVM write
/// latency: 2000000 ns", "invalid backend: sim" in `last_error`). The
/// largest latency taken registers.
#[test]
fn register_refuses_latencies_and_backends_no_pool_takes() {
    use rewind::{Backend, NvmLatency};
    use rewind_sqlite::RegisterError;
    let base = rewind_sqlite::Config::default;
    let too_slow = NvmLatency::MAX_NS + 1;
    let refused = [
        (
            "rewind-up5-write-latency",
            base().nvm_latency(NvmLatency::new(too_slow, 0)),
        ),
        (
            "rewind-up5-fence-latency",
            base().nvm_latency(NvmLatency::new(0, too_slow)),
        ),
        ("rewind-up5-sim", base().backend(Backend::Sim)),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (name, cfg) in refused {
        match rewind_sqlite::register(name, &cfg) {
            Err(RegisterError::BadConfig { field, value, .. }) => {
                assert!(field.starts_with("nvm_latency."), "{name}: {field}");
                assert_eq!(value, too_slow, "{name}");
            }
            Err(RegisterError::BadBackend { backend }) => {
                assert_eq!(backend, Backend::Sim, "{name}")
            }
            r => panic!("{name}: {r:?}"),
        }
        // Not registered: SQLite knows no VFS of that name.
        let db = dir.path().join(format!("{name}.db"));
        assert!(Connection::open_with_flags_and_vfs(&db, OpenFlags::default(), name).is_err());
    }
    let at_most = base().nvm_latency(NvmLatency::new(NvmLatency::MAX_NS, NvmLatency::MAX_NS));
    rewind_sqlite::register("rewind-up5-slowest", &at_most).unwrap();
}

/// Accounts of the bank probe, and the total they keep.
const ACCOUNTS: i64 = 20;

/// Three threads, each with its own connection (opened again now and
/// then), moving amounts between accounts in transactions (retried on
/// `SQLITE_BUSY`), one of them checkpointing in every mode, for `n`
/// transfers each; prints `sum S` of what it saw after each transfer.
fn bank_child(db: &Path, seed: u64) {
    let threads: Vec<_> = (0..3u64)
        .map(|t| {
            let db = db.to_path_buf();
            std::thread::spawn(move || {
                let mut r = seed * 7 + t + 1;
                let mut c = patient(&db, OpenFlags::default());
                for k in 0..150u64 {
                    r = r
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let (a, b) = ((r >> 20) as i64 % ACCOUNTS, (r >> 40) as i64 % ACCOUNTS);
                    let amount = (r >> 50) as i64 % 100;
                    loop {
                        let tx = (|| -> rusqlite::Result<i64> {
                            c.execute_batch("BEGIN IMMEDIATE")?;
                            c.execute("UPDATE acct SET bal = bal - ?1 WHERE id = ?2", [amount, a])?;
                            c.execute("UPDATE acct SET bal = bal + ?1 WHERE id = ?2", [amount, b])?;
                            c.execute(
                                "INSERT INTO log(v) VALUES (zeroblob(?1))",
                                [(r >> 8) as i64 % 3000],
                            )?;
                            let s: i64 =
                                c.query_row("SELECT sum(bal) FROM acct", [], |r| r.get(0))?;
                            c.execute_batch("COMMIT")?;
                            Ok(s)
                        })();
                        match tx {
                            Ok(s) => {
                                println!("sum {s}");
                                break;
                            }
                            Err(e) => {
                                let _ = c.execute_batch("ROLLBACK");
                                if e.sqlite_error_code() != Some(ErrorCode::DatabaseBusy) {
                                    panic!("thread {t}: {e} ({:?})", rewind_sqlite::last_error());
                                }
                            }
                        }
                    }
                    if t == 0 && k % 10 == 0 {
                        let mode =
                            ["PASSIVE", "FULL", "RESTART", "TRUNCATE"][(k / 10 % 4) as usize];
                        let _ =
                            c.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |_| Ok(()));
                    }
                    if (r >> 30).is_multiple_of(25) {
                        c = patient(&db, OpenFlags::default());
                    }
                    if t == 1 && k % 13 == 0 {
                        let s: i64 = c
                            .query_row("SELECT sum(bal) FROM acct", [], |r| r.get(0))
                            .unwrap();
                        println!("sum {s}");
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    println!("done");
}

/// Three processes of three threads each (every thread a connection of
/// its own, opened again now and then), moving amounts between accounts
/// in `BEGIN IMMEDIATE` transactions retried on `SQLITE_BUSY`, while one
/// thread of each checkpoints in every mode (the processes take turns at
/// the WAL, one opener at a time, waiting in their busy handlers); one
/// process is SIGKILLed after 40 transfers: every sum any transaction saw
/// is the total, and so is the sum after, with integrity. (A probe that
/// found no defect.)
#[test]
fn processes_of_threads_moving_amounts_keep_the_total() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("bank.db");
    {
        let c = open(&db);
        c.execute_batch(
            "CREATE TABLE acct(id INTEGER PRIMARY KEY, bal INTEGER); CREATE TABLE log(v);",
        )
        .unwrap();
        for i in 0..ACCOUNTS {
            c.execute("INSERT INTO acct VALUES (?1, 1000)", [i])
                .unwrap();
        }
    }
    let total = ACCOUNTS * 1000;
    let kids: Vec<_> = (0..3).map(|s| spawn("bank", &db, s, None)).collect();
    let mut outs = vec![];
    for (i, mut ch) in kids.into_iter().enumerate() {
        if i == 1 {
            let mut out = BufReader::new(ch.stdout.take().unwrap());
            let mut line = String::new();
            let mut sums = 0;
            while sums < 40 {
                line.clear();
                assert!(out.read_line(&mut line).unwrap() > 0, "the child ended");
                if line.starts_with("sum ") {
                    assert_eq!(line.trim(), format!("sum {total}"));
                    sums += 1;
                }
            }
            ch.kill().unwrap();
            ch.wait().unwrap();
        } else {
            outs.push(finish(ch));
        }
    }
    for out in outs {
        assert!(out.contains("done"), "{out}");
        for l in out.lines().filter(|l| l.starts_with("sum ")) {
            assert_eq!(l, format!("sum {total}"));
        }
    }
    let c = open(&db);
    let s: i64 = c
        .query_row("SELECT sum(bal) FROM acct", [], |r| r.get(0))
        .unwrap();
    assert_eq!(s, total);
    common::intact(&c);
}

/// A directory bind-mounted at a second path, unmounted when dropped;
/// `None` where mounting is not permitted (the test is then skipped).
struct Bind {
    at: PathBuf,
}

impl Bind {
    fn mount(from: &Path, at: &Path) -> Option<Bind> {
        std::fs::create_dir_all(at).ok()?;
        let ok = Command::new("mount")
            .arg("--bind")
            .arg(from)
            .arg(at)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("cannot bind-mount here: skipped");
            return None;
        }
        Some(Bind {
            at: at.to_path_buf(),
        })
    }
}

impl Drop for Bind {
    fn drop(&mut self) {
        let umount = |lazy: bool| {
            let mut cmd = Command::new("umount");
            if lazy {
                cmd.arg("-l");
            }
            cmd.arg(&self.at)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !umount(false) {
            umount(true);
        }
    }
}

/// One database reached through its directory and through a bind mount
/// of that directory, by connections of one process at once: they share
/// its WAL and wal-index as stock SQLite's connections do (each sees the
/// other's commits, no error), and the last close removes the one pool.
/// Before, the second path's connection found the pool "in use by another
/// opener (in this or another process)": `SQLITE_BUSY` for as long as the
/// first stayed open, and a busy handler that waits as long as it takes
/// waited for ever. Skipped where bind mounts are not permitted.
#[test]
fn a_database_through_a_bind_mount_of_its_directory_shares_its_wal() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let Some(bind) = Bind::mount(&real, &dir.path().join("bound")) else {
        return;
    };
    let c1 = open(&real.join("a.db"));
    c1.execute_batch("CREATE TABLE t(v); INSERT INTO t VALUES (1);")
        .unwrap();
    common::register_once(VFS, &cfg());
    let c2 = Connection::open_with_flags_and_vfs(bind.at.join("a.db"), OpenFlags::default(), VFS)
        .unwrap();
    c2.busy_handler(Some(|n| n < 100)).unwrap();
    let n = c2.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0));
    assert_eq!(n.ok(), Some(1), "{:?}", rewind_sqlite::last_error());
    c2.execute("INSERT INTO t VALUES (2)", []).unwrap();
    assert_eq!(common::count(&c1), 2);
    c1.execute("INSERT INTO t VALUES (3)", []).unwrap();
    assert_eq!(common::count(&c2), 3);
    c2.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    c1.execute("INSERT INTO t VALUES (4)", []).unwrap();
    assert_eq!(common::count(&c2), 4);
    drop(c1);
    c2.execute("INSERT INTO t VALUES (5)", []).unwrap();
    drop(c2);
    assert_eq!(pools(&real), Vec::<PathBuf>::new());
    let c = open(&real.join("a.db"));
    assert_eq!(common::count(&c), 5);
    common::intact(&c);
}

/// Commits the program's WAL hook of `a_wal_hook_is_kept_when_set_after_the_first_commit` saw.
static HOOK_CALLS: AtomicU32 = AtomicU32::new(0);

/// A program's WAL hook: counts its calls.
unsafe extern "C" fn counting_hook(
    _arg: *mut std::ffi::c_void,
    _db: *mut rusqlite::ffi::sqlite3,
    _name: *const std::ffi::c_char,
    _frames: std::ffi::c_int,
) -> std::ffi::c_int {
    HOOK_CALLS.fetch_add(1, Ordering::SeqCst);
    rusqlite::ffi::SQLITE_OK
}

/// What the crate's docs say of a WAL hook the program sets
/// (`sqlite3_wal_hook`, through `rusqlite::ffi`): set after the
/// connection's first commit (here `PRAGMA journal_mode = WAL` on a new
/// database), it is kept and called at every commit; set before the first
/// commit of a connection to a database already in WAL mode, the crate's
/// hook replaces it (SQLite gives no way to read a hook back). A probe of
/// a limitation the docs now state.
#[test]
fn a_wal_hook_is_kept_when_set_after_the_first_commit() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("h.db");
    let set = |c: &Connection| {
        // SAFETY: the connection is open; the hook lives as long as the
        // process and takes no argument.
        #[allow(unsafe_code)]
        unsafe {
            rusqlite::ffi::sqlite3_wal_hook(c.handle(), Some(counting_hook), std::ptr::null_mut())
        };
    };
    let c = open(&db);
    set(&c);
    c.execute_batch("CREATE TABLE t(v); INSERT INTO t VALUES (1); INSERT INTO t VALUES (2);")
        .unwrap();
    assert_eq!(HOOK_CALLS.load(Ordering::SeqCst), 3);
    drop(c);
    // A database in WAL mode already: no commit before the program's hook.
    common::register_once(VFS, &cfg());
    let c = Connection::open_with_flags_and_vfs(&db, OpenFlags::default(), VFS).unwrap();
    set(&c);
    c.execute("INSERT INTO t VALUES (3)", []).unwrap();
    assert_eq!(HOOK_CALLS.load(Ordering::SeqCst), 3, "replaced");
    set(&c);
    c.execute("INSERT INTO t VALUES (4)", []).unwrap();
    assert_eq!(HOOK_CALLS.load(Ordering::SeqCst), 4);
}

/// Opens the database, inserts a row, forks; the forked process opens a
/// connection of its own and inserts rows 100.. (printing `child acked N`
/// once done or refused), the parent waits for it, then inserts 50 rows
/// 1000.. on its connection (printing `parent acked 50`). With `later`,
/// the parent inserts first, closes its connection and ends, and the
/// child opens once it is gone: the child's inserts must all commit.
fn fork_child(db: &Path, later: bool) {
    let c = open(db);
    c.execute_batch("CREATE TABLE t(v); INSERT INTO t VALUES (1);")
        .unwrap();
    // SAFETY: this process runs one test on one thread; the child uses
    // only its own new connection, then ends at once.
    #[allow(unsafe_code)]
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        if later {
            // This process is given another parent once its parent has
            // ended (its descriptors closed).
            // SAFETY: getppid has no preconditions.
            #[allow(unsafe_code)]
            let (parent, mut tries) = (unsafe { libc::getppid() }, 0u64);
            #[allow(unsafe_code)]
            // SAFETY: as above.
            while unsafe { libc::getppid() } == parent {
                tries += 1;
                assert!(tries < 1 << 32, "the parent never ended");
                std::thread::yield_now();
            }
        }
        common::register_once(VFS, &cfg());
        let mut acked = 0;
        if let Ok(c2) = Connection::open_with_flags_and_vfs(db, OpenFlags::default(), VFS) {
            // Refused at once while the parent has the WAL (no clock).
            c2.busy_handler(None::<fn(i32) -> bool>).unwrap();
            for i in 0..50 {
                match c2.execute("INSERT INTO t VALUES (?1)", [100 + i]) {
                    Ok(_) => acked += 1,
                    Err(e) => {
                        println!("child error {e} ({:?})", rewind_sqlite::last_error());
                        assert_eq!(e.sqlite_error_code(), Some(ErrorCode::DatabaseBusy), "{e}");
                        break;
                    }
                }
            }
            drop(c2);
        }
        println!("child acked {acked}");
        // SAFETY: ends the forked process without running its parent's
        // destructors.
        #[allow(unsafe_code)]
        unsafe {
            libc::_exit(0)
        };
    }
    let parent = |c: &Connection| {
        for i in 0..50 {
            c.execute("INSERT INTO t VALUES (?1)", [1000 + i]).unwrap();
        }
        println!("parent acked 50");
    };
    if later {
        parent(&c);
        drop(c);
        return;
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    #[allow(unsafe_code)]
    unsafe {
        libc::waitpid(pid, &mut status, 0)
    };
    parent(&c);
}

/// A process with a database open through the VFS forks (a server
/// forking workers, Python's `multiprocessing`), and the child opens a
/// connection of its own to it, as stock SQLite allows; the parent goes on
/// with its own connection after. Every acknowledged insert of either is
/// there. Before, the child's connection joined the parent's open WAL (its
/// registries are copies of the parent's, and the pool's mapping and
/// locked descriptor are shared across the fork): its 50 acknowledged
/// inserts, then the parent's 50, left 51 rows of 101, with
/// `integrity_check` ok. Now the child starts with registries of its own:
/// its open meets the pool the parent has open (`SQLITE_BUSY`, as for any
/// other process) and nothing is lost.
#[test]
fn a_forked_child_opening_the_database_loses_no_acknowledged_insert() {
    // (The child opens while the parent has the WAL open, then once the
    // parent has closed it and ended: then every insert of the child
    // commits.)
    for later in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("f.db");
        let out = finish(spawn("fork", &db, later as u64, None));
        let child: i64 = field(&out, "child acked").parse().unwrap();
        assert_eq!(field(&out, "parent acked"), "50", "{out}");
        if later {
            assert_eq!(child, 50, "{out}");
        }
        let c = open(&db);
        assert_eq!(common::count(&c), 1 + child + 50, "later {later}: {out}");
        common::intact(&c);
    }
}
