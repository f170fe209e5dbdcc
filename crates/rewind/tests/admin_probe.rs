//! Administrative and read calls racing transactions on one pool, in
//! every log variant × policy (and on Msync): writer threads commit
//! transfers between accounts and whole updates of a record of their own
//! (with a block allocated and one freed in each), some roll back by
//! returning `Err`, some panic inside the closure, some roll writes back
//! to a savepoint, some run a nested top action (kept whatever their
//! transaction does), some create named roots (one name all race for);
//! beside them a thread calls `sync`, `checkpoint`, `grow`, `backup_to`
//! and inspection of the live file, and a reader calls `read_isolated` on
//! each record (some reads panicking), `counters`, the statistics and
//! `root_named`. Each writer counts the transactions it started and those
//! whose commit returned `Ok`: every backup must open, check clean and
//! hold, for each writer, a state between the two (exactly a prefix of
//! its transactions, whole); an isolated read never sees half a
//! transaction; after a close and a reopen the pool holds exactly the
//! acknowledged commits and checks clean.
//!
//! Then: root lookups outside transactions beside root creations (only
//! committed roots, never a catalog read as damaged); the pool's calls
//! inside a transaction's closure; `backup_to`, `checkpoint` and `grow`
//! inside an isolated read holding its key's lock while a transaction
//! waits for that key (refused, or past a waiting backup: no wait for
//! itself); `grow_to` from several threads at once.
//!
//! Counts and seeds only: no outcome depends on time
//! (`REWIND_HANG_LIMIT_SECS` arms a watchdog for runs by hand;
//! `REWIND_PROBE_CASES` sets the transactions per writer).

mod common;

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use common::{configs, recv_watched};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{
    inspect, Backend, Error, LogVariant, OpenOptions, PPtr, Pod, Policy, Pool, PoolConfig, Zeroable,
};

const LAYOUT: &str = "admin-probe";
const WRITERS: usize = 3;
const ACCOUNTS: usize = 8;
const START: u64 = 1000;
/// Words of a record's history: transaction `d` of its writer sets
/// `mine[d % K]` to `d + 1`.
const K: usize = 8;
/// The name every writer races to create.
const SHARED: &str = "shared";

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct Root {
    records: [PPtr<Record>; WRITERS],
    accounts: [PPtr<u64>; ACCOUNTS],
    /// Per writer, how many of its nested top actions ended (each
    /// outlives a rollback of its transaction).
    ntas: [PPtr<u64>; WRITERS],
}

/// A writer's own record, locked by each of its transactions.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct Record {
    /// Its transactions committed.
    done: u64,
    /// A block (replaced by each transaction) holding `done`.
    note: PPtr<u64>,
    mine: [u64; K],
}

/// Transactions per writer; `REWIND_PROBE_CASES` for more.
fn txs() -> u64 {
    std::env::var("REWIND_PROBE_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60)
}

/// The directory pools go in: /dev/shm where there is one.
fn tempdir() -> tempfile::TempDir {
    match Path::new("/dev/shm").is_dir() {
        true => tempfile::tempdir_in("/dev/shm").unwrap(),
        false => tempfile::tempdir().unwrap(),
    }
}

/// Tells the test's thread that a thread ended, however it ended (its
/// panic, if any, comes out of the scope's join).
struct Ended(mpsc::Sender<()>);

impl Drop for Ended {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

/// Waits until `n` threads ended ([`recv_watched`]: as long as it takes,
/// unless `REWIND_HANG_LIMIT_SECS` is set; then a silence that long
/// aborts the process, naming the case: hung threads could not be
/// joined).
fn wait_ended(rx: &mpsc::Receiver<()>, n: usize, what: &str) {
    for _ in 0..n {
        if let Err(mpsc::RecvTimeoutError::Timeout) = recv_watched(rx) {
            let msg = format!("HANG: {what}: a thread hung (REWIND_HANG_LIMIT_SECS)\n");
            // Past the test harness's capture, which the abort would lose.
            let _ = std::io::Write::write_all(&mut std::io::stderr(), msg.as_bytes());
            std::process::abort();
        }
    }
}

#[derive(Debug)]
enum TestErr {
    Pool(Error),
    Abort,
}

impl From<Error> for TestErr {
    fn from(e: Error) -> TestErr {
        TestErr::Pool(e)
    }
}

fn retryable(e: &Error) -> bool {
    matches!(e, Error::Deadlock { .. } | Error::LockTimeout { .. })
}

/// What one of a writer's transactions does besides its record.
#[derive(Clone, Copy)]
enum End {
    Commit,
    Abort,
    Panic,
}

fn setup(pool: &Pool) -> Root {
    pool.transaction(|tx| {
        let rp: PPtr<Root> = tx.root()?;
        let mut root = Root::zeroed();
        for r in &mut root.records {
            *r = tx.alloc()?;
        }
        for n in &mut root.ntas {
            *n = tx.alloc()?;
        }
        for a in &mut root.accounts {
            *a = tx.alloc()?;
            tx.write(*a, &START)?;
        }
        tx.write(rp, &root)?;
        Ok::<_, Error>(root)
    })
    .unwrap()
}

/// The record a writer leaves after `done` transactions, its note's value
/// read beside it; `Err` says what is wrong.
fn check_record(rec: &Record, note: Option<u64>) -> Result<(), String> {
    for (j, &v) in rec.mine.iter().enumerate() {
        // The last d < done with d % K == j, plus one; 0 if none.
        let want = match rec.done > j as u64 {
            true => (rec.done - 1 - j as u64) / K as u64 * K as u64 + j as u64 + 1,
            false => 0,
        };
        if v != want {
            return Err(format!("done {} but mine[{j}] = {v}, not {want}", rec.done));
        }
    }
    match (rec.done, rec.note.is_null(), note) {
        (0, true, _) => Ok(()),
        (d, false, Some(n)) if n == d => Ok(()),
        (d, _, n) => Err(format!("done {d} but note {:?} holds {n:?}", rec.note)),
    }
}

/// Reads everything of `pool` and checks it: the sum of the accounts,
/// every record whole; returns each writer's `done`.
fn check_state(pool: &Pool, what: &str) -> [u64; WRITERS] {
    let report = inspect::check_pool(pool);
    assert!(report.is_ok(), "{what}: check_pool: {:?}", report.problems);
    let root: Root = pool.read(pool.root::<Root>().unwrap().unwrap()).unwrap();
    let sum: u64 = root.accounts.iter().map(|&a| pool.read(a).unwrap()).sum();
    assert_eq!(sum, START * ACCOUNTS as u64, "{what}: the accounts' sum");
    let mut done = [0; WRITERS];
    for (t, &r) in root.records.iter().enumerate() {
        let rec = pool.read(r).unwrap();
        let note = (!rec.note.is_null()).then(|| pool.read(rec.note).unwrap());
        if let Err(e) = check_record(&rec, note) {
            panic!("{what}: writer {t}'s record: {e}");
        }
        done[t] = rec.done;
    }
    done
}

/// Per writer, the nested top actions the pool holds.
fn ntas(pool: &Pool) -> [u64; WRITERS] {
    let root: Root = pool.read(pool.root::<Root>().unwrap().unwrap()).unwrap();
    root.ntas.map(|n| pool.read(n).unwrap())
}

/// Per writer: transactions started (counted before `transaction` is
/// called) and acknowledged (counted once it returned `Ok`).
struct Counts {
    started: [AtomicU64; WRITERS],
    acked: [AtomicU64; WRITERS],
    /// Nested top actions begun, and ended `Ok` (whatever their
    /// transaction did after).
    ntas_started: [AtomicU64; WRITERS],
    ntas_done: [AtomicU64; WRITERS],
}

impl Counts {
    fn snapshot(c: &[AtomicU64; WRITERS]) -> [u64; WRITERS] {
        std::array::from_fn(|t| c[t].load(Ordering::SeqCst))
    }
}

/// A writer: `txs` transactions committed, besides those it aborts or
/// panics in; returns the named roots it created (name, pointer, value)
/// and the pointer it got for [`SHARED`].
#[allow(clippy::type_complexity)]
fn writer(
    pool: &Pool,
    root: Root,
    t: usize,
    seed: u64,
    counts: &Counts,
) -> (Vec<(String, PPtr<u64>, u64)>, Option<PPtr<u64>>) {
    let mut rng = SmallRng::seed_from_u64(seed ^ (t as u64) << 40);
    let rec_p = root.records[t];
    let mut names = Vec::new();
    let mut shared = None;
    let mut committed = 0;
    while committed < txs() {
        let end = match rng.gen_range(0..10) {
            0 => End::Abort,
            1 => End::Panic,
            _ => End::Commit,
        };
        let (a, b) = {
            let a = rng.gen_range(0..ACCOUNTS);
            let b = (a + rng.gen_range(1..ACCOUNTS)) % ACCOUNTS;
            (a.min(b), a.max(b))
        };
        let amount = rng.gen_range(0..50u64);
        let named = rng.gen_ratio(1, 5).then(|| format!("w{t}-{committed}"));
        // Writes rolled back to a savepoint first: none may stay.
        let undone = rng.gen_ratio(1, 4);
        // A nested top action, first in the transaction or after its
        // first lock.
        let nta = match rng.gen_range(0..6) {
            0 => Some(true),
            1 => Some(false),
            _ => None,
        };
        // A planned panic inside the nested top action, after its write:
        // the action, unfinished, goes with its transaction.
        let panic_in_action = matches!(end, End::Panic) && nta.is_some() && rng.gen_ratio(1, 2);
        let before = pool.read(rec_p).unwrap();
        loop {
            counts.started[t].fetch_add(1, Ordering::SeqCst);
            let action = |tx: &mut rewind::Tx<'_>| -> Result<(), TestErr> {
                counts.ntas_started[t].fetch_add(1, Ordering::SeqCst);
                tx.nested_top_action(|tx| {
                    let n = root.ntas[t];
                    tx.lock(n)?;
                    let v = tx.read(n)?;
                    tx.write(n, &(v + 1))?;
                    if panic_in_action {
                        panic!("admin-probe: a planned panic in a nested top action");
                    }
                    Ok::<_, Error>(())
                })?;
                counts.ntas_done[t].fetch_add(1, Ordering::SeqCst);
                Ok(())
            };
            let run = |tx: &mut rewind::Tx<'_>| -> Result<Option<PPtr<u64>>, TestErr> {
                if nta == Some(true) {
                    action(tx)?;
                }
                tx.lock(rec_p)?;
                if nta == Some(false) {
                    action(tx)?;
                }
                if undone {
                    tx.lock(root.accounts[a])?; // as later: a < b
                    let sp = tx.savepoint()?;
                    let junk = Record {
                        done: u64::MAX,
                        note: tx.alloc()?,
                        mine: [u64::MAX; K],
                    };
                    tx.write(rec_p, &junk)?;
                    tx.write(root.accounts[a], &u64::MAX)?;
                    tx.rollback_to(sp)?;
                }
                let mut rec = tx.read(rec_p)?;
                let d = rec.done;
                rec.mine[d as usize % K] = d + 1;
                rec.done = d + 1;
                let note = tx.alloc::<u64>()?;
                tx.write(note, &(d + 1))?;
                if !rec.note.is_null() {
                    tx.free(rec.note)?;
                }
                rec.note = note;
                tx.write(rec_p, &rec)?;
                tx.lock(root.accounts[a])?;
                tx.lock(root.accounts[b])?;
                let va = tx.read(root.accounts[a])?;
                let vb = tx.read(root.accounts[b])?;
                let m = amount.min(va);
                tx.write(root.accounts[a], &(va - m))?;
                tx.write(root.accounts[b], &(vb + m))?;
                let mut got = None;
                if let Some(name) = &named {
                    let p: PPtr<u64> = tx.root_named(name)?;
                    tx.write(p, &(d + 1))?;
                    got = Some(tx.root_named::<u64>(SHARED)?);
                }
                match end {
                    End::Commit => Ok(got),
                    End::Abort => Err(TestErr::Abort),
                    End::Panic => panic!("admin-probe: a planned panic"),
                }
            };
            let r = std::panic::catch_unwind(AssertUnwindSafe(|| pool.transaction(run)));
            match (end, r) {
                (End::Commit, Ok(Ok(got))) => {
                    counts.acked[t].fetch_add(1, Ordering::SeqCst);
                    committed += 1;
                    if let (Some(name), Some(s)) = (&named, got) {
                        let p = pool.root_named::<u64>(name).unwrap().unwrap();
                        names.push((name.clone(), p, committed));
                        assert!(shared.is_none_or(|x| x == s), "two roots named {SHARED}");
                        shared = Some(s);
                    }
                    break;
                }
                (_, Ok(Err(TestErr::Pool(e)))) if retryable(&e) => continue,
                (End::Abort, Ok(Err(TestErr::Abort))) | (End::Panic, Err(_)) => {
                    // Rolled back whole: the record as before, the pool usable.
                    let after = pool.read(rec_p).unwrap();
                    assert_eq!(after.done, before.done, "writer {t}: a rollback kept done");
                    assert_eq!(after.note, before.note, "writer {t}: a rollback kept note");
                    assert_eq!(after.mine, before.mine, "writer {t}: a rollback kept mine");
                    if let Some(name) = &named {
                        // A root created by a transaction rolled back is gone.
                        assert_eq!(pool.root_named::<u64>(name).unwrap(), None);
                    }
                    break;
                }
                (_, Ok(Err(e))) => panic!("writer {t}: {e:?}"),
                (_, Ok(Ok(_))) => panic!("writer {t}: an aborted transaction returned Ok"),
                (_, Err(p)) => std::panic::resume_unwind(p),
            }
        }
    }
    (names, shared)
}

/// A reader: `rounds` passes over the records by `read_isolated` (never
/// half a transaction), the statistics and the roots.
fn reader(pool: &Pool, root: Root, rounds: u64) {
    for i in 0..rounds {
        if i % 5 == 0 {
            // A panic in the read: the key's lock (if the read took it)
            // goes with it, and the writers go on.
            let r = root.records[i as usize % WRITERS];
            let p = std::panic::catch_unwind(AssertUnwindSafe(|| {
                pool.read_isolated(r.offset(), |rd| -> Result<(), Error> {
                    rd.read(r)?;
                    panic!("admin-probe: a planned panic in a read");
                })
            }));
            assert!(p.is_err());
        }
        for (t, &r) in root.records.iter().enumerate() {
            let (rec, note) = pool
                .read_isolated(r.offset(), |rd| {
                    let rec = rd.read(r)?;
                    let note = match rec.note.is_null() {
                        true => None,
                        false => Some(rd.read(rec.note)?),
                    };
                    Ok::<_, Error>((rec, note))
                })
                .unwrap();
            if let Err(e) = check_record(&rec, note) {
                panic!("read_isolated of writer {t}'s record: {e}");
            }
        }
        let _ = pool.counters();
        let s = pool.alloc_stats();
        assert!(s.total_chunks > 0);
        let _ = pool.log_stats();
        assert!(pool.size() <= pool.max_size());
        let roots = pool.roots().unwrap();
        if let Some(s) = roots.iter().find(|r| r.name == SHARED) {
            assert_eq!(
                pool.root_named::<u64>(SHARED).unwrap().unwrap().offset(),
                s.offset
            );
        }
    }
}

/// The administrator: `rounds` of sync, checkpoint, grow and a backup,
/// each backup opened and checked: for each writer, between the
/// transactions acknowledged before it began and those started after it
/// ended.
fn admin(pool: &Pool, dir: &Path, tag: &str, rounds: usize, counts: &Counts) -> Vec<PathBuf> {
    let mut copies = Vec::new();
    // A word of the administrator's, set by atomic writes (racing the
    // writers' root creations for the catalog).
    let word: PPtr<u64> = loop {
        match pool.transaction(|tx| tx.root_named("admin")) {
            Ok(p) => break p,
            Err(e) if retryable(&e) => continue,
            Err(e) => panic!("{tag}: root_named: {e:?}"),
        }
    };
    for i in 0..rounds {
        pool.atomic_write(word, &(i as u64 + 1)).unwrap();
        pool.sync().unwrap();
        pool.checkpoint().unwrap();
        match pool.grow(256 << 10) {
            Ok(size) => assert!(size <= pool.max_size()),
            Err(Error::OutOfMemory { .. }) => {}
            Err(e) => panic!("{tag}: grow: {e:?}"),
        }
        // Inspection of the live pool: the typed refusal of a pool in
        // use, nothing else, and no change to the pool.
        let live = dir.join("live.pool");
        let in_use = |e: Error| assert!(matches!(e, Error::PoolInUse { .. }), "{tag}: {e:?}");
        inspect::info(&live).map(drop).unwrap_or_else(in_use);
        inspect::check(&live).map(drop).unwrap_or_else(in_use);
        inspect::dump_log(&live).map(drop).unwrap_or_else(in_use);
        let copy = dir.join(format!("{tag}-copy-{i}.pool"));
        let lo = Counts::snapshot(&counts.acked);
        let nta_lo = Counts::snapshot(&counts.ntas_done);
        pool.backup_to(&copy).unwrap();
        let hi = Counts::snapshot(&counts.started);
        let nta_hi = Counts::snapshot(&counts.ntas_started);
        let report = inspect::check(&copy).unwrap();
        assert!(report.is_ok(), "{tag}: backup {i}: {:?}", report.problems);
        let c = Pool::open(&copy, LAYOUT, &OpenOptions::default()).unwrap();
        let done = check_state(&c, &format!("{tag}: backup {i}"));
        let w = c.root_named::<u64>("admin").unwrap().unwrap();
        assert_eq!(
            c.read(w).unwrap(),
            i as u64 + 1,
            "{tag}: backup {i}: the atomic write"
        );
        let n = ntas(&c);
        for t in 0..WRITERS {
            assert!(
                nta_lo[t] <= n[t] && n[t] <= nta_hi[t],
                "{tag}: backup {i}: writer {t}'s nested top actions {} outside [{}, {}]",
                n[t],
                nta_lo[t],
                nta_hi[t]
            );
        }
        for t in 0..WRITERS {
            assert!(
                lo[t] <= done[t] && done[t] <= hi[t],
                "{tag}: backup {i}: writer {t} done {} outside [{}, {}]",
                done[t],
                lo[t],
                hi[t]
            );
        }
        c.close().unwrap();
        copies.push(copy);
    }
    copies
}

fn run(name: &str, cfg: &PoolConfig, seed: u64) {
    let dir = tempdir();
    let path = dir.path().join("live.pool");
    let cfg = cfg.clone().max_size(8 << 20);
    let pool = Pool::create(&path, LAYOUT, 4 << 20, &cfg).unwrap();
    let root = setup(&pool);
    let counts = Counts {
        started: Default::default(),
        acked: Default::default(),
        ntas_started: Default::default(),
        ntas_done: Default::default(),
    };
    let (tx_done, rx_done) = mpsc::channel();
    let (results, copies) = std::thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|t| {
                let (pool, counts, tx_done) = (&pool, &counts, tx_done.clone());
                s.spawn(move || {
                    let _ended = Ended(tx_done);
                    writer(pool, root, t, seed, counts)
                })
            })
            .collect();
        let reader = {
            let (pool, tx_done) = (&pool, tx_done.clone());
            s.spawn(move || {
                let _ended = Ended(tx_done);
                reader(pool, root, 2 * txs());
            })
        };
        let admin = {
            let (pool, counts, tx_done) = (&pool, &counts, tx_done.clone());
            let dir = dir.path();
            s.spawn(move || {
                let _ended = Ended(tx_done);
                admin(pool, dir, name, 3 + txs() as usize / 100, counts)
            })
        };
        drop(tx_done);
        wait_ended(&rx_done, WRITERS + 2, name);
        let results: Vec<_> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        reader.join().unwrap();
        (results, admin.join().unwrap().len())
    });
    let acked = Counts::snapshot(&counts.acked);
    assert_eq!(acked, [txs(); WRITERS]);
    // Dropped (not closed) for the policies that write back on a thread:
    // the drop must leave what a reopen needs.
    match cfg_policy(&pool) {
        Policy::RedoAsync => drop(pool),
        _ => pool.close().unwrap(),
    }
    let report = inspect::check(&path).unwrap();
    assert!(report.is_ok(), "{name}: after close: {:?}", report.problems);
    let pool = Pool::open(&path, LAYOUT, &OpenOptions::default()).unwrap();
    let done = check_state(&pool, name);
    assert_eq!(done, acked, "{name}: the reopened pool's commits");
    let n = Counts::snapshot(&counts.ntas_done);
    assert_eq!(ntas(&pool), n, "{name}: the nested top actions");
    let w = pool.root_named::<u64>("admin").unwrap().unwrap();
    assert_eq!(
        pool.read(w).unwrap(),
        copies as u64,
        "{name}: the last atomic write"
    );
    let mut shared = None;
    for (names, s) in &results {
        for (n, p, v) in names {
            assert_eq!(
                pool.root_named::<u64>(n).unwrap(),
                Some(*p),
                "{name}: root {n}"
            );
            assert!(pool.read(*p).unwrap() == *v, "{name}: root {n}'s value");
        }
        if let Some(s) = s {
            assert!(
                shared.is_none_or(|x| x == *s),
                "{name}: two roots named {SHARED}"
            );
            shared = Some(*s);
        }
    }
    assert_eq!(pool.root_named::<u64>(SHARED).unwrap(), shared);
    pool.close().unwrap();
}

fn cfg_policy(pool: &Pool) -> Policy {
    pool.policy()
}

/// Quiets the planned panics' messages (others still print).
fn quiet_planned_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let planned = info
                .payload()
                .downcast_ref::<&str>()
                .is_some_and(|s| s.starts_with("admin-probe"));
            if !planned {
                hook(info);
            }
        }));
    });
}

#[test]
fn admin_calls_beside_writers_every_config() {
    quiet_planned_panics();
    for (i, (v, p)) in configs().into_iter().enumerate() {
        let cfg = PoolConfig::default().log(v).policy(p);
        run(&format!("{v:?}-{p:?}"), &cfg, 0xad31 + i as u64);
    }
}

/// Redo-async with its write-back holding hot lines (written back once,
/// later): `sync`, the backups and the close must drain them.
#[test]
fn admin_calls_beside_writers_lru_write_back() {
    quiet_planned_panics();
    for (i, v) in LogVariant::ALL.into_iter().enumerate() {
        let cfg = PoolConfig::default()
            .log(v)
            .policy(Policy::RedoAsync)
            .write_back(rewind::WriteBack::Lru { lines: 64 });
        run(&format!("lru-{v:?}"), &cfg, 0x1a0 + i as u64);
    }
}

#[test]
fn admin_calls_beside_writers_msync() {
    quiet_planned_panics();
    for (v, p) in [
        (LogVariant::Batch, Policy::Redo),
        (LogVariant::Simple, Policy::Force),
        (LogVariant::TwoLayer, Policy::RedoAsync),
    ] {
        let cfg = PoolConfig::default()
            .log(v)
            .policy(p)
            .backend(Backend::Msync);
        run(&format!("msync-{v:?}-{p:?}"), &cfg, 0x3517);
    }
}

/// `Pool::roots`, `Pool::root_named` and `Pool::root` (the committed
/// catalog and root word) while other threads' transactions create roots,
/// some of them rolled back: a lookup returns committed roots only, never
/// an error (the catalog is not damaged: a transaction is changing it),
/// and never a root of a transaction that then rolls back.
#[test]
fn root_lookups_beside_root_creations_see_committed_roots_only() {
    let creators = 2;
    let per = txs() * 2;
    for (v, p) in configs() {
        let dir = tempdir();
        let path = dir.path().join("roots.pool");
        let cfg = PoolConfig::default().log(v).policy(p);
        let pool = Pool::create(&path, LAYOUT, 4 << 20, &cfg).unwrap();
        let (tx_done, rx_done) = mpsc::channel();
        std::thread::scope(|s| {
            for t in 0..creators {
                let (pool, tx_done) = (&pool, tx_done.clone());
                s.spawn(move || {
                    let _ended = Ended(tx_done);
                    for i in 0..per {
                        let keep = i % 3 != 2;
                        let r = pool.transaction(|tx| {
                            if t == 0 && i == per / 2 {
                                tx.root::<[u64; 4]>()?;
                            }
                            let p: PPtr<u64> = tx.root_named(&format!("c{t}-{i}"))?;
                            tx.write(p, &(i + 1))?;
                            match keep {
                                true => Ok(()),
                                false => Err(TestErr::Abort),
                            }
                        });
                        match (keep, r) {
                            (true, Ok(())) | (false, Err(TestErr::Abort)) => {}
                            (_, Err(TestErr::Pool(e))) if retryable(&e) => {}
                            (_, r) => panic!("{v:?}-{p:?}: creator {t}: {r:?}"),
                        }
                    }
                });
            }
            let (pool, tx_read) = (&pool, tx_done.clone());
            s.spawn(move || {
                let _ended = Ended(tx_read);
                for _ in 0..per * 4 {
                    let roots = pool
                        .roots()
                        .unwrap_or_else(|e| panic!("{v:?}-{p:?}: roots: {e:?}"));
                    for r in &roots {
                        let i: u64 = r.name.rsplit('-').next().unwrap().parse().unwrap();
                        assert!(
                            i % 3 != 2,
                            "{v:?}-{p:?}: roots() names {}, rolled back",
                            r.name
                        );
                    }
                    if let Some(r) = roots.last() {
                        let got = pool.root_named::<u64>(&r.name);
                        assert!(
                            matches!(got, Ok(Some(x)) if x.offset() == r.offset),
                            "{v:?}-{p:?}: root_named({}): {got:?}",
                            r.name
                        );
                    }
                    if let Err(e) = pool.root::<[u64; 4]>() {
                        panic!("{v:?}-{p:?}: root: {e:?}");
                    }
                }
            });
            drop(tx_done);
            wait_ended(&rx_done, creators + 1, &format!("{v:?}-{p:?}"));
        });
        let n = pool.roots().unwrap().len() as u64;
        pool.close().unwrap();
        let pool = Pool::open(&path, LAYOUT, &OpenOptions::default()).unwrap();
        assert_eq!(pool.roots().unwrap().len() as u64, n);
        let report = inspect::check_pool(&pool);
        assert!(report.is_ok(), "{v:?}-{p:?}: {:?}", report.problems);
    }
}

/// The pool's other calls made inside a transaction's closure, while
/// other threads commit and back up: `checkpoint`, `sync`, `grow`, the
/// statistics and `roots` work there; `backup_to`, `read_isolated`, an
/// atomic write and a transaction of the same pool are typed refusals
/// that leave the transaction able to commit; and two backups to one
/// path at once give one copy and one `AlreadyExists`.
#[test]
fn admin_calls_inside_transactions_beside_writers() {
    quiet_planned_panics();
    for (v, p) in configs() {
        let name = format!("{v:?}-{p:?}");
        let dir = tempdir();
        let path = dir.path().join("inside.pool");
        let cfg = PoolConfig::default().log(v).policy(p).max_size(8 << 20);
        let pool = Pool::create(&path, LAYOUT, 4 << 20, &cfg).unwrap();
        let root = setup(&pool);
        let counts = Counts {
            started: Default::default(),
            acked: Default::default(),
            ntas_started: Default::default(),
            ntas_done: Default::default(),
        };
        let (tx_done, rx_done) = mpsc::channel();
        let (dir, name) = (dir.path(), name.as_str());
        let copies = std::thread::scope(|s| {
            for t in 1..WRITERS {
                let (pool, counts, tx_done) = (&pool, &counts, tx_done.clone());
                s.spawn(move || {
                    let _ended = Ended(tx_done);
                    writer(pool, root, t, 0x1de + t as u64, counts)
                });
            }
            let (pool, counts, ended) = (&pool, &counts, tx_done.clone());
            s.spawn(move || {
                let _ended = Ended(ended);
                let rec_p = root.records[0];
                for i in 0..txs() {
                    counts.started[0].fetch_add(1, Ordering::SeqCst);
                    let copy = dir.join(format!("inside-{i}.pool"));
                    pool.transaction(|tx| {
                        tx.lock(rec_p)?;
                        let mut rec = tx.read(rec_p)?;
                        let d = rec.done;
                        rec.mine[d as usize % K] = d + 1;
                        rec.done = d + 1;
                        let note = tx.alloc::<u64>()?;
                        tx.write(note, &(d + 1))?;
                        if !rec.note.is_null() {
                            tx.free(rec.note)?;
                        }
                        rec.note = note;
                        tx.write(rec_p, &rec)?;
                        match i % 8 {
                            0 => pool.checkpoint()?,
                            1 => pool.sync()?,
                            2 => match pool.grow(256 << 10) {
                                Ok(_) | Err(Error::OutOfMemory { .. }) => {}
                                Err(e) => return Err(e),
                            },
                            3 => {
                                let _ = (pool.counters(), pool.log_stats(), pool.alloc_stats());
                                pool.roots()?;
                                assert!(pool.root::<Root>()?.is_some());
                            }
                            4 => {
                                // (It would see this transaction's stores
                                // under the undo policies, not under redo.)
                                let r = pool.read_isolated(rec_p.offset(), |r| r.read(rec_p));
                                assert!(
                                    matches!(r, Err(Error::NestedTransaction)),
                                    "{name}: {:?}",
                                    r.map(|_| ())
                                );
                            }
                            5 => {
                                let e = pool.backup_to(&copy).unwrap_err();
                                assert!(matches!(e, Error::TxMisuse(_)), "{name}: {e:?}");
                                assert!(!copy.exists(), "{name}: a refused backup left a file");
                            }
                            6 => {
                                let e = pool.atomic_write(root.accounts[0], &1).unwrap_err();
                                assert!(matches!(e, Error::NestedTransaction), "{name}: {e:?}");
                            }
                            _ => {
                                let e = pool.transaction(|_| Ok::<_, Error>(())).unwrap_err();
                                assert!(matches!(e, Error::NestedTransaction), "{name}: {e:?}");
                            }
                        }
                        Ok::<_, Error>(())
                    })
                    .unwrap_or_else(|e| panic!("{name}: transaction {i}: {e:?}"));
                    counts.acked[0].fetch_add(1, Ordering::SeqCst);
                }
            });
            // Two backups to each path at once: one copy, one refusal.
            let (pool, ended) = (pool, tx_done.clone());
            let copies = s.spawn(move || {
                let _ended = Ended(ended);
                let mut copies = Vec::new();
                for i in 0..2 {
                    let copy = dir.join(format!("twice-{i}.pool"));
                    let r = std::thread::scope(|s2| {
                        let c = &copy;
                        let a = s2.spawn(move || pool.backup_to(c));
                        let b = pool.backup_to(&copy);
                        [a.join().unwrap(), b]
                    });
                    let ok = r.iter().filter(|r| r.is_ok()).count();
                    assert_eq!(ok, 1, "{v:?}-{p:?}: two backups to one path: {r:?}");
                    for r in r.into_iter().filter_map(Result::err) {
                        assert!(
                            matches!(&r, Error::Io { source, .. }
                                if source.kind() == std::io::ErrorKind::AlreadyExists),
                            "{v:?}-{p:?}: the second backup to one path: {r:?}"
                        );
                    }
                    copies.push(copy);
                }
                copies
            });
            drop(tx_done);
            wait_ended(&rx_done, WRITERS + 1, name);
            copies.join().unwrap()
        });
        for copy in copies {
            let c = Pool::open(&copy, LAYOUT, &OpenOptions::default()).unwrap();
            check_state(&c, &format!("{name}: {}", copy.display()));
        }
        let acked = Counts::snapshot(&counts.acked);
        pool.close().unwrap();
        let pool = Pool::open(&path, LAYOUT, &OpenOptions::default()).unwrap();
        assert_eq!(check_state(&pool, name), acked, "{name}: the reopened pool");
    }
}

/// `backup_to` inside `read_isolated`'s read, under the key's lock taken
/// shared (a writer held the key during its first run), while another
/// thread's transaction waits for that key: the backup waits for that
/// transaction to end, and it for the reader's lock. It is refused as a
/// misuse (as inside a transaction), not a wait until the writer's lock
/// timeout (for ever under `Duration::MAX`) that fails the writer.
#[test]
fn a_backup_inside_an_isolated_read_is_refused_not_a_wait_for_itself() {
    let dir = tempdir();
    let pool = Pool::create(
        dir.path().join("read.pool"),
        LAYOUT,
        4 << 20,
        &PoolConfig::default(),
    )
    .unwrap();
    let key: PPtr<u64> = pool.transaction(|tx| tx.root()).unwrap();
    let copy = dir.path().join("copy.pool");
    let (to_w2, w2_go) = mpsc::channel::<()>();
    let (w2_holds, holds) = mpsc::channel::<()>();
    let (to_w3, w3_go) = mpsc::channel::<()>();
    let (w3_in, inside) = mpsc::channel::<()>();
    let (tx_done, rx_done) = mpsc::channel();
    let (pool, copy_at) = (&pool, copy.as_path());
    let (read, w3) = std::thread::scope(|s| {
        let ended = tx_done.clone();
        s.spawn(move || {
            let _ended = Ended(ended);
            let _ = w2_go.recv();
            pool.transaction(|tx| {
                tx.lock(key)?;
                let _ = w2_holds.send(());
                tx.write(key, &2)
            })
            .unwrap();
        });
        let ended = tx_done.clone();
        let w3 = s.spawn(move || {
            let _ended = Ended(ended);
            let _ = w3_go.recv();
            pool.transaction(|tx| {
                let _ = w3_in.send(());
                tx.lock(key)?;
                tx.write(key, &3)
            })
        });
        let ended = tx_done.clone();
        let read = s.spawn(move || {
            let _ended = Ended(ended);
            let mut runs = 0;
            pool.read_isolated(key.offset(), |_| {
                runs += 1;
                if runs == 1 {
                    // A writer takes the key meanwhile: this run does not count.
                    to_w2.send(()).unwrap();
                    holds.recv().unwrap();
                    return Ok(());
                }
                // Under the key's lock, shared: a transaction waits for it.
                to_w3.send(()).unwrap();
                inside.recv().unwrap();
                pool.backup_to(copy_at)
            })
        });
        drop(tx_done);
        wait_ended(&rx_done, 3, "backup inside a read");
        (read.join().unwrap(), w3.join().unwrap())
    });
    assert!(matches!(read, Err(Error::TxMisuse(_))), "{read:?}");
    assert!(!copy.exists());
    w3.unwrap();
    assert_eq!(pool.read(key).unwrap(), 3);
}

/// `checkpoint` and `grow` inside `read_isolated`'s read under the key's
/// lock (taken shared), while a transaction waits for that key and a
/// backup waits for that transaction: the calls take the transaction gate
/// for reading, and a fair read lock would queue behind the waiting
/// backup (which waits for the transaction, which waits for the reader):
/// they go past it, and all three finish.
#[test]
fn checkpoint_and_grow_inside_an_isolated_read_do_not_queue_behind_a_backup() {
    for policy in [Policy::NoForce, Policy::Redo] {
        let dir = tempdir();
        let cfg = PoolConfig::default().policy(policy).max_size(8 << 20);
        let pool = Pool::create(dir.path().join("read.pool"), LAYOUT, 4 << 20, &cfg).unwrap();
        // A lock timeout that never ends: a wait for itself is a hang
        // (the watchdog names it), not a slow LockTimeout.
        pool.set_lock_timeout(std::time::Duration::MAX);
        let key: PPtr<u64> = pool.transaction(|tx| tx.root()).unwrap();
        let copy = dir.path().join("copy.pool");
        let (to_w2, w2_go) = mpsc::channel::<()>();
        let (w2_holds, holds) = mpsc::channel::<()>();
        let (to_w3, w3_go) = mpsc::channel::<()>();
        let (w3_in, inside) = mpsc::channel::<()>();
        let (to_b, b_go) = mpsc::channel::<()>();
        let (tx_done, rx_done) = mpsc::channel();
        let (pool, copy_at) = (&pool, copy.as_path());
        std::thread::scope(|s| {
            let ended = tx_done.clone();
            s.spawn(move || {
                let _ended = Ended(ended);
                let _ = w2_go.recv();
                pool.transaction(|tx| {
                    tx.lock(key)?;
                    let _ = w2_holds.send(());
                    tx.write(key, &2)
                })
                .unwrap();
            });
            let ended = tx_done.clone();
            s.spawn(move || {
                let _ended = Ended(ended);
                let _ = w3_go.recv();
                pool.transaction(|tx| {
                    let _ = w3_in.send(());
                    tx.lock(key)?;
                    tx.write(key, &3)
                })
                .unwrap();
            });
            let ended = tx_done.clone();
            s.spawn(move || {
                let _ended = Ended(ended);
                let _ = b_go.recv();
                pool.backup_to(copy_at).unwrap();
            });
            let ended = tx_done.clone();
            s.spawn(move || {
                let _ended = Ended(ended);
                let mut runs = 0;
                pool.read_isolated(key.offset(), |_| {
                    runs += 1;
                    if runs == 1 {
                        to_w2.send(()).unwrap();
                        holds.recv().unwrap();
                        return Ok(());
                    }
                    to_w3.send(()).unwrap();
                    inside.recv().unwrap();
                    to_b.send(()).unwrap();
                    // The backup queues for the gate within these calls.
                    for i in 0..200 {
                        match i % 2 {
                            0 => pool.checkpoint()?,
                            _ => match pool.grow(0) {
                                Ok(_) | Err(Error::OutOfMemory { .. }) => {}
                                Err(e) => return Err(e),
                            },
                        }
                        std::thread::yield_now();
                    }
                    Ok::<_, Error>(())
                })
                .unwrap();
            });
            drop(tx_done);
            wait_ended(&rx_done, 4, &format!("{policy:?}"));
        });
        assert_eq!(pool.read(key).unwrap(), 3);
        let c = Pool::open(&copy, LAYOUT, &OpenOptions::default()).unwrap();
        assert!(c.read(key).unwrap() == 2 || c.read(key).unwrap() == 3);
    }
}

/// `grow_to` from several threads at once, beside transactions whose
/// allocations grow the heap themselves: each call returns `Ok` with the
/// pool at least as large as it asked (never `OutOfMemory` for a size
/// within the maximum because another call grew the heap meanwhile), and
/// never past the maximum.
#[test]
fn concurrent_grow_to_calls_reach_their_sizes() {
    const MAX: u64 = 24 << 20;
    for policy in [Policy::Redo, Policy::Force] {
        let dir = tempdir();
        let cfg = PoolConfig::default().policy(policy).max_size(MAX);
        let pool = Pool::create(dir.path().join("grow.pool"), LAYOUT, 4 << 20, &cfg).unwrap();
        // Racing calls asking for one size near the maximum: each sees
        // where the heap ends, and must not ask for that growth again.
        for _ in 0..128 {
            let dir = tempdir();
            let cfg = PoolConfig::default().policy(policy).max_size(MAX);
            let pool = Pool::create(dir.path().join("g.pool"), LAYOUT, 4 << 20, &cfg).unwrap();
            let want = MAX - (1 << 20);
            let go = std::sync::Barrier::new(3);
            std::thread::scope(|s| {
                for _ in 0..3 {
                    s.spawn(|| {
                        go.wait();
                        let got = pool.grow_to(want);
                        let got = got.unwrap_or_else(|e| panic!("{policy:?}: grow_to: {e:?}"));
                        assert!(got >= want && got <= MAX, "{policy:?}: {got}");
                    });
                }
            });
        }
        let (tx_done, rx_done) = mpsc::channel();
        std::thread::scope(|s| {
            for t in 0..3u64 {
                let (pool, ended) = (&pool, tx_done.clone());
                s.spawn(move || {
                    let _ended = Ended(ended);
                    for i in 0..16u64 {
                        // Up to a MiB short of the maximum (where the heap's
                        // last whole chunk ends), in steps that cross.
                        let want = (4 << 20) + (i * 3 + t + 1) * (MAX - (5 << 20)) / 48;
                        let got = pool.grow_to(want);
                        let got =
                            got.unwrap_or_else(|e| panic!("{policy:?}: grow_to({want}): {e:?}"));
                        assert!(
                            got >= want.min(MAX) && got <= MAX,
                            "{policy:?}: {got} for {want}"
                        );
                    }
                });
            }
            let (pool, ended) = (&pool, tx_done.clone());
            s.spawn(move || {
                let _ended = Ended(ended);
                for _ in 0..8 {
                    pool.transaction(|tx| {
                        let b = tx.alloc_bytes(512 << 10)?;
                        tx.free(PPtr::<u8>::from_offset(b))
                    })
                    .unwrap();
                }
            });
            drop(tx_done);
            wait_ended(&rx_done, 4, &format!("{policy:?}"));
        });
        assert!(pool.size() >= MAX - (1 << 20));
        assert_eq!(pool.grow_to(MAX).unwrap(), pool.size());
        let report = inspect::check_pool(&pool);
        assert!(report.is_ok(), "{policy:?}: {:?}", report.problems);
    }
}

/// A pool shared by `Arc`, the test's own handle dropped at once: the
/// last writer to end drops it (one of them while unwinding a panic of
/// its own, outside any transaction), and the pool reopens with every
/// acknowledged commit, checking clean.
#[test]
fn the_last_arc_dropped_by_a_writer_closes_the_pool() {
    quiet_planned_panics();
    for (v, p) in configs() {
        let name = format!("{v:?}-{p:?}");
        let dir = tempdir();
        let path = dir.path().join("arc.pool");
        let cfg = PoolConfig::default().log(v).policy(p);
        let pool = std::sync::Arc::new(Pool::create(&path, LAYOUT, 4 << 20, &cfg).unwrap());
        let root = setup(&pool);
        let counts = std::sync::Arc::new(Counts {
            started: Default::default(),
            acked: Default::default(),
            ntas_started: Default::default(),
            ntas_done: Default::default(),
        });
        let (tx_done, rx_done) = mpsc::channel();
        let handles: Vec<_> = (0..WRITERS)
            .map(|t| {
                let (pool, counts, ended) = (pool.clone(), counts.clone(), tx_done.clone());
                std::thread::spawn(move || {
                    let _ended = Ended(ended);
                    writer(&pool, root, t, 0xa4c + t as u64, &counts);
                    if t == 0 {
                        drop(counts);
                        panic!("admin-probe: a planned panic holding the pool");
                    }
                })
            })
            .collect();
        drop(pool);
        drop(tx_done);
        wait_ended(&rx_done, WRITERS, &name);
        for (t, h) in handles.into_iter().enumerate() {
            assert_eq!(h.join().is_err(), t == 0, "{name}: writer {t}");
        }
        let acked = Counts::snapshot(&counts.acked);
        let report = inspect::check(&path).unwrap();
        assert!(report.is_ok(), "{name}: {:?}", report.problems);
        let pool = Pool::open(&path, LAYOUT, &OpenOptions::default()).unwrap();
        assert_eq!(check_state(&pool, &name), acked, "{name}");
        pool.close().unwrap();
    }
}
