//! Needle prompts of about N tokens (MEASUREMENTS.md §3.2): natural text from the project's corpus,
//! a sentence near the start stating an access code `{word}-{4 digits}`, and a final question
//! asking for the code only. Sizes are counted with the engine's tokenizer, the one the server
//! uses, so the prompt the server reports (`usage.prompt_tokens`) is the size asked for.
//!
//! Layout: header, first paragraph, needle sentence, filler paragraphs, question. The filler is
//! the corpus paragraphs read in order from a seeded starting paragraph and wrapping round at the
//! end (the corpus holds about 40k tokens, so 64k-token prompts repeat some of it). This module
//! builds text only; it never talks to a server.

use std::path::Path;

use anyhow::{bail, Context};
use moefleet_engine::rng::Rng;
use moefleet_engine::tokenizer::TextTokenizer;

/// Words the access code is drawn from.
pub const CODE_WORDS: [&str; 6] = ["amber", "cobalt", "quartz", "sienna", "umber", "indigo"];

/// The corpus as compiled in from `workloads/corpus/` (used when no `--corpus` is given).
const BUILTIN: [(&str, &str); 10] = [
    (
        "01_systems_engineering.txt",
        include_str!("../../../../workloads/corpus/01_systems_engineering.txt"),
    ),
    (
        "02_machine_learning_numerics.txt",
        include_str!("../../../../workloads/corpus/02_machine_learning_numerics.txt"),
    ),
    (
        "03_stories.txt",
        include_str!("../../../../workloads/corpus/03_stories.txt"),
    ),
    (
        "04_household_howto.txt",
        include_str!("../../../../workloads/corpus/04_household_howto.txt"),
    ),
    (
        "05_nature_science_geography.txt",
        include_str!("../../../../workloads/corpus/05_nature_science_geography.txt"),
    ),
    (
        "06_invented_history.txt",
        include_str!("../../../../workloads/corpus/06_invented_history.txt"),
    ),
    (
        "07_faq_support.txt",
        include_str!("../../../../workloads/corpus/07_faq_support.txt"),
    ),
    (
        "08_technical_reference.txt",
        include_str!("../../../../workloads/corpus/08_technical_reference.txt"),
    ),
    (
        "09_business_logistics.txt",
        include_str!("../../../../workloads/corpus/09_business_logistics.txt"),
    ),
    (
        "10_verse_and_wordlists.txt",
        include_str!("../../../../workloads/corpus/10_verse_and_wordlists.txt"),
    ),
];

const HEADER: &str =
    "The following is a long collection of documents. Read it carefully: a question about it comes at the end.";
const QUESTION: &str = "Question: What is the access code stated in the note near the beginning of this collection? Reply with the access code only.\nAnswer:";

/// Natural text split into paragraphs (blank-line separated, whitespace-trimmed, non-empty).
#[derive(Clone, Debug)]
pub struct Corpus {
    pub paragraphs: Vec<String>,
    /// Where the text came from (file names), for the run record.
    pub sources: Vec<String>,
}

impl Corpus {
    /// The compiled-in `workloads/corpus/*.txt`, in file-name order.
    pub fn builtin() -> anyhow::Result<Corpus> {
        Corpus::from_texts(BUILTIN.iter().map(|(n, t)| (n.to_string(), t.to_string())))
    }

    /// Every `*.txt` of `dir`, in file-name order.
    pub fn from_dir(dir: &Path) -> anyhow::Result<Corpus> {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .with_context(|| format!("reading corpus directory {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "txt"))
            .collect();
        files.sort();
        let mut texts = Vec::new();
        for f in files {
            let t =
                std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
            texts.push((f.display().to_string(), t));
        }
        Corpus::from_texts(texts).with_context(|| format!("corpus {}", dir.display()))
    }

    fn from_texts(texts: impl IntoIterator<Item = (String, String)>) -> anyhow::Result<Corpus> {
        let mut paragraphs = Vec::new();
        let mut sources = Vec::new();
        for (name, text) in texts {
            sources.push(name);
            paragraphs.extend(split_paragraphs(&text));
        }
        if paragraphs.is_empty() {
            bail!("no text: the corpus needs at least one non-empty .txt file");
        }
        Ok(Corpus {
            paragraphs,
            sources,
        })
    }
}

/// Blank-line separated paragraphs, trimmed, with inner whitespace runs kept as written.
pub fn split_paragraphs(text: &str) -> Vec<String> {
    let text = text.replace("\r\n", "\n");
    text.split("\n\n")
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// `{word}-{4 digits}` from the seeded stream (digits 1000..=9999, so never a leading zero).
pub fn access_code(rng: &mut Rng) -> String {
    let word = CODE_WORDS[rng.below(CODE_WORDS.len() as u64) as usize];
    format!("{word}-{}", 1000 + rng.below(9000))
}

/// Does `answer` state `code` (case-insensitive)?
pub fn code_found(answer: &str, code: &str) -> bool {
    !code.is_empty() && answer.to_lowercase().contains(&code.to_lowercase())
}

/// One built prompt.
#[derive(Clone, Debug, PartialEq)]
pub struct NeedlePrompt {
    pub text: String,
    pub code: String,
    /// Tokens the size was aimed at.
    pub target_tokens: usize,
    /// Tokens of `text` as the engine's tokenizer counts them.
    pub tokens: usize,
    /// Tokens before the needle sentence.
    pub needle_offset_tokens: usize,
    /// First corpus paragraph used (the seeded start).
    pub start_paragraph: usize,
}

/// Assembles prompts for one start paragraph and code. The text is one stream of words from the
/// start paragraph on; `assemble(w)` uses its first `w` words, with the note placed after the
/// first paragraph when that paragraph is short (at most `LEAD_MAX_WORDS`), else right after the
/// header, so even small prompts keep the note near the start.
struct Layout<'a> {
    corpus: &'a Corpus,
    start: usize,
    code: &'a str,
    /// Words of text before the note.
    lead: usize,
}

/// Longest first paragraph the note is placed after.
const LEAD_MAX_WORDS: usize = 150;

impl<'a> Layout<'a> {
    fn new(corpus: &'a Corpus, start: usize, code: &'a str) -> Layout<'a> {
        let mut l = Layout {
            corpus,
            start: start % corpus.paragraphs.len(),
            code,
            lead: 0,
        };
        let first = l.paragraph(0).split_whitespace().count();
        l.lead = if first <= LEAD_MAX_WORDS { first } else { 0 };
        l
    }

    fn paragraph(&self, i: usize) -> &str {
        &self.corpus.paragraphs[(self.start + i) % self.corpus.paragraphs.len()]
    }

    /// Words `from..to` of the stream; whole paragraphs verbatim, cut ones joined by spaces,
    /// each followed by a blank line.
    fn words(&self, from: usize, to: usize) -> String {
        let mut out = String::new();
        let mut pos = 0;
        // every paragraph holds at least one word, so `to` paragraphs always suffice
        for i in 0..=to {
            if pos >= to {
                break;
            }
            let p = self.paragraph(i);
            let n = p.split_whitespace().count();
            let (a, b) = (from.max(pos), to.min(pos + n));
            if a < b {
                if a == pos && b == pos + n {
                    out.push_str(p);
                } else {
                    let cut: Vec<&str> = p.split_whitespace().skip(a - pos).take(b - a).collect();
                    out.push_str(&cut.join(" "));
                }
                out.push_str("\n\n");
            }
            pos += n;
        }
        out
    }

    /// Everything before the note.
    fn head(&self, words: usize) -> String {
        format!("{HEADER}\n\n{}", self.words(0, words.min(self.lead)))
    }

    fn needle(&self) -> String {
        format!(
            "A note for the reader: the access code is {}. Remember it; you will be asked for it.\n\n",
            self.code
        )
    }

    fn assemble(&self, words: usize) -> String {
        format!(
            "{}{}{}{QUESTION}",
            self.head(words),
            self.needle(),
            self.words(self.lead.min(words), words)
        )
    }
}

/// The longest prompt of this layout with at most `target` tokens under `count` (the tokenizer).
/// Token counts grow with the filler's word count, so a doubling search then a bisection over
/// words finds it; both loops are bounded. Fails if even the prompt without filler is too long.
pub fn build_with(
    corpus: &Corpus,
    code: &str,
    start: usize,
    target: usize,
    count: &dyn Fn(&str) -> anyhow::Result<usize>,
) -> anyhow::Result<NeedlePrompt> {
    let layout = Layout::new(corpus, start, code);
    let base = count(&layout.assemble(0))?;
    if base > target {
        bail!("a prompt of {target} tokens is too small: the header, note and question alone take {base}");
    }
    // doubling: find hi with count(hi) > target (words >= tokens / 8 at the very least)
    let mut lo = 0usize;
    let mut hi = target.max(1);
    let mut grown = 0;
    while count(&layout.assemble(hi))? <= target {
        lo = hi;
        hi *= 2;
        grown += 1;
        if grown > 40 {
            bail!("cannot reach {target} tokens: the tokenizer does not count the filler");
        }
    }
    // bisection: count(lo) <= target < count(hi)
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if count(&layout.assemble(mid))? <= target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let text = layout.assemble(lo);
    Ok(NeedlePrompt {
        tokens: count(&text)?,
        needle_offset_tokens: count(&layout.head(lo))?,
        text,
        code: code.to_string(),
        target_tokens: target,
        start_paragraph: layout.start,
    })
}

/// The prompt for `(seed, size, repeat)`: its own code and start paragraph, sized with `tk`.
pub fn build(
    corpus: &Corpus,
    tk: &TextTokenizer,
    seed: u64,
    size: usize,
    repeat: usize,
) -> anyhow::Result<NeedlePrompt> {
    let mut rng = Rng::new(moefleet_engine::rng::stream_key(
        seed,
        size as u64,
        "context-needle",
        repeat as u64,
    ));
    let code = access_code(&mut rng);
    let start = rng.below(corpus.paragraphs.len() as u64) as usize;
    let count = |s: &str| -> anyhow::Result<usize> { Ok(tk.encode(s)?.len()) };
    build_with(corpus, &code, start, size, &count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> anyhow::Result<usize> {
        Ok(s.split_whitespace().count())
    }

    fn small() -> Corpus {
        Corpus::from_texts([(
            "t".to_string(),
            "alpha beta gamma.\n\ndelta epsilon.\r\n\r\n\n zeta eta theta iota.\n".to_string(),
        )])
        .unwrap()
    }

    #[test]
    fn paragraphs_split_on_blank_lines() {
        assert_eq!(
            small().paragraphs,
            vec![
                "alpha beta gamma.",
                "delta epsilon.",
                "zeta eta theta iota."
            ]
        );
        assert!(Corpus::from_texts([("e".to_string(), "\n\n  \n".to_string())]).is_err());
    }

    #[test]
    fn codes_use_the_words_and_four_digits() {
        let mut rng = Rng::new(3);
        for _ in 0..200 {
            let c = access_code(&mut rng);
            let (w, d) = c.split_once('-').unwrap();
            assert!(CODE_WORDS.contains(&w), "{c}");
            assert_eq!(d.len(), 4, "{c}");
            assert!(d.chars().all(|ch| ch.is_ascii_digit()), "{c}");
        }
        assert!(code_found("The code is Cobalt-4821.", "cobalt-4821"));
        assert!(!code_found("cobalt 4821", "cobalt-4821"));
        assert!(!code_found("anything", ""));
    }

    #[test]
    fn sized_to_the_largest_fit_with_needle_near_the_start_and_question_last() {
        let c = small();
        let p = build_with(&c, "umber-1234", 1, 100, &words).unwrap();
        assert_eq!(p.tokens, 100);
        assert_eq!(words(&p.text).unwrap(), 100);
        assert!(p.text.starts_with(HEADER));
        assert!(p.text.ends_with(QUESTION));
        assert!(p.text.contains("the access code is umber-1234."));
        // start paragraph 1 comes first, then the filler wraps round from paragraph 2
        assert!(p
            .text
            .contains(&format!("{HEADER}\n\ndelta epsilon.\n\nA note")));
        assert_eq!(p.needle_offset_tokens, words(&p.head_text()).unwrap());
        // filler wraps round the corpus
        assert!(p.text.matches("alpha beta gamma.").count() >= 2);
        // too small a target is an error, not a panic
        assert!(build_with(&c, "umber-1234", 0, 10, &words).is_err());
    }

    #[test]
    fn a_long_first_paragraph_puts_the_note_right_after_the_header() {
        let long = vec!["word"; LEAD_MAX_WORDS + 1].join(" ");
        let c = Corpus::from_texts([("t".to_string(), format!("{long}\n\nshort one."))]).unwrap();
        // the prompt without filler is small even though the first paragraph is long
        let p = build_with(&c, "amber-1000", 0, 80, &words).unwrap();
        assert!(
            p.text.starts_with(&format!("{HEADER}\n\nA note")),
            "{}",
            p.text
        );
        assert_eq!(p.needle_offset_tokens, words(HEADER).unwrap());
        assert_eq!(p.tokens, 80);
        // a cut paragraph is joined by spaces and still followed by the question
        assert!(p.text.ends_with(&format!("word word\n\n{QUESTION}")));
    }

    #[test]
    fn real_tokenizer_hits_the_size() {
        let tk = TextTokenizer::embedded().unwrap();
        let c = Corpus::builtin().unwrap();
        for size in [256, 1024, 3000] {
            let p = build(&c, &tk, 7, size, 0).unwrap();
            assert!(
                p.tokens <= size && p.tokens + 8 >= size,
                "{size}: {}",
                p.tokens
            );
            assert_eq!(p.tokens, tk.encode(&p.text).unwrap().len());
        }
        // deterministic per (seed, size, repeat); repeats differ
        let a = build(&c, &tk, 7, 512, 0).unwrap();
        assert_eq!(a, build(&c, &tk, 7, 512, 0).unwrap());
        assert_ne!(a.text, build(&c, &tk, 7, 512, 1).unwrap().text);
    }

    impl NeedlePrompt {
        fn head_text(&self) -> String {
            self.text[..self.text.find("A note").unwrap()].to_string()
        }
    }
}
