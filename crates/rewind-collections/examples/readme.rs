use rewind::{PPtr, Pool, PoolConfig};
use rewind_collections::{BTreeMap, Error, FixedBytes};

type Name = FixedBytes<32>; // a byte string of up to 32 bytes, ordered by its bytes

fn main() -> Result<(), Error> {
    let path = std::env::temp_dir().join("accounts.pool");
    // Opens (running recovery first) or creates a 64 MiB pool.
    let pool = Pool::open_or_create(&path, "accounts", 64 << 20, &PoolConfig::default())?;
    let accounts = pool.transaction(|tx| {
        let root: PPtr<PPtr<BTreeMap<Name, u64>>> = tx.root()?; // zeroed on first use
        let mut map = tx.read(root)?;
        if map.is_null() {
            map = BTreeMap::create(tx)?.as_ptr(); // the tree lives in the pool
            tx.write(root, &map)?;
        }
        Ok::<_, Error>(BTreeMap::from_ptr(map))
    })?;
    pool.transaction(|tx| {
        let (alice, bob) = (Name::new("alice")?, Name::new("bob")?);
        let a = accounts.get_tx(tx, &alice)?.unwrap_or(100);
        let b = accounts.get_tx(tx, &bob)?.unwrap_or(0);
        let amount = a.min(10);
        accounts.insert(tx, alice, a - amount)?; // logged, then stored in place
        accounts.insert(tx, bob, b + amount) // Ok => commit; Err or panic => rollback
    })?;
    for entry in accounts.iter(&pool)? {
        let (name, balance) = entry?;
        println!("{name}: {balance}");
    }
    Ok(pool.close()?) // or drop it; close reports errors
}
