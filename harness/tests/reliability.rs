//! The reliability commands against a real `moefleet serve` (3 roles, real processes and TCP):
//! a short soak with overload bursts passes its checks, a kill costs only streams running before it
//! was noticed,
//! each record's summary is recomputed from its rows, and the table renders from the records.

#![allow(clippy::unwrap_used)]

use std::process::{Command, Output};

use moefleet_harness::reliability::load::Status;
use moefleet_harness::reliability::{faults, soak, table};
use moefleet_harness::trace::read_records;

mod common;

use common::{harness, serve};

fn run(args: &[&str]) -> Output {
    Command::new(harness()).args(args).output().unwrap()
}

fn shown(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn soak_and_faults_write_records_their_checks_and_the_table_reproduce() {
    let dir = tempfile::tempdir().unwrap();
    let soak_dir = dir.path().join("soak");
    let faults_dir = dir.path().join("faults");
    {
        // 8 slots and no queue: a 2x burst must be refused at capacity, retried and counted
        let (_server, url) = serve(3, &["--slots", "8", "--queue", "0"]);
        let o = run(&[
            "soak",
            "--url",
            &url,
            "--out",
            soak_dir.to_str().unwrap(),
            "--duration-s",
            "9",
            "--streams",
            "8",
            "--burst-every-s",
            "3",
            "--burst-s",
            "1.5",
            "--sample-s",
            "0.5",
            "--prompts",
            "6",
            "--max-tokens",
            "24",
        ]);
        let rec: soak::SoakRecord =
            serde_json::from_str(&std::fs::read_to_string(soak_dir.join("soak.json")).unwrap())
                .unwrap();
        let s = &rec.summary;
        // the checks a 9-second run can make (RSS still grows while it warms up)
        for name in [
            "no_corrupted_streams",
            "no_truncated_streams",
            "no_refusals_beyond_capacity",
            "server_tokens_equal_client_tokens",
            "server_requests_equal_client_requests",
            "server_rejections_equal_capacity_retries",
            "no_recoveries",
            "same_processes_throughout",
            "overload_reached",
        ] {
            assert!(s.checks[name], "{name}: {}", shown(&o));
        }
        assert_eq!(o.status.success(), s.passed, "{}", shown(&o));
        assert!(s.requests > 8 && s.client_tokens > 0, "{s:?}");
        assert_eq!(s.procs.len(), 3, "every role's process is watched");
        for p in &s.procs {
            assert!(p.rss_load_last_kib.is_some_and(|r| r > 1024), "{p:?}");
            assert!(
                p.fds_idle_before.is_some() && p.fds_idle_after.is_some(),
                "{p:?}"
            );
        }
        let again = soak::recheck(&soak_dir).unwrap();
        assert_eq!(
            (again.checks, again.requests),
            (s.checks.clone(), s.requests)
        );
    }
    {
        let (_server, url) = serve(3, &["--link-stall-s", "1"]);
        let o = run(&[
            "faults",
            "--url",
            &url,
            "--out",
            faults_dir.to_str().unwrap(),
            "--fault",
            "kill:1",
            "--fault",
            "stop:2",
            "--streams",
            "6",
            "--prompts",
            "4",
            "--max-tokens",
            "400",
            "--lead-s",
            "1",
            "--tail-s",
            "4",
        ]);
        assert!(o.status.success(), "{}", shown(&o));
        let found = faults::recheck(&faults_dir).unwrap();
        kill_costs(&faults_dir, &found);
        // SIGSTOP is noticed by the silence of a link: within its 1 s bound (and a second for
        // scheduling and the 20 ms polls), not before
        let stop = found[1].detect_s.unwrap();
        assert!((0.9..=2.0).contains(&stop), "{stop}");
    }
    // a summary edited by hand no longer matches its rows
    let path = faults_dir.join("faults.json");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replacen("\"broken\": ", "\"broken\": 1", 1)).unwrap();
    assert!(faults::recheck(&faults_dir).is_err());
    std::fs::write(&path, text).unwrap();

    let fuzz = dir.path().join("fuzz.json");
    std::fs::write(
        &fuzz,
        r#"{"executions": 5, "crash_reports": 0, "coverage": {"cov": 3}}"#,
    )
    .unwrap();
    let md = table::render(dir.path(), &["faults".into()], "soak", "fuzz.json").unwrap();
    assert_eq!(md.lines().count(), 2 + 2 + 1 + 1, "{md}");
    assert!(md.contains("`kill -9` role 1 |"), "{md}");
    assert!(md.contains("SIGSTOP role 2 (the last)"), "{md}");
    assert!(md.contains("| 5 inputs, 0 crashes, coverage 3 |"), "{md}");
    let cli = run(&[
        "reliability",
        "--root",
        dir.path().to_str().unwrap(),
        "--faults",
        "faults",
        "--soak",
        "soak",
        "--fuzz",
        "fuzz.json",
    ]);
    assert_eq!(String::from_utf8_lossy(&cli.stdout), md, "{}", shown(&cli));
}

/// Each scenario of the faults run in `dir` passed with its victim replaced, and cost nothing
/// (below).
fn kill_costs(dir: &std::path::Path, found: &[faults::Findings]) {
    let record: faults::FaultsRecord =
        serde_json::from_str(&std::fs::read_to_string(dir.join("faults.json")).unwrap()).unwrap();
    let rows: Vec<faults::Row> = read_records(&dir.join("requests.jsonl.gz")).unwrap();
    for (k, (ev, f)) in record.scenarios.iter().zip(found).enumerate() {
        assert!(f.passed && !f.ridden_through, "{f:?}");
        assert!(f.in_flight_at_fault > 0, "{f:?}");
        assert_eq!(f.victim_replaced, Some(true));
        // What a fault may cost: nothing. Every stream running at the fault is held through the
        // recovery and completes (passed holds none corrupted: each has the text it has alone),
        // and none begun after it breaks.
        let mine: Vec<_> = rows
            .iter()
            .filter(|r| r.scenario == k)
            .map(|r| &r.done)
            .collect();
        assert_eq!(f.broken, 0, "{f:?}");
        // the server counted the tokens its clients saw
        let r = f.resumed.as_ref().unwrap();
        assert_eq!(r.counters_agree, Some(true), "{f:?}");
        assert_eq!(r.server.streams_lost, 0, "{f:?}");
        let held: Vec<_> = mine
            .iter()
            .filter(|d| d.accepted() && d.started <= ev.t_fault && d.ended > ev.t_fault)
            .collect();
        assert!(!held.is_empty(), "{f:?}");
        assert!(
            held.iter().all(|d| matches!(d.status, Status::Complete)),
            "{f:?}"
        );
    }
}
