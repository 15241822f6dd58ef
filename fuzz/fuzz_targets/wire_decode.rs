//! The wire decoder under libFuzzer: every input goes through `wire_fuzz::fuzz_check` (decode
//! never panics, allocates no more than its input, accepts only canonical in-limit messages;
//! a valid message of every kind built from the input round-trips and its declared lengths, made
//! huge, are refused without allocating). `PeakAlloc` counts the allocations.

#![no_main]

use libfuzzer_sys::fuzz_target;
use moefleet_engine::pipeline::wire_fuzz::{fuzz_check, PeakAlloc};

#[global_allocator]
static ALLOC: PeakAlloc = PeakAlloc;

fuzz_target!(|data: &[u8]| {
    fuzz_check(data);
});
