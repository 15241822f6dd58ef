//! `moefleet-harness run` (open-loop load, MEASUREMENTS.md §9) over real HTTP: against a loopback
//! server that streams three tokens per chunk (as a speculating server or one that batches its
//! writes does), the per-token ITL spreads each chunk's gap over its tokens and averages to the
//! TPOT; against a real `moefleet serve` fleet with speculation on, every request is measured
//! and the client's own queueing under a concurrency cap shows as send lag, not latency.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

use common::{harness, serve, wait_ready};
use moefleet_harness::load::latency::RequestLatency;
use moefleet_harness::trace::{read_records, TraceRecord};
use serde_json::Value;

/// Chunks per answer, tokens per chunk, and the pause before each chunk.
const CHUNKS: usize = 4;
const PER_CHUNK: u32 = 3;
const PAUSE: Duration = Duration::from_millis(30);

/// Answer one HTTP request on `s`: `/v1/models`, or a chat completion streamed as CHUNKS chunks
/// of PER_CHUNK tokens (moefleet's `n_tokens` field), PAUSE apart, with usage.
fn answer(mut s: TcpStream) {
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut head = String::new();
    let mut len = 0;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap() == 0 {
            return;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).unwrap();
    if head.starts_with("GET /v1/models") {
        let b = r#"{"object":"list","data":[{"id":"chunky","object":"model"}]}"#;
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{b}",
            b.len()
        );
        return;
    }
    if !head.starts_with("POST /v1/chat/completions") {
        let _ = write!(
            s,
            "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        );
        return;
    }
    let _ = write!(
        s,
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
    );
    let data = |s: &mut TcpStream, v: Value| {
        let _ = write!(s, "data: {v}\n\n");
        let _ = s.flush();
    };
    for _ in 0..CHUNKS {
        std::thread::sleep(PAUSE);
        data(
            &mut s,
            serde_json::json!({"choices": [{"index": 0, "delta": {"content": "a b c"}}], "n_tokens": PER_CHUNK}),
        );
    }
    let n = CHUNKS as u32 * PER_CHUNK;
    data(
        &mut s,
        serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}),
    );
    data(
        &mut s,
        serde_json::json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": n + 5}}),
    );
    let _ = write!(s, "data: [DONE]\n\n");
}

/// A loopback server answering every connection on its own thread.
fn chunky_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for s in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || answer(s));
        }
    });
    url
}

fn run(url: &str, out: &std::path::Path, extra: &[&str]) -> std::process::Output {
    Command::new(harness())
        .args(["run", "--url", url, "--out", out.to_str().unwrap()])
        .args(extra)
        .output()
        .unwrap()
}

/// Eight requests (two of them warm-up) of 12 tokens as a Poisson process at 50 requests/s.
const POISSON: [&str; 10] = [
    "--load",
    "poisson",
    "--rate",
    "50",
    "--requests",
    "8",
    "--max-tokens",
    "12",
    "--warmup",
    "2",
];

fn summary(out: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn itl_spreads_multi_token_chunks_and_averages_to_tpot() {
    let url = chunky_server();
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("run");
    let o = run(
        &url,
        &out,
        &[&POISSON[..], &["--slo", "ttft=5,tpot=5"]].concat(),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let recs: Vec<TraceRecord> = read_records(&out.join("traces.jsonl.gz")).unwrap();
    assert_eq!(recs.len(), 8);
    assert_eq!(recs.iter().filter(|r| r.phase == "warmup").count(), 2);
    let n = CHUNKS * PER_CHUNK as usize;
    for r in &recs {
        assert!(r.error.is_none(), "{:?}", r.error);
        let l = RequestLatency::of(r);
        assert_eq!(l.tokens as usize, n);
        assert_eq!(l.itl.len(), n - 1, "one gap per token after the first");
        assert_eq!(l.chunk_gaps.len(), CHUNKS - 1);
        // each later chunk's gap is spread evenly over its three tokens
        for (c, g) in l.chunk_gaps.iter().enumerate() {
            let first = PER_CHUNK as usize - 1 + c * PER_CHUNK as usize;
            for itl in &l.itl[first..first + PER_CHUNK as usize] {
                assert!((itl * PER_CHUNK as f64 - g).abs() < 1e-12);
            }
        }
        // the server pauses before each chunk, so no answer ends sooner than the pauses after
        // its send (a single gap can read shorter: the client may take up one chunk late and
        // the next on time)
        assert!(
            l.e2e >= CHUNKS as f64 * PAUSE.as_secs_f64(),
            "end to end {}",
            l.e2e
        );
        let mean = l.itl.iter().sum::<f64>() / l.itl.len() as f64;
        assert!(
            (mean - l.tpot.unwrap()).abs() < 1e-12,
            "mean ITL is the TPOT"
        );
        assert!(r.scheduled_mono.is_some());
    }
    let s = summary(&out);
    assert_eq!(s["requests"], 6, "the warm-up is left out");
    assert_eq!(s["failed"], 0);
    assert_eq!(s["tokens_per_chunk"], PER_CHUNK as f64);
    assert_eq!(s["itl"]["n"], 6 * (n - 1));
    assert_eq!(s["chunk_gap"]["n"], 6 * (CHUNKS - 1));
    assert_eq!(s["good_requests"], 6, "limits of 5 s are met");
    // the schedule is the seed's: the same file from a second run with the same seed
    let again = t.path().join("again");
    let o = run(&url, &again, &POISSON);
    assert!(o.status.success());
    let sched = |d: &std::path::Path| std::fs::read_to_string(d.join("schedule.csv")).unwrap();
    assert_eq!(sched(&out), sched(&again));
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(
        md.contains("| ITL (per token) | 66 |") && md.contains("goodput"),
        "{md}"
    );
    // a run directory is never overwritten
    let o = run(&url, &out, &["--rate", "5", "--requests", "2"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("already holds a run"));
}

#[test]
fn bad_options_are_refused_before_any_request() {
    let t = tempfile::tempdir().unwrap();
    for (args, says) in [
        (vec!["--rate", "0"], "positive"),
        (
            vec!["--rate", "2", "--load", "gamma", "--burstiness", "0"],
            "burstiness",
        ),
        (
            vec!["--rate", "2", "--requests", "3", "--warmup", "3"],
            "leaves none",
        ),
        (
            vec!["--rate", "2", "--slo", "ttft=fast"],
            "positive number of seconds",
        ),
        (vec!["--rate", "2", "--family", "nope"], "no family"),
    ] {
        let o = run("http://127.0.0.1:9", &t.path().join("x"), &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// A real fleet speculating (suffix and phrase proposers) under a bursty load capped at one
/// stream: every request is measured, ITL has one gap per token after the first, and the cap's
/// queueing is the client's send lag.
#[test]
fn a_speculating_fleet_under_a_capped_bursty_load() {
    let (_fleet, url) = serve(2, &["--speculate", "--proposers", "suffix,phrase"]);
    wait_ready(&url, Duration::from_secs(60));
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("run");
    let o = run(
        &url,
        &out,
        &[
            "--load",
            "gamma",
            "--burstiness",
            "0.5",
            "--rate",
            "1000",
            "--requests",
            "10",
            "--max-tokens",
            "24",
            "--ignore-eos",
            "--max-concurrency",
            "1",
            "--warmup",
            "1",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = summary(&out);
    assert_eq!(
        (s["requests"].as_u64(), s["failed"].as_u64()),
        (Some(9), Some(0))
    );
    assert_eq!(s["itl"]["n"], 9 * 23, "24 tokens each: 23 gaps");
    assert_eq!(s["ttft"]["n"], 9);
    assert!(s["output_tokens_per_s"].as_f64().unwrap() > 0.0);
    // ten requests due within about ten milliseconds, one at a time: each waits in the client
    // for the ones before it, so the last one's send lag is at least a whole request
    let lag = &s["send_lag"];
    assert_eq!(lag["n"], 9);
    assert!(
        lag["max"].as_f64().unwrap() >= s["e2e"]["p50"].as_f64().unwrap(),
        "{lag} {}",
        s["e2e"]
    );
    let run: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    assert_eq!(run["pattern"]["process"], "gamma");
    assert!(
        run["host"]["cpu_family"].is_u64()
            && run["host"]["isa"].is_string()
            && run["load_average_start"].is_array(),
        "{run}"
    );
    assert!(s["load_average_end"].is_array());
}
