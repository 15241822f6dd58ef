//! What a `load_step` claim reads from one load step (docs/MEASUREMENTS.md §9), recomputed from
//! the step's per-request records (`rederive::step`): a turn's prefix-cache share or TTFT in a
//! multi-turn run, or a cross-check against the server's own counts and times (`crosscheck`).

use std::path::Path;

use anyhow::Context;
use serde::Deserialize;

use super::crosscheck::{self, Agreement};
use super::rederive;

/// A measure of one step.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StepMeasure {
    /// Percent of the turn's prompt tokens the server served from its prefix cache.
    CachedPercent,
    /// The turn's median TTFT, milliseconds.
    TtftP50Ms,
    /// Percent of successful requests whose client count of the prompt equals `usage`'s.
    ClientPromptEqualPercent,
    /// Percent of successful requests whose server `timings.predicted_n` equals `usage`'s.
    ServerTimingsEqualPercent,
    /// Median of client TPOT − the server's decode time per token, milliseconds.
    TpotMinusServerMs,
    /// Median of client TTFT − the server's prompt time, milliseconds.
    TtftMinusServerPromptMs,
}

/// A `load_step` claim's rule: `measure` of the step in `dir` (of its `turn`, 1 = the first, for
/// the measures by turn).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StepRule {
    pub dir: String,
    pub measure: StepMeasure,
    #[serde(default)]
    pub turn: Option<usize>,
}

fn percent(a: Option<Agreement>) -> anyhow::Result<f64> {
    let a = a.context("no request to compare")?;
    Ok(100.0 * a.equal as f64 / a.requests as f64)
}

impl StepRule {
    pub fn describe(&self) -> String {
        let what = match self.measure {
            StepMeasure::CachedPercent => "percent of prompt tokens served from the server's cache",
            StepMeasure::TtftP50Ms => "TTFT p50 (ms)",
            StepMeasure::ClientPromptEqualPercent => {
                "percent of requests whose client-counted prompt tokens equal usage's"
            }
            StepMeasure::ServerTimingsEqualPercent => {
                "percent of requests whose server timings.predicted_n equals usage's"
            }
            StepMeasure::TpotMinusServerMs => {
                "median of client TPOT − server decode time per token (ms)"
            }
            StepMeasure::TtftMinusServerPromptMs => {
                "median of client TTFT − server prompt time (ms)"
            }
        };
        let turn = self.turn.map_or(String::new(), |t| format!(" at turn {t}"));
        format!(
            "`{}`: {what}{turn}, recomputed from its per-request records",
            self.dir
        )
    }

    /// The measure, recomputed from the step's records under `root`.
    pub fn of(&self, root: &Path) -> anyhow::Result<f64> {
        let step = rederive::step(&root.join(&self.dir))?;
        let by_turn = || -> anyhow::Result<super::turns::TurnRow> {
            let t = self.turn.context("this measure needs a turn")?;
            let rows = step
                .summary
                .by_turn
                .as_ref()
                .context("not a multi-turn run")?;
            rows.iter()
                .find(|r| r.turn == t)
                .cloned()
                .with_context(|| format!("no turn {t}"))
        };
        let check = || crosscheck::of(&step.records).context("nothing to cross-check");
        match self.measure {
            StepMeasure::CachedPercent => {
                let r = by_turn()?;
                let c = r
                    .cached_prompt_tokens
                    .context("the server reported no cache hits")?;
                Ok(100.0 * c as f64 / r.prompt_tokens.max(1) as f64)
            }
            StepMeasure::TtftP50Ms => match self.turn {
                Some(_) => Ok(1e3 * by_turn()?.ttft_p50.context("no TTFT")?),
                None => Ok(1e3 * step.summary.ttft.context("no TTFT")?.p50),
            },
            StepMeasure::ClientPromptEqualPercent => percent(check()?.client_prompt_vs_usage),
            StepMeasure::ServerTimingsEqualPercent => percent(check()?.server_timings_vs_usage),
            StepMeasure::TpotMinusServerMs => Ok(1e3
                * check()?
                    .tpot_minus_server
                    .context("no server timings")?
                    .median),
            StepMeasure::TtftMinusServerPromptMs => Ok(1e3
                * check()?
                    .ttft_minus_server_prompt
                    .context("no server timings")?
                    .median),
        }
    }
}
