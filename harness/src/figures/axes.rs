//! Log axes and series styles shared by the context figure: tick positions (powers of four of
//! positions, round durations), labels, ranges, and one colour and marker per scan or probe
//! label (serial blue circles, parallel red triangles). Pure helpers; no drawing of their own.

use plotters::prelude::*;

/// Colour of a scan or probe label: serial blue, parallel red, others from a small palette.
pub fn colour(label: &str, index: usize) -> RGBColor {
    match label {
        "serial" => RGBColor(31, 90, 200),
        "parallel" => RGBColor(210, 40, 40),
        _ => [
            RGBColor(20, 140, 60),
            RGBColor(150, 60, 170),
            RGBColor(220, 130, 0),
            RGBColor(60, 60, 60),
        ][index % 4],
    }
}

/// A marker per scan: circles for serial, triangles for parallel, crosses for others.
pub fn marker<DB: DrawingBackend, C: Clone + 'static>(
    label: &str,
    at: C,
    c: RGBColor,
) -> DynElement<'static, DB, C> {
    match label {
        "parallel" => TriangleMarker::new(at, 6, c.filled()).into_dyn(),
        "serial" => Circle::new(at, 5, c.filled()).into_dyn(),
        _ => Cross::new(at, 5, c.stroke_width(2)).into_dyn(),
    }
}

/// Tick positions: `base · 4^k` inside [lo, hi] (256, 1k, 4k, ... for positions).
pub fn ticks_x4(lo: f64, hi: f64, base: f64) -> Vec<f64> {
    let mut v = Vec::new();
    let mut t = base;
    while t > lo && t > 1.0 {
        t /= 4.0;
    }
    for _ in 0..64 {
        if t > hi {
            break;
        }
        if t >= lo {
            v.push(t);
        }
        t *= 4.0;
    }
    v
}

/// Round durations for a log time axis, inside [lo, hi] seconds.
pub fn ticks_time(lo: f64, hi: f64) -> Vec<f64> {
    [
        0.01,
        0.1,
        1.0,
        10.0,
        60.0,
        600.0,
        3600.0,
        36_000.0,
        360_000.0,
        3_600_000.0,
        36_000_000.0,
    ]
    .into_iter()
    .filter(|t| *t >= lo && *t <= hi)
    .collect()
}

/// `n` points evenly spaced on a log axis over [lo, hi].
pub fn log_space(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let (a, b) = (lo.ln(), hi.ln());
    (0..n)
        .map(|i| (a + (b - a) * i as f64 / (n - 1).max(1) as f64).exp())
        .collect()
}

/// A log range around positive finite values (None if there are none).
pub fn log_range(values: impl Iterator<Item = f64>, pad: f64) -> Option<(f64, f64)> {
    let (lo, hi) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(l, h), v| (l.min(v), h.max(v)));
    (hi > 0.0).then(|| {
        if lo == hi {
            (lo / 2.0, hi * 2.0)
        } else {
            (lo / pad, hi * pad)
        }
    })
}

pub fn positions_label(v: f64) -> String {
    if v >= 1_048_576.0 {
        format!("{:.0}M", v / 1_048_576.0)
    } else if v >= 1024.0 {
        format!("{:.0}k", v / 1024.0)
    } else {
        format!("{v:.0}")
    }
}

pub fn seconds_label(v: f64) -> String {
    if v >= 3600.0 {
        format!("{:.0} h", v / 3600.0)
    } else if v >= 60.0 {
        format!("{:.0} min", v / 60.0)
    } else if v >= 1.0 {
        format!("{v:.0} s")
    } else if v >= 0.1 {
        format!("{v:.1} s")
    } else {
        format!("{v:.2} s")
    }
}

/// A predicted duration: minutes under an hour, else hours with one decimal.
pub fn duration_label(s: f64) -> String {
    if s < 3600.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_labels_and_ranges() {
        let v = log_space(1.0, 100.0, 3);
        assert!((v[1] - 10.0).abs() < 1e-9);
        assert_eq!(log_range([0.0, -1.0, f64::NAN].into_iter(), 2.0), None);
        assert_eq!(log_range([4.0].into_iter(), 2.0), Some((2.0, 8.0)));
        assert_eq!(positions_label(131072.0), "128k");
        assert_eq!(positions_label(1048576.0), "1M");
        assert_eq!(seconds_label(26640.0), "7 h");
        assert_eq!(duration_label(26640.0), "7.4 h");
        assert_eq!(duration_label(360.0), "6 min");
        assert_eq!(
            ticks_x4(300.0, 2e6, 1024.0),
            vec![1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0]
        );
        assert_eq!(ticks_x4(100.0, 300.0, 1024.0), vec![256.0]);
        assert_eq!(
            ticks_time(0.5, 4000.0),
            vec![1.0, 10.0, 60.0, 600.0, 3600.0]
        );
    }
}
