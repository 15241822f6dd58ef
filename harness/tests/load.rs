//! `moefleet-harness run` (open-loop load, MEASUREMENTS.md §9) over real HTTP: against a loopback
//! server that streams three tokens per chunk (as a speculating server or one that batches its
//! writes does), the per-token ITL spreads each chunk's gap over its tokens and averages to the
//! TPOT; against a real `moefleet serve` fleet with speculation on, every request is measured
//! and the client's own queueing under a concurrency cap shows as send lag, not latency; two runs
//! compared, and a run exported in vLLM's shape and read back.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;
use std::time::Duration;

use common::loopback::{chunky_server, run, summary, CHUNKS, PAUSE, PER_CHUNK, POISSON, SWEEP};
use common::{serve, wait_ready};
use moefleet_harness::load::latency::RequestLatency;
use moefleet_harness::trace::{read_records, TraceRecord};
use serde_json::Value;

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
        (vec!["--load", "poisson"], "--rate is needed"),
        (vec!["--load", "sweep", "--rate", "2"], "chooses its own"),
        (vec!["--search", "rate"], "needs objectives"),
        (
            vec!["--search", "concurrency", "--slo", "ttft=1"],
            "needs --max-concurrency",
        ),
        (
            vec!["--rate", "2", "--saturation-s", "0"],
            "positive number of seconds",
        ),
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
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    assert_eq!(manifest["plan"]["schedule"]["process"], "gamma");
    // which code ran: the harness binary's own build commit, and the fleet's
    assert_eq!(
        manifest["harness_commit"].as_str(),
        Some(moefleet_harness::BUILD_COMMIT),
        "{manifest}"
    );
    assert!(manifest["engine_commit"].is_string(), "{manifest}");
    assert!(
        manifest["host"]["cpu_family"].is_u64()
            && manifest["host"]["isa"].is_string()
            && manifest["load_average_start"].is_array(),
        "{manifest}"
    );
    assert!(s["load_average_end"].is_array());

    // a trace replayed on the same fleet: its times, its lengths (counted in the fleet's own
    // tokenizer, the embedded one in workloads/tokenizer.json)
    let trace = t.path().join("trace.jsonl");
    std::fs::write(
        &trace,
        concat!(
            "{\"timestamp\": 0, \"input_length\": 30, \"output_length\": 6}\n",
            "{\"timestamp\": 150, \"input_length\": 30, \"output_length\": 4, \"hash_ids\": [7]}\n",
            "{\"timestamp_s\": 0.3, \"prompt\": \"Say something.\", \"max_tokens\": 5}\n"
        ),
    )
    .unwrap();
    let tokenizer = concat!(env!("CARGO_MANIFEST_DIR"), "/../workloads/tokenizer.json");
    let replay = t.path().join("replay");
    let o = run(
        &url,
        &replay,
        &[
            "--trace",
            trace.to_str().unwrap(),
            "--tokenizer",
            tokenizer,
            "--ignore-eos",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let recs: Vec<TraceRecord> = read_records(&replay.join("traces.jsonl.gz")).unwrap();
    let mut recs: Vec<&TraceRecord> = recs.iter().collect();
    recs.sort_by_key(|r| r.prompt_index);
    assert_eq!(
        recs.iter()
            .map(|r| (r.error.is_none(), r.tokens()))
            .collect::<Vec<_>>(),
        [(true, 6), (true, 4), (true, 5)]
    );
    assert_eq!(recs[2].prompt, "Say something.");
    // due 0.15 s apart, as the trace has them
    let due: Vec<f64> = recs.iter().map(|r| r.scheduled_mono.unwrap()).collect();
    assert!((due[1] - due[0] - 0.15).abs() < 1e-6 && (due[2] - due[0] - 0.3).abs() < 1e-6);

    // a sweep on the same fleet: one at a time, all at once, one rate between, and its page; on
    // a busy machine (this binary's other tests share the two cores) all at once can be no faster
    // than one at a time, and then the sweep must say so and run no rate between (the rates
    // strictly between are checked on a loopback server in load_plans.rs)
    let sweep = t.path().join("sweep");
    let o = run(
        &url,
        &sweep,
        &[&SWEEP[..], &["--max-tokens", "8", "--ignore-eos"]].concat(),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let steps = std::fs::read_to_string(sweep.join("steps.csv")).unwrap();
    let rate = |line: usize| -> f64 {
        let row = steps.lines().nth(line).unwrap_or_default();
        row.split(',').nth(6).unwrap_or_default().parse().unwrap()
    };
    let between = rate(2) > rate(1);
    if !between {
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("no rates between them to sweep"), "{err}");
    }
    assert_eq!(
        steps.lines().count(),
        1 + 2 + usize::from(between),
        "{steps}"
    );
    assert!(
        steps
            .lines()
            .skip(1)
            .all(|l| l.split(',').nth(5) == Some("0")),
        "no failures: {steps}"
    );
    assert!(sweep.join("report.html").is_file());
}

/// `compare` and the vLLM-shaped export over real runs: a run compared with its own export
/// differs by nothing in TTFT, TPOT and per-token ITL (the export keeps every request's gaps); two
/// runs give the table, figure and page; a directory that holds no run is refused by name.
#[test]
fn compare_two_runs_and_a_run_with_its_vllm_export() {
    let url = chunky_server();
    let t = tempfile::tempdir().unwrap();
    let (a, b) = (t.path().join("a"), t.path().join("b"));
    for out in [&a, &b] {
        let o = run(&url, out, &POISSON);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let harness =
        |args: &[&std::ffi::OsStr]| Command::new(common::harness()).args(args).output().unwrap();
    let o = harness(&["export-vllm".as_ref(), a.as_os_str()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(a.join("vllm.json")).unwrap()).unwrap();
    assert_eq!(doc["completed"], 6, "{doc}");
    assert_eq!(doc["itls"].as_array().unwrap().len(), 6);
    for k in [
        "mean_ttft_ms",
        "p99_tpot_ms",
        "median_itl_ms",
        "std_e2el_ms",
        "output_throughput",
    ] {
        assert!(doc[k].as_f64().is_some(), "{k} missing: {doc}");
    }
    let same = t.path().join("same");
    let o = harness(&[
        "compare".as_ref(),
        a.as_os_str(),
        a.join("vllm.json").as_os_str(),
        "--out".as_ref(),
        same.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let csv = std::fs::read_to_string(same.join("compare.csv")).unwrap();
    let mut checked = 0;
    for line in csv.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        if f[1].starts_with("TTFT") || f[1].starts_with("TPOT") || f[1].starts_with("ITL") {
            let diff: f64 = f[5].parse().unwrap();
            assert!(diff.abs() < 1e-6, "{line}");
            checked += 1;
        }
    }
    assert_eq!(checked, 8, "{csv}");
    let both = t.path().join("both");
    let o = harness(&[
        "compare".as_ref(),
        a.as_os_str(),
        b.as_os_str(),
        "--out".as_ref(),
        both.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let page = std::fs::read_to_string(both.join("compare.html")).unwrap();
    assert!(page.contains("<svg") && page.contains("TPOT p50"), "{page}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("95 % interval"));
    let o = harness(&["compare".as_ref(), a.as_os_str(), both.as_os_str()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("holds no run") && err.contains("both"),
        "{err}"
    );
}

/// Conversations on a real fleet, the client counting in the fleet's own tokenizer (the embedded
/// one): every turn carries its conversation so far, the client's count of each prompt (rendered
/// as the fleet renders a chat) equals the fleet's `usage.prompt_tokens`, and the summary has a
/// row per turn (the fleet reports no prefix-cache hits, and the row says so).
#[test]
fn conversations_on_a_real_fleet() {
    let (_fleet, url) = serve(2, &[]);
    wait_ready(&url, Duration::from_secs(60));
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("turns");
    let tokenizer = concat!(env!("CARGO_MANIFEST_DIR"), "/../workloads/tokenizer.json");
    let o = run(
        &url,
        &out,
        &[
            "--load",
            "constant",
            "--rate",
            "10",
            "--requests",
            "3",
            "--turns",
            "3",
            "--max-tokens",
            "6",
            "--ignore-eos",
            "--tokenizer",
            tokenizer,
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let recs: Vec<TraceRecord> = read_records(&out.join("traces.jsonl.gz")).unwrap();
    assert_eq!(recs.len(), 9);
    for r in &recs {
        assert_eq!(r.error, None);
        let count = r.client_count.expect("the client's count");
        let usage = r.usage.as_ref().unwrap()["prompt_tokens"].as_u64();
        assert_eq!(Some(count.prompt_tokens), usage, "turn {:?}", r.turn);
        let first = recs
            .iter()
            .find(|f| f.conversation == r.conversation && f.turn == Some(0))
            .unwrap();
        if r.turn > Some(0) {
            assert!(r.prompt_tokens > first.prompt_tokens.map(|p| p + 6));
        }
    }
    let s = summary(&out);
    let turns = s["by_turn"].as_array().unwrap();
    assert_eq!(turns.len(), 3);
    assert!(turns
        .iter()
        .all(|t| t["requests"] == 3 && t["cached_prompt_tokens"].is_null()));
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(
        md.contains("| 3 | 3 |") && md.contains("not reported"),
        "{md}"
    );
}
