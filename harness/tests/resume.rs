//! A sweep stopped with Ctrl-C keeps its finished phases and every finished request's trace, and
//! `sweep --resume` completes the run without running a finished phase again: real `moefleet serve`
//! and `moefleet-harness` processes, a real SIGINT.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use moefleet_harness::driver::manifest::RunManifest;
use moefleet_harness::trace::{read_records, PhaseRecord, TraceRecord};

mod common;

use common::{harness, serve, Kill};

/// `moefleet-harness sweep` of `plan` into `run`, its stderr piped.
fn start_sweep(url: &str, plan: &Path, run: &Path) -> Kill {
    Kill(
        Command::new(harness())
            .args(["sweep", "--url", url, "--plan", plan.to_str().unwrap()])
            .arg("--out")
            .arg(run)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

const PLAN: &str = "name = \"resume\"\nlevels = [1, 2]\nmax_tokens = 120\nstagger_s = 0.015\n\
                    settle_s = 0.2\nmin_requests = 8\nfamily = \"mixed\"\n\n[[passes]]\n\
                    name = \"a\"\norder = \"ascending\"\n";

fn lines(p: &Path) -> usize {
    std::fs::read_to_string(p).map_or(0, |t| t.lines().count())
}

fn phases(run: &Path) -> Vec<String> {
    read_records::<PhaseRecord>(&run.join("phases.jsonl"))
        .unwrap()
        .into_iter()
        .map(|p| p.phase)
        .collect()
}

fn traces(p: PathBuf) -> Vec<TraceRecord> {
    read_records(&p).unwrap()
}

#[test]
fn an_interrupted_sweep_resumes_without_redoing_finished_phases() {
    let (_server, url) = serve(1, &[]);
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.toml");
    std::fs::write(&plan, PLAN).unwrap();
    let run = dir.path().join("run");
    let mut sweep = start_sweep(&url, &plan, &run);
    // Ctrl-C once the first phase has finished and the second has finished a request (of its
    // four cohorts of two)
    let t0 = Instant::now();
    while lines(&run.join("phases.jsonl")) < 1 || !run.join("traces/a_c002.jsonl.gz").exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "phase 2 never began"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = sweep.0.id().to_string();
    Command::new("kill").args(["-INT", &pid]).status().unwrap();
    let status = sweep.0.wait().unwrap();
    assert!(
        !status.success(),
        "an interrupted sweep exits with an error"
    );
    let m = RunManifest::read(&run).unwrap();
    assert!(m.interrupted && !m.complete, "{m:?}");
    // the server's configuration is recorded: one role, so one pipeline group
    assert_eq!(m.pipeline_groups, Some(1), "{m:?}");
    assert_eq!(phases(&run), ["a_c001"]);
    // a run recorded against other pipeline groups is not resumed against this server, and the
    // refusal leaves the run as it was (the cut phase's traces where they were)
    let cut = run.join("traces/a_c002.jsonl.gz");
    let cut_before = std::fs::read(&cut).ok();
    assert!(cut_before.is_some(), "the cut phase wrote no traces");
    let mut other = m.clone();
    other.pipeline_groups = Some(5);
    other.write(&run).unwrap();
    let refused = Command::new(harness())
        .args(["sweep", "--resume", "--out"])
        .arg(&run)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && said.contains("5 pipeline groups; this one has 1"),
        "{said}"
    );
    assert_eq!(
        std::fs::read(&cut).ok(),
        cut_before,
        "a refused resume moved traces"
    );
    m.write(&run).unwrap();
    let first = run.join("traces/a_c001.jsonl.gz");
    let kept = std::fs::read(&first).unwrap();
    assert_eq!(traces(first.clone()).len(), 8);
    let partial = run.join("traces/a_c002.jsonl.gz");
    let partial_n = if partial.exists() {
        traces(partial.clone()).len()
    } else {
        0
    };
    // resume: the first phase is not run again, the second runs whole
    let out = Command::new(harness())
        .args(["sweep", "--resume", "--out"])
        .arg(&run)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m = RunManifest::read(&run).unwrap();
    assert!(
        m.complete && !m.interrupted && m.resumed.len() == 1,
        "{m:?}"
    );
    assert_eq!(phases(&run), ["a_c001", "a_c002"]);
    assert_eq!(
        std::fs::read(&first).unwrap(),
        kept,
        "a finished phase ran again"
    );
    let second = traces(partial);
    assert_eq!(second.len(), 8);
    assert!(second.iter().all(|r| r.error.is_none()));
    let aside: Vec<_> = std::fs::read_dir(run.join("traces/interrupted"))
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    let kept_aside: usize = aside.iter().map(|p| traces(p.clone()).len()).sum();
    assert_eq!(
        kept_aside, partial_n,
        "the cut-short phase's finished requests are kept"
    );
    let analyzed = Command::new(harness())
        .arg("analyze")
        .arg(&run)
        .output()
        .unwrap();
    assert!(
        analyzed.status.success(),
        "{}",
        String::from_utf8_lossy(&analyzed.stderr)
    );
}

/// GET a JSON route of the server.
fn get(url: &str) -> Option<(u16, serde_json::Value)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let r = reqwest::get(url).await.ok()?;
        let code = r.status().as_u16();
        Some((code, r.json().await.unwrap_or_default()))
    })
}

#[test]
fn a_role_killed_mid_sweep_costs_no_stream_and_resume_completes_the_run() {
    let (_server, url) = serve(3, &[]);
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.toml");
    std::fs::write(&plan, PLAN).unwrap();
    let run = dir.path().join("run");
    let mut sweep = start_sweep(&url, &plan, &run);
    let t0 = Instant::now();
    while !run.join("traces/a_c002.jsonl.gz").exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "phase 2 never began"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let (_, stats) = get(&format!("{url}/api/stats")).unwrap();
    let role1 = stats["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["role"] == 1)
        .and_then(|p| p["pid"].as_u64())
        .unwrap();
    let t_kill = moefleet_harness::driver::client::epoch();
    Command::new("kill")
        .args(["-KILL", &role1.to_string()])
        .status()
        .unwrap();
    let t1 = Instant::now();
    let status = loop {
        if let Some(s) = sweep.0.try_wait().unwrap() {
            break s;
        }
        assert!(t1.elapsed() < Duration::from_secs(120), "the sweep hung");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut sweep.0.stderr.take().unwrap(), &mut err).unwrap();
    if !status.success() {
        // stopped on the 503 of a fleet recovering: it says how to go on, and the stopped
        // phase is not counted as finished
        assert!(err.contains("sweep --resume"), "{err}");
        assert_eq!(phases(&run), ["a_c001"], "{err}");
        let t2 = Instant::now();
        while get(&format!("{url}/health")).map(|h| h.0) != Some(200) {
            assert!(
                t2.elapsed() < Duration::from_secs(60),
                "the fleet did not come back"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = Command::new(harness())
            .args(["sweep", "--resume", "--out"])
            .arg(&run)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("the sweep stopped on the recovering fleet and was resumed");
    } else {
        eprintln!("the sweep went on through the recovery");
    }
    let m = RunManifest::read(&run).unwrap();
    assert!(m.complete, "{m:?}");
    assert_eq!(phases(&run), ["a_c001", "a_c002"]);
    // no request broke: the streams in flight were held through the recovery and completed; a
    // request that failed was refused while the fleet recovered
    let all: Vec<TraceRecord> = {
        let mut files = vec![
            run.join("traces/a_c001.jsonl.gz"),
            run.join("traces/a_c002.jsonl.gz"),
        ];
        if let Ok(d) = std::fs::read_dir(run.join("traces/interrupted")) {
            files.extend(d.map(|e| e.unwrap().path()));
        }
        files.into_iter().flat_map(traces).collect()
    };
    let broken: Vec<&TraceRecord> = (all.iter())
        .filter(|r| {
            r.error
                .as_deref()
                .is_some_and(|e| !e.starts_with("HTTP 503"))
        })
        .collect();
    assert!(
        broken.is_empty(),
        "broken by the kill at {t_kill}: {broken:?}"
    );
    for r in all.iter().filter(|r| {
        r.error
            .as_deref()
            .is_some_and(|e| e.starts_with("HTTP 503"))
    }) {
        let e = r.error.as_deref().unwrap();
        assert!(e.contains("recovering") && r.tokens() == 0, "{e}");
    }
    let finished = traces(run.join("traces/a_c002.jsonl.gz"));
    assert_eq!(finished.len(), 8);
}
