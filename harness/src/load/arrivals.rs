//! When each request of an open-loop run is due (docs/MEASUREMENTS.md §9): a seeded arrival
//! process in units of expected arrivals, mapped to seconds by a rate profile.
//!
//! - The process: `constant` (one arrival per unit), `poisson` (exponential gaps of mean 1),
//!   `gamma` (gamma gaps of mean 1 and shape `burstiness`: 1 is Poisson, below 1 burstier, above 1
//!   more regular; the coefficient of variation of a gap is 1/√burstiness).
//! - The profile: a fixed rate `r` (unit s is at s / r seconds), or a linear ramp from `r0` to
//!   `r1` over the time the schedule's n arrivals are expected to take (T = 2n / (r0 + r1)), the
//!   rate staying at `r1` past T.
//!
//! The gaps are drawn, then scaled together so that the n arrivals span exactly n − 1 units: the
//! process conditioned on its span (for Poisson, its arrival times are then those of n uniform
//! points in order, as a Poisson process conditioned on its count). A fixed-rate step thus offers
//! the rate it asks, (n − 1) / (last due − first due), whatever the seed. Unconditioned, the seed's
//! draw scaled every step of a search alike, each offering the same multiple of the rate it named,
//! so the rates a search reported were not the loads it put on the server.
//!
//! The first request is due at 0. The same seed gives the same schedule on every host.

use moefleet_engine::rng::Rng;

/// The arrival process.
#[derive(Clone, Copy, Debug, PartialEq, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Process {
    Constant,
    Poisson,
    Gamma,
}

/// A schedule's parameters, as recorded beside its run.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Pattern {
    pub process: Process,
    /// Requests per second (at the start of a ramp).
    pub rate: f64,
    /// The rate at the end of a ramp (None: a fixed rate).
    pub rate_end: Option<f64>,
    /// The gamma process's shape (ignored by the others).
    pub burstiness: f64,
    pub seed: u64,
}

impl Pattern {
    /// The parameters are usable: positive, finite rates and shape.
    pub fn check(&self) -> Result<(), String> {
        let ok = |x: f64| x.is_finite() && x > 0.0;
        if !ok(self.rate) {
            return Err(format!(
                "the rate must be a positive number of requests/s, not {}",
                self.rate
            ));
        }
        if let Some(r) = self.rate_end {
            if !ok(r) {
                return Err(format!("the ramp's end rate must be positive, not {r}"));
            }
        }
        if self.process == Process::Gamma && !ok(self.burstiness) {
            return Err(format!(
                "burstiness must be positive, not {}",
                self.burstiness
            ));
        }
        Ok(())
    }

    /// The due times, in seconds from the run's start, of `n` requests (non-decreasing).
    pub fn schedule(&self, n: usize) -> Vec<f64> {
        let mut rng = Rng::new(self.seed ^ 0x6172_7269_7661_6c73); // "arrivals"
        let gaps: Vec<f64> = (1..n)
            .map(|_| match self.process {
                Process::Constant => 1.0,
                Process::Poisson => exponential(&mut rng),
                Process::Gamma => gamma(&mut rng, self.burstiness) / self.burstiness,
            })
            .collect();
        // conditioned on the span (module header): n arrivals over exactly n − 1 units
        let total: f64 = gaps.iter().sum();
        let scale = if total > 0.0 {
            gaps.len() as f64 / total
        } else {
            1.0
        };
        let mut s = 0.0f64;
        let mut out = Vec::with_capacity(n);
        out.extend((n > 0).then(|| self.seconds(0.0, n)));
        for g in gaps {
            s += g * scale;
            out.push(self.seconds(s, n));
        }
        out
    }

    /// Seconds at which `s` arrivals are expected, under this profile for a schedule of `n`.
    fn seconds(&self, s: f64, n: usize) -> f64 {
        let r0 = self.rate;
        let Some(r1) = self.rate_end.filter(|&r1| r1 != r0) else {
            return s / r0;
        };
        let t_end = 2.0 * n as f64 / (r0 + r1);
        if s >= n as f64 {
            return t_end + (s - n as f64) / r1;
        }
        // Λ(t) = r0·t + a·t² with a = (r1 − r0) / (2T); Λ(t) = s, the root that is ≥ 0
        let a = (r1 - r0) / (2.0 * t_end);
        2.0 * s / (r0 + (r0 * r0 + 4.0 * a * s).sqrt())
    }
}

/// A uniform draw in (0, 1].
fn unit(rng: &mut Rng) -> f64 {
    ((rng.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
}

/// Exponential of mean 1.
fn exponential(rng: &mut Rng) -> f64 {
    -unit(rng).ln()
}

/// A standard normal (Box–Muller, one of the pair).
fn normal(rng: &mut Rng) -> f64 {
    let (u, v) = (unit(rng), unit(rng));
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

/// Gamma of shape `k` and scale 1 (Marsaglia and Tsang, 2000; for k < 1 a draw of shape k + 1
/// times U^(1/k)).
fn gamma(rng: &mut Rng, k: f64) -> f64 {
    if k < 1.0 {
        return gamma(rng, k + 1.0) * unit(rng).powf(1.0 / k);
    }
    let d = k - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = normal(rng);
        let v = (1.0 + c * x).powi(3);
        if v <= 0.0 {
            continue;
        }
        let u = unit(rng);
        if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(process: Process, rate: f64) -> Pattern {
        Pattern {
            process,
            rate,
            rate_end: None,
            burstiness: 1.0,
            seed: 1,
        }
    }

    /// Gaps of a schedule.
    fn gaps(t: &[f64]) -> Vec<f64> {
        t.windows(2).map(|w| w[1] - w[0]).collect()
    }

    #[test]
    fn constant_is_exact_and_seeds_reproduce() {
        let t = pattern(Process::Constant, 4.0).schedule(5);
        assert_eq!(t, [0.0, 0.25, 0.5, 0.75, 1.0]);
        let p = pattern(Process::Poisson, 4.0);
        assert_eq!(p.schedule(50), p.schedule(50));
        let other = Pattern { seed: 2, ..p };
        assert_ne!(p.schedule(50), other.schedule(50));
    }

    /// The mean gap of n = 20 000 draws is 1/r (by the conditioning on the span; unconditioned it
    /// would lie within five standard errors, 5σ/(r√n)), and the gaps' coefficient of variation
    /// is the process's: 1 for Poisson, 1/√k for gamma gaps of shape k.
    #[test]
    fn mean_rate_and_burstiness_are_what_was_asked() {
        let n = 20_000;
        for (process, k) in [
            (Process::Poisson, 1.0),
            (Process::Gamma, 0.25),
            (Process::Gamma, 1.0),
            (Process::Gamma, 4.0),
        ] {
            let p = Pattern {
                burstiness: k,
                ..pattern(process, 8.0)
            };
            let g = gaps(&p.schedule(n + 1));
            let mean = g.iter().sum::<f64>() / n as f64;
            let cv_want = if process == Process::Poisson {
                1.0
            } else {
                1.0 / f64::sqrt(k)
            };
            let bound = 5.0 * cv_want / 8.0 / (n as f64).sqrt();
            assert!(
                (mean - 0.125).abs() < bound,
                "{process:?} k={k}: mean gap {mean}"
            );
            let sd = (g.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64).sqrt();
            let cv = sd / mean;
            // the CV's own spread is larger for heavy tails; 10 % is over 5 standard errors at
            // n = 20 000 for every shape here (the sample variance's relative error is about
            // sqrt((kurtosis − 1)/n), kurtosis 3 + 6/k, so at most ~0.05 for k = 0.25)
            assert!(
                (cv / cv_want - 1.0).abs() < 0.1,
                "{process:?} k={k}: CV {cv}"
            );
            assert!(g.iter().all(|&x| x >= 0.0));
        }
    }

    /// Every process offers exactly the rate asked: n requests span (n − 1) / rate seconds.
    #[test]
    fn a_step_offers_the_rate_it_asks() {
        for process in [Process::Constant, Process::Poisson, Process::Gamma] {
            for (n, seed) in [(64, 1), (64, 2), (5, 7)] {
                let p = Pattern {
                    burstiness: 0.5,
                    seed,
                    ..pattern(process, 1.25)
                };
                let t = p.schedule(n);
                let span = t[n - 1] - t[0];
                assert!(
                    (span - (n - 1) as f64 / 1.25).abs() < 1e-9,
                    "{process:?} n={n}: {span}"
                );
            }
        }
        assert_eq!(pattern(Process::Poisson, 2.0).schedule(1), vec![0.0]);
        assert!(pattern(Process::Poisson, 2.0).schedule(0).is_empty());
    }

    #[test]
    fn a_ramp_meets_its_rates_and_its_duration() {
        let p = Pattern {
            rate_end: Some(9.0),
            ..pattern(Process::Constant, 1.0)
        };
        let n = 500;
        let t = p.schedule(n);
        // the n-th expected arrival (index n−1 at s = n−1) is just before T = 2n/(r0 + r1) = 100 s
        assert!((t[n - 1] - 100.0).abs() < 0.2, "{}", t[n - 1]);
        let g = gaps(&t);
        assert!(
            (1.0 / g[0] - 1.0).abs() < 0.05,
            "starts at 1/s: {}",
            1.0 / g[0]
        );
        assert!(
            (1.0 / g[n - 2] - 9.0).abs() < 0.1,
            "ends at 9/s: {}",
            1.0 / g[n - 2]
        );
        assert!(
            g.windows(2).all(|w| w[1] <= w[0] + 1e-12),
            "the gaps shrink"
        );
    }

    #[test]
    fn bad_parameters_are_refused() {
        assert!(pattern(Process::Poisson, 0.0).check().is_err());
        assert!(pattern(Process::Poisson, f64::NAN).check().is_err());
        let g = Pattern {
            burstiness: 0.0,
            ..pattern(Process::Gamma, 1.0)
        };
        assert!(g.check().unwrap_err().contains("burstiness"));
        assert!(pattern(Process::Constant, 2.0).check().is_ok());
    }
}
