//! The redo commit's physical floor as a plain C loop (`floor.c`, compiled
//! by build.rs): per transaction, the commit ring's log lines written with
//! non-temporal stores, one `sfence`, then the values stored in place and
//! their lines written back (`clwb`) with no fence. What rewind's redo
//! commit must come within 1.5× of.
//!
//! The array and the log are files in the scratch directory, mapped shared,
//! as a pool is.

use std::fs::File;
use std::io;
use std::path::Path;

use memmap2::MmapMut;

use crate::mapped::{self, Checked};

extern "C" {
    /// For each of `n` transactions `t` of `k` indices (`idx[t*k..t*k+k]`):
    /// its group (32-byte header, 16 bytes per update, whole lines) stored
    /// non-temporally at the log's next position (wrapping to 0), `sfence`,
    /// then `arr[i] = t` and `clwb` of that line for each index.
    fn floor_run(arr: *mut u64, ring: *mut u64, ring_words: u64, idx: *const u64, k: u64, n: u64);
}

/// Bytes of the floor loop's log (the commit ring of a 64 MiB pool is 2 MiB).
const RING_BYTES: u64 = 2 << 20;

/// A mapped array of `len` u64 and a mapped log.
pub struct FloorArray {
    map: MmapMut,
    ring: MmapMut,
    len: u64,
    _files: [File; 2],
}

impl FloorArray {
    /// Creates `path` with `m` zero u64 and `path` + ".log", and maps both.
    pub fn create(path: &Path, m: u64) -> io::Result<FloorArray> {
        let (f1, map) = mapped::create(path, m * 8)?;
        let (f2, ring) = mapped::create(&path.with_extension("log"), RING_BYTES)?;
        Ok(FloorArray {
            map,
            ring,
            len: m,
            _files: [f1, f2],
        })
    }

    /// Element `i`, or `None` past the end.
    pub fn get(&self, i: u64) -> Option<u64> {
        mapped::get(&self.map, i)
    }

    /// Runs every transaction of `seq`, transaction `t` storing `t`.
    pub fn run(&mut self, seq: &Checked<'_>) -> io::Result<()> {
        let (idx, k, len) = seq.parts();
        if len > self.len {
            return Err(io::Error::other(format!(
                "floor: indices checked for {len} elements, the array has {}",
                self.len
            )));
        }
        // One group must fit in the log: 32 + 16k bytes, whole lines.
        if (32 + 16 * k).div_ceil(64) * 64 > RING_BYTES {
            return Err(io::Error::other(format!(
                "floor: {k} updates outgrow the log"
            )));
        }
        let n = seq.txs();
        // SAFETY: every index of `idx` (n*k of them) is below `len` <= our
        // length (`Checked::new`), inside the mapping of `self.len` u64; the
        // log mapping holds RING_BYTES / 8 u64, a whole number of lines, and
        // the C loop writes a group only where it fits (checked above for
        // one group). Both are borrowed mutably for the call; the C
        // function keeps no pointer after it.
        unsafe {
            floor_run(
                self.map.as_mut_ptr().cast(),
                self.ring.as_mut_ptr().cast(),
                RING_BYTES / 8,
                idx.as_ptr(),
                k,
                n,
            )
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_loop_stores_the_values_and_writes_the_group() {
        let a =
            crate::mapped::two_transactions(FloorArray::create, FloorArray::run, FloorArray::get);
        // The second group (t = 1) at the log's second line: its header's
        // magic and lag, then entry 0's word: target 2 * 8, length 8.
        let g = &a.ring[64..128];
        assert_eq!(&g[..4], b"RG\x01\x00");
        assert_eq!(
            u64::from_le_bytes(g[32..40].try_into().unwrap()),
            16 | 8 << 48
        );
    }
}
