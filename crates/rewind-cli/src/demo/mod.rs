//! `rewind demo`: crash a process mid-transaction and show nothing is lost.
//!
//! 1. The parent creates a pool and the [`bank`] in it.
//! 2. It runs `rewind __demo-child`, which commits transfers forever and
//!    prints `committed <i>` after each commit returns. Every 500th transfer
//!    prints `inflight <i>` from *inside* the transaction and sleeps there,
//!    so the parent can SIGKILL it mid-transaction at a point it knows.
//! 3. The parent reopens the pool (recovery runs) and compares it with a
//!    model replayed from the seed: exactly the transfers whose commit
//!    returned must be there, the killed one must be gone.
//! 4. A [`throughput`] table compares the same workload with and without the log.
//!
//! The child and its line protocol are in [`child`](mod@child), step 3 in [`verify`].

mod bank;
mod child;
mod throughput;
mod verify;

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use rewind::{LogVariant, Policy, Pool, PoolConfig};

use crate::error::CliError;
use bank::{ACCOUNTS, INITIAL_BALANCE, LAYOUT};
pub use child::{child, ChildArgs};

/// Size of the demo pool: the accounts and history need a few KiB; the
/// rest leaves the log (pool/8 by default) plenty of room.
const POOL_SIZE: u64 = 16 << 20;

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
    /// Log variant of the demo pool: simple, optimized, batch or two-layer.
    #[arg(long, default_value = "batch")]
    log: LogVariant,
    /// Policy of the demo pool: force or no-force.
    #[arg(long, default_value = "force")]
    policy: Policy,
    /// Transactions per system in the throughput table (tests use fewer).
    #[arg(long, default_value_t = 20_000, hide = true, value_parser = clap::value_parser!(u64).range(1..))]
    throughput_tx: u64,
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
    println!(
        "rewind demo: {ACCOUNTS} bank accounts, crash-consistent transfers (seed {})",
        args.seed
    );
    println!("pool: {}", path.display());
    println!();

    println!("[1/4] create the pool and the bank");
    remove_old_pool(&path, args.pool.is_none())?;
    let cfg = PoolConfig::default().log(args.log).policy(args.policy);
    create_bank(&path, &cfg)?;
    println!(
        "      {} MiB pool, {} log, {} policy; {ACCOUNTS} accounts x {INITIAL_BALANCE} in one transaction: ok",
        POOL_SIZE >> 20,
        cfg.log,
        cfg.policy
    );

    println!("[2/4] run transfers in a child process and SIGKILL it mid-transaction");
    let kill = child::run_and_kill(
        &path,
        args.seed,
        Duration::from_secs_f64(args.seconds_before_kill),
    )?;
    println!(
        "      killed at {:.2} s inside transfer {} (last commit returned: {})",
        kill.at.as_secs_f64(),
        kill.inflight,
        kill.last_committed
    );

    println!("[3/4] reopen (recovery runs) and verify against the model");
    let failures = verify::recovered(&path, args.seed, &kill)?;
    if !failures.is_empty() {
        return Err(CliError::Verification { failures });
    }

    println!(
        "[4/4] throughput: the same transfers in-process, {} per system",
        args.throughput_tx
    );
    let rows = throughput::measure(args.throughput_tx)?;
    throughput::print(&rows);

    println!();
    println!("all checks passed; the pool is kept at {}", path.display());
    println!(
        "  try: rewind check {0}   or   rewind dump-log {0}",
        path.display()
    );
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
    std::fs::remove_file(path).map_err(CliError::io(format!(
        "removing old pool {}",
        path.display()
    )))
}

fn create_bank(path: &Path, cfg: &PoolConfig) -> Result<(), CliError> {
    let pool = Pool::create(path, LAYOUT, POOL_SIZE, cfg).map_err(CliError::rewind(format!(
        "creating pool {}",
        path.display()
    )))?;
    bank::init(&pool).map_err(CliError::rewind("initialising the bank"))?;
    Ok(())
}
