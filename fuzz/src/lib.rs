//! The fuzz harnesses of the engine's two decoders of untrusted bytes, kept out of the engine
//! library (only fuzzing and its tests need them): `wire` (the wire decoder) and `gguf` (the GGUF
//! parser), each a `fuzz_check` every input must satisfy, a `Tally` of what the checks saw and the
//! generator of its committed seeds (`seeds` compares and writes them); `source` (field values read from an input, for the
//! structure-aware checks) and `alloc` (the counting global allocator the allocation bounds are
//! measured with).
//!
//! Run by the coverage-guided targets in `fuzz_targets/` (cargo-fuzz on nightly, feature
//! `libfuzzer`; `scripts/fuzz-wire.sh`) and, bounded and on stable, by `tests/` (part of
//! `make test`).

pub mod alloc;
pub mod gguf;
pub mod seeds;
pub mod source;
pub mod wire;

pub use alloc::PeakAlloc;
pub use source::Source;
