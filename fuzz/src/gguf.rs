//! Fuzzing the GGUF parser (`moefleet_engine::gguf`): `fuzz_check` is what every input must
//! satisfy, run by the coverage-guided target `fuzz/fuzz_targets/gguf_parse.rs` (cargo-fuzz,
//! nightly) and by the bounded stable run in `fuzz/tests/gguf.rs` (proptest, part of `make test`).
//!
//! An input's bytes are read two ways:
//!
//! - as a file: `Gguf::parse_bytes` must not panic and, in total, allocates at most the parser's
//!   promise, `parse::ALLOC_PER_BYTE` times the input's length plus `parse::ALLOC_SLACK`
//!   (measured by `PeakAlloc`). A file it accepts keeps the promises the loader relies on (unique
//!   keys and names; tensor bytes inside the file, aligned, disjoint, the size of their dims in
//!   their format) and round-trips: written again by `write::encode` and parsed, it has the same
//!   metadata (floats by bits) and tensor bytes.
//! - as a source of field values: a valid file is built from them (metadata of every value type,
//!   arrays of arrays, an alignment, tensors of every block format, version 2 or 3), parsed back
//!   the same; then each of its declared counts (tensor and metadata counts, string lengths, array
//!   counts) is set to huge values (2^64 - 1, 2^63, 2^32, the file's length) and must be refused
//!   at that count's offset within the allocation bound, and to its value ± 1 (anything but a
//!   panic); and cut short at a few places, which a file with tensors must refuse.
//!
//! Every refusal must be of a known kind (`REFUSALS`, told apart by the words of the parser's
//! messages), so a bounded run can show which kinds it reached.
//!
//! The allocation checks need `PeakAlloc` as the process's global allocator; `fuzz_check` panics
//! if it is not (a check that could not measure would pass vacuously).

use moefleet_engine::gguf::parse::{ALIGNMENT_KEY, ALLOC_PER_BYTE, ALLOC_SLACK};
use moefleet_engine::gguf::tensor::MAX_DIMS;
use moefleet_engine::gguf::write::{self, TensorData};
use moefleet_engine::gguf::{Gguf, Parsed, Value, ValueType};
use moefleet_engine::kernels::blocks::BlockFormat;
use moefleet_engine::Error;

use crate::alloc::{measure_start, measured, peak_alloc_installed};
use crate::source::Source;

/// Kinds of refusal, each (name, a word of its message or field), in `Tally::refused` order.
pub const REFUSALS: [(&str, &str); 19] = [
    ("magic", "is not \"GGUF\""),
    ("version", "version"),
    ("truncated", "truncated"),
    ("count", "cannot fit"),
    ("length", "exceeds the"),
    ("utf8", "not UTF-8"),
    ("value type", "unknown value type"),
    ("bool", "neither 0 nor 1"),
    ("depth", "nested deeper"),
    ("duplicate", "duplicate"),
    ("alignment", "power of two"),
    ("n_dims", "dims; a tensor has"),
    ("no elements", "hold no elements"),
    ("size", "overflows"),
    ("ggml type", "unknown ggml type"),
    ("blocks", "whole number"),
    ("offset", "multiple of the alignment"),
    ("bounds", "past the end"),
    ("overlap", "overlap"),
];

/// What the checks saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Raw inputs parsed.
    pub accepted: u64,
    /// Raw inputs refused, by `REFUSALS` index.
    pub refused: [u64; REFUSALS.len()],
    /// Valid files built from field values and read back.
    pub built: u64,
    /// Declared counts made huge and refused at their offset.
    pub huge_refused: u64,
    /// The most bytes allocated per input byte (times 1000) by any parse.
    pub worst_alloc_per_kb: u64,
}

impl Tally {
    pub fn add(&mut self, o: &Tally) {
        self.accepted += o.accepted;
        for (a, b) in self.refused.iter_mut().zip(o.refused) {
            *a += b;
        }
        self.built += o.built;
        self.huge_refused += o.huge_refused;
        self.worst_alloc_per_kb = self.worst_alloc_per_kb.max(o.worst_alloc_per_kb);
    }
}

/// Which of `REFUSALS` an error is.
pub fn refusal_index(e: &Error) -> Option<usize> {
    let Error::Gguf { field, msg, .. } = e else {
        return None;
    };
    REFUSALS
        .iter()
        .position(|(_, w)| msg.contains(w))
        .or_else(|| REFUSALS.iter().position(|(_, w)| field.contains(w)))
}

/// Parse `buf`, checking the allocation bound.
fn parse_measured(buf: &[u8], t: &mut Tally) -> moefleet_engine::Result<Parsed> {
    measure_start();
    let r = Gguf::parse_bytes(buf);
    let (peak, total) = measured();
    let bound = ALLOC_PER_BYTE * buf.len() + ALLOC_SLACK;
    assert!(
        total <= bound,
        "parsing {} bytes allocated {total} (largest {peak}), above {bound}",
        buf.len()
    );
    let per_kb = (total.saturating_sub(ALLOC_SLACK) * 1000 / buf.len().max(1)) as u64;
    t.worst_alloc_per_kb = t.worst_alloc_per_kb.max(per_kb);
    r
}

/// What an accepted file must satisfy.
fn check_accepted(buf: &[u8], p: &Parsed) {
    let mut keys: Vec<&str> = p.metadata.iter().map(|(k, _)| k.as_str()).collect();
    keys.sort_unstable();
    assert!(
        keys.windows(2).all(|w| w[0] != w[1]),
        "duplicate key accepted"
    );
    let mut names: Vec<&str> = p.tensors.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    assert!(names.windows(2).all(|w| w[0] != w[1]), "duplicate name");
    assert!(p.alignment.is_power_of_two());
    let mut spans = Vec::new();
    for t in &p.tensors {
        assert!((1..=MAX_DIMS).contains(&t.dims.len()), "{t:?}");
        assert_eq!(t.format.bytes_of(t.n_elements()), Some(t.n_bytes), "{t:?}");
        assert_eq!((t.offset - p.data_start) % p.alignment as u64, 0, "{t:?}");
        assert!(t.offset >= p.data_start && t.offset + t.n_bytes <= buf.len() as u64);
        spans.push((t.offset, t.offset + t.n_bytes));
    }
    spans.sort_unstable();
    assert!(
        spans.windows(2).all(|w| w[0].1 <= w[1].0),
        "overlap accepted"
    );
    for (k, v) in &p.metadata {
        assert!(
            p.get(k).is_some_and(|g| g.same_bits(v)),
            "lookup of {k} differs"
        );
    }
    for t in &p.tensors {
        assert_eq!(p.tensor(&t.name), Some(t));
    }
}

/// `p` (parsed from `buf`) written again and parsed: the same metadata, tensors and bytes.
fn check_round_trip(buf: &[u8], p: &Parsed, version: u32) {
    let tensors: Vec<TensorData> = p
        .tensors
        .iter()
        .map(|t| TensorData {
            name: &t.name,
            dims: &t.dims,
            format: t.format,
            bytes: &buf[t.offset as usize..(t.offset + t.n_bytes) as usize],
        })
        .collect();
    let enc = match write::encode(version, &p.metadata, &tensors) {
        Ok(e) => e,
        Err(e) => panic!("an accepted file cannot be written again: {e}"),
    };
    let q = match Gguf::parse_bytes(&enc.bytes) {
        Ok(q) => q,
        Err(e) => panic!("a written file is refused: {e}"),
    };
    assert_eq!(q.version, version);
    assert_eq!(q.metadata.len(), p.metadata.len());
    for ((ka, va), (kb, vb)) in p.metadata.iter().zip(&q.metadata) {
        assert!(ka == kb && va.same_bits(vb), "{ka}: {va:?} became {vb:?}");
    }
    assert_eq!(q.tensors.len(), tensors.len());
    for (a, b) in tensors.iter().zip(&q.tensors) {
        assert!(a.name == b.name && a.dims == &b.dims[..] && a.format == b.format);
        let got = &enc.bytes[b.offset as usize..(b.offset + b.n_bytes) as usize];
        assert!(got == a.bytes, "tensor {} bytes differ", a.name);
    }
}

/// A value of type `ty`, arrays at most `depth` deep (at most 4 elements each).
fn value_from(src: &mut Source, ty: ValueType, depth: usize) -> Value {
    match ty {
        ValueType::U8 => Value::U8(src.u8()),
        ValueType::I8 => Value::I8(src.u8() as i8),
        ValueType::U16 => Value::U16(src.u32() as u16),
        ValueType::I16 => Value::I16(src.u32() as i16),
        ValueType::U32 => Value::U32(src.u32()),
        ValueType::I32 => Value::I32(src.u32() as i32),
        ValueType::U64 => Value::U64(src.u64()),
        ValueType::I64 => Value::I64(src.u64() as i64),
        ValueType::F32 => Value::F32(f32::from_bits(src.u32())),
        ValueType::F64 => Value::F64(f64::from_bits(src.u64())),
        ValueType::Bool => Value::Bool(src.u8() & 1 == 1),
        ValueType::Str => Value::Str(src.text(12)),
        ValueType::Array => {
            let mut et = ValueType::ALL[src.size(12)];
            if depth == 0 && et == ValueType::Array {
                et = ValueType::U32;
            }
            let n = src.size(4);
            Value::Array(
                (0..n)
                    .map(|_| value_from(src, et, depth.saturating_sub(1)))
                    .collect(),
            )
        }
    }
}

/// Every block format ggml defines.
fn formats() -> Vec<BlockFormat> {
    (0..64).filter_map(BlockFormat::from_id).collect()
}

/// A tensor as built: name, dims, format, bytes.
pub type BuiltTensor = (String, Vec<u64>, BlockFormat, Vec<u8>);

/// What the writer takes for `tensors`.
pub fn views(tensors: &[BuiltTensor]) -> Vec<TensorData<'_>> {
    tensors
        .iter()
        .map(|(name, dims, format, bytes)| TensorData {
            name,
            dims,
            format: *format,
            bytes,
        })
        .collect()
}

/// A valid file's parts built from `src`: version, metadata, tensors.
pub fn file_from(src: &mut Source) -> (u32, Vec<(String, Value)>, Vec<BuiltTensor>) {
    let version = 2 + (src.u8() & 1) as u32;
    let mut metadata = Vec::new();
    for i in 0..src.size(5) {
        let ty = ValueType::ALL[src.size(12)];
        metadata.push((format!("k{i}.{}", src.text(10)), value_from(src, ty, 2)));
    }
    if src.u8().is_multiple_of(3) {
        let a = [1u32, 8, 32, 64, 256][src.size(4)];
        let v = match src.u8() % 3 {
            0 => Value::U32(a),
            1 => Value::U64(a as u64),
            _ => Value::I32(a as i32),
        };
        let at = src.size(metadata.len());
        metadata.insert(at, (ALIGNMENT_KEY.to_string(), v));
    }
    let all = formats();
    let mut tensors = Vec::new();
    for j in 0..src.size(3) {
        let format = all[src.size(all.len() - 1)];
        let n_dims = 1 + src.size(MAX_DIMS - 1);
        let mut dims = vec![(format.block() * (1 + src.size(1))) as u64];
        dims.extend((1..n_dims).map(|_| 1 + src.size(1) as u64));
        let n = format.bytes_of(dims.iter().product()).unwrap_or(0) as usize;
        let bytes = (0..n).map(|_| src.u8()).collect();
        tensors.push((format!("t{j}.{}", src.text(8)), dims, format, bytes));
    }
    (version, metadata, tensors)
}

/// Build a valid file from `src`, read it back, corrupt its counts and cut it.
fn check_built(src: &mut Source, t: &mut Tally) {
    let (version, metadata, tensors) = file_from(src);
    let data = views(&tensors);
    let enc = match write::encode(version, &metadata, &data) {
        Ok(e) => e,
        Err(e) => panic!("a built file cannot be written: {e}"),
    };
    let p = match parse_measured(&enc.bytes, t) {
        Ok(p) => p,
        Err(e) => panic!("a built file is refused: {e}"),
    };
    check_accepted(&enc.bytes, &p);
    assert_eq!(p.version, version);
    assert!(p
        .metadata
        .iter()
        .zip(&metadata)
        .all(|(a, b)| a.0 == b.0 && a.1.same_bits(&b.1)));
    assert_eq!(p.tensors.len(), data.len());
    for (a, b) in p.tensors.iter().zip(&data) {
        assert!(a.name == b.name && a.dims == b.dims && a.format == b.format);
        assert!(&enc.bytes[a.offset as usize..(a.offset + a.n_bytes) as usize] == b.bytes);
    }
    t.built += 1;

    let mut bad = enc.bytes.clone();
    for &at in &enc.counts {
        let mut actual = [0u8; 8];
        actual.copy_from_slice(&bad[at..at + 8]);
        let actual = u64::from_le_bytes(actual);
        for v in [u64::MAX, 1 << 63, 1 << 32, bad.len() as u64] {
            bad[at..at + 8].copy_from_slice(&v.to_le_bytes());
            match parse_measured(&bad, t) {
                Err(Error::Gguf {
                    offset: Some(o), ..
                }) if o == at as u64 => t.huge_refused += 1,
                Err(e) => panic!("count {v} at byte {at} refused elsewhere: {e}"),
                Ok(_) => panic!("count {v} at byte {at} accepted"),
            }
        }
        for v in [actual.wrapping_add(1), actual.wrapping_sub(1)] {
            bad[at..at + 8].copy_from_slice(&v.to_le_bytes());
            if let Ok(q) = parse_measured(&bad, t) {
                check_accepted(&bad, &q);
            }
        }
        bad[at..at + 8].copy_from_slice(&actual.to_le_bytes());
    }
    for _ in 0..3 {
        let cut = src.u32() as usize % enc.bytes.len();
        let r = parse_measured(&enc.bytes[..cut], t);
        if !tensors.is_empty() {
            assert!(r.is_err(), "a file with tensors cut at {cut} accepted");
        }
    }
}

/// Every check, for one input (see the module's documentation). Panics on a failure.
pub fn fuzz_check(data: &[u8]) -> Tally {
    assert!(
        peak_alloc_installed(),
        "moefleet_fuzz::PeakAlloc must be the global allocator"
    );
    let mut t = Tally::default();
    match parse_measured(data, &mut t) {
        Ok(p) => {
            check_accepted(data, &p);
            check_round_trip(data, &p, p.version);
            t.accepted += 1;
        }
        Err(e) => match refusal_index(&e) {
            Some(i) => t.refused[i] += 1,
            None => panic!("a refusal of no known kind: {e}"),
        },
    }
    check_built(&mut Source::new(data), &mut t);
    t
}

/// The seed corpus (`fuzz/seeds/gguf_parse`): files built from fixed byte patterns, and two
/// hand-made ones (metadata only, arrays of arrays included; a tensor of each computable format,
/// aligned to 64). (name, bytes).
pub fn seed_corpus() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for (i, mul) in [37u8, 101, 151, 199].into_iter().enumerate() {
        let pattern: Vec<u8> = (0..4096u32)
            .map(|k| (k as u8).wrapping_mul(mul).wrapping_add(11 * i as u8))
            .collect();
        let (version, metadata, tensors) = file_from(&mut Source::new(&pattern));
        if let Ok(e) = write::encode(version, &metadata, &views(&tensors)) {
            out.push((format!("built-{i}"), e.bytes));
        }
    }
    let metadata = vec![
        (
            "general.architecture".to_string(),
            Value::Str("llama".into()),
        ),
        ("llama.block_count".to_string(), Value::U32(2)),
        ("llama.rope.freq_base".to_string(), Value::F32(10000.0)),
        (
            "tokenizer.ggml.add_bos_token".to_string(),
            Value::Bool(true),
        ),
        (
            "tokenizer.ggml.tokens".to_string(),
            Value::Array(
                ["<s>", "a", "b", "ab"]
                    .map(|s| Value::Str(s.into()))
                    .to_vec(),
            ),
        ),
        (
            "tokenizer.ggml.scores".to_string(),
            Value::Array(vec![Value::F32(0.0), Value::F32(-1.0)]),
        ),
        (
            "nested".to_string(),
            Value::Array(vec![
                Value::Array(vec![Value::I64(-1)]),
                Value::Array(vec![]),
            ]),
        ),
    ];
    if let Ok(b) = write::to_bytes(&metadata, &[]) {
        out.push(("metadata-only".to_string(), b));
    }
    let computable: Vec<BuiltTensor> = formats()
        .into_iter()
        .filter(|f| f.computable())
        .map(|f| {
            let dims = vec![f.block() as u64, 2];
            let n = f.bytes_of(2 * f.block() as u64).unwrap_or(0) as usize;
            (
                format!("w.{}", f.name()),
                dims,
                f,
                (0..n).map(|k| k as u8).collect(),
            )
        })
        .collect();
    let mut metadata = metadata[..2].to_vec();
    metadata.push(("general.alignment".to_string(), Value::U32(64)));
    if let Ok(b) = write::to_bytes(&metadata, &views(&computable)) {
        out.push(("computable-tensors".to_string(), b));
    }
    out
}
