//! Making the scenarios: for each fault, streams run, the fault is made, `/health` is watched until
//! the fleet reports it and is ready again, the streams run on, and every prompt is asked alone.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};

use super::{all_findings, Events, Fault, FaultsConfig, FaultsRecord, Row};
use crate::driver::server::Server;
use crate::reliability::load::{self, Load, Status};
use crate::reliability::procs;
use crate::trace::{append_gz, read_records};

/// Seconds a stream waits after a refusal: the engine's Retry-After while it recovers.
const RETRY_WAIT_S: f64 = 2.0;

async fn health(server: &Server) -> Option<u16> {
    let r = server
        .http
        .get(format!("{}/health", server.base))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .ok()?;
    Some(r.status().as_u16())
}

/// Poll `/health` every 20 ms until `want` holds, at most `limit` seconds; the time it held.
async fn until(
    server: &Server,
    load: &Load,
    limit: f64,
    mut tick: impl FnMut(f64),
    want: impl Fn(Option<u16>) -> bool,
) -> Option<f64> {
    let t0 = load.clock.now().1;
    loop {
        let code = health(server).await;
        let t = load.clock.now().1;
        if want(code) {
            return Some(t);
        }
        tick(t);
        if t - t0 > limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn shell(cmd: &str) -> anyhow::Result<()> {
    let st = std::process::Command::new("sh")
        .args(["-c", cmd])
        .status()
        .with_context(|| format!("running {cmd}"))?;
    if !st.success() {
        bail!("`{cmd}` failed ({st})");
    }
    Ok(())
}

fn signal(sig: &str, pid: u32) -> anyhow::Result<()> {
    shell(&format!("kill -{sig} {pid}"))
}

/// Each prompt alone; the prompts whose output differs from `references`.
async fn changed(load: &Load, references: &BTreeMap<usize, String>) -> Vec<usize> {
    let mut out = Vec::new();
    for (&p, sha) in references {
        let (done, _) = load.request(p as u64, 0).await;
        if done.status != Status::Complete || &done.text_sha != sha {
            out.push(p);
        }
    }
    out
}

async fn processes(server: &Server) -> anyhow::Result<Vec<(usize, u32)>> {
    let stats = server.stats().await.context("reading /api/stats")?;
    Ok(procs::processes(&stats))
}

/// Run every scenario of `cfg` into `out` (created; must not exist).
pub async fn run(cfg: FaultsConfig, out: &Path) -> anyhow::Result<FaultsRecord> {
    if cfg.faults.is_empty() {
        bail!("no faults to make: give --fault kill:ROLE, stop:ROLE or cut");
    }
    let cuts = cfg
        .faults
        .iter()
        .any(|f| matches!(f, Fault::Cut(_) | Fault::Gone(_)));
    if cuts && (cfg.cut_cmd.is_none() || cfg.heal_cmd.is_none()) {
        bail!("a cut needs --cut-cmd and --heal-cmd");
    }
    if !(cfg.tail_s >= 2.0 * RETRY_WAIT_S && cfg.tail_s.is_finite()) {
        bail!(
            "--tail-s must be at least {} s: a stream refused while the fleet recovered waits \
             {RETRY_WAIT_S} s before its next request, which must begin after the fleet is ready",
            2.0 * RETRY_WAIT_S
        );
    }
    if out.exists() {
        bail!("{} already exists; give a new --out", out.display());
    }
    let server = Server::connect(&cfg.url).await?;
    let roles = server.roles();
    for f in &cfg.faults {
        if let (Fault::Kill(r) | Fault::Stop(r), Some(n)) = (f, roles) {
            if *r >= n {
                bail!("{f}: the fleet has roles 0..{}", n - 1);
            }
        }
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let rows_path = out.join("requests.jsonl.gz");
    let load = Load::new(
        server.clone(),
        load::prompt_set(cfg.prompts, cfg.min_tokens, cfg.max_tokens)?,
    );
    eprintln!(
        "faults: each of {} prompts alone first (references)",
        cfg.prompts
    );
    let references = load::references(&load).await?;
    let mut scenarios = Vec::new();
    for (i, fault) in cfg.faults.iter().enumerate() {
        scenarios.push(scenario(&cfg, &server, &load, &rows_path, &references, i, fault).await?);
    }
    let rows: Vec<Row> = read_records(&rows_path)?;
    let findings = all_findings(&scenarios, &rows, &references);
    let record = FaultsRecord {
        config: cfg,
        model: server.model.clone(),
        engine_commit: server.first_stat("engine_commit"),
        roles,
        host: crate::host::facts(),
        references,
        scenarios,
        findings,
    };
    crate::json::write(&out.join("faults.json"), &record)?;
    Ok(record)
}

/// Scenario `i`: streams run, `fault` is made and watched until the fleet is ready again, the
/// streams run on for `--tail-s`, then every prompt is asked alone; what happened.
async fn scenario(
    cfg: &FaultsConfig,
    server: &Server,
    load: &Arc<Load>,
    rows_path: &Path,
    references: &BTreeMap<usize, String>,
    i: usize,
    fault: &Fault,
) -> anyhow::Result<Events> {
    if until(server, load, cfg.ready_limit_s, |_| {}, |c| c == Some(200))
        .await
        .is_none()
    {
        bail!("the fleet was not ready before {fault}");
    }
    let before = processes(server).await?;
    let stats0 = server.stats().await;
    let recoveries0 = stats0.as_ref().and_then(|s| s["recoveries_total"].as_u64());
    let victim_pid = match fault {
        Fault::Kill(r) | Fault::Stop(r) => Some(
            before
                .iter()
                .find(|p| p.0 == *r)
                .map(|p| p.1)
                .with_context(|| format!("{fault}: role {r} is not a process on this machine"))?,
        ),
        Fault::Cut(_) | Fault::Gone(_) => None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let workers = streams(cfg, i, load, &stop, rows_path, &errors);
    tokio::time::sleep(Duration::from_secs_f64(cfg.lead_s)).await;
    let t_fault = load.clock.now().1;
    match fault {
        Fault::Kill(_) => signal("KILL", victim_pid.unwrap_or_default())?,
        Fault::Stop(_) => signal("STOP", victim_pid.unwrap_or_default())?,
        Fault::Cut(_) | Fault::Gone(_) => shell(cfg.cut_cmd.as_deref().unwrap_or_default())?,
    }
    eprintln!("faults: {fault} made; waiting for the fleet to notice");
    let (t_unready, t_healed, t_ready) = watch(cfg, server, load, fault, t_fault).await;
    eprintln!(
        "faults: {fault}: unready after {:?} s, ready after {:?} s",
        t_unready.map(|t| t - t_fault),
        t_ready.map(|t| t - t_fault)
    );
    tokio::time::sleep(Duration::from_secs_f64(cfg.tail_s)).await;
    stop.store(true, Ordering::Relaxed);
    let drained = tokio::time::timeout(
        Duration::from_secs(600),
        futures_util::future::join_all(workers),
    )
    .await;
    if drained.is_err() {
        bail!("{fault}: requests still ran 600 s after the scenario ended");
    }
    if let Some(e) = errors.lock().unwrap_or_else(|e| e.into_inner()).first() {
        bail!("writing {}: {e}", rows_path.display());
    }
    let t_end = load.clock.now().1;
    // the counters over the scenario's own requests (the prompts asked alone next are not rows)
    let stats1 = server.stats().await;
    let serving = health(server).await == Some(200);
    let changed_outputs = if serving {
        changed(load, references).await
    } else {
        references.keys().copied().collect()
    };
    // without the list no role can be called leaked: an unread list would make every live
    // role look leaked (and be killed below)
    let after = processes(server)
        .await
        .context("the role processes after the fault")?;
    let leaked: Vec<u32> = before
        .iter()
        .filter(|(role, pid)| *role != 0 && procs::alive(*pid) && !after.contains(&(*role, *pid)))
        .map(|p| p.1)
        .collect();
    let victim_alive_after = victim_pid.map(procs::alive);
    for pid in &leaked {
        // so that the next scenario starts clean; the record keeps the leak
        let _ = signal("KILL", *pid);
    }
    let recoveries1 = stats1.as_ref().and_then(|s| s["recoveries_total"].as_u64());
    let held = held_counts(stats0.as_ref(), stats1.as_ref());
    Ok(Events {
        fault: fault.clone(),
        victim_pid,
        processes_before: before,
        processes_after: after,
        leaked,
        victim_alive_after,
        t_fault,
        t_unready,
        t_healed,
        t_ready,
        t_end,
        recoveries: recoveries1.unwrap_or(0)
            - recoveries0.unwrap_or(0).min(recoveries1.unwrap_or(0)),
        changed_outputs,
        load_average: crate::host::load_average(),
        held,
    })
}

/// The server's held-stream counters over a scenario, when it keeps them.
fn held_counts(
    before: Option<&serde_json::Value>,
    after: Option<&serde_json::Value>,
) -> Option<super::HeldCounts> {
    let d = |k: &str| -> Option<u64> {
        let (a, b) = (before?[k].as_u64()?, after?[k].as_u64()?);
        Some(b.saturating_sub(a))
    };
    Some(super::HeldCounts {
        streams_resumed: d("streams_resumed_total")?,
        streams_lost: d("streams_lost_total")?,
        replay_rows: d("replay_rows_total")?,
        tokens: d("tokens_total"),
    })
}

/// The scenario's streams: each sends requests until `stop`, appending their rows (of scenario
/// `i`) to `rows_path`, and waits `RETRY_WAIT_S` after a refusal.
fn streams(
    cfg: &FaultsConfig,
    i: usize,
    load: &Arc<Load>,
    stop: &Arc<AtomicBool>,
    rows_path: &Path,
    errors: &Arc<Mutex<Vec<String>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut workers = Vec::new();
    for w in 0..cfg.streams {
        let (load, stop, rows_path, errors) = (
            load.clone(),
            stop.clone(),
            rows_path.to_path_buf(),
            errors.clone(),
        );
        workers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let (done, _) = load.request(load.next_id(), w).await;
                let refused = done.status == Status::Refused;
                if let Err(e) = append_gz(&rows_path, &Row { scenario: i, done }) {
                    errors
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(e.to_string());
                    return;
                }
                if refused {
                    tokio::time::sleep(Duration::from_secs_f64(RETRY_WAIT_S)).await;
                }
            }
        }));
    }
    workers
}

/// Watch `/health` after `fault` was made at `t_fault` until the fleet reports it, then until it is
/// ready again, running `--heal-cmd` once a cut has lasted its time: (unready, healed, ready).
async fn watch(
    cfg: &FaultsConfig,
    server: &Server,
    load: &Load,
    fault: &Fault,
    t_fault: f64,
) -> (Option<f64>, Option<f64>, Option<f64>) {
    let mut t_healed = None;
    let heal_at = match fault {
        Fault::Cut(ms) | Fault::Gone(ms) => Some(t_fault + *ms as f64 / 1000.0),
        _ => None,
    };
    let mut heal = |t: f64| {
        if heal_at.is_some_and(|at| t >= at) && t_healed.is_none() {
            if let Err(e) = shell(cfg.heal_cmd.as_deref().unwrap_or_default()) {
                eprintln!("faults: {e}");
            }
            t_healed = Some(t);
        }
    };
    let t_unready = until(server, load, cfg.detect_limit_s, &mut heal, |c| {
        c != Some(200)
    })
    .await;
    let t_ready = match t_unready {
        Some(_) => {
            until(server, load, cfg.ready_limit_s, &mut heal, |c| {
                c == Some(200)
            })
            .await
        }
        None => None,
    };
    // a host gone comes back when its time is up, after the fleet went on without it
    if let Some(at) = heal_at {
        let left = at - load.clock.now().1;
        if left > 0.0 && left.is_finite() {
            tokio::time::sleep(Duration::from_secs_f64(left)).await;
        }
    }
    // whatever happened, the link is mended by the end (at the time it is, for the record)
    let now = load.clock.now().1;
    heal(heal_at.map_or(now, |at| now.max(at)));
    (t_unready, t_healed, t_ready)
}
