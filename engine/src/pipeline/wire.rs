//! The wire format between roles: one message per length-delimited frame (little-endian length,
//! `link` sets the codec up), every field little-endian. Messages are checked before they are
//! decoded: the magic, the version, the kind, and every declared size against `WireLimits`, so a
//! corrupt or hostile frame is refused without allocating what it claims. Over 600 lines with its
//! unit tests: encoder, checked decoder and the wire-size constants stay together so they cannot drift.
//!
//! ```text
//! header   magic "MFLT" | version u16 | kind u8 | reserved u8
//! Forward  seq u64 | group u32 | n_rows u32 | hidden u32 | n_rows x (slot, pos, token, flags: u32)
//!          | n_rows x hidden f32
//! Tokens   seq u64 | group u32 | n u32 | n x (slot u32, pos u32, token u32, logit f32, hash u64)
//! Reset    slot u32
//! Ping     nonce u64                Pong      nonce u64 | roles u32
//! ProfileRequest nonce u64          ProfileReply nonce u64 | role u32 | len u32 | JSON bytes
//! CaptureReport slot u32 | serial u64 | ok u8 | sequence u64 | bytes u64 | len u32 | UTF-8 path
//!          or error (serial: the slot's capture count, so role 0 matches reports to streams)
//! Shutdown (empty)                  Fault     role u32 | len u32 | UTF-8 message
//! Rewind   slot u32 | pos u32        (every role truncates the slot's state to `pos` positions)
//! Heartbeat (empty: a link's liveness, sent when the link has been quiet; never passed on)
//! Sampling slot u32 | temperature f32 | top_p f32 | top_k u32 | seed u64  (the last role samples
//!          the slot's rows so until the slot's next Reset; greedy otherwise)
//! Drafts   seq u64 | slot u32 | pos u32 | n u32 | n x token u32  (the last role's draft head, after
//!          the Tokens of frame `seq`: the inputs it guesses at pos + 2 ..; at most MAX_DRAFTS)
//! ```
//!
//! Kind numbers: Forward 1, Tokens 2, Reset 3, Ping 5, Pong 6, ProfileRequest 7, ProfileReply 8,
//! CaptureReport 9, Shutdown 10, Fault 11, Rewind 12, Heartbeat 13, Sampling 14, Drafts 15 (4 was a `Truncate` that nothing sent; it
//! stays unused).

use bytes::{Buf, BufMut, Bytes, BytesMut};

pub const MAGIC: [u8; 4] = *b"MFLT";
pub const VERSION: u16 = 3;
/// Bytes of every message's header (magic, version, kind, reserved).
pub const HEADER: usize = 8;
/// Bytes of a `Forward` message's fixed fields after the header (seq, group, n_rows, hidden).
pub const FORWARD_FIELDS: usize = 20;
/// Bytes of one row header of a `Forward` message (slot, pos, token, flags).
pub const ROW_HEADER: usize = 16;
/// Bytes of a `Tokens` message's fixed fields after the header (seq, group, n).
pub const TOKENS_FIELDS: usize = 16;
/// Bytes of one item of a `Tokens` message (slot, pos, token, logit, hash).
pub const TOKEN_ITEM: usize = 24;
/// Bytes of the length prefix `link` writes before every message (a little-endian u32).
pub const LENGTH_PREFIX: usize = 4;

/// Bytes on the wire, length prefix included, of a `Forward` message of `rows` rows of `hidden`
/// f32 each (the fleet simulator's link model charges these).
pub const fn forward_wire_bytes(rows: usize, hidden: usize) -> usize {
    LENGTH_PREFIX + HEADER + FORWARD_FIELDS + rows * (ROW_HEADER + 4 * hidden)
}

/// Bytes on the wire, length prefix included, of a `Tokens` message of `items` items.
pub const fn tokens_wire_bytes(items: usize) -> usize {
    LENGTH_PREFIX + HEADER + TOKENS_FIELDS + items * TOKEN_ITEM
}

/// Row flag: the last role samples this row and returns its token to role 0.
pub const FLAG_SAMPLE: u32 = 1;
/// Row flag: the last role records this row in the stream's capture (ARCHITECTURE.md §3.4).
pub const FLAG_CAPTURE: u32 = 2;
/// Row flag (on every row of the frame): role 0 sent this frame with no other frame in flight, so
/// the roles that share a machine's cores may each compute it on all of them (`pipeline::frame_width`).
/// Decided at launch: a lone stream's decode frames carry it, and a prompt's first window, though
/// the windows that follow it into the pipeline then overlap it.
pub const FLAG_ALONE: u32 = 4;
/// Row flag: the last role runs its draft head on this row (the stream is drafted, `spec::mtp`).
pub const FLAG_DRAFT: u32 = 8;
/// Tokens a `Drafts` message may carry.
pub const MAX_DRAFTS: usize = 64;
/// Token value of a reply item for a row that was not sampled (prefill progress only).
pub const NO_TOKEN: u32 = u32::MAX;

/// Sizes a receiver accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireLimits {
    pub hidden: usize,
    pub max_rows: usize,
    pub max_text: usize,
}

impl WireLimits {
    pub fn new(hidden: usize) -> Self {
        WireLimits {
            hidden,
            max_rows: 4096,
            max_text: 1 << 20,
        }
    }

    /// The largest encoded message these limits allow (the codec's frame-length limit).
    pub fn max_frame(&self) -> usize {
        let forward = forward_wire_bytes(self.max_rows, self.hidden) - LENGTH_PREFIX;
        let tokens = tokens_wire_bytes(self.max_rows) - LENGTH_PREFIX;
        let drafts = HEADER + 20 + 4 * MAX_DRAFTS;
        forward
            .max(tokens)
            .max(HEADER + 33 + self.max_text)
            .max(drafts)
    }
}

/// One row of a forward frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowHeader {
    pub slot: u32,
    pub pos: u32,
    pub token: u32,
    pub flags: u32,
}

/// One sampled (or progress-only) row coming back to role 0.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenItem {
    pub slot: u32,
    pub pos: u32,
    pub token: u32,
    /// The winning logit (NaN for progress-only items).
    pub logit: f32,
    /// FNV-1a over the bits of the row's whole logit vector (parity checks), 0 if not sampled.
    pub hash: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    Forward {
        seq: u64,
        group: u32,
        rows: Vec<RowHeader>,
        hidden: u32,
        residual: Vec<f32>,
    },
    Tokens {
        seq: u64,
        group: u32,
        items: Vec<TokenItem>,
    },
    Reset {
        slot: u32,
    },
    Ping {
        nonce: u64,
    },
    Pong {
        nonce: u64,
        roles: u32,
    },
    ProfileRequest {
        nonce: u64,
    },
    ProfileReply {
        nonce: u64,
        role: u32,
        json: String,
    },
    /// Last role to role 0: what became of the capture of a stream that ended in `slot` (the
    /// file's path, or the error).
    CaptureReport {
        slot: u32,
        /// The slot's capture serial (0, 1, 2, … per slot).
        serial: u64,
        ok: bool,
        sequence: u64,
        bytes: u64,
        text: String,
    },
    Shutdown,
    /// Role 0 to every role: a rejected proposal, and every row behind it, are undone: the slot's
    /// state keeps positions `0..pos` (speculative injection, ARCHITECTURE.md §3.3).
    Rewind {
        slot: u32,
        pos: u32,
    },
    Fault {
        role: u32,
        message: String,
    },
    /// A link's sender is alive: written on a link that has been quiet for a heartbeat interval,
    /// so the receiver can tell a stalled neighbour or a cut link from a slow frame.
    Heartbeat,
    /// Role 0 to every role: how the last role samples `slot`'s rows until the slot is reset.
    Sampling {
        slot: u32,
        sampling: crate::sampling::Sampling,
    },
    /// Last role to role 0, right after the `Tokens` of frame `seq`: the draft head's guesses of
    /// the inputs at `pos + 2 ..` of `slot` (its row at `pos` was sampled in that frame).
    Drafts {
        seq: u64,
        slot: u32,
        pos: u32,
        tokens: Vec<u32>,
    },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("message of {0} bytes is shorter than its header")]
    Short(usize),
    #[error("bad magic {0:02x?}")]
    Magic([u8; 4]),
    #[error("wire version {0}, this build speaks {VERSION}")]
    Version(u16),
    #[error("unknown message kind {0}")]
    Kind(u8),
    #[error("{what}: declared {declared} exceeds the limit {limit}")]
    TooLarge {
        what: &'static str,
        declared: usize,
        limit: usize,
    },
    #[error("frame hidden width {got}, this fleet uses {want}")]
    Hidden { got: usize, want: usize },
    #[error("{what}: body is {got} bytes, its declared sizes need {want}")]
    Length {
        what: &'static str,
        got: usize,
        want: usize,
    },
    #[error("text is not UTF-8")]
    Utf8,
    #[error("capture report flag {0} is neither 0 nor 1")]
    Flag(u8),
}

impl Message {
    fn kind(&self) -> u8 {
        match self {
            Message::Forward { .. } => 1,
            Message::Tokens { .. } => 2,
            Message::Reset { .. } => 3,
            Message::Ping { .. } => 5,
            Message::Pong { .. } => 6,
            Message::ProfileRequest { .. } => 7,
            Message::ProfileReply { .. } => 8,
            Message::CaptureReport { .. } => 9,
            Message::Shutdown => 10,
            Message::Fault { .. } => 11,
            Message::Rewind { .. } => 12,
            Message::Heartbeat => 13,
            Message::Sampling { .. } => 14,
            Message::Drafts { .. } => 15,
        }
    }

    /// Encode into a fresh buffer.
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(self.encoded_len());
        b.put_slice(&MAGIC);
        b.put_u16_le(VERSION);
        b.put_u8(self.kind());
        b.put_u8(0);
        match self {
            Message::Forward {
                seq,
                group,
                rows,
                hidden,
                residual,
            } => {
                b.put_u64_le(*seq);
                b.put_u32_le(*group);
                b.put_u32_le(rows.len() as u32);
                b.put_u32_le(*hidden);
                for r in rows {
                    b.put_u32_le(r.slot);
                    b.put_u32_le(r.pos);
                    b.put_u32_le(r.token);
                    b.put_u32_le(r.flags);
                }
                for v in residual {
                    b.put_f32_le(*v);
                }
            }
            Message::Tokens { seq, group, items } => {
                b.put_u64_le(*seq);
                b.put_u32_le(*group);
                b.put_u32_le(items.len() as u32);
                for t in items {
                    b.put_u32_le(t.slot);
                    b.put_u32_le(t.pos);
                    b.put_u32_le(t.token);
                    b.put_f32_le(t.logit);
                    b.put_u64_le(t.hash);
                }
            }
            Message::Reset { slot } => b.put_u32_le(*slot),
            Message::Sampling { slot, sampling } => {
                b.put_u32_le(*slot);
                b.put_f32_le(sampling.temperature);
                b.put_f32_le(sampling.top_p);
                b.put_u32_le(sampling.top_k);
                b.put_u64_le(sampling.seed);
            }
            Message::Rewind { slot, pos } => {
                b.put_u32_le(*slot);
                b.put_u32_le(*pos);
            }
            Message::Drafts {
                seq,
                slot,
                pos,
                tokens,
            } => {
                b.put_u64_le(*seq);
                b.put_u32_le(*slot);
                b.put_u32_le(*pos);
                b.put_u32_le(tokens.len() as u32);
                for t in tokens {
                    b.put_u32_le(*t);
                }
            }
            Message::Ping { nonce } | Message::ProfileRequest { nonce } => b.put_u64_le(*nonce),
            Message::Pong { nonce, roles } => {
                b.put_u64_le(*nonce);
                b.put_u32_le(*roles);
            }
            Message::ProfileReply { nonce, role, json } => {
                b.put_u64_le(*nonce);
                b.put_u32_le(*role);
                b.put_u32_le(json.len() as u32);
                b.put_slice(json.as_bytes());
            }
            Message::CaptureReport {
                slot,
                serial,
                ok,
                sequence,
                bytes,
                text,
            } => {
                b.put_u32_le(*slot);
                b.put_u64_le(*serial);
                b.put_u8(*ok as u8);
                b.put_u64_le(*sequence);
                b.put_u64_le(*bytes);
                b.put_u32_le(text.len() as u32);
                b.put_slice(text.as_bytes());
            }
            Message::Shutdown | Message::Heartbeat => {}
            Message::Fault { role, message } => {
                b.put_u32_le(*role);
                b.put_u32_le(message.len() as u32);
                b.put_slice(message.as_bytes());
            }
        }
        b.freeze()
    }

    fn encoded_len(&self) -> usize {
        HEADER
            + match self {
                Message::Forward { rows, residual, .. } => {
                    FORWARD_FIELDS + rows.len() * ROW_HEADER + 4 * residual.len()
                }
                Message::Tokens { items, .. } => TOKENS_FIELDS + items.len() * TOKEN_ITEM,
                Message::ProfileReply { json, .. } => 16 + json.len(),
                Message::Fault { message, .. } => 8 + message.len(),
                Message::CaptureReport { text, .. } => 33 + text.len(),
                Message::Sampling { .. } => 24,
                Message::Drafts { tokens, .. } => 20 + 4 * tokens.len(),
                _ => 16,
            }
    }

    /// Check, then decode, one message.
    pub fn decode(buf: &[u8], lim: &WireLimits) -> Result<Message, WireError> {
        if buf.len() < HEADER {
            return Err(WireError::Short(buf.len()));
        }
        let magic = [buf[0], buf[1], buf[2], buf[3]];
        if magic != MAGIC {
            return Err(WireError::Magic(magic));
        }
        let version = u16::from_le_bytes([buf[4], buf[5]]);
        if version != VERSION {
            return Err(WireError::Version(version));
        }
        let kind = buf[6];
        let mut b = &buf[HEADER..];
        let need = |what: &'static str, b: &[u8], want: usize| {
            if b.len() != want {
                Err(WireError::Length {
                    what,
                    got: b.len(),
                    want,
                })
            } else {
                Ok(())
            }
        };
        let at_least = |what: &'static str, b: &[u8], want: usize| {
            if b.len() < want {
                Err(WireError::Length {
                    what,
                    got: b.len(),
                    want,
                })
            } else {
                Ok(())
            }
        };
        Ok(match kind {
            1 => {
                at_least("forward", b, FORWARD_FIELDS)?;
                let seq = b.get_u64_le();
                let group = b.get_u32_le();
                let n = b.get_u32_le() as usize;
                let hidden = b.get_u32_le() as usize;
                if n > lim.max_rows {
                    return Err(WireError::TooLarge {
                        what: "forward rows",
                        declared: n,
                        limit: lim.max_rows,
                    });
                }
                if hidden != lim.hidden {
                    return Err(WireError::Hidden {
                        got: hidden,
                        want: lim.hidden,
                    });
                }
                need("forward", b, n * (ROW_HEADER + 4 * hidden))?;
                let rows = (0..n)
                    .map(|_| RowHeader {
                        slot: b.get_u32_le(),
                        pos: b.get_u32_le(),
                        token: b.get_u32_le(),
                        flags: b.get_u32_le(),
                    })
                    .collect();
                let residual = (0..n * hidden).map(|_| b.get_f32_le()).collect();
                Message::Forward {
                    seq,
                    group,
                    rows,
                    hidden: hidden as u32,
                    residual,
                }
            }
            2 => {
                at_least("tokens", b, TOKENS_FIELDS)?;
                let seq = b.get_u64_le();
                let group = b.get_u32_le();
                let n = b.get_u32_le() as usize;
                if n > lim.max_rows {
                    return Err(WireError::TooLarge {
                        what: "token items",
                        declared: n,
                        limit: lim.max_rows,
                    });
                }
                need("tokens", b, n * TOKEN_ITEM)?;
                let items = (0..n)
                    .map(|_| TokenItem {
                        slot: b.get_u32_le(),
                        pos: b.get_u32_le(),
                        token: b.get_u32_le(),
                        logit: b.get_f32_le(),
                        hash: b.get_u64_le(),
                    })
                    .collect();
                Message::Tokens { seq, group, items }
            }
            3 => {
                need("reset", b, 4)?;
                Message::Reset {
                    slot: b.get_u32_le(),
                }
            }
            5 => {
                need("ping", b, 8)?;
                Message::Ping {
                    nonce: b.get_u64_le(),
                }
            }
            6 => {
                need("pong", b, 12)?;
                Message::Pong {
                    nonce: b.get_u64_le(),
                    roles: b.get_u32_le(),
                }
            }
            7 => {
                need("profile request", b, 8)?;
                Message::ProfileRequest {
                    nonce: b.get_u64_le(),
                }
            }
            8 => {
                at_least("profile reply", b, 16)?;
                let nonce = b.get_u64_le();
                let role = b.get_u32_le();
                let json = text(&mut b, lim, "profile reply")?;
                Message::ProfileReply { nonce, role, json }
            }
            9 => {
                at_least("capture report", b, 33)?;
                let slot = b.get_u32_le();
                let serial = b.get_u64_le();
                let ok = match b.get_u8() {
                    0 => false,
                    1 => true,
                    v => return Err(WireError::Flag(v)),
                };
                let sequence = b.get_u64_le();
                let bytes = b.get_u64_le();
                let text = text(&mut b, lim, "capture report")?;
                Message::CaptureReport {
                    slot,
                    serial,
                    ok,
                    sequence,
                    bytes,
                    text,
                }
            }
            10 => {
                need("shutdown", b, 0)?;
                Message::Shutdown
            }
            11 => {
                at_least("fault", b, 8)?;
                let role = b.get_u32_le();
                let message = text(&mut b, lim, "fault")?;
                Message::Fault { role, message }
            }
            12 => {
                need("rewind", b, 8)?;
                Message::Rewind {
                    slot: b.get_u32_le(),
                    pos: b.get_u32_le(),
                }
            }
            13 => {
                need("heartbeat", b, 0)?;
                Message::Heartbeat
            }
            14 => {
                need("sampling", b, 24)?;
                Message::Sampling {
                    slot: b.get_u32_le(),
                    sampling: crate::sampling::Sampling {
                        temperature: b.get_f32_le(),
                        top_p: b.get_f32_le(),
                        top_k: b.get_u32_le(),
                        seed: b.get_u64_le(),
                    },
                }
            }
            15 => {
                at_least("drafts", b, 20)?;
                let seq = b.get_u64_le();
                let slot = b.get_u32_le();
                let pos = b.get_u32_le();
                let n = b.get_u32_le() as usize;
                if n > MAX_DRAFTS {
                    return Err(WireError::TooLarge {
                        what: "drafts",
                        declared: n,
                        limit: MAX_DRAFTS,
                    });
                }
                need("drafts", b, 4 * n)?;
                Message::Drafts {
                    seq,
                    slot,
                    pos,
                    tokens: (0..n).map(|_| b.get_u32_le()).collect(),
                }
            }
            k => return Err(WireError::Kind(k)),
        })
    }
}

/// A u32 length then that many UTF-8 bytes, exactly filling the rest of the body.
fn text(b: &mut &[u8], lim: &WireLimits, what: &'static str) -> Result<String, WireError> {
    let len = b.get_u32_le() as usize;
    if len > lim.max_text {
        return Err(WireError::TooLarge {
            what,
            declared: len,
            limit: lim.max_text,
        });
    }
    if b.len() != len {
        return Err(WireError::Length {
            what,
            got: b.len(),
            want: len,
        });
    }
    String::from_utf8(b.to_vec()).map_err(|_| WireError::Utf8)
}

/// FNV-1a over the bit patterns of a logit row.
pub fn logits_hash(logits: &[f32]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for v in logits {
        for byte in v.to_bits().to_le_bytes() {
            h = (h ^ byte as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forward(rows: usize, hidden: usize) -> Message {
        Message::Forward {
            seq: 7,
            group: 1,
            rows: (0..rows as u32)
                .map(|i| RowHeader {
                    slot: i,
                    pos: 3 * i,
                    token: 11,
                    flags: FLAG_SAMPLE,
                })
                .collect(),
            hidden: hidden as u32,
            residual: vec![0.5; rows * hidden],
        }
    }

    fn tokens(n: usize) -> Message {
        Message::Tokens {
            seq: 7,
            group: 1,
            items: (0..n as u32)
                .map(|i| TokenItem {
                    slot: i,
                    pos: i,
                    token: 5,
                    logit: 1.5,
                    hash: 99,
                })
                .collect(),
        }
    }

    /// The sizes the fleet simulator charges links for are the sizes of real encoded messages.
    #[test]
    fn size_consts_are_the_encoded_sizes() {
        let lim = WireLimits::new(6);
        assert_eq!(Message::Shutdown.encode().len(), HEADER);
        for (rows, hidden) in [(0, 6), (1, 6), (3, 6), (8, 1)] {
            let b = forward(rows, hidden).encode();
            assert_eq!(
                b.len(),
                HEADER + FORWARD_FIELDS + rows * ROW_HEADER + 4 * rows * hidden
            );
            assert_eq!(forward_wire_bytes(rows, hidden), LENGTH_PREFIX + b.len());
            if hidden == 6 {
                assert_eq!(Message::decode(&b, &lim).unwrap(), forward(rows, hidden));
            }
        }
        for n in [0, 1, 5] {
            let b = tokens(n).encode();
            assert_eq!(b.len(), HEADER + TOKENS_FIELDS + n * TOKEN_ITEM);
            assert_eq!(tokens_wire_bytes(n), LENGTH_PREFIX + b.len());
            assert_eq!(Message::decode(&b, &lim).unwrap(), tokens(n));
        }
        // one more item or row is exactly one more item or row
        let one = tokens(1).encode().len() - tokens(0).encode().len();
        assert_eq!(one, TOKEN_ITEM);
        let row = forward(2, 6).encode().len() - forward(1, 6).encode().len();
        assert_eq!(row, ROW_HEADER + 4 * 6);
    }
}
