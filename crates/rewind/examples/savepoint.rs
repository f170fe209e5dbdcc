//! The README's savepoint example: a partial rollback inside a transaction
//! that then commits.

use rewind::{PPtr, Pool, PoolConfig};

fn main() -> Result<(), rewind::Error> {
    let dir = std::env::temp_dir().join(format!("rewind-savepoint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| rewind::Error::Io {
        path: dir.clone(),
        source: std::sync::Arc::new(e),
    })?;
    let path = dir.join("savepoint.pool");
    let pool = Pool::open_or_create(&path, "savepoint", 4 << 20, &PoolConfig::default())?;

    let slot: PPtr<u64> = pool.transaction(|tx| tx.root())?;
    pool.transaction(|tx| {
        tx.write(slot, &1)?;
        let sp = tx.savepoint()?;
        tx.write(slot, &2)?;
        tx.rollback_to(sp)?; // slot is 1 again, crash-safe
        tx.write(slot, &3) // commits 3
    })?;
    assert_eq!(pool.read(slot)?, 3);
    println!("slot = {}", pool.read(slot)?);

    pool.close()?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
