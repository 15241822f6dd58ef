//! The HTTP API's refusals against a real `moefleet serve`: an oversized body (413, read to the end
//! so the client sees the answer, not a reset), an unknown model (404 unless --accept-any-model),
//! the API key (401), the warning for a non-loopback bind without a key, and Retry-After on 503s.
//! Every refusal has an OpenAI-shaped JSON body.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::server::Server;
use reqwest::blocking::{Client, RequestBuilder};
use serde_json::{json, Value};

fn client() -> Client {
    Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}

/// Status and the error message of a refusal (which must be OpenAI-shaped JSON).
fn refusal(rb: RequestBuilder) -> (u16, String) {
    let r = rb.send().unwrap();
    let code = r.status().as_u16();
    let v: Value = r.json().unwrap();
    assert_eq!(v["error"]["code"].as_u64(), Some(code as u64), "{v}");
    assert!(v["error"]["type"].is_string(), "{v}");
    (code, v["error"]["message"].as_str().unwrap().to_string())
}

#[test]
fn oversized_bodies_unknown_models_and_missing_keys_are_refused() {
    let s = Server::start(&[
        "--preset",
        "inkling-nano",
        "--roles",
        "1",
        "--max-body",
        "65536",
        "--api-key",
        "open-sesame",
    ]);
    let c = client();
    let post = |path: &str| {
        c.post(format!("{}{path}", s.url))
            .header("authorization", "Bearer open-sesame")
    };
    // 20 MB: the whole body is read and dropped, then 413 naming the limit
    let big = format!(r#"{{"prompt": "{}"}}"#, "a".repeat(20 << 20));
    let (code, msg) = refusal(post("/v1/completions").body(big));
    assert_eq!(code, 413, "{msg}");
    assert!(msg.contains("limit of 65536 bytes"), "{msg}");
    // just under the limit is parsed as usual (here: a prompt past the context budget, 400)
    let near = format!(r#"{{"prompt": "{}"}}"#, "word ".repeat(12_000));
    assert!(near.len() < 65536);
    assert_eq!(refusal(post("/v1/completions").body(near)).0, 400);
    // the model: unknown → 404; the served name or none → served
    let (code, msg) = refusal(
        post("/v1/completions").json(&json!({"model": "gpt-4o", "prompt": "hi", "max_tokens": 2})),
    );
    assert_eq!(code, 404, "{msg}");
    assert!(
        msg.contains("'gpt-4o' does not exist") && msg.contains("inkling-nano"),
        "{msg}"
    );
    for body in [
        json!({"model": "inkling-nano", "prompt": "hi", "max_tokens": 2}),
        json!({"prompt": "hi", "max_tokens": 2}),
    ] {
        let r = post("/v1/completions").json(&body).send().unwrap();
        assert_eq!(r.status().as_u16(), 200, "{body}");
    }
    // the key: none, wrong, a prefix of the right one → 401; /health and /metrics stay open
    let body = json!({"prompt": "hi", "max_tokens": 2});
    let url = format!("{}/v1/completions", s.url);
    for auth in [
        None,
        Some("Bearer nope"),
        Some("Bearer open"),
        Some("open-sesame"),
    ] {
        let mut rb = c.post(&url).json(&body);
        if let Some(a) = auth {
            rb = rb.header("authorization", a);
        }
        let (code, msg) = refusal(rb);
        assert_eq!(code, 401, "{auth:?}: {msg}");
        assert!(msg.contains("API key"), "{msg}");
    }
    assert_eq!(refusal(c.get(format!("{}/v1/models", s.url))).0, 401);
    assert_eq!(refusal(c.get(format!("{}/api/stats", s.url))).0, 401);
    for open in ["/health", "/metrics"] {
        let r = c.get(format!("{}{open}", s.url)).send().unwrap();
        assert_eq!(r.status().as_u16(), 200, "{open}");
    }
}

#[test]
fn any_model_when_asked_and_a_warning_for_an_open_bind_without_a_key() {
    let s = Server::start(&[
        "--preset",
        "inkling-nano",
        "--roles",
        "1",
        "--accept-any-model",
        "--host",
        "0.0.0.0",
    ]);
    let (code, v) = s.post(
        "/v1/completions",
        &json!({"model": "gpt-4o", "prompt": "hi", "max_tokens": 2}),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        v["model"], "inkling-nano",
        "the answer names the model that served it"
    );
    let log = s.log.lock().unwrap().join("\n");
    assert!(
        log.contains("warning") && log.contains("without --api-key"),
        "{log}"
    );
}

#[test]
fn a_loopback_bind_does_not_warn_and_capacity_503s_carry_retry_after() {
    let s = Server::start(&[
        "--preset",
        "inkling-nano",
        "--roles",
        "1",
        "--slots",
        "1",
        "--queue",
        "0",
    ]);
    let mut long = s.stream_started(
        &json!({"prompt": "go", "max_tokens": 1000, "stream": true, "ignore_eos": true}),
    );
    let r = client()
        .post(format!("{}/v1/completions", s.url))
        .json(&json!({"prompt": "hi", "max_tokens": 2}))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    let mut buf = [0u8; 64];
    let _ = std::io::Read::read(&mut long, &mut buf).unwrap();
    drop(long);
    assert!(!s.log.lock().unwrap().join("\n").contains("warning"));
}
