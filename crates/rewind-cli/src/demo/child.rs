//! The demo's child process and the parent's side of its protocol.
//!
//! The child prints one line per event on stdout, flushed at once:
//! `committed <i>` after the commit of transaction `i` returned, and
//! `inflight <i>` from inside every 500th transaction (after its B+-tree
//! operations, before its counter update and commit), after which it sleeps in the transaction so the
//! parent's SIGKILL lands mid-transaction.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::Args;
use rewind::{OpenOptions, Pool};

use super::tree::{self, Root, LAYOUT};
use crate::error::CliError;

/// The child announces and pauses in every this-many-th transaction.
const INFLIGHT_EVERY: u64 = 500;
/// How long the child sleeps inside an announced transaction.
const INFLIGHT_PAUSE: Duration = Duration::from_millis(200);
/// Give up on a child that says nothing for this long.
const CHILD_SILENCE_LIMIT: Duration = Duration::from_secs(20);

/// Arguments of the hidden `rewind __demo-child`.
#[derive(Args)]
pub struct ChildArgs {
    /// Pool created by the parent.
    #[arg(long)]
    pool: PathBuf,
    /// Seed of the transaction sequence.
    #[arg(long)]
    seed: u64,
}

/// What the parent saw before it killed the child.
pub(super) struct Kill {
    pub last_committed: u64,
    pub inflight: u64,
    pub at: Duration,
}

/// Spawns the child and kills it at the first announced in-flight transaction
/// after `wait`.
pub(super) fn run_and_kill(path: &Path, seed: u64, wait: Duration) -> Result<Kill, CliError> {
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
                let status = child
                    .wait()
                    .map_err(CliError::io("waiting for the demo child"))?;
                return Err(CliError::Child(format!(
                    "exited ({status}) after committing {last_committed} transactions, before it was killed"
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
                    "unexpected line {line:?} after transaction {last_committed}"
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

/// `rewind __demo-child`: commit B+-tree transactions until killed.
pub fn child(args: &ChildArgs) -> Result<(), CliError> {
    let pool = Pool::open(&args.pool, LAYOUT, &OpenOptions::default()).map_err(
        CliError::rewind(format!("opening pool {}", args.pool.display())),
    )?;
    let root = pool
        .root::<Root>()
        .map_err(CliError::rewind("reading the root"))?
        .ok_or_else(|| CliError::Child("the pool has no order-book root".into()))?;
    loop {
        let i = tree::step(&pool, root, args.seed, |i| {
            if i % INFLIGHT_EVERY == 0 {
                say(format_args!("inflight {i}"));
                std::thread::sleep(INFLIGHT_PAUSE);
            }
        })
        .map_err(CliError::collection("running a transaction"))?;
        say(format_args!("committed {i}"));
    }
}

/// One protocol line, flushed at once: the parent acts on each as it comes.
/// A failed write means the parent is gone (it ended early: its own stdout
/// closed, say): the child stops there, with status 1 and no message (no one
/// reads it), which is just another crash for the pool to recover from.
fn say(line: std::fmt::Arguments<'_>) {
    let written = {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}").and_then(|()| out.flush())
    };
    if written.is_err() {
        std::process::exit(1);
    }
}
