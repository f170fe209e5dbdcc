//! The TPC-C tables as the bench's generic B+-tree (`bench::tree`) on the
//! volatile, no-log and rewind engines.
//!
//! Each table is one tree keyed by the packed key. The tree's values are
//! 24 bytes, so a row lives out of line: the value's first word is the
//! offset of a block holding the row (allocated by the engine), and a
//! transaction reads and writes the fields it needs there. Two tables are
//! inline: an order (24 bytes) is the value itself, and a new-order is the
//! key alone.
//!
//! What the transactions insert (orders, new-orders, order lines, and
//! the tree nodes their inserts split off) is allocated from the
//! warehouse's slab: a chunk of [`CHUNK`] bytes taken from the engine now
//! and then, and a persistent header (the chunk, the bytes used) that the
//! transaction updates like any row, so that a rollback gives the space
//! back. An order's lines are one block of it, written at once. The
//! engines' own allocations are what is costly to make recoverable (rewind
//! logs each one at once, with its fence), and a program lays out its data
//! around that, as REWIND's optimized TPC-C trees did (§5.3); every engine
//! here uses the same layout. New-order never deletes, so nothing from the
//! slab is freed. The load uses the engines' allocators.
//!
use std::path::Path;
use std::sync::Mutex;

use rewind::bytemuck::{bytes_of, bytes_of_mut, Zeroable};
use rewind::{Counters, LogVariant, Policy, Pool};

use super::super::tree::mem::{NoLog, Rewind, Volatile};
use super::super::tree::{BTree, Engine, MemError, TxMem, Value, VALUE};
use super::schema::{self, *};
use super::{in_batches, lock, Line, LoadRow, NewOrder, Outcome, Sizes, System, MAX_LINES};
use crate::bench::{fresh_pool, Ctx};
use crate::error::CliError;

/// Bytes a row costs in the tree beside its payload (a leaf slot, splits).
const PER_ROW: u64 = 96;

/// Bytes of a slab chunk.
const CHUNK: u64 = 64 << 10;

/// One warehouse's tables.
#[derive(Clone, Copy)]
pub struct Tables {
    /// The slab's header: the current chunk and the bytes used in it.
    slab: u64,
    warehouse: BTree,
    district: BTree,
    customer: BTree,
    stock: BTree,
    order: BTree,
    new_order: BTree,
    order_line: BTree,
}

fn row_value(off: u64) -> Value {
    let mut v = [0u8; VALUE];
    v[..8].copy_from_slice(&off.to_le_bytes());
    v
}

/// A row new-order needs and the load made is not there.
fn missing(what: &'static str) -> MemError {
    MemError::Corrupt { node: 0, what }
}

/// The offset of the row of `key` in `t`.
fn find<M: TxMem + ?Sized>(m: &mut M, t: BTree, key: u64) -> Result<Option<u64>, MemError> {
    Ok(t.get(m, key)?
        .map(|v| u64::from_le_bytes(v[..8].try_into().expect("8 bytes"))))
}

/// Inserts `row` out of line under `key`.
fn insert<M: TxMem + ?Sized>(m: &mut M, t: BTree, key: u64, row: &[u8]) -> Result<(), MemError> {
    let off = m.alloc(row.len() as u64)?;
    m.write(off, row)?;
    let fresh = t.insert(m, key, &row_value(off))?;
    new_key(fresh, off, "a TPC-C key inserted twice")
}

/// `Ok` if an insert found its key new (`fresh`), else the corruption `what` at `node`.
fn new_key(fresh: bool, node: u64, what: &'static str) -> Result<(), MemError> {
    if fresh {
        return Ok(());
    }
    Err(MemError::Corrupt { node, what })
}

/// `n` bytes (at most [`CHUNK`], zeroed, aligned to a cache line) from
/// the slab whose header is at `slab`.
fn slab_alloc<M: TxMem + ?Sized>(m: &mut M, slab: u64, n: u64) -> Result<u64, MemError> {
    let mut h = [0u8; 16];
    m.read(slab, &mut h)?;
    let word = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().expect("8 bytes"));
    let (mut chunk, mut used) = (word(0), word(8));
    if chunk == 0 || used + n > CHUNK {
        chunk = m.alloc(CHUNK)?;
        used = 0;
    }
    let off = chunk + used;
    used += n.div_ceil(64) * 64;
    h[..8].copy_from_slice(&chunk.to_le_bytes());
    h[8..].copy_from_slice(&used.to_le_bytes());
    m.write(slab, &h)?;
    Ok(off)
}

/// A transaction's memory whose allocations come from a slab (the tree
/// nodes that inserts split off).
struct Slabbed<'a, M: ?Sized> {
    m: &'a mut M,
    slab: u64,
}

impl<M: TxMem + ?Sized> TxMem for Slabbed<'_, M> {
    fn read(&mut self, off: u64, buf: &mut [u8]) -> Result<(), MemError> {
        self.m.read(off, buf)
    }

    fn write(&mut self, off: u64, bytes: &[u8]) -> Result<(), MemError> {
        self.m.write(off, bytes)
    }

    fn alloc(&mut self, size: u64) -> Result<u64, MemError> {
        slab_alloc(self.m, self.slab, size)
    }

    fn free(&mut self, off: u64, _size: u64) -> Result<(), MemError> {
        Err(MemError::Corrupt {
            node: off,
            what: "a free from the slab (new-order never deletes)",
        })
    }
}

/// Reads the first `n` bytes of the row at `off` into a `T`.
fn read<T: rewind::Pod, M: TxMem + ?Sized>(m: &mut M, off: u64, n: usize) -> Result<T, MemError> {
    let mut row = T::zeroed();
    m.read(off, &mut bytes_of_mut(&mut row)[..n])?;
    Ok(row)
}

/// What a line's stock update returns to the line.
#[derive(Clone, Copy)]
pub struct StockOut {
    dist: [u8; 24],
    original: bool,
}

/// Line `l`'s stock update in `stock` (its supplying warehouse's) for
/// district `d` of warehouse `home`; `None`: the item has no stock row.
fn stock_line<M: TxMem + ?Sized>(
    m: &mut M,
    stock: BTree,
    home: u32,
    d: u32,
    l: &Line,
) -> Result<Option<StockOut>, MemError> {
    let Some(off) = find(m, stock, stock_key(l.supply_w, l.i_id))? else {
        return Ok(None);
    };
    let mut s: Stock = read(m, off, size_of::<Stock>())?;
    let qty = l.qty as u64;
    s.quantity = restock(s.quantity, qty);
    s.ytd += qty;
    s.order_cnt += 1;
    s.remote_cnt += (l.supply_w != home) as u64;
    m.write(off, &bytes_of(&s)[..STOCK_COUNTERS])?;
    Ok(Some(StockOut {
        dist: s.dist[d as usize - 1],
        original: schema::original(&s.data),
    }))
}

/// Reads every line's item, in order; `None` if one is missing.
fn read_items<M: TxMem + ?Sized>(
    m: &mut M,
    items: BTree,
    o: &NewOrder,
) -> Result<Option<[Item; MAX_LINES]>, MemError> {
    let mut out = [Item::zeroed(); MAX_LINES];
    for (l, it) in o.lines().iter().zip(&mut out) {
        match find(m, items, l.i_id as u64)? {
            Some(off) => *it = read(m, off, size_of::<Item>())?,
            None => return Ok(None),
        }
    }
    Ok(Some(out))
}

/// The new-order's work in its home warehouse's tables `t`. Each line's
/// item is `pre[i]` where read already, else looked up in `items` (a
/// missing one aborts: `MemError::Aborted`); `stock(m, i)` does line `i`'s
/// stock update (`None`: no stock row, which aborts too).
fn home<M: TxMem + ?Sized>(
    m: &mut M,
    t: &Tables,
    items: BTree,
    o: &NewOrder,
    pre: Option<&[Item; MAX_LINES]>,
    mut stock: impl FnMut(&mut M, usize) -> Result<Option<StockOut>, MemError>,
) -> Result<Outcome, MemError> {
    let wrow = find(m, t.warehouse, o.w as u64)?;
    let wrow = wrow.ok_or_else(|| missing("a warehouse row is missing"))?;
    let w_tax = m.read_u64(wrow)?;
    let drow = find(m, t.district, district_key(o.w, o.d))?;
    let drow = drow.ok_or_else(|| missing("a district row is missing"))?;
    let dist: District = read(m, drow, 16)?;
    let o_id = dist.next_o_id as u32;
    m.write_u64(drow + 8, dist.next_o_id + 1)?;
    let crow = find(m, t.customer, customer_key(o.w, o.d, o.c))?;
    let crow = crow.ok_or_else(|| missing("a customer row is missing"))?;
    let cust: Customer = read(m, crow, CUSTOMER_READ)?;
    let key = order_key(o.w, o.d, o_id);
    let mut v = [0u8; VALUE];
    v.copy_from_slice(bytes_of(&o.order()));
    let mut sm = Slabbed { m, slab: t.slab };
    let fresh =
        t.order.insert(&mut sm, key, &v)? && t.new_order.insert(&mut sm, key, &[0; VALUE])?;
    new_key(fresh, key, "an order id used twice")?;
    let (mut amounts, mut brand_generic) = (0u64, 0u32);
    let mut lines = [OrderLine::default(); MAX_LINES];
    let size = size_of::<OrderLine>();
    let block = slab_alloc(m, t.slab, (o.lines().len() * size) as u64)?;
    for (i, l) in o.lines().iter().enumerate() {
        let item = match pre {
            Some(p) => p[i],
            None => match find(m, items, l.i_id as u64)? {
                Some(off) => read(m, off, size_of::<Item>())?,
                None => return Err(MemError::Aborted),
            },
        };
        let s = stock(m, i)?.ok_or(MemError::Aborted)?;
        let amount = l.qty as u64 * item.price_cents;
        amounts += amount;
        brand_generic += (schema::original(&item.data) && s.original) as u32;
        lines[i] = OrderLine::new(l, amount, s.dist);
        let key = order_line_key(o.w, o.d, o_id, i as u32 + 1);
        let row = block + (i * size) as u64;
        let mut sm = Slabbed { m, slab: t.slab };
        let fresh = t.order_line.insert(&mut sm, key, &row_value(row))?;
        new_key(fresh, key, "an order line inserted twice")?;
    }
    // Every line's row in one write.
    let rows: &[u8] = rewind::bytemuck::cast_slice(&lines[..o.lines().len()]);
    m.write(block, rows)?;
    Ok(Outcome::Committed {
        o_id,
        total: total(amounts, cust.discount_bp, w_tax, dist.tax_bp),
        brand_generic,
        bad_credit: cust.credit[0] == b'B',
    })
}

fn load_items<E: Engine>(e: &mut E, s: &Sizes) -> Result<BTree, MemError> {
    let items = e.transaction(|m| BTree::create(m))?;
    let item = |m: &mut E::Tx<'_>, i| insert(m, items, i as u64, bytes_of(&schema::item(i)));
    in_batches(s.items, |r| {
        e.transaction(|m| r.clone().try_for_each(|i| item(m, i)))
    })?;
    Ok(items)
}

fn load_warehouse<E: Engine>(e: &mut E, w: u32, s: &Sizes) -> Result<Tables, MemError> {
    let t = e.transaction(|m| {
        let slab = m.alloc(16)?;
        let mut trees = [BTree::at(0); 7];
        for t in &mut trees {
            *t = BTree::create(m)?;
        }
        let [warehouse, district, customer, stock, order, new_order, order_line] = trees;
        Ok(Tables {
            slab,
            warehouse,
            district,
            customer,
            stock,
            order,
            new_order,
            order_line,
        })
    })?;
    super::load_warehouse(w, s, |rows| {
        e.transaction(|m| {
            for row in &mut *rows {
                let k = row.key();
                match row {
                    LoadRow::Warehouse(_, r) => insert(m, t.warehouse, k, bytes_of(&r))?,
                    LoadRow::District(.., r) => insert(m, t.district, k, bytes_of(&r))?,
                    LoadRow::Customer(.., r) => insert(m, t.customer, k, bytes_of(&r))?,
                    LoadRow::Stock(.., r) => insert(m, t.stock, k, bytes_of(&r))?,
                }
            }
            Ok::<_, MemError>(())
        })
    })?;
    Ok(t)
}

/// A warehouse of a baseline: its engine, its tables and its copy of the
/// item table (read only).
pub struct Wh<E> {
    engine: E,
    tables: Tables,
    items: BTree,
}

/// `volatile` or `persist-nolog`: a space (arena or domain) per warehouse.
pub struct Baseline<E> {
    whs: Vec<Mutex<Wh<E>>>,
}

fn loaded<E: Engine>(mut engine: E, w: u32, s: &Sizes) -> Result<Mutex<Wh<E>>, CliError> {
    let what = format!("loading the items of warehouse {w}");
    let items = load_items(&mut engine, s).map_err(CliError::bench(what))?;
    let tables = load_warehouse(&mut engine, w, s);
    let tables = tables.map_err(CliError::bench(format!("loading warehouse {w}")))?;
    Ok(Mutex::new(Wh {
        engine,
        tables,
        items,
    }))
}

impl<E: Engine> Baseline<E> {
    /// `w` warehouses, each loaded into the engine `engine(w, bytes)` makes.
    fn new(
        w: u32,
        s: &Sizes,
        engine: impl Fn(u32, u64) -> Result<E, CliError>,
    ) -> Result<Self, CliError> {
        let space = s.item_bytes(PER_ROW) + s.warehouse_bytes(PER_ROW);
        let whs = (1..=w).map(|w| loaded(engine(w, space)?, w, s));
        Ok(Baseline {
            whs: whs.collect::<Result<_, _>>()?,
        })
    }
}

impl Baseline<Volatile> {
    pub fn volatile(w: u32, s: &Sizes) -> Result<Self, CliError> {
        Baseline::new(w, s, |_, space| Ok(Volatile::new(space)))
    }
}

impl Baseline<NoLog> {
    pub fn nolog(ctx: &Ctx, dir: &Path, w: u32, s: &Sizes) -> Result<Self, CliError> {
        Baseline::new(w, s, |w, space| {
            let dom = ctx.domain(&dir.join(format!("nolog-{w}.pool")), space)?;
            Ok(NoLog::new(dom))
        })
    }
}

impl<E: Engine + Send> Baseline<E> {
    fn run(&self, o: &NewOrder) -> Result<Outcome, MemError> {
        let mut held = lock(&self.whs, &o.warehouses())
            .map_err(|e| MemError::Io(std::io::Error::other(e.to_string())))?;
        let h = held.iter().position(|(w, _)| *w == o.w);
        let h = h.expect("the home warehouse is locked");
        // No rollback: every item is looked up before anything is written.
        let (items, tables) = (held[h].1.items, held[h].1.tables);
        let Some(pre) = held[h].1.engine.transaction(|m| read_items(m, items, o))? else {
            return Ok(Outcome::RolledBack);
        };
        // The remote lines' stock, each in its own warehouse's space.
        let mut remote: [Option<StockOut>; MAX_LINES] = [None; MAX_LINES];
        for (w, g) in held.iter_mut().filter(|(w, _)| *w != o.w) {
            let (stock, w) = (g.tables.stock, *w);
            g.engine.transaction(|m| {
                for (i, l) in o.lines().iter().enumerate() {
                    if l.supply_w == w {
                        remote[i] = stock_line(m, stock, o.w, o.d, l)?;
                    }
                }
                Ok(())
            })?;
        }
        held[h].1.engine.transaction(|m| {
            home(m, &tables, items, o, Some(&pre), |m, i| {
                let l = &o.lines()[i];
                if l.supply_w == o.w {
                    stock_line(m, tables.stock, o.w, o.d, l)
                } else {
                    Ok(remote[i])
                }
            })
        })
    }
}

impl<E: Engine + Send> System for Baseline<E> {
    fn new_order(&self, o: &NewOrder) -> Result<Outcome, CliError> {
        self.run(o)
            .map_err(|e| CliError::Bench(format!("new-order: {e}")))
    }

    fn counters(&self) -> Option<Counters> {
        let mut sum = Counters::default();
        for wh in &self.whs {
            let c = wh.lock().ok()?.engine.counters()?;
            sum = sum + c;
        }
        Some(sum)
    }
}

/// The tree in one rewind pool: every warehouse's tables and the one item
/// table.
pub struct RewindTree {
    pool: Box<Pool>,
    items: BTree,
    whs: Vec<Tables>,
    locks: Vec<Mutex<()>>,
}

impl RewindTree {
    /// The trees of `w` warehouses in a pool of `lanes` commit lanes
    /// (`name`: the configuration's label).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        ctx: &Ctx,
        dir: &Path,
        variant: LogVariant,
        policy: Policy,
        lanes: u64,
        name: &str,
        w: u32,
        s: &Sizes,
    ) -> Result<RewindTree, CliError> {
        let size = s.pool_bytes(w, PER_ROW);
        let cfg = ctx.pool_config(variant, policy).lanes(lanes);
        let file = format!("tree-{name}");
        let pool = Box::new(fresh_pool((dir, &file), "rewind-bench-tpcc", size, &cfg)?);
        let mut e = Rewind(&*pool);
        let what = format!("loading rewind/{name}");
        let items = load_items(&mut e, s).map_err(CliError::bench(&what))?;
        let whs = (1..=w).map(|w| load_warehouse(&mut e, w, s));
        let whs = whs.collect::<Result<Vec<_>, _>>();
        let whs = whs.map_err(CliError::bench(&what))?;
        pool.checkpoint().map_err(CliError::rewind(what))?;
        Ok(RewindTree {
            pool,
            items,
            locks: (1..=w).map(|_| Mutex::new(())).collect(),
            whs,
        })
    }
}

impl System for RewindTree {
    fn new_order(&self, o: &NewOrder) -> Result<Outcome, CliError> {
        let _held = lock(&self.locks, &o.warehouses())?;
        let t = &self.whs[o.w as usize - 1];
        // `Rewind`'s transaction, called on the pool: the same call.
        let r = self.pool.transaction(|m: &mut rewind::Tx<'_>| {
            home(m, t, self.items, o, None, |m, i| {
                let l = &o.lines()[i];
                stock_line(m, self.whs[l.supply_w as usize - 1].stock, o.w, o.d, l)
            })
        });
        match r {
            Ok(out) => Ok(out),
            Err(MemError::Aborted) => Ok(Outcome::RolledBack),
            Err(e) => Err(CliError::Bench(format!("new-order: {e}"))),
        }
    }

    fn counters(&self) -> Option<Counters> {
        Some(self.pool.counters())
    }
}
