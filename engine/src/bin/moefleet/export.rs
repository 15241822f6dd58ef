//! Write a preset's synthetic weights as manifest.json + model.safetensors + expert bins.

use super::prelude::*;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    preset: String,
    #[arg(long, default_value_t = 7)]
    seed: u64,
    #[arg(long)]
    out: PathBuf,
    /// Only the first N layers (no head unless N is the layer count).
    #[arg(long)]
    layers: Option<usize>,
}

pub fn run(args: Args) -> Result<()> {
    let Args {
        preset,
        seed,
        out,
        layers,
    } = args;
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
    let m = export::export(&w, &out).with_context(|| format!("exporting to {}", out.display()))?;
    eprintln!(
        "wrote {} layers of {} to {}",
        m.layers.len(),
        m.config.name,
        out.display()
    );
    Ok(())
}
