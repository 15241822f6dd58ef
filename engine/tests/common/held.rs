//! Streams held through a fault (`engine/tests/recovery.rs`): the same request run uninterrupted
//! and streamed across the fault, and the check that each streamed run carried exactly the
//! uninterrupted tokens and logits hashes (so the bits), greedy and seeded.

use std::io::Read;

use serde_json::{json, Value};

use super::server::Server;

/// Tokens of the streams the fault tests hold through a fault: enough that they are still in
/// flight when it lands.
pub const HELD_TOKENS: u64 = 1500;

/// The two requests held through each fault: greedy, and sampled with a seed.
pub fn held_requests() -> [Value; 2] {
    let greedy = json!({"prompt": "go", "max_tokens": HELD_TOKENS, "ignore_eos": true, "moefleet_debug": true});
    let mut seeded = greedy.clone();
    seeded["temperature"] = json!(0.9);
    seeded["seed"] = json!(11);
    [greedy, seeded]
}

/// A request's tokens and logits hashes, run uninterrupted (not streamed).
pub fn uninterrupted(s: &Server, req: &Value) -> Vec<(u64, String)> {
    let (code, v) = s.post("/v1/completions", req);
    assert_eq!(code, 200, "{v}");
    let ids = v["moefleet"]["token_ids"].as_array().unwrap();
    let hashes = v["moefleet"]["logits_hash"].as_array().unwrap();
    assert_eq!(ids.len() as u64, HELD_TOKENS);
    ids.iter()
        .zip(hashes)
        .map(|(i, h)| (i.as_u64().unwrap(), h.as_str().unwrap().to_string()))
        .collect()
}

/// A streamed response in flight: the bytes read so far, and the rest to read.
pub struct Held {
    pub head: Vec<u8>,
    pub rest: reqwest::blocking::Response,
}

impl Held {
    /// Read on until the stream has carried `n` tokens, so that a fault made next lands deep in
    /// it.
    pub fn read_tokens(&mut self, n: usize) {
        let mut buf = [0u8; 4096];
        while String::from_utf8_lossy(&self.head)
            .matches("\"token_id\"")
            .count()
            < n
        {
            let k = self.rest.read(&mut buf).unwrap();
            assert!(k > 0, "the stream ended before {n} tokens");
            self.head.extend_from_slice(&buf[..k]);
        }
    }
}

/// Tokens each held stream has carried when the fault is made.
pub const BEFORE_FAULT: usize = 300;

/// POST `req` (a streamed completion) and return once its first bytes have arrived: it is then
/// in flight on the fleet.
pub fn start(s: &Server, req: &Value) -> Held {
    let mut rest = s.post_stream(req);
    let mut head = vec![0u8; 256];
    let n = rest.read(&mut head).unwrap();
    head.truncate(n);
    Held { head, rest }
}

/// Start each request streamed and read each until it has carried `BEFORE_FAULT` tokens (it
/// is then deep in its generation, and in flight on the fleet).
pub fn streamed(s: &Server, reqs: &[Value]) -> Vec<Held> {
    let held: Vec<Held> = reqs
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r["stream"] = json!(true);
            start(s, &r)
        })
        .collect();
    held.into_iter()
        .map(|mut h| {
            h.read_tokens(BEFORE_FAULT);
            h
        })
        .collect()
}

/// The held requests run uninterrupted (what each must carry through the fault), then started
/// streamed and read until each is in flight (`streamed`): `(want, held)`.
pub fn hold(s: &Server) -> (Vec<Vec<(u64, String)>>, Vec<Held>) {
    let want = held_requests()
        .iter()
        .map(|r| uninterrupted(s, r))
        .collect();
    (want, streamed(s, &held_requests()))
}

/// Read a streamed response to its end: the tokens and logits hashes it carried. Fails if it
/// carried an error.
pub fn stream_tokens(mut r: Held) -> Vec<(u64, String)> {
    let mut bytes = r.head;
    r.rest.read_to_end(&mut bytes).unwrap();
    let body = String::from_utf8(bytes).unwrap();
    let mut out = Vec::new();
    for e in super::server::sse_events(&body) {
        if e == "[DONE]" {
            continue;
        }
        let v: Value = serde_json::from_str(&e).unwrap();
        assert!(
            v.get("error").is_none(),
            "the stream ended with an error: {v}"
        );
        if let Some(id) = v["moefleet"]["token_id"].as_u64() {
            out.push((
                id,
                v["moefleet"]["logits_hash"].as_str().unwrap().to_string(),
            ));
        }
    }
    out
}

/// Every held stream carried exactly its uninterrupted tokens and bits, and none was lost.
pub fn held_streams_survived(s: &Server, held: Vec<Held>, want: &[Vec<(u64, String)>]) {
    for (i, (r, want)) in held.into_iter().zip(want).enumerate() {
        let got = stream_tokens(r);
        let first = got.iter().zip(want).position(|(a, b)| a != b);
        assert!(
            got == *want,
            "held stream {i} ({}): {} tokens where {} were wanted, first difference at {first:?}",
            ["greedy", "seeded"][i],
            got.len(),
            want.len()
        );
    }
    let st = s.stats();
    eprintln!(
        "held through the fault: {} streams resumed, {} rows replayed, {} lost",
        st["streams_resumed_total"], st["replay_rows_total"], st["streams_lost_total"]
    );
    assert_eq!(st["streams_lost_total"], 0, "{st}");
    assert!(
        st["streams_resumed_total"].as_u64().unwrap() >= want.len() as u64,
        "{st}"
    );
    assert!(st["replay_rows_total"].as_u64().unwrap() > 0, "{st}");
}
