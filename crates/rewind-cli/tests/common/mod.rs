//! What the bench tests share: finding a row of a bench's JSON results.

// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::ffi::OsStr;

use serde_json::Value;

/// Runs the `rewind` binary with `args` and asserts that it succeeded,
/// showing its error output if not.
pub fn rewind_ok(args: &[&OsStr]) -> std::process::Output {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rewind"))
        .args(args)
        .output()
        .expect("run the rewind binary");
    assert!(
        out.status.success(),
        "rewind {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The row whose fields have the given values (fields not named may be
/// anything).
pub fn find<'a>(rows: &'a [Value], fields: &[(&str, &str)]) -> Option<&'a Value> {
    rows.iter()
        .find(|r| fields.iter().all(|&(field, want)| r[field] == want))
}

/// The value of the row whose fields have the given values.
pub fn value_where(rows: &[Value], fields: &[(&str, &str)]) -> Option<f64> {
    find(rows, fields).and_then(|r| r["value"].as_f64())
}

/// The value of the row of `system`/`config` at `param` for `metric`.
pub fn value(rows: &[Value], system: &str, config: &str, param: &str, metric: &str) -> Option<f64> {
    row(rows, system, config, param, metric).and_then(|r| r["value"].as_f64())
}

/// The row of `system`/`config` at `param` for `metric`.
pub fn row<'a>(
    rows: &'a [Value],
    system: &str,
    config: &str,
    param: &str,
    metric: &str,
) -> Option<&'a Value> {
    find(
        rows,
        &[
            ("system", system),
            ("config", config),
            ("param", param),
            ("metric", metric),
        ],
    )
}

/// Runs `rewind bench NAME --tiny` with its output and scratch files in
/// temporary directories, asserts that it succeeded, wrote its CSV file and
/// chart and removed its scratch files, and returns its JSON results.
pub fn run_tiny(name: &str) -> Value {
    let out_dir = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let (out, dir) = (out_dir.path().as_os_str(), scratch.path().as_os_str());
    let args = ["bench", name, "--tiny", "--out"].map(OsStr::new);
    // A digest mismatch names the systems in the error.
    rewind_ok(&[&args[..], &[out, OsStr::new("--dir"), dir]].concat());
    let text = std::fs::read_to_string(out_dir.path().join(format!("{name}.json"))).unwrap();
    let json: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["bench"], name);
    assert!(out_dir.path().join(format!("{name}.csv")).exists());
    let svg = std::fs::read_to_string(out_dir.path().join(format!("{name}.svg"))).unwrap();
    assert!(
        svg.starts_with("<svg"),
        "not an SVG: {}",
        &svg[..svg.len().min(60)]
    );
    // The pools and the peers' files went to --dir, and were removed.
    let left: Vec<_> = std::fs::read_dir(scratch.path()).unwrap().collect();
    assert!(left.is_empty(), "bench {name} left {left:?} in --dir");
    json
}
