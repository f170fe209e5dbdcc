//! The B+-tree with 32-byte string keys (issue 18): `rewind-collections`'
//! `BTreeMap<Vec<u8>, _>` beside Berkeley DB, LMDB, SQLite and redb, each
//! keyed by the same strings.
//!
//! The workload is `btree`'s (`tree::workload`): a load of distinct random
//! keys, then lookups and updates (the updates split evenly between
//! inserts of new keys and deletes of present ones), each operation its
//! own durable transaction; every u64 key stands for the 32-byte string
//! `str_key` makes of it (`user`, 12 hex digits of a mix of the key, its
//! 16 hex digits), values the same 24 bytes. The collections' tree keeps
//! such a key inline in its 40-byte slot (up to 36 bytes fit; a longer
//! one would take a block of its own). Berkeley DB and LMDB take the
//! strings as byte keys, SQLite as the BLOB primary key of a `WITHOUT
//! ROWID` table, redb as `&[u8]` keys. Measured as `btree` measures: the
//! same operations for every system, rounds taken in turns, the median
//! round, answers folded into digests that must agree.

use super::harness::{Bench, Ctx};
use super::output::{Chart, Col, Report};
use super::tree::systems::{built, Plan, Subject};
use super::tree::workload::Model;
use crate::error::CliError;

/// The systems besides the collections' tree, in the order built.
pub const STR_PEERS: [&str; 4] = ["bdb", "lmdb", "sqlite", "redb"];

pub const BENCH: Bench = Bench {
    name: "btree-str",
    about: "the B+-tree with 32-byte string keys: rewind-collections' BTreeMap beside Berkeley DB, LMDB, SQLite and redb",
    run,
    table: &[
        Col("us_per_op", "us/op", 3),
        Col("fences_per_op", "fences", 2),
        Col("flushes_per_op", "lines", 2),
        Col("speed_vs_bdb", "vs bdb", 2),
        Col("speed_vs_lmdb", "vs lmdb", 2),
        Col("speed_vs_sqlite", "vs sqlite", 2),
        Col("speed_vs_redb", "vs redb", 2),
    ],
    chart: Chart::costs(
        "B+-tree with 32-byte string keys: time per operation against update fraction",
        "microseconds per operation (log scale)",
        &["us_per_op"],
    ),
    peers: &STR_PEERS,
    paper: "Issue 18's string-key goal: with 32-byte string keys, rewind-collections' BTreeMap at least 5x faster than redb and LMDB (100 % updates, tmpfs).",
    notes: "coll-btree is rewind-collections' BTreeMap<Vec<u8>, [u8; 24]> under the default policy: each 32-byte key inline in its 40-byte leaf slot, beside its 24-byte value. The peers use their own trees with the same keys as byte strings; every operation is its own durable transaction, and every system's answers must agree.",
    headlines: &[],
};

/// Update fractions.
const FRACTIONS: [f64; 2] = [0.0, 1.0];
/// The workload's seed.
const SEED: u64 = 0x57_2ee;

/// The collections' tree with string keys, then the peers (`--features
/// peers`), each empty.
fn build(ctx: &Ctx, dir: &std::path::Path, plan: &Plan) -> Result<Vec<Subject>, CliError> {
    use super::tree::coll::MapStore;
    use super::tree::Value;
    use rewind_collections::BTreeMap;
    let coll = MapStore::<BTreeMap<Vec<u8>, Value>>::create(ctx, dir, "str32", None, plan)
        .map_err(built("the string-keyed BTreeMap"))?;
    #[allow(unused_mut)]
    let mut out = vec![Subject::new("coll-btree", "default", coll)];
    #[cfg(feature = "peers")]
    out.extend(super::tree::systems::stores(
        dir,
        super::tree::workload::Keys::Str32,
    )?);
    Ok(out)
}

fn run(ctx: &Ctx, report: &mut Report) -> Result<(), CliError> {
    // As `btree`: records loaded, operations per round, measured rounds,
    // each tree's space.
    let (n_load, n_ops, rounds, space) = ctx.scale.pick(
        (300, 100, 2, 16 << 20),
        (50_000, 3_000, 3, 96 << 20),
        (100_000, 40_000, 5, 256 << 20),
    );
    println!(
        "  {n_load} records (32-byte string key, 24-byte value), {n_ops} operations per round, each \
         its own transaction; update fractions {FRACTIONS:?}; median of {rounds} rounds"
    );
    let dir = ctx.scratch()?;
    let plan = Plan::new(space, false);
    let mut model = Model::new(SEED);
    let load = model.load(n_load);
    let mut subjects = build(ctx, dir.path(), &plan)?;
    super::btree::load_all(&mut subjects, &load)?;
    super::btree::fractions(
        ctx,
        report,
        &mut subjects,
        &mut model,
        &FRACTIONS,
        (n_ops, rounds),
        (&[], &STR_PEERS),
    )
}
