//! Operations of several steps refused for space, in a pool whose every
//! block is taken: `OutOfMemory` leaves the transaction usable, so a
//! program may drop the error and commit the rest. The refused operation
//! must then leave nothing behind, as `docs/collections.md` says ("fails
//! with OutOfMemory having changed nothing"): no block of a collection
//! half created, no entries of a `retain` half done. Every log variant ×
//! policy.

mod common;

use common::{allocated, configs, name};

use rewind::{PPtr, Pool, PoolConfig};
use rewind_collections::{BTreeMap, Blob, Error, HashMap};

fn is_oom(e: &Error) -> bool {
    matches!(e, Error::Pool(rewind::Error::OutOfMemory { .. }))
}

/// Takes every free block of every size, in transactions that commit,
/// but for one block of `spare` bytes (0: none) left free at the end.
fn exhaust_but(p: &Pool, spare: u64) {
    let kept = (spare > 0).then(|| p.transaction(|tx| tx.alloc_bytes(spare)).unwrap());
    for shift in (6..=18).rev() {
        while p
            .transaction(|tx| tx.alloc_bytes(1 << shift).map(drop))
            .is_ok()
        {}
    }
    if let Some(off) = kept {
        p.transaction(|tx| tx.free(PPtr::<u8>::from_offset(off)))
            .unwrap();
    }
}

/// Runs `create` in a transaction that drops its error and commits:
/// it must be `OutOfMemory`, and the pool's blocks must be as before.
fn refused_leaves_no_block<C>(
    p: &Pool,
    what: &str,
    create: impl Fn(&mut rewind::Tx<'_>) -> Result<C, Error>,
) {
    let before = allocated(p);
    p.transaction(|tx| {
        match create(tx) {
            Err(e) => assert!(is_oom(&e), "{what}: {e:?}"),
            Ok(_) => panic!("{what}: created in a full pool"),
        }
        Ok::<_, Error>(())
    })
    .unwrap();
    assert_eq!(allocated(p), before, "{what}: a block leaked");
}

fn pool(cfg: &PoolConfig) -> Pool {
    let cfg = cfg.clone().backend(rewind::Backend::Sim);
    Pool::create_sim("space-probe", 2 << 20, &cfg).unwrap()
}

/// A B+-tree's header and first leaf, a hash map's header and table, and
/// a blob's header and buffer (`create_from`) are two allocations: the
/// second refused took the first's block with it into the commit (a
/// header no handle leads to, never freed).
#[test]
fn a_create_refused_for_space_leaks_no_header() {
    for cfg in configs() {
        let who = name(&cfg);
        // Room for a header (256 bytes) and nothing else.
        let p = pool(&cfg);
        exhaust_but(&p, 256);
        refused_leaves_no_block(&p, &format!("{who} B+-tree"), |tx| {
            BTreeMap::<u64, u64>::create(tx)
        });
        let p = pool(&cfg);
        exhaust_but(&p, 256);
        refused_leaves_no_block(&p, &format!("{who} hash map"), |tx| {
            HashMap::<u64, u64>::create(tx)
        });
        let p = pool(&cfg);
        refused_leaves_no_block(&p, &format!("{who} blob"), |tx| {
            Blob::create_from(tx, &vec![7u8; 8 << 20])
        });
        // The space is usable: the header's block went back.
        let b = p.transaction(|tx| Blob::create_from(tx, b"ok")).unwrap();
        assert_eq!(b.read(&p).unwrap(), b"ok", "{who}");
    }
}

/// `retain` on a map of long string keys in a full pool: a removal that
/// shares entries between two leaves stores a new separator, which needs
/// a block. The removal refused for it ended `retain` with the removals
/// before it done (400 entries, 140 left, where the map as it was or as
/// `retain` makes it were the only answers).
#[test]
fn a_retain_refused_for_space_removes_nothing() {
    let mut committed = 0;
    for cfg in configs() {
        let who = name(&cfg);
        let p = pool(&cfg);
        let m = p
            .transaction(|tx| BTreeMap::<String, u64>::create_with_fanout(tx, 8))
            .unwrap();
        let key = |i: u64| format!("{}{i:06}", "x".repeat(40));
        for batch in 0..20 {
            p.transaction(|tx| {
                for i in batch * 20..batch * 20 + 20 {
                    m.insert(tx, key(i), i)?;
                }
                Ok::<_, Error>(())
            })
            .unwrap();
        }
        exhaust_but(&p, 0);
        let entries =
            |p: &Pool| -> Vec<(String, u64)> { m.iter(p).unwrap().map(|e| e.unwrap()).collect() };
        let (before, blocks) = (entries(&p), allocated(&p));
        // The log may not grow either (no free chunk): then the whole
        // transaction is refused, `LogFull`, rolled back.
        let r = p.transaction(|tx| match m.retain(tx, |_, v| v % 3 == 0) {
            Err(e) if is_oom(&e) => {
                assert_eq!(m.len_tx(tx)?, 400, "{who}: in the transaction");
                Ok::<_, Error>(())
            }
            Err(e) => Err(e),
            Ok(()) => panic!("{who}: retain went through in a full pool"),
        });
        match r {
            Ok(()) => committed += 1,
            Err(Error::Pool(rewind::Error::LogFull { .. })) => println!("{who}: log full"),
            Err(e) => panic!("{who}: {e:?}"),
        }
        assert_eq!(entries(&p), before, "{who}");
        assert_eq!(m.len(&p).unwrap(), 400, "{who}");
        m.check_invariants(&p).unwrap();
        assert_eq!(allocated(&p), blocks, "{who}: blocks");
        // A retain that needs no share goes through.
        p.transaction(|tx| m.retain(tx, |_, v| *v != 5)).unwrap();
        assert_eq!(m.len(&p).unwrap(), 399, "{who}");
        m.check_invariants(&p).unwrap();
    }
    assert!(committed >= 8, "{committed} configurations committed");
}
