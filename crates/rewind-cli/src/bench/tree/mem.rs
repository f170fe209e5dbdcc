//! The tree's engines on rewind's side: `volatile` (a byte arena in DRAM),
//! `persist-nolog` (a `persist::Domain` on the same tmpfs as the pools:
//! every write stored and flushed, one fence per transaction, no log) and
//! rewind itself (a `Tx` is the transaction's memory).
//!
//! The two baselines share [`Heap`], a volatile size-class allocator: a
//! free list per block size and a bump pointer, blocks aligned to a cache
//! line as rewind's are. It is the plainest allocator that does the work
//! (the tree frees and reuses only two sizes); it is not persistent, which
//! is part of what the baselines leave out.

use std::ops::Deref;

use rewind::persist::Domain;
use rewind::{Counters, PPtr, Pool};

use super::{Engine, MemError, TxMem};

/// Blocks are aligned to (and sized in) cache lines.
const LINE: u64 = 64;

/// A volatile allocator over `[LINE, capacity)`: offset 0 stays null.
pub struct Heap {
    next: u64,
    capacity: u64,
    /// Free blocks by size (the tree uses two or three sizes).
    free: Vec<(u64, Vec<u64>)>,
}

impl Heap {
    fn new(capacity: u64) -> Heap {
        Heap {
            next: LINE,
            capacity,
            free: Vec::new(),
        }
    }

    fn alloc(&mut self, size: u64) -> Result<u64, MemError> {
        let size = size.div_ceil(LINE) * LINE;
        if let Some((_, list)) = self.free.iter_mut().find(|(s, _)| *s == size) {
            if let Some(off) = list.pop() {
                return Ok(off);
            }
        }
        if self.next + size > self.capacity {
            return Err(MemError::OutOfSpace {
                requested: size,
                capacity: self.capacity,
            });
        }
        let off = self.next;
        self.next += size;
        Ok(off)
    }

    fn free(&mut self, off: u64, size: u64) {
        let size = size.div_ceil(LINE) * LINE;
        match self.free.iter_mut().find(|(s, _)| *s == size) {
            Some((_, list)) => list.push(off),
            None => self.free.push((size, vec![off])),
        }
    }
}

/// What a baseline's tree is stored in: DRAM (`volatile`) or a
/// `persist::Domain` (`persist-nolog`: every write stored and flushed).
pub trait Space {
    fn len(&self) -> u64;
    fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), MemError>;
    /// Stores `bytes` at `off`, durably where the space is (a flush).
    fn store(&mut self, off: u64, bytes: &[u8]) -> Result<(), MemError>;
    /// Makes what was stored durable.
    fn fence(&self) -> Result<(), MemError>;
    fn counters(&self) -> Counters;
}

impl Space for Vec<u8> {
    fn len(&self) -> u64 {
        self.len() as u64
    }

    #[inline]
    fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), MemError> {
        buf.copy_from_slice(&self[bounds(off, buf.len(), Space::len(self))?]);
        Ok(())
    }

    #[inline]
    fn store(&mut self, off: u64, bytes: &[u8]) -> Result<(), MemError> {
        let r = bounds(off, bytes.len(), Space::len(self))?;
        self[r].copy_from_slice(bytes);
        Ok(())
    }

    fn fence(&self) -> Result<(), MemError> {
        Ok(())
    }

    fn counters(&self) -> Counters {
        Counters::default()
    }
}

impl Space for Domain {
    fn len(&self) -> u64 {
        Domain::len(self)
    }

    #[inline]
    fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), MemError> {
        Ok(Domain::read(self, off, buf)?)
    }

    #[inline]
    fn store(&mut self, off: u64, bytes: &[u8]) -> Result<(), MemError> {
        Domain::store(self, off, bytes)?;
        Ok(self.flush(off, bytes.len() as u64)?)
    }

    fn fence(&self) -> Result<(), MemError> {
        Ok(Domain::fence(self)?)
    }

    fn counters(&self) -> Counters {
        Domain::counters(self)
    }
}

fn bounds(off: u64, len: usize, capacity: u64) -> Result<std::ops::Range<usize>, MemError> {
    match off.checked_add(len as u64) {
        Some(end) if end <= capacity => Ok(off as usize..end as usize),
        _ => Err(MemError::OutOfBounds {
            offset: off,
            len: len as u64,
            capacity,
        }),
    }
}

/// The tree in a [`Space`] with no log: each write stored (and flushed,
/// in a domain), one fence per transaction that stored anything. Not
/// atomic; in DRAM not durable either.
pub struct Plain<S> {
    space: S,
    heap: Heap,
    /// Whether this transaction stored anything (a lookup needs no fence).
    dirty: bool,
}

/// The tree in DRAM: no persistence, no recoverability.
pub type Volatile = Plain<Vec<u8>>;
/// The tree with durable stores and no log (`clwb` of each write's lines,
/// a fence per transaction): durable, not atomic.
pub type NoLog = Plain<Domain>;

impl<S: Space> Plain<S> {
    fn over(space: S) -> Plain<S> {
        Plain {
            heap: Heap::new(space.len()),
            space,
            dirty: false,
        }
    }
}

impl Volatile {
    /// An arena of `capacity` zeroed bytes.
    pub fn new(capacity: u64) -> Volatile {
        Plain::over(vec![0; capacity as usize])
    }
}

impl NoLog {
    /// The tree's engine over the whole of `dom`.
    pub fn new(dom: Domain) -> NoLog {
        Plain::over(dom)
    }
}

impl<S: Space> TxMem for Plain<S> {
    #[inline]
    fn read(&mut self, off: u64, buf: &mut [u8]) -> Result<(), MemError> {
        self.space.read(off, buf)
    }

    #[inline]
    fn write(&mut self, off: u64, bytes: &[u8]) -> Result<(), MemError> {
        self.dirty = true;
        self.space.store(off, bytes)
    }

    fn alloc(&mut self, size: u64) -> Result<u64, MemError> {
        const Z: [u8; 1024] = [0; 1024];
        let off = self.heap.alloc(size)?;
        let mut done = 0;
        while done < size {
            let n = (size - done).min(Z.len() as u64);
            self.write(off + done, &Z[..n as usize])?;
            done += n;
        }
        Ok(off)
    }

    fn free(&mut self, off: u64, size: u64) -> Result<(), MemError> {
        self.heap.free(off, size);
        Ok(())
    }
}

impl<S: Space> Engine for Plain<S> {
    type Tx<'a>
        = Plain<S>
    where
        S: 'a;

    #[inline]
    fn transaction<R>(
        &mut self,
        f: impl FnOnce(&mut Plain<S>) -> Result<R, MemError>,
    ) -> Result<R, MemError> {
        self.dirty = false;
        let r = f(self)?;
        // What makes the transaction durable; nothing makes it atomic.
        if self.dirty {
            self.space.fence()?;
        }
        Ok(r)
    }

    fn recoverable(&self) -> bool {
        false
    }

    fn counters(&self) -> Option<Counters> {
        Some(self.space.counters())
    }
}

impl TxMem for rewind::Tx<'_> {
    #[inline]
    fn read(&mut self, off: u64, buf: &mut [u8]) -> Result<(), MemError> {
        Ok(self.read_bytes(off, buf)?)
    }

    #[inline]
    fn write(&mut self, off: u64, bytes: &[u8]) -> Result<(), MemError> {
        Ok(self.write_bytes(off, bytes)?)
    }

    fn alloc(&mut self, size: u64) -> Result<u64, MemError> {
        Ok(self.alloc_bytes(size)?)
    }

    fn free(&mut self, off: u64, _size: u64) -> Result<(), MemError> {
        Ok(rewind::Tx::free(self, PPtr::<u8>::from_offset(off))?)
    }
}

/// The tree in a rewind pool: each transaction a `Pool::transaction`.
/// `P` owns the pool (`Box<Pool>`) or borrows it (`&Pool`, one per thread).
pub struct Rewind<P: Deref<Target = Pool>>(pub P);

impl<P: Deref<Target = Pool>> Engine for Rewind<P> {
    type Tx<'a>
        = rewind::Tx<'a>
    where
        Self: 'a;

    #[inline]
    fn transaction<R>(
        &mut self,
        f: impl FnOnce(&mut rewind::Tx<'_>) -> Result<R, MemError>,
    ) -> Result<R, MemError> {
        self.0.transaction(f)
    }

    fn checkpoint(&self) -> Result<(), MemError> {
        Ok(self.0.checkpoint()?)
    }

    fn sync(&self) -> Result<(), MemError> {
        Ok(self.0.sync()?)
    }

    fn counters(&self) -> Option<Counters> {
        Some(self.0.counters())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{BTree, Engine, VALUE};
    use super::*;
    use rewind::{Backend, LogVariant, Policy, PoolConfig};

    /// The same operations on every engine leave the same records.
    #[test]
    fn engines_agree() {
        let dir = tempfile::tempdir().unwrap();
        let ops = |e: &mut dyn FnMut(u64, bool)| {
            for i in 0..2_000u64 {
                let k = (i * 7919) % 1_000;
                e(k, i % 3 != 2);
            }
        };
        fn run<E: Engine>(e: &mut E, ops: impl Fn(&mut dyn FnMut(u64, bool))) -> Vec<u64> {
            let t = e.transaction(|m| BTree::create(m)).unwrap();
            ops(&mut |k, ins| {
                e.transaction(|m| {
                    if ins {
                        t.insert(m, k, &[k as u8; VALUE])
                    } else {
                        t.remove(m, k)
                    }
                })
                .unwrap();
            });
            let recs = e.transaction(|m| t.records(m)).unwrap();
            recs.into_iter().map(|(k, _)| k).collect()
        }
        let want = run(&mut Volatile::new(8 << 20), ops);
        let dom = Domain::create_file(&dir.path().join("n"), 8 << 20, Backend::Pmem).unwrap();
        let mut nolog = NoLog::new(dom);
        assert_eq!(run(&mut nolog, ops), want);
        for policy in Policy::ALL {
            let cfg = PoolConfig::default().log(LogVariant::Batch).policy(policy);
            let path = dir.path().join(format!("p-{policy}"));
            let pool = Pool::create(&path, "t", 32 << 20, &cfg).unwrap();
            assert_eq!(run(&mut Rewind(&pool), ops), want, "{policy}");
        }
    }
}
