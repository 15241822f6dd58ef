//! A model range's compiled OpenVINO graphs, one set per layer (compiled once; rows are a dynamic
//! dimension, so the same programs serve decode rows and prefill windows), as the model's backend
//! (`model::backend::Backend`: the calls the forward pass makes into them). Routing, the row factor F_i and the restoration by A_l · F_i stay
//! on the host as in the native path (ARCHITECTURE.md §1.5): the graphs get `w / F_i` and return
//! `Σ (w / F_i) · E(x)`; the host multiplies by `A_l · F_i`.

use super::graphs;
use super::{GraphReport, Input, Program, Runtime};
use crate::error::{Error, Result};
use crate::model::attention::Projections;
use crate::model::backend::Backend as LayerBackend;
use crate::model::config::{Backend, DenseForm, ModelConfig};
use crate::model::mlp::{self, row_factor, Selected};
use crate::model::options::ForwardOptions;
use crate::model::weights::{
    AttentionWeights, HeadWeights, LayerWeights, MlpWeights, ModelWeights,
};

/// A layer's feed-forward graphs.
enum Mlp {
    /// Dense SwiGLU as three compressed products.
    Three(Program),
    /// Dense SwiGLU as eight all-active slices through the MoE form.
    Slices(Program),
    /// MoE: the instantiated experts' graph; `local[id]` is an expert's place in it.
    Moe {
        program: Program,
        local: Vec<Option<i32>>,
    },
}

/// One layer's feed-forward on OpenVINO, usable alone (the dense experiment builds both forms).
pub struct OvMlp(Mlp);

impl OvMlp {
    /// Compile layer `lw`'s feed-forward graph (`dense_form` for a dense layer).
    pub fn build(
        runtime: &Runtime,
        c: &ModelConfig,
        lw: &LayerWeights,
        dense_form: DenseForm,
    ) -> Result<OvMlp> {
        let l = lw.index;
        Ok(OvMlp(match (&lw.mlp, dense_form) {
            (MlpWeights::Dense(e), DenseForm::ThreeMatmul) => Mlp::Three(runtime.compile(
                &graphs::three_matmul(&[e.gate.view(), e.up.view(), e.down.view()]),
                &format!("layer{l}.dense3"),
            )?),
            (MlpWeights::Dense(e), DenseForm::FusedSlices) => {
                let slices = e.slices(8);
                Mlp::Slices(
                    runtime.compile(&graphs::moe(&slices, 8), &format!("layer{l}.dense-slices"))?,
                )
            }
            (MlpWeights::Moe { experts, .. }, _) => {
                let mut local = vec![None; experts.len()];
                let mut views = Vec::new();
                for (id, e) in experts.iter().enumerate() {
                    if e.gate.rows > 0 {
                        local[id] = Some(views.len() as i32);
                        views.push([e.gate.view(), e.up.view(), e.down.view()]);
                    }
                }
                if views.is_empty() {
                    return Err(Error::Config(format!("layer {l} has no experts")));
                }
                let program = runtime.compile(
                    &graphs::moe(&views, c.top_k + c.n_shared),
                    &format!("layer{l}.moe"),
                )?;
                Mlp::Moe { program, local }
            }
        }))
    }

    /// The compiled graph.
    pub fn program(&self) -> &Program {
        match &self.0 {
            Mlp::Three(p) | Mlp::Slices(p) | Mlp::Moe { program: p, .. } => p,
        }
    }

    /// `y = MLP(xn)` as the native `mlp::forward` computes it, products on OpenVINO (f32
    /// throughout: the native path's f16 rounding points are not reproduced, FORMAT.md).
    pub fn run(
        &self,
        c: &ModelConfig,
        w: &LayerWeights,
        row_factor_on: bool,
        xn: &[f32],
        y: &mut [f32],
    ) -> Result<()> {
        let h = c.hidden;
        let n = xn.len() / h;
        let a_l = w.attenuation();
        match (&self.0, &w.mlp) {
            (Mlp::Three(p), _) => {
                let out = p.run(&[Input::F32(xn, &[n, h])], 1)?;
                copy_checked(y, &out[0])?;
                let s = w.global_scale * a_l;
                y.iter_mut().for_each(|v| *v *= s);
                Ok(())
            }
            (Mlp::Slices(p), _) => {
                let sel: Vec<Selected> = (0..n)
                    .map(|_| ((0..8).collect(), vec![w.global_scale; 8]))
                    .collect();
                run_moe(p, &sel, |id| Some(id as i32), xn, h, a_l, row_factor_on, y)
            }
            (Mlp::Moe { program, local }, MlpWeights::Moe { router, bias, .. }) => {
                let sel = mlp::routes(c, w.global_scale, router, bias, xn);
                let at = |id: usize| local.get(id).copied().flatten();
                run_moe(program, &sel, at, xn, h, a_l, row_factor_on, y)
            }
            (Mlp::Moe { .. }, MlpWeights::Dense(_)) => Err(Error::State(format!(
                "layer {}: MoE graphs for a dense layer",
                w.index
            ))),
        }
    }
}

struct Layer {
    qkvr: Program,
    o: Program,
    mlp: OvMlp,
}

pub struct OvModel {
    /// The model's width (the rows of an input are its length over this).
    hidden: usize,
    layers: Vec<Layer>,
    head: Option<Program>,
    /// Declared last: dropped after the programs compiled on it.
    pub runtime: Runtime,
}

impl OvModel {
    /// Build and compile every graph of `w`'s layers (the dense form chosen by `dense_form`).
    pub fn build(
        w: &ModelWeights,
        backend: Backend,
        dense_form: DenseForm,
        profiling: bool,
    ) -> Result<OvModel> {
        let runtime = Runtime::new(backend, profiling)?;
        let c = &w.config;
        let mut layers = Vec::with_capacity(w.layers.len());
        for lw in &w.layers {
            let l = lw.index;
            let a = &lw.attn;
            let qkvr = runtime.compile(
                &graphs::int8_products(&[&a.q, &a.k, &a.v, &a.r]),
                &format!("layer{l}.qkvr"),
            )?;
            let o = runtime.compile(&graphs::int8_products(&[&a.o]), &format!("layer{l}.o"))?;
            let mlp = OvMlp::build(&runtime, c, lw, dense_form)?;
            layers.push(Layer { qkvr, o, mlp });
        }
        let head = match &w.head {
            Some(hw) => Some(runtime.compile(&graphs::int8_products(&[&hw.head]), "head")?),
            None => None,
        };
        Ok(OvModel {
            hidden: c.hidden,
            layers,
            head,
            runtime,
        })
    }

    fn layer(&self, slot: usize) -> Result<&Layer> {
        self.layers
            .get(slot)
            .ok_or_else(|| Error::State(format!("no OpenVINO graphs for layer slot {slot}")))
    }

    /// What OpenVINO executed for each graph of the first layer of each kind and the head (after
    /// at least one forward; profiling runtimes only).
    pub fn report(&self) -> Result<Vec<GraphReport>> {
        let mut out = Vec::new();
        let mut seen = (false, false);
        for l in &self.layers {
            let is_moe = matches!(l.mlp.0, Mlp::Moe { .. });
            if (is_moe && seen.1) || (!is_moe && seen.0) {
                continue;
            }
            if is_moe {
                seen.1 = true
            } else {
                seen.0 = true
            }
            out.push(GraphReport::of(&l.qkvr)?);
            out.push(GraphReport::of(&l.o)?);
            out.push(GraphReport::of(l.mlp.program())?);
        }
        if let Some(h) = &self.head {
            out.push(GraphReport::of(h)?);
        }
        Ok(out)
    }
}

/// The graphs as the model's backend.
impl LayerBackend for OvModel {
    /// q, k, v, r of every row of xn ([n, H]).
    fn project(
        &self,
        slot: usize,
        _: &AttentionWeights,
        xn: &[f32],
        p: &mut Projections,
    ) -> Result<()> {
        let h = self.hidden;
        let n = xn.len() / h;
        let out = self.layer(slot)?.qkvr.run(&[Input::F32(xn, &[n, h])], 4)?;
        for (dst, src) in [&mut p.q, &mut p.k, &mut p.v, &mut p.r]
            .into_iter()
            .zip(out)
        {
            copy_checked(dst, &src)?;
        }
        Ok(())
    }

    /// `out = W_o · heads` ([n, n_q·D] → [n, H]).
    fn output(
        &self,
        slot: usize,
        _: &AttentionWeights,
        heads: &[f32],
        n: usize,
        out: &mut [f32],
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let y = self
            .layer(slot)?
            .o
            .run(&[Input::F32(heads, &[n, heads.len() / n])], 1)?;
        copy_checked(out, &y[0])
    }

    /// `y = MLP(xn)` of the layer in `slot` (`OvMlp::run`).
    fn mlp(
        &self,
        slot: usize,
        c: &ModelConfig,
        w: &LayerWeights,
        opts: &ForwardOptions,
        xn: &[f32],
        y: &mut [f32],
    ) -> Result<()> {
        self.layer(slot)?.mlp.run(c, w, opts.row_factor, xn, y)
    }

    /// Logits [n, vocab_padded] of already normalised and scaled rows.
    fn head(&self, _: &ModelConfig, _: &HeadWeights, xn: &[f32]) -> Result<Vec<f32>> {
        let p = self
            .head
            .as_ref()
            .ok_or_else(|| Error::Config("this model range has no head".into()))?;
        let h = self.hidden;
        let mut out = p.run(&[Input::F32(xn, &[xn.len() / h, h])], 1)?;
        Ok(out.swap_remove(0))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The OpenVINO graphs behind a model's backend (`Model::backend`), when OpenVINO is the backend.
pub fn of(backend: &dyn LayerBackend) -> Option<&OvModel> {
    backend.as_any().downcast_ref::<OvModel>()
}

/// Run an MoE-form program over routed rows and restore `A_l · F_i` on the host.
#[allow(clippy::too_many_arguments)]
fn run_moe(
    p: &Program,
    sel: &[Selected],
    at: impl Fn(usize) -> Option<i32>,
    xn: &[f32],
    h: usize,
    a_l: f32,
    row_factor_on: bool,
    y: &mut [f32],
) -> Result<()> {
    let n = sel.len();
    let k = sel.first().map_or(0, |s| s.0.len());
    let mut ids = Vec::with_capacity(n * k);
    let mut ws = Vec::with_capacity(n * k);
    let mut factors = Vec::with_capacity(n);
    for (eids, weights) in sel {
        let f = if row_factor_on {
            row_factor(weights)
        } else {
            1.0
        };
        factors.push(f);
        for (&e, &wk) in eids.iter().zip(weights) {
            ids.push(at(e).ok_or_else(|| {
                Error::Weights(format!(
                    "expert {e} is not instantiated (OpenVINO graphs hold only instantiated experts)"
                ))
            })?);
            ws.push(wk / f);
        }
    }
    let out = p.run(
        &[
            Input::F32(xn, &[n, h]),
            Input::I32(&ids, &[n, k]),
            Input::F32(&ws, &[n, k]),
        ],
        1,
    )?;
    copy_checked(y, &out[0])?;
    for (row, f) in y.chunks_mut(h).zip(factors) {
        let restore = a_l * f;
        row.iter_mut().for_each(|v| *v *= restore);
    }
    Ok(())
}

fn copy_checked(dst: &mut [f32], src: &[f32]) -> Result<()> {
    if dst.len() != src.len() {
        return Err(Error::State(format!(
            "OpenVINO returned {} values where {} were expected",
            src.len(),
            dst.len()
        )));
    }
    dst.copy_from_slice(src);
    Ok(())
}
