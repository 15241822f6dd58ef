//! Build a layer range of a GGUF checkpoint: each tensor the architecture needs is found by its
//! llama.cpp name (`blk.N.attn_q.weight`, …), its format and shape checked against the
//! configuration, and kept as a view of the memory-mapped file (norms and biases, a few
//! kilobytes, are read into vectors); the matrices but the embedding are then copied into memory
//! of huge pages (`resident`). A missing tensor, a wrong shape or a format the kernels
//! cannot compute is an error naming the tensor.

use std::ops::Range;

use super::{CheckpointLayer, CheckpointMlp, CheckpointWeights};
use crate::error::{Error, Result};
use crate::gguf::{Gguf, TensorInfo};
use crate::kernels::blocks::{BlockFormat, BlockMatrix};
use crate::model::config::ModelConfig;
use crate::model::family::Family;
use crate::model::weights::ModelWeights;

/// The weights of `layers` (with the embedding when they start at 0, the head when they end at the
/// last layer).
pub fn load_range(g: &Gguf, c: &ModelConfig, layers: Range<usize>) -> Result<ModelWeights> {
    if layers.start >= layers.end || layers.end > c.n_layers {
        return Err(Error::Weights(format!(
            "{}: layers {layers:?} are not in 0..{}",
            g.path.display(),
            c.n_layers
        )));
    }
    let (h, d) = (c.hidden, c.head_dim);
    let embed = if layers.start == 0 {
        Some(matrix(g, "token_embd.weight", c.vocab_size, h)?)
    } else {
        None
    };
    let (final_norm, head) = if layers.end == c.n_layers {
        let head = if g.has_tensor("output.weight") {
            matrix(g, "output.weight", c.vocab_size, h)?
        } else {
            // tied: the embedding is the head
            matrix(g, "token_embd.weight", c.vocab_size, h)?
        };
        (Some(vector(g, "output_norm.weight", h)?), Some(head))
    } else {
        (None, None)
    };
    let mut out = Vec::with_capacity(layers.len());
    for i in layers.clone() {
        let t = |s: &str| format!("blk.{i}.{s}");
        let opt_vec = |s: &str, n: usize| -> Result<Option<Vec<f32>>> {
            if g.has_tensor(&t(s)) {
                vector(g, &t(s), n).map(Some)
            } else {
                Ok(None)
            }
        };
        let (qw, kvw) = (c.n_q_heads * d, c.n_kv_heads_global * d);
        let mlp = match c.family {
            Family::Qwen3Moe => {
                let router = matrix(g, &t("ffn_gate_inp.weight"), c.n_routed, h)?;
                let e = c.n_routed;
                let gate = experts(g, &t("ffn_gate_exps.weight"), e, c.expert_width, h)?;
                let up = experts(g, &t("ffn_up_exps.weight"), e, c.expert_width, h)?;
                let down = experts(g, &t("ffn_down_exps.weight"), e, h, c.expert_width)?;
                let experts = gate
                    .into_iter()
                    .zip(up)
                    .zip(down)
                    .map(|((g, u), d)| [g, u, d])
                    .collect();
                CheckpointMlp::Moe { router, experts }
            }
            _ => CheckpointMlp::Dense {
                gate: matrix(g, &t("ffn_gate.weight"), c.dense_width, h)?,
                up: matrix(g, &t("ffn_up.weight"), c.dense_width, h)?,
                down: matrix(g, &t("ffn_down.weight"), h, c.dense_width)?,
            },
        };
        out.push(CheckpointLayer {
            index: i,
            attn_norm: vector(g, &t("attn_norm.weight"), h)?,
            q: matrix(g, &t("attn_q.weight"), qw, h)?,
            k: matrix(g, &t("attn_k.weight"), kvw, h)?,
            v: matrix(g, &t("attn_v.weight"), kvw, h)?,
            o: matrix(g, &t("attn_output.weight"), h, qw)?,
            q_bias: opt_vec("attn_q.bias", qw)?,
            k_bias: opt_vec("attn_k.bias", kvw)?,
            v_bias: opt_vec("attn_v.bias", kvw)?,
            q_norm: if c.qk_norm {
                Some(vector(g, &t("attn_q_norm.weight"), d)?)
            } else {
                None
            },
            k_norm: if c.qk_norm {
                Some(vector(g, &t("attn_k_norm.weight"), d)?)
            } else {
                None
            },
            ffn_norm: vector(g, &t("ffn_norm.weight"), h)?,
            mlp,
        });
    }
    let mut weights = CheckpointWeights {
        embed,
        layers: out,
        final_norm,
        head,
    };
    super::resident::make_resident(&mut weights)?;
    Ok(ModelWeights {
        config: c.clone(),
        seed: 0,
        layer_start: layers.start,
        layer_end: layers.end,
        embed: None,
        layers: Vec::new(),
        head: None,
        checkpoint: Some(weights),
    })
}

fn shape_error(g: &Gguf, t: &TensorInfo, want: &str) -> Error {
    Error::Weights(format!(
        "{}: tensor {} has dims {:?}, expected {want}",
        g.path.display(),
        t.name,
        t.dims
    ))
}

/// A [rows, cols] matrix (ggml dims [cols, rows]).
fn matrix(g: &Gguf, name: &str, rows: usize, cols: usize) -> Result<BlockMatrix> {
    let t = g.tensor(name)?;
    if t.dims.len() != 2 || t.dims[0] as usize != cols || t.dims[1] as usize != rows {
        return Err(shape_error(g, t, &format!("[{cols}, {rows}]")));
    }
    BlockMatrix::new(t.format, rows, cols, g.bytes(t))
        .map_err(|e| Error::Weights(format!("{}: tensor {name}: {e}", g.path.display())))
}

/// The `n` matrices [rows, cols] of a stacked expert tensor (ggml dims [cols, rows, n]).
fn experts(g: &Gguf, name: &str, n: usize, rows: usize, cols: usize) -> Result<Vec<BlockMatrix>> {
    let t = g.tensor(name)?;
    let dims = [cols as u64, rows as u64, n as u64];
    if t.dims != dims {
        return Err(shape_error(g, t, &format!("{dims:?}")));
    }
    let all = g.bytes(t);
    let per = all.len() / n.max(1);
    (0..n)
        .map(|e| {
            let bytes = all.slice(e * per..(e + 1) * per).ok_or_else(|| {
                Error::Weights(format!(
                    "{}: tensor {name}: expert {e} out of range",
                    g.path.display()
                ))
            })?;
            BlockMatrix::new(t.format, rows, cols, bytes).map_err(|err| {
                Error::Weights(format!("{}: tensor {name}: {err}", g.path.display()))
            })
        })
        .collect()
}

/// A vector of `n` values (F32, F16 or BF16), copied out of the file.
fn vector(g: &Gguf, name: &str, n: usize) -> Result<Vec<f32>> {
    let t = g.tensor(name)?;
    if t.n_elements() != n as u64 || t.dims.len() != 1 {
        return Err(shape_error(g, t, &format!("[{n}]")));
    }
    let b = g.bytes(t);
    let half = |i: usize| u16::from_le_bytes([b[2 * i], b[2 * i + 1]]);
    Ok(match t.format {
        BlockFormat::F32 => b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        BlockFormat::F16 => (0..n)
            .map(|i| half::f16::from_bits(half(i)).to_f32())
            .collect(),
        BlockFormat::Bf16 => (0..n)
            .map(|i| half::bf16::from_bits(half(i)).to_f32())
            .collect(),
        other => {
            return Err(Error::Weights(format!(
                "{}: tensor {name} is {other}; a norm or bias must be F32, F16 or BF16",
                g.path.display()
            )))
        }
    })
}
