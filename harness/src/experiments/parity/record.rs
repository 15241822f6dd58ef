//! The raw records of a parity run, one JSON line per prompt, as the three sides write them:
//! `llama.jsonl` (`scripts/gguf_parity_llama.py collect`: llama-server's greedy ids and top-2
//! log-probabilities), `moefleet.jsonl` (`moefleet continue`, the same shape) and `fleet.jsonl`
//! (`scripts/gguf_parity.py fleet`: the fleet's ids, no log-probabilities).

use std::path::Path;

use anyhow::{bail, Context};
use serde::Deserialize;

/// One token and its log-probability, as `[id, logprob]`.
pub type Candidate = (u32, f64);

/// One prompt's greedy continuation on one side.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Record {
    pub id: String,
    pub prompt_ids: Vec<u32>,
    /// Up to the run's token limit, the end-of-sequence token included where it came.
    pub generated_ids: Vec<u32>,
    /// Per generated position, the two best tokens of the full distribution, best first
    /// (absent: the side does not record them).
    #[serde(default)]
    pub top: Option<Vec<Vec<Candidate>>>,
    /// Positions whose top-2 were not recorded while generating but by a second evaluation of
    /// the prompt and the tokens before them (llama-server drops a position's probabilities
    /// inside a UTF-8 character; `scripts/gguf_parity_llama.py` refills them).
    #[serde(default)]
    pub top_refilled: Vec<Refilled>,
}

/// A refilled position (other fields of the record are not read).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Refilled {
    pub index: usize,
}

impl Record {
    /// The top-2 log-probability margin at `pos` (first − second; equal to the logit margin,
    /// the softmax's normaliser cancelling), if recorded.
    pub fn margin(&self, pos: usize) -> Option<f64> {
        match self.top.as_ref()?.get(pos)?.as_slice() {
            [a, b, ..] => Some(a.1 - b.1),
            _ => None,
        }
    }

    /// The log-probability of `token` at `pos`, if it is among the recorded candidates.
    pub fn logprob(&self, pos: usize, token: u32) -> Option<f64> {
        self.top
            .as_ref()?
            .get(pos)?
            .iter()
            .find(|c| c.0 == token)
            .map(|c| c.1)
    }

    /// Whether the top-2 at `pos` were refilled rather than recorded while generating.
    pub fn refilled(&self, pos: usize) -> bool {
        self.top_refilled.iter().any(|r| r.index == pos)
    }

    /// The `rank`-th candidate's token at `pos` (0: the best), if recorded.
    pub fn candidate(&self, pos: usize, rank: usize) -> Option<u32> {
        Some(self.top.as_ref()?.get(pos)?.get(rank)?.0)
    }
}

/// Every record of a JSON-lines file, in order; ids must be distinct.
pub fn read(path: &Path) -> anyhow::Result<Vec<Record>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out: Vec<Record> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let r: Record = serde_json::from_str(line)
            .with_context(|| format!("{} line {}", path.display(), i + 1))?;
        if let Some(top) = &r.top {
            if top.len() != r.generated_ids.len() {
                bail!(
                    "{} line {}: {} top-2 entries for {} generated tokens",
                    path.display(),
                    i + 1,
                    top.len(),
                    r.generated_ids.len()
                );
            }
        }
        if out.iter().any(|o| o.id == r.id) {
            bail!("{}: prompt id '{}' appears twice", path.display(), r.id);
        }
        out.push(r);
    }
    if out.is_empty() {
        bail!("{} holds no records", path.display());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_shapes_and_refuses_a_short_top_or_a_repeated_id() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.jsonl");
        std::fs::write(
            &p,
            "{\"id\":\"a\",\"prompt_ids\":[1],\"generated_ids\":[5,6],\"top\":[[[5,-0.1],[7,-2.5]],[[6,-0.5],[5,-0.75]]],\"extra\":1}\n\
             \n{\"id\":\"b\",\"prompt_ids\":[1,2],\"generated_ids\":[3],\"top_refilled\":[{\"index\":0,\"top1_is_token\":true}]}\n",
        )
        .unwrap();
        let r = read(&p).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].margin(0), Some(2.4));
        assert_eq!(r[0].logprob(1, 5), Some(-0.75));
        assert_eq!(r[0].candidate(1, 1), Some(5));
        assert_eq!(r[1].margin(0), None);
        assert!(r[1].refilled(0) && !r[0].refilled(0));
        std::fs::write(
            &p,
            "{\"id\":\"a\",\"prompt_ids\":[1],\"generated_ids\":[5,6],\"top\":[[[5,-0.1],[7,-2.5]]]}\n",
        )
        .unwrap();
        assert!(format!("{:#}", read(&p).unwrap_err()).contains("1 top-2 entries for 2"));
        std::fs::write(
            &p,
            "{\"id\":\"a\",\"prompt_ids\":[1],\"generated_ids\":[5]}\n{\"id\":\"a\",\"prompt_ids\":[1],\"generated_ids\":[5]}\n",
        )
        .unwrap();
        assert!(format!("{:#}", read(&p).unwrap_err()).contains("twice"));
    }
}
