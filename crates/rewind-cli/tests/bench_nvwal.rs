//! `rewind bench nvwal --tiny` (NVWAL Figs. 6, 7, 9, Table 2): every system
//! and workload has its rows, and the exact numbers hold: one fence per
//! commit, differential records far smaller than SQLite's frames. Times are
//! never checked.

mod common;

#[test]
fn bench_nvwal_tiny_has_every_row_and_one_fence_per_commit() {
    let json = common::run_tiny("nvwal");
    let rows = json["rows"].as_array().unwrap();
    let value = |system: &str, config: &str, param: &str, metric: &str| {
        common::value(rows, system, config, param, metric)
    };
    for w in ["insert", "update", "delete"] {
        for c in [
            "pool-0ns",
            "pool-500ns",
            "pool-1000ns",
            "pool-2000ns",
            "pool-whole-0ns",
        ] {
            let fences = value("rewind-sqlite", c, w, "commit_fences_per_tx").unwrap();
            assert_eq!(fences, 1.0, "{c} {w}: one fence per commit");
            assert!(value("rewind-sqlite", c, w, "speed_vs_sqlite-wal-disk").is_some());
        }
        for s in ["sqlite-wal-disk", "sqlite-wal-scratch"] {
            assert!(value(s, "full", w, "us_per_tx").is_some(), "{s} {w}");
        }
        let diff = value("rewind-sqlite", "pool-0ns", w, "record_bytes_per_tx").unwrap();
        let whole = value("rewind-sqlite", "pool-whole-0ns", w, "record_bytes_per_tx").unwrap();
        assert!(
            diff * 3.0 < whole,
            "{w}: {diff} differential bytes against {whole}"
        );
    }
    assert!(value("sqlite-rollback-disk", "full", "insert", "us_per_tx").is_some());
    for k in [1, 2, 4, 8, 16, 32] {
        let p = format!("insert-{k}-rows");
        assert!(value("rewind-sqlite", "pool-0ns", &p, "persist_share").is_some());
        assert!(value("sqlite-wal-scratch", "full", &p, "us_per_tx").is_some());
    }
}
