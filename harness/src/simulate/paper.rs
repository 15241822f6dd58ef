//! The simulator calibrated from the paper's own per-role stage profiles
//! (`reference/paper/results/profiles.csv`) and its network, replaying the paper's survey plan and
//! compared with its Table 4 as published (`concurrency_rows.tex`): Q_decode the paired mean of
//! the two phases per level (from `survey_phases.csv`, checked against the table's printed value),
//! TTFT median pooled over both phases' requests (the table's own column: the artifact publishes
//! no per-request records to pool).
//!
//! Calibration: for each role, the (rows per frame, compute ms per frame) means of every profiled
//! phase of the latest experiments (`FROM_EXPERIMENT` on, the engine closest to the surveyed one;
//! phases of at least `MIN_FRAMES` frames), as a curve through their medians at equal rows. Each
//! role has a machine of its own; links are gigabit Ethernet (`hardware.json`: 1000 Mb/s NICs) with
//! an assumed one-way latency of `LATENCY_S` (the paper publishes none). Rows are `inkling` rows
//! (6144 floats). What the profiles do not hold is not modelled: speculation (the paper's engine
//! speculates for a lone stream, which is why its single-stream rate is above one chain round per
//! token), the cost of receiving and sending a frame, and the paper's own prompt lengths (ours are
//! counted with our tokenizer on our prompts).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::costs::{Costs, Curve};
use super::des::FleetModel;
pub use super::network::{LATENCY_S, RATE_BPS};
use super::predict::KernelScaling;
use super::validate::{Level, Setup};
use super::{simulate_plan, PromptLengths};
use crate::analysis::paper::{paired_means, read_survey_phases, read_table_rows};
use crate::analysis::tables::tables;
use crate::csv::Table;
use crate::workload::Plan;

/// The first experiment whose profiles calibrate the model (experiments sort by their number).
pub const FROM_EXPERIMENT: &str = "029";
pub const MIN_FRAMES: f64 = 50.0;

/// Per-role curves from `profiles.csv`.
pub fn costs_from_profiles(text: &str) -> Result<(Costs, usize)> {
    let t = Table::parse(text);
    let (ie, ir, ifr, irows, ims) = (
        t.index("experiment")?,
        t.index("role")?,
        t.index("frames")?,
        t.index("rows_per_frame")?,
        t.index("compute_ms")?,
    );
    let mut by_role: BTreeMap<usize, BTreeMap<i64, Vec<f64>>> = BTreeMap::new();
    let mut used = 0;
    let mut rows_at: BTreeMap<(usize, i64), Vec<f64>> = BTreeMap::new();
    for r in &t.rows {
        let exp = r.get(ie).map(String::as_str).unwrap_or("");
        if exp < FROM_EXPERIMENT || t.num(r, ifr)? < MIN_FRAMES {
            continue;
        }
        let role = t.num(r, ir)? as usize;
        let rows = t.num(r, irows)?;
        let key = (rows * 20.0).round() as i64; // rows to the nearest 0.05
        by_role
            .entry(role)
            .or_default()
            .entry(key)
            .or_default()
            .push(t.num(r, ims)? * 1e-3);
        rows_at.entry((role, key)).or_default().push(rows);
        used += 1;
    }
    let n = by_role.keys().max().map_or(0, |m| m + 1);
    anyhow::ensure!(
        n >= 2 && by_role.len() == n,
        "profiles.csv: not every role profiled"
    );
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut shared = Vec::new();
    for (role, m) in by_role {
        let points = m
            .into_iter()
            .map(|(k, mut secs)| {
                let mut rows = rows_at[&(role, k)].clone();
                (med(&mut rows), med(&mut secs))
            })
            .collect();
        shared.push(Curve { points });
    }
    Ok((
        Costs {
            alone: vec![Curve::default(); shared.len()],
            shared,
        },
        used,
    ))
}

/// The paper's fleet: every role on its own machine, gigabit links.
pub fn paper_model(costs: Costs, setup: &Setup) -> Result<FleetModel> {
    let cfg = moefleet_engine::model::config::ModelConfig::preset("inkling")?;
    let roles = costs.roles();
    Ok(FleetModel {
        costs,
        cores: None,
        hop_s: 0.0,
        hop_cpu_s: 0.0,
        background: 0.0,
        time_slice_s: 0.003,
        link_rate_bps: Some(RATE_BPS),
        link_latency_s: LATENCY_S,
        hidden: cfg.hidden,
        slots: setup.slots,
        groups: roles,
        window: setup.window,
        max_inflight: 2 * roles + 2,
    })
}

/// The paper's Table 4 per level: (C, Q_decode, TTFT median). Q_decode is the paired mean of the
/// `mixed_a_*` / `mixed_b_*` phases of `survey_phases.csv` at full precision, and must round to the
/// table's printed value; the TTFT median is the table's, pooled over both phases' requests (the
/// mean of the two phases' medians is not it: 3.90 against 4.20 s at C = 6).
pub fn table4(survey: &str, rows_tex: &str) -> Result<Vec<(usize, f64, f64)>> {
    let paired = paired_means(&read_survey_phases(survey)?);
    let table = read_table_rows(rows_tex);
    anyhow::ensure!(!table.is_empty(), "concurrency_rows.tex: no table rows");
    table
        .iter()
        .map(|&(c, q_printed, _, _, ttft_median, _)| {
            let &(_, q, ..) = paired
                .iter()
                .find(|p| p.0 == c)
                .with_context(|| format!("survey_phases.csv has no paired phases at C = {c}"))?;
            // the table prints two decimals
            anyhow::ensure!(
                (q - q_printed).abs() <= 0.005 + 1e-9,
                "C = {c}: paired Q_decode {q} is not Table 4's {q_printed}"
            );
            Ok((c, q, ttft_median))
        })
        .collect()
}

/// The comparison record (`paper.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PaperComparison {
    pub profiles_used: usize,
    pub link_rate_bps: f64,
    pub link_latency_s: f64,
    pub levels: Vec<Level>,
    pub peak_level_paper: usize,
    pub peak_level_simulated: usize,
    /// Q_decode just after the peak level relative to the peak, paper and simulated (the dip).
    pub after_peak_ratio_paper: Option<f64>,
    pub after_peak_ratio_simulated: Option<f64>,
    pub q_decode_mean_abs_error: f64,
    pub q_decode_max_abs_error: f64,
    pub ttft_mean_abs_error: f64,
    pub ttft_max_abs_error: f64,
}

/// The comparison with Table 4 as a Markdown table (docs/RESULTS.md's, checked by `verify`).
pub fn table4_md(levels: &[Level]) -> String {
    let num = |x: Option<f64>, d: usize| x.map_or("–".into(), |e| format!("{e:.d$}"));
    let pct =
        |x: Option<f64>, d: usize| x.map_or("–".into(), |e| format!("{:+.d$} %", 100.0 * e));
    let mut s = String::from(
        "| C | Table 4 Q_decode | simulated | error | Table 4 TTFT median (s) | simulated | error |\n|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for l in levels {
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            l.concurrency,
            num(l.q_decode_measured, 1),
            num(l.q_decode_simulated, 1),
            pct(l.q_decode_error(), 1),
            num(l.ttft_median_measured, 2),
            num(l.ttft_median_simulated, 2),
            pct(l.ttft_error(), 0),
        );
    }
    s
}

/// Simulate the paper's survey plan on the paper-calibrated model and compare with Table 4.
pub fn compare(paper_dir: &Path, setup: &Setup) -> Result<(PaperComparison, FleetModel)> {
    let read = |f: &str| {
        std::fs::read_to_string(paper_dir.join(f))
            .with_context(|| format!("reading {}", paper_dir.join(f).display()))
    };
    let (costs, used) = costs_from_profiles(&read("profiles.csv")?)?;
    let model = paper_model(costs, setup)?;
    let published = table4(&read("survey_phases.csv")?, &read("concurrency_rows.tex")?)?;
    let plan = Plan::load("paper")?;
    let run = simulate_plan(&model, &plan, &PromptLengths::embedded()?)?;
    let (_, curve) = tables(&run)?;
    let levels: Vec<Level> = published
        .iter()
        .map(|&(c, q, t)| {
            let s = curve.iter().find(|s| s.concurrency == c);
            Level {
                concurrency: c,
                held_out: true,
                q_decode_measured: Some(q),
                q_decode_simulated: s.and_then(|s| s.q_decode_mean),
                ttft_median_measured: Some(t),
                ttft_median_simulated: s.and_then(|s| s.ttft_median_s),
            }
        })
        .collect();
    let peak = |f: &dyn Fn(&Level) -> Option<f64>| -> (usize, Option<f64>) {
        let i = (0..levels.len())
            .max_by(|&a, &b| {
                f(&levels[a])
                    .unwrap_or(0.0)
                    .total_cmp(&f(&levels[b]).unwrap_or(0.0))
            })
            .unwrap_or(0);
        let after = levels.get(i + 1).and_then(|l| Some(f(l)? / f(&levels[i])?));
        (levels[i].concurrency, after)
    };
    let (pp, pa) = peak(&|l| l.q_decode_measured);
    let (sp, sa) = peak(&|l| l.q_decode_simulated);
    let errs = |f: &dyn Fn(&Level) -> Option<f64>| -> (f64, f64) {
        let e: Vec<f64> = levels.iter().filter_map(f).map(f64::abs).collect();
        let n = e.len().max(1) as f64;
        (
            e.iter().sum::<f64>() / n,
            e.iter().copied().fold(0.0, f64::max),
        )
    };
    let (qm, qx) = errs(&|l| l.q_decode_error());
    let (tm, tx) = errs(&|l| l.ttft_error());
    Ok((
        PaperComparison {
            profiles_used: used,
            link_rate_bps: RATE_BPS,
            link_latency_s: LATENCY_S,
            levels,
            peak_level_paper: pp,
            peak_level_simulated: sp,
            after_peak_ratio_paper: pa,
            after_peak_ratio_simulated: sa,
            q_decode_mean_abs_error: qm,
            q_decode_max_abs_error: qx,
            ttft_mean_abs_error: tm,
            ttft_max_abs_error: tx,
        },
        model,
    ))
}

/// Compare with Table 4 and run the predictions; write `OUT/paper.json`, `paper.csv`,
/// `paper.png/.svg`, `predictions.json`, `predictions.md` and one figure per scenario.
/// `local`: a validation directory (its `model.json` is our engine's calibrated model);
/// `kernels`: the records the bandwidth-scaled prediction is computed from, if any.
pub fn run_and_write(
    paper_dir: &Path,
    local: &Path,
    kernels: Option<&KernelRecords>,
    out: &Path,
    setup: &Setup,
) -> Result<String> {
    std::fs::create_dir_all(out)?;
    let (cmp, model) = compare(paper_dir, setup)?;
    crate::json::write(&out.join("paper.json"), &cmp)?;
    crate::json::write(&out.join("model.json"), &model)?;
    std::fs::write(
        out.join("paper.csv"),
        super::validate::levels_csv(&cmp.levels),
    )?;
    // what was simulated, from the comparison record (never the output directory)
    let run_line = format!(
        "simulated: inkling rows, plan paper, {} roles each on a machine of its own, {} Gb/s links, \
         {} ms one way; calibrated from {} rows of the paper's stage profiles (experiments {} on)",
        model.roles(),
        cmp.link_rate_bps / 1e9,
        cmp.link_latency_s * 1e3,
        cmp.profiles_used,
        FROM_EXPERIMENT
    );
    crate::figures::simulation::draw_with_run(
        &out.join("paper"),
        "Simulator calibrated from the paper's stage profiles vs the paper's Table 4",
        &run_line,
        &cmp.levels,
        "paper (Table 4)",
    )?;
    let local_model: FleetModel = serde_json::from_str(
        &std::fs::read_to_string(local.join("model.json"))
            .with_context(|| format!("reading {}/model.json", local.display()))?,
    )?;
    let baseline: Vec<Level> = cmp
        .levels
        .iter()
        .map(|l| Level {
            q_decode_simulated: l.q_decode_simulated,
            ttft_median_simulated: l.ttft_median_simulated,
            ..l.clone()
        })
        .collect();
    let scaling = match kernels {
        Some(k) => Some(KernelScaling::measure(
            &k.root,
            &k.ceilings,
            &k.backends,
            k.target_bandwidth_gbs,
            &model,
        )?),
        None => None,
    };
    let sc = super::predict::scenarios(
        &model,
        &local_model,
        scaling,
        &baseline,
        &PromptLengths::embedded()?,
    )?;
    crate::json::write(&out.join("predictions.json"), &sc)?;
    let md = super::predict::markdown(&sc);
    std::fs::write(out.join("predictions.md"), &md)?;
    for s in sc.iter().skip(1) {
        crate::figures::simulation::draw_with_run(
            &out.join(format!("prediction-{}", s.name)),
            &format!(
                "Prediction: {} (dashed) against the paper-calibrated baseline",
                s.name
            ),
            &format!("{}: {}", s.name, s.what),
            &s.levels,
            "paper-calibrated, 11 machines, 1 GbE",
        )?;
    }
    Ok(md)
}

/// A ceilings record and a backends record of one machine (paths relative to `root`, as they
/// are written into the prediction), and the bandwidth to scale to.
#[derive(Clone, Debug)]
pub struct KernelRecords {
    pub root: PathBuf,
    pub ceilings: PathBuf,
    pub backends: PathBuf,
    pub target_bandwidth_gbs: f64,
}

/// `verify`: compare and predict again (from the kernel records the committed prediction names,
/// under `root`); `paper.json` and `predictions.json` must not change, nor the tables
/// `paper.csv` and `predictions.md` rendered from them.
pub fn recheck(root: &Path, out: &Path, local: &Path, paper_dir: &Path) -> Result<()> {
    let committed: Vec<super::predict::Scenario> = serde_json::from_str(
        &std::fs::read_to_string(out.join("predictions.json"))
            .with_context(|| format!("reading {}/predictions.json", out.display()))?,
    )
    .with_context(|| format!("{}/predictions.json", out.display()))?;
    let kernels = committed
        .iter()
        .find_map(|s| s.scaling.as_ref())
        .map(|k| KernelRecords {
            root: root.to_path_buf(),
            ceilings: k.ceilings.clone().into(),
            backends: k.backends.clone().into(),
            target_bandwidth_gbs: k.target_bandwidth_gbs,
        });
    let scratch = tempfile::tempdir()?;
    let setup = Setup {
        preset: "inkling".into(),
        cores: 1,
        slots: 176,
        window: 8,
    };
    let tmp = scratch.path();
    run_and_write(paper_dir, local, kernels.as_ref(), tmp, &setup).and_then(|_| {
        for f in ["paper.json", "predictions.json"] {
            let read = |d: &Path| -> Result<serde_json::Value> {
                Ok(serde_json::from_str(
                    &std::fs::read_to_string(d.join(f))
                        .with_context(|| format!("reading {}", d.join(f).display()))?,
                )?)
            };
            if !crate::recheck::same_json(&read(out)?, &read(tmp)?) {
                anyhow::bail!("{f} differs from a fresh run of `moefleet-harness simulate paper`");
            }
        }
        // the tables rendered from them, byte for byte
        for f in ["paper.csv", "predictions.md"] {
            let read = |d: &Path| {
                std::fs::read_to_string(d.join(f))
                    .with_context(|| format!("reading {}", d.join(f).display()))
            };
            if read(out)? != read(tmp)? {
                anyhow::bail!("{f} differs from a fresh run of `moefleet-harness simulate paper`");
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_give_one_curve_per_role_from_the_latest_experiments() {
        let csv = "experiment,source,phase,role,installed_box,windows,frames,rows_per_frame,compute_ms,head_ms,attention_ms,experts_ms,fallback_calls,nonfinite_calls
002a_old,p,single,0,0,4,60,1.0,99.0,0,0,0,0,0
030_new,p,a,0,0,4,600,1.0,40.0,0,0,0,0,0
030_new,p,b,0,0,4,600,1.01,42.0,0,0,0,0,0
031_new,p,c,0,0,4,600,9.0,120.0,0,0,0,0,0
030_new,p,a,1,1,4,600,1.0,30.0,0,0,0,0,0
030_new,p,few,1,1,4,10,5.0,1000.0,0,0,0,0,0
031_new,p,c,1,1,4,600,9.0,110.0,0,0,0,0,0
";
        let (c, used) = costs_from_profiles(csv).unwrap();
        assert_eq!((c.roles(), used), (2, 5));
        // role 0: 1.0 and 1.01 rows fall together (to 0.05): the median of 40 and 42 ms
        let s = c.seconds(0, 1, false);
        assert!((0.040..=0.042).contains(&s), "{s}");
        // the old experiment and the ten-frame phase are left out; 5 rows interpolate
        let mid = c.seconds(1, 5, false);
        assert!((mid - 0.070).abs() < 1e-9, "{mid}");
    }

    fn paper(name: &str) -> String {
        std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../reproduction/paper")
                .join(name),
        )
        .unwrap()
    }

    #[test]
    fn table4_is_the_published_table() {
        let t = table4(&paper("survey_phases.csv"), &paper("concurrency_rows.tex")).unwrap();
        assert_eq!(t.len(), 15);
        let at = |c: usize| t.iter().copied().find(|r| r.0 == c).unwrap();
        // the pooled TTFT medians as published, not the means of the two phases' (3.90, 6.73)
        let (_, q6, t6) = at(6);
        assert_eq!(t6, 4.20);
        assert!((q6 - (13.940249282683268 + 13.83506086835002) / 2.0).abs() < 1e-12);
        assert_eq!(at(15).2, 6.05);
        assert_eq!(at(1).2, 2.18);
        assert_eq!(at(176).2, 76.83);
        let (_, q88, _) = at(88);
        assert!((q88 - 60.286375128761485).abs() < 1e-12);
    }

    #[test]
    fn table4_refuses_a_table_its_phases_do_not_make() {
        let survey = "phase,concurrency,decode_tok_s,phase_tok_s\nmixed_a_c004,4,9.0,8.0\nmixed_b_c004,4,11.0,9.0\npilot_four,4,100.0,1.0\n";
        let tex = "4 & 10.00 & 8.50 & 2.500 & 3.31 & 4.03 \\\\\n";
        assert_eq!(table4(survey, tex).unwrap(), vec![(4, 10.0, 3.31)]);
        let wrong = "4 & 10.10 & 8.50 & 2.500 & 3.31 & 4.03 \\\\\n";
        assert!(table4(survey, wrong).is_err());
        let missing = "6 & 10.00 & 8.50 & 2.500 & 3.31 & 4.03 \\\\\n";
        assert!(table4(survey, missing).is_err());
    }
}
