//! Named, typed roots: [`Tx::root_named`] finds a root in the pool's
//! catalog (`alloc::catalog`) or creates it, recording its type's
//! fingerprint, in the transaction (so a rollback forgets a new root).

use super::Tx;
use crate::alloc::catalog::{
    self, CAPACITY, COUNT, ENTRIES, ENTRY, E_FINGERPRINT, E_NAME, E_OBJECT, E_SIZE, FIRST_CAPACITY,
    MAGIC, NAME_BYTES,
};
use crate::engine::locks::Mode;
use crate::error::Error;
use crate::format::le::{get_u64, put_u64};
use crate::format::{meta, PPtr, TypeFingerprint, Typed};

impl Tx<'_> {
    /// The root named `name` (1 to 47 bytes), a `T`: created zeroed on
    /// first use, with `T`'s [`TypeFingerprint`] recorded beside it. A root
    /// created as another type (another name, size or alignment) is
    /// [`Error::TypeMismatch`] naming both.
    ///
    /// Transactions of several threads may ask for roots at once: a new
    /// root is added by one transaction at a time (holding the catalog's
    /// lock until it ends), so each name names one object. Under the undo
    /// policies a lookup holds the catalog's lock shared (under the redo
    /// policies only a lookup that a transaction adding a root was in the
    /// way of), and two transactions that both looked and then both add a
    /// root may meet a [`Error::Deadlock`]: one rolls back and can be
    /// retried.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use rewind::{Error, PPtr, Pool, PoolConfig};
    /// let pool = Pool::create(dir.path().join("n.pool"), "doc", 4 << 20, &PoolConfig::default())?;
    /// let hits: PPtr<u64> = pool.transaction(|tx| tx.root_named("hits"))?;
    /// pool.transaction(|tx| tx.write(hits, &1))?;
    /// assert_eq!(pool.root_named::<u64>("hits")?, Some(hits));
    /// let e = pool.transaction(|tx| tx.root_named::<i64>("hits")).unwrap_err();
    /// assert!(matches!(e, Error::TypeMismatch { .. }));
    /// # Ok::<(), rewind::Error>(())
    /// ```
    pub fn root_named<T: Typed>(&mut self, name: &str) -> Result<PPtr<T>, Error> {
        catalog::check_name(name)?;
        self.find_or_add(
            meta::CATALOG,
            |tx| tx.find_named::<T>(name),
            |tx| tx.add_named(name),
        )
    }

    /// `InvalidFree` when `off` is the catalog's block or a named root's
    /// object, as this transaction sees the catalog (a root it added
    /// included): freed, the catalog would name a block that is not
    /// allocated, and every later open refuses such a pool. Reads the
    /// catalog word, and with a catalog each root's object word.
    ///
    /// The catalog is read as a lookup reads it ([`Tx::find_or_add`]):
    /// with no lock while no transaction that adds a root holds the
    /// catalog's lock, else again under that lock, shared. Read with none,
    /// a growth committed meanwhile (its transaction frees the old block)
    /// made the free of an unrelated block `NotAllocated`.
    pub(super) fn refuse_named_free(&mut self, off: u64) -> Result<(), Error> {
        if off == 0 {
            return Ok(());
        }
        let eng = self.eng;
        match eng
            .locks
            .read_quiet(meta::CATALOG, || self.refuse_named_free_now(off))
        {
            Some(r) => r,
            None => {
                let r = self.take_lock(meta::CATALOG, Mode::Shared);
                self.check(r)?;
                self.refuse_named_free_now(off)
            }
        }
    }

    /// [`refuse_named_free`](Self::refuse_named_free)'s reads.
    fn refuse_named_free_now(&mut self, off: u64) -> Result<(), Error> {
        let mut w = [0u8; 16];
        self.read_meta(meta::CATALOG, &mut w)?;
        let cat = get_u64(&w, 0);
        if cat == 0 {
            return Ok(());
        }
        if off == cat {
            return Err(Error::InvalidFree {
                offset: off,
                reason: "the catalog of named roots cannot be freed",
            });
        }
        let mut h = [0u8; ENTRIES as usize];
        self.read_bytes(cat, &mut h)?;
        let count = get_u64(&h, COUNT as usize).min(get_u64(&h, CAPACITY as usize));
        for k in 0..count {
            let mut o = [0u8; 8];
            self.read_bytes(cat + ENTRIES + k * ENTRY + E_OBJECT, &mut o)?;
            if u64::from_le_bytes(o) == off {
                return Err(Error::InvalidFree {
                    offset: off,
                    reason: "a named root's object cannot be freed",
                });
            }
        }
        Ok(())
    }

    /// The root named `name` as this transaction sees the catalog.
    fn find_named<T: Typed>(&mut self, name: &str) -> Result<Option<PPtr<T>>, Error> {
        self.catalog_lookup::<T>(name).map(|(found, _, _, _)| found)
    }

    /// Finds `name` in the catalog, or adds it.
    fn add_named<T: Typed>(&mut self, name: &str) -> Result<PPtr<T>, Error> {
        let (found, cat, cap, count) = self.catalog_lookup::<T>(name)?;
        if let Some(p) = found {
            return Ok(p);
        }
        self.add_to_catalog::<T>(name, cat, cap, count)
    }

    /// The catalog's block, capacity and count, and `name`'s root if found
    /// (a root of another type is `TypeMismatch`).
    #[allow(clippy::type_complexity)]
    fn catalog_lookup<T: Typed>(
        &mut self,
        name: &str,
    ) -> Result<(Option<PPtr<T>>, u64, u64, u64), Error> {
        let want = TypeFingerprint::of::<T>();
        let mut w = [0u8; 16];
        self.read_meta(meta::CATALOG, &mut w)?;
        let cat = get_u64(&w, 0);
        let (mut cap, mut count) = (0, 0);
        if cat != 0 {
            let mut h = [0u8; ENTRIES as usize];
            self.read_bytes(cat, &mut h)?;
            cap = get_u64(&h, CAPACITY as usize);
            let len = cap
                .checked_mul(ENTRY)
                .and_then(|b| b.checked_add(ENTRIES))
                .filter(|&n| n <= 1 << 30)
                .ok_or(Error::MetaCorrupt {
                    offset: cat,
                    reason: "the catalog's capacity does not fit its block",
                })?;
            let mut block = vec![0u8; len as usize];
            self.read_bytes(cat, &mut block)?;
            let roots = catalog::decode(cat, &block)?;
            count = roots.len() as u64;
            if let Some(r) = roots.iter().find(|r| r.name == name) {
                if r.fingerprint != want {
                    return Err(Error::TypeMismatch {
                        name: name.to_string(),
                        found: r.fingerprint.to_string(),
                        expected: want.to_string(),
                    });
                }
                return Ok((Some(PPtr::from_offset(r.offset)), cat, cap, count));
            }
        }
        Ok((None, cat, cap, count))
    }

    /// Adds a new root `name` of type `T` to the catalog (`cat`, of `cap`
    /// entries, `count` of them used), growing it when full.
    fn add_to_catalog<T: Typed>(
        &mut self,
        name: &str,
        cat: u64,
        cap: u64,
        count: u64,
    ) -> Result<PPtr<T>, Error> {
        let want = TypeFingerprint::of::<T>();
        let size = std::mem::size_of::<T>() as u64;
        let obj = self.alloc_bytes(size.max(1))?;
        let cat = if count == cap {
            // A larger catalog: the entries copied, the old block freed.
            let new_cap = cap.saturating_mul(2).max(FIRST_CAPACITY);
            let new = self.alloc_bytes(ENTRIES + new_cap * ENTRY)?;
            let mut hdr = [0u8; ENTRIES as usize];
            hdr[..8].copy_from_slice(&MAGIC);
            put_u64(&mut hdr, CAPACITY as usize, new_cap);
            put_u64(&mut hdr, COUNT as usize, count);
            self.write_catalog(new, &hdr)?;
            if cat != 0 {
                let mut entries = vec![0u8; (count * ENTRY) as usize];
                self.read_bytes(cat + ENTRIES, &mut entries)?;
                self.write_catalog(new + ENTRIES, &entries)?;
            }
            let mut words = [0u8; 16];
            put_u64(&mut words, 0, new);
            put_u64(&mut words, 8, meta::catalog_check(new));
            self.write_meta(meta::CATALOG, &words)?;
            if cat != 0 {
                // Freed once the meta page names the new one (a free of
                // the catalog in use is refused).
                self.free(PPtr::<u8>::from_offset(cat))?;
            }
            new
        } else {
            cat
        };
        let mut e = [0u8; ENTRY as usize];
        e[E_NAME as usize..E_NAME as usize + name.len()].copy_from_slice(name.as_bytes());
        debug_assert!((name.len() as u64) < NAME_BYTES);
        let f = E_FINGERPRINT as usize;
        e[f..f + 64].copy_from_slice(&want.to_bytes());
        put_u64(&mut e, E_OBJECT as usize, obj);
        put_u64(&mut e, E_SIZE as usize, size);
        self.write_catalog(cat + ENTRIES + count * ENTRY, &e)?;
        let mut c = [0u8; 8];
        put_u64(&mut c, 0, count + 1);
        self.write_catalog(cat + COUNT, &c)?;
        Ok(PPtr::from_offset(obj))
    }
}
