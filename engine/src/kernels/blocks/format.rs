//! The tensor element formats of ggml files (GGUF): their type ids, block sizes and bytes per block,
//! as ggml defines them (`ggml.h`, `ggml-common.h`; facts, not code). Which of them the engine can
//! compute with is `BlockFormat::computable`; the rest are known by size so that a file's tensor
//! table can be checked and a refusal can name the type.

use std::fmt;

/// A ggml tensor type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockFormat {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    Iq2Xxs,
    Iq2Xs,
    Iq3Xxs,
    Iq1S,
    Iq4Nl,
    Iq3S,
    Iq2S,
    Iq4Xs,
    I8,
    I16,
    I32,
    I64,
    F64,
    Iq1M,
    Bf16,
    Tq1_0,
    Tq2_0,
    Mxfp4,
}

use BlockFormat::*;

/// (format, ggml type id, name, elements per block, bytes per block)
const TABLE: [(BlockFormat, u32, &str, usize, usize); 32] = [
    (F32, 0, "F32", 1, 4),
    (F16, 1, "F16", 1, 2),
    (Q4_0, 2, "Q4_0", 32, 18),
    (Q4_1, 3, "Q4_1", 32, 20),
    (Q5_0, 6, "Q5_0", 32, 22),
    (Q5_1, 7, "Q5_1", 32, 24),
    (Q8_0, 8, "Q8_0", 32, 34),
    (Q8_1, 9, "Q8_1", 32, 36),
    (Q2K, 10, "Q2_K", 256, 84),
    (Q3K, 11, "Q3_K", 256, 110),
    (Q4K, 12, "Q4_K", 256, 144),
    (Q5K, 13, "Q5_K", 256, 176),
    (Q6K, 14, "Q6_K", 256, 210),
    (Q8K, 15, "Q8_K", 256, 292),
    (Iq2Xxs, 16, "IQ2_XXS", 256, 66),
    (Iq2Xs, 17, "IQ2_XS", 256, 74),
    (Iq3Xxs, 18, "IQ3_XXS", 256, 98),
    (Iq1S, 19, "IQ1_S", 256, 50),
    (Iq4Nl, 20, "IQ4_NL", 32, 18),
    (Iq3S, 21, "IQ3_S", 256, 110),
    (Iq2S, 22, "IQ2_S", 256, 82),
    (Iq4Xs, 23, "IQ4_XS", 256, 136),
    (I8, 24, "I8", 1, 1),
    (I16, 25, "I16", 1, 2),
    (I32, 26, "I32", 1, 4),
    (I64, 27, "I64", 1, 8),
    (F64, 28, "F64", 1, 8),
    (Iq1M, 29, "IQ1_M", 256, 56),
    (Bf16, 30, "BF16", 1, 2),
    (Tq1_0, 34, "TQ1_0", 256, 54),
    (Tq2_0, 35, "TQ2_0", 256, 66),
    (Mxfp4, 39, "MXFP4", 32, 17),
];

/// The formats the engine's kernels compute with (natively or repacked at load).
pub const COMPUTABLE: [BlockFormat; 9] = [F32, F16, Bf16, Q4_0, Q4_1, Q8_0, Q4K, Q5K, Q6K];

impl BlockFormat {
    fn row(self) -> &'static (BlockFormat, u32, &'static str, usize, usize) {
        TABLE
            .iter()
            .find(|r| r.0 == self)
            .expect("every format is in the table")
    }

    /// The format of a ggml type id, if ggml defines one.
    pub fn from_id(id: u32) -> Option<BlockFormat> {
        TABLE.iter().find(|r| r.1 == id).map(|r| r.0)
    }

    pub fn id(self) -> u32 {
        self.row().1
    }

    /// ggml's name of the type (`Q4_1`, `Q6_K`, ...).
    pub fn name(self) -> &'static str {
        self.row().2
    }

    /// Elements per block.
    pub fn block(self) -> usize {
        self.row().3
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        self.row().4
    }

    /// Bytes of `n` elements, or `None` when `n` is not a whole number of blocks or overflows.
    pub fn bytes_of(self, n: u64) -> Option<u64> {
        let b = self.block() as u64;
        if !n.is_multiple_of(b) {
            return None;
        }
        (n / b).checked_mul(self.block_bytes() as u64)
    }

    pub fn computable(self) -> bool {
        COMPUTABLE.contains(&self)
    }

    /// The type ggml's CPU backend quantises a product's activations to for weights of this format
    /// (`type_traits_cpu[..].vec_dot_type` in `ggml-cpu.c`), for the formats the engine computes
    /// with; `None` for the others.
    pub fn vec_dot_type(self) -> Option<BlockFormat> {
        match self {
            F32 | F16 | Bf16 => Some(self),
            Q4_0 | Q8_0 => Some(Q8_0),
            Q4_1 => Some(Q8_1),
            Q4K | Q5K | Q6K => Some(Q8K),
            _ => None,
        }
    }

    /// What the engine computes with, for error messages.
    pub fn supported_list() -> String {
        COMPUTABLE.map(|f| f.name()).join(", ")
    }
}

impl fmt::Display for BlockFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_are_unique_and_round_trip() {
        for r in TABLE {
            assert_eq!(BlockFormat::from_id(r.1), Some(r.0));
            assert_eq!(TABLE.iter().filter(|s| s.2 == r.2).count(), 1);
        }
        assert_eq!(BlockFormat::from_id(4), None, "Q4_2 was removed from ggml");
        assert_eq!(Q4_1.bytes_of(64), Some(40));
        assert_eq!(Q6K.bytes_of(100), None);
    }

    #[test]
    fn block_sizes_follow_the_layouts() {
        // d (f16) + 16 bytes of nibbles; d + m + 16; d + 32 int8; d (f32) + 256 int8 + 16 i16 sums
        assert_eq!(Q4_0.block_bytes(), 2 + 16);
        assert_eq!(Q4_1.block_bytes(), 2 + 2 + 16);
        assert_eq!(Q8_0.block_bytes(), 2 + 32);
        assert_eq!(Q8K.block_bytes(), 4 + 256 + 2 * 16);
        // d, dmin, 12 bytes of 6-bit scales, 128 bytes of nibbles (+ 32 of high bits for Q5_K)
        assert_eq!(Q4K.block_bytes(), 2 + 2 + 12 + 128);
        assert_eq!(Q5K.block_bytes(), 2 + 2 + 12 + 32 + 128);
        // 128 low nibbles, 64 bytes of high bit pairs, 16 int8 scales, d
        assert_eq!(Q6K.block_bytes(), 128 + 64 + 16 + 2);
    }
}
