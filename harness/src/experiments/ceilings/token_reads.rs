//! Plain reads of the bytes one decode token reads, laid out as decode finds them: the bytes
//! every token reads whatever the router picks (attention, dense blocks, head, the f32 router,
//! norms and tables, the shared experts, the mean keys and values) as one buffer read whole at
//! every token, and at each MoE layer the routed experts a token picks from a pool as large as all
//! the layer's routed experts: `top_k` of them at random (`Picks::Uniform`), or those a recorded
//! decode picked, token by token (`Picks::Decode`, `decode::routes`). Timed as the read bandwidth is (256-bit
//! loads, every thread its own part of every piece), these are decode's roofline on a host whose
//! last-level cache holds what every token rereads, where the passes over a 1 GiB buffer are not:
//! decode at more than 100 % of those passes means the cache, not a fast engine.

use serde_json::json;

use super::memory::{self, Buffer, Line};
use super::Measurement;
use moefleet_engine::model::ModelConfig;
use moefleet_engine::rng::Rng;

/// Where a decode token's bytes are.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenShape {
    /// Bytes every token reads (its keys and values at their mean over the test's positions).
    pub every_token: u64,
    pub moe_layers: usize,
    /// Routed experts of a MoE layer, and how many a token picks.
    pub routed: usize,
    pub picks: usize,
    /// Bytes of one expert's three matrices.
    pub expert_bytes: u64,
}

impl TokenShape {
    /// The shape of a `tg tokens` test's mean token of `c` (the bytes `decode::bytes_per_token`
    /// counts, split as above).
    pub fn of(c: &ModelConfig, tokens: usize) -> TokenShape {
        let (weights, kv) = super::decode::bytes_per_token(c, tokens);
        let b = moefleet_engine::inspect::bytes_per_token(c);
        let moe_layers = c.moe_layers();
        let per_layer = (moe_layers * c.selections_per_row()) as u64;
        let expert_bytes = b.experts.checked_div(per_layer).unwrap_or(0);
        let picked = (moe_layers * c.top_k) as u64 * expert_bytes;
        TokenShape {
            every_token: weights - picked + kv.round() as u64,
            moe_layers,
            routed: c.n_routed,
            picks: c.top_k.min(c.n_routed),
            expert_bytes,
        }
    }

    /// Bytes one token reads.
    pub fn bytes_per_token(&self) -> u64 {
        self.every_token + (self.moe_layers * self.picks) as u64 * self.expert_bytes
    }

    fn expert_lines(&self) -> usize {
        (self.expert_bytes as usize).div_ceil(std::mem::size_of::<Line>())
    }
}

/// Where the token reads' expert picks came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Picks {
    /// Drawn at random, uniformly (seeded), distinct within a layer.
    Uniform,
    /// The experts a decode of the model picked, token by token (`decode::routes`).
    Decode,
}

impl Picks {
    fn name(self) -> &'static str {
        match self {
            Picks::Uniform => "uniform",
            Picks::Decode => "decode",
        }
    }
}

/// The buffers and the experts each token picks, chosen once so every thread count reads the
/// same ones.
pub struct TokenReads {
    shape: TokenShape,
    every_token: Buffer,
    pool: Buffer,
    /// `tokens x moe_layers x picks` expert indices, distinct within a layer.
    picked: Vec<usize>,
    tokens: usize,
    from: Picks,
}

impl TokenReads {
    /// Picks drawn uniformly at random (seeded).
    pub fn new(shape: TokenShape, tokens: usize, seed: u64) -> anyhow::Result<TokenReads> {
        let mut rng = Rng::new(seed);
        let mut picked = Vec::with_capacity(tokens * shape.moe_layers * shape.picks);
        for _ in 0..tokens * shape.moe_layers {
            let start = picked.len();
            while picked.len() < start + shape.picks {
                let e = rng.below(shape.routed as u64) as usize;
                if !picked[start..].contains(&e) {
                    picked.push(e);
                }
            }
        }
        TokenReads::with_picks(shape, picked, Picks::Uniform)
    }

    /// The picks a decode made: `tokens x moe_layers x picks` expert indices (token by token, its
    /// MoE layers in order), refused unless whole tokens of in-range experts, distinct within a
    /// layer.
    pub fn replaying(shape: TokenShape, picked: Vec<usize>) -> anyhow::Result<TokenReads> {
        let per_token = shape.moe_layers * shape.picks;
        if per_token == 0 || picked.is_empty() || !picked.len().is_multiple_of(per_token) {
            anyhow::bail!(
                "{} expert picks are not whole tokens of {} MoE layers x {} picks",
                picked.len(),
                shape.moe_layers,
                shape.picks
            );
        }
        for layer in picked.chunks_exact(shape.picks) {
            let mut ids = layer.to_vec();
            ids.sort_unstable();
            ids.dedup();
            if ids.len() != shape.picks || ids.iter().any(|&e| e >= shape.routed) {
                anyhow::bail!(
                    "a layer's picks {layer:?} are not {} distinct experts of {}",
                    shape.picks,
                    shape.routed
                );
            }
        }
        TokenReads::with_picks(shape, picked, Picks::Decode)
    }

    fn with_picks(
        shape: TokenShape,
        picked: Vec<usize>,
        from: Picks,
    ) -> anyhow::Result<TokenReads> {
        let line = std::mem::size_of::<Line>();
        let every_token = Buffer::new((shape.every_token as usize).max(line))?;
        let pool_lines = shape.moe_layers * shape.routed * shape.expert_lines();
        let pool = Buffer::new(pool_lines.max(1) * line)?;
        let tokens = picked.len() / (shape.moe_layers * shape.picks).max(1);
        Ok(TokenReads {
            shape,
            every_token,
            pool,
            picked,
            tokens,
            from,
        })
    }

    /// Distinct experts a MoE layer reads over one pass, the mean over layers.
    pub fn distinct_per_layer(&self) -> f64 {
        let s = &self.shape;
        let mut total = 0usize;
        for l in 0..s.moe_layers {
            let mut seen = vec![false; s.routed];
            for t in 0..self.tokens {
                let at = (t * s.moe_layers + l) * s.picks;
                self.picked[at..at + s.picks]
                    .iter()
                    .for_each(|&e| seen[e] = true);
            }
            total += seen.iter().filter(|&&b| b).count();
        }
        total as f64 / s.moe_layers.max(1) as f64
    }

    /// Distinct experts a layer would read over one pass were the picks uniform:
    /// `routed · (1 − (1 − picks/routed)^tokens)` (each expert is in a token's picks with
    /// probability picks/routed, independently across tokens).
    pub fn distinct_if_uniform(&self) -> f64 {
        let s = &self.shape;
        let r = s.routed as f64;
        r * (1.0 - (1.0 - s.picks as f64 / r).powi(self.tokens as i32))
    }

    /// Bytes one pass (every token once) reads: whole lines.
    pub fn bytes_per_pass(&self) -> u64 {
        let picks = (self.shape.moe_layers * self.shape.picks) as u64;
        let expert = (self.shape.expert_lines() * std::mem::size_of::<Line>()) as u64;
        self.tokens as u64 * (self.every_token.bytes() as u64 + picks * expert)
    }

    /// Part `part` of `parts` of every piece a pass reads, token by token (a sum that keeps the
    /// loads alive).
    fn read_part(&self, part: usize, parts: usize) -> u64 {
        let share = |lines: &[Line]| {
            let (n, k) = (lines.len(), parts.max(1));
            memory::read_all(&lines[n * part / k..n * (part + 1) / k])
        };
        let el = self.shape.expert_lines();
        let layer_lines = self.shape.routed * el;
        let pool = self.pool.lines();
        let mut sum = 0u64;
        for t in 0..self.tokens {
            sum = sum.wrapping_add(share(self.every_token.lines()));
            for l in 0..self.shape.moe_layers {
                let at = (t * self.shape.moe_layers + l) * self.shape.picks;
                for &e in &self.picked[at..at + self.shape.picks] {
                    let from = l * layer_lines + e * el;
                    sum = sum.wrapping_add(share(&pool[from..from + el]));
                }
            }
        }
        sum
    }

    /// `passes` timed passes (after one untimed) on `threads` threads, in GB/s.
    pub fn rates(&self, threads: usize, passes: usize) -> Vec<f64> {
        let threads = threads.max(1);
        let parts: Vec<usize> = (0..threads).collect();
        super::timed_together(&parts, passes, |&p| {
            std::hint::black_box(self.read_part(p, threads));
        })
        .into_iter()
        .map(|s| self.bytes_per_pass() as f64 / s / 1e9)
        .collect()
    }

    /// The measurement of `preset`'s token reads on `threads` threads (`requested`: 1 or all).
    pub fn measure(
        &self,
        preset: &str,
        threads: usize,
        requested: usize,
        passes: usize,
    ) -> Measurement {
        let s = &self.shape;
        Measurement {
            key: key(preset, self.from, requested),
            label: match self.from {
                Picks::Uniform => format!("reads shaped as {preset} decode's, uniform picks"),
                Picks::Decode => format!("reads shaped as {preset} decode's, its picks"),
            },
            unit: "GB/s",
            threads,
            samples: self.rates(threads, passes),
            details: json!({
                "kernel": memory::kernel_name(),
                "tokens_per_pass": self.tokens,
                "bytes_per_pass": self.bytes_per_pass(),
                "every_token_bytes": self.every_token.bytes(),
                "moe_layers": s.moe_layers,
                "routed_experts": s.routed,
                "picks_per_layer": s.picks,
                "picks": self.from.name(),
                "distinct_experts_per_layer": self.distinct_per_layer(),
                "distinct_experts_per_layer_if_uniform": self.distinct_if_uniform(),
                "expert_bytes": s.expert_bytes,
                "pool_bytes": self.pool.bytes(),
                "largest_cache_bytes": super::products::largest_cache_bytes(),
            }),
        }
    }
}

/// Key of the token-shaped reads of `preset` (`requested` threads: 1 or all): `read_token_*`
/// with uniform picks (as every record before decode's own picks were replayed),
/// `read_token_decode_*` with decode's.
pub fn key(preset: &str, from: Picks, requested: usize) -> String {
    format!(
        "read_token_{}{}_{}",
        match from {
            Picks::Uniform => "",
            Picks::Decode => "decode_",
        },
        preset.replace('-', "_"),
        if requested == 1 { "1t" } else { "all" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shape_holds_the_bytes_decode_counts() {
        for preset in ["inkling-nano", "inkling-mini", "inkling"] {
            let c = ModelConfig::preset(preset).unwrap();
            let s = TokenShape::of(&c, 64);
            let (w, kv) = super::super::decode::bytes_per_token(&c, 64);
            let counted = w as f64 + kv;
            // the keys and values' mean is rounded to a byte
            assert!(
                (s.bytes_per_token() as f64 - counted).abs() <= 0.5,
                "{preset}"
            );
            assert!(s.moe_layers > 0 && s.picks == c.top_k, "{preset}");
            let b = moefleet_engine::inspect::bytes_per_token(&c);
            assert_eq!(
                b.experts,
                (s.moe_layers * c.selections_per_row()) as u64 * s.expert_bytes
            );
        }
    }

    fn small() -> TokenReads {
        let shape = TokenShape {
            every_token: 64 * 10 + 5,
            moe_layers: 3,
            routed: 7,
            picks: 4,
            expert_bytes: 64 * 5 + 1,
        };
        TokenReads::new(shape, 6, 11).unwrap()
    }

    #[test]
    fn every_token_reads_its_picks_and_the_common_bytes() {
        let r = small();
        for at in r.picked.chunks(4) {
            let mut d = at.to_vec();
            d.sort();
            d.dedup();
            assert_eq!(d.len(), 4, "distinct experts in a layer: {at:?}");
            assert!(d.iter().all(|&e| e < 7));
        }
        // a plain sum of every line each token reads (a line of buffer index i holds 8 x (i | 1))
        let line = |i: usize| 8 * (i as u64 | 1);
        let mut want = 0u64;
        for t in 0..6 {
            want += (0..10).map(line).sum::<u64>();
            for l in 0..3 {
                for &e in &r.picked[(t * 3 + l) * 4..][..4] {
                    let from = l * 7 * 6 + e * 6;
                    want += (from..from + 6).map(line).sum::<u64>();
                }
            }
        }
        assert_eq!(r.read_part(0, 1), want);
        // three threads' parts read the same lines between them
        let parts = (0..3).fold(0u64, |s, p| s.wrapping_add(r.read_part(p, 3)));
        assert_eq!(parts, want);
        assert_eq!(r.bytes_per_pass(), 6 * 64 * (10 + 3 * 4 * 6));
        let m = r.measure("inkling-nano", 2, 2, 2);
        assert_eq!(m.key, "read_token_inkling_nano_all");
        assert_eq!(m.samples.len(), 2);
        assert!(m.samples.iter().all(|g| g.is_finite() && *g > 0.0));
    }

    #[test]
    fn replayed_picks_are_read_as_given_and_checked() {
        let shape = small().shape;
        // two tokens: layer 0 always experts 0-3, layers 1 and 2 spread
        let picks = vec![
            0, 1, 2, 3, 4, 5, 6, 0, 1, 3, 5, 2, //
            3, 2, 1, 0, 6, 4, 2, 1, 0, 1, 2, 3,
        ];
        let r = TokenReads::replaying(shape, picks.clone()).unwrap();
        assert_eq!((r.tokens, r.from), (2, Picks::Decode));
        assert_eq!(r.picked, picks);
        // distinct experts per layer over the pass: 4, 6 and 5, mean 5
        assert!((r.distinct_per_layer() - 5.0).abs() < 1e-12);
        // uniform: 7 (1 − (3/7)²)
        assert!((r.distinct_if_uniform() - 7.0 * (1.0 - 9.0 / 49.0)).abs() < 1e-12);
        assert_eq!(
            r.measure("inkling-nano", 1, 1, 1).key,
            "read_token_decode_inkling_nano_1t"
        );
        // a partial token, a repeated expert, an expert past the pool: refused
        for bad in [
            picks[..10].to_vec(),
            [vec![0, 0, 1, 2], picks[4..12].to_vec()].concat(),
            [vec![0, 1, 2, 7], picks[4..12].to_vec()].concat(),
        ] {
            assert!(TokenReads::replaying(shape, bad).is_err());
        }
    }
}
