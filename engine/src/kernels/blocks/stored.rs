//! `BlockMatrix` as stored: a [rows, cols] weight matrix in one of ggml's formats, row-major as
//! GGUF files store it, checked against its shape on construction, with its rows and their
//! dequantised values. Its products live in `matrix` (dispatching to the portable dots and to the
//! SIMD kernels, which take the stored matrix from here).

use super::bytes::WeightBytes;
use super::format::BlockFormat;
use super::{floats, kquants, legacy};
use crate::error::{Error, Result};

/// A weight matrix in a ggml block format.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockMatrix {
    pub format: BlockFormat,
    pub rows: usize,
    pub cols: usize,
    /// [rows, cols / block] blocks, row-major.
    pub(super) bytes: WeightBytes,
}

impl BlockMatrix {
    /// `bytes` as a [rows, cols] matrix of `format`. Refuses formats the engine does not compute
    /// with, columns that are not whole blocks, and a byte count that is not the shape's.
    pub fn new(format: BlockFormat, rows: usize, cols: usize, bytes: WeightBytes) -> Result<Self> {
        if !format.computable() {
            return Err(Error::Weights(format!(
                "{format} matrix [{rows}, {cols}]: the engine computes with {} only",
                BlockFormat::supported_list()
            )));
        }
        let block = format.block();
        if cols == 0 || !cols.is_multiple_of(block) {
            return Err(Error::Weights(format!(
                "{format} matrix [{rows}, {cols}]: {cols} columns are not whole blocks of {block}"
            )));
        }
        let want = (rows as u64)
            .checked_mul(cols as u64)
            .and_then(|n| format.bytes_of(n));
        if want != Some(bytes.len() as u64) {
            return Err(Error::Weights(format!(
                "{format} matrix [{rows}, {cols}]: {} bytes where the shape needs {}",
                bytes.len(),
                want.map_or("more than u64".into(), |w| w.to_string())
            )));
        }
        Ok(BlockMatrix {
            format,
            rows,
            cols,
            bytes,
        })
    }

    /// Stored bytes (what one product reads).
    /// The first `n` rows (sharing the bytes); `None` when the matrix has fewer.
    pub fn first_rows(&self, n: usize) -> Option<BlockMatrix> {
        if n > self.rows {
            return None;
        }
        Some(BlockMatrix {
            format: self.format,
            rows: n,
            cols: self.cols,
            bytes: self.bytes.slice(0..n * self.row_bytes())?,
        })
    }

    pub fn bytes(&self) -> usize {
        self.bytes.len()
    }

    /// The stored bytes themselves.
    pub fn weight_bytes(&self) -> &WeightBytes {
        &self.bytes
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.cols / self.format.block() * self.format.block_bytes()
    }

    /// The blocks of row `r`.
    pub fn row(&self, r: usize) -> &[u8] {
        let rb = self.row_bytes();
        &self.bytes[r * rb..(r + 1) * rb]
    }

    /// Row `r` as f32 (`out`: cols values), as ggml's `dequantize_row_*` (and so `get_rows`, an
    /// embedding lookup) gives it.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        assert!(r < self.rows, "row {r} of {}", self.rows);
        assert_eq!(out.len(), self.cols, "a row has {} values", self.cols);
        let f: fn(&[u8], &mut [f32]) = match self.format {
            BlockFormat::Q4_0 => legacy::dequantize_q4_0,
            BlockFormat::Q4_1 => legacy::dequantize_q4_1,
            BlockFormat::Q8_0 => legacy::dequantize_q8_0,
            BlockFormat::Q4K => kquants::dequantize_q4_k,
            BlockFormat::Q5K => kquants::dequantize_q5_k,
            BlockFormat::Q6K => kquants::dequantize_q6_k,
            BlockFormat::F16 => floats::dequantize_f16,
            BlockFormat::Bf16 => floats::dequantize_bf16,
            _ => floats::dequantize_f32,
        };
        f(self.row(r), out)
    }
}
