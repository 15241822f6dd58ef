//! End-to-end: real `moefleet serve` fleets (role processes over loopback TCP, the HTTP server, real
//! clients). Parity with single-process generation, the SSE shape, counters, errors, capacity,
//! disconnects, role failure and shutdown.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::Read;
use std::time::{Duration, Instant};

use common::server::{sse_events, Server};
use moefleet_engine::generate::generate;
use moefleet_engine::model::{generate as synth, ForwardOptions, Model, ModelConfig, SynthSpec};
use moefleet_engine::pipeline::wire::logits_hash;
use serde_json::{json, Value};

/// (token ids, logit-row hashes) of greedy generation in one process.
fn reference(model: &Model, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<String>) {
    let g = generate(model, prompt, n, 8, None, true).unwrap();
    (
        g.tokens.clone(),
        g.logits
            .iter()
            .map(|l| format!("{:016x}", logits_hash(l)))
            .collect(),
    )
}

fn served(s: &Server, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<String>) {
    let (code, v) = s.post(
        "/v1/completions",
        &json!({"prompt": prompt, "max_tokens": n, "moefleet_debug": true, "ignore_eos": true}),
    );
    assert_eq!(code, 200, "{v}");
    let ids = v["moefleet"]["token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect();
    let hashes = v["moefleet"]["logits_hash"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect();
    (ids, hashes)
}

fn prompts(vocab: usize, n: usize) -> Vec<Vec<u32>> {
    (0..n)
        .map(|i| common::tokens(1 + (i * 7) % 40, vocab, 100 + i as u64))
        .collect()
}

fn parity(preset: &str, roles: &str, n_prompts: usize, n_tokens: usize) {
    parity_with(preset, roles, n_prompts, n_tokens, &[]);
}

fn parity_with(preset: &str, roles: &str, n_prompts: usize, n_tokens: usize, extra: &[&str]) {
    let cfg = ModelConfig::preset(preset).unwrap();
    let model = Model::new(
        synth(&SynthSpec::whole(cfg.clone(), 7)).unwrap(),
        ForwardOptions::default(),
    );
    let ps = prompts(cfg.vocab_size, n_prompts);
    let want: Vec<_> = ps.iter().map(|p| reference(&model, p, n_tokens)).collect();
    let mut args = vec!["--preset", preset, "--roles", roles, "--seed", "7"];
    args.extend_from_slice(extra);
    let s = Server::start(&args);
    // one stream at a time
    assert_eq!(
        served(&s, &ps[0], n_tokens),
        want[0],
        "{preset}: single stream"
    );
    // many concurrent streams of different prompt lengths
    let got: Vec<_> = std::thread::scope(|sc| {
        let hs: Vec<_> = ps
            .iter()
            .map(|p| sc.spawn(|| served(&s, p, n_tokens)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(
            g,
            w,
            "{preset}: concurrent stream {i} (prompt of {} tokens)",
            ps[i].len()
        );
    }
}

#[test]
fn nano_over_two_roles_equals_single_process_bit_for_bit() {
    parity("inkling-nano", "2", 12, 24);
}

/// Whether some frame role 0 sent carried rows of both an even and an odd slot (from its reply
/// records: each reply names its frame and slot).
fn frames_mix_slot_parities(profiles: &std::path::Path) -> bool {
    let text = std::fs::read_to_string(profiles.join("role-0-replies.jsonl")).unwrap();
    let mut parities: std::collections::HashMap<u64, [bool; 2]> = Default::default();
    for l in text.lines() {
        let r: Value = serde_json::from_str(l).unwrap();
        let (seq, slot) = (r["seq"].as_u64().unwrap(), r["slot"].as_u64().unwrap());
        parities.entry(seq).or_default()[(slot % 2) as usize] = true;
    }
    assert!(!parities.is_empty(), "no replies recorded");
    parities.values().any(|p| p[0] && p[1])
}

/// One pipeline group: every stream's rows in one frame, computed by each role alone in the
/// pipeline; the same bits. With two roles the default gives two groups (slot i in group i mod 2),
/// so only `--groups 1` puts even and odd slots in one frame.
#[test]
fn nano_over_two_roles_in_one_group_equals_single_process_bit_for_bit() {
    for (groups, mixed) in [(None, false), (Some("1"), true)] {
        let dir = tempfile::tempdir().unwrap();
        let profiles = dir.path().display().to_string();
        let mut extra = vec!["--profile-dir", profiles.as_str()];
        if let Some(g) = groups {
            extra.extend(["--groups", g]);
        }
        parity_with("inkling-nano", "2", 12, 24, &extra);
        assert_eq!(
            frames_mix_slot_parities(dir.path()),
            mixed,
            "--groups {groups:?}"
        );
    }
}

#[test]
fn mini_over_eleven_roles_equals_single_process_bit_for_bit() {
    parity("inkling-mini", "11", 6, 12);
}

/// Reference admission (Figure 6's baseline) serves the same bits, and its frame records show what
/// it promises: each prompt whole in one frame, and no prompt frame before the previous prompt's
/// first token came back.
#[test]
fn reference_admission_sends_whole_prompts_one_at_a_time_with_the_same_bits() {
    let dir = tempfile::tempdir().unwrap();
    let profiles = dir.path().display().to_string();
    let extra = [
        "--admission",
        "reference",
        "--profile-dir",
        profiles.as_str(),
    ];
    parity_with("inkling-nano", "2", 8, 6, &extra);
    let lines = |name: &str| -> Vec<Value> {
        std::fs::read_to_string(dir.path().join(name))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let frames = lines("role-0.jsonl");
    let replies = lines("role-0-replies.jsonl");
    let u = |v: &Value, k: &str| v[k].as_u64().unwrap();
    // each stream's first reply: (frame seq, slot, prompt length, arrival). Without speculation a
    // stream of 6 tokens gets exactly 6 replies, and a slot's streams follow one another, so every
    // sixth reply of a slot begins a stream; its position is its prompt's last
    let mut firsts: Vec<(u64, u64, u64, u64)> = Vec::new();
    let mut count = std::collections::HashMap::new();
    for r in &replies {
        let (slot, pos) = (u(r, "slot"), u(r, "pos"));
        let k = count.entry(slot).or_insert(0u64);
        if *k % 6 == 0 {
            firsts.push((u(r, "seq"), slot, pos + 1, u(r, "t_ns")));
        }
        *k += 1;
    }
    assert!(count.values().all(|k| k % 6 == 0), "6 replies a stream");
    assert_eq!(
        firsts.len(),
        9,
        "one first reply per request (1 alone, then 8 at once)"
    );
    firsts.sort();
    let frame = |seq: u64| frames.iter().find(|f| u(f, "seq") == seq).unwrap();
    for w in firsts.windows(2) {
        let (prev, next) = (w[0], w[1]);
        let f = frame(next.0);
        assert!(
            u(f, "rows") >= next.2,
            "the prompt of {} tokens went whole in frame {}",
            next.2,
            next.0
        );
        // role 0 stamps a frame when it starts computing it, right after planning it
        let started = u(f, "t_ns");
        assert!(
            started >= prev.3,
            "prompt frame {} started at {started} ns, before the previous prompt's first token \
             came back at {} ns",
            next.0,
            prev.3
        );
    }
}

#[test]
fn sse_shape_usage_and_counters() {
    let s = Server::start(&["--preset", "inkling-nano", "--roles", "2"]);
    let before = s.stats();
    let c = reqwest::blocking::Client::new();
    let mut total = 0;
    for (path, body) in [
        (
            "/v1/completions",
            json!({"prompt": "The tides turn", "max_tokens": 9, "stream": true, "ignore_eos": true, "stream_options": {"include_usage": true}}),
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "Explain tides."}], "max_tokens": 7, "stream": true, "ignore_eos": true, "stream_options": {"include_usage": true}}),
        ),
    ] {
        let text = c
            .post(format!("{}{path}", s.url))
            .json(&body)
            .send()
            .unwrap()
            .text()
            .unwrap();
        let ev = sse_events(&text);
        assert_eq!(ev.last().unwrap(), "[DONE]", "{text}");
        let chunks: Vec<Value> = ev[..ev.len() - 1]
            .iter()
            .map(|e| serde_json::from_str(e).unwrap())
            .collect();
        let want = body["max_tokens"].as_u64().unwrap() as usize;
        let token_chunks: Vec<&Value> = chunks
            .iter()
            .filter(|c| {
                c["choices"]
                    .as_array()
                    .is_some_and(|a| !a.is_empty() && a[0]["finish_reason"].is_null())
            })
            .collect();
        assert_eq!(token_chunks.len(), want, "one chunk per token: {text}");
        assert!(token_chunks.iter().all(|c| c["n_tokens"] == 1));
        let fin = &chunks[chunks.len() - 2];
        assert_eq!(fin["choices"][0]["finish_reason"], "length");
        let usage = &chunks[chunks.len() - 1];
        assert_eq!(usage["choices"].as_array().unwrap().len(), 0);
        assert_eq!(usage["usage"]["completion_tokens"], want);
        if path.contains("chat") {
            assert_eq!(token_chunks[0]["choices"][0]["delta"]["role"], "assistant");
            assert_eq!(token_chunks[0]["object"], "chat.completion.chunk");
        }
        total += want as u64;
    }
    let after = s.stats();
    assert_eq!(
        after["tokens_total"].as_u64().unwrap() - before["tokens_total"].as_u64().unwrap(),
        total
    );
    assert_eq!(
        after["requests_total"].as_u64().unwrap() - before["requests_total"].as_u64().unwrap(),
        2
    );
    s.wait_idle(Duration::from_secs(5));
    // the build the records name: a commit (possibly -dirty) from engine/build.rs, or "unknown"
    // outside a git checkout
    let commit = after["engine_commit"].as_str().unwrap();
    let hex = commit.trim_end_matches("-dirty");
    assert!(
        commit == "unknown" || (hex.len() == 40 && hex.chars().all(|c| c.is_ascii_hexdigit())),
        "engine_commit {commit}"
    );
    let models: Value = reqwest::blocking::get(format!("{}/v1/models", s.url))
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(models["data"][0]["id"], "inkling-nano");
    let metrics = reqwest::blocking::get(format!("{}/metrics", s.url))
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metrics.contains(&format!(
            "moefleet_tokens_total{{model=\"inkling-nano\"}} {}",
            after["tokens_total"]
        )),
        "{metrics}"
    );
    let prof: Value = reqwest::blocking::get(format!("{}/api/profile", s.url))
        .unwrap()
        .json()
        .unwrap();
    let roles = prof["roles"].as_array().unwrap();
    assert_eq!(roles.len(), 2);
    assert!(
        roles.iter().all(|r| r["frames"].as_u64().unwrap() > 0),
        "{prof}"
    );
    assert!(roles[1]["sampled_rows"].as_u64().unwrap() >= total);
}

#[test]
fn bad_requests_get_json_errors() {
    let s = Server::start(&[
        "--preset",
        "inkling-nano",
        "--roles",
        "2",
        "--context",
        "64",
        "--max-tokens-limit",
        "100",
    ]);
    let c = reqwest::blocking::Client::new();
    let cases: &[(&str, &str, &str)] = &[
        ("/v1/completions", "{not json", "not valid JSON"),
        ("/v1/completions", "[1,2]", "JSON object"),
        (
            "/v1/completions",
            r#"{"max_tokens": 4}"#,
            "'prompt' is required",
        ),
        ("/v1/completions", r#"{"prompt": ""}"#, "empty"),
        (
            "/v1/completions",
            r#"{"prompt": "x", "max_tokens": "ten"}"#,
            "must be an integer",
        ),
        (
            "/v1/completions",
            r#"{"prompt": "x", "max_tokens": 0}"#,
            "1..=100",
        ),
        (
            "/v1/completions",
            r#"{"prompt": "x", "max_tokens": 101}"#,
            "1..=100",
        ),
        (
            "/v1/completions",
            r#"{"prompt": "x", "stream": "yes"}"#,
            "'stream' must be a boolean",
        ),
        (
            "/v1/completions",
            r#"{"prompt": [1, 99999999]}"#,
            "outside the vocabulary",
        ),
        (
            "/v1/completions",
            r#"{"prompt": "word word word word word word word word word word word word", "max_tokens": 60}"#,
            "context budget",
        ),
        ("/v1/chat/completions", r#"{"messages": []}"#, "empty"),
        (
            "/v1/chat/completions",
            r#"{"messages": [{"role": "user"}]}"#,
            "content",
        ),
        (
            "/v1/chat/completions",
            r#"{"messages": [{"role": "wizard", "content": "hi"}]}"#,
            "'wizard' is not one of system, developer, user, assistant",
        ),
        (
            "/v1/completions",
            r#"{"prompt": "x", "model": 7}"#,
            "'model' must be a string",
        ),
    ];
    for (path, body, want) in cases {
        let r = c
            .post(format!("{}{path}", s.url))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "{body}");
        let v: Value = r.json().unwrap();
        let msg = v["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(want), "{body}: '{msg}' lacks '{want}'");
    }
    assert_eq!(
        s.stats()["invalid_total"].as_u64().unwrap(),
        cases.len() as u64
    );
}

#[test]
fn at_capacity_gets_503_and_a_disconnect_frees_its_slot() {
    let s = Server::start(&[
        "--preset",
        "inkling-nano",
        "--roles",
        "2",
        "--slots",
        "1",
        "--queue",
        "1",
    ]);
    let c = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    // A holds the only slot with a long stream; B waits in the queue
    let mut a = c
        .post(format!("{}/v1/completions", s.url))
        .json(&json!({"prompt": "long", "max_tokens": 1000, "stream": true, "ignore_eos": true}))
        .send()
        .unwrap();
    let mut buf = [0u8; 256];
    let _ = a.read(&mut buf).unwrap();
    let url = s.url.clone();
    let b = std::thread::spawn(move || {
        reqwest::blocking::Client::new()
            .post(format!("{url}/v1/completions"))
            .json(&json!({"prompt": "short", "max_tokens": 5, "ignore_eos": true}))
            .send()
            .unwrap()
    });
    let t0 = Instant::now();
    while s.stats()["queue_depth"] != 1 {
        assert!(t0.elapsed() < Duration::from_secs(20), "B never queued");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, v) = s.post(
        "/v1/completions",
        &json!({"prompt": "third", "max_tokens": 5}),
    );
    assert_eq!(code, 503);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at capacity"),
        "{v}"
    );
    // the running stream is untouched; dropping it frees the slot and B completes
    let _ = a.read(&mut buf).unwrap();
    drop(a);
    let rb = b.join().unwrap();
    assert_eq!(rb.status().as_u16(), 200);
    let vb: Value = rb.json().unwrap();
    assert_eq!(vb["usage"]["completion_tokens"], 5);
    s.wait_idle(Duration::from_secs(20));
    assert_eq!(s.stats()["rejected_total"], 1);
}

#[test]
fn sigint_stops_every_role_and_frees_the_port() {
    let s = Server::start(&["--preset", "inkling-nano", "--roles", "2"]);
    let kids = s.children();
    assert_eq!(kids.len(), 1);
    let port = s.url.rsplit(':').next().unwrap().to_string();
    let mut s = s;
    s.signal("-INT", s.child.id());
    let t0 = Instant::now();
    loop {
        if let Ok(Some(st)) = s.child.try_wait() {
            assert!(st.success(), "serve exited with {st}");
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "serve did not stop on SIGINT"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let alive = std::path::Path::new(&format!("/proc/{}", kids[0])).exists()
        && !std::fs::read_to_string(format!("/proc/{}/stat", kids[0]))
            .unwrap_or_default()
            .contains(") Z ");
    assert!(!alive, "role process {} outlived serve", kids[0]);
    // the HTTP port can be bound again at once
    std::net::TcpListener::bind(format!("127.0.0.1:{port}")).expect("port still in use");
}

#[test]
fn the_openai_python_client_streams_a_chat_completion() {
    let s = Server::start(&["--preset", "inkling-nano", "--roles", "2"]);
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/openai_stream.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .arg(format!("{}/v1", s.url))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "openai client failed: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("chunks=")
            && text.contains("finish=length")
            && text.contains("completion_tokens=6"),
        "{text}"
    );
}
