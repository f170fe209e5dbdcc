//! The TPC-C tables as `rewind-collections` maps, the user-facing API:
//! each table a `BTreeMap<u64, Row>` keyed by the packed key, all in one
//! pool of the default configuration. A read copies the row out
//! (`get_tx`); an update changes the row in place (`update`: one descent,
//! and only the counters it changes written), as a program of the
//! collections would.

use std::path::Path;
use std::sync::Mutex;

use rewind::{Counters, Pool, Tx};
use rewind_collections::{BTreeMap, Error};

use super::schema::{self, *};
use super::{in_batches, load_warehouse, lock, LoadRow, NewOrder, Outcome, Sizes, System};
use crate::bench::{fresh_pool, Ctx};
use crate::error::CliError;

/// Bytes a row costs in a map beside its payload: leaves of unsorted slots
/// in power-of-two blocks, half full after a sequential load.
const PER_ROW: u64 = 1_024;

#[derive(Clone, Copy)]
struct Tables {
    warehouse: BTreeMap<u64, Warehouse>,
    district: BTreeMap<u64, District>,
    customer: BTreeMap<u64, Customer>,
    stock: BTreeMap<u64, Stock>,
    order: BTreeMap<u64, Order>,
    new_order: BTreeMap<u64, u64>,
    order_line: BTreeMap<u64, OrderLine>,
}

pub struct Coll {
    pool: Box<Pool>,
    items: BTreeMap<u64, Item>,
    whs: Vec<Tables>,
    locks: Vec<Mutex<()>>,
}

fn aborted() -> Error {
    Error::Pool(rewind::Error::Aborted)
}

/// A row new-order needs and the load made.
fn need<T>(row: Option<T>, reason: &'static str) -> Result<T, Error> {
    row.ok_or(Error::Corrupt {
        what: "TPC-C table",
        offset: 0,
        reason,
    })
}

fn load(pool: &Pool, w: u32, s: &Sizes) -> Result<Tables, Error> {
    let t = pool.transaction(|tx| {
        Ok::<_, Error>(Tables {
            warehouse: BTreeMap::create(tx)?,
            district: BTreeMap::create(tx)?,
            customer: BTreeMap::create(tx)?,
            stock: BTreeMap::create(tx)?,
            order: BTreeMap::create(tx)?,
            new_order: BTreeMap::create(tx)?,
            order_line: BTreeMap::create(tx)?,
        })
    })?;
    load_warehouse(w, s, |rows| {
        pool.transaction(|tx| {
            for row in &mut *rows {
                let k = row.key();
                match row {
                    LoadRow::Warehouse(_, r) => drop(t.warehouse.insert(tx, k, r)?),
                    LoadRow::District(.., r) => drop(t.district.insert(tx, k, r)?),
                    LoadRow::Customer(.., r) => drop(t.customer.insert(tx, k, r)?),
                    LoadRow::Stock(.., r) => drop(t.stock.insert(tx, k, r)?),
                }
            }
            Ok::<_, Error>(())
        })
    })?;
    Ok(t)
}

impl Coll {
    /// The tables of `w` warehouses in a pool of `lanes` commit lanes.
    pub fn new(ctx: &Ctx, dir: &Path, lanes: u64, w: u32, s: &Sizes) -> Result<Coll, CliError> {
        let size = s.pool_bytes(w, PER_ROW);
        let cfg = ctx.default_config().lanes(lanes);
        let pool = fresh_pool((dir, "collections"), "rewind-bench-tpcc", size, &cfg)?;
        let what = "loading rewind-collections";
        let loaded = (|| {
            let items = pool.transaction(BTreeMap::create)?;
            let item = |tx: &mut Tx<'_>, i| items.insert(tx, i as u64, schema::item(i)).map(drop);
            in_batches(s.items, |r| {
                pool.transaction(|tx| r.clone().try_for_each(|i| item(tx, i)))
            })?;
            let whs = (1..=w)
                .map(|w| load(&pool, w, s))
                .collect::<Result<_, _>>()?;
            pool.checkpoint()?;
            Ok::<_, Error>((items, whs))
        })();
        let (items, whs) = loaded.map_err(CliError::bench(what))?;
        Ok(Coll {
            pool: Box::new(pool),
            items,
            whs,
            locks: (1..=w).map(|_| Mutex::new(())).collect(),
        })
    }

    fn run(&self, tx: &mut Tx<'_>, o: &NewOrder) -> Result<Outcome, Error> {
        let t = &self.whs[o.w as usize - 1];
        let wh = t.warehouse.get_tx(tx, &(o.w as u64))?;
        let wh = need(wh, "a warehouse row is missing")?;
        let dk = district_key(o.w, o.d);
        let dist = t.district.update(tx, &dk, |d| {
            d.next_o_id += 1;
            *d
        })?;
        let dist = need(dist, "a district row is missing")?;
        let o_id = (dist.next_o_id - 1) as u32;
        let cust = t.customer.get_tx(tx, &customer_key(o.w, o.d, o.c))?;
        let cust = need(cust, "a customer row is missing")?;
        let key = order_key(o.w, o.d, o_id);
        let fresh = t.order.insert(tx, key, o.order())?.is_none()
            && t.new_order.insert(tx, key, 0)?.is_none();
        need(fresh.then_some(()), "an order id used twice")?;
        let (mut amounts, mut brand_generic) = (0u64, 0u32);
        for (i, l) in o.lines().iter().enumerate() {
            let item = self
                .items
                .get_tx(tx, &(l.i_id as u64))?
                .ok_or_else(aborted)?;
            let stock = self.whs[l.supply_w as usize - 1].stock;
            let sk = stock_key(l.supply_w, l.i_id);
            let qty = l.qty as u64;
            let s = stock.update(tx, &sk, |s| {
                s.quantity = restock(s.quantity, qty);
                s.ytd += qty;
                s.order_cnt += 1;
                s.remote_cnt += (l.supply_w != o.w) as u64;
                *s
            })?;
            let s = s.ok_or_else(aborted)?;
            let amount = qty * item.price_cents;
            amounts += amount;
            brand_generic += (schema::original(&item.data) && schema::original(&s.data)) as u32;
            let line = OrderLine::new(l, amount, s.dist[o.d as usize - 1]);
            t.order_line
                .insert(tx, order_line_key(o.w, o.d, o_id, i as u32 + 1), line)?;
        }
        Ok(Outcome::Committed {
            o_id,
            total: total(amounts, cust.discount_bp, wh.tax_bp, dist.tax_bp),
            brand_generic,
            bad_credit: cust.credit[0] == b'B',
        })
    }
}

impl System for Coll {
    fn new_order(&self, o: &NewOrder) -> Result<Outcome, CliError> {
        let _held = lock(&self.locks, &o.warehouses())?;
        match self.pool.transaction(|tx| self.run(tx, o)) {
            Ok(out) => Ok(out),
            Err(Error::Pool(rewind::Error::Aborted)) => Ok(Outcome::RolledBack),
            Err(e) => Err(CliError::bench("rewind-collections new-order")(e)),
        }
    }

    fn counters(&self) -> Option<Counters> {
        Some(self.pool.counters())
    }
}
