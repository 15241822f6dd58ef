//! The draft module of a checkpoint-family model (llama: RoPE, grouped-query attention, a dense
//! SwiGLU, no convolutions; `engine/src/spec/head`): its forward against a float64 reference
//! written here from the equations, a frame's rows against the same rows one at a time (what a
//! live head computes as tokens arrive), a rewind, and the export round trip.
//!
//! Tolerance against the reference: the engine runs the block in f32 (products of up to 2H terms,
//! libm `exp` in the softmax, RoPE angles accumulated in f32 from one pair to the next, a relative
//! error below 1e-6 at these positions), the reference in float64 from the same f32 weights; over
//! one block that is ~1e-6 of a row's RMS, so `TOL` = 1e-4 of each output row's RMS leaves room
//! without hiding a wrong equation (a missing rotation or a wrong head group moves rows by O(1)).

#![allow(clippy::unwrap_used)]

use moefleet_engine::model::attention::Segment;
use moefleet_engine::model::config::AttentionMode;
use moefleet_engine::model::family::{Family, Rope};
use moefleet_engine::model::{ModelConfig, StreamState};
use moefleet_engine::rng::Rng;
use moefleet_engine::spec::head::{block, io, module_kind, MtpState, MtpWeights};

const TOL: f64 = 1e-4;

/// A small llama-shaped configuration: H 64, 4 query heads of 16 sharing 2 KV heads, SwiGLU 96.
fn tiny_llama() -> ModelConfig {
    let mut c = ModelConfig::preset("inkling-nano").unwrap();
    c.name = "tiny-llama".into();
    c.family = Family::Llama;
    c.rope = Some(Rope {
        base: 10000.0,
        dims: 16,
        neox: false,
        freq_scale: 1.0,
    });
    c.n_q_heads = 4;
    c.head_dim = 16;
    c.n_kv_heads_global = 2;
    c.n_kv_heads_sliding = 2;
    c.d_rel = 0;
    c.rel_extent_global = 0;
    c.rel_extent_sliding = 0;
    c.conv_kernel = 1;
    c.dense_width = 96;
    c.n_routed = 0;
    c.top_k = 0;
    c.n_shared = 0;
    c.expert_width = 0;
    c.n_mtp = 2;
    c.qk_norm = false;
    c.vocab_padded = c.vocab_size;
    c.validate().unwrap();
    c
}

fn rows(n: usize, h: usize, seed: u64) -> Vec<f32> {
    let mut v = vec![0.0f32; n * h];
    Rng::new(seed).fill_sym(&mut v, 1.0);
    v
}

/// One module over a fresh stream, all rows in one frame.
fn frame(c: &ModelConfig, w: &MtpWeights, k: usize, prev: &[f32], emb: &[f32]) -> Vec<f32> {
    let n = prev.len() / c.hidden;
    let mut st = StreamState::for_kinds(c, &[module_kind(c, k)], n);
    let mut out = vec![0.0f32; n * c.hidden];
    block::forward(
        c,
        &w.modules[k],
        AttentionMode::Parallel,
        &mut [Segment {
            state: &mut st,
            rows: n,
        }],
        prev,
        emb,
        &mut out,
        None,
    )
    .unwrap();
    out
}

fn rms_norm64(x: &[f64], w: &[f32], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let s = 1.0 / (ms + eps).sqrt();
    x.iter().zip(w).map(|(v, g)| v * s * *g as f64).collect()
}

fn matvec64(w: &[f32], rows: usize, cols: usize, x: &[f64]) -> Vec<f64> {
    (0..rows)
        .map(|r| (0..cols).map(|j| w[r * cols + j] as f64 * x[j]).sum())
        .collect()
}

/// Llama's rotation of adjacent pairs (2i, 2i+1) by pos · base^(−2i/dims), every head.
fn rope64(x: &mut [f64], d: usize, pos: usize, r: &Rope) {
    for head in x.chunks_exact_mut(d) {
        for i in 0..r.dims / 2 {
            let th = pos as f64 * (r.base as f64).powf(-2.0 * i as f64 / r.dims as f64);
            let (a, b) = (head[2 * i], head[2 * i + 1]);
            head[2 * i] = a * th.cos() - b * th.sin();
            head[2 * i + 1] = a * th.sin() + b * th.cos();
        }
    }
}

/// The module's equations in float64 over a whole sequence from position 0.
fn reference(c: &ModelConfig, w: &MtpWeights, k: usize, prev: &[f32], emb: &[f32]) -> Vec<f64> {
    let m = &w.modules[k];
    let (h, d, nq, nkv) = (c.hidden, c.head_dim, c.n_q_heads, c.n_kv_heads_global);
    let eps = c.rms_eps as f64;
    let n = prev.len() / h;
    let r = c.rope.unwrap();
    let (mut keys, mut vals) = (Vec::new(), Vec::new());
    let mut out = Vec::with_capacity(n * h);
    for t in 0..n {
        let p: Vec<f64> = prev[t * h..(t + 1) * h].iter().map(|&v| v as f64).collect();
        let e: Vec<f64> = emb[t * h..(t + 1) * h].iter().map(|&v| v as f64).collect();
        let mut z = rms_norm64(&p, &m.hidden_norm, eps);
        z.extend(rms_norm64(&e, &m.embed_norm, eps));
        let mut x = matvec64(&m.input_proj.w, h, 2 * h, &z);
        let xn = rms_norm64(&x, &m.attn_norm, eps);
        let mut q = matvec64(&m.q.w, nq * d, h, &xn);
        let mut kk = matvec64(&m.k.w, nkv * d, h, &xn);
        let v = matvec64(&m.v.w, nkv * d, h, &xn);
        rope64(&mut q, d, t, &r);
        rope64(&mut kk, d, t, &r);
        keys.push(kk);
        vals.push(v);
        let mut heads = vec![0.0f64; nq * d];
        for hq in 0..nq {
            let g = hq / (nq / nkv);
            let qh = &q[hq * d..(hq + 1) * d];
            let s: Vec<f64> = keys
                .iter()
                .map(|kr| (0..d).map(|i| qh[i] * kr[g * d + i]).sum::<f64>() / (d as f64).sqrt())
                .collect();
            let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let ex: Vec<f64> = s.iter().map(|v| (v - mx).exp()).collect();
            let sum: f64 = ex.iter().sum();
            for (j, vr) in vals.iter().enumerate() {
                for i in 0..d {
                    heads[hq * d + i] += ex[j] / sum * vr[g * d + i];
                }
            }
        }
        let o = matvec64(&m.o.w, h, nq * d, &heads);
        x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
        let xn = rms_norm64(&x, &m.mlp_norm, eps);
        let wd = c.dense_width;
        let g = matvec64(&m.gate.w, wd, h, &xn);
        let u = matvec64(&m.up.w, wd, h, &xn);
        let act: Vec<f64> = g
            .iter()
            .zip(&u)
            .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
            .collect();
        let dn = matvec64(&m.down.w, h, wd, &act);
        x.iter_mut().zip(&dn).for_each(|(a, b)| *a += b);
        out.extend(x);
    }
    out
}

#[test]
fn a_llama_module_matches_its_float64_equations() {
    let c = tiny_llama();
    let w = MtpWeights::synthetic(&c, 3).unwrap();
    assert_eq!(w.modules.len(), 2);
    let n = 11;
    let (prev, emb) = (rows(n, c.hidden, 1), rows(n, c.hidden, 2));
    for k in 0..2 {
        let got = frame(&c, &w, k, &prev, &emb);
        let want = reference(&c, &w, k, &prev, &emb);
        for (t, (g, r)) in got
            .chunks_exact(c.hidden)
            .zip(want.chunks_exact(c.hidden))
            .enumerate()
        {
            let rms = (r.iter().map(|v| v * v).sum::<f64>() / r.len() as f64).sqrt();
            let err = g
                .iter()
                .zip(r)
                .map(|(a, b)| (*a as f64 - b).abs())
                .fold(0.0, f64::max);
            assert!(
                err <= TOL * rms,
                "module {k} row {t}: error {err:.3e} > {TOL} x RMS {rms:.3}"
            );
        }
    }
}

#[test]
fn rows_one_at_a_time_match_one_frame_and_rewind_exactly() {
    let c = tiny_llama();
    let w = MtpWeights::synthetic(&c, 5).unwrap();
    let h = c.hidden;
    let n = 9;
    let (prev, emb) = (rows(n, h, 7), rows(n, h, 8));
    let whole = frame(&c, &w, 0, &prev, &emb);
    let mut st = MtpState::new(&c, 16);
    let step = |st: &mut MtpState, t: usize| {
        let mut out = vec![0.0f32; h];
        block::forward(
            &c,
            &w.modules[0],
            AttentionMode::Parallel,
            &mut [Segment {
                state: &mut st.modules[0],
                rows: 1,
            }],
            &prev[t * h..(t + 1) * h],
            &emb[t * h..(t + 1) * h],
            &mut out,
            None,
        )
        .unwrap();
        out
    };
    let one: Vec<f32> = (0..n).flat_map(|t| step(&mut st, t)).collect();
    // a row alone multiplies as a matrix-vector product, a frame as SGEMM: rounding apart only
    for t in 0..n {
        let (a, b) = (&one[t * h..(t + 1) * h], &whole[t * h..(t + 1) * h]);
        let rms = (b.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / h as f64).sqrt();
        let err = a
            .iter()
            .zip(b)
            .map(|(x, y)| (*x as f64 - *y as f64).abs())
            .fold(0.0, f64::max);
        assert!(err <= TOL * rms, "row {t}: {err:.3e} against RMS {rms:.3}");
    }
    // rewind to 5 positions and recompute the rest one row at a time: the same bits
    st.truncate(5).unwrap();
    let again: Vec<f32> = (5..n).flat_map(|t| step(&mut st, t)).collect();
    assert_eq!(again, one[5 * h..]);
}

#[test]
fn a_checkpoint_head_round_trips_through_its_export() {
    let c = tiny_llama();
    let w = MtpWeights::synthetic(&c, 9).unwrap();
    let dir = tempfile::tempdir().unwrap();
    io::export(&w, dir.path(), serde_json::json!({"made_by": "test"})).unwrap();
    let (back, _) = io::load(dir.path()).unwrap();
    assert_eq!(back, w);
    assert!(back
        .modules
        .iter()
        .all(|m| m.r.rows == 0 && m.rel_pos.is_empty()));
}
