//! What the engine's integration tests share.

// Each test binary compiles this module and may use only part of it.
#![allow(dead_code)]

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

/// Waits for the next message of a watched child or worker. By default it
/// waits as long as it takes, so that no outcome depends on the machine's
/// speed (a true hang is left to the CI's own time limit). With
/// `REWIND_HANG_LIMIT_SECS=N`, a silence of N seconds is `Timeout`: a
/// watchdog for runs by hand that names the hung case.
pub fn recv_watched<T>(recv: &Receiver<T>) -> Result<T, RecvTimeoutError> {
    let limit = std::env::var("REWIND_HANG_LIMIT_SECS")
        .ok()
        .map(|s| s.parse().expect("REWIND_HANG_LIMIT_SECS: whole seconds"));
    match limit {
        Some(secs) => recv.recv_timeout(Duration::from_secs(secs)),
        None => recv.recv().map_err(|_| RecvTimeoutError::Disconnected),
    }
}
