//! The no-log baseline as a plain C loop (`nolog.c`, compiled by build.rs):
//! the check that `persist-nolog`, which goes through rewind's
//! `persist::Domain`, does no more work than the operations themselves.
//!
//! Its array is a file of the same size in the same scratch directory,
//! mapped shared, as `persist-nolog`'s domain is. Two loops: the plain one
//! (store, `clwb`; `sfence` per transaction) and one that also makes the
//! counter stores `persist::Domain` makes (one before each line's `clwb`,
//! one before each `sfence`).

use std::fs::File;
use std::io;
use std::path::Path;

use memmap2::MmapMut;

pub use crate::mapped::Checked;

extern "C" {
    /// For each of `n` transactions `t`: for each of its `k` indices `i`
    /// (`idx[t*k..t*k+k]`), `arr[i] = t` and `clwb` of that line; then one
    /// `sfence`.
    fn nolog_run(arr: *mut u64, idx: *const u64, k: u64, n: u64);
    /// The same, adding 1 to `counts[0]` before each `clwb` and to
    /// `counts[1]` before each `sfence` (a load and a store each).
    fn nolog_run_counted(arr: *mut u64, idx: *const u64, k: u64, n: u64, counts: *mut u64);
}

/// A mapped file of `len` u64.
pub struct CLoopArray {
    map: MmapMut,
    len: u64,
    _file: File,
}

impl CLoopArray {
    /// Creates `path` (replacing any file there) with `m` zero u64 and maps it.
    pub fn create(path: &Path, m: u64) -> io::Result<CLoopArray> {
        let (file, map) = crate::mapped::create(path, m * 8)?;
        Ok(CLoopArray {
            map,
            len: m,
            _file: file,
        })
    }

    /// Element `i`, or `None` past the end.
    pub fn get(&self, i: u64) -> Option<u64> {
        crate::mapped::get(&self.map, i)
    }

    /// Runs every transaction of `seq` in the plain C loop, transaction
    /// `t` (counted from 0) storing `t`.
    pub fn run(&mut self, seq: &Checked<'_>) -> io::Result<()> {
        let (arr, n) = self.args(seq)?;
        let (idx, k, _) = seq.parts();
        // SAFETY: see `args`: `idx` holds n*k indices, each inside the
        // mapping at `arr`, borrowed mutably for the call; the C function
        // keeps no pointer after it.
        unsafe { nolog_run(arr, idx.as_ptr(), k, n) };
        Ok(())
    }

    /// As [`run`](Self::run), with the Domain's counter stores; adds the
    /// lines written back to `counts[0]` and the fences to `counts[1]`.
    pub fn run_counted(&mut self, seq: &Checked<'_>, counts: &mut [u64; 2]) -> io::Result<()> {
        let (arr, n) = self.args(seq)?;
        let (idx, k, _) = seq.parts();
        // SAFETY: as in `run`; `counts` is two u64 borrowed mutably for the call.
        unsafe { nolog_run_counted(arr, idx.as_ptr(), k, n, counts.as_mut_ptr()) };
        Ok(())
    }

    /// The array's address and the number of transactions of `seq`, after
    /// checking that `seq` was checked against no more than our length:
    /// then every index of `seq.idx` (n*k of them, `Checked::new`) is below
    /// `len`, inside the page-aligned mapping of `len` u64.
    fn args(&mut self, seq: &Checked<'_>) -> io::Result<(*mut u64, u64)> {
        let (_, _, len) = seq.parts();
        if len > self.len {
            return Err(io::Error::other(format!(
                "c-nolog: indices checked for {len} elements, the array has {}",
                self.len
            )));
        }
        Ok((self.map.as_mut_ptr().cast(), seq.txs()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_loops_store_the_transaction_number_and_count() {
        let mut a =
            crate::mapped::two_transactions(CLoopArray::create, CLoopArray::run, CLoopArray::get);
        let mut counts = [0; 2];
        let idx = [3, 4, 5, 6, 7, 8];
        a.run_counted(&Checked::new(&idx, 3, 64).unwrap(), &mut counts)
            .unwrap();
        assert_eq!(counts, [6, 2]);
        assert_eq!(a.get(8), Some(1));
        assert_eq!(a.get(64), None);
    }

    #[test]
    fn indices_checked_for_a_longer_array_are_refused() {
        let (_dir, path) = crate::scratch("c.pool");
        let mut small = CLoopArray::create(&path, 8).unwrap();
        let idx = [20];
        let err = small.run(&Checked::new(&idx, 1, 64).unwrap()).unwrap_err();
        assert!(err.to_string().contains("array has 8"), "{err}");
    }
}
