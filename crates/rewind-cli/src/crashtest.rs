//! `rewind crashtest`: crash-state exploration over every log variant and
//! policy (see `rewind::crashtest`), and the mutations that prove it can
//! fail.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use rewind::crashtest::{self, Budget, Config, Options};
use rewind::persist::sites;

use crate::error::CliError;

/// Arguments of `rewind crashtest`.
#[derive(Args, Debug)]
pub struct CrashtestArgs {
    /// Time budget in seconds (default 60 unless --budget is given).
    #[arg(long, conflicts_with = "budget", value_parser = positive_seconds,
          allow_negative_numbers = true)]
    seconds: Option<f64>,
    /// Count budget: crash images to check, in whole programs (the run
    /// ends with the program that reaches it; the same result on any
    /// machine).
    #[arg(long, value_name = "IMAGES")]
    budget: Option<u64>,
    /// First program seed (program i uses seed + i).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Worker threads (default: one per core; at most 64: each holds tens
    /// of megabytes of pool images).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=64))]
    threads: Option<u16>,
    /// Only this configuration, e.g. `batch-force`, `batch-force-2t`,
    /// `batch-force-2t-handoff`.
    #[arg(long)]
    config: Option<String>,
    /// List the engine's ordering points (mutation sites) and exit (alone:
    /// with any option of a run it is a usage error, not a run ignored).
    #[arg(
        long,
        conflicts_with_all = ["seconds", "budget", "seed", "threads", "config", "replay", "mutate"]
    )]
    list_mutations: bool,
    /// Run only the program of this seed (a reproducer), with --config.
    #[arg(long, value_name = "SEED", requires = "config")]
    replay: Option<u64>,
    /// Disable one ordering point; succeeds only if violations are found.
    #[arg(long, value_name = "NAME")]
    mutate: Option<String>,
}

/// `--seconds`: a positive number of seconds a clock can count. (A
/// negative number is taken as the option's value, `-1` as `=-1`, and
/// refused here.)
fn positive_seconds(s: &str) -> Result<f64, String> {
    let secs: f64 = (s.parse()).map_err(|_| format!("`{s}` is not a number of seconds"))?;
    match secs > 0.0 && Duration::try_from_secs_f64(secs).is_ok() {
        true => Ok(secs),
        false => Err("must be a positive number of seconds a clock can count".into()),
    }
}

pub fn run(a: &CrashtestArgs) -> Result<(), CliError> {
    if a.list_mutations {
        for s in sites::ALL {
            match s.redundant {
                Some(why) => println!("{}\tredundant: {why}", s.site.0),
                None => println!("{}\t{}", s.site.0, s.what),
            }
        }
        return Ok(());
    }
    let budget = match (a.seconds, a.budget) {
        (_, Some(0)) => return Err(CliError::Usage("--budget must be positive".into())),
        (_, Some(n)) => Budget::Images(n),
        (s, None) => Budget::Seconds(s.unwrap_or(60.0)),
    };
    let mutation = match &a.mutate {
        None => None,
        Some(name) => Some(
            sites::find(name)
                .ok_or_else(|| {
                    CliError::Usage(format!(
                        "unknown mutation site `{name}` (see --list-mutations)"
                    ))
                })?
                .site,
        ),
    };
    let mut opts = Options::all(a.seed, budget, mutation);
    if let Some(t) = a.threads {
        opts.threads = usize::from(t);
    }
    if let Some(c) = &a.config {
        let cfg = Config::parse(c).ok_or_else(|| {
            CliError::Usage(format!(
                "unknown configuration `{c}`: expected <simple|optimized|batch|two-layer>-<force|no-force|redo|redo-async>, \
                 optionally followed by -2t, and by a shape (-handoff, -churn, -checkpoints, -grow, -control, -reuse)"
            ))
        })?;
        opts.configs = vec![Config { mutation, ..cfg }];
    }
    if let Some(seed) = a.replay {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let st =
            crashtest::run_program(&opts.configs[0], seed, &stop, false).map_err(|source| {
                CliError::Rewind {
                    action: format!("replaying program {seed}"),
                    source,
                }
            })?;
        for v in &st.examples {
            println!("{v}");
        }
        println!(
            "crash states: {} checked, {} violations",
            st.images, st.violations
        );
        return Ok(());
    }
    let limit = match budget {
        Budget::Seconds(s) => format!("{s} s"),
        Budget::Images(n) => format!("{n} images (in whole programs)"),
        Budget::Programs(n) => format!("{n} programs"),
    };
    println!(
        "crash-state exploration: {} configuration(s), {} worker(s), {limit}, seed {}{}",
        opts.configs.len(),
        opts.threads,
        a.seed,
        mutation.map_or(String::new(), |m| format!(", mutation {}", m.0))
    );
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("  {spinner} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    let start = Instant::now();
    // The spinner draws only on a terminal; elsewhere (a log file, a CI
    // job) a line goes to stderr at each tenth of the budget spent, so a
    // run of minutes is not silent until its end.
    let plain = !std::io::stderr().is_terminal();
    let tenths_shown = AtomicU64::new(0);
    let stats = crashtest::explore(&opts, &|s| {
        let line = format!(
            "{:>5.1} s  {} programs, {} crash points, {} images ({} at depth 2), {} violations",
            start.elapsed().as_secs_f64(),
            s.programs,
            s.points,
            s.images,
            s.depth2,
            s.violations
        );
        if plain {
            let tenths = match budget {
                Budget::Images(n) => s.images.saturating_mul(10) / n.max(1),
                Budget::Programs(n) => s.programs.saturating_mul(10) / n.max(1),
                Budget::Seconds(secs) => (start.elapsed().as_secs_f64() * 10.0 / secs) as u64,
            }
            .min(10);
            if tenths > tenths_shown.fetch_max(tenths, Ordering::Relaxed) {
                eprintln!("  progress {:>3}%: {line}", tenths * 10);
            }
        }
        bar.set_message(line);
        bar.tick();
    })
    .map_err(|source| CliError::Rewind {
        action: "exploring crash states".into(),
        source,
    })?;
    bar.finish_and_clear();
    for v in &stats.examples {
        println!("{v}");
    }
    println!(
        "  {} programs, {} crash points, {} images at depth 2, {:.1} s",
        stats.programs,
        stats.points,
        stats.depth2,
        start.elapsed().as_secs_f64()
    );
    if let Some(d) = stats.detected_at {
        println!("  first violation after {d} images");
    }
    let two = stats.two_thread;
    println!(
        "  two-thread programs: {} crash points with both threads inside a transaction, {} commit groups written back ahead of an earlier one",
        two.overlapping, two.ahead
    );
    println!(
        "two-thread: {} programs, {} images, {} violations",
        two.programs, two.images, two.violations
    );
    println!(
        "crash states: {} checked, {} violations",
        stats.images, stats.violations
    );
    match (mutation, stats.violations) {
        (None, 0) => Ok(()),
        (None, n) => Err(CliError::Verification {
            failures: vec![format!(
                "{n} crash states violate consistency (reproducers above)"
            )],
        }),
        (Some(_), n) if n > 0 => Ok(()),
        (Some(m), _) => Err(CliError::Verification {
            failures: vec![format!("mutation {} was not detected", m.0)],
        }),
    }
}
