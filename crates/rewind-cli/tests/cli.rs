//! The `rewind` command end to end: exit statuses, messages, output files.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use rewind::{Pool, PoolConfig};

fn rewind(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rewind"))
        .args(args)
        .output()
        .expect("run the rewind binary")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Exit status not 0, a message on stderr, and no panic.
fn assert_clean_failure(out: &Output, mentions: &[&str]) {
    let stderr = text(&out.stderr);
    assert!(
        !out.status.success(),
        "expected failure, stdout:\n{}",
        text(&out.stdout)
    );
    assert!(!stderr.contains("panicked"), "panicked:\n{stderr}");
    assert!(stderr.starts_with("error: "), "no error message:\n{stderr}");
    let lower = stderr.to_lowercase();
    assert!(
        mentions.iter().any(|m| lower.contains(m)),
        "stderr mentions none of {mentions:?}:\n{stderr}"
    );
}

/// `Pool::open` of a test pool. No retry while it is in use: a pool
/// closed (or its process ended) is free at once, even while a sibling
/// test's forked child holds a copy of its descriptor.
fn open_pool(path: &Path) -> Pool {
    Pool::open(path, "cli-test", &rewind::OpenOptions::default()).unwrap()
}

fn small_pool(path: &Path) {
    let pool =
        Pool::create(path, "cli-test", 4 << 20, &PoolConfig::default()).expect("create pool");
    pool.transaction(|tx| {
        let root = tx.root::<u64>()?;
        tx.write(root, &7u64)
    })
    .expect("one transaction");
}

#[test]
fn demo_recovers_and_its_pool_checks_clean() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("demo.pool");
    let pool_s = pool.to_str().unwrap();
    let out = rewind(&[
        "demo",
        "--pool",
        pool_s,
        "--seconds-before-kill",
        "0.2",
        "--seed",
        "9",
        "--throughput-tx",
        "1000",
    ]);
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed:\n{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(stdout.contains("all checks passed"), "{stdout}");
    assert!(
        stdout.contains("volatile") && stdout.contains("rewind-btree"),
        "no throughput table:\n{stdout}"
    );
    assert!(
        stdout.contains("B+-tree invariants") && stdout.contains("orders in key order"),
        "no B+-tree verification:\n{stdout}"
    );

    let check = rewind(&["check", pool_s]);
    assert!(
        check.status.success(),
        "check failed:\n{}{}",
        text(&check.stdout),
        text(&check.stderr)
    );
    for cmd in ["info", "dump-log", "recover"] {
        let out = rewind(&[cmd, pool_s]);
        assert!(out.status.success(), "{cmd} failed:\n{}", text(&out.stderr));
    }
}

/// The demo on one log variant and policy, killed early; true if it verified.
fn demo_passes(log: &str, policy: &str) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("demo.pool");
    let out = rewind(&[
        "demo",
        "--pool",
        pool.to_str().unwrap(),
        "--log",
        log,
        "--policy",
        policy,
        "--seconds-before-kill",
        "0",
        "--throughput-tx",
        "10",
    ]);
    if !out.status.success() {
        eprintln!(
            "{log}/{policy}:\n{}\n{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
    if out.status.success() {
        assert_rollback_told_as_recovery_counted(&text(&out.stdout));
    }
    out.status.success()
}

/// The demo says the killed transaction was rolled back only where the
/// recovery report counts a transaction rolled back (undo); under redo its
/// writes never reached the log and recovery rolls back none (a user saw
/// "0 rolled back" above "(transaction 2000 rolled back)").
fn assert_rollback_told_as_recovery_counted(stdout: &str) {
    let recovery = (stdout.lines())
        .find(|l| l.contains(" rolled back ("))
        .unwrap_or_else(|| panic!("no recovery report:\n{stdout}"));
    let before = recovery.split(" rolled back (").next().unwrap();
    let rolled_back: u64 = before.rsplit(' ').next().unwrap().parse().unwrap();
    let counter = (stdout.lines())
        .find(|l| l.contains("committed counter"))
        .unwrap_or_else(|| panic!("no counter check:\n{stdout}"));
    let told = counter.contains("rolled back)");
    assert_eq!(told, rolled_back > 0, "{recovery}\n{counter}");
    assert_eq!(
        counter.contains("never reached the log: nothing to roll back)"),
        rolled_back == 0,
        "{recovery}\n{counter}"
    );
}

#[test]
fn demo_recovers_under_every_log_variant_with_force() {
    for log in ["simple", "optimized", "batch", "two-layer"] {
        assert!(demo_passes(log, "force"), "{log}/force failed");
    }
}

// Regression: no-force recovery once redid an old UPDATE into a block that
// was freed and reallocated later (see rewind/tests/regressions.rs).
#[test]
fn demo_recovers_under_every_log_variant_with_no_force() {
    for log in ["simple", "optimized", "batch", "two-layer"] {
        assert!(demo_passes(log, "no-force"), "{log}/no-force failed");
    }
}

#[test]
fn demo_recovers_under_every_log_variant_with_redo() {
    for log in ["simple", "optimized", "batch", "two-layer"] {
        assert!(demo_passes(log, "redo"), "{log}/redo failed");
    }
}

#[test]
fn check_rejects_a_flipped_header_byte() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.pool");
    small_pool(&path);
    assert!(rewind(&["check", path.to_str().unwrap()]).status.success());

    let mut bytes = std::fs::read(&path).unwrap();
    bytes[20] ^= 0xff;
    std::fs::write(&path, bytes).unwrap();
    for cmd in ["check", "info", "dump-log", "recover"] {
        let out = rewind(&[cmd, path.to_str().unwrap()]);
        assert_clean_failure(&out, &["checksum", "header", "damaged", "corrupt"]);
    }
}

#[test]
fn check_rejects_a_truncated_pool() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.pool");
    small_pool(&path);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..5000]).unwrap();
    for cmd in ["check", "info", "dump-log", "recover"] {
        let out = rewind(&[cmd, path.to_str().unwrap()]);
        assert_clean_failure(&out, &["truncated", "bytes", "size"]);
    }
}

#[test]
fn check_reports_a_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = rewind(&["check", dir.path().join("nope.pool").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_clean_failure(&out, &["no such file", "not found"]);
}

#[test]
fn usage_errors_exit_2() {
    let out = rewind(&["bench", "nonsense"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("unknown benchmark `nonsense`"),
        "{}",
        text(&out.stderr)
    );

    assert_eq!(rewind(&[]).status.code(), Some(2));
    assert_eq!(rewind(&["frobnicate"]).status.code(), Some(2));
    // A negative number is the option's value in either spelling, refused
    // for what it is (not taken for an unknown flag `-1`).
    for args in [
        &["demo", "--seconds-before-kill", "-1"][..],
        &["demo", "--seconds-before-kill=-1"],
        &["crashtest", "--seconds", "-1"],
        &["crashtest", "--seconds=-1"],
    ] {
        let out = rewind(args);
        assert_clean_failure(&out, &["invalid value '-1'"]);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains("seconds") && !err.contains("unexpected argument"),
            "{err}"
        );
    }
    // Seconds no clock can count are usage errors, not panics (found by a
    // user: 1e300 panicked in Duration::from_secs_f64).
    // Nor are durations a run would never end in.
    for args in [
        &["demo", "--seconds-before-kill", "1e300"][..],
        &["crashtest", "--seconds", "1e300"][..],
        &["demo", "--seconds-before-kill", "1e9"][..],
    ] {
        let out = rewind(args);
        assert_clean_failure(&out, &["seconds"]);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    for args in [
        &["bench", "fence", "--nvm-write-ns", "18446744073709551615"][..],
        &["bench", "fence", "--fence-ns", "1000001"][..],
    ] {
        let out = rewind(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(text(&out.stderr).contains("1000000"), "{args:?}");
    }
    // An output path that is a file: refused before the run.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f");
    std::fs::write(&file, b"x").unwrap();
    let out = rewind(&["bench", "fence", "--tiny", "--out", file.to_str().unwrap()]);
    assert_clean_failure(&out, &["not a directory"]);
}

#[test]
fn bench_overhead_writes_every_row() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = rewind(&[
        "bench",
        "overhead",
        "--tiny",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "bench failed:\n{}", text(&out.stderr));

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("overhead.json")).unwrap())
            .unwrap();
    assert_eq!(json["bench"], "overhead");
    let rows = json["rows"].as_array().unwrap();
    let configs = [
        ("volatile", "dram"),
        ("persist-nolog", "nolog"),
        ("rewind", "simple-force"),
        ("rewind", "simple-no-force"),
        ("rewind", "optimized-force"),
        ("rewind", "optimized-no-force"),
        ("rewind", "batch-force"),
        ("rewind", "batch-no-force"),
        ("rewind", "two-layer-force"),
        ("rewind", "two-layer-no-force"),
        ("rewind", "simple-redo"),
        ("rewind", "optimized-redo"),
        ("rewind", "batch-redo"),
        ("rewind", "two-layer-redo"),
        ("rewind", "simple-redo-async"),
        ("rewind", "optimized-redo-async"),
        ("rewind", "batch-redo-async"),
        ("rewind", "two-layer-redo-async"),
    ];
    // Built with `--features peers`: PMDK and the C loops run too, and every
    // system gets its speed against PMDK.
    let peers = cfg!(feature = "peers");
    let mut metrics = vec![
        ("us_per_tx", "us"),
        ("commit_us_per_tx", "us"),
        ("fences_per_tx", "count"),
        ("flushes_per_tx", "lines"),
        ("nvm_writes_per_tx", "writes"),
        ("ratio_vs_nolog", "x"),
    ];
    if peers {
        metrics.push(("speed_vs_pmdk", "x"));
    }
    let c_loops = [("c-nolog", "c-loop"), ("c-nolog", "c-loop-counted")];
    // On x86_64 (the Pmem backend) the redo commit's floor loop runs, with
    // or without the peers, and every system gets its ratio to it.
    let floor = cfg!(target_arch = "x86_64");
    if floor {
        metrics.push(("ratio_vs_floor", "x"));
    }
    // Every system at every K, and atomic_write (every policy) at K=1; the
    // floor at every K, with every metric but the commit time (it has no
    // commit apart from its loop). With the peers, more: the C loops,
    // PMDK, and the ratios to them.
    if !peers {
        let floor_rows = if floor { 3 * (metrics.len() - 1) } else { 0 };
        assert_eq!(
            rows.len(),
            (configs.len() * 3 + 4) * metrics.len() + floor_rows
        );
    }
    let atomic = [
        ("atomic_write", "batch-force"),
        ("atomic_write", "batch-no-force"),
        ("atomic_write", "batch-redo"),
        ("atomic_write", "batch-redo-async"),
    ];
    let cases = configs
        .iter()
        .chain(if peers { &c_loops[..] } else { &[] })
        .flat_map(|&c| ["K=1", "K=8", "K=64"].map(|k| (c, k)))
        .chain(atomic.map(|c| (c, "K=1")));
    for ((system, config), k) in cases {
        {
            for &(metric, unit) in &metrics {
                let row = common::row(rows, system, config, k, metric)
                    .unwrap_or_else(|| panic!("no row {system} {config} {k} {metric}"));
                assert_eq!(row["unit"], unit);
                assert!(row["value"].as_f64().is_some_and(|v| v >= 0.0), "{row}");
            }
        }
    }
    let fences = |system: &str, config: &str| {
        common::value(rows, system, config, "K=1", "fences_per_tx").unwrap()
    };
    // One aligned word under force or redo: one store, one flush, one fence.
    assert_eq!(fences("atomic_write", "batch-force"), 1.0);
    assert_eq!(fences("atomic_write", "batch-redo"), 1.0);
    assert!(fences("rewind", "batch-force") > 1.0);
    let nolog_ratio = rows
        .iter()
        .find(|r| r["config"] == "nolog" && r["param"] == "K=8" && r["metric"] == "ratio_vs_nolog")
        .unwrap();
    assert_eq!(nolog_ratio["value"].as_f64(), Some(1.0));
    if floor {
        let value = |k: &str, metric: &str| common::value(rows, "c-floor", "redo-floor", k, metric);
        // One fence; the group's lines (32 + 16K bytes) and K data lines.
        for (k, lines) in [("K=1", 2.0), ("K=8", 11.0), ("K=64", 81.0)] {
            assert_eq!(value(k, "fences_per_tx"), Some(1.0));
            assert_eq!(value(k, "flushes_per_tx"), Some(lines));
            assert_eq!(value(k, "ratio_vs_floor"), Some(1.0));
            assert!(value(k, "us_per_tx").is_some_and(|v| v > 0.0));
            assert_eq!(value(k, "commit_us_per_tx"), None);
        }
    }
    if peers {
        let value = |system: &str, config: &str, k: &str, metric: &str| {
            common::value(rows, system, config, k, metric)
        };
        for (k, lines) in [("K=1", 1.0), ("K=8", 8.0), ("K=64", 64.0)] {
            // PMDK's fences and lines are not counted: no rows.
            // No ratio of a system to itself.
            assert_eq!(value("pmdk", "libpmemobj", k, "speed_vs_pmdk"), None);
            assert!(value("pmdk", "libpmemobj", k, "us_per_tx").is_some());
            assert_eq!(value("pmdk", "libpmemobj", k, "fences_per_tx"), None);
            assert_eq!(value("pmdk", "libpmemobj", k, "flushes_per_tx"), None);
            assert_eq!(value("pmdk", "libpmemobj", k, "nvm_writes_per_tx"), None);
            // The C loops: K lines and one fence per transaction.
            for (system, config) in c_loops {
                assert_eq!(value(system, config, k, "fences_per_tx"), Some(1.0));
                assert_eq!(value(system, config, k, "flushes_per_tx"), Some(lines));
                assert_eq!(value(system, config, k, "nvm_writes_per_tx"), Some(lines));
            }
            for metric in ["ratio_vs_c_loop", "ratio_vs_c_loop_counted"] {
                assert!(value("persist-nolog", "nolog", k, metric).is_some_and(|v| v > 0.0));
            }
        }
    }

    let csv = std::fs::read_to_string(out_dir.join("overhead.csv")).unwrap();
    assert_eq!(csv.lines().count(), rows.len() + 1);
    let svg = std::fs::read_to_string(out_dir.join("overhead.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
}

#[test]
fn crashtest_ends_with_the_count_line() {
    let args = [
        "crashtest",
        "--budget",
        "300",
        "--threads",
        "1",
        "--config",
        "batch-no-force-2t",
    ];
    let out = rewind(&args);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("crash states: ") && last.ends_with(" checked, 0 violations"),
        "last line: {last}"
    );
    let n: u64 = last["crash states: ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(n >= 300, "only {n} crash states for a budget of 300");
    // Two-thread programs are counted apart; a count budget repeats exactly.
    let two = stdout
        .lines()
        .find(|l| l.starts_with("two-thread: "))
        .unwrap_or_default();
    assert!(
        two.ends_with(&format!(" {n} images, 0 violations")),
        "{two}"
    );
    assert_eq!(text(&rewind(&args).stdout).lines().last(), Some(last));
    // Exactly one budget.
    let out = rewind(&["crashtest", "--budget", "10", "--seconds", "1"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn crashtest_lists_and_applies_mutations() {
    let out = rewind(&["crashtest", "--list-mutations"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success());
    let names: Vec<&str> = stdout
        .lines()
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    assert!(names.contains(&"log.group.index"), "{stdout}");
    assert!(
        stdout.lines().any(|l| l.contains("\tredundant: ")),
        "{stdout}"
    );
    // The listing takes no option of a run: one given is a usage error,
    // not ignored (an unknown site named beside it too).
    for extra in [
        &["--mutate", "no.such.site"][..],
        &["--budget", "10"],
        &["--seed", "3"],
    ] {
        let out = rewind(&[&["crashtest", "--list-mutations"][..], extra].concat());
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        assert!(
            text(&out.stderr).contains("cannot be used with"),
            "{extra:?}"
        );
    }
    // A needed ordering point, disabled: violations found, exit 0.
    let out = rewind(&[
        "crashtest",
        "--mutate",
        "log.group.index",
        "--budget",
        "2000",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(!stdout.contains(" checked, 0 violations"), "{stdout}");
    assert!(stdout.contains("violation in batch-"), "{stdout}");
    let out = rewind(&["crashtest", "--mutate", "no.such.site"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("unknown mutation site"));
}

#[test]
fn inspecting_a_pool_in_use_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.pool");
    small_pool(&path);
    let held = open_pool(&path);
    for cmd in ["check", "dump-log", "recover"] {
        let out = rewind(&[cmd, path.to_str().unwrap()]);
        assert_clean_failure(&out, &["in use"]);
    }
    // info shows the header, which never changes, and says the pool is in use.
    let out = rewind(&["info", path.to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("IN USE") && text.contains("cli-test"),
        "{text}"
    );
    let out = rewind(&["info", "--json", path.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["in_use"], true);
    assert!(v["log_records"].is_null());
    drop(held);
    // A sibling test forking a child at this moment holds our file until
    // the child execs.
    let out = rewind(&["check", path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "check fails after the pool was closed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `demo --pool` replaces only an earlier demo pool: another layout's
/// pool, or a pool another opener holds, is refused and left as it was.
#[test]
fn demo_refuses_to_replace_another_pool() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.pool");
    small_pool(&path);
    let p = path.to_str().unwrap();
    let out = rewind(&["demo", "--pool", p, "--seconds-before-kill", "0.1"]);
    // ("in use": a sibling test's fork may hold the file a moment.)
    assert_clean_failure(&out, &["layout `cli-test`", "in use"]);
    let held = open_pool(&path);
    let out = rewind(&["demo", "--pool", p, "--seconds-before-kill", "0.1"]);
    assert_clean_failure(&out, &["in use"]);
    let root = held.transaction(|tx| tx.root::<u64>()).unwrap();
    assert_eq!(held.read(root).unwrap(), 7, "the pool is the one created");
}

/// At the default path too (the temp dir's `rewind-demo.pool`), a file
/// that is not a pool is refused and kept, as the help says; and while a
/// demo holds its pool, a second one on the same pool is refused at once
/// (it removed the first one's pool between its steps).
#[test]
fn demo_keeps_a_file_at_its_default_path_and_runs_alone_on_a_pool() {
    let dir = tempfile::tempdir().unwrap();
    let default = dir.path().join("rewind-demo.pool");
    std::fs::write(&default, "notes\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rewind"))
        .args(["demo", "--seconds-before-kill", "0.1"])
        .env("TMPDIR", dir.path())
        .output()
        .unwrap();
    assert_clean_failure(&out, &["not a rewind pool"]);
    assert_eq!(std::fs::read_to_string(&default).unwrap(), "notes\n");
    // The claim a running demo holds on its pool.
    let pool = dir.path().join("p.pool");
    let mut lock = pool.as_os_str().to_owned();
    lock.push(".demo-lock");
    let held = std::fs::File::create(&lock).unwrap();
    held.lock().unwrap();
    let out = rewind(&["demo", "--pool", pool.to_str().unwrap()]);
    assert_clean_failure(&out, &["another `rewind demo`"]);
    assert!(!pool.exists());
}

/// An interrupted benchmark (SIGINT, SIGTERM) removes its scratch pools:
/// gigabytes in `/dev/shm`, which is memory, were left behind.
#[test]
fn an_interrupted_bench_removes_its_scratch_pools() {
    let dir = tempfile::tempdir().unwrap();
    for signal in ["INT", "TERM"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rewind"))
            .args(["bench", "overhead", "--quick", "--out"])
            .arg(dir.path().join("out"))
            .arg("--dir")
            .arg(dir.path())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Once the header is out, the scratch directory exists.
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0
            && !line.contains("median of")
        {
            line.clear();
        }
        let _ = Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status();
        let status = child.wait().unwrap();
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().starts_with("rewind-bench-"))
            .collect();
        assert!(left.is_empty(), "SIG{signal} ({status}) left {left:?}");
    }
}

#[test]
fn a_fifo_is_refused_not_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    if !Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success())
    {
        eprintln!("mkfifo not available: skipped");
        return;
    }
    for cmd in ["info", "check", "dump-log", "recover"] {
        let out = rewind(&[cmd, fifo.to_str().unwrap()]);
        assert_clean_failure(&out, &["fifo"]);
    }
}

#[test]
fn bench_checkpoint_writes_every_row_and_counts_its_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = rewind(&[
        "bench",
        "checkpoint",
        "--tiny",
        "--nvm-write-ns",
        "10",
        "--fence-ns",
        "10",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "bench failed:\n{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("10 ns per write"),
        "{}",
        text(&out.stdout)
    );
    // The table says how its seconds (medians) and overheads (medians of
    // per-round ratios) go together: they can differ in sign.
    assert!(
        text(&out.stdout).contains("median of the rounds; seconds: the median time"),
        "{}",
        text(&out.stdout)
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("checkpoint.json")).unwrap())
            .unwrap();
    let rows = json["rows"].as_array().unwrap();
    let get = |config: &str, param: &str, metric: &str| {
        rows.iter()
            .find(|r| r["config"] == config && r["param"] == param && r["metric"] == metric)
            .and_then(|r| r["value"].as_f64())
            .unwrap_or_else(|| panic!("no row {config} {param} {metric}"))
    };
    for v in ["simple", "optimized", "batch"] {
        let config = format!("{v}-no-force");
        assert_eq!(get(&config, "none", "checkpoints"), 0.0);
        // 2,000 records, 9 per transaction: 222 transactions.
        assert_eq!(get(&config, "every=500", "checkpoints"), 4.0);
        assert_eq!(get(&config, "every=1000", "checkpoints"), 2.0);
        assert_eq!(get(&config, "none", "overhead"), 0.0);
        assert!(get(&config, "every=500", "fences_per_record") > 0.0);
    }
    assert!(out_dir.join("checkpoint.svg").exists());
}

#[test]
fn bench_fence_counts_fewer_fences_for_larger_groups() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = rewind(&[
        "bench",
        "fence",
        "--tiny",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "bench failed:\n{}", text(&out.stderr));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("fence.json")).unwrap())
            .unwrap();
    let rows = json["rows"].as_array().unwrap();
    let fences = |config: &str| {
        rows.iter()
            .find(|r| {
                r["config"] == config && r["param"] == "fence=0ns" && r["metric"] == "fences_per_tx"
            })
            .and_then(|r| r["value"].as_f64())
            .unwrap_or_else(|| panic!("no row for {config}"))
    };
    // 64 updates and END per transaction: two fences per record for
    // Optimized, two per group (with END in the last) for Batch.
    assert_eq!(fences("optimized-no-force"), 130.0);
    assert_eq!(fences("batch-8-no-force"), 16.0);
    assert_eq!(fences("batch-16-no-force"), 8.0);
    assert_eq!(fences("batch-32-no-force"), 4.0);
    assert_eq!(fences("batch-64-no-force"), 2.0);
}

/// `--configs` keeps fence's setups of the variants it names under
/// no-force; naming none of them is a usage error, not a run of all.
#[test]
fn bench_fence_runs_only_the_configurations_chosen() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let run = |configs: &str| {
        let out_dir = out_dir.to_str().unwrap();
        rewind(&[
            "bench",
            "fence",
            "--tiny",
            "--out",
            out_dir,
            "--configs",
            configs,
        ])
    };
    let out = run("batch-redo,simple-no-force");
    assert_clean_failure(&out, &["none of fence's configurations"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        !out_dir.join("fence.json").exists(),
        "refused before the run"
    );

    let out = run("optimized-no-force,batch-redo");
    assert!(out.status.success(), "bench failed:\n{}", text(&out.stderr));
    let rows = bench_rows(&out_dir, "fence");
    let mut configs: Vec<&str> = rows.iter().map(|r| r["config"].as_str().unwrap()).collect();
    configs.dedup();
    assert_eq!(configs, ["optimized-no-force"]);
    assert_eq!(
        row_value(&rows, "optimized-no-force", "fence=500ns", "fences_per_tx"),
        130.0
    );
    assert!(row_value(&rows, "optimized-no-force", "fence=0ns", "slowdown") == 1.0);

    let out = run("batch-no-force");
    assert!(out.status.success(), "bench failed:\n{}", text(&out.stderr));
    let rows = bench_rows(&out_dir, "fence");
    for r in &rows {
        assert!(r["config"].as_str().unwrap().starts_with("batch-"), "{r}");
    }
    // Each group size's slowdown is against itself at 0 ns.
    for g in [8, 16, 32, 64] {
        assert_eq!(
            row_value(
                &rows,
                &format!("batch-{g}-no-force"),
                "fence=0ns",
                "slowdown"
            ),
            1.0
        );
    }
}

#[test]
fn bench_intensity_writes_a_ratio_per_configuration_and_intensity() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = rewind(&[
        "bench",
        "intensity",
        "--tiny",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "bench failed:\n{}", text(&out.stderr));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("intensity.json")).unwrap())
            .unwrap();
    let rows = json["rows"].as_array().unwrap();
    // Seventeen systems (the baseline and sixteen configurations) x six intensities x two metrics.
    assert_eq!(rows.len(), 17 * 6 * 2);
    for r in rows {
        assert!(r["value"].as_f64().is_some_and(|v| v > 0.0), "{r}");
    }
}

/// The rows of a benchmark's JSON and a getter that panics on a missing row.
fn bench_rows(out_dir: &Path, bench: &str) -> Vec<serde_json::Value> {
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out_dir.join(format!("{bench}.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(json["bench"], bench);
    assert!(out_dir.join(format!("{bench}.csv")).exists());
    assert!(out_dir.join(format!("{bench}.svg")).exists());
    json["rows"].as_array().unwrap().clone()
}

fn row_value(rows: &[serde_json::Value], config: &str, param: &str, metric: &str) -> f64 {
    rows.iter()
        .find(|r| r["config"] == config && r["param"] == param && r["metric"] == metric)
        .and_then(|r| r["value"].as_f64())
        .unwrap_or_else(|| panic!("no row {config} {param} {metric}"))
}

#[test]
fn bench_skip_recovers_the_open_target_past_the_kept_skip_records() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = rewind(&[
        "bench",
        "skip",
        "--tiny",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "bench failed:\n{}", text(&out.stderr));
    let rows = bench_rows(&out_dir, "skip");
    let get = |config: &str, skip: u64, metric: &str| {
        row_value(&rows, config, &format!("skip={skip}"), metric)
    };
    // Tiny: S = 0 and 200 skip records after each of the target's 16 writes.
    for skip in [0, 200] {
        assert!(get("nolog", skip, "sequence_us") > 0.0);
        for config in ["1L-force", "1L-no-force", "2L-force", "2L-no-force"] {
            for metric in [
                "commit_us",
                "rollback_us",
                "recovery_us",
                "sequence_us",
                "ratio_vs_nolog",
            ] {
                assert!(
                    get(config, skip, metric) > 0.0,
                    "{config} S={skip} {metric}"
                );
            }
            // Recovery rolled the open target back: its 16 writes undone.
            assert_eq!(get(config, skip, "recovery_rolled_back"), 1.0, "{config}");
            assert_eq!(get(config, skip, "recovery_undone"), 16.0, "{config}");
            // One-layer commit and rollback do the same persistence work
            // whatever the skip records: no scan of the log. (Two-layer
            // tree operations depend on the tree's shape.)
            if config.starts_with("1L") {
                for metric in ["commit_fences", "rollback_fences"] {
                    assert_eq!(
                        get(config, skip, metric),
                        get(config, 0, metric),
                        "{config}"
                    );
                }
            }
        }
    }
    // No-force keeps the other transaction's committed records until a
    // checkpoint: recovery meets all 3,200 (and its END) and redoes them
    // with the target's 16. Force cleared them when it committed.
    for layer in ["1L", "2L"] {
        let (nf, f) = (format!("{layer}-no-force"), format!("{layer}-force"));
        assert_eq!(get(&nf, 200, "recovery_records"), 3217.0);
        assert_eq!(get(&nf, 200, "recovery_redone"), 3216.0);
        assert!(get(&f, 200, "recovery_records") < 100.0);
        assert_eq!(get(&f, 200, "recovery_redone"), 0.0);
    }
}

#[test]
fn bench_recovered_recovers_the_scheduled_fraction() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = rewind(&[
        "bench",
        "recovered",
        "--tiny",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "bench failed:\n{}", text(&out.stderr));
    let rows = bench_rows(&out_dir, "recovered");
    // Tiny: two transactions per run, none, one or both recovered.
    for config in ["1L-force", "1L-no-force"] {
        for skip in [10u64, 150, 300] {
            for (fraction, recovered) in [("0.0", 0.0), ("0.5", 1.0), ("1.0", 2.0)] {
                let param = format!("skip={skip}/recovered={fraction}");
                let get = |metric: &str| row_value(&rows, config, &param, metric);
                assert!(get("total_ms") > 0.0 && get("logging_ms") > 0.0);
                assert!(get("ratio_vs_force") > 0.0);
                assert_eq!(get("recovered"), recovered, "{config} {param}");
                // Every recovery rolled back its one open target.
                assert_eq!(get("rolled_back"), recovered, "{config} {param}");
                assert_eq!(get("commit_ms") > 0.0, recovered < 2.0, "{config} {param}");
                assert_eq!(
                    get("recovery_ms") > 0.0,
                    recovered > 0.0,
                    "{config} {param}"
                );
                // Under no-force each recovery meets the other transaction's
                // 16 S committed records and END, and the target's 16.
                let records = get("recovery_records");
                if config == "1L-no-force" {
                    assert_eq!(records, recovered * (16.0 * (skip as f64 + 1.0) + 1.0));
                } else {
                    // Force cleared the other's records when it committed.
                    assert!(
                        records <= recovered * 8.0 * skip as f64,
                        "{config} {param}: {records} records"
                    );
                }
            }
        }
    }
}

#[test]
fn bench_redu_logs_a_redo_commit_with_a_fixed_number_of_fences() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = rewind(&[
        "bench",
        "redu",
        "--tiny",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "bench failed:\n{}", text(&out.stderr));
    let rows = bench_rows(&out_dir, "redu");
    let works = [
        "append-1k",
        "append-4k",
        "append-16k",
        "swap-1k",
        "swap-4k",
        "swap-16k",
        "rand-4",
        "rand-8",
        "rand-16",
    ];
    for work in works {
        for config in [
            "batch-force",
            "batch-no-force",
            "batch-redo",
            "batch-redo-async",
            "batch-redo-lru",
        ] {
            for metric in [
                "us_per_tx",
                "speed_vs_force",
                "fences_per_tx",
                "flushes_per_tx",
            ] {
                assert!(
                    row_value(&rows, config, work, metric) > 0.0,
                    "{config} {work} {metric}"
                );
            }
        }
    }
    // Undo pays two fences per group of 8 writes; redo's commit group is one
    // group whatever its size (a 16 KiB append is 2,048 writes): a few fences.
    let f = |config: &str, work: &str| row_value(&rows, config, work, "fences_per_tx");
    assert!(f("batch-force", "append-16k") > 500.0);
    assert!(f("batch-redo", "append-16k") < 10.0);
    assert!(f("batch-redo", "append-1k") < f("batch-force", "append-1k") / 5.0);
    assert!(f("batch-redo-async", "append-16k") < 10.0);
}

#[test]
fn info_check_and_dump_log_print_json() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.pool");
    small_pool(&path);
    let p = path.to_str().unwrap();
    let out = rewind(&["info", "--json", p]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["layout"], "cli-test");
    assert_eq!(v["in_use"], false);
    assert!(v["heap_usage"]["bytes_free"].as_u64().unwrap() > 0);
    let out = rewind(&["check", "--json", p]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["consistent"], true);
    assert!(v["problems"].as_array().unwrap().is_empty());
    let out = rewind(&["dump-log", "--json", p]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.is_array());
}

/// `rewind grow`: to a size and by one, text and JSON; past the maximum,
/// shrinking and a bad size are clean failures; the pool keeps its data.
#[test]
fn grow_grows_a_pool_up_to_its_maximum() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.pool");
    let p = path.to_str().unwrap();
    let cfg = PoolConfig::default().max_size(32 << 20);
    let pool = Pool::create(&path, "cli-test", 4 << 20, &cfg).unwrap();
    let root = pool.transaction(|tx| tx.root::<u64>()).unwrap();
    pool.transaction(|tx| tx.write(root, &7u64)).unwrap();
    drop(pool);
    let out = rewind(&["grow", p, "16M"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(std::fs::metadata(&path).unwrap().len() >= 16 << 20);
    let out = rewind(&["grow", "--json", p, "+1M"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["max_size"], 32u64 << 20);
    assert!(v["size"].as_u64().unwrap() >= v["size_before"].as_u64().unwrap() + (1 << 20));
    for size in ["64M", "+1T", "18446744073709551615"] {
        let out = rewind(&["grow", p, size]);
        assert_clean_failure(&out, &["its maximum size is 33554432"]);
        assert!(!text(&out.stderr).contains("memory"), "{size}");
    }
    assert_clean_failure(&rewind(&["grow", p, "1M"]), &["shrink"]);
    assert_clean_failure(&rewind(&["grow", p, "lots"]), &["size"]);
    // The maximum itself: as far as whole heap chunks go, and it says so
    // when that is short of the size asked for.
    let out = rewind(&["grow", p, "32M"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(
        size <= 32 << 20 && size > (32 << 20) - (256 << 10),
        "{size}"
    );
    if size < 32 << 20 {
        assert!(text(&out.stdout).contains("as large as this pool can be"));
    }
    let pool = open_pool(&path);
    assert_eq!(pool.read(root).unwrap(), 7);
    assert!(pool.size() >= 17 << 20);
    drop(pool);
    // A file extended past the maximum by hand (`truncate -s`): the pool is
    // its first 32 MiB, and a growth by +1M is refused naming the pool's
    // maximum and the bytes past it, not the file's length plus 1 MiB
    // taken for a size asked for.
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(40 << 20).unwrap();
    drop(file);
    let out = rewind(&["grow", p, "+1M"]);
    assert_clean_failure(
        &out,
        &[
            "cannot grow to 34603008 bytes",
            "of which the 8388608 past the maximum are not part of the pool",
        ],
    );
    assert_eq!(open_pool(&path).read(root).unwrap(), 7);
}

/// The black-box case with `rewind copy`: copies attempted while
/// another holder of the pool commits (a thread of this process, as a
/// service would) are refused as `in use`, never a torn copy; the copy
/// taken once it closed is consistent. `REWIND_COPIES` attempts (default
/// 16; the count is 64).
#[test]
fn copy_of_a_pool_being_committed_is_refused_never_torn() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let attempts: usize = std::env::var("REWIND_COPIES")
        .map(|s| s.parse().expect("REWIND_COPIES: a count"))
        .unwrap_or(16);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.pool");
    let pool = Pool::create(&path, "cli-test", 4 << 20, &PoolConfig::default()).unwrap();
    let slots = pool.transaction(|tx| tx.root::<[u64; 2]>()).unwrap();
    let (stop, commits) = (AtomicBool::new(false), AtomicU64::new(0));
    let (mut refused, mut inconsistent) = (0, 0);
    std::thread::scope(|s| {
        s.spawn(|| {
            // Both words always equal in a committed state.
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                pool.transaction(|tx| tx.write(slots, &[n, n])).unwrap();
                commits.store(n, Ordering::Relaxed);
            }
        });
        for k in 0..attempts {
            let dst = dir.path().join(format!("copy-{k}.pool"));
            let out = rewind(&["copy", path.to_str().unwrap(), dst.to_str().unwrap()]);
            if out.status.success() {
                // Not expected while the pool is held; if it ever happened,
                // the copy must be one committed state.
                let c = rewind::Pool::open(&dst, "cli-test", &rewind::OpenOptions::default());
                let ok = c.is_ok_and(|c| c.read(slots).is_ok_and(|v| v[0] == v[1]));
                inconsistent += usize::from(!ok);
            } else {
                assert_clean_failure(&out, &["in use"]);
                assert!(!dst.exists(), "a refused copy left a file");
                refused += 1;
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    println!(
        "{attempts} copies attempted during {} commits: {refused} refused (in use), {} copied, {inconsistent} inconsistent",
        commits.load(Ordering::Relaxed),
        attempts - refused
    );
    assert_eq!(inconsistent, 0);
    drop(pool);
    let dst = dir.path().join("after.pool");
    let out = rewind(&["copy", path.to_str().unwrap(), dst.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let c = rewind::Pool::open(&dst, "cli-test", &rewind::OpenOptions::default()).unwrap();
    let v = c.read(slots).unwrap();
    assert!(v[0] == v[1] && v[0] > 0, "{v:?}");
}

/// A reader that closes its end of the pipe (`rewind info POOL | head -0`)
/// ends the command quietly, with no panic (found by a user: `dump-log`
/// piped into `head` panicked with "failed printing to stdout").
#[test]
fn a_closed_stdout_pipe_ends_the_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipe.pool");
    small_pool(&path);
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader); // every write now fails with a broken pipe
    let out = Command::new(env!("CARGO_BIN_EXE_rewind"))
        .args(["info", path.to_str().unwrap()])
        .stdout(writer)
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(out.status.success(), "{:?}: {err}", out.status);
}

/// Runs `cmd` with its stdout and stderr piped, reads its stdout up to
/// the first line that contains `marker`, closes it there, and waits:
/// the command must then end with status 0 and nothing on stderr.
fn assert_quiet_after_closing_stdout(cmd: &mut Command, marker: &str) {
    use std::io::BufRead;
    let mut child = (cmd.stdout(std::process::Stdio::piped()))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while out.read_line(&mut line).unwrap() > 0 && !line.contains(marker) {
        line.clear();
    }
    drop(out);
    // (Its stderr ends when its own children, if still running, end too.)
    let end = child.wait_with_output().unwrap();
    let err = text(&end.stderr);
    assert!(
        end.status.success() && err.is_empty(),
        "closed after {marker:?}: {:?}\n{err}",
        end.status
    );
}

/// `rewind demo | head -N`: the demo ends quietly with status 0 at the
/// first line no one reads, in whichever step (before, during and after
/// its child's run); the child, left without a reader when the demo ends
/// while it runs, stops without a word (its stderr is the demo's), and the
/// demo's lock file is gone (found by a user: "error: reporting a commit,
/// caused by: Broken pipe" from the child).
#[test]
fn a_closed_stdout_pipe_ends_the_demo_and_its_child_quietly() {
    let dir = tempfile::tempdir().unwrap();
    for (i, stop_after) in ["pool:", "[2/4]", "killed at"].into_iter().enumerate() {
        let pool = dir.path().join(format!("demo-{i}.pool"));
        let mut demo = Command::new(env!("CARGO_BIN_EXE_rewind"));
        demo.args([
            "demo",
            "--seconds-before-kill",
            "0",
            "--throughput-tx",
            "10",
        ])
        .arg("--pool")
        .arg(&pool);
        assert_quiet_after_closing_stdout(&mut demo, stop_after);
        let mut lock = pool.into_os_string();
        lock.push(".demo-lock");
        assert!(
            !Path::new(&lock).exists(),
            "closed after {stop_after:?}: lock left"
        );
    }
}

/// The demo's child whose parent is gone (its stdout a closed pipe) stops
/// at its first line, with status 1 and no message.
#[test]
fn the_demo_child_stops_quietly_without_a_reader() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("demo.pool");
    let p = pool.to_str().unwrap();
    let out = rewind(&[
        "demo",
        "--pool",
        p,
        "--seconds-before-kill",
        "0",
        "--throughput-tx",
        "1",
    ]);
    assert!(out.status.success(), "demo failed:\n{}", text(&out.stderr));
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_rewind"))
        .args(["__demo-child", "--pool", p, "--seed", "42"])
        .stdout(writer)
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(
        out.status.code() == Some(1) && err.is_empty(),
        "{:?}\n{err}",
        out.status
    );
}

/// `rewind bench NAME | head -2`: the bench ends quietly with status 0
/// and removes its scratch directories, in --dir and in the temp dir (the
/// process ends without unwinding: they were left behind).
#[test]
fn a_closed_stdout_pipe_ends_a_bench_quietly_and_removes_its_scratch_files() {
    let dir = tempfile::tempdir().unwrap();
    let (scratch, tmp) = (dir.path().join("scratch"), dir.path().join("tmp"));
    std::fs::create_dir(&scratch).unwrap();
    std::fs::create_dir(&tmp).unwrap();
    let mut bench = Command::new(env!("CARGO_BIN_EXE_rewind"));
    bench
        .args(["bench", "nvwal", "--tiny", "--out"])
        .arg(dir.path().join("out"))
        .arg("--dir")
        .arg(&scratch)
        .env("TMPDIR", &tmp);
    // Closed after the header: the next line comes once the scratch
    // directories exist.
    assert_quiet_after_closing_stdout(&mut bench, "backend");
    for d in [&scratch, &tmp] {
        let left: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "left in {}: {left:?}", d.display());
    }
}
