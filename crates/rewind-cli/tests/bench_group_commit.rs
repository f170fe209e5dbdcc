//! `rewind bench group-commit --tiny`: every system has its rows at every
//! thread count, and rewind's device flushes are counted: one per commit
//! at one thread, never more than one per commit with more (group
//! commit can only share them). Times are never checked.

mod common;

#[test]
fn bench_group_commit_tiny_reports_every_thread_count_and_counts_flushes() {
    let json = common::run_tiny("group-commit");
    let rows = json["rows"].as_array().unwrap();
    let value = |system: &str, param: &str, metric: &str| {
        common::find(
            rows,
            &[("system", system), ("param", param), ("metric", metric)],
        )
        .and_then(|r| r["value"].as_f64())
    };
    for t in [1, 2, 4, 8, 16] {
        let p = format!("threads={t}");
        for system in ["rewind", "sqlite"] {
            let v = value(system, &p, "commits_per_s");
            assert!(v.is_some_and(|v| v > 0.0), "{system} {p}: {v:?}");
            assert!(value(system, &p, "scaling_vs_1_thread").is_some());
        }
        let per = value("rewind", &p, "device_flushes_per_commit").unwrap();
        let group = value("rewind", &p, "commits_per_flush").unwrap();
        if t == 1 {
            assert_eq!(per, 1.0, "one thread: one device flush per commit");
        }
        assert!(per > 0.0 && per <= 1.0, "{p}: {per} flushes per commit");
        assert!(group >= 1.0, "{p}: {group} commits per flush");
    }
}
