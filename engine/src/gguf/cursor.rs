//! A checked little-endian reader over a file's bytes: every read names the field it reads, and a
//! read past the end, a length beyond the bytes that remain or a string that is not UTF-8 is an
//! error at its byte offset. Field names are closures, formatted only when there is an error (the
//! vocabulary's 49152 strings are read without formatting a name each).

use std::path::Path;

use crate::error::Error;
use crate::Result;

/// A field's name, made on demand: `metadata key 5 (tokenizer.ggml.tokens) element 17`.
pub(super) type Field<'f> = &'f dyn Fn() -> String;

/// At most this many bytes of a name read from the file go into an error's field.
const NAME_SHOWN: usize = 80;

/// `name` for a field label: cut at `NAME_SHOWN` bytes (on a character boundary) with an ellipsis.
pub(super) fn shown(name: &str) -> String {
    if name.len() <= NAME_SHOWN {
        return name.to_string();
    }
    let mut end = NAME_SHOWN;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &name[..end])
}

pub(super) struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(bytes: &'a [u8], path: &'a Path) -> Self {
        Cursor { bytes, at: 0, path }
    }

    /// The offset of the next read.
    pub(super) fn at(&self) -> usize {
        self.at
    }

    pub(super) fn len(&self) -> usize {
        self.bytes.len()
    }

    pub(super) fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    /// An error in `field` at byte `at`.
    pub(super) fn fail(&self, at: usize, field: Field, msg: impl Into<String>) -> Error {
        Error::Gguf {
            path: self.path.to_path_buf(),
            offset: Some(at as u64),
            field: field(),
            msg: msg.into(),
        }
    }

    pub(super) fn take(&mut self, n: usize, field: Field) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.fail(
                self.at,
                field,
                format!(
                    "truncated: needs {n} bytes, {} remain of the file's {}",
                    self.remaining(),
                    self.bytes.len()
                ),
            ));
        }
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, field: Field) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, field)?);
        Ok(a)
    }

    pub(super) fn u8(&mut self, field: Field) -> Result<u8> {
        Ok(self.array::<1>(field)?[0])
    }

    pub(super) fn u16(&mut self, field: Field) -> Result<u16> {
        self.array(field).map(u16::from_le_bytes)
    }

    pub(super) fn u32(&mut self, field: Field) -> Result<u32> {
        self.array(field).map(u32::from_le_bytes)
    }

    pub(super) fn u64(&mut self, field: Field) -> Result<u64> {
        self.array(field).map(u64::from_le_bytes)
    }

    /// A count of things of at least `min_bytes` each: refused when they cannot fit in the bytes
    /// that remain after it, so that a count is never trusted with an allocation.
    pub(super) fn count(
        &mut self,
        min_bytes: usize,
        what: &dyn std::fmt::Display,
        field: Field,
    ) -> Result<usize> {
        let at = self.at;
        let n = self.u64(field)?;
        let room = (self.remaining() / min_bytes.max(1)) as u64;
        if n > room {
            return Err(self.fail(
                at,
                field,
                format!(
                    "{n} {what} cannot fit in the {} bytes that remain ({min_bytes} or more each)",
                    self.remaining()
                ),
            ));
        }
        Ok(n as usize)
    }

    /// A GGUF string: u64 length, then that many bytes of UTF-8.
    pub(super) fn string(&mut self, field: Field) -> Result<String> {
        let at = self.at;
        let n = self.u64(field)?;
        if n > self.remaining() as u64 {
            return Err(self.fail(
                at,
                field,
                format!(
                    "string length {n} exceeds the {} bytes that remain",
                    self.remaining()
                ),
            ));
        }
        let start = self.at;
        let raw = self.take(n as usize, field)?;
        match std::str::from_utf8(raw) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => Err(self.fail(
                start + e.valid_up_to(),
                field,
                format!("string is not UTF-8 (byte {} of its {n})", e.valid_up_to()),
            )),
        }
    }
}
