//! `destroy` gives every block of a collection back: after it commits the
//! pool's allocated blocks are the root object's alone; an aborted
//! `destroy` leaves the collection whole. Every collection, every log
//! variant × policy.

mod common;

use rewind::{Pool, PoolConfig, Tx};
use rewind_collections::{BTreeMap, Blob, Error, FixedBytes, HashMap, List, Vec as PVec};

use common::{aborted, allocated, configs, name};

/// Creates a filled collection, checks that an aborted destroy keeps its
/// `blocks` and a committed one frees them all.
fn destroys<C: Copy>(
    cfg: &PoolConfig,
    what: &str,
    fill: impl Fn(&mut Tx<'_>) -> Result<C, Error>,
    blocks: impl Fn(C, &Pool) -> Result<Vec<u64>, Error>,
    destroy: impl Fn(C, &mut Tx<'_>) -> Result<(), Error>,
) {
    let pool = Pool::create_sim("destroy", 4 << 20, cfg).unwrap();
    let root = pool.transaction(|tx| tx.root::<u64>()).unwrap().offset();
    let c = pool.transaction(|tx| fill(tx)).unwrap();
    let mut owned = blocks(c, &pool).unwrap();
    owned.push(root);
    owned.sort_unstable();
    assert_eq!(allocated(&pool), owned, "{what} {}", name(cfg));
    assert!(owned.len() > 3, "{what}: too few blocks to say much");

    let r = pool.transaction(|tx| {
        destroy(c, tx)?;
        Err::<(), _>(aborted())
    });
    assert!(r.is_err());
    assert_eq!(
        allocated(&pool),
        owned,
        "{what} {}: aborted destroy",
        name(cfg)
    );

    pool.transaction(|tx| destroy(c, tx)).unwrap();
    assert_eq!(allocated(&pool), [root], "{what} {}: destroy", name(cfg));
}

#[test]
fn destroy_frees_every_block() {
    type Key = FixedBytes<8>;
    for cfg in &configs() {
        destroys(
            cfg,
            "B+-tree",
            |tx| {
                let t = BTreeMap::<u64, u64>::create_with_fanout(tx, 4)?;
                for k in 0..200 {
                    t.insert(tx, k * 7 % 200, k)?;
                }
                Ok(t)
            },
            |t, p| t.blocks(p),
            |t, tx| t.destroy(tx),
        );
        destroys(
            cfg,
            "hash map",
            |tx| {
                let m = HashMap::<Key, u64>::create(tx)?;
                for k in 0..100u64 {
                    m.insert(tx, Key::new(k.to_string())?, k)?;
                }
                Ok(m)
            },
            |m, p| m.blocks(p),
            |m, tx| m.destroy(tx),
        );
        destroys(
            cfg,
            "list",
            |tx| {
                let l = List::<u64>::create(tx)?;
                for k in 0..20 {
                    l.push_front(tx, k)?;
                }
                Ok(l)
            },
            |l, p| l.blocks(p),
            |l, tx| l.destroy(tx),
        );
    }
}

/// A blob and a vector own two blocks each (header and buffer).
#[test]
fn destroy_frees_a_blob_and_a_vector() {
    for cfg in &configs() {
        let pool = Pool::create_sim("destroy", 4 << 20, cfg).unwrap();
        let root = pool.transaction(|tx| tx.root::<u64>()).unwrap().offset();
        let (b, v) = pool
            .transaction(|tx| {
                let b = Blob::create_from(tx, &[1; 3000])?;
                let v = PVec::<u64>::create(tx)?;
                v.push(tx, 1)?;
                Ok::<_, Error>((b, v))
            })
            .unwrap();
        assert_eq!(allocated(&pool).len(), 5, "{}", name(cfg));
        pool.transaction(|tx| {
            b.destroy(tx)?;
            v.destroy(tx)
        })
        .unwrap();
        assert_eq!(allocated(&pool), [root], "{}", name(cfg));
    }
}
