//! `rewind __profile-tpcc`: one engine's new-orders with nothing around
//! them, for callgrind (not a benchmark: no rounds, no timing).
//!
//! It loads one warehouse at the `--quick` scale on the chosen engine,
//! then runs `--txs` new-orders of the bench's first terminal inside
//! [`measured`], which is never inlined, so that
//!
//! ```text
//! valgrind --tool=callgrind --toggle-collect='*profile::measured*' \
//!     target/release/rewind __profile-tpcc rewind --txs 2000
//! ```
//!
//! counts the new-orders' instructions alone; the total over `--txs` is
//! the instructions per new-order.

use clap::{Args, ValueEnum};
use rewind::{Backend, NvmLatency, PoolConfig};

use super::tree::{Baseline, RewindTree};
use super::{sizes, NewOrder, Outcome, System, Terminal};
use crate::bench::harness::{Ctx, Scale};
use crate::error::CliError;

/// The engines profiled.
#[derive(Clone, Copy, ValueEnum)]
pub enum ProfiledEngine {
    /// `persist-nolog`: durable stores, a fence per transaction, no log.
    Nolog,
    /// `rewind` with the default log variant and policy.
    Rewind,
}

/// Arguments of `rewind __profile-tpcc`.
#[derive(Args)]
pub struct ProfileArgs {
    engine: ProfiledEngine,
    /// New-orders measured.
    #[arg(long, default_value_t = 1_000)]
    txs: usize,
}

/// Runs `orders` on `sys`: what callgrind counts.
#[inline(never)]
fn measured(sys: &dyn System, orders: &[NewOrder]) -> Result<u64, CliError> {
    let mut committed = 0;
    for o in orders {
        committed += matches!(sys.new_order(o)?, Outcome::Committed { .. }) as u64;
    }
    Ok(committed)
}

pub fn run(args: &ProfileArgs) -> Result<(), CliError> {
    let ctx = Ctx::new(Scale::Quick, NvmLatency::default(), Backend::Pmem, None);
    let s = sizes(Scale::Quick);
    let s = super::Sizes { txs: args.txs, ..s };
    let dir = ctx.scratch()?;
    let sys: Box<dyn System> = match args.engine {
        ProfiledEngine::Nolog => Box::new(Baseline::nolog(&ctx, dir.path(), 1, &s)?),
        ProfiledEngine::Rewind => {
            let d = PoolConfig::default();
            let name = format!("{}-{}", d.log, d.policy);
            let tree = RewindTree::new(&ctx, dir.path(), d.log, d.policy, 1, &name, 1, &s)?;
            Box::new(tree)
        }
    };
    let mut term = Terminal::new(1, 1, s);
    let orders: Vec<NewOrder> = (0..args.txs).map(|_| term.next()).collect();
    let before = sys.counters();
    let committed = std::hint::black_box(measured(&*sys, &orders)?);
    println!("{} new-orders, {committed} committed", orders.len());
    // The noise-free counters beside the instruction counts.
    if let (Some(b), Some(a)) = (before, sys.counters()) {
        let c = a.since(&b);
        let per = |n: u64| n as f64 / orders.len().max(1) as f64;
        println!(
            "per new-order: {:.2} fences, {:.1} lines written back, {:.1} non-temporal lines",
            per(c.fences),
            per(c.flushed_lines),
            per(c.nt_lines)
        );
    }
    Ok(())
}
