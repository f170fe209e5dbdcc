//! Cache-line write-back instructions for the Pmem backend, chosen once at
//! open: `clwb` (keeps the line cached), else `clflushopt`, else `clflush`.

/// The write-back instruction a Pmem domain uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushInstr {
    /// `clwb`: write back, keep the line in cache.
    Clwb,
    /// `clflushopt`: write back and invalidate, weakly ordered.
    ClflushOpt,
    /// `clflush`: write back and invalidate, strongly ordered.
    Clflush,
    /// No cache-flush instruction on this target: a full fence stands in.
    None,
}

impl FlushInstr {
    /// The best instruction this CPU has.
    pub fn detect() -> FlushInstr {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{__cpuid, __cpuid_count};
            // cpuid is safe on x86_64; leaf 7 is read only when leaf 0 says
            // it exists.
            let ebx7 = if __cpuid(0).eax >= 7 {
                __cpuid_count(7, 0).ebx
            } else {
                0
            };
            if ebx7 & (1 << 24) != 0 {
                return FlushInstr::Clwb;
            }
            if ebx7 & (1 << 23) != 0 {
                return FlushInstr::ClflushOpt;
            }
            FlushInstr::Clflush
        }
        #[cfg(not(target_arch = "x86_64"))]
        FlushInstr::None
    }

    /// Writes back the cache line holding `p`.
    #[inline]
    pub(super) fn flush(self, p: *const u8) {
        #[cfg(target_arch = "x86_64")]
        match self {
            // SAFETY: `p` points into a live mapping (checked by the caller);
            // clwb was detected on this CPU and does not modify memory.
            FlushInstr::Clwb => unsafe {
                std::arch::asm!("clwb [{}]", in(reg) p, options(nostack, preserves_flags))
            },
            // SAFETY: as above, with clflushopt detected.
            FlushInstr::ClflushOpt => unsafe {
                std::arch::asm!("clflushopt [{}]", in(reg) p, options(nostack, preserves_flags))
            },
            // SAFETY: clflush is part of SSE2, always present on x86_64; `p` is mapped.
            FlushInstr::Clflush => unsafe { std::arch::x86_64::_mm_clflush(p) },
            FlushInstr::None => {}
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = p;
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        }
    }
}
