//! The plain-language verdict of the dense experiment and its explanation from the measurements
//! (bytes read, compressed-matrix calls, threads, read rates); pure functions of the results.

use super::measure::{Breakdown, PathCost};
use super::table::DenseRow;

/// What the explanation is built from.
pub struct Inputs<'a> {
    pub rows: &'a [DenseRow],
    pub three: PathCost,
    pub fused: PathCost,
    pub threads: usize,
    pub hidden: usize,
    pub dense_width: usize,
    /// Median read bandwidth at this thread count (from `ceilings.json`), GB/s.
    pub bandwidth_gbs: Option<f64>,
    /// The bare products of each case, in the order of `rows`.
    pub breakdowns: &'a [Breakdown],
}

/// (fused faster in every case, one sentence saying so plainly).
pub fn verdict(rows: &[DenseRow]) -> (bool, String) {
    let (lo, hi) = range(rows.iter().map(|r| r.reduction_pct));
    let faster = rows.iter().filter(|r| r.fused_ms < r.matrix_ms).count();
    let all = !rows.is_empty() && faster == rows.len();
    let text = if all {
        format!(
            "The fused-slices path IS faster on this CPU in all {} cases: reduction {lo:.1} to {hi:.1} %.",
            rows.len()
        )
    } else if faster == 0 {
        format!(
            "The fused-slices path is NOT faster on this CPU: reduction {lo:.1} to {hi:.1} % over {} cases (negative = fused slower).",
            rows.len()
        )
    } else {
        format!(
            "The fused-slices path is NOT faster on this CPU in every case: faster in {faster} of {} cases, reduction {lo:.1} to {hi:.1} %.",
            rows.len()
        )
    };
    (all, text)
}

fn range(v: impl Iterator<Item = f64>) -> (f64, f64) {
    v.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    })
}

/// (range of the first, range of the second) of pairs.
fn range2(v: impl Iterator<Item = (f64, f64)>) -> ((f64, f64), (f64, f64)) {
    let v: Vec<(f64, f64)> = v.collect();
    (range(v.iter().map(|p| p.0)), range(v.iter().map(|p| p.1)))
}

/// "a" or "a-b" in ms with one decimal.
fn span((lo, hi): (f64, f64)) -> String {
    if (hi - lo).abs() < 0.05 {
        format!("{lo:.1}")
    } else {
        format!("{lo:.1} to {hi:.1}")
    }
}

/// Why the two paths compare as they do, from the measured numbers.
pub fn explain(i: &Inputs<'_>) -> String {
    let mb = |b: usize| {
        format!(
            "{:.prec$}",
            b as f64 / 1e6,
            prec = if b < 10_000_000 { 3 } else { 1 }
        )
    };
    let gbs = |bytes: usize, ms: f64| bytes as f64 / (ms * 1e-3) / 1e9;
    let n_slices = i.fused.matrix_calls / 3;
    let mut s = String::new();
    if i.three.bytes == i.fused.bytes {
        s += &format!(
            "Both paths read the same {} MB of INT4 weights and f16 scales per call (the {n_slices} slices partition the gate, up and down matrices at group boundaries), so the fused form saves no memory traffic. ",
            mb(i.three.bytes)
        );
    } else {
        s += &format!(
            "Per call the three-matmul path reads {} MB and the fused path {} MB of weights and scales. ",
            mb(i.three.bytes),
            mb(i.fused.bytes)
        );
    }
    s += &format!(
        "The three-matmul path makes {} compressed-matrix calls ([{w}, {h}], [{w}, {h}], [{h}, {w}]); the fused path makes {} ({n_slices} slices x gate/up/down, each [{ws}, {h}] or [{h}, {ws}]), each one a kernel invocation of its own (on the {}-thread rayon pool: its own fork/join when the engine splits it), with its own output buffers and f16 rounding passes. ",
        i.three.matrix_calls,
        i.fused.matrix_calls,
        i.threads,
        w = i.dense_width,
        h = i.hidden,
        ws = i.dense_width / n_slices.max(1),
    );
    let (t_lo, t_hi) = range(i.rows.iter().map(|r| gbs(i.three.bytes, r.matrix_ms)));
    let (f_lo, f_hi) = range(i.rows.iter().map(|r| gbs(i.fused.bytes, r.fused_ms)));
    s += &format!(
        "Measured weight-read rate: three-matmul {t_lo:.1}-{t_hi:.1} GB/s, fused {f_lo:.1}-{f_hi:.1} GB/s"
    );
    match i.bandwidth_gbs {
        Some(bw) if bw > 0.0 => {
            s += &format!(
                ", against a measured {}-thread read bandwidth of {bw:.1} GB/s ({:.0}-{:.0} % and {:.0}-{:.0} % of it). ",
                i.threads,
                100.0 * t_lo / bw,
                100.0 * t_hi / bw,
                100.0 * f_lo / bw,
                100.0 * f_hi / bw
            );
            if 100.0 * t_hi / bw >= 70.0 {
                s += "The three-matmul path is already close to the memory ceiling, so a form that reads the same bytes has little to win on this machine. ";
            }
        }
        _ => s += " (run `ceilings` to compare with this machine's read bandwidth). ",
    }
    if !i.breakdowns.is_empty() {
        let (g3, gf) = range2(
            i.breakdowns
                .iter()
                .map(|b| (b.three_ms[0] + b.three_ms[1], b.fused_ms[0] + b.fused_ms[1])),
        );
        let (d3, df) = range2(i.breakdowns.iter().map(|b| (b.three_ms[2], b.fused_ms[2])));
        let (w3, wf) = range2(i.rows.iter().zip(i.breakdowns).map(|(r, b)| {
            (
                r.matrix_ms - b.three_ms.iter().sum::<f64>(),
                r.fused_ms - b.fused_ms.iter().sum::<f64>(),
            )
        }));
        s += &format!(
            "Timing the bare products alone: gate + up take {} ms as two whole matrices and {} ms as {n_slices} x 2 slices; down takes {} ms whole and {} ms as {n_slices} column slices; everything else in a call (f16 rounding, SwiGLU, buffers, accumulation) takes {} ms with three-matmul and {} ms with fused slices. ",
            span(g3), span(gf), span(d3), span(df), span(w3), span(wf)
        );
        if df.0 > 1.2 * d3.1 {
            s += &format!(
                "The down column slices are the costly part: a slice row is {} bytes of nibbles taken out of a {}-byte stored row, so each of the {n_slices} slices walks the matrix with a stride instead of streaming it. ",
                i.dense_width / n_slices.max(1) / 2,
                i.dense_width / 2
            );
        }
    }
    let close = i
        .rows
        .iter()
        .all(|r| r.reduction_pct.abs() < 5.0 && r.reduction_pct.is_finite());
    if close {
        s += "The two forms are within 5 % of each other in every case: the difference is per-call overhead, not bytes. ";
    }
    s += "The paper's reduction was measured on an Arc B390 GPU; this is a CPU measurement of the same two forms and says nothing about that device.";
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(matrix_ms: f64, fused_ms: f64) -> DenseRow {
        DenseRow {
            backend: None,
            layer: 0,
            rows: 1,
            matrix_ms,
            fused_ms,
            reduction_pct: super::super::table::reduction_pct(matrix_ms, fused_ms),
            cosine: Some(1.0),
            relative_difference: Some(0.0),
        }
    }

    #[test]
    fn verdicts_say_it_plainly() {
        let (all, t) = verdict(&[row(10.0, 11.0), row(10.0, 10.5)]);
        assert!(!all && t.contains("is NOT faster") && t.contains("-10.0 to -5.0 %"));
        let (all, t) = verdict(&[row(10.0, 9.0), row(10.0, 11.0)]);
        assert!(!all && t.contains("faster in 1 of 2"));
        let (all, t) = verdict(&[row(10.0, 5.0)]);
        assert!(all && t.contains("IS faster") && t.contains("50.0 to 50.0"));
    }

    #[test]
    fn explanation_uses_the_measurements() {
        let rows = [row(25.0, 25.5)];
        let cost = PathCost {
            bytes: 250_000_000,
            matrix_calls: 3,
        };
        let fused = PathCost {
            bytes: 250_000_000,
            matrix_calls: 24,
        };
        let i = Inputs {
            rows: &rows,
            three: cost,
            fused,
            threads: 2,
            hidden: 6144,
            dense_width: 24576,
            bandwidth_gbs: Some(12.5),
            breakdowns: &[Breakdown {
                three_ms: [5.0, 5.0, 10.0],
                fused_ms: [6.0, 6.0, 12.0],
                calls: 5,
            }],
        };
        let n = explain(&i);
        assert!(n.contains("same 250.0 MB"), "{n}");
        assert!(n.contains("makes 24 (8 slices"), "{n}");
        assert!(n.contains("three-matmul 10.0-10.0 GB/s"), "{n}");
        assert!(n.contains("(80-80 % and"), "{n}");
        assert!(n.contains("close to the memory ceiling"), "{n}");
        assert!(n.contains("within 5 %"), "{n}");
        assert!(
            n.contains("gate + up take 10.0 ms as two whole matrices and 12.0 ms"),
            "{n}"
        );
        assert!(
            n.contains("takes 5.0 ms with three-matmul and 1.5 ms with fused"),
            "{n}"
        );
        assert!(!n.contains("costly part"), "{n}");
        let slow_down = [Breakdown {
            three_ms: [5.0, 5.0, 10.0],
            fused_ms: [5.0, 5.0, 30.0],
            calls: 5,
        }];
        let n = explain(&Inputs {
            breakdowns: &slow_down,
            ..i
        });
        assert!(
            n.contains("a slice row is 1536 bytes of nibbles taken out of a 12288-byte"),
            "{n}"
        );
        let n = explain(&Inputs {
            bandwidth_gbs: None,
            ..i
        });
        assert!(n.contains("run `ceilings`"), "{n}");
    }
}
