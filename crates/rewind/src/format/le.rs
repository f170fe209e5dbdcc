//! Little-endian words at fixed offsets: the one encoder and decoder of
//! every named offset in `header` and `meta`. Offsets are checked by the
//! callers' constants; a slice too short is a programming error caught by
//! the unit tests, never input (pages are whole before they are decoded).

/// Stores `v` at `b[off..off + 8]`.
pub fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Stores `v` at `b[off..off + 4]`.
pub fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// The word at `b[off..off + 8]` (zero-extended past the slice's end).
pub fn get_u64(b: &[u8], off: usize) -> u64 {
    let mut w = [0u8; 8];
    let end = b.len().min(off.saturating_add(8));
    if off < end {
        w[..end - off].copy_from_slice(&b[off..end]);
    }
    u64::from_le_bytes(w)
}

/// The word at `b[off..off + 4]` (zero-extended past the slice's end).
pub fn get_u32(b: &[u8], off: usize) -> u32 {
    get_u64(b, off) as u32
}
