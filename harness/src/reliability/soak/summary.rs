//! The soak's summary from its rows (`summarize`, as `run` writes it and `verify` recomputes it
//! with `recheck`), and the checks it must pass.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde_json::json;

use super::{Counters, ProcSummary, Sample, SoakRecord, Summary, RSS_GROWTH_BOUND};
use crate::reliability::load::{Done, Status};
use crate::reliability::procs::ProcSample;
use crate::trace::read_records;

/// The summary of a soak from its rows (requests, samples, references, counters).
pub fn summarize(
    rows: &[Done],
    samples: &[Sample],
    references: &BTreeMap<usize, String>,
    before: &Counters,
    after: &Counters,
    load: (f64, f64),
) -> Summary {
    let count = |s: Status| rows.iter().filter(|d| d.status == s).count();
    let corrupt = |d: &Done| match d.status {
        Status::Miscounted => true,
        Status::Complete => references.get(&d.prompt) != Some(&d.text_sha),
        _ => false,
    };
    let short = |d: &Done| match d.status {
        Status::Broken => true,
        Status::Complete => {
            d.tokens != d.max_tokens as u64 || d.finish.as_deref() != Some("length")
        }
        _ => false,
    };
    let half = (load.0 + load.1) / 2.0;
    let load_samples: Vec<&Sample> = samples.iter().filter(|s| s.when == "load").collect();
    let roles: std::collections::BTreeSet<usize> = samples
        .iter()
        .flat_map(|s| s.procs.iter().map(|p| p.role))
        .collect();
    let of = |s: &Sample, role: usize| s.procs.iter().find(|p| p.role == role).cloned();
    let mut procs = Vec::new();
    for role in roles {
        let series = |when: &str| -> Vec<(f64, ProcSample)> {
            samples
                .iter()
                .filter(|s| s.when == when)
                .filter_map(|s| of(s, role).map(|p| (s.t, p)))
                .collect()
        };
        let (idle_b, on, idle_a) = (series("idle_before"), series("load"), series("idle_after"));
        let max_rss = |pick: &dyn Fn(f64) -> bool| {
            on.iter()
                .filter(|(t, _)| pick(*t))
                .filter_map(|(_, p)| p.rss_kib)
                .max()
        };
        let mut pids: Vec<u32> = samples
            .iter()
            .filter_map(|s| of(s, role).map(|p| p.pid))
            .collect();
        pids.dedup();
        procs.push(ProcSummary {
            role,
            pids,
            rss_idle_before_kib: idle_b.last().and_then(|p| p.1.rss_kib),
            rss_load_first_kib: on.first().and_then(|p| p.1.rss_kib),
            rss_load_last_kib: on.last().and_then(|p| p.1.rss_kib),
            rss_idle_after_kib: idle_a.last().and_then(|p| p.1.rss_kib),
            rss_max_first_half_kib: max_rss(&|t| t < half),
            rss_max_second_half_kib: max_rss(&|t| t >= half),
            fds_idle_before: idle_b.iter().filter_map(|p| p.1.fds).min(),
            fds_idle_after: idle_a.iter().filter_map(|p| p.1.fds).min(),
            fds_max_load: on.iter().filter_map(|p| p.1.fds).max(),
        });
    }
    let requests_second_half = rows.iter().filter(|d| d.started >= half).count();
    let detectable = procs
        .iter()
        .filter_map(|p| p.rss_max_first_half_kib)
        .map(|kib| RSS_GROWTH_BOUND * kib as f64 * 1024.0 / requests_second_half.max(1) as f64)
        .reduce(f64::max);
    let s = Summary {
        requests: rows.len(),
        complete: count(Status::Complete),
        broken: count(Status::Broken),
        miscounted: count(Status::Miscounted),
        refused: count(Status::Refused),
        capacity_retries: rows.iter().map(|d| u64::from(d.capacity_retries)).sum(),
        corrupted: rows.iter().filter(|d| corrupt(d)).count(),
        truncated: rows.iter().filter(|d| short(d)).count(),
        client_tokens: rows.iter().map(|d| d.tokens).sum(),
        server_tokens: after.tokens_total - before.tokens_total.min(after.tokens_total),
        client_requests: rows.iter().map(|d| 1 + u64::from(d.capacity_retries)).sum(),
        server_requests: after.requests_total - before.requests_total.min(after.requests_total),
        server_rejected: after.rejected_total - before.rejected_total.min(after.rejected_total),
        recoveries: after.recoveries_total - before.recoveries_total.min(after.recoveries_total),
        max_in_flight: load_samples.iter().filter_map(|s| s.in_flight).max(),
        requests_second_half,
        procs,
        detectable_leak_bytes_per_request: detectable,
        checks: BTreeMap::new(),
        passed: false,
    };
    with_checks(s)
}

fn with_checks(mut s: Summary) -> Summary {
    let rss_stable =
        s.procs.iter().all(
            |p| match (p.rss_max_first_half_kib, p.rss_max_second_half_kib) {
                (Some(a), Some(b)) => b as f64 <= a as f64 * (1.0 + RSS_GROWTH_BOUND),
                _ => false,
            },
        );
    let fds_flat = s
        .procs
        .iter()
        .all(|p| match (p.fds_idle_before, p.fds_idle_after) {
            (Some(a), Some(b)) => b <= a,
            _ => false,
        });
    let checks = [
        ("no_corrupted_streams", s.corrupted == 0),
        ("no_truncated_streams", s.truncated == 0),
        ("no_refusals_beyond_capacity", s.refused == 0),
        (
            "server_tokens_equal_client_tokens",
            s.server_tokens == s.client_tokens,
        ),
        (
            "server_requests_equal_client_requests",
            s.server_requests == s.client_requests,
        ),
        (
            "server_rejections_equal_capacity_retries",
            s.server_rejected == s.capacity_retries,
        ),
        ("no_recoveries", s.recoveries == 0),
        (
            "same_processes_throughout",
            s.procs.iter().all(|p| p.pids.len() == 1),
        ),
        ("rss_stable", !s.procs.is_empty() && rss_stable),
        ("no_descriptor_growth", !s.procs.is_empty() && fds_flat),
        ("overload_reached", s.capacity_retries > 0),
    ];
    s.checks = checks.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    s.passed = s.checks.values().all(|v| *v);
    s
}

/// Recompute a committed soak's summary from its rows; Err names what differs.
pub fn recheck(dir: &Path) -> anyhow::Result<Summary> {
    let path: PathBuf = dir.join("soak.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let record: SoakRecord =
        serde_json::from_str(&text).with_context(|| path.display().to_string())?;
    let rows: Vec<Done> = read_records(&dir.join("requests.jsonl.gz"))?;
    let samples: Vec<Sample> = read_records(&dir.join("samples.jsonl"))?;
    let fresh = summarize(
        &rows,
        &samples,
        &record.references,
        &record.before,
        &record.after,
        (record.load_start, record.load_end),
    );
    if !crate::recheck::same_json(
        &serde_json::to_value(&record.summary)?,
        &serde_json::to_value(&fresh)?,
    ) {
        bail!(
            "{}: the summary differs from a fresh one of its rows:\n{}",
            path.display(),
            json!({"committed": record.summary, "fresh": fresh})
        );
    }
    Ok(fresh)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: u64, prompt: usize, status: Status, tokens: u64, sha: &str, started: f64) -> Done {
        Done {
            id,
            worker: 0,
            prompt,
            max_tokens: 4,
            started,
            ended: started + 1.0,
            status,
            tokens,
            usage: Some(tokens),
            finish: Some("length".into()),
            capacity_retries: 1,
            text_sha: sha.into(),
            error: None,
            longest_gap_s: None,
        }
    }

    fn samples(rss: [u64; 4], fds: [u64; 2]) -> Vec<Sample> {
        let s = |t: f64, when: &str, rss: u64, fds: u64| Sample {
            t,
            when: when.into(),
            load1: Some(1.0),
            in_flight: Some(3),
            queue_depth: Some(0),
            tokens_total: None,
            procs: vec![ProcSample {
                role: 0,
                pid: 7,
                rss_kib: Some(rss),
                fds: Some(fds),
            }],
        };
        vec![
            s(0.0, "idle_before", 100, fds[0]),
            s(1.0, "load", rss[0], 40),
            s(4.0, "load", rss[1], 40),
            s(6.0, "load", rss[2], 40),
            s(9.0, "load", rss[3], 40),
            s(11.0, "idle_after", rss[3], fds[1]),
            s(12.0, "idle_after", rss[3], fds[1] + 1),
        ]
    }

    fn counters(tokens: u64, requests: u64, rejected: u64) -> Counters {
        Counters {
            tokens_total: tokens,
            requests_total: requests,
            rejected_total: rejected,
            recoveries_total: 0,
        }
    }

    #[test]
    fn a_clean_soak_passes_every_check() {
        let refs = BTreeMap::from([(0, "aa".to_string()), (1, "bb".to_string())]);
        let rows = vec![
            row(0, 0, Status::Complete, 4, "aa", 1.0),
            row(1, 1, Status::Complete, 4, "bb", 6.0),
        ];
        let s = summarize(
            &rows,
            &samples([200, 300, 300, 301], [10, 10]),
            &refs,
            &counters(5, 10, 0),
            &counters(13, 14, 2),
            (0.0, 10.0),
        );
        assert!(s.passed, "{:?}", s.checks);
        assert_eq!((s.client_tokens, s.server_tokens), (8, 8));
        assert_eq!((s.client_requests, s.server_requests), (4, 4));
        assert_eq!(s.requests_second_half, 1);
        let p = &s.procs[0];
        assert_eq!(
            (p.rss_max_first_half_kib, p.rss_max_second_half_kib),
            (Some(300), Some(301))
        );
        assert_eq!((p.fds_idle_before, p.fds_idle_after), (Some(10), Some(10)));
        // 2 % of 300 KiB over the one request of the second half
        let leak = s.detectable_leak_bytes_per_request.unwrap();
        assert!((leak - 0.02 * 300.0 * 1024.0).abs() < 1e-9, "{leak}");
    }

    #[test]
    fn each_fault_fails_its_check() {
        let refs = BTreeMap::from([(0, "aa".to_string())]);
        let ok = row(0, 0, Status::Complete, 4, "aa", 1.0);
        let fine = samples([200, 300, 300, 301], [10, 10]);
        let check = |rows: Vec<Done>, samples: &[Sample], after: Counters, name: &str| {
            let s = summarize(
                &rows,
                samples,
                &refs,
                &counters(0, 0, 0),
                &after,
                (0.0, 10.0),
            );
            assert!(!s.checks[name], "{name} should fail: {:?}", s.checks);
            assert!(!s.passed);
        };
        let other_text = row(1, 0, Status::Complete, 4, "zz", 1.0);
        check(
            vec![ok.clone(), other_text],
            &fine,
            counters(8, 4, 2),
            "no_corrupted_streams",
        );
        let mut short = ok.clone();
        short.tokens = 3;
        short.usage = Some(3);
        check(
            vec![short],
            &fine,
            counters(3, 2, 1),
            "no_truncated_streams",
        );
        check(
            vec![ok.clone()],
            &fine,
            counters(5, 2, 1),
            "server_tokens_equal_client_tokens",
        );
        check(
            vec![ok.clone()],
            &fine,
            counters(4, 3, 1),
            "server_requests_equal_client_requests",
        );
        check(
            vec![ok.clone()],
            &samples([200, 300, 300, 400], [10, 10]),
            counters(4, 2, 1),
            "rss_stable",
        );
        check(
            vec![ok.clone()],
            &samples([200, 300, 300, 300], [10, 11]),
            counters(4, 2, 1),
            "no_descriptor_growth",
        );
        let mut calm = ok;
        calm.capacity_retries = 0;
        check(vec![calm], &fine, counters(4, 1, 0), "overload_reached");
    }
}
