//! A user's sixth round: cursors held across savepoints, rollbacks and
//! reopens; checks called inside a transaction.

mod common;

use rewind::{Policy, Pool, PoolConfig};
use rewind_collections::{BTreeMap, Blob, Error, HashMap, List, Vec as PVec};

fn pool_at(dir: &tempfile::TempDir, name: &str, policy: Policy) -> Pool {
    Pool::create(
        dir.path().join(name),
        "six",
        8 << 20,
        &PoolConfig::default().policy(policy),
    )
    .unwrap()
}

/// A cursor taken at an element pushed after a savepoint, the savepoint
/// rolled back to and the same push made again: the block and the count
/// are the same, and so was the transaction.
#[test]
fn a_cursor_to_a_push_undone_by_rollback_to_is_invalid() {
    for policy in Policy::ALL {
        let dir = tempfile::tempdir().unwrap();
        let pool = pool_at(&dir, "l.pool", policy);
        let l = pool
            .transaction(|tx| {
                let l = List::<u64>::create(tx)?;
                l.push_back(tx, 1)?;
                Ok::<_, Error>(l)
            })
            .unwrap();
        let (stale, now) = pool
            .transaction(|tx| {
                let sp = tx.savepoint()?;
                l.push_back(tx, 5)?;
                let stale = l.cursor_tx(tx, 1)?.unwrap();
                tx.rollback_to(sp)?;
                l.push_back(tx, 6)?;
                let now = l.cursor_tx(tx, 1)?.unwrap();
                Ok::<_, Error>((stale, now))
            })
            .unwrap();
        // (The allocator gives the undone block back only after the
        // transaction: the two differ by offset today, and must also if
        // it ever gives it back at once.)
        assert_ne!(
            stale, now,
            "{policy:?}: the stale cursor equals the new one"
        );
        match l.value(&pool, stale) {
            Err(Error::InvalidCursor { .. }) => {}
            r => panic!("{policy:?}: value of a rolled-back push's cursor: {r:?}"),
        }
        match pool.transaction(|tx| l.remove_at(tx, stale)) {
            Err(Error::InvalidCursor { .. }) => {}
            r => panic!("{policy:?}: remove_at of a rolled-back push's cursor: {r:?}"),
        }
        let all: Vec<u64> = l.iter(&pool).unwrap().map(|e| e.unwrap()).collect();
        assert_eq!(all, [1, 6], "{policy:?}");
    }
}

/// A cursor to a push that rolled back, held while the pool is closed and
/// opened again: transaction ids start again after a clean close, so the
/// first transaction of the new handle has the id the rolled-back one had.
#[test]
fn a_cursor_to_a_rolled_back_push_is_invalid_after_a_reopen() {
    for policy in Policy::ALL {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.pool");
        let pool = pool_at(&dir, "l.pool", policy);
        let l = pool.transaction(List::<u64>::create).unwrap();
        pool.close().unwrap();
        let open = || Pool::open(&path, "six", &rewind::OpenOptions::default()).unwrap();
        let pool = open();
        let mut stale = None;
        let r = pool.transaction(|tx| {
            l.push_back(tx, 5)?;
            stale = l.cursor_tx(tx, 0)?;
            Err::<(), Error>(common::aborted())
        });
        assert!(r.is_err());
        pool.close().unwrap();
        let stale = stale.unwrap();
        let pool = open();
        pool.transaction(|tx| l.push_back(tx, 6)).unwrap();
        let now = l.cursor(&pool, 0).unwrap().unwrap();
        assert_eq!(stale.offset(), now.offset(), "{policy:?}: block not reused");
        match l.value(&pool, stale) {
            Err(Error::InvalidCursor { .. }) => {}
            r => panic!("{policy:?}: value of a rolled-back push's cursor: {r:?}"),
        }
        match pool.transaction(|tx| l.remove_at(tx, stale)) {
            Err(Error::InvalidCursor { .. }) => {}
            r => panic!("{policy:?}: remove_at of a rolled-back push's cursor: {r:?}"),
        }
        assert_eq!(l.len(&pool).unwrap(), 1);
        assert_eq!(l.value(&pool, now).unwrap(), 6);
        // A list of the layout whose numbers mixed in the transaction's
        // id is refused, named.
        pool.transaction(|tx| tx.write_bytes(l.as_ptr().offset(), b"RWLIST03"))
            .unwrap();
        match l.len(&pool) {
            Err(Error::UnsupportedLayout {
                found: "RWLIST03",
                expected: "RWLIST04",
                ..
            }) => {}
            r => panic!("{policy:?}: an RWLIST03 header: {r:?}"),
        }
    }
}

/// `check_invariants` and `blocks` through `&Pool` on a thread inside a
/// transaction of the same pool: as every other read through `&Pool`
/// there, `NestedTransaction` (they answered `Ok` from the committed
/// state under redo, from the transaction's own stores under force).
#[test]
fn checks_inside_a_transaction_of_the_pool_are_nested_transaction() {
    for policy in Policy::ALL {
        let dir = tempfile::tempdir().unwrap();
        let pool = pool_at(&dir, "c.pool", policy);
        let (m, s, h, l, v, b) = pool
            .transaction(|tx| {
                Ok::<_, Error>((
                    BTreeMap::<u64, u64>::create(tx)?,
                    BTreeMap::<String, String>::create(tx)?,
                    HashMap::<u64, u64>::create(tx)?,
                    List::<u64>::create(tx)?,
                    PVec::<u64>::create(tx)?,
                    Blob::create(tx)?,
                ))
            })
            .unwrap();
        let nested = |r: Result<(), Error>, what: &str| match r {
            Err(Error::Pool(rewind::Error::NestedTransaction)) => {}
            r => panic!("{policy:?}: {what} inside a transaction: {r:?}"),
        };
        pool.transaction(|tx| {
            m.insert(tx, 1, 1)?;
            nested(m.check_invariants(&pool), "btree check_invariants");
            nested(m.blocks(&pool).map(|_| ()), "btree blocks");
            nested(s.check_invariants(&pool), "string btree check_invariants");
            nested(h.check_invariants(&pool), "hash check_invariants");
            nested(h.blocks(&pool).map(|_| ()), "hash blocks");
            nested(l.check_invariants(&pool), "list check_invariants");
            nested(l.blocks(&pool).map(|_| ()), "list blocks");
            nested(v.blocks(&pool).map(|_| ()), "vec blocks");
            nested(b.blocks(&pool).map(|_| ()), "blob blocks");
            Ok::<_, Error>(())
        })
        .unwrap();
        // Outside, they answer.
        m.check_invariants(&pool).unwrap();
        h.check_invariants(&pool).unwrap();
        l.check_invariants(&pool).unwrap();
        assert_eq!(m.blocks(&pool).unwrap().len(), 2);
        // Inside a transaction of another pool, they answer too.
        let other = pool_at(&dir, "o.pool", policy);
        other
            .transaction(|_tx| {
                m.check_invariants(&pool)?;
                l.check_invariants(&pool)?;
                Ok::<_, Error>(())
            })
            .unwrap();
    }
}
