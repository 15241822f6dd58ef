//! Driving a soak: references first, idle samples, the streams and their bursts for the run's
//! duration with the server sampled throughout, the drain, idle samples again, and the record.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;

use super::{summarize, Counters, Sample, SoakConfig, SoakRecord};
use crate::driver::server::Server;
use crate::reliability::load::{self, Done, Load, Status};
use crate::reliability::procs;
use crate::trace::{append_gz, append_jsonl, read_records};

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

    let workers = streams(&cfg, &load, &rows_path, &errors, load_start, end);
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
    crate::json::write(&out.join("soak.json"), &record)?;
    Ok(record)
}

/// The load's streams: `cfg.streams` throughout and `cfg.burst_streams()` more during bursts, each
/// appending its requests' rows to `rows_path` until `end` (seconds on the run's clock).
fn streams(
    cfg: &SoakConfig,
    load: &Arc<Load>,
    rows_path: &Path,
    errors: &Arc<Mutex<Vec<String>>>,
    load_start: f64,
    end: f64,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut workers = Vec::new();
    let burst = cfg.burst_streams();
    for w in 0..cfg.streams + burst {
        let (load, cfg, rows_path, errors) = (
            load.clone(),
            cfg.clone(),
            rows_path.to_path_buf(),
            errors.clone(),
        );
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
    workers
}
