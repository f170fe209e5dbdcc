//! The library's modules form layers: each may use only those below it.
//! This reads every source file's `crate::module` paths (in `use` lines
//! and inline paths alike) and fails on an edge that points up or
//! sideways, which is also how an import cycle would show.

use std::collections::BTreeSet;
use std::path::Path;

/// Bottom to top. `error` is below everything, then `padded` (a value on
/// cache lines of its own), which uses nothing.
const LAYERS: &[&str] = &[
    "error",
    "padded",
    "format",
    "persist",
    "alloc",
    "log",
    "policy",
    "recovery",
    "engine",
    "tx",
    "pool",
    "inspect",
    "crashtest",
];

fn rank(m: &str) -> Option<usize> {
    LAYERS.iter().position(|&l| l == m)
}

fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The modules a source text names as `crate::name`.
fn used(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect();
        if !name.is_empty() {
            out.insert(name);
        }
    }
    out
}

#[test]
fn every_module_uses_only_the_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut edges = BTreeSet::new();
    for f in &all {
        let rel = f.strip_prefix(&src).unwrap();
        let top = rel
            .iter()
            .next()
            .unwrap()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if top == "lib" {
            continue;
        }
        let from = rank(&top).unwrap_or_else(|| panic!("module `{top}` is not in LAYERS"));
        for m in used(&std::fs::read_to_string(f).unwrap()) {
            if m == top {
                continue;
            }
            let to = rank(&m)
                .unwrap_or_else(|| panic!("{}: unknown module `crate::{m}`", rel.display()));
            edges.insert((top.clone(), m.clone()));
            assert!(
                to < from,
                "{} (layer `{top}`) uses `crate::{m}`, which is not below it",
                rel.display()
            );
        }
    }
    assert!(edges.len() > 20, "too few edges found: {edges:?}");
}
