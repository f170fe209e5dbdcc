//! `rewind bench NAME|all`: the papers' experiments.
//!
//! Each benchmark measures rewind and the non-recoverable baselines in the
//! same run and reports ratios beside times, with the counters that do not
//! depend on machine noise (fences and flushed lines per transaction).
//! Results go to `DIR/NAME.json`, `DIR/NAME.csv` and `DIR/NAME.svg`.

mod overhead;
mod svg;

use std::path::{Path, PathBuf};

use clap::Args;

use crate::error::CliError;

/// Arguments of `rewind bench`.
#[derive(Args)]
pub struct BenchArgs {
    /// Benchmark to run: `overhead`, or `all`.
    name: String,
    /// Fewer transactions per measurement: the whole run takes well under two minutes.
    #[arg(long)]
    quick: bool,
    /// Directory for the JSON, CSV and SVG results.
    #[arg(long, default_value = "bench-out")]
    out: PathBuf,
    /// A handful of transactions only, to test the output format (not a measurement).
    #[arg(long, hide = true)]
    tiny: bool,
}

/// How much work each measurement does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    Tiny,
    Quick,
    Full,
}

/// A benchmark: runs at a scale and writes its results into a directory.
type BenchFn = fn(Scale, &Path) -> Result<(), CliError>;

/// The benchmarks, by name.
const BENCHES: [(&str, BenchFn); 1] = [("overhead", overhead::run)];

pub fn run(args: &BenchArgs) -> Result<(), CliError> {
    let scale = match (args.tiny, args.quick) {
        (true, _) => Scale::Tiny,
        (false, true) => Scale::Quick,
        (false, false) => Scale::Full,
    };
    let chosen: Vec<_> = if args.name == "all" {
        BENCHES.iter().collect()
    } else {
        BENCHES
            .iter()
            .filter(|(name, _)| *name == args.name)
            .collect()
    };
    if chosen.is_empty() {
        let names: Vec<_> = BENCHES.iter().map(|(n, _)| *n).collect();
        return Err(CliError::Usage(format!(
            "unknown benchmark `{}`; available: {}, or all",
            args.name,
            names.join(", ")
        )));
    }
    for (_, bench) in chosen {
        bench(scale, &args.out)?;
    }
    Ok(())
}
