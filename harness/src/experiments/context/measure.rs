//! One measured request of a context pass: wait (bounded) for the server to be idle, read its
//! counters, send the prompt under a deadline while the sampler watches this machine, read the
//! counters again, and return the raw record. It never fails: every problem lands in the
//! record's `error`, so the pass decides what to do next.

use std::time::Duration;

use super::prompt::{self, NeedlePrompt};
use super::record::{self, ContextRecord};
use super::request::{self, CompletionSpec};
use super::sampler::Sampler;
use crate::driver::client::Clock;
pub use crate::driver::server::Server;
use crate::trace::TraceRecord;

/// One request to measure.
#[derive(Clone, Debug)]
pub struct Ask<'a> {
    pub prompt: &'a NeedlePrompt,
    pub size: usize,
    pub repeat: usize,
    pub seed: u64,
    pub max_tokens: usize,
    pub ignore_eos: bool,
    /// Deadline of the whole request.
    pub timeout: Duration,
    pub sample_every: Duration,
    pub predicted_s: Option<f64>,
    pub budget_left_s: f64,
    pub idle_at_start: Option<bool>,
}

/// Send `ask` and return its record.
pub async fn measure(server: &Server, clock: Clock, ask: &Ask<'_>) -> ContextRecord {
    let p = ask.prompt;
    let spec = CompletionSpec {
        url: server.base.clone(),
        model: server.model.clone(),
        prompt: p.text.clone(),
        max_tokens: ask.max_tokens,
        ignore_eos: ask.ignore_eos,
        timeout: ask.timeout,
    };
    let stats_before = server.stats().await;
    let profile_before = server.profile().await;
    let sampler = Sampler::start(
        clock,
        ask.sample_every,
        server.http.clone(),
        server.stats_url(),
    );
    let mut trace = TraceRecord {
        phase: "context".into(),
        family: "needle".into(),
        prompt_index: ask.repeat,
        ..Default::default()
    };
    request::run(&server.http, &clock, &spec, &mut trace).await;
    let load = sampler.stop().await;
    let stats_after = server.stats().await;
    let profile_after = server.profile().await;
    let m = record::timings(&trace);
    ContextRecord {
        record: "context_request".into(),
        streams: 1,
        size: ask.size,
        repeat: ask.repeat,
        seed: ask.seed,
        code: p.code.clone(),
        prompt_tokens_client: p.tokens,
        prompt_tokens: trace.prompt_tokens,
        needle_offset_tokens: p.needle_offset_tokens,
        start_paragraph: p.start_paragraph,
        predicted_s: ask.predicted_s,
        budget_left_s: ask.budget_left_s,
        ttft_s: m.ttft_s,
        prefill_tok_s: record::prefill_tok_s(trace.prompt_tokens, m.ttft_s),
        decode_tok_s: m.decode_tok_s,
        output_tokens: m.output_tokens,
        duration_s: trace.ended_mono - trace.started_mono,
        finish_reason: trace.finish_reason.clone(),
        code_found: prompt::code_found(&trace.text, &p.code),
        cores_busy: load.cores_busy,
        min_free_gib: load.min_free_gib,
        samples: load.samples,
        idle_at_start: ask.idle_at_start,
        server_tokens_delta: record::tokens_delta(stats_before.as_ref(), stats_after.as_ref()),
        profile_delta: record::profile_delta(profile_before.as_ref(), profile_after.as_ref()),
        stats_before,
        stats_after,
        error: trace.error.clone(),
        trace,
    }
}
