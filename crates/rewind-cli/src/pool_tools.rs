//! `rewind copy SRC DST`: pool tools that open the pool (and so run
//! recovery first), unlike the read-only inspection of `inspect`.
//!
//! A pool has one opener at a time: `copy` of a pool that a running
//! program holds open is refused (`in use`); that program backs its pool up
//! itself with `Pool::backup_to`, which `copy` calls.

use std::path::PathBuf;

use rewind::{OpenOptions, Pool};

use crate::error::CliError;

/// `rewind copy SRC DST`.
#[derive(clap::Args)]
pub struct CopyArgs {
    /// The pool to copy.
    pub src: PathBuf,
    /// Where the copy goes (must not exist).
    pub dst: PathBuf,
}

pub fn copy(a: &CopyArgs) -> Result<(), CliError> {
    let info = rewind::inspect::info(&a.src).map_err(CliError::rewind(format!(
        "reading pool {}",
        a.src.display()
    )))?;
    let pool = Pool::open(&a.src, info.layout_name(), &OpenOptions::default()).map_err(
        CliError::rewind(format!("opening pool {}", a.src.display())),
    )?;
    pool.backup_to(&a.dst).map_err(CliError::rewind(format!(
        "copying {} to {}",
        a.src.display(),
        a.dst.display()
    )))?;
    pool.close().map_err(CliError::rewind(format!(
        "closing pool {}",
        a.src.display()
    )))?;
    println!("copied {} to {}", a.src.display(), a.dst.display());
    Ok(())
}
