//! The OpenAI-compatible HTTP API of role 0 (ARCHITECTURE.md §3.5). Handlers validate, reserve
//! admission room, submit to the engine thread's inbox and relay the request's events; they never
//! touch model state.

pub mod detok;
pub mod error;
pub mod request;
pub mod stop;

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::stream::{self, Stream};
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::pipeline::ingress::{FinishReason, GenEvent, GenRequest, Inbox};
use crate::pipeline::stats::FleetStats;
use crate::tokenizer::TextTokenizer;
use detok::Detok;
use error::ApiError;
use request::{Limits, Parsed};
use stop::StopText;

/// What every handler shares.
pub struct AppState {
    pub inbox: std::sync::Mutex<std::sync::mpsc::Sender<Inbox>>,
    pub stats: Arc<FleetStats>,
    pub tokenizer: Arc<TextTokenizer>,
    pub model: String,
    pub limits: Limits,
    pub queue_capacity: u64,
    pub n_slots: u64,
    pub stop_token: Option<u32>,
    pub capture: CaptureMode,
    pub body_limit: usize,
    pub accept_any_model: bool,
    pub api_key: Option<String>,
}

/// Which requests the last role captures (ARCHITECTURE.md §3.4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CaptureMode {
    /// No capture directory: a request asking for a capture gets a 400.
    #[default]
    Off,
    /// Only requests with `"moefleet_capture": true`.
    Requested,
    /// Every request.
    All,
}

/// Operator choices of the HTTP front.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub host: String,
    pub port: u16,
    pub queue: usize,
    pub max_tokens: usize,
    pub capture: CaptureMode,
    /// Largest request body in bytes (larger: 413).
    pub body_limit: usize,
    /// Serve requests naming any model (as llama.cpp does) instead of answering 404.
    pub accept_any_model: bool,
    /// Bearer token every route but /health and /metrics requires.
    pub api_key: Option<String>,
}

/// `Retry-After` seconds while the fleet starts or recovers.
const RETRY_WHILE_RECOVERING: u64 = 2;

/// The default `--max-body`: 8 MiB, room for a 512k-position prompt sent as token ids.
pub const DEFAULT_BODY_LIMIT: usize = 8 << 20;

/// Bind the HTTP port, start the fleet with `start`, serve until Ctrl-C (or `shutdown` resolves),
/// then stop every role.
pub async fn run<F, Fut>(
    sc: ServeConfig,
    tokenizer: Arc<TextTokenizer>,
    n_slots: usize,
    budget: usize,
    start: F,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<crate::pipeline::fleet::Fleet>>,
{
    let listener = tokio::net::TcpListener::bind((sc.host.as_str(), sc.port))
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}:{}: {e}", sc.host, sc.port))?;
    let addr = listener.local_addr()?;
    if !addr.ip().is_loopback() && sc.api_key.is_none() {
        eprintln!(
            "moefleet: warning: listening on {addr}, beyond this machine, without --api-key: \
             anyone who can reach it can use it"
        );
    }
    let fleet = start().await?;
    if tokenizer.vocab_size() > fleet.config.vocab_size {
        anyhow::bail!(
            "tokenizer vocabulary {} exceeds the model's {}",
            tokenizer.vocab_size(),
            fleet.config.vocab_size
        );
    }
    let state = Arc::new(AppState {
        inbox: std::sync::Mutex::new(fleet.inbox.clone()),
        stats: fleet.stats.clone(),
        stop_token: tokenizer.end_of_text(),
        tokenizer,
        model: fleet.config.name.clone(),
        limits: Limits {
            budget,
            max_tokens: sc.max_tokens,
            vocab: fleet.config.vocab_size,
        },
        queue_capacity: sc.queue as u64,
        n_slots: n_slots as u64,
        capture: sc.capture,
        body_limit: sc.body_limit,
        accept_any_model: sc.accept_any_model,
        api_key: sc.api_key,
    });
    // say once when the readiness probe has passed
    let st = state.stats.clone();
    tokio::spawn(async move {
        for _ in 0..36_000 {
            if st.ready.load(Ordering::Relaxed) {
                tracing::info!("fleet ready: every role answered the readiness probe");
                return;
            }
            if st.failure().is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    eprintln!("moefleet: serving {} on http://{addr}", state.model);
    // TCP_NODELAY: each SSE chunk is a small write; Nagle plus delayed ACKs would hold it ~40 ms
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!("cannot set TCP_NODELAY on an HTTP connection: {e}");
        }
    });
    let served = axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await;
    tokio::task::spawn_blocking(move || fleet.shutdown()).await?;
    served.map_err(|e| anyhow::anyhow!("http server: {e}"))
}

pub fn router(state: Arc<AppState>) -> Router {
    let keyed = Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route("/api/stats", get(stats))
        .route("/api/profile", get(profile))
        .route("/api/phrases/save", post(save_phrases))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            authorize,
        ));
    Router::new()
        .merge(keyed)
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// With `--api-key`: the request must carry `Authorization: Bearer KEY` (401 otherwise).
async fn authorize(State(s): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(key) = &s.api_key {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        if !same_key(given.as_bytes(), key.as_bytes()) {
            return ApiError::unauthorized(
                "missing or wrong API key: send 'Authorization: Bearer KEY' with the server's --api-key",
            )
            .into_response();
        }
    }
    next.run(req).await
}

/// Compare a presented key with the server's in time that depends only on the server key's
/// length, never on where the first difference is.
fn same_key(given: &[u8], want: &[u8]) -> bool {
    let mut diff = u8::from(given.len() != want.len());
    for (i, w) in want.iter().enumerate() {
        diff |= w ^ given.get(i).copied().unwrap_or(0);
    }
    std::hint::black_box(diff) == 0
}

/// The bytes a body may have past the limit that are still read (and dropped), so that the client,
/// which is still sending, reads the 413 instead of a reset connection.
const DRAIN_BEYOND_LIMIT: usize = 64 << 20;

/// Read a request body of at most `limit` bytes (a larger one: 413 naming the limit).
async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, ApiError> {
    use futures_util::StreamExt;
    let too_large = |n: &str| {
        ApiError::too_large(format!(
            "the request body of {n} bytes exceeds this server's limit of {limit} bytes (--max-body)"
        ))
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if let Some(n) = declared.filter(|&n| n > limit + DRAIN_BEYOND_LIMIT) {
        return Err(too_large(&n.to_string()));
    }
    let mut data = Vec::new();
    let mut seen = 0usize;
    let mut chunks = body.into_data_stream();
    while let Some(c) = chunks.next().await {
        let c = c.map_err(|e| ApiError::bad(format!("reading the request body: {e}")))?;
        seen += c.len();
        if seen <= limit {
            data.extend_from_slice(&c);
        } else if seen > limit + DRAIN_BEYOND_LIMIT {
            return Err(too_large(&format!("over {seen}")));
        }
    }
    if seen > limit {
        return Err(too_large(&seen.to_string()));
    }
    Ok(Bytes::from(data))
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Completion,
    Chat,
}

async fn completions(State(s): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let parsed = match read_body(&headers, body, s.body_limit).await {
        Ok(b) => request::completion(&b, &s.tokenizer, &s.limits),
        Err(e) => Err(e),
    };
    generate(s, parsed, Kind::Completion).await
}

async fn chat_completions(
    State(s): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let parsed = match read_body(&headers, body, s.body_limit).await {
        Ok(b) => request::chat(&b, &s.tokenizer, &s.limits),
        Err(e) => Err(e),
    };
    generate(s, parsed, Kind::Chat).await
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

async fn generate(s: Arc<AppState>, parsed: Result<Parsed, ApiError>, kind: Kind) -> Response {
    let p = match parsed {
        Ok(p) => p,
        Err(e) => {
            s.stats.invalid_total.fetch_add(1, Ordering::Relaxed);
            return e.into_response();
        }
    };
    if let Some(m) = p.model.as_deref().filter(|m| *m != s.model) {
        if !s.accept_any_model {
            s.stats.invalid_total.fetch_add(1, Ordering::Relaxed);
            return ApiError::no_model(format!(
                "the model '{m}' does not exist: this server serves '{}' (GET /v1/models; \
                 start it with --accept-any-model to serve any name)",
                s.model
            ))
            .into_response();
        }
    }
    if p.capture && s.capture == CaptureMode::Off {
        s.stats.invalid_total.fetch_add(1, Ordering::Relaxed);
        return ApiError::bad("'moefleet_capture' needs a server started with --capture-dir DIR")
            .into_response();
    }
    if let Some(f) = s.stats.failure() {
        return ApiError::unavailable(format!("the fleet is unavailable: {f}")).into_response();
    }
    if let Some(why) = s.stats.recovering() {
        return ApiError::retry(
            format!("the fleet is recovering from a failure ({why}); retry shortly"),
            RETRY_WHILE_RECOVERING,
        )
        .into_response();
    }
    if !s.stats.ready.load(Ordering::Relaxed) {
        return ApiError::retry(
            "the fleet is not ready yet (readiness probe pending)",
            RETRY_WHILE_RECOVERING,
        )
        .into_response();
    }
    s.stats.requests_total.fetch_add(1, Ordering::Relaxed);
    if !s.stats.try_reserve(s.n_slots + s.queue_capacity) {
        s.stats.rejected_total.fetch_add(1, Ordering::Relaxed);
        return ApiError::retry(format!(
            "the engine is at capacity: all {} stream slots and the admission queue of {} are full; retry later",
            s.n_slots, s.queue_capacity
        ), 1)
        .into_response();
    }
    let (tx, rx) = unbounded_channel();
    let req = GenRequest {
        prompt: p.prompt.clone(),
        max_tokens: p.max_tokens,
        stop_token: if p.ignore_eos { None } else { s.stop_token },
        capture: p.capture || s.capture == CaptureMode::All,
        sampling: p.sampling,
        events: tx,
    };
    let sent = s
        .inbox
        .lock()
        .map(|ib| ib.send(Inbox::Submit(req)).is_ok())
        .unwrap_or(false);
    if !sent {
        s.stats.pending.fetch_sub(1, Ordering::Relaxed);
        return ApiError::unavailable("the engine has stopped").into_response();
    }
    let id = format!(
        "{}-{:x}",
        if kind == Kind::Chat {
            "chatcmpl"
        } else {
            "cmpl"
        },
        rand_id()
    );
    if p.stream {
        let stream = sse_stream(s.clone(), rx, p, kind, id);
        Sse::new(stream)
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
            .into_response()
    } else {
        whole(s, rx, p, kind, id).await
    }
}

fn rand_id() -> u64 {
    use std::sync::atomic::AtomicU64;
    static N: AtomicU64 = AtomicU64::new(0);
    crate::rng::mix64(
        N.fetch_add(1, Ordering::Relaxed)
            ^ SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0),
    )
}

fn reason_str(r: FinishReason) -> &'static str {
    match r {
        FinishReason::Length => "length",
        FinishReason::Stop => "stop",
    }
}

/// One SSE chunk in the endpoint's shape.
fn chunk(
    s: &AppState,
    kind: Kind,
    id: &str,
    text: &str,
    n_tokens: usize,
    finish: Option<&str>,
    first: bool,
    extra: Option<Value>,
) -> Value {
    let choice = match kind {
        Kind::Completion => {
            json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish})
        }
        Kind::Chat => {
            let delta = if finish.is_some() && text.is_empty() {
                json!({})
            } else if first {
                json!({"role": "assistant", "content": text})
            } else {
                json!({"content": text})
            };
            json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
        }
    };
    let object = if kind == Kind::Chat {
        "chat.completion.chunk"
    } else {
        "text_completion"
    };
    let mut v = json!({"id": id, "object": object, "created": now_s(), "model": s.model, "choices": [choice], "n_tokens": n_tokens});
    if let Some(e) = extra {
        v["moefleet"] = e;
    }
    v
}

/// moefleet's own fields of a finished stream: where its capture went, what speculation did.
fn moefleet_extra(
    capture: Option<crate::pipeline::ingress::CaptureFile>,
    speculation: Option<crate::pipeline::ingress::SpecSummary>,
) -> Option<Value> {
    let mut m = serde_json::Map::new();
    if let Some(c) = capture {
        m.insert("capture".into(), json!(c));
    }
    if let Some(s) = speculation {
        m.insert("speculation".into(), json!(s));
    }
    (!m.is_empty()).then_some(Value::Object(m))
}

fn usage(prompt: usize, completion: usize) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

struct SseState {
    s: Arc<AppState>,
    rx: UnboundedReceiver<GenEvent>,
    p: Parsed,
    kind: Kind,
    id: String,
    detok: Detok,
    stop: StopText,
    /// Tokens received so far.
    tokens: usize,
    first: bool,
    pending: Vec<Value>,
    done: bool,
}

/// The final chunk (with `tail` and the finish reason), the usage chunk when asked, `[DONE]`.
fn end_stream(
    st: &mut SseState,
    tail: &str,
    reason: FinishReason,
    prompt_tokens: usize,
    extra: Option<Value>,
) {
    st.pending.push(chunk(
        &st.s,
        st.kind,
        &st.id,
        tail,
        0,
        Some(reason_str(reason)),
        st.first,
        extra,
    ));
    if st.p.include_usage {
        let object = if st.kind == Kind::Chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        };
        st.pending.push(
            json!({"id": st.id, "object": object, "created": now_s(), "model": st.s.model,
            "choices": [], "usage": usage(prompt_tokens, st.tokens)}),
        );
    }
    st.pending.push(Value::String("[DONE]".into()));
    st.done = true;
}

fn sse_stream(
    s: Arc<AppState>,
    rx: UnboundedReceiver<GenEvent>,
    p: Parsed,
    kind: Kind,
    id: String,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let stop = StopText::new(p.stop.clone());
    let st = SseState {
        s,
        rx,
        p,
        kind,
        id,
        detok: Detok::new(),
        stop,
        tokens: 0,
        first: true,
        pending: Vec::new(),
        done: false,
    };
    stream::unfold(st, |mut st| async move {
        loop {
            if !st.pending.is_empty() {
                let v = st.pending.remove(0);
                let ev = match v {
                    Value::String(s) if s == "[DONE]" => Event::default().data("[DONE]"),
                    v => Event::default().data(v.to_string()),
                };
                return Some((Ok(ev), st));
            }
            if st.done {
                return None;
            }
            match st.rx.recv().await {
                Some(GenEvent::Token { id, logit, hash }) => {
                    let piece = st.detok.push(&st.s.tokenizer, id);
                    let text = st.stop.push(&piece);
                    st.tokens += 1;
                    let extra = st.p.debug.then(|| json!({"token_id": id, "logit": logit, "logits_hash": format!("{hash:016x}")}));
                    let c = chunk(&st.s, st.kind, &st.id, &text, 1, None, st.first, extra);
                    st.first = false;
                    st.pending.push(c);
                    if st.stop.hit {
                        // the rest is never sent; dropping the events ends the stream's slot
                        let prompt = st.p.prompt.len();
                        end_stream(&mut st, "", FinishReason::Stop, prompt, None);
                    }
                }
                Some(GenEvent::Done {
                    reason,
                    prompt_tokens,
                    completion_tokens,
                    capture,
                    speculation,
                }) => {
                    let piece = st.detok.finish(&st.s.tokenizer);
                    let mut tail = st.stop.push(&piece);
                    let reason = if st.stop.hit {
                        FinishReason::Stop
                    } else {
                        tail.push_str(&st.stop.finish());
                        reason
                    };
                    st.tokens = completion_tokens;
                    let extra = moefleet_extra(capture, speculation);
                    end_stream(&mut st, &tail, reason, prompt_tokens, extra);
                }
                Some(GenEvent::Error(m)) => {
                    st.pending.push(ApiError::internal(m).body());
                    st.done = true;
                }
                None => {
                    st.pending
                        .push(ApiError::internal("the engine dropped the request").body());
                    st.done = true;
                }
            }
        }
    })
}

async fn whole(
    s: Arc<AppState>,
    mut rx: UnboundedReceiver<GenEvent>,
    p: Parsed,
    kind: Kind,
    id: String,
) -> Response {
    let mut ids = Vec::new();
    let mut hashes = Vec::new();
    // with stop sequences the text is built piece by piece, to end at the first one
    let (mut detok, mut stop, mut said) =
        (Detok::new(), StopText::new(p.stop.clone()), String::new());
    loop {
        let event = match rx.recv().await {
            Some(GenEvent::Token { id, hash, .. }) if !p.stop.is_empty() => {
                ids.push(id);
                hashes.push(format!("{hash:016x}"));
                said.push_str(&stop.push(&detok.push(&s.tokenizer, id)));
                if !stop.hit {
                    continue;
                }
                rx.close(); // the rest is never sent; the engine frees the slot
                Some(GenEvent::Done {
                    reason: FinishReason::Stop,
                    prompt_tokens: p.prompt.len(),
                    completion_tokens: ids.len(),
                    capture: None,
                    speculation: None,
                })
            }
            e => e,
        };
        match event {
            Some(GenEvent::Token { id, hash, .. }) => {
                ids.push(id);
                hashes.push(format!("{hash:016x}"));
            }
            Some(GenEvent::Done {
                reason,
                prompt_tokens,
                completion_tokens,
                capture,
                speculation,
            }) => {
                let (text, reason) = if p.stop.is_empty() {
                    (s.tokenizer.decode(&ids).unwrap_or_default(), reason)
                } else if stop.hit {
                    (said, FinishReason::Stop)
                } else {
                    said.push_str(&stop.push(&detok.finish(&s.tokenizer)));
                    if !stop.hit {
                        said.push_str(&stop.finish());
                    }
                    let r = if stop.hit { FinishReason::Stop } else { reason };
                    (said, r)
                };
                let choice = match kind {
                    Kind::Completion => {
                        json!({"index": 0, "text": text, "logprobs": null, "finish_reason": reason_str(reason)})
                    }
                    Kind::Chat => {
                        json!({"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": null, "finish_reason": reason_str(reason)})
                    }
                };
                let object = if kind == Kind::Chat {
                    "chat.completion"
                } else {
                    "text_completion"
                };
                let mut v = json!({"id": id, "object": object, "created": now_s(), "model": s.model, "choices": [choice],
                    "usage": usage(prompt_tokens, completion_tokens)});
                if p.debug {
                    v["moefleet"] = json!({"token_ids": ids, "logits_hash": hashes});
                }
                if let Some(Value::Object(extra)) = moefleet_extra(capture, speculation) {
                    for (k, x) in extra {
                        v["moefleet"][k] = x;
                    }
                }
                return Json(v).into_response();
            }
            Some(GenEvent::Error(m)) => return ApiError::internal(m).into_response(),
            None => return ApiError::internal("the engine dropped the request").into_response(),
        }
    }
}

async fn models(State(s): State<Arc<AppState>>) -> Json<Value> {
    Json(
        json!({"object": "list", "data": [{"id": s.model, "object": "model", "created": 0, "owned_by": "moefleet"}]}),
    )
}

async fn health(State(s): State<Arc<AppState>>) -> Response {
    if let Some(f) = s.stats.failure() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "failed", "error": f})),
        )
            .into_response();
    }
    if let Some(why) = s.stats.recovering() {
        let mut r = (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "recovering", "error": why})),
        )
            .into_response();
        r.headers_mut()
            .insert(header::RETRY_AFTER, RETRY_WHILE_RECOVERING.into());
        return r;
    }
    if s.stats.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, Json(json!({"status": "ready"}))).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "starting"})),
        )
            .into_response()
    }
}

async fn stats(State(s): State<Arc<AppState>>) -> Json<Value> {
    Json(serde_json::to_value(s.stats.snapshot(s.queue_capacity)).unwrap_or_default())
}

async fn metrics(State(s): State<Arc<AppState>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.stats.prometheus(s.queue_capacity, &s.model),
    )
        .into_response()
}

/// Ask the engine thread something and wait for its answer, at most `limit`; `what` names the
/// question in the timeout's error.
async fn ask<T>(
    s: &AppState,
    make: impl FnOnce(tokio::sync::oneshot::Sender<T>) -> Inbox,
    limit: Duration,
    what: &str,
) -> Result<T, Response> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let sent = s
        .inbox
        .lock()
        .map(|ib| ib.send(make(tx)).is_ok())
        .unwrap_or(false);
    if !sent {
        return Err(ApiError::unavailable("the engine has stopped").into_response());
    }
    match tokio::time::timeout(limit, rx).await {
        Ok(Ok(v)) => Ok(v),
        _ => Err(ApiError::unavailable(format!("{what} timed out")).into_response()),
    }
}

/// Save the phrase table to its file now (it is also saved on shutdown).
async fn save_phrases(State(s): State<Arc<AppState>>) -> Response {
    match ask(
        &s,
        Inbox::SavePhrases,
        Duration::from_secs(30),
        "saving the phrase table",
    )
    .await
    {
        Ok(Ok(what)) => Json(json!({"saved": what})).into_response(),
        Ok(Err(why)) => ApiError::bad(why).into_response(),
        Err(r) => r,
    }
}

async fn profile(State(s): State<Arc<AppState>>) -> Response {
    match ask(
        &s,
        Inbox::Profile,
        Duration::from_secs(5),
        "the profile request",
    )
    .await
    {
        Ok(roles) => Json(json!({"roles": roles})).into_response(),
        Err(r) => r,
    }
}
