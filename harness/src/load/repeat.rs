//! Any plan repeated, and two servers alternated (docs/MEASUREMENTS.md §9): `run --repeats N`
//! runs a step, a sweep or a search N times against one server; `--vs URL_B --repeats N` runs N
//! blocks of A B B A (A the `--url` server, B the other), so a drift of the machine over the run
//! weighs on both arms alike; `sweep --vs URL_B --repeats N` does the same with the paired
//! concurrency sweep. Each run is a directory `OUT/NN-ARM-BLOCK/` of the unit's own shape, and
//! `arms` compares them (OUT/arms.csv, arms.md).

use std::path::Path;
use std::time::Duration;

use anyhow::bail;

use super::plans::{self, Search, Template};
use super::step::{self, StepPlan};
use crate::driver::server::Server;
use crate::driver::sweep::{self as paired, SweepConfig};
use crate::workload::Plan;

/// What is repeated.
pub enum Unit<'a> {
    /// One step (`run --rate ..`).
    Step(&'a StepPlan),
    /// A sweep across the server's range with this many rate steps (`run --load sweep`).
    Sweep(&'a Template, usize),
    /// A search for the highest load meeting objectives (`run --search ..`).
    Search(&'a Template, Search),
    /// The paired concurrency sweep (`sweep`): its plan, whether requests ignore end-of-text, and
    /// the longest wait for the server to be idle before a phase.
    Paired(&'a Plan, bool, Duration),
}

/// The order of the runs: `blocks` of A B B A, or of A alone.
pub fn order(arms: usize, blocks: usize) -> Vec<(char, usize)> {
    let block: &[char] = if arms == 2 {
        &['a', 'b', 'b', 'a']
    } else {
        &['a']
    };
    (0..blocks)
        .flat_map(|k| block.iter().map(move |&arm| (arm, k)))
        .collect()
}

/// Run `unit` against `servers` (one or two) in `blocks` blocks into OUT; writes the tables.
pub async fn run(
    servers: &[&Server],
    unit: &Unit<'_>,
    blocks: usize,
    out: &Path,
) -> anyhow::Result<()> {
    if servers.is_empty() || servers.len() > 2 || blocks == 0 {
        bail!("repeats: one or two servers and at least one block");
    }
    if out.join("arms.csv").exists() || out.join("00-a-0").exists() {
        bail!(
            "{} already holds a run (choose another --out)",
            out.display()
        );
    }
    let runs = order(servers.len(), blocks);
    for (k, &(arm, block)) in runs.iter().enumerate() {
        let server = servers[usize::from(arm == 'b')];
        eprintln!(
            "run {} of {}: {arm} ({}), block {block}",
            k + 1,
            runs.len(),
            server.base
        );
        let dir = out.join(format!("{k:02}-{arm}-{block}"));
        match unit {
            Unit::Step(plan) => drop(step::run(server, plan, &dir).await?),
            Unit::Sweep(t, rates) => drop(plans::sweep(server, t, *rates, &dir).await?),
            Unit::Search(t, how) => drop(plans::search(server, t, *how, &dir).await?),
            Unit::Paired(plan, ignore_eos, idle_timeout) => {
                paired::sweep(SweepConfig {
                    url: server.base.clone(),
                    plan: (*plan).clone(),
                    out: dir.clone(),
                    ignore_eos: *ignore_eos,
                    idle_timeout: *idle_timeout,
                    resume: false,
                })
                .await?;
                // its tables, as `analyze` writes them (verify re-derives them)
                crate::analysis::tables::analyze(&dir)?;
            }
        }
    }
    let (csv, md) = super::arms::tables(out)?;
    std::fs::write(out.join("arms.csv"), csv)?;
    std::fs::write(out.join("arms.md"), md)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_alternate_a_b_b_a() {
        let o = order(2, 2);
        let arms: String = o.iter().map(|r| r.0).collect();
        assert_eq!(arms, "abbaabba");
        assert_eq!(o[4], ('a', 1));
        assert_eq!(order(1, 3), vec![('a', 0), ('a', 1), ('a', 2)]);
    }
}
