//! The capture corpus (MEASUREMENTS.md §5): prompts chosen per family, captured through the API,
//! copied, checked and indexed; and loading a corpus back, re-checked.
//!
//! Prompts: for each of the twelve families, the prompt keys `"{prefix}/{family}/{i}"` for i = 0,
//! 1, 2, … are rendered and de-duplicated in order (several families have few distinct prompts:
//! true_false has eight); the first `eval_per_family` distinct prompts form the **evaluation** set,
//! the next `train_per_family` the **training** set, so the two never share a prompt.
//!
//! Layout of a corpus directory:
//! ```text
//! corpus.json          what was asked, of which server, when, and what fell short
//! sequences.jsonl      one SequenceRecord per capture (set, family, prompt, API text, file, sha256)
//! eval/*.bin train/*.bin   the capture files (FORMAT.md "Capture files")
//! ```

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use moefleet_engine::capture::Capture;
use moefleet_engine::serve::request::chat_text;
use moefleet_engine::tokenizer::TextTokenizer;

use crate::workload::{prompt_key, Families};

/// Which part of the corpus a sequence belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Set {
    Eval,
    Train,
}

impl Set {
    pub fn dir(self) -> &'static str {
        match self {
            Set::Eval => "eval",
            Set::Train => "train",
        }
    }
}

/// One prompt to capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pick {
    pub set: Set,
    pub family: String,
    pub family_index: usize,
    pub prompt_index: usize,
    pub key: String,
    pub text: String,
}

/// A family with fewer distinct prompts than asked for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shortfall {
    pub family: String,
    pub distinct: usize,
    pub asked: usize,
}

/// Prompt keys scanned per family looking for distinct prompts.
pub const SCAN_LIMIT: usize = 4096;

/// The evaluation and training prompts (see the module header), and the families that fell short.
pub fn pick_prompts(
    families: &Families,
    prefix: &str,
    eval_per_family: usize,
    train_per_family: usize,
) -> (Vec<Pick>, Vec<Shortfall>) {
    let mut picks = Vec::new();
    let mut short = Vec::new();
    let want = eval_per_family + train_per_family;
    for (fi, family) in families.names.iter().enumerate() {
        let mut seen = HashSet::new();
        let mut got = 0;
        for pi in 0..SCAN_LIMIT {
            if got == want {
                break;
            }
            let text = families.prompt(prefix, fi, pi);
            if !seen.insert(text.clone()) {
                continue;
            }
            picks.push(Pick {
                set: if got < eval_per_family {
                    Set::Eval
                } else {
                    Set::Train
                },
                family: family.clone(),
                family_index: fi,
                prompt_index: pi,
                key: prompt_key(prefix, fi, pi),
                text,
            });
            got += 1;
        }
        if got < want {
            short.push(Shortfall {
                family: family.clone(),
                distinct: got,
                asked: want,
            });
        }
    }
    (picks, short)
}

/// Tasks over passages of the project's own prose (`workloads/corpus`, written for the project):
/// longer prompts of real text, and the summarising and continuing users ask for.
pub const PASSAGE_TASKS: [(&str, &str); 2] = [
    (
        "summary",
        "Summarise the following text in a few sentences.\n\n",
    ),
    ("continuation", "Continue the following text.\n\n"),
];

/// Characters a passage grows to (whole paragraphs) before it is cut.
pub const PASSAGE_CHARS: usize = 900;

/// Passages of `paragraphs`: consecutive paragraphs joined until `PASSAGE_CHARS`, in order.
pub fn passages(paragraphs: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for p in paragraphs {
        if !cur.is_empty() {
            cur.push_str("\n\n");
        }
        cur.push_str(p);
        if cur.len() >= PASSAGE_CHARS {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Passage prompts, `per_task` of each task (or every passage when there are fewer), with the
/// passage index i taken by task j at i ≡ j (mod tasks) so no passage appears twice. A prompt is in
/// the evaluation set when it is the task's 0th, `eval_every`-th, … passage; keys are
/// `"{prefix}/{task}/{passage}"`; families are `passage_{task}`, numbered after `first_family`.
pub fn pick_passages(
    passages: &[String],
    prefix: &str,
    per_task: usize,
    eval_every: usize,
    first_family: usize,
) -> Vec<Pick> {
    let n = PASSAGE_TASKS.len();
    let mut picks = Vec::new();
    for (j, (task, lead)) in PASSAGE_TASKS.iter().enumerate() {
        for (m, (i, text)) in passages
            .iter()
            .enumerate()
            .skip(j)
            .step_by(n)
            .take(per_task)
            .enumerate()
        {
            picks.push(Pick {
                set: if m.is_multiple_of(eval_every.max(1)) {
                    Set::Eval
                } else {
                    Set::Train
                },
                family: format!("passage_{task}"),
                family_index: first_family + j,
                prompt_index: i,
                key: format!("{prefix}/{task}/{i}"),
                text: format!("{lead}{text}"),
            });
        }
    }
    picks
}

/// One captured sequence in `sequences.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SequenceRecord {
    pub set: Set,
    pub family: String,
    pub family_index: usize,
    pub prompt_index: usize,
    pub key: String,
    /// The user message sent.
    pub prompt: String,
    /// The text the API returned.
    pub text: String,
    pub prompt_tokens: usize,
    pub generated: usize,
    /// The capture file, relative to the corpus directory.
    pub file: String,
    /// Where the server wrote it.
    pub source: String,
    /// The last role's capture sequence number.
    pub sequence: u64,
    pub bytes: u64,
    pub sha256: String,
}

/// The checks of MEASUREMENTS.md §5 beyond the file's own (`Capture::read`: finite values,
/// record size dividing the payload, consistent positions and ids): the prompt ids are the
/// tokenizer's ids of the rendered chat prompt, and the generated ids decode to the API's text.
pub fn check(cap: &Capture, rec: &SequenceRecord, tk: &TextTokenizer) -> Result<(), String> {
    let rendered = chat_text(tk, &[("user".to_string(), rec.prompt.clone())])?;
    let ids = tk
        .encode_prompt(&rendered)
        .map_err(|e| format!("cannot tokenise the prompt: {e}"))?;
    if cap.prompt() != ids.as_slice() {
        let at = cap
            .prompt()
            .iter()
            .zip(&ids)
            .position(|(a, b)| a != b)
            .unwrap_or(ids.len().min(cap.prompt().len()));
        return Err(format!(
            "prompt ids differ from the tokenizer's ids of the rendered prompt (first at \
             position {at}; {} captured vs {} expected)",
            cap.prompt().len(),
            ids.len()
        ));
    }
    if cap.generated().len() != rec.generated {
        return Err(format!(
            "{} generated ids, the API reported {}",
            cap.generated().len(),
            rec.generated
        ));
    }
    let decoded = tk
        .decode(cap.generated())
        .map_err(|e| format!("cannot decode the generated ids: {e}"))?;
    if decoded != rec.text {
        let at = decoded
            .bytes()
            .zip(rec.text.bytes())
            .position(|(a, b)| a != b)
            .unwrap_or(decoded.len().min(rec.text.len()));
        return Err(format!(
            "the generated ids decode to text that differs from the API's at byte {at}"
        ));
    }
    Ok(())
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A loaded, checked corpus.
pub struct Corpus {
    pub dir: PathBuf,
    pub manifest: serde_json::Value,
    pub sequences: Vec<(SequenceRecord, Capture)>,
}

impl Corpus {
    /// Read `dir`'s index and every capture it names, re-running every check (a file that fails
    /// is an error naming it and the check).
    pub fn load(dir: &Path, tk: &TextTokenizer) -> anyhow::Result<Corpus> {
        let mp = dir.join("corpus.json");
        let manifest: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(&mp)
                .with_context(|| format!("{} is not a capture corpus", dir.display()))?,
        )
        .with_context(|| format!("parsing {}", mp.display()))?;
        let recs: Vec<SequenceRecord> = crate::trace::read_records(&dir.join("sequences.jsonl"))?;
        if recs.is_empty() {
            bail!("{}: the corpus has no sequences", dir.display());
        }
        let mut sequences = Vec::with_capacity(recs.len());
        for r in recs {
            let path = dir.join(&r.file);
            let bytes =
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            let cap = Capture::decode(&bytes)
                .map_err(|why| anyhow::anyhow!("capture {}: {why}", path.display()))?;
            check(&cap, &r, tk)
                .map_err(|why| anyhow::anyhow!("capture {}: {why}", path.display()))?;
            if sha256_hex(&bytes) != r.sha256 {
                bail!(
                    "capture {}: its SHA-256 differs from the one in sequences.jsonl (changed \
                     since it was captured)",
                    path.display()
                );
            }
            sequences.push((r, cap));
        }
        // a fixed order whatever order the captures finished in: fits and replays are then
        // deterministic (sums in the same order) and tables list families in the spec's order
        sequences.sort_by_key(|(r, _)| (r.set == Set::Train, r.family_index, r.prompt_index));
        Ok(Corpus {
            dir: dir.to_path_buf(),
            manifest,
            sequences,
        })
    }

    pub fn set(&self, set: Set) -> impl Iterator<Item = &(SequenceRecord, Capture)> {
        self.sequences.iter().filter(move |(r, _)| r.set == set)
    }

    /// The model the corpus was captured from, as `/v1/models` named it.
    pub fn model(&self) -> Option<&str> {
        self.manifest["model"].as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evaluation_and_training_prompts_are_distinct_and_short_families_are_reported() {
        let f = Families::builtin().unwrap();
        let (picks, short) = pick_prompts(&f, "mtp", 3, 24);
        let texts: Vec<String> = (0..40).map(|i| format!("p{i}")).collect();
        let ps = pick_passages(&texts, "mtp", 12, 4, 12);
        for (task, _) in PASSAGE_TASKS {
            let fam = format!("passage_{task}");
            let of: Vec<&Pick> = ps.iter().filter(|p| p.family == fam).collect();
            assert_eq!(of.len(), 12);
            // every task holds out its own 0th, 4th, 8th passage
            assert_eq!(of.iter().filter(|p| p.set == Set::Eval).count(), 3, "{fam}");
        }
        let mut seen: Vec<&str> = ps.iter().map(|p| p.text.as_str()).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), ps.len(), "a passage appears twice");
        let eval: Vec<_> = picks.iter().filter(|p| p.set == Set::Eval).collect();
        assert_eq!(eval.len(), 36);
        for fi in 0..12 {
            assert_eq!(eval.iter().filter(|p| p.family_index == fi).count(), 3);
        }
        let texts: HashSet<_> = picks.iter().map(|p| &p.text).collect();
        assert_eq!(texts.len(), picks.len(), "a prompt appears twice");
        // true_false renders only eight claims
        let tf = short.iter().find(|s| s.family == "true_false").unwrap();
        assert_eq!((tf.distinct, tf.asked), (8, 27));
        assert!(picks.iter().filter(|p| p.family == "true_false").count() == 8);
    }
}
