//! Shared by the integration tests: the engine's configurations.

#![allow(dead_code)]

use rewind::{LogVariant, Policy, PoolConfig};

/// Every log variant × commit policy the engine offers (16 today), as the
/// engine's own tests enumerate them.
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
