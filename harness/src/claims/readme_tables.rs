//! Tables of docs/RESULTS.md (once the README's) rendered from committed records. Each sits between two marker lines,
//! `<!-- table NAME: rendered by moefleet-harness readme-tables; verify checks it -->` and
//! `<!-- table NAME end -->`; `reproduction/claims.toml` names the records each is rendered from,
//! `moefleet-harness readme-tables --write` puts fresh renderings in, and `verify` fails when a
//! table differs from its rendering. (The reliability table has markers of its own, older.)

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

/// The document that holds the rendered tables, relative to the root.
pub const RESULTS_MD: &str = "docs/RESULTS.md";

/// What a table shows, and so how it is rendered from its record.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// `simulate validate`'s levels (from `validation.json`; `verify` refits that record).
    SimulatorValidation,
    /// `simulate paper`'s comparison with Table 4 (from `paper.json`, rerun by `verify`).
    SimulatorPaper,
    /// `simulate paper`'s predictions at a few levels and their speculation gains (from
    /// `predictions.json`, rerun by `verify`).
    SimulatorPredictions,
    /// Sweeps with and without emulated links (`scripts/link_emulation.sh`), analysed again from
    /// their traces.
    LinksFleet,
    /// Frames timed through the kernel's shaper (`scripts/link_tbf.sh`), from their samples.
    LinksTbf,
    /// A real checkpoint's speculation run: the fleet's proposer sets (its `onoff.csv`, which
    /// `verify` re-derives from the traces).
    SpeculationFleet,
    /// The same run's llama-server configurations (its `llama.csv`, likewise).
    SpeculationLlama,
    /// A load sweep's or search's steps (its `steps.md`), re-derived from every step's records.
    LoadSteps,
    /// A `make load` run's two searches side by side (`compare llama-server moefleet` in its
    /// directory: the steps both ran, with seeded bootstrap intervals), from their records.
    LoadCompare,
    /// A repeated step's arms (its `arms.md`: A B B A against two servers), from its records.
    LoadArms,
    /// A multi-turn step's rows by turn, from its records.
    LoadTurns,
    /// A step's cross-checks against the server's own counts and times (`crosscheck.md`), from
    /// its records.
    LoadCrosscheck,
}

/// One rendered table: its marker name, what it shows, and its record (relative to the root).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadmeTable {
    pub name: String,
    pub kind: Kind,
    pub record: String,
}

/// The levels the short table of predictions shows.
pub const PREDICTION_LEVELS: [usize; 5] = [1, 11, 32, 88, 176];

pub fn begin_marker(name: &str) -> String {
    format!("<!-- table {name}: rendered by moefleet-harness readme-tables; verify checks it -->")
}

pub fn end_marker(name: &str) -> String {
    format!("<!-- table {name} end -->")
}

fn read_json<T: serde::de::DeserializeOwned>(file: &Path) -> Result<T> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}", file.display()))
}

/// The table rendered from its record under `root`.
pub fn render(root: &Path, t: &ReadmeTable) -> Result<String> {
    use crate::simulate::{paper, predict, validate};
    let dir = root.join(&t.record);
    Ok(match t.kind {
        Kind::SimulatorValidation => {
            let v: validate::Validation = read_json(&validate::Dir(dir).record())?;
            validate::levels_md(&v.levels)
        }
        Kind::SimulatorPaper => {
            let c: paper::PaperComparison = read_json(&dir.join("paper.json"))?;
            paper::table4_md(&c.levels)
        }
        Kind::SimulatorPredictions => {
            let sc: Vec<predict::Scenario> = read_json(&dir.join("predictions.json"))?;
            predict::summary_md(&sc, &PREDICTION_LEVELS)
        }
        Kind::LinksFleet => {
            use crate::experiments::links;
            links::fleet_markdown(&links::fleet_rows(&dir)?)
        }
        Kind::LinksTbf => {
            use crate::experiments::links;
            links::tbf_markdown(&links::tbf_rows(&dir)?)
        }
        Kind::SpeculationFleet => crate::experiments::speculation::readme::fleet_md(&dir)?,
        Kind::SpeculationLlama => crate::experiments::speculation::readme::llama_md(&dir)?,
        Kind::LoadSteps => crate::load::plans::tables(&crate::load::rederive::plan(&dir)?.rows)?.1,
        Kind::LoadArms => crate::load::arms::tables(&dir)?.1,
        Kind::LoadTurns => {
            let step = crate::load::rederive::step(&dir)?;
            let rows = step.summary.by_turn.context("not a multi-turn run")?;
            crate::load::turns::markdown(&rows)
        }
        Kind::LoadCrosscheck => {
            let step = crate::load::rederive::step(&dir)?;
            crate::load::crosscheck::of(&step.records)
                .context("nothing to cross-check")?
                .markdown()
        }
        Kind::LoadCompare => {
            use crate::load::compare;
            let opt = compare::Options::default();
            let (a, b) = ("llama-server", "moefleet");
            compare::markdown(&compare::runs(&dir.join(a), &dir.join(b), opt)?, a, b, opt)
        }
    })
}

/// The byte range of table `name`'s lines in `readme` (between its markers, the markers' own
/// lines excluded).
fn span(readme: &str, name: &str) -> Result<std::ops::Range<usize>> {
    between(readme, &begin_marker(name), &end_marker(name))
}

/// The byte range of the lines between the line `begin` and the marker `end` (each once).
pub fn between(readme: &str, begin: &str, end: &str) -> Result<std::ops::Range<usize>> {
    let begin = format!("{begin}\n");
    let one = |m: &str| -> Result<usize> {
        let mut at = readme.match_indices(m).map(|(i, _)| i);
        match (at.next(), at.next()) {
            (Some(i), None) => Ok(i),
            (None, _) => bail!("{RESULTS_MD} has no marker {m:?}"),
            (Some(_), Some(_)) => bail!("{RESULTS_MD} has the marker {m:?} twice"),
        }
    };
    let (a, b) = (one(&begin)? + begin.len(), one(end)?);
    if b < a {
        bail!("{RESULTS_MD}: the end marker {end:?} comes before its start");
    }
    Ok(a..b)
}

/// Table `name` as docs/RESULTS.md holds it.
pub fn committed(readme: &str, name: &str) -> Result<String> {
    Ok(readme[span(readme, name)?].to_string())
}

/// docs/RESULTS.md with table `name` replaced by `fresh`.
pub fn replace(readme: &str, name: &str, fresh: &str) -> Result<String> {
    let r = span(readme, name)?;
    Ok(format!("{}{fresh}{}", &readme[..r.start], &readme[r.end..]))
}

/// `verify`'s check of one table: docs/RESULTS.md must hold exactly its rendering.
pub fn check(root: &Path, t: &ReadmeTable) -> Result<()> {
    let readme = std::fs::read_to_string(root.join(RESULTS_MD)).context(RESULTS_MD)?;
    let fresh = render(root, t)?;
    if committed(&readme, &t.name)? != fresh {
        bail!(
            "differs from its rendering from {}; `moefleet-harness readme-tables --write` puts \
             the rendering in",
            t.record
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_is_found_and_replaced_between_its_markers_only() {
        let readme = format!(
            "intro\n{}\n| a |\n{}\nmiddle\n{}\n| b |\n{}\nend\n",
            begin_marker("one"),
            end_marker("one"),
            begin_marker("two"),
            end_marker("two")
        );
        assert_eq!(committed(&readme, "one").unwrap(), "| a |\n");
        let out = replace(&readme, "two", "| c |\n| d |\n").unwrap();
        assert_eq!(committed(&out, "two").unwrap(), "| c |\n| d |\n");
        assert_eq!(committed(&out, "one").unwrap(), "| a |\n");
        assert!(out.starts_with("intro\n") && out.ends_with("end\n"));
    }

    #[test]
    fn missing_doubled_or_reversed_markers_are_refused() {
        let b = begin_marker("t");
        let e = end_marker("t");
        for bad in [
            format!("{b}\n| a |\n"),
            format!("| a |\n{e}\n"),
            format!("{b}\n| a |\n{e}\n{b}\n{e}\n"),
            format!("{e}\n| a |\n{b}\n"),
        ] {
            assert!(committed(&bad, "t").is_err(), "{bad}");
        }
    }
}
