//! REWIND §5.2's workload: a tree loaded with distinct random keys, then
//! operations mixing lookups with updates, the updates split evenly
//! between inserts of new keys and deletes of present ones, so the size
//! stays about constant.
//!
//! A [`Model`] (the set of present keys) draws the operations, outside any
//! measurement: every system then applies the same sequence in the same
//! order, every lookup hits and every insert and delete succeeds. Each
//! system folds its answers into a [`Digest`]; the benchmarks compare the
//! digests, so a system that did other work than the rest is caught.

use std::collections::HashSet;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{Value, VALUE};

/// One operation of the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Get(u64),
    Insert(u64),
    Remove(u64),
}

impl Op {
    /// The key the operation is on.
    pub fn key(self) -> u64 {
        match self {
            Op::Get(k) | Op::Insert(k) | Op::Remove(k) => k,
        }
    }
}

/// The value stored with `key`: derived from it, so a lookup's answer can
/// be checked without storing the values anywhere else.
pub fn value_of(key: u64) -> Value {
    let mut v = [0u8; VALUE];
    v[..8].copy_from_slice(&key.to_le_bytes());
    v[8..16].copy_from_slice(&key.rotate_left(17).to_le_bytes());
    v[16..].copy_from_slice(&(!key).to_le_bytes());
    v
}

/// How the workload's u64 keys reach a store: as themselves, or as the
/// 32-byte strings [`str_key`] makes of them (the string-keyed benchmark).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "peers"), allow(dead_code))] // the peers' stores use it
pub enum Keys {
    U64,
    Str32,
}

/// Bytes of the string-keyed workload's keys.
pub const STR_KEY: usize = 32;

/// The 32-byte string key that stands for `key`, YCSB-like: `user`, 12 hex
/// digits of a mix of `key` (so the strings' order is unrelated to the
/// numbers'), then the 16 hex digits of `key` itself (so distinct keys
/// give distinct strings).
pub fn str_key(key: u64) -> [u8; STR_KEY] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut z = key.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    let mut out = *b"user0000000000000000000000000000";
    for j in 0..12 {
        out[4 + j] = HEX[(z >> (60 - 4 * j)) as usize & 15];
    }
    for j in 0..16 {
        out[16 + j] = HEX[(key >> (60 - 4 * j)) as usize & 15];
    }
    out
}

/// What a system answered, folded: the order-sensitive hash of each
/// operation's outcome (a lookup's value word or a miss, an update's
/// success or failure).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Digest(pub u64);

impl Digest {
    /// Folds one outcome in.
    #[inline]
    pub fn add(&mut self, outcome: u64) {
        self.0 = (self.0 ^ outcome)
            .wrapping_mul(0x0100_0000_01b3)
            .rotate_left(5);
    }

    /// A lookup's answer.
    #[inline]
    pub fn get(&mut self, v: Option<&[u8]>) {
        match v {
            Some(v) if v.len() >= 8 => {
                self.add(u64::from_le_bytes(v[..8].try_into().expect("8 bytes")))
            }
            _ => self.add(u64::MAX),
        }
    }

    /// An update's success.
    #[inline]
    pub fn update(&mut self, done: bool) {
        self.add(done as u64 + 1);
    }
}

/// The present keys, from which operations are drawn.
#[derive(Clone)]
pub struct Model {
    rng: SmallRng,
    /// Keys are drawn from `base..base + span`.
    base: u64,
    span: u64,
    keys: Vec<u64>,
    present: HashSet<u64>,
}

impl Model {
    /// A model seeded with `seed`, keys from 1 to `u64::MAX - 1` (no key is
    /// a sentinel anywhere); nothing present.
    pub fn new(seed: u64) -> Model {
        Model::in_range(seed, 1, u64::MAX - 1)
    }

    /// A model whose keys are drawn from `base..base + span` only (disjoint
    /// ranges keep threads' keys apart in a shared tree).
    pub fn in_range(seed: u64, base: u64, span: u64) -> Model {
        Model {
            rng: SmallRng::seed_from_u64(seed),
            base,
            span,
            keys: Vec::new(),
            present: HashSet::new(),
        }
    }

    /// Keys present now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// The present keys, in no order.
    pub fn keys(&self) -> &[u64] {
        &self.keys
    }

    /// Whether `key` is present.
    pub fn contains(&self, key: u64) -> bool {
        self.present.contains(&key)
    }

    fn fresh_key(&mut self) -> u64 {
        loop {
            let k = self.base + self.rng.gen_range(0..self.span);
            if self.present.insert(k) {
                self.keys.push(k);
                return k;
            }
        }
    }

    /// `n` inserts of new keys (the load).
    pub fn load(&mut self, n: usize) -> Vec<Op> {
        (0..n).map(|_| Op::Insert(self.fresh_key())).collect()
    }

    /// `n` operations, a fraction `update` of them updates, as many inserts
    /// as deletes (alternating, so the size stays within one of where it
    /// was); the rest lookups of present keys.
    pub fn mix(&mut self, n: usize, update: f64) -> Vec<Op> {
        let mut insert_next = true;
        (0..n)
            .map(|_| {
                if self.rng.gen::<f64>() < update {
                    let op = if insert_next || self.keys.is_empty() {
                        Op::Insert(self.fresh_key())
                    } else {
                        let i = self.rng.gen_range(0..self.keys.len());
                        let k = self.keys.swap_remove(i);
                        self.present.remove(&k);
                        Op::Remove(k)
                    };
                    insert_next = !insert_next;
                    op
                } else if self.keys.is_empty() {
                    Op::Get(self.base + self.rng.gen_range(0..self.span))
                } else {
                    Op::Get(self.keys[self.rng.gen_range(0..self.keys.len())])
                }
            })
            .collect()
    }

    /// `pairs` insert/delete pairs: an insert of a new key, then a delete
    /// of a present one (REWIND Fig. 8's workload).
    pub fn pairs(&mut self, pairs: usize) -> Vec<Op> {
        self.mix(2 * pairs, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_keeps_the_size_and_hits() {
        let mut m = Model::new(1);
        let load = m.load(1000);
        assert_eq!(load.len(), 1000);
        let ops = m.mix(10_000, 0.5);
        let updates = ops.iter().filter(|o| !matches!(o, Op::Get(_))).count();
        assert!((4_000..6_000).contains(&updates), "{updates}");
        assert!((999..=1001).contains(&m.len()));
        let mut present: HashSet<u64> = load
            .iter()
            .map(|o| match o {
                Op::Insert(k) => *k,
                _ => unreachable!(),
            })
            .collect();
        for op in ops {
            match op {
                Op::Get(k) => assert!(present.contains(&k)),
                Op::Insert(k) => assert!(present.insert(k)),
                Op::Remove(k) => assert!(present.remove(&k)),
            }
        }
    }

    #[test]
    fn string_keys_are_distinct_ascii_of_32_bytes() {
        let keys: HashSet<[u8; STR_KEY]> = (0..10_000u64).map(|k| str_key(k * 7919)).collect();
        assert_eq!(keys.len(), 10_000);
        assert!(keys.iter().all(|k| k.starts_with(b"user") && k.is_ascii()));
        assert_eq!(&str_key(0x0123_4567_89ab_cdef)[16..], b"0123456789abcdef");
    }
}
