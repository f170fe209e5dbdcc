//! `rewind info | check | recover | dump-log POOL`: look at a pool file.
//!
//! `info`, `check` and `dump-log` read the bytes without opening the pool,
//! so they work on a pool that would not open (and change nothing);
//! `recover` opens it, which is what runs recovery.

use std::path::Path;

use rewind::{OpenOptions, Pool};

use crate::error::CliError;

pub fn info(path: &Path) -> Result<(), CliError> {
    let info = rewind::inspect::info(path)
        .map_err(CliError::rewind(format!("reading pool {}", path.display())))?;
    println!("{info}");
    Ok(())
}

pub fn check(path: &Path) -> Result<(), CliError> {
    let report = rewind::inspect::check(path).map_err(CliError::rewind(format!(
        "checking pool {}",
        path.display()
    )))?;
    // The report's last line says "consistent" or counts the problems.
    println!("{}", report.to_string().trim_end());
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

pub fn dump_log(path: &Path) -> Result<(), CliError> {
    let lines = rewind::inspect::dump_log(path).map_err(CliError::rewind(format!(
        "reading the log of {}",
        path.display()
    )))?;
    if lines.is_empty() {
        println!("(log is empty)");
    }
    for line in lines {
        println!("{line}");
    }
    Ok(())
}
