//! The GGUF reader (`moefleet_engine::gguf`) against hostile files, with the allocation counter
//! installed: `checks` (each refusal of a hand-made hostile file, with its field and byte offset;
//! allocation bounds), `fuzzing` (the fuzz checks on seeds, truncations, bit flips and proptest
//! inputs; the coverage-guided run is `fuzz/fuzz_targets/gguf_parse.rs`). Helpers shared by them
//! are here. Valid files opened and the real checkpoints are `engine/tests/gguf.rs`.

#![allow(clippy::unwrap_used)]

#[path = "gguf/checks.rs"]
mod checks;
#[path = "gguf/fuzzing.rs"]
mod fuzzing;

use moefleet_engine::gguf::Gguf;
use moefleet_engine::Error;
use moefleet_fuzz::gguf::refusal_index;
use moefleet_fuzz::PeakAlloc;

#[global_allocator]
static ALLOC: PeakAlloc = PeakAlloc;

/// A file's bytes written field by field, for files the writer would not make.
#[derive(Default)]
struct Raw(Vec<u8>);

impl Raw {
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        let mut r = Raw(b"GGUF".to_vec());
        r.u32(version).u64(n_tensors).u64(n_kv);
        r
    }
    fn at(&self) -> u64 {
        self.0.len() as u64
    }
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }
    fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }
    /// A tensor entry.
    fn tensor(&mut self, name: &str, dims: &[u64], type_id: u32, offset: u64) -> &mut Self {
        self.str(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(type_id).u64(offset)
    }
    /// Padding to 32 and `n` data bytes.
    fn data(&mut self, n: usize) -> &mut Self {
        let start = self.0.len().next_multiple_of(32);
        self.0.resize(start + n, 0x5a);
        self
    }
}

/// Refused with an error whose field is `field`, at `offset`, saying `msg`; and classified.
#[track_caller]
fn refused(bytes: &[u8], field: &str, offset: u64, msg: &str) {
    let e = match Gguf::parse_bytes(bytes) {
        Ok(p) => panic!("accepted: {p:?}"),
        Err(e) => e,
    };
    let text = e.to_string();
    match &e {
        Error::Gguf {
            field: f,
            offset: o,
            msg: m,
            ..
        } => {
            assert_eq!(f, field, "{text}");
            assert_eq!(*o, Some(offset), "{text}");
            assert!(m.contains(msg), "{text}");
        }
        e => panic!("not a GGUF error: {e}"),
    }
    assert!(text.starts_with("<bytes>: GGUF "), "{text}");
    assert!(text.contains(&format!(" at byte {offset}: ")), "{text}");
    assert!(refusal_index(&e).is_some(), "unclassified: {text}");
}
