//! `rewind bench group-commit --tiny`: every system has its rows at every
//! thread count, and rewind's device flushes are counted: one per commit
//! at one thread, never more than one per commit with more (group
//! commit can only share them). Times are never checked.

mod common;

#[test]
fn bench_group_commit_tiny_reports_every_thread_count_and_counts_flushes() {
    let json = common::run_tiny("group-commit");
    let rows = json["rows"].as_array().unwrap();
    for t in [1, 2, 4, 8, 16] {
        let p = format!("threads={t}");
        for (system, config) in [("rewind", "msync-redo"), ("sqlite", "wal-full")] {
            let v = common::value(rows, system, config, &p, "commits_per_s");
            assert!(v.is_some_and(|v| v > 0.0), "{system} {p}: {v:?}");
            let scaling = common::value(rows, system, config, &p, "scaling_vs_1_thread");
            assert!(scaling.is_some());
        }
        let rewind = |metric| common::value(rows, "rewind", "msync-redo", &p, metric).unwrap();
        let per = rewind("device_flushes_per_commit");
        let group = rewind("commits_per_flush");
        if t == 1 {
            assert_eq!(per, 1.0, "one thread: one device flush per commit");
        }
        assert!(per > 0.0 && per <= 1.0, "{p}: {per} flushes per commit");
        assert!(group >= 1.0, "{p}: {group} commits per flush");
    }
}
