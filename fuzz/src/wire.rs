//! Fuzzing the wire decoder (`moefleet_engine::pipeline::wire`): `fuzz_check` is what every
//! input must satisfy, run by the coverage-guided target `fuzz/fuzz_targets/wire_decode.rs`
//! (cargo-fuzz, nightly; `scripts/fuzz-wire.sh` writes the record) and by the bounded stable run
//! in `fuzz/tests/wire.rs` (part of `make test`).
//!
//! An input is a selector byte, which picks two `WireLimits`, then bytes read two ways:
//!
//! - as a message: decoded under both limits. Decoding must not panic; every allocation it makes,
//!   in total, is at most the input's length (measured by `PeakAlloc`); a message it accepts is
//!   within the limits, is exactly the canonical encoding of what it decoded to (bytes equal
//!   except the reserved header byte, which the decoder ignores), and decodes again to the same
//!   bits (f32 fields compared as bits, NaN included).
//! - as a source of field values: a valid message of every kind is built from them (sizes within
//!   the selected limits), encoded and decoded back; then each of its declared lengths (row and
//!   item counts, hidden width, text lengths) is set to huge and near values (0xFFFF_FFFF, 2^31,
//!   2^30, limit + 1, actual ± 1) and the frame cut and extended by a byte: each must be refused
//!   with the matching error and without allocating at all.
//!
//! The allocation checks need `PeakAlloc` as the process's global allocator; `fuzz_check` panics
//! if it is not (a check that could not measure would pass vacuously).

use moefleet_engine::pipeline::wire::{
    Message, RowHeader, TokenItem, WireError, WireLimits, MAX_DRAFTS,
};
use moefleet_engine::sampling::Sampling;

use crate::alloc::{measure_start, measured, peak_alloc_installed};
use crate::source::Source;

/// Every message kind the decoder knows (4 is retired).
pub const KINDS: [u8; 16] = [1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17];

/// Names of the decoder's refusals, in `Tally::refused` order.
pub const ERRORS: [&str; 9] = [
    "Short", "Magic", "Version", "Kind", "TooLarge", "Hidden", "Length", "Utf8", "Flag",
];

/// What the checks saw (so a bounded run can show it reached every kind and every refusal).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Raw inputs decoded, by kind.
    pub accepted: [u64; 18],
    /// Raw inputs refused, by `ERRORS` index.
    pub refused: [u64; 9],
    /// Valid messages built from field values and round-tripped.
    pub built: u64,
    /// Corrupted declared lengths (above the limit) refused without allocating.
    pub huge_refused: u64,
}

impl Tally {
    pub fn add(&mut self, o: &Tally) {
        for (a, b) in self.accepted.iter_mut().zip(o.accepted) {
            *a += b;
        }
        for (a, b) in self.refused.iter_mut().zip(o.refused) {
            *a += b;
        }
        self.built += o.built;
        self.huge_refused += o.huge_refused;
    }
}

fn error_index(e: &WireError) -> usize {
    match e {
        WireError::Short(_) => 0,
        WireError::Magic(_) => 1,
        WireError::Version(_) => 2,
        WireError::Kind(_) => 3,
        WireError::TooLarge { .. } => 4,
        WireError::Hidden { .. } => 5,
        WireError::Length { .. } => 6,
        WireError::Utf8 => 7,
        WireError::Flag(_) => 8,
    }
}

/// The two limits a selector byte picks: small ones from its bits (hidden 0..=28 in steps of 4,
/// 0/1/3/16 rows, 0/5/64/1 MiB of text) and a fleet's own (`WireLimits::new`, hidden 8 or 256).
pub fn limits(sel: u8) -> [WireLimits; 2] {
    [
        WireLimits {
            hidden: (sel & 7) as usize * 4,
            max_rows: [0, 1, 3, 16][((sel >> 3) & 3) as usize],
            max_text: [0, 5, 64, 1 << 20][((sel >> 5) & 3) as usize],
        },
        WireLimits::new(if sel & 0x80 != 0 { 256 } else { 8 }),
    ]
}

/// A valid message of `kind` (one of `KINDS`) within `lim`, its fields from `src` (at most 4 rows
/// or items and 40 bytes of text, so inputs stay small).
pub fn message_from(kind: u8, src: &mut Source, lim: &WireLimits) -> Message {
    let text_max = lim.max_text.min(40);
    match kind {
        1 => {
            let n = src.size(lim.max_rows.min(4));
            let rows = (0..n)
                .map(|_| RowHeader {
                    slot: src.u32(),
                    pos: src.u32(),
                    token: src.u32(),
                    flags: src.u32(),
                })
                .collect();
            Message::Forward {
                seq: src.u64(),
                group: src.u32(),
                rows,
                hidden: lim.hidden as u32,
                residual: (0..n * lim.hidden)
                    .map(|_| f32::from_bits(src.u32()))
                    .collect(),
            }
        }
        2 => {
            let n = src.size(lim.max_rows.min(4));
            Message::Tokens {
                seq: src.u64(),
                group: src.u32(),
                items: (0..n)
                    .map(|_| TokenItem {
                        slot: src.u32(),
                        pos: src.u32(),
                        token: src.u32(),
                        logit: f32::from_bits(src.u32()),
                        hash: src.u64(),
                    })
                    .collect(),
            }
        }
        3 => Message::Reset { slot: src.u32() },
        5 => Message::Ping { nonce: src.u64() },
        6 => Message::Pong {
            nonce: src.u64(),
            roles: src.u32(),
        },
        7 => Message::ProfileRequest { nonce: src.u64() },
        8 => Message::ProfileReply {
            nonce: src.u64(),
            role: src.u32(),
            json: src.text(text_max),
        },
        9 => Message::CaptureReport {
            slot: src.u32(),
            serial: src.u64(),
            ok: src.u8() & 1 == 1,
            sequence: src.u64(),
            bytes: src.u64(),
            text: src.text(text_max),
        },
        10 => Message::Shutdown,
        11 => Message::Fault {
            role: src.u32(),
            message: src.text(text_max),
        },
        12 => Message::Rewind {
            slot: src.u32(),
            pos: src.u32(),
        },
        13 => Message::Heartbeat,
        14 => Message::Sampling {
            slot: src.u32(),
            sampling: Sampling {
                temperature: f32::from_bits(src.u32()),
                top_p: f32::from_bits(src.u32()),
                top_k: src.u32(),
                seed: src.u64(),
            },
        },
        15 => {
            let n = src.size(4);
            Message::Drafts {
                seq: src.u64(),
                slot: src.u32(),
                pos: src.u32(),
                tokens: (0..n).map(|_| src.u32()).collect(),
            }
        }
        16 => Message::RosterQuery { rank: src.u32() },
        17 => Message::Roster {
            addrs: src.text(text_max),
        },
        k => panic!("message_from: {k} is not a message kind"),
    }
}

/// A declared length of an encoded message: where its u32 is, what it declares, the limit it is
/// checked against, and whether it is the hidden width (checked for equality, not a bound).
#[derive(Clone, Copy)]
struct LengthField {
    at: usize,
    actual: usize,
    limit: usize,
    hidden: bool,
}

/// The declared lengths of `m` (at most two).
fn length_fields(m: &Message, lim: &WireLimits) -> [Option<LengthField>; 2] {
    let field = |at, actual, limit| LengthField {
        at,
        actual,
        limit,
        hidden: false,
    };
    match m {
        Message::Forward { rows, hidden, .. } => [
            Some(field(20, rows.len(), lim.max_rows)),
            Some(LengthField {
                hidden: true,
                ..field(24, *hidden as usize, lim.hidden)
            }),
        ],
        Message::Tokens { items, .. } => [Some(field(20, items.len(), lim.max_rows)), None],
        Message::Drafts { tokens, .. } => [Some(field(24, tokens.len(), MAX_DRAFTS)), None],
        Message::ProfileReply { json, .. } => [Some(field(20, json.len(), lim.max_text)), None],
        Message::CaptureReport { text, .. } => [Some(field(37, text.len(), lim.max_text)), None],
        Message::Fault { message, .. } => [Some(field(12, message.len(), lim.max_text)), None],
        Message::Roster { addrs } => [Some(field(8, addrs.len(), lim.max_text)), None],
        _ => [None, None],
    }
}

fn decode_measured(buf: &[u8], lim: &WireLimits) -> (Result<Message, WireError>, usize, usize) {
    measure_start();
    let r = Message::decode(buf, lim);
    let (peak, total) = measured();
    (r, peak, total)
}

fn in_limits(m: &Message, lim: &WireLimits) -> bool {
    match m {
        Message::Forward {
            rows,
            hidden,
            residual,
            ..
        } => {
            *hidden as usize == lim.hidden
                && rows.len() <= lim.max_rows
                && residual.len() == rows.len() * lim.hidden
        }
        Message::Tokens { items, .. } => items.len() <= lim.max_rows,
        Message::Drafts { tokens, .. } => tokens.len() <= MAX_DRAFTS,
        Message::ProfileReply { json: s, .. }
        | Message::CaptureReport { text: s, .. }
        | Message::Fault { message: s, .. }
        | Message::Roster { addrs: s } => s.len() <= lim.max_text,
        _ => true,
    }
}

/// Decode `buf` under `lim` and check everything an arbitrary input must satisfy.
fn check_raw(buf: &[u8], lim: &WireLimits, t: &mut Tally) {
    let (r, peak, total) = decode_measured(buf, lim);
    assert!(
        total <= buf.len(),
        "decoding {} bytes allocated {total} bytes (largest {peak}) under {lim:?}",
        buf.len()
    );
    match r {
        Err(e) => {
            if let WireError::Short(n) = e {
                assert!(
                    n == buf.len() && n < 8,
                    "Short({n}) for {} bytes",
                    buf.len()
                );
            }
            t.refused[error_index(&e)] += 1;
        }
        Ok(m) => {
            assert!(in_limits(&m, lim), "accepted {m:?} outside {lim:?}");
            let enc = m.encode();
            assert!(
                enc.len() == buf.len() && enc[..7] == buf[..7] && enc[8..] == buf[8..],
                "accepted bytes are not the canonical encoding of {m:?}"
            );
            assert!(enc.len() <= lim.max_frame(), "accepted above max_frame");
            match Message::decode(&enc, lim) {
                Ok(again) => assert!(again.encode() == enc, "round trip changed {m:?}"),
                Err(e) => panic!("re-encoded {m:?} refused: {e}"),
            }
            t.accepted[buf[6] as usize] += 1;
        }
    }
}

/// Round-trip a valid message, then refuse every corruption of its declared lengths and size
/// without allocating.
fn check_built(m: &Message, lim: &WireLimits, t: &mut Tally) {
    let enc = m.encode();
    assert!(
        enc.len() <= lim.max_frame(),
        "{m:?} encodes above max_frame"
    );
    let (r, _, total) = decode_measured(&enc, lim);
    match r {
        Ok(d) => assert!(d.encode() == enc, "round trip changed {m:?}"),
        Err(e) => panic!("valid {m:?} refused under {lim:?}: {e}"),
    }
    assert!(
        total <= enc.len(),
        "decoding a valid message allocated {total} bytes for {}",
        enc.len()
    );
    t.built += 1;

    let refused = |buf: &[u8]| {
        let (r, peak, total) = decode_measured(buf, lim);
        assert!(
            total == 0,
            "a refused frame allocated {total} bytes (largest {peak})"
        );
        match r {
            Err(e) => e,
            Ok(d) => panic!("corrupted {m:?} accepted as {d:?}"),
        }
    };
    // one buffer for every corruption, restored after each
    let mut bad = Vec::with_capacity(enc.len() + 1);
    bad.extend_from_slice(&enc);
    for f in length_fields(m, lim).into_iter().flatten() {
        let limit_plus = u32::try_from(f.limit.saturating_add(1)).unwrap_or(u32::MAX);
        let actual = f.actual as u32;
        let below = actual.checked_sub(1).unwrap_or(u32::MAX);
        for v in [u32::MAX, 1 << 31, 1 << 30, limit_plus, actual + 1, below] {
            bad[f.at..f.at + 4].copy_from_slice(&v.to_le_bytes());
            let e = refused(&bad);
            let declared = v as usize;
            let ok = if f.hidden {
                e == WireError::Hidden {
                    got: declared,
                    want: f.limit,
                }
            } else if declared > f.limit {
                t.huge_refused += 1;
                matches!(e, WireError::TooLarge { declared: d, limit: l, .. }
                    if d == declared && l == f.limit)
            } else {
                matches!(e, WireError::Length { .. })
            };
            assert!(ok, "{m:?} with {v} at byte {}: {e:?}", f.at);
        }
        bad[f.at..f.at + 4].copy_from_slice(&enc[f.at..f.at + 4]);
    }
    // one byte short (of the header too, for an empty body) and one byte long
    let e = refused(&bad[..enc.len() - 1]);
    assert!(
        matches!(e, WireError::Length { .. } | WireError::Short(_)),
        "{m:?} cut short: {e:?}"
    );
    bad.push(0);
    let e = refused(&bad);
    assert!(
        matches!(e, WireError::Length { .. }),
        "{m:?} one byte long: {e:?}"
    );
}

/// Every check, for one input (see the module's documentation). Panics on a failure.
pub fn fuzz_check(data: &[u8]) -> Tally {
    assert!(
        peak_alloc_installed(),
        "moefleet_fuzz::PeakAlloc must be the global allocator"
    );
    let mut t = Tally::default();
    let Some((&sel, rest)) = data.split_first() else {
        return t;
    };
    let lims = limits(sel);
    for lim in &lims {
        check_raw(rest, lim, &mut t);
    }
    let mut src = Source::new(rest);
    for kind in KINDS {
        let m = message_from(kind, &mut src, &lims[0]);
        check_built(&m, &lims[0], &mut t);
    }
    t
}

/// The seed corpus (`fuzz/seeds/wire_decode`): for every kind, a message built from a fixed byte
/// pattern under the selector 0x52's small limits (hidden 8, 3 rows, 64 bytes of text) and one
/// under `WireLimits::new(8)` (selector 0x00), each as selector byte then encoding. (name, bytes).
pub fn seed_corpus() -> Vec<(String, Vec<u8>)> {
    let pattern: Vec<u8> = (0..=255u8)
        .map(|i| i.wrapping_mul(37).wrapping_add(11))
        .collect();
    let mut out = Vec::new();
    for kind in KINDS {
        for (i, (sel, which)) in [(0x52u8, 0usize), (0x00, 1)].into_iter().enumerate() {
            let lim = limits(sel)[which];
            let m = message_from(kind, &mut Source::new(&pattern), &lim);
            let mut b = vec![sel];
            b.extend_from_slice(&m.encode());
            out.push((format!("kind{kind:02}-{i}"), b));
        }
    }
    out
}
