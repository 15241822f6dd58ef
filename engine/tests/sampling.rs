//! Sampling as users expect it, against real servers: a seed gives the same tokens on fleets cut
//! into different numbers of roles and beside other streams, temperature 0 is greedy, and a stop
//! sequence ends the completion where it starts (trimmed), with `finish_reason: "stop"`.

#![allow(clippy::unwrap_used)]

mod common;

use common::server::{sse_events, Server};
use serde_json::{json, Value};

fn ids(v: &Value) -> Vec<u64> {
    v["moefleet"]["token_ids"]
        .as_array()
        .unwrap_or_else(|| panic!("no token ids: {v}"))
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect()
}

fn ask(s: &Server, body: Value) -> Value {
    let (code, v) = s.post("/v1/completions", &body);
    assert_eq!(code, 200, "{v}");
    v
}

fn sampled(seed: u64, prompt: &str) -> Value {
    json!({"prompt": prompt, "max_tokens": 24, "ignore_eos": true, "moefleet_debug": true,
           "temperature": 0.9, "top_p": 0.95, "top_k": 200, "seed": seed})
}

#[test]
fn a_seed_gives_the_same_tokens_across_roles_and_batches() {
    let one = Server::start(&["--preset", "inkling-nano", "--roles", "1"]);
    let three = Server::start(&["--preset", "inkling-nano", "--roles", "3"]);
    let alone = ids(&ask(&one, sampled(1234, "The river runs")));
    assert_eq!(ids(&ask(&three, sampled(1234, "The river runs"))), alone);
    // the same request beside three others, in the same frames
    let url = three.url.clone();
    let others: Vec<_> = (0..3)
        .map(|k| {
            let url = url.clone();
            std::thread::spawn(move || {
                reqwest::blocking::Client::new()
                    .post(format!("{url}/v1/completions"))
                    .json(&{
                        // long enough to still be decoding when the measured request runs
                        let mut b = sampled(k, "Other streams share the frames");
                        b["max_tokens"] = json!(900);
                        b
                    })
                    .send()
                    .unwrap()
                    .status()
                    .as_u16()
            })
        })
        .collect();
    let t0 = std::time::Instant::now();
    while three.stats()["requests_in_flight"].as_u64().unwrap_or(0) < 3 {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "the three other streams never ran together"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let beside = ids(&ask(&three, sampled(1234, "The river runs")));
    assert!(
        three.stats()["requests_in_flight"].as_u64().unwrap_or(0) >= 3,
        "the other streams ended before the measured one: it did not share their frames"
    );
    for o in others {
        assert_eq!(o.join().unwrap(), 200);
    }
    assert_eq!(
        beside, alone,
        "other streams in the frames changed the draw"
    );
    let greedy = ids(&ask(
        &one,
        json!({"prompt": "The river runs", "max_tokens": 24, "ignore_eos": true, "moefleet_debug": true}),
    ));
    assert_ne!(
        alone, greedy,
        "sampling at temperature 0.9 drew exactly the greedy tokens"
    );
    assert_ne!(
        ids(&ask(&one, sampled(99, "The river runs"))),
        alone,
        "another seed"
    );
}

#[test]
fn temperature_zero_is_greedy() {
    let s = Server::start(&["--preset", "inkling-nano", "--roles", "2"]);
    let base = json!({"prompt": "The river runs", "max_tokens": 16, "ignore_eos": true, "moefleet_debug": true});
    let greedy = ids(&ask(&s, base.clone()));
    let mut zero = base.clone();
    zero["temperature"] = json!(0);
    zero["seed"] = json!(5);
    zero["top_p"] = json!(0.5);
    assert_eq!(ids(&ask(&s, zero)), greedy);
    let mut top1 = base;
    top1["temperature"] = json!(1.5);
    top1["top_k"] = json!(1);
    assert_eq!(ids(&ask(&s, top1)), greedy, "top_k 1 keeps only the argmax");
}

#[test]
fn a_stop_sequence_ends_the_completion_where_it_starts() {
    let s = Server::start(&["--preset", "inkling-nano", "--roles", "2"]);
    let base = json!({"prompt": "The river runs", "max_tokens": 32, "ignore_eos": true});
    let full = ask(&s, base.clone())["choices"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    // a stop sequence from the middle of the greedy text
    let mut k = full.len() / 2;
    while !full.is_char_boundary(k) {
        k += 1;
    }
    let stop: String = full[k..].chars().take(3).collect();
    assert!(stop.chars().count() == 3, "greedy text too short: {full:?}");
    let want = &full[..full.find(&stop).unwrap()];
    let mut body = base.clone();
    body["stop"] = json!(["never-in-this-text", stop]);
    let v = ask(&s, body.clone());
    assert_eq!(v["choices"][0]["text"].as_str().unwrap(), want);
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // streamed: the same text across the chunks, then a final chunk saying stop
    body["stream"] = json!(true);
    let r = reqwest::blocking::Client::new()
        .post(format!("{}/v1/completions", s.url))
        .json(&body)
        .send()
        .unwrap();
    let events = sse_events(&r.text().unwrap());
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let text: String = chunks
        .iter()
        .map(|c| c["choices"][0]["text"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(text, want);
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );
    // the stream's slot is freed
    let t0 = std::time::Instant::now();
    while s.stats()["slots_busy"] != 0 {
        assert!(t0.elapsed().as_secs() < 20, "slot not freed: {}", s.stats());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn bad_sampling_fields_are_refused() {
    let s = Server::start(&["--preset", "inkling-nano", "--roles", "1"]);
    for (field, value, want) in [
        ("temperature", json!(3), "0..=2"),
        ("top_p", json!(0), "(0, 1]"),
        ("top_k", json!(-2), "top_k"), // -1 is off, as in vLLM
        ("seed", json!("x"), "seed"),
        ("stop", json!(["a", "b", "c", "d", "e"]), "at most 4"),
        ("stop", json!([""]), "empty"),
    ] {
        let mut b = json!({"prompt": "x", "max_tokens": 2});
        b[field] = value;
        let (code, v) = s.post("/v1/completions", &b);
        assert_eq!(code, 400, "{field}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(want), "{field}: '{msg}' lacks '{want}'");
    }
}
