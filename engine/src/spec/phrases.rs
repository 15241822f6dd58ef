//! The shared phrase table (ARCHITECTURE.md §3.3): for every three-token context, how often each
//! next token followed it in the sequences served so far. It proposes the usual follower of the
//! stream's last three tokens when that context has been seen at least `min_seen` times counting
//! the current occurrence (so `min_seen = 2`: seen once before) and one follower holds at least
//! `min_agreement` of what followed. It learns from every finished request (prompt and output),
//! is saved to a file on shutdown and on demand, loaded at start, and merged by adding counts.
//!
//! File format (little-endian; FORMAT.md "Phrase tables"):
//! ```text
//! magic "MFPHRASE" | version u32 (1) | vocab u32 | contexts u64
//! per context, in ascending order: c0 u32 | c1 u32 | c2 u32 | followers u32
//!                                  | followers x (token u32 | count u32), ascending tokens
//! checksum u64 (FNV-1a of every byte before it)
//! ```

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use crate::error::{Error, Result};

pub const MAGIC: [u8; 8] = *b"MFPHRASE";
pub const VERSION: u32 = 1;
/// Tokens of context.
pub const CONTEXT: usize = 3;

/// When a context's follower is proposed.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PhraseRule {
    /// Occurrences of the context, the current one included (2: seen at least once before).
    pub min_seen: u32,
    /// Share of the recorded followers that must agree.
    pub min_agreement: f64,
}

impl Default for PhraseRule {
    fn default() -> Self {
        PhraseRule {
            min_seen: 2,
            min_agreement: 0.9,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PhraseTable {
    /// The vocabulary the token ids belong to (a table of another vocabulary is refused).
    pub vocab: u32,
    map: HashMap<[u32; CONTEXT], BTreeMap<u32, u32>>,
}

impl PhraseTable {
    pub fn new(vocab: u32) -> Self {
        PhraseTable {
            vocab,
            map: HashMap::new(),
        }
    }

    /// Record every (three tokens → next) of a served sequence.
    pub fn learn(&mut self, seq: &[u32]) {
        for w in seq.windows(CONTEXT + 1) {
            let c = [w[0], w[1], w[2]];
            let n = self.map.entry(c).or_default().entry(w[3]).or_default();
            *n = n.saturating_add(1);
        }
    }

    /// The follower of `ctx`'s last three tokens, under `rule`.
    pub fn propose(&self, ctx: &[u32], rule: &PhraseRule) -> Option<u32> {
        let n = ctx.len();
        if n < CONTEXT {
            return None;
        }
        let followers = self.map.get(&[ctx[n - 3], ctx[n - 2], ctx[n - 1]])?;
        let total: u64 = followers.values().map(|&c| c as u64).sum();
        // lower id first among equal counts
        let (&best, &count) = followers
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))?;
        let seen = total + 1;
        (seen >= rule.min_seen as u64 && count as f64 >= rule.min_agreement * total as f64)
            .then_some(best)
    }

    /// Add another table's counts to this one (same vocabulary).
    pub fn merge(&mut self, other: &PhraseTable) -> Result<()> {
        if other.vocab != self.vocab {
            return Err(Error::Input(format!(
                "cannot merge phrase tables of vocabularies {} and {}",
                self.vocab, other.vocab
            )));
        }
        for (c, f) in &other.map {
            let mine = self.map.entry(*c).or_default();
            for (t, n) in f {
                let v = mine.entry(*t).or_default();
                *v = v.saturating_add(*n);
            }
        }
        Ok(())
    }

    /// Distinct contexts recorded.
    pub fn contexts(&self) -> usize {
        self.map.len()
    }

    /// (context, next) observations recorded.
    pub fn observations(&self) -> u64 {
        self.map
            .values()
            .flat_map(|f| f.values())
            .map(|&c| c as u64)
            .sum()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&self.vocab.to_le_bytes());
        b.extend_from_slice(&(self.map.len() as u64).to_le_bytes());
        let mut keys: Vec<&[u32; CONTEXT]> = self.map.keys().collect();
        keys.sort();
        for c in keys {
            let f = &self.map[c];
            for v in c.iter().chain([&(f.len() as u32)]) {
                b.extend_from_slice(&v.to_le_bytes());
            }
            for (t, n) in f {
                b.extend_from_slice(&t.to_le_bytes());
                b.extend_from_slice(&n.to_le_bytes());
            }
        }
        let sum = fnv1a(&b);
        b.extend_from_slice(&sum.to_le_bytes());
        b
    }

    /// Check, then decode. The error says what is wrong.
    pub fn decode(b: &[u8]) -> std::result::Result<PhraseTable, String> {
        if b.len() < 8 || b[..8] != MAGIC {
            return Err("not a moefleet phrase table (bad magic)".into());
        }
        if b.len() < 32 {
            return Err(format!("truncated: {} bytes", b.len()));
        }
        let (body, tail) = b.split_at(b.len() - 8);
        let mut s = [0u8; 8];
        s.copy_from_slice(tail);
        if fnv1a(body) != u64::from_le_bytes(s) {
            return Err("checksum mismatch (truncated or damaged file)".into());
        }
        let mut r = Reader { b: body, at: 8 };
        let version = r.u32()?;
        if version != VERSION {
            return Err(format!("version {version}, this build reads {VERSION}"));
        }
        let vocab = r.u32()?;
        let n = r.u64()?;
        let mut map = HashMap::new();
        let mut prev: Option<[u32; CONTEXT]> = None;
        for _ in 0..n {
            let c = [r.u32()?, r.u32()?, r.u32()?];
            if prev.is_some_and(|p| p >= c) {
                return Err("contexts out of order or repeated".into());
            }
            if c.iter().any(|&x| x >= vocab) {
                return Err(format!("token id outside the vocabulary of {vocab}"));
            }
            prev = Some(c);
            let k = r.u32()?;
            let mut f = BTreeMap::new();
            for _ in 0..k {
                let (t, count) = (r.u32()?, r.u32()?);
                if f.keys().next_back().is_some_and(|&last| last >= t) {
                    return Err("followers out of order or repeated".into());
                }
                if t >= vocab {
                    return Err(format!("token id outside the vocabulary of {vocab}"));
                }
                f.insert(t, count);
            }
            map.insert(c, f);
        }
        if r.at != body.len() {
            return Err(format!(
                "{} bytes after the last context",
                body.len() - r.at
            ));
        }
        Ok(PhraseTable { vocab, map })
    }

    /// Write to `path` (a temporary file, then renamed).
    pub fn save(&self, path: &Path) -> Result<()> {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, self.encode()).map_err(|e| Error::io(&tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
    }

    /// Read and check `path`; `vocab` is the vocabulary it must belong to.
    pub fn load(path: &Path, vocab: u32) -> Result<PhraseTable> {
        let b = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let t = PhraseTable::decode(&b)
            .map_err(|why| Error::Input(format!("phrase table {}: {why}", path.display())))?;
        if t.vocab != vocab {
            return Err(Error::Input(format!(
                "phrase table {}: made for a vocabulary of {}, this model has {vocab}",
                path.display(),
                t.vocab
            )));
        }
        Ok(t)
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> std::result::Result<&[u8], String> {
        let s = self
            .b
            .get(self.at..self.at + n)
            .ok_or_else(|| format!("truncated at byte {}", self.at))?;
        self.at += n;
        Ok(s)
    }

    fn u32(&mut self) -> std::result::Result<u32, String> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    fn u64(&mut self) -> std::result::Result<u64, String> {
        let s = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }
}

fn fnv1a(b: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &x in b {
        h = (h ^ x as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_proposes_under_the_rule_and_merges() {
        let rule = PhraseRule::default();
        let mut t = PhraseTable::new(100);
        assert_eq!(t.propose(&[1, 2, 3], &rule), None);
        t.learn(&[1, 2, 3, 4, 9]);
        // seen once before (now the second time): proposed
        assert_eq!(t.propose(&[7, 1, 2, 3], &rule), Some(4));
        let strict = PhraseRule {
            min_seen: 3,
            ..rule
        };
        assert_eq!(t.propose(&[1, 2, 3], &strict), None);
        // 9 of 10 agree: still proposed; 9 of 11 are not enough
        for _ in 0..8 {
            t.learn(&[1, 2, 3, 4]);
        }
        t.learn(&[1, 2, 3, 5]);
        assert_eq!(t.propose(&[1, 2, 3], &rule), Some(4));
        t.learn(&[1, 2, 3, 5]);
        assert_eq!(t.propose(&[1, 2, 3], &rule), None);
        let mut u = PhraseTable::new(100);
        u.learn(&[1, 2, 3, 5, 5]);
        let before = t.observations();
        t.merge(&u).unwrap();
        assert_eq!(t.observations(), before + 2);
        assert!(t.merge(&PhraseTable::new(7)).is_err());
    }

    #[test]
    fn files_round_trip_and_damage_is_named() {
        let mut t = PhraseTable::new(50);
        t.learn(&[1, 2, 3, 4, 1, 2, 3, 4, 5, 6]);
        let b = t.encode();
        assert_eq!(PhraseTable::decode(&b).unwrap(), t);
        assert!(PhraseTable::decode(&b[..b.len() - 3])
            .unwrap_err()
            .contains("checksum"));
        assert!(
            PhraseTable::decode(b"GIF89a.....................................")
                .unwrap_err()
                .contains("bad magic")
        );
        let mut m = b.clone();
        m[20] ^= 1;
        assert!(PhraseTable::decode(&m).unwrap_err().contains("checksum"));
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.bin");
        t.save(&p).unwrap();
        assert_eq!(PhraseTable::load(&p, 50).unwrap(), t);
        let e = PhraseTable::load(&p, 7070).unwrap_err().to_string();
        assert!(e.contains("vocabulary of 50"), "{e}");
    }

    /// A context and its (follower, count) pairs, as written in a file.
    type Entry<'a> = ([u32; CONTEXT], &'a [(u32, u32)]);

    /// A file with a correct checksum whose contents break the format's rules.
    fn file(contexts: &[Entry]) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        for v in [VERSION, 50] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&(contexts.len() as u64).to_le_bytes());
        for (c, f) in contexts {
            let words = c.iter().copied().chain([f.len() as u32]);
            let words = words.chain(f.iter().flat_map(|&(t, n)| [t, n]));
            for v in words.collect::<Vec<_>>() {
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
        let sum = fnv1a(&b);
        b.extend_from_slice(&sum.to_le_bytes());
        b
    }

    #[test]
    fn well_summed_files_that_break_the_rules_are_refused() {
        let ok = file(&[([1, 1, 1], &[(3, 1), (4, 2)]), ([1, 1, 2], &[(3, 1)])]);
        assert_eq!(PhraseTable::decode(&ok).unwrap().observations(), 4);
        let cases: [(&[Entry], &str); 4] = [
            (
                &[([1, 1, 2], &[(3, 1)]), ([1, 1, 1], &[(3, 1)])],
                "contexts out of order",
            ),
            (
                &[([1, 1, 1], &[(3, 1)]), ([1, 1, 1], &[(4, 1)])],
                "contexts out of order",
            ),
            (&[([1, 1, 1], &[(4, 1), (3, 1)])], "followers out of order"),
            (&[([1, 60, 1], &[(3, 1)])], "vocabulary of 50"),
        ];
        for (contexts, want) in cases {
            let e = PhraseTable::decode(&file(contexts)).unwrap_err();
            assert!(e.contains(want), "{e}, wanted {want}");
        }
    }
}
