//! Starting a fleet: `RunConfig` (what the operator chooses), the fleet file (role -> host:port),
//! role 0's links, engine thread and chain supervisor (`recovery`), and, on one machine, the child
//! role processes (`children`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

use super::children::LocalRoles;
pub use super::draft_head::MtpOptions;
use super::ingress::{Downstream, Inbox, SchedConfig, Scheduler};
use super::link::LinkTiming;
use super::recovery::{self, Chain, RecoveryPolicy};
use super::role::{report_message, RoleEngine};
use super::stats::FleetStats;
use super::wire::WireLimits;
use crate::capture::writer::CaptureWriter;
use crate::gguf::Gguf;
use crate::model::{checkpoint, generate, load, ForwardOptions, Model, ModelConfig, SynthSpec};
use crate::spec::Proposers;

/// Where a role's weights come from.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum WeightsSource {
    Preset {
        name: String,
        seed: u64,
    },
    Export(PathBuf),
    /// A real checkpoint (llama family, qwen3moe) in a GGUF file.
    Gguf(PathBuf),
}

impl WeightsSource {
    pub fn config(&self) -> anyhow::Result<ModelConfig> {
        Ok(match self {
            WeightsSource::Preset { name, .. } => ModelConfig::preset(name)?,
            WeightsSource::Export(dir) => load::manifest(dir)?.config,
            WeightsSource::Gguf(path) => checkpoint::config::from_gguf(&Gguf::open(path)?)?,
        })
    }

    /// Generate or load exactly the layers of `rank`.
    pub fn build_role(
        &self,
        rank: usize,
        n_roles: usize,
        opts: ForwardOptions,
    ) -> anyhow::Result<Model> {
        let cfg = self.config()?;
        let layers = layer_range(&cfg, rank, n_roles)?;
        let w = match self {
            WeightsSource::Preset { seed, .. } => generate(&SynthSpec {
                layers,
                ..SynthSpec::whole(cfg, *seed)
            })?,
            WeightsSource::Export(dir) => load::load_range(dir, Some(layers))?,
            WeightsSource::Gguf(path) => {
                checkpoint::load::load_range(&Gguf::open(path)?, &cfg, layers)?
            }
        };
        Ok(Model::new(w, opts))
    }
}

/// The layers of role `rank` when the model is cut into `n_roles` consecutive ranges: equal ones
/// for Inkling (one global layer per six-layer role), as even as they go for a checkpoint.
pub fn layer_range(
    cfg: &ModelConfig,
    rank: usize,
    n_roles: usize,
) -> anyhow::Result<std::ops::Range<usize>> {
    if cfg.family.is_checkpoint() {
        // as even as they go: the first `n_layers % n_roles` roles take one layer more
        if n_roles == 0 || n_roles > cfg.n_layers {
            bail!(
                "{} has {} layers: it cannot be cut into {n_roles} roles",
                cfg.name,
                cfg.n_layers
            );
        }
        if rank >= n_roles {
            bail!("rank {rank} is outside 0..{n_roles}");
        }
        let (per, extra) = (cfg.n_layers / n_roles, cfg.n_layers % n_roles);
        let start = rank * per + rank.min(extra);
        return Ok(start..start + per + usize::from(rank < extra));
    }
    if n_roles == 0 || !cfg.n_layers.is_multiple_of(n_roles) {
        bail!(
            "{} has {} layers, which {n_roles} roles cannot split evenly",
            cfg.name,
            cfg.n_layers
        );
    }
    if rank >= n_roles {
        bail!("rank {rank} is outside 0..{n_roles}");
    }
    let per = cfg.n_layers / n_roles;
    Ok(rank * per..(rank + 1) * per)
}

/// What the operator chooses for a fleet (frozen at start-up; handed to local role processes as
/// JSON, `children::RoleLaunch`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunConfig {
    pub weights: WeightsSource,
    pub n_roles: usize,
    /// Context budget per stream, in positions.
    pub budget: usize,
    pub window: usize,
    /// How role 0 lets prompts in (windows, or the reference: whole and one at a time).
    pub admission: super::ingress::Admission,
    pub n_slots: usize,
    pub queue: usize,
    pub opts: ForwardOptions,
    pub profile_dir: Option<PathBuf>,
    /// How long a role waits for its neighbours (covers weight generation of big presets).
    pub link_timeout: Duration,
    /// When a silent link counts as stalled or cut.
    pub timing: LinkTiming,
    /// How role 0 recovers a broken chain.
    pub recovery: RecoveryPolicy,
    /// Run the context probe in every role at start-up (MEASUREMENTS.md §3.1).
    pub probe: Option<ProbeSpec>,
    /// Where the last role writes captures (ARCHITECTURE.md §3.4).
    pub capture_dir: Option<PathBuf>,
    /// Speculative injection at role 0 (ARCHITECTURE.md §3.3).
    pub spec: SpecOptions,
}

/// Speculation as the operator chose it (role 0 only).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SpecOptions {
    /// Sampled rows of a lone stream in flight at once (1: no speculation).
    pub depth: usize,
    pub suffix: bool,
    /// The phrase table, when on: its file (loaded if present, saved on shutdown) and rule.
    pub phrases: Option<PhraseOptions>,
    /// A small model sharing the tokenizer, as the draft proposer.
    pub draft: Option<WeightsSource>,
    /// The fitted draft head, drafting in the last role.
    #[serde(default)]
    pub mtp: Option<MtpOptions>,
    /// Tests: known sequences to propose from (a JSON array of id arrays), right or wrong.
    pub replay: Option<(PathBuf, bool)>,
    /// A proposer whose acceptance average falls below this is benched (`spec::Gate`).
    pub min_acceptance: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PhraseOptions {
    pub file: Option<PathBuf>,
    /// Start without a file that cannot be read (otherwise a clear error stops the server).
    pub ignore_bad_file: bool,
    pub rule: crate::spec::phrases::PhraseRule,
}

impl SpecOptions {
    /// The proposers these options switch on, for a model of `vocab` tokens and `budget`.
    pub fn proposers(&self, vocab: usize, budget: usize) -> anyhow::Result<Proposers> {
        use crate::spec::phrases::PhraseTable;
        let mut p = Proposers {
            suffix: self.suffix,
            gate: crate::spec::Gate::new(self.min_acceptance),
            ..Default::default()
        };
        if let Some(o) = &self.phrases {
            let table = match &o.file {
                Some(f) if f.exists() => match PhraseTable::load(f, vocab as u32) {
                    Ok(t) => {
                        tracing::info!(
                            "phrase table {}: {} contexts, {} observations",
                            f.display(),
                            t.contexts(),
                            t.observations()
                        );
                        t
                    }
                    Err(e) if o.ignore_bad_file => {
                        tracing::warn!("{e}; starting with an empty phrase table");
                        PhraseTable::new(vocab as u32)
                    }
                    Err(e) => anyhow::bail!(
                        "{e} (remove it, or start with --phrase-table-ignore-bad to begin anew)"
                    ),
                },
                _ => PhraseTable::new(vocab as u32),
            };
            p.phrases = Some((table, o.rule));
        }
        if let Some(src) = &self.draft {
            let model = src.build_role(0, 1, ForwardOptions::default())?;
            p.draft = Some(crate::spec::draft::DraftModel::new(model, vocab, budget)?);
        }
        if self.mtp.is_some() {
            p.mtp = Some(crate::spec::mtp::MtpDrafts::default());
        }
        if let Some((file, wrong)) = &self.replay {
            p.replay = Some(crate::spec::replay::ReplayProposer::load(
                file,
                *wrong,
                vocab as u32,
            )?);
        }
        Ok(p)
    }
}

/// Where the start-up context probe writes `probe-role-K.json`, and its largest size.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProbeSpec {
    pub dir: PathBuf,
    pub max_context: usize,
}

impl RunConfig {
    /// Build role `rank`'s model and, when asked, run the context probe on it before serving.
    pub fn build_role(&self, rank: usize) -> anyhow::Result<Model> {
        let model = self.weights.build_role(rank, self.n_roles, self.opts)?;
        model.prepare()?; // the backend's graphs: a bad OpenVINO setup fails at start-up
        if let Some(p) = &self.probe {
            let sizes: Vec<usize> = crate::probe::SIZES
                .into_iter()
                .filter(|&n| n <= p.max_context)
                .collect();
            let recs = super::on_compute_pool(&format!("role{rank}-probe"), || {
                crate::probe::run(&model, rank, &sizes, 7, |r| {
                    tracing::info!("context probe: {}", crate::probe::describe(r))
                })
            })??;
            let extra = serde_json::json!({ "in_fleet": true });
            crate::probe::write_role_record(&p.dir, rank, &model, &recs, extra)?;
        }
        Ok(model)
    }
}

/// `fleet.toml`: one `[[role]]` table per rank with `rank` and `addr = "host:port"`.
#[derive(Clone, Debug, Deserialize)]
pub struct FleetFile {
    pub role: Vec<FleetRole>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct FleetRole {
    pub rank: usize,
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
        Ok(f)
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
/// unless `RAYON_NUM_THREADS` chooses. Two or more: each role's pool has that many. One (more roles
/// than cores): each pool has every core, but a frame computes on one thread unless it is alone in
/// the pipeline (`pipeline::share_cores`; measured in `results/before-after-20261201-alone{,-b}`).
pub fn local_role_threads(n_roles: usize) -> Option<usize> {
    if std::env::var_os("RAYON_NUM_THREADS").is_some() {
        return None;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    Some((cores / n_roles.max(1)).max(1))
}

/// Start every role on this machine: children for ranks 1.. on loopback, role 0 in this process.
pub async fn start_local(rc: &RunConfig, exe: &Path) -> anyhow::Result<Fleet> {
    let cfg = rc.weights.config()?;
    layer_range(&cfg, 0, rc.n_roles)?;
    let proposers = build_proposers(rc, &cfg).await?;
    if rc.n_roles == 1 {
        return start_role0(rc, cfg, None, proposers).await;
    }
    let ret = TcpListener::bind("127.0.0.1:0").await?;
    let back = ret.local_addr()?.to_string();
    let (rc1, exe) = (rc.clone(), exe.to_path_buf());
    let local = tokio::task::spawn_blocking(move || {
        LocalRoles::start(&exe, &rc1, back, local_role_threads(rc1.n_roles))
    })
    .await??;
    let next = local.first()?;
    start_role0(rc, cfg, Some((ret, next, Some(Arc::new(local)))), proposers).await
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
    let (listen, next) = fleet.links(0)?;
    let ret = TcpListener::bind(&listen)
        .await
        .with_context(|| format!("listening on {listen}"))?;
    start_role0(rc, cfg, Some((ret, next, None)), proposers).await
}

/// Role 0's return listener, role 1's address and the local role processes (if on one machine).
type Links = (TcpListener, String, Option<Arc<LocalRoles>>);

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
        Some((ret, next, local)) => {
            let chain = Chain {
                ret,
                next,
                lim: WireLimits::new(cfg.hidden),
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
        n_groups: rc.n_roles,
        window: rc.window,
        admission: rc.admission,
        max_inflight: 2 * rc.n_roles + 2 + rc.spec.depth,
        budget: rc.budget,
        spec_depth: rc.spec.depth,
        profile_dir: rc.profile_dir.clone(),
        phrase_file: rc.spec.phrases.as_ref().and_then(|p| p.file.clone()),
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
