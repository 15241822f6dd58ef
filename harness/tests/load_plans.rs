//! `moefleet-harness run`'s plans and page (MEASUREMENTS.md §9) over real HTTP against loopback
//! servers: a sweep, a concurrency search on a server that computes one chunk at a time, the
//! over-saturation stop, and the run's HTML page, opened in a real headless browser.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::process::Command;

use common::loopback::{
    chunky_server, loopback_server, run, summary, CHUNKS, PAUSE, PER_CHUNK, POISSON, SWEEP,
};
use moefleet_harness::trace::{read_records, TraceRecord};
use serde_json::Value;

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

/// A search re-derived from its per-request records (what `verify` does with a committed one, and
/// what the claims' `load_search` rule reads): every summary, the table and the answer agree with
/// the files the run wrote; the rule gives the answer; and an edited answer or a record taken out
/// of a step's traces is caught.
#[test]
fn a_search_is_rederived_from_its_records_and_edits_are_caught() {
    use moefleet_harness::experiments::load::recheck::LoadRuns;
    use moefleet_harness::recheck::Recheck;
    let url = loopback_server(true);
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("search");
    let o = run(
        &url,
        &out,
        &[
            "--search",
            "concurrency",
            "--max-concurrency",
            "4",
            "--slo",
            "tpot=0.0205",
            "--requests",
            "6",
            "--max-tokens",
            "12",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for csv in moefleet_harness::csv::tables_under(&out).unwrap() {
        moefleet_harness::csv::write_twin(&csv).unwrap();
    }
    let entry = toml::Value::String("search".into());
    let files = LoadRuns.recheck(t.path(), &entry).unwrap();
    let names: Vec<String> = files
        .iter()
        .map(|f| f.strip_prefix(&out).unwrap().display().to_string())
        .collect();
    for want in [
        "steps.csv",
        "steps.md",
        "search.json",
        "00-synchronous/summary.json",
    ] {
        assert!(
            names.iter().any(|n| n == want),
            "{want} not checked: {names:?}"
        );
    }
    let found: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("search.json")).unwrap()).unwrap();
    let rule = |measure: &str| -> moefleet_harness::claims::Rule {
        toml::from_str(&format!(
            "kind = \"load_search\"\ndir = \"search/\"\nmeasure = \"{measure}\""
        ))
        .unwrap()
    };
    assert_eq!(
        rule("best").eval(t.path()).unwrap(),
        found["best"].as_f64().unwrap()
    );
    let share = rule("best_good_percent").eval(t.path()).unwrap();
    assert!((90.0..=100.0).contains(&share), "{share}");
    // an answer edited by hand
    let stored = std::fs::read_to_string(out.join("search.json")).unwrap();
    let mut edited = found.clone();
    edited["best"] = serde_json::json!(found["best"].as_f64().unwrap() + 1.0);
    std::fs::write(out.join("search.json"), edited.to_string()).unwrap();
    let e = LoadRuns.recheck(t.path(), &entry).unwrap_err();
    assert!(format!("{e:#}").contains("search.json differs"), "{e:#}");
    std::fs::write(out.join("search.json"), stored).unwrap();
    LoadRuns.recheck(t.path(), &entry).unwrap();
    // a measured request taken out of the first step's records
    let traces = out.join("00-synchronous/traces.jsonl.gz");
    let mut recs: Vec<TraceRecord> = read_records(&traces).unwrap();
    let k = recs.iter().position(|r| r.phase == "measure").unwrap();
    recs.remove(k);
    std::fs::remove_file(&traces).unwrap();
    for r in &recs {
        moefleet_harness::trace::append_gz(&traces, r).unwrap();
    }
    let e = LoadRuns.recheck(t.path(), &entry).unwrap_err();
    assert!(format!("{e:#}").contains("summary.json differs"), "{e:#}");
}

/// Two servers alternated A B B A (`--vs`, `--repeats`): the runs in that order, each server's
/// requests landing where the order says (its own directory), the arms table with B / A and its
/// interval, re-derived by verify's recheck from the records, and an edit of it caught.
#[test]
fn two_servers_alternate_in_blocks_and_the_table_is_rederived() {
    use moefleet_harness::experiments::load::recheck::LoadRuns;
    use moefleet_harness::recheck::Recheck;
    // A streams three tokens a chunk in parallel; B computes one chunk at a time in turn
    let (a, b) = (chunky_server(), loopback_server(true));
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("abba");
    let mut args = vec!["--vs", b.as_str(), "--repeats", "2"];
    args.extend(POISSON);
    let o = run(&a, &out, &args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let names: Vec<String> = moefleet_harness::load::rederive::step_dirs(&out)
        .unwrap()
        .iter()
        .map(|d| d.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        ["00-a-0", "01-b-0", "02-b-0", "03-a-0", "04-a-1", "05-b-1", "06-b-1", "07-a-1"]
    );
    for n in &names {
        let manifest: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join(n).join("run.json")).unwrap())
                .unwrap();
        let want = if n.contains("-a-") { &a } else { &b };
        assert_eq!(manifest["url"].as_str().unwrap(), want.as_str(), "{n}");
    }
    let md = std::fs::read_to_string(out.join("arms.md")).unwrap();
    assert!(md.contains("8 runs in 2 blocks of A B B A"), "{md}");
    let tpot = md.lines().find(|l| l.starts_with("| TPOT p50")).unwrap();
    assert_eq!(
        tpot.matches('[').count(),
        3,
        "A, B and B / A intervals: {tpot}"
    );
    for csv in moefleet_harness::csv::tables_under(&out).unwrap() {
        moefleet_harness::csv::write_twin(&csv).unwrap();
    }
    let entry = toml::Value::String("abba".into());
    let files = LoadRuns.recheck(t.path(), &entry).unwrap();
    assert!(files.iter().any(|f| f.ends_with("arms.md")), "{files:?}");
    std::fs::write(
        out.join("arms.md"),
        md.replacen("| TPOT p50", "| TPOT p51", 1),
    )
    .unwrap();
    let e = LoadRuns.recheck(t.path(), &entry).unwrap_err();
    assert!(format!("{e:#}").contains("arms.md differs"), "{e:#}");
    assert!(std::fs::read_to_string(out.join("report.html"))
        .unwrap()
        .contains("Repeated runs"));
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
    let o = run(&url, &sweep, &[&SWEEP[..], &["--max-tokens", "6"]].concat());
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
    let o = run(&url, &out, &[&SWEEP[..], &["--max-tokens", "6"]].concat());
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
