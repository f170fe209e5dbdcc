//! Proof that the crash explorer can fail: with any one non-redundant
//! ordering point of the engine disabled, exploration must report a
//! violation within a fixed budget of crash images (it stops at the first).
//! The budget is a count, not a time: programs, crash points and images are
//! drawn from fixed seeds, so the outcome is the same on any machine, loaded
//! or not. Redundant sites carry their reason in `persist/sites.rs`.
//!
//! Each site is explored in the configurations and program shapes aimed at
//! it (`crashtest::aim`). With seed 1 the most any site needs is 19,068
//! images (`ring.recover.applied`, since commits write their values back in
//! batches; the table is in `docs/testing.md`); the budget is 24,000.

use rewind::crashtest::{explore, Budget, Options, Shape};
use rewind::persist::sites;

/// Crash images each mutation may take to be detected.
const BUDGET: u64 = 24_000;

/// Programs of the unmutated engine explored: one per configuration
/// (variant × policy, one thread and two), of at most this many transactions
/// (per thread).
const UNMUTATED_TX: u64 = 4;

#[test]
fn every_non_redundant_ordering_point_is_needed() {
    let mut missed = Vec::new();
    let mut worst = (0, "");
    for info in sites::ALL.iter().filter(|s| s.redundant.is_none()) {
        let opts = Options {
            threads: 2,
            ..Options::all(1, Budget::Images(BUDGET), Some(info.site))
        };
        let stats = explore(&opts, &|_| {}).expect("exploration runs");
        match stats.detected_at {
            Some(n) => {
                println!("{:<28} detected after {n:>6} images", info.site.0);
                worst = worst.max((n, info.site.0));
            }
            None => {
                println!(
                    "{:<28} NOT detected in {} images",
                    info.site.0, stats.images
                );
                missed.push(info.site.0);
            }
        }
    }
    println!(
        "most images to detection: {} ({}); budget {BUDGET}",
        worst.0, worst.1
    );
    assert!(missed.is_empty(), "mutations not detected: {missed:?}");
}

#[test]
fn the_unmutated_engine_has_no_violations() {
    let mut opts = Options::all(7, Budget::Programs(0), None);
    // Reuse programs fill the heap first (a Simple one alone checks tens
    // of thousands of images): `tests/crash_regressions.rs` replays two.
    opts.configs.retain(|c| c.shape != Shape::Reuse);
    opts.threads = 2;
    opts.budget = Budget::Programs(opts.configs.len() as u64);
    for c in &mut opts.configs {
        c.max_tx = c.max_tx.min(UNMUTATED_TX);
    }
    assert!(opts.configs.iter().any(|c| c.threads == 2));
    let stats = explore(&opts, &|_| {}).expect("exploration runs");
    let two = stats.two_thread;
    println!(
        "{} programs, {} crash images, {} violations; two-thread: {} programs, {} images, \
         {} violations, {} crash points inside transactions of both threads",
        stats.programs,
        stats.images,
        stats.violations,
        two.programs,
        two.images,
        two.violations,
        two.overlapping
    );
    assert_eq!(stats.programs, opts.configs.len() as u64);
    assert!(two.programs > 0, "no two-thread program ran");
    assert!(
        two.overlapping > 0,
        "the two threads' transactions never overlapped"
    );
    assert_eq!(stats.violations, 0, "{:#?}", stats.examples);
}

/// Regression (found by the two-thread explorer, `batch-force-2t-handoff`,
/// seed 8): under Batch force, thread 0 commits a write of a slot and
/// clears its commit group's records without a fence; thread 1 then
/// commits a newer write of the same slot. A fence orders only its own
/// thread's stores, so a crash could keep thread 0's group whole in the log
/// and recovery redid it over thread 1's value. The log now has the next
/// group append store such clears again before its fence.
#[test]
fn batch_force_handoff_seed_8_recovers_the_newer_write() {
    let cfg = rewind::crashtest::Config::parse("batch-force-2t-handoff").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let st = rewind::crashtest::run_program(&cfg, 8, &stop, true).expect("program runs");
    assert!(st.images > 1000, "too few images: {}", st.images);
    assert_eq!(st.violations, 0, "{}", st.examples[0]);
}

/// The handoff shape over a budget that found the violation above 2.5
/// times over (first found after 8,847 images from seed 1).
#[test]
fn batch_force_handoff_has_no_violations() {
    let mut opts = Options::all(1, Budget::Images(22_000), None);
    opts.threads = 2;
    opts.configs = vec![rewind::crashtest::Config::parse("batch-force-2t-handoff").unwrap()];
    let stats = explore(&opts, &|_| {}).expect("exploration runs");
    assert_eq!(stats.violations, 0, "{}", stats.examples[0]);
}
