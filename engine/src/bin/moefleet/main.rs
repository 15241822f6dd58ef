//! `moefleet`: the engine's command line. One file per subcommand, each holding its clap
//! arguments and a `run` that wires them to the library (`args.rs` holds the options several
//! subcommands share; `config_file.rs` layers `--config FILE` under the command line). The work
//! itself lives in the library (`moefleet_engine`).

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

mod alloc;
mod args;
mod bench;
mod config;
mod config_file;
mod continuations;
mod export;
mod generate;
mod inspect;
mod openvino_report;
mod phrases;
mod probe;
mod role;
mod serve;
mod spare;
mod tokenizer;

/// What every subcommand file imports.
mod prelude {
    pub use std::path::{Path, PathBuf};

    pub use anyhow::{bail, Context, Result};
    pub use moefleet_engine::bench;
    pub use moefleet_engine::generate::{generate, generate_captured};
    pub use moefleet_engine::gguf::Gguf;
    pub use moefleet_engine::inspect::bytes_per_token;
    pub use moefleet_engine::model::checkpoint;
    pub use moefleet_engine::model::config::{
        Backend, BackendKind, Device, OvPrecision, PRESET_NAMES,
    };
    pub use moefleet_engine::model::{
        export, load, AttentionMode, DenseForm, ForwardOptions, Model, ModelConfig, SynthSpec,
    };
    pub use moefleet_engine::pipeline;
    pub use moefleet_engine::pipeline::children;
    pub use moefleet_engine::pipeline::emulation::LinkEmulation;
    pub use moefleet_engine::pipeline::fleet::{
        self, layer_range, FleetFile, RunConfig, WeightsSource,
    };
    pub use moefleet_engine::pipeline::ingress::Admission;
    pub use moefleet_engine::pipeline::link::LinkTiming;
    pub use moefleet_engine::pipeline::recovery::RecoveryPolicy;
    pub use moefleet_engine::pipeline::role::RoleEngine;
    pub use moefleet_engine::pipeline::worker::{self, WorkerConfig};
    pub use moefleet_engine::probe;
    pub use moefleet_engine::serve::{CaptureMode, ServeConfig};
    pub use moefleet_engine::spec::phrases::PhraseTable;
    pub use moefleet_engine::tokenizer::{self, TextTokenizer};

    pub(crate) use super::args::*;
}

#[derive(Parser)]
#[command(
    name = "moefleet",
    version = moefleet_engine::VERSION,
    about = "Resident mixture-of-experts engine for the Inkling model family"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// The context probe (MEASUREMENTS.md §3.1): build roles alone at full shapes (MoE layers hold
    /// only the eight experts one row selects), and for each size from 4k to 1M positions fill one
    /// stream's caches, time four single-row decode calls (attention and MLP split), record memory.
    /// Writes the raw records, OUT/probe-role-K.json; `moefleet-harness probe OUT` tables them
    /// (context_probe.csv in the paper's columns, probe.json).
    Probe(probe::Args),
    /// Greedy generation in one process; prints the text and prefill/decode tokens per second.
    Generate(generate::Args),
    /// Greedy continuations of a prompt set (JSON lines with "id" and "prompt_ids"), with each
    /// position's two best tokens and log-probabilities, as JSON lines: the engine's side of the
    /// token-for-token comparison with llama.cpp (`scripts/gguf_parity.sh`).
    Continue(continuations::Args),
    /// Single-process prefill and decode speed in llama-bench's terms (ppN: a prompt of N random
    /// ids in one window by default; tgN: N greedy tokens after a one-token prompt), each test
    /// once untimed and then repeated, as mean ± sd tokens per second, per thread count; then one
    /// more decode pass and one more prefill of the longest prompt per thread count, outside the
    /// table's timings, profile where time goes.
    Bench(bench::Args),
    /// Write a preset's synthetic weights as manifest.json + model.safetensors + expert bins.
    Export(export::Args),
    /// What OpenVINO executes for a model's graphs on a device: builds the OpenVINO backend with
    /// per-node profiling, runs a short prompt through it, and writes (JSON) the library and version,
    /// the devices, and for the first dense and first MoE layer and the head: the executed nodes
    /// and kernels, the precision the device resolved, whether the MoE form ran fused (only the
    /// selected experts' weights read), and reference-implementation fallbacks.
    OpenvinoReport(openvino_report::Args),
    /// Shapes, formats and logical bytes per token of a preset or an export directory.
    Inspect(inspect::Args),
    /// Serve the OpenAI-compatible API from a fleet of roles: by default every role on this machine
    /// (one process each, linked over loopback TCP); with --fleet, this process is role 0 of a
    /// fleet whose other roles run `moefleet role --rank K --fleet FILE` on their hosts.
    Serve(serve::Args),
    /// The configuration `serve` would run with (`--config FILE` under the command line's flags),
    /// printed as TOML that `--config` reads back.
    Config(config::Args),
    /// Phrase tables of the speculation proposer: merge (counts added) or summarise.
    Phrases(phrases::Args),
    /// Run one role of a fleet (started by `serve`, or by hand with --fleet on another host). A
    /// role whose links break links again: restarted with the same arguments, it rejoins.
    Role(role::Args),
    /// Wait as a spare host of a fleet file (`[[spare]] addr`): role 0 hands it the rank of a
    /// host it cannot reach, and it runs that role from then on.
    Spare(spare::Args),
    /// Train the byte-level BPE tokenizer from corpus files.
    Tokenizer(tokenizer::Args),
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
    // `--config FILE` (serve, role, config): the file's keys become flags after the command line's
    let argv = match config_file::layered(Cli::command(), std::env::args_os().collect()) {
        Ok(argv) => argv,
        Err(e) => {
            eprintln!("moefleet: error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let cli = Cli::parse_from(&argv);
    // MOEFLEET_ISA narrows the kernels for side-by-side measurements
    if let Err(e) =
        moefleet_engine::kernels::apply_isa(std::env::var("MOEFLEET_ISA").ok().as_deref())
    {
        eprintln!("moefleet: error: {e}");
        return ExitCode::from(2);
    }
    // where OpenVINO's C library is looked for, read here so the library reads no environment
    let search = moefleet_engine::openvino::locate::Search::from_env();
    if let Err(e) = moefleet_engine::openvino::locate::configure(search) {
        eprintln!("moefleet: error: {e}");
        return ExitCode::from(2);
    }
    match run(cli, &argv) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("moefleet: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// `argv`: the arguments after layering `--config`, which `config --print` renders.
fn run(cli: Cli, argv: &[std::ffi::OsString]) -> anyhow::Result<()> {
    match cli.cmd {
        Cmd::Probe(a) => probe::run(a),
        Cmd::Generate(a) => generate::run(a),
        Cmd::Continue(a) => continuations::run(a),
        Cmd::Bench(a) => bench::run(a),
        Cmd::Export(a) => export::run(a),
        Cmd::OpenvinoReport(a) => openvino_report::run(a),
        Cmd::Inspect(a) => inspect::run(a),
        Cmd::Serve(a) => serve::run(a),
        Cmd::Config(a) => config::run(a, argv),
        Cmd::Phrases(a) => phrases::run(a),
        Cmd::Role(a) => role::run(a),
        Cmd::Spare(a) => spare::run(a),
        Cmd::Tokenizer(a) => tokenizer::run(a),
    }
}
