//! Threads committing K-update transactions, each on an array of its own
//! in one pool, for profiling the concurrent commit
//! (`perf record cargo run --release --example threadloop`).
//! Usage: threadloop [policy] [threads] [K] [transactions per thread]
//! [backend] [directory] [pools] [lanes] (`msync` and a directory on a
//! disk: group commit; `pools`: `one`, the default, or `each`, a pool per
//! thread, which share nothing: the bound of what per-thread log lanes
//! could give; `lanes`: the pools' commit lanes, 1 for one ring that
//! every thread shares)
//!
//! Prints the wall time per transaction and each thread's CPU time per
//! transaction: on a machine with a core per thread, threads that never
//! wait for each other spend the same CPU time per transaction as one
//! thread alone, whatever the load makes of the wall time.

use rand::{rngs::StdRng, Rng, SeedableRng};
use rewind::{Backend, Policy, Pool, PoolConfig};

/// This thread's CPU time so far, in seconds.
fn cpu_now() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

fn main() -> Result<(), rewind::Error> {
    let a: Vec<String> = std::env::args().collect();
    let policy: Policy = a.get(1).map_or("redo", |s| s).parse()?;
    let threads: usize = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(2);
    let k: u64 = a.get(3).and_then(|s| s.parse().ok()).unwrap_or(4);
    let n: u64 = a.get(4).and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let backend: Backend = a.get(5).map_or("pmem", |s| s).parse()?;
    let dir = a.get(6).map_or("/dev/shm", |s| s);
    let each = a.get(7).is_some_and(|s| s == "each");
    let mut cfg = PoolConfig::default().policy(policy).backend(backend);
    // Commit lanes (default: the pool's; 1 is one ring for every thread).
    if let Some(n) = a.get(8).and_then(|s| s.parse().ok()) {
        cfg = cfg.lanes(n);
    }
    let pools = (0..if each { threads } else { 1 })
        .map(|i| {
            let name = format!("threadloop-{}-{i}.pool", std::process::id());
            let path = std::path::Path::new(dir).join(name);
            let pool = Pool::create(&path, "threadloop", 256 << 20, &cfg)?;
            let _ = std::fs::remove_file(&path);
            Ok(pool)
        })
        .collect::<Result<Vec<_>, rewind::Error>>()?;
    let pool_of = |i: usize| &pools[i % pools.len()];
    // On a disk, few pages (as `bench group-commit`'s 4,096 rows).
    let m: u64 = if backend == Backend::Msync {
        512
    } else {
        1 << 18
    };
    let arrays = (0..threads)
        .map(|i| pool_of(i).transaction(|tx| tx.alloc_array::<u64>(m)))
        .collect::<Result<Vec<_>, _>>()?;
    let counters =
        || (pools.iter().map(Pool::counters)).fold(rewind::Counters::default(), |a, b| a + b);
    let c0 = counters();
    let barrier = std::sync::Barrier::new(threads);
    let t = std::time::Instant::now();
    let cpu: Vec<f64> = std::thread::scope(|s| {
        let hs: Vec<_> = (arrays.iter().enumerate())
            .map(|(i, &arr)| {
                let (pool, barrier) = (pool_of(i), &barrier);
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(i as u64);
                    let idx: Vec<u64> = (0..n * k).map(|_| rng.gen_range(0..m)).collect();
                    barrier.wait();
                    let c = cpu_now();
                    for (v, ix) in (0..n).zip(idx.chunks_exact(k as usize)) {
                        pool.transaction(|tx| {
                            for &j in ix {
                                tx.write(arr.at(j), &v)?;
                            }
                            Ok::<_, rewind::Error>(())
                        })?;
                    }
                    Ok::<_, rewind::Error>(cpu_now() - c)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("a thread panicked"))
            .collect::<Result<_, _>>()
    })?;
    // The counters of the commits (the drain at `sync` is one large
    // device flush on Msync).
    let c = counters().since(&c0);
    for pool in &pools {
        pool.sync()?;
    }
    let el = t.elapsed();
    let total = n * threads as u64;
    println!(
        "{policy} threads={threads} K={k}: {:.0} tx/s, {:.3} us/tx wall, cpu us/tx per thread {:?}, {:.2} fences/tx, {:.2} device flushes/tx, {:.1} pages/flush, {:.3} order waits/tx, {:.4} parks/tx, {:.3} written back ahead/tx",
        total as f64 / el.as_secs_f64(),
        el.as_secs_f64() * 1e6 / total as f64,
        cpu.iter()
            .map(|c| (c * 1e6 / n as f64 * 1000.0).round() / 1000.0)
            .collect::<Vec<_>>(),
        c.fences as f64 / total as f64,
        c.device_flushes as f64 / total as f64,
        c.synced_pages as f64 / c.device_flushes.max(1) as f64,
        c.order_waits as f64 / total as f64,
        c.order_parks as f64 / total as f64,
        c.ahead_write_backs as f64 / total as f64,
    );
    Ok(())
}
