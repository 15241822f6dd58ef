//! The soak (`moefleet-harness soak`): a bounded run at a fixed number of streams with periodic
//! overload bursts, against a moefleet server on this machine. Every request's row goes to
//! OUT/requests.jsonl.gz as it ends and every sample of the server's processes to
//! OUT/samples.jsonl as it is taken; OUT/soak.json holds what was asked, the counters before and
//! after, and the summary [`summarize`] computes from those rows (as `verify` does again).
//!
//! Over 600 lines because its unit tests (each check shown to fail on its own fault) live beside
//! `summarize`; the code before them is about 540 lines.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::load::{self, Done, Load, Status};
use super::procs::{self, ProcSample};
use crate::driver::server::Server;
use crate::trace::{append_gz, append_jsonl, read_records};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SoakConfig {
    pub url: String,
    pub duration_s: f64,
    /// Streams kept open throughout.
    pub streams: usize,
    /// A burst begins every this many seconds (the first after one period).
    pub burst_every_s: f64,
    pub burst_s: f64,
    /// Offered streams during a burst, as a multiple of `streams`.
    pub burst_factor: f64,
    pub prompts: usize,
    pub min_tokens: usize,
    pub max_tokens: usize,
    pub sample_s: f64,
    /// Longest wait for the requests in flight at the end to finish.
    pub drain_s: f64,
}

impl SoakConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        let positive = [
            ("--duration-s", self.duration_s),
            ("--burst-every-s", self.burst_every_s),
            ("--sample-s", self.sample_s),
            ("--drain-s", self.drain_s),
        ];
        for (name, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                bail!("{name} must be a positive number of seconds (got {v})");
            }
        }
        if !(self.burst_s >= 0.0 && self.burst_s < self.burst_every_s) {
            bail!("--burst-s must be at least 0 and shorter than --burst-every-s");
        }
        if !(self.burst_factor >= 1.0 && self.burst_factor <= 16.0) {
            bail!("--burst-factor must be between 1 and 16");
        }
        if self.streams == 0 {
            bail!("--streams must be at least 1");
        }
        Ok(())
    }

    /// Extra streams during a burst.
    pub fn burst_streams(&self) -> usize {
        ((self.burst_factor - 1.0) * self.streams as f64).round() as usize
    }

    /// Is `t` seconds after the load began inside a burst?
    pub fn in_burst(&self, t: f64) -> bool {
        t >= self.burst_every_s && t % self.burst_every_s < self.burst_s
    }
}

/// One sample of the server while the load runs (or idle before and after it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds on the run's clock.
    pub t: f64,
    /// "idle_before", "load" or "idle_after".
    pub when: String,
    pub load1: Option<f64>,
    pub in_flight: Option<u64>,
    pub queue_depth: Option<u64>,
    pub tokens_total: Option<u64>,
    pub procs: Vec<ProcSample>,
}

/// The server's counters a soak compares with its own counts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Counters {
    pub tokens_total: u64,
    pub requests_total: u64,
    pub rejected_total: u64,
    pub recoveries_total: u64,
}

impl Counters {
    fn of(stats: &Value) -> anyhow::Result<Counters> {
        let g = |k: &str| {
            stats[k]
                .as_u64()
                .with_context(|| format!("/api/stats has no {k}"))
        };
        Ok(Counters {
            tokens_total: g("tokens_total")?,
            requests_total: g("requests_total")?,
            rejected_total: g("rejected_total")?,
            recoveries_total: g("recoveries_total")?,
        })
    }
}

/// What OUT/soak.json holds besides its summary.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SoakRecord {
    pub config: SoakConfig,
    pub model: String,
    pub engine_commit: Value,
    pub host: Value,
    /// Each prompt's text sha when it ran alone before the load.
    pub references: BTreeMap<usize, String>,
    pub before: Counters,
    pub after: Counters,
    /// Load began / ended, seconds on the run's clock.
    pub load_start: f64,
    pub load_end: f64,
    pub load_average_start: Option<[f64; 3]>,
    pub load_average_end: Option<[f64; 3]>,
    pub summary: Summary,
}

/// Resident memory and descriptors of one role over the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcSummary {
    pub role: usize,
    pub pids: Vec<u32>,
    pub rss_idle_before_kib: Option<u64>,
    pub rss_load_first_kib: Option<u64>,
    pub rss_load_last_kib: Option<u64>,
    pub rss_idle_after_kib: Option<u64>,
    /// Largest RSS in the first and in the second half of the load.
    pub rss_max_first_half_kib: Option<u64>,
    pub rss_max_second_half_kib: Option<u64>,
    /// Fewest descriptors over the idle samples before and after the load (a connection being
    /// closed as a sample is taken is not a leak; a leaked descriptor is in every sample).
    pub fds_idle_before: Option<u64>,
    pub fds_idle_after: Option<u64>,
    pub fds_max_load: Option<u64>,
}

/// Allowed growth of a role's largest RSS from the first half of the load to the second, as a
/// fraction of the first half's: allocator pages reused unevenly under bursts move it by well
/// under this; a leak of `RSS_GROWTH_BOUND × RSS / requests-in-the-second-half` bytes per request
/// or more crosses it (the record states that size).
pub const RSS_GROWTH_BOUND: f64 = 0.02;

/// The soak's findings, recomputed from its rows by [`summarize`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub requests: usize,
    pub complete: usize,
    pub broken: usize,
    pub miscounted: usize,
    pub refused: usize,
    pub capacity_retries: u64,
    /// Complete, but the text differs from the prompt's output alone (or counts differ).
    pub corrupted: usize,
    /// Accepted, but short of its cap or without a `length` finish (or broken).
    pub truncated: usize,
    pub client_tokens: u64,
    pub server_tokens: u64,
    /// Requests the server counted: each row's accepted attempt or refusal plus its capacity
    /// retries, plus the references.
    pub client_requests: u64,
    pub server_requests: u64,
    pub server_rejected: u64,
    pub recoveries: u64,
    pub max_in_flight: Option<u64>,
    pub requests_second_half: usize,
    pub procs: Vec<ProcSummary>,
    /// Smallest per-request leak (bytes) the RSS bound would catch, over all roles.
    pub detectable_leak_bytes_per_request: Option<f64>,
    pub checks: BTreeMap<String, bool>,
    pub passed: bool,
}

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

/// How long after reading `/api/stats` its processes are read: role 0 has closed that request's
/// connection by then when idle (read at once, a third of idle samples count it as a descriptor).
const AFTER_STATS: Duration = Duration::from_millis(300);

/// Sample the server once.
async fn sample(server: &Server, load: &Load, when: &str) -> Sample {
    let stats = server.stats().await.unwrap_or(Value::Null);
    tokio::time::sleep(AFTER_STATS).await;
    let procs = procs::processes(&stats)
        .into_iter()
        .map(|(role, pid)| procs::sample(role, pid))
        .collect();
    Sample {
        t: load.clock.now().1,
        when: when.to_string(),
        load1: crate::host::load_average().map(|l| l[0]),
        in_flight: stats["requests_in_flight"].as_u64(),
        queue_depth: stats["queue_depth"].as_u64(),
        tokens_total: stats["tokens_total"].as_u64(),
        procs,
    }
}

/// Run a soak into `out` (created; must not exist).
pub async fn run(cfg: SoakConfig, out: &Path) -> anyhow::Result<SoakRecord> {
    cfg.validate()?;
    if out.exists() {
        bail!("{} already exists; give a new --out", out.display());
    }
    let server = Server::connect(&cfg.url).await?;
    let first = server.first_stats.clone().with_context(|| {
        format!(
            "{} has no /api/stats: the soak needs moefleet's counters",
            cfg.url
        )
    })?;
    if procs::processes(&first).is_empty() {
        bail!("/api/stats lists no processes: this moefleet is too old for a soak");
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let prompts = load::prompt_set(cfg.prompts, cfg.min_tokens, cfg.max_tokens)?;
    let load = Load::new(server.clone(), prompts);
    if server
        .wait_idle(Duration::from_secs(60), Duration::from_millis(200))
        .await
        != Some(true)
    {
        bail!("the server did not become idle within 60 s; a soak needs it to itself");
    }
    eprintln!(
        "soak: each of {} prompts alone first (references)",
        cfg.prompts
    );
    let references = load::references(&load).await?;
    let samples_path = out.join("samples.jsonl");
    let rows_path = out.join("requests.jsonl.gz");
    tokio::time::sleep(Duration::from_secs(1)).await;
    for _ in 0..3 {
        append_jsonl(&samples_path, &sample(&server, &load, "idle_before").await)?;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let before = Counters::of(&server.stats().await.context("reading /api/stats")?)?;
    let load_average_start = crate::host::load_average();
    let load_start = load.clock.now().1;
    let end = load_start + cfg.duration_s;
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();

    let mut workers = Vec::new();
    let burst = cfg.burst_streams();
    for w in 0..cfg.streams + burst {
        let (load, cfg, rows_path, errors) =
            (load.clone(), cfg.clone(), rows_path.clone(), errors.clone());
        workers.push(tokio::spawn(async move {
            let bursting = w >= cfg.streams;
            loop {
                let t = load.clock.now().1;
                if t >= end {
                    return;
                }
                if bursting && !cfg.in_burst(t - load_start) {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    continue;
                }
                let (done, _) = load.request(load.next_id(), w).await;
                if let Err(e) = append_gz(&rows_path, &done) {
                    errors
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(e.to_string());
                    return;
                }
                if done.status == Status::Refused {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
            }
        }));
    }
    let bar = ProgressBar::new(cfg.duration_s.ceil() as u64);
    bar.set_style(
        ProgressStyle::with_template("soak [{bar:30}] {pos}/{len} s {msg}")?.progress_chars("=> "),
    );
    let mut next_sample = load_start;
    loop {
        let t = load.clock.now().1;
        if t >= end {
            break;
        }
        if t >= next_sample {
            let s = sample(&server, &load, "load").await;
            bar.set_message(format!(
                "{} in flight, {} queued, load {:.1}{}",
                s.in_flight.unwrap_or(0),
                s.queue_depth.unwrap_or(0),
                s.load1.unwrap_or(0.0),
                if cfg.in_burst(t - load_start) {
                    ", burst"
                } else {
                    ""
                }
            ));
            append_jsonl(&samples_path, &s)?;
            next_sample += cfg.sample_s;
        }
        bar.set_position((t - load_start) as u64);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    bar.finish_with_message("draining");
    let drained = tokio::time::timeout(
        Duration::from_secs_f64(cfg.drain_s),
        futures_util::future::join_all(workers),
    )
    .await;
    if drained.is_err() {
        bail!("requests still ran {} s after the load ended", cfg.drain_s);
    }
    if let Some(e) = errors.lock().unwrap_or_else(|e| e.into_inner()).first() {
        bail!("writing {}: {e}", rows_path.display());
    }
    let load_end = load.clock.now().1;
    append_jsonl(&samples_path, &sample(&server, &load, "load").await)?;
    server
        .wait_idle(Duration::from_secs(60), Duration::from_millis(200))
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for _ in 0..3 {
        append_jsonl(&samples_path, &sample(&server, &load, "idle_after").await)?;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let after = Counters::of(&server.stats().await.context("reading /api/stats")?)?;
    // the references were sent before `before`: they are not in the server's difference
    let rows: Vec<Done> = read_records(&rows_path)?;
    let samples: Vec<Sample> = read_records(&samples_path)?;
    let summary = summarize(
        &rows,
        &samples,
        &references,
        &before,
        &after,
        (load_start, load_end),
    );
    let record = SoakRecord {
        config: cfg,
        model: server.model.clone(),
        engine_commit: server.first_stat("engine_commit"),
        host: crate::host::facts(),
        references,
        before,
        after,
        load_start,
        load_end,
        load_average_start,
        load_average_end: crate::host::load_average(),
        summary,
    };
    std::fs::write(
        out.join("soak.json"),
        serde_json::to_string_pretty(&record)? + "\n",
    )?;
    Ok(record)
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
    if !crate::claims::same_json(
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

    #[test]
    fn bursts_follow_the_period() {
        let cfg = SoakConfig {
            url: String::new(),
            duration_s: 1800.0,
            streams: 176,
            burst_every_s: 300.0,
            burst_s: 60.0,
            burst_factor: 2.0,
            prompts: 24,
            min_tokens: 16,
            max_tokens: 96,
            sample_s: 10.0,
            drain_s: 600.0,
        };
        cfg.validate().unwrap();
        assert_eq!(cfg.burst_streams(), 176);
        assert!(!cfg.in_burst(10.0) && !cfg.in_burst(299.0));
        assert!(cfg.in_burst(300.0) && cfg.in_burst(359.0) && !cfg.in_burst(360.0));
        assert!(cfg.in_burst(1500.0));
        let bad = SoakConfig {
            burst_s: 300.0,
            ..cfg.clone()
        };
        assert!(bad.validate().is_err());
        let bad = SoakConfig {
            duration_s: f64::NAN,
            ..cfg
        };
        assert!(bad.validate().is_err());
    }
}
