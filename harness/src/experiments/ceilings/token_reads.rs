//! Plain reads of the bytes one decode token reads, laid out as decode finds them: the bytes
//! every token reads whatever the router picks (attention, dense blocks, head, the f32 router,
//! norms and tables, the shared experts, the mean keys and values) as one buffer read whole at
//! every token, and at each MoE layer the routed experts a token picks, `top_k` of them at random
//! from a pool as large as all the layer's routed experts. Timed as the read bandwidth is (256-bit
//! loads, every thread its own part of every piece), these are decode's roofline on a host whose
//! last-level cache holds what every token rereads, where the passes over a 1 GiB buffer are not:
//! decode at more than 100 % of those passes means the cache, not a fast engine.

use serde_json::json;

use super::memory::{self, Buffer, Line};
use super::Measurement;
use moefleet_engine::model::{MlpKind, ModelConfig};
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
        let moe_layers = (0..c.n_layers)
            .filter(|&l| c.mlp_kind(l) == MlpKind::Moe)
            .count();
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

/// The buffers and the experts each token picks, drawn once (seeded) so every thread count reads
/// the same ones.
pub struct TokenReads {
    shape: TokenShape,
    every_token: Buffer,
    pool: Buffer,
    /// `tokens x moe_layers x picks` expert indices, distinct within a layer.
    picked: Vec<usize>,
    tokens: usize,
}

impl TokenReads {
    pub fn new(shape: TokenShape, tokens: usize, seed: u64) -> anyhow::Result<TokenReads> {
        let line = std::mem::size_of::<Line>();
        let every_token = Buffer::new((shape.every_token as usize).max(line))?;
        let pool_lines = shape.moe_layers * shape.routed * shape.expert_lines();
        let pool = Buffer::new(pool_lines.max(1) * line)?;
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
        Ok(TokenReads {
            shape,
            every_token,
            pool,
            picked,
            tokens,
        })
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
            key: key(preset, requested),
            label: format!("reads shaped as {preset} decode's"),
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
                "expert_bytes": s.expert_bytes,
                "pool_bytes": self.pool.bytes(),
                "largest_cache_bytes": super::products::largest_cache_bytes(),
            }),
        }
    }
}

/// Key of the token-shaped reads of `preset` (`requested` threads: 1 or all).
pub fn key(preset: &str, requested: usize) -> String {
    format!(
        "read_token_{}_{}",
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
}
