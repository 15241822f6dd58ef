//! Where a role's weights come from (`WeightsSource`: a preset, an export, a GGUF checkpoint) and
//! which layers each role of a fleet holds (`layer_range`).

use std::path::PathBuf;

use anyhow::bail;
use serde::{Deserialize, Serialize};

use crate::gguf::Gguf;
use crate::model::{checkpoint, generate, load, ForwardOptions, Model, ModelConfig, SynthSpec};

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
