//! Context length (MEASUREMENTS.md §3): the real-prompt scan through the API and the fit of its
//! TTFT to `aN + bN²`, with Figure 7, and the tables of the in-role probe (§3.1: the engine
//! measures, `probe` summarises).
//!
//! - `prompt`: needle prompts of about N tokens from the corpus, sized with the engine's tokenizer.
//! - `request`: one streaming `/v1/completions` request into a token trace, under a deadline.
//! - `sampler`: CPU cores busy and least free memory of this machine, plus `/api/stats`, while a
//!   request runs.
//! - `measure`: one request measured: idle wait, server counters, sampler, record.
//! - `record`: the raw per-request record and the timings derived from its trace.
//! - `plan`: sizes, repeats and the predicted duration that decides whether a request still fits.
//! - `scan`: the pass (`moefleet-harness context`): `context.jsonl`, `context.csv`,
//!   `context_run.json`.
//! - `table`: `context.csv` rows from records, in the paper's columns.
//! - `fit`: the `aN + bN²` least squares and the attention FLOP count (pure).
//! - `probe`: `context_probe.csv` and `probe.json` from the engine's `probe-role-K.json` records.
//! - `inputs`: what `context-fit` finds under ROOT (scans, probes).
//! - `report`: `fit.json`, `fit.csv` and the terminal summary.
//!
//! Figure 7 and its axes are in `crate::figures`.

pub mod fit;
pub mod inputs;
pub mod measure;
pub mod plan;
pub mod probe;
pub mod prompt;
pub mod recheck;
pub mod record;
pub mod report;
pub mod request;
pub mod sampler;
pub mod scan;
pub mod table;
pub mod unit;
