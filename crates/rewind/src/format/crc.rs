//! CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), the checksum of
//! a commit group (`group.rs`): computed with the SSE4.2 `crc32`
//! instruction where the CPU has it (8 bytes an instruction, so a one-line
//! group costs a few instructions, against a table walk of CRC-32's),
//! otherwise with a table; both give the same value.

/// The CRC-32C of `a` then `b`: the standard CRC-32C (initial value and
/// final xor all ones) of their concatenation, in one call with the
/// feature tested once (a commit group's header, then its entries).
#[inline]
pub fn of_two(a: &[u8], b: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE4.2, which `hw_two` is compiled for.
        return !unsafe { hw_two(a, b) };
    }
    !sw(sw(!0, a), b)
}

/// [`hw`] over `a`, then `b`, from the initial value (inlined into one
/// function: a `target_feature` function is not inlined into callers
/// compiled without the feature).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn hw_two(a: &[u8], b: &[u8]) -> u32 {
    hw(hw(!0, a), b)
}

/// The `crc32` instruction over 8-byte words, then bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
#[inline]
fn hw(crc: u32, bytes: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u32, _mm_crc32_u64, _mm_crc32_u8};
    let mut c = u64::from(crc);
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        c = _mm_crc32_u64(c, u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
    let mut crc = c as u32;
    let mut rest = words.remainder();
    if let Some((w, tail)) = rest.split_first_chunk::<4>() {
        crc = _mm_crc32_u32(crc, u32::from_le_bytes(*w));
        rest = tail;
    }
    for &b in rest {
        crc = _mm_crc32_u8(crc, b);
    }
    crc
}

/// A byte at a time through a table.
fn sw(mut crc: u32, bytes: &[u8]) -> u32 {
    for &b in bytes {
        crc = TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    crc
}

/// The reflected polynomial.
const POLY: u32 = 0x82f6_3b78;

/// The CRC of each byte value.
static TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_value_and_the_table_agree_with_the_instruction() {
        // The catalogue's check value of CRC-32C, whole and split.
        assert_eq!(of_two(b"123456789", b""), 0xe306_9283);
        assert_eq!(of_two(b"12345", b"6789"), 0xe306_9283);
        assert_eq!(!sw(!0, b"123456789"), 0xe306_9283);
        assert_eq!(of_two(b"", b""), 0);
        let bytes: Vec<u8> = (0..300u32).map(|i| (i * 37 % 251) as u8).collect();
        for len in [0, 1, 7, 8, 9, 44, 64, 299, 300] {
            let whole = of_two(&bytes[..len], b"");
            assert_eq!(whole, !sw(!0, &bytes[..len]), "length {len}");
            for cut in [0, len / 3, len] {
                let split = of_two(&bytes[..cut], &bytes[cut..len]);
                assert_eq!(split, whole, "length {len}, cut at {cut}");
            }
        }
    }
}
