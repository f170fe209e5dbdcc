//! A tight loop of K-update transactions on one configuration, for
//! profiling (`perf record cargo run --release --example txloop`).
//! Usage: txloop [variant] [policy] [K] [transactions] [commit|abort]
//!
//! With `abort`, each transaction makes its K writes and rolls back: the
//! time of the transaction's begin, its writes into the write set and its
//! end, without the commit (no log lines, no fence, nothing stored in
//! place). Beside a run that commits, it splits a transaction's time
//! between the writes and the commit.

use rand::{rngs::StdRng, Rng, SeedableRng};
use rewind::{LogVariant, Policy, Pool, PoolConfig};

fn main() -> Result<(), rewind::Error> {
    let a: Vec<String> = std::env::args().collect();
    let variant: LogVariant = a.get(1).map_or("batch", |s| s).parse()?;
    let policy: Policy = a.get(2).map_or("force", |s| s).parse()?;
    let k: u64 = a.get(3).and_then(|s| s.parse().ok()).unwrap_or(8);
    let n: u64 = a.get(4).and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let abort = match a.get(5).map(String::as_str) {
        None | Some("commit") => false,
        Some("abort") => true,
        Some(other) => {
            eprintln!("txloop: the fifth argument is `commit` or `abort`, not {other:?}");
            std::process::exit(2);
        }
    };
    let path = std::path::Path::new("/dev/shm").join(format!("txloop-{}.pool", std::process::id()));
    let cfg = PoolConfig::default().log(variant).policy(policy);
    let pool = Pool::create(&path, "txloop", 64 << 20, &cfg)?;
    let _ = std::fs::remove_file(&path);
    const M: u64 = 1 << 20;
    let arr = pool.transaction(|tx| tx.alloc_array::<u64>(M))?;
    // The indices are drawn before the loop: a profile shows the
    // transactions, not the random number generator.
    let mut rng = StdRng::seed_from_u64(1);
    let idx: Vec<u64> = (0..n * k).map(|_| rng.gen_range(0..M)).collect();
    let c0 = pool.counters();
    let t = std::time::Instant::now();
    for (i, ix) in (0..n).zip(idx.chunks_exact(k as usize)) {
        let r = pool.transaction(|tx| {
            for &j in ix {
                tx.write(arr.at(j), &i)?;
            }
            match abort {
                true => Err(rewind::Error::Aborted),
                false => Ok(()),
            }
        });
        match r {
            Err(rewind::Error::Aborted) if abort => {}
            r => r?,
        }
    }
    let commits = t.elapsed();
    // Redo-async: the run ends when write-back has caught up.
    pool.sync()?;
    let el = t.elapsed();
    let c = pool.counters().since(&c0);
    println!(
        "{variant}-{policy} K={k}{}: {:.3} us/tx ({:.3} until the last commit), {:.2} fences/tx, {:.2} flushed + {:.2} nt lines/tx",
        if abort { " (rolled back)" } else { "" },
        el.as_secs_f64() * 1e6 / n as f64,
        commits.as_secs_f64() * 1e6 / n as f64,
        c.fences as f64 / n as f64,
        c.flushed_lines as f64 / n as f64,
        c.nt_lines as f64 / n as f64
    );
    Ok(())
}
