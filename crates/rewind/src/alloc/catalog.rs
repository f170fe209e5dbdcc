//! The catalog of named, typed roots: one heap block the meta page's
//! catalog word names, listing each root's name, type fingerprint and
//! object. Written by transactions like any user data (`Tx::root_named`);
//! read here, and verified at open (every block it names allocated).
//!
//! ```text
//! off        size  field
//!   0           8  magic "RWROOTS1"
//!   8           8  capacity (entries the block holds)
//!  16           8  count (entries in use)
//!  24          40  zero
//!  64 + 128k  128  entry k:
//!               +0    48  name, UTF-8, 1..=47 bytes, zero-padded
//!               +48   64  type fingerprint (format::fingerprint)
//!               +112   8  object offset
//!               +120   8  object size in bytes
//! ```

use crate::error::Error;
use crate::format::layout::Layout;
use crate::format::le::get_u64;
use crate::format::meta;
use crate::format::TypeFingerprint;
use crate::persist::Domain;

/// The catalog block's magic.
pub const MAGIC: [u8; 8] = *b"RWROOTS1";
/// Catalog: the capacity word.
pub const CAPACITY: u64 = 8;
/// Catalog: the count word.
pub const COUNT: u64 = CAPACITY + 8;
/// Catalog: the first entry.
pub const ENTRIES: u64 = 64;
/// Bytes of an entry.
pub const ENTRY: u64 = 128;
/// Entry: the name.
pub const E_NAME: u64 = 0;
/// Bytes of the name field (names are at most one less).
pub const NAME_BYTES: u64 = 48;
/// Entry: the fingerprint.
pub const E_FINGERPRINT: u64 = E_NAME + NAME_BYTES;
/// Entry: the object's offset.
pub const E_OBJECT: u64 = E_FINGERPRINT + 64;
/// Entry: the object's size.
pub const E_SIZE: u64 = E_OBJECT + 8;
/// Entries a first catalog holds (a 4 KiB block).
pub const FIRST_CAPACITY: u64 = 31;

/// One named root.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct NamedRoot {
    /// Its name.
    pub name: String,
    /// The type it was created as.
    #[serde(serialize_with = "fingerprint_str")]
    pub fingerprint: TypeFingerprint,
    /// The object's offset.
    pub offset: u64,
    /// The object's size in bytes.
    pub size: u64,
}

fn fingerprint_str<S: serde::Serializer>(f: &TypeFingerprint, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&f.to_string())
}

/// `Err(InvalidConfig)` unless `name` is 1..=47 bytes without NUL.
pub fn check_name(name: &str) -> Result<(), Error> {
    if name.is_empty() || name.len() as u64 >= NAME_BYTES || name.contains('\0') {
        return Err(Error::InvalidConfig {
            what: "root name",
            value: name.to_string(),
            expected: "1 to 47 bytes of UTF-8 without NUL",
        });
    }
    Ok(())
}

fn corrupt(offset: u64, reason: &'static str) -> Error {
    Error::MetaCorrupt { offset, reason }
}

/// Decodes a catalog block's bytes (`block`: the whole block, at `off`).
pub fn decode(off: u64, block: &[u8]) -> Result<Vec<NamedRoot>, Error> {
    if block.len() < ENTRIES as usize || block[..8] != MAGIC {
        return Err(corrupt(off, "the catalog block's magic is missing"));
    }
    let cap = get_u64(block, CAPACITY as usize);
    let count = get_u64(block, COUNT as usize);
    let fits = cap
        .checked_mul(ENTRY)
        .and_then(|b| b.checked_add(ENTRIES))
        .is_some_and(|e| e <= block.len() as u64);
    if !fits || count > cap {
        return Err(corrupt(
            off,
            "the catalog's capacity or count does not fit its block",
        ));
    }
    if block[24..64].iter().any(|&b| b != 0) {
        return Err(corrupt(off, "a reserved byte of the catalog is not zero"));
    }
    let mut out = Vec::with_capacity(count as usize);
    for k in 0..count {
        let e = (ENTRIES + k * ENTRY) as usize;
        let raw = &block[e..e + NAME_BYTES as usize];
        let n = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        let name = std::str::from_utf8(&raw[..n])
            .map_err(|_| corrupt(off + e as u64, "a root name is not UTF-8"))?;
        if n == 0 || n as u64 >= NAME_BYTES || raw[n..].iter().any(|&b| b != 0) {
            return Err(corrupt(
                off + e as u64,
                "a root name is empty or not zero-padded",
            ));
        }
        let f = e + E_FINGERPRINT as usize;
        let fingerprint = TypeFingerprint::from_bytes(block[f..f + 64].try_into().expect("64"));
        out.push(NamedRoot {
            name: name.to_string(),
            fingerprint,
            offset: get_u64(block, e + E_OBJECT as usize),
            size: get_u64(block, e + E_SIZE as usize),
        });
    }
    Ok(out)
}

/// How [`read`] reads committed bytes.
pub type ReadFn<'a> = dyn Fn(u64, &mut [u8]) -> Result<(), Error> + 'a;

/// Reads the catalog through `read` (the committed bytes: under
/// redo-async some may still wait in the write cache): its roots, each
/// verified to be an allocated block at least its type's size, and the
/// catalog itself an allocated block. Empty without a catalog.
pub fn read(d: &Domain, l: &Layout, read: &ReadFn<'_>) -> Result<Vec<NamedRoot>, Error> {
    let mut w = [0u8; 16];
    read(meta::CATALOG, &mut w)?;
    let (off, check) = (get_u64(&w, 0), get_u64(&w, 8));
    if check != meta::catalog_check(off) {
        return Err(corrupt(
            meta::CATALOG,
            "catalog word does not match its check word",
        ));
    }
    if off == 0 {
        return Ok(Vec::new());
    }
    let size = crate::alloc::allocated_size(d, l, off)
        .map_err(|_| corrupt(meta::CATALOG, "the catalog is not an allocated block"))?;
    let mut block = vec![0u8; size as usize];
    read(off, &mut block)?;
    let roots = decode(off, &block)?;
    for r in &roots {
        let ok = r.offset != 0
            && crate::alloc::allocated_size(d, l, r.offset)
                .is_ok_and(|b| b >= r.size && r.size >= r.fingerprint.size());
        if !ok {
            return Err(corrupt(
                off,
                "a named root's object is not an allocated block of its type's size",
            ));
        }
    }
    Ok(roots)
}
