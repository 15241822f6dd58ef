//! The one SSE client: a streaming chat completion against any OpenAI-compatible server, turned
//! into a `TraceRecord` with the counting rules and hard checks of MEASUREMENTS.md §1. Works with
//! servers whose chunks carry `n_tokens` (moefleet) and with those that don't (llama.cpp), and with
//! usage in a final chunk whose `choices` is empty.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use serde_json::{json, Value};

use crate::trace::TraceRecord;

/// The run's clocks: epoch seconds and seconds on a monotonic clock from one origin.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    origin: Instant,
    origin_epoch: f64,
}

impl Clock {
    pub fn new() -> Self {
        Clock {
            origin: Instant::now(),
            origin_epoch: epoch(),
        }
    }

    /// (epoch, monotonic) now.
    pub fn now(&self) -> (f64, f64) {
        (epoch(), self.origin.elapsed().as_secs_f64())
    }

    /// The clock of a run that started at `origin_epoch` (a resumed sweep keeps its time base;
    /// monotonic from here on, bridged by the wall clock across the interruption).
    pub fn resumed(origin_epoch: f64) -> Self {
        let since = (epoch() - origin_epoch).max(0.0);
        let now = Instant::now();
        let origin = now
            .checked_sub(std::time::Duration::from_secs_f64(since))
            .unwrap_or(now);
        Clock {
            origin,
            origin_epoch,
        }
    }

    pub fn origin_epoch(&self) -> f64 {
        self.origin_epoch
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

pub fn epoch() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// How a request ended, beyond its record.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    Ok,
    /// Not an at-capacity 503: the sweep must stop.
    Fatal(String),
}

/// The HTTP client the harness's requests go through: a fresh connection per request (no idle
/// pool). llama-server closes the connection after a streamed answer without saying so, and the
/// next request sent on it fails before the server reads it (found by harness/tests/real_server.rs
/// with two requests back to back). A loopback connection costs about a tenth of a millisecond,
/// inside the request's TTFT as for any new client.
pub fn http_client() -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .connect_timeout(Duration::from_secs(10))
        .tcp_nodelay(true)
        .build()
}

/// GET `url` as JSON within `timeout`; None on any failure (a server without `/api/stats` or
/// `/api/profile` is a normal case). The sweep and the context scan both read through it.
pub async fn get_json(http: &reqwest::Client, url: &str, timeout: Duration) -> Option<Value> {
    let r = http.get(url).timeout(timeout).send().await.ok()?;
    if !r.status().is_success() {
        return None;
    }
    r.json().await.ok()
}

/// What to send.
#[derive(Clone, Debug)]
pub struct RequestSpec {
    pub url: String,
    pub model: String,
    pub prompt: String,
    pub max_tokens: usize,
    pub ignore_eos: bool,
    /// Index used to spread retry back-off (`j % 5`).
    pub j: usize,
    /// Ask moefleet to capture the stream (`moefleet_capture`; sent only when true).
    pub capture: bool,
    /// Earlier turns of the conversation, (user, assistant) in order, sent before `prompt`.
    pub history: Vec<(String, String)>,
}

/// The (role, content) turns of `spec`: its earlier turns, then its prompt.
pub fn turns(spec: &RequestSpec) -> Vec<(String, String)> {
    let mut t = Vec::with_capacity(2 * spec.history.len() + 1);
    for (user, assistant) in &spec.history {
        t.push(("user".to_string(), user.clone()));
        t.push(("assistant".to_string(), assistant.clone()));
    }
    t.push(("user".to_string(), spec.prompt.clone()));
    t
}

/// The chat messages of `spec` (its [`turns`]), as sent.
pub fn messages(spec: &RequestSpec) -> Value {
    let m = turns(spec)
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    Value::Array(m)
}

/// Is this 503 body the server saying it is at capacity (retry) rather than broken (stop)?
pub fn is_capacity(body: &str) -> bool {
    let b = body.to_ascii_lowercase();
    b.contains("capacity")
        || b.contains("queue is full")
        || b.contains("queue full")
        || b.contains("no slot")
}

/// Back-off before capacity retry `retries` (0-based) of request j (MEASUREMENTS.md §2.2).
pub fn backoff_s(retries: u32, j: usize) -> f64 {
    (0.5 + 0.25 * retries as f64).min(5.0) * (0.9 + (j % 5) as f64 * 0.05)
}

/// Tokens a chunk counts (MEASUREMENTS.md §1): `n_tokens` where the server provides it, otherwise
/// 1 if it carries generated text (`delta.content` or `text`) and 0 if it is structural — a
/// role-only opener (llama-server's `"content":null`, the OpenAI API's and vLLM's `"content":""`),
/// an empty delta, a finish chunk. Chunks with no choices (usage only) carry none. A token that
/// decoded to no text is not guessed at here: it shows up against `usage` in [`check`].
pub fn chunk_tokens(chunk: &Value) -> (u32, Option<String>, String) {
    let Some(choice) = chunk
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
    else {
        return (0, None, String::new());
    };
    let text = choice
        .get("delta")
        .and_then(|d| d.get("content"))
        .or_else(|| choice.get("text"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let finish = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(str::to_string);
    let n = match chunk.get("n_tokens").and_then(Value::as_u64) {
        Some(n) => n as u32,
        None => u32::from(!text.is_empty()),
    };
    (n, finish, text)
}

/// Fold one SSE data object into the record: usage, moefleet's own fields, and for a chunk with
/// choices its text, finish reason and counted event at (epoch `t`, monotonic `tm`). An `error`
/// object in the stream is returned as the request's error.
pub fn absorb(v: &Value, rec: &mut TraceRecord, t: f64, tm: f64) -> Result<(), String> {
    if let Some(err) = v.get("error") {
        return Err(format!("server error in stream: {err}"));
    }
    if let Some(x) = v.get("moefleet").filter(|x| !x.is_null()) {
        rec.server_extra = Some(x.clone());
    } else if let Some(x) = v.get("timings").filter(|x| x.is_object()) {
        // llama-server's own counters (its speculation's draft_n and draft_n_accepted among them)
        rec.server_extra = Some(serde_json::json!({ "timings": x }));
    }
    if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
        rec.usage = Some(u.clone());
        rec.prompt_tokens = u.get("prompt_tokens").and_then(Value::as_u64);
    }
    let has_choices = v
        .get("choices")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    if has_choices {
        let (n, finish, piece_text) = chunk_tokens(v);
        rec.text.push_str(&piece_text);
        if finish.is_some() {
            rec.finish_reason = finish;
        }
        rec.events.push((t, n));
        rec.events_mono.push((tm, n));
    }
    Ok(())
}

/// Send one streaming chat completion, retrying at-capacity 503s; fill `rec`.
pub async fn run(
    client: &reqwest::Client,
    clock: &Clock,
    spec: &RequestSpec,
    rec: &mut TraceRecord,
) -> Outcome {
    let mut body = json!({
        "model": spec.model,
        "messages": messages(spec),
        "max_tokens": spec.max_tokens,
        "temperature": 0,
        "stream": true,
        "stream_options": {"include_usage": true},
        "ignore_eos": spec.ignore_eos,
    });
    if spec.capture {
        body["moefleet_capture"] = json!(true);
    }
    let (t, tm) = clock.now();
    rec.started = t;
    rec.started_mono = tm;
    rec.prompt = spec.prompt.clone();
    rec.max_tokens = spec.max_tokens;
    let url = format!("{}/v1/chat/completions", spec.url.trim_end_matches('/'));
    let resp = loop {
        let r = match client.post(&url).json(&body).send().await {
            Ok(r) => r,
            Err(e) => return fail(clock, rec, format!("request failed: {e}"), true),
        };
        if r.status().as_u16() == 503 {
            let text = r.text().await.unwrap_or_default();
            if is_capacity(&text) {
                let wait = backoff_s(rec.capacity_retries, spec.j);
                rec.capacity_retries += 1;
                tokio::time::sleep(Duration::from_secs_f64(wait)).await;
                continue;
            }
            return fail(clock, rec, format!("HTTP 503: {}", text.trim()), true);
        }
        if !r.status().is_success() {
            let code = r.status();
            let text = r.text().await.unwrap_or_default();
            return fail(clock, rec, format!("HTTP {code}: {}", text.trim()), true);
        }
        break r;
    };
    let read = read_stream(resp, clock, rec).await;
    let (t, tm) = clock.now();
    rec.ended = t;
    rec.ended_mono = tm;
    // hard checks
    match read.err().or_else(|| check(rec)) {
        Some(p) => fail(clock, rec, p, false),
        None => Outcome::Ok,
    }
}

/// Read a streamed answer into `rec` up to `[DONE]`: every complete event's `data:` JSON folded in
/// by [`absorb`] at the time its bytes arrived. The one SSE reader of the harness (the sweep's chat
/// client and the context scan's completions client). Err names what broke: the stream, bad data,
/// or an end without `[DONE]`.
pub async fn read_stream(
    resp: reqwest::Response,
    clock: &Clock,
    rec: &mut TraceRecord,
) -> Result<(), String> {
    let mut stream = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    while let Some(piece) = stream.next().await {
        let piece = piece.map_err(|e| format!("stream broke: {e}"))?;
        let (t, tm) = clock.now();
        buf.extend_from_slice(&piece);
        // complete events end with a blank line
        while let Some((text_end, event_end)) = find_event_end(&buf) {
            let event: Vec<u8> = buf.drain(..event_end).collect();
            let text = String::from_utf8_lossy(&event[..text_end]);
            for data in text.lines().filter_map(|l| l.strip_prefix("data:")) {
                let data = data.trim();
                if data == "[DONE]" {
                    return Ok(());
                }
                let v: Value = serde_json::from_str(data)
                    .map_err(|e| format!("bad SSE data ({e}): {data}"))?;
                absorb(&v, rec, t, tm)?;
            }
        }
    }
    Err("the stream ended without [DONE]".to_string())
}

/// (end of the event's text, end including the separator) of the first complete event.
fn find_event_end(buf: &[u8]) -> Option<(usize, usize)> {
    for i in 0..buf.len() {
        if buf[i..].starts_with(b"\n\n") {
            return Some((i, i + 2));
        }
        if buf[i..].starts_with(b"\r\n\r\n") {
            return Some((i, i + 4));
        }
    }
    None
}

fn fail(clock: &Clock, rec: &mut TraceRecord, msg: String, fatal: bool) -> Outcome {
    let (t, tm) = clock.now();
    rec.ended = t;
    rec.ended_mono = tm;
    rec.error = Some(msg.clone());
    if fatal {
        Outcome::Fatal(msg)
    } else {
        Outcome::Ok
    }
}

/// The hard checks of MEASUREMENTS.md §1 on a finished stream (the `[DONE]` check is made while
/// reading): at least one event, and the counted tokens equal to usage's. A server that sent no
/// usage cannot be checked: the record says so (`usage_check`), and that is not an error. One
/// token more in usage on a stream that finished with `stop` is its end-of-text token, which
/// llama-server counts but cannot stream as text; on a stream cut at `length` it is a last token
/// whose text the server held back, an incomplete UTF-8 character that the next token would have
/// finished (llama-server sends only whole characters; its streams end with its `timings`), provided
/// no chunk between the first token and the last counted nothing (such a chunk is where a token
/// without text went). Either is counted on the last chunk and
/// the record says so. Any other mismatch is an error naming the chunks that counted nothing,
/// where a token that decoded to no text would be.
pub fn check(rec: &mut TraceRecord) -> Option<String> {
    if rec.events.is_empty() {
        return Some("no events".to_string());
    }
    let Some(usage) = rec.completion_tokens() else {
        rec.usage_check = Some(if rec.usage.is_some() {
            "unchecked: usage has no completion_tokens".to_string()
        } else {
            "unchecked: the server sent no usage".to_string()
        });
        return None;
    };
    if usage == rec.tokens() {
        return None;
    }
    // a chunk that counted nothing between the first token and the last chunk: where a token
    // that decoded to no text went (so not a token held back at the end)
    let first = rec.events_mono.iter().position(|e| e.1 > 0);
    let last = rec.events_mono.len().saturating_sub(1);
    let interior_silent = first.is_some_and(|f| rec.events_mono[f..last].iter().any(|e| e.1 == 0));
    // llama-server's streams end with its `timings`; a server that counts its own tokens per
    // chunk (ours) has no character to hold back
    let llama_server = rec
        .server_extra
        .as_ref()
        .is_some_and(|x| x.get("timings").is_some());
    let unseen = match rec.finish_reason.as_deref() {
        Some("stop") => Some("stop: usage counts the end-of-text token"),
        Some("length") if llama_server && !interior_silent => {
            Some("length: usage counts a last token whose text was held back")
        }
        _ => None,
    };
    if let (Some(why), true) = (unseen, usage == rec.tokens() + 1) {
        // generated and counted in usage, but with no text to stream: it arrived with the
        // stream's last chunk, where it is counted
        for events in [&mut rec.events, &mut rec.events_mono] {
            if let Some(last) = events.last_mut() {
                last.1 += 1;
            }
        }
        rec.usage_check = Some(format!("{why}, counted on the last chunk"));
        return None;
    }
    let silent: Vec<usize> = (rec.events_mono.iter().enumerate())
        .filter(|(_, e)| e.1 == 0)
        .map(|(i, _)| i)
        .collect();
    Some(format!(
        "counted {} tokens, usage says {usage}; {} of {} chunks counted none (chunks {:?}): a \
         difference of {} token(s) the stream did not show as text",
        rec.tokens(),
        silent.len(),
        rec.events_mono.len(),
        silent,
        usage as i64 - rec.tokens() as i64,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counting_rules() {
        // moefleet chunk with n_tokens
        assert_eq!(chunk_tokens(&json!({"choices": [{"delta": {"content": "ab"}, "finish_reason": null}], "n_tokens": 2})).0, 2);
        // llama.cpp chunk: no n_tokens -> 1
        assert_eq!(
            chunk_tokens(
                &json!({"choices": [{"delta": {"content": "ab"}, "finish_reason": null}]})
            )
            .0,
            1
        );
        // role-only openers (llama-server, OpenAI/vLLM) and an empty delta are structural
        for opener in [
            json!({"choices": [{"delta": {"role": "assistant", "content": null}, "finish_reason": null}]}),
            json!({"choices": [{"delta": {"role": "assistant", "content": ""}, "finish_reason": null}]}),
            json!({"choices": [{"delta": {}, "finish_reason": null}]}),
        ] {
            assert_eq!(chunk_tokens(&opener).0, 0, "{opener}");
        }
        // ... unless the server says otherwise
        assert_eq!(
            chunk_tokens(
                &json!({"choices": [{"delta": {}, "finish_reason": null}], "n_tokens": 1})
            )
            .0,
            1
        );
        // final chunk: empty text with finish_reason counts 0
        assert_eq!(
            chunk_tokens(
                &json!({"choices": [{"delta": {}, "finish_reason": "length"}], "n_tokens": 0})
            )
            .0,
            0
        );
        // text with finish_reason counts (the completions endpoint)
        assert_eq!(
            chunk_tokens(&json!({"choices": [{"text": "x", "finish_reason": "stop"}]})).0,
            1
        );
        // usage-only chunk
        assert_eq!(
            chunk_tokens(&json!({"choices": [], "usage": {"completion_tokens": 3}})).0,
            0
        );
    }

    #[test]
    fn checks_name_silent_chunks_and_unchecked_usage() {
        let mut r = TraceRecord {
            usage: Some(json!({"completion_tokens": 3})),
            events: vec![(1.0, 0), (2.0, 1), (3.0, 0), (4.0, 1)],
            events_mono: vec![(1.0, 0), (2.0, 1), (3.0, 0), (4.0, 1)],
            ..Default::default()
        };
        let e = check(&mut r).unwrap();
        assert!(e.contains("counted 2 tokens, usage says 3"), "{e}");
        assert!(e.contains("chunks [0, 2]"), "{e}");
        r.usage = None;
        assert_eq!(check(&mut r), None);
        assert_eq!(
            r.usage_check.as_deref(),
            Some("unchecked: the server sent no usage")
        );
        // one token short at `length`: a last token whose text was held back, counted on the
        // last chunk when llama-server sent it, unless a chunk between counted nothing (the token
        // went there); at `stop`, the end-of-text token; with no finish reason, an error
        r.usage = Some(json!({"completion_tokens": 3}));
        let plain = vec![(1.0, 0), (2.0, 1), (4.0, 1)];
        let llama = Some(json!({"timings": {"predicted_n": 3}}));
        let cases = [
            (Some("length"), plain.clone(), llama.clone(), true),
            (Some("length"), plain.clone(), None, false),
            (Some("length"), r.events_mono.clone(), llama.clone(), false),
            (Some("stop"), plain.clone(), None, true),
            (None, plain, llama, false),
        ];
        for (reason, events, extra, ok) in cases {
            let mut r = r.clone();
            (r.events, r.events_mono, r.server_extra) = (events.clone(), events, extra);
            r.finish_reason = reason.map(str::to_string);
            assert_eq!(check(&mut r).is_none(), ok, "{reason:?}");
            if ok {
                assert_eq!(r.tokens(), 3);
                assert_eq!(r.events_mono.last(), Some(&(4.0, 2)));
                assert!(r.usage_check.unwrap().contains("counted on the last chunk"));
            }
        }
        r.events.clear();
        assert_eq!(check(&mut r).as_deref(), Some("no events"));
    }

    #[test]
    fn backoff_follows_the_schedule() {
        assert!((backoff_s(0, 0) - 0.45).abs() < 1e-12);
        assert!((backoff_s(2, 4) - 1.0 * 1.1).abs() < 1e-12);
        assert!((backoff_s(100, 1) - 5.0 * 0.95).abs() < 1e-12);
        assert!(is_capacity(
            "the engine is at capacity: all 176 stream slots"
        ));
        assert!(!is_capacity("the fleet is unavailable: role 3 failed"));
    }

    #[test]
    fn event_boundaries() {
        assert_eq!(find_event_end(b"data: x\n\ndata: y"), Some((7, 9)));
        assert_eq!(find_event_end(b"data: x\r\n\r\n"), Some((7, 11)));
        assert_eq!(find_event_end(b"data: x\n"), None);
        assert_eq!(find_event_end(b": keep-alive\r\n\r\n"), Some((12, 16)));
    }
}
