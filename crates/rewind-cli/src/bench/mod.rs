//! `rewind bench NAME|all`: the papers' experiments, each on the one
//! harness (`harness`: how to add one), results written as
//! `OUT/NAME.json`, `.csv` and the chart `.svg`.

mod btree;
mod checkpoint;
mod fence;
mod harness;
mod intensity;
mod interleave;
mod output;
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
use rewind::{Backend, NvmLatency, PPtr, Pod, Pool, PoolConfig, Zeroable};

pub use harness::{Bench, Ctx, Scale};
use output::Report;

use crate::error::CliError;

/// Arguments of `rewind bench`.
#[derive(Args)]
pub struct BenchArgs {
    /// Benchmark to run: `overhead`, `intensity`, `checkpoint`, `fence`, `skip`,
    /// `recovered`, `redu`, `btree`, `rollback`, `threads`, or `all`.
    name: String,
    /// Fewer transactions per measurement: the whole run takes well under two minutes.
    #[arg(long)]
    quick: bool,
    /// Directory for the JSON, CSV and SVG results.
    #[arg(long, default_value = "bench-out")]
    out: PathBuf,
    /// Where the pools and the peers' files go (default: /dev/shm, else the temp dir).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// The backend of rewind's pools and of the no-log baseline: `pmem`
    /// (cache-line flushes and fences) or `msync` (durable on any disk).
    #[arg(long, default_value = "pmem", value_parser = parse_backend)]
    backend: Backend,
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
}

fn parse_backend(s: &str) -> Result<Backend, String> {
    match s {
        "pmem" => Ok(Backend::Pmem),
        "msync" => Ok(Backend::Msync),
        _ => Err(format!("`{s}` is not a backend: pmem or msync")),
    }
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

pub use harness::median;

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
    output::write_file(&svg_path, svg)?;
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

/// An experiment not yet on the harness: runs and writes its own results.
type OldFn = fn(&Ctx, &Path) -> Result<(), CliError>;

enum Entry {
    New(&'static Bench),
    Old(&'static str, OldFn),
}

impl Entry {
    fn name(&self) -> &'static str {
        match self {
            Entry::New(b) => b.name,
            Entry::Old(n, _) => n,
        }
    }
}

/// The benchmarks, in the order `all` runs them.
const BENCHES: [Entry; 10] = [
    Entry::New(&overhead::BENCH),
    Entry::New(&intensity::BENCH),
    Entry::Old("checkpoint", checkpoint::run),
    Entry::Old("fence", fence::run),
    Entry::Old("skip", skip::run),
    Entry::Old("recovered", recovered::run),
    Entry::Old("redu", redu::run),
    Entry::New(&btree::BENCH),
    Entry::Old("rollback", rollback::run),
    Entry::Old("threads", threads::run),
];

/// The peers this build has (`--features peers`).
const BUILT_PEERS: &[&str] = if cfg!(feature = "peers") {
    &["pmdk", "c-nolog", "bdb", "lmdb", "sqlite", "redb"]
} else {
    &[]
};

/// Runs one experiment on the harness: measures, prints the table, writes
/// JSON, CSV and the chart.
fn run_bench(b: &Bench, ctx: &Ctx, out: &Path) -> Result<(), CliError> {
    println!("bench {} ({})", b.name, b.about);
    println!("  {}", ctx.describe());
    let missing: Vec<&str> = (b.peers.iter())
        .filter(|p| !BUILT_PEERS.contains(p))
        .copied()
        .collect();
    if !missing.is_empty() {
        println!(
            "  not built with --features peers: {} left out, the rest run",
            missing.join(", ")
        );
    }
    let mut report = Report::new(b.name);
    (b.run)(ctx, &mut report)?;
    ctx.bar.finish_and_clear();
    report.print_table(b.table);
    let svg = report.chart(&b.chart)?;
    write_results(&report, out, &svg)
}

pub fn run(args: &BenchArgs) -> Result<(), CliError> {
    let scale = match (args.tiny, args.quick) {
        (true, _) => Scale::Tiny,
        (false, true) => Scale::Quick,
        (false, false) => Scale::Full,
    };
    let chosen: Vec<&Entry> = (BENCHES.iter())
        .filter(|b| args.name == "all" || b.name() == args.name)
        .collect();
    if chosen.is_empty() {
        let names: Vec<_> = BENCHES.iter().map(Entry::name).collect();
        return Err(CliError::Usage(format!(
            "unknown benchmark `{}`; available: {}, or all",
            args.name,
            names.join(", ")
        )));
    }
    // libpmemobj treats its mapping as persistent memory (flushes and a
    // fence per persist, as rewind's Pmem backend) only when told; on the
    // msync backend it makes every persist an msync, as rewind's does.
    // Read at the first pool create, before any thread starts.
    let force = if args.backend == Backend::Pmem {
        "1"
    } else {
        "0"
    };
    std::env::set_var("PMEM_IS_PMEM_FORCE", force);
    let latency = NvmLatency::new(args.nvm_write_ns, args.fence_ns);
    for entry in chosen {
        let ctx = Ctx::new(scale, latency, args.backend, args.dir.as_deref());
        match entry {
            Entry::New(b) => run_bench(b, &ctx, &args.out)?,
            Entry::Old(_, f) => f(&ctx, &args.out)?,
        }
    }
    Ok(())
}
