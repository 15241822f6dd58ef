//! Weights of the draft head's eight modules (ARCHITECTURE.md §1.7), all f32 in memory: the
//! "original" form as generated or fitted, and the deployment grids (INT8 per output row for the
//! attention projections and the input projection, INT4 group-32 for the MLP matrices) rounded and
//! dequantised back to f32, so both forms run the same f32 arithmetic.

use serde::{Deserialize, Serialize};

use super::{mlp_width, module_kind};
use crate::error::{Error, Result};
use crate::kernels::conv::ConvTaps;
use crate::kernels::linear::Linear;
use crate::model::config::{AttentionKind, ModelConfig};
use crate::rng::Rng;

/// Which numbers a head holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MtpForm {
    /// f32 weights as generated or fitted.
    Original,
    /// The original rounded to the deployment grids (`MtpWeights::to_grids`).
    Grids,
}

/// One module: `h = Block(input_proj([hidden_norm(prev); embed_norm(e)]))`, Block a decoder layer
/// of the model's kind with its own attention and a dense SwiGLU MLP (`mlp_width`). A checkpoint's
/// module leaves `r`, `rel_pos` and the convolutions empty or zero, and uses `q_norm`/`k_norm`
/// only where the model has them.
#[derive(Clone, Debug, PartialEq)]
pub struct ModuleWeights {
    pub kind: AttentionKind,
    /// [H]
    pub hidden_norm: Vec<f32>,
    /// [H]
    pub embed_norm: Vec<f32>,
    /// [H, 2H]: columns 0..H take the normalised prev, H..2H the normalised embedding.
    pub input_proj: Linear,
    /// [H]
    pub attn_norm: Vec<f32>,
    /// [n_q·D, H]
    pub q: Linear,
    /// [n_kv·D, H]
    pub k: Linear,
    /// [n_kv·D, H]
    pub v: Linear,
    /// [n_q·d_rel, H]
    pub r: Linear,
    /// [H, n_q·D]
    pub o: Linear,
    /// [D]
    pub q_norm: Vec<f32>,
    /// [D]
    pub k_norm: Vec<f32>,
    /// [d_rel, extent]
    pub rel_pos: Vec<f32>,
    pub conv_k: ConvTaps,
    pub conv_v: ConvTaps,
    pub conv_attn_out: ConvTaps,
    /// [H]
    pub mlp_norm: Vec<f32>,
    /// [w_e, H]
    pub gate: Linear,
    /// [w_e, H]
    pub up: Linear,
    /// [H, w_e]
    pub down: Linear,
    pub conv_mlp_out: ConvTaps,
}

/// The whole head.
#[derive(Clone, Debug, PartialEq)]
pub struct MtpWeights {
    pub config: ModelConfig,
    pub seed: u64,
    pub form: MtpForm,
    pub modules: Vec<ModuleWeights>,
}

/// RMS each branch adds to the block's residual, as in the main model's synthetic weights.
const BRANCH_GAIN: f32 = 0.3;

impl MtpWeights {
    /// Synthetic (untrained) weights of every module, generated from `(seed, module, tensor)`.
    pub fn synthetic(c: &ModelConfig, seed: u64) -> Result<Self> {
        c.validate()?;
        if c.n_mtp == 0 {
            return Err(Error::Config(format!("{} has no draft modules", c.name)));
        }
        Ok(MtpWeights {
            config: c.clone(),
            seed,
            form: MtpForm::Original,
            modules: (0..c.n_mtp).map(|k| synth_module(c, seed, k)).collect(),
        })
    }

    /// The same head on the deployment grids: INT8 per output row for the input projection and
    /// the attention projections, INT4 group-32 for gate, up and down; everything else unchanged.
    pub fn to_grids(&self) -> MtpWeights {
        let modules = self
            .modules
            .iter()
            .map(|m| ModuleWeights {
                input_proj: m.input_proj.int8_grid(),
                q: m.q.int8_grid(),
                k: m.k.int8_grid(),
                v: m.v.int8_grid(),
                r: m.r.int8_grid(),
                o: m.o.int8_grid(),
                gate: m.gate.int4_grid(),
                up: m.up.int4_grid(),
                down: m.down.int4_grid(),
                ..m.clone()
            })
            .collect();
        MtpWeights {
            form: MtpForm::Grids,
            modules,
            ..self.clone()
        }
    }
}

fn synth_module(c: &ModelConfig, seed: u64, k: usize) -> ModuleWeights {
    let kind = module_kind(c, k);
    let h = c.hidden;
    let kvw = c.n_kv_heads(kind) * c.head_dim;
    let qw = c.q_width();
    let we = mlp_width(c);
    let name = |t: &str| format!("mtp.{t}");
    // uniform in [−a, a) has variance a²/3: a = gain · sqrt(3 / fan_in) gives outputs of RMS ≈ gain
    let lin = |t: &str, rows: usize, cols: usize, gain: f32| {
        let mut w = vec![0.0; rows * cols];
        Rng::for_tensor(seed, k, &name(t), 0).fill_sym(&mut w, gain * (3.0 / cols as f32).sqrt());
        Linear::new(rows, cols, w)
    };
    let norm = |t: &str, n: usize| {
        let mut rng = Rng::for_tensor(seed, k, &name(t), 0);
        (0..n).map(|_| 1.0 + 0.1 * rng.sym()).collect::<Vec<f32>>()
    };
    // a checkpoint's block has no convolutions: its taps stay zero and are never applied
    let conv = |t: &str, ch: usize| {
        let mut w = vec![0.0; ch * c.conv_kernel];
        if !c.family.is_checkpoint() {
            Rng::for_tensor(seed, k, &name(t), 0).fill_sym(&mut w, 0.1);
        }
        ConvTaps::new(ch, c.conv_kernel, w)
    };
    let extent = c.rel_extent(kind);
    let mut rel_pos = vec![0.0; c.d_rel * extent];
    Rng::for_tensor(seed, k, &name("attn.rel_pos"), 0)
        .fill_sym(&mut rel_pos, (3.0 / c.d_rel as f32).sqrt());
    ModuleWeights {
        kind,
        hidden_norm: norm("hidden_norm", h),
        embed_norm: norm("embed_norm", h),
        // two unit-RMS halves: 1/sqrt(2) keeps u at unit RMS
        input_proj: lin("input_proj", h, 2 * h, std::f32::consts::FRAC_1_SQRT_2),
        attn_norm: norm("attn_norm", h),
        q: lin("attn.q", qw, h, 1.0),
        k: lin("attn.k", kvw, h, 1.0),
        v: lin("attn.v", kvw, h, 1.0),
        r: lin("attn.r", c.n_q_heads * c.d_rel, h, 1.0),
        o: lin("attn.o", h, qw, 2.0 * BRANCH_GAIN),
        q_norm: norm("attn.q_norm", c.head_dim),
        k_norm: norm("attn.k_norm", c.head_dim),
        rel_pos,
        conv_k: conv("attn.conv_k", kvw),
        conv_v: conv("attn.conv_v", kvw),
        conv_attn_out: conv("conv_attn_out", h),
        mlp_norm: norm("mlp_norm", h),
        gate: lin("mlp.gate", we, h, 1.0),
        up: lin("mlp.up", we, h, 1.0),
        down: lin("mlp.down", h, we, 2.0 * BRANCH_GAIN),
        conv_mlp_out: conv("conv_mlp_out", h),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_heads_are_deterministic_and_grids_change_only_the_matrices() {
        let c = ModelConfig::preset("inkling-nano").unwrap();
        let a = MtpWeights::synthetic(&c, 7).unwrap();
        assert_eq!(a, MtpWeights::synthetic(&c, 7).unwrap());
        assert_ne!(a, MtpWeights::synthetic(&c, 8).unwrap());
        assert_eq!(a.modules.len(), c.n_mtp);
        let g = a.to_grids();
        assert_eq!(g.form, MtpForm::Grids);
        let (m, n) = (&a.modules[1], &g.modules[1]);
        assert_eq!(
            (m.kind, n.kind),
            (AttentionKind::Global, AttentionKind::Global)
        );
        assert_ne!(m.input_proj, n.input_proj);
        assert_ne!(m.down, n.down);
        assert_eq!((&m.rel_pos, &m.hidden_norm), (&n.rel_pos, &n.hidden_norm));
        assert_eq!(n.input_proj, n.input_proj.int8_grid());
    }
}
