//! Load a model range from an export directory (FORMAT.md). Every tensor's dtype and shape is
//! checked against the manifest's configuration; a mismatch is an error naming the tensor.

use std::fs;
use std::path::Path;

use half::f16;
use safetensors::tensor::Dtype;
use safetensors::SafeTensors;

use super::config::{MlpKind, ModelConfig};
use super::export::{Manifest, FORMAT, VERSION};
use super::weights::*;
use crate::error::{Error, Result};
use crate::kernels::conv::ConvTaps;
use crate::kernels::int4::Int4Matrix;
use crate::kernels::int8::Int8Matrix;

/// `dir/manifest.json` parsed, after its `format` and `version` fields are checked against the
/// expected ones (an error naming the file otherwise).
pub(crate) fn read_manifest<T: serde::de::DeserializeOwned>(
    dir: &Path,
    format: &str,
    version: u32,
) -> Result<T> {
    let mp = dir.join("manifest.json");
    let text = fs::read_to_string(&mp).map_err(|e| Error::io(&mp, e))?;
    let bad = |e: String| Error::Weights(format!("{}: {e}", mp.display()));
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    if v["format"].as_str() != Some(format) || v["version"].as_u64() != Some(version as u64) {
        return Err(bad(format!(
            "format {} v{} is not {format} v{version}",
            v["format"], v["version"]
        )));
    }
    serde_json::from_value(v).map_err(|e| bad(e.to_string()))
}

/// Read and check `manifest.json`.
pub fn manifest(dir: &Path) -> Result<Manifest> {
    let m: Manifest = read_manifest(dir, FORMAT, VERSION)?;
    let mp = dir.join("manifest.json");
    m.config.validate()?;
    if m.layer_start >= m.layer_end
        || m.layer_end > m.config.n_layers
        || m.layers.len() != m.layer_end - m.layer_start
    {
        return Err(Error::Weights(format!(
            "{}: inconsistent layer range",
            mp.display()
        )));
    }
    Ok(m)
}

/// The embedding and the head of a whole-model export, without the layers between them.
pub fn load_ends(dir: &Path) -> Result<(EmbedWeights, HeadWeights)> {
    let m = manifest(dir)?;
    if m.layer_start != 0 || m.layer_end != m.config.n_layers {
        return Err(Error::Weights(format!(
            "{}: holds layers {}..{}; the embedding and head need the whole model",
            dir.display(),
            m.layer_start,
            m.layer_end
        )));
    }
    let first = load_range(dir, Some(0..1))?;
    let n = m.config.n_layers;
    let last = load_range(dir, Some(n - 1..n))?;
    match (first.embed, last.head) {
        (Some(e), Some(h)) => Ok((e, h)),
        _ => Err(Error::Weights(format!(
            "{}: no embedding or head",
            dir.display()
        ))),
    }
}

/// Load the whole export.
pub fn load(dir: &Path) -> Result<ModelWeights> {
    load_range(dir, None)
}

/// Load the layers `range` of an export (all of it for `None`): a role reads only its own layers.
pub fn load_range(dir: &Path, range: Option<std::ops::Range<usize>>) -> Result<ModelWeights> {
    let mut m = manifest(dir)?;
    if let Some(r) = range {
        if r.start < m.layer_start || r.end > m.layer_end || r.start >= r.end {
            return Err(Error::Weights(format!(
                "{}: layers {r:?} are not all in this export (it holds {}..{})",
                dir.display(),
                m.layer_start,
                m.layer_end
            )));
        }
        m.layers = m.layers[r.start - m.layer_start..r.end - m.layer_start].to_vec();
        m.layer_start = r.start;
        m.layer_end = r.end;
    }
    let st_path = dir.join("model.safetensors");
    let bytes = fs::read(&st_path).map_err(|e| Error::io(&st_path, e))?;
    let st = SafeTensors::deserialize(&bytes)
        .map_err(|e| Error::Weights(format!("{}: {e}", st_path.display())))?;
    let t = Tensors { st: &st };
    let c = &m.config;
    let embed = if m.layer_start == 0 {
        Some(EmbedWeights {
            embed: t.f16("embed.weight", &[c.vocab_padded, c.hidden])?,
            norm: t.f32("embed_norm.weight", &[c.hidden])?,
        })
    } else {
        None
    };
    let mut layers = Vec::new();
    for (i, e) in m.layers.iter().enumerate() {
        let l = m.layer_start + i;
        if e.index != l || e.attention != c.attention_kind(l) || e.mlp != c.mlp_kind(l) {
            return Err(Error::Weights(format!(
                "manifest entry {i} does not describe layer {l} of {}",
                c.name
            )));
        }
        layers.push(layer(&t, c, e, dir)?);
    }
    let head = if m.layer_end == c.n_layers {
        Some(HeadWeights {
            final_norm: t.f32("final_norm.weight", &[c.hidden])?,
            head: t.int8("head", c.vocab_padded, c.hidden)?,
        })
    } else {
        None
    };
    Ok(ModelWeights {
        config: c.clone(),
        seed: m.seed,
        layer_start: m.layer_start,
        layer_end: m.layer_end,
        embed,
        layers,
        head,
        checkpoint: None,
    })
}

fn layer(
    t: &Tensors<'_>,
    c: &ModelConfig,
    e: &super::export::LayerEntry,
    dir: &Path,
) -> Result<LayerWeights> {
    let l = e.index;
    let p = format!("layers.{l}");
    let n_kv = c.n_kv_heads(e.attention);
    let kvw = n_kv * c.head_dim;
    let extent = c.rel_extent(e.attention);
    let k = c.conv_kernel;
    let attn = AttentionWeights {
        kind: e.attention,
        q: t.int8(&format!("{p}.attn.q"), c.q_width(), c.hidden)?,
        k: t.int8(&format!("{p}.attn.k"), kvw, c.hidden)?,
        v: t.int8(&format!("{p}.attn.v"), kvw, c.hidden)?,
        r: t.int8(&format!("{p}.attn.r"), c.n_q_heads * c.d_rel, c.hidden)?,
        o: t.int8(&format!("{p}.attn.o"), c.hidden, c.q_width())?,
        q_norm: t.f32(&format!("{p}.attn.q_norm.weight"), &[c.head_dim])?,
        k_norm: t.f32(&format!("{p}.attn.k_norm.weight"), &[c.head_dim])?,
        rel_pos: t.f32(&format!("{p}.attn.rel_pos"), &[c.d_rel, extent])?,
        conv_k: ConvTaps::new(kvw, k, t.f32(&format!("{p}.attn.conv_k"), &[kvw, k])?),
        conv_v: ConvTaps::new(kvw, k, t.f32(&format!("{p}.attn.conv_v"), &[kvw, k])?),
    };
    let mlp = match e.mlp {
        MlpKind::Dense => MlpWeights::Dense(ExpertWeights {
            gate: t.int4(&format!("{p}.mlp.gate"), c.dense_width, c.hidden)?,
            up: t.int4(&format!("{p}.mlp.up"), c.dense_width, c.hidden)?,
            down: t.int4(&format!("{p}.mlp.down"), c.hidden, c.dense_width)?,
        }),
        MlpKind::Moe => {
            let n = c.n_experts_total();
            let rel = e
                .experts_file
                .as_ref()
                .ok_or_else(|| Error::Weights(format!("layer {l}: no experts_file")))?;
            MlpWeights::Moe {
                router: t.f32(&format!("{p}.router.weight"), &[n, c.hidden])?,
                bias: t.f32(&format!("{p}.router.bias"), &[c.n_routed])?,
                experts: experts(&dir.join(rel), n, c.hidden, c.expert_width)?,
            }
        }
    };
    Ok(LayerWeights {
        index: l,
        attn_norm: t.f32(&format!("{p}.attn_norm.weight"), &[c.hidden])?,
        attn,
        conv_attn_out: ConvTaps::new(
            c.hidden,
            k,
            t.f32(&format!("{p}.conv_attn_out"), &[c.hidden, k])?,
        ),
        mlp_norm: t.f32(&format!("{p}.mlp_norm.weight"), &[c.hidden])?,
        mlp,
        conv_mlp_out: ConvTaps::new(
            c.hidden,
            k,
            t.f32(&format!("{p}.conv_mlp_out"), &[c.hidden, k])?,
        ),
        global_scale: e.global_scale,
        attenuation_exp: e.attenuation_exp,
    })
}

/// Read an expert bin of n records.
fn experts(path: &Path, n: usize, hidden: usize, width: usize) -> Result<Vec<ExpertWeights>> {
    let blob = fs::read(path).map_err(|e| Error::io(path, e))?;
    let mat = hidden * width;
    let rec = 3 * (mat / 2 + 2 * mat / 32);
    if blob.len() != n * rec {
        return Err(Error::Weights(format!(
            "{}: {} bytes, expected {n} records of {rec}",
            path.display(),
            blob.len()
        )));
    }
    let take = |at: &mut usize, rows: usize, cols: usize| {
        let q = blob[*at..*at + rows * cols / 2].to_vec();
        *at += rows * cols / 2;
        let s = f16_vec(&blob[*at..*at + rows * cols / 16]);
        *at += rows * cols / 16;
        Int4Matrix::new(rows, cols, q, s)
    };
    let mut at = 0;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let gate = take(&mut at, width, hidden);
        let up = take(&mut at, width, hidden);
        let down = take(&mut at, hidden, width);
        out.push(ExpertWeights { gate, up, down });
    }
    Ok(out)
}

fn f16_vec(b: &[u8]) -> Vec<f16> {
    b.chunks_exact(2)
        .map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])))
        .collect()
}

pub(crate) struct Tensors<'a> {
    pub(crate) st: &'a SafeTensors<'a>,
}

impl Tensors<'_> {
    fn raw(&self, name: &str, dtype: Dtype, shape: &[usize]) -> Result<&[u8]> {
        let v = self
            .st
            .tensor(name)
            .map_err(|e| Error::Weights(format!("tensor {name}: {e}")))?;
        if v.dtype() != dtype || v.shape() != shape {
            return Err(Error::Weights(format!(
                "tensor {name}: {:?} {:?}, expected {dtype:?} {shape:?}",
                v.dtype(),
                v.shape()
            )));
        }
        Ok(v.data())
    }

    pub(crate) fn f32(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let b = self.raw(name, Dtype::F32, shape)?;
        Ok(b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    fn f16(&self, name: &str, shape: &[usize]) -> Result<Vec<f16>> {
        Ok(f16_vec(self.raw(name, Dtype::F16, shape)?))
    }

    fn int8(&self, name: &str, rows: usize, cols: usize) -> Result<Int8Matrix> {
        let q = self
            .raw(&format!("{name}.qweight"), Dtype::I8, &[rows, cols])?
            .iter()
            .map(|&b| b as i8)
            .collect();
        let s = self.f16(&format!("{name}.scale"), &[rows])?;
        Ok(Int8Matrix::new(rows, cols, q, s))
    }

    fn int4(&self, name: &str, rows: usize, cols: usize) -> Result<Int4Matrix> {
        let q = self
            .raw(&format!("{name}.qweight"), Dtype::U8, &[rows, cols / 2])?
            .to_vec();
        let s = self.f16(&format!("{name}.scale"), &[rows, cols / 32])?;
        Ok(Int4Matrix::new(rows, cols, q, s))
    }
}
