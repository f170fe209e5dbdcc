//! Process-kill torture with many threads: a child process runs 4 or 8
//! threads of transactions on one pool file (the `Pmem` backend, the
//! default policy: commits through the commit ring, whose latch is not held
//! across their fences, so groups are copied and fenced at once and may
//! become durable out of order) and is SIGKILLed at a seeded fence
//! (`persist::kill_at_fence`; with several threads the count is not exact,
//! so the kill falls at a fence near it, never at a random instant). After
//! each kill the parent reopens the pool (recovery) and checks it against
//! an oracle of exactly the acknowledged transactions:
//!
//! - thread `t`'s counter `done[t]` is one past its last acknowledged
//!   transaction, or one more (its transaction in flight, applied whole);
//! - its slots hold exactly what its transactions `0..done[t]` wrote (a
//!   pure function of the seed), never part of a transaction;
//! - the shared counter, which every transaction increments under
//!   `tx.lock` (a lock-protected read-modify-write across threads), is the
//!   sum of the `done[t]`: no increment lost, none counted twice.
//!
//! A process kill leaves every store made (the page cache keeps them), so
//! what this proves is the protocol's bookkeeping under many threads: the
//! acknowledged set, atomicity, the ring's reuse and recovery of groups
//! written out of order, in four commit lanes merged at recovery. The order in which groups become durable (the
//! applied watermark, `ring.order`) is the crash explorer's to prove: it
//! builds the images a power failure could leave (`crashtest`, two
//! threads).
//!
//! The child is this test binary again, running only `threads_child`, and
//! reports `c T ID` when transaction `ID` of thread `T` has returned. Each
//! child resumes every thread at its `done[t]`.

use std::io::{BufRead, BufReader, Write};
use std::mem::offset_of;
use std::path::Path;
use std::sync::Mutex;

mod common;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{OpenOptions, PPtr, Pod, Pool, PoolConfig, Zeroable};

const LAYOUT: &str = "torture-threads";
const POOL_SIZE: u64 = 4 << 20;
/// Most threads of a child.
const THREADS: usize = 8;
/// Commit lanes of the pool.
const LANES: u64 = 4;
/// Slots of each thread.
const SLOTS: usize = 32;
const ENV_POOL: &str = "REWIND_MT_POOL";
const ENV_SEED: &str = "REWIND_MT_SEED";
const ENV_THREADS: &str = "REWIND_MT_THREADS";
const ENV_KILL: &str = "REWIND_MT_KILL";
/// Kills (child runs) per test run.
const CYCLES: u64 = 100;
/// A child's thread never runs more transactions than this (a count, far
/// past any kill point).
const CHILD_MAX_TXS: u64 = 200_000;

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct Root {
    shared: u64,
    done: [u64; THREADS],
    slots: [[u64; SLOTS]; THREADS],
}

fn word(root: PPtr<Root>, at: usize) -> PPtr<u64> {
    PPtr::from_offset(root.offset() + at as u64)
}

fn shared(root: PPtr<Root>) -> PPtr<u64> {
    word(root, offset_of!(Root, shared))
}

fn done(root: PPtr<Root>, t: usize) -> PPtr<u64> {
    word(root, offset_of!(Root, done) + 8 * t)
}

fn slot(root: PPtr<Root>, t: usize, i: usize) -> PPtr<u64> {
    word(root, offset_of!(Root, slots) + 8 * (t * SLOTS + i))
}

/// Transaction `id` of thread `t`: the slots it writes and their values
/// (1 to 4 of them, adjacent ones coalescing into one entry).
fn plan(seed: u64, t: usize, id: u64) -> Vec<(usize, u64)> {
    let mut rng = SmallRng::seed_from_u64(seed ^ (t as u64) << 48 ^ id.wrapping_mul(0x9e37_79b9));
    let n = rng.gen_range(1..=4);
    (0..n)
        .map(|_| {
            (
                rng.gen_range(0..SLOTS),
                (t as u64) << 56 | id << 8 | rng.gen::<u8>() as u64,
            )
        })
        .collect()
}

/// Thread `t`'s slots after its transactions `0..n`.
fn model(seed: u64, t: usize, n: u64) -> [u64; SLOTS] {
    let mut s = [0; SLOTS];
    for id in 0..n {
        for (i, v) in plan(seed, t, id) {
            s[i] = v;
        }
    }
    s
}

#[test]
fn threads_child() {
    let Some(path) = std::env::var_os(ENV_POOL) else {
        return;
    };
    let env = |k: &str| -> u64 { std::env::var(k).expect(k).parse().expect(k) };
    let (seed, threads, kill) = (env(ENV_SEED), env(ENV_THREADS) as usize, env(ENV_KILL));
    let pool = Pool::open(Path::new(&path), LAYOUT, &OpenOptions::default())
        .unwrap_or_else(|e| panic!("child: open: {e}"));
    let root = pool.root::<Root>().expect("root").expect("root");
    let out = Mutex::new(std::io::stdout());
    // A newline first: the harness has printed `test threads_child ... `.
    writeln!(out.lock().unwrap(), "\nready").unwrap();
    rewind::persist::kill_at_fence(kill);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (pool, out) = (&pool, &out);
            s.spawn(move || {
                let first = pool.read(done(root, t)).expect("done");
                for id in first..first + CHILD_MAX_TXS {
                    pool.transaction(|tx| {
                        tx.lock(shared(root))?;
                        let n = tx.read(shared(root))?;
                        tx.write(shared(root), &(n + 1))?;
                        for (i, v) in plan(seed, t, id) {
                            tx.write(slot(root, t, i), &v)?;
                        }
                        tx.write(done(root, t), &(id + 1))
                    })
                    .unwrap_or_else(|e| panic!("child: thread {t} transaction {id}: {e}"));
                    writeln!(out.lock().unwrap(), "c {t} {id}").unwrap();
                }
            });
        }
    });
}

/// Runs a child; returns, per thread, the last transaction it reported
/// as returned.
fn run_child(path: &Path, seed: u64, threads: usize, kill: u64) -> [Option<u64>; THREADS] {
    let mut child = common::spawn_test_child(
        "threads_child",
        &[
            (ENV_POOL, path.into()),
            (ENV_SEED, seed.to_string().into()),
            (ENV_THREADS, threads.to_string().into()),
            (ENV_KILL, kill.to_string().into()),
        ],
    );
    let mut acked = [None; THREADS];
    for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
        let Ok(line) = line else { break };
        let mut w = line.split_whitespace();
        if w.next() != Some("c") {
            continue;
        }
        let t: usize = w.next().and_then(|x| x.parse().ok()).expect("thread");
        let id: u64 = w.next().and_then(|x| x.parse().ok()).expect("id");
        assert!(
            acked[t].is_none_or(|a| id == a + 1),
            "thread {t}: {id} after {acked:?}"
        );
        acked[t] = Some(id);
    }
    let status = child.wait().expect("wait");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(9),
        "child not killed at fence {kill}: {status}"
    );
    acked
}

#[test]
fn many_threads_lose_no_acknowledged_transaction_and_apply_none_in_part() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mt.pool");
    // Four commit lanes: a lane per thread with 4 threads, two threads a
    // lane with 8 (recovery merges the lanes' groups by global commit
    // number; the shared counter's increments cross lanes).
    let cfg = PoolConfig::default().lanes(LANES);
    let pool = Pool::create(&path, LAYOUT, POOL_SIZE, &cfg).unwrap();
    assert_eq!(pool.layout().lanes, LANES);
    pool.transaction(|tx| tx.root::<Root>().map(|_| ()))
        .unwrap();
    drop(pool);
    let seed = 0x17;
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut start = [0u64; THREADS];
    let (mut in_flight_applied, mut acked_total) = (0, 0);
    for cycle in 0..CYCLES {
        let threads = if cycle % 2 == 0 { 4 } else { 8 };
        let kill = rng.gen_range(20..600);
        let acked = run_child(&path, seed, threads, kill);
        let pool = Pool::open(&path, LAYOUT, &OpenOptions::default())
            .unwrap_or_else(|e| panic!("cycle {cycle}: reopen (recovery): {e}"));
        let root = pool.root::<Root>().unwrap().expect("root");
        let state: Root = pool.read(root).unwrap();
        for t in 0..THREADS {
            let want = acked[t].map_or(start[t], |a| a + 1);
            let got = state.done[t];
            assert!(
                got == want || (t < threads && got == want + 1),
                "cycle {cycle} (kill at fence {kill}), thread {t}: done {got}, acknowledged up to {want}"
            );
            in_flight_applied += got - want;
            acked_total += want - start[t];
            assert_eq!(
                state.slots[t],
                model(seed, t, got),
                "cycle {cycle}, thread {t}: slots after {got} transactions"
            );
            start[t] = got;
        }
        let sum: u64 = state.done.iter().sum();
        assert_eq!(state.shared, sum, "cycle {cycle}: shared counter");
    }
    println!("{CYCLES} kills, {acked_total} acknowledged transactions, {in_flight_applied} in flight applied whole");
    assert!(acked_total > 0, "the children committed nothing");
}
