//! What a context pass will send and whether the next request still fits the time left
//! (MEASUREMENTS.md §3.2): the sizes and their repeats, and a duration predicted from the
//! requests already finished in the pass. Pure functions; the pass itself is `scan`.

use anyhow::bail;

use super::fit::fit_nonnegative;

/// The spec's sizes: 1k to 64k prompt tokens.
pub const DEFAULT_SIZES: [usize; 7] = [1024, 2048, 4096, 8192, 16384, 32768, 65536];

/// Smallest size a prompt can be built at (the header, note and question take about 60 tokens).
pub const MIN_SIZE: usize = 128;
/// Largest size: the engine's context limit, 2^20 positions.
pub const MAX_SIZE: usize = 1 << 20;

/// Repeats per size: three up to 16k, two up to 64k, one above.
pub fn default_repeats(size: usize) -> usize {
    match size {
        0..=16_384 => 3,
        16_385..=65_536 => 2,
        _ => 1,
    }
}

/// `(size, repeats)` in ascending size: duplicates dropped, sizes above `max_size` left out.
pub fn plan(
    sizes: &[usize],
    max_size: Option<usize>,
    repeats: Option<usize>,
) -> anyhow::Result<Vec<(usize, usize)>> {
    if sizes.is_empty() {
        bail!("--sizes is empty");
    }
    if let Some(&s) = sizes.iter().find(|&&s| s < MIN_SIZE) {
        bail!("size {s} is too small: prompts start at {MIN_SIZE} tokens");
    }
    if let Some(&s) = sizes.iter().find(|&&s| s > MAX_SIZE) {
        bail!("size {s} is too large: prompts go up to {MAX_SIZE} tokens");
    }
    if repeats == Some(0) {
        bail!("--repeats must be at least 1");
    }
    let mut s: Vec<usize> = sizes
        .iter()
        .copied()
        .filter(|&s| max_size.is_none_or(|m| s <= m))
        .collect();
    s.sort_unstable();
    s.dedup();
    if s.is_empty() {
        bail!(
            "no size is at or below --max-size {}",
            max_size.unwrap_or(0)
        );
    }
    Ok(s.into_iter()
        .map(|s| (s, repeats.unwrap_or_else(|| default_repeats(s))))
        .collect())
}

/// One finished request as the predictor sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Done {
    /// Prompt tokens (the server's count, else the client's).
    pub n: f64,
    pub ttft_s: f64,
    /// Seconds per output token after the first (None if fewer than two tokens).
    pub decode_s_per_token: Option<f64>,
}

/// Predicted wall time of a request of `n` prompt tokens and `max_tokens` output tokens, from
/// the finished requests of the pass (None if there are none yet: the first request is sent).
///
/// TTFT: with two or more sizes, the larger of the non-negative `aN + bN²` fit and a power law
/// through the two largest sizes (exponent clamped to 1..2); with one size, `T₁ (N/N₁)²` above it
/// (all cost quadratic: an upper bound) and `T₁` at or below it. Decode: a non-negative
/// `c + dN` fit of seconds per token with two or more sizes, else `τ₁ · max(1, N/N₁)`. The
/// output is taken at its cap even though the server may stop early.
pub fn predict_s(done: &[Done], n: f64, max_tokens: usize) -> Option<f64> {
    let mut by_size: Vec<(f64, f64, Option<f64>)> = Vec::new();
    for d in done.iter().filter(|d| d.n > 0.0 && d.ttft_s.is_finite()) {
        match by_size.iter_mut().find(|s| s.0 == d.n) {
            Some(s) => {
                s.1 = s.1.max(d.ttft_s);
                s.2 = max_opt(s.2, d.decode_s_per_token);
            }
            None => by_size.push((d.n, d.ttft_s, d.decode_s_per_token)),
        }
    }
    by_size.sort_by(|x, y| x.0.total_cmp(&y.0));
    let (n_last, t_last, _) = *by_size.last()?;
    let ttft = if by_size.len() == 1 {
        if n > n_last {
            t_last * (n / n_last).powi(2)
        } else {
            t_last
        }
    } else {
        let pts: Vec<(f64, f64)> = by_size.iter().map(|s| (s.0, s.1)).collect();
        let fit = fit_nonnegative(&pts).map(|f| f.ttft_s(n)).unwrap_or(0.0);
        let (n0, t0) = pts[pts.len() - 2];
        let k = ((t_last / t0).ln() / (n_last / n0).ln()).clamp(1.0, 2.0);
        let power = if n > n_last {
            t_last * (n / n_last).powf(k)
        } else {
            t_last
        };
        fit.max(power)
    };
    let taus: Vec<(f64, f64)> = by_size
        .iter()
        .filter_map(|s| s.2.map(|t| (s.0, t)))
        .collect();
    let tau = match taus.len() {
        0 => 0.0,
        1 => taus[0].1 * (n / taus[0].0).max(1.0),
        _ => linear_nonnegative(&taus, n),
    };
    Some(ttft + tau * max_tokens.saturating_sub(1) as f64)
}

fn max_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// `c + dN` by least squares at `n`, with `d` kept non-negative; never below the largest
/// observation when extrapolating upwards.
fn linear_nonnegative(pts: &[(f64, f64)], n: f64) -> f64 {
    let m = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / m;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / m;
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let d = if sxx > 0.0 { (sxy / sxx).max(0.0) } else { 0.0 };
    let at = my + d * (n - mx);
    let (n_max, t_max) = pts
        .iter()
        .copied()
        .fold((0.0, 0.0), |a, p| if p.0 >= a.0 { p } else { a });
    if n >= n_max {
        at.max(t_max)
    } else {
        at.max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_follow_the_spec() {
        assert_eq!(default_repeats(1024), 3);
        assert_eq!(default_repeats(16384), 3);
        assert_eq!(default_repeats(32768), 2);
        assert_eq!(default_repeats(65536), 2);
        assert_eq!(default_repeats(131072), 1);
    }

    #[test]
    fn plan_sorts_caps_and_overrides() {
        assert_eq!(
            plan(&[4096, 1024, 1024, 131072], Some(65536), None).unwrap(),
            vec![(1024, 3), (4096, 3)]
        );
        assert_eq!(
            plan(&[512, 256], None, Some(1)).unwrap(),
            vec![(256, 1), (512, 1)]
        );
        assert!(plan(&[], None, None).is_err());
        assert!(plan(&[64], None, None).is_err());
        assert!(plan(&[MAX_SIZE + 1], None, None).is_err());
        assert_eq!(plan(&[MAX_SIZE], None, None).unwrap(), vec![(MAX_SIZE, 1)]);
        assert!(plan(&[1024], Some(512), None).is_err());
        assert!(plan(&[1024], None, Some(0)).is_err());
    }

    fn done(n: f64, ttft_s: f64, tau: f64) -> Done {
        Done {
            n,
            ttft_s,
            decode_s_per_token: Some(tau),
        }
    }

    #[test]
    fn nothing_known_means_no_prediction() {
        assert_eq!(predict_s(&[], 1024.0, 96), None);
    }

    #[test]
    fn one_size_extrapolates_quadratically() {
        // 1k: 10 s TTFT, 0.1 s per token; 2k: TTFT 40 s, decode 0.2 s/token x 95
        let p = predict_s(&[done(1000.0, 10.0, 0.1)], 2000.0, 96).unwrap();
        assert!((p - (40.0 + 0.2 * 95.0)).abs() < 1e-9, "{p}");
        // smaller or equal: the observation itself
        let p = predict_s(&[done(1000.0, 10.0, 0.1)], 1000.0, 1).unwrap();
        assert!((p - 10.0).abs() < 1e-9);
    }

    #[test]
    fn two_sizes_use_fit_or_power_law_whichever_is_larger() {
        // exactly T = N/200 + 1.5e-6 N^2 and tau = 0.2 + 1e-5 N
        let t = |n: f64| n / 200.0 + 1.5e-6 * n * n;
        let tau = |n: f64| 0.2 + 1e-5 * n;
        let d = [
            done(1000.0, t(1000.0), tau(1000.0)),
            done(2000.0, t(2000.0), tau(2000.0)),
        ];
        let n = 8000.0;
        let p = predict_s(&d, n, 11).unwrap();
        // the fit is exact here; the power law (k = log2(t(2k)/t(1k)) ~ 1.2) predicts less
        assert!((p - (t(n) + 10.0 * tau(n))).abs() < 1e-6, "{p}");
    }

    #[test]
    fn repeats_at_one_size_take_the_slowest() {
        let p = predict_s(
            &[done(1000.0, 10.0, 0.1), done(1000.0, 12.0, 0.2)],
            1000.0,
            2,
        )
        .unwrap();
        assert!((p - 12.2).abs() < 1e-9, "{p}");
    }
}
