//! The capture file (ARCHITECTURE.md §3.4, FORMAT.md "Capture files"): a fixed 64-byte header, then
//! one fixed-size record per position the last role computed for the stream, prompt rows included:
//!
//! ```text
//! header   magic "MFCAPT\0\0" | version u32 | header_bytes u32 | hidden u32 | role u32 | slot u32
//!          | prompt_rows u32 | sequence u64 | record_bytes u32 | n_records u32 | reserved (16 bytes, 0)
//! record   pos u32 | input u32 | emitted u32 (NOT_SAMPLED for prompt rows before the last) | 0 u32
//!          | hidden x f32 (the residual before the final norm)
//! ```
//!
//! Every field is little-endian. Reading checks everything a replay relies on and names the file
//! and the check that failed; nothing here panics on bad input.

use std::path::Path;

use crate::error::{Error, Result};

pub const MAGIC: [u8; 8] = *b"MFCAPT\0\0";
pub const VERSION: u32 = 1;
pub const HEADER_BYTES: usize = 64;
/// Bytes of a record before its residual.
pub const RECORD_PREFIX: usize = 16;
/// `emitted` of a row that was not sampled (a prompt row before the last).
pub const NOT_SAMPLED: u32 = u32::MAX;

/// The fixed header of a capture file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub hidden: u32,
    /// The role that wrote the file (the last one).
    pub role: u32,
    pub slot: u32,
    /// Prompt positions `0..prompt_rows`; the first generated token is emitted at
    /// `prompt_rows − 1`.
    pub prompt_rows: u32,
    /// Per-role counter of captures written, from 0.
    pub sequence: u64,
    pub n_records: u32,
}

impl Header {
    pub fn record_bytes(&self) -> usize {
        record_bytes(self.hidden as usize)
    }

    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0..8].copy_from_slice(&MAGIC);
        let mut put = |at: usize, v: &[u8]| b[at..at + v.len()].copy_from_slice(v);
        put(8, &VERSION.to_le_bytes());
        put(12, &(HEADER_BYTES as u32).to_le_bytes());
        put(16, &self.hidden.to_le_bytes());
        put(20, &self.role.to_le_bytes());
        put(24, &self.slot.to_le_bytes());
        put(28, &self.prompt_rows.to_le_bytes());
        put(32, &self.sequence.to_le_bytes());
        put(40, &(self.record_bytes() as u32).to_le_bytes());
        put(44, &self.n_records.to_le_bytes());
        b
    }
}

pub fn record_bytes(hidden: usize) -> usize {
    RECORD_PREFIX + 4 * hidden
}

/// Append one record (`residual` of width H) to `out`.
pub fn push_record(out: &mut Vec<u8>, pos: u32, input: u32, emitted: u32, residual: &[f32]) {
    out.extend_from_slice(&pos.to_le_bytes());
    out.extend_from_slice(&input.to_le_bytes());
    out.extend_from_slice(&emitted.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    for v in residual {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// A checked capture: one stream's token ids and residuals.
#[derive(Clone, Debug, PartialEq)]
pub struct Capture {
    pub header: Header,
    /// Every token of the sequence: the prompt, then every generated token (`P + generated`).
    pub tokens: Vec<u32>,
    /// [positions, hidden] residuals before the final norm, positions `0..tokens.len() − 1` (the
    /// last generated token was never fed back).
    pub residuals: Vec<f32>,
}

impl Capture {
    pub fn hidden(&self) -> usize {
        self.header.hidden as usize
    }

    pub fn prompt_rows(&self) -> usize {
        self.header.prompt_rows as usize
    }

    pub fn prompt(&self) -> &[u32] {
        &self.tokens[..self.prompt_rows()]
    }

    pub fn generated(&self) -> &[u32] {
        &self.tokens[self.prompt_rows()..]
    }

    /// Positions with a residual.
    pub fn positions(&self) -> usize {
        self.residuals.len() / self.hidden()
    }

    pub fn residual(&self, pos: usize) -> &[f32] {
        let h = self.hidden();
        &self.residuals[pos * h..(pos + 1) * h]
    }

    /// The file's bytes (header with `n_records` filled in, then the records).
    pub fn encode(&self) -> Vec<u8> {
        let n = self.positions();
        let mut header = self.header;
        header.n_records = n as u32;
        let mut out = Vec::with_capacity(HEADER_BYTES + n * header.record_bytes());
        out.extend_from_slice(&header.encode());
        let p = self.prompt_rows();
        for pos in 0..n {
            let emitted = if pos + 1 >= p {
                self.tokens[pos + 1]
            } else {
                NOT_SAMPLED
            };
            push_record(
                &mut out,
                pos as u32,
                self.tokens[pos],
                emitted,
                self.residual(pos),
            );
        }
        out
    }

    /// Read and check a capture file.
    pub fn read(path: &Path) -> Result<Capture> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        Capture::decode(&bytes)
            .map_err(|why| Error::Input(format!("capture {}: {why}", path.display())))
    }

    /// Check, then decode, a capture's bytes. The error says which check failed.
    pub fn decode(b: &[u8]) -> std::result::Result<Capture, String> {
        if b.len() < HEADER_BYTES {
            return Err(format!(
                "truncated header: {} bytes, a header is {HEADER_BYTES}",
                b.len()
            ));
        }
        if b[0..8] != MAGIC {
            return Err(format!(
                "bad magic {:02x?} (not a moefleet capture)",
                &b[0..8]
            ));
        }
        let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let version = u32_at(8);
        if version != VERSION {
            return Err(format!("version {version}, this build reads {VERSION}"));
        }
        if u32_at(12) as usize != HEADER_BYTES {
            return Err(format!(
                "header size {}, expected {HEADER_BYTES}",
                u32_at(12)
            ));
        }
        let mut seq = [0u8; 8];
        seq.copy_from_slice(&b[32..40]);
        let header = Header {
            hidden: u32_at(16),
            role: u32_at(20),
            slot: u32_at(24),
            prompt_rows: u32_at(28),
            sequence: u64::from_le_bytes(seq),
            n_records: u32_at(44),
        };
        let h = header.hidden as usize;
        if h == 0 || h > 1 << 16 {
            return Err(format!("hidden width {h} is out of range"));
        }
        let rb = header.record_bytes();
        if u32_at(40) as usize != rb {
            return Err(format!(
                "record size {} does not match hidden width {h} (expected {rb})",
                u32_at(40)
            ));
        }
        let payload = b.len() - HEADER_BYTES;
        if !payload.is_multiple_of(rb) {
            return Err(format!(
                "record size {rb} does not divide the payload of {payload} bytes (truncated file?)"
            ));
        }
        let n = payload / rb;
        if header.n_records as usize != n {
            return Err(format!(
                "header says {} records, the payload holds {n}",
                header.n_records
            ));
        }
        let p = header.prompt_rows as usize;
        if p == 0 || n < p {
            return Err(format!(
                "prompt rows {p} with {n} records: every prompt position needs a record"
            ));
        }
        let mut tokens = Vec::with_capacity(n + 1);
        let mut residuals = Vec::with_capacity(n * h);
        for i in 0..n {
            let r = &b[HEADER_BYTES + i * rb..HEADER_BYTES + (i + 1) * rb];
            let at = |k: usize| u32::from_le_bytes([r[k], r[k + 1], r[k + 2], r[k + 3]]);
            let (pos, input, emitted) = (at(0), at(4), at(8));
            if pos as usize != i {
                return Err(format!(
                    "record {i} is at position {pos}: positions must run 0, 1, 2, ..."
                ));
            }
            if i > 0 && i >= p && tokens.get(i) != Some(&input) {
                return Err(format!(
                    "position {i}: input token {input} is not the token emitted at position {}",
                    i - 1
                ));
            }
            if i < p {
                tokens.push(input);
            }
            let sampled = i + 1 >= p;
            match (sampled, emitted == NOT_SAMPLED) {
                (true, true) => {
                    return Err(format!("position {i}: no emitted token after the prompt"))
                }
                (false, false) => {
                    return Err(format!(
                        "position {i}: a prompt row before the last has an emitted token"
                    ))
                }
                (true, false) => tokens.push(emitted),
                (false, true) => {}
            }
            for (k, c) in r[RECORD_PREFIX..].chunks_exact(4).enumerate() {
                let v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                if !v.is_finite() {
                    return Err(format!(
                        "position {i}: residual value {k} is {v} (not finite)"
                    ));
                }
                residuals.push(v);
            }
        }
        Ok(Capture {
            header,
            tokens,
            residuals,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Capture {
        let h = 4;
        Capture {
            header: Header {
                hidden: h,
                role: 1,
                slot: 3,
                prompt_rows: 2,
                sequence: 9,
                n_records: 0,
            },
            // prompt [5, 6], generated [7, 8, 9]: residuals at positions 0..4
            tokens: vec![5, 6, 7, 8, 9],
            residuals: (0..16).map(|v| v as f32 * 0.5).collect(),
        }
    }

    #[test]
    fn round_trip() {
        let c = sample();
        let b = c.encode();
        assert_eq!(b.len(), HEADER_BYTES + 4 * record_bytes(4));
        let d = Capture::decode(&b).unwrap();
        assert_eq!(d.header.n_records, 4);
        assert_eq!(
            (d.tokens.clone(), d.residuals.clone()),
            (c.tokens, c.residuals)
        );
        assert_eq!(d.prompt(), &[5, 6]);
        assert_eq!(d.generated(), &[7, 8, 9]);
    }

    #[test]
    fn damaged_files_are_refused_with_the_check_named() {
        let b = sample().encode();
        let err = |b: &[u8]| Capture::decode(b).unwrap_err();
        assert!(err(&b[..10]).contains("truncated header"));
        assert!(err(&b[..b.len() - 3]).contains("does not divide the payload"));
        let mut m = b.clone();
        m[0] = b'X';
        assert!(err(&m).contains("bad magic"));
        let mut m = b.clone();
        let at = HEADER_BYTES + record_bytes(4) + RECORD_PREFIX + 8;
        m[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
        assert!(err(&m).contains("not finite"), "{}", err(&m));
        let mut m = b.clone();
        m[HEADER_BYTES + 2 * record_bytes(4) + 4] ^= 1; // input of position 2 != emitted at 1
        assert!(err(&m).contains("is not the token emitted"));
        let mut m = b.clone();
        m[44] = 9;
        assert!(err(&m).contains("header says 9 records"));
        // a whole record cut off: n_records no longer matches
        assert!(err(&b[..b.len() - record_bytes(4)]).contains("header says 4 records"));
    }
}
