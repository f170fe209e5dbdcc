//! A value alone on its cache line(s), so that threads writing values
//! side by side (per-thread slots, per-lane words) do not take each
//! other's lines: two lines, since a neighbouring line may be fetched
//! with the one asked for (the adjacent-line prefetcher).

/// A value on two cache lines of its own.
#[derive(Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}
