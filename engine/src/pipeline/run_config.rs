//! What the operator chooses for a fleet, frozen at start-up and handed to every local role
//! process (`children::RoleLaunch`): `RunConfig`, with the choices it is made of that the fleet,
//! the scheduler (`Admission`), the supervisor (`RecoveryPolicy`) and the children all read.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::draft_head::MtpOptions;
use super::link::LinkTiming;
use super::weights_source::WeightsSource;
use crate::model::{ForwardOptions, Model};
use crate::spec::Proposers;

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
    pub admission: Admission,
    pub n_slots: usize,
    /// Pipeline groups of slots (None: one per role; `ingress`).
    #[serde(default)]
    pub groups: Option<usize>,
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

/// How role 0 lets prompts into the pipeline (the two sides of the paper's Figure 6).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
pub enum Admission {
    /// Prompts enter as windows of at most `window` rows, every admitted prompt at once, beside
    /// the decode rows of running streams (ARCHITECTURE.md §3.2).
    #[default]
    Windowed,
    /// The reference the windows are measured against: one prompt at a time, whole (in frames of
    /// up to `ingress::REFERENCE_ROWS` rows), the next prompt waiting until the previous one has
    /// returned its first token; decode rows of running streams go on meanwhile.
    Reference,
}

/// How hard role 0 tries to bring a broken chain back.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecoveryPolicy {
    /// Recoveries allowed within `window`; one more is a permanent failure (0: never recover).
    pub max_recoveries: usize,
    pub window: Duration,
    /// How long a recovery may take to link and probe the chain (a role restarted by hand
    /// across hosts has this long to come back).
    pub rejoin_timeout: Duration,
    /// Times one stream in flight may be held through a lost chain and replayed; past it the
    /// stream ends with the chain's error (0: every stream in flight ends so).
    #[serde(default = "RecoveryPolicy::default_stream_replays")]
    pub stream_replays: usize,
    /// How long held streams wait for the chain to come back, from the loss, before they end with
    /// its error (the fleet goes on recovering for the requests after them).
    #[serde(default = "RecoveryPolicy::default_resume_deadline")]
    pub resume_deadline: Duration,
    /// How long the chain stays broken before role 0 hands the ranks it cannot reach to the fleet
    /// file's spare hosts (and again each time as long again passes).
    #[serde(default = "RecoveryPolicy::default_spare_after")]
    pub spare_after: Duration,
}

impl Default for RecoveryPolicy {
    fn default() -> Self {
        RecoveryPolicy {
            max_recoveries: 5,
            window: Duration::from_secs(600),
            rejoin_timeout: Duration::from_secs(600),
            stream_replays: Self::default_stream_replays(),
            resume_deadline: Self::default_resume_deadline(),
            spare_after: Self::default_spare_after(),
        }
    }
}

impl RecoveryPolicy {
    pub fn default_spare_after() -> Duration {
        Duration::from_secs(10)
    }

    fn default_stream_replays() -> usize {
        3
    }

    fn default_resume_deadline() -> Duration {
        Duration::from_secs(60)
    }

    /// The wait before recovery number `k` (0-based) within the window: none for the first, then
    /// 1 s, 2 s, 4 s … at most 30 s.
    pub fn backoff(k: usize) -> Duration {
        match k {
            0 => Duration::ZERO,
            k => Duration::from_secs(1u64 << (k - 1).min(5)).min(Duration::from_secs(30)),
        }
    }
}
