//! Several threads change two collections, each change one transaction,
//! sharing the handles with no lock of their own: every collection
//! operation locks its collection until the transaction ends (strict
//! two-phase locking), so the transactions are serializable. The workers
//! touch the map, then the list, in one order, so they cannot deadlock. A
//! reader checks in a transaction (whose `_tx` reads lock shared) that the
//! map and the list agree, which they do only between transactions. The
//! counts are checked at the end, and again after reopening.
//!
//! `cargo run -p rewind-collections --example threads`

use std::sync::atomic::{AtomicBool, Ordering};

use rewind::{OpenOptions, PPtr, Pod, Pool, PoolConfig, Zeroable};
use rewind_collections::{BTreeMap, Error, List};

const THREADS: u64 = 4;
const PER_THREAD: u64 = 500;

/// The root object: where the collections are found after reopening.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct Root {
    map: PPtr<BTreeMap<u64, u64>>,
    log: PPtr<List<u64>>,
}

fn main() -> Result<(), Error> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("threads.pool");
    let pool = Pool::create(&path, "threads", 32 << 20, &PoolConfig::default())?;
    let (map, log) = pool.transaction(|tx| {
        let map = BTreeMap::<u64, u64>::create(tx)?;
        let log = List::<u64>::create(tx)?;
        let root = tx.root::<Root>()?;
        tx.write(
            root,
            &Root {
                map: map.as_ptr(),
                log: log.as_ptr(),
            },
        )?;
        Ok::<_, Error>((map, log))
    })?;
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (pool, map, log, done) = (&pool, &map, &log, &done);
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                s.spawn(move || -> Result<(), Error> {
                    for i in 0..PER_THREAD {
                        let k = i * THREADS + t;
                        pool.transaction(|tx| {
                            map.insert(tx, k, t)?;
                            log.push_back(tx, k)
                        })?;
                    }
                    Ok(())
                })
            })
            .collect();
        let reader = s.spawn(move || -> Result<u64, Error> {
            let mut reads = 0;
            while !done.load(Ordering::Relaxed) {
                let (n, m) =
                    pool.transaction(|tx| Ok::<_, Error>((map.len_tx(tx)?, log.len_tx(tx)?)))?;
                assert_eq!(n, m, "a reader saw half a transaction");
                reads += 1;
                std::thread::yield_now();
            }
            Ok(reads)
        });
        let written: Result<(), Error> = workers
            .into_iter()
            .try_for_each(|w| w.join().expect("worker panicked"));
        done.store(true, Ordering::Relaxed);
        let reads = reader.join().expect("reader panicked")?;
        written?;
        println!("a reader took {reads} consistent snapshots");
        Ok::<_, Error>(())
    })?;
    assert_eq!(map.len(&pool)?, THREADS * PER_THREAD);
    map.check_invariants(&pool)?;
    log.check_invariants(&pool)?;
    pool.close()?;

    let pool = Pool::open(&path, "threads", &OpenOptions::default())?;
    let root: Root = pool.read(pool.root().unwrap().unwrap())?;
    let (map, log) = (BTreeMap::from_ptr(root.map), List::from_ptr(root.log));
    let keys: Vec<u64> = map
        .iter(&pool)?
        .map(|e| e.map(|(k, _)| k))
        .collect::<Result<_, _>>()?;
    assert_eq!(keys, (0..THREADS * PER_THREAD).collect::<Vec<_>>());
    let mut logged: Vec<u64> = log.iter(&pool)?.collect::<Result<_, _>>()?;
    logged.sort_unstable();
    assert_eq!(logged, keys);
    println!(
        "{THREADS} threads inserted {} entries and logged each; tree height {}",
        keys.len(),
        map.height(&pool)?
    );
    Ok(())
}
