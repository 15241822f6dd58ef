//! The fuzz checks (`moefleet_fuzz::gguf::fuzz_check`) bounded and on stable: the committed seeds,
//! every truncation and bit flip of small files, and proptest's arbitrary and mutated files.

use std::path::PathBuf;
use std::time::Instant;

use moefleet_engine::gguf::parse::{ALLOC_PER_BYTE, ALLOC_SLACK};
use moefleet_engine::gguf::Gguf;
use moefleet_fuzz::alloc::{measure_start, measured};
use moefleet_fuzz::gguf::{fuzz_check, refusal_index, seed_corpus, Tally, REFUSALS};
use proptest::prelude::*;

fn seed_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("seeds/gguf_parse")
}

/// The committed seeds are exactly what `seed_corpus` generates, and pass the checks.
#[test]
fn committed_seeds_replay() {
    let want = seed_corpus();
    if let Err(e) = moefleet_fuzz::seeds::compare(&seed_dir(), &want) {
        panic!("{e}: regenerate with cargo test --release -p moefleet-fuzz --test gguf -- --ignored write_seeds");
    }
    let mut t = Tally::default();
    for (_, bytes) in &want {
        t.add(&fuzz_check(bytes));
    }
    assert_eq!(t.accepted, want.len() as u64, "{t:?}");
}

/// Writes the seed corpus into fuzz/seeds/gguf_parse.
#[test]
#[ignore]
fn write_seeds() {
    let dir = seed_dir();
    moefleet_fuzz::seeds::write(&dir, &seed_corpus()).unwrap();
}

/// Parse with the allocation bound checked; the refusal's kind when refused.
fn parse_bounded(b: &[u8]) -> Option<usize> {
    measure_start();
    let r = Gguf::parse_bytes(b);
    let (peak, total) = measured();
    assert!(
        total <= ALLOC_PER_BYTE * b.len() + ALLOC_SLACK,
        "{} bytes: allocated {total} (largest {peak})",
        b.len()
    );
    match r {
        Ok(_) => None,
        Err(e) => Some(refusal_index(&e).unwrap_or_else(|| panic!("unclassified: {e}"))),
    }
}

/// Every prefix of every seed with tensors is refused (the metadata-only seed: every prefix that
/// cuts the metadata), within the allocation bound; every bit of the two hand-made seeds flipped
/// goes through `fuzz_check`. Between them they reach every kind of refusal but nesting depth.
#[test]
fn every_truncation_and_bit_flip() {
    let mut seen = [0u64; REFUSALS.len()];
    for (name, bytes) in seed_corpus() {
        let p = Gguf::parse_bytes(&bytes).unwrap();
        // without tensors, a cut in the padding after the table is still a whole file
        let whole_from = if p.tensors.is_empty() {
            (p.data_start as usize).saturating_sub(p.alignment - 1)
        } else {
            bytes.len()
        };
        for cut in 0..bytes.len() {
            match parse_bounded(&bytes[..cut]) {
                Some(k) => seen[k] += 1,
                None => assert!(cut >= whole_from, "{name} cut at {cut} accepted"),
            }
        }
    }
    let mut t = Tally::default();
    let t0 = Instant::now();
    for (name, bytes) in seed_corpus()
        .into_iter()
        .filter(|(n, _)| !n.starts_with("built"))
    {
        let mut b = bytes.clone();
        for bit in 0..b.len() * 8 {
            b[bit / 8] ^= 1 << (bit % 8);
            t.add(&fuzz_check(&b));
            b[bit / 8] ^= 1 << (bit % 8);
        }
        eprintln!("{name}: {} bit flips", bytes.len() * 8);
    }
    for (a, b) in seen.iter_mut().zip(t.refused) {
        *a += b;
    }
    eprintln!("in {:.1} s: {t:?}", t0.elapsed().as_secs_f64());
    let missed: Vec<_> = REFUSALS
        .iter()
        .zip(seen)
        .filter(|(_, n)| *n == 0)
        .map(|((name, _), _)| *name)
        .collect();
    eprintln!("refusals: {seen:?}; not reached by flips and cuts: {missed:?}");
    // no flip of these seeds nests arrays five deep
    assert_eq!(missed, ["depth"], "{seen:?}");
    assert!(t.huge_refused > 0 && t.accepted > 0, "{t:?}");
}

/// A seed, then up to six of: a bit flipped, a byte set, a cut, a byte inserted, a u64 set to
/// a random or extreme value at a random place.
fn mutated() -> impl Strategy<Value = Vec<u8>> {
    let seeds = seed_corpus();
    let n = seeds.len();
    (
        0..n,
        prop::collection::vec((any::<u32>(), any::<u64>(), 0..6u8), 1..7),
    )
        .prop_map(move |(s, muts)| {
            let mut b = seeds[s].1.clone();
            for (at, v, op) in muts {
                if b.is_empty() {
                    break;
                }
                let at = at as usize % b.len();
                match op {
                    0 => b[at] ^= 1 << (v % 8),
                    1 => b[at] = v as u8,
                    2 => b.truncate(at),
                    3 => b.insert(at, v as u8),
                    _ => {
                        let v = [v, u64::MAX, 1 << 63, v % 64][(v % 4) as usize];
                        let end = (at + 8).min(b.len());
                        b[at..end].copy_from_slice(&v.to_le_bytes()[..end - at]);
                    }
                }
            }
            b
        })
}

proptest! {
    // a failing input is printed, not written into the source tree
    #![proptest_config(ProptestConfig {
        cases: 3000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Arbitrary bytes, sometimes behind a valid header.
    #[test]
    fn arbitrary_bytes(b in prop::collection::vec(any::<u8>(), 0..512), header in any::<bool>()) {
        let mut b = b;
        if header && b.len() >= 24 {
            b[..8].copy_from_slice(b"GGUF\x03\0\0\0");
        }
        fuzz_check(&b);
    }

    #[test]
    fn mutated_files(b in mutated()) {
        fuzz_check(&b);
    }
}
