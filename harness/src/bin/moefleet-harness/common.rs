//! What several subcommands share: the model a draft head is fitted or replayed against
//! (`fit-draft`, `replay`), the prompts of a reliability run (`soak`, `faults`), the paper's
//! published overlays (`figure6`, `figures`, `dense`) and a two-thread runtime.

use std::path::PathBuf;

use moefleet_harness::experiments::draft::run::ModelSource;

/// The model a draft head shares its embedding and unembedding with.
#[derive(clap::Args)]
pub struct DraftModel {
    /// Preset of the served model's synthetic weights [default for fit-draft: the model the
    /// corpus names; for replay: the head's].
    #[arg(long)]
    preset: Option<String>,
    /// Seed of the served model's synthetic weights.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// An export directory of the served model instead of a preset.
    #[arg(long, conflicts_with = "preset")]
    weights: Option<PathBuf>,
    /// A GGUF file of the served model instead of a preset (its tokenizer is the default
    /// --tokenizer).
    #[arg(long, conflicts_with_all = ["preset", "weights"])]
    pub model: Option<PathBuf>,
}

impl DraftModel {
    pub fn source(&self, fallback_preset: Option<&str>) -> Option<ModelSource> {
        if let Some(f) = &self.model {
            return Some(ModelSource::Gguf { file: f.clone() });
        }
        match (&self.weights, &self.preset, fallback_preset) {
            (Some(d), _, _) => Some(ModelSource::Export { dir: d.clone() }),
            (None, Some(p), _) => Some(ModelSource::Preset {
                name: p.clone(),
                seed: self.seed,
            }),
            (None, None, Some(p)) => Some(ModelSource::Preset {
                name: p.to_string(),
                seed: self.seed,
            }),
            _ => None,
        }
    }
}

/// The paper's published `file` under reproduction/paper/ as the default overlay of a figure, or
/// None (saying so on stderr) when this is not run from the repository root.
pub fn published(cmd: &str, file: &str) -> Option<PathBuf> {
    let p = PathBuf::from("reproduction/paper").join(file);
    if !p.exists() {
        eprintln!(
            "{cmd}: {} not found; drawing ours alone (use --paper)",
            p.display()
        );
    }
    p.exists().then_some(p)
}

/// The prompts of a reliability run.
#[derive(clap::Args)]
pub struct ReliabilityPrompts {
    /// Distinct prompts (of the built-in families), each first run alone for its reference.
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub prompts: u64,
    /// Output caps spread evenly from --min-tokens to --max-tokens over the prompts; every
    /// request runs to its cap (`ignore_eos`).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub min_tokens: u64,
    #[arg(long, default_value_t = 96, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub max_tokens: u64,
}

/// A two-thread runtime for one command.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}
