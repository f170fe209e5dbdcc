//! Shared by the integration tests: the engine's configurations, and the
//! hang guard for runs by hand.

#![allow(dead_code)]

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use rewind::{LogVariant, Policy, PoolConfig};

/// Every log variant × commit policy the engine offers (16 today), as the
/// engine's own tests enumerate them.
/// The offsets of the pool's allocated blocks (the engine's allocator
/// bitmaps read), to compare before and after what should leak nothing.
pub fn allocated(pool: &rewind::Pool) -> Vec<u64> {
    rewind::alloc::allocated_blocks(pool.domain(), pool.layout())
        .unwrap()
        .into_iter()
        .map(|(off, _)| off)
        .collect()
}

pub fn configs() -> Vec<PoolConfig> {
    LogVariant::ALL
        .into_iter()
        .flat_map(|v| {
            Policy::ALL
                .into_iter()
                .map(move |p| PoolConfig::default().log(v).policy(p))
        })
        .collect()
}

/// A short name for failure messages: `batch/redo`.
pub fn name(cfg: &PoolConfig) -> String {
    format!("{}/{}", cfg.log, cfg.policy)
}

/// The error a closure returns to roll its transaction back.
pub fn aborted() -> rewind_collections::Error {
    rewind_collections::Error::from(rewind::Error::Aborted)
}

/// `REWIND_HANG_LIMIT_SECS`, when set: a watchdog for runs by hand. By
/// default a test waits as long as it takes, so that no outcome depends
/// on the machine's speed (a true hang is left to the CI's own limit).
pub fn hang_limit() -> Option<Duration> {
    std::env::var("REWIND_HANG_LIMIT_SECS")
        .ok()
        .map(|s| Duration::from_secs(s.parse().expect("REWIND_HANG_LIMIT_SECS: whole seconds")))
}

/// Waits for the next message of a watched worker: as long as it takes,
/// or, with [`hang_limit`] set, `Timeout` after that much silence.
pub fn recv_watched<T>(recv: &Receiver<T>) -> Result<T, RecvTimeoutError> {
    match hang_limit() {
        Some(limit) => recv.recv_timeout(limit),
        None => recv.recv().map_err(|_| RecvTimeoutError::Disconnected),
    }
}
