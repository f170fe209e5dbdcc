//! Typed persistent pointers: offsets from the pool base, so a pool maps
//! anywhere. 0 is null (the header lives there, so no object can).

use std::fmt;
use std::marker::PhantomData;

use bytemuck::{Pod, Zeroable};

/// An offset into a pool, typed by what it points at.
#[repr(transparent)]
pub struct PPtr<T> {
    off: u64,
    _t: PhantomData<fn() -> T>,
}

impl<T> PPtr<T> {
    /// The null pointer.
    pub const fn null() -> PPtr<T> {
        PPtr::from_offset(0)
    }

    /// A pointer to pool offset `off`.
    pub const fn from_offset(off: u64) -> PPtr<T> {
        PPtr {
            off,
            _t: PhantomData,
        }
    }

    /// The pool offset.
    pub const fn offset(self) -> u64 {
        self.off
    }

    /// True for the null pointer.
    pub const fn is_null(self) -> bool {
        self.off == 0
    }

    /// The `i`-th element of an array starting here. An index whose offset
    /// does not fit in 64 bits gives a pointer past every pool (offset
    /// `u64::MAX`), which every access rejects with a typed error: the
    /// arithmetic never wraps around to a valid-looking address.
    pub const fn at(self, i: u64) -> PPtr<T> {
        match self.checked_at(i) {
            Some(p) => p,
            None => PPtr::from_offset(u64::MAX),
        }
    }

    /// The `i`-th element of an array starting here, or `None` when its
    /// offset overflows.
    pub const fn checked_at(self, i: u64) -> Option<PPtr<T>> {
        match i.checked_mul(std::mem::size_of::<T>() as u64) {
            Some(d) => match self.off.checked_add(d) {
                Some(off) => Some(PPtr::from_offset(off)),
                None => None,
            },
            None => None,
        }
    }

    /// The same offset, viewed as another type.
    pub const fn cast<U>(self) -> PPtr<U> {
        PPtr::from_offset(self.off)
    }

    /// A pointer to the field at byte `offset` of the pointee, typed by
    /// `_field` (a function from the pointee to the field, never called):
    /// what the `field!` macro expands to. An offset past every pool
    /// gives offset `u64::MAX`, which every access refuses.
    #[doc(hidden)]
    pub fn project<F>(self, offset: usize, _field: fn(&T) -> &F) -> PPtr<F> {
        PPtr::from_offset(self.off.saturating_add(offset as u64))
    }
}

/// A pointer to one field of a stored struct, `field!(ptr, Type, name)`,
/// typed as that field, so a transaction writes the field alone (not the
/// whole struct, and with it fields other threads changed) without
/// `offset_of!` arithmetic:
///
/// ```
/// use rewind::{field, PPtr, Pod, Pool, PoolConfig, Zeroable};
/// #[derive(Clone, Copy, Pod, Zeroable)]
/// #[repr(C)]
/// struct Account { id: u64, balance: u64 }
/// # let dir = tempfile::tempdir().unwrap();
/// let pool = Pool::create(dir.path().join("f.pool"), "doc", 4 << 20, &PoolConfig::default())?;
/// let acc: PPtr<Account> = pool.transaction(|tx| tx.root())?;
/// let balance: PPtr<u64> = field!(acc, Account, balance);
/// pool.transaction(|tx| tx.write(balance, &70))?;
/// assert_eq!(pool.read(acc)?.balance, 70);
/// # Ok::<(), rewind::Error>(())
/// ```
#[macro_export]
macro_rules! field {
    ($ptr:expr, $T:ty, $f:ident) => {
        $crate::PPtr::<$T>::project($ptr, ::core::mem::offset_of!($T, $f), |t: &$T| &t.$f)
    };
}

impl<T> Clone for PPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for PPtr<T> {}
impl<T> PartialEq for PPtr<T> {
    fn eq(&self, o: &Self) -> bool {
        self.off == o.off
    }
}
impl<T> Eq for PPtr<T> {}
impl<T> std::hash::Hash for PPtr<T> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.off.hash(h)
    }
}
impl<T> Default for PPtr<T> {
    fn default() -> Self {
        PPtr::null()
    }
}
impl<T> fmt::Debug for PPtr<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PPtr({:#x})", self.off)
    }
}

// SAFETY: PPtr<T> is a repr(transparent) u64 (PhantomData is zero-sized and
// has no invalid values), so the all-zero pattern is valid (null).
unsafe impl<T: 'static> Zeroable for PPtr<T> {}
// SAFETY: repr(transparent) over u64: no padding, every bit pattern valid,
// no interior pointers; Copy is implemented above for all T.
unsafe impl<T: 'static> Pod for PPtr<T> {}

#[cfg(test)]
mod tests {
    use super::PPtr;

    #[allow(dead_code)]
    #[repr(C)]
    struct S {
        a: u64,
        b: [u32; 3],
    }

    #[test]
    fn field_projects_with_its_type() {
        let p = PPtr::<S>::from_offset(4096);
        // What `field!(p, S, b)` expands to.
        let b: PPtr<[u32; 3]> = p.project(std::mem::offset_of!(S, b), |t: &S| &t.b);
        assert_eq!(b.offset(), 4104);
        let far = PPtr::<S>::from_offset(u64::MAX - 2);
        assert_eq!(far.project(8, |t: &S| &t.b).offset(), u64::MAX);
        let _ = p.project(0, |t: &S| &t.a);
    }

    #[test]
    fn at_never_wraps() {
        let p = PPtr::<u64>::from_offset(4096);
        assert_eq!(p.at(3).offset(), 4096 + 24);
        assert_eq!(p.checked_at(u64::MAX / 4), None);
        assert_eq!(p.at(u64::MAX / 4).offset(), u64::MAX);
        assert_eq!(PPtr::<u8>::from_offset(u64::MAX).checked_at(1), None);
    }
}
