//! The re-derivations `verify` runs, one loop per kind of committed record in `claims.toml`, each
//! a few lines calling the module that owns that record: each result, with the files it
//! re-derived, goes to `rendered`, in the order below (experiments first, then the simulator,
//! reliability, docs/RESULTS.md and link records), and a run `want` refuses is skipped.

use std::path::{Path, PathBuf};

use anyhow::bail;

use super::{
    read_json, readme_table, readme_tables, reanalyse_matches, rederive_matches,
    retabulate_matches, same_as_committed, ClaimsFile,
};

/// What `rendered` is given: what was re-derived, and the files it covered or the error.
pub(super) type Rendered<'a> = dyn FnMut(String, anyhow::Result<Vec<PathBuf>>) + 'a;

/// The experiments' runs: analysed runs, speculation, peer, GGUF parity, context scans and fits,
/// Figure 6, ceilings, context probes, dense and draft replays.
pub(super) fn experiments(
    root: &Path,
    f: &ClaimsFile,
    want: &dyn Fn(&str) -> bool,
    rendered: &mut Rendered<'_>,
) {
    for run in &f.runs {
        if !want(run) {
            continue;
        }
        rendered(format!("run {run}"), reanalyse_matches(&root.join(run)));
    }
    for run in &f.speculation_runs {
        if !want(run) {
            continue;
        }
        let dir = root.join(run);
        let fresh = crate::experiments::speculation::render(&dir, root);
        rendered(
            format!("speculation experiment {run}"),
            same_as_committed(&dir, fresh, "analysis of the runs (edited by hand?)"),
        );
    }
    for run in &f.peer_runs {
        if !want(run) {
            continue;
        }
        let dir = root.join(run);
        let fresh = crate::experiments::peer::render(&dir);
        rendered(
            format!("peer run {run}"),
            same_as_committed(&dir, fresh, "tabulation of the records (edited by hand?)"),
        );
    }
    for run in &f.parity_runs {
        if !want(run) {
            continue;
        }
        let dir = root.join(run);
        let fresh = crate::experiments::parity::render(&dir);
        rendered(
            format!("GGUF parity run {run}"),
            same_as_committed(
                &dir,
                fresh,
                "comparison of the raw records (edited by hand?)",
            ),
        );
    }
    for run in &f.context_runs {
        if !want(run) {
            continue;
        }
        let dir = root.join(run);
        let fresh = crate::experiments::context::table::render_dir(&dir);
        rendered(
            format!("context scan {run}"),
            same_as_committed(&dir, fresh, "tabulation of context.jsonl (edited by hand?)"),
        );
    }
    for fit in &f.context_fits {
        if !want(&fit.dir) {
            continue;
        }
        rendered(
            format!("context fit {}", fit.dir),
            crate::experiments::context::report::rederive_matches(root, fit),
        );
    }
    for run in &f.figure6_runs {
        if !want(run) {
            continue;
        }
        let dir = root.join(run);
        let fresh = crate::figures::figure6::tables(&dir.join("reference"), &dir.join("windowed"));
        rendered(
            format!("figure 6 {run}"),
            same_as_committed(
                &dir,
                fresh,
                "tabulation of its runs' phases (edited by hand?)",
            ),
        );
    }
    for file in &f.ceilings_runs {
        if !want(file) {
            continue;
        }
        let path = root.join(file);
        rendered(
            format!("ceilings record {file}"),
            rederive_matches(&path).map(|()| vec![path.clone()]),
        );
    }
    for run in &f.probe_runs {
        if !want(run) {
            continue;
        }
        let dir = root.join(run);
        rendered(
            format!("context probe {run}"),
            crate::experiments::context::probe::rederive_matches(&dir).map(|()| {
                let csv = dir.join("context_probe.csv");
                vec![crate::csv::twin_of(&csv), csv, dir.join("probe.json")]
            }),
        );
    }
    for run in &f.dense_runs {
        if !want(run) {
            continue;
        }
        let dir = root.join(run);
        let fresh = read_json(&dir.join("dense.json"))
            .and_then(|r| crate::experiments::dense::table::csv_from_record(&r))
            .map(|t| vec![("dense.csv".to_string(), t)]);
        rendered(
            format!("dense experiment {run}"),
            same_as_committed(
                &dir,
                fresh,
                "tabulation of dense.json's samples (edited by hand?)",
            ),
        );
    }
    for run in &f.draft_runs {
        if !want(run) {
            continue;
        }
        rendered(
            format!("draft replay {run}"),
            retabulate_matches(&root.join(run), root),
        );
    }
}

/// The simulator's validations and paper comparisons, the reliability runs, docs/RESULTS.md's
/// tables, the emulated-link and tbf records, and docs/RESULTS.md's reliability table.
pub(super) fn records_and_tables(
    root: &Path,
    f: &ClaimsFile,
    want: &dyn Fn(&str) -> bool,
    rendered: &mut Rendered<'_>,
) {
    for run in &f.simulator_runs {
        if !want(run) {
            continue;
        }
        let dir = root.join(run);
        rendered(
            format!("simulator validation {run}"),
            crate::simulate::validate::recheck(&dir)
                .map(|()| vec![dir.join("validation.json"), dir.join("validation.csv")]),
        );
    }
    for p in &f.simulator_paper {
        if !want(&p.out) {
            continue;
        }
        let out = root.join(&p.out);
        rendered(
            format!("simulator paper comparison {}", p.out),
            crate::simulate::paper::recheck(root, &out, &root.join(&p.local), &root.join(&p.paper))
                .map(|()| {
                    [
                        "paper.json",
                        "predictions.json",
                        "paper.csv",
                        "predictions.md",
                    ]
                    .map(|f| out.join(f))
                    .to_vec()
                }),
        );
    }
    for run in &f.reliability_runs {
        if !want(run) {
            continue;
        }
        let dir = root.join(run);
        let r = if dir.join("soak.json").exists() {
            crate::reliability::soak::recheck(&dir).map(|_| vec![dir.join("soak.json")])
        } else {
            crate::reliability::faults::recheck(&dir).map(|_| vec![dir.join("faults.json")])
        };
        rendered(format!("reliability run {run}"), r);
    }
    for t in &f.readme_tables {
        if !want(readme_tables::RESULTS_MD) {
            continue;
        }
        rendered(
            format!("{} table {}", readme_tables::RESULTS_MD, t.name),
            readme_tables::check(root, t).map(|()| Vec::new()),
        );
    }
    for run in &f.links_fleet_runs {
        if !want(run) {
            continue;
        }
        use crate::experiments::links;
        let dir = root.join(run);
        let fresh = links::fleet_rows(&dir)
            .map(|rows| vec![("links.md".to_string(), links::fleet_markdown(&rows))]);
        rendered(
            format!("emulated-link fleets {run}"),
            same_as_committed(&dir, fresh, "tabulation of its sweeps (edited by hand?)"),
        );
    }
    for run in &f.links_tbf_runs {
        if !want(run) {
            continue;
        }
        use crate::experiments::links;
        let dir = root.join(run);
        let fresh = links::tbf_rows(&dir)
            .map(|rows| vec![("links.md".to_string(), links::tbf_markdown(&rows))]);
        rendered(
            format!("tbf round trips {run}"),
            same_as_committed(
                &dir,
                fresh,
                "tabulation of its round trips (edited by hand?)",
            ),
        );
    }
    if let Some(t) = f
        .reliability_table
        .as_ref()
        .filter(|_| want(readme_tables::RESULTS_MD))
    {
        let r = crate::reliability::table::render(root, &t.faults, &t.soak, &t.fuzz).and_then(
            |fresh| {
                if readme_table(root)? != fresh {
                    bail!(
                        "differs from its rendering from the records; print it with \
                         `moefleet-harness reliability` and paste it between the markers"
                    );
                }
                Ok(Vec::new())
            },
        );
        rendered(
            format!("{} reliability table", readme_tables::RESULTS_MD),
            r,
        );
    }
}
