//! `rewind bench NAME|all`: the papers' experiments.
//!
//! Each benchmark measures rewind and the non-recoverable baselines in the
//! same run and reports ratios beside times, with the counters that do not
//! depend on machine noise (fences and flushed lines per transaction).
//! Results go to `DIR/NAME.json`, `DIR/NAME.csv` and `DIR/NAME.svg`.

mod btree;
mod checkpoint;
mod disk;
mod fence;
mod intensity;
mod interleave;
mod overhead;
mod recovered;
mod redu;
mod rollback;
mod skip;
mod svg;
mod threads;
mod tree;

use std::path::{Path, PathBuf};

use std::time::Duration;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use rewind::{NvmLatency, PPtr, Pod, Pool, PoolConfig, Zeroable};

use crate::report::Report;

use crate::error::CliError;

/// Arguments of `rewind bench`.
#[derive(Args)]
pub struct BenchArgs {
    /// Benchmark to run: `overhead`, `intensity`, `checkpoint`, `fence`, `skip`,
    /// `recovered`, `redu`, `btree`, `rollback`, `threads`, or `all`; or
    /// `disk` (durable one-word transactions on `--dir`, not part of `all`).
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
    /// Emulated NVM latency per write, in ns: each line written back by a
    /// flush and each line of non-temporal stores (consecutive stores to one
    /// line count once until a fence), charged to rewind and to the
    /// baselines alike. REWIND used 150.
    #[arg(long, default_value_t = 0, value_name = "NS")]
    nvm_write_ns: u64,
    /// Emulated latency per fence, in ns.
    #[arg(long, default_value_t = 0, value_name = "NS")]
    fence_ns: u64,
    /// `disk`: the directory on the disk to measure (its scratch files are
    /// made there); default: the results directory.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// What every benchmark is run with.
#[derive(Clone, Copy, Debug)]
pub struct Ctx {
    /// How much work each measurement does.
    pub scale: Scale,
    /// The emulated NVM latencies.
    pub latency: NvmLatency,
}

/// How much work each measurement does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    Tiny,
    Quick,
    Full,
}

/// How a benchmark states the emulated latencies it ran with.
pub fn latency_line(l: NvmLatency) -> String {
    if l == NvmLatency::default() {
        "no emulated NVM latency (--nvm-write-ns, --fence-ns)".into()
    } else {
        format!(
            "emulated NVM latency: {} ns per write (flushed line or line of non-temporal stores), {} ns per fence; charged to every system on a rewind domain",
            l.write_ns, l.fence_ns
        )
    }
}

/// What a run at tiny scale says of itself.
pub fn tiny_note(scale: Scale) -> &'static str {
    if scale == Scale::Tiny {
        " (tiny: format test only)"
    } else {
        ""
    }
}

/// The progress bar every benchmark shows.
pub fn progress(len: u64) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("  {bar:40} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// The median of `values`.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The median over rounds of `num[round] / den[round]`.
pub fn median_ratio(num: &[Duration], den: &[Duration]) -> f64 {
    median(
        num.iter()
            .zip(den)
            .map(|(a, b)| a.as_secs_f64() / b.as_secs_f64())
            .collect(),
    )
}

/// Writes `DIR/NAME.json`, `.csv` and the chart `.svg`, naming each.
pub fn write_results(report: &Report, out: &Path, svg: &str) -> Result<(), CliError> {
    let mut written = report.write(out)?;
    let svg_path = out.join(format!("{}.svg", report.bench));
    crate::report::write_file(&svg_path, svg)?;
    written.push(svg_path);
    for p in written {
        println!("  wrote {}", p.display());
    }
    Ok(())
}

/// The root of the benchmarks' array pools.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct ArrayRoot {
    data: PPtr<u64>,
    len: u64,
}

/// A fresh pool `DIR/NAME.pool` of `size` bytes and configuration `cfg`,
/// holding a zeroed array of `m` u64 (found from its root).
pub fn array_pool(
    dir: &Path,
    name: &str,
    layout: &str,
    size: u64,
    cfg: &PoolConfig,
    m: u64,
) -> Result<(Pool, PPtr<u64>), CliError> {
    let path = dir.join(format!("{name}.pool"));
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(&path, layout, size, cfg)
        .map_err(CliError::rewind(format!("creating {}", path.display())))?;
    let data = pool
        .transaction(|tx| {
            let root = tx.root::<ArrayRoot>()?;
            let data = tx.alloc_array::<u64>(m)?;
            tx.write(root, &ArrayRoot { data, len: m })?;
            Ok::<_, rewind::Error>(data)
        })
        .map_err(CliError::rewind(format!("allocating the array in {name}")))?;
    Ok((pool, data))
}

/// A benchmark: runs with a context and writes its results into a directory.
type BenchFn = fn(&Ctx, &Path) -> Result<(), CliError>;

/// The benchmarks, by name.
const BENCHES: [(&str, BenchFn); 10] = [
    ("overhead", overhead::run),
    ("intensity", intensity::run),
    ("checkpoint", checkpoint::run),
    ("fence", fence::run),
    ("skip", skip::run),
    ("recovered", recovered::run),
    ("redu", redu::run),
    ("btree", btree::run),
    ("rollback", rollback::run),
    ("threads", threads::run),
];

pub fn run(args: &BenchArgs) -> Result<(), CliError> {
    let scale = match (args.tiny, args.quick) {
        (true, _) => Scale::Tiny,
        (false, true) => Scale::Quick,
        (false, false) => Scale::Full,
    };
    if args.name == "disk" {
        let ctx = Ctx {
            scale,
            latency: NvmLatency::new(args.nvm_write_ns, args.fence_ns),
        };
        let dir = args.dir.clone().unwrap_or_else(|| args.out.clone());
        return disk::run_in(&ctx, &dir, &args.out);
    }
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
            "unknown benchmark `{}`; available: {}, disk, or all",
            args.name,
            names.join(", ")
        )));
    }
    let ctx = Ctx {
        scale,
        latency: NvmLatency::new(args.nvm_write_ns, args.fence_ns),
    };
    for (_, bench) in chosen {
        bench(&ctx, &args.out)?;
    }
    Ok(())
}
