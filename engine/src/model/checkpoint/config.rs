//! `ModelConfig` of a GGUF checkpoint, from the metadata keys llama.cpp writes
//! (`general.architecture` = A, then `A.block_count`, `A.embedding_length`, …). An architecture
//! the engine does not run, or a setting it would silently get wrong (YaRN scaling, sliding
//! windows, rope frequency factors), is refused with a message naming the key.

use crate::error::{Error, Result};
use crate::gguf::Gguf;
use crate::model::config::ModelConfig;
use crate::model::family::{Family, Rope};

/// The `general.architecture` values the engine runs, and their family.
pub const ARCHITECTURES: [(&str, Family); 6] = [
    ("llama", Family::Llama),
    ("mistral", Family::Llama),
    ("qwen2", Family::Llama),
    ("qwen3", Family::Llama),
    ("granite", Family::Llama),
    ("qwen3moe", Family::Qwen3Moe),
];

/// The architecture's RoPE pairing: NeoX style for the qwen families (llama.cpp's
/// `llama_model_rope_type`), adjacent pairs for llama and mistral.
fn neox(arch: &str) -> bool {
    matches!(arch, "qwen2" | "qwen3" | "qwen3moe")
}

pub fn from_gguf(g: &Gguf) -> Result<ModelConfig> {
    let arch = g.architecture()?;
    let family = ARCHITECTURES
        .iter()
        .find(|(a, _)| *a == arch)
        .map(|(_, f)| *f)
        .ok_or_else(|| {
            Error::Config(format!(
                "{}: architecture '{arch}' is not one the engine runs (it runs: {})",
                g.path.display(),
                ARCHITECTURES.map(|a| a.0).join(", ")
            ))
        })?;
    if arch == "granite" {
        return Err(Error::Config(format!(
            "{}: granite's embedding and residual multipliers are not implemented",
            g.path.display()
        )));
    }
    let key = |k: &str| format!("{arch}.{k}");
    let hidden = g.usize(&key("embedding_length"))?;
    let n_layers = g.usize(&key("block_count"))?;
    let nq = g.usize(&key("attention.head_count"))?;
    let nkv = g.opt_usize(&key("attention.head_count_kv"))?.unwrap_or(nq);
    let head_dim = match g.opt_usize(&key("attention.key_length"))? {
        Some(d) => d,
        None if nq > 0 => hidden / nq,
        None => 0,
    };
    if let Some(dv) = g.opt_usize(&key("attention.value_length"))? {
        if dv != head_dim {
            return Err(Error::Config(format!(
                "{}: value heads of {dv} differ from key heads of {head_dim}",
                g.path.display()
            )));
        }
    }
    for refused in [
        "attention.sliding_window",
        "rope.scaling.original_context_length",
    ] {
        if g.get(&key(refused)).is_some() {
            return Err(Error::Config(format!(
                "{}: {} is set; sliding windows and YaRN are not implemented",
                g.path.display(),
                key(refused)
            )));
        }
    }
    let scaling = g.opt_str(&key("rope.scaling.type"))?.unwrap_or("none");
    let freq_scale = match scaling {
        "none" => 1.0,
        "linear" => 1.0 / g.opt_f32(&key("rope.scaling.factor"))?.unwrap_or(1.0),
        other => {
            return Err(Error::Config(format!(
                "{}: rope scaling '{other}' is not implemented (none, linear are)",
                g.path.display()
            )))
        }
    };
    if g.has_tensor("rope_freqs.weight") {
        return Err(Error::Config(format!(
            "{}: rope frequency factors (rope_freqs.weight) are not implemented",
            g.path.display()
        )));
    }
    let rope = Rope {
        base: g.opt_f32(&key("rope.freq_base"))?.unwrap_or(10000.0),
        dims: g
            .opt_usize(&key("rope.dimension_count"))?
            .unwrap_or(head_dim),
        neox: neox(arch),
        freq_scale,
    };
    let vocab = match g.opt_usize(&key("vocab_size"))? {
        Some(v) => v,
        None => g.tensor("token_embd.weight")?.rows_cols().0,
    };
    let (n_routed, top_k, expert_width, n_dense_layers) = match family {
        Family::Qwen3Moe => (
            g.usize(&key("expert_count"))?,
            g.usize(&key("expert_used_count"))?,
            g.usize(&key("expert_feed_forward_length"))?,
            0,
        ),
        _ => (0, 0, 0, n_layers),
    };
    let dense_width = g.opt_usize(&key("feed_forward_length"))?.unwrap_or(0);
    // the file's name, as clients of llama-server know a model (`general.name` is free text)
    let name = g
        .path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| arch.to_string());
    let cfg = ModelConfig {
        name,
        hidden,
        n_layers,
        n_q_heads: nq,
        head_dim,
        n_kv_heads_global: nkv,
        n_kv_heads_sliding: nkv,
        window: usize::MAX / 2,
        rel_extent_global: 0,
        rel_extent_sliding: 0,
        d_rel: 0,
        dense_width,
        n_dense_layers,
        n_routed,
        top_k,
        n_shared: 0,
        expert_width,
        n_mtp: 0,
        vocab_size: vocab,
        vocab_padded: vocab,
        max_context: g.opt_usize(&key("context_length"))?.unwrap_or(4096),
        rms_eps: g
            .opt_f32(&key("attention.layer_norm_rms_epsilon"))?
            .unwrap_or(1e-5),
        conv_kernel: 1,
        tau_alpha: 0.0,
        tau_floor: 1.0,
        route_scale: 1.0,
        mup_width_multiplier: 1.0,
        global_every: 1,
        global_offset: 0,
        rewind_slack: 64,
        family,
        rope: Some(rope),
        qk_norm: g.has_tensor("blk.0.attn_q_norm.weight"),
        // llama.cpp renormalises qwen3moe's top-k weights unless the file says otherwise
        norm_top_k: family == Family::Qwen3Moe
            && g.opt_bool(&key("expert_weights_norm"))?.unwrap_or(true),
    };
    cfg.validate()?;
    Ok(cfg)
}
