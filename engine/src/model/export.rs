//! `moefleet export`: write a model range as `manifest.json` + `model.safetensors` + expert bins
//! (FORMAT.md), so a real export can replace the synthetic weights and the float64 oracle can read
//! exactly what the engine runs.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use half::f16;
use safetensors::tensor::{Dtype, TensorView};
use serde::{Deserialize, Serialize};

use super::config::{AttentionKind, MlpKind, ModelConfig};
use super::weights::{ExpertWeights, MlpWeights, ModelWeights};
use crate::error::{Error, Result};
use crate::kernels::int4::Int4Matrix;
use crate::kernels::int8::Int8Matrix;

pub const FORMAT: &str = "moefleet-export";
pub const VERSION: u32 = 1;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub version: u32,
    pub seed: u64,
    pub config: ModelConfig,
    pub layer_start: usize,
    pub layer_end: usize,
    pub layers: Vec<LayerEntry>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LayerEntry {
    pub index: usize,
    pub attention: AttentionKind,
    pub mlp: MlpKind,
    pub global_scale: f32,
    pub attenuation_exp: i32,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub experts_file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub expert_record_bytes: Option<usize>,
}

/// Owned tensor bytes before serialisation.
pub(crate) struct Raw {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

pub(crate) fn f32s(v: &[f32], shape: Vec<usize>) -> Raw {
    Raw {
        dtype: Dtype::F32,
        shape,
        data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

fn f16s(v: &[f16], shape: Vec<usize>) -> Raw {
    Raw {
        dtype: Dtype::F16,
        shape,
        data: f16_bytes(v),
    }
}

pub(crate) fn f16_bytes(v: &[f16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect()
}

fn int8(t: &mut BTreeMap<String, Raw>, name: &str, m: &Int8Matrix) {
    let q = m.q.iter().map(|&v| v as u8).collect();
    t.insert(
        format!("{name}.qweight"),
        Raw {
            dtype: Dtype::I8,
            shape: vec![m.rows, m.cols],
            data: q,
        },
    );
    t.insert(format!("{name}.scale"), f16s(&m.scales, vec![m.rows]));
}

fn int4(t: &mut BTreeMap<String, Raw>, name: &str, m: &Int4Matrix) {
    let (q, scales) = m.row_major();
    t.insert(
        format!("{name}.qweight"),
        Raw {
            dtype: Dtype::U8,
            shape: vec![m.rows, m.cols / 2],
            data: q,
        },
    );
    t.insert(
        format!("{name}.scale"),
        f16s(&scales, vec![m.rows, m.cols / 32]),
    );
}

/// One expert record: `gate.q | gate.scale | up.q | up.scale | down.q | down.scale`.
pub(crate) fn expert_record(e: &ExpertWeights, out: &mut Vec<u8>) {
    for m in [&e.gate, &e.up, &e.down] {
        let (q, scales) = m.row_major();
        out.extend_from_slice(&q);
        out.extend_from_slice(&f16_bytes(&scales));
    }
}

/// Serialise named tensors to one safetensors file.
pub(crate) fn write_safetensors(t: &BTreeMap<String, Raw>, path: &Path) -> Result<()> {
    let views = t
        .iter()
        .map(|(k, r)| {
            TensorView::new(r.dtype, r.shape.clone(), &r.data)
                .map(|v| (k.clone(), v))
                .map_err(|e| Error::Weights(format!("{k}: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    safetensors::serialize_to_file(views, &None, path)
        .map_err(|e| Error::Weights(format!("{}: {e}", path.display())))
}

/// Write `w` to `dir` (created if missing).
pub fn export(w: &ModelWeights, dir: &Path) -> Result<Manifest> {
    let c = &w.config;
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |e| Error::io(p, e)
    };
    fs::create_dir_all(dir.join("experts")).map_err(io(dir))?;
    let mut t: BTreeMap<String, Raw> = BTreeMap::new();
    if let Some(e) = &w.embed {
        t.insert(
            "embed.weight".into(),
            f16s(&e.embed, vec![c.vocab_padded, c.hidden]),
        );
        t.insert("embed_norm.weight".into(), f32s(&e.norm, vec![c.hidden]));
    }
    let mut entries = Vec::new();
    for lw in &w.layers {
        let l = lw.index;
        let p = format!("layers.{l}");
        let a = &lw.attn;
        t.insert(
            format!("{p}.attn_norm.weight"),
            f32s(&lw.attn_norm, vec![c.hidden]),
        );
        for (n, m) in [
            ("q", &a.q),
            ("k", &a.k),
            ("v", &a.v),
            ("r", &a.r),
            ("o", &a.o),
        ] {
            int8(&mut t, &format!("{p}.attn.{n}"), m);
        }
        t.insert(
            format!("{p}.attn.q_norm.weight"),
            f32s(&a.q_norm, vec![c.head_dim]),
        );
        t.insert(
            format!("{p}.attn.k_norm.weight"),
            f32s(&a.k_norm, vec![c.head_dim]),
        );
        t.insert(
            format!("{p}.attn.rel_pos"),
            f32s(&a.rel_pos, vec![c.d_rel, a.rel_pos.len() / c.d_rel]),
        );
        for (n, taps) in [
            ("attn.conv_k", &a.conv_k),
            ("attn.conv_v", &a.conv_v),
            ("conv_attn_out", &lw.conv_attn_out),
            ("conv_mlp_out", &lw.conv_mlp_out),
        ] {
            t.insert(
                format!("{p}.{n}"),
                f32s(&taps.taps, vec![taps.channels, taps.k]),
            );
        }
        t.insert(
            format!("{p}.mlp_norm.weight"),
            f32s(&lw.mlp_norm, vec![c.hidden]),
        );
        let mut entry = LayerEntry {
            index: l,
            attention: a.kind,
            mlp: lw.mlp.kind(),
            global_scale: lw.global_scale,
            attenuation_exp: lw.attenuation_exp,
            experts_file: None,
            expert_record_bytes: None,
        };
        match &lw.mlp {
            MlpWeights::Dense(e) => {
                int4(&mut t, &format!("{p}.mlp.gate"), &e.gate);
                int4(&mut t, &format!("{p}.mlp.up"), &e.up);
                int4(&mut t, &format!("{p}.mlp.down"), &e.down);
            }
            MlpWeights::Moe {
                router,
                bias,
                experts,
            } => {
                t.insert(
                    format!("{p}.router.weight"),
                    f32s(router, vec![experts.len(), c.hidden]),
                );
                t.insert(format!("{p}.router.bias"), f32s(bias, vec![bias.len()]));
                let rel = format!("experts/layer_{l:02}.bin");
                let rec = experts[0].bytes();
                let mut blob = Vec::with_capacity(rec * experts.len());
                for e in experts {
                    expert_record(e, &mut blob);
                }
                let path = dir.join(&rel);
                fs::write(&path, &blob).map_err(io(&path))?;
                entry.experts_file = Some(rel);
                entry.expert_record_bytes = Some(rec);
            }
        }
        entries.push(entry);
    }
    if let Some(hw) = &w.head {
        t.insert(
            "final_norm.weight".into(),
            f32s(&hw.final_norm, vec![c.hidden]),
        );
        int8(&mut t, "head", &hw.head);
    }
    write_safetensors(&t, &dir.join("model.safetensors"))?;
    let manifest = Manifest {
        format: FORMAT.into(),
        version: VERSION,
        seed: w.seed,
        config: c.clone(),
        layer_start: w.layer_start,
        layer_end: w.layer_end,
        layers: entries,
    };
    let mp = dir.join("manifest.json");
    let json =
        serde_json::to_string_pretty(&manifest).map_err(|e| Error::Weights(e.to_string()))?;
    fs::write(&mp, json).map_err(io(&mp))?;
    Ok(manifest)
}
