//! The TPC-C tables of `bench tpcc`: their rows as fixed-size records, the
//! composite keys packed into a `u64`, and the rows the load generates.
//!
//! # Keys
//!
//! Every table is an ordered map keyed by its TPC-C primary key packed
//! into one `u64`, most significant field first, so that the packed keys
//! sort as the composite keys do (`w` < 2^16, `d` 1..=10 < 2^4, ids < 2^32,
//! order-line numbers 1..=15 < 2^4):
//!
//! | table       | key                                   |
//! |-------------|---------------------------------------|
//! | item        | `i_id`                                |
//! | warehouse   | `w`                                   |
//! | district    | `w << 4 \| d`                         |
//! | customer    | `(w << 4 \| d) << 32 \| c_id`         |
//! | stock       | `w << 32 \| i_id`                     |
//! | order       | `(w << 4 \| d) << 32 \| o_id`         |
//! | new-order   | `(w << 4 \| d) << 32 \| o_id`         |
//! | order-line  | `((w << 4 \| d) << 32 \| o_id) << 4 \| ol_number` |
//!
//! # Rows
//!
//! Fixed-size `repr(C)` records of the TPC-C columns the new-order
//! transaction reads or writes, in little-endian integers (money in cents,
//! rates in basis points), and the remaining columns as byte strings sized
//! near the specification's rows (customer 672 bytes, stock 328, item 96),
//! so that a system that copies whole rows pays for their size. The fields
//! new-order reads come first, so a system that reads fields reads one
//! prefix.

use rewind::{Pod, Zeroable};
use rewind_collections::Stored;
use std::borrow::Cow;

/// Districts per warehouse (the specification's 10).
pub const DISTRICTS: u32 = 10;

pub fn district_key(w: u32, d: u32) -> u64 {
    (w as u64) << 4 | d as u64
}

pub fn customer_key(w: u32, d: u32, c: u32) -> u64 {
    district_key(w, d) << 32 | c as u64
}

pub fn stock_key(w: u32, i: u32) -> u64 {
    (w as u64) << 32 | i as u64
}

/// An order's key, and its new-order's.
pub fn order_key(w: u32, d: u32, o: u32) -> u64 {
    district_key(w, d) << 32 | o as u64
}

pub fn order_line_key(w: u32, d: u32, o: u32, n: u32) -> u64 {
    order_key(w, d, o) << 4 | n as u64
}

macro_rules! stored {
    ($($t:ident),*) => {$(
        impl Stored for $t {
            fn type_name() -> Cow<'static, str> {
                Cow::Borrowed(concat!("tpcc::", stringify!($t)))
            }
        }
    )*};
}

/// A warehouse (96 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct Warehouse {
    pub tax_bp: u64,
    pub ytd_cents: i64,
    /// Name and address.
    pub rest: [u8; 80],
}

/// A district (104 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct District {
    pub tax_bp: u64,
    pub next_o_id: u64,
    pub ytd_cents: i64,
    /// Name and address.
    pub rest: [u8; 80],
}

/// A customer (672 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct Customer {
    pub discount_bp: u64,
    /// `GC` or `BC`, padded.
    pub credit: [u8; 8],
    pub last: [u8; 16],
    pub first: [u8; 16],
    pub balance_cents: i64,
    pub ytd_payment_cents: i64,
    pub payment_cnt: u64,
    pub delivery_cnt: u64,
    /// Address, phone, dates, limits and `c_data`.
    pub rest: [u8; 592],
}

/// Bytes of a customer's prefix that new-order reads.
pub const CUSTOMER_READ: usize = 48;

/// An item (96 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct Item {
    pub price_cents: u64,
    pub im_id: u64,
    pub name: [u8; 24],
    pub data: [u8; 56],
}

/// A stock row (328 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct Stock {
    pub quantity: u64,
    pub ytd: u64,
    pub order_cnt: u64,
    pub remote_cnt: u64,
    /// `s_dist_01` .. `s_dist_10`.
    pub dist: [[u8; 24]; 10],
    pub data: [u8; 56],
}

/// Bytes of a stock row's counters (what new-order writes).
pub const STOCK_COUNTERS: usize = 32;

/// An order (24 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct Order {
    pub c_id: u32,
    /// 0: none yet.
    pub carrier_id: u32,
    pub ol_cnt: u32,
    pub all_local: u32,
    pub entry_d: u64,
}

/// An order line (56 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct OrderLine {
    pub i_id: u32,
    pub supply_w: u32,
    pub quantity: u32,
    pub _pad: u32,
    pub amount_cents: i64,
    /// 0: not delivered.
    pub delivery_d: u64,
    pub dist_info: [u8; 24],
}

impl OrderLine {
    /// The row of input line `l`, its amount and its stock's district info.
    pub fn new(l: &super::Line, amount: u64, dist_info: [u8; 24]) -> OrderLine {
        OrderLine {
            i_id: l.i_id,
            supply_w: l.supply_w,
            quantity: l.qty,
            _pad: 0,
            amount_cents: amount as i64,
            delivery_d: 0,
            dist_info,
        }
    }
}

stored!(Warehouse, District, Customer, Item, Stock, Order, OrderLine);

/// SplitMix64 of `a` and `b`: the load's rows are functions of their keys,
/// so every system loads the same rows without storing them.
fn mix(a: u64, b: u64) -> u64 {
    let mut z = a
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(b)
        .wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `N` printable bytes from `seed`; `original` puts "ORIGINAL" inside.
fn text<const N: usize>(seed: u64, original: bool) -> [u8; N] {
    let mut out = [0u8; N];
    for (i, b) in out.iter_mut().enumerate() {
        *b = b'a' + (mix(seed, i as u64) % 26) as u8;
    }
    if original && N >= 8 {
        let at = (mix(seed, 99) % (N as u64 - 7)) as usize;
        out[at..at + 8].copy_from_slice(b"ORIGINAL");
    }
    out
}

/// Whether `data` contains "ORIGINAL" (the brand-generic test).
pub fn original(data: &[u8]) -> bool {
    data.windows(8).any(|w| w == b"ORIGINAL")
}

pub fn item(i: u32) -> Item {
    let h = mix(1, i as u64);
    Item {
        price_cents: 100 + h % 9_901,
        im_id: 1 + (h >> 20) % 10_000,
        name: text(mix(2, i as u64), false),
        data: text(mix(3, i as u64), (h >> 40).is_multiple_of(10)),
    }
}

pub fn warehouse(w: u32) -> Warehouse {
    Warehouse {
        tax_bp: mix(4, w as u64) % 2_001,
        ytd_cents: 30_000_000,
        rest: text(mix(5, w as u64), false),
    }
}

pub fn district(w: u32, d: u32) -> District {
    let k = district_key(w, d);
    District {
        tax_bp: mix(6, k) % 2_001,
        next_o_id: 1,
        ytd_cents: 3_000_000,
        rest: text(mix(7, k), false),
    }
}

pub fn customer(w: u32, d: u32, c: u32) -> Customer {
    let k = customer_key(w, d, c);
    let h = mix(8, k);
    let mut credit = *b"GC\0\0\0\0\0\0";
    if h.is_multiple_of(10) {
        credit[0] = b'B';
    }
    Customer {
        discount_bp: (h >> 8) % 5_001,
        credit,
        last: text(mix(9, k), false),
        first: text(mix(10, k), false),
        balance_cents: -1_000,
        ytd_payment_cents: 1_000,
        payment_cnt: 1,
        delivery_cnt: 0,
        rest: text(mix(11, k), false),
    }
}

pub fn stock(w: u32, i: u32) -> Stock {
    let k = stock_key(w, i);
    let h = mix(12, k);
    let mut dist = [[0u8; 24]; 10];
    for (j, s) in dist.iter_mut().enumerate() {
        *s = text(mix(13 + j as u64, k), false);
    }
    Stock {
        quantity: 10 + h % 91,
        ytd: 0,
        order_cnt: 0,
        remote_cnt: 0,
        dist,
        data: text(mix(30, k), (h >> 40).is_multiple_of(10)),
    }
}

/// New-order's stock update: the new quantity after ordering `qty`.
pub fn restock(quantity: u64, qty: u64) -> u64 {
    if quantity >= qty + 10 {
        quantity - qty
    } else {
        quantity + 91 - qty
    }
}

/// An order's total in cents: the lines' amounts, less the customer's
/// discount, plus the warehouse's and the district's taxes (integer
/// arithmetic, so that every system computes the same).
pub fn total(amounts: u64, discount_bp: u64, w_tax_bp: u64, d_tax_bp: u64) -> u64 {
    let t = amounts as u128
        * (10_000 - discount_bp.min(10_000)) as u128
        * (10_000 + w_tax_bp + d_tax_bp) as u128;
    (t / 100_000_000) as u64
}
