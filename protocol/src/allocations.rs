//! Tests only: the unit tests' allocator, which counts the allocations each thread makes, so that a test can
//! say how many a piece of the request path may make (docs/performance.md, figure 4).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    // `const`, without a destructor: reading it never allocates, so the allocator may use it.
    static MADE: Cell<usize> = const { Cell::new(0) };
}

struct Counting;

// SAFETY: every call is passed to the system allocator unchanged; counting touches only a thread-local `Cell`.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's guarantees for `layout` are the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, which is the system's, with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: as for `dealloc`, and the caller's guarantees for `new_size`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

fn count() {
    // A thread being torn down has no counter any more: its allocations are not counted.
    let _ = MADE.try_with(|made| made.set(made.get() + 1));
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// What `body` returns, and how many allocations (and reallocations) this thread made while it ran.
pub(crate) fn counted<T>(body: impl FnOnce() -> T) -> (T, usize) {
    let before = MADE.with(Cell::get);
    let value = body();
    (value, MADE.with(Cell::get) - before)
}
