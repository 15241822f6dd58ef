//! The experiments beyond the concurrency sweep (which is `driver::sweep` plus `analysis`), one
//! folder each; each owns its measurement, its records and its tables, and draws its figures through
//! `crate::figures`.
//!
//! - `context`: the in-role probe's tables and the real-prompt context scan with its `aN + bN²` fit
//!   (MEASUREMENTS.md §3).
//! - `ceilings`, `dense`: kernel-level experiments run in-process against the engine crate (memory
//!   and FMA ceilings; dense blocks as fused slices vs three matrix calls, §4).
//! - `bench_table`: the engine's criterion kernel benchmarks against those ceilings (`kernels.csv`,
//!   `kernels.md`).
//! - `draft`: the captured-state draft replay: capture corpus, fitted head, replay, Table 6 and
//!   Figure 8 (§5).
//! - `speculation`: the paper's Table 3, speculation off against on, the first-order model (§6).
//! - `peer`: the side-by-side with llama.cpp (`make peer`).
//! - `backends`: the native kernels against the OpenVINO backend, per layer and per token.
//! - `parity`: greedy parity with llama.cpp on one GGUF file (llama-server, one process, a fleet).
//! - `figure6`: bursts under reference admission and under prefill windows (paper §5.3).
//! - `links`: the fleet over emulated links, and the kernel's shaper.
//! - `load`: SLA searches by request rate on llama-server and our fleet, same real checkpoint.
//!
//! Each is a unit (`unit`: what `make reproduce` runs of it, and what `verify` re-derives of its
//! committed runs), listed once in `registry`; `plan` runs the registry's main job, and
//! `server_process` is the server (a fleet, or llama-server) a unit starts and stops around its
//! load.

pub mod backends;
pub mod bench_table;
pub mod ceilings;
pub mod context;
pub mod dense;
pub mod draft;
pub mod figure6;
pub mod links;
pub mod load;
pub mod parity;
pub mod peer;
pub mod plan;
pub mod registry;
pub mod server_process;
pub mod speculation;
pub mod unit;
