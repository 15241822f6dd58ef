//! Encoding: every message into a fresh buffer, header first, every field little-endian.

use bytes::{BufMut, Bytes, BytesMut};

use super::{
    Message, FORWARD_FIELDS, HEADER, MAGIC, ROW_HEADER, TOKENS_FIELDS, TOKEN_ITEM, VERSION,
};

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
            Message::RosterQuery { .. } => 16,
            Message::Roster { .. } => 17,
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
            Message::RosterQuery { rank } => b.put_u32_le(*rank),
            Message::Roster { addrs } => {
                b.put_u32_le(addrs.len() as u32);
                b.put_slice(addrs.as_bytes());
            }
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
                Message::Roster { addrs } => 4 + addrs.len(),
                _ => 16,
            }
    }
}
