//! Timing of one dense layer's MLP in both forms (ARCHITECTURE.md §1.6): `mlp::forward` with the
//! three-matmul form and with the fused-slices form on the same normalised input rows, with the
//! engine's default options otherwise (FP16 expert path on, row factor F_i on); and the same two
//! forms as OpenVINO graphs (`OvMlp`, f32 products). Calls alternate A B, B A, ... so drift and
//! cache state hit both forms alike.

use std::time::Instant;

use moefleet_engine::kernels::int4;
use moefleet_engine::model::mlp;
use moefleet_engine::model::weights::{ExpertWeights, LayerWeights, MlpWeights};
use moefleet_engine::model::{DenseForm, ForwardOptions, ModelConfig};
use moefleet_engine::openvino::layers::OvMlp;
use moefleet_engine::rng::Rng;

/// What the two forms of one layer cost per call, by construction of the engine's code.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct PathCost {
    /// Weight and scale bytes one call reads (each byte once).
    pub bytes: usize,
    /// Compressed-matrix (`int4::matmul`) calls one call makes.
    pub matrix_calls: usize,
}

/// (three-matmul, fused-slices) cost of a dense layer: the same matrices, read whole by three
/// calls or as `dense_width / expert_width` row/column slices by three calls per slice.
pub fn costs(c: &ModelConfig, e: &ExpertWeights) -> (PathCost, PathCost) {
    let three = PathCost {
        bytes: e.gate.bytes() + e.up.bytes() + e.down.bytes(),
        matrix_calls: 3,
    };
    let n_slices = c.dense_width / c.expert_width.max(1);
    let we = c.dense_width / n_slices.max(1);
    let h = c.hidden;
    let fused_bytes = (0..n_slices)
        .map(|j| {
            let r = j * we..(j + 1) * we;
            e.gate.view_part(r.clone(), 0..h).bytes()
                + e.up.view_part(r.clone(), 0..h).bytes()
                + e.down.view_part(0..h, r).bytes()
        })
        .sum();
    let fused = PathCost {
        bytes: fused_bytes,
        matrix_calls: 3 * n_slices,
    };
    (three, fused)
}

/// The dense triple of a layer, or an error naming the layer kind.
pub fn dense_weights(w: &LayerWeights) -> anyhow::Result<&ExpertWeights> {
    match &w.mlp {
        MlpWeights::Dense(e) => Ok(e),
        MlpWeights::Moe { .. } => anyhow::bail!("layer {} is a MoE layer, not dense", w.index),
    }
}

/// `rows` random rows of width `hidden`, each scaled to RMS 1 (what RMSNorm hands the MLP before
/// its gain), from `(seed, layer, rows)`.
pub fn input_rows(seed: u64, layer: usize, rows: usize, hidden: usize) -> Vec<f32> {
    let mut x = vec![0.0f32; rows * hidden];
    Rng::for_tensor(seed, layer, "harness.dense.input", rows).fill_sym(&mut x, 1.0);
    for r in x.chunks_exact_mut(hidden) {
        let rms = (r.iter().map(|v| v * v).sum::<f32>() / hidden as f32).sqrt();
        if rms > 0.0 {
            r.iter_mut().for_each(|v| *v /= rms);
        }
    }
    x
}

/// Outputs and per-call times (ms) of both forms on one input.
pub struct Timed {
    /// [rows, H] outputs.
    pub y_three: Vec<f32>,
    pub y_fused: Vec<f32>,
    pub three_ms: Vec<f64>,
    pub fused_ms: Vec<f64>,
}

/// `warmup` untimed calls of each form, then `calls` timed calls of each, alternating the order,
/// on the engine's native kernels.
pub fn time_both(
    c: &ModelConfig,
    w: &LayerWeights,
    xn: &[f32],
    warmup: usize,
    calls: usize,
) -> Timed {
    let three = ForwardOptions {
        dense_form: DenseForm::ThreeMatmul,
        ..Default::default()
    };
    let fused = ForwardOptions {
        dense_form: DenseForm::FusedSlices,
        ..Default::default()
    };
    let run = |o: ForwardOptions| {
        move |x: &[f32], y: &mut [f32]| -> anyhow::Result<()> {
            mlp::forward(c, w, &o, x, y);
            Ok(())
        }
    };
    time_forms(xn, warmup, calls, run(three), run(fused)).expect("native forms do not fail")
}

/// As [`time_both`], on OpenVINO graphs of both forms compiled beforehand (f32 products).
pub fn time_both_openvino(
    c: &ModelConfig,
    w: &LayerWeights,
    xn: &[f32],
    warmup: usize,
    calls: usize,
    three: &OvMlp,
    fused: &OvMlp,
) -> anyhow::Result<Timed> {
    time_forms(
        xn,
        warmup,
        calls,
        |x, y| Ok(three.run(c, w, true, x, y)?),
        |x, y| Ok(fused.run(c, w, true, x, y)?),
    )
}

/// One MLP call of some implementation: `xn` in, `y` out.
trait MlpCall: FnMut(&[f32], &mut [f32]) -> anyhow::Result<()> {}
impl<F: FnMut(&[f32], &mut [f32]) -> anyhow::Result<()>> MlpCall for F {}

/// Time two implementations of the same MLP call: `warmup` untimed calls of each, then `calls`
/// timed calls of each in alternating order (A B, B A, ...).
fn time_forms(
    xn: &[f32],
    warmup: usize,
    calls: usize,
    mut three: impl MlpCall,
    mut fused: impl MlpCall,
) -> anyhow::Result<Timed> {
    let mut y_three = vec![0.0f32; xn.len()];
    let mut y_fused = vec![0.0f32; xn.len()];
    for _ in 0..warmup.max(1) {
        three(xn, &mut y_three)?;
        fused(xn, &mut y_fused)?;
    }
    let mut three_ms = Vec::with_capacity(calls);
    let mut fused_ms = Vec::with_capacity(calls);
    let mut scratch = vec![0.0f32; xn.len()];
    let mut once = |f: &mut dyn MlpCall, out: &mut Vec<f64>| -> anyhow::Result<()> {
        let t0 = Instant::now();
        f(std::hint::black_box(xn), &mut scratch)?;
        out.push(t0.elapsed().as_secs_f64() * 1e3);
        std::hint::black_box(&scratch);
        Ok(())
    };
    for i in 0..calls {
        if i % 2 == 0 {
            once(&mut three, &mut three_ms)?;
            once(&mut fused, &mut fused_ms)?;
        } else {
            once(&mut fused, &mut fused_ms)?;
            once(&mut three, &mut three_ms)?;
        }
    }
    Ok(Timed {
        y_three,
        y_fused,
        three_ms,
        fused_ms,
    })
}

/// Median ms of the bare compressed-matrix products each form makes (no rounding, activation or
/// buffers), gate / up / down: whole matrices for three-matmul, the sum over the slices for
/// fused-slices. Locates where the fused form gains or loses.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Breakdown {
    pub three_ms: [f64; 3],
    pub fused_ms: [f64; 3],
    pub calls: usize,
}

/// Time the products of [`Breakdown`] on `rows` random rows, alternating whole and sliced.
pub fn breakdown(
    c: &ModelConfig,
    e: &ExpertWeights,
    rows: usize,
    seed: u64,
    calls: usize,
) -> Option<Breakdown> {
    let h = c.hidden;
    let n_slices = c.dense_width / c.expert_width.max(1);
    let we = c.dense_width / n_slices.max(1);
    let xg = input_rows(seed, 0, rows, h);
    let xd = input_rows(seed, 1, rows, c.dense_width);
    // the down input of slice j: columns j·we..(j+1)·we of every row, contiguous
    let xd_slices: Vec<Vec<f32>> = (0..n_slices)
        .map(|j| {
            xd.chunks_exact(c.dense_width)
                .flat_map(|r| r[j * we..(j + 1) * we].iter().copied())
                .collect()
        })
        .collect();
    let whole = [e.gate.view(), e.up.view(), e.down.view()];
    let sliced = e.slices(n_slices);
    let mut y_wide = vec![0.0f32; rows * c.dense_width];
    let mut y_h = vec![0.0f32; rows * h];
    let mut y_we = vec![0.0f32; rows * we];
    let mut t3: [Vec<f64>; 3] = Default::default();
    let mut tf: [Vec<f64>; 3] = Default::default();
    for i in 0..calls + 1 {
        for k in 0..3 {
            let t0 = Instant::now();
            if k < 2 {
                int4::matmul(&whole[k], &xg, &mut y_wide);
            } else {
                int4::matmul(&whole[k], &xd, &mut y_h);
            }
            let a = t0.elapsed().as_secs_f64() * 1e3;
            let t0 = Instant::now();
            for (j, s) in sliced.iter().enumerate() {
                if k < 2 {
                    int4::matmul(&s[k], &xg, &mut y_we);
                } else {
                    int4::matmul(&s[k], &xd_slices[j], &mut y_h);
                }
            }
            let b = t0.elapsed().as_secs_f64() * 1e3;
            // the first round is a warm-up
            if i > 0 {
                t3[k].push(a);
                tf[k].push(b);
            }
        }
        std::hint::black_box((&y_wide, &y_h, &y_we));
    }
    let med = |v: &Vec<f64>| crate::stats::Summary::of(v).map(|s| s.median);
    Some(Breakdown {
        three_ms: [med(&t3[0])?, med(&t3[1])?, med(&t3[2])?],
        fused_ms: [med(&tf[0])?, med(&tf[1])?, med(&tf[2])?],
        calls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use moefleet_engine::model::synth::single_layer;

    #[test]
    fn nano_dense_layer_both_forms() {
        let c = ModelConfig::preset("inkling-nano").unwrap();
        let w = single_layer(&c, 7, 0, None).unwrap();
        let e = dense_weights(&w).unwrap();
        let (three, fused) = costs(&c, e);
        assert_eq!(three.bytes, fused.bytes);
        assert_eq!((three.matrix_calls, fused.matrix_calls), (3, 24));
        let x = input_rows(7, 0, 2, c.hidden);
        let rms: f32 = (x[..c.hidden].iter().map(|v| v * v).sum::<f32>() / c.hidden as f32).sqrt();
        assert!((rms - 1.0).abs() < 1e-4);
        let t = time_both(&c, &w, &x, 1, 3);
        assert_eq!((t.three_ms.len(), t.fused_ms.len()), (3, 3));
        let cos = super::super::table::cosine(&t.y_fused, &t.y_three).unwrap();
        assert!(cos > 0.999, "{cos}");
        let b = breakdown(&c, e, 2, 7, 2).unwrap();
        assert!(b.three_ms.iter().chain(&b.fused_ms).all(|v| *v >= 0.0));
        let moe = single_layer(&c, 7, c.n_dense_layers, Some(&[])).unwrap();
        assert!(dense_weights(&moe).is_err());
    }
}
