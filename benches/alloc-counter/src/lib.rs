//! `alloc-counter`: the global allocator every benchmark reads its heap figures from, so that
//! "bytes per pending item" (`queue-bench`, `benches/workqueue.rs`) and "bytes per cached
//! object" (`informer-bench`) are counted the same way.
//!
//! [`CountingAlloc`] forwards to the system allocator and keeps two counters: the bytes its
//! live allocations occupy, each counted as the glibc malloc chunk it takes
//! ([`chunk_size`]), net of frees; and the allocations made. Counting chunks rather than the
//! sizes requested is what makes the figures comparable with the Go peers', which read
//! `runtime.MemStats.HeapAlloc`, where every object counts at its size class.
//!
//! This crate is the one place in the workspace allowed `unsafe` code: `GlobalAlloc` is an
//! unsafe trait. Its impl only forwards each call, arguments unchanged, to `System`.
//!
//! ```
//! use alloc_counter::CountingAlloc;
//!
//! // In a binary or a bench, with `#[global_allocator]` on it:
//! static ALLOC: CountingAlloc = CountingAlloc::new();
//! assert_eq!(ALLOC.live_bytes(), 0); // not installed here, so nothing is counted
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The bytes a glibc malloc chunk for a `size`-byte request occupies on x86-64: the request
/// plus the 8-byte size header, rounded up to 16, and never less than 32.
///
/// It is exact for the small and medium requests the benches make. It understates two rare
/// cases: requests over glibc's mmap threshold (128 KiB at first), which really take whole
/// pages, and over-aligned layouts (alignment above 16), which `System` serves with
/// `posix_memalign` and some slack. For large tables the header and rounding are noise, so
/// such figures are the bytes requested to well under 1 %.
///
/// ```
/// use alloc_counter::chunk_size;
///
/// assert_eq!(chunk_size(0), 32); // the smallest chunk
/// assert_eq!(chunk_size(24), 32); // 24 + 8 fits exactly
/// assert_eq!(chunk_size(25), 48);
/// assert_eq!(chunk_size(100), 112);
/// ```
pub const fn chunk_size(size: usize) -> usize {
    let chunk = (size + 8 + 15) & !15;
    if chunk < 32 { 32 } else { chunk }
}

/// The system allocator, plus a count of the bytes its live allocations occupy (each as the
/// malloc chunk it takes, [`chunk_size`]) and a count of the allocations made.
///
/// Install it with `#[global_allocator]`; [`live_bytes`](Self::live_bytes) then reads the
/// heap in use, and [`allocations`](Self::allocations) how many allocations (and
/// reallocations) were ever made, by every thread. Two relaxed atomic adds per allocation and
/// one per free are its whole cost.
#[derive(Debug, Default)]
pub struct CountingAlloc {
    /// Bytes of the chunks allocated and not yet freed.
    live: AtomicUsize,
    /// Allocations and reallocations made.
    allocations: AtomicUsize,
}

impl CountingAlloc {
    /// An allocator that has counted nothing yet.
    pub const fn new() -> Self {
        Self {
            live: AtomicUsize::new(0),
            allocations: AtomicUsize::new(0),
        }
    }

    /// Bytes occupied by allocations made and not yet freed, in malloc chunks.
    pub fn live_bytes(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Allocations and reallocations made so far: the difference over a stretch of code
    /// tells whether it allocated at all.
    pub fn allocations(&self) -> usize {
        self.allocations.load(Ordering::Relaxed)
    }

    fn counted(&self, size: usize) {
        self.live.fetch_add(chunk_size(size), Ordering::Relaxed);
        self.allocations.fetch_add(1, Ordering::Relaxed);
    }

    fn freed(&self, size: usize) {
        self.live.fetch_sub(chunk_size(size), Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so
// `System`'s guarantees hold; the counters never influence what is returned.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is; the caller upholds `GlobalAlloc::alloc`'s contract.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            self.counted(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            self.counted(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, hence from `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        self.freed(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `System` with `layout`; the caller upholds the rest.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            self.counted(new_size);
            self.freed(layout.size());
        }
        new
    }
}
