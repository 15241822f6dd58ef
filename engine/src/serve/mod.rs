//! The OpenAI-compatible HTTP API of role 0 (ARCHITECTURE.md §3.5). Handlers validate, reserve
//! admission room, submit to the engine thread's inbox and relay the request's events; they never
//! touch model state.

pub mod detok;
pub mod error;
mod guard;
mod reply;
pub mod request;
pub mod stop;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::mpsc::unbounded_channel;

use crate::pipeline::ingress::{GenRequest, Inbox};
use crate::pipeline::stats::FleetStats;
use crate::tokenizer::TextTokenizer;
use error::ApiError;
use guard::{authorize, read_body};
use reply::{sse_stream, whole};
use request::{Limits, Parsed};

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
    /// Role processes this one started (`--roles` without `--fleet`), listed in `/api/stats`.
    pub local: Option<Arc<crate::pipeline::children::LocalRoles>>,
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
        // a checkpoint's end-of-sequence token, else the project tokenizer's end of text
        stop_token: tokenizer.eos().or(tokenizer.end_of_text()),
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
        local: fleet.local_roles(),
    });
    // say once when the readiness probe has passed
    let st = state.stats.clone();
    tokio::spawn(async move {
        for _ in 0..36_000 {
            if st.is_ready() {
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

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Kind {
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

pub(crate) fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

async fn generate(s: Arc<AppState>, parsed: Result<Parsed, ApiError>, kind: Kind) -> Response {
    let p = match parsed {
        Ok(p) => p,
        Err(e) => {
            s.stats.invalid();
            return e.into_response();
        }
    };
    if let Some(m) = p.model.as_deref().filter(|m| *m != s.model) {
        if !s.accept_any_model {
            s.stats.invalid();
            return ApiError::no_model(format!(
                "the model '{m}' does not exist: this server serves '{}' (GET /v1/models; \
                 start it with --accept-any-model to serve any name)",
                s.model
            ))
            .into_response();
        }
    }
    if p.capture && s.capture == CaptureMode::Off {
        s.stats.invalid();
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
    if !s.stats.is_ready() {
        return ApiError::retry(
            "the fleet is not ready yet (readiness probe pending)",
            RETRY_WHILE_RECOVERING,
        )
        .into_response();
    }
    s.stats.received();
    if !s.stats.try_reserve(s.n_slots + s.queue_capacity) {
        s.stats.rejected();
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
        s.stats.unreserve();
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
    if s.stats.is_ready() {
        (StatusCode::OK, Json(json!({"status": "ready"}))).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "starting"})),
        )
            .into_response()
    }
}

/// The counters, and the processes of this machine's roles (role 0 is this process; roles on
/// other hosts are not listed), so that a soak can watch their memory and descriptors.
async fn stats(State(s): State<Arc<AppState>>) -> Json<Value> {
    let mut v = serde_json::to_value(s.stats.snapshot(s.queue_capacity)).unwrap_or_default();
    let mut procs = vec![json!({"role": 0, "pid": std::process::id()})];
    if let Some(local) = &s.local {
        let mut pids = local.pids();
        pids.sort_unstable();
        procs.extend(
            pids.into_iter()
                .map(|(role, pid)| json!({"role": role, "pid": pid})),
        );
    }
    v["processes"] = Value::Array(procs);
    Json(v)
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
