//! The structured corruptions that passed as healthy in format version 5
//! (issue 21's black-box cases), each of which must now be refused by open
//! or reported by `check`:
//!
//! * two all-ones bitmap words zeroed (their XOR parities cancelled);
//! * other changes of two bitmap words, sampled;
//! * a raised redo-async Log Start word (recovery would skip committed
//!   transactions; at `u64::MAX` a debug build overflowed);
//! * a zeroed root line, and everything after the header zeroed (read as
//!   an empty pool);
//! * a `cp` of a live pool file (its open stamp names another file).
//!
//! The summary line counts "opened and passed check": it must be 0.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{PPtr, Policy, Pool, PoolConfig};

const LAYOUT: &str = "structured-damage";

fn word(img: &[u8], off: u64) -> u64 {
    u64::from_le_bytes(img[off as usize..off as usize + 8].try_into().unwrap())
}

fn put(img: &mut [u8], off: u64, v: u64) {
    img[off as usize..off as usize + 8].copy_from_slice(&v.to_le_bytes());
}

/// A cleanly recovered image of a pool holding a root and 300 blocks of
/// 64 bytes (more than four all-ones bitmap words of one chunk).
fn populated(policy: Policy) -> (Vec<u8>, rewind::format::layout::Layout) {
    let cfg = PoolConfig::default().policy(policy);
    let pool = Pool::create_sim(LAYOUT, 4 << 20, &cfg).unwrap();
    let root: PPtr<[u64; 4]> = pool.transaction(|tx| tx.root()).unwrap();
    pool.transaction(|tx| {
        for i in 0..300u64 {
            let p = tx.alloc::<u64>()?;
            tx.write(p, &i)?;
            if i < 4 {
                tx.write(root.cast::<u64>().at(i), &p.offset())?;
            }
        }
        Ok::<_, rewind::Error>(())
    })
    .unwrap();
    pool.sync().unwrap();
    while pool.write_back_step().unwrap() {}
    let layout = *pool.layout();
    let img = pool.domain().with_sim(|s| s.image_all_pending()).unwrap();
    drop(pool);
    let reopened = Pool::open_image(img, LAYOUT).unwrap();
    let img = reopened
        .domain()
        .with_sim(|s| s.image_all_pending())
        .unwrap();
    (img, layout)
}

/// True when the damage is caught: open refuses it or check reports it.
fn caught(img: &[u8]) -> bool {
    let checked = match rewind::inspect::check_image(img) {
        Err(_) => return true,
        Ok(r) => !r.is_ok(),
    };
    let opened = Pool::open_image(img.to_vec(), LAYOUT).is_ok();
    checked || !opened
}

#[test]
fn structured_corruptions_never_pass_as_healthy() {
    let mut passed = Vec::new();
    let mut cases = 0;
    let mut case = |what: String, img: &[u8]| {
        cases += 1;
        if !caught(img) {
            passed.push(what);
        }
    };
    let (img, l) = populated(Policy::Force);
    assert!(!caught(&img), "the undamaged image must open and check");
    // The first class-0 chunk holds the 300 blocks: its first words are all ones.
    let bitmaps = l.bitmap_off;
    let chunk = (0..l.heap_chunks)
        .find(|c| word(&img, bitmaps + c * 512) == u64::MAX)
        .expect("a chunk with a full bitmap word");
    let base = bitmaps + chunk * 512;
    let mut bad = img.clone();
    put(&mut bad, base, 0);
    put(&mut bad, base + 8, 0);
    case("two all-ones bitmap words zeroed".into(), &bad);
    // Sampled changes of two words anywhere in that bitmap.
    let mut rng = SmallRng::seed_from_u64(0x2b1d);
    let mut next = || rng.gen::<u64>();
    for _ in 0..300 {
        let (i, j) = (next() % 64, next() % 64);
        let mut bad = img.clone();
        let (wi, wj) = (word(&img, base + i * 8), word(&img, base + j * 8));
        let (xi, xj) = (next() | 1, next() | 1);
        put(&mut bad, base + i * 8, wi ^ xi);
        if i != j {
            put(&mut bad, base + j * 8, wj ^ xj);
        }
        case(format!("bitmap words {i} and {j} changed"), &bad);
    }
    // A zeroed root line; everything after the header zeroed.
    let mut bad = img.clone();
    bad[4096..4120].fill(0);
    case("zeroed root line".into(), &bad);
    let mut bad = img.clone();
    bad[4096..].fill(0);
    case("everything after the header zeroed".into(), &bad);
    let mut bad = img.clone();
    bad[4096..8192].fill(0);
    case("zeroed meta page".into(), &bad);

    // Redo-async: committed groups wait in the log above Log Start.
    let cfg = PoolConfig::default().policy(Policy::RedoAsync);
    let pool = Pool::create_sim(LAYOUT, 4 << 20, &cfg).unwrap();
    let root: PPtr<u64> = pool.transaction(|tx| tx.root()).unwrap();
    for i in 0..30u64 {
        pool.transaction(|tx| tx.write(root, &i)).unwrap();
    }
    let img = pool.domain().with_sim(|s| s.image_all_pending()).unwrap();
    drop(pool);
    assert!(
        !caught(&img),
        "the undamaged redo-async image must open and check"
    );
    let start = word(&img, 4352);
    for raised in [start + 22, start + (22 << 8), u64::MAX, start | 1 << 40] {
        let mut bad = img.clone();
        put(&mut bad, 4352, raised);
        case(format!("Log Start {start:#x} raised to {raised:#x}"), &bad);
    }
    println!(
        "structured damage: {cases} cases, {} opened and passed check",
        passed.len()
    );
    assert!(passed.is_empty(), "passed as healthy: {passed:#?}");
}

#[test]
fn a_cp_of_a_live_pool_is_flagged_by_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.pool");
    let copy = dir.path().join("copy.pool");
    let pool = Pool::create(&path, LAYOUT, 4 << 20, &PoolConfig::default()).unwrap();
    let root: PPtr<u64> = pool.transaction(|tx| tx.root()).unwrap();
    pool.transaction(|tx| tx.write(root, &1)).unwrap();
    std::fs::copy(&path, &copy).unwrap(); // what `cp` does, the pool open
    let report = rewind::inspect::check(&copy).unwrap();
    assert!(!report.is_ok(), "{report}");
    assert!(report.to_string().contains("copy"), "{report}");
    drop(pool);
    // The closed original checks clean, and so does a copy of it.
    assert!(rewind::inspect::check(&path).unwrap().is_ok());
    std::fs::copy(&path, &copy).unwrap();
    assert!(rewind::inspect::check(&copy).unwrap().is_ok());
}
