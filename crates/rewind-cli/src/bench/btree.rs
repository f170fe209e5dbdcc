//! REWIND Fig. 7: the B+-tree against the fraction of updates.
//!
//! One B+-tree implementation (`tree`), loaded with 100k records of 32
//! bytes (an 8-byte key, a 24-byte value), then a mix of lookups and
//! updates at update fractions 0, 0.1, 0.5 and 1, the updates split evenly
//! between inserts of new keys and deletes of present ones. Each operation
//! is its own durable transaction (a lookup a read transaction). Systems:
//! the tree in DRAM (`volatile`), with durable stores and no log
//! (`persist-nolog`), in rewind in every log variant × policy, and with
//! `--features peers` on libpmemobj (`pmdk`), beside Berkeley DB, LMDB,
//! SQLite and redb with their own trees; and `rewind-collections`' own
//! `BTreeMap` (`coll-btree`: unsorted leaves with fingerprints) and
//! `HashMap` (`coll-hash`, MARS Fig. 7's hash table beside the tree) in
//! pools of the default configuration. Every system sits on the same
//! tmpfs.
//!
//! Fair measurement, as in `overhead`: one workload model draws each
//! round's operations before the round (every lookup hits, every update
//! succeeds), every system applies the same sequence, the systems take
//! turns round by round, each fraction starts with one unmeasured warm-up
//! round of the same length, and the median round counts. Ratios are taken
//! per round against the system measured beside it and the median ratio
//! reported. Each system's answers are folded into a digest, and the run
//! fails if two systems' digests differ.
//!
//! A round's time runs until every committed value is in place: under
//! rewind's redo-async a commit returns before its values are written back
//! (by a thread of the pool), so the round ends with `Pool::sync`, and the
//! time until the last commit returned is reported beside it.

use std::path::Path;
use std::time::{Duration, Instant};

use rewind::Counters;

use super::tree::plot::{self, Legend, Series};
use super::tree::systems::{self, Plan, Subject, PEERS};
use super::tree::workload::{Digest, Model, Op};
use super::{median, median_ratio, Ctx, Scale};
use crate::error::CliError;
use crate::report::{Report, Row};
use plotters::prelude::SeriesLabelPosition;

/// Update fractions.
pub const FRACTIONS: [f64; 4] = [0.0, 0.1, 0.5, 1.0];
/// The workload's seed.
const SEED: u64 = 0x7ee;

/// Records loaded, operations per round, measured rounds.
fn sizes(scale: Scale) -> (usize, usize, usize) {
    match scale {
        Scale::Tiny => (300, 100, 2),
        // Half the paper's tree, to keep `bench all --quick` within minutes.
        Scale::Quick => (50_000, 3_000, 3),
        // 5 rounds of 40k: the paper's 200k operations per fraction.
        Scale::Full => (100_000, 40_000, 5),
    }
}

/// Each tree's space: the loaded tree is ~7 MB at 100k records; the rest
/// is headroom for rewind's log (an eighth) and the allocators.
fn space(scale: Scale) -> u64 {
    match scale {
        Scale::Tiny => 16 << 20,
        Scale::Quick => 96 << 20,
        Scale::Full => 256 << 20,
    }
}

/// The update fraction as a row's parameter.
pub fn param(u: f64) -> String {
    format!("update={u}")
}

/// What one system's round gave.
pub struct Measured {
    /// Until every committed value was in place (redo-async's write-back
    /// included: a run has not finished while write-back is behind).
    pub time: Duration,
    /// Until the last commit returned.
    pub commits: Duration,
    pub counters: Option<Counters>,
    pub digest: Digest,
}

/// Applies `ops` to `s`, each its own transaction, then waits for any
/// write-back.
pub fn measure(s: &mut Subject, ops: &[Op]) -> Result<Measured, CliError> {
    let before = s.store.counters();
    let mut d = Digest::default();
    let start = Instant::now();
    for &op in ops {
        if let Err(e) = s.store.apply(op, &mut d) {
            return Err(CliError::Bench(format!("{}: {op:?}: {e}", s.name())));
        }
    }
    let commits = start.elapsed();
    s.store
        .sync()
        .map_err(|e| CliError::Bench(format!("{}: sync: {e}", s.name())))?;
    let time = start.elapsed();
    let counters = s.store.counters().zip(before).map(|(a, b)| a.since(&b));
    Ok(Measured {
        time,
        commits,
        counters,
        digest: d,
    })
}

/// Fails unless every digest equals the first.
pub fn check_digests(subjects: &[Subject], digests: &[Digest], what: &str) -> Result<(), CliError> {
    let failures: Vec<String> = subjects
        .iter()
        .zip(digests)
        .filter(|(_, d)| **d != digests[0])
        .map(|(s, d)| {
            format!(
                "{what}: {} answered differently from {} (digest {:x} vs {:x})",
                s.name(),
                subjects[0].name(),
                d.0,
                digests[0].0
            )
        })
        .collect();
    if failures.is_empty() {
        Ok(())
    } else {
        Err(CliError::Verification { failures })
    }
}

/// Builds the systems in `dir` and loads `load` into each.
pub fn loaded(dir: &Path, plan: &Plan, load: &[Op]) -> Result<Vec<Subject>, CliError> {
    let mut subjects = systems::build(dir, plan)?;
    for s in subjects.iter_mut() {
        s.store
            .load(load)
            .map_err(|e| CliError::Bench(format!("loading {}: {e}", s.name())))?;
    }
    Ok(subjects)
}

/// `rewind-collections`' maps, loaded with `load`, after the others.
fn collections(
    dir: &Path,
    plan: &Plan,
    load: &[Op],
    out: &mut Vec<Subject>,
) -> Result<(), CliError> {
    use super::tree::coll::MapStore;
    use super::tree::Value;
    use rewind::Policy;
    use rewind_collections::{BTreeMap, HashMap};
    let built = |e| CliError::Bench(format!("creating a collection: {e}"));
    let stores: [(&'static str, &str, Box<dyn super::tree::store::Store>); 3] = [
        (
            "coll-btree",
            "default",
            Box::new(
                MapStore::<BTreeMap<u64, Value>>::create(dir, "default", None, plan)
                    .map_err(built)?,
            ),
        ),
        (
            "coll-btree",
            "redo",
            Box::new(
                MapStore::<BTreeMap<u64, Value>>::create(dir, "redo", Some(Policy::Redo), plan)
                    .map_err(built)?,
            ),
        ),
        (
            "coll-hash",
            "default",
            Box::new(
                MapStore::<HashMap<u64, Value>>::create(dir, "default", None, plan)
                    .map_err(built)?,
            ),
        ),
    ];
    for (system, config, mut store) in stores {
        store
            .load(load)
            .map_err(|e| CliError::Bench(format!("loading {system}/{config}: {e}")))?;
        out.push(Subject {
            system,
            config: config.into(),
            store,
        });
    }
    Ok(())
}

pub fn run(ctx: &Ctx, out: &Path) -> Result<(), CliError> {
    let scale = ctx.scale;
    let (n_load, n_ops, rounds) = sizes(scale);
    println!(
        "bench btree (REWIND Fig. 7): B+-tree of {n_load} records (8-byte key, 24-byte value), \
         {n_ops} operations per round, each its own transaction"
    );
    println!(
        "  update fractions {FRACTIONS:?}; median of {rounds} alternating rounds after a warm-up round{}",
        super::tiny_note(scale)
    );
    println!("  {}", super::latency_line(ctx.latency));
    let dir = crate::scratch::dir()?;
    println!("  stores in {}", dir.path().display());
    let plan = Plan {
        space: space(scale),
        log: None,
        baselines: true,
        auto_checkpoint: true,
        latency: ctx.latency,
    };
    let mut model = Model::new(SEED);
    let load = model.load(n_load);
    let mut subjects = loaded(dir.path(), &plan, &load)?;
    collections(dir.path(), &plan, &load, &mut subjects)?;
    let n = subjects.len();
    let bar = super::progress((FRACTIONS.len() * (rounds + 1) * n) as u64);
    let find =
        |subjects: &[Subject], system: &str| subjects.iter().position(|s| s.system == system);
    let nolog = find(&subjects, "persist-nolog");
    let peers: Vec<(&str, usize)> = PEERS
        .iter()
        .filter_map(|p| find(&subjects, p).map(|i| (*p, i)))
        .collect();
    let mut rows = Vec::new();
    for &u in &FRACTIONS {
        let warm = model.mix(n_ops, u);
        let mut digests = Vec::new();
        for s in subjects.iter_mut() {
            bar.set_message(format!("update={u} {} (warm-up)", s.name()));
            digests.push(measure(s, &warm)?.digest);
            bar.inc(1);
        }
        check_digests(&subjects, &digests, &format!("update={u} warm-up"))?;
        let mut times = vec![Vec::new(); n];
        let mut commit_times = vec![Vec::new(); n];
        let mut counters: Vec<Option<Counters>> = vec![Some(Counters::default()); n];
        for round in 0..rounds {
            let ops = model.mix(n_ops, u);
            let mut digests = Vec::new();
            for (i, s) in subjects.iter_mut().enumerate() {
                bar.set_message(format!("update={u} {}", s.name()));
                let m = measure(s, &ops)?;
                times[i].push(m.time);
                commit_times[i].push(m.commits);
                counters[i] = counters[i].zip(m.counters).map(|(a, b)| a + b);
                digests.push(m.digest);
                bar.inc(1);
            }
            check_digests(&subjects, &digests, &format!("update={u} round {round}"))?;
        }
        let per_op = (n_ops * rounds) as f64;
        for (i, s) in subjects.iter().enumerate() {
            let mut add = |metric: &str, value: f64, unit: &str| {
                rows.push(Row {
                    system: s.system.into(),
                    config: s.config.clone(),
                    param: param(u),
                    metric: metric.into(),
                    value,
                    unit: unit.into(),
                })
            };
            let us =
                median(times[i].iter().map(Duration::as_secs_f64).collect()) * 1e6 / n_ops as f64;
            add("us_per_op", us, "us");
            if s.config.ends_with("redo-async") {
                let secs = commit_times[i].iter().map(Duration::as_secs_f64).collect();
                add("us_per_op_commits", median(secs) * 1e6 / n_ops as f64, "us");
            }
            if let Some(b) = nolog {
                add("ratio_vs_nolog", median_ratio(&times[i], &times[b]), "x");
            }
            for &(p, j) in &peers {
                if j != i {
                    add(
                        &format!("speed_vs_{p}"),
                        median_ratio(&times[j], &times[i]),
                        "x",
                    );
                }
            }
            if let Some(c) = &counters[i] {
                add("fences_per_op", c.fences as f64 / per_op, "count");
                add(
                    "flushes_per_op",
                    (c.flushed_lines + c.nt_lines) as f64 / per_op,
                    "lines",
                );
            }
        }
    }
    bar.finish_and_clear();
    drop(subjects);

    let report = Report {
        bench: "btree".into(),
        rows,
    };
    print_tables(&report);
    print_goals(&report);
    let chart = chart(&report)?;
    super::write_results(&report, out, &chart)
}

/// `system/config` pairs in the order measured.
pub fn configs(report: &Report) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for r in &report.rows {
        let key = (r.system.clone(), r.config.clone());
        if !out.contains(&key) {
            out.push(key);
        }
    }
    out
}

fn print_tables(report: &Report) {
    let v = |s: &str, c: &str, p: &str, m: &str| report.value(s, c, p, m).unwrap_or(f64::NAN);
    println!();
    let mut head = format!("  {:<28}", "system/config");
    for u in FRACTIONS {
        head.push_str(&format!(" | {:>15}", format!("update={u}")));
    }
    println!("{head}");
    println!(
        "  {:<28}{}",
        "",
        " | us/op  x nolog".repeat(FRACTIONS.len())
    );
    for (s, c) in configs(report) {
        let mut line = format!("  {:<28}", format!("{s}/{c}"));
        for u in FRACTIONS {
            let p = param(u);
            line.push_str(&format!(
                " | {:>6.3} {:>7.2}",
                v(&s, &c, &p, "us_per_op"),
                v(&s, &c, &p, "ratio_vs_nolog")
            ));
        }
        println!("{line}");
    }
    // Redo-async's time is until its write-back finished; until the last
    // commit returned, too.
    for (s, c) in configs(report)
        .into_iter()
        .filter(|(_, c)| c.ends_with("redo-async"))
    {
        let times: Vec<String> = FRACTIONS
            .iter()
            .map(|&u| format!("{:.3}", v(&s, &c, &param(u), "us_per_op_commits")))
            .collect();
        println!(
            "  {c}: us/op until the last commit returned (write-back still behind): {}",
            times.join(", ")
        );
    }
    // At 100% updates: speed against each peer, counters per operation.
    let p = param(1.0);
    let peers: Vec<&str> = PEERS
        .iter()
        .copied()
        .filter(|peer| {
            report
                .rows
                .iter()
                .any(|r| r.metric == format!("speed_vs_{peer}"))
        })
        .collect();
    println!();
    let mut head = format!("  {:<28} {:>8} {:>8}", "at update=1", "fences", "lines");
    for peer in &peers {
        head.push_str(&format!(" {:>9}", format!("vs {peer}")));
    }
    println!("{head}");
    for (s, c) in configs(report) {
        let mut line = format!(
            "  {:<28} {:>8.2} {:>8.2}",
            format!("{s}/{c}"),
            v(&s, &c, &p, "fences_per_op"),
            v(&s, &c, &p, "flushes_per_op")
        );
        for peer in &peers {
            line.push_str(&format!(
                " {:>8.2}x",
                v(&s, &c, &p, &format!("speed_vs_{peer}"))
            ));
        }
        println!("{line}");
    }
    println!();
}

/// The goals at 100% updates, against rewind's fastest configuration.
fn print_goals(report: &Report) {
    let p = param(1.0);
    let best = configs(report)
        .into_iter()
        .filter(|(s, _)| s == "rewind")
        .filter_map(|(s, c)| report.value(&s, &c, &p, "us_per_op").map(|t| (c, t)))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    let Some((best, _)) = best else { return };
    let v = |m: &str| report.value("rewind", &best, &p, m);
    println!("  goals at update=1, rewind's fastest configuration {best}:");
    if let Some(r) = v("ratio_vs_nolog") {
        let ok = if r <= 1.5 { "met" } else { "NOT met" };
        println!("    within 1.5x of persist-nolog: {r:.2}x, {ok}");
    }
    for (peer, goal) in [
        ("bdb", 10.0),
        ("lmdb", 15.0),
        ("sqlite", 30.0),
        ("pmdk", 3.0),
    ] {
        if let Some(x) = v(&format!("speed_vs_{peer}")) {
            let ok = if x >= goal { "met" } else { "NOT met" };
            println!("    {goal}x faster than {peer}: {x:.2}x, {ok}");
        }
    }
    println!();
    collection_goals(report);
}

/// Issue 18's goals for `rewind-collections`' `BTreeMap` at 100% updates,
/// under the default policy and under redo.
fn collection_goals(report: &Report) {
    for config in ["default", "redo"] {
        collection_goals_of(report, config);
    }
}

fn collection_goals_of(report: &Report, config: &str) {
    let p = param(1.0);
    let v = |m: &str| report.value("coll-btree", config, &p, m);
    let Some(us) = v("us_per_op") else { return };
    println!(
        "  goals at update=1, coll-btree/{config} (rewind-collections' BTreeMap): {us:.3} us/op"
    );
    let show = |what: String, x: Option<f64>, ok: &dyn Fn(f64) -> bool| {
        if let Some(x) = x {
            let met = if ok(x) { "met" } else { "NOT met" };
            println!("    {what}: {x:.2}, {met}");
        }
    };
    show("lines per update <= 6".into(), v("flushes_per_op"), &|x| {
        x <= 6.0
    });
    show("fences per update <= 1".into(), v("fences_per_op"), &|x| {
        x <= 1.0
    });
    show(
        "time <= 1.2x persist-nolog".into(),
        v("ratio_vs_nolog"),
        &|x| x <= 1.2,
    );
    for (peer, goal) in [("pmdk", 2.0), ("bdb", 5.0), ("lmdb", 5.0), ("sqlite", 10.0)] {
        show(
            format!("{goal}x faster than {peer}"),
            v(&format!("speed_vs_{peer}")),
            &move |x| x >= goal,
        );
    }
    println!();
}

fn chart(report: &Report) -> Result<String, CliError> {
    let xs: Vec<f64> = FRACTIONS.to_vec();
    let series: Vec<Series> = configs(report)
        .into_iter()
        .map(|(s, c)| Series {
            ys: FRACTIONS
                .iter()
                .map(|&u| {
                    report
                        .value(&s, &c, &param(u), "us_per_op")
                        .unwrap_or(f64::NAN)
                })
                .collect(),
            name: match s.as_str() {
                "rewind" => c,
                "coll-btree" | "coll-hash" => format!("{s}/{c}"),
                _ => s,
            },
        })
        .collect();
    plot::lines(
        "B+-tree: time per operation against update fraction (REWIND Fig. 7)",
        (
            "fraction of updates",
            "microseconds per operation (log scale)",
        ),
        &xs,
        &series,
        true,
        Legend {
            pos: SeriesLabelPosition::UpperLeft,
            room: 1.0,
        },
    )
}
