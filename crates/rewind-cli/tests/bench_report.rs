//! `BENCHMARKS.md` is generated: regenerating it (and every chart and CSV
//! file) from `docs/bench/*.json` changes nothing, it stays under 400
//! lines, and it opens with the summary table.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

mod common;

#[test]
fn benchmarks_md_is_what_the_results_regenerate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let (data, md) = (root.join("docs/bench"), root.join("BENCHMARKS.md"));
    let args = ["bench", "report", "--check", "--out"].map(OsStr::new);
    common::rewind_ok(
        &[
            &args[..],
            &[data.as_os_str(), OsStr::new("--markdown"), md.as_os_str()],
        ]
        .concat(),
    );
    let md = std::fs::read_to_string(root.join("BENCHMARKS.md")).unwrap();
    assert!(md.lines().count() < 400, "{} lines", md.lines().count());
    let first_table = md.lines().position(|l| l.starts_with('|'));
    let first_section = md.lines().position(|l| l.starts_with("## "));
    assert!(first_table < first_section, "the summary table comes first");
}

/// Another machine's results (`docs/bench/NAME/`, e.g. a 16-core machine
/// lent for the thread-scaling runs) have a page of their own beside
/// them, regenerated the same way, and the main page links to it.
#[test]
fn other_machines_pages_are_what_their_results_regenerate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let main = std::fs::read_to_string(root.join("BENCHMARKS.md")).unwrap();
    for e in std::fs::read_dir(root.join("docs/bench")).unwrap() {
        let data = e.unwrap().path();
        if !data.is_dir() {
            continue;
        }
        let md = data.join("BENCHMARKS.md");
        let args = ["bench", "report", "--check", "--out"].map(OsStr::new);
        common::rewind_ok(
            &[
                &args[..],
                &[data.as_os_str(), OsStr::new("--markdown"), md.as_os_str()],
            ]
            .concat(),
        );
        let name = data.file_name().unwrap().to_string_lossy().into_owned();
        let link = format!("(docs/bench/{name}/BENCHMARKS.md)");
        assert!(main.contains(&link), "BENCHMARKS.md links to {link}");
    }
}

#[test]
fn a_changed_result_is_caught_and_regenerating_fixes_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("bench");
    std::fs::create_dir(&data).unwrap();
    for e in std::fs::read_dir(root.join("docs/bench")).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, data.join(p.file_name().unwrap())).unwrap();
        }
    }
    let md = dir.path().join("BENCHMARKS.md");
    std::fs::copy(root.join("BENCHMARKS.md"), &md).unwrap();
    // One number changed in the data: the document no longer matches.
    let json = data.join("fence.json");
    let text = std::fs::read_to_string(&json).unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    doc["rows"][0]["value"] = serde_json::json!(12345.0);
    std::fs::write(&json, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    let report = |check: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_rewind"));
        c.args(["bench", "report", "--out"]).arg(&data);
        c.arg("--markdown").arg(&md);
        if check {
            c.arg("--check");
        }
        c.output().expect("run the rewind binary")
    };
    let stale = report(true);
    assert_eq!(stale.status.code(), Some(1));
    let err = String::from_utf8_lossy(&stale.stderr);
    assert!(err.contains("fence"), "{err}");
    // The command it suggests writes the document checked, not another.
    assert!(
        err.contains(&format!("--markdown {}", md.display())),
        "{err}"
    );
    assert!(report(false).status.success());
    assert!(report(true).status.success());
    assert!(std::fs::read_to_string(data.join("fence.csv"))
        .unwrap()
        .contains("12345"));
}

/// A directory with no results is refused, not a document of empty
/// sections written over the one there.
#[test]
fn a_directory_without_results_is_refused_and_the_document_kept() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("empty");
    std::fs::create_dir(&data).unwrap();
    let md = dir.path().join("B.md");
    std::fs::write(&md, "kept\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rewind"))
        .args(["bench", "report", "--out"])
        .arg(&data)
        .arg("--markdown")
        .arg(&md)
        .output()
        .expect("run the rewind binary");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no benchmark results"));
    assert_eq!(std::fs::read_to_string(&md).unwrap(), "kept\n");
}

/// Results the report cannot use are errors naming them, never sections
/// quietly "not measured" (found by a user: an unreadable file, or a
/// mistyped `--out` that replaced every section of the document), and a
/// value no chart can hold does not hang the chart (1e308 did, in the
/// log axis's layout).
#[test]
fn bad_results_are_errors_naming_them_and_huge_values_do_not_hang() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = tempfile::tempdir().unwrap();
    let md = dir.path().join("B.md");
    let report = |data: &Path| {
        Command::new(env!("CARGO_BIN_EXE_rewind"))
            .args(["bench", "report", "--out"])
            .arg(data)
            .arg("--markdown")
            .arg(&md)
            .output()
            .expect("run the rewind binary")
    };
    let missing = report(&dir.path().join("no-such-dir"));
    assert_eq!(missing.status.code(), Some(2));
    assert!(!md.exists(), "nothing written for a missing directory");
    let data = dir.path().join("bench");
    std::fs::create_dir(&data).unwrap();
    let text = std::fs::read_to_string(root.join("docs/bench/overhead.json")).unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    doc["rows"][0]["value"] = serde_json::json!(1e308);
    std::fs::write(data.join("overhead.json"), doc.to_string()).unwrap();
    assert!(
        report(&data).status.success(),
        "a huge value is drawn without it"
    );
    for bad in [&b"\xff\xfe"[..], b"{garbage"] {
        std::fs::write(data.join("fence.json"), bad).unwrap();
        let out = report(&data);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("fence.json") && !err.contains("panicked"),
            "{err}"
        );
    }
}
