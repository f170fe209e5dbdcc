//! `rewind demo`: crash a process mid-transaction and show nothing is lost.
//!
//! 1. The parent creates a pool and the [`bank`](crate::bank) in it.
//! 2. It runs `rewind __demo-child`, which commits transfers forever and
//!    prints `committed <i>` after each commit returns. Every 500th transfer
//!    prints `inflight <i>` from *inside* the transaction and sleeps there,
//!    so the parent can SIGKILL it mid-transaction at a point it knows.
//! 3. The parent reopens the pool (recovery runs) and compares it with a
//!    model replayed from the seed: exactly the transfers whose commit
//!    returned must be there, the killed one must be gone.
//! 4. A throughput table compares the same workload with and without the log.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::Args;
use rewind::{OpenOptions, Pool, PoolConfig};

use crate::bank::{self, Bank, Model, ACCOUNTS, INITIAL_BALANCE, LAYOUT};
use crate::error::CliError;

/// Size of the demo pool: the accounts and history need a few KiB; the
/// rest leaves the log (pool/8 by default) plenty of room.
const POOL_SIZE: u64 = 16 << 20;
/// The child announces and pauses in every this-many-th transaction.
const INFLIGHT_EVERY: u64 = 500;
/// How long the child sleeps inside an announced transaction.
const INFLIGHT_PAUSE: Duration = Duration::from_millis(200);
/// Give up on a child that says nothing for this long.
const CHILD_SILENCE_LIMIT: Duration = Duration::from_secs(20);
/// Transfers run on the recovered pool to show it is still usable.
const AFTER_RECOVERY: u64 = 100;

/// Arguments of `rewind demo`.
#[derive(Args)]
pub struct DemoArgs {
    /// Pool file (default: rewind-demo.pool in the temp directory, replaced if present).
    #[arg(long)]
    pool: Option<PathBuf>,
    /// Kill the child at the first in-flight transaction after this many seconds.
    #[arg(long, default_value_t = 0.5)]
    seconds_before_kill: f64,
    /// Seed of the transfer sequence.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Transactions per system in the throughput table (tests use fewer).
    #[arg(long, default_value_t = 20_000, hide = true)]
    throughput_tx: u64,
}

/// Arguments of the hidden `rewind __demo-child`.
#[derive(Args)]
pub struct ChildArgs {
    /// Pool created by the parent.
    #[arg(long)]
    pool: PathBuf,
    /// Seed of the transfer sequence.
    #[arg(long)]
    seed: u64,
}

/// What the parent saw before it killed the child.
struct Kill {
    last_committed: u64,
    inflight: u64,
    at: Duration,
}

pub fn run(args: &DemoArgs) -> Result<(), CliError> {
    if !(args.seconds_before_kill >= 0.0 && args.seconds_before_kill.is_finite()) {
        return Err(CliError::Usage(format!(
            "--seconds-before-kill must be a non-negative number of seconds, not {}",
            args.seconds_before_kill
        )));
    }
    let path = match &args.pool {
        Some(p) => p.clone(),
        None => std::env::temp_dir().join("rewind-demo.pool"),
    };
    println!("rewind demo: {ACCOUNTS} bank accounts, crash-consistent transfers (seed {})", args.seed);
    println!("pool: {}", path.display());
    println!();

    println!("[1/4] create the pool and the bank");
    remove_old_pool(&path, args.pool.is_none())?;
    create_bank(&path)?;
    let cfg = PoolConfig::default();
    println!(
        "      {} MiB pool, {} log, {} policy; {ACCOUNTS} accounts x {INITIAL_BALANCE} in one transaction: ok",
        POOL_SIZE >> 20,
        cfg.log,
        cfg.policy
    );

    println!("[2/4] run transfers in a child process and SIGKILL it mid-transaction");
    let kill = run_and_kill_child(&path, args.seed, Duration::from_secs_f64(args.seconds_before_kill))?;
    println!(
        "      killed at {:.2} s inside transfer {} (last commit returned: {})",
        kill.at.as_secs_f64(),
        kill.inflight,
        kill.last_committed
    );

    println!("[3/4] reopen (recovery runs) and verify against the model");
    let mut failures = Vec::new();
    verify_recovered(&path, args.seed, &kill, &mut failures)?;
    if !failures.is_empty() {
        return Err(CliError::Verification { failures });
    }

    println!("[4/4] throughput: the same transfers in-process, {} per system", args.throughput_tx);
    let rows = crate::throughput::measure(args.throughput_tx)?;
    crate::throughput::print(&rows);

    println!();
    println!("all checks passed; the pool is kept at {}", path.display());
    println!("  try: rewind check {0}   or   rewind dump-log {0}", path.display());
    Ok(())
}

/// Removes a pool left by an earlier run. A path the user named is removed
/// only if it is a rewind pool, so a typo cannot delete an unrelated file.
fn remove_old_pool(path: &Path, is_default: bool) -> Result<(), CliError> {
    if !path.exists() {
        return Ok(());
    }
    if !is_default && rewind::inspect::info(path).is_err() {
        return Err(CliError::Usage(format!(
            "{} exists and is not a rewind pool; refusing to overwrite it",
            path.display()
        )));
    }
    std::fs::remove_file(path).map_err(CliError::io(format!("removing old pool {}", path.display())))
}

fn create_bank(path: &Path) -> Result<(), CliError> {
    let pool = Pool::create(path, LAYOUT, POOL_SIZE, &PoolConfig::default())
        .map_err(CliError::rewind(format!("creating pool {}", path.display())))?;
    bank::init(&pool).map_err(CliError::rewind("initialising the bank"))?;
    Ok(())
}

/// Spawns the child and kills it at the first announced in-flight transfer
/// after `wait`.
fn run_and_kill_child(path: &Path, seed: u64, wait: Duration) -> Result<Kill, CliError> {
    let exe = std::env::current_exe().map_err(CliError::io("finding the rewind executable"))?;
    let mut child = Command::new(exe)
        .arg("__demo-child")
        .arg("--pool")
        .arg(path)
        .arg("--seed")
        .arg(seed.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(CliError::io("spawning the demo child"))?;
    let start = Instant::now();
    println!("      child pid {} running", child.id());

    // A reader thread lets the parent time out on a silent child instead of
    // blocking in read_line forever.
    let stdout = child.stdout.take().expect("stdout was piped");
    let (send, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if send.send(line).is_err() {
                break;
            }
        }
    });

    let mut last_committed = 0;
    loop {
        let line = match lines.recv_timeout(CHILD_SILENCE_LIMIT) {
            Ok(Ok(line)) => line,
            Ok(Err(e)) => {
                kill(&mut child);
                return Err(CliError::Io {
                    action: "reading the demo child's output".into(),
                    source: e,
                });
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                kill(&mut child);
                return Err(CliError::Child(format!(
                    "silent for {} s; killed it",
                    CHILD_SILENCE_LIMIT.as_secs()
                )));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = child.wait().map_err(CliError::io("waiting for the demo child"))?;
                return Err(CliError::Child(format!(
                    "exited ({status}) after committing {last_committed} transfers, before it was killed"
                )));
            }
        };
        match parse_line(&line) {
            Some(("committed", i)) if i == last_committed + 1 => last_committed = i,
            Some(("inflight", i)) if i == last_committed + 1 => {
                if start.elapsed() >= wait {
                    let at = start.elapsed();
                    kill(&mut child);
                    return Ok(Kill {
                        last_committed,
                        inflight: i,
                        at,
                    });
                }
            }
            _ => {
                kill(&mut child);
                return Err(CliError::Child(format!(
                    "unexpected line {line:?} after transfer {last_committed}"
                )));
            }
        }
    }
}

/// SIGKILL (`Child::kill` on Unix) and reap.
fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

fn parse_line(line: &str) -> Option<(&str, u64)> {
    let (word, n) = line.split_once(' ')?;
    Some((word, n.trim().parse().ok()?))
}

/// Reopens the pool and records every difference from the model in `failures`.
fn verify_recovered(path: &Path, seed: u64, kill: &Kill, failures: &mut Vec<String>) -> Result<(), CliError> {
    let pool = Pool::open(path, LAYOUT, &OpenOptions::default())
        .map_err(CliError::rewind(format!("reopening pool {}", path.display())))?;
    for line in pool.recovery_report().to_string().lines() {
        println!("      {line}");
    }
    let mut check = |ok: bool, what: String| {
        println!("      {} {what}", if ok { "ok    " } else { "FAILED" });
        if !ok {
            failures.push(what);
        }
    };
    let reading = || CliError::rewind("reading the recovered bank");
    let root = pool.root::<Bank>().map_err(reading())?;
    let Some(root) = root else {
        check(false, "the pool has a root object".into());
        return Ok(());
    };

    let mut model = Model::new();
    while model.committed < kill.last_committed {
        model.step(seed);
    }
    check(
        kill.inflight == kill.last_committed + 1,
        format!("the killed transfer {} follows the last commit {}", kill.inflight, kill.last_committed),
    );
    let bank = pool.read(root).map_err(reading())?;
    check(
        bank.committed == kill.last_committed,
        format!(
            "committed counter {} == last commit returned {} (transfer {} rolled back)",
            bank.committed, kill.last_committed, kill.inflight
        ),
    );
    compare_with_model(&pool, &bank, &model, &mut check)?;

    // The recovered pool must keep working: allocator and log included.
    for _ in 0..AFTER_RECOVERY {
        bank::transfer(&pool, root, seed, |_| {}).map_err(CliError::rewind("running transfers after recovery"))?;
        model.step(seed);
    }
    let bank = pool.read(root).map_err(reading())?;
    check(
        bank.committed == model.committed,
        format!("{AFTER_RECOVERY} more transfers after recovery: counter {}", bank.committed),
    );
    compare_with_model(&pool, &bank, &model, &mut check)?;
    drop(pool);

    match rewind::inspect::check(path) {
        Ok(report) => {
            let problems = report.problems.len();
            check(
                report.is_ok(),
                format!("rewind check: {problems} problem(s), {} note(s)", report.notes.len()),
            );
            for p in &report.problems {
                println!("             problem: {p}");
            }
        }
        Err(e) => check(false, format!("rewind check: {e}")),
    }
    Ok(())
}

/// Balances, their sum and the history list against the model.
fn compare_with_model(
    pool: &Pool,
    bank: &Bank,
    model: &Model,
    check: &mut impl FnMut(bool, String),
) -> Result<(), CliError> {
    let reading = || CliError::rewind("reading the recovered bank");
    let mut wrong = Vec::new();
    let mut total = 0u64;
    for a in 0..ACCOUNTS {
        let balance = pool.read(bank.accounts.at(a)).map_err(reading())?;
        total += balance;
        if balance != model.balances[a as usize] {
            wrong.push(a);
        }
    }
    check(
        wrong.is_empty(),
        format!(
            "{} of {ACCOUNTS} balances equal the model{}",
            ACCOUNTS - wrong.len() as u64,
            if wrong.is_empty() {
                String::new()
            } else {
                format!(" (first wrong: account {})", wrong[0])
            }
        ),
    );
    check(
        total == ACCOUNTS * INITIAL_BALANCE,
        format!("sum of balances {total} == {}", ACCOUNTS * INITIAL_BALANCE),
    );

    // Read one past the expected length so an overlong list shows.
    let history = bank::read_history(pool, bank, model.history.len() as u64 + 1).map_err(reading())?;
    let strip = |e: &bank::Entry| (e.from, e.to, e.amount, e.tx_no);
    let same = history.len() == model.history.len()
        && bank.history_len == model.history.len() as u64
        && history.iter().map(strip).eq(model.history.iter().map(strip));
    let span = match (history.first(), history.last()) {
        (Some(first), Some(last)) => format!("transfers {}..={}", last.tx_no, first.tx_no),
        _ => "empty".into(),
    };
    check(
        same,
        format!(
            "history: {} entries ({span}), length field {}, expected {} entries",
            history.len(),
            bank.history_len,
            model.history.len()
        ),
    );
    Ok(())
}

/// `rewind __demo-child`: commit transfers until killed.
pub fn child(args: &ChildArgs) -> Result<(), CliError> {
    let pool = Pool::open(&args.pool, LAYOUT, &OpenOptions::default())
        .map_err(CliError::rewind(format!("opening pool {}", args.pool.display())))?;
    let root = pool
        .root::<Bank>()
        .map_err(CliError::rewind("reading the root"))?
        .ok_or_else(|| CliError::Child("the pool has no bank root".into()))?;
    loop {
        let i = bank::transfer(&pool, root, args.seed, |i| {
            if i % INFLIGHT_EVERY == 0 {
                // A failed write means the parent is gone: stop here, which
                // is just another crash for the pool to recover from.
                if say(format_args!("inflight {i}")).is_err() {
                    std::process::exit(1);
                }
                std::thread::sleep(INFLIGHT_PAUSE);
            }
        })
        .map_err(CliError::rewind("running a transfer"))?;
        say(format_args!("committed {i}")).map_err(CliError::io("reporting a commit"))?;
    }
}

/// One protocol line, flushed at once: the parent acts on each as it comes.
fn say(line: std::fmt::Arguments<'_>) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()
}
