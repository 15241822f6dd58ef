//! Captures end to end (ARCHITECTURE.md §3.4): real fleets with `--capture-dir`, the file named in
//! the final chunk, read back and checked against single-process generation bit for bit; requests
//! that do not ask are not captured; a capture that cannot be written is an error on that request
//! only, and the fleet goes on serving.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::server::{sse_events, Server};
use moefleet_engine::capture::Capture;
use moefleet_engine::generate::generate_captured;
use moefleet_engine::model::{generate as synth, ForwardOptions, Model, ModelConfig, SynthSpec};
use moefleet_engine::tokenizer::TextTokenizer;
use serde_json::{json, Value};

/// Stream one completion; returns (final chunk's `moefleet` object, text, error if any).
fn stream(s: &Server, body: Value) -> (Option<Value>, String, Option<Value>) {
    let r = reqwest::blocking::Client::new()
        .post(format!("{}/v1/completions", s.url))
        .json(&body)
        .timeout(std::time::Duration::from_secs(120))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let body = r.text().unwrap();
    let (mut extra, mut text, mut err) = (None, String::new(), None);
    for e in sse_events(&body) {
        if e == "[DONE]" {
            continue;
        }
        let v: Value = serde_json::from_str(&e).unwrap();
        if let Some(x) = v.get("error") {
            err = Some(x.clone());
        }
        if let Some(t) = v["choices"][0]["text"].as_str() {
            text.push_str(t);
        }
        if let Some(m) = v.get("moefleet") {
            extra = Some(m.clone());
        }
    }
    (extra, text, err)
}

fn check_against_single_process(preset: &str, roles: &str) {
    let cfg = ModelConfig::preset(preset).unwrap();
    let model = Model::new(
        synth(&SynthSpec::whole(cfg.clone(), 7)).unwrap(),
        ForwardOptions::default(),
    );
    let tk = TextTokenizer::embedded().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let caps = dir.path().join("caps");
    let s = Server::start(&[
        "--preset",
        preset,
        "--roles",
        roles,
        "--capture-dir",
        caps.to_str().unwrap(),
        "--capture",
        "requested",
    ]);
    let prompt = "The lighthouse keeper counted the ships";
    let ids = tk.encode(prompt).unwrap();
    let body = |capture: bool| {
        json!({"prompt": prompt, "max_tokens": 24, "stream": true, "ignore_eos": true,
               "moefleet_capture": capture})
    };
    let (extra, text, err) = stream(&s, body(true));
    assert!(err.is_none(), "{err:?}");
    let info = extra.expect("the final chunk names the capture")["capture"].clone();
    let path = info["path"].as_str().unwrap();
    let c = Capture::read(Path::new(path)).unwrap();
    assert_eq!(
        info["bytes"].as_u64().unwrap(),
        std::fs::metadata(path).unwrap().len()
    );
    // the same stream in one process: same tokens, same residuals bit for bit
    let (g, want) = generate_captured(&model, &ids, 24, 8, None).unwrap();
    assert_eq!(c.prompt(), &ids[..]);
    assert_eq!(c.generated(), &g.tokens[..]);
    assert_eq!(c.residuals, want.residuals, "{preset}: residuals differ");
    assert_eq!(c.header.prompt_rows as usize, ids.len());
    assert_eq!(c.header.role as usize + 1, roles.parse::<usize>().unwrap());
    assert_eq!(tk.decode(c.generated()).unwrap(), text);
    // a request that does not ask is not captured
    let (extra, _, err) = stream(&s, body(false));
    assert!(err.is_none() && extra.is_none(), "{extra:?} {err:?}");
    assert_eq!(std::fs::read_dir(&caps).unwrap().count(), 1);
}

#[test]
fn a_captured_stream_equals_single_process_generation_over_two_roles() {
    check_against_single_process("inkling-nano", "2");
}

#[test]
fn a_one_role_fleet_captures_too() {
    check_against_single_process("inkling-nano", "1");
}

#[test]
fn capture_errors_are_per_request_and_the_fleet_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let caps = dir.path().join("caps");
    let s = Server::start(&[
        "--preset",
        "inkling-nano",
        "--roles",
        "2",
        "--capture-dir",
        caps.to_str().unwrap(),
    ]);
    // the directory disappears under the running fleet: the next capture cannot be written
    std::fs::remove_dir_all(&caps).unwrap();
    let body = json!({"prompt": "Tides rise", "max_tokens": 6, "stream": true, "ignore_eos": true});
    let (_, _, err) = stream(&s, body.clone());
    let err = err.expect("an error on the capturing request").to_string();
    assert!(err.contains("could not be written"), "{err}");
    s.wait_idle(std::time::Duration::from_secs(5));
    // the fleet still serves (non-streaming, so the capture error arrives as a status)
    std::fs::create_dir_all(&caps).unwrap();
    let (code, v) = s.post(
        "/v1/completions",
        &json!({"prompt": "Tides rise", "max_tokens": 6, "ignore_eos": true}),
    );
    assert_eq!(code, 200, "{v}");
    assert!(v["moefleet"]["capture"]["path"].is_string(), "{v}");
    let health = reqwest::blocking::get(format!("{}/health", s.url)).unwrap();
    assert!(health.status().is_success());
}

#[test]
fn asking_a_server_without_a_capture_dir_is_a_400() {
    let s = Server::start(&["--preset", "inkling-nano", "--roles", "2"]);
    let (code, v) = s.post(
        "/v1/completions",
        &json!({"prompt": "Tides", "max_tokens": 2, "moefleet_capture": true}),
    );
    assert_eq!(code, 400);
    assert!(v.to_string().contains("--capture-dir"), "{v}");
}
