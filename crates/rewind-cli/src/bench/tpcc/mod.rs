//! REWIND Fig. 11: TPC-C's new-order transaction.
//!
//! The TPC-C schema (warehouse, district, customer, item, stock, order,
//! new-order and order-line), each table an ordered map keyed by its
//! composite key packed into a `u64`, rows as fixed-size records
//! (`schema`: the packing and the rows). The load is scaled down: the
//! specification's 100,000 items, stock rows per warehouse and 10
//! districts, 3,000 customers per district (`--quick`: 10,000 items, 300
//! customers), and no initial orders (new-order only inserts them). It is
//! loaded outside every measurement.
//!
//! The transactions are the specification's new-order mix, drawn by one
//! seeded generator per terminal before each round: a district uniform in
//! 1..=10, the customer by NURand(1023), 5–15 order lines, each item by
//! NURand(8191) and a quantity uniform in 1..=10; 1% of the lines supplied
//! by another warehouse when there are several; 1% of the transactions end
//! on an unused item id and roll back. One thread per warehouse (a
//! terminal): 1 and 2 threads, and the machine's parallelism. Each
//! transaction reads the warehouse's tax, reads and advances the district's
//! next order id, reads the customer's discount and credit, inserts the
//! order and the new-order, and for every line reads the item, updates its
//! stock row (quantity, year-to-date, counts) and inserts the order line;
//! its answer is the order id, the total with discount and taxes, the
//! count of brand-generic lines and the customer's credit.
//!
//! Systems, every one on the same transactions in alternating rounds:
//!
//! - `persist-nolog`: the bench's generic B+-tree (`tree`) on the NoLog
//!   engine, rows out of line, what new-order inserts taken from a slab
//!   per warehouse (`tree`: the layout); durable stores, one fence per
//!   transaction that stored, no log. It cannot roll back, so it does what a program
//!   without transactions must: it looks every item up before it writes
//!   anything, and a transaction with an unused item writes nothing (the
//!   paper's "ignored"); a remote warehouse's stock, in another domain, is
//!   updated there, with its own fence.
//! - `volatile`: the same in DRAM.
//! - `rewind`: the same tree in one pool, every warehouse's tables in it,
//!   one pool transaction per new-order (the default policy with a commit
//!   lane per thread, REWIND's distributed log; the same with one lane
//!   every thread shares, its one log; and batch-force); the transaction
//!   that meets the unused item rolls back what it wrote.
//! - `rewind-collections`: the same tables as `BTreeMap<u64, Row>` of the
//!   user-facing crate, default policy: a read copies the row, an update
//!   changes it in place (`BTreeMap::update`), writing the bytes it changed.
//! - `sqlite`: the same schema as SQL tables (composite primary keys,
//!   `WITHOUT ROWID`), prepared statements, WAL with `synchronous=FULL`,
//!   one connection per thread, `BEGIN IMMEDIATE`.
//!
//! Isolation: rewind leaves it to the program (REWIND §4.7). Each thread
//! owns its warehouse, and a transaction that touches another warehouse's
//! stock holds both warehouses' locks (taken in order) until it ends; the
//! tree and map systems all take the same locks, SQLite its own.
//!
//! Every system's answers are folded into a digest per thread, and the run
//! fails if any differs from the others' (so no system skips work).
//! Reported per system and thread count: time per transaction (the round's
//! wall time over its transactions), new-orders committed per minute
//! (`tpm`, tpmC-style), fences and lines per transaction where counted, and
//! the ratio to `persist-nolog` in the same round.

mod coll;
pub mod profile;
mod schema;
mod sqlite;
mod tree;

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{Counters, LogVariant, Policy};

use super::harness::{on_threads, Ctx, Label, Per, Sample, Scale};
use super::output::Report;
use super::tree::workload::Digest;
use crate::error::CliError;
use rewind::MAX_LANES;

const SEED: u64 = 0x7bcc;
/// The most order lines of a new-order.
pub const MAX_LINES: usize = 15;
/// NURand's run-time constants C (TPC-C 2.1.6), fixed for reproducibility.
const C_CUSTOMER: u32 = 259;
const C_ITEM: u32 = 7_911;

/// The scale of a run.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// Items (and stock rows per warehouse).
    pub items: u32,
    /// Customers per district.
    pub customers: u32,
    /// New-orders per thread per round.
    pub txs: usize,
    /// Measured rounds (after one warm-up).
    pub rounds: usize,
}

fn sizes(scale: Scale) -> Sizes {
    let (items, customers, txs, rounds) = scale.pick(
        (1_000, 30, 40, 1),
        (10_000, 300, 2_000, 3),
        // Eleven rounds of 5,000 new-orders rather than five of 10,000:
        // each round's ratio to the no-log run pairs two runs made at
        // different moments of a shared machine, and with five, one run
        // put one thread's lanes and one lane (the same work at one
        // thread) at 1.22 and 1.32.
        (100_000, 3_000, 5_000, 11),
    );
    Sizes {
        items,
        customers,
        txs,
        rounds,
    }
}

impl Sizes {
    /// Bytes a warehouse's tables need at most, with every round's orders
    /// (`per_row`: bytes a row costs beside its payload, in the tree or map).
    pub fn warehouse_bytes(&self, per_row: u64) -> u64 {
        let stock = self.items as u64 * (512 + per_row);
        let customers = (self.customers * schema::DISTRICTS) as u64 * (1024 + per_row);
        // An order, its new-order and 15 lines at most, every round.
        let orders = ((self.rounds + 1) * self.txs) as u64 * 17 * (64 + per_row);
        stock + customers + orders + (8 << 20)
    }

    /// Bytes the item table needs.
    pub fn item_bytes(&self, per_row: u64) -> u64 {
        self.items as u64 * (128 + per_row) + (4 << 20)
    }

    /// Bytes of one pool holding the items and `w` warehouses, with room.
    pub fn pool_bytes(&self, w: u32, per_row: u64) -> u64 {
        (self.item_bytes(per_row) + w as u64 * self.warehouse_bytes(per_row)) * 3 / 2
    }
}

/// Rows per load transaction.
const LOAD_BATCH: u32 = 64;

/// Calls `f` with `1..=n` cut into ranges of [`LOAD_BATCH`] (each range
/// one load transaction).
pub fn in_batches<E>(
    n: u32,
    mut f: impl FnMut(std::ops::Range<u32>) -> Result<(), E>,
) -> Result<(), E> {
    (1..=n)
        .step_by(LOAD_BATCH as usize)
        .try_for_each(|i| f(i..(i + LOAD_BATCH).min(n + 1)))
}

/// A row of a warehouse's load, after its ids (warehouse, district,
/// customer or item).
// Rows are made and inserted one at a time: the size of the largest
// variant costs nothing, a box per row would.
#[allow(clippy::large_enum_variant)]
pub enum LoadRow {
    Warehouse(u32, schema::Warehouse),
    District(u32, u32, schema::District),
    Customer(u32, u32, u32, schema::Customer),
    Stock(u32, u32, schema::Stock),
}

impl LoadRow {
    /// The row's packed key in its table.
    pub fn key(&self) -> u64 {
        match *self {
            LoadRow::Warehouse(w, _) => w as u64,
            LoadRow::District(w, d, _) => schema::district_key(w, d),
            LoadRow::Customer(w, d, c, _) => schema::customer_key(w, d, c),
            LoadRow::Stock(w, i, _) => schema::stock_key(w, i),
        }
    }
}

/// Calls `tx` with warehouse `w`'s rows, one call per load transaction:
/// the warehouse and its districts, then each district's customers and
/// the stock, each in ranges of [`LOAD_BATCH`].
pub fn load_warehouse<E>(
    w: u32,
    s: &Sizes,
    mut tx: impl FnMut(&mut dyn Iterator<Item = LoadRow>) -> Result<(), E>,
) -> Result<(), E> {
    use schema::*;
    let districts = (1..=DISTRICTS).map(|d| LoadRow::District(w, d, district(w, d)));
    tx(&mut std::iter::once(LoadRow::Warehouse(w, warehouse(w))).chain(districts))?;
    for d in 1..=DISTRICTS {
        in_batches(s.customers, |r| {
            tx(&mut r.map(|c| LoadRow::Customer(w, d, c, customer(w, d, c))))
        })?;
    }
    in_batches(s.items, |r| {
        tx(&mut r.map(|i| LoadRow::Stock(w, i, stock(w, i))))
    })
}

/// An order line of the input.
#[derive(Clone, Copy, Debug, Default)]
pub struct Line {
    pub i_id: u32,
    pub supply_w: u32,
    pub qty: u32,
}

/// One new-order transaction's input.
#[derive(Clone, Copy, Debug)]
pub struct NewOrder {
    /// The home warehouse (1-based).
    pub w: u32,
    pub d: u32,
    pub c: u32,
    pub entry_d: u64,
    n: usize,
    lines: [Line; MAX_LINES],
}

impl NewOrder {
    pub fn lines(&self) -> &[Line] {
        &self.lines[..self.n]
    }

    /// Whether every line is supplied by the home warehouse.
    pub fn all_local(&self) -> bool {
        self.lines().iter().all(|l| l.supply_w == self.w)
    }

    /// The order row it inserts.
    pub fn order(&self) -> schema::Order {
        schema::Order {
            c_id: self.c,
            carrier_id: 0,
            ol_cnt: self.n as u32,
            all_local: self.all_local() as u32,
            entry_d: self.entry_d,
        }
    }

    /// The warehouses the transaction touches, ascending (the order their
    /// locks are taken in).
    pub fn warehouses(&self) -> Vec<u32> {
        let mut ws: Vec<u32> = self.lines().iter().map(|l| l.supply_w).collect();
        ws.push(self.w);
        ws.sort_unstable();
        ws.dedup();
        ws
    }
}

/// One terminal's generator: its warehouse's new-orders.
struct Terminal {
    rng: SmallRng,
    w: u32,
    warehouses: u32,
    sizes: Sizes,
    entry_d: u64,
}

impl Terminal {
    fn new(w: u32, warehouses: u32, sizes: Sizes) -> Terminal {
        Terminal {
            rng: SmallRng::seed_from_u64(SEED ^ (w as u64) << 32),
            w,
            warehouses,
            sizes,
            entry_d: 0,
        }
    }

    /// TPC-C's NURand(A, x, y) (clause 2.1.6).
    fn nurand(&mut self, a: u32, c: u32, x: u32, y: u32) -> u32 {
        let r = self.rng.gen_range(0..=a) | self.rng.gen_range(x..=y);
        (r + c) % (y - x + 1) + x
    }

    fn next(&mut self) -> NewOrder {
        self.entry_d += 1;
        let d = self.rng.gen_range(1..=schema::DISTRICTS);
        let c = self.nurand(1023, C_CUSTOMER, 1, self.sizes.customers);
        let n = self.rng.gen_range(5..=MAX_LINES);
        let rollback = self.rng.gen_range(1..=100) == 1;
        let mut lines = [Line::default(); MAX_LINES];
        for (i, l) in lines.iter_mut().take(n).enumerate() {
            l.i_id = self.nurand(8191, C_ITEM, 1, self.sizes.items);
            if rollback && i == n - 1 {
                // An unused item id (clause 2.4.1.4).
                l.i_id = self.sizes.items + 1;
            }
            l.supply_w = self.w;
            if self.warehouses > 1 && self.rng.gen_range(1..=100) == 1 {
                let other = self.rng.gen_range(1..self.warehouses);
                l.supply_w = if other >= self.w { other + 1 } else { other };
            }
            l.qty = self.rng.gen_range(1..=10);
        }
        NewOrder {
            w: self.w,
            d,
            c,
            entry_d: self.entry_d,
            n,
            lines,
        }
    }
}

/// A new-order's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Committed {
        o_id: u32,
        /// Cents, with discount and taxes.
        total: u64,
        /// Lines whose item and stock data both say "ORIGINAL".
        brand_generic: u32,
        /// The customer's credit is "BC".
        bad_credit: bool,
    },
    /// It met the unused item and rolled back (or, without rollback,
    /// wrote nothing).
    RolledBack,
}

impl Outcome {
    fn fold(&self, d: &mut Digest) {
        match *self {
            Outcome::Committed {
                o_id,
                total,
                brand_generic,
                bad_credit,
            } => {
                d.add(o_id as u64);
                d.add(total);
                d.add((brand_generic as u64) << 1 | bad_credit as u64);
            }
            Outcome::RolledBack => d.add(u64::MAX),
        }
    }
}

/// A system under test, shared by the terminals' threads.
pub trait System: Sync {
    /// Runs one new-order as one durable transaction.
    fn new_order(&self, o: &NewOrder) -> Result<Outcome, CliError>;
    /// Fences and flushed lines so far, where counted.
    fn counters(&self) -> Option<Counters> {
        None
    }
}

/// Locks `ws` (ascending, 1-based) of `locks`, held until dropped.
pub fn lock<'a, T>(
    locks: &'a [Mutex<T>],
    ws: &[u32],
) -> Result<Vec<(u32, MutexGuard<'a, T>)>, CliError> {
    ws.iter()
        .map(|&w| {
            let m = (locks.get(w as usize - 1))
                .ok_or_else(|| CliError::Bench(format!("no warehouse {w}")))?;
            let g = m
                .lock()
                .map_err(|_| CliError::Bench("a warehouse lock was poisoned".into()))?;
            Ok((w, g))
        })
        .collect()
}

/// Runs thread `i`'s new-orders `inputs[i]` on `sys`, every thread starting
/// at one barrier: the wall time from the first start to the last end,
/// the digest of every thread's (in thread order) and the committed count.
fn run_threads(
    sys: &dyn System,
    inputs: &[Vec<NewOrder>],
) -> Result<(Duration, u64, u64), CliError> {
    let panicked = || CliError::Bench("a terminal thread panicked".into());
    let run = on_threads(
        inputs.iter().collect(),
        Ok,
        |orders, _| {
            let (mut d, mut committed) = (Digest::default(), 0);
            for o in orders.iter() {
                let out = sys.new_order(o)?;
                committed += matches!(out, Outcome::Committed { .. }) as u64;
                out.fold(&mut d);
            }
            Ok((d, committed))
        },
        panicked,
    )?;
    let mut d = Digest::default();
    run.results.iter().for_each(|s| d.add(s.0 .0));
    Ok((run.time, d.0, run.results.iter().map(|s| s.1).sum()))
}

/// 1, 2 and the machine's parallelism.
fn thread_counts() -> Vec<usize> {
    let max = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut out = vec![1, 2];
    if max > 2 {
        out.push(max);
    }
    out
}

/// A system with its label.
type Subject = (Label, Box<dyn System>);

/// Every system for `w` warehouses (a thread each), loaded, in `dir`,
/// labelled with the thread count.
fn build(ctx: &Ctx, dir: &std::path::Path, w: u32, s: &Sizes) -> Result<Vec<Subject>, CliError> {
    let mut out: Vec<Subject> = Vec::new();
    let mut add = |system, config: &str, sys: Box<dyn System>| {
        out.push((Label::new(system, config, format!("threads={w}")), sys));
    };
    let volatile = tree::Baseline::volatile(w, s)?;
    add("volatile", "dram", Box::new(volatile));
    let nolog = tree::Baseline::nolog(ctx, dir, w, s)?;
    add("persist-nolog", "nolog", Box::new(nolog));
    let default = rewind::PoolConfig::default();
    let (dv, dp) = (default.log, default.policy);
    // The default policy with a commit lane per thread (REWIND's
    // distributed log) and with one lane every thread shares (its one
    // log); batch-force commits in the bucket log, which has no lanes.
    let lanes = u64::from(w).min(MAX_LANES);
    for (variant, policy, lanes, name) in [
        (dv, dp, lanes, format!("{dv}-{dp}")),
        (dv, dp, 1, format!("{dv}-{dp}-one-lane")),
        (LogVariant::Batch, Policy::Force, 1, "batch-force".into()),
    ] {
        let sys = tree::RewindTree::new(ctx, dir, variant, policy, lanes, &name, w, s)?;
        add("rewind", &name, Box::new(sys));
    }
    let coll = coll::Coll::new(ctx, dir, lanes, w, s)?;
    add("rewind-collections", &format!("{dv}-{dp}"), Box::new(coll));
    let sqlite = sqlite::Sqlite::new(&dir.join("tpcc.db"), w, s)?;
    add("sqlite", "wal-full", Box::new(sqlite));
    Ok(out)
}

pub fn run(ctx: &Ctx, report: &mut Report) -> Result<(), CliError> {
    let s = sizes(ctx.scale);
    let counts = thread_counts();
    println!(
        "  {} items, {} customers per district, {} new-orders per thread per round, threads \
         {counts:?} (a warehouse each); median of {} rounds",
        s.items, s.customers, s.txs, s.rounds
    );
    for &t in &counts {
        let dir = ctx.scratch()?;
        ctx.bar.set_message(format!("loading {t} warehouse(s)"));
        let (labels, mut systems): (Vec<_>, Vec<_>) =
            build(ctx, dir.path(), t as u32, &s)?.into_iter().unzip();
        let mut terminals: Vec<Terminal> = (1..=t as u32)
            .map(|w| Terminal::new(w, t as u32, s))
            .collect();
        let input = |_| -> Vec<Vec<NewOrder>> {
            (terminals.iter_mut())
                .map(|term| (0..s.txs).map(|_| term.next()).collect())
                .collect()
        };
        let m = ctx.rounds(labels, &mut systems, (1, s.rounds), input, |x, inputs| {
            let before = x.counters();
            let (time, digest, committed) = run_threads(&**x, inputs)?;
            let after = x.counters();
            Ok(Sample {
                time,
                counters: after.zip(before).map(|(a, b)| a.since(&b)),
                values: vec![
                    ("tpm", committed as f64 * 60.0 / time.as_secs_f64(), "tpm"),
                    ("committed", committed as f64, "count"),
                ],
                digest: Some(digest),
                ..Sample::default()
            })
        })?;
        let per = Per::us("tx", "us_per_tx", (s.txs * t) as u64);
        m.report(report, &per, &[("nolog", "persist-nolog")], &["sqlite"]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_follows_the_specification() {
        let s = sizes(Scale::Quick);
        let mut t = Terminal::new(2, 4, s);
        let orders: Vec<NewOrder> = (0..20_000).map(|_| t.next()).collect();
        let lines: Vec<&Line> = orders.iter().flat_map(|o| o.lines()).collect();
        let unused = |o: &&NewOrder| o.lines().iter().any(|l| l.i_id > s.items);
        let rollbacks = orders.iter().filter(unused).count();
        assert!(
            (100..300).contains(&rollbacks),
            "{rollbacks} of 20,000 roll back"
        );
        let remote = lines.iter().filter(|l| l.supply_w != 2).count();
        assert!(
            (lines.len() / 200..lines.len() / 50).contains(&remote),
            "{remote} of {} lines remote",
            lines.len()
        );
        assert!(lines.iter().all(|l| (1..=4).contains(&l.supply_w)));
        assert!(orders.iter().all(|o| (5..=15).contains(&o.lines().len())));
        assert!(orders.iter().all(|o| (1..=s.customers).contains(&o.c)));
        assert!(orders.iter().all(|o| o.warehouses().contains(&2)));
        let mut one = Terminal::new(1, 1, s);
        assert!(
            (0..2_000).all(|_| one.next().all_local()),
            "one warehouse: no remote lines"
        );
    }

    #[test]
    fn keys_sort_as_the_composite_keys() {
        use schema::*;
        assert!(order_line_key(1, 10, 7, 15) < order_line_key(1, 10, 8, 1));
        assert!(order_line_key(1, 10, u32::MAX >> 4, 15) < order_line_key(2, 1, 1, 1));
        assert!(customer_key(1, 2, 3000) < customer_key(1, 3, 1));
        assert!(stock_key(1, 100_000) < stock_key(2, 1));
        assert_eq!(total(10_000, 1_000, 500, 500), 9_900);
        assert_eq!(restock(20, 10), 10);
        assert_eq!(restock(15, 10), 96);
    }
}
