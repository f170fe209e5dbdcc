//! `rewind bench btree|rollback|threads --tiny` (REWIND §5.2, Figs. 7–9):
//! every system and parameter has its rows, and the counts are right.
//! Times are never checked. Without `--features peers` only rewind and the
//! baselines run; with it, the peers' rows must be there too.

mod common;

use common::value;
use std::path::Path;
use std::process::Command;

/// The rows of `rewind bench NAME --tiny` (see [`common::run_tiny`]).
fn bench(name: &str) -> Vec<serde_json::Value> {
    common::run_tiny(name)["rows"].as_array().unwrap().clone()
}
/// rewind's configurations: every log variant × policy.
fn rewind_configs() -> Vec<String> {
    let mut out = Vec::new();
    for v in ["simple", "optimized", "batch", "two-layer"] {
        for p in ["force", "no-force", "redo", "redo-async"] {
            out.push(format!("{v}-{p}"));
        }
    }
    out
}

fn peers() -> Vec<(&'static str, &'static str)> {
    if cfg!(feature = "peers") {
        vec![
            ("pmdk", "libpmemobj"),
            ("bdb", "btree-txn-sync"),
            ("lmdb", "sync"),
            ("sqlite", "wal-full"),
            ("redb", "immediate"),
        ]
    } else {
        Vec::new()
    }
}

/// The baselines and every rewind configuration, as `(system, config)`.
fn baselines_and_rewind() -> Vec<(String, String)> {
    let mut systems: Vec<(String, String)> = vec![
        ("volatile".into(), "dram".into()),
        ("persist-nolog".into(), "nolog".into()),
    ];
    systems.extend(rewind_configs().into_iter().map(|c| ("rewind".into(), c)));
    systems
}

#[test]
fn bench_btree_has_every_system_at_every_update_fraction() {
    let rows = bench("btree");
    let mut systems = baselines_and_rewind();
    systems.extend(peers().into_iter().map(|(s, c)| (s.into(), c.into())));
    for (s, c) in &systems {
        for u in ["0", "0.1", "0.5", "1"] {
            let p = format!("update={u}");
            for m in ["us_per_op", "ratio_vs_nolog"] {
                assert!(
                    value(&rows, s, c, &p, m).is_some(),
                    "no row {s}/{c} {p} {m}"
                );
            }
            for (peer, _) in peers() {
                if peer != s {
                    let m = format!("speed_vs_{peer}");
                    assert!(
                        value(&rows, s, c, &p, &m).is_some(),
                        "no row {s}/{c} {p} {m}"
                    );
                }
            }
        }
    }
    // The counters: nolog fences once per update and never for a lookup,
    // and an update in rewind logs, so it fences more than a lookup.
    let at =
        |s: &str, c: &str, u: &str, m: &str| value(&rows, s, c, &format!("update={u}"), m).unwrap();
    assert_eq!(at("persist-nolog", "nolog", "0", "fences_per_op"), 0.0);
    assert_eq!(at("persist-nolog", "nolog", "1", "fences_per_op"), 1.0);
    assert_eq!(at("volatile", "dram", "1", "flushes_per_op"), 0.0);
    for c in rewind_configs() {
        assert!(
            at("rewind", &c, "1", "fences_per_op") > at("rewind", &c, "0", "fences_per_op"),
            "{c}: updates should fence more than lookups"
        );
        assert!(at("rewind", &c, "1", "flushes_per_op") > 0.0, "{c}");
    }
    // Redo-async's time runs until its write-back is done; the time until
    // the last commit returned is beside it.
    for v in ["simple", "optimized", "batch", "two-layer"] {
        let c = format!("{v}-redo-async");
        assert!(
            value(&rows, "rewind", &c, "update=1", "commit_us_per_op").is_some(),
            "{c}"
        );
    }
    assert!(value(
        &rows,
        "rewind",
        "batch-redo",
        "update=1",
        "commit_us_per_op"
    )
    .is_none());
    // The peers have no rewind counters.
    for (s, c) in peers() {
        assert!(value(&rows, s, c, "update=1", "fences_per_op").is_none());
    }
}

#[test]
fn bench_rollback_times_every_size_for_every_recoverable_system() {
    let rows = bench("rollback");
    let mut systems: Vec<(String, String)> = rewind_configs()
        .into_iter()
        .map(|c| ("rewind".into(), c))
        .collect();
    systems.extend(peers().into_iter().map(|(s, c)| (s.into(), c.into())));
    for (s, c) in &systems {
        for n in [20, 100] {
            let p = format!("ops={n}");
            assert!(
                value(&rows, s, c, &p, "rollback_ms").is_some(),
                "{s}/{c} {p}"
            );
            assert!(
                value(&rows, s, c, &p, "rollback_us_per_op").is_some(),
                "{s}/{c} {p}"
            );
        }
        assert!(
            value(&rows, s, c, "ops=400", "recovery_ms").is_some(),
            "{s}/{c}"
        );
        // 400 operations in transactions of 200.
        assert_eq!(value(&rows, s, c, "ops=400", "transactions"), Some(2.0));
    }
    // The baselines cannot roll back: they do not run.
    assert!(!rows
        .iter()
        .any(|r| r["system"] == "volatile" || r["system"] == "persist-nolog"));
}

#[test]
fn bench_threads_reports_both_sharings_at_one_and_two_threads_at_least() {
    let rows = bench("threads");
    let systems = baselines_and_rewind();
    for (s, c) in &systems {
        for sharing in ["own", "shared"] {
            for t in [1, 2] {
                let p = format!("{sharing}-tree,threads={t}");
                let v = value(&rows, s, c, &p, "ops_per_s");
                assert!(v.is_some_and(|v| v > 0.0), "{s}/{c} {p}: {v:?}");
            }
        }
    }
    // Each (system, param, metric) once.
    let mut keys: Vec<String> = rows
        .iter()
        .map(|r| {
            let (s, c, p, m) = (&r["system"], &r["config"], &r["param"], &r["metric"]);
            format!("{s}/{c} {p} {m}")
        })
        .collect();
    let n = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), n, "duplicate rows");
    for m in ["order_waits_per_op", "lock_waits_per_op"] {
        let v = value(&rows, "rewind", "batch-redo", "own-tree,threads=1", m);
        assert_eq!(v, Some(0.0), "{m}: one thread waits for no one");
        let v = value(&rows, "volatile", "dram", "own-tree,threads=2", m);
        assert_eq!(v, Some(0.0), "{m}: the baselines never wait");
    }
}

/// `--dir` and `--backend msync`: every system runs in the given directory
/// on the disk path; a directory that does not exist, or a backend that is
/// not one, is an error that says so.
#[test]
fn bench_btree_runs_in_a_given_directory_on_the_msync_backend() {
    // On tmpfs where there is one: an msync there is cheap, on a disk each
    // costs a device flush and the run takes minutes.
    let shm = Path::new("/dev/shm");
    let dir = match shm.is_dir() {
        true => tempfile::tempdir_in(shm).unwrap(),
        false => tempfile::tempdir().unwrap(),
    };
    let out_dir = dir.path().join("out");
    let run = |backend: &str, pools: &Path| {
        Command::new(env!("CARGO_BIN_EXE_rewind"))
            .args(["bench", "btree", "--tiny", "--backend", backend, "--dir"])
            .arg(pools)
            .args(["--out", out_dir.to_str().unwrap()])
            .output()
            .expect("run the rewind binary")
    };
    let out = run("msync", dir.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("backend msync"), "{stdout}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("btree.json")).unwrap())
            .unwrap();
    let rows = json["rows"].as_array().unwrap();
    for c in rewind_configs() {
        let v = value(rows, "rewind", &c, "update=1", "us_per_op");
        assert!(v.is_some_and(|v| v > 0.0), "{c}");
    }
    let missing = dir.path().join("no-such-dir");
    let out = run("msync", &missing);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&*missing.to_string_lossy()), "{stderr}");
    let out = run("disk", dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a backend"));
}

/// `bench btree-str`: the collections' tree with string keys, and with
/// `--features peers` Berkeley DB, LMDB, SQLite and redb, at both update
/// fractions; the tree's updates fence and flush (every one allocates or
/// frees a key's block), its lookups do not fence.
#[test]
fn bench_btree_str_has_every_system_at_every_update_fraction() {
    let rows = bench("btree-str");
    let mut systems = vec![("coll-btree", "default")];
    let peers: Vec<_> = peers().into_iter().filter(|(s, _)| *s != "pmdk").collect();
    systems.extend(peers.iter().copied());
    for (s, c) in &systems {
        for p in ["update=0", "update=1"] {
            assert!(
                value(&rows, s, c, p, "us_per_op").is_some(),
                "no row {s}/{c} {p}"
            );
            for (peer, _) in &peers {
                let m = format!("speed_vs_{peer}");
                if peer != s {
                    assert!(
                        value(&rows, s, c, p, &m).is_some(),
                        "no row {s}/{c} {p} {m}"
                    );
                }
            }
        }
    }
    let at = |p: &str, m: &str| value(&rows, "coll-btree", "default", p, m).unwrap();
    assert_eq!(at("update=0", "fences_per_op"), 0.0);
    assert!(at("update=1", "fences_per_op") >= 1.0);
    assert!(at("update=1", "flushes_per_op") > 0.0);
}
