//! Options several subcommands share: where a model comes from (`ModelArgs` for a fleet's roles,
//! `WholeModel` for single-process commands), which kernels compute (`BackendArgs`), and
//! speculation (`SpecArgs`).

use super::prelude::*;

/// The proposers `--proposers` can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ProposerArg {
    Suffix,
    Phrase,
    Draft,
    Mtp,
}

/// Sampled rows of a lone stream in flight at once when speculating: the shallowest depth whose
/// repeated-pass gain was within a few per cent of the best in the depth sweep (docs/RESULTS.md,
/// `results/speculation-inkling-mini/depth.md`); deeper costs more when a proposal is wrong,
/// since a rejection discards every row behind it.
pub(crate) const DEFAULT_SPEC_DEPTH: u64 = 24;

/// Speculative injection (role 0).
#[derive(clap::Args, Clone)]
pub(crate) struct SpecArgs {
    /// Speculate for a lone stream (ARCHITECTURE.md §3.3): proposed inputs travel behind the
    /// confirmed one as separate frames; each reply verifies the row behind it, and a wrong
    /// proposal is rewound in every role. The output is identical with it on or off.
    #[arg(long)]
    pub(crate) speculate: bool,
    /// Sampled rows of the lone stream in flight at once, its confirmed one included.
    #[arg(long, default_value_t = DEFAULT_SPEC_DEPTH, value_parser = clap::value_parser!(u64).range(2..=65))]
    pub(crate) spec_depth: u64,
    /// The proposers, asked in the paper's order: suffix (request-local four-token match), phrase
    /// (the shared phrase table), mtp (the fitted draft head in the last role: `--mtp-head`),
    /// draft (a small model on role 0's CPU). The default is the one that paid where measured: on
    /// SmolLM2 over two cores, only the phrase table, on repeated text (docs/RESULTS.md "Speculation").
    #[arg(long, value_enum, value_delimiter = ',', default_value = "phrase")]
    pub(crate) proposers: Vec<ProposerArg>,
    /// The phrase table's file: loaded at start when present, saved on shutdown and by
    /// `POST /api/phrases/save`.
    #[arg(long)]
    pub(crate) phrase_table: Option<PathBuf>,
    /// Start with an empty phrase table when the file cannot be read (otherwise: an error).
    #[arg(long)]
    pub(crate) phrase_table_ignore_bad: bool,
    /// A context is used once seen this many times, the current one included.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) phrase_min_seen: u32,
    /// Share of a context's recorded followers that must agree.
    #[arg(long, default_value_t = 0.9)]
    pub(crate) phrase_agreement: f64,
    /// The draft model: a preset sharing the tokenizer (with `--proposers ...,draft`).
    #[arg(long, default_value = "inkling-nano")]
    pub(crate) draft_preset: String,
    #[arg(long, default_value_t = 7)]
    pub(crate) draft_seed: u64,
    /// The draft model from an export directory instead.
    #[arg(long, conflicts_with = "draft_model")]
    pub(crate) draft_weights: Option<PathBuf>,
    /// The draft model from a GGUF file instead (its vocabulary must be the served model's).
    #[arg(long)]
    pub(crate) draft_model: Option<PathBuf>,
    /// The draft head for `--proposers ...,mtp`: an export of `moefleet-harness fit-draft`
    /// for the served GGUF file. The last role runs it on a stream admitted alone and sends its
    /// drafts with each token.
    #[arg(long)]
    pub(crate) mtp_head: Option<PathBuf>,
    /// Drafts per token: the head's first modules.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=8))]
    pub(crate) mtp_drafts: u64,
    /// Choose drafts among the first N tokens of the vocabulary only (cheaper) [default: all].
    #[arg(long)]
    pub(crate) mtp_rows: Option<usize>,
    /// Send a token's drafts only up to the first the head gives a probability below P (a wrong
    /// proposal costs a row in every role); 0 sends every draft.
    #[arg(long, default_value_t = 0.5)]
    pub(crate) mtp_p_min: f32,
    /// Bench a proposer while the moving average of its accepted proposals is below this (it is
    /// still asked once in 32 times, to recover); 0 never benches.
    #[arg(long, default_value_t = 0.3)]
    pub(crate) spec_min_acceptance: f64,
    /// Tests: propose from known token sequences (a JSON array of id arrays).
    #[arg(long, hide = true)]
    pub(crate) spec_replay: Option<PathBuf>,
    /// Tests: propose the known token plus one (always wrong).
    #[arg(long, hide = true)]
    pub(crate) spec_replay_wrong: bool,
}

impl SpecArgs {
    pub(crate) fn options(&self) -> Result<fleet::SpecOptions> {
        if !self.speculate {
            if self.spec_replay.is_some() {
                bail!("--spec-replay needs --speculate");
            }
            return Ok(fleet::SpecOptions::default());
        }
        if !(self.phrase_agreement > 0.0 && self.phrase_agreement <= 1.0) {
            bail!("--phrase-agreement must be in (0, 1]");
        }
        if !(0.0..=1.0).contains(&self.mtp_p_min) {
            bail!("--mtp-p-min must be in [0, 1]");
        }
        if !(0.0..=1.0).contains(&self.spec_min_acceptance) {
            bail!("--spec-min-acceptance must be in [0, 1]");
        }
        let on = |p| self.proposers.contains(&p);
        Ok(fleet::SpecOptions {
            depth: self.spec_depth as usize,
            suffix: on(ProposerArg::Suffix),
            phrases: on(ProposerArg::Phrase).then(|| fleet::PhraseOptions {
                file: self.phrase_table.clone(),
                ignore_bad_file: self.phrase_table_ignore_bad,
                rule: moefleet_engine::spec::phrases::PhraseRule {
                    min_seen: self.phrase_min_seen,
                    min_agreement: self.phrase_agreement,
                },
            }),
            draft: on(ProposerArg::Draft).then(|| match (&self.draft_weights, &self.draft_model) {
                (Some(d), _) => WeightsSource::Export(d.clone()),
                (None, Some(f)) => WeightsSource::Gguf(f.clone()),
                (None, None) => WeightsSource::Preset {
                    name: self.draft_preset.clone(),
                    seed: self.draft_seed,
                },
            }),
            mtp: match (on(ProposerArg::Mtp), &self.mtp_head) {
                (true, Some(head)) => Some(fleet::MtpOptions {
                    head: head.clone(),
                    drafts: self.mtp_drafts as usize,
                    rows: self.mtp_rows,
                    p_min: self.mtp_p_min,
                }),
                (true, None) => bail!("--proposers mtp needs --mtp-head DIR (a fitted draft head)"),
                (false, _) => None,
            },
            replay: self
                .spec_replay
                .clone()
                .map(|f| (f, self.spec_replay_wrong)),
            min_acceptance: self.spec_min_acceptance,
        })
    }
}

/// Model and run options shared by `serve` and `role`.
/// Which kernels compute the products: every command that computes takes these.
#[derive(clap::Args, Clone, Copy)]
pub(crate) struct BackendArgs {
    /// The engine's own INT4/INT8 kernels, or OpenVINO graphs built from the same weights
    /// (docs/FORMAT.md "OpenVINO graphs"). OpenVINO's library is found through the PyPI
    /// `openvino` wheel (python3), or MOEFLEET_OPENVINO_LIB (the library file or its directory).
    #[arg(long, value_enum, default_value_t = BackendKind::Native)]
    pub(crate) backend: BackendKind,
    /// OpenVINO device; only CPU has been tested (GPU and NPU were not available here).
    #[arg(long, value_enum, default_value_t = Device::Cpu)]
    pub(crate) device: Device,
    /// OpenVINO inference precision: f32 without dynamic activation quantisation (parity), or
    /// the device's default (recorded by `openvino-report`).
    #[arg(long, value_enum, default_value_t = OvPrecision::F32)]
    pub(crate) ov_precision: OvPrecision,
}

impl BackendArgs {
    pub(crate) fn backend(&self) -> Backend {
        Backend {
            kind: self.backend,
            device: self.device,
            precision: self.ov_precision,
            profile: false,
        }
    }
}

#[derive(clap::Args, Clone)]
pub(crate) struct ModelArgs {
    /// Preset with synthetic weights.
    #[arg(long, default_value = "inkling-mini")]
    pub(crate) preset: String,
    /// Load an export directory instead (each role reads only its layers).
    #[arg(long, conflicts_with = "model")]
    pub(crate) weights: Option<PathBuf>,
    /// A real checkpoint: a GGUF file of the llama family or qwen3moe (each role maps the file and
    /// reads only its layers; the tokenizer and chat template come from the file).
    #[arg(long)]
    pub(crate) model: Option<PathBuf>,
    #[arg(long, default_value_t = 7)]
    pub(crate) seed: u64,
    /// Context budget per stream, in positions.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(2..=1_048_576))]
    pub(crate) context: u64,
    #[arg(long, value_enum, default_value_t = DenseForm::ThreeMatmul)]
    pub(crate) dense_form: DenseForm,
    /// Attention kernel over the caches: the paper's serial loop or the parallel one.
    #[arg(long, value_enum, default_value_t = AttentionMode::Parallel)]
    pub(crate) attention: AttentionMode,
    #[command(flatten)]
    pub(crate) backend: BackendArgs,
    /// Run the context probe (4k.. positions) in every role at start-up; records go to
    /// DIR/probe-role-K.json (tabled by `moefleet-harness probe DIR`).
    #[arg(long)]
    pub(crate) context_probe: Option<PathBuf>,
    /// Largest context-probe size.
    #[arg(long, default_value_t = 1_048_576)]
    pub(crate) context_probe_max: usize,
    /// Write per-frame stage records to DIR/role-K.jsonl.
    #[arg(long)]
    pub(crate) profile_dir: Option<PathBuf>,
    /// Seconds a role waits for its neighbours (weight generation included).
    #[arg(long, default_value_t = 600)]
    pub(crate) link_timeout_s: u64,
    /// Seconds a link between roles may stay silent before its sender counts as stalled or the
    /// link as cut (senders write a heartbeat after a fifth of it). The chain is then recovered.
    #[arg(long, default_value_t = 5.0, value_parser = parse_stall)]
    pub(crate) link_stall_s: f64,
    /// Emulate links of this rate between roles (e.g. 1gbit, 10gbit, 100mbit): every message is
    /// held until it would have crossed such a link after the one before it. Every link of the
    /// chain, the token return included [default: as fast as the real connection].
    #[arg(long, value_parser = moefleet_engine::pipeline::emulation::parse_rate)]
    pub(crate) link_rate: Option<f64>,
    /// Emulate this one-way latency on every link between roles (e.g. 0.2ms, 50us).
    #[arg(long, value_parser = moefleet_engine::pipeline::emulation::parse_latency)]
    pub(crate) link_latency: Option<std::time::Duration>,
    /// Seconds a broken chain may take to link again (a role restarted by hand on another host
    /// has this long to come back) before the failure is permanent.
    #[arg(long, default_value_t = 600)]
    pub(crate) rejoin_timeout_s: u64,
    /// Recoveries of a broken chain allowed within ten minutes (role 0 restarts dead local
    /// roles and links again, after a back-off of 0, 1, 2, 4 … 30 s); one more is a permanent
    /// failure. 0: never recover.
    #[arg(long, default_value_t = 5)]
    pub(crate) max_recoveries: usize,
    /// Times one stream in flight may be held through a lost chain: after the chain is linked
    /// again it is replayed (its prompt and the tokens already sent, as a prefill) and goes on
    /// where it stopped, the client seeing a pause. Past this many, or for a capturing stream, the
    /// stream ends with the chain's error. 0: every stream in flight ends so.
    #[arg(long, default_value_t = 3)]
    pub(crate) stream_replays: usize,
    /// Seconds held streams wait for a broken chain to come back before they end with its error
    /// (the fleet goes on recovering for later requests).
    #[arg(long, default_value = "60", value_parser = seconds)]
    pub(crate) resume_deadline_s: std::time::Duration,
    /// Seconds a broken chain waits before role 0 hands every rank whose host cannot be reached
    /// (no TCP connection within a second) to a spare host of the fleet file (`[[spare]] addr`,
    /// each running `moefleet spare`), and again each time as long again passes. Without spares
    /// listed, role 0 waits for the host to come back.
    #[arg(long, default_value = "10", value_parser = seconds)]
    pub(crate) spare_after_s: std::time::Duration,
    /// Capture streams into DIR (the last role writes one file per stream: the residual before
    /// the final norm at every position, with token ids; FORMAT.md "Capture files"). Which
    /// streams: `serve --capture`.
    #[arg(long)]
    pub(crate) capture_dir: Option<PathBuf>,
}

impl ModelArgs {
    pub(crate) fn source(&self) -> WeightsSource {
        match (&self.model, &self.weights) {
            (Some(f), _) => WeightsSource::Gguf(f.clone()),
            (None, Some(d)) => WeightsSource::Export(d.clone()),
            (None, None) => WeightsSource::Preset {
                name: self.preset.clone(),
                seed: self.seed,
            },
        }
    }

    /// `--tokenizer FILE` when given, else the GGUF file's own, else the project's embedded one.
    pub(crate) fn tokenizer(&self, file: Option<&Path>) -> Result<TextTokenizer> {
        Ok(TextTokenizer::open(file.or(self.model.as_deref()))?)
    }

    pub(crate) fn run_config(
        &self,
        n_roles: usize,
        slots: usize,
        queue: usize,
        window: usize,
    ) -> RunConfig {
        RunConfig {
            weights: self.source(),
            n_roles,
            budget: self.context as usize,
            window,
            admission: Admission::Windowed,
            n_slots: slots,
            groups: None,
            queue,
            opts: ForwardOptions {
                dense_form: self.dense_form,
                attention: self.attention,
                backend: self.backend.backend(),
                ..Default::default()
            },
            profile_dir: self.profile_dir.clone(),
            link_timeout: std::time::Duration::from_secs(self.link_timeout_s),
            timing: LinkTiming {
                stall: std::time::Duration::from_secs_f64(self.link_stall_s),
                emulate: LinkEmulation {
                    rate_bps: self.link_rate,
                    latency: self.link_latency.unwrap_or_default(),
                },
            },
            recovery: RecoveryPolicy {
                max_recoveries: self.max_recoveries,
                rejoin_timeout: std::time::Duration::from_secs(self.rejoin_timeout_s),
                stream_replays: self.stream_replays,
                resume_deadline: self.resume_deadline_s,
                spare_after: self.spare_after_s,
                ..Default::default()
            },
            probe: self.context_probe.clone().map(|dir| fleet::ProbeSpec {
                dir,
                max_context: self.context_probe_max,
            }),
            capture_dir: self.capture_dir.clone(),
            spec: fleet::SpecOptions::default(),
        }
    }
}

/// `--link-stall-s`: half a second to an hour.
pub(crate) fn parse_stall(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.5..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!("'{s}' is not a number of seconds in 0.5..=3600")),
    }
}

/// Where a single-process command's whole model comes from.
#[derive(clap::Args)]
pub(crate) struct WholeModel {
    /// Preset with synthetic weights: inkling, inkling-small, inkling-mini, inkling-nano.
    #[arg(long, default_value = "inkling-mini", conflicts_with_all = ["weights", "model"])]
    pub(crate) preset: String,
    /// Load an export directory instead of generating weights.
    #[arg(long, conflicts_with = "model")]
    pub(crate) weights: Option<PathBuf>,
    /// A real checkpoint: a GGUF file of the llama family (llama, mistral, qwen2, qwen3) or
    /// qwen3moe, read in place (memory-mapped); its tokenizer comes from the file too.
    #[arg(long)]
    pub(crate) model: Option<PathBuf>,
    /// Seed of the synthetic weights.
    #[arg(long, default_value_t = 7)]
    pub(crate) seed: u64,
}

impl WholeModel {
    /// Every layer: loaded from the export directory, or the preset's synthetic weights.
    pub(crate) fn load(&self, what: &str) -> Result<moefleet_engine::model::ModelWeights> {
        let w = match (&self.model, &self.weights) {
            (Some(file), _) => {
                let g = Gguf::open(file)?;
                let cfg = checkpoint::config::from_gguf(&g)?;
                let n = cfg.n_layers;
                checkpoint::load::load_range(&g, &cfg, 0..n)?
            }
            (None, Some(dir)) => load::load(dir)?,
            (None, None) => moefleet_engine::model::generate(&SynthSpec::whole(
                ModelConfig::preset(&self.preset)?,
                self.seed,
            ))?,
        };
        if w.layer_start != 0 || w.layer_end != w.config.n_layers {
            bail!(
                "the weights hold layers {}..{} only; {what} needs the whole model",
                w.layer_start,
                w.layer_end
            );
        }
        Ok(w)
    }

    /// `--tokenizer FILE` when given, else the GGUF file's own, else the project's embedded one.
    pub(crate) fn tokenizer(&self, file: Option<&Path>) -> Result<TextTokenizer> {
        Ok(TextTokenizer::open(file.or(self.model.as_deref()))?)
    }
}

/// A duration given in seconds (a finite, non-negative number).
fn seconds(s: &str) -> std::result::Result<std::time::Duration, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    std::time::Duration::try_from_secs_f64(v)
        .map_err(|_| format!("{s} is not a non-negative, finite number of seconds"))
}
