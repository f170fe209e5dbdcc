//! The codes a pool records for its choices: log variant, commit policy,
//! persistence backend. Each is stored as one byte of the header
//! (`format/header.rs`); names parse and print for the command line.

#![warn(clippy::unwrap_used, clippy::indexing_slicing)]

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// The log structure, fixed at pool creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LogVariant {
    /// The plain ADLL: one node per record.
    Simple,
    /// Buckets of record cells.
    Optimized,
    /// Buckets with a persisted index; records fenced in groups of 8.
    Batch,
    /// Two layers (REWIND §3.4): records in an Atomic AVL Tree indexed by
    /// transaction, whose own updates are logged in an ADLL.
    TwoLayer,
}

impl LogVariant {
    /// Every variant.
    pub const ALL: [LogVariant; 4] = [
        LogVariant::Simple,
        LogVariant::Optimized,
        LogVariant::Batch,
        LogVariant::TwoLayer,
    ];

    /// The one-layer variants.
    pub const ONE_LAYER: [LogVariant; 3] =
        [LogVariant::Simple, LogVariant::Optimized, LogVariant::Batch];

    /// Whether a transaction's records go out in groups under one fence,
    /// with their in-place stores held until the group is valid (Batch).
    pub fn groups_records(self) -> bool {
        self == LogVariant::Batch
    }

    /// Whether a redo commit goes out under one fence (records made valid
    /// by a cell store each: Optimized and Batch). The Simple and two-layer
    /// logs link each record into a fenced structure of their own.
    pub fn one_fence(self) -> bool {
        matches!(self, LogVariant::Optimized | LogVariant::Batch)
    }

    pub(crate) fn code(self) -> u8 {
        match self {
            LogVariant::Simple => 1,
            LogVariant::Optimized => 2,
            LogVariant::Batch => 3,
            LogVariant::TwoLayer => 4,
        }
    }

    pub(crate) fn from_code(c: u8) -> Option<LogVariant> {
        match c {
            1 => Some(LogVariant::Simple),
            2 => Some(LogVariant::Optimized),
            3 => Some(LogVariant::Batch),
            4 => Some(LogVariant::TwoLayer),
            _ => None,
        }
    }
}

impl fmt::Display for LogVariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogVariant::Simple => "simple",
            LogVariant::Optimized => "optimized",
            LogVariant::Batch => "batch",
            LogVariant::TwoLayer => "two-layer",
        })
    }
}

impl FromStr for LogVariant {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        // (Case and `_` for `-` as a user may write them: `Two_Layer`.)
        match s.to_ascii_lowercase().replace('_', "-").as_str() {
            "simple" => Ok(LogVariant::Simple),
            "optimized" => Ok(LogVariant::Optimized),
            "batch" => Ok(LogVariant::Batch),
            "two-layer" | "twolayer" | "2l" => Ok(LogVariant::TwoLayer),
            _ => Err(Error::InvalidConfig {
                what: "log variant",
                value: s.to_string(),
                expected: "simple, optimized, batch or two-layer",
            }),
        }
    }
}

/// When in-place updates become durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Policy {
    /// Durable at commit; records cleared at commit.
    Force,
    /// Durable at the next checkpoint; committed work redone by recovery.
    NoForce,
    /// Redo logging, synchronous write-back (MARS): a transaction's writes
    /// wait in its write set, are logged with their new values only when
    /// it commits, and are then stored in place and made durable before
    /// the commit returns. An abort discards them: nothing to undo.
    Redo,
    /// Redo logging with asynchronous write-back (ReDU): the commit returns
    /// once its log records are durable (one fence); a write-back thread
    /// then stores the values in place and releases the records, while
    /// every read sees the committed values (a write cache).
    /// [`Pool::sync`](crate::Pool::sync) waits for the write-back.
    RedoAsync,
}

impl Policy {
    /// Every policy.
    pub const ALL: [Policy; 4] = [
        Policy::Force,
        Policy::NoForce,
        Policy::Redo,
        Policy::RedoAsync,
    ];

    pub(crate) fn code(self) -> u8 {
        match self {
            Policy::Force => 1,
            Policy::NoForce => 2,
            Policy::Redo => 3,
            Policy::RedoAsync => 4,
        }
    }

    pub(crate) fn from_code(c: u8) -> Option<Policy> {
        match c {
            1 => Some(Policy::Force),
            2 => Some(Policy::NoForce),
            3 => Some(Policy::Redo),
            4 => Some(Policy::RedoAsync),
            _ => None,
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Policy::Force => "force",
            Policy::NoForce => "no-force",
            Policy::Redo => "redo",
            Policy::RedoAsync => "redo-async",
        })
    }
}

impl FromStr for Policy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.to_ascii_lowercase().replace('_', "-").as_str() {
            "force" => Ok(Policy::Force),
            "no-force" | "noforce" => Ok(Policy::NoForce),
            "redo" | "redo-sync" => Ok(Policy::Redo),
            "redo-async" | "redoasync" => Ok(Policy::RedoAsync),
            _ => Err(Error::InvalidConfig {
                what: "policy",
                value: s.to_string(),
                expected: "force, no-force, redo or redo-async",
            }),
        }
    }
}

/// Which persistence backend a pool runs on.
///
/// * `Pmem`: cache-line write-back and fence instructions on the mapped
///   file. Survives process crashes on any file, and power failure on
///   DAX-mapped persistent memory. The fastest.
/// * `Msync`: `msync(MS_SYNC)` of the written ranges at every fence.
///   Survives power failure on any filesystem (a disk or SSD), at the cost
///   of a system call per fence.
/// * `Sim`: a simulated domain in memory, for rewind's own crash tests;
///   refused for a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// Cache-line flush and fence instructions on a mapped file.
    Pmem,
    /// `msync(MS_SYNC)` at every fence: durable on any filesystem.
    Msync,
    /// Simulated persistence domain in memory (tests, crash exploration).
    Sim,
}

impl Backend {
    pub(crate) fn code(self) -> u8 {
        match self {
            Backend::Pmem => 1,
            Backend::Msync => 2,
            Backend::Sim => 3,
        }
    }

    pub(crate) fn from_code(c: u8) -> Option<Backend> {
        Some(match c {
            1 => Backend::Pmem,
            2 => Backend::Msync,
            3 => Backend::Sim,
            _ => return None,
        })
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Pmem => "pmem",
            Backend::Msync => "msync",
            Backend::Sim => "sim",
        })
    }
}

impl FromStr for Backend {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "pmem" => Ok(Backend::Pmem),
            "msync" => Ok(Backend::Msync),
            "sim" => Ok(Backend::Sim),
            other => Err(Error::InvalidConfig {
                what: "backend",
                value: other.to_string(),
                expected: "pmem, msync or sim",
            }),
        }
    }
}
