//! What the C loops share: a sequence of transactions' indices checked
//! once against an array's length (outside any measurement), and a fresh
//! file mapped shared, as a pool is.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

use memmap2::{MmapMut, MmapOptions};

/// A sequence of transactions' indices, checked once (outside any
/// measurement) to fit an array of `len` elements.
pub struct Checked<'a> {
    idx: &'a [u64],
    k: u64,
    len: u64,
}

impl<'a> Checked<'a> {
    /// `idx` as transactions of `k` indices each, all below `len`.
    pub fn new(idx: &'a [u64], k: u64, len: u64) -> io::Result<Checked<'a>> {
        if k == 0 || !(idx.len() as u64).is_multiple_of(k) {
            return Err(io::Error::other(format!(
                "index sequence: {} indices are not whole transactions of {k}",
                idx.len()
            )));
        }
        if let Some(i) = idx.iter().find(|&&i| i >= len) {
            return Err(io::Error::other(format!(
                "index sequence: index {i} outside an array of {len}"
            )));
        }
        Ok(Checked { idx, k, len })
    }

    /// The indices, updates per transaction, and the bound they were
    /// checked against.
    pub fn parts(&self) -> (&'a [u64], u64, u64) {
        (self.idx, self.k, self.len)
    }

    /// Transactions in the sequence.
    pub fn txs(&self) -> u64 {
        self.idx.len() as u64 / self.k
    }
}

/// Creates `path` (replacing any file there) with `len` zero bytes and maps
/// it shared. The file is returned to be kept open as long as the map.
pub fn create(path: &Path, len: u64) -> io::Result<(File, MmapMut)> {
    let _ = std::fs::remove_file(path);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)?;
    file.set_len(len)?;
    // SAFETY: a file we just created in our private scratch directory;
    // nothing else truncates or maps it while the map lives.
    let map = unsafe { MmapOptions::new().map_mut(&file) }?;
    Ok((file, map))
}

/// Opens the existing file `path` read-write and maps it shared. The file
/// is returned to be kept open as long as the map.
pub fn open(path: &Path) -> io::Result<(File, MmapMut)> {
    let file = OpenOptions::new().read(true).write(true).open(path)?;
    // SAFETY: a file in our private scratch directory, which nothing else
    // truncates or maps while the map lives.
    let map = unsafe { MmapOptions::new().map_mut(&file) }?;
    Ok((file, map))
}

/// The u64 at index `i` of `map`, or `None` past the end.
pub fn get(map: &MmapMut, i: u64) -> Option<u64> {
    let at = usize::try_from(i).ok()?.checked_mul(8)?;
    let bytes = map.get(at..at.checked_add(8)?)?;
    Some(u64::from_ne_bytes(bytes.try_into().ok()?))
}

/// For the loops' tests: two transactions of two updates on an array of
/// 64 made by `create` (t = 0 writes 1 and 2, t = 1 writes 2 and 9), run
/// by `run`; each word written must hold the last transaction's number.
#[cfg(test)]
pub fn two_transactions<A>(
    create: fn(&Path, u64) -> io::Result<A>,
    run: fn(&mut A, &Checked<'_>) -> io::Result<()>,
    get: fn(&A, u64) -> Option<u64>,
) -> A {
    let (_dir, path) = crate::scratch("loop.pool");
    let mut a = create(&path, 64).unwrap();
    run(&mut a, &Checked::new(&[1, 2, 2, 9], 2, 64).unwrap()).unwrap();
    assert_eq!([1, 2, 9].map(|i| get(&a, i)), [Some(0), Some(1), Some(1)]);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_are_checked_before_any_loop() {
        assert!(Checked::new(&[1, 64], 2, 64).is_err());
        assert!(Checked::new(&[1, 2, 3], 2, 64).is_err());
        assert!(Checked::new(&[], 0, 64).is_err());
        let c = Checked::new(&[1, 2, 3, 63], 2, 64).unwrap();
        assert_eq!((c.txs(), c.parts().1, c.parts().2), (2, 2, 64));
    }

    #[test]
    fn a_created_map_reads_zeros_and_stops_at_its_end() {
        let (_dir, path) = crate::scratch("m");
        let (_f, map) = create(&path, 16).unwrap();
        assert_eq!((get(&map, 1), get(&map, 2)), (Some(0), None));
        assert_eq!(get(&map, u64::MAX), None);
    }
}
