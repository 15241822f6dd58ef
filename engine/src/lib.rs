//! moefleet-engine: a resident mixture-of-experts serving engine for the Inkling model family.
//!
//! Map:
//! - `model`: configuration presets, weights (synthetic and from files), stream state, forward pass.
//! - `gguf`: GGUF model files (llama.cpp's format) read and checked; tensor bytes stay mapped.
//! - `kernels`: INT4/INT8 products, f16 emulation, attention loops, convolution, routing; each with
//!   a plain reference twin and a shared case list.
//! - `pipeline`: roles as processes: wire format, framed TCP links, role 0's scheduler, workers.
//! - `serve`: the OpenAI-compatible HTTP API of role 0.
//! - `spec`: the proposers of speculative injection (suffix match, phrase table, draft model).
//! - `openvino`: the OpenVINO backend (graphs built from the stored weights, compiled per layer).
//! - `capture`: captured residuals of served streams (files for the draft replay).
//! - `tokenizer`: the project's byte-level BPE tokenizer (`workloads/tokenizer.json`).
//! - `inspect`: logical bytes per token of a preset.
//! - `bench`: single-process prefill and decode rates in llama-bench's terms.
//! - `rng`: the counter-keyed generator behind synthetic weights.
//! - `sampling`: how the last role picks a token (greedy, or seeded temperature/top-k/top-p).
//!
//! Glossary (used the same in code, configs and records): `rows` (residual rows of a frame),
//! `hidden` (H, residual width), `n_q_heads`, `n_kv_heads`, `head_dim` (D), `n_experts`, `top_k`,
//! `pos` (position in a stream), `slot` (a stream's place in a role), `role` (a six-layer range in
//! one process), `group` (a pipeline group of slots), `window` (sliding attention span).

pub mod bench;
pub mod capture;
pub mod continuations;
pub mod error;
pub mod generate;
pub mod gguf;
pub mod inspect;
pub mod kernels;
pub mod model;
pub mod openvino;
pub mod pipeline;
pub mod probe;
pub mod rng;
pub mod sampling;
pub mod serve;
pub mod spec;
pub mod tokenizer;

pub use error::{Error, Result};

/// The commit this engine was built from (`-dirty` with uncommitted changes), for records.
pub const BUILD_COMMIT: &str = env!("MOEFLEET_BUILD_COMMIT");

/// What `moefleet --version` prints after its name: the package version and the commit.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("MOEFLEET_BUILD_COMMIT"),
    ")"
);
