//! Faults under load (`moefleet-harness faults`): for each scenario (kill -9 a role, SIGSTOP a
//! role, or run a command that cuts a link and another that mends it), streams run, the fault is
//! made, `/health` is read every 20 ms until the fleet reports the loss and again until it is
//! ready, the streams run on a while, and then every prompt is asked again alone and must give
//! the output it gave before any fault. Rows go to OUT/requests.jsonl.gz as requests end (with
//! their scenario); OUT/faults.json holds each scenario's events and the findings [`findings`]
//! computes from them and the rows.
//!
//! Over 600 lines because its unit tests (in-flight against later losses, ride-through) live
//! beside `findings`; the code before them is about 560 lines.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::load::{self, Done, Load, Status};
use super::procs;
use crate::driver::server::Server;
use crate::trace::{append_gz, read_records};

/// One fault.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// SIGKILL the role's process.
    Kill(usize),
    /// SIGSTOP the role's process (the fleet must notice the silence and replace it).
    Stop(usize),
    /// Run `--cut-cmd`, and `--heal-cmd` this many milliseconds later.
    Cut(u64),
}

impl std::str::FromStr for Fault {
    type Err = String;

    fn from_str(s: &str) -> Result<Fault, String> {
        let role = |r: &str| {
            r.parse::<usize>().ok().filter(|r| *r >= 1).ok_or(format!(
                "'{s}': the role must be a number from 1 (role 0 is the server)"
            ))
        };
        match s.split_once(':') {
            Some(("kill", r)) => Ok(Fault::Kill(role(r)?)),
            Some(("stop", r)) => Ok(Fault::Stop(role(r)?)),
            Some(("cut", t)) => match t.parse::<f64>() {
                Ok(t) if t > 0.0 && t <= 3600.0 => Ok(Fault::Cut((t * 1000.0).round() as u64)),
                _ => Err(format!(
                    "'{s}': the cut lasts SECONDS, more than 0 and at most 3600"
                )),
            },
            _ => Err(format!("'{s}' is not kill:ROLE, stop:ROLE or cut:SECONDS")),
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Kill(r) => write!(f, "kill:{r}"),
            Fault::Stop(r) => write!(f, "stop:{r}"),
            Fault::Cut(ms) => write!(f, "cut:{}", *ms as f64 / 1000.0),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FaultsConfig {
    pub url: String,
    pub faults: Vec<Fault>,
    pub streams: usize,
    pub prompts: usize,
    pub min_tokens: usize,
    pub max_tokens: usize,
    /// Seconds of load before the fault, and after the fleet is ready again.
    pub lead_s: f64,
    pub tail_s: f64,
    /// Longest wait for the fleet to report the fault, and then to be ready.
    pub detect_limit_s: f64,
    pub ready_limit_s: f64,
    pub cut_cmd: Option<String>,
    pub heal_cmd: Option<String>,
}

/// A request of a scenario.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    pub scenario: usize,
    #[serde(flatten)]
    pub done: Done,
}

/// What happened in one scenario, as it was watched (seconds on the run's clock).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Events {
    pub fault: Fault,
    pub victim_pid: Option<u32>,
    pub processes_before: Vec<(usize, u32)>,
    pub processes_after: Vec<(usize, u32)>,
    /// Processes of `processes_before` still running at the end that are not in
    /// `processes_after` (leaked).
    pub leaked: Vec<u32>,
    /// The victim's process still ran (stopped or not) when the scenario ended.
    pub victim_alive_after: Option<bool>,
    pub t_fault: f64,
    /// First `/health` answer other than 200 after the fault (None: none was seen).
    pub t_unready: Option<f64>,
    pub t_healed: Option<f64>,
    /// First 200 after `t_unready`.
    pub t_ready: Option<f64>,
    pub t_end: f64,
    pub recoveries: u64,
    /// Prompts whose output alone after the fault differs from theirs before any fault (all of
    /// them when the fleet was not ready at the end).
    pub changed_outputs: Vec<usize>,
    pub load_average: Option<[f64; 3]>,
}

/// The findings of one scenario from its events and rows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Findings {
    pub fault: String,
    /// Fault to the first sign of it: `/health` unready or a stream ending in error.
    pub detect_s: Option<f64>,
    /// Fault to ready again.
    pub ready_s: Option<f64>,
    pub in_flight_at_fault: usize,
    /// Streams that ended in error.
    pub broken: usize,
    /// Of those, the ones that began after the fleet reported the fault (must be none).
    pub broken_after_unready: usize,
    /// Streams that ended complete but with wrong counts, short, or with other text than alone.
    pub corrupted: usize,
    /// Requests refused (503) while the fleet recovered.
    pub refused: usize,
    /// Requests that began after the fleet was ready again, and how many of them completed.
    pub after_ready: usize,
    pub after_ready_complete: usize,
    pub recoveries: u64,
    pub outputs_unchanged: bool,
    pub no_leaked_processes: bool,
    pub victim_replaced: Option<bool>,
    /// The fleet never reported the fault and no stream broke: it rode through (a cut shorter
    /// than the stall bound).
    pub ridden_through: bool,
    /// Nothing lost beyond the streams in flight when the fleet reported the fault, one recovery
    /// brought the fleet back (or it rode through with nothing lost), and it serves what it
    /// served before.
    pub passed: bool,
}

/// The findings of a scenario.
pub fn findings(ev: &Events, rows: &[&Done], references: &BTreeMap<usize, String>) -> Findings {
    let first_error = rows
        .iter()
        .filter(|d| d.status == Status::Broken && d.ended >= ev.t_fault)
        .map(|d| d.ended)
        .reduce(f64::min);
    let noticed = match (ev.t_unready, first_error) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let broken: Vec<&&Done> = rows.iter().filter(|d| d.status == Status::Broken).collect();
    let corrupt = |d: &Done| match d.status {
        Status::Miscounted => true,
        Status::Complete => {
            references.get(&d.prompt) != Some(&d.text_sha)
                || d.tokens != d.max_tokens as u64
                || d.finish.as_deref() != Some("length")
        }
        _ => false,
    };
    let after_ready: Vec<&&Done> = match ev.t_ready {
        Some(t) => rows.iter().filter(|d| d.started >= t).collect(),
        None => Vec::new(),
    };
    let victim_replaced = ev.victim_pid.map(|pid| {
        ev.victim_alive_after == Some(false) && !ev.processes_after.iter().any(|p| p.1 == pid)
    });
    let broken_after_unready = match noticed {
        Some(t) => broken.iter().filter(|d| d.started > t).count(),
        None => 0,
    };
    let mut f = Findings {
        fault: ev.fault.to_string(),
        detect_s: noticed.map(|t| t - ev.t_fault),
        ready_s: ev.t_ready.map(|t| t - ev.t_fault),
        in_flight_at_fault: rows
            .iter()
            .filter(|d| d.accepted() && d.started <= ev.t_fault && d.ended > ev.t_fault)
            .count(),
        broken: broken.len(),
        broken_after_unready,
        corrupted: rows.iter().filter(|d| corrupt(d)).count(),
        refused: rows.iter().filter(|d| d.status == Status::Refused).count(),
        after_ready: after_ready.len(),
        after_ready_complete: after_ready
            .iter()
            .filter(|d| d.status == Status::Complete)
            .count(),
        recoveries: ev.recoveries,
        outputs_unchanged: ev.changed_outputs.is_empty(),
        no_leaked_processes: ev.leaked.is_empty(),
        victim_replaced,
        ridden_through: noticed.is_none() && broken.is_empty(),
        passed: false,
    };
    let common = f.corrupted == 0 && f.outputs_unchanged && f.no_leaked_processes;
    f.passed = common
        && if f.ridden_through {
            f.recoveries == 0 && f.refused == 0 && matches!(ev.fault, Fault::Cut(_))
        } else {
            f.ready_s.is_some()
                && f.broken_after_unready == 0
                && f.after_ready > 0
                && f.after_ready_complete == f.after_ready
                && f.victim_replaced != Some(false)
                && f.recoveries == 1
        };
    f
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FaultsRecord {
    pub config: FaultsConfig,
    pub model: String,
    pub engine_commit: Value,
    pub roles: Option<usize>,
    pub host: Value,
    pub references: BTreeMap<usize, String>,
    pub scenarios: Vec<Events>,
    pub findings: Vec<Findings>,
}

/// Findings of every scenario from the rows.
pub fn all_findings(
    scenarios: &[Events],
    rows: &[Row],
    references: &BTreeMap<usize, String>,
) -> Vec<Findings> {
    (scenarios.iter().enumerate())
        .map(|(i, ev)| {
            let mine: Vec<&Done> = rows
                .iter()
                .filter(|r| r.scenario == i)
                .map(|r| &r.done)
                .collect();
            findings(ev, &mine, references)
        })
        .collect()
}

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
    let cuts = cfg.faults.iter().any(|f| matches!(f, Fault::Cut(_)));
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
        if until(
            &server,
            &load,
            cfg.ready_limit_s,
            |_| {},
            |c| c == Some(200),
        )
        .await
        .is_none()
        {
            bail!("the fleet was not ready before {fault}");
        }
        let before = processes(&server).await?;
        let recoveries0 = server
            .stats()
            .await
            .and_then(|s| s["recoveries_total"].as_u64());
        let victim_pid = match fault {
            Fault::Kill(r) | Fault::Stop(r) => Some(
                before
                    .iter()
                    .find(|p| p.0 == *r)
                    .map(|p| p.1)
                    .with_context(|| {
                        format!("{fault}: role {r} is not a process on this machine")
                    })?,
            ),
            Fault::Cut(_) => None,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let mut workers = Vec::new();
        for w in 0..cfg.streams {
            let (load, stop, rows_path, errors) = (
                load.clone(),
                stop.clone(),
                rows_path.clone(),
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
        tokio::time::sleep(Duration::from_secs_f64(cfg.lead_s)).await;
        let t_fault = load.clock.now().1;
        match fault {
            Fault::Kill(_) => signal("KILL", victim_pid.unwrap_or_default())?,
            Fault::Stop(_) => signal("STOP", victim_pid.unwrap_or_default())?,
            Fault::Cut(_) => shell(cfg.cut_cmd.as_deref().unwrap_or_default())?,
        }
        eprintln!("faults: {fault} made; waiting for the fleet to notice");
        let mut t_healed = None;
        let heal_at = match fault {
            Fault::Cut(ms) => Some(t_fault + *ms as f64 / 1000.0),
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
        let t_unready = until(&server, &load, cfg.detect_limit_s, &mut heal, |c| {
            c != Some(200)
        })
        .await;
        let t_ready = match t_unready {
            Some(_) => {
                until(&server, &load, cfg.ready_limit_s, &mut heal, |c| {
                    c == Some(200)
                })
                .await
            }
            None => None,
        };
        heal(f64::INFINITY);
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
        let serving = health(&server).await == Some(200);
        let changed_outputs = if serving {
            changed(&load, &references).await
        } else {
            references.keys().copied().collect()
        };
        // without the list no role can be called leaked: an unread list would make every live
        // role look leaked (and be killed below)
        let after = processes(&server)
            .await
            .context("the role processes after the fault")?;
        let leaked: Vec<u32> = before
            .iter()
            .filter(|(role, pid)| {
                *role != 0 && procs::alive(*pid) && !after.contains(&(*role, *pid))
            })
            .map(|p| p.1)
            .collect();
        let victim_alive_after = victim_pid.map(procs::alive);
        for pid in &leaked {
            // so that the next scenario starts clean; the record keeps the leak
            let _ = signal("KILL", *pid);
        }
        let recoveries1 = server
            .stats()
            .await
            .and_then(|s| s["recoveries_total"].as_u64());
        scenarios.push(Events {
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
        });
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
    std::fs::write(
        out.join("faults.json"),
        serde_json::to_string_pretty(&record)? + "\n",
    )?;
    Ok(record)
}

/// Recompute a committed faults run's findings from its rows and events; Err names what differs.
pub fn recheck(dir: &Path) -> anyhow::Result<Vec<Findings>> {
    let path = dir.join("faults.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let record: FaultsRecord =
        serde_json::from_str(&text).with_context(|| path.display().to_string())?;
    let rows: Vec<Row> = read_records(&dir.join("requests.jsonl.gz"))?;
    let fresh = all_findings(&record.scenarios, &rows, &record.references);
    if !crate::claims::same_json(
        &serde_json::to_value(&fresh)?,
        &serde_json::to_value(&record.findings)?,
    ) {
        bail!(
            "{}: the findings differ from a fresh computation from its rows",
            path.display()
        );
    }
    Ok(fresh)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(status: Status, started: f64, ended: f64) -> Done {
        Done {
            id: 0,
            worker: 0,
            prompt: 0,
            max_tokens: 4,
            started,
            ended,
            status,
            tokens: if status == Status::Complete { 4 } else { 1 },
            usage: Some(4),
            finish: Some("length".into()),
            capacity_retries: 0,
            text_sha: "aa".into(),
            error: None,
        }
    }

    fn events(fault: Fault) -> Events {
        Events {
            fault,
            victim_pid: Some(99),
            processes_before: vec![(0, 1), (1, 99)],
            processes_after: vec![(0, 1), (1, 100)],
            leaked: vec![],
            victim_alive_after: Some(false),
            t_fault: 10.0,
            t_unready: Some(10.5),
            t_healed: None,
            t_ready: Some(11.0),
            t_end: 20.0,
            recoveries: 1,
            changed_outputs: vec![],
            load_average: None,
        }
    }

    #[test]
    fn parses_faults() {
        assert_eq!("kill:3".parse::<Fault>(), Ok(Fault::Kill(3)));
        assert_eq!("stop:10".parse::<Fault>(), Ok(Fault::Stop(10)));
        assert_eq!("cut:2.5".parse::<Fault>(), Ok(Fault::Cut(2500)));
        assert_eq!(Fault::Cut(2500).to_string(), "cut:2.5");
        for bad in ["kill:0", "kill:x", "cut:0", "cut", "nap:1"] {
            assert!(bad.parse::<Fault>().is_err(), "{bad}");
        }
    }

    #[test]
    fn in_flight_streams_may_be_lost_and_nothing_else() {
        let refs = BTreeMap::from([(0, "aa".to_string())]);
        let ev = events(Fault::Kill(1));
        let rows = [
            row(Status::Complete, 1.0, 5.0),
            row(Status::Broken, 8.0, 10.3),
            row(Status::Refused, 10.6, 10.6),
            row(Status::Complete, 11.2, 14.0),
        ];
        let refs_rows: Vec<&Done> = rows.iter().collect();
        let f = findings(&ev, &refs_rows, &refs);
        assert!(f.passed, "{f:?}");
        assert_eq!(f.in_flight_at_fault, 1);
        assert!(
            (f.detect_s.unwrap() - 0.3).abs() < 1e-9,
            "the broken stream came first"
        );
        assert!((f.ready_s.unwrap() - 1.0).abs() < 1e-9);
        assert_eq!((f.after_ready, f.after_ready_complete), (1, 1));
        // a stream begun after the fleet knew, and broken: lost beyond the in-flight ones
        let mut late = rows.to_vec();
        late.push(row(Status::Broken, 10.7, 10.8));
        let f = findings(&ev, &late.iter().collect::<Vec<_>>(), &refs);
        assert_eq!(f.broken_after_unready, 1);
        assert!(!f.passed);
        // two recoveries for one fault, a victim left running, other outputs: each fails
        for spoil in [
            |e: &mut Events| e.recoveries = 2,
            |e: &mut Events| e.victim_alive_after = Some(true),
            |e: &mut Events| e.changed_outputs = vec![0],
            |e: &mut Events| e.t_ready = None,
        ] {
            let mut e = events(Fault::Kill(1));
            spoil(&mut e);
            assert!(!findings(&e, &refs_rows, &refs).passed);
        }
    }

    #[test]
    fn findings_read_back_from_the_record_are_the_ones_written() {
        // `run` computes findings from events held in memory, `recheck` from the same events read
        // back from faults.json; each time is a difference of two clock readings, so a time read
        // back one unit in the last place off moves a finding by more than any relative tolerance
        // can excuse. Records must round-trip floats exactly.
        let refs = BTreeMap::from([(0, "aa".to_string())]);
        let rows = [row(Status::Broken, 8.0, 10.3)];
        let rows: Vec<&Done> = rows.iter().collect();
        for k in 0..20_000 {
            let mut ev = events(Fault::Kill(1));
            let t = 10.0 + k as f64 * std::f64::consts::PI * 1e-3;
            (ev.t_fault, ev.t_unready, ev.t_ready) = (t, Some(t + 0.7), Some(t + 1.9));
            let text = serde_json::to_string(&ev).unwrap();
            let back: Events = serde_json::from_str(&text).unwrap();
            assert_eq!(back.t_fault.to_bits(), t.to_bits(), "{text}");
            assert_eq!(
                back.t_unready.map(f64::to_bits),
                ev.t_unready.map(f64::to_bits)
            );
            assert_eq!(
                serde_json::to_value(findings(&back, &rows, &refs)).unwrap(),
                serde_json::to_value(findings(&ev, &rows, &refs)).unwrap()
            );
        }
    }

    #[test]
    fn a_short_cut_is_ridden_through() {
        let refs = BTreeMap::from([(0, "aa".to_string())]);
        let mut ev = events(Fault::Cut(2000));
        ev.victim_pid = None;
        ev.victim_alive_after = None;
        (ev.t_unready, ev.t_ready, ev.recoveries) = (None, None, 0);
        let rows = [row(Status::Complete, 9.0, 14.0)];
        let f = findings(&ev, &rows.iter().collect::<Vec<_>>(), &refs);
        assert!(f.ridden_through && f.passed, "{f:?}");
        // a kill that nobody noticed is not a ride-through
        let mut kill = ev.clone();
        kill.fault = Fault::Kill(1);
        assert!(!findings(&kill, &rows.iter().collect::<Vec<_>>(), &refs).passed);
    }
}
