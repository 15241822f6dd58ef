//! The records of a drive (MEASUREMENTS.md §1): one trace per request as the client saw it, the
//! only source of every timing; one record per cohort and per phase; and `/api/stats` polls. The
//! harness writes and reads them (`moefleet_harness::trace` holds their files).

use serde::{Deserialize, Serialize};

/// One request as the client saw it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceRecord {
    pub phase: String,
    pub family: String,
    pub family_index: usize,
    pub prompt_index: usize,
    pub cohort: usize,
    pub prompt: String,
    /// The server's `usage.prompt_tokens`.
    pub prompt_tokens: Option<u64>,
    pub max_tokens: usize,
    /// Epoch seconds just before the first HTTP attempt.
    pub started: f64,
    /// The same instant on the run's monotonic clock (seconds from the run's origin).
    pub started_mono: f64,
    /// `[t, n]`: epoch arrival time of an SSE chunk and the tokens it carries.
    pub events: Vec<(f64, u32)>,
    /// `[t, n]` on the run's monotonic clock; durations are computed from these.
    pub events_mono: Vec<(f64, u32)>,
    pub ended: f64,
    pub ended_mono: f64,
    pub finish_reason: Option<String>,
    pub usage: Option<serde_json::Value>,
    pub text: String,
    pub capacity_retries: u32,
    /// moefleet's own fields from the stream (e.g. `capture`: where the stream's capture went).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_extra: Option<serde_json::Value>,
    /// Present only when the counted tokens could not be checked against the server's usage
    /// (MEASUREMENTS.md §1: a server that reports none is recorded as unchecked, explicitly).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_check: Option<String>,
    /// Present only on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When an open-loop schedule had the request due, on the run's monotonic clock (present only
    /// in open-loop runs: `started_mono` minus this is the client's own send lag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_mono: Option<f64>,
    /// In a multi-turn run, the conversation this request belongs to (its first turn's request
    /// index) and its turn (0 = the first); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<usize>,
    /// The client's own count in the server's tokenizer, where the run was given it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_count: Option<ClientCount>,
}

/// A request's tokens counted by the client in the server's tokenizer: the prompt as the model's
/// chat template renders the messages sent, and the answer's streamed text encoded again (which
/// may merge differently from the tokens the model emitted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientCount {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl TraceRecord {
    /// Σ n over the events.
    pub fn tokens(&self) -> u64 {
        self.events_mono.iter().map(|e| e.1 as u64).sum()
    }

    /// The number at `pointer` (a JSON pointer, e.g. `/prompt_tokens_details/cached_tokens`) in
    /// the server's `usage`.
    pub fn usage_u64(&self, pointer: &str) -> Option<u64> {
        self.usage.as_ref()?.pointer(pointer)?.as_u64()
    }

    pub fn completion_tokens(&self) -> Option<u64> {
        self.usage
            .as_ref()
            .and_then(|u| u.get("completion_tokens"))
            .and_then(|v| v.as_u64())
    }
}

/// One cohort's wall and monotonic bounds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CohortRecord {
    pub index: usize,
    pub requests: usize,
    pub start_mono: f64,
    pub end_mono: f64,
}

/// One phase (MEASUREMENTS.md §1, "phase record").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseRecord {
    pub phase: String,
    pub family: String,
    pub concurrency: usize,
    pub output_cap: usize,
    pub requests: usize,
    pub tokens: u64,
    pub start: f64,
    pub end: f64,
    pub start_mono: f64,
    pub end_mono: f64,
    pub cohorts: Vec<CohortRecord>,
    /// `/api/stats` just before and just after the phase (None: the server has none).
    pub stats_before: Option<serde_json::Value>,
    pub stats_after: Option<serde_json::Value>,
    /// The server was idle (`requests_in_flight == 0`) when the phase started.
    pub idle_at_start: Option<bool>,
    pub capacity_retries: u64,
    pub errors: usize,
}

/// One `/api/stats` poll.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatsPoll {
    pub t: f64,
    pub t_mono: f64,
    pub stats: serde_json::Value,
}
