//! `moefleet-harness simulate`: its subcommands' arguments (with their `--help` text) and the
//! wiring from them to `validate`, `simulate_plan` and `paper`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Subcommand;

use crate::analysis::tables;
use crate::workload::Plan;

#[derive(Subcommand)]
pub enum SimCmd {
    /// Calibrate on some levels of a measured sweep, replay its whole plan, compare level by level.
    /// With --run: copies the sweep's phases.jsonl, traces and run.json to OUT/measured and the
    /// frame records of the calibration phases (from --profiles) to OUT/frames.csv.gz; without,
    /// reads those from OUT (a committed record). Writes OUT/validation.json, validation.csv,
    /// validation.png/.svg and the simulated run in OUT/simulated (analysed like a sweep).
    Validate {
        #[arg(long)]
        out: PathBuf,
        /// A sweep run directory (made with a fleet started with --profile-dir).
        #[arg(long)]
        run: Option<PathBuf>,
        /// The fleet's frame records [default: RUN/profiles].
        #[arg(long)]
        profiles: Option<PathBuf>,
        /// Calibration levels [default: every other level of the plan, from the lowest].
        #[arg(long, value_delimiter = ',')]
        calibrate: Vec<usize>,
        #[arg(long, default_value = "inkling-mini")]
        preset: String,
        /// Cores the roles shared [default: this machine's].
        #[arg(long)]
        cores: Option<usize>,
        #[arg(long, default_value_t = 176)]
        slots: usize,
        /// Prompt rows per frame per stream, as the fleet's `--prefill-rows` (--window is the
        /// former name).
        #[arg(long = "prefill-rows", visible_alias = "window", default_value_t = 8)]
        window: usize,
    },
    /// Replay a plan on a calibrated model (a `simulate validate` directory's model.json), changed
    /// as asked: the fleet you are sizing. Writes OUT/phases.jsonl and OUT/traces like a sweep,
    /// then OUT/phases.csv, curve.csv and table4.md (as `analyze` does). A prediction, not a
    /// measurement.
    Run {
        #[arg(long)]
        model: PathBuf,
        /// Built-in plan name (paper, quick) or a plan file.
        #[arg(long, default_value = "paper")]
        plan: String,
        #[arg(long)]
        out: PathBuf,
        /// Every role on a machine of its own (no shared cores, no background load).
        #[arg(long)]
        own_machines: bool,
        /// Cut every role into this many (each with its share of the layers and the frame cost).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=16))]
        split: u64,
        /// Emulated link rate between roles (e.g. 1gbit, 10gbit).
        #[arg(long, value_parser = moefleet_engine::pipeline::emulation::parse_rate)]
        link_rate: Option<f64>,
        /// One-way latency of every link (e.g. 0.2ms).
        #[arg(long, value_parser = moefleet_engine::pipeline::emulation::parse_latency)]
        link_latency: Option<Duration>,
        /// Multiply every per-frame cost by this (e.g. the ratio of two machines' speeds).
        #[arg(long, default_value_t = 1.0)]
        cost_scale: f64,
    },
    /// Calibrate from the paper's per-role stage profiles (PAPER/profiles.csv) and its gigabit
    /// network, replay the paper's survey plan and compare with its Table 4
    /// (PAPER/concurrency_rows.tex; Q_decode from PAPER/survey_phases.csv); then the predictions (10 GbE, 22 roles, our costs on eleven
    /// machines, speculation's first-order gain), with LOCAL's model (a `simulate validate`
    /// directory); with --ceilings and --backends, the paper's fleet on our kernels at the paper's
    /// memory bandwidth. Writes OUT/paper.json, paper.csv, paper.png/.svg, predictions.json,
    /// predictions.md and prediction-*.png/.svg.
    Paper {
        #[arg(long)]
        out: PathBuf,
        #[arg(long)]
        local: PathBuf,
        /// A `ceilings` record of the machine --backends was measured on (`scripts/scaled_costs.sh`
        /// makes both): its read bandwidth on the layer's threads.
        #[arg(long, requires = "backends")]
        ceilings: Option<PathBuf>,
        /// A `backends` record with a one-row `inkling` layer: six of its native time make a role's
        /// frame on our kernels.
        #[arg(long, requires = "ceilings")]
        backends: Option<PathBuf>,
        /// Memory bandwidth of the machines to scale to, GB/s (default: the paper's boxes,
        /// LPDDR5X-7467 on a 128-bit bus, a theoretical peak).
        #[arg(long, default_value_t = super::predict::PAPER_PEAK_BANDWIDTH_GBS)]
        target_bandwidth_gbs: f64,
        #[arg(long, default_value = "reproduction/paper")]
        paper: PathBuf,
        #[arg(long, default_value_t = 176)]
        slots: usize,
        /// Prompt rows per frame per stream, as the fleet's `--prefill-rows` (--window is the
        /// former name).
        #[arg(long = "prefill-rows", visible_alias = "window", default_value_t = 8)]
        window: usize,
    },
}

/// Run one `simulate` subcommand.
pub fn run(cmd: SimCmd) -> Result<()> {
    match cmd {
        SimCmd::Validate {
            out,
            run,
            profiles,
            calibrate,
            preset,
            cores,
            slots,
            window,
        } => {
            use super::validate;
            let dir = validate::Dir(out.clone());
            let cores = cores
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            let setup = validate::Setup {
                preset,
                cores,
                slots,
                window,
            };
            let plan = match &run {
                Some(r) => validate::run_plan(r)?,
                None => validate::run_plan(&dir.measured())?,
            };
            let calib = if calibrate.is_empty() {
                validate::default_calibration(&plan.levels)
            } else {
                calibrate
            };
            if let Some(r) = &run {
                let profiles = profiles.unwrap_or_else(|| r.join("profiles"));
                let n = validate::import(r, &profiles, &calib, &dir)?;
                eprintln!("simulate: {n} frame records of the calibration levels {calib:?}");
            }
            let v = validate::run_and_write(&dir, &setup, &calib)?;
            println!("{}", validate::summary_md(&v));
            eprintln!(
                "simulate: wrote validation.json, validation.csv, validation.png/.svg and simulated/ to {}",
                out.display()
            );
        }
        SimCmd::Run {
            model,
            plan,
            out,
            own_machines,
            split,
            link_rate,
            link_latency,
            cost_scale,
        } => {
            use super::des::FleetModel;
            use crate::simulate;
            if !(cost_scale.is_finite() && cost_scale > 0.0) {
                bail!("--cost-scale must be positive");
            }
            let text = std::fs::read_to_string(&model)
                .with_context(|| format!("reading {}", model.display()))?;
            let mut m: FleetModel = serde_json::from_str(&text)
                .with_context(|| format!("{} is not a simulator model", model.display()))?;
            if own_machines {
                m.cores = None;
                m.background = 0.0;
            }
            if split > 1 {
                m.costs = simulate::predict::split_into(&m.costs, split as usize);
                m.groups = m.costs.roles();
                m.max_inflight = 2 * m.groups + 2;
            }
            m.costs = m.costs.scaled(cost_scale);
            if link_rate.is_some() {
                m.link_rate_bps = link_rate;
            }
            if let Some(l) = link_latency {
                m.link_latency_s = l.as_secs_f64();
            }
            let plan = Plan::load(&plan)?;
            let run = simulate::simulate_plan(&m, &plan, &simulate::PromptLengths::embedded()?)?;
            std::fs::create_dir_all(&out)?;
            simulate::write_run(&run, &out)?;
            crate::json::write(&out.join("model.json"), &m)?;
            print!("{}", tables::analyze(&out)?);
            eprintln!(
                "simulate: a prediction for {} roles; wrote traces, phases.csv, curve.csv, table4.md and model.json to {}",
                m.costs.roles(),
                out.display()
            );
        }
        SimCmd::Paper {
            out,
            local,
            ceilings,
            backends,
            target_bandwidth_gbs,
            paper,
            slots,
            window,
        } => {
            let setup = super::validate::Setup {
                preset: "inkling".into(),
                cores: 1,
                slots,
                window,
            };
            if !(target_bandwidth_gbs.is_finite() && target_bandwidth_gbs > 0.0) {
                bail!("--target-bandwidth-gbs must be a positive number of GB/s");
            }
            let kernels =
                ceilings
                    .zip(backends)
                    .map(|(ceilings, backends)| super::paper::KernelRecords {
                        root: PathBuf::from("."),
                        ceilings,
                        backends,
                        target_bandwidth_gbs,
                    });
            let md = super::paper::run_and_write(&paper, &local, kernels.as_ref(), &out, &setup)?;
            let cmp: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(out.join("paper.json"))?)?;
            println!(
                "paper: peak at C = {} (simulated {}), Q_decode mean |error| {:.1} %, TTFT median mean |error| {:.1} %\n\n{md}",
                cmp["peak_level_paper"],
                cmp["peak_level_simulated"],
                100.0 * cmp["q_decode_mean_abs_error"].as_f64().unwrap_or(f64::NAN),
                100.0 * cmp["ttft_mean_abs_error"].as_f64().unwrap_or(f64::NAN)
            );
            eprintln!(
                "simulate: wrote paper.json, paper.csv, predictions.* and figures to {}",
                out.display()
            );
        }
    }
    Ok(())
}
