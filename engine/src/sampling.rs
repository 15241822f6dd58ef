//! How the last role picks a token from a row's logits: greedy (the default, and what the
//! harness measures with), or temperature sampling with top-k and nucleus (top-p) filtering. The
//! draw for a row is a function of the request's seed and the row's position only, so the same
//! seed gives the same tokens whatever the fleet's cut into roles and whatever other streams share
//! the frames (the logits are bit-identical across both; `tests/serve.rs`).

use serde::{Deserialize, Serialize};

use crate::model::argmax;

/// A request's sampling choice.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    /// 0: greedy. Logits are divided by it before the softmax.
    pub temperature: f32,
    /// Keep the most probable tokens whose probabilities sum to at least this (1: all).
    pub top_p: f32,
    /// Keep at most this many of the most probable tokens (0: all).
    pub top_k: u32,
    pub seed: u64,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling::GREEDY
    }
}

impl Sampling {
    pub const GREEDY: Sampling = Sampling {
        temperature: 0.0,
        top_p: 1.0,
        top_k: 0,
        seed: 0,
    };

    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0 || self.top_k == 1
    }

    /// The token the row at position `pos` emits.
    pub fn pick(&self, logits: &[f32], pos: u32) -> u32 {
        if self.is_greedy() || logits.is_empty() {
            return argmax(logits);
        }
        // candidates, most probable first (ties: lower id first), NaN logits never chosen
        let mut order: Vec<u32> = (0..logits.len() as u32)
            .filter(|&i| !logits[i as usize].is_nan())
            .collect();
        if order.is_empty() {
            return argmax(logits);
        }
        let by_logit = |a: &u32, b: &u32| {
            logits[*b as usize]
                .total_cmp(&logits[*a as usize])
                .then(a.cmp(b))
        };
        let k = match self.top_k as usize {
            0 => order.len(),
            k => k.min(order.len()),
        };
        if k < order.len() {
            order.select_nth_unstable_by(k - 1, by_logit);
            order.truncate(k);
        }
        order.sort_unstable_by(by_logit);
        let top = f64::from(logits[order[0] as usize]);
        if !top.is_finite() {
            // an infinite (or NaN) top logit has no distribution to draw from: take it, as
            // greedy decoding would
            return order[0];
        }
        let t = f64::from(self.temperature);
        let weights: Vec<f64> = order
            .iter()
            .map(|&i| ((f64::from(logits[i as usize]) - top) / t).exp())
            .collect();
        let total: f64 = weights.iter().sum();
        // the nucleus: the shortest prefix holding top_p of the probability (at least one token)
        let mut kept = 0;
        let mut mass = 0.0;
        for w in &weights {
            kept += 1;
            mass += w / total;
            if mass >= f64::from(self.top_p) {
                break;
            }
        }
        let kept_total: f64 = weights[..kept].iter().sum();
        let mut u = unit(self.seed, pos) * kept_total;
        for (j, w) in weights[..kept].iter().enumerate() {
            if u < *w {
                return order[j];
            }
            u -= w;
        }
        order[kept - 1]
    }
}

/// A uniform draw in [0, 1) for position `pos` of the stream seeded `seed`.
fn unit(seed: u64, pos: u32) -> f64 {
    let x = crate::rng::mix64(crate::rng::mix64(seed) ^ u64::from(pos));
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(temperature: f32, top_p: f32, top_k: u32) -> Sampling {
        Sampling {
            temperature,
            top_p,
            top_k,
            seed: 42,
        }
    }

    #[test]
    fn greedy_cases_are_argmax() {
        let l = [0.5, 2.0, -1.0, 1.9];
        for pos in 0..50 {
            assert_eq!(Sampling::GREEDY.pick(&l, pos), 1);
            assert_eq!(s(1.0, 1.0, 1).pick(&l, pos), 1, "top_k 1");
            assert_eq!(s(1.0, 1e-6, 0).pick(&l, pos), 1, "a tiny nucleus");
        }
    }

    #[test]
    fn an_infinite_logit_is_taken_as_greedy_would() {
        let l = [0.5, f32::INFINITY, 3.0, f32::NAN];
        for pos in 0..50 {
            assert_eq!(s(1.0, 0.9, 0).pick(&l, pos), 1);
        }
    }

    #[test]
    fn the_same_seed_and_position_draw_the_same_token() {
        let l: Vec<f32> = (0..100).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
        let a: Vec<u32> = (0..200).map(|p| s(0.9, 0.95, 0).pick(&l, p)).collect();
        let b: Vec<u32> = (0..200).map(|p| s(0.9, 0.95, 0).pick(&l, p)).collect();
        assert_eq!(a, b);
        let other = Sampling {
            seed: 7,
            ..s(0.9, 0.95, 0)
        };
        let c: Vec<u32> = (0..200).map(|p| other.pick(&l, p)).collect();
        assert_ne!(a, c, "another seed draws otherwise");
    }

    /// Frequencies over many positions match the filtered softmax: each within 5 binomial
    /// standard deviations (a false failure about once in 1.7 million per count).
    #[test]
    fn frequencies_follow_the_filtered_softmax() {
        let l = [1.0f32, 0.0, 2.0, -3.0, 0.5];
        let n = 40_000u32;
        for (samp, keep) in [
            (s(1.0, 1.0, 0), vec![0, 1, 2, 3, 4]),
            (s(0.7, 1.0, 3), vec![2, 0, 4]),
            (s(1.0, 0.8, 0), vec![2, 0, 4]),
        ] {
            let w: Vec<f64> = keep
                .iter()
                .map(|&i| (f64::from(l[i]) / f64::from(samp.temperature)).exp())
                .collect();
            let total: f64 = w.iter().sum();
            let mut count = [0u32; 5];
            for p in 0..n {
                count[samp.pick(&l, p) as usize] += 1;
            }
            for (i, c) in count.iter().enumerate() {
                let p = keep
                    .iter()
                    .position(|&k| k == i)
                    .map_or(0.0, |j| w[j] / total);
                let mean = p * f64::from(n);
                let sd = (mean * (1.0 - p)).sqrt();
                assert!(
                    (f64::from(*c) - mean).abs() <= 5.0 * sd + 1e-9,
                    "{samp:?}: token {i} drawn {c} times, expected {mean:.0} ± {sd:.0}"
                );
            }
        }
    }
}
