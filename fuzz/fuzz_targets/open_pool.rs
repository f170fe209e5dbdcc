//! Treats the input as a pool image: opening it (header checks, log scan,
//! recovery, allocator rebuild) must return `Ok` or `Err`, never panic or
//! hang, and an opened pool must survive reading its root and one small
//! transaction. Errors are fine.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rewind::{Error, PPtr, Pool};

fuzz_target!(|data: &[u8]| {
    let Ok(pool) = Pool::open_image(data.to_vec(), "fuzz") else {
        return;
    };
    if let Ok(Some(root)) = pool.root::<[u64; 4]>() {
        let _ = pool.read(root);
    }
    let _: Result<(), Error> = pool.transaction(|tx| {
        let root: PPtr<[u64; 4]> = tx.root()?;
        let mut v = tx.read(root)?;
        v[0] = v[0].wrapping_add(1);
        tx.write(root, &v)?;
        let p = tx.alloc_bytes(100)?;
        tx.write_bytes(p, &[0xa5; 100])?;
        tx.free(PPtr::<u8>::from_offset(p))
    });
});
