//! A draft head on disk (FORMAT.md "Draft head exports"): `manifest.json` (configuration, seed,
//! form, each module's attention kind, and a free-form `provenance`: for a fitted head, the
//! training captures and the fit's parameters) and `mtp.safetensors` (every tensor f32, named
//! `mtp.K.<tensor>`). Loading checks every tensor's shape against the configuration.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use safetensors::SafeTensors;
use serde::{Deserialize, Serialize};

use super::weights::{ModuleWeights, MtpForm, MtpWeights};
use super::{mlp_width, module_kind};
use crate::error::{Error, Result};
use crate::kernels::conv::ConvTaps;
use crate::kernels::linear::Linear;
use crate::model::config::{AttentionKind, ModelConfig};
use crate::model::export::{f32s, write_safetensors, Raw};
use crate::model::load::{read_manifest, Tensors};

pub const FORMAT: &str = "moefleet-mtp";
pub const VERSION: u32 = 1;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MtpManifest {
    pub format: String,
    pub version: u32,
    pub seed: u64,
    pub form: MtpForm,
    pub config: ModelConfig,
    /// Attention kind of module k.
    pub modules: Vec<AttentionKind>,
    /// How the head was made (synthetic, or fitted: from which captures, with which parameters).
    pub provenance: serde_json::Value,
}

impl MtpManifest {
    /// How many of the first modules were fitted: `provenance.fitted_modules` (a control's fit
    /// stops short, `fit-draft --control-modules`), or every module for a head written before
    /// that was recorded.
    pub fn fitted_modules(&self) -> usize {
        self.provenance["fitted_modules"]
            .as_u64()
            .map_or(self.modules.len(), |n| (n as usize).min(self.modules.len()))
    }
}

/// Write `w` to `dir` (created if missing) with `provenance` in its manifest.
pub fn export(w: &MtpWeights, dir: &Path, provenance: serde_json::Value) -> Result<MtpManifest> {
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let mut t: BTreeMap<String, Raw> = BTreeMap::new();
    for (k, m) in w.modules.iter().enumerate() {
        let p = format!("mtp.{k}");
        let mut vec = |n: &str, v: &[f32]| {
            t.insert(format!("{p}.{n}"), f32s(v, vec![v.len()]));
        };
        vec("hidden_norm", &m.hidden_norm);
        vec("embed_norm", &m.embed_norm);
        vec("attn_norm", &m.attn_norm);
        vec("mlp_norm", &m.mlp_norm);
        vec("attn.q_norm", &m.q_norm);
        vec("attn.k_norm", &m.k_norm);
        let d_rel = w.config.d_rel;
        t.insert(
            format!("{p}.attn.rel_pos"),
            f32s(&m.rel_pos, vec![d_rel, w.config.rel_extent(m.kind)]),
        );
        for (n, l) in linears(m) {
            t.insert(format!("{p}.{n}"), f32s(&l.w, vec![l.rows, l.cols]));
        }
        for (n, c) in convs(m) {
            t.insert(format!("{p}.{n}"), f32s(&c.taps, vec![c.channels, c.k]));
        }
    }
    write_safetensors(&t, &dir.join("mtp.safetensors"))?;
    let manifest = MtpManifest {
        format: FORMAT.into(),
        version: VERSION,
        seed: w.seed,
        form: w.form,
        config: w.config.clone(),
        modules: w.modules.iter().map(|m| m.kind).collect(),
        provenance,
    };
    let mp = dir.join("manifest.json");
    let json =
        serde_json::to_string_pretty(&manifest).map_err(|e| Error::Weights(e.to_string()))?;
    fs::write(&mp, json + "\n").map_err(|e| Error::io(&mp, e))?;
    Ok(manifest)
}

fn linears(m: &ModuleWeights) -> [(&'static str, &Linear); 9] {
    [
        ("input_proj", &m.input_proj),
        ("attn.q", &m.q),
        ("attn.k", &m.k),
        ("attn.v", &m.v),
        ("attn.r", &m.r),
        ("attn.o", &m.o),
        ("mlp.gate", &m.gate),
        ("mlp.up", &m.up),
        ("mlp.down", &m.down),
    ]
}

fn convs(m: &ModuleWeights) -> [(&'static str, &ConvTaps); 4] {
    [
        ("attn.conv_k", &m.conv_k),
        ("attn.conv_v", &m.conv_v),
        ("conv_attn_out", &m.conv_attn_out),
        ("conv_mlp_out", &m.conv_mlp_out),
    ]
}

/// Read and check `manifest.json` of a draft head export.
pub fn manifest(dir: &Path) -> Result<MtpManifest> {
    let m: MtpManifest = read_manifest(dir, FORMAT, VERSION)?;
    let mp = dir.join("manifest.json");
    m.config.validate()?;
    let want: Vec<AttentionKind> = (0..m.config.n_mtp)
        .map(|k| module_kind(&m.config, k))
        .collect();
    if m.modules != want {
        return Err(Error::Weights(format!(
            "{}: modules {:?}, expected {want:?}",
            mp.display(),
            m.modules
        )));
    }
    Ok(m)
}

/// Load a draft head export.
pub fn load(dir: &Path) -> Result<(MtpWeights, MtpManifest)> {
    let man = manifest(dir)?;
    let path = dir.join("mtp.safetensors");
    let bytes = fs::read(&path).map_err(|e| Error::io(&path, e))?;
    let st = SafeTensors::deserialize(&bytes)
        .map_err(|e| Error::Weights(format!("{}: {e}", path.display())))?;
    let t = Tensors { st: &st };
    let c = &man.config;
    let (h, d) = (c.hidden, c.head_dim);
    let mut modules = Vec::with_capacity(c.n_mtp);
    for (k, &kind) in man.modules.iter().enumerate() {
        let p = format!("mtp.{k}");
        let kvw = c.n_kv_heads(kind) * d;
        let lin = |n: &str, rows: usize, cols: usize| -> Result<Linear> {
            Ok(Linear::new(
                rows,
                cols,
                t.f32(&format!("{p}.{n}"), &[rows, cols])?,
            ))
        };
        let vec = |n: &str, len: usize| t.f32(&format!("{p}.{n}"), &[len]);
        let conv = |n: &str, ch: usize| -> Result<ConvTaps> {
            let k = c.conv_kernel;
            Ok(ConvTaps::new(ch, k, t.f32(&format!("{p}.{n}"), &[ch, k])?))
        };
        modules.push(ModuleWeights {
            kind,
            hidden_norm: vec("hidden_norm", h)?,
            embed_norm: vec("embed_norm", h)?,
            input_proj: lin("input_proj", h, 2 * h)?,
            attn_norm: vec("attn_norm", h)?,
            q: lin("attn.q", c.q_width(), h)?,
            k: lin("attn.k", kvw, h)?,
            v: lin("attn.v", kvw, h)?,
            r: lin("attn.r", c.n_q_heads * c.d_rel, h)?,
            o: lin("attn.o", h, c.q_width())?,
            q_norm: vec("attn.q_norm", d)?,
            k_norm: vec("attn.k_norm", d)?,
            rel_pos: t.f32(&format!("{p}.attn.rel_pos"), &[c.d_rel, c.rel_extent(kind)])?,
            conv_k: conv("attn.conv_k", kvw)?,
            conv_v: conv("attn.conv_v", kvw)?,
            conv_attn_out: conv("conv_attn_out", h)?,
            mlp_norm: vec("mlp_norm", h)?,
            gate: lin("mlp.gate", mlp_width(c), h)?,
            up: lin("mlp.up", mlp_width(c), h)?,
            down: lin("mlp.down", h, mlp_width(c))?,
            conv_mlp_out: conv("conv_mlp_out", h)?,
        });
    }
    Ok((
        MtpWeights {
            config: c.clone(),
            seed: man.seed,
            form: man.form,
            modules,
        },
        man,
    ))
}
