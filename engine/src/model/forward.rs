//! `Model`: the forward pass over a range of layers (ARCHITECTURE.md §1.1), with the embedding when
//! the range starts at layer 0 and the final norm and head when it ends at the last layer.
//! Weights are immutable; all per-stream state lives in `StreamState`, owned by the caller.

use std::sync::OnceLock;
use std::time::Instant;

use super::attention::{self, Segment};
use super::backend::{self, Backend};
use super::config::{BackendKind, ModelConfig};
use super::norm::{rms_norm, rms_norm_inplace};
pub use super::options::{ForwardOptions, ForwardTimings};
use super::state::StreamState;
use super::weights::ModelWeights;
use crate::error::{Error, Result};

pub struct Model {
    pub weights: ModelWeights,
    pub opts: ForwardOptions,
    /// Where the layers' products run (`backend::build`, on first use or by `prepare`: OpenVINO
    /// compiles its graphs then); an error is kept and returned by every forward.
    backend: OnceLock<std::result::Result<Box<dyn Backend>, String>>,
}

impl Model {
    pub fn new(weights: ModelWeights, opts: ForwardOptions) -> Self {
        Model {
            weights,
            opts,
            backend: OnceLock::new(),
        }
    }

    /// Build the backend's graphs now (OpenVINO compiles every layer's graphs once), so that the
    /// first forward is not the one that pays for it and a bad setup fails at start-up.
    pub fn prepare(&self) -> Result<()> {
        self.backend().map(|_| ())
    }

    /// Where the layers' products run (built on first use).
    pub fn backend(&self) -> Result<&dyn Backend> {
        self.backend
            .get_or_init(|| {
                build_backend(&self.weights, &self.opts).map_err(|e| match e {
                    Error::Config(m) => m,
                    other => other.to_string(),
                })
            })
            .as_ref()
            .map(|b| b.as_ref())
            .map_err(|e| Error::Config(e.clone()))
    }

    pub fn config(&self) -> &ModelConfig {
        &self.weights.config
    }

    /// Layers this model owns.
    pub fn layers(&self) -> std::ops::Range<usize> {
        self.weights.layer_start..self.weights.layer_end
    }

    /// A fresh stream over this model's layers with a context budget in positions.
    pub fn new_stream(&self, budget: usize) -> StreamState {
        StreamState::new(self.config(), self.layers(), budget)
    }

    /// `x = RMSNorm_embed(embed[token])` for each token, into x [n, H].
    pub fn embed(&self, tokens: &[u32], x: &mut [f32]) -> Result<()> {
        let c = self.config();
        if let Some(cp) = &self.weights.checkpoint {
            return super::checkpoint::layer::embed(c, cp, tokens, x);
        }
        let e = self
            .weights
            .embed
            .as_ref()
            .ok_or_else(|| Error::Config("this model range has no embedding".into()))?;
        for (i, &t) in tokens.iter().enumerate() {
            let t = t as usize;
            if t >= c.vocab_size {
                return Err(Error::Input(format!(
                    "token id {t} is outside the vocabulary (size {})",
                    c.vocab_size
                )));
            }
            let row = &e.embed[t * c.hidden..(t + 1) * c.hidden];
            for (d, s) in x[i * c.hidden..(i + 1) * c.hidden].iter_mut().zip(row) {
                *d = s.to_f32();
            }
        }
        rms_norm_inplace(&mut x[..tokens.len() * c.hidden], &e.norm, c.rms_eps);
        Ok(())
    }

    /// Run every layer of the range over the rows of `segs` (x [Σ rows, H], rows of a segment at
    /// consecutive positions from its `pos()`), then commit the positions.
    pub fn forward(&self, segs: &mut [Segment<'_>], x: &mut [f32]) -> Result<()> {
        self.forward_observed(segs, x, |_, _| {}, &mut ForwardTimings::default())
    }

    /// As `forward`, adding the time of each part to `t`.
    pub fn forward_timed(
        &self,
        segs: &mut [Segment<'_>],
        x: &mut [f32],
        t: &mut ForwardTimings,
    ) -> Result<()> {
        self.forward_observed(segs, x, |_, _| {}, t)
    }

    /// As `forward`, calling `observe(layer, x)` after each layer (tests and inspection).
    pub fn forward_observed(
        &self,
        segs: &mut [Segment<'_>],
        x: &mut [f32],
        observe: impl FnMut(usize, &[f32]),
        t: &mut ForwardTimings,
    ) -> Result<()> {
        // OpenVINO computes on threads of its own: a spinning rayon thread would only take a core
        if self.opts.backend.kind == BackendKind::Openvino {
            return self.forward_layers(segs, x, observe, t);
        }
        crate::kernels::awake(|| self.forward_layers(segs, x, observe, t))
    }

    fn forward_layers(
        &self,
        segs: &mut [Segment<'_>],
        x: &mut [f32],
        mut observe: impl FnMut(usize, &[f32]),
        t: &mut ForwardTimings,
    ) -> Result<()> {
        let c = self.config();
        let h = c.hidden;
        let n: usize = segs.iter().map(|s| s.rows).sum();
        if x.len() != n * h {
            return Err(Error::Input(format!(
                "residual has {} values, expected {n} rows x {h}",
                x.len()
            )));
        }
        for s in segs.iter() {
            s.state.check_room(s.rows)?;
            if s.state.layers.len() != self.layers().len() {
                return Err(Error::State(
                    "stream state belongs to another layer range".into(),
                ));
            }
        }
        if let Some(cp) = &self.weights.checkpoint {
            super::checkpoint::layer::forward(c, cp, segs, x, observe, t);
            for s in segs.iter_mut() {
                s.state.commit(s.rows);
            }
            return Ok(());
        }
        let be = self.backend()?;
        let mut xn = vec![0.0f32; n * h];
        let mut b = vec![0.0f32; n * h];
        let mut y = vec![0.0f32; n * h];
        for (slot, w) in self.weights.layers.iter().enumerate() {
            // x = x + ConvOut_attn(Attention(RMSNorm_attn(x)))
            let t0 = Instant::now();
            rms_norm(x, &w.attn_norm, c.rms_eps, &mut xn);
            attention::forward_with(
                c,
                &w.attn,
                self.opts.attention,
                slot,
                segs,
                &xn,
                &mut b,
                |xn, p| be.project(slot, &w.attn, xn, p),
                |heads, n, out| be.output(slot, &w.attn, heads, n, out),
            )?;
            let t1 = Instant::now();
            conv_out(
                segs,
                slot,
                &b,
                &mut y,
                h,
                |ls| &mut ls.conv_attn_out,
                &w.conv_attn_out,
            );
            x.iter_mut().zip(&y).for_each(|(a, v)| *a += v);
            // x = x + ConvOut_mlp(MLP(RMSNorm_mlp(x)))
            rms_norm(x, &w.mlp_norm, c.rms_eps, &mut xn);
            let t2 = Instant::now();
            be.mlp(slot, c, w, &self.opts, &xn, &mut b)?;
            let t3 = Instant::now();
            conv_out(
                segs,
                slot,
                &b,
                &mut y,
                h,
                |ls| &mut ls.conv_mlp_out,
                &w.conv_mlp_out,
            );
            x.iter_mut().zip(&y).for_each(|(a, v)| *a += v);
            let t4 = Instant::now();
            t.attention_ns += (t1 - t0).as_nanos() as u64;
            t.mlp_ns += (t3 - t2).as_nanos() as u64;
            t.other_ns += ((t2 - t1) + (t4 - t3)).as_nanos() as u64;
            observe(w.index, x);
        }
        for s in segs.iter_mut() {
            s.state.commit(s.rows);
        }
        Ok(())
    }

    /// Logits of each row of x ([n, H] residual after the last layer), sliced to the vocabulary:
    /// `(RMSNorm_final(x) / mup) · headᵀ`. Returns [n, vocab_size].
    pub fn logits(&self, x: &[f32]) -> Result<Vec<f32>> {
        let c = self.config();
        if let Some(cp) = &self.weights.checkpoint {
            return super::checkpoint::layer::logits(c, cp, x);
        }
        let hw = self
            .weights
            .head
            .as_ref()
            .ok_or_else(|| Error::Config("this model range has no head".into()))?;
        let mut xn = vec![0.0f32; x.len()];
        rms_norm(x, &hw.final_norm, c.rms_eps, &mut xn);
        let inv_mup = 1.0 / c.mup_width_multiplier;
        xn.iter_mut().for_each(|v| *v *= inv_mup);
        let full = self.backend()?.head(c, hw, &xn)?;
        Ok(full
            .chunks_exact(c.vocab_padded)
            .flat_map(|r| r[..c.vocab_size].iter().copied())
            .collect())
    }
}

/// Short convolution of a branch output b into y, per stream, with its history in the state.
pub(crate) fn conv_out(
    segs: &mut [Segment<'_>],
    slot: usize,
    b: &[f32],
    y: &mut [f32],
    h: usize,
    hist: impl Fn(&mut super::state::LayerState) -> &mut super::state::ConvHistory,
    taps: &crate::kernels::conv::ConvTaps,
) {
    let mut row = 0;
    for seg in segs.iter_mut() {
        let p0 = seg.state.pos();
        for i in 0..seg.rows {
            let hs = hist(&mut seg.state.layers[slot]);
            let u = &b[row * h..(row + 1) * h];
            taps.apply(u, &hs.before(p0 + i), &mut y[row * h..(row + 1) * h]);
            hs.record(p0 + i, u);
            row += 1;
        }
    }
}

/// Greedy choice: arg-max, lower id on ties (NaN never wins; 0 when every value is NaN).
///
/// Two passes the compiler vectorises: the maximum over sixteen lanes (a NaN never compares
/// greater, so it never enters a lane), then the first position holding it, sought sixteen values
/// at a time. `argmax_reference` is the plain one-pass loop; `tests::argmax_matches_the_plain_loop`
/// holds them equal. Over SmolLM2's 49,152 logits the plain loop took about 49 µs on host E and
/// this about 4 µs (a one-off timing, not a committed record).
pub fn argmax(logits: &[f32]) -> u32 {
    const L: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; L];
    let chunks = logits.chunks_exact(L);
    let tail = chunks.remainder();
    for c in chunks {
        for (m, &v) in lanes.iter_mut().zip(c) {
            *m = if v > *m { v } else { *m };
        }
    }
    let mut best = f32::NEG_INFINITY;
    for &v in lanes.iter().chain(tail) {
        if v > best {
            best = v;
        }
    }
    // the first position equal to the maximum (-inf when every value is NaN or -inf)
    for (k, c) in logits.chunks(L).enumerate() {
        if c.iter().fold(false, |any, &v| any | (v == best)) {
            let i = c.iter().position(|&v| v == best).unwrap_or(0);
            return (k * L + i) as u32;
        }
    }
    0
}

/// The plain arg-max: one pass, lower id on ties, a NaN never winning.
pub fn argmax_reference(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] || logits[best].is_nan() && !v.is_nan() {
            best = i;
        }
    }
    best as u32
}

/// The backend `opts` asks for, over `w`'s layers: OpenVINO compiles every layer's graphs here.
fn build_backend(w: &ModelWeights, opts: &ForwardOptions) -> Result<Box<dyn Backend>> {
    match opts.backend.kind {
        BackendKind::Native => Ok(Box::new(backend::Native)),
        BackendKind::Openvino => {
            if w.checkpoint.is_some() {
                return Err(Error::Config(
                    "the OpenVINO backend builds Inkling layers only; a GGUF checkpoint runs native"
                        .into(),
                ));
            }
            let ov = crate::openvino::layers::OvModel::build(
                w,
                opts.backend,
                opts.dense_form,
                opts.backend.profile,
            )?;
            Ok(Box::new(ov))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// Rows with ties, signed zeros, infinities and NaNs at every place the two passes split them
    /// (inside and across sixteen-value chunks, in the tail), and random rows.
    #[test]
    fn argmax_matches_the_plain_loop() {
        let specials = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            1.0,
            -1.0,
        ];
        let mut rng = Rng::new(17);
        for len in [1usize, 2, 15, 16, 17, 31, 33, 64, 70, 7070] {
            for case in 0..200 {
                let row: Vec<f32> = (0..len)
                    .map(|_| {
                        let u = rng.unit();
                        if case % 2 == 0 && u < 0.3 {
                            specials[(u * 100.0) as usize % specials.len()]
                        } else {
                            // few distinct values: ties are common
                            ((u * 8.0).floor() - 4.0) * 0.5
                        }
                    })
                    .collect();
                assert_eq!(argmax(&row), argmax_reference(&row), "{row:?}");
            }
        }
        assert_eq!(argmax(&[f32::NAN; 40]), 0);
        assert_eq!(argmax(&[]), 0);
        let mut nan_first = vec![f32::NAN; 20];
        nan_first[18] = f32::NEG_INFINITY;
        assert_eq!(argmax(&nan_first), 18);
    }
}
