//! The systems of the B+-tree benchmarks, built fresh in a scratch
//! directory on the same tmpfs: the baselines, rewind in every log
//! variant × policy, and with `--features peers` PMDK, Berkeley DB, LMDB,
//! SQLite and redb.

use std::path::Path;

use rewind::{LogVariant, Policy, Pool};

use super::mem::{NoLog, Rewind, Volatile};
use super::store::{Store, TreeStore};
#[cfg(feature = "peers")]
use super::workload::Keys;
use super::MemError;
use crate::bench::harness::every_config;
use crate::bench::{fresh_pool, Ctx};
use crate::error::CliError;

/// The pools' layout name.
pub const LAYOUT: &str = "rewind-bench-btree";

/// One system under test.
pub struct Subject {
    /// `volatile`, `persist-nolog`, `rewind`, or the peer's name.
    pub system: &'static str,
    /// The configuration: rewind's `variant-policy`, or how the peer runs.
    pub config: String,
    pub store: Box<dyn Store>,
}

impl Subject {
    /// The system `system` in configuration `config`.
    pub fn new(system: &'static str, config: &str, store: impl Store + 'static) -> Subject {
        Subject {
            system,
            config: config.into(),
            store: Box::new(store),
        }
    }

    /// `system/config`, as tables name it.
    pub fn name(&self) -> String {
        format!("{}/{}", self.system, self.config)
    }
}

/// What to build.
#[derive(Clone, Copy)]
pub struct Plan {
    /// Bytes of each tree's space (arena, domain, pool).
    pub space: u64,
    /// Bytes of rewind's log (`None`: the default, an eighth of the pool).
    pub log: Option<u64>,
    /// `volatile` and `persist-nolog` too (they cannot roll back).
    pub baselines: bool,
    /// Whether rewind checkpoints when its log fills (`false`: only when
    /// asked; the log must hold every transaction in between).
    pub auto_checkpoint: bool,
}

impl Plan {
    /// Each tree in `space` bytes with the default log, checkpointing when
    /// it fills; the baselines too where `baselines` says.
    pub fn new(space: u64, baselines: bool) -> Plan {
        Plan {
            space,
            log: None,
            baselines,
            auto_checkpoint: true,
        }
    }
}

/// The error of creating `what`.
pub fn built(what: impl Into<String>) -> impl FnOnce(MemError) -> CliError {
    let what = what.into();
    move |e| CliError::Bench(format!("creating {what}: {e}"))
}

/// A rewind pool `DIR/NAME.pool` of `variant` × `policy` holding a new
/// tree, its meta block's offset in the root (so a recovered pool finds it).
pub fn rewind_tree(
    ctx: &Ctx,
    dir: &Path,
    name: &str,
    variant: LogVariant,
    policy: Policy,
    plan: &Plan,
) -> Result<TreeStore<Rewind<Box<Pool>>>, CliError> {
    let mut cfg = ctx.pool_config(variant, policy);
    if let Some(log) = plan.log {
        cfg = cfg.log_size(log);
    }
    let mut pool = fresh_pool((dir, name), LAYOUT, plan.space, &cfg)?;
    if !plan.auto_checkpoint {
        pool.set_checkpoint_fill(1.0)
            .map_err(CliError::rewind("setting the checkpoint fill"))?;
    }
    let store =
        TreeStore::create(Rewind(Box::new(pool))).map_err(built(format!("the tree in {name}")))?;
    let meta = store.tree.meta();
    let publish = store.engine.0.transaction(|tx| {
        let root = tx.root::<u64>()?;
        tx.write(root, &meta)
    });
    publish.map_err(CliError::rewind(format!("publishing the tree in {name}")))?;
    Ok(store)
}

/// Every system, in the order measured.
pub fn build(ctx: &Ctx, dir: &Path, plan: &Plan) -> Result<Vec<Subject>, CliError> {
    let mut out = Vec::new();
    if plan.baselines {
        let volatile = TreeStore::create(Volatile::new(plan.space));
        let volatile = volatile.map_err(built("the volatile tree"))?;
        out.push(Subject::new("volatile", "dram", volatile));
        let nolog = NoLog::new(ctx.domain(&dir.join("nolog.pool"), plan.space)?);
        let nolog = TreeStore::create(nolog).map_err(built("the nolog tree"))?;
        out.push(Subject::new("persist-nolog", "nolog", nolog));
    }
    for (config, variant, policy) in every_config() {
        let store = rewind_tree(ctx, dir, &config, variant, policy, plan)?;
        out.push(Subject::new("rewind", &config, store));
    }
    #[cfg(feature = "peers")]
    peers(dir, plan, &mut out)?;
    Ok(out)
}

#[cfg(feature = "peers")]
fn peers(dir: &Path, plan: &Plan, out: &mut Vec<Subject>) -> Result<(), CliError> {
    use super::peers::Pmdk;
    use super::{Engine, TxMem};
    use rewind_peers::pmdk::PmdkHeap;

    let path = dir.join("pmdk.pool");
    // libpmemobj's undo logs live in the pool: the same room as rewind's log.
    let heap = PmdkHeap::create(&path, plan.space + plan.log.unwrap_or(0))
        .map_err(CliError::io(format!("creating {}", path.display())))?;
    let mut store = TreeStore::create(Pmdk(heap)).map_err(built("the PMDK tree"))?;
    // The tree's meta offset in the root word, for a recovered pool.
    let (root, meta) = (store.engine.0.root(), store.tree.meta());
    let publish = store.engine.transaction(|m| m.write_u64(root, meta));
    publish.map_err(built("the PMDK tree's root"))?;
    out.push(Subject::new("pmdk", "libpmemobj", store));
    out.extend(stores(dir, Keys::U64)?);
    Ok(())
}

/// The peers with trees of their own, each empty, keyed as `keys` says:
/// Berkeley DB, LMDB, SQLite and redb (their files named with `-str` for
/// string keys).
#[cfg(feature = "peers")]
pub fn stores(dir: &Path, keys: Keys) -> Result<Vec<Subject>, CliError> {
    use super::peers::{RedbStore, RedbStrStore, ShimStore, SqliteStore};
    let sfx = if keys == Keys::U64 { "" } else { "-str" };
    let file = |name: &str, ext: &str| dir.join(format!("{name}{sfx}{ext}"));
    let bdb = ShimStore::bdb(&file("bdb", "")).map_err(built("Berkeley DB"))?;
    let lmdb = ShimStore::lmdb(&file("lmdb", "")).map_err(built("LMDB"))?;
    let sqlite = SqliteStore::create_keyed(&file("sqlite", ".db"), keys);
    let redb = match keys {
        Keys::U64 => RedbStore::<u64>::create(&file("redb", ".db")).map(|s| Box::new(s) as _),
        Keys::Str32 => RedbStrStore::create(&file("redb", ".db")).map(|s| Box::new(s) as _),
    };
    Ok(vec![
        Subject::new("bdb", "btree-txn-sync", bdb.keyed(keys)),
        Subject::new("lmdb", "sync", lmdb.keyed(keys)),
        Subject::new("sqlite", "wal-full", sqlite.map_err(built("SQLite"))?),
        Subject {
            system: "redb",
            config: "immediate".into(),
            store: redb.map_err(built("redb"))?,
        },
    ])
}

/// The peers a run can have, in the order built (their `system` names).
pub const PEERS: [&str; 5] = ["pmdk", "bdb", "lmdb", "sqlite", "redb"];
