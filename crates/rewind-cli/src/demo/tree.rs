//! The demo's workload: an order book kept in a persistent B+-tree
//! (`rewind_collections::BTreeMap`), changed in transactions.
//!
//! Transaction number `i` is a pure function of `(seed, i)`: 1 to 8
//! operations, each an insert (or update) of an order keyed by a number
//! below [`KEYS`], or, one in four, a removal. With the tree's changes, the
//! transaction stores `committed = i` in the root, so the recovered pool
//! says which transactions are in, and the parent can replay exactly those
//! in a volatile [`Model`] (a `std` `BTreeMap`) and compare.
//!
//! Inserts into full leaves split them (in the insert's commit group under
//! redo, as nested top actions under undo), so a kill can also land inside
//! a split, and recovery must keep or undo it whole.

use std::collections::BTreeMap as StdBTreeMap;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{PPtr, Pod, Pool, Zeroable};
use rewind_collections::{BTreeMap, Error};

/// Order keys are drawn from `0..KEYS`.
pub const KEYS: u64 = 20_000;
/// Keys per node: small, so the demo's few thousand orders make a tree of
/// several levels and many splits.
pub const FANOUT: usize = 16;
/// Layout name of the demo pool.
pub const LAYOUT: &str = "rewind-demo-btree";

/// One order, the tree's value.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct Order {
    /// Quantity ordered.
    pub quantity: u64,
    /// Price in cents.
    pub price: u64,
    /// The transaction that last wrote it.
    pub tx_no: u64,
}

/// Its stable name in the tree's header (a type fingerprint).
impl rewind_collections::Stored for Order {
    fn type_name() -> std::borrow::Cow<'static, str> {
        "rewind-demo::Order".into()
    }
}

/// The order book: order number → order.
pub type Book = BTreeMap<u64, Order>;

/// The root object.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub struct Root {
    /// The tree.
    pub book: PPtr<Book>,
    /// Number of the last committed transaction.
    pub committed: u64,
}

/// One operation of a transaction.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// Insert or update an order.
    Put(u64, Order),
    /// Remove an order (nothing if absent).
    Remove(u64),
}

/// Transaction `i`'s operations: a seeded generator per transaction, so
/// the child and the verifier draw the same ones.
pub fn plan(seed: u64, i: u64) -> Vec<Op> {
    let mut rng = SmallRng::seed_from_u64(seed ^ i.wrapping_mul(0xD6E8_FEB8_6659_FD93));
    let n = rng.gen_range(1..=8);
    (0..n)
        .map(|_| {
            let key = rng.gen_range(0..KEYS);
            let r: u64 = rng.gen();
            if r.is_multiple_of(4) {
                Op::Remove(key)
            } else {
                Op::Put(
                    key,
                    Order {
                        quantity: 1 + (r >> 8) % 100,
                        price: 100 + (r >> 16) % 100_000,
                        tx_no: i,
                    },
                )
            }
        })
        .collect()
}

/// The volatile model the parent replays.
#[derive(Default)]
pub struct Model {
    /// The orders.
    pub book: StdBTreeMap<u64, Order>,
    /// Last applied transaction.
    pub committed: u64,
}

impl Model {
    /// Applies the next transaction.
    pub fn step(&mut self, seed: u64) {
        let i = self.committed + 1;
        for op in plan(seed, i) {
            match op {
                Op::Put(k, o) => drop(self.book.insert(k, o)),
                Op::Remove(k) => drop(self.book.remove(&k)),
            }
        }
        self.committed = i;
    }
}

/// Creates the root and an empty tree in one transaction.
pub fn init(pool: &Pool) -> Result<PPtr<Root>, Error> {
    pool.transaction(|tx| {
        let root = tx.root::<Root>()?;
        let book = Book::create_with_fanout(tx, FANOUT)?;
        tx.write(
            root,
            &Root {
                book: book.as_ptr(),
                committed: 0,
            },
        )?;
        Ok(root)
    })
}

/// Runs the next transaction and returns its number.
///
/// `mid` runs inside the transaction after its tree operations and before
/// the counter is written, so the demo child can announce the transaction
/// and get killed while it is in flight.
pub fn step(pool: &Pool, root: PPtr<Root>, seed: u64, mid: impl FnOnce(u64)) -> Result<u64, Error> {
    let mut mid = Some(mid);
    pool.transaction(|tx| {
        let r = tx.read(root)?;
        let book = Book::from_ptr(r.book);
        let i = r.committed + 1;
        for op in plan(seed, i) {
            match op {
                Op::Put(k, o) => drop(book.insert(tx, k, o)?),
                Op::Remove(k) => drop(book.remove(tx, &k)?),
            }
        }
        if let Some(mid) = mid.take() {
            mid(i);
        }
        tx.write(root, &Root { committed: i, ..r })?;
        Ok(i)
    })
}
