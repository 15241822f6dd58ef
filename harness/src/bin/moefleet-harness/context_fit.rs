//! `moefleet-harness context-fit`: fit TTFT = aN + bN^2 to the context scans under ROOT and draw
//! Figure 7.

use std::path::PathBuf;

use moefleet_harness::experiments::context;

#[derive(clap::Args)]
pub struct Args {
    /// Directory holding scan-*/context.csv and/or probe-*/context_probe.csv (or a
    /// context.csv of its own).
    root: PathBuf,
    /// Model preset for the FLOP count [default: the model named in each scan's
    /// context_run.json].
    #[arg(long)]
    preset: Option<String>,
    /// Roles of the scanned server; the measured decode time per token is divided by it
    /// [default: each scan's context_run.json].
    #[arg(long)]
    roles: Option<usize>,
    /// Title over the figure [default: what it shows; the runs are named under it].
    #[arg(long)]
    title: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        root,
        preset,
        roles,
        title,
    } = args;
    let inputs = context::inputs::discover(&root)?;
    let opts = context::report::FitOptions { preset, roles };
    let report = context::report::build(&inputs, &opts)?;
    context::report::write(&root, &report)?;
    let title = title.unwrap_or_else(|| "Figure 7: context length, one stream".into());
    // the runs, from the scans' records; copied data (the paper's) has none
    let labels = inputs
        .scans
        .iter()
        .map(|s| s.dir.join("context_run.json"))
        .filter(|p| p.exists())
        .map(|p| moefleet_harness::figures::run_label::RunLabel::read(&p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let run_line = if labels.is_empty() {
        "no run record (context_run.json) beside the scans".to_string()
    } else {
        moefleet_harness::figures::run_label::RunLabel::join(&labels).line()
    };
    moefleet_harness::figures::figure7::draw(
        &root,
        &inputs.scans,
        &report.scans,
        &inputs.probes,
        &title,
        &run_line,
    )?;
    print!("{}", context::report::render_text(&report));
    eprintln!(
        "wrote {0}/fit.json, {0}/fit.csv, {0}/figure7.png and {0}/figure7.svg",
        root.display()
    );
    Ok(())
}
