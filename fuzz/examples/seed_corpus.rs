//! Writes valid pool images with layout `fuzz` into `corpus/open_pool/`, so
//! the fuzzer starts past the header checksum: every log variant and policy,
//! after committed and aborted transactions, and mid-transaction (records
//! of an unfinished transaction in the log).
//!
//! `cargo run --manifest-path fuzz/Cargo.toml --example seed_corpus`

use std::path::Path;

use rewind::{Backend, Error, LogVariant, PPtr, Policy, Pool, PoolConfig};

/// The smallest pool `create` accepts keeps each input (and each run) small.
const SIZES: [u64; 2] = [1 << 20, 2 << 20];

fn pool(log: LogVariant, policy: Policy) -> Pool {
    let cfg = PoolConfig::default().log(log).policy(policy).backend(Backend::Sim).bucket_cells(8).log_size(128 << 10);
    SIZES
        .iter()
        .find_map(|&size| Pool::create_sim("fuzz", size, &cfg).ok())
        .expect("create a pool")
}

fn work(pool: &Pool, round: u64) -> Result<(), Error> {
    pool.transaction(|tx| {
        let root: PPtr<[u64; 4]> = tx.root()?;
        let mut v = tx.read(root)?;
        v[(round % 4) as usize] = round;
        if v[3] != 0 && round % 3 == 0 {
            tx.free(PPtr::<u8>::from_offset(v[3]))?;
            v[3] = 0;
        } else if v[3] == 0 {
            v[3] = tx.alloc_bytes(64 + 40 * round)?;
        }
        tx.write(root, &v)?;
        if round % 4 == 3 {
            return Err(Error::TxMisuse("aborted on purpose"));
        }
        Ok(())
    })
}

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/open_pool");
    std::fs::create_dir_all(&dir).expect("create corpus/open_pool");
    let mut n = 0;
    for log in LogVariant::ALL {
        for policy in Policy::ALL {
            let p = pool(log, policy);
            for round in 0..6 {
                let _ = work(&p, round);
            }
            let img = p.domain().with_sim(|s| s.image_all_pending()).expect("sim");
            let mut mid = None;
            let _ = p.transaction(|tx| {
                let root: PPtr<[u64; 4]> = tx.root()?;
                tx.write(root, &[7, 8, 9, 0])?;
                tx.alloc_bytes(300)?;
                mid = p.domain().with_sim(|s| s.image_all_pending());
                Err::<(), _>(Error::TxMisuse("aborted on purpose"))
            });
            for (what, bytes) in [("after", Some(img)), ("mid", mid)] {
                let bytes = bytes.expect("an image");
                let name = format!("{log}-{policy}-{what}.pool");
                std::fs::write(dir.join(&name), bytes).expect("write a seed");
                n += 1;
            }
        }
    }
    println!("wrote {n} seeds to {}", dir.display());
}
