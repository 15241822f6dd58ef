//! Trace replay (docs/MEASUREMENTS.md §9): requests at the times and with the prompt and output
//! lengths of a published request trace, one JSON object per line. Fields read (the first present
//! of each group):
//!
//! - when: `timestamp` (milliseconds, as the Mooncake traces give it) or `timestamp_s` (seconds);
//!   replayed relative to the first line, divided by `--time-scale`;
//! - the prompt: `prompt` (text, sent as is), or its length `input_length` / `prompt_tokens`;
//! - the output: `output_length` / `max_tokens` / `output_tokens`, asked as `max_tokens`;
//! - `hash_ids` (optional, Mooncake's): the prompt's blocks of `BLOCK_TOKENS` tokens; two requests
//!   with the same leading ids get the same leading text, so a server's prefix cache can hit.
//!
//! A prompt given by length is made of words of the project's own corpus (`workloads/corpus`),
//! cut to the length by `--tokenizer` (a GGUF file or tokenizer.json: the server's own makes the
//! lengths exact), or without one at one word per token (the server's count, in each record's
//! `usage`, then says how far that was off).

use std::path::Path;

use anyhow::{bail, Context};
use serde::Deserialize;

use crate::experiments::context::prompt::Corpus;
use moefleet_engine::tokenizer::TextTokenizer;

/// Tokens per `hash_ids` block (the Mooncake traces' block size).
pub const BLOCK_TOKENS: usize = 512;

/// One request to replay.
#[derive(Clone, Debug, PartialEq)]
pub struct Replayed {
    /// Seconds from the replay's start.
    pub due_s: f64,
    pub prompt: String,
    pub max_tokens: usize,
    /// The prompt length the trace asked for (None: the trace gave the text).
    pub prompt_tokens_asked: Option<usize>,
}

#[derive(Deserialize)]
struct Line {
    timestamp: Option<f64>,
    timestamp_s: Option<f64>,
    prompt: Option<String>,
    input_length: Option<usize>,
    prompt_tokens: Option<usize>,
    output_length: Option<usize>,
    max_tokens: Option<usize>,
    output_tokens: Option<usize>,
    #[serde(default)]
    hash_ids: Vec<u64>,
}

/// The corpus as one stream of words, and the tokenizer lengths are counted with.
pub struct TextSource<'a> {
    words: Vec<&'a str>,
    tokenizer: Option<&'a TextTokenizer>,
}

impl<'a> TextSource<'a> {
    pub fn new(corpus: &'a Corpus, tokenizer: Option<&'a TextTokenizer>) -> TextSource<'a> {
        let words = corpus
            .paragraphs
            .iter()
            .flat_map(|p| p.split_whitespace())
            .collect();
        TextSource { words, tokenizer }
    }

    /// `n` words from position `start` of the corpus, wrapping around.
    fn words(&self, start: usize, n: usize) -> Vec<&'a str> {
        let w = self.words.len();
        (0..n).map(|i| self.words[(start + i) % w]).collect()
    }

    fn tokens(&self, words: &[&str]) -> anyhow::Result<usize> {
        Ok(match self.tokenizer {
            Some(t) => t.encode_literal(&words.join(" "))?.len(),
            None => words.len(),
        })
    }

    /// The longest prefix of `words` of at most `n` tokens (bisection over word counts: a text's
    /// token count grows with its words).
    fn cut(&self, words: &[&'a str], n: usize) -> anyhow::Result<Vec<&'a str>> {
        let (mut lo, mut hi) = (0usize, words.len());
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if self.tokens(&words[..mid])? <= n {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        Ok(words[..lo].to_vec())
    }

    /// Words enough for `n` tokens starting at `start` (a tokenizer's words carry at least one
    /// token each, so n words always suffice).
    fn text(&self, start: usize, n: usize) -> anyhow::Result<Vec<&'a str>> {
        self.cut(&self.words(start, n), n)
    }

    /// A prompt of `n` tokens: the blocks of `hash_ids` in turn (each block's text fixed by its
    /// id), then text of the request's own, cut to `n`.
    fn prompt(&self, row: usize, hash_ids: &[u64], n: usize) -> anyhow::Result<String> {
        let w = self.words.len() as u64;
        let mut words: Vec<&str> = Vec::new();
        for &h in hash_ids {
            let start = (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) % w) as usize;
            words.extend(self.text(start, BLOCK_TOKENS)?);
        }
        let own = ((row as u64 + 1).wrapping_mul(0xd1b5_4a32_d192_ed03) % w) as usize;
        words.extend(self.words(own, n));
        Ok(self.cut(&words, n)?.join(" "))
    }
}

/// Read `path` into requests (at most `limit`), in time order.
pub fn read(
    path: &Path,
    text: &TextSource<'_>,
    time_scale: f64,
    limit: Option<usize>,
) -> anyhow::Result<Vec<Replayed>> {
    if !(time_scale.is_finite() && time_scale > 0.0) {
        bail!("--time-scale must be positive, not {time_scale}");
    }
    let raw = std::fs::read_to_string(path)
        .with_context(|| format!("reading the trace {}", path.display()))?;
    let mut rows: Vec<(f64, usize, Line)> = Vec::new();
    for (i, l) in raw
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        if limit.is_some_and(|n| rows.len() >= n) {
            break;
        }
        let at = format!("{}:{}", path.display(), i + 1);
        let line: Line = serde_json::from_str(l)
            .with_context(|| format!("{at}: not a JSON object of a request"))?;
        let t = match (line.timestamp, line.timestamp_s) {
            (Some(ms), _) => ms / 1e3,
            (None, Some(s)) => s,
            (None, None) => bail!("{at}: no timestamp (milliseconds) or timestamp_s"),
        };
        if !t.is_finite() {
            bail!("{at}: the time is not a number");
        }
        rows.push((t, i + 1, line));
    }
    if rows.is_empty() {
        bail!("{}: no requests", path.display());
    }
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let t0 = rows[0].0;
    rows.into_iter()
        .enumerate()
        .map(|(row, (t, lineno, l))| {
            let at = format!("{}:{lineno}", path.display());
            let max_tokens = l
                .output_length
                .or(l.max_tokens)
                .or(l.output_tokens)
                .filter(|&n| n > 0)
                .with_context(|| format!("{at}: no positive output_length (or max_tokens)"))?;
            let (prompt, asked) = match (l.prompt, l.input_length.or(l.prompt_tokens)) {
                (Some(p), _) => (p, None),
                (None, Some(n)) if n > 0 => (text.prompt(row, &l.hash_ids, n)?, Some(n)),
                _ => bail!("{at}: no prompt and no positive input_length (or prompt_tokens)"),
            };
            Ok(Replayed {
                due_s: (t - t0) / time_scale,
                prompt,
                max_tokens,
                prompt_tokens_asked: asked,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn write(lines: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, lines.as_bytes()).unwrap();
        f
    }

    #[test]
    fn lengths_times_and_shared_blocks() {
        let corpus = Corpus::builtin().unwrap();
        let tk = TextTokenizer::embedded().unwrap();
        let text = TextSource::new(&corpus, Some(&tk));
        let f = write(concat!(
            r#"{"timestamp": 2500, "input_length": 700, "output_length": 9, "hash_ids": [4, 5]}"#,
            "\n",
            r#"{"timestamp": 1000, "input_length": 600, "output_length": 3, "hash_ids": [4, 6]}"#,
            "\n\n",
            r#"{"timestamp_s": 4.0, "prompt": "Hello there", "max_tokens": 2}"#,
            "\n"
        ));
        let r = read(f.path(), &text, 2.0, None).unwrap();
        // sorted by time, relative to the first, at double speed
        assert_eq!(
            r.iter().map(|x| x.due_s).collect::<Vec<_>>(),
            [0.0, 0.75, 1.5]
        );
        assert_eq!(
            r.iter().map(|x| x.max_tokens).collect::<Vec<_>>(),
            [3, 9, 2]
        );
        assert_eq!(r[2].prompt, "Hello there");
        for (x, n) in [(&r[0], 600), (&r[1], 700)] {
            let got = tk.encode_literal(&x.prompt).unwrap().len();
            // the longest whole-word prefix within n tokens: one more word would pass n
            assert!(got <= n && got + 8 > n, "{got} tokens for {n}");
            assert_eq!(x.prompt_tokens_asked, Some(n));
        }
        // both start with block 4: their first 512-token block is the same text
        let a: Vec<&str> = r[0].prompt.split(' ').collect();
        let b: Vec<&str> = r[1].prompt.split(' ').collect();
        let shared = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
        let words_of_block = text
            .text(
                (4u64.wrapping_mul(0x9e37_79b9_7f4a_7c15) % text.words.len() as u64) as usize,
                BLOCK_TOKENS,
            )
            .unwrap()
            .len();
        assert!(shared >= words_of_block, "{shared} < {words_of_block}");
        assert!(shared < a.len().min(b.len()), "then they part");
    }

    #[test]
    fn bad_lines_name_their_place() {
        let corpus = Corpus::builtin().unwrap();
        let text = TextSource::new(&corpus, None);
        for (body, says) in [
            (
                "{\"input_length\": 5, \"output_length\": 2}\n",
                ":1: no timestamp",
            ),
            (
                "{\"timestamp\": 0, \"input_length\": 5}\n",
                ":1: no positive output_length",
            ),
            (
                "{\"timestamp\": 0, \"output_length\": 2}\n",
                ":1: no prompt",
            ),
            (
                "\n{\"timestamp\": 0, \"output_length\": 2\n",
                ":2: not a JSON object",
            ),
            ("\n\n", "no requests"),
        ] {
            let f = write(body);
            let e = format!("{:#}", read(f.path(), &text, 1.0, None).unwrap_err());
            assert!(e.contains(says), "{body:?}: {e}");
        }
        let f = write("{\"timestamp\": 0, \"input_length\": 7, \"output_length\": 2}\n");
        let r = read(f.path(), &text, 1.0, Some(1)).unwrap();
        assert_eq!(
            r[0].prompt.split(' ').count(),
            7,
            "a word per token without a tokenizer"
        );
        assert!(read(f.path(), &text, 0.0, None).is_err());
    }
}
