//! The command's errors (`thiserror`). Each variant says what the command
//! was doing and carries the library or OS error as its source, so `main`
//! can print the whole chain. Usage errors exit with status 2, everything
//! else with 1.

use std::path::PathBuf;

/// Everything a `rewind` subcommand can fail with.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A library call failed; `action` says what we were doing.
    #[error("{action}")]
    Rewind {
        /// What the command was doing, e.g. "opening pool /tmp/x.pool".
        action: String,
        source: rewind::Error,
    },
    /// A collection operation failed (the demo's B+-tree).
    #[error("{action}")]
    Collection {
        action: String,
        source: rewind_collections::Error,
    },
    /// An OS call outside the library failed (spawning, writing results).
    #[error("{action}")]
    Io {
        action: String,
        source: std::io::Error,
    },
    /// Serialising or reading benchmark results failed.
    #[error("encoding or decoding benchmark results as JSON")]
    Json(#[from] serde_json::Error),
    /// The command line is wrong in a way clap cannot see (exit status 2).
    #[error("{0}")]
    Usage(String),
    /// The demo's or a benchmark's checks found differences from the model.
    #[error("verification failed ({} check(s)): {}", failures.len(), failures.join("; "))]
    Verification {
        /// One line per failed check.
        failures: Vec<String>,
    },
    /// `rewind check` found problems in a pool (the first few are enough to
    /// say what is wrong; the full report went to stdout).
    #[error("{}: pool check found {} problem(s): {}{}", path.display(), problems.len(),
        problems.iter().take(5).cloned().collect::<Vec<_>>().join("; "),
        match problems.len() { n if n > 5 => format!("; and {} more", n - 5), _ => String::new() })]
    CheckFailed {
        path: PathBuf,
        problems: Vec<String>,
    },
    /// The demo's child process did not behave as the protocol expects.
    #[error("demo child process: {0}")]
    Child(String),
    /// A benchmark's own machinery failed (a helper thread, say).
    #[error("benchmark: {0}")]
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

    /// A benchmark's failure: what we were doing, then the error's text.
    pub fn bench<E: std::fmt::Display>(action: impl Into<String>) -> impl Fn(E) -> CliError {
        let action = action.into();
        move |e| CliError::Bench(format!("{action}: {e}"))
    }

    /// Wraps an OS error with what we were doing.
    pub fn io(action: impl Into<String>) -> impl FnOnce(std::io::Error) -> CliError {
        let action = action.into();
        move |source| CliError::Io { action, source }
    }
}

/// `error: <message>` followed by each cause (anyhow's chain), skipping a
/// cause whose text its parent already printed (the library's `Io` error
/// embeds its source).
pub fn render(err: CliError) -> String {
    let err = anyhow::Error::new(err);
    let mut out = format!("error: {err}");
    let mut last = err.to_string();
    for cause in err.chain().skip(1) {
        let text = cause.to_string();
        if !last.contains(&text) {
            out.push_str(&format!("\n  caused by: {text}"));
        }
        last = text;
    }
    out
}
