//! `rewind`: the command-line face of the library (docs/design.md).
//!
//! * `demo` — a transactional B+-tree (rewind-collections) in a child
//!   process killed mid-transaction, recovery, verification against a
//!   model, and a throughput table;
//! * `bench NAME|all|report` — the papers' experiments, written as JSON, CSV
//!   and SVG, and `BENCHMARKS.md` regenerated from them;
//! * `info`, `check`, `recover`, `dump-log` — pool inspection, like `pmempool`;
//!   `copy` — a consistent copy of a pool; `grow` — a larger heap.
//!
//! Every failure is a [`CliError`] printed with its cause chain; the exit
//! status is 1 for failures and 2 for usage errors.

#![forbid(unsafe_code)]

mod bench;
mod crashtest;
mod demo;
mod error;
mod inspect;
mod pool_tools;
mod scratch;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use error::CliError;

#[derive(Parser)]
#[command(
    name = "rewind",
    version,
    about = "Crash-consistent transactions in persistent memory (REWIND): demo, benchmarks, pool tools"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// An order book on a B+-tree: kill a child mid-transaction, recover, verify, compare throughput.
    Demo(demo::DemoArgs),
    /// The demo's worker process (spawned by `demo`, not for direct use).
    #[command(name = "__demo-child", hide = true)]
    DemoChild(demo::ChildArgs),
    /// Run one of the papers' experiments (NAME, or `all`), or `report`: BENCHMARKS.md from the results.
    Bench(bench::BenchArgs),
    /// Explore crash states of every log variant and policy; ends with
    /// `crash states: N checked, V violations`.
    Crashtest(crashtest::CrashtestArgs),
    /// TPC-C new-orders on one engine, for callgrind (bench/tpcc/profile.rs).
    #[command(name = "__profile-tpcc", hide = true)]
    ProfileTpcc(bench::tpcc::profile::ProfileArgs),
    /// Print a pool's header, layout and usage (header only for a pool in use).
    Info(inspect::PoolArgs),
    /// Check a pool's consistency without opening it; exit 1 on problems.
    Check(inspect::CheckArgs),
    /// Open a pool, which runs recovery, and print the recovery report.
    Recover {
        /// The pool file.
        pool: PathBuf,
        /// Layout name given at creation (read from the header when omitted).
        #[arg(long)]
        layout: Option<String>,
    },
    /// Print the pool's log records grouped by transaction, with each one's status.
    DumpLog(inspect::PoolArgs),
    /// Copy a pool (not in use) to a new file: one committed state (Pool::backup_to).
    ///
    /// SRC is opened, so a pool a crash left is recovered in place first
    /// (copy the file itself, with `cp`, to keep it as the crash left it).
    Copy(pool_tools::CopyArgs),
    /// Grow a pool (not in use) to SIZE bytes, or by +SIZE, up to its maximum size (Pool::grow).
    Grow(pool_tools::GrowArgs),
}

fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Demo(args) => {
            scratch::remove_on_signal();
            demo::run(&args)
        }
        Command::DemoChild(args) => demo::child(&args),
        Command::Bench(args) => {
            scratch::remove_on_signal();
            bench::run(&args)
        }
        Command::Crashtest(args) => crashtest::run(&args),
        Command::ProfileTpcc(args) => bench::tpcc::profile::run(&args),
        Command::Info(a) => inspect::info(&a),
        Command::Check(a) => inspect::check(&a),
        Command::Recover { pool, layout } => inspect::recover(&pool, layout.as_deref()),
        Command::DumpLog(a) => inspect::dump_log(&a),
        Command::Copy(a) => pool_tools::copy(&a),
        Command::Grow(a) => pool_tools::grow(&a),
    }
}

/// A reader that stops reading (`rewind dump-log POOL | head`) ends the
/// program quietly, with status 0: `println!` panics when its write fails,
/// and a closed pipe is not the program's failure. The scratch pools and
/// the demo's lock file are removed first (the process ends here, without
/// unwinding); the demo's child, left without a reader, stops quietly at
/// its next line (`demo::child`). Any other failure to write the output
/// (`rewind info POOL > /dev/full`: no space left) is an error, status 1,
/// named on stderr, not a panic; a stderr that cannot be written to leaves
/// nothing to say, and the status is 1. Any other panic is reported as
/// usual.
fn quiet_on_closed_pipe() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = (info.payload().downcast_ref::<String>().map(String::as_str))
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if let Some(cause) = message.strip_prefix("failed printing to stdout: ") {
            scratch::remove_all();
            if cause.contains("Broken pipe") {
                std::process::exit(0);
            }
            let _ = writeln!(
                std::io::stderr(),
                "error: writing the output to stdout\n  caused by: {cause}"
            );
            std::process::exit(1);
        }
        if message.starts_with("failed printing to stderr") {
            scratch::remove_all();
            std::process::exit(1);
        }
        report(info)
    }));
}

fn main() -> ExitCode {
    quiet_on_closed_pipe();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help/version to stdout (exit 0) and usage errors to stderr (exit 2).
            let _ = e.print();
            return ExitCode::from(e.exit_code() as u8);
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = e.exit_code();
            // (Not `eprintln!`: a stderr that cannot be written to must
            // not change the status.)
            let _ = writeln!(std::io::stderr(), "{}", error::render(e));
            ExitCode::from(code)
        }
    }
}
