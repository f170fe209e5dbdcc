use rewind::{PPtr, Pool, PoolConfig};
use rewind_collections::{BTreeMap, Error};

fn main() -> Result<(), Error> {
    let path = std::env::temp_dir().join("balances.pool");
    // Opens (running recovery first) or creates a 64 MiB pool.
    let pool = Pool::open_or_create(&path, "balances", 64 << 20, &PoolConfig::default())?;
    let accounts = pool.transaction(|tx| {
        // String keys of any length, ordered by their bytes.
        let root: PPtr<PPtr<BTreeMap<String, u64>>> = tx.root()?; // zeroed on first use
        let mut map = tx.read(root)?;
        if map.is_null() {
            map = BTreeMap::create(tx)?.as_ptr(); // the tree lives in the pool
            tx.write(root, &map)?;
        }
        Ok::<_, Error>(BTreeMap::from_ptr(map))
    })?;
    pool.transaction(|tx| {
        let a = accounts.get_tx(tx, "alice")?.unwrap_or(100);
        let b = accounts.get_tx(tx, "bob")?.unwrap_or(0);
        let amount = a.min(10);
        accounts.insert(tx, "alice".into(), a - amount)?; // logged, then stored in place
        accounts.insert(tx, "bob".into(), b + amount) // Ok => commit; Err or panic => rollback
    })?;
    for entry in accounts.iter(&pool)? {
        let (name, balance) = entry?;
        println!("{name}: {balance}");
    }
    Ok(pool.close()?) // or drop it; close reports errors
}
