//! Decode against the roofline: single-process greedy decode of a preset with synthetic weights
//! (`inkling-mini` by default), timed as `moefleet bench`'s `tg` test times it, each repetition's
//! rate turned into the bytes a token reads per second. Those bytes are the weights one unshared
//! token reads (`inspect::bytes_per_token`: attention, the eight experts of each MoE layer, dense
//! blocks, head, and the small tensors: f32 router, norms, convolution taps, position tables) plus
//! the keys and values its attention reads, averaged over the test's positions. Compared with the
//! read bandwidth of the same thread count in the same run, that is decode's share of the roofline.
//! A profile pass after the timed ones records where a token's time goes (attention, experts and
//! router, norms and convolutions, head), to explain a share far from the bandwidth.

use anyhow::Context;
use serde_json::json;

use super::Measurement;
use moefleet_engine::bench::{self, Test};
use moefleet_engine::model::{
    generate, AttentionKind, ForwardOptions, Model, ModelConfig, SynthSpec,
};

/// What to decode.
#[derive(Clone, Debug)]
pub struct DecodeConfig {
    pub preset: String,
    pub seed: u64,
    /// Tokens per repetition (the `tg` length).
    pub tokens: usize,
    pub repetitions: usize,
}

/// Key of the decode measurement of `preset` at a thread count (`1t` or `all`).
pub fn key(preset: &str, suffix: &str) -> String {
    format!("decode_{}_{suffix}", preset.replace('-', "_"))
}

/// Keys and values bytes (f32) one decode step at position `p` reads, summed over the layers: a
/// sliding layer attends to at most `window` positions, a global one to all `p + 1`.
pub fn kv_bytes_at(c: &ModelConfig, p: usize) -> u64 {
    (0..c.n_layers)
        .map(|l| {
            let kind = c.attention_kind(l);
            let span = match kind {
                AttentionKind::Sliding => (p + 1).min(c.window),
                AttentionKind::Global => p + 1,
            };
            (2 * 4 * c.n_kv_heads(kind) * c.head_dim * span) as u64
        })
        .sum()
}

/// The bytes one token of a `tg tokens` test reads on average: weights (with the small tensors)
/// plus the mean over its decode positions (1 to `tokens`, after the one-token prompt at 0) of the
/// attention's keys and values. Returns (weights, kv mean).
pub fn bytes_per_token(c: &ModelConfig, tokens: usize) -> (u64, f64) {
    let b = moefleet_engine::inspect::bytes_per_token(c);
    let kv = (1..=tokens).map(|p| kv_bytes_at(c, p) as f64).sum::<f64>() / tokens.max(1) as f64;
    (b.total + b.small, kv)
}

/// The model, generated once for every thread count.
pub fn model(cfg: &DecodeConfig) -> anyhow::Result<Model> {
    let c = ModelConfig::preset(&cfg.preset)?;
    let w = generate(&SynthSpec::whole(c, cfg.seed))
        .with_context(|| format!("generating {} (seed {})", cfg.preset, cfg.seed))?;
    Ok(Model::new(w, ForwardOptions::default()))
}

/// The experts a decode of `cfg.tokens` tokens picks, token by token (each token's MoE layers in
/// order, `top_k` each): the first timed repetition's decode (`bench`'s tg test, seed 1), run
/// once more on this thread with its routes recorded. The routes do not depend on the thread
/// count (a row's bits do not).
pub fn routes(model: &Model, cfg: &DecodeConfig) -> anyhow::Result<Vec<usize>> {
    let first = bench::decode_prompt(model, 1);
    let (g, log) = moefleet_engine::model::mlp::recording_routes(|| {
        moefleet_engine::generate::generate(model, &first, cfg.tokens + 1, 1, None, false)
    });
    g.context("decoding to record its routes")?;
    // the decode steps are the last forwards, one row each (the prompt's is the first)
    let c = model.config();
    let moe = c.moe_layers();
    let steps = cfg.tokens * moe;
    let per_row = c.selections_per_row();
    if log.len() != steps + moe || log.iter().any(|call| call.len() != per_row) {
        anyhow::bail!(
            "a decode of {} tokens after a one-token prompt routed {} times, not {} (one row of \
             {per_row} selections each)",
            cfg.tokens,
            log.len(),
            steps + moe
        );
    }
    // each row's routed picks (its first top_k selections; the shared experts follow)
    Ok(log[log.len() - steps..]
        .iter()
        .flat_map(|call| call.iter().take(c.top_k).copied())
        .collect())
}

/// Decode timed on `threads` threads (`requested`: 1 or all, for the key), one sample per
/// repetition in GB/s of the bytes a token reads.
pub fn measure(
    model: &Model,
    cfg: &DecodeConfig,
    threads: usize,
    requested: usize,
) -> anyhow::Result<Measurement> {
    let c = model.config();
    let (weights, kv) = bytes_per_token(c, cfg.tokens);
    let per_token = weights as f64 + kv;
    let load_start = crate::host::load_average();
    let o = bench::run(
        model,
        Test::Decode { tokens: cfg.tokens },
        threads,
        cfg.repetitions,
        None,
    )?;
    // where a token's time goes, one more pass outside the timed ones (`moefleet bench`'s profile)
    let profile = bench::profile_decode(model, cfg.tokens, threads)?;
    let suffix = if requested == 1 { "1t" } else { "all" };
    Ok(Measurement {
        key: key(&cfg.preset, suffix),
        label: format!("decode {} tg{}", cfg.preset, cfg.tokens),
        unit: "GB/s",
        threads,
        samples: o.tok_s.iter().map(|r| r * per_token / 1e9).collect(),
        details: json!({
            "model": cfg.preset,
            "weights": "synthetic",
            "seed": cfg.seed,
            "test": o.test,
            "repetitions": cfg.repetitions,
            "weight_bytes_per_token": weights,
            "kv_bytes_per_token_mean": kv,
            "bytes_per_token": per_token,
            "kernel_path": moefleet_engine::kernels::int_path().map_or("portable", |k| k.name()),
            "profile_ms_per_token": profile,
            "load_average_start": load_start,
            "load_average_end": crate::host::load_average(),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_bytes_follow_the_window_and_the_layer_kinds() {
        let c = ModelConfig::preset("inkling-nano").unwrap();
        let per_pos = |kind| (2 * 4 * c.n_kv_heads(kind) * c.head_dim) as u64;
        let (mut sliding, mut global) = (0u64, 0u64);
        for l in 0..c.n_layers {
            let kind = c.attention_kind(l);
            match kind {
                AttentionKind::Sliding => sliding += per_pos(kind),
                AttentionKind::Global => global += per_pos(kind),
            }
        }
        assert!(sliding > 0 && global > 0, "nano has both kinds");
        assert_eq!(kv_bytes_at(&c, 0), sliding + global);
        let far = c.window + 10;
        assert_eq!(
            kv_bytes_at(&c, far),
            sliding * c.window as u64 + global * (far as u64 + 1)
        );
        // the mean over positions 1..=3 of (p + 1) positions each (inside the window)
        let (w, kv) = bytes_per_token(&c, 3);
        assert_eq!(kv, (sliding + global) as f64 * 3.0);
        assert!(w > moefleet_engine::inspect::bytes_per_token(&c).total);
    }

    #[test]
    fn decode_samples_are_bytes_per_second() {
        let cfg = DecodeConfig {
            preset: "inkling-nano".into(),
            seed: 3,
            tokens: 4,
            repetitions: 2,
        };
        let m = model(&cfg).unwrap();
        let d = measure(&m, &cfg, 1, 1).unwrap();
        assert_eq!(d.key, "decode_inkling_nano_1t");
        assert_eq!(d.samples.len(), 2);
        assert!(d.samples.iter().all(|g| g.is_finite() && *g > 0.0));
        assert!(d.details["kernel_path"].as_str().is_some());
        let per_token = d.details["bytes_per_token"].as_f64().unwrap();
        assert_eq!(per_token, {
            let (w, kv) = bytes_per_token(m.config(), 4);
            w as f64 + kv
        });
        // the routes of the decode: four tokens of every MoE layer's routed picks, which the
        // token reads take as they are
        let picks = routes(&m, &cfg).unwrap();
        let shape = super::super::token_reads::TokenShape::of(m.config(), 4);
        assert_eq!(picks.len(), 4 * shape.moe_layers * shape.picks);
        super::super::token_reads::TokenReads::replaying(shape, picks.clone()).unwrap();
        // they are the decode steps' routed picks: every forward after the prompt's, each row's
        // first top_k selections
        let first = bench::decode_prompt(&m, 1);
        let (_, log) = moefleet_engine::model::mlp::recording_routes(|| {
            moefleet_engine::generate::generate(&m, &first, 5, 1, None, false).unwrap()
        });
        let steps: Vec<usize> = log[shape.moe_layers..]
            .iter()
            .flat_map(|call| call[..shape.picks].to_vec())
            .collect();
        assert_eq!(picks, steps);
        // the same decode routes the same way
        assert_eq!(routes(&m, &cfg).unwrap(), picks);
    }
}
