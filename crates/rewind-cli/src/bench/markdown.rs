//! `rewind bench report`: `BENCHMARKS.md`, every chart and every CSV
//! regenerated from the JSON results (`docs/bench/NAME.json`), so that the
//! document cannot drift from the data. With `--check` nothing is
//! written: the command fails if regenerating would change a file.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::harness::{Bench, Headline};
use super::output::Report;
use crate::error::CliError;

/// The document for `benches`, their results read from `data`. Returns
/// the document and every file it is drawn from: `(path, contents)`.
pub fn generate(benches: &[Bench], data: &Path) -> Result<Vec<(PathBuf, String)>, CliError> {
    // A mistyped directory would otherwise read as "nothing run yet" and
    // replace every section of the document.
    if !data.is_dir() {
        return Err(CliError::Usage(format!(
            "{}: no such directory of results (`rewind bench NAME --out {}` writes them)",
            data.display(),
            data.display()
        )));
    }
    let mut files = Vec::new();
    let mut reports = Vec::new();
    for b in benches {
        let meta = b.meta()?;
        let path = data.join(format!("{}.json", b.name));
        // An experiment not run yet has a section that says so; a result
        // that cannot be read or parsed is an error naming its file.
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                reports.push(Report::new(b.name));
                continue;
            }
            Err(e) => return Err(CliError::io(format!("reading {}", path.display()))(e)),
        };
        let report: Report = serde_json::from_str(&text).map_err(|e| {
            CliError::Bench(format!("{}: not a benchmark result: {e}", path.display()))
        })?;
        let svg = report.chart(&meta.chart)?;
        files.push((data.join(format!("{}.svg", b.name)), svg));
        files.push((data.join(format!("{}.csv", b.name)), report.csv()?));
        reports.push(report);
    }
    let mut md = String::from("# Benchmarks\n\n");
    md.push_str(
        "rewind against the systems a user would pick instead, in the papers' experiments. Each \
         line is one run of `rewind bench` (every system in the same run, in alternating rounds, \
         medians of per-round ratios); the link leads to the experiment. Ratio: the other \
         system's time over rewind's (above 1: rewind is faster).\n\n",
    );
    md.push_str("| experiment | at | rewind | best other | ratio |\n|---|---|---|---|---:|\n");
    for (b, r) in benches.iter().zip(&reports) {
        for h in &b.meta()?.headlines {
            md.push_str(&headline_row(b, r, h)?);
        }
    }
    let machines: Vec<&str> = reports.iter().map(|r| r.machine.as_str()).collect();
    let mut machines: Vec<&str> = machines.into_iter().filter(|m| !m.is_empty()).collect();
    machines.dedup();
    let _ = write!(
        md,
        "\nMachine: {}. The peers (libpmemobj, Berkeley DB, LMDB, SQLite, redb) run with \
         `--features peers` once `scripts/install-peers.sh` has installed them. Regenerate this \
         page, the charts and the CSV files from `docs/bench/*.json` with `cargo run -p \
         rewind-cli -- bench report --out docs/bench`; a test checks that doing so changes \
         nothing.\n",
        machines.join("; ")
    );
    for (b, r) in benches.iter().zip(&reports) {
        md.push_str(&section(b, r)?);
    }
    files.push((PathBuf::from("BENCHMARKS.md"), md));
    Ok(files)
}

/// The anchor GitHub gives a `## NAME: ...` heading.
fn anchor(b: &Bench, about: &str) -> String {
    let title = format!("{}: {about}", b.name).to_lowercase();
    let keep = |c: &char| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_';
    title
        .chars()
        .filter(keep)
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// A number with three significant digits at most (whole above 100).
pub fn num(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// `(system/config, value)` of the best row of `metric` at `param` among
/// the systems `pick` accepts.
fn best(
    r: &Report,
    h: &Headline,
    param: &str,
    pick: impl Fn(&str, &str) -> bool,
) -> Option<(String, f64)> {
    let rows = r
        .rows
        .iter()
        .filter(|x| x.param == param && x.metric == h.metric);
    let rows = rows.filter(|x| pick(&x.system, &format!("{}/{}", x.system, x.config)));
    let better = |a: f64, b: f64| if h.higher_is_better { a > b } else { a < b };
    rows.fold(None, |acc, x| match acc {
        Some((_, v)) if !better(x.value, v) => acc,
        _ => Some((format!("{}/{}", x.system, x.config), x.value)),
    })
}

fn headline_row(b: &Bench, r: &Report, h: &Headline) -> Result<String, CliError> {
    let param = match &h.param {
        Some(p) => p.clone(),
        None => r.params(Some(&h.metric)).pop().unwrap_or_default(),
    };
    let named = |s: &str, full: &str| h.against.iter().any(|a| a == s || a == full);
    // rewind's systems: the library itself, and crates on it
    // (rewind-sqlite, rewind-collections' maps: `coll-…`).
    let ours = best(r, h, &param, |s, full| {
        (s == "rewind" || s.starts_with("rewind-") || s.starts_with("coll-")) && !named(s, full)
    });
    let other = best(r, h, &param, named);
    let link = format!("[{}: {}](#{})", b.name, h.what, anchor(b, &b.meta()?.about));
    Ok(match (ours, other) {
        (Some((o, ov)), Some((p, pv))) => {
            let ratio = if h.higher_is_better { ov / pv } else { pv / ov };
            let unit = &h.unit;
            format!(
                "| {link} | {param} | {o} {} {unit} | {p} {} {unit} | {}× |\n",
                num(ov),
                num(pv),
                num(ratio)
            )
        }
        _ => format!(
            "| {link} | {param} | not measured | {} not in this run | |\n",
            h.against.join(", ")
        ),
    })
}

/// Up to `n` of `items`, evenly spread, the first and last included.
fn spread<T: Clone>(items: &[T], n: usize) -> Vec<T> {
    if items.len() <= n || n < 2 {
        return items.to_vec();
    }
    (0..n)
        .filter_map(|i| items.get(i * (items.len() - 1) / (n - 1)).cloned())
        .collect()
}

/// Rewind configurations shown in a section's table, at most.
const SHOWN: usize = 4;

fn section(b: &Bench, r: &Report) -> Result<String, CliError> {
    let meta = b.meta()?;
    let metric = meta.chart.metrics.first().map_or("", String::as_str);
    let params = spread(&r.params(Some(metric)), 6);
    let features = if meta.peers.is_empty() {
        ""
    } else {
        " --features peers"
    };
    let mut s = format!("\n## {}: {}\n\n", b.name, meta.about);
    let quick = if r.scale == "quick" { " --quick" } else { "" };
    // `disk` always runs on Msync, in the temp directory unless told.
    let on_disk = if b.name == "disk" {
        "add `--dir DIR` to run it on another disk"
    } else {
        "add `--dir DIR --backend msync` to run it on a disk"
    };
    let _ = writeln!(
        s,
        "`cargo run --release -p rewind-cli{features} -- bench {}{quick}` ({on_disk})\n",
        b.name
    );
    let _ = writeln!(s, "**Paper:** {}\n", meta.paper);
    if r.rows.is_empty() {
        let _ = writeln!(s, "No results in `docs/bench/` yet.");
        return Ok(s);
    }
    // The other systems, then rewind's best configurations at the last point.
    let last = params.last().cloned().unwrap_or_default();
    let mut systems: Vec<(String, String)> = r.systems();
    let lower = !meta.chart.higher_is_better();
    let key = |(sy, c): &(String, String)| r.value(sy, c, &last, metric).unwrap_or(f64::NAN);
    let (mut ours, others): (Vec<_>, Vec<_>) =
        systems.drain(..).partition(|(sy, _)| sy == "rewind");
    ours.sort_by(|a, b| {
        let o = key(a).total_cmp(&key(b));
        if lower {
            o
        } else {
            o.reverse()
        }
    });
    let more = ours.len().saturating_sub(SHOWN);
    ours.truncate(SHOWN);
    let what = meta.chart.y_label.trim_end_matches(" (log scale)");
    let _ = writeln!(s, "**Ours** (`{metric}`: {what}):\n");
    let _ = write!(s, "| system/config |");
    for p in &params {
        let _ = write!(s, " {p} |");
    }
    let _ = write!(s, "\n|---|{}\n", "---:|".repeat(params.len()));
    for (sy, c) in others.iter().chain(&ours) {
        let vals: Vec<Option<f64>> = params.iter().map(|p| r.value(sy, c, p, metric)).collect();
        if vals.iter().all(Option::is_none) {
            continue;
        }
        let _ = write!(s, "| {sy}/{c} |");
        for v in vals {
            let _ = write!(s, " {} |", v.map_or("–".into(), num));
        }
        s.push('\n');
    }
    if more > 0 {
        let _ = writeln!(
            s,
            "\nrewind's {SHOWN} best of {} configurations at {last}; all in \
             [`docs/bench/{n}.csv`](docs/bench/{n}.csv).",
            more + SHOWN,
            n = b.name
        );
    }
    let _ = writeln!(
        s,
        "\n![{n}](docs/bench/{n}.svg)\n\n{}",
        meta.notes,
        n = b.name
    );
    Ok(s)
}
