//! Pure parts of the dense experiment (MEASUREMENTS.md §4): the agreement of two outputs and the
//! rows of `dense.csv`, in the columns of the paper's `results/dense.csv`.

use crate::csv::Table;

/// Columns of `dense.csv`, exactly the paper's; a run over several backends leads with `backend`.
pub const HEADER: &str = "layer,rows,matrix_ms,fused_ms,reduction_pct,cosine,relative_difference";

/// `a·b / (‖a‖‖b‖)` in f64; None if either vector is zero, the lengths differ, or a value is
/// not finite.
pub fn cosine(a: &[f32], b: &[f32]) -> Option<f64> {
    if a.len() != b.len() {
        return None;
    }
    let (mut ab, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (x as f64, y as f64);
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    let c = ab / (aa.sqrt() * bb.sqrt());
    (aa > 0.0 && bb > 0.0 && c.is_finite()).then_some(c)
}

/// `‖a − b‖₂ / ‖b‖₂` in f64 (b is the reference); None as for [`cosine`].
pub fn relative_difference(a: &[f32], b: &[f32]) -> Option<f64> {
    if a.len() != b.len() {
        return None;
    }
    let (mut dd, mut bb) = (0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        let d = x as f64 - y as f64;
        dd += d * d;
        bb += (y as f64) * (y as f64);
    }
    let r = dd.sqrt() / bb.sqrt();
    (bb > 0.0 && r.is_finite()).then_some(r)
}

/// `100 · (1 − fused / matrix)`: positive when the fused path is faster.
pub fn reduction_pct(matrix_ms: f64, fused_ms: f64) -> f64 {
    100.0 * (1.0 - fused_ms / matrix_ms)
}

/// One row of `dense.csv`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct DenseRow {
    /// `native` or `openvino` (None: a record from before the backend column).
    pub backend: Option<String>,
    pub layer: usize,
    pub rows: usize,
    /// Median of one three-matmul call, ms.
    pub matrix_ms: f64,
    /// Median of one fused-slices call, ms.
    pub fused_ms: f64,
    pub reduction_pct: f64,
    /// None when an output is zero or not finite (written as `nan`).
    pub cosine: Option<f64>,
    pub relative_difference: Option<f64>,
}

impl DenseRow {
    fn line(&self) -> String {
        let opt = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or("nan".to_string(), f);
        let lead = self
            .backend
            .as_ref()
            .map_or(String::new(), |b| format!("{b},"));
        format!(
            "{lead}{},{},{:.4},{:.4},{:.3},{},{}",
            self.layer,
            self.rows,
            self.matrix_ms,
            self.fused_ms,
            self.reduction_pct,
            opt(self.cosine, &|c| format!("{c:.9}")),
            opt(self.relative_difference, &|r| format!("{r:.4e}")),
        )
    }
}

/// The text of `dense.csv` (with the `backend` column when the rows name one).
pub fn csv(rows: &[DenseRow]) -> String {
    let mut out = if rows.iter().any(|r| r.backend.is_some()) {
        format!("backend,{HEADER}")
    } else {
        String::from(HEADER)
    };
    out.push('\n');
    for r in rows {
        out += &r.line();
        out.push('\n');
    }
    out
}

/// `dense.csv` tabulated afresh from a `dense.json` record: each path's median from its per-call
/// samples, the reduction from the two medians; cosine and relative difference are measured
/// values the record keeps (the outputs are not kept) and are taken as recorded. For `verify`.
pub fn csv_from_record(record: &serde_json::Value) -> anyhow::Result<String> {
    use anyhow::Context;
    let cases = record["cases"].as_array().context("no cases array")?;
    let median = |c: &serde_json::Value, path: &str| -> anyhow::Result<f64> {
        let xs: Vec<f64> = c[path]["samples_ms"]
            .as_array()
            .with_context(|| format!("no {path} samples"))?
            .iter()
            .filter_map(serde_json::Value::as_f64)
            .collect();
        Ok(crate::stats::Summary::of(&xs)
            .with_context(|| format!("no valid {path} samples"))?
            .median)
    };
    let rows = cases
        .iter()
        .map(|c| {
            let (m, f) = (median(c, "three_matmul")?, median(c, "fused_slices")?);
            Ok(DenseRow {
                backend: c["backend"].as_str().map(str::to_string),
                layer: c["layer"].as_u64().context("no layer")? as usize,
                rows: c["rows"].as_u64().context("no rows")? as usize,
                matrix_ms: m,
                fused_ms: f,
                reduction_pct: reduction_pct(m, f),
                cosine: c["cosine"].as_f64(),
                relative_difference: c["relative_difference"].as_f64(),
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(csv(&rows))
}

/// One (layer, rows) case of a dense table: (three-matmul ms, fused ms), ours or the paper's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DenseCase {
    /// The `backend` column's value (None: a table without it, such as the paper's).
    pub backend: Option<&'static str>,
    pub layer: usize,
    pub rows: usize,
    pub matrix_ms: f64,
    pub fused_ms: f64,
}

/// The (layer, rows, matrix_ms, fused_ms) of a dense table in the paper's columns, with the
/// backend where the table has that column (`native` or `openvino`).
pub fn cases(t: &Table) -> anyhow::Result<Vec<DenseCase>> {
    let b = t.index("backend").ok();
    let (l, r, m, f) = (
        t.index("layer")?,
        t.index("rows")?,
        t.index("matrix_ms")?,
        t.index("fused_ms")?,
    );
    t.rows
        .iter()
        .map(|row| {
            let backend = match b.map(|b| row[b].as_str()) {
                None => None,
                Some("native") => Some("native"),
                Some("openvino") => Some("openvino"),
                Some(other) => anyhow::bail!("unknown backend {other:?} in a dense table"),
            };
            Ok(DenseCase {
                backend,
                layer: t.num(row, l)? as usize,
                rows: t.num(row, r)? as usize,
                matrix_ms: t.num(row, m)?,
                fused_ms: t.num(row, f)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_and_relative_difference() {
        let b = [1.0f32, 2.0, 2.0];
        assert!((cosine(&b, &b).unwrap() - 1.0).abs() < 1e-15);
        assert_eq!(relative_difference(&b, &b), Some(0.0));
        let a = [1.0f32, 2.0, 4.0]; // a − b = (0, 0, 2), ‖b‖ = 3
        assert!((relative_difference(&a, &b).unwrap() - 2.0 / 3.0).abs() < 1e-15);
        // a·b = 13, ‖a‖ = √21, ‖b‖ = 3
        assert!((cosine(&a, &b).unwrap() - 13.0 / (21f64.sqrt() * 3.0)).abs() < 1e-15);
        assert!((cosine(&[1.0, 0.0], &[-1.0, 0.0]).unwrap() + 1.0).abs() < 1e-15);
        assert_eq!(cosine(&[0.0, 0.0], &b[..2]), None);
        assert_eq!(relative_difference(&b, &[0.0; 3]), None);
        assert_eq!(cosine(&[f32::INFINITY, 1.0], &[1.0, 1.0]), None);
        assert_eq!(relative_difference(&[f32::NAN, 1.0], &[1.0, 1.0]), None);
        assert_eq!(cosine(&b, &b[..2]), None);
    }

    #[test]
    fn reduction_matches_the_papers_arithmetic() {
        // paper row 0,1: 8.15 -> 4.51 ms is 44.66257668711657 %
        assert!((reduction_pct(8.15, 4.51) - 44.66257668711657).abs() < 1e-9);
        assert!(reduction_pct(10.0, 11.0) < 0.0);
    }

    #[test]
    fn csv_has_the_papers_columns_and_reads_back() {
        let rows = [
            DenseRow {
                backend: None,
                layer: 0,
                rows: 1,
                matrix_ms: 30.123456,
                fused_ms: 31.5,
                reduction_pct: reduction_pct(30.123456, 31.5),
                cosine: Some(0.9999998),
                relative_difference: Some(5.7e-4),
            },
            DenseRow {
                backend: None,
                layer: 1,
                rows: 2,
                matrix_ms: 1.0,
                fused_ms: 0.5,
                reduction_pct: 50.0,
                cosine: None,
                relative_difference: None,
            },
        ];
        let text = csv(&rows);
        assert_eq!(
            text,
            "layer,rows,matrix_ms,fused_ms,reduction_pct,cosine,relative_difference\n\
             0,1,30.1235,31.5000,-4.570,0.999999800,5.7000e-4\n\
             1,2,1.0000,0.5000,50.000,nan,nan\n"
        );
        let t = Table::parse(&text);
        let c = cases(&t).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!((c[1].layer, c[1].rows, c[1].fused_ms), (1, 2, 0.5));
        assert_eq!(t.col("relative_difference").unwrap()[0], Some(5.7e-4));
        let paper = Table::parse(
            "layer,rows,matrix_ms,fused_ms,reduction_pct,cosine,relative_difference\n\
             0,1,8.15,4.51,44.66257668711657,0.999999,0.00057\n",
        );
        assert_eq!(cases(&paper).unwrap()[0].matrix_ms, 8.15);
        assert!(cases(&Table::parse("a,b\n1,2\n")).is_err());
        // a run over both backends leads with the column, and its values read back
        let mut both = rows.to_vec();
        both[0].backend = Some("native".into());
        both[1].backend = Some("openvino".into());
        let text = csv(&both);
        assert!(text.starts_with("backend,layer,rows,"), "{text}");
        let c = cases(&Table::parse(&text)).unwrap();
        assert_eq!(
            (c[0].backend, c[1].backend),
            (Some("native"), Some("openvino"))
        );
        assert!(cases(&Table::parse(&text.replace("openvino", "cuda"))).is_err());
    }
}
