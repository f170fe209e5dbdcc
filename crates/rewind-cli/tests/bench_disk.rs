//! `rewind bench disk --tiny`: every system has its rows, and rewind's
//! redo commit on `Msync` is exactly one device flush (counted by its
//! domain, no timing); the floor rows are one by construction. Times are
//! never checked.

mod common;

#[test]
fn bench_disk_tiny_counts_one_device_flush_per_redo_commit() {
    let json = common::run_tiny("disk");
    let rows = json["rows"].as_array().unwrap();
    let value = |system: &str, config: &str, metric: &str| {
        common::value_where(
            rows,
            &[("system", system), ("config", config), ("metric", metric)],
        )
    };
    let flushes = |s, c| value(s, c, "device_flushes_per_commit");
    assert_eq!(flushes("rewind", "msync-redo"), Some(1.0));
    assert_eq!(
        value("rewind", "msync-redo", "fences_per_commit"),
        Some(1.0)
    );
    // Force: a fence per step of the undo protocol, each a device flush.
    let force = flushes("rewind", "msync-force").unwrap();
    assert!(force > 1.0, "force pays more than one flush: {force}");
    for floor in [
        "pwrite-fdatasync",
        "pwritev2-dsync",
        "store-msync",
        "pwrite-msync",
    ] {
        assert_eq!(flushes("disk-floor", floor), Some(1.0), "{floor}");
        assert!(value("disk-floor", floor, "us_per_commit").is_some());
    }
    for (system, config) in [("rewind", "msync-redo"), ("sqlite", "wal-full")] {
        assert!(value(system, config, "us_per_commit").is_some(), "{system}");
    }
    assert!(value("rewind", "msync-redo", "speed_vs_sqlite").is_some());
    assert!(value("rewind", "msync-redo", "ratio_vs_floor").is_some());
}
