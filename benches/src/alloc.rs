//! A counting global allocator for memory benchmarks: it forwards to the
//! system allocator and keeps the bytes live on the heap, so a bench
//! binary that installs it (`#[global_allocator]`) can measure the heap
//! before and after building something.
//!
//! It counts what goes through Rust's global allocator only: memory a
//! library maps itself (wasmtime's linear memories and code, a verbs
//! library's queue buffers) is not in it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The counting allocator (see the module documentation).
pub struct CountingAlloc {
    live: AtomicUsize,
}

impl CountingAlloc {
    /// A counter at zero.
    pub const fn new() -> Self {
        CountingAlloc { live: AtomicUsize::new(0) }
    }

    /// Bytes allocated and not yet freed.
    pub fn live_bytes(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }
}

impl Default for CountingAlloc {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: every call forwards to `System` with the caller's arguments; the
// counter only observes sizes.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            self.live.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            self.live.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) };
        self.live.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            self.live.fetch_sub(layout.size(), Ordering::Relaxed);
            self.live.fetch_add(new_size, Ordering::Relaxed);
        }
        p
    }
}

/// Least-squares slope of `y` over `x` (0 for fewer than two points).
pub fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let (mx, my) = (points.iter().map(|p| p.0).sum::<f64>() / n, points.iter().map(|p| p.1).sum::<f64>() / n);
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = points.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    if sxx == 0.0 {
        0.0
    } else {
        sxy / sxx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_of_a_line_and_of_too_few_points() {
        assert_eq!(slope(&[(1.0, 3.0), (2.0, 5.0), (4.0, 9.0)]), 2.0);
        assert_eq!(slope(&[(1.0, 3.0)]), 0.0);
        assert_eq!(slope(&[(1.0, 3.0), (1.0, 4.0)]), 0.0);
    }

    #[test]
    fn counts_live_bytes() {
        let a = CountingAlloc::new();
        let layout = Layout::from_size_align(64, 8).expect("layout");
        // SAFETY: a valid non-zero layout; the block is freed with the same layout.
        unsafe {
            let p = a.alloc(layout);
            assert_eq!(a.live_bytes(), 64);
            let p = a.realloc(p, layout, 256);
            assert_eq!(a.live_bytes(), 256);
            a.dealloc(p, Layout::from_size_align(256, 8).expect("layout"));
        }
        assert_eq!(a.live_bytes(), 0);
    }
}
