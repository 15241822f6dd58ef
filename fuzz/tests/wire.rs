//! The wire decoder's fuzz checks, bounded, on stable (the coverage-guided run is
//! `scripts/fuzz-wire.sh`, nightly): the committed seeds replayed, then a fixed set of generated
//! inputs (noise, valid messages of every kind, those mutated, cut, extended and given huge
//! declared lengths) through `moefleet_fuzz::wire::fuzz_check`, with its allocation counter
//! installed. And the framing in front of the decoder: a length prefix claiming 4 GiB, or one byte
//! above `max_frame`, is refused by both link readers without allocating what it claims.

#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use moefleet_engine::pipeline::link;
use moefleet_engine::pipeline::wire::{Message, WireError, WireLimits, VERSION};
use moefleet_engine::rng::Rng;
use moefleet_fuzz::alloc::{measure_start, measured, PeakAlloc};
use moefleet_fuzz::source::Source;
use moefleet_fuzz::wire::{fuzz_check, limits, message_from, seed_corpus, Tally, ERRORS, KINDS};

#[global_allocator]
static ALLOC: PeakAlloc = PeakAlloc;

fn seed_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("seeds/wire_decode")
}

/// The committed seeds are exactly what `seed_corpus` generates, and pass the checks.
#[test]
fn committed_seeds_replay() {
    let want = seed_corpus();
    if let Err(e) = moefleet_fuzz::seeds::compare(&seed_dir(), &want) {
        panic!("{e}: regenerate with cargo test --release -p moefleet-fuzz --test wire -- --ignored write_seeds");
    }
    let mut t = Tally::default();
    for (_, bytes) in &want {
        t.add(&fuzz_check(bytes));
    }
    // every seed is a valid message under one of its selector's limits
    for k in KINDS {
        assert!(t.accepted[k as usize] >= 2, "kind {k}: {t:?}");
    }
}

/// Writes the seed corpus into fuzz/seeds/wire_decode, or `$WIRE_FUZZ_SEEDS` when set (run by
/// `scripts/fuzz-wire.sh`).
#[test]
#[ignore]
fn write_seeds() {
    let dir = std::env::var_os("WIRE_FUZZ_SEEDS")
        .map(PathBuf::from)
        .unwrap_or_else(seed_dir);
    moefleet_fuzz::seeds::write(&dir, &seed_corpus()).unwrap();
}

/// `KINDS` is exactly the set of kinds the decoder knows (a kind added to the wire format and not
/// to `KINDS` would be left out of the structure-aware checks): any other kind byte is refused as
/// unknown whatever follows it, and none of `KINDS` is.
#[test]
fn kinds_are_the_decoders_kinds() {
    let lim = limits(0x52)[0];
    for k in 0..=255u8 {
        for body in [0usize, 4, 8, 12, 24, 40] {
            let mut b = b"MFLT".to_vec();
            b.extend_from_slice(&VERSION.to_le_bytes());
            b.extend_from_slice(&[k, 0]);
            b.resize(8 + body, 0);
            let unknown = Message::decode(&b, &lim) == Err(WireError::Kind(k));
            assert_eq!(unknown, !KINDS.contains(&k), "kind {k}, body {body}");
        }
    }
}

/// A selector byte then a valid encoding under one of the two limits it picks.
fn valid(rng: &mut Rng) -> Vec<u8> {
    let sel = rng.next_u64() as u8;
    let which = rng.below(2) as usize;
    let lim = limits(sel)[which];
    let fields: Vec<u8> = (0..rng.below(400)).map(|_| rng.next_u64() as u8).collect();
    let kind = KINDS[rng.below(KINDS.len() as u64) as usize];
    let m = message_from(kind, &mut Source::new(&fields), &lim);
    let mut b = vec![sel];
    b.extend_from_slice(&m.encode());
    b
}

/// Byte offsets (in `valid`'s output, after the selector) of the u32 length fields of each kind.
fn length_offsets(kind: u8) -> &'static [usize] {
    match kind {
        1 => &[20, 24],
        2 | 8 => &[20],
        9 => &[37],
        11 => &[12],
        _ => &[],
    }
}

fn mutate(rng: &mut Rng, b: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(4) {
        if b.len() <= 1 {
            b.push(rng.next_u64() as u8);
            continue;
        }
        let at = 1 + rng.below(b.len() as u64 - 1) as usize;
        match rng.below(5) {
            0 => b[at] ^= 1 << rng.below(8),
            1 => b[at] = rng.next_u64() as u8,
            2 => b.truncate(at),
            3 => b.insert(at, rng.next_u64() as u8),
            _ => b.extend((0..1 + rng.below(8)).map(|_| rng.next_u64() as u8)),
        }
    }
}

fn huge_length(rng: &mut Rng, b: &mut [u8]) -> bool {
    if b.len() < 8 {
        return false;
    }
    let offs = length_offsets(b[7]);
    if offs.is_empty() {
        return false;
    }
    let at = 1 + offs[rng.below(offs.len() as u64) as usize];
    if at + 4 > b.len() {
        return false;
    }
    let v: u32 = match rng.below(4) {
        0 => u32::MAX,
        1 => 1 << 31,
        2 => (1 << 20) + 1,
        _ => rng.next_u64() as u32,
    };
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    true
}

#[test]
fn bounded_run() {
    const N: usize = 200_000;
    let t0 = Instant::now();
    let mut rng = Rng::new(0x16_0003);
    let mut t = Tally::default();
    let (mut huge, mut nonempty) = (0, 0u64);
    for i in 0..N {
        let b = match i % 5 {
            // noise, sometimes behind a valid header
            0 => {
                let mut b: Vec<u8> = (0..rng.below(96)).map(|_| rng.next_u64() as u8).collect();
                if rng.below(2) == 0 && b.len() >= 9 {
                    b[1..5].copy_from_slice(b"MFLT");
                    b[5..7].copy_from_slice(&VERSION.to_le_bytes());
                    b[7] = KINDS[rng.below(KINDS.len() as u64) as usize];
                }
                b
            }
            1 => valid(&mut rng),
            2 | 3 => {
                let mut b = valid(&mut rng);
                mutate(&mut rng, &mut b);
                b
            }
            _ => {
                let mut b = valid(&mut rng);
                huge += huge_length(&mut rng, &mut b) as usize;
                b
            }
        };
        nonempty += !b.is_empty() as u64;
        t.add(&fuzz_check(&b));
    }
    let secs = t0.elapsed().as_secs_f64();
    eprintln!("{N} inputs in {secs:.1} s: {t:?}, {huge} with a huge declared length");
    // the run reached every kind and every refusal, and the structure-aware path ran
    for k in KINDS {
        assert!(
            t.accepted[k as usize] >= 1000,
            "kind {k} accepted too rarely: {t:?}"
        );
    }
    for (i, name) in ERRORS.iter().enumerate() {
        assert!(t.refused[i] >= 10, "refusal {name} seen too rarely: {t:?}");
    }
    assert_eq!(t.built, nonempty * KINDS.len() as u64, "{t:?}");
    assert!(t.huge_refused > N as u64, "{t:?}");
    assert!(huge > N / 20, "{huge}");
}

/// The framing: a prefix above `max_frame` is refused before anything is buffered, by the
/// blocking reader and by the async one; a prefix within it reserves what it claims (the
/// control, which shows the counter sees the readers' allocations).
#[test]
fn link_readers_refuse_huge_length_prefixes() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let lim = WireLimits::new(256);
    let max = lim.max_frame();
    assert!(max < 8 << 20, "{max}");
    let cases = [
        (u32::MAX, true),
        (1 << 31, true),
        (max as u32 + 1, true),
        (max as u32, false),
    ];
    for blocking in [true, false] {
        for (claim, refused) in cases {
            let listener = rt
                .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
                .unwrap();
            let addr = listener.local_addr().unwrap();
            let writer = std::thread::spawn(move || {
                let mut s = std::net::TcpStream::connect(addr).unwrap();
                s.write_all(&claim.to_le_bytes()).unwrap();
                // then nothing: the claimed body never comes
            });
            let (stream, _) = rt
                .block_on(link::accept_stream(&listener, Duration::from_secs(10)))
                .unwrap();
            writer.join().unwrap();
            let (err, peak) = if blocking {
                let (mut r, _w) = link::blocking(stream, lim).unwrap();
                measure_start();
                let e = r.recv().unwrap_err();
                (e, measured().0)
            } else {
                let (mut r, _w) = rt.block_on(async { link::split(stream, lim) });
                measure_start();
                let e = rt.block_on(r.recv()).unwrap_err();
                (e, measured().0)
            };
            let what = format!("blocking {blocking}, claim {claim}: {err}");
            if refused {
                assert!(peak < 64 << 10, "{what}: largest allocation {peak}");
                match &err {
                    link::LinkError::Io { source, .. } => {
                        assert_eq!(source.kind(), std::io::ErrorKind::InvalidData, "{what}")
                    }
                    e => panic!("{what}: {e:?}"),
                }
            } else {
                assert!(peak >= max, "{what}: largest allocation {peak}");
            }
        }
    }
}
