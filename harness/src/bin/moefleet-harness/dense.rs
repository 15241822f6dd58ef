//! `moefleet-harness dense`: dense blocks as fused slices against three matrix calls
//! (MEASUREMENTS.md §4), on the native kernels and on OpenVINO (dense.csv, dense.json, figure3).

use std::path::PathBuf;

use crate::common::published;

#[derive(clap::Args)]
pub struct Args {
    /// Directory for the outputs (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// Timed calls of each form per (layer, rows).
    #[arg(long, default_value_t = 31, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    calls: u64,
    /// Untimed calls of each form first.
    #[arg(long, default_value_t = 2)]
    warmup: u64,
    /// Seed of the synthetic weights (and of the input rows).
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Preset whose dense layers are measured.
    #[arg(long, default_value = "inkling")]
    preset: String,
    /// Dense layers to measure (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "0,1")]
    layers: Vec<usize>,
    /// Input rows per call (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    rows: Vec<usize>,
    /// The paper's dense.csv to draw beside ours [default: reproduction/paper/dense.csv when
    /// it exists, else ours alone].
    #[arg(long)]
    paper: Option<PathBuf>,
    /// A ceilings.json whose read bandwidth the note compares with [default:
    /// OUT/ceilings.json when it exists].
    #[arg(long)]
    ceilings: Option<PathBuf>,
    /// Run on a pool of this many threads [default: rayon's, all logical CPUs].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    threads: Option<u64>,
    /// Backends measured side by side, each layer and row count in turn: the engine's native
    /// kernels and OpenVINO graphs of the same weights (CPU, f32; the wheel must be installed).
    #[arg(
        long,
        value_delimiter = ',',
        value_enum,
        default_value = "native,openvino"
    )]
    backends: Vec<moefleet_engine::model::config::BackendKind>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        out,
        calls,
        warmup,
        seed,
        preset,
        layers,
        rows,
        paper,
        ceilings,
        threads,
        backends,
    } = args;
    let paper = paper.or_else(|| published("dense", "dense.csv"));
    let ceilings = ceilings.or_else(|| {
        let p = out.join("ceilings.json");
        p.exists().then_some(p)
    });
    let cfg = moefleet_harness::experiments::dense::DenseConfig {
        out,
        preset,
        seed,
        layers,
        rows,
        calls: calls as usize,
        warmup: warmup as usize,
        paper,
        ceilings,
        backends,
    };
    match threads {
        Some(t) => rayon::ThreadPoolBuilder::new()
            .num_threads(t as usize)
            .build()?
            .install(|| moefleet_harness::experiments::dense::run(&cfg))?,
        None => moefleet_harness::experiments::dense::run(&cfg)?,
    }
    Ok(())
}
