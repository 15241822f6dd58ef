//! A request's reply in its two forms: SSE chunks in the endpoint's shape (with stop sequences held
//! back and trimmed), or one JSON body once generation ends.

use std::convert::Infallible;
use std::sync::Arc;

use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, Stream};
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::detok::Detok;
use super::error::ApiError;
use super::request::Parsed;
use super::stop::StopText;
use super::{now_s, AppState, Kind};
use crate::pipeline::ingress::{FinishReason, GenEvent};

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

pub(super) fn sse_stream(
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

pub(super) async fn whole(
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
