//! The statistics every experiment shares: the type-7 quantile (numpy's default), the mean, the
//! population standard deviation, the median of the finite values, and order-statistic summaries
//! of repeated timings (median, p10 / p90, extremes).

use serde::Serialize;

/// Type-7 quantile (numpy's default): `pos = (len − 1)·q`, linear between the neighbours.
pub fn quantile(xs: &[f64], q: f64) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let pos = (v.len() - 1) as f64 * q;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    Some(v[lo] + (v[hi] - v[lo]) * (pos - lo as f64))
}

/// Arithmetic mean, left to right (None: empty).
pub fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Population standard deviation (0 for an empty sample).
pub fn pstdev(v: &[f64]) -> f64 {
    match mean(v) {
        Some(m) => (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / v.len() as f64).sqrt(),
        None => 0.0,
    }
}

/// Median of the finite values (NaN when there are none).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    quantile(&v, 0.5).unwrap_or(f64::NAN)
}

/// Order statistics of one sample (all in the sample's own unit).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
    pub min: f64,
    pub max: f64,
}

impl Summary {
    /// None for an empty sample; non-finite values are dropped first.
    pub fn of(xs: &[f64]) -> Option<Summary> {
        let v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
        Some(Summary {
            n: v.len(),
            median: quantile(&v, 0.5)?,
            p10: quantile(&v, 0.1)?,
            p90: quantile(&v, 0.9)?,
            min: v.iter().copied().fold(f64::INFINITY, f64::min),
            max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_7_quantiles() {
        let xs = [4.0, 1.0, 3.0, 2.0];
        assert_eq!(quantile(&xs, 0.5), Some(2.5));
        assert!((quantile(&xs, 0.95).unwrap() - 3.85).abs() < 1e-12); // pos 2.85
        assert_eq!(quantile(&[7.0], 0.95), Some(7.0));
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&xs, 0.0), Some(1.0));
        assert_eq!(quantile(&xs, 1.0), Some(4.0));
    }

    #[test]
    fn summary_of_a_small_sample() {
        let s = Summary::of(&[5.0, 1.0, 3.0, f64::NAN, 2.0, 4.0]).unwrap();
        assert_eq!(s.n, 5);
        assert_eq!(s.median, 3.0);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 5.0);
        assert!((s.p10 - 1.4).abs() < 1e-12);
        assert!((s.p90 - 4.6).abs() < 1e-12);
        assert!(Summary::of(&[]).is_none());
        assert!(Summary::of(&[f64::NAN]).is_none());
    }

    #[test]
    fn mean_sd_and_median() {
        assert_eq!(mean(&[]), None);
        assert_eq!(mean(&[1.0, 2.0, 6.0]), Some(3.0));
        assert!((pstdev(&[1.0, 3.0]) - 1.0).abs() < 1e-15);
        assert_eq!(median(vec![f64::NAN, 3.0, 1.0]), 2.0);
        assert!(median(vec![f64::NAN]).is_nan());
    }
}
