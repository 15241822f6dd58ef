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

    pub fn propose(&self, ctx: &[u32]) -> Option<u32> {
        let next = self
            .sequences
            .iter()
            .find(|s| s.len() > ctx.len() && s.starts_with(ctx))
            .map(|s| s[ctx.len()])?;
        Some(if self.wrong {
            (next + 1) % self.vocab.max(1)
        } else {
            next
        })
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
        let w = ReplayProposer::new(vec![vec![1, 2, 9]], true, 10);
        assert_eq!(w.propose(&[1, 2]), Some(0));
    }
}
