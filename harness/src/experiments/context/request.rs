//! One streaming `/v1/completions` request (raw prompt, no chat template) turned into a
//! `TraceRecord` with the counting rules and hard checks of MEASUREMENTS.md §1, through the chat
//! client's SSE reader (`driver::client::read_stream`). The whole request runs under one deadline; a
//! request that misses it is a record with an error, never a hang.

use std::time::Duration;

use serde_json::{json, Value};

use crate::driver::client::{is_capacity, read_stream, Clock};
use crate::trace::TraceRecord;

/// What to send.
#[derive(Clone, Debug)]
pub struct CompletionSpec {
    /// Base URL (no trailing path).
    pub url: String,
    pub model: String,
    pub prompt: String,
    pub max_tokens: usize,
    pub ignore_eos: bool,
    /// Deadline for the whole request, from sending to `[DONE]`.
    pub timeout: Duration,
}

/// The request body: greedy, streamed, usage in the last chunk.
pub fn body(spec: &CompletionSpec) -> Value {
    json!({
        "model": spec.model,
        "prompt": spec.prompt,
        "max_tokens": spec.max_tokens,
        "temperature": 0,
        "stream": true,
        "stream_options": {"include_usage": true},
        "ignore_eos": spec.ignore_eos,
    })
}

/// Send the request and fill `rec` (errors are recorded in `rec.error`).
pub async fn run(
    http: &reqwest::Client,
    clock: &Clock,
    spec: &CompletionSpec,
    rec: &mut TraceRecord,
) {
    let (t, tm) = clock.now();
    rec.started = t;
    rec.started_mono = tm;
    rec.prompt = spec.prompt.clone();
    rec.max_tokens = spec.max_tokens;
    let outcome = tokio::time::timeout(spec.timeout, stream(http, clock, spec, rec)).await;
    let (t, tm) = clock.now();
    rec.ended = t;
    rec.ended_mono = tm;
    let problem = match outcome {
        Err(_) => Some(format!(
            "no complete answer within the request deadline of {:.0} s",
            spec.timeout.as_secs_f64()
        )),
        Ok(Err(e)) => Some(e),
        Ok(Ok(())) => crate::driver::client::check(rec),
    };
    if rec.error.is_none() {
        rec.error = problem;
    }
}

async fn stream(
    http: &reqwest::Client,
    clock: &Clock,
    spec: &CompletionSpec,
    rec: &mut TraceRecord,
) -> Result<(), String> {
    let url = format!("{}/v1/completions", spec.url.trim_end_matches('/'));
    let body = body(spec);
    // one stream at a time: an at-capacity answer means someone else is using the server;
    // wait a little, a bounded number of times, inside the deadline
    let mut resp = None;
    for attempt in 0..5u32 {
        let r = http
            .post(&url)
            .json(&body)
            .send()
            .await
            .map_err(|e| format!("request failed: {e}"))?;
        if r.status().as_u16() == 503 {
            let text = r.text().await.unwrap_or_default();
            if is_capacity(&text) && attempt < 4 {
                rec.capacity_retries += 1;
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
            return Err(format!("HTTP 503: {}", text.trim()));
        }
        if !r.status().is_success() {
            let code = r.status();
            let text = r.text().await.unwrap_or_default();
            return Err(format!("HTTP {code}: {}", text.trim()));
        }
        resp = Some(r);
        break;
    }
    let resp = resp.ok_or("the server stayed at capacity")?;
    read_stream(resp, clock, rec).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::client::check;

    #[test]
    fn body_is_greedy_streamed_with_usage() {
        let spec = CompletionSpec {
            url: "http://x".into(),
            model: "m".into(),
            prompt: "p".into(),
            max_tokens: 96,
            ignore_eos: false,
            timeout: Duration::from_secs(1),
        };
        let b = body(&spec);
        assert_eq!(b["temperature"], 0);
        assert_eq!(b["stream"], true);
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert_eq!(b["max_tokens"], 96);
        assert_eq!(b["ignore_eos"], false);
        assert_eq!(b["prompt"], "p");
    }

    #[test]
    fn checks_catch_count_mismatch() {
        let mut r = TraceRecord {
            usage: Some(json!({"completion_tokens": 2})),
            events: vec![(1.0, 1), (2.0, 1)],
            events_mono: vec![(1.0, 1), (2.0, 1)],
            ..Default::default()
        };
        assert_eq!(check(&mut r), None);
        r.events_mono.pop();
        assert!(check(&mut r).unwrap().contains("counted 1"));
    }

    #[tokio::test]
    async fn unreachable_server_is_a_record_not_a_panic() {
        // port 9 on loopback: nothing listens (connection refused at once)
        let spec = CompletionSpec {
            url: "http://127.0.0.1:9".into(),
            model: "m".into(),
            prompt: "p".into(),
            max_tokens: 4,
            ignore_eos: false,
            timeout: Duration::from_secs(5),
        };
        let mut rec = TraceRecord::default();
        run(&reqwest::Client::new(), &Clock::new(), &spec, &mut rec).await;
        assert!(rec.error.unwrap().contains("request failed"));
        assert!(rec.ended_mono >= rec.started_mono);
    }
}
