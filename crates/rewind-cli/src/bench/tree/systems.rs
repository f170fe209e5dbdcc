//! The systems of the B+-tree benchmarks, built fresh in a scratch
//! directory on the same tmpfs: the baselines, rewind in every log
//! variant × policy, and with `--features peers` PMDK, Berkeley DB, LMDB,
//! SQLite and redb.

use std::path::Path;

use rewind::{LogVariant, Policy, Pool};

use super::mem::{NoLog, Rewind, Volatile};
use super::store::{Store, TreeStore};
use super::MemError;
use crate::bench::Ctx;
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

fn built(what: String) -> impl FnOnce(MemError) -> CliError {
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
    let path = dir.join(format!("{name}.pool"));
    let _ = std::fs::remove_file(&path);
    let mut cfg = ctx.pool_config(variant, policy);
    if let Some(log) = plan.log {
        cfg = cfg.log_size(log);
    }
    let mut pool = Pool::create(&path, LAYOUT, plan.space, &cfg)
        .map_err(CliError::rewind(format!("creating {}", path.display())))?;
    if !plan.auto_checkpoint {
        pool.set_checkpoint_fill(1.0);
    }
    let store =
        TreeStore::create(Rewind(Box::new(pool))).map_err(built(format!("the tree in {name}")))?;
    let meta = store.tree.meta();
    store
        .engine
        .0
        .transaction(|tx| {
            let root = tx.root::<u64>()?;
            tx.write(root, &meta)
        })
        .map_err(CliError::rewind(format!("publishing the tree in {name}")))?;
    Ok(store)
}

/// Every system, in the order measured.
pub fn build(ctx: &Ctx, dir: &Path, plan: &Plan) -> Result<Vec<Subject>, CliError> {
    let mut out = Vec::new();
    if plan.baselines {
        out.push(Subject {
            system: "volatile",
            config: "dram".into(),
            store: Box::new(
                TreeStore::create(Volatile::new(plan.space))
                    .map_err(built("the volatile tree".into()))?,
            ),
        });
        let path = dir.join("nolog.pool");
        let nolog = NoLog::new(ctx.domain(&path, plan.space)?);
        out.push(Subject {
            system: "persist-nolog",
            config: "nolog".into(),
            store: Box::new(TreeStore::create(nolog).map_err(built("the nolog tree".into()))?),
        });
    }
    for variant in LogVariant::ALL {
        for policy in Policy::ALL {
            let config = format!("{variant}-{policy}");
            let store = rewind_tree(ctx, dir, &config, variant, policy, plan)?;
            out.push(Subject {
                system: "rewind",
                config,
                store: Box::new(store),
            });
        }
    }
    #[cfg(feature = "peers")]
    peers(dir, plan, &mut out)?;
    Ok(out)
}

#[cfg(feature = "peers")]
fn peers(dir: &Path, plan: &Plan, out: &mut Vec<Subject>) -> Result<(), CliError> {
    use super::peers::{Pmdk, RedbStore, ShimStore, SqliteStore};
    use super::{Engine, TxMem};
    use rewind_peers::pmdk::PmdkHeap;

    let path = dir.join("pmdk.pool");
    // libpmemobj's undo logs live in the pool: the same room as rewind's log.
    let heap = PmdkHeap::create(&path, plan.space + plan.log.unwrap_or(0))
        .map_err(CliError::io(format!("creating {}", path.display())))?;
    let mut store = TreeStore::create(Pmdk(heap)).map_err(built("the PMDK tree".into()))?;
    // The tree's meta offset in the root word, for a recovered pool.
    let (root, meta) = (store.engine.0.root(), store.tree.meta());
    store
        .engine
        .transaction(|m| m.write_u64(root, meta))
        .map_err(built("the PMDK tree's root".into()))?;
    out.push(Subject {
        system: "pmdk",
        config: "libpmemobj".into(),
        store: Box::new(store),
    });
    out.push(Subject {
        system: "bdb",
        config: "btree-txn-sync".into(),
        store: Box::new(ShimStore::bdb(&dir.join("bdb")).map_err(built("Berkeley DB".into()))?),
    });
    out.push(Subject {
        system: "lmdb",
        config: "sync".into(),
        store: Box::new(ShimStore::lmdb(&dir.join("lmdb")).map_err(built("LMDB".into()))?),
    });
    out.push(Subject {
        system: "sqlite",
        config: "wal-full".into(),
        store: Box::new(
            SqliteStore::create(&dir.join("sqlite.db")).map_err(built("SQLite".into()))?,
        ),
    });
    out.push(Subject {
        system: "redb",
        config: "immediate".into(),
        store: Box::new(
            RedbStore::<u64>::create(&dir.join("redb.db")).map_err(built("redb".into()))?,
        ),
    });
    Ok(())
}

/// The peers a run can have, in the order built (their `system` names).
pub const PEERS: [&str; 5] = ["pmdk", "bdb", "lmdb", "sqlite", "redb"];
