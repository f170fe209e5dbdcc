//! Damaged headers and nodes (written on purpose through a transaction, at
//! the offsets `docs/collections.md` draws) give `Error::Corrupt`, never a
//! panic, an overflow or a huge allocation.

use rewind::{Pool, PoolConfig};
use rewind_collections::{BTreeMap, Blob, Error, HashMap, List, Vec as PVec};

fn pool() -> Pool {
    Pool::create_sim("damage", 4 << 20, &PoolConfig::default()).unwrap()
}

/// Overwrites the little-endian `u64` at `off`.
fn poke(pool: &Pool, off: u64, v: u64) {
    pool.transaction(|tx| tx.write_bytes(off, &v.to_le_bytes()))
        .unwrap();
}

fn corrupt<T: std::fmt::Debug>(r: Result<T, Error>) {
    assert!(matches!(r, Err(Error::Corrupt { .. })), "{r:?}");
}

#[test]
fn vec_with_a_capacity_past_the_pool() {
    let pool = pool();
    let v = pool
        .transaction(|tx| {
            let v = PVec::<u64>::create(tx)?;
            v.push(tx, 1)?;
            Ok::<_, Error>(v)
        })
        .unwrap();
    let hdr = v.as_ptr().offset();
    poke(&pool, hdr + 24, 1 << 40); // cap
    poke(&pool, hdr + 16, 1 << 40); // len
    corrupt(v.to_vec(&pool));
    corrupt(v.get(&pool, 3));
    poke(&pool, hdr + 24, u64::MAX); // cap × 8 overflows
    corrupt(v.len(&pool));
}

#[test]
fn blob_with_a_buffer_past_the_pool() {
    let pool = pool();
    let b = pool
        .transaction(|tx| Blob::create_from(tx, b"abc"))
        .unwrap();
    let hdr = b.as_ptr().offset();
    poke(&pool, hdr + 16, 1 << 50); // cap
    poke(&pool, hdr + 8, 1 << 50); // len
    corrupt(b.read(&pool));
    corrupt(pool.transaction(|tx| b.append(tx, b"d")));
    poke(&pool, hdr + 24, u64::MAX - 4); // buf: buf + cap overflows
    corrupt(b.len(&pool));
}

#[test]
fn hash_map_with_too_many_buckets() {
    let pool = pool();
    let m = pool.transaction(HashMap::<u64, u64>::create).unwrap();
    let hdr = m.as_ptr().offset();
    poke(&pool, hdr + 16, 1 << 40); // buckets
    corrupt(m.get(&pool, &1));
    corrupt(m.entries(&pool));
    poke(&pool, hdr + 16, 3); // not a power of two
    corrupt(m.len(&pool));
}

#[test]
fn list_whose_length_disagrees_with_its_chain() {
    let pool = pool();
    let l = pool
        .transaction(|tx| {
            let l = List::<u64>::create(tx)?;
            l.push_back(tx, 1)?;
            l.push_back(tx, 2)?;
            Ok::<_, Error>(l)
        })
        .unwrap();
    let hdr = l.as_ptr().offset();
    poke(&pool, hdr + 16, u64::MAX); // len
    corrupt(l.check_invariants(&pool));
    // A length past what the pool could hold is refused at the header
    // (before the scan), or the scan ends in the error.
    let all: Vec<_> = match l.iter(&pool) {
        Ok(it) => it.collect(),
        Err(e) => vec![Err(e)],
    };
    assert!(matches!(all.last(), Some(Err(Error::Corrupt { .. }))));
    corrupt(pool.transaction(|tx| l.push_back(tx, 3)));
    corrupt(l.get(&pool, 5)); // walks off the chain
    poke(&pool, hdr + 16, 0); // empty, with ends
    corrupt(l.len(&pool));
}

#[test]
fn btree_node_with_bits_past_the_fanout() {
    let pool = pool();
    let t = pool
        .transaction(|tx| {
            let t = BTreeMap::<u64, u64>::create_with_fanout(tx, 4)?;
            t.insert(tx, 1, 1)?;
            Ok::<_, Error>(t)
        })
        .unwrap();
    let hdr = t.as_ptr().offset();
    let mut root = [0u8; 8];
    pool.read_bytes(hdr + 16, &mut root).unwrap();
    let root = u64::from_le_bytes(root);
    // The bitmap (u64 at 24) with slots past the fan-out of 4.
    poke(&pool, root + 24, 0xff);
    corrupt(t.get(&pool, &1));
    corrupt(t.check_invariants(&pool));
    // The root pointing at itself as an inner node: a cycle, found.
    let mut node = [0u8; 24 + 4 * 8 + 5 * 8];
    node[0] = 2; // inner
    node[4] = 1; // one key
    node[24 + 4 * 8..24 + 4 * 8 + 8].copy_from_slice(&root.to_le_bytes());
    node[24 + 4 * 8 + 8..24 + 4 * 8 + 16].copy_from_slice(&root.to_le_bytes());
    pool.transaction(|tx| tx.write_bytes(root, &node)).unwrap();
    corrupt(t.get(&pool, &1));
    corrupt(t.check_invariants(&pool));
    corrupt(t.height(&pool));
    // An entry count of 0 with an entry in the leaf: removal says so.
    let pool = self::pool();
    let t = pool
        .transaction(|tx| {
            let t = BTreeMap::<u64, u64>::create(tx)?;
            t.insert(tx, 1, 1)?;
            Ok::<_, Error>(t)
        })
        .unwrap();
    poke(&pool, t.as_ptr().offset() + 8, 0);
    corrupt(pool.transaction(|tx| t.remove(tx, &1)));
}

/// A byte-string key's slot (docs/collections.md): its block pointer
/// null, past the pool, or at another block; its length past the pool.
/// Lookups, scans and removals give `Corrupt`.
#[test]
fn btree_with_a_damaged_out_of_line_key() {
    let key = b"a key longer than thirty-six bytes, so out of line".to_vec();
    let setup = || {
        let pool = pool();
        let m = pool
            .transaction(|tx| {
                let m = BTreeMap::<Vec<u8>, Vec<u8>>::create_with_fanout(tx, 4)?;
                m.insert(tx, key.clone(), vec![1; 40])?;
                Ok::<_, Error>(m)
            })
            .unwrap();
        let hdr = m.as_ptr().offset();
        let mut root = [0u8; 8];
        pool.read_bytes(hdr + 16, &mut root).unwrap();
        // Fan-out 4: the slots start at 40; the key's slot is slot 0
        // (len at +0, prefix at +4, block at +32), its value's at +40.
        let slot = u64::from_le_bytes(root) + 40;
        (pool, m, slot)
    };
    let checks = |pool: &Pool, m: BTreeMap<Vec<u8>, Vec<u8>>| {
        corrupt(m.get(pool, &key));
        corrupt(m.iter(pool).unwrap().collect::<Result<Vec<_>, _>>());
        corrupt(m.check_invariants(pool));
        corrupt(pool.transaction(|tx| m.remove(tx, &key)));
    };
    for block in [0, 1 << 40, u64::MAX - 8] {
        let (pool, m, slot) = setup();
        poke(&pool, slot + 32, block);
        checks(&pool, m);
    }
    // At another block (the value's): it does not start with the prefix.
    let (pool, m, slot) = setup();
    let mut val = [0u8; 8];
    pool.read_bytes(slot + 40 + 32, &mut val).unwrap();
    poke(&pool, slot + 32, u64::from_le_bytes(val));
    checks(&pool, m);
    // A length of 4 GiB: past the pool, refused before any buffer is made.
    let (pool, m, slot) = setup();
    pool.transaction(|tx| tx.write_bytes(slot, &u32::MAX.to_le_bytes()))
        .unwrap();
    corrupt(m.iter(&pool).unwrap().collect::<Result<Vec<_>, _>>());
    corrupt(m.check_invariants(&pool));
}
