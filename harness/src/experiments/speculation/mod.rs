//! The speculation experiment (MEASUREMENTS.md §6): the paper's Table 3 (first and repeated pass
//! of one prompt per family with speculation on), speculation off against on per proposer set,
//! and the first-order model against the measured speedup, from the sweep runs and role 0's
//! records that the unit's `steps` write under one root.
//!
//! - `runs`: loading the configurations' runs and role 0's frame and reply records.
//! - `model`: L, T, a and the predicted speedup per request.
//! - `tables`: table3, onoff and model tables (pure).
//! - `families`: the per-family table (pure).
//! - `cells`: table cells read as numbers and numbers written as cells, for the tables above.
//! - `costs`: the rows and compute time speculation costs the roles (`profile.json`).
//! - `readme`: docs/RESULTS.md's short tables of a real checkpoint's run.
//! - `llama`: llama-server's own speculation on the same file and prompts (a real checkpoint).

mod cells;
pub mod costs;
pub mod families;
pub mod llama;
pub mod model;
pub mod readme;
pub mod recheck;
pub mod runs;
pub mod steps;
pub mod tables;
pub mod unit;

use std::path::Path;

use crate::figures::family_bars::{self, FamilyBars, Spec};
use crate::figures::run_label::RunLabel;
use tables::PaperSpec;

/// The tables of the experiment under `root`, with the paper's data under `repo/reproduction/paper`.
pub fn render(root: &Path, repo: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let configs = runs::load_all(root)?;
    let off_again = runs::load_off_again(root)?;
    let paper = PaperSpec::load(&repo.join("reproduction/paper"));
    let mut out = tables::render(&configs, off_again.as_ref(), &paper);
    if let Some(csv) = costs::costs_csv(root, &configs)? {
        out.push(("costs.md".into(), costs::costs_md(&csv)));
        out.push(("costs.csv".into(), csv));
    }
    let llama = llama::load_all(root)?;
    if !llama.is_empty() {
        let ours_off: Vec<Vec<(String, String)>> = configs[0]
            .passes
            .iter()
            .map(|p| {
                p.requests
                    .iter()
                    .map(|r| (r.family.clone(), r.text.clone()))
                    .collect()
            })
            .collect();
        out.push(("llama.csv".into(), llama::llama_csv(&llama, &ours_off)));
        out.push(("llama.md".into(), llama::llama_md(&llama, &ours_off)));
    }
    let depths = runs::load_depths(root)?;
    if !depths.is_empty() {
        out.push(("depth.csv".into(), tables::depth_csv(&configs[0], &depths)));
        out.push(("depth.md".into(), tables::depth_md(&configs[0], &depths)));
    }
    Ok(out)
}

/// Write the tables and the figure (per family, first and repeated pass; the paper's as markers).
pub fn write(root: &Path, repo: &Path) -> anyhow::Result<String> {
    let configs = runs::load_all(root)?;
    let paper = PaperSpec::load(&repo.join("reproduction/paper"));
    for (name, text) in render(root, repo)? {
        crate::csv::write(&root.join(&name), &text)?;
    }
    let c = configs
        .iter()
        .find(|c| c.name == "all")
        .unwrap_or(&configs[configs.len() - 1]);
    let ours: FamilyBars = c.passes[0]
        .requests
        .iter()
        .zip(&c.passes[1].requests)
        .map(|(f, r)| (f.family.clone(), f.decode_tok_s, r.decode_tok_s))
        .collect();
    let title = format!(
        "Single requests, first and repeated pass (speculation on: {}; the paper's as markers)",
        c.name
    );
    // the drawn configuration's run, from its record
    let run_line = RunLabel::read(&root.join(&c.name).join("run.json"))?.line();
    let spec = Spec {
        stem: "speculation",
        title: &title,
        run: &run_line,
        y_desc: "decode rate (tok/s)",
        scale: 1.0,
        ours: ["first pass", "repeated pass"],
        paper: ["paper (Arc B390 fleet): first", "paper: repeated"],
    };
    let overlay = (!paper.families.is_empty()).then_some(&paper.families);
    family_bars::draw(root, &spec, &ours, overlay)?;
    Ok(std::fs::read_to_string(root.join("table3.md"))?)
}
