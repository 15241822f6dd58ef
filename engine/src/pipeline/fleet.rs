//! Starting a fleet from a `RunConfig` (what the operator chooses, `run_config`): the fleet file
//! (role -> host:port), role 0's links, engine thread and chain supervisor (`recovery`), and, on one
//! machine, the child role processes (`children`).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use serde::Deserialize;
use tokio::net::TcpListener;

use super::children::LocalRoles;
pub use super::draft_head::MtpOptions;
use super::ingress::{Downstream, Inbox, SchedConfig, Scheduler};
use super::recovery::{self, Chain};
use super::return_port::ReturnPort;
use super::role::{report_message, RoleEngine};
use super::roster::Roster;
pub use super::run_config::{PhraseOptions, ProbeSpec, RunConfig, SpecOptions};
use super::spare::Spares;
use super::stats::FleetStats;
pub use super::weights_source::{layer_range, WeightsSource};
use super::wire::WireLimits;
use crate::capture::writer::CaptureWriter;
use crate::model::ModelConfig;
use crate::spec::Proposers;

/// `fleet.toml`: one `[[role]]` table per rank with `rank` and `addr = "host:port"`, and any
/// number of `[[spare]]` tables with `addr`: hosts waiting in `moefleet spare` to take the rank of
/// a host that cannot be reached (`spare`).
#[derive(Clone, Debug, Deserialize)]
pub struct FleetFile {
    pub role: Vec<FleetRole>,
    #[serde(default)]
    pub spare: Vec<FleetSpare>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetRole {
    pub rank: usize,
    pub addr: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetSpare {
    pub addr: String,
}

impl FleetFile {
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut f: FleetFile =
            toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        f.role.sort_by_key(|r| r.rank);
        for (i, r) in f.role.iter().enumerate() {
            if r.rank != i {
                bail!(
                    "{}: ranks must be 0..{} without gaps (found {})",
                    path.display(),
                    f.role.len(),
                    r.rank
                );
            }
        }
        if f.role.is_empty() {
            bail!("{}: no [[role]] entries", path.display());
        }
        let mut seen = std::collections::HashSet::new();
        for a in f
            .addrs()
            .into_iter()
            .chain(f.spare.iter().map(|s| s.addr.clone()))
        {
            if a.contains('\n') || !seen.insert(a.clone()) {
                bail!("{}: address {a:?} is listed twice", path.display());
            }
        }
        Ok(f)
    }

    /// Every rank's address, rank 0 first.
    pub fn addrs(&self) -> Vec<String> {
        self.role.iter().map(|r| r.addr.clone()).collect()
    }

    /// (listen, next) addresses of `rank`: the last role's next is role 0.
    pub fn links(&self, rank: usize) -> anyhow::Result<(String, String)> {
        let n = self.role.len();
        let me = self
            .role
            .get(rank)
            .ok_or_else(|| anyhow!("rank {rank} is not in the fleet file ({n} roles)"))?;
        Ok((me.addr.clone(), self.role[(rank + 1) % n].addr.clone()))
    }
}

/// A running fleet as role 0 holds it.
pub struct Fleet {
    pub inbox: mpsc::Sender<Inbox>,
    pub stats: Arc<FleetStats>,
    pub config: ModelConfig,
    engine: Option<std::thread::JoinHandle<Option<String>>>,
    local: Option<Arc<LocalRoles>>,
    stopping: Arc<AtomicBool>,
}

impl Fleet {
    /// Stop the fleet: role 0 sends `Shutdown` down the chain, then children get a few seconds to
    /// exit before they are killed.
    pub fn shutdown(mut self) {
        self.stop();
    }

    /// Process ids of the local role processes, by rank.
    pub fn role_pids(&self) -> Vec<(usize, u32)> {
        self.local.as_ref().map(|l| l.pids()).unwrap_or_default()
    }

    /// The local role processes as they are now (a restart changes a pid), for `/api/stats`.
    pub fn local_roles(&self) -> Option<Arc<LocalRoles>> {
        self.local.clone()
    }

    fn stop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        let _ = self.inbox.send(Inbox::Shutdown);
        // role 0's thread writes to role 1 itself and can be blocked behind a role that stopped
        // reading: it gets a bounded time, then the children are killed (failing that write) and
        // only then is it joined
        let engine = self.engine.take();
        for _ in 0..50 {
            if engine.as_ref().is_none_or(|h| h.is_finished()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if let Some(l) = self.local.take() {
            l.stop(Duration::from_secs(5));
        }
        if let Some(h) = engine {
            let _ = h.join();
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        if self.engine.is_some() || self.local.is_some() {
            self.stop();
        }
    }
}

/// Compute threads per role when `n_roles` roles share this machine: its cores divided among them,
/// unless the operator chose (`rayon_chosen`: `main` saw `RAYON_NUM_THREADS`, which sizes every
/// pool itself). Two or more: each role's pool has that many. One (more roles than cores): each
/// pool has every core, but a frame computes on one thread unless it is alone in the pipeline
/// (`pipeline::share_cores`; measured in `results/before-after-20261201-alone{,-b}`).
pub fn local_role_threads(n_roles: usize, rayon_chosen: bool) -> Option<usize> {
    if rayon_chosen {
        return None;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    Some((cores / n_roles.max(1)).max(1))
}

/// Start every role on this machine: children for ranks 1.. on loopback, role 0 in this process;
/// `role_threads` sizes each child's compute pool (`local_role_threads`; None: their default).
pub async fn start_local(
    rc: &RunConfig,
    exe: &Path,
    role_threads: Option<usize>,
) -> anyhow::Result<Fleet> {
    let cfg = rc.weights.config()?;
    layer_range(&cfg, 0, rc.n_roles)?;
    let proposers = build_proposers(rc, &cfg).await?;
    if rc.n_roles == 1 {
        return start_role0(rc, cfg, None, proposers).await;
    }
    let ret = TcpListener::bind("127.0.0.1:0").await?;
    let back = ret.local_addr()?.to_string();
    let (rc1, exe, back1) = (rc.clone(), exe.to_path_buf(), back.clone());
    let local =
        tokio::task::spawn_blocking(move || LocalRoles::start(&exe, &rc1, back1, role_threads))
            .await??;
    let links = Links {
        ret,
        roster: local.addrs(&back),
        spares: Vec::new(),
        local: Some(Arc::new(local)),
    };
    start_role0(rc, cfg, Some(links), proposers).await
}

/// Role 0 of a multi-host fleet: listen on its fleet-file address for the last role, connect to
/// rank 1; the other ranks are started on their hosts with `moefleet role --rank K --fleet FILE`
/// (and, restarted there, rejoin the chain).
pub async fn start_from_file(rc: &RunConfig, fleet: &FleetFile) -> anyhow::Result<Fleet> {
    let cfg = rc.weights.config()?;
    let proposers = build_proposers(rc, &cfg).await?;
    if fleet.role.len() != rc.n_roles {
        bail!(
            "the fleet file has {} roles, --roles says {}",
            fleet.role.len(),
            rc.n_roles
        );
    }
    if rc.n_roles == 1 {
        return start_role0(rc, cfg, None, proposers).await;
    }
    let (listen, _) = fleet.links(0)?;
    let ret = TcpListener::bind(&listen)
        .await
        .with_context(|| format!("listening on {listen}"))?;
    let links = Links {
        ret,
        roster: fleet.addrs(),
        spares: fleet.spare.iter().map(|s| s.addr.clone()).collect(),
        local: None,
    };
    start_role0(rc, cfg, Some(links), proposers).await
}

/// Role 0's return listener, every rank's address, the spare hosts, and the local role processes
/// (if on one machine).
struct Links {
    ret: TcpListener,
    roster: Vec<String>,
    spares: Vec<String>,
    local: Option<Arc<LocalRoles>>,
}

async fn start_role0(
    rc: &RunConfig,
    cfg: ModelConfig,
    links: Option<Links>,
    proposers: Proposers,
) -> anyhow::Result<Fleet> {
    let (n, budget) = (rc.n_roles, rc.budget);
    let stopping = Arc::new(AtomicBool::new(false));
    let rc0 = rc.clone();
    let model = tokio::task::spawn_blocking(move || rc0.build_role(0)).await??;
    let mut engine = RoleEngine::new(0, n, model, budget);
    let stats = Arc::new(FleetStats::default());
    let (inbox_tx, inbox_rx) = mpsc::channel::<Inbox>();
    if n == 1 {
        // role 0 is also the last role: its captures report straight to its own inbox
        let inbox = Mutex::new(inbox_tx.clone());
        let sink = Box::new(move |r| {
            if let Ok(tx) = inbox.lock() {
                let _ = tx.send(Inbox::Link(report_message(r)));
            }
        });
        engine.set_capture(CaptureWriter::new(
            0,
            cfg.hidden,
            rc.capture_dir.as_deref(),
            sink,
        )?);
    }
    let mut supervisor = None;
    let mut local_roles = None;
    let down = match links {
        None => Downstream::Local,
        Some(Links {
            ret,
            roster,
            spares,
            local,
        }) => {
            let lim = WireLimits::new(cfg.hidden);
            let roster = Roster::new(roster);
            stats.linked_as(roster.clone());
            let spares = (!spares.is_empty())
                .then(|| Arc::new(Spares::new(spares, rc.clone(), rc.recovery.spare_after)));
            let chain = Chain {
                ret: ReturnPort::spawn(ret, roster.clone(), lim, rc.timing.stall),
                roster,
                spares,
                lim,
                timing: rc.timing,
                last: n - 1,
                inbox: inbox_tx.clone(),
                stopping: stopping.clone(),
            };
            let mut linked = chain
                .link(rc.link_timeout)
                .await
                .context("linking role 0")?;
            // the scheduler starts with this link, so whatever the reader reports comes after it
            linked.start_reading();
            let to_1 = linked.to_1.clone();
            if let Some(l) = &local {
                watch_children(l.clone(), inbox_tx.clone(), stopping.clone());
            }
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            tokio::spawn(recovery::supervise(
                chain,
                linked,
                local.clone(),
                rc.recovery,
                rx,
            ));
            supervisor = Some(tx);
            local_roles = local;
            Downstream::Link(to_1)
        }
    };
    let sched = SchedConfig {
        n_slots: rc.n_slots,
        n_groups: rc.groups.unwrap_or(rc.n_roles),
        window: rc.window,
        admission: rc.admission,
        max_inflight: 2 * rc.n_roles + 2 + rc.spec.depth,
        budget: rc.budget,
        spec_depth: rc.spec.depth,
        profile_dir: rc.profile_dir.clone(),
        phrase_file: rc.spec.phrases.as_ref().and_then(|p| p.file.clone()),
        stream_replays: rc.recovery.stream_replays,
        resume_deadline: rc.recovery.resume_deadline,
    };
    let mut scheduler = Scheduler::new(sched, engine, down, stats.clone(), proposers);
    if let Some(tx) = supervisor {
        scheduler = scheduler.with_recovery(tx);
    }
    let engine = std::thread::Builder::new()
        .name("role0-engine".into())
        .spawn(move || {
            super::on_compute_pool("role0-compute", move || scheduler.run(inbox_rx)).unwrap_or_else(
                |e| Some(format!("role 0 could not start its compute threads: {e}")),
            )
        })?;
    Ok(Fleet {
        inbox: inbox_tx,
        stats,
        config: cfg,
        engine: Some(engine),
        local: local_roles,
        stopping,
    })
}

/// A role process that exits on its own is a loss of that role (the supervisor restarts it).
fn watch_children(local: Arc<LocalRoles>, inbox: mpsc::Sender<Inbox>, stop: Arc<AtomicBool>) {
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(100));
        if stop.load(Ordering::SeqCst) {
            break;
        }
        for (rank, status) in local.newly_exited() {
            let lost = Inbox::Lost {
                role: Some(rank),
                message: format!("role {rank} failed: its process exited ({status})"),
            };
            if inbox.send(lost).is_err() {
                return;
            }
        }
    });
}

/// Role 0's proposers, built before any role starts (a bad phrase-table file stops here).
async fn build_proposers(rc: &RunConfig, cfg: &ModelConfig) -> anyhow::Result<Proposers> {
    if rc.spec.depth > cfg.rewind_slack + 1 {
        bail!(
            "--spec-depth {} exceeds what a rewind can undo ({} positions of slack, so at most {})",
            rc.spec.depth,
            cfg.rewind_slack,
            cfg.rewind_slack + 1
        );
    }
    if let Some(m) = &rc.spec.mtp {
        m.check(&rc.weights)?;
    }
    let spec = rc.spec.clone();
    let (vocab, budget) = (cfg.vocab_size, rc.budget);
    tokio::task::spawn_blocking(move || spec.proposers(vocab, budget)).await?
}
