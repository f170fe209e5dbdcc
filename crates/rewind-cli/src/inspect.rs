//! `rewind info | check | recover | dump-log POOL`: look at a pool file.
//!
//! `info`, `check` and `dump-log` read the bytes without opening the pool,
//! so they work on a pool that would not open (and change nothing);
//! `recover` opens it, which is what runs recovery.

use std::path::{Path, PathBuf};

use rewind::{OpenOptions, Pool};

use crate::error::CliError;

/// A pool file, and whether to print JSON (`info`, `dump-log`).
#[derive(clap::Args)]
pub struct PoolArgs {
    /// The pool file.
    pub pool: PathBuf,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `check`'s: a pool file, whether to print JSON, and whether to check
/// the named roots deeply (`--deep` belongs to `check` alone: given to
/// `info` or `dump-log` it is a usage error, not ignored).
#[derive(clap::Args)]
pub struct CheckArgs {
    /// The pool file.
    pub pool: PathBuf,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also run the deep check registered for each named root's type
    /// (rewind::inspect::register_deep_check, by a program that links the
    /// library); this command registers none: each named root is a note.
    #[arg(long)]
    pub deep: bool,
}

fn print_json(v: &impl serde::Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    );
}

pub fn info(a: &PoolArgs) -> Result<(), CliError> {
    let path = &a.pool;
    let info = rewind::inspect::info(path)
        .map_err(CliError::rewind(format!("reading pool {}", path.display())))?;
    if a.json {
        print_json(&info);
    } else {
        println!("{info}");
    }
    Ok(())
}

pub fn check(a: &CheckArgs) -> Result<(), CliError> {
    let path = &a.pool;
    let run = if a.deep {
        rewind::inspect::check_deep
    } else {
        rewind::inspect::check
    };
    let report = run(path).map_err(CliError::rewind(format!(
        "checking pool {}",
        path.display()
    )))?;
    if a.json {
        #[derive(serde::Serialize)]
        struct Out<'a> {
            consistent: bool,
            #[serde(flatten)]
            report: &'a rewind::inspect::CheckReport,
        }
        print_json(&Out {
            consistent: report.is_ok(),
            report: &report,
        });
    } else {
        // The report's last line says "consistent" or counts the problems.
        println!("{}", report.to_string().trim_end());
    }
    if report.is_ok() {
        Ok(())
    } else {
        Err(CliError::CheckFailed {
            path: path.to_path_buf(),
            problems: report.problems,
        })
    }
}

pub fn recover(path: &Path, layout: Option<&str>) -> Result<(), CliError> {
    let layout = match layout {
        Some(l) => l.to_string(),
        None => rewind::inspect::info(path)
            .map_err(CliError::rewind(format!(
                "reading the layout name of {}",
                path.display()
            )))?
            .layout_name()
            .to_string(),
    };
    let pool = Pool::open(path, &layout, &OpenOptions::default())
        .map_err(CliError::rewind(format!("opening pool {}", path.display())))?;
    println!("{}", pool.recovery_report());
    Ok(())
}

pub fn dump_log(a: &PoolArgs) -> Result<(), CliError> {
    let path = &a.pool;
    let txs = rewind::inspect::dump_log(path).map_err(CliError::rewind(format!(
        "reading the log of {}",
        path.display()
    )))?;
    if a.json {
        print_json(&txs);
        return Ok(());
    }
    let (groups, log): (Vec<_>, Vec<_>) = txs.into_iter().partition(|t| t.group.is_some());
    if log.is_empty() {
        println!("(log is empty)");
    }
    for t in log {
        println!("{t}");
    }
    if groups.is_empty() {
        println!("(commit ring is empty)");
    }
    for g in groups {
        println!("{g}");
    }
    Ok(())
}
