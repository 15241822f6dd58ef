//! Whole plans repeated and alternated A B B A (MEASUREMENTS.md §9): a search against two loopback
//! servers, and the paired concurrency sweep against two real fleets, each run in a directory of
//! its own, the table comparing them re-derived by verify's recheck from the runs' records.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;
use std::time::Duration;

use common::loopback::{chunky_server, loopback_server, run, CHUNKS, PAUSE, PER_CHUNK};
use moefleet_harness::experiments::load::recheck::LoadRuns;
use moefleet_harness::recheck::Recheck;

fn run_names(out: &std::path::Path) -> Vec<String> {
    moefleet_harness::load::rederive::step_dirs(out)
        .unwrap()
        .iter()
        .map(|d| d.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

/// Write every table's Parquet twin, as committing a run does (verify reads both).
fn twins(out: &std::path::Path) {
    for csv in moefleet_harness::csv::tables_under(out).unwrap() {
        moefleet_harness::csv::write_twin(&csv).unwrap();
    }
}

/// The `arms.md` row of `metric`, split into its cells.
fn cells(md: &str, metric: &str) -> Vec<String> {
    let line = (md.lines())
        .find(|l| l.starts_with(&format!("| {metric} (")))
        .unwrap_or_else(|| panic!("no row {metric}: {md}"));
    line.trim_matches('|')
        .split('|')
        .map(|c| c.trim().to_string())
        .collect()
}

/// A concurrency search repeated A B B A: A computes one chunk at a time across its streams, so
/// a TPOT limit of 2.5 single-stream TPOTs is met by two streams and missed by three; B streams
/// in parallel and meets it up to the cap. Each run is a search of its own (its steps, table and
/// answer); the arms table compares the answers and the bounds; verify re-derives every run and
/// the table, and an edited run's answer is caught.
#[test]
fn a_search_repeated_against_two_servers_compares_their_answers() {
    let (a, b) = (loopback_server(true), chunky_server());
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("searches");
    let tokens = CHUNKS as f64 * PER_CHUNK as f64;
    let single_tpot = (CHUNKS - 1) as f64 * PAUSE.as_secs_f64() / (tokens - 1.0);
    let slo = format!("tpot={}", 2.5 * single_tpot);
    let o = run(
        &a,
        &out,
        &[
            "--vs",
            &b,
            "--repeats",
            "1",
            "--search",
            "concurrency",
            "--max-concurrency",
            "4",
            "--slo",
            &slo,
            "--requests",
            "4",
            "--max-tokens",
            "12",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(run_names(&out), ["00-a-0", "01-b-0", "02-b-0", "03-a-0"]);
    for n in run_names(&out) {
        assert!(out.join(&n).join("search.json").is_file(), "{n}");
        assert!(out.join(&n).join("00-synchronous").is_dir(), "{n}");
    }
    let md = std::fs::read_to_string(out.join("arms.md")).unwrap();
    assert!(md.contains("4 runs in 1 blocks of A B B A"), "{md}");
    // | metric | A | interval | B | interval | B / A | interval |
    let best = cells(&md, "search: highest load met");
    let (a_best, b_best): (f64, f64) = (best[1].parse().unwrap(), best[3].parse().unwrap());
    assert!((1.0..=3.0).contains(&a_best), "{md}");
    assert_eq!(b_best, 4.0, "{md}");
    // B met the objectives at the cap, so it missed at no load: its cell is empty
    assert_eq!(cells(&md, "search: lowest load missed")[3], "–", "{md}");
    for m in ["one at a time: TPOT p50", "all at once: output tokens/s"] {
        assert_eq!(cells(&md, m).len(), 7, "{m}: {md}");
    }
    // every step of the four searches, and the commands that take them all
    let steps = moefleet_harness::load::rederive::steps_under(&out).unwrap();
    for n in run_names(&out) {
        let under = steps
            .iter()
            .filter(|s| s.dir.starts_with(out.join(&n)))
            .count();
        assert!(under >= 2, "{n}: {under} steps");
    }
    for cmd in ["crosscheck", "export-vllm"] {
        let o = Command::new(env!("CARGO_BIN_EXE_moefleet-harness"))
            .arg(cmd)
            .arg(&out)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{cmd}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    for s in &steps {
        assert!(s.dir.join("vllm.json").is_file(), "{}", s.dir.display());
    }
    twins(&out);
    let entry = toml::Value::String("searches".into());
    let files = LoadRuns.recheck(t.path(), &entry).unwrap();
    for f in ["arms.md", "00-a-0/search.json", "01-b-0/steps.md"] {
        assert!(files.iter().any(|p| p.ends_with(f)), "{f}: {files:?}");
    }
    // each run has a page of its own, linked from the run's
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(page.contains("href=\"01-b-0/report.html\""), "{page}");
    assert!(out.join("01-b-0/report.html").is_file());
    // a run's answer edited by hand
    let p = out.join("03-a-0/search.json");
    let mut found: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    found["best"] = serde_json::json!(a_best + 1.0);
    std::fs::write(&p, serde_json::to_string_pretty(&found).unwrap()).unwrap();
    let e = LoadRuns.recheck(t.path(), &entry).unwrap_err();
    assert!(format!("{e:#}").contains("03-a-0"), "{e:#}");
    assert!(format!("{e:#}").contains("search.json differs"), "{e:#}");
}

/// The paired concurrency sweep repeated A B B A against a one-role and a two-role nano fleet:
/// four sweep directories with their tables, the arms table per level, re-derived by verify.
#[test]
fn the_paired_sweep_alternates_two_fleets() {
    let ((_one, a), (_two, b)) = (common::serve(1, &[]), common::serve(2, &[]));
    for url in [&a, &b] {
        common::wait_ready(url, Duration::from_secs(60));
    }
    let t = tempfile::tempdir().unwrap();
    let plan = t.path().join("plan.toml");
    std::fs::write(
        &plan,
        "name = \"abba\"\nlevels = [1, 2]\nmax_tokens = 48\nstagger_s = 0.002\nsettle_s = 0.1\n\
         min_requests = 2\nfamily = \"mixed\"\n\n[[passes]]\nname = \"a\"\norder = \"ascending\"\n",
    )
    .unwrap();
    let out = t.path().join("paired");
    let o = Command::new(common::harness())
        .args(["sweep", "--url", &a, "--vs", &b, "--repeats", "1", "--plan"])
        .arg(&plan)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(run_names(&out), ["00-a-0", "01-b-0", "02-b-0", "03-a-0"]);
    for n in run_names(&out) {
        assert!(out.join(&n).join("table4.md").is_file(), "{n}");
        let m = moefleet_harness::driver::manifest::RunManifest::read(&out.join(&n)).unwrap();
        let want = if n.contains("-a-") { &a } else { &b };
        assert_eq!(&m.url, want, "{n}");
    }
    let md = std::fs::read_to_string(out.join("arms.md")).unwrap();
    for level in [1, 2] {
        for m in ["Q_decode", "Q_phase", "TTFT p50"] {
            let row = cells(&md, &format!("C = {level}: {m}"));
            let ratio: f64 = row[5].parse().unwrap();
            assert!(ratio > 0.0, "{md}");
        }
    }
    twins(&out);
    let entry = toml::Value::String("paired".into());
    let files = LoadRuns.recheck(t.path(), &entry).unwrap();
    assert!(
        files.iter().any(|p| p.ends_with("02-b-0/curve.csv")),
        "{files:?}"
    );
    std::fs::write(out.join("arms.md"), md.replacen("C = 2", "C = 3", 1)).unwrap();
    let e = LoadRuns.recheck(t.path(), &entry).unwrap_err();
    assert!(format!("{e:#}").contains("arms.md differs"), "{e:#}");
}
