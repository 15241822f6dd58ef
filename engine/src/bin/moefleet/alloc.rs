//! The process's allocator: mimalloc rather than glibc's malloc.
//!
//! A frame allocates and frees many short-lived buffers (per-expert rows, attention tasks,
//! quantised activations) on several threads. Under glibc, a role of the inkling-mini fleet at 176
//! streams spent about 15 % of its cycles in malloc, free and the kernel clearing pages that
//! glibc's arenas had handed back and then faulted in again. Side by side on host D (the same
//! sweep level against each binary, one after the other), the fleet served 8-9 % more tokens a
//! second with mimalloc at 1, 88 and 176 streams (A/B runs, not a committed record).
//!
//! mimalloc's default commits its arenas eagerly on Linux, which kept freed memory resident: the
//! fleet's processes held 7.0 GB at 176 streams against glibc's 4.8 GB. With arenas committed as
//! they are used, 5.4 GB. That option has to be set before the first allocation, which the Rust
//! runtime makes before `main`, so it is set from the ELF constructors (`.init_array`).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

extern "C" {
    /// mimalloc's `mi_option_set` (the crate links the C library statically).
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// `mi_option_arena_eager_commit` in the enum of mimalloc v3's `mimalloc.h` (after show_errors,
/// show_stats, verbose and the deprecated eager_commit), the version `libmimalloc-sys` 0.1.49
/// builds; Cargo.lock pins it.
const ARENA_EAGER_COMMIT: std::ffi::c_int = 4;

extern "C" fn commit_arenas_lazily() {
    // SAFETY: mi_option_set writes one entry of mimalloc's static option table; it allocates
    // nothing and may run before mimalloc's own initialisation (which keeps a value already set)
    unsafe { mi_option_set(ARENA_EAGER_COMMIT, 0) };
}

#[used]
#[link_section = ".init_array"]
static COMMIT_ARENAS_LAZILY: extern "C" fn() = commit_arenas_lazily;
