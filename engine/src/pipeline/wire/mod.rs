//! The wire format between roles: one message per length-delimited frame (little-endian length,
//! `link` sets the codec up), every field little-endian. Messages are checked before they are
//! decoded: the magic, the version, the kind, and every declared size against `WireLimits`, so a
//! corrupt or hostile frame is refused without allocating what it claims. This module holds the
//! wire-size constants, the limits and the message types, with the test that the constants are the
//! sizes of encoded messages; `encode` writes messages and `decode` checks and reads them.
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
//! RosterQuery rank u32              Roster    len u32 | UTF-8 addresses, one per line, by rank
//!          (a role asks role 0's return port who holds which rank, `pipeline::roster`)
//! ```
//!
//! Kind numbers: Forward 1, Tokens 2, Reset 3, Ping 5, Pong 6, ProfileRequest 7, ProfileReply 8,
//! CaptureReport 9, Shutdown 10, Fault 11, Rewind 12, Heartbeat 13, Sampling 14, Drafts 15,
//! RosterQuery 16, Roster 17 (4 was a `Truncate` that nothing sent; it stays unused).

mod decode;
mod encode;

pub const MAGIC: [u8; 4] = *b"MFLT";
pub const VERSION: u16 = 4;
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
    /// A role to role 0's return port, on a connection of its own: who holds which rank now
    /// (a spare may have taken a rank, `pipeline::roster`).
    RosterQuery {
        rank: u32,
    },
    /// Role 0's answer: every rank's address, one per line, rank 0 first.
    Roster {
        addrs: String,
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

/// A 64-bit hash of a logit row's bit patterns, for checking that two computations gave the same
/// row. Pairs of values are read as 64-bit words into eight interleaved chains (word i into chain
/// i mod 8), each step `mix64(state ^ word)` (SplitMix64's finaliser, a bijection that spreads
/// every bit); then the length, the chains and the odd tail fold into one the same way. Each step
/// is a bijection of the state for a given word, so a row that differs from another in one value
/// always hashes differently; two different changes collide about as often as random 64-bit
/// values. The last role hashes every sampled row (196 KB a row at SmolLM2's vocabulary): FNV-1a,
/// one byte at a time, took about 207 µs a row on host E and these eight chains take about 21 µs
/// (a one-off timing, not a committed record).
pub fn logits_hash(logits: &[f32]) -> u64 {
    let step = |h: u64, w: u64| crate::rng::mix64(h ^ w);
    let mut chains: [u64; 8] = std::array::from_fn(|k| 0xcbf2_9ce4_8422_2325 ^ k as u64);
    let mut words = logits.chunks_exact(16);
    for c in &mut words {
        for (k, h) in chains.iter_mut().enumerate() {
            let w = c[2 * k].to_bits() as u64 | (c[2 * k + 1].to_bits() as u64) << 32;
            *h = step(*h, w);
        }
    }
    let mut h = step(0, logits.len() as u64);
    for c in chains {
        h = step(h, c);
    }
    for v in words.remainder() {
        h = step(h, v.to_bits() as u64);
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

    /// Any one bit of any one value changes the hash, and so do two sign flips in the same chain
    /// (which a multiply-only chain would cancel), a swap of two values and the row's length.
    #[test]
    fn logits_hash_sees_every_change() {
        let row: Vec<f32> = (0..1027).map(|i| (i as f32 * 0.37).sin()).collect();
        let base = logits_hash(&row);
        let mut seen = std::collections::HashSet::new();
        for i in [0usize, 1, 2, 7, 8, 9, 500, 1023, 1024, 1026] {
            for bit in 0..32 {
                let mut r = row.clone();
                r[i] = f32::from_bits(r[i].to_bits() ^ (1 << bit));
                let h = logits_hash(&r);
                assert_ne!(h, base, "value {i} bit {bit}");
                seen.insert(h);
            }
        }
        assert_eq!(seen.len(), 10 * 32, "two single-bit changes collided");
        let mut r = row.clone();
        r[1] = -r[1];
        r[9] = -r[9];
        assert_ne!(logits_hash(&r), base);
        let mut r = row.clone();
        r.swap(3, 4);
        assert_ne!(logits_hash(&r), base);
        assert_ne!(logits_hash(&row[..1026]), base);
        assert_eq!(logits_hash(&row), base);
    }
}
