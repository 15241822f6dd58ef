//! MoE routing (ARCHITECTURE.md §1.3): sigmoid gate scores, bias-adjusted top-k over the routed
//! experts (lower id wins ties), and normalised weights for the selected and shared experts.

use super::attention;

/// One row's selections: `top_k` routed experts in rank order, then the shared ones in id order.
#[derive(Clone, Debug, PartialEq)]
pub struct Selection {
    pub ids: Vec<usize>,
    pub weights: Vec<f32>,
}

/// Routing of one row. `wg` [n_routed + n_shared, H], `bias` [n_routed]; `scale` is
/// `route_scale · global_scale`.
pub fn route(wg: &[f32], bias: &[f32], x: &[f32], top_k: usize, scale: f32) -> Selection {
    let n_total = wg.len() / x.len();
    let mut sigma = vec![0.0f32; n_total];
    attention::scores(x, wg, &mut sigma);
    for s in sigma.iter_mut() {
        *s = 1.0 / (1.0 + (-*s).exp());
    }
    let n_routed = bias.len();
    let ids = top_k_partial(&sigma[..n_routed], bias, top_k);
    let mut all: Vec<usize> = ids;
    all.extend(n_routed..n_total);
    let z: f32 = all.iter().map(|&i| sigma[i]).sum();
    let weights = all.iter().map(|&i| sigma[i] / z * scale).collect();
    Selection { ids: all, weights }
}

/// Top-k by `σ + bias` with a k-slot insertion list (k is small), equal to the full sort.
pub fn top_k_partial(sigma: &[f32], bias: &[f32], k: usize) -> Vec<usize> {
    let mut best: Vec<(f32, usize)> = Vec::with_capacity(k + 1);
    for (i, (&s, &b)) in sigma.iter().zip(bias).enumerate() {
        let v = s + b;
        if best.len() == k && v.partial_cmp(&best[k - 1].0) != Some(std::cmp::Ordering::Greater) {
            continue; // not strictly better than the worst kept: the lower id already won
        }
        let at = best
            .iter()
            .position(|&(bv, _)| v > bv)
            .unwrap_or(best.len());
        best.insert(at, (v, i));
        best.truncate(k);
    }
    best.into_iter().map(|(_, i)| i).collect()
}
