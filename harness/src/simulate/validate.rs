//! Validation against a measured run: calibrate the model on some of the run's levels (the frame
//! records of those phases only), replay the run's whole plan, and compare the simulated curve
//! with the measured one level by level, the held-out levels apart.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::costs::{self, Costs};
use super::des::FleetModel;
pub use super::level::{rel, Level};
use super::{simulate_plan, write_run, PromptLengths};
use crate::analysis::tables::{load_run, tables, CurveRow};
use crate::trace::{read_records, PhaseRecord};
use crate::workload::Plan;

/// Targets of the issue: simulated Q_decode within 15 % at every held-out level, TTFT median
/// within 25 %.
pub const Q_DECODE_TARGET: f64 = 0.15;
pub const TTFT_TARGET: f64 = 0.25;

/// How the measured fleet was run (defaults: `moefleet serve` with 11 local roles).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Setup {
    pub preset: String,
    pub cores: usize,
    pub slots: usize,
    pub window: usize,
}

/// The validation record (`validation.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Validation {
    pub setup: Setup,
    pub calibration_levels: Vec<usize>,
    pub held_out_levels: Vec<usize>,
    pub frames_fitted: usize,
    /// The hop measured on frames launched alone (a delay, not work).
    pub hop_s: f64,
    pub fitted: Fitted,
    pub levels: Vec<Level>,
    /// Largest |error| over the held-out levels.
    pub held_out_q_decode_max_error: f64,
    pub held_out_ttft_max_error: f64,
    pub q_decode_target: f64,
    pub ttft_target: f64,
    pub q_decode_within_target: bool,
    pub ttft_within_target: bool,
    /// Held-out levels whose Q_decode, and whose TTFT median, are within target.
    pub held_out_q_decode_within: usize,
    pub held_out_ttft_within: usize,
}

/// Every other level of the plan (sorted), starting with the lowest: the calibration levels.
pub fn default_calibration(levels: &[usize]) -> Vec<usize> {
    let mut l = levels.to_vec();
    l.sort_unstable();
    l.into_iter().step_by(2).collect()
}

/// The plan a sweep ran (`run.json`'s `plan`).
pub fn run_plan(run: &Path) -> Result<Plan> {
    let path = run.join("run.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)?;
    let plan: Plan = serde_json::from_value(v["plan"].clone())
        .with_context(|| format!("{}: no sweep plan", path.display()))?;
    plan.validate()?;
    Ok(plan)
}

/// The calibration split: whether a frame that started at `t` (epoch seconds) is one to fit on,
/// i.e. started within a phase run at one of the calibration `levels` and within no phase run at
/// any other level. The held-out levels are checked against a model fitted without them, so none
/// of their frames may reach the fit: a frame at the instant two phases meet belongs to both and
/// is left out, and so are frames between phases.
pub fn calibration_split(phases: &[PhaseRecord], levels: &[usize]) -> impl Fn(f64) -> bool {
    let windows = |calib: bool| -> Vec<(f64, f64)> {
        phases
            .iter()
            .filter(|p| levels.contains(&p.concurrency) == calib)
            .map(|p| (p.start, p.end))
            .collect()
    };
    let (keep, held_out) = (windows(true), windows(false));
    let within = |w: &[(f64, f64)], t: f64| w.iter().any(|&(a, b)| t >= a && t <= b);
    move |t| within(&keep, t) && !within(&held_out, t)
}

/// Make the compact calibration file: the frame records of `profiles` that the
/// [`calibration_split`] of the run's phases keeps. Returns how many frames it holds.
pub fn extract(run: &Path, profiles: &Path, levels: &[usize], out: &Path) -> Result<usize> {
    let frames = costs::read_frames(profiles)?;
    let path = run.join("phases.jsonl");
    let phases: Vec<PhaseRecord> =
        read_records(&path).with_context(|| format!("{} is not a sweep run", run.display()))?;
    costs::write_compact(&frames, calibration_split(&phases, levels), out)
}

/// Copy a measured sweep (phases.jsonl, traces, run.json) into `dir/measured` and extract its
/// calibration frames into `dir/frames.csv.gz`. Returns how many frames were kept.
pub fn import(run: &Path, profiles: &Path, levels: &[usize], dir: &Dir) -> Result<usize> {
    let m = dir.measured();
    std::fs::create_dir_all(m.join("traces"))?;
    for f in ["phases.jsonl", "run.json"] {
        std::fs::copy(run.join(f), m.join(f)).with_context(|| format!("copying {f}"))?;
    }
    for p in load_run(run)?.phases {
        let name = format!("{}.jsonl.gz", p.phase);
        std::fs::copy(run.join("traces").join(&name), m.join("traces").join(&name))?;
    }
    extract(run, profiles, levels, &dir.frames())
}

/// The parameters fitted to the calibration levels' outcomes (everything else comes from the frame
/// records): work per frame beyond its compute, the background load, the scheduler's time slice.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fitted {
    pub hop_cpu_s: f64,
    pub background: f64,
    pub time_slice_s: f64,
    /// Mean over the calibration levels of ln(sim/measured)² of Q_decode plus that of the TTFT
    /// median.
    pub score: f64,
}

/// The candidates searched: work per frame beyond its compute (seconds), background load (cores),
/// time slice (seconds).
const HOP_CPUS: [f64; 3] = [0.0, 0.0001, 0.0003];
const BACKGROUNDS: [f64; 3] = [0.0, 0.25, 0.5];
const TIME_SLICES: [f64; 3] = [0.0015, 0.003, 0.006];

/// A model of the measured fleet for given fitted parameters.
fn model_for(
    frames: &[Vec<costs::Frame>],
    setup: &Setup,
    hop_s: f64,
    p: (f64, f64, f64),
) -> Result<FleetModel> {
    let costs = Costs::fit(frames, |_| true);
    let cfg = moefleet_engine::model::config::ModelConfig::preset(&setup.preset)?;
    let roles = costs.roles();
    Ok(FleetModel {
        costs,
        cores: Some(setup.cores),
        hop_s,
        hop_cpu_s: p.0,
        background: p.1,
        time_slice_s: p.2,
        link_rate_bps: None,
        link_latency_s: 0.0,
        hidden: cfg.hidden,
        slots: setup.slots,
        groups: roles,
        window: setup.window,
        max_inflight: 2 * roles + 2,
    })
}

fn score(measured: &[CurveRow], simulated: &[CurveRow]) -> f64 {
    let mut acc = Vec::new();
    for m in measured {
        let Some(s) = simulated.iter().find(|s| s.concurrency == m.concurrency) else {
            continue;
        };
        for (a, b) in [
            (s.q_decode_mean, m.q_decode_mean),
            (s.ttft_median_s, m.ttft_median_s),
        ] {
            if let (Some(a), Some(b)) = (a, b) {
                if a > 0.0 && b > 0.0 {
                    acc.push((a / b).ln().powi(2));
                }
            }
        }
    }
    if acc.is_empty() {
        f64::INFINITY
    } else {
        acc.iter().sum::<f64>() / acc.len() as f64
    }
}

/// A fit's result, remembered by this process under the digest of everything it was computed from.
type FitResult = (FleetModel, Fitted, usize);

/// Fits this process has made, keyed by [`fit_key`]: a fit is a pure function of its inputs (the
/// grid is a constant of the build, the simulation deterministic).
static FITS: crate::memo::Memo<FitResult> = crate::memo::Memo::new(64);

/// The digest of a fit's inputs: the calibration file's bytes and the other arguments' `Debug`
/// forms (which print every float exactly). The prompt lengths come from the tokenizer compiled
/// into this binary, the same for every fit of the process.
fn fit_key(
    frames_bytes: &[u8],
    setup: &Setup,
    plan: &Plan,
    calib: &[usize],
    measured: &[CurveRow],
) -> [u8; 32] {
    let args = format!("{setup:?}\n{plan:?}\n{calib:?}\n{measured:?}");
    crate::memo::digest(&[frames_bytes, args.as_bytes()])
}

/// Fit the model from a compact calibration file: cost curves and the hop from the frame records,
/// then the two remaining parameters by a grid search on the calibration levels' Q_decode and TTFT
/// median (the plan replayed at those levels only). A fit this process already made from the same
/// inputs is returned again rather than searched twice (see [`FITS`]).
pub fn fit(
    frames_file: &Path,
    setup: &Setup,
    plan: &Plan,
    calib: &[usize],
    measured: &[CurveRow],
    lengths: &PromptLengths,
) -> Result<FitResult> {
    let bytes =
        std::fs::read(frames_file).with_context(|| format!("reading {}", frames_file.display()))?;
    let key = fit_key(&bytes, setup, plan, calib, measured);
    FITS.get_or_derive(key, || {
        let frames = costs::parse_compact(bytes.as_slice(), frames_file)?;
        search(&frames, setup, plan, calib, measured, lengths)
    })
}

/// The search behind [`fit`].
fn search(
    frames: &[Vec<costs::Frame>],
    setup: &Setup,
    plan: &Plan,
    calib: &[usize],
    measured: &[CurveRow],
    lengths: &PromptLengths,
) -> Result<FitResult> {
    use rayon::prelude::*;
    let n = frames.iter().map(Vec::len).sum();
    let hop_s = costs::hop_latency(frames, |_| true)
        .context("no frame launched alone to measure a hop on (calibrate with C = 1)")?;
    let mut sub = plan.clone();
    sub.levels = calib.to_vec();
    let target: Vec<CurveRow> = measured
        .iter()
        .filter(|m| calib.contains(&m.concurrency))
        .cloned()
        .collect();
    let grid: Vec<(f64, f64, f64)> = HOP_CPUS
        .iter()
        .flat_map(|&h| {
            BACKGROUNDS
                .iter()
                .flat_map(move |&b| TIME_SLICES.iter().map(move |&q| (h, b, q)))
        })
        .collect();
    let scored = grid
        .par_iter()
        .map(|&p| -> Result<((f64, f64, f64), f64)> {
            let m = model_for(frames, setup, hop_s, p)?;
            let (_, curve) = tables(&simulate_plan(&m, &sub, lengths)?)?;
            Ok((p, score(&target, &curve)))
        })
        .collect::<Result<Vec<_>>>()?;
    let (best, s) = scored
        .into_iter()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .context("an empty grid")?;
    Ok((
        model_for(frames, setup, hop_s, best)?,
        Fitted {
            hop_cpu_s: best.0,
            background: best.1,
            time_slice_s: best.2,
            score: s,
        },
        n,
    ))
}

/// The simulated and measured curves side by side.
pub fn compare(measured: &[CurveRow], simulated: &[CurveRow], calib: &[usize]) -> Vec<Level> {
    measured
        .iter()
        .map(|m| {
            let s = simulated.iter().find(|s| s.concurrency == m.concurrency);
            Level {
                concurrency: m.concurrency,
                held_out: !calib.contains(&m.concurrency),
                q_decode_measured: m.q_decode_mean,
                q_decode_simulated: s.and_then(|s| s.q_decode_mean),
                ttft_median_measured: m.ttft_median_s,
                ttft_median_simulated: s.and_then(|s| s.ttft_median_s),
            }
        })
        .collect()
}

/// Paths of a validation directory.
pub struct Dir(pub PathBuf);
impl Dir {
    pub fn measured(&self) -> PathBuf {
        self.0.join("measured")
    }
    pub fn frames(&self) -> PathBuf {
        self.0.join("frames.csv.gz")
    }
    pub fn simulated(&self) -> PathBuf {
        self.0.join("simulated")
    }
    pub fn record(&self) -> PathBuf {
        self.0.join("validation.json")
    }
}

/// Validate from a directory holding `measured/` (the sweep's phases.jsonl, traces and run.json)
/// and `frames.csv.gz`: fit, replay the plan, compare. Pure in its files: `verify` runs it again.
pub fn validate(
    dir: &Dir,
    setup: &Setup,
    calib: &[usize],
) -> Result<(Validation, crate::analysis::tables::Run, FleetModel)> {
    let measured = load_run(&dir.measured())?;
    let (_, mcurve) = tables(&measured)?;
    let plan = run_plan(&dir.measured())?;
    let lengths = PromptLengths::embedded()?;
    let (model, fitted, frames_fitted) =
        fit(&dir.frames(), setup, &plan, calib, &mcurve, &lengths)?;
    let sim = simulate_plan(&model, &plan, &lengths)?;
    let (_, scurve) = tables(&sim)?;
    let levels = compare(&mcurve, &scurve, calib);
    let worst = |f: &dyn Fn(&Level) -> Option<f64>| {
        levels
            .iter()
            .filter(|l| l.held_out)
            .map(|l| f(l).map_or(f64::INFINITY, f64::abs))
            .fold(0.0, f64::max)
    };
    let qd = worst(&|l| l.q_decode_error());
    let tt = worst(&|l| l.ttft_error());
    let within = |f: &dyn Fn(&Level) -> Option<f64>, target: f64| {
        levels
            .iter()
            .filter(|l| l.held_out && f(l).is_some_and(|e| e.abs() <= target))
            .count()
    };
    let (qw, tw) = (
        within(&|l| l.q_decode_error(), Q_DECODE_TARGET),
        within(&|l| l.ttft_error(), TTFT_TARGET),
    );
    let mut all: Vec<usize> = plan.levels.clone();
    all.sort_unstable();
    Ok((
        Validation {
            setup: setup.clone(),
            calibration_levels: calib.to_vec(),
            held_out_levels: all.into_iter().filter(|c| !calib.contains(c)).collect(),
            frames_fitted,
            hop_s: model.hop_s,
            fitted,
            levels,
            held_out_q_decode_max_error: qd,
            held_out_ttft_max_error: tt,
            q_decode_target: Q_DECODE_TARGET,
            ttft_target: TTFT_TARGET,
            q_decode_within_target: qd <= Q_DECODE_TARGET,
            ttft_within_target: tt <= TTFT_TARGET,
            held_out_q_decode_within: qw,
            held_out_ttft_within: tw,
        },
        sim,
        model,
    ))
}

/// Validate and write the record, the simulated run (analysed), `validation.csv` and the figure.
pub fn run_and_write(dir: &Dir, setup: &Setup, calib: &[usize]) -> Result<Validation> {
    let (v, sim, model) = validate(dir, setup, calib)?;
    crate::json::write(&dir.0.join("model.json"), &model)?;
    write_run(&sim, &dir.simulated())?;
    crate::analysis::tables::analyze(&dir.simulated())?;
    crate::json::write(&dir.record(), &v)?;
    std::fs::write(dir.0.join("validation.csv"), levels_csv(&v.levels))?;
    crate::figures::simulation::draw(
        &dir.0.join("validation"),
        "Simulator vs the measured 11-role inkling-mini fleet (held-out levels marked)",
        &v.levels,
        "measured",
    )?;
    Ok(v)
}

pub fn levels_csv(levels: &[Level]) -> String {
    let f = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:.6}"));
    let mut s = String::from("concurrency,held_out,q_decode_measured,q_decode_simulated,q_decode_error,ttft_median_measured,ttft_median_simulated,ttft_error\n");
    for l in levels {
        s += &format!(
            "{},{},{},{},{},{},{},{}\n",
            l.concurrency,
            l.held_out,
            f(l.q_decode_measured),
            f(l.q_decode_simulated),
            f(l.q_decode_error()),
            f(l.ttft_median_measured),
            f(l.ttft_median_simulated),
            f(l.ttft_error())
        );
    }
    s
}

/// The levels, measured and simulated, as a Markdown table (docs/RESULTS.md's, checked by `verify`).
pub fn levels_md(levels: &[Level]) -> String {
    let pct = |x: Option<f64>| x.map_or("–".into(), |e| format!("{:+.1} %", 100.0 * e));
    let num = |x: Option<f64>, d: usize| x.map_or("–".into(), |e| format!("{e:.d$}"));
    let mut s = String::from(
        "| C | held out | Q_decode measured | simulated | error | TTFT median measured (s) | simulated | error |\n|---:|:---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for l in levels {
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            l.concurrency,
            if l.held_out { "yes" } else { "" },
            num(l.q_decode_measured, 1),
            num(l.q_decode_simulated, 1),
            pct(l.q_decode_error()),
            num(l.ttft_median_measured, 3),
            num(l.ttft_median_simulated, 3),
            pct(l.ttft_error()),
        );
    }
    s
}

/// The record as a Markdown table and its held-out summary (printed by the command).
pub fn summary_md(v: &Validation) -> String {
    let mut s = levels_md(&v.levels);
    s += &format!(
        "\nHeld-out levels: largest |Q_decode error| {:.1} % (target {:.0} %), largest |TTFT median error| {:.1} % (target {:.0} %).\n",
        100.0 * v.held_out_q_decode_max_error,
        100.0 * v.q_decode_target,
        100.0 * v.held_out_ttft_max_error,
        100.0 * v.ttft_target
    );
    s
}

/// `verify`: fit and replay again from the committed files and compare with `validation.json`
/// and `validation.csv`.
pub fn recheck(dir: &Path) -> Result<()> {
    let d = Dir(dir.to_path_buf());
    let text = std::fs::read_to_string(d.record())
        .with_context(|| format!("reading {}", d.record().display()))?;
    let stored: serde_json::Value = serde_json::from_str(&text)?;
    let v: Validation = serde_json::from_value(stored.clone())?;
    let (fresh, _, _) = validate(&d, &v.setup, &v.calibration_levels)?;
    if !crate::recheck::same_json(&stored, &serde_json::to_value(&fresh)?) {
        anyhow::bail!(
            "validation.json differs from a fresh fit and replay of measured/ and frames.csv.gz \
             (edited by hand, or made by another version: run `moefleet-harness simulate validate --out {}`)",
            dir.display()
        );
    }
    let csv = dir.join("validation.csv");
    let committed =
        std::fs::read_to_string(&csv).with_context(|| format!("reading {}", csv.display()))?;
    if committed != levels_csv(&fresh.levels) {
        anyhow::bail!("validation.csv differs from a fresh fit and replay (edited by hand?)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(q: f64) -> CurveRow {
        CurveRow {
            concurrency: 4,
            phases: vec!["p".into()],
            q_decode: vec![q],
            q_phase: vec![q],
            q_decode_mean: Some(q),
            q_phase_mean: q,
            ttft_median_s: Some(0.25),
            ttft_p95_s: None,
        }
    }

    /// A remembered fit is returned only for the same inputs: one byte of the frame file, one
    /// calibration level, the last bit of one measured value or the setup each make a new key.
    #[test]
    fn a_fit_is_remembered_only_for_the_same_inputs() {
        let plan = Plan::load("quick").unwrap();
        let setup = Setup {
            preset: "inkling-mini".into(),
            cores: 2,
            slots: 16,
            window: 8,
        };
        let frames = b"frames".to_vec();
        let base = fit_key(&frames, &setup, &plan, &[1, 4], &[row(10.0)]);
        assert_eq!(base, fit_key(&frames, &setup, &plan, &[1, 4], &[row(10.0)]));
        let mut edited = frames.clone();
        edited[0] ^= 1;
        let nudged = f64::from_bits(10.0f64.to_bits() + 1);
        let mut other = setup.clone();
        other.cores = 1;
        for k in [
            fit_key(&edited, &setup, &plan, &[1, 4], &[row(10.0)]),
            fit_key(&frames, &setup, &plan, &[1, 2], &[row(10.0)]),
            fit_key(&frames, &setup, &plan, &[1, 4], &[row(nudged)]),
            fit_key(&frames, &other, &plan, &[1, 4], &[row(10.0)]),
        ] {
            assert_ne!(k, base);
        }
    }
}
