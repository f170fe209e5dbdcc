//! Several threads insert into one B+-tree, each insert its own
//! transaction. rewind makes transactions atomic and durable, not
//! isolated: the map's handle sits behind a mutex that each thread holds
//! for the whole transaction, so no two transactions change the tree at
//! once. The count is checked at the end, and again after reopening.
//!
//! `cargo run -p rewind-collections --example threads`

use parking_lot::Mutex;
use rewind::{OpenOptions, PPtr, Pool, PoolConfig};
use rewind_collections::{BTreeMap, Error};

const THREADS: u64 = 4;
const PER_THREAD: u64 = 500;

fn main() -> Result<(), Error> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("threads.pool");
    let pool = Pool::create(&path, "threads", 32 << 20, &PoolConfig::default())?;
    let map = pool.transaction(|tx| {
        let map = BTreeMap::<u64, u64>::create(tx)?;
        let root = tx.root::<PPtr<BTreeMap<u64, u64>>>()?;
        tx.write(root, &map.as_ptr())?;
        Ok::<_, Error>(map)
    })?;
    // One lock per collection, held across each whole transaction.
    let map = Mutex::new(map);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (pool, map) = (&pool, &map);
                s.spawn(move || -> Result<(), Error> {
                    for i in 0..PER_THREAD {
                        let map = map.lock();
                        pool.transaction(|tx| map.insert(tx, i * THREADS + t, t))?;
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().expect("worker panicked"))
    })?;
    let map = map.into_inner();
    assert_eq!(map.len(&pool)?, THREADS * PER_THREAD);
    map.check_invariants(&pool)?;
    pool.close()?;

    let pool = Pool::open(&path, "threads", &OpenOptions::default())?;
    let map = BTreeMap::<u64, u64>::from_ptr(pool.read(pool.root().unwrap().unwrap())?);
    assert_eq!(map.len(&pool)?, THREADS * PER_THREAD);
    let keys: Vec<u64> = map
        .iter(&pool)?
        .map(|e| e.map(|(k, _)| k))
        .collect::<Result<_, _>>()?;
    assert_eq!(keys, (0..THREADS * PER_THREAD).collect::<Vec<_>>());
    println!(
        "{THREADS} threads inserted {} entries; height {}",
        keys.len(),
        map.height(&pool)?
    );
    Ok(())
}
