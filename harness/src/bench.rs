//! Summaries of repeated timings (kernel-level experiments: `ceilings`, `dense`, `dense-stage`):
//! median, p10 / p90 and extremes of a sample, with the type-7 quantile of `analysis::metrics`.

use serde::Serialize;

use crate::analysis::metrics::quantile;

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

/// Logical CPUs this process may use (1 if unknown).
pub fn logical_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
