//! A global allocator that counts the bytes currently allocated, for bytes-per-item figures.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, plus a count of the bytes currently allocated through it.
///
/// Install it in a binary with `#[global_allocator]`; [`live_bytes`](Self::live_bytes) then
/// reads the heap in use. The count is of requested sizes (`Layout::size`), not of what the
/// system allocator rounds them up to. One relaxed atomic add per allocation and per free is
/// its whole cost.
///
/// ```
/// use queue_bench::CountingAlloc;
///
/// static ALLOC: CountingAlloc = CountingAlloc::new();
/// assert_eq!(ALLOC.live_bytes(), 0); // not installed here, so nothing is counted
/// ```
#[derive(Debug, Default)]
pub struct CountingAlloc {
    live: AtomicUsize,
}

impl CountingAlloc {
    /// An allocator that has counted nothing yet.
    pub const fn new() -> Self {
        Self {
            live: AtomicUsize::new(0),
        }
    }

    /// Bytes allocated and not yet freed.
    pub fn live_bytes(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so
// `System`'s guarantees hold; the counter never influences what is returned.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is; the caller upholds `GlobalAlloc::alloc`'s contract.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            self.live.fetch_add(layout.size(), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            self.live.fetch_add(layout.size(), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, hence from `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        self.live.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `System` with `layout`; the caller upholds the rest.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            self.live.fetch_add(new_size, Ordering::Relaxed);
            self.live.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        new
    }
}
