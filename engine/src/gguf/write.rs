//! Writing GGUF files (little-endian, version 2 or 3) from metadata and tensor bytes, for tests,
//! fuzz seeds and small fixtures: tensors in the given order, each at the next multiple of the
//! alignment (`general.alignment` when the metadata has it, else 32), as llama.cpp lays them out.
//! It writes what it is given: repeated keys or names make a file the reader refuses, which tests
//! use. It refuses what it cannot encode: arrays of mixed types, tensor bytes that are not the
//! size of the dims in the format, a bad alignment.

use super::parse::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC};
use super::value::{Value, ValueType};
use crate::error::Error;
use crate::kernels::blocks::BlockFormat;
use crate::Result;

/// A tensor to write.
#[derive(Clone, Copy, Debug)]
pub struct TensorData<'a> {
    pub name: &'a str,
    /// ggml order (`dims[0]` the columns).
    pub dims: &'a [u64],
    pub format: BlockFormat,
    /// Whole blocks of `format`: `format.bytes_of(product of dims)` bytes.
    pub bytes: &'a [u8],
}

/// A written file, and where its declared counts are.
#[derive(Clone, Debug)]
pub struct Encoded {
    pub bytes: Vec<u8>,
    /// Byte offsets of every u64 count written: the tensor and metadata counts, string lengths,
    /// array counts (what the fuzz checks corrupt).
    pub counts: Vec<usize>,
}

fn refuse(field: String, msg: String) -> Error {
    Error::Gguf {
        path: "<writing>".into(),
        offset: None,
        field,
        msg,
    }
}

/// The bytes of a version-3 file.
pub fn to_bytes(metadata: &[(String, Value)], tensors: &[TensorData]) -> Result<Vec<u8>> {
    encode(3, metadata, tensors).map(|e| e.bytes)
}

/// A file of `version` holding `metadata` and `tensors`.
pub fn encode(
    version: u32,
    metadata: &[(String, Value)],
    tensors: &[TensorData],
) -> Result<Encoded> {
    let alignment = match metadata.iter().find(|(k, _)| k == ALIGNMENT_KEY) {
        None => DEFAULT_ALIGNMENT,
        Some((_, v)) => match v.as_int::<u32>() {
            Some(a) if a.is_power_of_two() => a as usize,
            _ => {
                return Err(refuse(
                    format!("metadata key {ALIGNMENT_KEY}"),
                    format!("{} is not a power of two", v.describe()),
                ));
            }
        },
    };
    let mut w = Writer {
        out: Vec::new(),
        counts: Vec::new(),
    };
    w.out.extend_from_slice(MAGIC);
    w.u32(version);
    w.count(tensors.len());
    w.count(metadata.len());
    for (key, v) in metadata {
        w.str(key);
        w.u32(v.value_type().id());
        w.value(v)
            .map_err(|msg| refuse(format!("metadata key {key}"), msg))?;
    }
    // data section offsets, each tensor at the next multiple of the alignment
    let mut rel = 0usize;
    let mut offsets = Vec::with_capacity(tensors.len());
    for t in tensors {
        let n = t.dims.iter().product::<u64>();
        if t.format.bytes_of(n) != Some(t.bytes.len() as u64) {
            return Err(refuse(
                format!("tensor {}", t.name),
                format!(
                    "{} bytes, but {:?} {} elements take {:?}",
                    t.bytes.len(),
                    t.dims,
                    t.format,
                    t.format.bytes_of(n)
                ),
            ));
        }
        w.str(t.name);
        w.u32(t.dims.len() as u32);
        for &d in t.dims {
            w.u64(d);
        }
        w.u32(t.format.id());
        w.u64(rel as u64);
        offsets.push(rel);
        rel = (rel + t.bytes.len()).next_multiple_of(alignment);
    }
    let data_start = w.out.len().next_multiple_of(alignment);
    w.out.resize(data_start, 0);
    for (t, off) in tensors.iter().zip(offsets) {
        w.out.resize(data_start + off, 0);
        w.out.extend_from_slice(t.bytes);
    }
    Ok(Encoded {
        bytes: w.out,
        counts: w.counts,
    })
}

struct Writer {
    out: Vec<u8>,
    counts: Vec<usize>,
}

impl Writer {
    fn u32(&mut self, v: u32) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }

    fn u64(&mut self, v: u64) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }

    fn count(&mut self, n: usize) {
        self.counts.push(self.out.len());
        self.u64(n as u64);
    }

    fn str(&mut self, s: &str) {
        self.count(s.len());
        self.out.extend_from_slice(s.as_bytes());
    }

    fn value(&mut self, v: &Value) -> std::result::Result<(), String> {
        match v {
            Value::U8(x) => self.out.push(*x),
            Value::I8(x) => self.out.push(*x as u8),
            Value::U16(x) => self.out.extend_from_slice(&x.to_le_bytes()),
            Value::I16(x) => self.out.extend_from_slice(&x.to_le_bytes()),
            Value::U32(x) => self.u32(*x),
            Value::I32(x) => self.u32(*x as u32),
            Value::U64(x) => self.u64(*x),
            Value::I64(x) => self.u64(*x as u64),
            Value::F32(x) => self.u32(x.to_bits()),
            Value::F64(x) => self.u64(x.to_bits()),
            Value::Bool(b) => self.out.push(*b as u8),
            Value::Str(s) => self.str(s),
            Value::Array(items) => {
                // an empty array's element type is not kept; u8 is as good as any
                let et = v.element_type().unwrap_or(ValueType::U8);
                self.u32(et.id());
                self.count(items.len());
                for (k, e) in items.iter().enumerate() {
                    if e.value_type() != et {
                        return Err(format!(
                            "array of {et} has element {k} of type {}",
                            e.value_type()
                        ));
                    }
                    self.value(e)?;
                }
            }
        }
        Ok(())
    }
}
