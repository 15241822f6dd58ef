//! `moefleet-harness sweep`: replay a plan against an OpenAI-compatible server (MEASUREMENTS.md
//! §2.2): phases of cohorts of C requests started 15 ms apart, an idle gate before each phase,
//! `/api/stats` read before and after each phase and polled every 2 s, one trace record per request
//! streamed to `traces/PHASE.jsonl.gz` as it finishes, a phase record per phase, and a run
//! manifest.
//!
//! Ctrl-C stops the sweep and keeps what finished: every finished phase, and every finished
//! request's trace. `--resume` continues the run: finished phases (those in `phases.jsonl`) are not
//! run again; the traces of the phase that was cut short move to `traces/interrupted/` (kept, not
//! analysed) and that phase runs again whole.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use tokio::sync::Mutex;

use super::client::{self, Clock, Outcome, RequestSpec};
use super::manifest::RunManifest;
use super::server::Server;
use crate::trace::{append_gz, append_jsonl, CohortRecord, PhaseRecord, StatsPoll, TraceRecord};
use crate::workload::{Families, PhasePlan, Plan, PromptSpec};

pub struct SweepConfig {
    pub url: String,
    pub plan: Plan,
    pub out: PathBuf,
    /// Ask the server to ignore end-of-text so every request yields exactly max_tokens.
    pub ignore_eos: bool,
    /// Longest wait for the server to be idle before a phase.
    pub idle_timeout: Duration,
    /// Continue the run in `out` instead of starting one.
    pub resume: bool,
}

fn git_commit() -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The phases `run` finished (those with a record in `phases.jsonl`).
pub fn finished_phases(run: &Path) -> anyhow::Result<std::collections::HashSet<String>> {
    let path = run.join("phases.jsonl");
    if !path.exists() {
        return Ok(Default::default());
    }
    let recs: Vec<PhaseRecord> = crate::trace::read_records(&path)?;
    Ok(recs.into_iter().map(|r| r.phase).collect())
}

/// Move the traces of phases that did not finish to `traces/interrupted/` (suffixed with the time,
/// so a second interruption keeps the first one's too).
fn set_aside_unfinished(
    run: &Path,
    plan: &Plan,
    done: &std::collections::HashSet<String>,
) -> anyhow::Result<()> {
    let aside = run.join("traces").join("interrupted");
    for ph in plan.phases().iter().filter(|p| !done.contains(&p.name)) {
        let t = traces_dir(run).join(format!("{}.jsonl.gz", ph.name));
        if t.exists() {
            std::fs::create_dir_all(&aside)?;
            let to = aside.join(format!("{}-{}.jsonl.gz", ph.name, client::epoch() as u64));
            std::fs::rename(&t, &to)
                .with_context(|| format!("moving {} to {}", t.display(), to.display()))?;
            eprintln!(
                "{}: cut short before; its finished requests are kept in {}",
                ph.name,
                to.display()
            );
        }
    }
    Ok(())
}

/// Both runs' records name a value, and not the same one (a field an older record lacks differs
/// from nothing).
fn differ<T: PartialEq>(a: &Option<T>, b: &Option<T>) -> bool {
    a.is_some() && b.is_some() && a != b
}

pub async fn sweep(cfg: SweepConfig) -> anyhow::Result<()> {
    let out = &cfg.out;
    let resumed = if cfg.resume {
        let m = RunManifest::read(out).context("--resume needs the run's run.json")?;
        if m.complete {
            bail!("{} holds a complete run: nothing to resume", out.display());
        }
        let done = finished_phases(out)?;
        eprintln!(
            "resuming {}: {} of {} phases finished",
            out.display(),
            done.len(),
            cfg.plan.phases().len()
        );
        Some((m, done))
    } else {
        if out.join("run.json").exists() {
            bail!(
                "{} already holds a run; choose a new --out (or continue it with --resume)",
                out.display()
            );
        }
        None
    };
    std::fs::create_dir_all(out.join("traces"))
        .with_context(|| format!("creating {}", out.display()))?;
    let server = Server::connect(&cfg.url).await?;
    let first_stats = server.first_stats.clone();
    let clock = match &resumed {
        Some((m, _)) => Clock::resumed(m.clock_origin_epoch),
        None => Clock::new(),
    };
    let str_stat = |k: &str| server.first_stat(k).as_str().map(str::to_string);
    let fresh = RunManifest {
        record: "sweep_run".into(),
        url: server.base.clone(),
        model: server.model.clone(),
        engine_version: str_stat("engine_version"),
        engine_commit: str_stat("engine_commit"),
        git_commit: git_commit(),
        harness_commit: Some(crate::BUILD_COMMIT.to_string()),
        pipeline_groups: server.first_stat("pipeline_groups").as_u64(),
        plan: serde_json::to_value(&cfg.plan)?,
        ignore_eos: cfg.ignore_eos,
        host: moefleet_engine::bench::host_facts(),
        load_average_start: crate::host::load_average(),
        stats_available: first_stats.is_some(),
        clock_origin_epoch: clock.origin_epoch(),
        start: client::epoch(),
        ..Default::default()
    };
    if let Some((m, _)) = &resumed {
        // one run, one engine: phases from two builds, two models or two pipeline configurations
        // must not share a record
        if differ(&m.pipeline_groups, &fresh.pipeline_groups) {
            bail!(
                "{} was run against a server with {} pipeline groups; this one has {}: start a \
                 new run rather than mix the two",
                out.display(),
                m.pipeline_groups.unwrap_or_default(),
                fresh.pipeline_groups.unwrap_or_default()
            );
        }
        if m.model != fresh.model || differ(&m.engine_commit, &fresh.engine_commit) {
            bail!(
                "{} was run against model {:?} at engine commit {:?}; the server now serves {:?} \
                 at {:?}: start a new run rather than mix the two",
                out.display(),
                m.model,
                m.engine_commit,
                fresh.model,
                fresh.engine_commit
            );
        }
    }
    let (mut manifest, done) = match resumed {
        Some((mut m, done)) => {
            // only once the server is known to be the run's: a refused resume leaves it as it was
            set_aside_unfinished(out, &cfg.plan, &done)?;
            m.resumed.push(client::epoch());
            m.error = None;
            m.interrupted = false;
            (m, done)
        }
        None => (fresh, Default::default()),
    };
    manifest.write(out)?;
    // background poller, every 2 s
    let poll_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poller = first_stats.is_some().then(|| {
        let (server, path, stop) = (
            server.clone(),
            out.join("stats_poll.jsonl"),
            poll_stop.clone(),
        );
        tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(s) = server.stats().await {
                    let (t, t_mono) = clock.now();
                    let _ = append_jsonl(
                        &path,
                        &StatsPoll {
                            t,
                            t_mono,
                            stats: s,
                        },
                    );
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        })
    });
    let families = match &cfg.plan.families {
        Some(f) => Families::load(f)?,
        None => Families::builtin()?,
    };
    let result = tokio::select! {
        r = run_phases(&cfg, &server, &families, clock, &done) => r,
        _ = tokio::signal::ctrl_c() => {
            manifest.interrupted = true;
            Err(anyhow::anyhow!(
                "interrupted (Ctrl-C): the finished phases and every finished request's trace are \
                 kept; continue with `moefleet-harness sweep --resume --out {}`",
                out.display()
            ))
        }
    };
    poll_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(p) = poller {
        let _ = p.await;
    }
    manifest.end = Some(client::epoch());
    manifest.load_average_end = crate::host::load_average();
    manifest.complete = result.is_ok();
    manifest.error = result.as_ref().err().map(|e| format!("{e:#}"));
    manifest.write(out)?;
    result
}

async fn run_phases(
    cfg: &SweepConfig,
    server: &Server,
    families: &Families,
    clock: Clock,
    done: &std::collections::HashSet<String>,
) -> anyhow::Result<()> {
    let phases = cfg.plan.phases();
    let n_phases = phases.len();
    for (pi, ph) in phases.iter().enumerate() {
        if done.contains(&ph.name) {
            continue;
        }
        // idle gate (None: the server has no stats; Some(false): not seen idle in time)
        let idle = server
            .wait_idle(cfg.idle_timeout, Duration::from_millis(100))
            .await;
        let stats_before = server.stats().await;
        let prefix = cfg.plan.prompt_prefix.as_deref().unwrap_or(&ph.name);
        let prompts = families.phase_prompts(prefix, None, ph.requests);
        let (start, start_mono) = clock.now();
        let bar = phase_bar(pi, n_phases, ph)?;
        let live = Arc::new(Mutex::new(Live::new()?));
        let trace_path = cfg.out.join("traces").join(format!("{}.jsonl.gz", ph.name));
        let run = PhaseRun {
            cfg,
            server,
            clock,
            ph,
            live: &live,
            bar: &bar,
            trace_path: &trace_path,
        };
        let mut tally = Tally::default();
        for (ci, chunk) in prompts.chunks(ph.concurrency).enumerate() {
            run_cohort(&run, ci, chunk, &mut tally).await?;
            if tally.fatal.is_some() {
                break;
            }
        }
        let (end, end_mono) = clock.now();
        bar.finish();
        let stats_after = server.stats().await;
        let Tally {
            cohorts,
            tokens,
            retries,
            errors,
            unchecked,
            fatal,
        } = tally;
        let rec = PhaseRecord {
            phase: ph.name.clone(),
            family: cfg.plan.family.clone(),
            concurrency: ph.concurrency,
            output_cap: ph.max_tokens,
            requests: ph.requests,
            tokens,
            start,
            end,
            start_mono,
            end_mono,
            cohorts,
            stats_before,
            stats_after,
            idle_at_start: idle,
            capacity_retries: retries,
            errors,
        };
        write_phase(cfg, &rec, fatal.is_some(), unchecked)?;
        if let Some(m) = fatal {
            bail!(
                "stopping the sweep: {m}; once the server serves again, continue with \
                 `moefleet-harness sweep --resume --out {}`",
                cfg.out.display()
            );
        }
        tokio::time::sleep(Duration::from_secs_f64(cfg.plan.settle_s)).await;
    }
    Ok(())
}

/// The progress bar of phase `pi` of `n_phases`.
fn phase_bar(pi: usize, n_phases: usize, ph: &PhasePlan) -> anyhow::Result<ProgressBar> {
    let bar = ProgressBar::new(ph.requests as u64);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>14} [{bar:30}] {pos}/{len} {msg}")?
            .progress_chars("=> "),
    );
    bar.set_prefix(format!("{}/{} {}", pi + 1, n_phases, ph.name));
    Ok(bar)
}

/// What every cohort of one phase shares.
struct PhaseRun<'a> {
    cfg: &'a SweepConfig,
    server: &'a Server,
    clock: Clock,
    ph: &'a PhasePlan,
    live: &'a Arc<Mutex<Live>>,
    bar: &'a ProgressBar,
    trace_path: &'a Path,
}

/// What a phase's finished requests add up to, cohort by cohort.
#[derive(Default)]
struct Tally {
    cohorts: Vec<CohortRecord>,
    tokens: u64,
    retries: u64,
    errors: usize,
    unchecked: usize,
    /// The first request's fatal outcome, which stops the phase after its cohort.
    fatal: Option<String>,
}

/// Run cohort `ci` (requests staggered, traces written as they end) and add it to `tally`.
async fn run_cohort(
    run: &PhaseRun<'_>,
    ci: usize,
    chunk: &[PromptSpec],
    tally: &mut Tally,
) -> anyhow::Result<()> {
    let PhaseRun {
        cfg,
        server,
        clock,
        ph,
        ..
    } = *run;
    let (_, c0) = clock.now();
    let mut tasks = Vec::new();
    for (k, p) in chunk.iter().enumerate() {
        let j = ci * ph.concurrency + k;
        let spec = RequestSpec {
            url: server.base.clone(),
            model: server.model.clone(),
            prompt: p.text.clone(),
            max_tokens: ph.max_tokens,
            ignore_eos: cfg.ignore_eos,
            j,
            capture: false,
            history: Vec::new(),
        };
        let mut rec = TraceRecord {
            phase: ph.name.clone(),
            family: p.family.clone(),
            family_index: p.family_index,
            prompt_index: p.prompt_index,
            cohort: ci,
            ..Default::default()
        };
        let (http, stagger) = (server.http.clone(), cfg.plan.stagger_s * k as f64);
        let (live, bar, path) = (
            run.live.clone(),
            run.bar.clone(),
            run.trace_path.to_path_buf(),
        );
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs_f64(stagger)).await;
            let outcome = client::run(&http, &clock, &spec, &mut rec).await;
            let write = tokio::task::spawn_blocking({
                let rec = rec.clone();
                move || append_gz(&path, &rec)
            })
            .await;
            let mut l = live.lock().await;
            l.add(&rec);
            bar.set_message(l.message());
            bar.inc(1);
            (rec, outcome, write)
        }));
    }
    for t in tasks {
        let (rec, outcome, write) = t.await?;
        write??;
        tally.tokens += rec.tokens();
        tally.retries += rec.capacity_retries as u64;
        if rec.error.is_some() {
            tally.errors += 1;
        }
        if rec.usage_check.is_some() {
            tally.unchecked += 1;
        }
        if let Outcome::Fatal(m) = outcome {
            tally.fatal.get_or_insert(format!(
                "{} (phase {}, request {})",
                m, ph.name, rec.prompt_index
            ));
        }
    }
    let (_, c1) = clock.now();
    tally.cohorts.push(CohortRecord {
        index: ci,
        requests: chunk.len(),
        start_mono: c0,
        end_mono: c1,
    });
    Ok(())
}

/// Append a phase's record (to `phases_stopped.jsonl` if an error `stopped` it) and report it.
fn write_phase(
    cfg: &SweepConfig,
    rec: &PhaseRecord,
    stopped: bool,
    unchecked: usize,
) -> anyhow::Result<()> {
    // a phase stopped by an error is not finished: `--resume` sets its traces aside and runs
    // it again whole; its record is kept apart, outside the analysis
    let file = if stopped {
        "phases_stopped.jsonl"
    } else {
        "phases.jsonl"
    };
    append_jsonl(&cfg.out.join(file), rec)?;
    eprintln!(
        "{}: {} requests, {} tokens in {:.1} s ({:.1} tok/s whole-phase), {} capacity retries, {} errors",
        rec.phase,
        rec.requests,
        rec.tokens,
        rec.end_mono - rec.start_mono,
        rec.tokens as f64 / (rec.end_mono - rec.start_mono).max(1e-9),
        rec.capacity_retries,
        rec.errors
    );
    if unchecked > 0 {
        eprintln!(
            "{}: {unchecked} of {} requests unchecked: the server reported no usage to check the counted tokens against",
            rec.phase, rec.requests
        );
    }
    Ok(())
}

/// Running figures for the progress bar.
struct Live {
    ttft_ms: hdrhistogram::Histogram<u64>,
    tokens: u64,
    first: Option<f64>,
    last: f64,
}

impl Live {
    fn new() -> anyhow::Result<Self> {
        Ok(Live {
            ttft_ms: hdrhistogram::Histogram::new_with_bounds(1, 3_600_000, 3)?,
            tokens: 0,
            first: None,
            last: 0.0,
        })
    }

    fn add(&mut self, r: &TraceRecord) {
        if let Some(&(t, _)) = r.events_mono.first() {
            let _ = self
                .ttft_ms
                .record((((t - r.started_mono) * 1000.0).round() as u64).max(1));
        }
        self.tokens += r.tokens();
        self.first = Some(
            self.first
                .map_or(r.started_mono, |f: f64| f.min(r.started_mono)),
        );
        self.last = self.last.max(r.ended_mono);
    }

    fn message(&self) -> String {
        let dt = self.last - self.first.unwrap_or(self.last);
        format!(
            "{:.1} tok/s  TTFT p50 {:.2} s p95 {:.2} s",
            self.tokens as f64 / dt.max(1e-9),
            self.ttft_ms.value_at_quantile(0.5) as f64 / 1000.0,
            self.ttft_ms.value_at_quantile(0.95) as f64 / 1000.0
        )
    }
}

/// Where a run's files are.
pub fn traces_dir(run: &Path) -> PathBuf {
    run.join("traces")
}
