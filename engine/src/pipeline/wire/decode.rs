//! Decoding: the header and every declared size checked against `WireLimits` before anything is
//! read or allocated, then the fields.

use bytes::Buf;

use super::{
    Message, RowHeader, TokenItem, WireError, WireLimits, FORWARD_FIELDS, HEADER, MAGIC,
    MAX_DRAFTS, ROW_HEADER, TOKENS_FIELDS, TOKEN_ITEM, VERSION,
};

impl Message {
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
        Ok(match kind {
            1 => forward(b, lim)?,
            2 => tokens(b, lim)?,
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
            16 => {
                need("roster query", b, 4)?;
                Message::RosterQuery {
                    rank: b.get_u32_le(),
                }
            }
            17 => {
                at_least("roster", b, 4)?;
                let addrs = text(&mut b, lim, "roster")?;
                Message::Roster { addrs }
            }
            k => return Err(WireError::Kind(k)),
        })
    }
}

/// `b` is exactly `want` bytes.
fn need(what: &'static str, b: &[u8], want: usize) -> Result<(), WireError> {
    if b.len() != want {
        Err(WireError::Length {
            what,
            got: b.len(),
            want,
        })
    } else {
        Ok(())
    }
}

/// `b` is at least `want` bytes.
fn at_least(what: &'static str, b: &[u8], want: usize) -> Result<(), WireError> {
    if b.len() < want {
        Err(WireError::Length {
            what,
            got: b.len(),
            want,
        })
    } else {
        Ok(())
    }
}

/// The body of a `Forward` message (kind 1).
fn forward(mut b: &[u8], lim: &WireLimits) -> Result<Message, WireError> {
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
    Ok(Message::Forward {
        seq,
        group,
        rows,
        hidden: hidden as u32,
        residual,
    })
}

/// The body of a `Tokens` message (kind 2).
fn tokens(mut b: &[u8], lim: &WireLimits) -> Result<Message, WireError> {
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
    Ok(Message::Tokens { seq, group, items })
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
