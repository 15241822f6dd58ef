//! Open-loop load (docs/MEASUREMENTS.md §9), beside the paired concurrency sweep of `driver`:
//!
//! - `arrivals`: when each request is due (constant, Poisson, gamma; a rate or a ramp), seeded.
//! - `drive`: sending them on schedule, optionally capped in concurrency, into trace records.
//! - `latency`: TTFT, TPOT, per-token ITL (right under multi-token chunks), end to end, the
//!   client's send lag, goodput against objectives.
//! - `turns`: a multi-turn run's prompts and prefix-cache hits by turn.
//! - `replay`: requests at the times and lengths of a published request trace.
//! - `step`: one run of load into a directory of its own.
//! - `report`: the run's self-contained HTML page (tables, inline SVG figures, links to records).
//! - `repeat`: any plan (a step, a sweep, a search, the paired concurrency sweep) repeated, or
//!   two servers alternated A B B A; `arms` compares the runs with intervals over blocks.
//! - `compare`: two runs side by side, each difference with a bootstrap interval;
//!   `compare_page` its files.
//! - `crosscheck`: token counts and times against the server's own and the client's tokenizer.
//! - `measure`: what a claim reads from one step.
//! - `rederive`: a run's summaries, table and search answer recomputed from its raw records.
//! - `vllm`: a step in the JSON shape of `vllm bench serve` results, and such a file read back.
//! - `plans`: several steps: a sweep across the server's range, a search for the highest load
//!   meeting objectives, with an over-saturation stop and a Pareto figure.

pub mod arms;
pub mod arrivals;
pub mod compare;
pub mod compare_page;
pub mod crosscheck;
pub mod drive;
pub mod latency;
pub mod measure;
pub mod plans;
pub mod rederive;
pub mod repeat;
pub mod replay;
pub mod report;
pub mod step;
pub mod turns;
pub mod vllm;
