//! GGUF files (llama.cpp's model format), read: versions 2 and 3, little-endian. A file is a header
//! (`GGUF`, u32 version, u64 tensor count, u64 metadata count), typed metadata pairs (13 value
//! types; arrays, arrays of arrays), a tensor table (name, 1 to 4 ggml-order dims, ggml type id,
//! offset in the data section), padding to `general.alignment` (default 32) and the data section.
//!
//! `Gguf::open` maps the file read-only and parses the header, metadata and table into owned values
//! (the vocabulary's strings once); tensor data is never copied: `Gguf::bytes` is a view of the
//! map (`WeightBytes`). `Gguf::parse_bytes` makes the same checks on a byte slice (tests, fuzzing).
//!
//! Checked, each refusal an `Error::Gguf` naming the field (`tensor 17 (blk.2.ffn_up.weight) dims`,
//! `metadata key 5 (tokenizer.ggml.tokens) array count`) and its byte offset, never a panic: the
//! magic; the version (1, big-endian and > 3 refused); truncation anywhere; every string length,
//! array count, metadata and tensor count against the bytes that remain, before anything is
//! allocated for it; UTF-8 of keys, names and strings; value types; bools 0 or 1; arrays nested at
//! most `MAX_ARRAY_DEPTH`; duplicate keys and tensor names; `general.alignment` a power of two;
//! 1 to 4 dims with a nonzero product that fits an i64; known ggml types; rows of whole blocks;
//! tensor offsets multiples of the alignment, tensor bytes inside the file and not overlapping.
//! Whatever the input, parsing allocates at most `parse::ALLOC_PER_BYTE` (33) bytes per input byte
//! (plus `parse::ALLOC_SLACK`): the worst case is a u8 array, each one-byte element a 32-byte
//! `Value`. Fuzzed like the wire decoder, by the fuzz crate: `fuzz/src/gguf.rs` (the checks),
//! `fuzz/tests/gguf.rs` (bounded, stable), `fuzz/fuzz_targets/gguf_parse.rs` (libFuzzer).
//!
//! What the metadata means (which keys an architecture needs) is the model loader's business, not
//! this module's; `write` makes files for tests.

mod cursor;
mod metadata;
pub mod parse;
pub mod tensor;
pub mod value;
pub mod write;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::Error;
use crate::kernels::blocks::WeightBytes;
use crate::Result;

pub use parse::Parsed;
pub use tensor::TensorInfo;
pub use value::{Value, ValueType};

/// An opened GGUF file: its metadata and tensor table, and the map its tensor bytes are read from.
pub struct Gguf {
    pub path: PathBuf,
    pub version: u32,
    pub alignment: usize,
    /// In file order.
    pub metadata: Vec<(String, Value)>,
    /// In file order; offsets absolute.
    pub tensors: Vec<TensorInfo>,
    map: Arc<memmap2::Mmap>,
    data_start: u64,
    index: parse::Index,
}

impl Gguf {
    /// Map `path` read-only, parse it and check it.
    ///
    /// The map's one unchecked promise, as with every memory-mapped model file: nobody truncates
    /// or rewrites the file while it is open.
    pub fn open(path: &Path) -> Result<Gguf> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        // SAFETY: a read-only private map of a file this process only reads; the bytes are never
        // assumed to hold anything (every read of them is bounds-checked parsing or a slice of
        // checked range). Another process truncating the file while it is mapped would fault the
        // reader (SIGBUS), which no check here can prevent; model files are not written in place.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        let p = parse::parse(&map, path)?;
        Ok(Gguf {
            path: path.to_path_buf(),
            version: p.version,
            alignment: p.alignment,
            metadata: p.metadata,
            tensors: p.tensors,
            map: Arc::new(map),
            data_start: p.data_start,
            index: p.index,
        })
    }

    /// Parse and check a file's bytes (errors name the path `<bytes>`).
    pub fn parse_bytes(bytes: &[u8]) -> Result<Parsed> {
        parse::parse(bytes, Path::new("<bytes>"))
    }

    /// Where the data section starts in the file.
    pub fn data_start(&self) -> u64 {
        self.data_start
    }

    pub fn tensor(&self, name: &str) -> Result<&TensorInfo> {
        match self.index.tensor(&self.tensors, name) {
            Some(j) => Ok(&self.tensors[j]),
            None => Err(Error::Gguf {
                path: self.path.clone(),
                offset: None,
                field: format!("tensor {name}"),
                msg: format!("not in the file (it has {} tensors)", self.tensors.len()),
            }),
        }
    }

    pub fn has_tensor(&self, name: &str) -> bool {
        self.index.tensor(&self.tensors, name).is_some()
    }

    /// The bytes of `t` where the map holds them (no copy). A `TensorInfo` of this file always lies
    /// inside the map; one that does not (made by hand, or of another file) gives no bytes, which
    /// no tensor's size accepts.
    pub fn bytes(&self, t: &TensorInfo) -> WeightBytes {
        let range = usize::try_from(t.offset)
            .ok()
            .zip(usize::try_from(t.n_bytes).ok())
            .and_then(|(start, n)| Some(start..start.checked_add(n)?));
        range
            .and_then(|r| WeightBytes::mapped(self.map.clone(), r))
            .unwrap_or_else(|| WeightBytes::owned(Vec::new()))
    }
}

impl std::fmt::Debug for Gguf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gguf")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("alignment", &self.alignment)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("data_start", &self.data_start)
            .finish()
    }
}
