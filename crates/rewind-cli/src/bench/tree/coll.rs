//! `rewind-collections`' own maps as systems of `bench btree`: its
//! `BTreeMap` (leaves with unsorted slots, a bitmap and fingerprints) and
//! its `HashMap`, each in a pool of the default configuration, holding the
//! workload's records (a `u64` key, a 24-byte value) beside the generic
//! tree on every engine.
//!
//! Each operation is its own transaction, as for every system; a lookup
//! reads the committed state (`map.get(&pool, k)`: no transaction), as a
//! program of the collections would.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rewind::{Counters, Policy, Pool, PoolConfig, Tx};
use rewind_collections::{BTreeMap, Error, HashMap};

use super::super::harness::Ctx;
use super::store::{End, Store};
use super::systems::{Plan, LAYOUT};
use super::workload::{str_key, value_of, Digest, Op};
use super::{MemError, Value};

/// A map of the collections, as the benchmark uses it.
pub trait Map: Copy {
    /// `system` in the tables.
    const SYSTEM: &'static str;
    fn create(tx: &mut Tx<'_>) -> Result<Self, Error>;
    fn get(&self, pool: &Pool, k: u64) -> Result<Option<Value>, Error>;
    fn get_tx(&self, tx: &mut Tx<'_>, k: u64) -> Result<Option<Value>, Error>;
    fn insert(&self, tx: &mut Tx<'_>, k: u64, v: Value) -> Result<Option<Value>, Error>;
    fn remove(&self, tx: &mut Tx<'_>, k: u64) -> Result<Option<Value>, Error>;
}

/// `impl Map` for the collection `$map<$key, Value>` named `$system`: the
/// workload's key `k` passed as `$owned` (insert) or `&$borrowed`.
macro_rules! map {
    ($map:ident<$key:ty>, $system:literal, |$k:ident| $owned:expr, $borrowed:expr) => {
        impl Map for $map<$key, Value> {
            const SYSTEM: &'static str = $system;
            fn create(tx: &mut Tx<'_>) -> Result<Self, Error> {
                $map::create(tx)
            }
            fn get(&self, pool: &Pool, $k: u64) -> Result<Option<Value>, Error> {
                $map::get(self, pool, &$borrowed)
            }
            fn get_tx(&self, tx: &mut Tx<'_>, $k: u64) -> Result<Option<Value>, Error> {
                $map::get_tx(self, tx, &$borrowed)
            }
            fn insert(&self, tx: &mut Tx<'_>, $k: u64, v: Value) -> Result<Option<Value>, Error> {
                $map::insert(self, tx, $owned, v)
            }
            fn remove(&self, tx: &mut Tx<'_>, $k: u64) -> Result<Option<Value>, Error> {
                $map::remove(self, tx, &$borrowed)
            }
        }
    };
}

map!(BTreeMap<u64>, "coll-btree", |k| k, k);
// The string-keyed benchmark's map: the workload's key `k` is the 32-byte
// string `str_key(k)`, inline in its 40-byte slot.
map!(
    BTreeMap<Vec<u8>>,
    "coll-btree",
    |k| str_key(k).to_vec(),
    str_key(k)
);
map!(HashMap<u64>, "coll-hash", |k| k, k);

fn mem(e: Error) -> MemError {
    match e {
        Error::Pool(e) => MemError::from(e),
        e => MemError::Io(std::io::Error::other(e.to_string())),
    }
}

/// A collection in a pool (its own, or one that several maps share).
#[derive(Clone)]
pub struct MapStore<M: Map> {
    pool: Arc<Pool>,
    map: M,
}

impl<M: Map> MapStore<M> {
    /// A pool `DIR/SYSTEM-NAME.pool` holding a new map: the default
    /// configuration, under `policy` if given.
    pub fn create(
        ctx: &Ctx,
        dir: &Path,
        name: &str,
        policy: Option<Policy>,
        plan: &Plan,
    ) -> Result<MapStore<M>, MemError> {
        let path = dir.join(format!("{}-{name}.pool", M::SYSTEM));
        let _ = std::fs::remove_file(&path);
        let mut cfg = PoolConfig::default()
            .backend(ctx.backend)
            .nvm_latency(ctx.latency);
        if let Some(p) = policy {
            cfg = cfg.policy(p);
        }
        MapStore::in_pool(Arc::new(Pool::create(&path, LAYOUT, plan.space, &cfg)?))
    }

    /// A new map in `pool`.
    pub fn in_pool(pool: Arc<Pool>) -> Result<MapStore<M>, MemError> {
        let map = pool.transaction(|tx| M::create(tx)).map_err(mem)?;
        Ok(MapStore { pool, map })
    }

    /// One operation inside a batch's transaction (a lookup through it).
    fn one(&self, tx: &mut Tx<'_>, op: Op, d: &mut Digest) -> Result<(), Error> {
        match op {
            Op::Get(k) => d.get(self.map.get_tx(tx, k)?.as_ref().map(|v| &v[..])),
            Op::Insert(k) => d.update(self.map.insert(tx, k, value_of(k))?.is_none()),
            Op::Remove(k) => d.update(self.map.remove(tx, k)?.is_some()),
        }
        Ok(())
    }
}

impl<M: Map> Store for MapStore<M> {
    fn apply(&mut self, op: Op, d: &mut Digest) -> Result<(), MemError> {
        let map = self.map;
        match op {
            Op::Get(k) => d.get(
                map.get(&self.pool, k)
                    .map_err(mem)?
                    .as_ref()
                    .map(|v| &v[..]),
            ),
            Op::Insert(k) => {
                let old = self.pool.transaction(|tx| map.insert(tx, k, value_of(k)));
                d.update(old.map_err(mem)?.is_none())
            }
            Op::Remove(k) => {
                let old = self.pool.transaction(|tx| map.remove(tx, k));
                d.update(old.map_err(mem)?.is_some())
            }
        }
        Ok(())
    }

    fn batch(&mut self, ops: &[Op], end: End<'_>, d: &mut Digest) -> Result<Duration, MemError> {
        let commit = matches!(end, End::Commit);
        let mut returned = Instant::now();
        let mut copy_failed = None;
        let r = self.pool.transaction(|tx| {
            for &op in ops {
                self.one(tx, op, d)?;
            }
            if let Err(e) = end.before_end() {
                copy_failed = Some(e);
                return Err(Error::Pool(rewind::Error::Aborted));
            }
            returned = Instant::now();
            if commit {
                Ok(())
            } else {
                Err(Error::Pool(rewind::Error::Aborted))
            }
        });
        let took = returned.elapsed();
        if let Some(e) = copy_failed {
            return Err(e);
        }
        match r {
            Ok(()) => Ok(took),
            Err(Error::Pool(rewind::Error::Aborted)) if !commit => Ok(took),
            Err(e) => Err(mem(e)),
        }
    }

    fn checkpoint(&self) -> Result<(), MemError> {
        Ok(self.pool.checkpoint()?)
    }

    fn sync(&self) -> Result<(), MemError> {
        Ok(self.pool.sync()?)
    }

    fn counters(&self) -> Option<Counters> {
        Some(self.pool.counters())
    }
}
