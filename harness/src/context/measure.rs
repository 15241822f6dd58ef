//! One measured request of a context pass: wait (bounded) for the server to be idle, read its
//! counters, send the prompt under a deadline while the sampler watches this machine, read the
//! counters again, and return the raw record. It never fails: every problem lands in the
//! record's `error`, so the pass decides what to do next.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::prompt::{self, NeedlePrompt};
use super::record::{self, ContextRecord};
use super::request::{self, CompletionSpec};
use super::sampler::Sampler;
use crate::driver::client::get_json;
use crate::driver::client::Clock;
use crate::trace::TraceRecord;

/// Timeout of the small GETs (models, stats, profile).
pub const GET_TIMEOUT: Duration = Duration::from_secs(5);

/// The server under test and what it offers besides the completions route.
#[derive(Clone, Debug)]
pub struct Server {
    pub http: reqwest::Client,
    /// Base URL, no trailing slash.
    pub base: String,
    /// The first model of `/v1/models`.
    pub model: String,
    /// `/api/stats` and `/api/profile` at connection (None: the server has no such route).
    pub first_stats: Option<Value>,
    pub first_profile: Option<Value>,
}

impl Server {
    /// Check the URL, ask `/v1/models` for the model and probe the optional routes.
    pub async fn connect(url: &str) -> anyhow::Result<Server> {
        let base = url.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            anyhow::bail!("--url must start with http:// or https:// (got '{url}')");
        }
        let http = crate::driver::client::http_client()?;
        let model = get_json(&http, &format!("{base}/v1/models"), GET_TIMEOUT)
            .await
            .and_then(|m| m["data"][0]["id"].as_str().map(str::to_string))
            .ok_or_else(|| {
                anyhow::anyhow!("{base}/v1/models did not answer with a model; is the server up?")
            })?;
        let first_stats = get_json(&http, &format!("{base}/api/stats"), GET_TIMEOUT).await;
        let first_profile = get_json(&http, &format!("{base}/api/profile"), GET_TIMEOUT).await;
        Ok(Server {
            http,
            base,
            model,
            first_stats,
            first_profile,
        })
    }

    fn stats_url(&self) -> Option<String> {
        self.first_stats
            .as_ref()
            .map(|_| format!("{}/api/stats", self.base))
    }

    pub async fn stats(&self) -> Option<Value> {
        get_json(&self.http, &self.stats_url()?, GET_TIMEOUT).await
    }

    pub async fn profile(&self) -> Option<Value> {
        self.first_profile.as_ref()?;
        get_json(
            &self.http,
            &format!("{}/api/profile", self.base),
            GET_TIMEOUT,
        )
        .await
    }

    /// Roles the server reports (`/api/profile` lists one entry per role).
    pub fn roles(&self) -> Option<usize> {
        self.first_profile
            .as_ref()?
            .get("roles")?
            .as_array()
            .map(Vec::len)
    }

    /// Wait until `/api/stats` reports no request in flight, polling every second for at most
    /// `max`; Some(idle) at the end, None if the server has no stats.
    pub async fn wait_idle(&self, max: Duration) -> Option<bool> {
        let t0 = Instant::now();
        loop {
            let s = self.stats().await?;
            let idle = s.get("requests_in_flight").and_then(Value::as_u64) == Some(0);
            if idle || t0.elapsed() >= max {
                return Some(idle);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

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
