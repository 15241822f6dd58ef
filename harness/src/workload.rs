//! Workload of the concurrency sweep (MEASUREMENTS.md §2.1–2.2): prompt families, prompt keys,
//! requests per phase, sweep plans. The data in `workloads/` is compiled in (`include_str!`), so
//! the binary works from any directory. A template placeholder `{EXPR}` is an alias (`T`, `T2`),
//! `LIST[f]`, `f` or `N + f`, with `f` = `h % m` or `(h >> s) % m` on the key's hash `h`;
//! `harness/tests/workload_reference.py` recomputes the prompts with Python's hashlib.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use anyhow::{anyhow, ensure, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

const FAMILIES_JSON: &str = include_str!("../../workloads/families.json");
const PLANS: [(&str, &str); 2] = [
    ("paper", include_str!("../../workloads/plans/paper.toml")),
    ("quick", include_str!("../../workloads/plans/quick.toml")),
];

/// `h = int(SHA-256(key) as big-endian) >> 4` (252 bits) as little-endian 64-bit limbs.
pub fn key_hash(key: &str) -> [u64; 4] {
    let mut d = [0u64; 5]; // little-endian limbs of SHA-256(key), plus a zero top limb
    for (i, byte) in Sha256::digest(key.as_bytes()).iter().enumerate() {
        d[3 - i / 8] = (d[3 - i / 8] << 8) | u64::from(*byte);
    }
    std::array::from_fn(|i| (d[i] >> 4) | (d[i + 1] << 60))
}

/// `(h >> shift) % modulus` for `h` from [`key_hash`], exact. Panics if `modulus == 0`.
pub fn hash_field(h: &[u64; 4], shift: u32, modulus: u64) -> u64 {
    let (word, bits, m) = ((shift / 64) as usize, shift % 64, u128::from(modulus));
    let limb = |j: usize| h.get(j).copied().unwrap_or(0);
    let carry = |i: usize| limb(i + word + 1).checked_shl(64 - bits).unwrap_or(0);
    let shifted = |i: usize| u128::from((limb(i + word) >> bits) | carry(i));
    (0..4).rev().fold(0, |r, i| ((r << 64) | shifted(i)) % m) as u64 // r < m
}

/// The prompt key `"{prefix}/{family_index}/{prompt_index}"`.
pub fn prompt_key(prefix: &str, family_index: usize, prompt_index: usize) -> String {
    format!("{prefix}/{family_index}/{prompt_index}")
}

/// A placeholder `Slot(words, offset, shift, modulus)`: `words[(h >> shift) % modulus]`, or
/// without words `offset + (h >> shift) % modulus`.
#[derive(Clone, Debug)]
struct Slot(Option<Vec<String>>, u64, u32, u64);

type Lists = BTreeMap<String, Vec<String>>;

/// `families.json`; other keys (such as `comment`) are ignored.
#[derive(Deserialize)]
struct FamiliesFile {
    aliases: BTreeMap<String, String>,
    families: Vec<FamilyEntry>,
    lists: Lists,
}

#[derive(Deserialize)]
struct FamilyEntry {
    name: String,
    template: String,
}

/// The prompt families: names in order, parsed templates and word lists.
#[derive(Clone, Debug)]
pub struct Families {
    /// Family names; a family's index is its position here.
    pub names: Vec<String>,
    /// Per family: pieces of literal text, each after an optional placeholder.
    templates: Vec<Vec<(Option<Slot>, String)>>,
}

/// One request's prompt within a phase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromptSpec {
    pub family: String,
    /// Position of the family in [`Families::names`].
    pub family_index: usize,
    /// Index of the prompt within its family in this phase.
    pub prompt_index: usize,
    /// `"{prefix}/{family_index}/{prompt_index}"`, the hashed key.
    pub key: String,
    /// The rendered prompt, sent as the one user message.
    pub text: String,
}

impl Families {
    /// The spec's twelve families, compiled in from `workloads/families.json`.
    pub fn builtin() -> Result<Families> {
        Families::from_json(FAMILIES_JSON).context("built-in workloads/families.json")
    }

    /// Loads a file with the layout of `workloads/families.json`.
    pub fn load(path: impl AsRef<Path>) -> Result<Families> {
        let shown = path.as_ref().display().to_string();
        let text = std::fs::read_to_string(&path).context(format!("reading {shown}"))?;
        Families::from_json(&text).context(format!("families file {shown}"))
    }

    /// Parses a families document and checks every placeholder, so rendering cannot fail.
    pub fn from_json(text: &str) -> Result<Families> {
        let file: FamiliesFile = serde_json::from_str(text)?;
        ensure!(!file.families.is_empty(), "no families");
        let (mut names, mut templates) = (Vec::new(), Vec::new());
        for FamilyEntry { name, mut template } in file.families {
            ensure!(!names.contains(&name), "family {name} appears twice");
            for (alias, expr) in &file.aliases {
                template = template.replace(&format!("{{{alias}}}"), &format!("{{{expr}}}"));
            }
            let mut parts = template.split('{');
            let mut pieces = vec![(None, parts.next().unwrap_or_default().to_string())];
            for part in parts {
                let (expr, text) = part.split_once('}').ok_or(anyhow!("{name}: unclosed {{"))?;
                let slot = parse_slot(expr, &file.lists).context(format!("family {name}"))?;
                pieces.push((Some(slot), text.to_string()));
            }
            let stray = template.matches('}').count() >= pieces.len();
            ensure!(!stray, "{name}: stray }}");
            templates.push(pieces);
            names.push(name);
        }
        Ok(Families { names, templates })
    }

    /// The prompt of `family_index` for key `"{prefix}/{family_index}/{prompt_index}"`.
    /// Panics if `family_index >= self.names.len()`.
    pub fn prompt(&self, prefix: &str, family_index: usize, prompt_index: usize) -> String {
        let h = key_hash(&prompt_key(prefix, family_index, prompt_index));
        let mut out = String::new();
        for (slot, text) in &self.templates[family_index] {
            if let Some(Slot(words, offset, shift, modulus)) = slot {
                let value = hash_field(&h, *shift, *modulus); // < words.len() (parse_slot)
                let word = words.as_ref().map(|words| words[value as usize].as_str());
                out.push_str(word.unwrap_or(&(offset + value).to_string()));
            }
            out.push_str(text);
        }
        out
    }

    /// The `n` prompts of one phase. Mixed (`family == None`): request j has `family_index =
    /// j % names.len()` (12 for the built-in set) and `prompt_index = j / names.len()`; one
    /// family `Some(f)`: `family_index = f`, `prompt_index = j`. The harness passes the phase
    /// name as `prefix` ([`PhasePlan::name`]). Panics if `f >= names.len()`.
    pub fn phase_prompts(&self, prefix: &str, family: Option<usize>, n: usize) -> Vec<PromptSpec> {
        let k = self.names.len();
        let spec = |j: usize| {
            let (family_index, prompt_index) = family.map_or((j % k, j / k), |f| (f, j));
            PromptSpec {
                family: self.names[family_index].clone(),
                family_index,
                prompt_index,
                key: prompt_key(prefix, family_index, prompt_index),
                text: self.prompt(prefix, family_index, prompt_index),
            }
        };
        (0..n).map(spec).collect()
    }
}

/// Parses `LIST[f]`, `N + f` or `f`, with `f` = `h % m` or `(h >> s) % m`.
fn parse_slot(expr: &str, lists: &Lists) -> Result<Slot> {
    let e: String = expr.split_whitespace().collect();
    let bad = || anyhow!("{{{expr}}}: expected LIST[f], N + f or f; f = h % m or (h >> s) % m");
    let indexed = e.strip_suffix(']').and_then(|s| s.split_once('['));
    let (name, f) = indexed.unwrap_or(("", &e));
    let words = lists.get(name).cloned();
    ensure!(name.is_empty() || words.is_some(), "no word list {name}");
    let (offset, f) = f.split_once('+').unwrap_or(("0", f));
    let (value, modulus) = f.rsplit_once('%').ok_or_else(bad)?;
    let shift = value.strip_prefix("(h>>").and_then(|v| v.strip_suffix(')'));
    let num = |s: Option<&str>| s.and_then(|s| s.parse::<u64>().ok()).ok_or_else(bad);
    let shift = num(if value == "h" { Some("0") } else { shift })?;
    let (offset, modulus) = (num(Some(offset))?, num(Some(modulus))?);
    let in_range = modulus > 0 && shift < 256 && offset.checked_add(modulus).is_some();
    ensure!(in_range, "{{{expr}}}: need m > 0, s < 256, N + m < 2^64");
    if let Some(words) = &words {
        let ok = modulus == words.len() as u64 && offset == 0;
        ensure!(ok, "{{{expr}}}: {name} has {} words", words.len());
    }
    Ok(Slot(words, offset, shift as u32, modulus)) // shift < 256
}

/// Requests in a phase at concurrency `c`: `max(c, min_requests)` rounded up to a multiple of
/// `c`, so every cohort is full (C = 8 gives 16, 11 gives 22, C >= 12 gives C). C = 0 gives 0.
pub fn requests_per_phase(c: usize, min_requests: usize) -> usize {
    c.max(min_requests).div_ceil(c.max(1)) * c
}

/// Direction in which a pass walks the levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    Ascending,
    Descending,
}

/// One pass over the levels; its name prefixes every phase name.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Pass {
    pub name: String,
    pub order: Order,
}

/// A sweep plan, as in `workloads/plans/*.toml`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    pub name: String,
    /// Concurrency levels C, distinct; each pass sorts them in its order.
    pub levels: Vec<usize>,
    /// Passes, run in this order.
    pub passes: Vec<Pass>,
    pub max_tokens: usize,
    /// Delay between request starts within a cohort: request j starts at `stagger_s * j`.
    pub stagger_s: f64,
    /// Wait after each phase, seconds.
    pub settle_s: f64,
    /// Lower bound of requests per phase, see [`requests_per_phase`].
    pub min_requests: usize,
    /// `"mixed"` or the name of one family.
    pub family: String,
    /// The prompt-key prefix of every phase [default: each phase's own name]. A shared prefix
    /// makes the passes send the same prompts (the speculation experiment's repeated pass).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_prefix: Option<String>,
    /// A families file with the layout of `workloads/families.json` (a path from the directory
    /// the sweep runs in) [default: the spec's twelve families].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub families: Option<String>,
}

/// One phase of a plan, in run order: C = `concurrency`, [`requests_per_phase`] requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhasePlan {
    /// Pass name + `_c` + 3-digit level, e.g. `mixed_a_c088`. It is also the phase's prompt-key
    /// prefix **(our choice)**, so each phase's prompts are distinct and reproducible.
    pub name: String,
    pub concurrency: usize,
    pub requests: usize,
    pub max_tokens: usize,
}

impl Plan {
    /// A built-in plan by bare name (`paper`, `quick`); anything else is read as a TOML path.
    pub fn load(name_or_path: &str) -> Result<Plan> {
        if let Some((_, text)) = PLANS.iter().find(|(name, _)| *name == name_or_path) {
            return Plan::from_toml(text).context(format!("built-in plan {name_or_path}"));
        }
        let context = format!("reading plan {name_or_path:?} (built-in plans: paper, quick)");
        let text = std::fs::read_to_string(name_or_path).context(context)?;
        Plan::from_toml(&text).context(format!("plan file {name_or_path}"))
    }

    /// Parses and validates a plan.
    pub fn from_toml(text: &str) -> Result<Plan> {
        let plan: Plan = toml::from_str(text)?;
        plan.validate().context(format!("plan {}", plan.name))?;
        Ok(plan)
    }

    /// Checks levels (non-empty, non-zero, distinct), passes, caps and timings.
    pub fn validate(&self) -> Result<()> {
        ensure!(!self.levels.is_empty(), "`levels` is empty");
        let mut seen = HashSet::new();
        for &c in &self.levels {
            ensure!(c > 0, "level 0 in `levels`: C must be at least 1");
            ensure!(seen.insert(c), "level {c} appears twice in `levels`");
        }
        let names: HashSet<_> = self.passes.iter().map(|pass| &pass.name).collect();
        ensure!(!names.is_empty(), "no `passes`");
        ensure!(names.len() == self.passes.len(), "pass names repeat");
        ensure!(self.max_tokens > 0, "`max_tokens` must be at least 1");
        let times_ok = self.stagger_s >= 0.0 && self.settle_s >= 0.0; // false for NaN
        ensure!(times_ok, "`stagger_s` and `settle_s` must be >= 0");
        ensure!(!self.family.is_empty(), "`family` is empty (use \"mixed\")");
        Ok(())
    }

    /// All phases in run order: every level of the first pass in its order, then the next pass.
    pub fn phases(&self) -> Vec<PhasePlan> {
        let mut phases = Vec::new();
        for pass in &self.passes {
            let mut levels = self.levels.clone();
            levels.sort_unstable();
            if pass.order == Order::Descending {
                levels.reverse();
            }
            phases.extend(levels.into_iter().map(|c| PhasePlan {
                name: format!("{}_c{c:03}", pass.name),
                concurrency: c,
                requests: requests_per_phase(c, self.min_requests),
                max_tokens: self.max_tokens,
            }));
        }
        phases
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_per_phase_matches_spec() {
        let levels = [1, 2, 4, 6, 8, 11, 12, 15, 176];
        let want = [12, 12, 12, 12, 16, 22, 12, 15, 176];
        assert_eq!(levels.map(|c| requests_per_phase(c, 12)), want);
    }

    #[test]
    fn paper_and_quick_phases() {
        let show = |p: &PhasePlan| format!("{} {} {}", p.name, p.requests, p.max_tokens);
        let paper = Plan::load("paper").unwrap().phases();
        let paper: Vec<_> = paper.iter().map(show).collect();
        assert_eq!(paper.len(), 30);
        let picked = [0, 15, 24, 29].map(|i| paper[i].as_str()).join(", ");
        let want =
            "mixed_a_c001 12 128, mixed_b_c176 176 128, mixed_b_c011 22 128, mixed_b_c001 12 128";
        assert_eq!(picked, want);
        let quick = Plan::load("quick").unwrap().phases();
        let quick: Vec<_> = quick.iter().map(show).collect();
        let want = "mixed_a_c001 12 16, mixed_a_c004 12 16, mixed_a_c011 22 16, mixed_b_c011 22 16, mixed_b_c004 12 16, mixed_b_c001 12 16";
        assert_eq!(quick.join(", "), want);
    }

    #[test]
    fn plan_from_path_and_validation_errors() {
        let paper = PLANS[0].1;
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../workloads/plans/quick.toml");
        assert_eq!(Plan::load(path).unwrap(), Plan::load("quick").unwrap());
        let missing = Plan::load("nonexistent").unwrap_err();
        assert!(format!("{missing:#}").contains("built-in plans: paper, quick"));
        let levels = "levels = [1, 2, 4, 6, 8, 11, 15, 22, 32, 48, 64, 88, 96, 128, 176]";
        let cases = [
            (levels, "levels = []", "`levels` is empty"),
            (levels, "levels = [4, 0]", "level 0 in `levels`"),
            (levels, "levels = [1, 2, 2]", "level 2 appears twice"),
            ("\"descending\"", "\"up\"", "unknown variant `up`"),
            ("max_tokens = 128", "max_tokens = 0", "`max_tokens`"),
            ("settle_s = 3.0", "settle_s = -1.0", "`settle_s`"),
        ];
        for (from, to, want) in cases {
            let err = Plan::from_toml(&paper.replace(from, to)).unwrap_err();
            let err = format!("{err:#}");
            assert!(err.contains(want), "{err:?} should contain {want:?}");
        }
    }

    /// Pinned against `python3 harness/tests/workload_reference.py` (hashlib, spec f-strings).
    #[test]
    fn reference_prompts() {
        let expected = [
            "Explain coffee to a curious ten-year-old in one short paragraph.",
            "Write a JavaScript function that parses a CSV line with quoted fields. Include a short comment.",
            "A shop sells pencils at 32 cents each and notebooks at 302 cents each. How much do 9 pencils and 4 notebooks cost? Show the steps.",
            "Write the opening paragraph of a short story that takes place near the stock market.",
            "List five practical tips about a lighthouse, one line each.",
            "Compare jazz and black holes in a short table, then give a one-sentence conclusion.",
            "Rewrite this sentence to sound more formal: 'So basically compound interest is kind of a big deal and people should really care more about it.'",
            "What are the three most important facts about jazz? Answer briefly.",
            "Write a four-line poem about the Roman empire.",
            "Give step-by-step instructions for a beginner who wants to learn about the Silk Road this weekend.",
            "Translate into French and then into Spanish: 'The history of compound interest is longer than most people think.'",
            "Is it true that the Great Wall of China is visible from space? Answer yes or no, then justify in two sentences.",
        ];
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../workloads/families.json");
        let families = Families::load(path).unwrap();
        let got = (0..12).map(|i| families.prompt("mixed_a_c001", i, 0));
        assert_eq!(got.collect::<Vec<_>>(), expected);
        let field = |s, m| hash_field(&key_hash("mixed_b_c176/5/14"), s, m);
        assert_eq!(field(0, u64::MAX - 58), 11315716155797120930);
        assert_eq!(field(60, 1_000_000_007), 695956500);
        assert_eq!(field(130, (1 << 61) - 1), 542688674465290184);
        assert_eq!([field(200, 97), field(248, 16), field(252, 7)], [23, 12, 0]);
    }

    #[test]
    fn phase_prompts_mixed_and_single() {
        let families = Families::builtin().unwrap();
        let p = &families.phase_prompts("mixed_a_c008", None, 16)[13];
        assert_eq!((p.family_index, p.prompt_index), (1, 1));
        assert_eq!([&p.family, &p.key], ["code", "mixed_a_c008/1/1"]);
        assert_eq!(p.text, families.prompt("mixed_a_c008", 1, 1));
        let single = families.phase_prompts("p", Some(2), 3);
        let indices = single.iter().map(|p| (p.family_index, p.prompt_index));
        assert_eq!(indices.collect::<Vec<_>>(), [(2, 0), (2, 1), (2, 2)]);
    }

    #[test]
    fn template_errors() {
        let parse = |t: &str| {
            let family = format!(r#"{{"name": "x", "template": "{t}"}}"#);
            let lists = r#""aliases": {}, "lists": {"L": ["a", "b"]}"#;
            Families::from_json(&format!(r#"{{"families": [{family}], {lists}}}"#))
        };
        let families = parse("{L[h % 2]}{1 + (h >> 3) % 9}").unwrap();
        assert_eq!(families.prompt("k", 0, 0).len(), 2);
        let err = |t: &str| format!("{:#}", parse(t).unwrap_err());
        assert!(err("{M[h % 2]}").contains("no word list M"));
        assert!(err("{L[h % 3]}").contains("L has 2 words"));
        assert!(err("{h}").contains("expected LIST[f]"));
        assert!(err("{L[h % 2]").contains("unclosed"));
        assert!(err("a}").contains("stray"));
    }
}
