//! The wire format: a round trip per message kind, header and size checks before decoding, and
//! random or mutated bytes that must never panic.

#![allow(clippy::unwrap_used)]

use moefleet_engine::pipeline::wire::*;
fn lim() -> WireLimits {
    WireLimits::new(8)
}

fn all_kinds() -> Vec<Message> {
    vec![
        Message::Forward {
            seq: 9,
            group: 2,
            rows: vec![
                RowHeader {
                    slot: 1,
                    pos: 5,
                    token: 77,
                    flags: FLAG_SAMPLE,
                },
                RowHeader {
                    slot: 3,
                    pos: 0,
                    token: 4,
                    flags: 0,
                },
            ],
            hidden: 8,
            residual: (0..16).map(|i| i as f32 * -0.5).collect(),
        },
        Message::Tokens {
            seq: 9,
            group: 2,
            items: vec![TokenItem {
                slot: 1,
                pos: 6,
                token: 12,
                logit: 3.5,
                hash: 0xdead_beef,
            }],
        },
        Message::Reset { slot: 4 },
        Message::Rewind { slot: 4, pos: 17 },
        Message::Heartbeat,
        Message::Sampling {
            slot: 4,
            sampling: moefleet_engine::sampling::Sampling {
                temperature: 0.8,
                top_p: 0.9,
                top_k: 40,
                seed: u64::MAX - 3,
            },
        },
        Message::Ping { nonce: 42 },
        Message::Pong {
            nonce: 42,
            roles: 11,
        },
        Message::ProfileRequest { nonce: 3 },
        Message::ProfileReply {
            nonce: 3,
            role: 5,
            json: "{\"rows\":1}".into(),
        },
        Message::CaptureReport {
            slot: 4,
            serial: 3,
            ok: true,
            sequence: 12,
            bytes: 9000,
            text: "/tmp/caps/capture-000012.bin".into(),
        },
        Message::CaptureReport {
            slot: 5,
            serial: 0,
            ok: false,
            sequence: 0,
            bytes: 0,
            text: "capture of slot 5 could not be written: No space left on device".into(),
        },
        Message::Shutdown,
        Message::Fault {
            role: 7,
            message: "link to role 8 closed".into(),
        },
        Message::RosterQuery { rank: 2 },
        Message::Roster {
            addrs: "10.0.0.1:7000\n10.0.0.9:7001\n10.0.0.3:7002".into(),
        },
        Message::Roster {
            addrs: String::new(),
        },
    ]
}

#[test]
fn every_kind_round_trips() {
    for m in all_kinds() {
        let b = m.encode();
        assert_eq!(Message::decode(&b, &lim()).unwrap(), m);
    }
}

#[test]
fn header_checks_refuse_bad_frames() {
    let good = Message::Ping { nonce: 1 }.encode().to_vec();
    assert_eq!(
        Message::decode(&good[..5], &lim()),
        Err(WireError::Short(5))
    );
    let mut m = good.clone();
    m[0] = b'X';
    assert!(matches!(
        Message::decode(&m, &lim()),
        Err(WireError::Magic(_))
    ));
    let mut v = good.clone();
    v[4] = 9;
    assert_eq!(Message::decode(&v, &lim()), Err(WireError::Version(9)));
    let mut k = good.clone();
    k[6] = 200;
    assert_eq!(Message::decode(&k, &lim()), Err(WireError::Kind(200)));
    // kind 4 (a Truncate nothing sent) is retired, not reused
    let mut k = good.clone();
    k[6] = 4;
    assert_eq!(Message::decode(&k, &lim()), Err(WireError::Kind(4)));
    // a capture report's ok flag is 0 or 1
    let report = Message::CaptureReport {
        slot: 1,
        serial: 9,
        ok: true,
        sequence: 2,
        bytes: 3,
        text: String::new(),
    };
    let mut r = report.encode().to_vec();
    r[20] = 7;
    assert_eq!(Message::decode(&r, &lim()), Err(WireError::Flag(7)));
    let mut t = good;
    t.push(0);
    assert!(matches!(
        Message::decode(&t, &lim()),
        Err(WireError::Length { .. })
    ));
}

#[test]
fn declared_sizes_are_checked_before_allocation() {
    // a forward frame declaring 2^31 rows in a 40-byte message
    let mut b: Vec<u8> = Vec::new();
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.push(1);
    b.push(0);
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&(1u32 << 31).to_le_bytes());
    b.extend_from_slice(&8u32.to_le_bytes());
    let e = Message::decode(&b, &lim()).unwrap_err();
    assert!(
        matches!(
            e,
            WireError::TooLarge {
                what: "forward rows",
                ..
            }
        ),
        "{e}"
    );
    // a residual of the wrong width
    let f = Message::Forward {
        seq: 0,
        group: 0,
        rows: vec![],
        hidden: 16,
        residual: vec![],
    };
    assert_eq!(
        Message::decode(&f.encode(), &lim()),
        Err(WireError::Hidden { got: 16, want: 8 })
    );
    // a fault message claiming 1 GiB of text
    let mut b: Vec<u8> = Vec::new();
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.push(11);
    b.push(0);
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&(1u32 << 30).to_le_bytes());
    assert!(matches!(
        Message::decode(&b, &lim()),
        Err(WireError::TooLarge { .. })
    ));
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = moefleet_engine::rng::Rng::new(77);
    let seeds: Vec<Vec<u8>> = all_kinds().iter().map(|m| m.encode().to_vec()).collect();
    for i in 0..20_000 {
        // mutate a valid message (so the header often passes) or make pure noise
        let mut buf = if i % 3 == 0 {
            (0..rng.below(64))
                .map(|_| rng.next_u64() as u8)
                .collect::<Vec<u8>>()
        } else {
            seeds[i % seeds.len()].clone()
        };
        for _ in 0..1 + rng.below(4) {
            if buf.is_empty() {
                break;
            }
            let at = rng.below(buf.len() as u64) as usize;
            match rng.below(3) {
                0 => buf[at] = rng.next_u64() as u8,
                1 => buf.truncate(at),
                _ => buf.insert(at, rng.next_u64() as u8),
            }
        }
        let _ = Message::decode(&buf, &lim());
    }
}

#[test]
fn max_frame_bounds_the_largest_legal_message() {
    let l = WireLimits {
        hidden: 8,
        max_rows: 3,
        max_text: 10,
    };
    let f = Message::Forward {
        seq: 0,
        group: 0,
        rows: vec![
            RowHeader {
                slot: 0,
                pos: 0,
                token: 0,
                flags: 0
            };
            3
        ],
        hidden: 8,
        residual: vec![0.0; 24],
    };
    assert!(f.encode().len() <= l.max_frame());
    assert_eq!(Message::decode(&f.encode(), &l).unwrap(), f);
}
