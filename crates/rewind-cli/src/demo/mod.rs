//! `rewind demo`: crash a process in the middle of a B+-tree transaction
//! and show nothing is lost.
//!
//! 1. The parent creates a pool and an empty persistent B+-tree in it (the
//!    [`tree`] workload, an order book on `rewind_collections::BTreeMap`).
//! 2. It runs `rewind __demo-child`, which commits transactions of inserts
//!    and removals forever and prints `committed <i>` after each commit
//!    returns. Every 500th transaction prints `inflight <i>` from *inside*
//!    the transaction and sleeps there, so the parent can SIGKILL it
//!    mid-transaction at a point it knows.
//! 3. The parent reopens the pool (recovery runs) and compares the tree
//!    with a model replayed from the seed: exactly the transactions whose
//!    commit returned must be there, the killed one must be gone; the
//!    tree's invariants must hold and its nodes be exactly the allocated
//!    blocks.
//! 4. A [`throughput`] table runs the same transactions on a DRAM
//!    `BTreeMap` and on rewind pools under several configurations.
//!
//! The child and its line protocol are in [`child`](mod@child), step 3 in [`verify`].

mod child;
mod throughput;
mod tree;
mod verify;

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use rewind::{LogVariant, Policy, Pool, PoolConfig};

use crate::error::CliError;
pub use child::{child, ChildArgs};
use tree::{FANOUT, KEYS, LAYOUT};

/// Size of the demo pool: the tree needs a few MiB at most; the rest
/// leaves the log (pool/8 by default) plenty of room.
const POOL_SIZE: u64 = 16 << 20;

/// Arguments of `rewind demo`.
#[derive(Args)]
pub struct DemoArgs {
    /// Pool file (default: rewind-demo.pool in the temp directory). An earlier demo pool there is replaced; any other file, another layout's pool or a pool in use is refused.
    #[arg(long)]
    pool: Option<PathBuf>,
    /// Kill the child at the first in-flight transaction after this many seconds (0 to 3600).
    #[arg(long, default_value = "0.5", value_name = "SECONDS",
          value_parser = seconds_before_kill, allow_negative_numbers = true)]
    seconds_before_kill: Duration,
    /// Seed of the transaction sequence.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Log variant of the demo pool: simple, optimized, batch or two-layer.
    #[arg(long, default_value = "batch")]
    log: LogVariant,
    /// Policy of the demo pool: force, no-force, redo or redo-async (default: the library's default, redo).
    #[arg(long)]
    policy: Option<Policy>,
    /// Transactions per system in the throughput table (tests use fewer).
    #[arg(long, default_value_t = 10_000, hide = true, value_parser = clap::value_parser!(u64).range(1..))]
    throughput_tx: u64,
}

/// `--seconds-before-kill`: seconds from 0 to an hour. (A negative number
/// is taken as the option's value, `-1` as `=-1`, and refused here.)
fn seconds_before_kill(s: &str) -> Result<Duration, String> {
    let secs: f64 = (s.parse()).map_err(|_| format!("`{s}` is not a number of seconds"))?;
    (Duration::try_from_secs_f64(secs).ok())
        .filter(|d| *d <= Duration::from_secs(3600))
        .ok_or_else(|| "must be between 0 and 3600 seconds".to_string())
}

pub fn run(args: &DemoArgs) -> Result<(), CliError> {
    let before_kill = args.seconds_before_kill;
    let path = match &args.pool {
        Some(p) => p.clone(),
        None => std::env::temp_dir().join("rewind-demo.pool"),
    };
    println!(
        "rewind demo: a persistent B+-tree (order book, keys below {KEYS}, {FANOUT} keys per node), crash-consistent transactions (seed {})",
        args.seed
    );
    println!("pool: {}", path.display());
    println!();
    // Held to the end: a second demo on this pool would remove it between
    // this one's steps.
    let _alone = one_demo(&path)?;

    println!("[1/4] create the pool and an empty B+-tree");
    remove_old_pool(&path, args.pool.is_none())?;
    let mut cfg = PoolConfig::default().log(args.log);
    if let Some(policy) = args.policy {
        cfg = cfg.policy(policy);
    }
    create_tree(&path, &cfg)?;
    println!(
        "      {} MiB pool, {} log, {} policy; tree created in one transaction: ok",
        POOL_SIZE >> 20,
        cfg.log,
        cfg.policy
    );

    println!("[2/4] run B+-tree transactions in a child process and SIGKILL it mid-transaction");
    let kill = child::run_and_kill(&path, args.seed, before_kill)?;
    println!(
        "      killed at {:.2} s inside transaction {} (last commit returned: {})",
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
        "[4/4] throughput: the same B+-tree transactions in-process, {} per system",
        args.throughput_tx
    );
    let rows = throughput::measure(args.throughput_tx)?;
    throughput::print(&rows);

    println!();
    println!("all checks passed; the pool is kept at {}", path.display());
    println!(
        "  try: rewind check {0}   or   rewind dump-log {0}",
        shell_word(&path.display().to_string())
    );
    Ok(())
}

/// `s` as one word of a POSIX shell command: quoted when it holds anything
/// but letters, digits and `/._-+,:@%=` (a path with spaces, say).
fn shell_word(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+,:@%=".contains(c);
    match !s.is_empty() && s.chars().all(plain) {
        true => s.to_string(),
        false => format!("'{}'", s.replace('\'', r"'\''")),
    }
}

/// The demo's claim on `path`: an exclusive lock on `PATH.demo-lock`,
/// released (and the file removed) when dropped, or by
/// `scratch::remove_all` when the process ends first; another demo
/// holding it is refused at once.
struct OneDemo {
    _held: std::fs::File,
    path: PathBuf,
}

impl Drop for OneDemo {
    fn drop(&mut self) {
        crate::scratch::untrack(&self.path);
        let _ = std::fs::remove_file(&self.path);
    }
}

fn one_demo(path: &Path) -> Result<OneDemo, CliError> {
    let mut name = path.as_os_str().to_owned();
    name.push(".demo-lock");
    let lock = PathBuf::from(name);
    // Without blocking, and not through a link: a FIFO there made the
    // open wait for a reader for ever; what is not a regular file is
    // refused.
    use std::os::unix::fs::OpenOptionsExt;
    let not_a_file = || {
        CliError::Usage(format!(
            "{} exists and is not a regular file; remove it or give another --pool",
            lock.display()
        ))
    };
    let file = match std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .custom_flags((rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOFOLLOW).bits() as i32)
        .open(&lock)
    {
        Ok(f) => f,
        // ENXIO: a FIFO with no reader; ELOOP: a symbolic link.
        Err(e)
            if [rustix::io::Errno::NXIO, rustix::io::Errno::LOOP]
                .iter()
                .any(|n| e.raw_os_error() == Some(n.raw_os_error())) =>
        {
            return Err(not_a_file())
        }
        Err(e) => return Err(CliError::io(format!("creating {}", lock.display()))(e)),
    };
    if !file
        .metadata()
        .map_err(CliError::io(format!("reading {}", lock.display())))?
        .is_file()
    {
        return Err(not_a_file());
    }
    match file.try_lock() {
        Ok(()) => {
            crate::scratch::track(lock.clone());
            Ok(OneDemo {
                _held: file,
                path: lock,
            })
        }
        Err(std::fs::TryLockError::WouldBlock) => Err(CliError::Usage(format!(
            "another `rewind demo` is running on {}; wait for it or give another --pool",
            path.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(CliError::io(format!("locking {}", lock.display()))(e))
        }
    }
}

/// Removes a pool left by an earlier run: only the demo's own pool (its
/// layout), and only while no one has it open, so that a typo cannot
/// delete an unrelated file or another application's pool. At the default
/// path, a demo pool another version of rewind wrote, or one whose header
/// is damaged, is replaced too; a file that is no pool at all is kept.
fn remove_old_pool(path: &Path, is_default: bool) -> Result<(), CliError> {
    if !path.exists() {
        return Ok(());
    }
    let refuse = |why: String| {
        Err(CliError::Usage(format!(
            "{} {why}; refusing to replace it",
            path.display()
        )))
    };
    match rewind::inspect::info(path) {
        Ok(info) if info.in_use => return refuse("is a pool in use by another opener".into()),
        Ok(info) if info.layout != LAYOUT => {
            return refuse(format!(
                "is a pool of layout `{}`, not the demo's (`{LAYOUT}`)",
                info.layout
            ))
        }
        Ok(_) => {}
        // An earlier demo's pool at the default path, written by another
        // version of rewind or damaged: replaced (the header says it is a
        // pool). Anything else there is not the demo's.
        Err(rewind::Error::UnsupportedVersion { .. } | rewind::Error::BadHeader { .. })
            if is_default => {}
        Err(e) => return refuse(format!("exists and is not a rewind pool ({e})")),
    }
    std::fs::remove_file(path).map_err(CliError::io(format!(
        "removing old pool {}",
        path.display()
    )))
}

fn create_tree(path: &Path, cfg: &PoolConfig) -> Result<(), CliError> {
    let pool = Pool::create(path, LAYOUT, POOL_SIZE, cfg).map_err(CliError::rewind(format!(
        "creating pool {}",
        path.display()
    )))?;
    tree::init(&pool).map_err(CliError::collection("creating the B+-tree"))?;
    Ok(())
}

#[cfg(test)]
mod shell_word_tests {
    use super::shell_word;

    #[test]
    fn paths_a_shell_would_split_are_quoted() {
        assert_eq!(shell_word("/tmp/rewind-demo.pool"), "/tmp/rewind-demo.pool");
        assert_eq!(shell_word("/tmp/a b.pool"), "'/tmp/a b.pool'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
