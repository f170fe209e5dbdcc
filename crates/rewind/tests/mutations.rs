//! Proof that the crash explorer can fail: with any one non-redundant
//! ordering point of the engine disabled, exploration must report
//! violations within 30 seconds (it stops at the first). Redundant sites
//! carry their reason in `persist/sites.rs`.

use std::time::Instant;

use rewind::crashtest::{explore, Options};
use rewind::persist::sites;

#[test]
fn every_non_redundant_ordering_point_is_needed() {
    let mut missed = Vec::new();
    let mut total = 0.0;
    for info in sites::ALL.iter().filter(|s| s.redundant.is_none()) {
        let start = Instant::now();
        let opts = Options {
            threads: 2,
            ..Options::all(1, 30.0, Some(info.site))
        };
        let stats = explore(&opts, &|_| {}).expect("exploration runs");
        let secs = start.elapsed().as_secs_f64();
        total += secs;
        println!(
            "{:<28} {:>6} images, {:>4} violations, {secs:5.1} s",
            info.site.0, stats.images, stats.violations
        );
        if stats.violations == 0 {
            missed.push(info.site.0);
        }
    }
    println!("all mutation sites: {total:.1} s");
    assert!(missed.is_empty(), "mutations not detected: {missed:?}");
}

#[test]
fn the_unmutated_engine_has_no_violations() {
    let stats = explore(&Options::all(7, 8.0, None), &|_| {}).expect("exploration runs");
    println!(
        "{} programs, {} crash images, {} violations",
        stats.programs, stats.images, stats.violations
    );
    assert!(stats.images > 1000, "too few images: {}", stats.images);
    assert_eq!(stats.violations, 0, "{:#?}", stats.examples);
}
