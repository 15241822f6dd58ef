//! Plain f32 matrices `W [rows (outputs), cols (inputs)]` and their batched product
//! `y[r, o] = Σ_c W[o, c] · x[r, c]` (the draft head's original form, and its deployment grids
//! dequantised to f32: ARCHITECTURE.md §1.7, MEASUREMENTS.md §5). The product is a blocked SGEMM
//! (`matrixmultiply`); its plain twin is `reference::linear_matmul`.

use half::f16;

use super::int4::Int4Matrix;
use super::int8::Int8Matrix;

#[derive(Clone, Debug, PartialEq)]
pub struct Linear {
    pub rows: usize,
    pub cols: usize,
    /// [rows, cols] row-major.
    pub w: Vec<f32>,
}

impl Linear {
    /// Panics if `w.len() != rows * cols` (a construction bug, never input).
    pub fn new(rows: usize, cols: usize, w: Vec<f32>) -> Self {
        assert_eq!(w.len(), rows * cols, "Linear {rows} x {cols}");
        Linear { rows, cols, w }
    }

    /// Round to INT8 per output row (`q · s`, s an f16 row scale, q in −127..127) and back.
    pub fn int8_grid(&self) -> Linear {
        Linear::new(
            self.rows,
            self.cols,
            dequantize_int8(&Int8Matrix::quantize(self.rows, self.cols, &self.w)),
        )
    }

    /// Round to INT4 groups of 32 along the input (`(q − 8) · s`, f16 group scales) and back.
    /// Panics unless `cols` is a multiple of 32.
    pub fn int4_grid(&self) -> Linear {
        let m = Int4Matrix::quantize(self.rows, self.cols, &self.w);
        let v = m.view();
        let mut w = Vec::with_capacity(self.rows * self.cols);
        for o in 0..self.rows {
            for c in 0..self.cols {
                w.push(v.weight(o, c));
            }
        }
        Linear::new(self.rows, self.cols, w)
    }
}

/// The f32 values of an INT8 per-row matrix.
pub fn dequantize_int8(m: &Int8Matrix) -> Vec<f32> {
    let mut w = Vec::with_capacity(m.rows * m.cols);
    for (row, s) in m.q.chunks_exact(m.cols).zip(&m.scales) {
        let s = f16::to_f32(*s);
        w.extend(row.iter().map(|&q| q as f32 * s));
    }
    w
}

/// `y = x · wᵀ` for x [n, w.cols] and y [n, w.rows]. Panics on shapes that do not fit (the
/// fields are public, so the matrix's own length is checked here too, before the SGEMM reads it).
pub fn matmul(w: &Linear, x: &[f32], y: &mut [f32]) {
    assert_eq!(w.w.len(), w.rows * w.cols, "Linear {} x {}", w.rows, w.cols);
    assert!(
        w.cols > 0 && x.len().is_multiple_of(w.cols),
        "input of {} values is not rows of {}",
        x.len(),
        w.cols
    );
    let n = x.len() / w.cols;
    assert_eq!(y.len(), n * w.rows, "output of {n} rows x {}", w.rows);
    if n == 0 || w.rows == 0 {
        return;
    }
    // SAFETY: the three buffers hold exactly n x cols, rows x cols and n x rows f32 values (checked
    // above), and the strides below address only those elements: x row-major (cols, 1), wᵀ read
    // through w's row-major layout (1, cols), y row-major (rows, 1). y does not alias x or w.
    unsafe {
        matrixmultiply::sgemm(
            n,
            w.cols,
            w.rows,
            1.0,
            x.as_ptr(),
            w.cols as isize,
            1,
            w.w.as_ptr(),
            1,
            w.cols as isize,
            0.0,
            y.as_mut_ptr(),
            w.rows as isize,
            1,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_round_to_their_formats() {
        let w: Vec<f32> = (0..64)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
            .collect();
        let l = Linear::new(2, 32, w.clone());
        let g8 = l.int8_grid();
        let g4 = l.int4_grid();
        for r in 0..2 {
            let row = &w[r * 32..(r + 1) * 32];
            let m = row.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            for c in 0..32 {
                // half a step of each grid (plus the f16 scale's rounding)
                assert!((g8.w[r * 32 + c] - row[c]).abs() <= m / 127.0 * 0.5 * 1.01);
                assert!((g4.w[r * 32 + c] - row[c]).abs() <= m / 7.0 * 0.5 * 1.01);
            }
        }
        assert_eq!(
            g8.int8_grid(),
            g8,
            "a grid is a fixed point of its rounding"
        );
    }
}
