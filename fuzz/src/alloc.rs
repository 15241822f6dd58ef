//! The allocation counter the fuzz checks measure with: `PeakAlloc`, a global allocator that is
//! `System` plus, per thread, the largest single request and the sum of requests since
//! `measure_start`. A process (a fuzz target, a test binary) installs it with
//! `#[global_allocator]`; the checks refuse to run without it (`peak_alloc_installed`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU8, Ordering};

thread_local! {
    static PEAK: Cell<usize> = const { Cell::new(0) };
    static TOTAL: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // const-initialised, no destructor: never allocates, never fails while the thread lives
    let _ = PEAK.try_with(|p| p.set(p.get().max(size)));
    let _ = TOTAL.try_with(|t| t.set(t.get().saturating_add(size)));
}

/// A global allocator that is `System` plus, per thread, the largest single request and the sum
/// of requests since `measure_start` (a reallocation counts its new size).
pub struct PeakAlloc;

unsafe impl GlobalAlloc for PeakAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract for `GlobalAlloc::alloc`, passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through this allocator with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: as for `dealloc`, and the caller's contract for `new_size`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Zero this thread's allocation counters.
pub fn measure_start() {
    PEAK.with(|p| p.set(0));
    TOTAL.with(|t| t.set(0));
}

/// This thread's (largest single, total) bytes requested since `measure_start`.
pub fn measured() -> (usize, usize) {
    (PEAK.with(|p| p.get()), TOTAL.with(|t| t.get()))
}

/// Whether `PeakAlloc` is the global allocator (a 1000-byte request shows in the counters).
pub fn peak_alloc_installed() -> bool {
    static STATE: AtomicU8 = AtomicU8::new(0);
    match STATE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            measure_start();
            let v: Vec<u8> = Vec::with_capacity(std::hint::black_box(1000));
            std::hint::black_box(&v);
            let ok = measured().0 >= 1000;
            STATE.store(if ok { 1 } else { 2 }, Ordering::Relaxed);
            ok
        }
    }
}
