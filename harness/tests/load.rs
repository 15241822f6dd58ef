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
use std::sync::mpsc;
use std::time::Duration;

use common::{harness, serve, wait_ready};
use moefleet_harness::load::latency::RequestLatency;
use moefleet_harness::trace::{read_records, TraceRecord};
use serde_json::Value;

/// A one-core server's queue of chunks to compute: each asks with the channel it waits on.
type Core = mpsc::Sender<mpsc::Sender<()>>;

/// Chunks per answer, tokens per chunk, and the pause before each chunk.
const CHUNKS: usize = 4;
const PER_CHUNK: u32 = 3;
const PAUSE: Duration = Duration::from_millis(30);

/// Answer one HTTP request on `s`: `/v1/models`, or a chat completion streamed as CHUNKS chunks
/// of PER_CHUNK tokens (moefleet's `n_tokens` field), PAUSE apart, with usage. With a `core`, each
/// chunk is computed there: one chunk at a time across every request, in the order asked, as a
/// server with one core computes them.
fn answer(mut s: TcpStream, core: Option<Core>) {
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
        match &core {
            Some(c) => {
                let (done, wait) = mpsc::channel();
                c.send(done).unwrap();
                wait.recv().unwrap();
            }
            None => std::thread::sleep(PAUSE),
        }
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

/// A loopback server answering every connection on its own thread (with `serial`, computing one
/// chunk at a time across them all).
fn loopback_server(serial: bool) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let core = serial.then(|| {
        let (tx, rx) = mpsc::channel::<mpsc::Sender<()>>();
        std::thread::spawn(move || {
            for done in rx {
                std::thread::sleep(PAUSE);
                let _ = done.send(());
            }
        });
        tx
    });
    std::thread::spawn(move || {
        for s in listener.incoming().map_while(Result::ok) {
            let core = core.clone();
            std::thread::spawn(move || answer(s, core));
        }
    });
    url
}

fn chunky_server() -> String {
    loopback_server(false)
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
}

fn csv_rows(path: &std::path::Path) -> Vec<std::collections::HashMap<String, String>> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let head: Vec<String> = lines
        .next()
        .unwrap()
        .split(',')
        .map(str::to_string)
        .collect();
    lines
        .map(|l| {
            head.iter()
                .cloned()
                .zip(l.split(',').map(str::to_string))
                .collect()
        })
        .collect()
}

/// A sweep: one at a time, all at once, then rates strictly between the two measured rates, each
/// step in its own directory with its records; the table and the Pareto figure.
#[test]
fn a_sweep_runs_between_one_at_a_time_and_all_at_once() {
    let url = chunky_server();
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("sweep");
    let o = run(
        &url,
        &out,
        &[
            "--load",
            "sweep",
            "--rates",
            "2",
            "--requests",
            "6",
            "--max-tokens",
            "12",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows = csv_rows(&out.join("steps.csv"));
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str()).collect();
    assert_eq!(names.len(), 4, "{names:?}");
    assert_eq!(&names[..2], ["synchronous", "throughput"]);
    let rate =
        |r: &std::collections::HashMap<String, String>, k: &str| -> f64 { r[k].parse().unwrap() };
    let (lo, hi) = (
        rate(&rows[0], "requests_per_s"),
        rate(&rows[1], "requests_per_s"),
    );
    assert!(
        hi > lo,
        "six at once on a parallel server beat one at a time: {lo} {hi}"
    );
    for (i, r) in rows[2..].iter().enumerate() {
        let want = lo + (hi - lo) * (i + 1) as f64 / 3.0;
        assert!((rate(r, "rate_asked") - want).abs() < 1e-5 * want, "{r:?}");
        assert_eq!(r["requests"], "6");
        assert_eq!(r["failed"], "0");
    }
    for (k, name) in names.iter().enumerate() {
        let dir = out.join(format!("{k:02}-{name}"));
        let recs: Vec<TraceRecord> = read_records(&dir.join("traces.jsonl.gz")).unwrap();
        assert_eq!(recs.len(), 6, "{}", dir.display());
    }
    let svg = std::fs::read_to_string(out.join("pareto.svg")).unwrap();
    assert!(
        svg.contains("<svg") && svg.contains("synchronous"),
        "the figure names its steps"
    );
    assert!(std::fs::read_to_string(out.join("steps.md"))
        .unwrap()
        .contains("| 0 synchronous |"));
}

/// A concurrency search on a server that computes one chunk at a time, in turn: TPOT grows with
/// the C streams sharing it (a stream's chunk every C x PAUSE, its TPOT (CHUNKS - 1) C PAUSE /
/// (tokens - 1)), so a limit of 2.5 single-stream TPOTs is met by two streams and missed by three;
/// the bisection ends with adjacent bounds, every step at or below the answer meeting the
/// objectives and every one at or above the miss missing them.
#[test]
fn a_concurrency_search_finds_where_tpot_crosses_its_limit() {
    let url = loopback_server(true);
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("search");
    let tokens = CHUNKS as f64 * PER_CHUNK as f64;
    let single_tpot = (CHUNKS - 1) as f64 * PAUSE.as_secs_f64() / (tokens - 1.0);
    let slo = format!("tpot={}", 2.5 * single_tpot);
    let o = run(
        &url,
        &out,
        &[
            "--search",
            "concurrency",
            "--max-concurrency",
            "8",
            "--slo",
            &slo,
            "--requests",
            "8",
            "--max-tokens",
            "12",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let found: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("search.json")).unwrap()).unwrap();
    let best = found["best"].as_f64().unwrap();
    let missed = found["missed"].as_f64().unwrap();
    assert_eq!(missed, best + 1.0, "{found}");
    // one stream's TPOT is 8.2 ms, two streams' about 16 ms, three about 25 ms against 20.5 ms
    // (streams start and end at different times: 1 to 3 allows for it)
    assert!((1.0..=3.0).contains(&best), "{found}");
    for r in csv_rows(&out.join("steps.csv")) {
        let c: f64 = r["concurrency"].parse().unwrap();
        let meets = r["meets"] == "true";
        assert!(
            (c <= best && meets) || (c >= missed && !meets),
            "step at C = {c}: {r:?}"
        );
    }
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("highest load meeting the objectives"),
        "{stdout}"
    );
}

/// Over-saturation: a rate far above what a one-chunk-at-a-time server completes; once a request
/// has been open longer than the limit, no more are sent, the open ones end at the limit with an
/// error that says so, and the summary says why the step stopped.
#[test]
fn an_over_saturated_step_stops_sending() {
    let url = loopback_server(true);
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("run");
    // each request holds the server 4 x 30 ms: about 8 requests/s, asked 25/s for 40 requests
    let o = run(
        &url,
        &out,
        &[
            "--load",
            "constant",
            "--rate",
            "25",
            "--requests",
            "40",
            "--max-tokens",
            "12",
            "--saturation-s",
            "0.5",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let recs: Vec<TraceRecord> = read_records(&out.join("traces.jsonl.gz")).unwrap();
    assert!(
        recs.len() < 40,
        "sending stopped early: {} sent",
        recs.len()
    );
    let cancelled = recs
        .iter()
        .filter(|r| {
            r.error
                .as_deref()
                .is_some_and(|e| e.contains("over-saturated"))
        })
        .count();
    assert!(cancelled >= 1);
    for r in &recs {
        assert!(
            r.ended_mono - r.started_mono < 0.5 + 0.25,
            "no request outlives the limit by much"
        );
    }
    let s = summary(&out);
    assert!(
        s["saturated"].as_str().unwrap().contains("still open"),
        "{s}"
    );
    assert_eq!(s["failed"].as_u64().unwrap() as usize, cancelled);
}

/// The run's page: self-contained (no script, every figure inline), its tables, and every link a
/// file of the run.
fn check_report(out: &std::path::Path, figures: usize) {
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>") && page.ends_with("</html>\n"));
    assert!(
        !page.contains("<script") && !page.contains("src=\"http"),
        "self-contained"
    );
    assert_eq!(page.matches("<svg").count(), figures, "inline figures");
    assert!(page.matches("<table>").count() >= 1);
    for href in page.split("href=\"").skip(1) {
        let rel = &href[..href.find('"').unwrap()];
        assert!(
            out.join(rel).is_file(),
            "a link to {rel}, which is not there"
        );
    }
}

#[test]
fn every_run_writes_a_page_to_look_at() {
    let url = chunky_server();
    let t = tempfile::tempdir().unwrap();
    let one = t.path().join("one");
    let o = run(&url, &one, &POISSON);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    check_report(&one, 1);
    let sweep = t.path().join("sweep");
    let o = run(
        &url,
        &sweep,
        &[
            "--load",
            "sweep",
            "--rates",
            "1",
            "--requests",
            "4",
            "--max-tokens",
            "6",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // the Pareto figure and one per step (three steps)
    check_report(&sweep, 1 + 3);
}

/// Chromium from the Debian packages (`chromium`), or why not: absent, the test skips saying so,
/// unless MOEFLEET_REQUIRE_CHROMIUM is set (CI installs it).
fn chromium() -> Option<&'static str> {
    for exe in ["chromium", "chromium-browser"] {
        if Command::new(exe)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Some(exe);
        }
    }
    let why = "no chromium here (apt-get install chromium)";
    if std::env::var_os("MOEFLEET_REQUIRE_CHROMIUM").is_some() {
        panic!("{why}, and MOEFLEET_REQUIRE_CHROMIUM is set");
    }
    let _ = writeln!(std::io::stderr(), "load: report test SKIPPED: {why}");
    None
}

/// A sweep's page opened in a real headless browser: a page of ours loads it in a frame and lists
/// the rendered size of every figure and table; each must have an area, and there must be as many
/// as the page holds. The screenshot is kept in cargo's test scratch directory.
#[test]
fn the_report_renders_in_a_headless_browser() {
    let Some(browser) = chromium() else {
        return;
    };
    let url = chunky_server();
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("sweep");
    let o = run(
        &url,
        &out,
        &[
            "--load",
            "sweep",
            "--rates",
            "1",
            "--requests",
            "4",
            "--max-tokens",
            "6",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let probe = out.join("probe.html");
    std::fs::write(
        &probe,
        r#"<!DOCTYPE html><html><body><iframe id="f" src="report.html" width="1200" height="4000"></iframe>
<script>
document.getElementById('f').onload = function () {
  var d = document.getElementById('f').contentDocument;
  var sizes = Array.prototype.map.call(d.querySelectorAll('svg, table'), function (e) {
    var r = e.getBoundingClientRect();
    return e.tagName.toLowerCase() + ':' + Math.round(r.width) + 'x' + Math.round(r.height);
  });
  var p = document.createElement('pre');
  p.id = 'sizes';
  p.textContent = sizes.join(' ');
  document.body.appendChild(p);
};
</script></body></html>"#,
    )
    .unwrap();
    let flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--allow-file-access-from-files",
        "--virtual-time-budget=5000",
    ];
    let dom = Command::new(browser)
        .args(flags)
        .arg("--dump-dom")
        .arg(format!("file://{}", probe.display()))
        .output()
        .unwrap();
    assert!(
        dom.status.success(),
        "{}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let dom = String::from_utf8_lossy(&dom.stdout);
    let sizes = dom
        .split("<pre id=\"sizes\">")
        .nth(1)
        .and_then(|s| s.split("</pre>").next())
        .unwrap_or_else(|| panic!("the probe saw no page: {dom}"));
    let items: Vec<(&str, u32, u32)> = sizes
        .split_whitespace()
        .map(|s| {
            let (tag, wh) = s.split_once(':').unwrap();
            let (w, h) = wh.split_once('x').unwrap();
            (tag, w.parse().unwrap(), h.parse().unwrap())
        })
        .collect();
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    let count = |tag: &str| items.iter().filter(|(t, _, _)| *t == tag).count();
    assert_eq!(count("svg"), page.matches("<svg").count(), "{sizes}");
    assert_eq!(count("table"), page.matches("<table>").count(), "{sizes}");
    assert_eq!(
        count("svg"),
        4,
        "the Pareto figure and one per step: {sizes}"
    );
    for (tag, w, h) in &items {
        assert!(*w > 100 && *h > 20, "a {tag} rendered {w} x {h}: {sizes}");
    }
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("load-report.png");
    let o = Command::new(browser)
        .args(&flags[..4])
        .args(["--hide-scrollbars", "--window-size=1200,2400"])
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", out.join("report.html").display()))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let png = std::fs::read(&shot).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    eprintln!("load: the report's screenshot is {}", shot.display());
}
