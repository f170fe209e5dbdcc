//! `rewind bench NAME|all`: the papers' experiments, each on the one
//! harness (`harness`: how to add one), results written as
//! `OUT/NAME.json`, `.csv` and the chart `.svg`.

mod btree;
mod checkpoint;
mod disk;
mod fence;
mod harness;
mod intensity;
mod interleave;
mod markdown;
mod nvwal;
mod output;
mod overhead;
mod recovered;
mod redu;
mod rollback;
mod skip;
mod threads;
pub mod tpcc;
mod tree;

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use rand::{Rng, SeedableRng};
use rewind::{Backend, NvmLatency, PPtr, Pod, Pool, PoolConfig, Zeroable};
use rewind_sqlite::rusqlite::{self, Connection};

use harness::{Bench, Ctx, Scale};
use output::Report;

use crate::error::CliError;

/// Arguments of `rewind bench`.
#[derive(Args)]
pub struct BenchArgs {
    /// Benchmark to run: `overhead`, `intensity`, `checkpoint`, `fence`, `skip`,
    /// `recovered`, `redu`, `btree`, `btree-str`, `rollback`, `threads`, `nvwal`, `disk`,
    /// `group-commit`, `tpcc`, or `all`; or
    /// `report`: BENCHMARKS.md, the charts and the CSV files from OUT/*.json.
    name: String,
    /// With `report`: write nothing, fail if regenerating would change a file.
    #[arg(long)]
    check: bool,
    /// With `report`: the document to write [default: BENCHMARKS.md].
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Fewer transactions per measurement: on the pmem backend each
    /// experiment takes seconds to a minute (on msync every fence is a
    /// device flush: many minutes).
    #[arg(long)]
    quick: bool,
    /// Directory for the JSON, CSV and SVG results.
    #[arg(long, default_value = "bench-out")]
    out: PathBuf,
    /// Where the pools and the peers' files go (default: /dev/shm, else the temp dir; `disk`: the temp dir).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// The backend of rewind's pools and of the no-log baseline: `pmem`
    /// (cache-line flushes and fences) or `msync` (durable on any disk)
    /// [default: pmem].
    #[arg(long, value_parser = parse_backend)]
    backend: Option<Backend>,
    /// A handful of transactions only, to test the output format (not a measurement).
    #[arg(long, hide = true)]
    tiny: bool,
    /// Emulated NVM latency per write, in ns: each line written back by a
    /// flush and each line of non-temporal stores (consecutive stores to one
    /// line count once until a fence), charged to rewind and to the
    /// baselines alike. REWIND used 150. At most 1,000,000 (1 ms)
    /// [default: 0].
    #[arg(long, value_name = "NS", value_parser = clap::value_parser!(u64).range(..=MAX_LATENCY_NS))]
    nvm_write_ns: Option<u64>,
    /// Emulated latency per fence, in ns (at most 1,000,000) [default: 0].
    #[arg(long, value_name = "NS", value_parser = clap::value_parser!(u64).range(..=MAX_LATENCY_NS))]
    fence_ns: Option<u64>,
    /// Only these of rewind's configurations (`variant-policy`, comma
    /// separated, e.g. `batch-redo,batch-force`) where a benchmark runs
    /// every one; the collections' rows and the baselines still run.
    /// `fence` keeps the variants named under no-force (with none of them:
    /// an error, skipped by `all`).
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    configs: Vec<String>,
}

fn parse_backend(s: &str) -> Result<Backend, String> {
    match s {
        "pmem" => Ok(Backend::Pmem),
        "msync" => Ok(Backend::Msync),
        _ => Err(format!("`{s}` is not a backend: pmem or msync")),
    }
}

/// The root of the benchmarks' array pools.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct ArrayRoot {
    data: PPtr<u64>,
    len: u64,
}

/// The layout name of the benchmarks' array pools.
pub const ARRAY_LAYOUT: &str = "rewind-bench-array";
/// Elements of the persistent array of the experiments that write random
/// words of one.
pub const ARRAY: u64 = 1 << 16;

/// A fresh pool `DIR/NAME.pool` (replacing any file there) of layout
/// `layout`, `size` bytes and configuration `cfg`.
pub fn fresh_pool(
    (dir, name): (&Path, &str),
    layout: &str,
    size: u64,
    cfg: &PoolConfig,
) -> Result<Pool, CliError> {
    let path = dir.join(format!("{name}.pool"));
    let _ = std::fs::remove_file(&path);
    Pool::create(&path, layout, size, cfg)
        .map_err(CliError::rewind(format!("creating {}", path.display())))
}

/// A fresh pool `DIR/NAME.pool` of `size` bytes and configuration `cfg`,
/// holding a zeroed array of `m` u64 (found from its root).
pub fn array_pool(
    dir: &Path,
    name: &str,
    size: u64,
    cfg: &PoolConfig,
    m: u64,
) -> Result<(Pool, PPtr<u64>), CliError> {
    let pool = fresh_pool((dir, name), ARRAY_LAYOUT, size, cfg)?;
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

/// Times `txs` transactions of `k` writes each (of the transaction's
/// number, to words of an [`ARRAY`] drawn from `seed`) on a fresh array
/// pool `DIR/NAME.pool` with room for `log` bytes of records and no
/// automatic checkpoint, `after(pool, t)` running after transaction `t`
/// (`harness::timed_txs`).
pub fn random_writes(
    (dir, name): (&Path, &str),
    cfg: &PoolConfig,
    log: u64,
    (txs, k): (u64, u64),
    seed: u64,
    after: impl FnMut(&Pool, u64) -> Result<(), CliError>,
) -> Result<harness::Sample, CliError> {
    let size = (log + ARRAY * 8 * 4).max(64 << 20);
    let (mut pool, data) = array_pool(dir, name, size, cfg, ARRAY)?;
    pool.set_checkpoint_fill(1.0)
        .map_err(CliError::rewind("setting the checkpoint fill"))?;
    pool.checkpoint().map_err(CliError::rewind("checkpoint"))?;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let write = |tx: &mut rewind::Tx<'_>, t| {
        (0..k).try_for_each(|_| tx.write(data.at(rng.gen_range(0..ARRAY)), &t))
    };
    harness::timed_txs((dir, name), pool, txs, write, after)
}

/// Opens (creating) the SQLite database `path` as the benchmarks' SQLite
/// peers run it: the WAL journal (an error if SQLite refuses it) and
/// `synchronous=FULL`, a connection that finds the database locked
/// waiting up to `busy` for it.
pub fn sqlite_wal_full(path: &Path, busy: Duration) -> Result<Connection, CliError> {
    let err = |e: rusqlite::Error| CliError::Bench(format!("opening {}: {e}", path.display()));
    let c = Connection::open(path).map_err(err)?;
    c.busy_timeout(busy).map_err(err)?;
    let mode: String = (c.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))).map_err(err)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(CliError::Usage(format!("SQLite refused WAL mode ({mode})")));
    }
    c.execute_batch("PRAGMA synchronous = FULL;").map_err(err)?;
    Ok(c)
}

/// The benchmarks, in the order `all` runs them.
const BENCHES: [Bench; 15] = [
    Bench::new("overhead", overhead::run),
    Bench::new("intensity", intensity::run),
    Bench::new("checkpoint", checkpoint::run),
    Bench::new("fence", fence::run),
    Bench::new("skip", skip::run),
    Bench::new("recovered", recovered::run),
    Bench::new("redu", redu::run),
    Bench::new("btree", btree::run),
    Bench::new("btree-str", btree::run_str),
    Bench::new("rollback", rollback::run),
    Bench::new("threads", threads::run),
    Bench::new("nvwal", nvwal::run),
    Bench::new("disk", disk::run),
    Bench::new("group-commit", disk::run_group),
    Bench::new("tpcc", tpcc::run),
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
    let meta = b.meta()?;
    println!("bench {} ({})", b.name, meta.about);
    match measures_a_disk(b.name) {
        // (Whatever --backend says: these measure a disk.)
        true => println!("  backend msync, on a disk: the temp dir or --dir"),
        false => println!("  {}", ctx.describe()),
    }
    let missing: Vec<&str> = (meta.peers.iter())
        .map(String::as_str)
        .filter(|p| !BUILT_PEERS.contains(p))
        .collect();
    if !missing.is_empty() {
        println!(
            "  not built with --features peers: {} left out, the rest run",
            missing.join(", ")
        );
    }
    let mut report = Report::new(b.name);
    report.machine = machine(ctx);
    report.scale = format!("{:?}", ctx.scale).to_lowercase();
    report.configs = harness::chosen_configs();
    (b.run)(ctx, &mut report)?;
    ctx.bar.finish_and_clear();
    report.print_table(&meta.table, meta.table_note.as_deref());
    let svg = report.chart(&meta.chart)?;
    let mut written = report.write(out)?;
    let svg_path = out.join(format!("{}.svg", b.name));
    output::write_file(&svg_path, &svg)?;
    written.push(svg_path);
    for p in written {
        println!("  wrote {}", p.display());
    }
    Ok(())
}

/// Why `--configs` leaves experiment `b` nothing to run (`None`: it runs
/// something, or does not heed `--configs`).
fn nothing_chosen(b: &Bench) -> Option<String> {
    match b.name {
        "fence" => fence::nothing_chosen(),
        _ => None,
    }
}

/// The experiments that run on the msync backend in the temp dir (or
/// `--dir`) whatever `--backend` says: they measure a disk (and say so in
/// the report's machine line: `disk::on_disk`).
fn measures_a_disk(name: &str) -> bool {
    matches!(name, "disk" | "group-commit")
}

/// The machine, where the pools went and the backend, as a report names them.
fn machine(ctx: &Ctx) -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = (cpuinfo.lines())
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|(_, m)| m.trim())
        })
        .unwrap_or("unknown CPU");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let dir = ctx.dir.clone().unwrap_or_else(crate::scratch::base_dir);
    format!(
        "{cpu}, {cores} cores, pools in {} ({} backend)",
        dir.display(),
        ctx.backend
    )
}

/// `rewind bench report`: regenerates (or checks) the document, the
/// charts and the CSV files from `OUT/*.json`.
fn report(args: &BenchArgs) -> Result<(), CliError> {
    let md = (args.markdown.clone()).unwrap_or_else(|| PathBuf::from("BENCHMARKS.md"));
    let files = markdown::generate(&BENCHES, &args.out, &md)?;
    let mut stale = Vec::new();
    for (path, text) in &files {
        if args.check {
            if std::fs::read_to_string(path).ok().as_deref() != Some(text.as_str()) {
                stale.push(path.display().to_string());
            }
        } else {
            output::write_file(path, text)?;
            println!("  wrote {}", path.display());
        }
    }
    if stale.is_empty() {
        return Ok(());
    }
    // (The command that rewrites them: `--markdown` too when it was given.)
    let markdown = match &args.markdown {
        Some(m) => format!(" --markdown {}", m.display()),
        None => String::new(),
    };
    Err(harness::failed(format!(
        "regenerating from {}/*.json changes {}: run `rewind bench report --out {}{markdown}`",
        args.out.display(),
        stale.join(", "),
        args.out.display()
    )))
}

/// Makes the results directory `out` (and its parents) and writes a
/// scratch file into it, so that a directory the results could not be
/// written to (read-only, under a file, on a file system that refuses new
/// entries) fails the command before the run, not after it.
fn check_writable(out: &Path) -> Result<(), CliError> {
    let action = || {
        format!(
            "--out {}: the results could not be written there",
            out.display()
        )
    };
    std::fs::create_dir_all(out).map_err(CliError::io(action()))?;
    tempfile::NamedTempFile::new_in(out)
        .map(drop)
        .map_err(CliError::io(action()))
}

/// The longest emulated latency, per write or fence: a millisecond, far
/// past any memory's, so a run stays a run.
const MAX_LATENCY_NS: u64 = 1_000_000;

/// The options of a run that `args` gives (`report` takes none of them).
fn run_options_given(args: &BenchArgs) -> Vec<&'static str> {
    [
        ("--quick", args.quick),
        ("--tiny", args.tiny),
        ("--dir", args.dir.is_some()),
        ("--backend", args.backend.is_some()),
        ("--nvm-write-ns", args.nvm_write_ns.is_some()),
        ("--fence-ns", args.fence_ns.is_some()),
        ("--configs", !args.configs.is_empty()),
    ]
    .into_iter()
    .filter_map(|(name, given)| given.then_some(name))
    .collect()
}

pub fn run(args: &BenchArgs) -> Result<(), CliError> {
    if args.name == "report" {
        // A run's options given to `report` are refused, not ignored (as
        // `report`'s are by a run).
        let given = run_options_given(args);
        if !given.is_empty() {
            return Err(CliError::Usage(format!(
                "{}: options of a run, not of `report` (which regenerates the document from \
                 the results in --out)",
                given.join(", ")
            )));
        }
        return report(args);
    }
    if args.check || args.markdown.is_some() {
        return Err(CliError::Usage(
            "--check and --markdown go with `report` only (a run writes its results to --out)"
                .to_string(),
        ));
    }
    // Found unwritable now, not after the run.
    if args.out.exists() && !args.out.is_dir() {
        return Err(CliError::Usage(format!(
            "--out {} exists and is not a directory",
            args.out.display()
        )));
    }
    check_writable(&args.out)?;
    let scale = match (args.tiny, args.quick) {
        (true, _) => Scale::Tiny,
        (false, true) => Scale::Quick,
        (false, false) => Scale::Full,
    };
    let chosen: Vec<&Bench> = (BENCHES.iter())
        .filter(|b| args.name == "all" || b.name == args.name)
        .collect();
    if chosen.is_empty() {
        let names: Vec<_> = BENCHES.iter().map(|b| b.name).collect();
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
    let backend = args.backend.unwrap_or(Backend::Pmem);
    let force = if backend == Backend::Pmem { "1" } else { "0" };
    std::env::set_var("PMEM_IS_PMEM_FORCE", force);
    if !args.configs.is_empty() {
        harness::choose_configs(&args.configs)?;
    }
    // One experiment `--configs` leaves nothing to run is refused before
    // anything runs; `all` skips it.
    if let (false, [b]) = (args.name == "all", &chosen[..]) {
        if let Some(why) = nothing_chosen(b) {
            return Err(CliError::Usage(why));
        }
    }
    // A directory the pools cannot go to is refused before the first
    // bench prints its header.
    if let Some(dir) = &args.dir {
        std::fs::read_dir(dir).map_err(|source| CliError::Io {
            action: format!("reading --dir {}", dir.display()),
            source,
        })?;
    }
    let latency = NvmLatency::new(args.nvm_write_ns.unwrap_or(0), args.fence_ns.unwrap_or(0));
    for b in chosen {
        if let Some(why) = nothing_chosen(b) {
            println!("bench {}: skipped ({why})", b.name);
            continue;
        }
        let ctx = Ctx::new(scale, latency, backend, args.dir.as_deref());
        run_bench(b, &ctx, &args.out)?;
    }
    Ok(())
}
