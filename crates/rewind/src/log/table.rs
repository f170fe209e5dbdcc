//! A small open-addressing map from a 64-bit key to a small value: linear
//! probing in a table of a power of two slots, at most half full, kept
//! across uses. It remembers the slots it filled, so clearing (and
//! walking) costs what was inserted, not the table's size: a transaction
//! of one write clears one slot. The redo write set's indexes
//! (`tx/handle.rs`) and the commit ring's line map (`log/ring.rs`) use it.

/// The map. Keys are stored plus one, so that 0 marks an empty slot; the
/// key `u64::MAX` is not allowed.
#[derive(Default)]
pub(crate) struct Table<V> {
    /// (key + 1, value); (0, _): empty.
    slots: Vec<(u64, V)>,
    /// The slots filled since the last clear.
    used: Vec<u32>,
    /// 64 less log2 of the slots (the hash's top bits pick the slot).
    shift: u32,
}

/// Slots of a table's first allocation.
const FIRST: usize = 64;

impl<V: Copy + Default> Table<V> {
    /// The slot where `key`'s probe starts.
    #[inline]
    fn home(&self, key: u64) -> usize {
        // Fibonacci hashing: the top bits of the product.
        (key.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize
    }

    /// Keys in the map.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.used.len()
    }

    /// The value of `key`, if it is in the map.
    #[inline]
    pub(crate) fn get(&self, key: u64) -> Option<V> {
        if self.used.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        loop {
            let (k, v) = self.slots[i];
            if k == key + 1 {
                return Some(v);
            }
            if k == 0 {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    /// Sets the value of `key` (inserting it, or replacing its value).
    #[inline]
    pub(crate) fn set(&mut self, key: u64, value: V) {
        self.replace(key, value);
    }

    /// Sets the value of `key` and returns the one it replaced, if any: one
    /// probe where a `get` then a `set` take two.
    #[inline]
    pub(crate) fn replace(&mut self, key: u64, value: V) -> Option<V> {
        debug_assert!(key != u64::MAX);
        if 2 * (self.used.len() + 1) > self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        loop {
            let (k, old) = self.slots[i];
            if k == key + 1 {
                self.slots[i].1 = value;
                return Some(old);
            }
            if k == 0 {
                self.slots[i] = (key + 1, value);
                self.used.push(i as u32);
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    /// Every (key, value), in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, V)> + '_ {
        self.used.iter().map(|&i| {
            let (k, v) = self.slots[i as usize];
            (k - 1, v)
        })
    }

    /// Empties the map, keeping its room.
    #[inline]
    pub(crate) fn clear(&mut self) {
        for &i in &self.used {
            self.slots[i as usize] = (0, V::default());
        }
        self.used.clear();
    }

    /// Keeps only the keys whose value passes `keep`.
    pub(crate) fn retain(&mut self, keep: impl Fn(V) -> bool) {
        let kept: Vec<(u64, V)> = self.iter().filter(|&(_, v)| keep(v)).collect();
        self.clear();
        for (k, v) in kept {
            self.set(k, v);
        }
    }

    /// Doubles the table (or makes its first one) and reinserts the keys.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let n = (2 * self.slots.len()).max(FIRST);
        let old = std::mem::replace(&mut self.slots, vec![(0, V::default()); n]);
        self.shift = 64 - n.trailing_zeros();
        let used = std::mem::take(&mut self.used);
        for i in used {
            let (k, v) = old[i as usize];
            self.set(k - 1, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::SmallRng, Rng, SeedableRng};
    use std::collections::HashMap;

    #[test]
    fn agrees_with_a_hash_map_across_growth_clears_and_retains() {
        let mut t = Table::<u32>::default();
        let mut m = HashMap::new();
        let mut rng = SmallRng::seed_from_u64(1);
        for round in 0..4 {
            for i in 0..(500 * (round + 1)) {
                // A spread of keys with repeats, 0 among them.
                let key = if i % 7 == 0 {
                    0
                } else {
                    rng.gen_range(0..3000u64) * 64
                };
                if i % 2 == 0 {
                    t.set(key, i as u32);
                    m.insert(key, i as u32);
                } else {
                    assert_eq!(t.replace(key, i as u32), m.insert(key, i as u32));
                }
            }
            let check = |t: &Table<u32>, m: &HashMap<u64, u32>| {
                assert_eq!(t.len(), m.len(), "round {round}");
                for key in (0..3100).map(|k| k * 64).chain([0, 1, 63]) {
                    assert_eq!(t.get(key), m.get(&key).copied(), "round {round}, key {key}");
                }
                let mut all: Vec<_> = t.iter().collect();
                all.sort_unstable();
                let mut want: Vec<_> = m.iter().map(|(&k, &v)| (k, v)).collect();
                want.sort_unstable();
                assert_eq!(all, want, "round {round}");
            };
            check(&t, &m);
            t.retain(|v| v % 3 == 0);
            m.retain(|_, v| *v % 3 == 0);
            check(&t, &m);
            t.clear();
            m.clear();
            assert_eq!(t.get(0), None);
            assert!(
                t.slots.iter().all(|&(k, _)| k == 0),
                "a clear empties every slot"
            );
        }
    }
}
