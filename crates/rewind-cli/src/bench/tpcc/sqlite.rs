//! The TPC-C tables in SQLite, the peer: the specification's tables with
//! their composite primary keys (`WITHOUT ROWID`, so that each table is
//! one B-tree on its key, as the other systems' are), WAL journal with
//! `synchronous=FULL`, prepared statements, one connection per thread, and
//! each new-order one `BEGIN IMMEDIATE` transaction that a missing item
//! rolls back.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use rewind_sqlite::rusqlite::types::ToSql;
use rewind_sqlite::rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::schema::{self, *};
use super::{load_warehouse, LoadRow, NewOrder, Outcome, Sizes, System};
use crate::error::CliError;

const SCHEMA: &str = "
CREATE TABLE item (i_id INTEGER PRIMARY KEY, i_im_id INTEGER, i_price INTEGER, i_name BLOB,
    i_data BLOB);
CREATE TABLE warehouse (w_id INTEGER PRIMARY KEY, w_tax INTEGER, w_ytd INTEGER, w_rest BLOB);
CREATE TABLE district (d_w_id INTEGER, d_id INTEGER, d_tax INTEGER, d_next_o_id INTEGER,
    d_ytd INTEGER, d_rest BLOB, PRIMARY KEY (d_w_id, d_id)) WITHOUT ROWID;
CREATE TABLE customer (c_w_id INTEGER, c_d_id INTEGER, c_id INTEGER, c_discount INTEGER,
    c_credit BLOB, c_last BLOB, c_first BLOB, c_balance INTEGER, c_ytd_payment INTEGER,
    c_payment_cnt INTEGER, c_delivery_cnt INTEGER, c_rest BLOB,
    PRIMARY KEY (c_w_id, c_d_id, c_id)) WITHOUT ROWID;
CREATE TABLE stock (s_w_id INTEGER, s_i_id INTEGER, s_quantity INTEGER, s_ytd INTEGER,
    s_order_cnt INTEGER, s_remote_cnt INTEGER, s_dist_01 BLOB, s_dist_02 BLOB, s_dist_03 BLOB,
    s_dist_04 BLOB, s_dist_05 BLOB, s_dist_06 BLOB, s_dist_07 BLOB, s_dist_08 BLOB,
    s_dist_09 BLOB, s_dist_10 BLOB, s_data BLOB, PRIMARY KEY (s_w_id, s_i_id)) WITHOUT ROWID;
CREATE TABLE orders (o_w_id INTEGER, o_d_id INTEGER, o_id INTEGER, o_c_id INTEGER,
    o_entry_d INTEGER, o_carrier_id INTEGER, o_ol_cnt INTEGER, o_all_local INTEGER,
    PRIMARY KEY (o_w_id, o_d_id, o_id)) WITHOUT ROWID;
CREATE TABLE new_order (no_w_id INTEGER, no_d_id INTEGER, no_o_id INTEGER,
    PRIMARY KEY (no_w_id, no_d_id, no_o_id)) WITHOUT ROWID;
CREATE TABLE order_line (ol_w_id INTEGER, ol_d_id INTEGER, ol_o_id INTEGER,
    ol_number INTEGER, ol_i_id INTEGER, ol_supply_w_id INTEGER, ol_delivery_d INTEGER,
    ol_quantity INTEGER, ol_amount INTEGER, ol_dist_info BLOB,
    PRIMARY KEY (ol_w_id, ol_d_id, ol_o_id, ol_number)) WITHOUT ROWID;
";

type Sql = rewind_sqlite::rusqlite::Error;

fn sql(what: &'static str) -> impl FnOnce(Sql) -> CliError {
    move |e| CliError::Bench(format!("sqlite {what}: {e}"))
}

pub struct Sqlite {
    /// One connection per terminal (warehouse).
    conns: Vec<Mutex<Connection>>,
}

fn open(path: &Path) -> Result<Connection, CliError> {
    crate::bench::sqlite_wal_full(path, Duration::from_secs(60))
}

fn load(c: &mut Connection, w: u32, s: &Sizes) -> Result<(), Sql> {
    let tx = c.transaction()?;
    load_warehouse(w, s, |rows| {
        for row in rows {
            match row {
                LoadRow::Warehouse(w, r) => {
                    insert(&tx, "warehouse", &[&w, &r.tax_bp, &r.ytd_cents, &r.rest])?
                }
                LoadRow::District(w, d, r) => {
                    let (tax, next, ytd) = (&r.tax_bp, &r.next_o_id, &r.ytd_cents);
                    insert(&tx, "district", &[&w, &d, tax, next, ytd, &r.rest])?
                }
                LoadRow::Customer(w, d, c, r) => {
                    let credit = &r.credit[..2];
                    let mut v: Vec<&dyn ToSql> = vec![&w, &d, &c, &r.discount_bp, &credit];
                    v.extend([&r.last as &dyn ToSql, &r.first, &r.balance_cents]);
                    v.extend([&r.ytd_payment_cents as &dyn ToSql, &r.payment_cnt]);
                    v.extend([&r.delivery_cnt as &dyn ToSql, &r.rest]);
                    insert(&tx, "customer", &v)?
                }
                LoadRow::Stock(w, i, r) => {
                    let mut v: Vec<&dyn ToSql> = vec![&w, &i, &r.quantity, &r.ytd];
                    v.extend([&r.order_cnt as &dyn ToSql, &r.remote_cnt]);
                    v.extend(r.dist.iter().map(|d| d as &dyn ToSql));
                    v.push(&r.data);
                    insert(&tx, "stock", &v)?
                }
            }
        }
        Ok::<_, Sql>(())
    })?;
    tx.commit()
}

/// Inserts the row of `values` into `table` (a prepared statement per table).
fn insert(c: &Connection, table: &str, values: &[&dyn ToSql]) -> Result<(), Sql> {
    let marks: Vec<String> = (1..=values.len()).map(|i| format!("?{i}")).collect();
    let sql = format!("INSERT INTO {table} VALUES ({})", marks.join(", "));
    c.prepare_cached(&sql)?.execute(values)?;
    Ok(())
}

impl Sqlite {
    pub fn new(path: &Path, w: u32, s: &Sizes) -> Result<Sqlite, CliError> {
        let _ = std::fs::remove_file(path);
        let mut c = open(path)?;
        c.execute_batch(SCHEMA)
            .map_err(sql("creating the tables"))?;
        let items = (|| {
            let tx = c.transaction()?;
            {
                let mut st = tx.prepare("INSERT INTO item VALUES (?1, ?2, ?3, ?4, ?5)")?;
                for i in 1..=s.items {
                    let r = schema::item(i);
                    st.execute(params![i, r.im_id, r.price_cents, &r.name[..], &r.data[..]])?;
                }
            }
            tx.commit()
        })();
        items.map_err(sql("loading the items"))?;
        for w in 1..=w {
            load(&mut c, w, s).map_err(sql("loading a warehouse"))?;
        }
        let mut conns = vec![Mutex::new(c)];
        for _ in 1..w {
            conns.push(Mutex::new(open(path)?));
        }
        Ok(Sqlite { conns })
    }
}

fn new_order(c: &mut Connection, o: &NewOrder) -> Result<Outcome, Sql> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let w_tax: u64 = tx
        .prepare_cached("SELECT w_tax FROM warehouse WHERE w_id = ?1")?
        .query_row(params![o.w], |r| r.get(0))?;
    let (d_tax, next): (u64, u32) = tx
        .prepare_cached("SELECT d_tax, d_next_o_id FROM district WHERE d_w_id = ?1 AND d_id = ?2")?
        .query_row(params![o.w, o.d], |r| Ok((r.get(0)?, r.get(1)?)))?;
    tx.prepare_cached("UPDATE district SET d_next_o_id = ?3 WHERE d_w_id = ?1 AND d_id = ?2")?
        .execute(params![o.w, o.d, next + 1])?;
    let (discount, credit): (u64, Vec<u8>) = tx
        .prepare_cached(
            "SELECT c_discount, c_credit, c_last FROM customer \
             WHERE c_w_id = ?1 AND c_d_id = ?2 AND c_id = ?3",
        )?
        .query_row(params![o.w, o.d, o.c], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let (lines, all_local) = (o.lines().len(), o.all_local());
    tx.prepare_cached("INSERT INTO orders VALUES (?1, ?2, ?3, ?4, ?5, NULL, ?6, ?7)")?
        .execute(params![o.w, o.d, next, o.c, o.entry_d, lines, all_local])?;
    tx.prepare_cached("INSERT INTO new_order VALUES (?1, ?2, ?3)")?
        .execute(params![o.w, o.d, next])?;
    let (mut amounts, mut brand_generic) = (0u64, 0u32);
    let stock_sql = format!(
        "SELECT s_quantity, s_ytd, s_order_cnt, s_remote_cnt, s_data, s_dist_{:02} FROM stock \
         WHERE s_w_id = ?1 AND s_i_id = ?2",
        o.d
    );
    for (i, l) in o.lines().iter().enumerate() {
        let item: Option<(u64, Vec<u8>, Vec<u8>)> = tx
            .prepare_cached("SELECT i_price, i_name, i_data FROM item WHERE i_id = ?1")?
            .query_row(params![l.i_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        // The unused item: the transaction rolls back (when `tx` drops).
        let Some((price, _name, i_data)) = item else {
            return Ok(Outcome::RolledBack);
        };
        type StockRow = (u64, u64, u64, u64, Vec<u8>, Vec<u8>);
        let s: StockRow = tx
            .prepare_cached(&stock_sql)?
            .query_row(params![l.supply_w, l.i_id], |r| StockRow::try_from(r))?;
        let qty = l.qty as u64;
        let remote = (l.supply_w != o.w) as u64;
        let (quantity, ytd) = (restock(s.0, qty), s.1 + qty);
        let (orders, remotes) = (s.2 + 1, s.3 + remote);
        tx.prepare_cached(
            "UPDATE stock SET s_quantity = ?3, s_ytd = ?4, s_order_cnt = ?5, s_remote_cnt = ?6 \
             WHERE s_w_id = ?1 AND s_i_id = ?2",
        )?
        .execute(params![l.supply_w, l.i_id, quantity, ytd, orders, remotes])?;
        let amount = qty * price;
        amounts += amount;
        brand_generic += (schema::original(&i_data) && schema::original(&s.4)) as u32;
        tx.prepare_cached(
            "INSERT INTO order_line VALUES (?1, ?2, ?3, ?4, ?5, ?6, NULL, ?7, ?8, ?9)",
        )?
        .execute(params![
            o.w,
            o.d,
            next,
            i + 1,
            l.i_id,
            l.supply_w,
            l.qty,
            amount,
            s.5
        ])?;
    }
    tx.commit()?;
    Ok(Outcome::Committed {
        o_id: next,
        total: total(amounts, discount, w_tax, d_tax),
        brand_generic,
        bad_credit: credit.first() == Some(&b'B'),
    })
}

impl System for Sqlite {
    fn new_order(&self, o: &NewOrder) -> Result<Outcome, CliError> {
        let conn = &self.conns[o.w as usize - 1];
        let mut c = conn
            .lock()
            .map_err(|_| CliError::Bench("a SQLite connection's lock was poisoned".into()))?;
        new_order(&mut c, o).map_err(sql("new-order"))
    }
}
