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

use rewind::{Counters, Policy, Pool, Tx};
use rewind_collections::{BTreeMap, Error, HashMap};

use super::super::{fresh_pool, Ctx};
use super::store::{End, Store};
use super::systems::{built, Plan, LAYOUT};
use super::workload::{str_key, value_of, Digest, Op};
use super::{MemError, Value};
use crate::error::CliError;

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
    ) -> Result<MapStore<M>, CliError> {
        let mut cfg = ctx.default_config();
        if let Some(p) = policy {
            cfg = cfg.policy(p);
        }
        let name = format!("{}-{name}", M::SYSTEM);
        let pool = fresh_pool((dir, &name), LAYOUT, plan.space, &cfg)?;
        MapStore::in_pool(Arc::new(pool)).map_err(built(format!("the map in {name}")))
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
        match op {
            Op::Get(k) => {
                let v = self.map.get(&self.pool, k).map_err(mem)?;
                d.get(v.as_ref().map(|v| &v[..]));
                Ok(())
            }
            // An update is its own transaction.
            _ => self.pool.transaction(|tx| self.one(tx, op, d)).map_err(mem),
        }
    }

    fn batch(&mut self, ops: &[Op], end: End<'_>, d: &mut Digest) -> Result<Duration, MemError> {
        let mut returned = Instant::now();
        let r = self
            .pool
            .transaction(|tx| end.body(ops, &mut returned, |op| self.one(tx, op, d).map_err(mem)));
        end.took(r, returned)
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
