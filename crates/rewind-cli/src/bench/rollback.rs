//! REWIND Fig. 8: rollback and recovery of the B+-tree.
//!
//! **Rollback** (left): the tree loaded as in `btree`, then one large
//! transaction of N operations, insert/delete pairs (the paper's mix: the
//! tree's size stays put, the log grows), rolled back. Timed: the rollback
//! alone, from the closure's last operation to the rollback's return (for
//! a peer, its abort call: BDB `txn->abort`, LMDB `mdb_txn_abort`, SQLite
//! `ROLLBACK`, redb `abort`, libpmemobj `pmemobj_tx_abort`).
//!
//! **Recovery** (right): N operations in transactions of 200, each
//! committed but the last, inside which the system's files are copied: the
//! crash image a process killed there leaves (stores in the shared mapping
//! are in the file; nothing is in flight). Timed: opening the copy and one
//! lookup (SQLite and redb recover on first use, so the lookup belongs to
//! it), which for rewind is `Pool::open` running analysis, redo and undo.
//! Before each trial rewind pools are checkpointed, so recovery sees the
//! trial's transactions only; the log is sized so no checkpoint runs
//! within a trial. Under redo-async the committed transactions' write-back
//! is waited for before the last transaction (a copy made while the
//! write-back thread stores would mix instants no crash can).
//!
//! Every trial is checked: after a rollback, and in every recovered copy,
//! each key the transaction inserted is absent, each it deleted present,
//! and a sample of the others present. The median round counts. The baselines cannot roll back and do not run.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rewind::{OpenOptions, Pool};

use super::harness::{failed, Ctx, Label, Per, Sample, Scale};
use super::output::Report;
use super::tree::mem::Rewind;
use super::tree::store::{End, Store, TreeStore};
use super::tree::systems::{self, Plan, Subject, LAYOUT};
use super::tree::workload::{value_of, Digest, Model, Op};
#[cfg(feature = "peers")]
use super::tree::TxMem;
use super::tree::{BTree, Engine, MemError};
use crate::error::CliError;

/// Operations per transaction in the recovery runs (the paper's 200).
const TX_OPS: usize = 200;
const SEED: u64 = 0x8b;
/// Present keys sampled by each check.
const SAMPLE: usize = 200;

/// Records loaded, rollback sizes, recovery sizes, rounds.
fn sizes(scale: Scale) -> (usize, Vec<usize>, Vec<usize>, usize) {
    match scale {
        Scale::Tiny => (300, vec![20, 100], vec![400], 1),
        // A fifth of the paper's tree, to keep `bench all --quick` within minutes.
        Scale::Quick => (20_000, vec![1_000, 3_000], vec![1_000, 2_000], 3),
        // The paper's tree; transactions up to 50,000 operations and
        // recovery after up to 250 transactions (the paper: 400 to 4,000),
        // as every configuration's pool must hold them in its log at once.
        Scale::Full => (
            100_000,
            vec![1_000, 10_000, 50_000],
            vec![20_000, 50_000],
            3,
        ),
    }
}

/// Pool and log room for the largest transaction (up to 3 KiB of log per
/// operation under Simple, with its reserved compensation records) and, in the
/// recovery runs, every transaction since the checkpoint. Pools are
/// written whole when created: the full run's 16 take ~3 GiB of tmpfs.
fn plan(scale: Scale) -> Plan {
    let (_, rb, rc, _) = sizes(scale);
    let ops = rb.into_iter().chain(rc).max().unwrap_or(0) as u64;
    let log = (ops * 3072).max(8 << 20).next_multiple_of(1 << 20);
    Plan {
        // The tree (~7 MB at 100k records) and the allocator's headroom.
        space: scale.pick(16 << 20, 16 << 20, 48 << 20) + log,
        log: Some(log),
        baselines: false,
        auto_checkpoint: false,
    }
}

/// The lookups that check a trial: each key `ops` inserts or deletes, and
/// a sample of the keys present before it. `model` is the state the system
/// must be in: the expected digest follows from it.
fn checks(model: &Model, ops: &[Op]) -> (Vec<Op>, Digest) {
    let mut keys: Vec<u64> = ops.iter().map(|op| op.key()).collect();
    let present = model.keys();
    let step = (present.len() / SAMPLE).max(1);
    keys.extend(present.iter().step_by(step).take(SAMPLE));
    let mut want = Digest::default();
    for &k in &keys {
        let v = model.contains(k).then(|| value_of(k));
        want.get(v.as_ref().map(|v| &v[..]));
    }
    (keys.into_iter().map(Op::Get).collect(), want)
}

fn verify(
    s: &mut dyn Store,
    name: &str,
    gets: &[Op],
    want: Digest,
    what: &str,
) -> Result<(), CliError> {
    let mut d = Digest::default();
    for &op in gets {
        s.apply(op, &mut d)
            .map_err(|e| CliError::Bench(format!("{name}: checking after {what}: {e}")))?;
    }
    if d != want {
        return Err(failed(format!(
            "{name}: after {what}, the keys the transaction touched or a sample of the others are not as before it"
        )));
    }
    Ok(())
}

/// Where the files of `s` are when built in `dir`: Berkeley DB's and
/// LMDB's environments are directories of their own.
fn first_home(dir: &Path, s: &Subject) -> PathBuf {
    match s.system {
        "bdb" | "lmdb" => dir.join(s.system),
        _ => dir.to_path_buf(),
    }
}

/// The files of `s`, in its directory `home`, to copy for a crash image.
fn files(home: &Path, s: &Subject) -> Vec<PathBuf> {
    let f = |n: &str| home.join(n);
    match s.system {
        "rewind" => vec![f(&format!("{}.pool", s.config))],
        "pmdk" => vec![f("pmdk.pool")],
        "sqlite" => vec![f("sqlite.db"), f("sqlite.db-wal"), f("sqlite.db-shm")],
        "redb" => vec![f("redb.db")],
        // Whole environments: every file of their directory.
        "bdb" | "lmdb" => std::fs::read_dir(home)
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// A system's place while its original is closed and its crash image not
/// yet recovered (two handles on one pool's copies cannot be open at once
/// in libpmemobj, which refuses a second pool with the same uuid).
struct Gone;

impl Store for Gone {
    fn apply(&mut self, _: Op, _: &mut Digest) -> Result<(), MemError> {
        Err(MemError::Io(std::io::Error::other("the store is closed")))
    }

    fn batch(&mut self, _: &[Op], _: End<'_>, _: &mut Digest) -> Result<Duration, MemError> {
        Err(MemError::Io(std::io::Error::other("the store is closed")))
    }
}

/// Copies `files` into the fresh directory `image`.
fn copy_all(files: &[PathBuf], image: &Path) -> std::io::Result<()> {
    let _ = std::fs::remove_dir_all(image);
    std::fs::create_dir_all(image)?;
    for f in files {
        if let Some(name) = f.file_name() {
            if f.exists() {
                std::fs::copy(f, image.join(name))?;
            }
        }
    }
    Ok(())
}

/// Opens the crash image of `s` in `image` and makes one lookup of `probe`
/// (timed: that is recovery); returns the time and the recovered store.
fn recover(s: &Subject, image: &Path, probe: u64) -> Result<(Duration, Box<dyn Store>), CliError> {
    let err = |e: MemError| CliError::Bench(format!("recovering {}: {e}", s.name()));
    let mut d = Digest::default();
    let start = Instant::now();
    let mut store: Box<dyn Store> = match s.system {
        "rewind" => {
            let path = image.join(format!("{}.pool", s.config));
            let pool = Pool::open(&path, LAYOUT, &OpenOptions::default())
                .map_err(CliError::rewind(format!("recovering {}", path.display())))?;
            let mut engine = Rewind(Box::new(pool));
            let meta = engine.transaction(|tx| {
                let root = tx.root::<u64>()?;
                Ok(tx.read(root)?)
            });
            let tree = BTree::at(meta.map_err(err)?);
            Box::new(TreeStore { engine, tree })
        }
        #[cfg(feature = "peers")]
        other => peer_open(other, image).map_err(err)?,
        #[cfg(not(feature = "peers"))]
        other => return Err(CliError::Bench(format!("no recovery for {other}"))),
    };
    store.apply(Op::Get(probe), &mut d).map_err(err)?;
    Ok((start.elapsed(), store))
}

#[cfg(feature = "peers")]
fn peer_open(system: &str, image: &Path) -> Result<Box<dyn Store>, MemError> {
    use super::tree::peers::{peer, Pmdk, RedbStore, ShimStore, SqliteStore, BDB_CACHE};
    use rewind_peers::pmdk::PmdkHeap;
    use rewind_peers::shim::Shim;
    Ok(match system {
        "pmdk" => {
            let heap = PmdkHeap::open(&image.join("pmdk.pool"))?;
            let mut engine = Pmdk(heap);
            let root = engine.0.root();
            let tree = BTree::at(engine.transaction(|m| m.read_u64(root))?);
            Box::new(TreeStore { engine, tree })
        }
        "bdb" => {
            Shim::bdb_recover(image, BDB_CACHE)?;
            Box::new(ShimStore::bdb(image)?)
        }
        "lmdb" => Box::new(ShimStore::lmdb(image)?),
        "sqlite" => Box::new(SqliteStore::from_connection(
            rusqlite::Connection::open(image.join("sqlite.db")).map_err(peer("opening SQLite"))?,
        )),
        "redb" => Box::new(RedbStore::<u64>::open(
            redb::Database::create(image.join("redb.db")).map_err(peer("opening redb"))?,
        )),
        other => Err(std::io::Error::other(format!("no recovery for {other}")))?,
    })
}

/// Waits for redo-async's write-back and checkpoints a rewind pool (the
/// trial's recovery then sees its own transactions only); nothing for the
/// others.
fn settle(s: &Subject) -> Result<(), CliError> {
    let err = |e| CliError::Bench(format!("checkpointing {}: {e}", s.name()));
    s.store.sync().map_err(err)?;
    s.store.checkpoint().map_err(err)
}

/// A recovery round's input: the committed transactions, the one left
/// open, and the checks of the state recovery must restore.
struct Recovery {
    done: Vec<Op>,
    open: Vec<Op>,
    gets: Vec<Op>,
    want: Digest,
    probe: u64,
}

pub fn run(ctx: &Ctx, report: &mut Report) -> Result<(), CliError> {
    let (n_load, rb_sizes, rc_sizes, rounds) = sizes(ctx.scale);
    println!(
        "  {n_load} records; rollback of one transaction of {rb_sizes:?} operations; recovery \
         after {rc_sizes:?} operations in transactions of {TX_OPS}; insert/delete pairs; median \
         of {rounds} rounds"
    );
    let dir = ctx.scratch()?;
    let mut model = Model::new(SEED);
    let load = model.load(n_load);
    let mut subjects = systems::build(ctx, dir.path(), &plan(ctx.scale))?;
    super::btree::load_all(&mut subjects, &load)?;
    // Each system with where its files are: the recovered copy carries on.
    let mut systems: Vec<(Subject, PathBuf)> = (subjects.into_iter())
        .map(|s| {
            let home = first_home(dir.path(), &s);
            (s, home)
        })
        .collect();
    let labels = |systems: &[(Subject, PathBuf)], size: usize| -> Vec<Label> {
        let param = format!("ops={size}");
        let label = |s: &Subject| Label::new(s.system, s.config.clone(), param.clone());
        systems.iter().map(|(s, _)| label(s)).collect()
    };
    for &size in &rb_sizes {
        let input = |_| {
            // Drawn from a copy: the transaction is rolled back, the model stays.
            let ops = model.clone().pairs(size / 2);
            let (gets, want) = checks(&model, &ops);
            (ops, gets, want)
        };
        let m = ctx.rounds(
            labels(&systems, size),
            &mut systems,
            (0, rounds),
            input,
            |(s, _), (ops, gets, want)| {
                settle(s)?;
                let mut d = Digest::default();
                let t = (s.store.batch(ops, End::Abort, &mut d)).map_err(|e| {
                    CliError::Bench(format!("{}: rollback of {size}: {e}", s.name()))
                })?;
                let name = s.name();
                verify(s.store.as_mut(), &name, gets, *want, "a rollback")?;
                let per_op = t.as_secs_f64() * 1e6 / size as f64;
                let values = vec![("rollback_us_per_op", per_op, "us")];
                Ok(Sample {
                    time: t,
                    digest: Some(d.0),
                    values,
                    ..Sample::default()
                })
            },
        )?;
        m.report(report, &Per::whole("rollback_ms", "ms"), &[], &[]);
    }
    let mut trial = 0;
    for &size in &rc_sizes {
        let input = |_| {
            let all = model.clone().mix(size, 1.0);
            let split = size.saturating_sub(TX_OPS);
            // The state recovery must restore: the last transaction undone.
            let _ = model.mix(split, 1.0);
            let open = all[split..].to_vec();
            let (gets, want) = checks(&model, &open);
            let probe = model.keys().first().copied().unwrap_or(1);
            Recovery {
                done: all[..split].to_vec(),
                open,
                gets,
                want,
                probe,
            }
        };
        let m = ctx.rounds(
            labels(&systems, size),
            &mut systems,
            (0, rounds),
            input,
            |(s, home), r| {
                settle(s)?;
                let mut d = Digest::default();
                let name = s.name();
                let fail = |e: MemError| CliError::Bench(format!("{name}: recovery run: {e}"));
                for tx in r.done.chunks(TX_OPS) {
                    s.store.batch(tx, End::Commit, &mut d).map_err(fail)?;
                }
                // No write-back thread may store while the files are copied:
                // the copy would mix instants (redo-async only; the open
                // transaction's values stay in its write set).
                s.store.sync().map_err(fail)?;
                let list = files(home, s);
                trial += 1;
                let image = dir
                    .path()
                    .join(format!("crash-{trial}-{}", name.replace('/', "-")));
                let copy = || copy_all(&list, &image);
                s.store
                    .batch(&r.open, End::Crash(&copy), &mut d)
                    .map_err(fail)?;
                // The original (its last transaction rolled back) closes; the
                // recovered copy carries on in its place.
                s.store = Box::new(Gone);
                let (t, mut recovered) = recover(s, &image, r.probe)?;
                verify(recovered.as_mut(), &name, &r.gets, r.want, "recovery")?;
                s.store = recovered;
                for f in list {
                    let _ = std::fs::remove_file(f);
                }
                *home = image;
                let values = vec![("transactions", size.div_ceil(TX_OPS) as f64, "count")];
                Ok(Sample::of(t, values))
            },
        )?;
        m.report(report, &Per::whole("recovery_ms", "ms"), &[], &[]);
    }
    Ok(())
}
