//! The raw record of one context request (a line of `context.jsonl`) and the timings derived from
//! its token trace (MEASUREMENTS.md §3.2). Durations come from the monotonic event times.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::sampler::Sample;
use crate::trace::TraceRecord;

/// One request of a context pass.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ContextRecord {
    /// Always "context_request".
    pub record: String,
    pub streams: usize,
    /// Target prompt size (tokens).
    pub size: usize,
    /// 0-based repeat at this size.
    pub repeat: usize,
    pub seed: u64,
    pub code: String,
    /// The prompt's tokens as the harness's tokenizer counts them.
    pub prompt_tokens_client: usize,
    /// The server's `usage.prompt_tokens`.
    pub prompt_tokens: Option<u64>,
    /// Tokens before the sentence stating the code.
    pub needle_offset_tokens: usize,
    pub start_paragraph: usize,
    /// Seconds the pass predicted for this request before sending it (None: nothing to go on).
    pub predicted_s: Option<f64>,
    /// Seconds of budget left when it was sent.
    pub budget_left_s: f64,
    pub ttft_s: Option<f64>,
    /// `prompt_tokens / ttft_s`.
    pub prefill_tok_s: Option<f64>,
    /// `(output_tokens − 1) / (last token time − first token time)`.
    pub decode_tok_s: Option<f64>,
    pub output_tokens: u64,
    /// Whole request, send to end of stream.
    pub duration_s: f64,
    pub finish_reason: Option<String>,
    pub code_found: bool,
    /// Busy cores of this machine averaged over the request (`/proc/stat`).
    pub cores_busy: Option<f64>,
    /// Least `MemAvailable` of this machine over the request, GiB.
    pub min_free_gib: Option<f64>,
    pub samples: Vec<Sample>,
    /// `/api/stats` just before and just after (None: the server has none).
    pub stats_before: Option<Value>,
    pub stats_after: Option<Value>,
    /// The server had no request in flight when this one was sent (None: no `/api/stats`).
    pub idle_at_start: Option<bool>,
    /// `tokens_total` after minus before: the server's own count of this request's output.
    pub server_tokens_delta: Option<i64>,
    /// Per-role `/api/profile` counters (attention, MLP, compute ns, rows) accrued over the
    /// request, when the server has that route.
    pub profile_delta: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The token trace: prompt, events `[t, n]`, text, usage.
    pub trace: TraceRecord,
}

/// Timings of one finished trace.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timings {
    pub ttft_s: Option<f64>,
    pub decode_tok_s: Option<f64>,
    /// Seconds per output token after the first.
    pub decode_s_per_token: Option<f64>,
    pub output_tokens: u64,
}

/// TTFT from `started` to the first event carrying a token; decode rate over the events from the
/// first token-carrying one to the last (`(tokens − 1) / span`, None under two tokens or a zero
/// span).
pub fn timings(t: &TraceRecord) -> Timings {
    let carrying: Vec<(f64, u32)> = t.events_mono.iter().copied().filter(|e| e.1 > 0).collect();
    let output_tokens = t.tokens();
    let first = carrying.first().map(|e| e.0);
    let last = carrying.last().map(|e| e.0);
    let ttft_s = first.map(|f| f - t.started_mono);
    let span = match (first, last) {
        (Some(f), Some(l)) => l - f,
        _ => 0.0,
    };
    // tokens after the first arrival: the first event may carry several
    let after_first = output_tokens.saturating_sub(carrying.first().map_or(0, |e| e.1 as u64));
    let (decode_tok_s, decode_s_per_token) = if output_tokens >= 2 && span > 0.0 && after_first > 0
    {
        (
            Some(after_first as f64 / span),
            Some(span / after_first as f64),
        )
    } else {
        (None, None)
    };
    Timings {
        ttft_s,
        decode_tok_s,
        decode_s_per_token,
        output_tokens,
    }
}

/// `prompt_tokens / ttft_s`.
pub fn prefill_tok_s(prompt_tokens: Option<u64>, ttft_s: Option<f64>) -> Option<f64> {
    match (prompt_tokens, ttft_s) {
        (Some(p), Some(t)) if t > 0.0 => Some(p as f64 / t),
        _ => None,
    }
}

/// `tokens_total` after minus before.
pub fn tokens_delta(before: Option<&Value>, after: Option<&Value>) -> Option<i64> {
    let get = |v: Option<&Value>| v?.get("tokens_total")?.as_i64();
    Some(get(after)? - get(before)?)
}

/// Per-role differences of the numeric counters of two `/api/profile` answers
/// (`{"roles": [{...}, ...]}`), matched by position; None if either is missing or malformed.
pub fn profile_delta(before: Option<&Value>, after: Option<&Value>) -> Option<Value> {
    let roles = |v: Option<&Value>| v?.get("roles")?.as_array().cloned();
    let (b, a) = (roles(before)?, roles(after)?);
    if a.len() != b.len() {
        return None;
    }
    let keys = [
        "frames",
        "rows",
        "compute_ns",
        "attention_ns",
        "mlp_ns",
        "head_ns",
        "idle_ns",
    ];
    let out: Vec<Value> = a
        .iter()
        .zip(&b)
        .map(|(ra, rb)| {
            let mut m = serde_json::Map::new();
            if let Some(r) = ra.get("role") {
                m.insert("role".into(), r.clone());
            }
            for k in keys {
                if let (Some(x), Some(y)) = (
                    ra.get(k).and_then(Value::as_i64),
                    rb.get(k).and_then(Value::as_i64),
                ) {
                    m.insert(k.into(), (x - y).into());
                }
            }
            Value::Object(m)
        })
        .collect();
    Some(Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn trace(started: f64, events: &[(f64, u32)]) -> TraceRecord {
        TraceRecord {
            started_mono: started,
            events_mono: events.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn ttft_and_decode_from_events() {
        // first token at 12 s after start, then 4 more over 2 s, then an empty finish chunk
        let t = trace(
            10.0,
            &[
                (22.0, 1),
                (22.5, 1),
                (23.0, 1),
                (23.5, 1),
                (24.0, 1),
                (24.1, 0),
            ],
        );
        let m = timings(&t);
        assert_eq!(m.output_tokens, 5);
        assert!((m.ttft_s.unwrap() - 12.0).abs() < 1e-12);
        assert!((m.decode_tok_s.unwrap() - 2.0).abs() < 1e-12);
        assert!((m.decode_s_per_token.unwrap() - 0.5).abs() < 1e-12);
        assert!((prefill_tok_s(Some(1200), m.ttft_s).unwrap() - 100.0).abs() < 1e-9);
    }

    #[test]
    fn one_token_or_none_has_no_decode_rate() {
        let m = timings(&trace(0.0, &[(1.0, 1), (1.1, 0)]));
        assert_eq!((m.output_tokens, m.decode_tok_s), (1, None));
        assert!((m.ttft_s.unwrap() - 1.0).abs() < 1e-12);
        let m = timings(&trace(0.0, &[]));
        assert_eq!((m.ttft_s, m.decode_tok_s, m.output_tokens), (None, None, 0));
        assert_eq!(prefill_tok_s(Some(10), None), None);
        assert_eq!(prefill_tok_s(None, Some(1.0)), None);
    }

    #[test]
    fn a_multi_token_first_chunk_is_not_counted_in_decode() {
        // 3 tokens arrive at once, then 2 more over 1 s: decode = 2 / 1
        let m = timings(&trace(0.0, &[(5.0, 3), (5.5, 1), (6.0, 1)]));
        assert!((m.decode_tok_s.unwrap() - 2.0).abs() < 1e-12);
    }

    #[test]
    fn server_deltas() {
        assert_eq!(
            tokens_delta(
                Some(&json!({"tokens_total": 10})),
                Some(&json!({"tokens_total": 106}))
            ),
            Some(96)
        );
        assert_eq!(tokens_delta(None, Some(&json!({"tokens_total": 1}))), None);
        let b = json!({"roles": [{"role": 0, "attention_ns": 5, "rows": 1, "layers": [0, 6]}]});
        let a = json!({"roles": [{"role": 0, "attention_ns": 15, "rows": 4, "layers": [0, 6]}]});
        assert_eq!(
            profile_delta(Some(&b), Some(&a)),
            Some(json!([{"role": 0, "attention_ns": 10, "rows": 3}]))
        );
        assert_eq!(profile_delta(Some(&b), Some(&json!({"roles": []}))), None);
        assert_eq!(profile_delta(None, Some(&a)), None);
    }
}
