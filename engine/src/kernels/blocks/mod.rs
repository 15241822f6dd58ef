//! Products with weights in ggml's block formats (GGUF files): the formats (`format`), the bytes
//! that hold them (`bytes`), and the kernels.

pub mod bytes;
pub mod format;

pub use bytes::WeightBytes;
pub use format::BlockFormat;
