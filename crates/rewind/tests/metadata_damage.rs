//! Every single-byte corruption of a pool's metadata is detected: `check`
//! reports a problem (or refuses the header), and opening never panics.
//!
//! Metadata classes: the header page, the meta page (root words, ADLL
//! words, reserved bytes), the chunk table (descriptors with their check
//! bytes, bitmap parity words, padding), the allocator bitmaps, and the
//! header words (prev, next, linked) of the log's list nodes, and the
//! two-layer log's tree node headers (left, right, height, check). Log records
//! themselves carry CRCs (see `bad_files.rs` and `damage.rs`). Two images
//! of each log variant: a cleanly closed pool, and a crash in the middle of
//! a no-force transaction (records in the log, recovery to run). Offsets
//! are exhaustive where words live and sampled (by a fixed stride) in the
//! zero-filled reserved areas; each byte is XORed with a seeded random
//! non-zero mask and with 0xff.

use std::panic::{catch_unwind, AssertUnwindSafe};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{Backend, LogVariant, PPtr, Policy, Pool, PoolConfig};

const LAYOUT: &str = "metadata-damage";

/// A pool with a root, small objects of three classes, one large object
/// and a freed block.
fn populated(v: LogVariant) -> (Pool, PPtr<u64>) {
    let cfg = PoolConfig::default()
        .log(v)
        .policy(Policy::NoForce)
        .backend(Backend::Sim)
        .bucket_cells(16);
    let pool = Pool::create_sim(LAYOUT, 2 << 20, &cfg).unwrap();
    let root = pool
        .transaction(|tx| tx.root::<[u64; 8]>())
        .unwrap()
        .cast::<u64>();
    pool.transaction(|tx| {
        for (i, size) in [40u64, 200, 3000, 300_000].into_iter().enumerate() {
            let p = tx.alloc_bytes(size)?;
            tx.write(root.at(i as u64), &p)?;
        }
        let gone = tx.alloc_bytes(64)?;
        tx.free(PPtr::<u8>::from_offset(gone))
    })
    .unwrap();
    (pool, root)
}

/// The image to damage and its metadata ranges: with `in_flight`, taken
/// inside a transaction that allocated, freed and wrote (records in the
/// log, recovery to run); else what a clean reopen sees (an empty log).
fn image(v: LogVariant, in_flight: bool) -> (Vec<u8>, Vec<(u64, u64, &'static str)>) {
    let (pool, root) = populated(v);
    if !in_flight {
        pool.checkpoint().unwrap();
        let img = pool.domain().with_sim(|s| s.image_all_pending()).unwrap();
        // Recovering the image empties the log, as a clean close would.
        let reopened = Pool::open_image(img, LAYOUT).unwrap();
        let img = reopened
            .domain()
            .with_sim(|s| s.image_all_pending())
            .unwrap();
        let ranges = metadata_ranges(&reopened, &img);
        return (img, ranges);
    }
    let mut img = Vec::new();
    let _ = pool.transaction(|tx| {
        let p = tx.alloc_bytes(100)?;
        tx.write(root.at(5), &p)?;
        let old = tx.read(root.at(0))?;
        tx.free(PPtr::<u8>::from_offset(old))?;
        tx.write(root.at(0), &0u64)?;
        img = pool.domain().with_sim(|s| s.image_all_pending()).unwrap();
        Err::<(), _>(rewind::Error::TxMisuse("crash here"))
    });
    let ranges = metadata_ranges(&pool, &img);
    (img, ranges)
}

/// `(start, end, class)` of every metadata byte range of the image.
fn metadata_ranges(pool: &Pool, img: &[u8]) -> Vec<(u64, u64, &'static str)> {
    let l = *pool.layout();
    let mut v = vec![
        (0, 4096, "header"),
        (4096, 8192, "meta page"),
        (l.alloc_off, l.bitmap_off, "chunk table"),
        (l.bitmap_off, l.bitmap_off + l.heap_chunks * 512, "bitmaps"),
    ];
    // List nodes: walk from the head in the image.
    let word = |o: u64| u64::from_le_bytes(img[o as usize..o as usize + 8].try_into().unwrap());
    let mut n = word(4096 + 64);
    while n != 0 {
        v.push((n, n + 24, "list node header"));
        n = word(n + 8);
    }
    // Two-layer: the tree's node headers (left, right, height, check), from
    // the root word.
    let mut stack = vec![word(rewind::log::tree::ROOT)];
    while let Some(n) = stack.pop() {
        if n != 0 {
            v.push((n, n + rewind::log::tree::NODE, "tree node header"));
            stack.push(word(n));
            stack.push(word(n + 8));
        }
    }
    v
}

/// Offsets to corrupt in a range: every byte where words live, a stride
/// through long zero-filled stretches.
fn offsets(start: u64, end: u64, img: &[u8]) -> Vec<u64> {
    (start..end)
        .filter(|&o| {
            let in_zero_run =
                o >= start + 256 && img[(o - o % 64) as usize..][..64].iter().all(|&b| b == 0);
            !in_zero_run || o % 61 == 0
        })
        .collect()
}

/// What recovery makes of an image: the recovered bytes.
fn recovered(img: &[u8]) -> Option<Vec<u8>> {
    let pool = Pool::open_image(img.to_vec(), LAYOUT).ok()?;
    pool.domain().with_sim(|s| s.image_all_pending())
}

/// Detected by `check`, or refused by open, or healed: recovery rewrote the
/// damaged byte from the log and the recovered pool is byte for byte the
/// one the undamaged image recovers to.
fn detected(img: &[u8], good: &[u8]) -> Result<bool, String> {
    catch_unwind(AssertUnwindSafe(|| {
        let checked = rewind::inspect::check_image(img);
        match checked {
            Err(_) => true,
            Ok(r) if !r.is_ok() => true,
            Ok(_) => match recovered(img) {
                None => true,
                Some(rec) => rec == good,
            },
        }
    }))
    .map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

#[test]
fn every_single_byte_metadata_corruption_is_detected() {
    let mut rng = SmallRng::seed_from_u64(0x5eed);
    let mut total = 0;
    let mut missed = Vec::new();
    for v in LogVariant::ALL {
        for in_flight in [false, true] {
            let (img, ranges) = image(v, in_flight);
            let base = rewind::inspect::check_image(&img).unwrap();
            assert!(
                base.is_ok(),
                "{v} in_flight={in_flight}: undamaged image: {base}"
            );
            let good = recovered(&img).expect("the undamaged image recovers");
            for &(start, end, class) in &ranges {
                for off in offsets(start, end, &img) {
                    let mask = rng.gen_range(1..=u8::MAX);
                    for m in [mask, 0xff] {
                        let mut bad = img.clone();
                        bad[off as usize] ^= m;
                        total += 1;
                        match detected(&bad, &good) {
                            Ok(true) => {}
                            Ok(false) => missed.push(format!(
                                "{v} in_flight={in_flight} {class} offset {off:#x} ^ {m:#04x}"
                            )),
                            Err(panic) => panic!(
                                "{v} in_flight={in_flight} {class} offset {off:#x} ^ {m:#04x}: panic: {panic}"
                            ),
                        }
                    }
                }
            }
        }
    }
    println!("{total} corruptions, {} missed", missed.len());
    assert!(
        missed.is_empty(),
        "{} of {total} undetected, e.g. {:#?}",
        missed.len(),
        &missed[..missed.len().min(20)]
    );
}
