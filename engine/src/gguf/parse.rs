//! Parsing a GGUF file's bytes: header, metadata, tensor table, data section start, and every
//! check (see the module header). Allocates only what the bytes hold: each count is checked
//! against the bytes that remain (at the least size of what it counts) before a vector is sized
//! by it, so what parsing allocates is a small multiple of the input's length, whatever the input.

use std::path::Path;

use super::cursor::{shown, Cursor, Field};
use super::tensor::{self, Entry, TensorInfo, MIN_ENTRY_BYTES};
use super::value::{Value, ValueType};
use crate::Result;

pub const MAGIC: &[u8; 4] = b"GGUF";
/// The versions read: 2 and 3 (1 had u32 counts; 3 allowed big-endian files, which are refused).
pub const VERSIONS: [u32; 2] = [2, 3];
pub const DEFAULT_ALIGNMENT: usize = 32;
pub const ALIGNMENT_KEY: &str = "general.alignment";
/// Arrays nest at most this deep (an array of arrays is 2).
pub const MAX_ARRAY_DEPTH: usize = 4;
/// Parsing, whatever the input, allocates at most this many bytes per input byte (a u8 array
/// element, one byte in the file, becomes a 32-byte `Value`)...
pub const ALLOC_PER_BYTE: usize = 33;
/// ...plus this (error messages, small fixed vectors). The fuzz checks (`fuzz/src/gguf.rs`) hold
/// every parse to the two.
pub const ALLOC_SLACK: usize = 8192;

/// The least bytes of one metadata pair: key length, value type, a one-byte value.
const MIN_PAIR_BYTES: usize = 8 + 4 + 1;

/// What a file's bytes hold, checked.
#[derive(Clone, Debug)]
pub struct Parsed {
    pub version: u32,
    pub alignment: usize,
    /// In file order.
    pub metadata: Vec<(String, Value)>,
    /// In file order; offsets absolute.
    pub tensors: Vec<TensorInfo>,
    /// Where the data section starts: the end of the tensor table rounded up to `alignment` (it
    /// may lie past the end of a file without tensors).
    pub data_start: u64,
    pub(super) index: Index,
}

/// Lookups by name, and where each metadata value is (for the typed getters' errors).
#[derive(Clone, Debug, Default)]
pub(super) struct Index {
    /// Metadata positions sorted by key.
    keys: Vec<usize>,
    /// Tensor positions sorted by name.
    names: Vec<usize>,
    /// Byte offset of each metadata value's type id.
    pub(super) value_at: Vec<u64>,
}

impl Index {
    pub(super) fn key(&self, metadata: &[(String, Value)], key: &str) -> Option<usize> {
        find(&self.keys, key, |i| &metadata[i].0)
    }

    pub(super) fn tensor(&self, tensors: &[TensorInfo], name: &str) -> Option<usize> {
        find(&self.names, name, |i| &tensors[i].name)
    }
}

fn find<'a>(sorted: &[usize], name: &str, name_of: impl Fn(usize) -> &'a String) -> Option<usize> {
    sorted
        .binary_search_by(|&i| name_of(i).as_str().cmp(name))
        .ok()
        .map(|k| sorted[k])
}

/// Positions of `items` sorted by name, or the position of an item whose name repeats an earlier
/// one's.
fn sorted_unique<T>(
    items: &[T],
    name: impl Fn(&T) -> &String,
) -> std::result::Result<Vec<usize>, usize> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    // ties by position, so that the later of two equal names comes second
    order.sort_unstable_by(|&a, &b| name(&items[a]).cmp(name(&items[b])).then(a.cmp(&b)));
    for w in order.windows(2) {
        if name(&items[w[0]]) == name(&items[w[1]]) {
            return Err(w[1]);
        }
    }
    Ok(order)
}

impl Parsed {
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index
            .key(&self.metadata, key)
            .map(|i| &self.metadata[i].1)
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.index
            .tensor(&self.tensors, name)
            .map(|i| &self.tensors[i])
    }
}

/// Parse and check `bytes`, naming `path` in errors.
pub(super) fn parse(bytes: &[u8], path: &Path) -> Result<Parsed> {
    let mut c = Cursor::new(bytes, path);
    let magic = c.take(4, &|| "magic".into())?;
    if magic != MAGIC {
        return Err(c.fail(
            0,
            &|| "magic".into(),
            format!("{magic:02x?} is not \"GGUF\""),
        ));
    }
    let version = c.u32(&|| "version".into())?;
    if !VERSIONS.contains(&version) {
        let msg = if VERSIONS.contains(&version.swap_bytes()) {
            format!(
                "{version} is version {} of a big-endian file; only little-endian files are read",
                version.swap_bytes()
            )
        } else {
            format!("{version} is not supported (versions {VERSIONS:?} are)")
        };
        return Err(c.fail(4, &|| "version".into(), msg));
    }
    let n_tensors_field: Field = &|| "tensor count".into();
    let n_tensors = c.count(MIN_ENTRY_BYTES, &"tensors", n_tensors_field)?;
    let n_pairs = c.count(MIN_PAIR_BYTES, &"metadata pairs", &|| {
        "metadata count".into()
    })?;

    let (metadata, key_at, value_at) = read_metadata(&mut c, n_pairs)?;
    let keys = sorted_unique(&metadata, |p| &p.0).map_err(|i| {
        c.fail(
            key_at[i],
            &|| format!("metadata key {i} ({})", shown(&metadata[i].0)),
            "duplicate key",
        )
    })?;
    let mut index = Index {
        keys,
        names: Vec::new(),
        value_at,
    };
    let alignment = alignment(&c, &metadata, &index)?;

    // the table's own room check, now that the metadata is behind it
    let room = c.remaining() / MIN_ENTRY_BYTES;
    if n_tensors > room {
        return Err(c.fail(
            8,
            n_tensors_field,
            format!(
                "{n_tensors} tensors cannot fit in the {} bytes after the metadata ({MIN_ENTRY_BYTES} or more each)",
                c.remaining()
            ),
        ));
    }
    let mut entries: Vec<Entry> = Vec::with_capacity(n_tensors);
    for j in 0..n_tensors {
        entries.push(tensor::read_entry(&mut c, j)?);
    }
    index.names = sorted_unique(&entries, |e| &e.info.name).map_err(|j| {
        let e = &entries[j];
        c.fail(
            e.at,
            &|| format!("tensor {} name", tensor::label(j, &e.info.name)),
            "duplicate tensor name",
        )
    })?;

    // alignment <= 2^31 and the table ends inside the file: no overflow
    let end = c.at() as u64;
    let data_start = end.div_ceil(alignment as u64) * alignment as u64;
    tensor::place(&mut entries, data_start, alignment, c.len(), path)?;
    Ok(Parsed {
        version,
        alignment,
        metadata,
        tensors: entries.into_iter().map(|e| e.info).collect(),
        data_start,
        index,
    })
}

/// Metadata pairs, where each key is, where each value is.
type Pairs = (Vec<(String, Value)>, Vec<usize>, Vec<u64>);

fn read_metadata(c: &mut Cursor, n: usize) -> Result<Pairs> {
    let mut pairs = Vec::with_capacity(n);
    let mut key_at = Vec::with_capacity(n);
    let mut value_at = Vec::with_capacity(n);
    for i in 0..n {
        key_at.push(c.at());
        let key = c.string(&|| format!("metadata key {i} name"))?;
        let label = || format!("metadata key {i} ({})", shown(&key));
        let at = c.at();
        value_at.push(at as u64);
        let id = c.u32(&|| format!("{} type", label()))?;
        let Some(ty) = ValueType::from_id(id) else {
            return Err(c.fail(
                at,
                &|| format!("{} type", label()),
                format!("unknown value type {id}"),
            ));
        };
        let value = read_value(c, ty, 0, &label)?;
        pairs.push((key, value));
    }
    Ok((pairs, key_at, value_at))
}

/// A value of type `ty` nested in `depth` arrays.
fn read_value(c: &mut Cursor, ty: ValueType, depth: usize, field: Field) -> Result<Value> {
    Ok(match ty {
        ValueType::U8 => Value::U8(c.u8(field)?),
        ValueType::I8 => Value::I8(c.u8(field)? as i8),
        ValueType::U16 => Value::U16(c.u16(field)?),
        ValueType::I16 => Value::I16(c.u16(field)? as i16),
        ValueType::U32 => Value::U32(c.u32(field)?),
        ValueType::I32 => Value::I32(c.u32(field)? as i32),
        ValueType::U64 => Value::U64(c.u64(field)?),
        ValueType::I64 => Value::I64(c.u64(field)? as i64),
        ValueType::F32 => Value::F32(f32::from_bits(c.u32(field)?)),
        ValueType::F64 => Value::F64(f64::from_bits(c.u64(field)?)),
        ValueType::Bool => {
            let at = c.at();
            match c.u8(field)? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(c.fail(at, field, format!("bool {b} is neither 0 nor 1"))),
            }
        }
        ValueType::Str => Value::Str(c.string(field)?),
        ValueType::Array => {
            let at = c.at();
            let type_field = || format!("{} array type", field());
            // this array is `depth + 1` deep
            if depth >= MAX_ARRAY_DEPTH {
                return Err(c.fail(
                    at,
                    &type_field,
                    format!("arrays nested deeper than {MAX_ARRAY_DEPTH}"),
                ));
            }
            let id = c.u32(&type_field)?;
            let Some(et) = ValueType::from_id(id) else {
                return Err(c.fail(at, &type_field, format!("unknown value type {id}")));
            };
            let n = c.count(et.min_bytes(), &format_args!("{et} elements"), &|| {
                format!("{} array count", field())
            })?;
            let mut v = Vec::with_capacity(n);
            for k in 0..n {
                v.push(read_value(c, et, depth + 1, &|| {
                    format!("{} element {k}", field())
                })?);
            }
            Value::Array(v)
        }
    })
}

/// `general.alignment` (any integer type that fits a u32), or the default: a power of two.
fn alignment(c: &Cursor, metadata: &[(String, Value)], index: &Index) -> Result<usize> {
    let Some(i) = index.key(metadata, ALIGNMENT_KEY) else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    let v = &metadata[i].1;
    match v.as_int::<u32>() {
        Some(a) if a.is_power_of_two() => Ok(a as usize),
        _ => Err(c.fail(
            index.value_at[i] as usize,
            &|| format!("metadata key {i} ({ALIGNMENT_KEY})"),
            format!("must be a power of two (a u32), found {}", v.describe()),
        )),
    }
}
