//! `ModelConfig`: what the weights fix. The four Inkling presets live here as data
//! (ARCHITECTURE.md §2). Nothing here knows about processes, ports or budgets; that is `RunConfig`.

use serde::{Deserialize, Serialize};

use super::family::{Family, Rope};
use crate::error::{Error, Result};

/// Real vocabulary of the project's tokenizer (`workloads/tokenizer.json`); the scaled presets use it.
pub const TOKENIZER_VOCAB: usize = 7070;

/// Shape and constants of one Inkling model. Field names are the glossary of `lib.rs`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    pub name: String,
    /// Residual width H.
    pub hidden: usize,
    pub n_layers: usize,
    pub n_q_heads: usize,
    pub head_dim: usize,
    pub n_kv_heads_global: usize,
    pub n_kv_heads_sliding: usize,
    /// Sliding attention window in positions.
    pub window: usize,
    pub rel_extent_global: usize,
    pub rel_extent_sliding: usize,
    /// Width of the relative-position features r (per query head).
    pub d_rel: usize,
    pub dense_width: usize,
    /// Layers `0..n_dense_layers` are dense SwiGLU; the rest are MoE.
    pub n_dense_layers: usize,
    pub n_routed: usize,
    pub top_k: usize,
    pub n_shared: usize,
    pub expert_width: usize,
    pub n_mtp: usize,
    /// Real vocabulary; logits are sliced to it.
    pub vocab_size: usize,
    /// Rows of the embedding and head (vocab_size rounded up to a multiple of 64).
    pub vocab_padded: usize,
    pub max_context: usize,
    pub rms_eps: f32,
    pub conv_kernel: usize,
    pub tau_alpha: f32,
    pub tau_floor: f32,
    pub route_scale: f32,
    pub mup_width_multiplier: f32,
    /// Layer l is global iff `l % global_every == global_offset`.
    pub global_every: usize,
    pub global_offset: usize,
    /// Sliding rings keep `window + rewind_slack` positions so speculation can rewind.
    pub rewind_slack: usize,
    /// What the layers are made of (`family`); Inkling unless a checkpoint says otherwise.
    #[serde(default)]
    pub family: Family,
    /// Checkpoint families: rotary embedding (Inkling has none).
    #[serde(default)]
    pub rope: Option<Rope>,
    /// Checkpoint families: per-head RMSNorm of q and k (qwen3); Inkling always has it.
    #[serde(default)]
    pub qk_norm: bool,
    /// Checkpoint families (qwen3moe): routed weights renormalised to sum to one after top-k.
    #[serde(default)]
    pub norm_top_k: bool,
}

/// Attention kind of a layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttentionKind {
    Global,
    Sliding,
}

/// Feed-forward kind of a layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MlpKind {
    Dense,
    Moe,
}

/// Which of the two equivalent dense forms runs (ARCHITECTURE.md §1.6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum DenseForm {
    /// Gate, up and down as three compressed matrix calls.
    #[default]
    ThreeMatmul,
    /// Eight all-active expert-width slices through the fused expert path.
    FusedSlices,
}

/// How attention over the caches runs (both compute the same function; MEASUREMENTS.md §3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum AttentionMode {
    /// The paper's loop: a frame's rows one after another, query heads one after another, a
    /// two-pass softmax per head, on the calling thread.
    Serial,
    /// Query heads grouped by KV head and keys split into blocks of `KEY_BLOCK` positions, on all
    /// cores; each block's softmax statistics merge in position order (bits independent of
    /// threads and batching).
    #[default]
    Parallel,
}

/// Which kernels compute a layer's products (the host always routes, attends and normalises).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum BackendKind {
    /// The engine's own INT4/INT8 kernels.
    #[default]
    Native,
    /// Graphs the engine builds and OpenVINO compiles: the expert path, dense blocks, attention
    /// projections and head (docs/FORMAT.md "OpenVINO graphs").
    Openvino,
}

/// OpenVINO device (only CPU is tested: this host has no usable GPU or NPU).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum Device {
    #[default]
    #[value(name = "CPU")]
    #[serde(rename = "CPU")]
    Cpu,
    #[value(name = "GPU")]
    #[serde(rename = "GPU")]
    Gpu,
    #[value(name = "NPU")]
    #[serde(rename = "NPU")]
    Npu,
    #[value(name = "AUTO")]
    #[serde(rename = "AUTO")]
    Auto,
}

impl Device {
    pub fn name(self) -> &'static str {
        match self {
            Device::Cpu => "CPU",
            Device::Gpu => "GPU",
            Device::Npu => "NPU",
            Device::Auto => "AUTO",
        }
    }
}

/// OpenVINO's inference precision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum OvPrecision {
    /// f32 arithmetic and no dynamic quantisation of activations (parity mode).
    #[default]
    F32,
    /// Whatever the device picks by default (the CPU plugin: bf16 where the CPU has it, and
    /// dynamic quantisation of activations in groups of 32); the resolved values are recorded.
    DeviceDefault,
}

/// The backend choice of a run: kind, and for OpenVINO the device and precision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backend {
    pub kind: BackendKind,
    pub device: Device,
    pub precision: OvPrecision,
    /// OpenVINO's per-node profile on (which operations ran, and how), for reports; it adds a
    /// little time to every call, so timed runs leave it off.
    #[serde(default)]
    pub profile: bool,
}

impl Backend {
    /// OpenVINO on the CPU in f32 (the parity mode), unprofiled: what the experiments time.
    pub fn openvino_f32() -> Backend {
        Backend {
            kind: BackendKind::Openvino,
            device: Device::Cpu,
            precision: OvPrecision::F32,
            profile: false,
        }
    }
}

pub const PRESET_NAMES: [&str; 4] = ["inkling", "inkling-small", "inkling-mini", "inkling-nano"];

fn pad64(v: usize) -> usize {
    v.div_ceil(64) * 64
}

impl ModelConfig {
    /// One of the four presets by name.
    pub fn preset(name: &str) -> Result<Self> {
        #[allow(clippy::type_complexity)]
        let (hidden, n_layers, nq, d, kvg, kvs, window, eg, es, dense, experts, mtp, vocab): (
            usize,
            usize,
            usize,
            usize,
            usize,
            usize,
            usize,
            usize,
            usize,
            usize,
            (usize, usize, usize, usize),
            usize,
            (usize, usize),
        ) = match name {
            "inkling" => (
                6144,
                66,
                64,
                128,
                8,
                16,
                512,
                1024,
                512,
                24576,
                (256, 6, 2, 3072),
                8,
                (200_058, 201_024),
            ),
            "inkling-small" => (
                4096,
                42,
                32,
                128,
                8,
                8,
                512,
                1024,
                512,
                16384,
                (256, 6, 2, 2048),
                8,
                (200_058, 201_024),
            ),
            "inkling-mini" => (
                256,
                66,
                8,
                32,
                1,
                2,
                512,
                1024,
                512,
                1024,
                (256, 6, 2, 128),
                8,
                (TOKENIZER_VOCAB, pad64(TOKENIZER_VOCAB)),
            ),
            "inkling-nano" => (
                64,
                12,
                4,
                16,
                1,
                2,
                64,
                128,
                64,
                256,
                (16, 2, 1, 32),
                2,
                (TOKENIZER_VOCAB, pad64(TOKENIZER_VOCAB)),
            ),
            other => {
                return Err(Error::Config(format!(
                    "unknown preset '{other}' (known: {})",
                    PRESET_NAMES.join(", ")
                )))
            }
        };
        let (n_routed, top_k, n_shared, expert_width) = experts;
        let cfg = ModelConfig {
            name: name.to_string(),
            hidden,
            n_layers,
            n_q_heads: nq,
            head_dim: d,
            n_kv_heads_global: kvg,
            n_kv_heads_sliding: kvs,
            window,
            rel_extent_global: eg,
            rel_extent_sliding: es,
            d_rel: if hidden >= 256 { 16 } else { 8 },
            dense_width: dense,
            n_dense_layers: 2,
            n_routed,
            top_k,
            n_shared,
            expert_width,
            n_mtp: mtp,
            vocab_size: vocab.0,
            vocab_padded: vocab.1,
            max_context: 1 << 20,
            rms_eps: 1e-5,
            conv_kernel: 4,
            tau_alpha: 0.1,
            tau_floor: 1024.0,
            route_scale: 1.0,
            mup_width_multiplier: 1.0,
            global_every: 6,
            global_offset: 5,
            rewind_slack: 64,
            family: Family::Inkling,
            rope: None,
            qk_norm: true,
            norm_top_k: false,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Structural checks every kernel relies on.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(Error::Config(format!("{}: {m}", self.name)));
        if self.family.is_checkpoint() {
            return self.validate_checkpoint();
        }
        if !self.hidden.is_multiple_of(32)
            || !self.expert_width.is_multiple_of(32)
            || !self.dense_width.is_multiple_of(32)
        {
            return bad("hidden, expert_width and dense_width must be multiples of 32");
        }
        if !self.n_q_heads.is_multiple_of(self.n_kv_heads_global)
            || !self.n_q_heads.is_multiple_of(self.n_kv_heads_sliding)
        {
            return bad("n_q_heads must be a multiple of both KV head counts");
        }
        if !(self.n_q_heads * self.head_dim).is_multiple_of(32) {
            return bad("n_q_heads * head_dim must be a multiple of 32");
        }
        if self.dense_width != 8 * self.expert_width {
            return bad("dense_width must be 8 x expert_width (dense-as-slices)");
        }
        if self.top_k == 0 || self.top_k > self.n_routed {
            return bad("top_k must be in 1..=n_routed");
        }
        if self.vocab_padded < self.vocab_size || !self.vocab_padded.is_multiple_of(64) {
            return bad("vocab_padded must be a multiple of 64 and at least vocab_size");
        }
        if self.global_offset >= self.global_every || self.n_dense_layers > self.n_layers {
            return bad("inconsistent layer pattern");
        }
        if self.conv_kernel == 0 {
            return bad("conv_kernel must be positive");
        }
        Ok(())
    }

    /// The checks of a checkpoint's shapes (its tensors are checked against them at load).
    fn validate_checkpoint(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(format!("{}: {m}", self.name)));
        if self.hidden == 0 || self.n_layers == 0 || self.n_q_heads == 0 || self.head_dim == 0 {
            return bad("hidden, layers, heads and head width must be positive".into());
        }
        if self.n_kv_heads_global == 0 || !self.n_q_heads.is_multiple_of(self.n_kv_heads_global) {
            return bad(format!(
                "{} query heads are not a multiple of {} KV heads",
                self.n_q_heads, self.n_kv_heads_global
            ));
        }
        if let Some(r) = self.rope {
            if r.dims == 0 || r.dims > self.head_dim || !r.dims.is_multiple_of(2) {
                return bad(format!(
                    "rotary dimensions {} do not fit head width {}",
                    r.dims, self.head_dim
                ));
            }
        }
        if self.n_routed > 0 && (self.top_k == 0 || self.top_k > self.n_routed) {
            return bad(format!(
                "top_k {} must be in 1..={}",
                self.top_k, self.n_routed
            ));
        }
        if self.vocab_size == 0 || self.vocab_padded != self.vocab_size {
            return bad("the vocabulary must be positive and unpadded".into());
        }
        Ok(())
    }

    pub fn attention_kind(&self, layer: usize) -> AttentionKind {
        if layer % self.global_every == self.global_offset {
            AttentionKind::Global
        } else {
            AttentionKind::Sliding
        }
    }

    pub fn mlp_kind(&self, layer: usize) -> MlpKind {
        if layer < self.n_dense_layers {
            MlpKind::Dense
        } else {
            MlpKind::Moe
        }
    }

    /// Layers whose MLP is a MoE (`mlp_kind`).
    pub fn moe_layers(&self) -> usize {
        (0..self.n_layers)
            .filter(|&l| self.mlp_kind(l) == MlpKind::Moe)
            .count()
    }

    pub fn n_kv_heads(&self, kind: AttentionKind) -> usize {
        match kind {
            AttentionKind::Global => self.n_kv_heads_global,
            AttentionKind::Sliding => self.n_kv_heads_sliding,
        }
    }

    pub fn rel_extent(&self, kind: AttentionKind) -> usize {
        match kind {
            AttentionKind::Global => self.rel_extent_global,
            AttentionKind::Sliding => self.rel_extent_sliding,
        }
    }

    /// Experts per MoE layer including the shared ones (ids `n_routed..`).
    pub fn n_experts_total(&self) -> usize {
        self.n_routed + self.n_shared
    }

    /// (expert id, weight) pairs every MoE row carries.
    pub fn selections_per_row(&self) -> usize {
        self.top_k + self.n_shared
    }

    pub fn q_width(&self) -> usize {
        self.n_q_heads * self.head_dim
    }

    /// Number of roles the model splits into by default: six-layer roles (Inkling's one global
    /// layer per role; a checkpoint's layers in sixes, the last role taking what is left).
    pub fn n_roles(&self) -> usize {
        if self.family.is_checkpoint() {
            return self.n_layers.div_ceil(6);
        }
        self.n_layers.div_ceil(self.global_every)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_validate_and_keep_structure() {
        for name in PRESET_NAMES {
            let c = ModelConfig::preset(name).unwrap();
            assert_eq!(c.n_layers % 6, 0, "{name}");
            // one global layer per six-layer role
            let globals = (0..c.n_layers)
                .filter(|&l| c.attention_kind(l) == AttentionKind::Global)
                .count();
            assert_eq!(globals, c.n_roles(), "{name}");
            assert_eq!(c.dense_width, 8 * c.expert_width);
        }
        assert_eq!(ModelConfig::preset("inkling").unwrap().n_roles(), 11);
        assert_eq!(ModelConfig::preset("inkling-nano").unwrap().n_roles(), 2);
    }

    #[test]
    fn unknown_preset_is_a_clear_error() {
        let e = ModelConfig::preset("inkling-huge").unwrap_err().to_string();
        assert!(
            e.contains("unknown preset") && e.contains("inkling-mini"),
            "{e}"
        );
    }
}
