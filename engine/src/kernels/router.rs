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
    let h = x.len();
    let mut sigma = vec![0.0f32; n_total];
    // one row's scores split over the pool's threads (each score is the same dot product wherever
    // it runs)
    super::split_rows(n_total, n_total * h, 1, n_total, &mut sigma, &|r, part| {
        attention::scores(x, &wg[r.start * h..r.end * h], part)
    });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cases;

    #[test]
    fn one_row_routes_the_same_on_one_thread_and_split_over_two() {
        // 264 gate rows of 256 (inkling-mini's router) cross the one-row split threshold
        let (h, n_routed) = (256, 256);
        let wg = cases::activations((n_routed + 8) * h, 0.1, 5);
        let bias = cases::activations(n_routed, 0.01, 6);
        let x = cases::activations(h, 1.0, 7);
        let on = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads);
            pool.build()
                .unwrap()
                .install(|| route(&wg, &bias, &x, 8, 2.5))
        };
        let (one, two) = (on(1), on(2));
        assert_eq!(one.ids, two.ids);
        let bits = |s: &Selection| s.weights.iter().map(|w| w.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&one), bits(&two));
        assert_eq!(one.ids.len(), 16);
    }
}
