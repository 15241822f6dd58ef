//! llama.cpp's own speculation on the same file and prompts (the speculation unit on a checkpoint):
//! `llama-server` once without speculation, once per speculative option (`ngram`: prompt-lookup
//! decoding, `--spec-type ngram-simple`; `draft`: the file as its own draft model) and off again,
//! each a sweep run under `root/llama/` with the speculation plan's two passes. Its drafts come
//! from the `timings` object llama-server adds to a response (`draft_n`, `draft_n_accepted`), which
//! the sweep keeps in each trace.

use std::fmt::Write as _;
use std::path::Path;

use super::runs::{pass_of, PASSES};
use super::tables::{cell, num_at};
use crate::analysis::metrics::request_decode_rate;
use crate::analysis::tables::{load_run, phase_rows};

/// Configurations in the order they are tabled; `off` is the reference, `off-again` the drift.
pub const CONFIGS: [&str; 4] = ["off", "ngram", "draft", "off-again"];

/// One pass of one llama-server configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaPass {
    pub q_decode: f64,
    pub q_phase: f64,
    /// (family, text, decode tok/s) per request, in family order.
    pub requests: Vec<(String, String, f64)>,
    pub drafted: u64,
    pub accepted: u64,
}

pub struct LlamaRun {
    pub name: String,
    pub passes: Vec<LlamaPass>,
    pub load: [Option<f64>; 2],
}

/// The llama-server runs under `root/llama/` (empty when there are none).
pub fn load_all(root: &Path) -> anyhow::Result<Vec<LlamaRun>> {
    let mut out = Vec::new();
    for name in CONFIGS {
        let dir = root.join("llama").join(name);
        if !dir.join("phases.jsonl").exists() {
            continue;
        }
        let run = load_run(&dir)?;
        let rows = phase_rows(&run)?;
        let mut passes = Vec::new();
        for p in PASSES {
            let (traces, row) = pass_of(&run, &rows, &dir, p)?;
            let mut requests = Vec::new();
            let (mut drafted, mut accepted) = (0, 0);
            let mut sorted: Vec<_> = traces.iter().collect();
            sorted.sort_by_key(|r| r.family_index);
            for r in sorted {
                if let Some(e) = &r.error {
                    anyhow::bail!("{}: request {} failed: {e}", dir.display(), r.family);
                }
                let t = r.server_extra.as_ref().map(|x| &x["timings"]);
                drafted += t.and_then(|t| t["draft_n"].as_u64()).unwrap_or(0);
                accepted += t.and_then(|t| t["draft_n_accepted"].as_u64()).unwrap_or(0);
                let rate = request_decode_rate(r).unwrap_or(f64::NAN);
                requests.push((r.family.clone(), r.text.clone(), rate));
            }
            passes.push(LlamaPass {
                q_decode: row.decode_tok_s.unwrap_or(f64::NAN),
                q_phase: row.phase_tok_s,
                requests,
                drafted,
                accepted,
            });
        }
        let manifest = crate::driver::manifest::RunManifest::read(&dir)?;
        let load =
            [manifest.load_average_start, manifest.load_average_end].map(|l| l.map(|l| l[0]));
        out.push(LlamaRun {
            name: name.to_string(),
            passes,
            load,
        });
    }
    Ok(out)
}

/// `llama.csv`: per configuration and pass, the pass rates and their ratio to llama-server without
/// speculation, its drafts, and whether every output equals its own without speculation and the
/// fleet's without speculation (`ours_off`: the texts of our `off` run, per pass).
pub fn llama_csv(runs: &[LlamaRun], ours_off: &[Vec<(String, String)>]) -> String {
    let mut s = String::from(
        "key,config,pass,q_decode,q_phase,q_decode_ratio,q_phase_ratio,drafted,accepted,acceptance,identical_to_off,identical_to_moefleet,load_start,load_end\n",
    );
    let Some(off) = runs.iter().find(|r| r.name == "off") else {
        return s;
    };
    for c in runs {
        for (pi, (p, o)) in c.passes.iter().zip(&off.passes).enumerate() {
            let same = |other: &[(String, String)]| {
                p.requests.len() == other.len()
                    && p.requests
                        .iter()
                        .zip(other)
                        .all(|(a, b)| a.0 == b.0 && a.1 == b.1)
            };
            let own: Vec<(String, String)> = o
                .requests
                .iter()
                .map(|r| (r.0.clone(), r.1.clone()))
                .collect();
            let ours = ours_off.get(pi).is_some_and(|x| same(x));
            let load = |i: usize| c.load[i].map(|x| x.to_string()).unwrap_or_default();
            let _ = writeln!(
                s,
                "{0}/{1},{0},{1},{2},{3},{4},{5},{6},{7},{8},{9},{10},{11},{12}",
                c.name,
                PASSES[pi],
                p.q_decode,
                p.q_phase,
                p.q_decode / o.q_decode,
                p.q_phase / o.q_phase,
                p.drafted,
                p.accepted,
                if p.drafted == 0 {
                    f64::NAN
                } else {
                    p.accepted as f64 / p.drafted as f64
                },
                same(&own),
                ours,
                load(0),
                load(1)
            );
        }
    }
    s
}

/// Where two texts part: the index of the first differing character, or None when equal.
fn parting(a: &str, b: &str) -> Option<usize> {
    let at = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
    (a != b).then_some(at)
}

/// Up to `n` characters of `t` from character `at` on.
fn excerpt(t: &str, at: usize, n: usize) -> String {
    format!("{:?}", t.chars().skip(at).take(n).collect::<String>())
}

/// Per family, the first pass of llama-server without speculation against the fleet's: the same
/// text, or where they part and what each says there.
fn texts_md(off: &LlamaRun, ours_off: &[Vec<(String, String)>]) -> String {
    let mut s = String::from(
        "\n## Texts against the fleet's, first pass without speculation\n\n\
         | family | llama-server's text | from character | the fleet's | llama-server's |\n\
         |---|---|---:|---|---|\n",
    );
    let Some(ours) = ours_off.first() else {
        return s;
    };
    for (family, text, _) in &off.passes[0].requests {
        let Some((_, mine)) = ours.iter().find(|(f, _)| f == family) else {
            continue;
        };
        let _ = match parting(mine, text) {
            None => writeln!(s, "| {family} | the same | | | |"),
            Some(at) => writeln!(
                s,
                "| {family} | parts | {at} | {} | {} |",
                excerpt(mine, at, 24).replace('|', "\\|"),
                excerpt(text, at, 24).replace('|', "\\|"),
            ),
        };
    }
    s
}

/// `llama.md`.
pub fn llama_md(runs: &[LlamaRun], ours_off: &[Vec<(String, String)>]) -> String {
    let t = crate::csv::Table::parse(&llama_csv(runs, ours_off));
    let mut s = String::from(
        "# llama.cpp's own speculation on the same file and prompts\n\n\
         `llama-server` (one slot, two threads) on the same GGUF file, the same plan and prompts, \
         in the same session as the fleet's runs: without speculation, with prompt-lookup decoding \
         (`--spec-type ngram-simple`), with the file as its own draft model (`--spec-type \
         draft-simple --model-draft`, the same ceiling of acceptance as the fleet's `draft` \
         configuration), and without speculation again at the end (drift). Ratios are to \
         llama-server without speculation in the same pass; drafted and accepted are its \
         `timings.draft_n` and `draft_n_accepted` summed over the pass.\n\n\
         | llama-server | pass | Q_decode (tok/s) | ratio | Q_phase (tok/s) | ratio | drafted | accepted | acceptance | identical to its own off | identical to the fleet's off | load |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|\n",
    );
    let yes = |v: &str| if v == "true" { "yes" } else { "no" };
    for r in &t.rows {
        let n = |i: usize| num_at(r, i);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {}× | {} | {}× | {} | {} | {} | {} | {} | {} → {} |",
            r[1],
            r[2].trim_end_matches("_c001"),
            cell(n(3), 2),
            cell(n(5), 2),
            cell(n(4), 2),
            cell(n(6), 2),
            r[7],
            r[8],
            cell(n(9), 3),
            yes(&r[10]),
            yes(&r[11]),
            cell(n(12), 2),
            cell(n(13), 2)
        );
    }
    if let Some(off) = runs.iter().find(|r| r.name == "off") {
        s.push_str(&texts_md(off, ours_off));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_part_at_their_first_different_character() {
        assert_eq!(parting("abc", "abc"), None);
        assert_eq!(parting("abcd", "abXd"), Some(2));
        assert_eq!(parting("ab", "abc"), Some(2));
        assert_eq!(parting("é|x", "é|y"), Some(2), "characters, not bytes");
        let off = LlamaRun {
            name: "off".into(),
            passes: vec![LlamaPass {
                q_decode: 1.0,
                q_phase: 1.0,
                requests: vec![
                    ("a".into(), "same".into(), 1.0),
                    ("b".into(), "one|two".into(), 1.0),
                ],
                drafted: 0,
                accepted: 0,
            }],
            load: [None, None],
        };
        let ours = vec![vec![
            ("a".into(), "same".into()),
            ("b".into(), "one|six".into()),
        ]];
        let md = texts_md(&off, &ours);
        assert!(md.contains("| a | the same |"), "{md}");
        assert!(md.contains("| b | parts | 4 | \"six\" | \"two\" |"), "{md}");
    }
}
