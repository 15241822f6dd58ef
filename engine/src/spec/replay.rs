//! A proposer for tests: it knows whole token sequences in advance (a JSON array of id arrays) and
//! proposes the next token of the first one whose prefix is the stream's context, either as is
//! (always right: an oracle) or shifted by one id (always wrong), so the exactness tests can drive
//! speculation through every acceptance and every rewind path.

use std::path::Path;

use crate::error::{Error, Result};

#[derive(Clone, Debug, PartialEq)]
pub struct ReplayProposer {
    sequences: Vec<Vec<u32>>,
    wrong: bool,
    vocab: u32,
}

impl ReplayProposer {
    pub fn new(sequences: Vec<Vec<u32>>, wrong: bool, vocab: u32) -> Self {
        ReplayProposer {
            sequences,
            wrong,
            vocab,
        }
    }

    /// Read `[[ids...], ...]` from a JSON file.
    pub fn load(path: &Path, wrong: bool, vocab: u32) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let sequences: Vec<Vec<u32>> = serde_json::from_str(&text)
            .map_err(|e| Error::Input(format!("{}: {e}", path.display())))?;
        Ok(ReplayProposer::new(sequences, wrong, vocab))
    }

    /// Right: the next token of the first sequence the context is a prefix of. Wrong: the next
    /// token plus one of the sequence sharing the longest prefix with the context, so that wrong
    /// proposals keep coming behind wrong proposals and whole chains are rewound.
    pub fn propose(&self, ctx: &[u32]) -> Option<u32> {
        if !self.wrong {
            return self
                .sequences
                .iter()
                .find(|s| s.len() > ctx.len() && s.starts_with(ctx))
                .map(|s| s[ctx.len()]);
        }
        let common = |s: &Vec<u32>| s.iter().zip(ctx).take_while(|(a, b)| a == b).count();
        let s = self
            .sequences
            .iter()
            .filter(|s| s.len() > ctx.len())
            .max_by_key(|s| common(s))
            .filter(|s| common(s) > 0)?;
        Some((s[ctx.len()] + 1) % self.vocab.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn right_and_wrong() {
        let r = ReplayProposer::new(vec![vec![1, 2, 3, 4]], false, 10);
        assert_eq!(r.propose(&[1, 2]), Some(3));
        assert_eq!(r.propose(&[1, 9]), None);
        assert_eq!(r.propose(&[1, 2, 3, 4]), None);
        let w = ReplayProposer::new(vec![vec![1, 2, 9, 4]], true, 10);
        assert_eq!(w.propose(&[1, 2]), Some(0));
        // behind its own wrong token it goes on proposing from the same sequence
        assert_eq!(w.propose(&[1, 2, 0]), Some(5));
    }
}
