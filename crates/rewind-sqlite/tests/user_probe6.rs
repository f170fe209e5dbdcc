//! Defects found by a sixth round of probing the VFS as users' programs
//! would, each kept as a named regression test: a child forked while
//! another thread of its parent was inside the VFS hung at its first
//! open; a child forked by a process that then crashed with a WAL open
//! kept that WAL's pool locked for as long as it lived; a child that
//! closed its copy of its parent's connection unlocked the parent's
//! pool, and another process then committed into it beside the parent. Then probes that
//! found none, kept as regression tests of what they check: descriptors
//! and address space running out; SIGKILLs during checkpoints of every
//! mode (normal and exclusive locking, `Pmem` and `Msync`), each crash
//! reopened through the VFS and then by stock SQLite; crashes reopened
//! under the other backend and after exclusive locking mode set before
//! WAL mode; hundreds of connections and dozens of databases in one
//! process; three connections against stock SQLite's, statement by
//! statement; a file-size limit; read-only and writing connections
//! churning in threads.
//!
//! Children are this test binary again, running the ignored test
//! `probe6_child` with their role in the environment. No test sleeps:
//! children are bounded by counts; a forked child that could hang has an
//! alarm as a hang guard only.

#![allow(unsafe_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use rusqlite::{Connection, OpenFlags};

mod common;

const VFS: &str = "rewind-user-probe6";
/// The same configuration on `Backend::Msync`.
const MSYNC_VFS: &str = "rewind-user-probe6-msync";
const CHILD_ROLE: &str = "REWIND_PROBE6_ROLE";
const CHILD_DB: &str = "REWIND_PROBE6_DB";
const CHILD_SEED: &str = "REWIND_PROBE6_SEED";

fn cfg() -> rewind_sqlite::Config {
    rewind_sqlite::Config::default()
        .pool_size(1 << 20)
        .max_pool_size(8 << 20)
}

/// [`cfg`] on `Backend::Msync`.
fn msync_cfg() -> rewind_sqlite::Config {
    cfg().backend(rewind::Backend::Msync)
}

fn open(path: &Path) -> Connection {
    common::open_wal(VFS, &cfg(), path)
}

fn spawn(role: &str, db: &Path, seed: u64) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "probe6_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ROLE, role)
        .env(CHILD_DB, db)
        .env(CHILD_SEED, seed.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finish(ch: Child) -> (bool, String) {
    let out = ch.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.success(), format!("{:?}\n{stdout}", out.status))
}

#[test]
#[ignore]
fn probe6_child() {
    let Ok(role) = std::env::var(CHILD_ROLE) else {
        return;
    };
    println!();
    let db = PathBuf::from(std::env::var(CHILD_DB).unwrap());
    let seed: u64 = std::env::var(CHILD_SEED).unwrap().parse().unwrap();
    match role.as_str() {
        "nofile" => nofile_child(&db, seed),
        "as" => as_child(&db, seed),
        "fork-crash" => fork_crash_child(&db, seed == 1),
        "fork-race" => fork_race_child(&db, seed),
        "ckpt" => ckpt_child(&db, seed),
        "leave" => leave_child(&db, seed),
        "fork-drop" => fork_drop_child(&db),
        "second" => second_child(&db),
        "fsize" => fsize_child(&db, seed),
        _ => panic!("unknown role {role}"),
    }
}

fn set_limit(res: libc::__rlimit_resource_t, n: u64) {
    let l = libc::rlimit {
        rlim_cur: n,
        rlim_max: n,
    };
    // SAFETY: setrlimit reads the structure.
    assert_eq!(unsafe { libc::setrlimit(res, &l) }, 0);
}

/// Opens databases `DIR/PREFIX{i}.db` (each in WAL mode, with a row) one
/// after another, at most 200, until an open or its first use is
/// refused; prints why and `opened N`, and returns the connections.
fn open_until_refused(dir: &Path, prefix: &str) -> Vec<Connection> {
    let mut conns = Vec::new();
    for i in 0..200 {
        let p = dir.join(format!("{prefix}{i}.db"));
        let c = match Connection::open_with_flags_and_vfs(&p, OpenFlags::default(), VFS) {
            Ok(c) => c,
            Err(e) => {
                println!("open {i}: {e} {:?}", rewind_sqlite::last_error());
                break;
            }
        };
        let r = c
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0))
            .and_then(|_| {
                c.execute_batch("CREATE TABLE IF NOT EXISTS t(x); INSERT INTO t VALUES (1);")
            });
        if let Err(e) = r {
            println!("use {i}: {e} {:?}", rewind_sqlite::last_error());
            break;
        }
        conns.push(c);
    }
    println!("opened {}", conns.len());
    conns
}

/// Opens databases in one directory until refused, under few descriptors.
fn nofile_child(dir: &Path, limit: u64) {
    common::register_once(VFS, &cfg());
    set_limit(libc::RLIMIT_NOFILE, limit);
    let conns = open_until_refused(dir, "d");
    // Every one still works.
    let mut bad = 0;
    for c in &conns {
        if c.execute("INSERT INTO t VALUES (2)", []).is_err() {
            bad += 1;
        }
    }
    println!("bad {bad}");
    drop(conns);
}

/// Opens databases in one directory until refused, in an address space
/// of the low 16 bits of `mib` MiB, through a VFS of the default
/// configuration, or with bit 40, of [`cfg`] (pools of at most 8 MiB).
fn as_child(dir: &Path, mib: u64) {
    let small = mib & (1 << 40) != 0;
    let mib = mib & 0xffff;
    match small {
        true => common::register_once(VFS, &cfg()),
        false => common::register_once(VFS, &rewind_sqlite::Config::default()),
    }
    set_limit(libc::RLIMIT_AS, mib << 20);
    open_until_refused(dir, "a");
}

/// Databases opened one after another (each in WAL mode, with a row)
/// in a process allowed 24, 40 and 64 descriptors, and in one whose
/// address space is capped at 600 MiB and 1.2 GiB: the open that finds
/// none left is a SQLite error (`SQLITE_CANTOPEN`, the reason in
/// `last_error`), never a panic or an abort, and every connection opened
/// before goes on writing. A pool maps the address space of its maximum
/// size as it opens: under either cap not one pool of the default
/// maximum (4 GiB) opens, and dozens of pools of at most 8 MiB do (as
/// the crate's docs now say). A probe that found no defect.
#[test]
fn descriptors_and_address_space_running_out_are_sqlite_errors() {
    for limit in [24u64, 40, 64] {
        let dir = tempfile::tempdir().unwrap();
        let (ok, out) = finish(spawn("nofile", dir.path(), limit));
        assert!(ok, "limit {limit}: {out}");
        assert!(out.contains("bad 0"), "{out}");
        assert!(out.contains("unable to open database file"), "{out}");
        let opened: u64 = out
            .lines()
            .find_map(|l| l.strip_prefix("opened "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(opened > 0 && opened < 200, "{out}");
    }
    for mib in [600u64, 1200] {
        for small in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let (ok, out) = finish(spawn("as", dir.path(), mib | (small as u64) << 40));
            assert!(ok, "{mib} MiB: {out}");
            assert!(out.contains("unable to open database file"), "{out}");
            assert!(out.contains("Cannot allocate memory"), "{out}");
            let opened: u64 = out
                .lines()
                .find_map(|l| l.strip_prefix("opened "))
                .unwrap()
                .parse()
                .unwrap();
            match small {
                false => assert_eq!(opened, 0, "{out}"),
                true => assert!(opened >= 20, "{out}"),
            }
        }
    }
}

/// Opens `db`, commits 10 rows (printing `acked 10`), forks a child
/// that never touches SQLite, prints `forked`, and SIGKILLs itself with
/// the WAL open. The child waits for a line on its stdin (the test's
/// pipe, inherited), then opens the database itself and inserts 10 rows
/// (printing `child acked N`), and ends at the end of its stdin.
fn fork_crash_child(db: &Path, msync: bool) {
    let c = match msync {
        true => common::open_wal(MSYNC_VFS, &msync_cfg(), db),
        false => open(db),
    };
    c.execute_batch("CREATE TABLE t(v)").unwrap();
    for i in 0..10 {
        c.execute("INSERT INTO t VALUES (?1)", [i]).unwrap();
    }
    println!("acked 10");
    // SAFETY: this process runs one test on one thread; the child uses
    // only its own new connection, then ends.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
        let vfs = match msync {
            true => MSYNC_VFS,
            false => VFS,
        };
        let mut acked = 0;
        let c2 = Connection::open_with_flags_and_vfs(db, OpenFlags::default(), vfs).unwrap();
        c2.busy_handler(None::<fn(i32) -> bool>).unwrap();
        for i in 0..10 {
            match c2.execute("INSERT INTO t VALUES (?1)", [100 + i]) {
                Ok(_) => acked += 1,
                Err(e) => {
                    println!("child error {e} ({:?})", rewind_sqlite::last_error());
                    break;
                }
            }
        }
        drop(c2);
        println!("child acked {acked}");
        std::io::stdin().read_line(&mut line).unwrap();
        // SAFETY: ends the forked process without running its parent's
        // destructors.
        unsafe { libc::_exit(0) };
    }
    println!("forked");
    // SAFETY: a crash with the WAL open.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
}

/// A thread asks [`rewind_sqlite::stats`] of an open database over and
/// over (which locks the registry of open WALs) while the main thread
/// forks `n` children, each opening a database of its own under a 60 s
/// alarm (a hang guard: a hung child dies of SIGALRM); prints `hung N
/// failed M`.
fn fork_race_child(dir: &Path, n: u64) {
    let db = dir.join("busy.db");
    let c = open(&db);
    c.execute_batch("CREATE TABLE t(v); INSERT INTO t VALUES (1);")
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (s2, db2, started) = (stop.clone(), db.clone(), started.clone());
            std::thread::spawn(move || {
                let mut asked = 0u64;
                while !s2.load(std::sync::atomic::Ordering::Relaxed) {
                    assert!(rewind_sqlite::stats(&db2).is_some());
                    if asked == 0 {
                        started.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    asked += 1;
                }
                asked
            })
        })
        .collect();
    // Forks once both threads are at it.
    while started.load(std::sync::atomic::Ordering::SeqCst) < 2 {
        std::thread::yield_now();
    }
    let mut pids = Vec::new();
    for i in 0..n {
        let own = dir.join(format!("own{i}.db"));
        // SAFETY: the child runs only its own new connection, then ends.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: a hang guard, nothing else.
            unsafe { libc::alarm(60) };
            let ok = (|| -> rusqlite::Result<()> {
                let c = Connection::open_with_flags_and_vfs(&own, OpenFlags::default(), VFS)?;
                c.pragma_update(None, "journal_mode", "WAL")?;
                c.execute_batch("CREATE TABLE t(v); INSERT INTO t VALUES (1);")?;
                c.close().map_err(|(_, e)| e)
            })()
            .is_ok();
            // SAFETY: ends the forked process at once.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        pids.push(pid);
    }
    let (mut hung, mut failed) = (0, 0);
    for pid in pids {
        let mut st = 0;
        // SAFETY: waits for a child just forked.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        if libc::WIFSIGNALED(st) {
            hung += 1;
        } else if libc::WEXITSTATUS(st) != 0 {
            failed += 1;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for th in threads {
        assert!(th.join().unwrap() > 0);
    }
    println!("hung {hung} failed {failed}");
    if hung + failed == 0 {
        for i in 0..n {
            let c = open(&dir.join(format!("own{i}.db")));
            assert_eq!(common::count(&c), 1);
        }
    }
}

/// A process forks while another of its threads is inside the VFS
/// (here `stats`, which locks the registry of open WALs as every open,
/// close and checkpoint does), and the child opens a database of its own
/// through the VFS. Before, the child's registry stayed locked by the
/// parent's thread, which the child does not have (`after_fork` emptied
/// only registries it could `try_lock`), and its open waited for ever:
/// 2 of 8 children hung. Now every forked child starts with registries of
/// its own (a `pthread_atfork` handler), and all 16 open, write and close
/// theirs.
#[test]
fn a_child_forked_while_a_thread_is_in_the_vfs_never_hangs() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, out) = finish(spawn("fork-race", dir.path(), 32));
    assert!(ok && out.contains("hung 0 failed 0"), "{out}");
}

/// A process with a database's WAL open forks a child (a helper that
/// never touches SQLite) and is SIGKILLed. Before, the child kept the WAL
/// pool locked for as long as it lived (the pool's `flock` belongs to the
/// open file, which the child's copies of the descriptor and of the
/// mapping hold): every open of the database, by any process and by the
/// child itself, was `SQLITE_BUSY` ("in use by another opener") until the
/// child ended. Now a forked child closes its copies of its parent's pool
/// descriptors and mappings: the database opens at once beside the living
/// child, with the 10 acknowledged rows, and the child's own connection
/// commits once the test's is closed.
#[test]
fn a_crashed_parents_wal_is_not_held_by_its_forked_child() {
    for msync in [false, true] {
        crashed_parent(msync);
    }
}

fn crashed_parent(msync: bool) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("f.db");
    let mut ch = Command::new(std::env::current_exe().unwrap())
        .args([
            "probe6_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ROLE, "fork-crash")
        .env(CHILD_DB, &db)
        .env(CHILD_SEED, (msync as u64).to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = ch.stdin.take().unwrap();
    let mut lines = BufReader::new(ch.stdout.take().unwrap()).lines();
    let mut seen = String::new();
    while !seen.contains("forked") {
        let l = lines.next().expect("the child ended early").unwrap();
        seen.push_str(&l);
        seen.push('\n');
    }
    // The parent is gone (reaped), its descriptors and mappings with it.
    let st = ch.wait().unwrap();
    assert_eq!(st.signal(), Some(libc::SIGKILL), "{seen}");
    assert!(seen.contains("acked 10"), "{seen}");
    {
        common::register_once(VFS, &cfg());
        let c = Connection::open_with_flags_and_vfs(&db, OpenFlags::default(), VFS).unwrap();
        // No busy handler: at once, or never.
        let n = c
            .query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0))
            .unwrap_or_else(|e| panic!("{e} ({:?})", rewind_sqlite::last_error()));
        assert_eq!(n, 10);
        c.execute("INSERT INTO t VALUES (50)", []).unwrap();
        common::intact(&c);
    }
    // The forked child's own connection.
    writeln!(stdin, "go").unwrap();
    let l = lines.next().expect("the forked child ended early").unwrap();
    assert_eq!(l, "child acked 10");
    drop(stdin);
    let c = open(&db);
    assert_eq!(common::count(&c), 21);
    common::intact(&c);
}

/// Commits transactions of 40 rows of 1 KB to `db` for ever (printing
/// `acked N`, the rows, after each), with a checkpoint of a mode the seed
/// picks after every one (bits 1-2); with seed bit 0 in exclusive locking
/// mode, with bit 4 on `Backend::Msync`.
fn ckpt_child(db: &Path, seed: u64) {
    let c = match seed & 16 != 0 {
        true => common::open_wal(MSYNC_VFS, &msync_cfg(), db),
        false => open(db),
    };
    if seed & 1 == 1 {
        c.pragma_update(None, "locking_mode", "EXCLUSIVE").unwrap();
    }
    c.execute_batch("CREATE TABLE IF NOT EXISTS t(k INTEGER PRIMARY KEY, v BLOB)")
        .unwrap();
    let mut n: i64 = c
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    let modes = ["PASSIVE", "FULL", "RESTART", "TRUNCATE"];
    for i in 0.. {
        c.execute_batch("BEGIN").unwrap();
        for _ in 0..40 {
            c.execute("INSERT INTO t VALUES (?1, randomblob(1000))", [n])
                .unwrap();
            n += 1;
        }
        c.execute_batch("COMMIT").unwrap();
        println!("acked {n}");
        let mode = modes[((seed >> 1) as usize + i) % 4];
        c.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |_| Ok(()))
            .unwrap();
    }
}

/// A writer committing 40 KB transactions, each followed by a
/// checkpoint of one of the four modes (so most kills land in one or
/// just after), in normal and exclusive locking mode, on `Pmem` and
/// `Msync`, SIGKILLed after 3 to 7 acknowledgements, 16 times on one
/// database: each reopen through the VFS holds exactly the acknowledged
/// rows (or one transaction more, its report cut off) and passes
/// `integrity_check`; its close leaves no pool, and stock SQLite then
/// reads the same rows, intact. A probe that found no defect.
#[test]
fn kills_during_checkpoints_then_stock_sqlite_reads_exactly_the_acked() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("k.db");
    let mut wal = db.clone().into_os_string();
    wal.push("-wal");
    for round in 0..16u64 {
        // Modes, locking and backend in turn.
        let seed = (round & 7) | ((round & 8) << 1);
        let mut ch = spawn("ckpt", &db, seed);
        let mut lines = BufReader::new(ch.stdout.take().unwrap()).lines();
        let (mut acked, mut seen) = (0i64, 0);
        while seen < 3 + round % 5 {
            let l = lines.next().expect("the writer ended").unwrap();
            if let Some(a) = l.strip_prefix("acked ") {
                acked = a.parse().unwrap();
                seen += 1;
            }
        }
        ch.kill().unwrap();
        for l in lines {
            if let Some(a) = l.unwrap().strip_prefix("acked ") {
                acked = a.parse().unwrap();
            }
        }
        ch.wait().unwrap();
        let n = {
            let c = open(&db);
            let n = common::count(&c);
            assert!(
                n == acked || n == acked + 40,
                "round {round}: {n} rows, {acked} acked"
            );
            common::intact(&c);
            n
        };
        assert!(!rewind_sqlite::pool_path(Path::new(&wal)).exists());
        let stock = Connection::open(&db).unwrap();
        assert_eq!(common::count(&stock), n, "stock SQLite, round {round}");
        common::intact(&stock);
    }
}

/// Commits `n` one-row transactions to `db` with checkpoints off, prints
/// `acked n`, and SIGKILLs itself with the WAL open: with bit 20 of `n`
/// through the `Msync` VFS, with bit 21 in exclusive locking mode set
/// before WAL mode (SQLite then keeps the wal-index in heap memory).
fn leave_child(db: &Path, n: u64) {
    let c = if n & (1 << 21) != 0 {
        common::register_once(VFS, &cfg());
        let c = Connection::open_with_flags_and_vfs(db, OpenFlags::default(), VFS).unwrap();
        c.pragma_update(None, "locking_mode", "EXCLUSIVE").unwrap();
        common::wal(&c);
        c
    } else if n & (1 << 20) != 0 {
        common::open_wal(MSYNC_VFS, &msync_cfg(), db)
    } else {
        open(db)
    };
    let n = n & 0xfffff;
    c.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
    c.execute_batch("CREATE TABLE IF NOT EXISTS t(k INTEGER PRIMARY KEY, v BLOB)")
        .unwrap();
    for _ in 0..n {
        c.execute("INSERT INTO t(v) VALUES (randomblob(300))", [])
            .unwrap();
    }
    println!("acked {n}");
    // SAFETY: a crash with the WAL open.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
}

/// Crashes with frames in the pool, the database then opened by a
/// program whose VFS has the other backend (`Pmem` after `Msync` and
/// back), or after a crash in exclusive locking mode set before WAL mode
/// (heap-memory wal-index), three times running: every acknowledged row,
/// intact, and stock SQLite reads them all after the last close. A probe
/// that found no defect.
#[test]
fn crashes_reopened_under_the_other_backend_or_after_exclusive_mode_keep_every_row() {
    for (flags, then_msync) in [(1u64 << 20, false), (0, true), (1 << 21, false)] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.db");
        for round in 1..=3i64 {
            let (ok, out) = finish(spawn("leave", &db, 30 | flags));
            assert!(!ok && out.contains("acked 30"), "{out}");
            let c = match then_msync {
                true => common::open_wal(MSYNC_VFS, &msync_cfg(), &db),
                false => open(&db),
            };
            assert_eq!(common::count(&c), 30 * round, "{flags:x}");
            common::intact(&c);
        }
        let stock = Connection::open(&db).unwrap();
        assert_eq!(common::count(&stock), 90);
        common::intact(&stock);
    }
}

/// 200 connections of one thread to one database, each committing a row,
/// and three threads each with a connection to each of 40 databases,
/// committing to all of them in turn (a TRUNCATE checkpoint of one
/// midway): every commit is there, and once every connection is closed
/// no pool is left. A probe that found no defect.
#[test]
fn hundreds_of_connections_and_dozens_of_databases_keep_every_commit() {
    let dir = tempfile::tempdir().unwrap();
    let one = dir.path().join("one.db");
    let first = open(&one);
    first
        .execute_batch("CREATE TABLE t(k INTEGER PRIMARY KEY, v)")
        .unwrap();
    let conns: Vec<Connection> = (0..200)
        .map(|_| Connection::open_with_flags_and_vfs(&one, OpenFlags::default(), VFS).unwrap())
        .collect();
    for (i, c) in conns.iter().enumerate() {
        c.execute("INSERT INTO t(v) VALUES (?1)", [i as i64])
            .unwrap();
    }
    let dbs: Vec<PathBuf> = (0..40)
        .map(|i| dir.path().join(format!("m{i}.db")))
        .collect();
    for d in &dbs {
        open(d)
            .execute_batch("CREATE TABLE t(k INTEGER PRIMARY KEY, v)")
            .unwrap();
    }
    std::thread::scope(|s| {
        for th in 0..3i64 {
            let dbs = &dbs;
            s.spawn(move || {
                let cs: Vec<Connection> = dbs
                    .iter()
                    .map(|d| {
                        let c = Connection::open_with_flags_and_vfs(d, OpenFlags::default(), VFS)
                            .unwrap();
                        c.busy_handler(Some(|_| {
                            std::thread::yield_now();
                            true
                        }))
                        .unwrap();
                        c
                    })
                    .collect();
                for round in 0..10i64 {
                    for c in &cs {
                        c.execute("INSERT INTO t(v) VALUES (?1)", [th * 100 + round])
                            .unwrap();
                    }
                    if round == 5 {
                        cs[th as usize]
                            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                            .unwrap();
                    }
                }
            });
        }
    });
    drop(conns);
    assert_eq!(common::count(&first), 200);
    drop(first);
    for d in dbs.iter().chain([&one]) {
        let c = open(d);
        assert!(common::count(&c) == 30 || d == &one);
        drop(c);
        let mut w = d.clone().into_os_string();
        w.push("-wal");
        assert!(!rewind_sqlite::pool_path(Path::new(&w)).exists());
    }
}

/// One statement's outcome: its rows, or its error with SQLite's
/// extended code; a checkpoint's busy column alone.
fn outcome(c: &Connection, sql: &str) -> String {
    let res = (|| -> rusqlite::Result<String> {
        let mut st = c.prepare(sql)?;
        let n = st.column_count();
        let mut rows = st.query([])?;
        let mut out = String::new();
        while let Some(r) = rows.next()? {
            let k = if sql.contains("wal_checkpoint") { 1 } else { n };
            for i in 0..k {
                out.push_str(&format!("{:?}|", r.get_ref(i)?));
            }
            out.push(';');
        }
        Ok(out)
    })();
    match res {
        Ok(s) => s,
        Err(e) => format!("error {:?} {e}", e.sqlite_error().map(|x| x.extended_code)),
    }
}

/// Three connections to one database, stock SQLite's and the VFS's,
/// running the same seeded statements without busy handlers, in turn:
/// transactions of every kind, savepoints, reads, inserts, updates and
/// deletes, checkpoints of every mode, `data_version`, `integrity_check`.
/// Every statement has the same outcome on both (rows, or error with its
/// extended code: `SQLITE_BUSY`, `SQLITE_BUSY_SNAPSHOT`, ...; a
/// checkpoint's busy column), odd seeds with a two-page cache (spilled
/// transactions). `REWIND_PROBE6_SEEDS` seeds of 600 statements (4 by
/// default; 60 found no difference, nor did 25 all spilling). A probe
/// that found no defect.
#[test]
fn three_connections_give_stock_outcomes_statement_by_statement() {
    use rand::{Rng, SeedableRng};
    let seeds: u64 = std::env::var("REWIND_PROBE6_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    for seed in 0..seeds {
        // Odd seeds with a page cache of 2 pages and larger rows: most
        // transactions spill frames before they commit.
        let spill = seed % 2 == 1;
        let dir = tempfile::tempdir().unwrap();
        let mut logs = Vec::new();
        for ours in [false, true] {
            let path = dir.path().join(if ours { "o.db" } else { "s.db" });
            let cs: Vec<Connection> = (0..3)
                .map(|_| {
                    let c = match ours {
                        true => {
                            common::register_once(VFS, &cfg());
                            Connection::open_with_flags_and_vfs(&path, OpenFlags::default(), VFS)
                                .unwrap()
                        }
                        false => Connection::open(&path).unwrap(),
                    };
                    c.busy_timeout(std::time::Duration::ZERO).unwrap();
                    if spill {
                        c.pragma_update(None, "cache_size", 2).unwrap();
                    }
                    c
                })
                .collect();
            common::wal(&cs[0]);
            cs[0]
                .execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v INTEGER, pad BLOB)")
                .unwrap();
            let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
            let mut log = String::new();
            for step in 0..600 {
                let i = rng.gen_range(0..3);
                let k = rng.gen_range(0..13);
                let sql = match rng.gen_range(0..20) {
                    0 => "BEGIN".to_string(),
                    1 => "BEGIN IMMEDIATE".to_string(),
                    2 => "BEGIN EXCLUSIVE".to_string(),
                    3 | 4 => "COMMIT".to_string(),
                    5 => "ROLLBACK".to_string(),
                    6 => "SAVEPOINT s".to_string(),
                    7 => "RELEASE s".to_string(),
                    8 => "ROLLBACK TO s".to_string(),
                    9 | 10 => "SELECT count(*), coalesce(sum(v), 0), \
                               coalesce(sum(length(pad)), 0) FROM t"
                        .to_string(),
                    11 | 12 => format!(
                        "INSERT INTO t(v, pad) VALUES ({k}, zeroblob({}))",
                        k * if spill { 1500 } else { 300 }
                    ),
                    13 => format!(
                        "UPDATE t SET v = v + 1, pad = zeroblob(length(pad) + 10) \
                         WHERE id % 7 = {}",
                        k % 7
                    ),
                    14 => format!("DELETE FROM t WHERE id % 11 = {}", k % 11),
                    15 => {
                        let mode = ["PASSIVE", "FULL", "RESTART", "TRUNCATE"][k % 4];
                        format!("PRAGMA wal_checkpoint({mode})")
                    }
                    16 => "PRAGMA data_version".to_string(),
                    17 => format!(
                        "INSERT INTO t(v, pad) SELECT v, pad FROM t WHERE id % 13 = {k} LIMIT 20"
                    ),
                    18 => "SELECT id, v FROM t ORDER BY id DESC LIMIT 3".to_string(),
                    _ => "PRAGMA integrity_check".to_string(),
                };
                log.push_str(&format!("{step} c{i} {sql}: {}\n", outcome(&cs[i], &sql)));
            }
            logs.push(log);
        }
        let (a, b): (Vec<_>, Vec<_>) = (logs[0].lines().collect(), logs[1].lines().collect());
        if let Some(at) = a.iter().zip(&b).position(|(x, y)| x != y) {
            panic!(
                "seed {seed}: stock\n{}\nthe VFS\n{}\nafter\n{}",
                a[at],
                b[at],
                a[at.saturating_sub(8)..at].join("\n")
            );
        }
        assert!(logs[0].contains("Some(5)"), "no SQLITE_BUSY at all");
    }
}

/// Opens `db`, commits 10 rows, forks a child that drops its copy of the
/// connection (as a Rust program's child does when it returns through
/// the scope that holds it) and ends; once it has, prints `dropped` and
/// waits for a line on stdin, then commits 10 more rows and prints
/// `acked 20`.
fn fork_drop_child(db: &Path) {
    let c = open(db);
    c.execute_batch("CREATE TABLE t(v)").unwrap();
    for i in 0..10 {
        c.execute("INSERT INTO t VALUES (?1)", [i]).unwrap();
    }
    // SAFETY: the child only drops its copy of the connection and ends.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        drop(c);
        // SAFETY: ends the forked process.
        unsafe { libc::_exit(0) };
    }
    let mut st = 0;
    // SAFETY: waits for the child just forked.
    unsafe { libc::waitpid(pid, &mut st, 0) };
    assert!(
        libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0,
        "child status {st}"
    );
    println!("dropped");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    for i in 10..20 {
        c.execute("INSERT INTO t VALUES (?1)", [i]).unwrap();
    }
    println!("acked 20");
}

/// Opens `db` with no busy handler and inserts 5 rows: prints `second
/// acked N` (stopping at the first error, printed).
fn second_child(db: &Path) {
    common::register_once(VFS, &cfg());
    let c = Connection::open_with_flags_and_vfs(db, OpenFlags::default(), VFS).unwrap();
    c.busy_handler(None::<fn(i32) -> bool>).unwrap();
    let mut acked = 0;
    for i in 0..5 {
        match c.execute("INSERT INTO t VALUES (?1)", [500 + i]) {
            Ok(_) => acked += 1,
            Err(e) => {
                println!("error {e} ({:?})", rewind_sqlite::last_error());
                break;
            }
        }
    }
    println!("second acked {acked}");
}

/// A process with a database open forks a child that drops its copy of
/// the connection (a Rust child returning through the scope that holds
/// it), and goes on. Before, the child's close was the last handle of
/// its copy of the WAL registry: it closed the pool, whose `flock`
/// belongs to the open file the parent shares, and unlocked it for the
/// parent too: another process then opened the pool the parent still had
/// open and committed 5 rows into it (where it should have met
/// `SQLITE_BUSY`): two openers of one pool, each with its own view of
/// the log. Now the child's registries are its own from the
/// fork: its close lets go of nothing of the parent's, the other process
/// gets `SQLITE_BUSY` and commits nothing, and the parent's 20 rows are
/// all there.
#[test]
fn a_forked_child_closing_its_copy_of_a_connection_unlocked_the_parents_wal() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("d.db");
    let mut ch = Command::new(std::env::current_exe().unwrap())
        .args([
            "probe6_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ROLE, "fork-drop")
        .env(CHILD_DB, &db)
        .env(CHILD_SEED, "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = ch.stdin.take().unwrap();
    let mut lines = BufReader::new(ch.stdout.take().unwrap()).lines();
    while lines.next().expect("the first process ended").unwrap() != "dropped" {}
    let (ok, second) = finish(spawn("second", &db, 0));
    assert!(ok, "{second}");
    assert!(second.contains("second acked 0"), "{second}");
    assert!(second.contains("database is locked"), "{second}");
    writeln!(stdin, "go").unwrap();
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    assert!(ch.wait().unwrap().success(), "{rest:?}");
    assert!(rest.iter().any(|l| l == "acked 20"), "{rest:?}");
    let c = open(&db);
    assert_eq!(common::count(&c), 20);
    common::intact(&c);
}

/// Under a file-size limit of `kib` KiB (SIGXFSZ ignored: writes past it
/// fail with EFBIG), opens `db`, commits rows of 20 KB one per
/// transaction until refused, then one small row; prints what happened.
fn fsize_child(db: &Path, kib: u64) {
    // SAFETY: ignoring a signal.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    set_limit(libc::RLIMIT_FSIZE, kib << 10);
    common::register_once(VFS, &cfg());
    let c = match Connection::open_with_flags_and_vfs(db, OpenFlags::default(), VFS) {
        Ok(c) => c,
        Err(e) => {
            println!("open error {e}");
            return;
        }
    };
    if let Err(e) =
        c.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0))
    {
        println!("wal error {e} {:?}", rewind_sqlite::last_error());
        return;
    }
    if let Err(e) = c.execute_batch("CREATE TABLE IF NOT EXISTS t(k INTEGER PRIMARY KEY, v BLOB)") {
        println!("create error {e} {:?}", rewind_sqlite::last_error());
        return;
    }
    let mut acked = 0;
    for i in 0..400 {
        match c.execute("INSERT INTO t VALUES (?1, randomblob(20000))", [i]) {
            Ok(_) => acked += 1,
            Err(e) => {
                println!(
                    "insert {i} error {e} {:?} code {:?}",
                    rewind_sqlite::last_error(),
                    e.sqlite_error_code()
                );
                break;
            }
        }
    }
    println!("acked {acked}");
    match c.execute("INSERT INTO t VALUES (100000, 'x')", []) {
        Ok(_) => println!("small ok"),
        Err(e) => println!("small error {e} {:?}", rewind_sqlite::last_error()),
    }
}

/// A process whose files may not pass 256 KiB, 1.5 MiB or 4 MiB
/// (`RLIMIT_FSIZE`, SIGXFSZ ignored: a write past it fails with EFBIG)
/// commits rows of 20 KB until refused: no room for a new pool is
/// `SQLITE_FULL` (no pool file left), no room to grow one is
/// `SQLITE_FULL` naming the committed frames, a small row commits after,
/// and the database reopens (no limit) with exactly the acknowledged
/// rows, intact. A probe that found no defect.
#[test]
fn a_file_size_limit_is_sqlite_full_and_loses_nothing() {
    for kib in [256u64, 1536, 4096] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("f.db");
        let (ok, out) = finish(spawn("fsize", &db, kib));
        assert!(ok, "{out}");
        assert!(out.contains("database or disk is full"), "{kib} KiB: {out}");
        if kib == 256 {
            assert!(out.contains("no space left for a pool"), "{out}");
            let mut wal = db.clone().into_os_string();
            wal.push("-wal");
            assert!(!rewind_sqlite::pool_path(Path::new(&wal)).exists());
            continue;
        }
        assert!(out.contains("small ok"), "{kib} KiB: {out}");
        let acked: i64 = out
            .lines()
            .find_map(|l| l.strip_prefix("acked "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(acked > 0, "{out}");
        let c = open(&db);
        assert_eq!(common::count(&c), acked + 1, "{kib} KiB: {out}");
        common::intact(&c);
    }
}

/// Four threads opening and closing connections over and over, half of
/// them read-only (whose last close removes an empty pool), the writers
/// inserting and now and then checkpointing with TRUNCATE (whose last
/// close removes the pool), every thread asking `stats` between: no
/// statement fails, and every acknowledged row is there, intact. A probe
/// that found no defect.
#[test]
fn read_only_and_writing_connections_churning_in_threads_keep_every_row() {
    use rand::{Rng, SeedableRng};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ch.db");
    open(&path)
        .execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, w INTEGER, v INTEGER)")
        .unwrap();
    let acked = std::sync::atomic::AtomicI64::new(0);
    let errors = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for w in 0..4u64 {
            let (path, acked, errors) = (&path, &acked, &errors);
            s.spawn(move || {
                let mut rng = rand::rngs::SmallRng::seed_from_u64(w);
                for i in 0..150 {
                    let ro = rng.gen_bool(0.5);
                    let flags = if ro {
                        OpenFlags::SQLITE_OPEN_READ_ONLY
                    } else {
                        OpenFlags::default()
                    };
                    let c = match Connection::open_with_flags_and_vfs(path, flags, VFS) {
                        Ok(c) => c,
                        Err(e) => {
                            errors.lock().unwrap().push(format!("open {e}"));
                            continue;
                        }
                    };
                    c.busy_handler(Some(|_| {
                        std::thread::yield_now();
                        true
                    }))
                    .unwrap();
                    let r = if ro {
                        c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0))
                            .map(|_| ())
                    } else {
                        let r = c
                            .execute("INSERT INTO t(w, v) VALUES (?1, ?2)", (w as i64, i as i64))
                            .map(|_| ());
                        if r.is_ok() {
                            acked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        if r.is_ok() && i % 5 == 0 {
                            c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                                .map(|_| ())
                        } else {
                            r
                        }
                    };
                    if let Err(e) = r {
                        errors
                            .lock()
                            .unwrap()
                            .push(format!("{ro} {e} {:?}", rewind_sqlite::last_error()));
                    }
                    let _ = rewind_sqlite::stats(path);
                }
            });
        }
    });
    let errs = errors.into_inner().unwrap();
    assert!(
        errs.is_empty(),
        "{} errors: {:?}",
        errs.len(),
        &errs[..errs.len().min(5)]
    );
    let c = open(&path);
    let acked = acked.load(std::sync::atomic::Ordering::SeqCst);
    assert!(acked > 0);
    assert_eq!(common::count(&c), acked);
    common::intact(&c);
}
