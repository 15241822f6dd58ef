//! Weights into block bytes, as ggml's reference quantisers write them (`quantize_row_q4_0_ref`,
//! `_q4_1_ref`, `_q8_0_ref` in `ggml-quants.c`; what `llama-quantize` uses for these formats), and
//! the float formats: for tests, benches and tools, never on the serving path.
//!
//! ```text
//! Q4_0: max = the first value of largest |x|; d = max / −8; q = min(15, trunc(x / d + 8.5))
//! Q4_1: d = (max − min) / 15, m = min; q = min(15, trunc((x − min) / d + 0.5))
//! Q8_0: d = amax / 127; q = round(x / d) (half away from zero)
//! ```
//! (`/ d` is `· id` with `id = 1 / d` in f32, 0 when d is 0; d and m stored as f16.)

use half::f16;

use super::acts::round_bf16;
use super::format::BlockFormat;
use super::matrix::BlockMatrix;
use super::WeightBytes;
use crate::error::{Error, Result};

/// `x` (whole blocks) in `format`, or `None` for a format without a quantiser here (the K-quants:
/// their search for scales is llama-quantize's, not reproduced).
pub fn quantize(format: BlockFormat, x: &[f32]) -> Option<Vec<u8>> {
    use BlockFormat::*;
    if !x.len().is_multiple_of(format.block()) {
        return None;
    }
    Some(match format {
        Q4_0 => x.chunks_exact(32).flat_map(q4_0_block).collect(),
        Q4_1 => x.chunks_exact(32).flat_map(q4_1_block).collect(),
        Q8_0 => x.chunks_exact(32).flat_map(q8_0_block).collect(),
        F32 => x.iter().flat_map(|v| v.to_le_bytes()).collect(),
        F16 => x
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_bits().to_le_bytes())
            .collect(),
        Bf16 => x
            .iter()
            .flat_map(|&v| round_bf16(v).to_le_bytes())
            .collect(),
        _ => return None,
    })
}

impl BlockMatrix {
    /// An f32 matrix ([rows, cols] row-major) quantised to `format` (`quantize`).
    pub fn quantize(format: BlockFormat, rows: usize, cols: usize, w: &[f32]) -> Result<Self> {
        if w.len() != rows * cols {
            return Err(Error::Weights(format!(
                "{} values for a [{rows}, {cols}] matrix",
                w.len()
            )));
        }
        if !cols.is_multiple_of(format.block()) {
            return BlockMatrix::new(format, rows, cols, WeightBytes::owned(Vec::new()));
        }
        let bytes = quantize(format, w).ok_or_else(|| {
            Error::Weights(format!("no quantiser for {format} (encode::quantize)"))
        })?;
        BlockMatrix::new(format, rows, cols, WeightBytes::owned(bytes))
    }
}

/// Random blocks of `format` for tests and benches: every quant bit random (so extremes such as
/// Q8_0's −128 occur), the f16 scales (d, and dmin or m) uniform in [0.005, 0.05) with a random
/// sign for Q4_1's m, float formats uniform in [−1, 1). `None` for formats the engine does not
/// compute with.
pub fn random_matrix(
    format: BlockFormat,
    rows: usize,
    cols: usize,
    seed: u64,
) -> Option<BlockMatrix> {
    use BlockFormat::*;
    let mut rng = crate::rng::Rng::new(seed);
    let n = format.bytes_of((rows * cols) as u64)? as usize;
    let mut b: Vec<u8> = match format {
        F32 | F16 | Bf16 => {
            let w: Vec<f32> = (0..rows * cols).map(|_| rng.sym()).collect();
            quantize(format, &w)?
        }
        _ => (0..n).map(|_| rng.next_u64() as u8).collect(),
    };
    let scale = |rng: &mut crate::rng::Rng, signed: bool| {
        let v = 0.005 + 0.045 * rng.unit();
        f16_bytes(if signed && rng.next_u64() & 1 == 1 {
            -v
        } else {
            v
        })
    };
    let bb = format.block_bytes();
    // (offset of an f16 scale in the block, may be negative)
    let fields: &[(usize, bool)] = match format {
        Q4_0 | Q8_0 => &[(0, false)],
        Q4_1 => &[(0, false), (2, true)],
        Q4K | Q5K => &[(0, false), (2, false)],
        Q6K => &[(208, false)],
        _ => &[],
    };
    for blk in b.chunks_exact_mut(bb) {
        for &(at, signed) in fields {
            blk[at..at + 2].copy_from_slice(&scale(&mut rng, signed));
        }
    }
    BlockMatrix::new(format, rows, cols, WeightBytes::owned(b)).ok()
}

fn f16_bytes(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_bits().to_le_bytes()
}

/// Two nibble values per byte: element j low, element j + 16 high.
fn pack(q: impl Fn(usize) -> u8) -> impl Iterator<Item = u8> {
    (0..16).map(move |j| q(j) | (q(j + 16) << 4))
}

fn q4_0_block(x: &[f32]) -> Vec<u8> {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut out = f16_bytes(d).to_vec();
    // `as i8` truncates toward zero as C's (int8_t) does for values in range
    out.extend(pack(|j| ((x[j] * id + 8.5) as i8).min(15) as u8));
    out
}

fn q4_1_block(x: &[f32]) -> Vec<u8> {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut out = f16_bytes(d).to_vec();
    out.extend(f16_bytes(min));
    out.extend(pack(|j| (((x[j] - min) * id + 0.5) as i8).min(15) as u8));
    out
}

fn q8_0_block(x: &[f32]) -> Vec<u8> {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut out = f16_bytes(d).to_vec();
    out.extend(x.iter().map(|&v| (v * id).round() as i8 as u8));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantisers_round_trip_their_grid() {
        // values on each format's grid come back exactly
        let x: Vec<f32> = (0..32).map(|j| j as f32 - 16.0).collect();
        let mut out = vec![0.0; 32];
        let shifted: Vec<f32> = x.iter().map(|v| v / 2.0 + 7.5).collect();
        let m = BlockMatrix::quantize(BlockFormat::Q4_1, 1, 32, &shifted).unwrap();
        m.dequantize_row(0, &mut out);
        // min −0.5, max 15: d = 15.5/15 is not an f16; the grid is d·q + m
        let b = m.row(0);
        let d = f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
        assert_eq!(
            f16::from_bits(u16::from_le_bytes([b[2], b[3]])).to_f32(),
            -0.5
        );
        for (j, v) in out.iter().enumerate() {
            let q = if j < 16 {
                b[4 + j] & 15
            } else {
                b[4 + j - 16] >> 4
            };
            assert_eq!(*v, q as f32 * d - 0.5);
        }
        let q8 = BlockMatrix::quantize(BlockFormat::Q8_0, 1, 32, &x).unwrap();
        q8.dequantize_row(0, &mut out);
        // amax 16: d = 16/127; every integer maps to a q within half a step
        for (a, b) in out.iter().zip(&x) {
            assert!((a - b).abs() <= 16.0 / 127.0 / 2.0 * 1.01, "{a} {b}");
        }
        let q4 = BlockMatrix::quantize(BlockFormat::Q4_0, 1, 32, &x).unwrap();
        q4.dequantize_row(0, &mut out);
        // max = −16: d = 2, so even values come back exactly, odd ones a step-half off
        assert_eq!(out[0], -16.0);
        assert_eq!(out[2], -14.0);
        assert_eq!(out[30], 14.0);
        assert!(out.iter().zip(&x).all(|(a, b)| (a - b).abs() <= 1.0));
    }
}
