//! Threads whose transactions only lock objects of their own (three locks
//! each, no write): the lock table's cost, and whether threads that share
//! no object meet in it (`perf record cargo run --release --example
//! lockloop`). With one latch over the whole table two threads took three
//! to seven times one thread's time per transaction on the 2-core VM; with
//! the table in shards they take about one thread's.
//! Usage: lockloop [threads] [transactions per thread]

use rewind::{Pool, PoolConfig};

fn main() -> Result<(), rewind::Error> {
    let a: Vec<String> = std::env::args().collect();
    let threads: usize = a.get(1).and_then(|s| s.parse().ok()).unwrap_or(2);
    let n: u64 = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(500_000);
    let dir = match std::path::Path::new("/dev/shm") {
        d if d.is_dir() => d.to_path_buf(),
        _ => std::env::temp_dir(),
    };
    let path = dir.join(format!("lockloop-{}.pool", std::process::id()));
    let pool = Pool::create(&path, "lockloop", 64 << 20, &PoolConfig::default())?;
    let _ = std::fs::remove_file(&path);
    let objects = (0..threads)
        .map(|_| pool.transaction(|tx| tx.alloc_array::<u64>(64)))
        .collect::<Result<Vec<_>, _>>()?;
    let t = std::time::Instant::now();
    std::thread::scope(|s| {
        let runs: Vec<_> = (objects.iter())
            .map(|&o| {
                let pool = &pool;
                s.spawn(move || {
                    (0..n).try_for_each(|_| {
                        pool.transaction(|tx| {
                            tx.lock(o.at(0))?;
                            tx.lock(o.at(8))?;
                            tx.lock_shared(o.at(16))
                        })
                    })
                })
            })
            .collect();
        runs.into_iter()
            .try_for_each(|r| r.join().expect("a thread panicked"))
    })?;
    let c = pool.counters();
    println!(
        "{threads} thread(s): {:.3} us per transaction per thread, {} lock waits",
        t.elapsed().as_secs_f64() * 1e6 / n as f64,
        c.lock_waits
    );
    Ok(())
}
