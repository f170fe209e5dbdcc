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
/// The document `md` with the results in `data`: every file to write, the
/// document last.
pub fn generate(
    benches: &[Bench],
    data: &Path,
    md_path: &Path,
) -> Result<Vec<(PathBuf, String)>, CliError> {
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
    // A directory with no result at all would replace the document with
    // a page of empty sections.
    if files.is_empty() {
        return Err(CliError::Usage(format!(
            "{}: no benchmark results in it (`rewind bench NAME --out {}` writes them)",
            data.display(),
            data.display()
        )));
    }
    let mut md = String::from("# Benchmarks\n\n");
    md.push_str(
        "rewind against the systems a user would pick instead, in the papers' experiments. Each \
         line is one run of `rewind bench` (every system in the same run, in alternating rounds, \
         medians of per-round ratios); the link leads to the experiment. Ratio: the other \
         system's time over rewind's (above 1: rewind is faster).\n\n",
    );
    md.push_str("| experiment | at | rewind | best other | ratio |\n|---|---|---|---|---:|\n");
    // Only the experiments run: a page of another machine may hold a few.
    let ran: Vec<(&Bench, &Report)> = (benches.iter().zip(&reports))
        .filter(|(_, r)| !r.scale.is_empty() || !r.rows.is_empty())
        .collect();
    for &(b, r) in &ran {
        for h in &b.meta()?.headlines {
            md.push_str(&headline_row(b, r, h)?);
        }
    }
    let machines: Vec<&str> = reports.iter().map(|r| r.machine.as_str()).collect();
    // Each machine once, in the order first met (runs on the same machine
    // alternate with those on a disk).
    let mut machines: Vec<&str> = machines.into_iter().filter(|m| !m.is_empty()).collect();
    let mut seen = std::collections::HashSet::new();
    machines.retain(|m| seen.insert(*m));
    let rel = relative(data, md_path);
    let regenerate = if rel == MAIN {
        format!("from `{MAIN}/*.json` with `cargo run -p rewind-cli -- bench report --out {MAIN}`")
    } else {
        "from the JSON files beside it with `cargo run -p rewind-cli -- bench report --out DIR \
         --markdown DIR/BENCHMARKS.md`, DIR being this page's directory"
            .to_string()
    };
    let _ = write!(
        md,
        "\nMachine: {}. The peers (libpmemobj, Berkeley DB, LMDB, SQLite, redb) run with \
         `--features peers` once `scripts/install-peers.sh` has installed them. Regenerate this \
         page, the charts and the CSV files {regenerate}; a test checks that doing so changes \
         nothing.\n",
        machines.join("; ")
    );
    let others = other_machines(data, &rel);
    if !others.is_empty() {
        let _ = write!(
            md,
            "\nOther machines and media (a disk), each on a page of its own: {}.\n",
            others.join(", ")
        );
    }
    let not_run: Vec<&str> = (benches.iter().zip(&reports))
        .filter(|(_, r)| r.scale.is_empty() && r.rows.is_empty())
        .map(|(b, _)| b.name)
        .collect();
    if !not_run.is_empty() {
        let _ = write!(md, "\nNot run here: {}.\n", not_run.join(", "));
    }
    for (b, r) in ran {
        md.push_str(&section(b, r, &rel)?);
    }
    files.push((md_path.to_path_buf(), md));
    Ok(files)
}

/// Where the main page's results are, from the repository's root.
const MAIN: &str = "docs/bench";

/// `data` as a link from the page `md` (`/`-separated; as given when it
/// is not under the page's directory).
fn relative(data: &Path, md: &Path) -> String {
    let base = md.parent().unwrap_or(Path::new(""));
    let rel = data.strip_prefix(base).unwrap_or(data);
    let parts: Vec<String> = (rel.components())
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.is_empty() {
        ".".into()
    } else {
        parts.join("/")
    }
}

/// Links to the pages of `data`'s subdirectories (each another machine's
/// results, with its own `BENCHMARKS.md`), in name order.
fn other_machines(data: &Path, rel: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(data) else {
        return Vec::new();
    };
    let mut names: Vec<String> = (entries.flatten())
        .filter(|e| e.path().join("BENCHMARKS.md").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    (names.iter())
        .map(|n| format!("[{n}]({rel}/{n}/BENCHMARKS.md)"))
        .collect()
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
    let chosen = |full: &str| h.ours.is_empty() || h.ours.iter().any(|a| a == full);
    let ours = best(r, h, &param, |s, full| {
        (s == "rewind" || s.starts_with("rewind-") || s.starts_with("coll-"))
            && !named(s, full)
            && chosen(full)
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
        // (Results from before the metric existed: neither side has it.)
        (None, None) => format!("| {link} | {param} | not measured | not measured | |\n"),
        // The peer not in this run (a build without `peers`): ours as
        // measured.
        (Some((o, ov)), None) => format!(
            "| {link} | {param} | {o} {} {} | {} not in this run | |\n",
            num(ov),
            h.unit,
            h.against.join(", ")
        ),
        (None, Some((p, pv))) => format!(
            "| {link} | {param} | not measured | {p} {} {} | |\n",
            num(pv),
            h.unit
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

/// The experiment's section; `rel`: the results directory, from the page.
fn section(b: &Bench, r: &Report, rel: &str) -> Result<String, CliError> {
    let meta = b.meta()?;
    let metric = meta.chart.metrics.first().map_or("", String::as_str);
    let params = spread(&r.params(Some(metric)), 6);
    let features = if meta.peers.is_empty() {
        ""
    } else {
        " --features peers"
    };
    let mut s = format!("\n## {}: {}\n\n", b.name, meta.about);
    let mut quick = if r.scale == "quick" { " --quick" } else { "" }.to_string();
    if !r.configs.is_empty() {
        quick = format!("{quick} --configs {}", r.configs.join(","));
    }
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
        let _ = writeln!(s, "No results in `{rel}/` yet.");
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
             [`{rel}/{n}.csv`]({rel}/{n}.csv).",
            more + SHOWN,
            n = b.name
        );
    }
    let _ = writeln!(s, "\n![{n}]({rel}/{n}.svg)\n\n{}", meta.notes, n = b.name);
    Ok(s)
}
