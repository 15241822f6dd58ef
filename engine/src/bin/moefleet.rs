//! `moefleet`: argument parsing and wiring only. Over 600 lines because it holds the clap
//! definitions and one short arm for each of its subcommands (bench included); the work itself lives in the library
//! (e.g. `probe`, `pipeline::fleet`), and splitting by subcommand would scatter the shared options.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use moefleet_engine::bench;
use moefleet_engine::generate::{generate, generate_captured};
use moefleet_engine::gguf::Gguf;
use moefleet_engine::inspect::bytes_per_token;
use moefleet_engine::model::checkpoint;
use moefleet_engine::model::config::{Backend, BackendKind, Device, OvPrecision, PRESET_NAMES};
use moefleet_engine::model::{
    export, load, AttentionMode, DenseForm, ForwardOptions, Model, ModelConfig, SynthSpec,
};
use moefleet_engine::pipeline;
use moefleet_engine::pipeline::children;
use moefleet_engine::pipeline::emulation::LinkEmulation;
use moefleet_engine::pipeline::fleet::{self, layer_range, FleetFile, RunConfig, WeightsSource};
use moefleet_engine::pipeline::ingress::Admission;
use moefleet_engine::pipeline::link::LinkTiming;
use moefleet_engine::pipeline::recovery::RecoveryPolicy;
use moefleet_engine::pipeline::role::RoleEngine;
use moefleet_engine::pipeline::worker::{self, WorkerConfig};
use moefleet_engine::probe;
use moefleet_engine::serve::{CaptureMode, ServeConfig};
use moefleet_engine::spec::phrases::PhraseTable;
use moefleet_engine::tokenizer::{self, TextTokenizer};

#[derive(Parser)]
#[command(
    name = "moefleet",
    version,
    about = "Resident mixture-of-experts engine for the Inkling model family"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

// parsed once per process: the size of its largest variant costs nothing
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// The context probe (MEASUREMENTS.md §3.1): build roles alone at full shapes (MoE layers hold
    /// only the eight experts one row selects), and for each size from 4k to 1M positions fill one
    /// stream's caches, time four single-row decode calls (attention and MLP split), record memory.
    /// Writes the raw records, OUT/probe-role-K.json; `moefleet-harness probe OUT` tables them
    /// (context_probe.csv in the paper's columns, probe.json).
    Probe {
        #[arg(long, default_value = "inkling")]
        preset: String,
        /// Probe a real checkpoint instead: a GGUF file's own layers, cut into as many six-layer
        /// roles as its layers fill (the sizes stop at the file's context length).
        #[arg(long)]
        model: Option<PathBuf>,
        #[arg(long, default_value_t = 7)]
        seed: u64,
        /// Roles to probe: comma-separated indices, or "all".
        #[arg(long, default_value = "0")]
        roles: String,
        /// Largest size to try (the probe's sizes up to this one).
        #[arg(long, default_value_t = 1_048_576)]
        max_context: usize,
        /// Attention kernel: the paper's serial loop or the parallel one.
        #[arg(long, value_enum, default_value_t = AttentionMode::Parallel)]
        attention: AttentionMode,
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        backend: BackendArgs,
    },
    /// Greedy generation in one process; prints the text and prefill/decode tokens per second.
    Generate {
        #[command(flatten)]
        model: WholeModel,
        #[arg(long, required_unless_present = "prompt_ids")]
        prompt: Option<String>,
        /// The prompt as token ids (comma-separated) instead of text: no tokenizer in the way.
        #[arg(long, value_delimiter = ',', conflicts_with = "prompt")]
        prompt_ids: Option<Vec<u32>>,
        /// Tokens to generate (1..=100000).
        #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=100_000))]
        max_tokens: u64,
        /// Prompt rows per prefill window.
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=4096))]
        window: u64,
        #[arg(long, value_enum, default_value_t = DenseForm::ThreeMatmul)]
        dense_form: DenseForm,
        #[command(flatten)]
        backend: BackendArgs,
        /// tokenizer.json (default: the project's tokenizer, compiled in).
        #[arg(long)]
        tokenizer: Option<PathBuf>,
        /// Also write the run's numbers as a JSON record to this file.
        #[arg(long)]
        record: Option<PathBuf>,
        /// Also write the stream's capture (residual before the final norm at every position, with
        /// token ids; FORMAT.md "Capture files") to this file, as a fleet's last role would.
        #[arg(long)]
        capture: Option<PathBuf>,
    },
    /// Greedy continuations of a prompt set (JSON lines with "id" and "prompt_ids"), with each
    /// position's two best tokens and log-probabilities, as JSON lines: the engine's side of the
    /// token-for-token comparison with llama.cpp (`scripts/gguf_parity.sh`).
    Continue {
        #[command(flatten)]
        model: WholeModel,
        #[arg(long)]
        prompts: PathBuf,
        /// Tokens to generate per prompt (fewer when the model's end-of-sequence token comes).
        #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..=100_000))]
        max_tokens: u64,
        #[arg(long)]
        out: PathBuf,
    },
    /// Single-process prefill and decode speed in llama-bench's terms (ppN: a prompt of N random
    /// ids in one window by default; tgN: N greedy tokens after a one-token prompt), each test
    /// once untimed and then repeated, as mean ± sd tokens per second, per thread count; then one
    /// more decode pass per thread count, outside the table's timings, profiles where time goes.
    Bench {
        #[command(flatten)]
        model: WholeModel,
        /// Thread counts, comma-separated (each a pool of its own).
        #[arg(long, value_delimiter = ',', default_value = "1,2", value_parser = clap::value_parser!(u64).range(1..=1024))]
        threads: Vec<u64>,
        /// Prefill tests: prompt lengths, comma-separated (`--prompt` alone: none).
        #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "64,512", value_parser = clap::value_parser!(u64).range(1..=65_536))]
        prompt: Vec<u64>,
        /// Decode tests: tokens to generate, comma-separated (`--gen` alone: none).
        #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "128", value_parser = clap::value_parser!(u64).range(1..=65_536))]
        gen: Vec<u64>,
        /// Timed repetitions of each test.
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
        repetitions: u64,
        /// Prompt rows per prefill window [default: the whole prompt].
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=65_536))]
        window: Option<u64>,
        /// Also write the results, with the load average before and after, as a JSON record.
        #[arg(long)]
        json: Option<PathBuf>,
        #[command(flatten)]
        backend: BackendArgs,
    },
    /// Write a preset's synthetic weights as manifest.json + model.safetensors + expert bins.
    Export {
        #[arg(long)]
        preset: String,
        #[arg(long, default_value_t = 7)]
        seed: u64,
        #[arg(long)]
        out: PathBuf,
        /// Only the first N layers (no head unless N is the layer count).
        #[arg(long)]
        layers: Option<usize>,
    },
    /// What OpenVINO executes for a model's graphs on a device: builds the OpenVINO backend with
    /// per-node profiling, runs a short prompt through it, and writes (JSON) the library and version,
    /// the devices, and for the first dense and first MoE layer and the head: the executed nodes
    /// and kernels, the precision the device resolved, whether the MoE form ran fused (only the
    /// selected experts' weights read), and reference-implementation fallbacks.
    OpenvinoReport {
        #[command(flatten)]
        model: WholeModel,
        #[arg(long, value_enum, default_value_t = Device::Cpu)]
        device: Device,
        #[arg(long, value_enum, default_value_t = OvPrecision::F32)]
        ov_precision: OvPrecision,
        /// Prompt tokens run through the graphs (rows of the frame).
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=512))]
        rows: u64,
        /// Write the report here (printed either way).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Shapes, formats and logical bytes per token of a preset or an export directory.
    Inspect {
        /// An export directory or a preset name.
        target: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Serve the OpenAI-compatible API from a fleet of roles: by default every role on this machine
    /// (one process each, linked over loopback TCP); with --fleet, this process is role 0 of a
    /// fleet whose other roles run `moefleet role --rank K --fleet FILE` on their hosts.
    Serve {
        #[command(flatten)]
        model: ModelArgs,
        /// Number of roles (processes); the layers split evenly (default: six layers per role).
        #[arg(long)]
        roles: Option<usize>,
        /// Address to serve on. The default, loopback, serves this machine only; any other
        /// address without --api-key prints a warning.
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// Require `Authorization: Bearer KEY` on every route but /health and /metrics (401
        /// without it). Also read from MOEFLEET_API_KEY, which keeps it out of the process list.
        #[arg(long, env = "MOEFLEET_API_KEY", hide_env_values = true)]
        api_key: Option<String>,
        /// Largest request body in bytes; a larger one gets 413 [default: 8 MiB, room for a
        /// 512k-position prompt as token ids].
        #[arg(long, default_value_t = moefleet_engine::serve::DEFAULT_BODY_LIMIT)]
        max_body: usize,
        /// Serve requests that name any model (as llama.cpp does); by default a name other
        /// than the served model's gets 404, as OpenAI and vLLM answer.
        #[arg(long)]
        accept_any_model: bool,
        #[arg(long, default_value_t = 8080)]
        port: u16,
        /// Fleet file (role -> host:port); omit to run every role on this machine.
        #[arg(long)]
        fleet: Option<PathBuf>,
        /// Stream slots (concurrent requests in the pipeline).
        #[arg(long, default_value_t = 176)]
        slots: usize,
        /// Requests waiting for a slot before new ones get 503.
        #[arg(long, default_value_t = 64)]
        queue: usize,
        /// Largest max_tokens a request may ask for.
        #[arg(long, default_value_t = 4096)]
        max_tokens_limit: usize,
        /// Prompt rows per prefill window.
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=512))]
        window: u64,
        /// How prompts enter the pipeline: windows of --window rows beside everything else
        /// (windowed), or the reference they are measured against (reference: one prompt at a
        /// time, whole, the next waiting for the previous one's first token; Figure 6).
        #[arg(long, value_enum, default_value_t = Admission::Windowed)]
        admission: Admission,
        /// tokenizer.json (default: the project's tokenizer, compiled in).
        #[arg(long)]
        tokenizer: Option<PathBuf>,
        /// With --capture-dir: capture every stream (all) or only requests that carry
        /// `"moefleet_capture": true` (requested). The final SSE chunk (or the JSON response)
        /// names each stream's file under `moefleet.capture`.
        #[arg(long, value_enum, default_value_t = CaptureWhich::All, requires = "capture_dir")]
        capture: CaptureWhich,
        #[command(flatten)]
        spec: SpecArgs,
    },
    /// Phrase tables of the speculation proposer: merge (counts added) or summarise.
    Phrases {
        #[command(subcommand)]
        cmd: PhrasesCmd,
    },
    /// Run one role of a fleet (started by `serve`, or by hand with --fleet on another host). A
    /// role whose links break links again: restarted with the same arguments, it rejoins.
    Role {
        #[command(flatten)]
        model: ModelArgs,
        #[arg(long, required_unless_present = "launch_stdin")]
        rank: Option<usize>,
        /// Read the whole launch (the fleet's configuration as JSON, rank, addresses) from stdin
        /// and answer with one JSON line naming the address listened on; exit when stdin closes.
        /// This is how `serve` starts its local roles.
        #[arg(long, hide = true)]
        launch_stdin: bool,
        /// Number of roles; taken from the fleet file when given.
        #[arg(long)]
        roles: Option<usize>,
        /// Fleet file (role -> host:port).
        #[arg(long, conflicts_with_all = ["listen", "next"])]
        fleet: Option<PathBuf>,
        /// Listen address for the previous role.
        #[arg(long)]
        listen: Option<String>,
        /// Address of the next role (role 0's return port for the last role).
        #[arg(long)]
        next: Option<String>,
        /// This role shares the machine's cores with more roles than cores (`serve` says so to its
        /// local roles): a frame computes on one thread, unless role 0 sent it with no other frame
        /// in flight (a lone stream's decode), when it takes the whole pool.
        #[arg(long)]
        share_cores: bool,
    },
    /// Train the byte-level BPE tokenizer from corpus files.
    Tokenizer {
        #[arg(long, num_args = 1.., required = true)]
        corpus: Vec<PathBuf>,
        #[arg(long, default_value_t = 8000)]
        vocab: usize,
        #[arg(long)]
        out: PathBuf,
    },
}

#[derive(Subcommand)]
enum PhrasesCmd {
    /// Merge phrase tables: every (context, next token) count added.
    Merge {
        /// The tables to merge (at least one).
        #[arg(required = true)]
        tables: Vec<PathBuf>,
        #[arg(long)]
        out: PathBuf,
        /// The vocabulary they belong to [default: the project's tokenizer's].
        #[arg(long)]
        vocab: Option<u32>,
    },
    /// How many contexts and observations a table holds.
    Show {
        table: PathBuf,
        #[arg(long)]
        vocab: Option<u32>,
    },
}

/// The proposers `--proposers` can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ProposerArg {
    Suffix,
    Phrase,
    Draft,
    Mtp,
}

/// Sampled rows of a lone stream in flight at once when speculating: the shallowest depth whose
/// repeated-pass gain was within a few per cent of the best in the depth sweep (README,
/// `results/speculation-inkling-mini/depth.md`); deeper costs more when a proposal is wrong,
/// since a rejection discards every row behind it.
const DEFAULT_SPEC_DEPTH: u64 = 24;

/// Speculative injection (role 0).
#[derive(clap::Args, Clone)]
struct SpecArgs {
    /// Speculate for a lone stream (ARCHITECTURE.md §3.3): proposed inputs travel behind the
    /// confirmed one as separate frames; each reply verifies the row behind it, and a wrong
    /// proposal is rewound in every role. The output is identical with it on or off.
    #[arg(long)]
    speculate: bool,
    /// Sampled rows of the lone stream in flight at once, its confirmed one included.
    #[arg(long, default_value_t = DEFAULT_SPEC_DEPTH, value_parser = clap::value_parser!(u64).range(2..=65))]
    spec_depth: u64,
    /// The proposers, asked in the paper's order: suffix (request-local four-token match), phrase
    /// (the shared phrase table), mtp (the fitted draft head in the last role: `--mtp-head`),
    /// draft (a small model on role 0's CPU). The default is the one that paid where measured: on
    /// SmolLM2 over two cores, only the phrase table, on repeated text (README "Speculation").
    #[arg(long, value_enum, value_delimiter = ',', default_value = "phrase")]
    proposers: Vec<ProposerArg>,
    /// The phrase table's file: loaded at start when present, saved on shutdown and by
    /// `POST /api/phrases/save`.
    #[arg(long)]
    phrase_table: Option<PathBuf>,
    /// Start with an empty phrase table when the file cannot be read (otherwise: an error).
    #[arg(long)]
    phrase_table_ignore_bad: bool,
    /// A context is used once seen this many times, the current one included.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    phrase_min_seen: u32,
    /// Share of a context's recorded followers that must agree.
    #[arg(long, default_value_t = 0.9)]
    phrase_agreement: f64,
    /// The draft model: a preset sharing the tokenizer (with `--proposers ...,draft`).
    #[arg(long, default_value = "inkling-nano")]
    draft_preset: String,
    #[arg(long, default_value_t = 7)]
    draft_seed: u64,
    /// The draft model from an export directory instead.
    #[arg(long, conflicts_with = "draft_model")]
    draft_weights: Option<PathBuf>,
    /// The draft model from a GGUF file instead (its vocabulary must be the served model's).
    #[arg(long)]
    draft_model: Option<PathBuf>,
    /// The draft head for `--proposers ...,mtp`: an export of `moefleet-harness fit-draft`
    /// for the served GGUF file. The last role runs it on a stream admitted alone and sends its
    /// drafts with each token.
    #[arg(long)]
    mtp_head: Option<PathBuf>,
    /// Drafts per token: the head's first modules.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=8))]
    mtp_drafts: u64,
    /// Choose drafts among the first N tokens of the vocabulary only (cheaper) [default: all].
    #[arg(long)]
    mtp_rows: Option<usize>,
    /// Send a token's drafts only up to the first the head gives a probability below P (a wrong
    /// proposal costs a row in every role); 0 sends every draft.
    #[arg(long, default_value_t = 0.5)]
    mtp_p_min: f32,
    /// Bench a proposer while the moving average of its accepted proposals is below this (it is
    /// still asked once in 32 times, to recover); 0 never benches.
    #[arg(long, default_value_t = 0.3)]
    spec_min_acceptance: f64,
    /// Tests: propose from known token sequences (a JSON array of id arrays).
    #[arg(long, hide = true)]
    spec_replay: Option<PathBuf>,
    /// Tests: propose the known token plus one (always wrong).
    #[arg(long, hide = true)]
    spec_replay_wrong: bool,
}

impl SpecArgs {
    fn options(&self) -> Result<fleet::SpecOptions> {
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

/// Which streams `serve --capture-dir` captures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum CaptureWhich {
    All,
    Requested,
}

/// Model and run options shared by `serve` and `role`.
/// Which kernels compute the products: every command that computes takes these.
#[derive(clap::Args, Clone, Copy)]
struct BackendArgs {
    /// The engine's own INT4/INT8 kernels, or OpenVINO graphs built from the same weights
    /// (engine/FORMAT.md "OpenVINO graphs"). OpenVINO's library is found through the PyPI
    /// `openvino` wheel (python3), or MOEFLEET_OPENVINO_LIB (the library file or its directory).
    #[arg(long, value_enum, default_value_t = BackendKind::Native)]
    backend: BackendKind,
    /// OpenVINO device; only CPU has been tested (GPU and NPU were not available here).
    #[arg(long, value_enum, default_value_t = Device::Cpu)]
    device: Device,
    /// OpenVINO inference precision: f32 without dynamic activation quantisation (parity), or
    /// the device's default (recorded by `openvino-report`).
    #[arg(long, value_enum, default_value_t = OvPrecision::F32)]
    ov_precision: OvPrecision,
}

impl BackendArgs {
    fn backend(&self) -> Backend {
        Backend {
            kind: self.backend,
            device: self.device,
            precision: self.ov_precision,
            profile: false,
        }
    }
}

#[derive(clap::Args, Clone)]
struct ModelArgs {
    /// Preset with synthetic weights.
    #[arg(long, default_value = "inkling-mini")]
    preset: String,
    /// Load an export directory instead (each role reads only its layers).
    #[arg(long, conflicts_with = "model")]
    weights: Option<PathBuf>,
    /// A real checkpoint: a GGUF file of the llama family or qwen3moe (each role maps the file and
    /// reads only its layers; the tokenizer and chat template come from the file).
    #[arg(long)]
    model: Option<PathBuf>,
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Context budget per stream, in positions.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(2..=1_048_576))]
    context: u64,
    #[arg(long, value_enum, default_value_t = DenseForm::ThreeMatmul)]
    dense_form: DenseForm,
    /// Attention kernel over the caches: the paper's serial loop or the parallel one.
    #[arg(long, value_enum, default_value_t = AttentionMode::Parallel)]
    attention: AttentionMode,
    #[command(flatten)]
    backend: BackendArgs,
    /// Run the context probe (4k.. positions) in every role at start-up; records go to
    /// DIR/probe-role-K.json (tabled by `moefleet-harness probe DIR`).
    #[arg(long)]
    context_probe: Option<PathBuf>,
    /// Largest context-probe size.
    #[arg(long, default_value_t = 1_048_576)]
    context_probe_max: usize,
    /// Write per-frame stage records to DIR/role-K.jsonl.
    #[arg(long)]
    profile_dir: Option<PathBuf>,
    /// Seconds a role waits for its neighbours (weight generation included).
    #[arg(long, default_value_t = 600)]
    link_timeout_s: u64,
    /// Seconds a link between roles may stay silent before its sender counts as stalled or the
    /// link as cut (senders write a heartbeat after a fifth of it). The chain is then recovered.
    #[arg(long, default_value_t = 5.0, value_parser = parse_stall)]
    link_stall_s: f64,
    /// Emulate links of this rate between roles (e.g. 1gbit, 10gbit, 100mbit): every message is
    /// held until it would have crossed such a link after the one before it. Every link of the
    /// chain, the token return included [default: as fast as the real connection].
    #[arg(long, value_parser = moefleet_engine::pipeline::emulation::parse_rate)]
    link_rate: Option<f64>,
    /// Emulate this one-way latency on every link between roles (e.g. 0.2ms, 50us).
    #[arg(long, value_parser = moefleet_engine::pipeline::emulation::parse_latency)]
    link_latency: Option<std::time::Duration>,
    /// Seconds a broken chain may take to link again (a role restarted by hand on another host
    /// has this long to come back) before the failure is permanent.
    #[arg(long, default_value_t = 600)]
    rejoin_timeout_s: u64,
    /// Recoveries of a broken chain allowed within ten minutes (role 0 restarts dead local
    /// roles and links again, after a back-off of 0, 1, 2, 4 … 30 s); one more is a permanent
    /// failure. 0: never recover.
    #[arg(long, default_value_t = 5)]
    max_recoveries: usize,
    /// Capture streams into DIR (the last role writes one file per stream: the residual before
    /// the final norm at every position, with token ids; FORMAT.md "Capture files"). Which
    /// streams: `serve --capture`.
    #[arg(long)]
    capture_dir: Option<PathBuf>,
}

impl ModelArgs {
    fn source(&self) -> WeightsSource {
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
    fn tokenizer(&self, file: Option<&Path>) -> Result<TextTokenizer> {
        Ok(TextTokenizer::open(file.or(self.model.as_deref()))?)
    }

    fn run_config(&self, n_roles: usize, slots: usize, queue: usize, window: usize) -> RunConfig {
        RunConfig {
            weights: self.source(),
            n_roles,
            budget: self.context as usize,
            window,
            admission: Admission::Windowed,
            n_slots: slots,
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

/// Run role `rank` of `rc` until `Shutdown`, or until it cannot rejoin its chain.
fn run_worker(
    rc: RunConfig,
    rank: usize,
    listen: String,
    next: String,
    announce: impl FnOnce(std::net::SocketAddr) -> std::io::Result<()>,
) -> Result<()> {
    let cfg = rc.weights.config()?;
    layer_range(&cfg, rank, rc.n_roles)?;
    let wc = WorkerConfig {
        rank,
        n_roles: rc.n_roles,
        listen,
        next,
        connect_timeout: rc.link_timeout,
        rejoin_timeout: rc.recovery.rejoin_timeout,
        timing: rc.timing,
        profile_dir: rc.profile_dir.clone(),
        capture_dir: rc.capture_dir.clone(),
    };
    worker::run(wc, announce, || {
        let m = rc.build_role(rank)?;
        let mut e = RoleEngine::new(rank, rc.n_roles, m, rc.budget);
        if let Some(h) = rc.spec.mtp.as_ref().filter(|_| e.is_last()) {
            e.set_head(h.build(&rc.weights, rc.budget)?);
        }
        Ok(e)
    })
}

/// `--link-stall-s`: half a second to an hour.
fn parse_stall(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.5..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!("'{s}' is not a number of seconds in 0.5..=3600")),
    }
}

fn main() -> ExitCode {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MOEFLEET_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .init();
    let cli = Cli::parse();
    // MOEFLEET_ISA narrows the kernels for side-by-side measurements
    if let Err(e) = moefleet_engine::kernels::apply_isa_env() {
        eprintln!("moefleet: error: {e}");
        return ExitCode::from(2);
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("moefleet: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Where a single-process command's whole model comes from.
#[derive(clap::Args)]
struct WholeModel {
    /// Preset with synthetic weights: inkling, inkling-small, inkling-mini, inkling-nano.
    #[arg(long, default_value = "inkling-mini", conflicts_with_all = ["weights", "model"])]
    preset: String,
    /// Load an export directory instead of generating weights.
    #[arg(long, conflicts_with = "model")]
    weights: Option<PathBuf>,
    /// A real checkpoint: a GGUF file of the llama family (llama, mistral, qwen2, qwen3) or
    /// qwen3moe, read in place (memory-mapped); its tokenizer comes from the file too.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Seed of the synthetic weights.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

impl WholeModel {
    /// Every layer: loaded from the export directory, or the preset's synthetic weights.
    fn load(&self, what: &str) -> Result<moefleet_engine::model::ModelWeights> {
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
    fn tokenizer(&self, file: Option<&Path>) -> Result<TextTokenizer> {
        Ok(TextTokenizer::open(file.or(self.model.as_deref()))?)
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Probe {
            preset,
            model,
            seed,
            roles,
            max_context,
            attention,
            out,
            backend,
        } => probe(
            &preset,
            model.as_deref(),
            seed,
            &roles,
            max_context,
            attention,
            backend.backend(),
            &out,
        )?,
        Cmd::Generate {
            model: source,
            prompt,
            prompt_ids,
            max_tokens,
            window,
            dense_form,
            backend,
            tokenizer: tk,
            record,
            capture,
        } => {
            let tok = source.tokenizer(tk.as_deref())?;
            let t0 = std::time::Instant::now();
            let w = source.load("generation")?;
            if tok.vocab_size() > w.config.vocab_size {
                bail!(
                    "tokenizer vocabulary {} exceeds the model's {}",
                    tok.vocab_size(),
                    w.config.vocab_size
                );
            }
            let load_s = t0.elapsed().as_secs_f64();
            let model = Model::new(
                w,
                ForwardOptions {
                    dense_form,
                    backend: backend.backend(),
                    ..Default::default()
                },
            );
            model.prepare()?;
            let (prompt, ids) = match (prompt, prompt_ids) {
                (_, Some(ids)) => (tok.decode(&ids)?, ids),
                (Some(p), None) => {
                    let ids = tok.encode_prompt(&p)?;
                    (p, ids)
                }
                (None, None) => bail!("give --prompt or --prompt-ids"),
            };
            if ids.is_empty() {
                bail!("the prompt encodes to no tokens");
            }
            // a checkpoint ends at its end-of-sequence token, as a server would
            let stop = model
                .config()
                .family
                .is_checkpoint()
                .then(|| tok.eos())
                .flatten();
            // from inside a pool, as the roles compute (pipeline::on_compute_pool says why)
            let g = moefleet_engine::pipeline::on_compute_pool("generate", || -> Result<_> {
                Ok(match &capture {
                    None => generate(
                        &model,
                        &ids,
                        max_tokens as usize,
                        window as usize,
                        stop,
                        false,
                    )?,
                    Some(path) => {
                        let (g, c) = generate_captured(
                            &model,
                            &ids,
                            max_tokens as usize,
                            window as usize,
                            None,
                        )?;
                        std::fs::write(path, c.encode())
                            .with_context(|| format!("writing {}", path.display()))?;
                        g
                    }
                })
            })??;
            println!("{}{}", prompt, tok.decode(&g.tokens)?);
            eprintln!(
                "{}: {} layers, weights ready in {load_s:.2} s; prefill {} tokens at {:.1} tok/s; decode {} tokens at {:.2} tok/s",
                model.config().name,
                model.config().n_layers,
                g.prompt_rows,
                g.prefill_tok_s(),
                g.tokens.len(),
                g.decode_tok_s()
            );
            if let Some(path) = record {
                let rec = serde_json::json!({
                    "record": "single_process_generate",
                    "model": model.config().name,
                    "seed": source.seed,
                    "dense_form": dense_form,
                    "backend": backend.backend(),
                    "prompt_tokens": g.prompt_rows,
                    "generated_tokens": g.tokens.len(),
                    "prompt_ids": ids,
                    "generated_ids": g.tokens,
                    "prefill_s": g.prefill_s,
                    "decode_s": g.decode_s,
                    "prefill_tok_s": g.prefill_tok_s(),
                    "decode_tok_s": g.decode_tok_s(),
                    "weights_ready_s": load_s,
                    "bytes_per_token": match &model.weights.checkpoint {
                        Some(cp) => serde_json::json!(cp.bytes_per_token(model.config().top_k)),
                        None => serde_json::json!(bytes_per_token(model.config())),
                    },
                    "threads": rayon::current_num_threads(),
                    "host": bench::host_facts(),
                    "engine_version": env!("CARGO_PKG_VERSION"),
                    "engine_commit": env!("MOEFLEET_BUILD_COMMIT"),
                });
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)
                        .with_context(|| format!("creating {}", parent.display()))?;
                }
                std::fs::write(&path, serde_json::to_string_pretty(&rec)? + "\n")
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
        Cmd::Continue {
            model: source,
            prompts,
            max_tokens,
            out,
        } => {
            let w = source.load("continuations")?;
            let model = Model::new(w, ForwardOptions::default());
            // a checkpoint stops at its end-of-sequence token, as llama-server does
            let stop = match &source.model {
                Some(m) => Gguf::open(m)?.opt_u32("tokenizer.ggml.eos_token_id")?,
                None => None,
            };
            let bar = indicatif::ProgressBar::new(0);
            let n = moefleet_engine::pipeline::on_compute_pool("continue", || {
                moefleet_engine::continuations::run(
                    &model,
                    &prompts,
                    max_tokens as usize,
                    stop,
                    &out,
                    |done, total| {
                        bar.set_length(total as u64);
                        bar.set_position(done as u64);
                    },
                )
            })??;
            bar.finish_and_clear();
            eprintln!("{n} continuations written to {}", out.display());
        }
        Cmd::Bench {
            model: source,
            threads,
            prompt,
            gen,
            repetitions,
            window,
            json,
            backend,
        } => {
            use moefleet_engine::bench::Test;
            let w = source.load("a benchmark")?;
            let name = w.config.name.clone();
            let model = Model::new(
                w,
                ForwardOptions {
                    backend: backend.backend(),
                    ..Default::default()
                },
            );
            let tests: Vec<Test> = prompt
                .iter()
                .map(|&n| Test::Prefill { tokens: n as usize })
                .chain(gen.iter().map(|&n| Test::Decode { tokens: n as usize }))
                .collect();
            if tests.is_empty() {
                bail!("nothing to run: give --prompt or --gen lengths");
            }
            if backend.backend == BackendKind::Openvino && threads.len() > 1 {
                bail!(
                    "with --backend openvino give one --threads count (OpenVINO fixes its \
                     thread count when it compiles the graphs)"
                );
            }
            let load_start = bench::load_average();
            println!("| model | threads | test | t/s |\n|---|---:|---|---:|");
            let mut outcomes = Vec::new();
            for &t in &threads {
                for &test in &tests {
                    let o = bench::run(
                        &model,
                        test,
                        t as usize,
                        repetitions as usize,
                        window.map(|w| w as usize),
                    )?;
                    println!(
                        "| {name} | {t} | {} | {:.2} ± {:.2} |",
                        o.test, o.mean, o.sd
                    );
                    outcomes.push(o);
                }
            }
            // where a decode token's time goes, at each thread count
            let mut profiles = Vec::new();
            if let Some(&n) = gen.first() {
                for &t in &threads {
                    let p = bench::profile_decode(&model, n as usize, t as usize)?;
                    eprintln!(
                        "decode profile, {t} thread(s): {:.3} ms a token = attention {:.3} + \
                         experts/MLP {:.3} + norms, convolutions, residual {:.3} + head {:.3} \
                         (+ embedding and bookkeeping)",
                        p.total_ms, p.attention_ms, p.mlp_ms, p.other_ms, p.head_ms
                    );
                    profiles.push(p);
                }
            }
            let load_end = bench::load_average();
            eprintln!("load average (1, 5, 15 min): {load_start:?} before, {load_end:?} after");
            if let Some(path) = json {
                let record = serde_json::json!({
                    "record": "engine_bench",
                    "engine_commit": env!("MOEFLEET_BUILD_COMMIT"),
                    "model": name,
                    "backend": backend.backend(),
                    "weights": source.weights,
                    "seed": source.seed,
                    "repetitions": repetitions,
                    "window": window,
                    "isa": moefleet_engine::kernels::describe(),
                    "host": moefleet_engine::bench::host_facts(),
                    "load_average_start": load_start,
                    "load_average_end": load_end,
                    "results": outcomes,
                    "decode_profiles": profiles,
                });
                std::fs::write(&path, serde_json::to_string_pretty(&record)?)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
        Cmd::Export {
            preset,
            seed,
            out,
            layers,
        } => {
            let cfg = ModelConfig::preset(&preset)?;
            let n = layers.unwrap_or(cfg.n_layers);
            if n == 0 || n > cfg.n_layers {
                bail!("--layers must be in 1..={} for {preset}", cfg.n_layers);
            }
            let spec = SynthSpec {
                layers: 0..n,
                ..SynthSpec::whole(cfg, seed)
            };
            let w = moefleet_engine::model::generate(&spec)?;
            let m = export::export(&w, &out)
                .with_context(|| format!("exporting to {}", out.display()))?;
            eprintln!(
                "wrote {} layers of {} to {}",
                m.layers.len(),
                m.config.name,
                out.display()
            );
        }
        Cmd::OpenvinoReport {
            model: source,
            device,
            ov_precision,
            rows,
            out,
        } => {
            let w = source.load("the report")?;
            let backend = Backend {
                kind: BackendKind::Openvino,
                device,
                precision: ov_precision,
                profile: true,
            };
            let model = Model::new(
                w,
                ForwardOptions {
                    backend,
                    ..Default::default()
                },
            );
            let t0 = std::time::Instant::now();
            model.prepare()?;
            let compile_s = t0.elapsed().as_secs_f64();
            let c = model.config().clone();
            let toks: Vec<u32> = (0..rows as u32).map(|i| 1 + i * 7).collect();
            let mut st = model.new_stream(toks.len() + 1);
            let mut x = vec![0.0f32; toks.len() * c.hidden];
            model.embed(&toks, &mut x)?;
            model.forward(
                &mut [moefleet_engine::model::Segment {
                    state: &mut st,
                    rows: toks.len(),
                }],
                &mut x,
            )?;
            model.logits(&x)?;
            let ov = model.ov()?.context("the OpenVINO backend was not built")?;
            let graphs = ov.report()?;
            let rec = serde_json::json!({
                "record": "openvino_report",
                "model": c.name,
                "openvino_version": moefleet_engine::openvino::Runtime::version()?,
                "library": ov.runtime.library,
                "device": device.name(),
                "requested_precision": ov_precision,
                "rows": rows,
                "compile_all_layers_s": compile_s,
                // null when the range has no MoE layer (nothing to fuse)
                "moe_fused": graphs
                    .iter()
                    .any(|g| g.graph.ends_with(".moe"))
                    .then(|| graphs.iter().filter(|g| g.graph.ends_with(".moe")).all(|g| g.moe_fused)),
                "fallback_nodes": graphs.iter().map(|g| g.reference_nodes).sum::<usize>(),
                "graphs": graphs,
                "host": bench::host_facts(),
                "engine_commit": env!("MOEFLEET_BUILD_COMMIT"),
            });
            let text = serde_json::to_string_pretty(&rec)? + "\n";
            if let Some(path) = out {
                std::fs::write(&path, &text)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            print!("{text}");
        }
        Cmd::Inspect { target, json } => {
            let dir = PathBuf::from(&target);
            let (cfg, source) = if dir.join("manifest.json").exists() {
                let m = load::manifest(&dir)?;
                (
                    m.config,
                    format!(
                        "export {} (layers {}..{})",
                        dir.display(),
                        m.layer_start,
                        m.layer_end
                    ),
                )
            } else if dir.is_file() {
                return inspect_gguf(&dir, json);
            } else if PRESET_NAMES.contains(&target.as_str()) {
                (ModelConfig::preset(&target)?, format!("preset {target}"))
            } else {
                bail!("'{target}' is neither an export directory (no manifest.json), a GGUF file nor a preset ({})", PRESET_NAMES.join(", "));
            };
            print_inspect(&cfg, &source, json)?;
        }
        Cmd::Serve {
            model,
            roles,
            host,
            api_key,
            max_body,
            accept_any_model,
            port,
            fleet,
            slots,
            queue,
            max_tokens_limit,
            window,
            admission,
            tokenizer: tk,
            capture,
            spec,
        } => {
            let cfg = model.source().config()?;
            let fleet_file = fleet.as_deref().map(FleetFile::read).transpose()?;
            let n_roles = roles
                .or(fleet_file.as_ref().map(|f| f.role.len()))
                .unwrap_or_else(|| cfg.n_roles());
            layer_range(&cfg, 0, n_roles)?;
            if slots == 0 || slots > 4096 {
                bail!("--slots must be in 1..=4096");
            }
            let mut rc = model.run_config(n_roles, slots, queue, window as usize);
            rc.admission = admission;
            rc.spec = spec.options()?;
            if rc.spec.depth > 1 && n_roles < 2 {
                bail!("--speculate needs a pipeline of at least two roles (here: one)");
            }
            let tok = std::sync::Arc::new(model.tokenizer(tk.as_deref())?);
            if api_key.as_deref() == Some("") {
                tracing::warn!(
                    "the API key given (--api-key or MOEFLEET_API_KEY) is empty: no key is required"
                );
            }
            let sc = ServeConfig {
                host,
                port,
                queue,
                max_tokens: max_tokens_limit,
                body_limit: max_body,
                accept_any_model,
                api_key: api_key.filter(|k| !k.is_empty()),
                capture: match (&model.capture_dir, capture) {
                    (None, _) => CaptureMode::Off,
                    (Some(_), CaptureWhich::All) => CaptureMode::All,
                    (Some(_), CaptureWhich::Requested) => CaptureMode::Requested,
                },
            };
            let exe = std::env::current_exe()?;
            // role 0 computes in this process: the same share of the cores as its children
            match (&fleet_file, fleet::local_role_threads(n_roles)) {
                (None, Some(1)) => pipeline::share_cores(),
                (None, Some(t)) => rayon::ThreadPoolBuilder::new()
                    .num_threads(t)
                    .build_global()
                    .context("sizing role 0's compute threads")?,
                _ => {}
            }
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            rt.block_on(moefleet_engine::serve::run(
                sc,
                tok,
                slots,
                rc.budget,
                || async move {
                    match &fleet_file {
                        Some(f) => fleet::start_from_file(&rc, f).await,
                        None => fleet::start_local(&rc, &exe).await,
                    }
                },
                async {
                    let _ = tokio::signal::ctrl_c().await;
                    eprintln!("moefleet: shutting down");
                },
            ))?;
        }
        Cmd::Role {
            model,
            rank,
            launch_stdin,
            roles,
            fleet,
            listen,
            next,
            share_cores,
        } => {
            if launch_stdin {
                let l = children::read_launch()?;
                match l.threads {
                    Some(1) => pipeline::share_cores(),
                    Some(t) => rayon::ThreadPoolBuilder::new()
                        .num_threads(t)
                        .build_global()
                        .context("sizing the role's compute threads")?,
                    None => {}
                }
                let rank = l.rank;
                return run_worker(l.run, rank, l.listen, l.next, |a| {
                    children::announce(rank, a)
                });
            }
            let rank = rank.ok_or_else(|| anyhow::anyhow!("--rank is required"))?;
            if share_cores {
                pipeline::share_cores();
            }
            let (n_roles, listen, next) = match fleet {
                Some(f) => {
                    let ff = FleetFile::read(&f)?;
                    let (l, n) = ff.links(rank)?;
                    (ff.role.len(), l, n)
                }
                None => (
                    roles.ok_or_else(|| anyhow::anyhow!("--roles is required without --fleet"))?,
                    listen
                        .ok_or_else(|| anyhow::anyhow!("--listen is required without --fleet"))?,
                    next.ok_or_else(|| anyhow::anyhow!("--next is required without --fleet"))?,
                ),
            };
            if rank == 0 {
                bail!("rank 0 is started with `moefleet serve --fleet FILE`");
            }
            let rc = model.run_config(n_roles, 1, 0, 8);
            run_worker(rc, rank, listen, next, |a| {
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                writeln!(out, "moefleet role {rank} listening on {a}")?;
                out.flush()
            })?;
        }
        Cmd::Phrases { cmd } => {
            let default_vocab =
                || -> Result<u32> { Ok(TextTokenizer::embedded()?.vocab_size() as u32) };
            match cmd {
                PhrasesCmd::Merge { tables, out, vocab } => {
                    let v = match vocab {
                        Some(v) => v,
                        None => default_vocab()?,
                    };
                    let mut all = PhraseTable::new(v);
                    for t in &tables {
                        all.merge(&PhraseTable::load(t, v)?)?;
                    }
                    all.save(&out)?;
                    eprintln!(
                        "merged {} tables into {}: {} contexts, {} observations",
                        tables.len(),
                        out.display(),
                        all.contexts(),
                        all.observations()
                    );
                }
                PhrasesCmd::Show { table, vocab } => {
                    let v = match vocab {
                        Some(v) => v,
                        None => default_vocab()?,
                    };
                    let t = PhraseTable::load(&table, v)?;
                    println!(
                        "{}: vocabulary {}, {} contexts, {} observations",
                        table.display(),
                        t.vocab,
                        t.contexts(),
                        t.observations()
                    );
                }
            }
        }
        Cmd::Tokenizer { corpus, vocab, out } => {
            if !(256..=65536).contains(&vocab) {
                bail!("--vocab must be in 256..=65536");
            }
            let n = tokenizer::train(&corpus, vocab, &out)?;
            eprintln!(
                "trained a byte-level BPE of {n} tokens into {}",
                out.display()
            );
        }
    }
    Ok(())
}

/// `inspect FILE.gguf`: the configuration read from the file, its tensors by format, and the
/// weight bytes a token reads.
fn inspect_gguf(path: &Path, json: bool) -> Result<()> {
    let g = Gguf::open(path)?;
    let c = checkpoint::config::from_gguf(&g)?;
    let w = checkpoint::load::load_range(&g, &c, 0..c.n_layers)?;
    let cp = w.checkpoint.as_ref().context("a checkpoint's weights")?;
    let mut formats: std::collections::BTreeMap<String, (usize, u64)> = Default::default();
    for t in &g.tensors {
        let e = formats.entry(t.format.name().to_string()).or_default();
        e.0 += 1;
        e.1 += t.n_bytes;
    }
    let per_token = cp.bytes_per_token(c.top_k);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "file": path,
                "architecture": g.architecture()?,
                "config": c,
                "tensors_by_format": formats,
                "weight_bytes": cp.bytes(),
                "bytes_per_token": per_token,
            }))?
        );
        return Ok(());
    }
    println!("{} ({}, {:?} family)", c.name, g.architecture()?, c.family);
    println!(
        "  hidden {}  layers {} ({} roles by default)  q heads {} x {}  kv heads {}  vocabulary {}",
        c.hidden,
        c.n_layers,
        c.n_roles(),
        c.n_q_heads,
        c.head_dim,
        c.n_kv_heads_global,
        c.vocab_size
    );
    if c.n_routed > 0 {
        println!(
            "  experts {} (top {}) of width {}",
            c.n_routed, c.top_k, c.expert_width
        );
    } else {
        println!("  feed-forward width {}", c.dense_width);
    }
    for (f, (n, b)) in &formats {
        println!("  {n:>4} tensors {f:<6} {:>9.1} MB", *b as f64 / 1e6);
    }
    println!(
        "  weights {:.1} MB; a token reads {:.1} MB",
        cp.bytes() as f64 / 1e6,
        per_token as f64 / 1e6
    );
    Ok(())
}

fn print_inspect(c: &ModelConfig, source: &str, json: bool) -> Result<()> {
    let b = bytes_per_token(c);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "config": c,
                "bytes_per_token": b,
                "bytes_per_token_gb": {
                    "experts": b.experts as f64 / 1e9,
                    "experts_with_zero_points": b.experts_with_zero_points as f64 / 1e9,
                    "attention": b.attention as f64 / 1e9,
                    "dense": b.dense as f64 / 1e9,
                    "dense_with_zero_points": b.dense_with_zero_points as f64 / 1e9,
                    "head": b.head as f64 / 1e9,
                    "total": b.total as f64 / 1e9,
                }
            }))?
        );
        return Ok(());
    }
    // GB for the full presets, MB for the scaled ones
    let (div, unit) = if b.total >= 1_000_000_000 {
        (1e9, "GB")
    } else {
        (1e6, "MB")
    };
    let gb = |v: u64| v as f64 / div;
    println!("{source}: {}", c.name);
    println!(
        "  hidden {}  layers {} ({} roles)  q heads {} x {}  kv global/sliding {}/{}  window {}",
        c.hidden,
        c.n_layers,
        c.n_roles(),
        c.n_q_heads,
        c.head_dim,
        c.n_kv_heads_global,
        c.n_kv_heads_sliding,
        c.window
    );
    println!(
        "  dense width {} (layers 0..{})  experts {} routed top-{} + {} shared, width {}",
        c.dense_width, c.n_dense_layers, c.n_routed, c.top_k, c.n_shared, c.expert_width
    );
    println!(
        "  vocabulary {} (padded {})  context max {}",
        c.vocab_size, c.vocab_padded, c.max_context
    );
    println!("  formats: experts and dense INT4 group-32 (f16 scale, zero point 8); attention and head INT8 per row (f16 scale); embedding f16; small tensors f32");
    println!("logical weight bytes one unshared token reads:");
    println!(
        "  experts   {:>10.3} {unit}  ({:.3} {unit} with a stored 4-bit zero point per group)",
        gb(b.experts),
        gb(b.experts_with_zero_points)
    );
    println!("  attention {:>10.3} {unit}", gb(b.attention));
    println!(
        "  dense     {:>10.3} {unit}  ({:.3} {unit} with stored zero points)",
        gb(b.dense),
        gb(b.dense_with_zero_points)
    );
    println!("  head      {:>10.3} {unit}", gb(b.head));
    println!(
        "  total     {:>10.3} {unit}  (router, norms, taps, tables: {:.3} {unit} more)",
        gb(b.total),
        gb(b.small)
    );
    Ok(())
}

/// CPU model, logical CPUs and memory of this host, from /proc where it exists.
/// `moefleet probe`: one role at a time (its weights freed before the next is built).
fn probe(
    preset: &str,
    file: Option<&Path>,
    seed: u64,
    roles: &str,
    max_context: usize,
    attention: AttentionMode,
    backend: Backend,
    out: &std::path::Path,
) -> Result<()> {
    let source = file.map(|f| WeightsSource::Gguf(f.to_path_buf()));
    let c = match &source {
        Some(s) => s.config()?,
        None => ModelConfig::preset(preset)?,
    };
    let name = c.name.clone();
    let roles: Vec<usize> = if roles == "all" {
        (0..c.n_roles()).collect()
    } else {
        roles
            .split(',')
            .map(|r| r.trim().parse::<usize>())
            .collect::<std::result::Result<_, _>>()
            .with_context(|| format!("--roles {roles:?}: expected indices like 0,3 or \"all\""))?
    };
    let sizes: Vec<usize> = probe::SIZES
        .into_iter()
        .filter(|&n| n <= max_context.min(c.max_context))
        .collect();
    if sizes.is_empty() {
        bail!(
            "--max-context {max_context} is below the smallest probe size {}",
            probe::SIZES[0]
        );
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let opts = ForwardOptions {
        attention,
        backend,
        ..Default::default()
    };
    for &role in &roles {
        let t0 = std::time::Instant::now();
        let model = match &source {
            // the file's weights as they are: every expert is there, the router picks as it does
            Some(s) => {
                let n = c.n_roles();
                if role >= n {
                    bail!("role {role} does not exist ({name} has {n} roles)");
                }
                s.build_role(role, n, opts)?
            }
            None => probe::build_role(&c, seed, role, opts)?,
        };
        model.prepare()?;
        eprintln!(
            "probe: {name} role {role} (layers {:?}) built in {:.1} s; attention {attention:?}",
            model.layers(),
            t0.elapsed().as_secs_f64()
        );
        // from inside a pool, as the roles compute (pipeline::on_compute_pool says why)
        let recs = moefleet_engine::pipeline::on_compute_pool("probe", || {
            probe::run(&model, role, &sizes, seed, |r| {
                eprintln!("probe: {}", probe::describe(r))
            })
        })??;
        let extra = serde_json::json!({
            "seed": seed,
            "model_file": file.and_then(|f| f.file_name()).map(|f| f.to_string_lossy()),
            "host": bench::host_facts(),
        });
        probe::write_role_record(out, role, &model, &recs, extra)?;
    }
    eprintln!(
        "probe: wrote {}/probe-role-*.json; table them with `moefleet-harness probe {0}`",
        out.display()
    );
    Ok(())
}
