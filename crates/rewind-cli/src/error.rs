//! The command's errors. Each variant says what the command was doing and
//! carries the library or OS error as its source, so `main` can print the
//! whole chain. Usage errors exit with status 2, everything else with 1.

use std::fmt;
use std::path::PathBuf;

/// Everything a `rewind` subcommand can fail with.
#[derive(Debug)]
pub enum CliError {
    /// A library call failed; `action` says what we were doing.
    Rewind {
        /// What the command was doing, e.g. "opening pool /tmp/x.pool".
        action: String,
        /// The library's error.
        source: rewind::Error,
    },
    /// A collection operation failed (the demo's B+-tree).
    Collection {
        /// What the command was doing.
        action: String,
        /// The collection's error (the pool's included).
        source: rewind_collections::Error,
    },
    /// An OS call outside the library failed (spawning, writing results).
    Io {
        /// What the command was doing.
        action: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Serialising benchmark results failed.
    Json(serde_json::Error),
    /// The command line is wrong in a way clap cannot see (exit status 2).
    Usage(String),
    /// The demo's checks found differences from the model.
    Verification {
        /// One line per failed check.
        failures: Vec<String>,
    },
    /// `rewind check` found problems in a pool.
    CheckFailed {
        /// The pool file.
        path: PathBuf,
        /// The problems the report lists.
        problems: Vec<String>,
    },
    /// The demo's child process did not behave as the protocol expects.
    Child(String),
    /// A benchmark's own machinery failed (a helper thread, say).
    Bench(String),
}

impl CliError {
    /// The process exit status for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => 2,
            _ => 1,
        }
    }

    /// Wraps a library error with what we were doing.
    pub fn rewind(action: impl Into<String>) -> impl FnOnce(rewind::Error) -> CliError {
        let action = action.into();
        move |source| CliError::Rewind { action, source }
    }

    /// Wraps a collection error with what we were doing.
    pub fn collection(
        action: impl Into<String>,
    ) -> impl FnOnce(rewind_collections::Error) -> CliError {
        let action = action.into();
        move |source| CliError::Collection { action, source }
    }

    /// Wraps an OS error with what we were doing.
    pub fn io(action: impl Into<String>) -> impl FnOnce(std::io::Error) -> CliError {
        let action = action.into();
        move |source| CliError::Io { action, source }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Rewind { action, .. }
            | CliError::Collection { action, .. }
            | CliError::Io { action, .. } => f.write_str(action),
            CliError::Json(_) => f.write_str("encoding benchmark results as JSON"),
            CliError::Usage(msg) => f.write_str(msg),
            CliError::Verification { failures } => write!(
                f,
                "verification failed ({} check(s)): {}",
                failures.len(),
                failures.join("; ")
            ),
            CliError::CheckFailed { path, problems } => {
                // The first few are enough to say what is wrong; the full
                // report went to stdout.
                const SHOWN: usize = 5;
                write!(
                    f,
                    "{}: pool check found {} problem(s): {}",
                    path.display(),
                    problems.len(),
                    problems[..problems.len().min(SHOWN)].join("; ")
                )?;
                if problems.len() > SHOWN {
                    write!(f, "; and {} more", problems.len() - SHOWN)?;
                }
                Ok(())
            }
            CliError::Child(msg) => write!(f, "demo child process: {msg}"),
            CliError::Bench(msg) => write!(f, "benchmark: {msg}"),
        }
    }
}

impl std::error::Error for CliError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CliError::Rewind { source, .. } => Some(source),
            CliError::Collection { source, .. } => Some(source),
            CliError::Io { source, .. } => Some(source),
            CliError::Json(e) => Some(e),
            _ => None,
        }
    }
}

impl From<serde_json::Error> for CliError {
    fn from(e: serde_json::Error) -> Self {
        CliError::Json(e)
    }
}

/// `error: <message>` followed by each cause, skipping a cause whose text
/// its parent already printed (the library's `Io` error embeds its source).
pub fn render(err: &CliError) -> String {
    let mut out = format!("error: {err}");
    let mut last = err.to_string();
    let mut cause = std::error::Error::source(err);
    while let Some(c) = cause {
        let text = c.to_string();
        if !last.contains(&text) {
            out.push_str(&format!("\n  caused by: {text}"));
        }
        last = text;
        cause = c.source();
    }
    out
}
