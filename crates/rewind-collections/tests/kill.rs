//! Process-kill torture with a B+-tree: a child process runs seeded
//! transactions of inserts and removals on a tree in a pool file and is
//! SIGKILLed at a seeded point (its n-th fence, `persist::kill_at_fence`:
//! the engine's ordering points, so the first few fall in `Pool::open`,
//! i.e. in recovery from the previous kill, the rest inside commits,
//! rollbacks and node splits). Kill points are a function of the seed,
//! never of timing. After each kill the parent reopens the pool (recovery),
//! and checks that the tree equals the model of exactly the transactions
//! the child reported committed, plus possibly the one in flight applied
//! whole; that its invariants hold; and that the pool's allocated blocks
//! are exactly the root's and the tree's. Every log variant × policy.
//!
//! The child is this test binary again, running only `kill_child` (a no-op
//! unless `REWIND_KILL_POOL` is set). Transaction `id` is a pure function
//! of `(seed, id)` ([`plan`]); the child's stdout protocol:
//!
//! ```text
//! ready <id>       pool opened (recovery done); the next transaction is <id>
//! begin <id>       about to run transaction <id>
//! committed <id>   its commit returned
//! aborted <id>     it returned Err on purpose and was rolled back
//! ```
//!
//! A committed transaction stores `next = id + 1` in the root with its
//! tree changes, so the recovered `next` says which transactions are in.
//!
//! Knob: `REWIND_KILL_CYCLES` (kills per configuration, default 16).

mod common;

use std::collections::BTreeMap as StdBTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{OpenOptions, PPtr, Pod, Pool, PoolConfig, Zeroable};
use rewind_collections::{BTreeMap, Error};

use common::{configs, name};

const LAYOUT: &str = "kill";
const POOL_SIZE: u64 = 8 << 20;
const ENV_POOL: &str = "REWIND_KILL_POOL";
const ENV_SEED: &str = "REWIND_KILL_SEED";
const ENV_FENCE: &str = "REWIND_KILL_FENCE";
/// A child that is never killed stops after this many transactions.
const CHILD_TXS: u64 = 400;
/// Keys drawn from `0..KEYS`: fan-out 4, so the tree splits often.
const KEYS: u64 = 300;

type Tree = BTreeMap<u64, u64>;

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct Root {
    next: u64,
    tree: PPtr<Tree>,
}

/// Transaction `id`'s operations: `Some(v)` inserts, `None` removes.
struct Plan {
    ops: Vec<(u64, Option<u64>)>,
    abort: bool,
}

fn plan(seed: u64, id: u64) -> Plan {
    let mut rng = SmallRng::seed_from_u64(seed ^ id.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let n = 1 + rng.gen_range(0..6);
    let ops = (0..n)
        .map(|_| {
            let k = rng.gen_range(0..KEYS);
            let v = rng.gen::<u64>();
            (k, (rng.gen_range(0..4) != 0).then_some(v))
        })
        .collect();
    Plan {
        ops,
        abort: rng.gen_range(0..5) == 0,
    }
}

fn say(out: &mut impl Write, word: &str, id: u64) {
    if writeln!(out, "{word} {id}")
        .and_then(|_| out.flush())
        .is_err()
    {
        std::process::exit(0);
    }
}

/// The child: runs transactions until killed. A no-op in a normal test run.
#[test]
fn kill_child() {
    let Some(path) = std::env::var_os(ENV_POOL) else {
        return;
    };
    let seed: u64 = std::env::var(ENV_SEED).unwrap().parse().unwrap();
    let fence: u64 = std::env::var(ENV_FENCE).unwrap().parse().unwrap();
    rewind::persist::kill_at_fence(fence);
    let mut out = std::io::stdout().lock();
    // A newline first: the harness has printed `test kill_child ... `.
    writeln!(out).unwrap();
    let pool = Pool::open(Path::new(&path), LAYOUT, &OpenOptions::default())
        .unwrap_or_else(|e| panic!("child: open: {e}"));
    let rp = pool.root::<Root>().unwrap().expect("root");
    let root = pool.read(rp).unwrap();
    let tree = Tree::from_ptr(root.tree);
    let first = root.next;
    say(&mut out, "ready", first);
    for id in first..first + CHILD_TXS {
        let p = plan(seed, id);
        say(&mut out, "begin", id);
        let r = pool.transaction(|tx| {
            for &(k, v) in &p.ops {
                match v {
                    Some(v) => tree.insert(tx, k, v)?,
                    None => tree.remove(tx, &k)?,
                };
            }
            tx.write(
                rp,
                &Root {
                    next: id + 1,
                    ..root
                },
            )?;
            if p.abort {
                return Err(Error::from(rewind::Error::Aborted));
            }
            Ok(())
        });
        match r {
            Ok(()) => say(&mut out, "committed", id),
            Err(Error::Pool(rewind::Error::Aborted)) if p.abort => say(&mut out, "aborted", id),
            Err(e) => panic!("child: transaction {id} failed: {e}"),
        }
    }
}

/// What a child run showed: the `next` it started at, the last committed
/// id, and the transaction in flight when it died.
#[derive(Debug)]
struct Run {
    ready: Option<u64>,
    committed: Option<u64>,
    in_flight: Option<u64>,
    killed: bool,
}

fn run_child(path: &Path, seed: u64, fence: u64) -> Run {
    let exe = std::env::current_exe().expect("current_exe");
    let mut child = Command::new(exe)
        .args(["--exact", "kill_child", "--nocapture", "--test-threads=1"])
        .env(ENV_POOL, path)
        .env(ENV_SEED, seed.to_string())
        .env(ENV_FENCE, fence.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("piped");
    let mut run = Run {
        ready: None,
        committed: None,
        in_flight: None,
        killed: false,
    };
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let Some((word, n)) = line.split_once(' ') else {
            continue;
        };
        let Ok(id) = n.trim().parse::<u64>() else {
            continue;
        };
        match word {
            "ready" => run.ready = Some(id),
            "begin" => {
                assert_eq!(run.in_flight, None, "begin {id} inside a transaction");
                run.in_flight = Some(id);
            }
            "committed" | "aborted" => {
                assert_eq!(run.in_flight, Some(id), "{line} without its begin");
                run.in_flight = None;
                if word == "committed" {
                    run.committed = Some(id);
                }
            }
            _ => {}
        }
    }
    let status = child.wait().expect("wait");
    run.killed = status.signal() == Some(9);
    assert!(
        run.killed || status.success(),
        "child failed (fence {fence}): {status}; {run:?}"
    );
    run
}

/// The tree after the transactions before `next` (the committed ones).
fn model(seed: u64, next: u64) -> StdBTreeMap<u64, u64> {
    let mut m = StdBTreeMap::new();
    for id in 0..next {
        let p = plan(seed, id);
        if p.abort {
            continue;
        }
        for (k, v) in p.ops {
            match v {
                Some(v) => m.insert(k, v),
                None => m.remove(&k),
            };
        }
    }
    m
}

/// Reopens (recovers) the pool; checks the tree against the model and the
/// run; returns the recovered `next`.
fn verify(path: &Path, seed: u64, known: u64, run: &Run, cfg: &PoolConfig) -> u64 {
    let pool = Pool::open(path, LAYOUT, &OpenOptions::default())
        .unwrap_or_else(|e| panic!("{}: recovery failed: {e}", name(cfg)));
    let rp = pool.root::<Root>().unwrap().expect("root");
    let root = pool.read(rp).unwrap();
    // Committed transactions are in; the one in flight may be, whole.
    let mut allowed = vec![run.committed.map_or(known, |c| c + 1)];
    if let Some(id) = run.in_flight {
        if !plan(seed, id).abort {
            allowed.push(id + 1);
        }
    }
    assert!(
        allowed.contains(&root.next),
        "{}: recovered next {} not in {allowed:?} ({run:?})",
        name(cfg),
        root.next
    );
    let tree = Tree::from_ptr(root.tree);
    tree.check_invariants(&pool)
        .unwrap_or_else(|e| panic!("{}: {e}", name(cfg)));
    let got: StdBTreeMap<u64, u64> = tree.iter(&pool).unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!(got, model(seed, root.next), "{}: {run:?}", name(cfg));
    let mut owned = tree.blocks(&pool).unwrap();
    owned.push(rp.offset());
    owned.sort_unstable();
    let allocated: Vec<u64> = rewind::alloc::allocated_blocks(pool.domain(), pool.layout())
        .unwrap()
        .into_iter()
        .map(|(off, _)| off)
        .collect();
    assert_eq!(allocated, owned, "{}: leaked or lost blocks", name(cfg));
    root.next
}

fn pool_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

#[test]
fn btree_survives_kills() {
    let cycles: u64 = std::env::var("REWIND_KILL_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16);
    let dir = tempfile::tempdir_in(pool_dir()).unwrap();
    let (mut kills, mut in_open, mut in_flight_applied) = (0, 0, 0);
    for (c, cfg) in configs().iter().enumerate() {
        let seed = 0x6b69_6c6c ^ (c as u64) << 32;
        let path = dir.path().join(format!("kill{c}.pool"));
        let pool = Pool::create(&path, LAYOUT, POOL_SIZE, cfg).unwrap();
        pool.transaction(|tx| {
            let tree = Tree::create_with_fanout(tx, 4)?;
            let rp = tx.root::<Root>()?;
            tx.write(
                rp,
                &Root {
                    next: 0,
                    tree: tree.as_ptr(),
                },
            )?;
            Ok::<_, Error>(())
        })
        .unwrap();
        pool.close().unwrap();
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut known = 0;
        for _ in 0..cycles {
            // One kill in six among the first fences: inside recovery.
            let fence = match rng.gen_range(0..6) {
                0 => 1 + rng.gen_range(0..3),
                _ => 4 + rng.gen_range(0..1500),
            };
            let run = run_child(&path, seed, fence);
            match run.ready {
                Some(r) => assert_eq!(r, known, "{}: child started at {r}", name(cfg)),
                None => in_open += 1,
            }
            let next = verify(&path, seed, known, &run, cfg);
            if run.in_flight.is_some_and(|id| next == id + 1) {
                in_flight_applied += 1;
            }
            kills += u64::from(run.killed);
            known = next;
        }
        assert!(known > 0, "{}: no transaction ever committed", name(cfg));
    }
    eprintln!("{kills} kills ({in_open} during open/recovery, {in_flight_applied} with the in-flight transaction applied)");
    assert!(kills >= cycles * 6, "only {kills} kills");
}
