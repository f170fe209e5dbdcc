//! The one harness every `rewind bench` experiment runs on (the model:
//! redb's `benches/common`: each engine behind one interface, one generic
//! driver).
//!
//! # Adding an experiment
//!
//! An experiment is a file `bench/NAME.rs` holding its `run` function,
//! listed as a [`Bench`] in `BENCHES` in `bench/mod.rs`, and a section
//! `[NAME]` of `bench/benches.toml` (its [`Meta`]: what it states about
//! itself, as data). The code declares three things and the driver does
//! the rest:
//!
//! 1. **Its systems**: anything that can run a round (a rewind pool, a
//!    `persist::Domain`, a peer's handle), each with a [`Label`]
//!    (`system`, `config`, `param`). Build pools with
//!    [`Ctx::pool_config`] and [`Ctx::domain`] in [`Ctx::scratch`], so
//!    that `--dir`, `--backend` and the emulated latencies apply. A peer
//!    the build lacks (`--features peers`) is left out by `cfg`; the driver
//!    says which ones are missing when the experiment names them in
//!    its `peers` ([`Meta`]).
//! 2. **Its points** (K, update fraction, sizes, threads): a loop in `run`
//!    that calls [`Ctx::rounds`] once per point (or once, with the point in
//!    each label's `param`).
//! 3. **One closure per round**: given a system and the round's input
//!    (drawn once per round, outside every measurement, so every system
//!    does the same work), it runs the round and returns a [`Sample`]: its
//!    time ([`Timer`]), the persistence counters spent, optionally a time
//!    until the last commit returned, named extra values and a digest of
//!    the answers.
//!
//! A round of several threads runs them with [`on_threads`] (one barrier,
//! the time from the first start to the last end); a round on one pool
//! of transactions of its own, with [`timed_txs`].
//!
//! [`Ctx::rounds`] owns the rest: one unmeasured warm-up round, then
//! alternating rounds (every system once per round, so a burst of machine
//! noise hits all alike), the progress bar, and the check that every
//! system's digest agrees. The [`Measured`] it returns gives medians and
//! per-round ratios (each round's time over the baseline's time in the
//! same round, median over rounds: on a noisy machine a ratio of two
//! separately taken medians carries the drift between rounds), and writes
//! the standard rows ([`Measured::report`]: time per operation, fences and
//! lines per operation, ratios to the baseline and the peers). `rewind
//! bench` then prints the table (the section's `table`), writes JSON and
//! CSV, and draws the chart (`chart`). For `BENCHMARKS.md`, the section
//! also states the paper's number (`paper`), two or three sentences on
//! what the results show (`notes`) and the experiment's lines of the
//! summary table (`headlines`); run it with `--out docs/bench` and
//! regenerate the document with `rewind bench report --out docs/bench`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use rewind::persist::Domain;
use rewind::{Backend, Counters, LogVariant, NvmLatency, Policy, Pool, PoolConfig};
use serde::Deserialize;

use super::output::{Chart, Col, Report};
use crate::error::CliError;

/// An experiment: its name and the function that measures it, adding rows
/// to the report. What it states about itself (its columns, chart, peers,
/// the paper's number, notes and summary lines) is data: [`Meta`], its
/// section of `bench/benches.toml`.
pub struct Bench {
    /// What `rewind bench NAME` calls it.
    pub name: &'static str,
    pub run: Run,
}

/// An experiment's measurement: it adds its rows to the report.
pub type Run = fn(&Ctx, &mut Report) -> Result<(), CliError>;

/// What an experiment states about itself.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Meta {
    /// One line: the paper's figure and the workload.
    pub about: String,
    /// The printed table's columns.
    pub table: Vec<Col>,
    /// A line printed under the table: how to read its columns together.
    #[serde(default)]
    pub table_note: Option<String>,
    pub chart: Chart,
    /// The peers (`--features peers`) this experiment runs when built with them.
    pub peers: Vec<String>,
    /// What the paper reports, for `BENCHMARKS.md`.
    pub paper: String,
    /// Two or three sentences on what the results show and why.
    pub notes: String,
    /// The lines of `BENCHMARKS.md`'s summary table.
    #[serde(default)]
    pub headlines: Vec<Headline>,
}

/// Every experiment's [`Meta`], by name, parsed once.
static META: LazyLock<Result<BTreeMap<String, Meta>, String>> =
    LazyLock::new(|| toml::from_str(include_str!("benches.toml")).map_err(|e| e.to_string()));

impl Bench {
    pub const fn new(name: &'static str, run: Run) -> Bench {
        Bench { name, run }
    }

    /// Its section of `bench/benches.toml`.
    pub fn meta(&self) -> Result<&'static Meta, CliError> {
        let all = META
            .as_ref()
            .map_err(|e| CliError::Bench(format!("benches.toml: {e}")))?;
        (all.get(self.name))
            .ok_or_else(|| CliError::Bench(format!("benches.toml has no [{}]", self.name)))
    }
}

/// A summary line: rewind's best configuration (of `ours`, when it names
/// some: a goal set for one configuration, the default policy say) against
/// the best of `against` (systems, or `system/config`s) by `metric` at
/// `param` (none: the last point measured).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Headline {
    pub what: String,
    pub param: Option<String>,
    pub metric: String,
    pub unit: String,
    pub higher_is_better: bool,
    pub against: Vec<String>,
    #[serde(default)]
    pub ours: Vec<String>,
}

/// How much work each measurement does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// A handful of operations: tests the output, measures nothing.
    Tiny,
    Quick,
    Full,
}

impl Scale {
    /// One of three values, by scale.
    pub fn pick<T>(self, tiny: T, quick: T, full: T) -> T {
        match self {
            Scale::Tiny => tiny,
            Scale::Quick => quick,
            Scale::Full => full,
        }
    }
}

/// What every experiment runs with.
#[derive(Clone, Debug)]
pub struct Ctx {
    pub scale: Scale,
    /// The emulated NVM latencies of every rewind domain.
    pub latency: NvmLatency,
    /// The backend of every rewind pool and domain (`--backend`).
    pub backend: Backend,
    /// Where scratch directories go (`--dir`; `None`: `/dev/shm` or the temp dir).
    pub dir: Option<std::path::PathBuf>,
    /// The progress bar; the driver moves it.
    pub bar: ProgressBar,
}

impl Ctx {
    pub fn new(scale: Scale, latency: NvmLatency, backend: Backend, dir: Option<&Path>) -> Ctx {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template("  {bar:40} {pos}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Ctx {
            scale,
            latency,
            backend,
            dir: dir.map(Path::to_path_buf),
            bar,
        }
    }

    /// A fresh scratch directory for pools and peer files, removed with
    /// everything in it when dropped.
    pub fn scratch(&self) -> Result<crate::scratch::Scratch, CliError> {
        crate::scratch::dir(self.dir.as_deref())
    }

    /// The default pool configuration on this run's backend and latencies.
    pub fn default_config(&self) -> PoolConfig {
        PoolConfig::default()
            .backend(self.backend)
            .nvm_latency(self.latency)
    }

    /// A pool configuration of `variant` × `policy` on this run's backend
    /// and latencies.
    pub fn pool_config(&self, variant: LogVariant, policy: Policy) -> PoolConfig {
        self.default_config().log(variant).policy(policy)
    }

    /// A persistence domain of `len` bytes in the file `path` (replaced),
    /// on this run's backend, charged the same latencies as the pools.
    pub fn domain(&self, path: &Path, len: u64) -> Result<Domain, CliError> {
        let _ = std::fs::remove_file(path);
        let mut d = Domain::create_file(path, len, self.backend)
            .map_err(CliError::rewind(format!("creating {}", path.display())))?;
        d.set_latency(self.latency);
        Ok(d)
    }

    /// How the run states its backend and latencies.
    pub fn describe(&self) -> String {
        let l = self.latency;
        let lat = if l == NvmLatency::default() {
            "no emulated NVM latency".into()
        } else {
            format!(
                "emulated NVM latency {} ns per write, {} ns per fence",
                l.write_ns, l.fence_ns
            )
        };
        let tiny = match self.scale {
            Scale::Tiny => " (tiny: format test only)",
            _ => "",
        };
        format!("backend {}, {lat}{tiny}", self.backend)
    }

    /// Measures `systems` in alternating rounds: `warm_up` unmeasured
    /// rounds, then `rounds` rounds of every system in turn, round `r`
    /// starting at system `r` (modulo their number). `input(r)`
    /// draws round `r`'s input once (the warm-ups are rounds `0..warm_up`),
    /// `run` measures one system on it. Fails if two systems' digests
    /// differ in a round.
    pub fn rounds<S, I>(
        &self,
        labels: Vec<Label>,
        systems: &mut [S],
        (warm_up, rounds): (usize, usize),
        mut input: impl FnMut(usize) -> I,
        mut run: impl FnMut(&mut S, &I) -> Result<Sample, CliError>,
    ) -> Result<Measured, CliError> {
        self.bar
            .inc_length(((warm_up + rounds) * systems.len()) as u64);
        let mut samples = vec![Vec::new(); systems.len()];
        for r in 0..warm_up + rounds {
            let inp = input(r);
            let mut digests = Vec::new();
            // Each round starts at the next system: whatever a system
            // leaves behind (dirty lines the cache must write back, a
            // cold TLB) falls on a different successor each round, not
            // always on the same one.
            let n = systems.len();
            for i in (0..n).map(|j| (j + r) % n) {
                let s = &mut systems[i];
                let warm = if r < warm_up { " (warm-up)" } else { "" };
                self.bar.set_message(format!("{}{warm}", labels[i]));
                let sample = run(s, &inp)?;
                digests.extend(sample.digest.map(|d| (i, d)));
                if r >= warm_up {
                    samples[i].push(sample);
                }
                self.bar.inc(1);
            }
            if let Some(&(first, want)) = digests.first() {
                let failures: Vec<String> = (digests.iter())
                    .filter(|(_, d)| *d != want)
                    .map(|(i, d)| {
                        let (a, b) = (&labels[*i], &labels[first]);
                        format!("round {r}: {a} answered differently from {b} ({d:x} vs {want:x})")
                    })
                    .collect();
                if !failures.is_empty() {
                    return Err(CliError::Verification { failures });
                }
            }
        }
        Ok(Measured { labels, samples })
    }

    /// [`Ctx::rounds`] over systems given with their labels, round `r`'s
    /// input `r` (a seed): for systems that build what they measure afresh
    /// each round, or draw their work from the seed.
    pub fn seeded<S>(
        &self,
        systems: &mut [(Label, S)],
        rounds: (usize, usize),
        mut run: impl FnMut(&mut S, u64) -> Result<Sample, CliError>,
    ) -> Result<Measured, CliError> {
        let labels = systems.iter().map(|s| s.0.clone()).collect();
        let run = |s: &mut (Label, S), &r: &u64| run(&mut s.1, r);
        self.rounds(labels, systems, rounds, |r| r as u64, run)
    }
}

/// The configurations `--configs` kept (unset: all).
static CHOSEN: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// Every log variant × policy of rewind with its name (`variant-policy`),
/// in the order the experiments measure them.
fn all_configs() -> impl Iterator<Item = (String, LogVariant, Policy)> {
    let each = |v| Policy::ALL.map(|p| (format!("{v}-{p}"), v, p));
    LogVariant::ALL.into_iter().flat_map(each)
}

/// Keeps only `names` in [`every_config`] (`bench --configs`), for the
/// whole process: an unknown name is an error listing the known ones.
pub fn choose_configs(names: &[String]) -> Result<(), CliError> {
    let known: Vec<String> = all_configs().map(|c| c.0).collect();
    if let Some(bad) = names.iter().find(|n| !known.contains(n)) {
        return Err(CliError::Usage(format!(
            "`{bad}` is not a configuration; known: {}",
            known.join(", ")
        )));
    }
    CHOSEN
        .set(names.to_vec())
        .map_err(|_| CliError::Usage("--configs is given once".into()))
}

/// The configurations `--configs` kept (empty: every one).
pub fn chosen_configs() -> Vec<String> {
    CHOSEN.get().cloned().unwrap_or_default()
}

/// Every log variant × policy of rewind with its name (`variant-policy`),
/// in the order the experiments measure them; only those `--configs`
/// names, when it was given.
pub fn every_config() -> impl Iterator<Item = (String, LogVariant, Policy)> {
    let chosen = CHOSEN.get();
    all_configs().filter(move |c| chosen.is_none_or(|k| k.contains(&c.0)))
}

/// Which system, in which configuration, at which point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    /// `rewind`, `persist-nolog`, `volatile` or a peer's name.
    pub system: String,
    /// rewind's `variant-policy`, or how the peer runs.
    pub config: String,
    /// The point, e.g. `K=8`.
    pub param: String,
}

impl Label {
    pub fn new(system: &str, config: impl Into<String>, param: impl Into<String>) -> Label {
        Label {
            system: system.into(),
            config: config.into(),
            param: param.into(),
        }
    }
}

impl std::fmt::Display for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{} {}", self.system, self.config, self.param)
    }
}

/// What one system did in one round.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    /// Until the round's work was done (redo-async: its write-back too).
    pub time: Duration,
    /// Until the last commit returned, where that differs.
    pub commits: Option<Duration>,
    /// The persistence work spent, where the system counts it.
    pub counters: Option<Counters>,
    /// Other numbers of the round, by metric name and unit (median over rounds).
    pub values: Vec<(&'static str, f64, &'static str)>,
    /// The answers, folded: every system's must agree.
    pub digest: Option<u64>,
}

impl Sample {
    /// A round of `time` with the other numbers `values`.
    pub fn of(time: Duration, values: Vec<(&'static str, f64, &'static str)>) -> Sample {
        Sample {
            time,
            values,
            ..Sample::default()
        }
    }

    /// The value of `metric` (NaN: none).
    pub fn value(&self, metric: &str) -> f64 {
        (self.values.iter())
            .find(|v| v.0 == metric)
            .map_or(f64::NAN, |v| v.1)
    }
}

/// Times a round and takes the counters it spent.
pub struct Timer {
    start: Instant,
    before: Option<Counters>,
}

impl Timer {
    /// Starts, with the system's counters now (`None`: it has none).
    pub fn start(before: Option<Counters>) -> Timer {
        Timer {
            before,
            start: Instant::now(),
        }
    }

    /// The time since the start.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Stops, with the system's counters now.
    pub fn stop(self, after: Option<Counters>) -> Sample {
        Sample {
            time: self.start.elapsed(),
            counters: after.zip(self.before).map(|(a, b)| a.since(&b)),
            ..Sample::default()
        }
    }
}

/// Times `txs` transactions on `pool`, the array pool `DIR/NAME.pool`
/// (`bench::array_pool`): transaction `t` is `body(tx, t)`, then `after(pool,
/// t)` runs outside it; the run ends when write-back has caught up
/// (redo-async). Returns its time and counters, and removes the pool.
pub fn timed_txs(
    (dir, name): (&Path, &str),
    pool: Pool,
    txs: u64,
    mut body: impl FnMut(&mut rewind::Tx<'_>, u64) -> Result<(), rewind::Error>,
    mut after: impl FnMut(&Pool, u64) -> Result<(), CliError>,
) -> Result<Sample, CliError> {
    let timer = Timer::start(Some(pool.counters()));
    for t in 0..txs {
        // Errors are built only on failure: nothing allocates per transaction.
        (pool.transaction(|tx| body(tx, t))).map_err(|e| CliError::rewind("transaction")(e))?;
        after(&pool, t)?;
    }
    pool.sync().map_err(|e| CliError::rewind("sync")(e))?;
    let sample = timer.stop(Some(pool.counters()));
    drop(pool);
    let _ = std::fs::remove_file(dir.join(format!("{name}.pool")));
    Ok(sample)
}

/// How a time is reported: the metric (`us_per_tx`), its unit, seconds
/// to the unit per operation, and the counters' suffix (`tx`: `fences_per_tx`).
pub struct Per {
    pub metric: &'static str,
    pub unit: &'static str,
    /// The unit's count per second divided by operations per round.
    pub scale: f64,
    /// Operations per round (counters are divided by them).
    pub ops: f64,
    pub counters: Option<&'static str>,
}

impl Per {
    /// Microseconds per operation of `ops` per round; counters per `what`.
    pub fn us(what: &'static str, metric: &'static str, ops: u64) -> Per {
        Per {
            metric,
            unit: "us",
            scale: 1e6 / ops as f64,
            ops: ops as f64,
            counters: Some(what),
        }
    }

    /// The round's whole time in `unit` (`ms`, `s`), no counters.
    pub fn whole(metric: &'static str, unit: &'static str) -> Per {
        let scale = match unit {
            "ms" => 1e3,
            "us" => 1e6,
            _ => 1.0,
        };
        Per {
            metric,
            unit,
            scale,
            ops: 1.0,
            counters: None,
        }
    }
}

/// What [`on_threads`] returns: the wall time from the first thread's
/// start to the last one's end, when the first started, and each thread's
/// result, in thread order.
pub struct Threads<R> {
    pub time: Duration,
    pub first: Instant,
    pub results: Vec<R>,
}

/// Runs one thread per worker: each turns its worker into a handle with
/// `open` (not timed), waits at a barrier shared with the others, then
/// runs `work(&mut handle, i)` (`i`: its index); the handle is dropped
/// after its end is taken. A thread that panics fails the run with
/// `panicked()`.
pub fn on_threads<W: Send, H, R: Send, E: Send>(
    workers: Vec<W>,
    open: impl Fn(W) -> Result<H, E> + Sync,
    work: impl Fn(&mut H, usize) -> Result<R, E> + Sync,
    panicked: impl Fn() -> E,
) -> Result<Threads<R>, E> {
    let barrier = std::sync::Barrier::new(workers.len());
    let spans: Vec<(Instant, Instant, R)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (workers.into_iter().enumerate())
            .map(|(i, w)| {
                let (barrier, open, work) = (&barrier, &open, &work);
                scope.spawn(move || {
                    let h = open(w);
                    // Every thread meets the barrier, even one whose
                    // handle failed to open (the others would wait forever).
                    barrier.wait();
                    let start = Instant::now();
                    let mut h = h?;
                    let r = work(&mut h, i)?;
                    Ok((start, Instant::now(), r))
                })
            })
            .collect();
        (handles.into_iter())
            .map(|h| h.join().unwrap_or_else(|_| Err(panicked())))
            .collect::<Result<_, E>>()
    })?;
    let first = spans.iter().map(|s| s.0).min().unwrap_or_else(Instant::now);
    let last = spans.iter().map(|s| s.1).max().unwrap_or(first);
    Ok(Threads {
        time: last - first,
        first,
        results: spans.into_iter().map(|s| s.2).collect(),
    })
}

/// The run's check that failed, saying how.
/// The answers of the systems that must agree among themselves in a round
/// of a run that measures several groups of them at once (each thread
/// count of `threads` and `group-commit`): the driver's check compares
/// every system of a round, so these compare only within a group.
#[derive(Default)]
pub struct Agreement(std::cell::RefCell<std::collections::HashMap<(usize, usize), Option<u64>>>);

impl Agreement {
    /// Checks `digest`, a system of group `group` in round `round`,
    /// against the first one seen there; `who` names it in the error.
    pub fn check(
        &self,
        round: usize,
        group: usize,
        digest: Option<u64>,
        who: impl FnOnce() -> String,
    ) -> Result<(), CliError> {
        let mut seen = self.0.borrow_mut();
        let want = *seen.entry((round, group)).or_insert(digest);
        if want != digest {
            return Err(failed(format!(
                "round {round}: {} answered differently from the first system of its group",
                who()
            )));
        }
        Ok(())
    }
}

pub fn failed(how: String) -> CliError {
    CliError::Verification {
        failures: vec![how],
    }
}

/// The median of `values` (NaN for none).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The samples of every system, every measured round.
pub struct Measured {
    pub labels: Vec<Label>,
    /// `samples[system][round]`.
    pub samples: Vec<Vec<Sample>>,
}

impl Measured {
    /// The first system named `name` (`system` or `system/config`).
    pub fn find(&self, name: &str) -> Option<usize> {
        (self.labels.iter())
            .position(|l| l.system == name || name.split_once('/') == Some((&l.system, &l.config)))
    }

    /// The median of `f` over system `i`'s rounds.
    pub fn median(&self, i: usize, f: impl Fn(&Sample) -> f64) -> f64 {
        median(self.samples[i].iter().map(f).collect())
    }

    /// The median over rounds of system `i`'s time over system `j`'s.
    pub fn ratio(&self, i: usize, j: usize) -> f64 {
        let pairs = self.samples[i].iter().zip(&self.samples[j]);
        let ratios = pairs.map(|(a, b)| a.time.as_secs_f64() / b.time.as_secs_f64());
        median(ratios.collect())
    }

    /// System `i`'s counters over every measured round.
    pub fn counters(&self, i: usize) -> Option<Counters> {
        let mut sum = Some(Counters::default());
        for s in &self.samples[i] {
            sum = sum.zip(s.counters).map(|(a, b)| a + b);
        }
        sum
    }

    /// Adds `metric` of every system: `value(i)` for system `i`.
    pub fn push_each(
        &self,
        rep: &mut Report,
        (metric, unit): (&str, &str),
        value: impl Fn(usize) -> f64,
    ) {
        for (i, l) in self.labels.iter().enumerate() {
            rep.push(l, metric, value(i), unit);
        }
    }

    /// Adds the standard rows of every system: its time as `per` says
    /// (and until its last commit returned, where measured), its counters
    /// per operation, `ratio_vs_NAME` to each baseline of `bases`
    /// (`(NAME, system)`), `speed_vs_PEER` (the peer's time over its own)
    /// to each peer of `peers` that ran, and the medians of its values.
    pub fn report(&self, rep: &mut Report, per: &Per, bases: &[(&str, &str)], peers: &[&str]) {
        let rounds = |i: usize| per.ops * self.samples[i].len() as f64;
        for (i, l) in self.labels.iter().enumerate() {
            let secs = |d: Duration| d.as_secs_f64() * per.scale;
            rep.push(l, per.metric, self.median(i, |s| secs(s.time)), per.unit);
            if self.samples[i].iter().all(|s| s.commits.is_some()) {
                let t = self.median(i, |s| s.commits.map_or(f64::NAN, secs));
                rep.push(l, &format!("commit_{}", per.metric), t, per.unit);
            }
            if let (Some(what), Some(c)) = (per.counters, self.counters(i)) {
                let n = rounds(i);
                let fences = c.fences as f64 / n;
                rep.push(l, &format!("fences_per_{what}"), fences, "count");
                let lines = (c.flushed_lines + c.nt_lines) as f64 / n;
                rep.push(l, &format!("flushes_per_{what}"), lines, "lines");
                let nvm = c.nvm_writes as f64 / n;
                rep.push(l, &format!("nvm_writes_per_{what}"), nvm, "writes");
            }
            for &(name, system) in bases {
                if let Some(b) = self.find(system) {
                    rep.push(l, &format!("ratio_vs_{name}"), self.ratio(i, b), "x");
                }
            }
            for &peer in peers {
                if let Some(p) = self.find(peer).filter(|&p| p != i) {
                    rep.push(l, &format!("speed_vs_{peer}"), self.ratio(p, i), "x");
                }
            }
            let Some(first) = self.samples[i].first() else {
                continue;
            };
            for (k, &(metric, _, unit)) in first.values.iter().enumerate() {
                let v = self.median(i, |s| s.values.get(k).map_or(f64::NAN, |v| v.1));
                rep.push(l, metric, v, unit);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_experiment_has_its_section_of_benches_toml_and_no_other() {
        let names: Vec<&str> = super::super::BENCHES.iter().map(|b| b.name).collect();
        for b in &super::super::BENCHES {
            let meta = b.meta().unwrap();
            assert!(
                !meta.table.is_empty() && !meta.chart.metrics.is_empty(),
                "{}",
                b.name
            );
        }
        let all = META.as_ref().unwrap();
        let extra: Vec<&String> = all
            .keys()
            .filter(|k| !names.contains(&k.as_str()))
            .collect();
        assert!(extra.is_empty(), "sections of no experiment: {extra:?}");
    }

    fn sample(ms: u64) -> Sample {
        Sample {
            time: Duration::from_millis(ms),
            ..Sample::default()
        }
    }

    #[test]
    fn answers_must_agree_within_a_group_of_a_round_only() {
        let a = Agreement::default();
        let who = || "x".to_string();
        a.check(0, 0, Some(1), who).unwrap();
        a.check(0, 0, Some(1), who).unwrap();
        a.check(0, 1, Some(2), who).unwrap(); // another group
        a.check(1, 0, Some(3), who).unwrap(); // another round
        let e = a.check(0, 1, Some(5), || "sys at 2 threads".into());
        let msg = e.unwrap_err().to_string();
        assert!(
            msg.contains("round 0") && msg.contains("sys at 2 threads"),
            "{msg}"
        );
    }

    #[test]
    fn ratios_are_medians_of_per_round_ratios_and_digests_must_agree() -> Result<(), CliError> {
        let ctx = Ctx::new(Scale::Tiny, NvmLatency::default(), Backend::Pmem, None);
        let labels = vec![Label::new("a", "x", "p"), Label::new("b", "y", "p")];
        // a: 10, 20, 40 ms (after a warm-up round of 5); b: 20, 20, 20 ms.
        let mut systems = [0u64, 1];
        let time = |s: &mut u64, &r: &usize| Ok(sample(if *s == 0 { 5 << r } else { 20 }));
        let m = ctx.rounds(labels.clone(), &mut systems, (1, 3), |r| r, time)?;
        assert_eq!(m.samples[0].len(), 3, "the warm-up round is not kept");
        assert_eq!(m.ratio(0, 1), 1.0);
        assert_eq!(m.median(0, |s| s.time.as_millis() as f64), 20.0);
        let mut rep = Report::new("t");
        m.report(&mut rep, &Per::whole("ms", "ms"), &[("b", "b")], &["a"]);
        assert_eq!(rep.value("a", "x", "p", "ratio_vs_b"), Some(1.0));
        assert_eq!(rep.value("b", "y", "p", "speed_vs_a"), Some(1.0));
        assert_eq!(
            rep.value("a", "x", "p", "speed_vs_a"),
            None,
            "no ratio to itself"
        );
        // Each system's digest is its own.
        let digest = |s: &mut u64, _: &()| {
            Ok(Sample {
                digest: Some(*s),
                ..sample(1)
            })
        };
        let bad = ctx.rounds(labels, &mut systems, (0, 1), |_| (), digest);
        assert!(matches!(bad, Err(CliError::Verification { .. })));
        Ok(())
    }
}
