//! Shapes, formats and logical bytes per token of a preset or an export directory.

use super::prelude::*;

#[derive(clap::Args)]
pub struct Args {
    /// An export directory or a preset name.
    target: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<()> {
    let Args { target, json } = args;
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
