//! The peers of the B+-tree benchmarks (`--features peers`): the same tree
//! on PMDK's libpmemobj (an [`Engine`] over `rewind_peers::pmdk`), and
//! four stores with B-trees of their own, each operation its own durable
//! transaction: Berkeley DB (transactional B-tree, synchronous commit),
//! LMDB (default sync), SQLite (WAL, `synchronous=FULL`, one table with an
//! INTEGER PRIMARY KEY and a BLOB) and redb (`Durability::Immediate`).
//! Keys are the same u64s, values the same 24 bytes; or, for the
//! string-keyed benchmark ([`Keys::Str32`]), the same 32-byte strings made
//! of them (Berkeley DB and LMDB: byte keys; SQLite: a `WITHOUT ROWID`
//! table keyed by a BLOB; redb: a table of `&[u8]` keys).

use std::path::Path;
use std::time::{Duration, Instant};

use redb::ReadableTable;

use rewind_peers::pmdk::{PmdkHeap, PmdkTx};
use rewind_peers::shim::{self, Shim};

use super::store::{End, Store};
use super::workload::{str_key, value_of, Digest, Keys, Op};
use super::{Engine, MemError, TxMem, Value, VALUE};

impl TxMem for PmdkTx<'_> {
    #[inline]
    fn read(&mut self, off: u64, buf: &mut [u8]) -> Result<(), MemError> {
        Ok(PmdkTx::read(self, off, buf)?)
    }

    #[inline]
    fn write(&mut self, off: u64, bytes: &[u8]) -> Result<(), MemError> {
        Ok(PmdkTx::write(self, off, bytes)?)
    }

    fn alloc(&mut self, size: u64) -> Result<u64, MemError> {
        Ok(self.zalloc(size)?)
    }

    fn free(&mut self, off: u64, _size: u64) -> Result<(), MemError> {
        Ok(PmdkTx::free(self, off)?)
    }
}

/// The tree on libpmemobj: each transaction `pmemobj_tx_begin` ..
/// `pmemobj_tx_commit`, each write snapshotted first.
pub struct Pmdk(pub PmdkHeap);

impl Engine for Pmdk {
    type Tx<'a> = PmdkTx<'a>;

    #[inline]
    fn transaction<R>(
        &mut self,
        f: impl FnOnce(&mut PmdkTx<'_>) -> Result<R, MemError>,
    ) -> Result<R, MemError> {
        let mut tx = self.0.begin()?;
        // On an error `tx` drops, which aborts it.
        let r = f(&mut tx)?;
        tx.commit()?;
        Ok(r)
    }
}

/// A peer's error, with what we were doing.
pub fn peer<E: std::error::Error + Send + Sync + 'static>(
    what: &'static str,
) -> impl Fn(E) -> MemError {
    move |e| MemError::Io(std::io::Error::other(format!("{what}: {e}")))
}

/// A store of its own behind a C shim (Berkeley DB's B-tree, LMDB's
/// B+-tree): each batch one of its transactions.
pub struct ShimStore {
    shim: Shim,
    keys: Keys,
}

/// The key bytes `k` stands for: its 8 big-endian bytes (what the shims'
/// u64 calls pass) or its 32-byte string.
fn key_bytes(keys: Keys, k: u64, buf: &mut [u8; 32]) -> &[u8] {
    match keys {
        Keys::U64 => {
            buf[..8].copy_from_slice(&k.to_be_bytes());
            &buf[..8]
        }
        Keys::Str32 => {
            *buf = str_key(k);
            &buf[..]
        }
    }
}

/// Berkeley DB's cache: the whole tree and more, as every system here
/// holds its data in memory.
pub const BDB_CACHE: u64 = 256 << 20;

/// LMDB's map: room for the tree and its copy-on-write pages.
const LMDB_MAP: u64 = 4 << 30;

impl ShimStore {
    /// A new Berkeley DB environment in the directory `dir` (created).
    pub fn bdb(dir: &Path) -> Result<ShimStore, MemError> {
        ShimStore::open(dir, Shim::bdb, BDB_CACHE)
    }

    /// A new (or, after a crash, the recovered) LMDB environment in `dir`.
    pub fn lmdb(dir: &Path) -> Result<ShimStore, MemError> {
        ShimStore::open(dir, Shim::lmdb, LMDB_MAP)
    }

    /// The environment `open` opens in `dir` (created) at `size`.
    fn open(dir: &Path, open: shim::Open, size: u64) -> Result<ShimStore, MemError> {
        std::fs::create_dir_all(dir)?;
        Ok(ShimStore {
            shim: open(dir, size)?,
            keys: Keys::U64,
        })
    }

    /// The same store, keyed as `keys` says.
    pub fn keyed(self, keys: Keys) -> ShimStore {
        ShimStore { keys, ..self }
    }
}

/// Runs `ops` inside the transaction `s` has begun, then ends it as `end`
/// says with `end_tx(s, commit)` (an error rolls back), timing the end.
fn batch_in<S: Store>(
    s: &mut S,
    ops: &[Op],
    end: End<'_>,
    d: &mut Digest,
    end_tx: fn(&mut S, bool) -> Result<(), MemError>,
) -> Result<Duration, MemError> {
    let r = ops.iter().try_for_each(|&op| s.apply(op, d));
    if let Err(e) = r.and_then(|()| end.before_end()) {
        let _ = end_tx(s, false);
        return Err(e);
    }
    let start = Instant::now();
    end_tx(s, end.commits())?;
    Ok(start.elapsed())
}

impl Store for ShimStore {
    #[inline]
    fn apply(&mut self, op: Op, d: &mut Digest) -> Result<(), MemError> {
        let mut buf = [0u8; 32];
        let kb = key_bytes(self.keys, op.key(), &mut buf);
        match op {
            Op::Get(_) => {
                let mut v: Value = [0; VALUE];
                let found = self.shim.get_bytes(kb, &mut v)?;
                d.get(found.then_some(&v[..]));
            }
            Op::Insert(k) => d.update(self.shim.put_bytes(kb, &value_of(k))?),
            Op::Remove(_) => d.update(self.shim.del_bytes(kb)?),
        }
        Ok(())
    }

    fn batch(&mut self, ops: &[Op], end: End<'_>, d: &mut Digest) -> Result<Duration, MemError> {
        self.shim.begin()?;
        batch_in(self, ops, end, d, |s, commit| match commit {
            true => Ok(s.shim.commit()?),
            false => Ok(s.shim.abort()?),
        })
    }
}

/// SQLite: one table `kv(k INTEGER PRIMARY KEY, v BLOB)` (string keys:
/// `kv(k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID`, one B-tree keyed by the
/// string, as the others are), WAL journal, `synchronous=FULL`; each
/// statement autocommits outside a batch.
pub struct SqliteStore {
    conn: rusqlite::Connection,
    keys: Keys,
}

impl SqliteStore {
    /// The u64-keyed store in the open database `conn` (a recovered one).
    pub fn from_connection(conn: rusqlite::Connection) -> SqliteStore {
        SqliteStore {
            conn,
            keys: Keys::U64,
        }
    }

    /// A new database file at `path` (replaced), keyed as `keys` says.
    pub fn create_keyed(path: &Path, keys: Keys) -> Result<SqliteStore, MemError> {
        let _ = std::fs::remove_file(path);
        let c = crate::bench::sqlite_wal_full(path, std::time::Duration::from_secs(5))
            .map_err(|e| MemError::Io(std::io::Error::other(e.to_string())))?;
        let table = match keys {
            Keys::U64 => "CREATE TABLE kv (k INTEGER PRIMARY KEY, v BLOB NOT NULL);",
            Keys::Str32 => "CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID;",
        };
        c.execute_batch(table)
            .map_err(peer("creating the SQLite table"))?;
        Ok(SqliteStore { conn: c, keys })
    }
}

impl Store for SqliteStore {
    #[inline]
    fn apply(&mut self, op: Op, d: &mut Digest) -> Result<(), MemError> {
        let err = peer("SQLite");
        // The key's bits as SQLite's signed 64-bit integer, or its string.
        let (int, blob);
        let key: &dyn rusqlite::ToSql = match self.keys {
            Keys::U64 => {
                int = op.key() as i64;
                &int
            }
            Keys::Str32 => {
                blob = str_key(op.key());
                &blob
            }
        };
        match op {
            Op::Get(_) => {
                let mut st = (self.conn)
                    .prepare_cached("SELECT v FROM kv WHERE k = ?1")
                    .map_err(&err)?;
                let mut rows = st.query([key]).map_err(&err)?;
                match rows.next().map_err(&err)? {
                    Some(row) => {
                        let v = row.get_ref(0).map_err(&err)?.as_blob();
                        d.get(Some(v.map_err(peer("SQLite value"))?));
                    }
                    None => d.get(None),
                }
            }
            Op::Insert(k) => {
                // Like the tree's insert, no change when the key is present.
                let sql = "INSERT OR IGNORE INTO kv (k, v) VALUES (?1, ?2)";
                let mut st = self.conn.prepare_cached(sql).map_err(&err)?;
                let n = st.execute(rusqlite::params![key, &value_of(k)[..]]);
                d.update(n.map_err(&err)? == 1);
            }
            Op::Remove(_) => {
                let sql = "DELETE FROM kv WHERE k = ?1";
                let mut st = self.conn.prepare_cached(sql).map_err(&err)?;
                d.update(st.execute([key]).map_err(&err)? == 1);
            }
        }
        Ok(())
    }

    fn batch(&mut self, ops: &[Op], end: End<'_>, d: &mut Digest) -> Result<Duration, MemError> {
        self.conn.execute_batch("BEGIN").map_err(peer("SQLite"))?;
        batch_in(self, ops, end, d, |s, commit| {
            let sql = if commit { "COMMIT" } else { "ROLLBACK" };
            s.conn.execute_batch(sql).map_err(peer("SQLite"))
        })
    }
}

/// A key type of a redb table of the benchmarks: u64 ([`RedbStore`]) or
/// the 32-byte string made of it ([`RedbStrStore`]).
pub trait RedbKey: redb::Key + Sized + 'static {
    /// The table of byte values.
    const TABLE: redb::TableDefinition<'static, Self, &'static [u8]>;
    /// Calls `f` with the key `k` stands for.
    fn with<R>(k: u64, f: impl FnOnce(Self::SelfType<'_>) -> R) -> R;
}

impl RedbKey for u64 {
    const TABLE: redb::TableDefinition<'static, u64, &'static [u8]> =
        redb::TableDefinition::new("tree");
    fn with<R>(k: u64, f: impl FnOnce(u64) -> R) -> R {
        f(k)
    }
}

impl RedbKey for &'static [u8] {
    const TABLE: redb::TableDefinition<'static, &'static [u8], &'static [u8]> =
        redb::TableDefinition::new("strtree");
    fn with<R>(k: u64, f: impl FnOnce(&[u8]) -> R) -> R {
        f(&str_key(k)[..])
    }
}

/// redb: one table of `K` keys and byte values, each write transaction
/// committed with `Durability::Immediate`.
pub struct RedbStore<K = u64>(redb::Database, std::marker::PhantomData<K>);

/// redb with string keys: a table of `&[u8]` keys.
pub type RedbStrStore = RedbStore<&'static [u8]>;

impl<K: RedbKey> RedbStore<K> {
    /// The store in the open database `db`.
    pub fn open(db: redb::Database) -> RedbStore<K> {
        RedbStore(db, std::marker::PhantomData)
    }

    /// A new database file at `path` (replaced).
    pub fn create(path: &Path) -> Result<RedbStore<K>, MemError> {
        let _ = std::fs::remove_file(path);
        let db = redb::Database::create(path).map_err(peer("creating redb"))?;
        let w = db.begin_write().map_err(peer("redb begin_write"))?;
        w.open_table(K::TABLE).map_err(peer("redb open_table"))?;
        w.commit().map_err(peer("redb commit"))?;
        Ok(RedbStore::open(db))
    }

    fn write_ops(
        &mut self,
        ops: &[Op],
        end: End<'_>,
        d: &mut Digest,
    ) -> Result<Duration, MemError> {
        let mut w = self.0.begin_write().map_err(peer("redb begin_write"))?;
        w.set_durability(redb::Durability::Immediate);
        {
            let mut t = w.open_table(K::TABLE).map_err(peer("redb open_table"))?;
            for &op in ops {
                K::with(op.key(), |key| {
                    match op {
                        Op::Get(_) => {
                            let v = t.get(&key).map_err(peer("redb get"))?;
                            d.get(v.as_ref().map(|g| g.value()));
                        }
                        Op::Insert(k) => {
                            // redb's insert replaces; the tree's leaves a
                            // present key alone. The old value goes back
                            // (never, in this workload: every insert is of a
                            // new key).
                            let old = t.insert(&key, &value_of(k)[..]);
                            let old = old.map_err(peer("redb insert"))?;
                            let old = old.map(|g| g.value().to_vec());
                            if let Some(old) = &old {
                                t.insert(&key, &old[..]).map_err(peer("redb insert"))?;
                            }
                            d.update(old.is_none());
                        }
                        Op::Remove(_) => {
                            let old = t.remove(&key).map_err(peer("redb remove"))?;
                            d.update(old.is_some());
                        }
                    }
                    Ok::<(), MemError>(())
                })?;
            }
        }
        end.before_end()?;
        let start = Instant::now();
        if end.commits() {
            w.commit().map_err(peer("redb commit"))?;
        } else {
            w.abort().map_err(peer("redb abort"))?;
        }
        Ok(start.elapsed())
    }
}

impl<K: RedbKey> Store for RedbStore<K> {
    #[inline]
    fn apply(&mut self, op: Op, d: &mut Digest) -> Result<(), MemError> {
        match op {
            Op::Get(k) => {
                let r = self.0.begin_read().map_err(peer("redb begin_read"))?;
                let t = r.open_table(K::TABLE).map_err(peer("redb open_table"))?;
                let v = K::with(k, |key| t.get(key)).map_err(peer("redb get"))?;
                d.get(v.as_ref().map(|g| g.value()));
                Ok(())
            }
            _ => self.write_ops(&[op], End::Commit, d).map(|_| ()),
        }
    }

    fn batch(&mut self, ops: &[Op], end: End<'_>, d: &mut Digest) -> Result<Duration, MemError> {
        self.write_ops(ops, end, d)
    }
}
