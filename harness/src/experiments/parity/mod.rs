//! Greedy parity with llama.cpp on one GGUF file (issue 30, item 6; `scripts/gguf_parity.sh`):
//! the same prompt ids continued greedily by llama-server, by `moefleet continue` in one process
//! and by a fleet of `moefleet serve` roles, compared token for token. Owns the comparison of the
//! raw records (`compare`), the tables (`parity.csv`, `PARITY.md`), the figure, and the numbers the
//! `gguf_parity` claims recompute from the raw records (never from `parity.csv`). Measures
//! nothing itself.
//!
//! - `record`: the JSON-lines records of the three sides.
//! - `compare`: two sides prompt by prompt (identical?, first divergence, margins, noise).
//! - `table`, `figure`: `parity.csv`, `margins.csv`, `PARITY.md`, `parity.png`/`.svg`.

pub mod compare;
pub mod figure;
pub mod recheck;
pub mod record;
pub mod table;
pub mod unit;

use std::path::Path;

use anyhow::{bail, Context};
use serde::Deserialize;

use compare::{compare, identical, largest_margin, Noise, PromptParity};

/// The raw records of a run directory.
pub const LLAMA: &str = "llama.jsonl";
pub const MOEFLEET: &str = "moefleet.jsonl";
pub const FLEET: &str = "fleet.jsonl";

/// llama-server against the single process, and (when the run has `fleet.jsonl`) the fleet
/// against the single process.
pub fn comparisons(dir: &Path) -> anyhow::Result<(Vec<PromptParity>, Option<Vec<PromptParity>>)> {
    let llama = record::read(&dir.join(LLAMA))?;
    let ours = record::read(&dir.join(MOEFLEET))?;
    let vs_llama = compare(&llama, &ours).context("llama-server against moefleet")?;
    let fleet = dir.join(FLEET);
    let vs_fleet = if fleet.exists() {
        Some(compare(&ours, &record::read(&fleet)?).context("the fleet against one process")?)
    } else {
        None
    };
    Ok((vs_llama, vs_fleet))
}

/// The tables of a run directory, freshly derived: `parity.csv`, `margins.csv` and `PARITY.md`.
pub fn render(dir: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let (llama, fleet) = comparisons(dir)?;
    let meta_path = dir.join("meta.json");
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&meta_path)
            .with_context(|| format!("reading {}", meta_path.display()))?,
    )
    .with_context(|| format!("parsing {}", meta_path.display()))?;
    Ok(vec![
        ("parity.csv".into(), table::csv(&llama, fleet.as_deref())),
        (
            "margins.csv".into(),
            table::margins_csv(&table::margin_bins(&llama)),
        ),
        (
            "PARITY.md".into(),
            table::markdown(&llama, fleet.as_deref(), &meta),
        ),
    ])
}

/// Write the tables (each CSV with its Parquet twin) and the figure; returns PARITY.md.
pub fn write(dir: &Path) -> anyhow::Result<String> {
    let mut md = String::new();
    for (name, text) in render(dir)? {
        crate::csv::write(&dir.join(&name), &text)?;
        if name == "PARITY.md" {
            md = text;
        }
    }
    let label = crate::figures::run_label::RunLabel::read(&dir.join("meta.json"))?;
    figure::draw(dir, &figure::read(dir)?, &label.line())?;
    Ok(md)
}

/// What a `gguf_parity` claim reads from two sides' raw records.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// Prompts compared.
    Prompts,
    /// Prompts whose generated ids are identical token for token.
    IdenticalPrompts,
    /// The same, in percent of the prompts.
    IdenticalPercent,
    /// The largest top-2 margin of the reference side at a first divergence.
    LargestReferenceMargin,
    /// The largest top-2 margin of the candidate side at a first divergence.
    LargestCandidateMargin,
    /// Mean |Δ logprob| of the chosen token over every position before a divergence, those
    /// whose top-2 were refilled apart.
    MeanAbsDlogprob,
    /// The largest such |Δ logprob|.
    MaxAbsDlogprob,
    /// The largest |Δ logprob| at the refilled positions before a divergence.
    RefilledMaxAbsDlogprob,
    /// The narrowest top-2 margin of the reference side at which both chose the same token.
    NarrowestAgreedMargin,
}

impl Measure {
    pub fn describe(self) -> &'static str {
        match self {
            Measure::Prompts => "prompts compared",
            Measure::IdenticalPrompts => "prompts whose greedy ids are identical",
            Measure::IdenticalPercent => "share of prompts whose greedy ids are identical (%)",
            Measure::LargestReferenceMargin => {
                "the largest top-2 margin of the first file at a first divergence"
            }
            Measure::LargestCandidateMargin => {
                "the largest top-2 margin of the second file at a first divergence"
            }
            Measure::MeanAbsDlogprob => {
                "mean absolute log-probability difference of the chosen token at the positions \
                 before each divergence (refilled positions apart)"
            }
            Measure::MaxAbsDlogprob => {
                "largest absolute log-probability difference of the chosen token at the positions \
                 before each divergence (refilled positions apart)"
            }
            Measure::RefilledMaxAbsDlogprob => {
                "largest absolute log-probability difference of the chosen token at the refilled \
                 positions before each divergence"
            }
            Measure::NarrowestAgreedMargin => {
                "the narrowest top-2 margin of the first file at a position where both chose the \
                 same token (refilled positions apart)"
            }
        }
    }
}

/// A measure of `candidate`'s records against `reference`'s (two JSON-lines files).
pub fn measure(reference: &Path, candidate: &Path, m: Measure) -> anyhow::Result<f64> {
    let rows = compare(&record::read(reference)?, &record::read(candidate)?)?;
    let n = rows.len();
    Ok(match m {
        Measure::Prompts => n as f64,
        Measure::IdenticalPrompts => identical(&rows) as f64,
        Measure::IdenticalPercent => 100.0 * identical(&rows) as f64 / n as f64,
        Measure::LargestReferenceMargin | Measure::LargestCandidateMargin => {
            let side = |p: &PromptParity| match m {
                Measure::LargestReferenceMargin => p.reference_margin,
                _ => p.candidate_margin,
            };
            match largest_margin(&rows, side) {
                Some((v, _)) => v,
                None => bail!("no divergence with a recorded margin"),
            }
        }
        Measure::MeanAbsDlogprob | Measure::MaxAbsDlogprob | Measure::RefilledMaxAbsDlogprob => {
            let noise = Noise::pooled(rows.iter().map(|p| match m {
                Measure::RefilledMaxAbsDlogprob => &p.refilled,
                _ => &p.noise,
            }));
            match (noise.mean(), m) {
                (None, _) => bail!("no agreed position with both log-probabilities"),
                (Some(mean), Measure::MeanAbsDlogprob) => mean,
                _ => noise.max,
            }
        }
        Measure::NarrowestAgreedMargin => match rows
            .iter()
            .filter_map(|p| p.narrowest.map(|n| n.0))
            .reduce(f64::min)
        {
            Some(v) => v,
            None => bail!("no agreed position with a recorded margin"),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LLAMA_LINES: &str = "\
{\"id\":\"a\",\"prompt_ids\":[1,2],\"generated_ids\":[5,6],\"top\":[[[5,-0.5],[9,-1.5]],[[6,-1.0],[8,-1.25]]]}
{\"id\":\"b\",\"prompt_ids\":[1,3],\"generated_ids\":[7,2],\"top\":[[[7,-0.25],[9,-2.25]],[[2,-0.5],[4,-3.5]]]}
";
    const OURS_LINES: &str = "\
{\"id\":\"a\",\"prompt_ids\":[1,2],\"generated_ids\":[5,8],\"top\":[[[5,-0.75],[9,-1.5]],[[8,-1.0],[6,-1.125]]]}
{\"id\":\"b\",\"prompt_ids\":[1,3],\"generated_ids\":[7,2],\"top\":[[[7,-0.25],[9,-2.25]],[[2,-0.5],[4,-3.0]]]}
";

    fn run() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(LLAMA), LLAMA_LINES).unwrap();
        std::fs::write(dir.path().join(MOEFLEET), OURS_LINES).unwrap();
        std::fs::write(
            dir.path().join(FLEET),
            "{\"id\":\"b\",\"prompt_ids\":[1,3],\"generated_ids\":[7,2]}\n\
             {\"id\":\"a\",\"prompt_ids\":[1,2],\"generated_ids\":[5,8]}\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("meta.json"),
            r#"{"model":"m.gguf","request":{"n_predict":2},"moefleet_fleet":{"roles":5},
                "host":{"cpu":"Xeon","date_utc":"2026-12-03T00:00:00Z"},"engine_commit":"abcdef0123"}"#,
        )
        .unwrap();
        dir
    }

    #[test]
    fn measures_come_from_the_raw_records() {
        let d = run();
        let (l, o, f) = (
            d.path().join(LLAMA),
            d.path().join(MOEFLEET),
            d.path().join(FLEET),
        );
        let m = |a: &Path, b: &Path, x| measure(a, b, x).unwrap();
        assert_eq!(m(&l, &o, Measure::Prompts), 2.0);
        assert_eq!(m(&l, &o, Measure::IdenticalPrompts), 1.0);
        assert_eq!(m(&l, &o, Measure::IdenticalPercent), 50.0);
        assert_eq!(m(&l, &o, Measure::LargestReferenceMargin), 0.25);
        assert_eq!(m(&l, &o, Measure::LargestCandidateMargin), 0.125);
        // a: position 0 (0.25); b: both positions (0, 0)
        assert_eq!(m(&l, &o, Measure::MeanAbsDlogprob), 0.25 / 3.0);
        assert_eq!(m(&l, &o, Measure::MaxAbsDlogprob), 0.25);
        assert!(measure(&l, &o, Measure::RefilledMaxAbsDlogprob).is_err());
        // a: 1.0 at position 0; b: 2.0 and 3.0
        assert_eq!(m(&l, &o, Measure::NarrowestAgreedMargin), 1.0);
        assert_eq!(m(&o, &f, Measure::IdenticalPercent), 100.0);
        assert!(measure(&o, &f, Measure::LargestReferenceMargin).is_err());
    }

    #[test]
    fn tables_and_figure_are_written_and_rendered_alike() {
        let d = run();
        let md = write(d.path()).unwrap();
        assert!(
            md.contains("| llama-server against moefleet in one process | 2 | 1 | 50.0 % |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| moefleet fleet of 5 roles against moefleet in one process | 2 | 2 | 100.0 % |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| `a` | 1 | 6 (0.250000) | 8 (0.125000) | yes | 0.250000 |"),
            "{md}"
        );
        let csv = std::fs::read_to_string(d.path().join("parity.csv")).unwrap();
        assert!(
            csv.contains(
                "\na,2,2,2,2,false,1,6,8,0.250000,0.125000,true,1,0.250000,0.250000,0,,1.000000,0,true,\n"
            ),
            "{csv}"
        );
        assert!(
            csv.contains("\nb,2,2,2,2,true,,,,,,,2,0.000000,0.000000,0,,2.000000,0,true,\n"),
            "{csv}"
        );
        crate::csv::check_twin(&d.path().join("parity.csv")).unwrap();
        let margins = std::fs::read_to_string(d.path().join("margins.csv")).unwrap();
        // agreed margins 1.0 (a), 2.0 and 3.0 (b); a's divergence: 0.25 and 0.125
        assert!(
            margins.contains("\n4,0.1,1,0,1,1\n5,1,10,3,0,0\n6,10,,0,0,0\n"),
            "{margins}"
        );
        for (name, text) in render(d.path()).unwrap() {
            assert_eq!(std::fs::read_to_string(d.path().join(name)).unwrap(), text);
        }
        assert!(d.path().join("parity.svg").exists());
        // a fleet that differs in one token
        std::fs::write(
            d.path().join(FLEET),
            "{\"id\":\"a\",\"prompt_ids\":[1,2],\"generated_ids\":[5,8]}\n{\"id\":\"b\",\"prompt_ids\":[1,3],\"generated_ids\":[7,3]}\n",
        )
        .unwrap();
        let md = write(d.path()).unwrap();
        assert!(md.contains("| 2 | 1 | 50.0 % |\n\nOf"), "{md}");
    }
}
