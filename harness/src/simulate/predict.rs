//! Predictions for fleets that were never measured, each a replay of the paper's survey plan on a
//! changed model. They are predictions: nothing here was run on such a fleet.
//!
//! - `paper-1gbe`: the paper-calibrated model as compared with Table 4 (the baseline).
//! - `paper-10gbe`: the same roles on 10 GbE (`LATENCY_10GBE_S` one way, assumed).
//! - `paper-22-roles`: every role cut in two (each half three layers, half the per-frame cost, the
//!   same rows), 22 machines on gigabit links.
//! - `ours-11-machines`: our engine's per-frame costs as measured here (the local calibration,
//!   `inkling-mini`), each role on a machine of its own (no shared cores), gigabit links.
//! - `our-kernels-paper-bandwidth` (when a ceilings and a backends record are given): the paper's
//!   fleet with each role's frame costing what six `inkling` MoE layers cost on our native
//!   kernels, scaled to the paper's memory bandwidth (see [`KernelScaling`]).
//!
//! Speculation's first-order gain (ARCHITECTURE.md §3.3): for a lone stream with chain latency L
//! (the simulated single-stream token interval) and inter-frame interval T (the slowest role's
//! one-row frame plus one hop), `S = L / (a T + (1 - a) L)` for a fraction `a` of positions whose
//! input was already in flight; the table gives S at several `a`.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::costs::Costs;
use super::des::{FleetModel, Request, Sim};
use super::level::Level;
use super::{simulate_plan, PromptLengths};
use crate::analysis::tables::tables;
use crate::stats::median;
use crate::workload::Plan;

pub const RATE_10GBE_BPS: f64 = 1e10;
pub const LATENCY_10GBE_S: f64 = 0.00005;
/// Fractions of positions already in flight at which the speculation gain is tabled.
pub const ACCEPTED: [f64; 4] = [0.25, 0.5, 0.75, 0.9];

/// Theoretical peak of the paper's machines' memory, GB/s: LPDDR5X at 7467 MT/s, the lowest speed
/// Intel allows for the Core Ultra X7 358H's Arc B390 graphics (Tom's Hardware, "Intel mandates at
/// least 7,467 MT/s RAM speed for Panther Lake"), on a 128-bit bus (assumed); the paper's
/// hardware.json lists the CPU and memory size, not the memory's speed. 7467e6 * 16 bytes.
pub const PAPER_PEAK_BANDWIDTH_GBS: f64 = 119.472;
/// Layers in a role of the `inkling` preset.
pub const LAYERS_PER_ROLE: usize = 6;

/// Our kernels' per-frame cost on the paper's machines, as far as memory bandwidth decides it:
/// six times the native time of one `inkling` MoE layer at one row (attention, router, the eight
/// experts; a backends record), times this machine's read bandwidth on the same threads (a
/// ceilings record) over the target's. The paper-calibrated model's per-role curves are scaled
/// by `factor`, the ratio of that one-row role cost to the median of the model's one-row role
/// costs: how the cost grows with rows, and how roles differ, are the paper's (not measured
/// here; a layer with more rows reads more distinct experts). The target's bandwidth is a
/// theoretical peak and ours a sustained measurement, so the scaled cost is a lower bound on
/// what the kernels would take there (and the curve an upper bound). Role 0's dense layers and
/// the last role's head are counted as MoE layers.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KernelScaling {
    pub ceilings: String,
    pub backends: String,
    pub threads: u64,
    /// Median native time of one `inkling` MoE layer at one row here, ms.
    pub layer_ms: f64,
    /// Median read bandwidth on the same threads here, GB/s.
    pub read_bandwidth_gbs: f64,
    pub target_bandwidth_gbs: f64,
    /// Load averages when the two were measured (start of the backends run, ceilings host facts).
    pub load_average: Vec<serde_json::Value>,
    /// Six layers here, and at the target's bandwidth, ms.
    pub role_ms_here: f64,
    pub role_ms_target: f64,
    /// Median over roles of the paper-calibrated model's one-row frame, ms.
    pub paper_role_ms: f64,
    pub factor: f64,
}

impl KernelScaling {
    /// Read both records (paths as given, `root` resolving relative ones) and the paper model.
    pub fn measure(
        root: &Path,
        ceilings: &Path,
        backends: &Path,
        target_bandwidth_gbs: f64,
        paper: &FleetModel,
    ) -> Result<KernelScaling> {
        let read = |p: &Path| -> Result<serde_json::Value> {
            let full = root.join(p);
            serde_json::from_str(
                &std::fs::read_to_string(&full)
                    .with_context(|| format!("reading {}", full.display()))?,
            )
            .with_context(|| full.display().to_string())
        };
        let (c, b) = (read(ceilings)?, read(backends)?);
        let samples = |v: &serde_json::Value, what: &str, p: &Path| -> Result<Vec<f64>> {
            let s: Vec<f64> = v
                .as_array()
                .with_context(|| format!("{}: no {what}", p.display()))?
                .iter()
                .filter_map(|x| x.as_f64())
                .collect();
            if s.is_empty() {
                bail!("{}: no {what}", p.display());
            }
            Ok(s)
        };
        // the all-threads read bandwidth, as the kernel table reads it
        let bw = crate::experiments::bench_table::ceiling::Ceilings::from_json(&c)
            .map_err(|e| anyhow::anyhow!("{}: {e}", ceilings.display()))?
            .read;
        let threads = b["threads"]
            .as_u64()
            .with_context(|| format!("{}: no threads", backends.display()))?;
        if bw.threads != Some(threads) {
            bail!(
                "{} measured the bandwidth on {} threads, {} the layer on {threads}: they must match",
                ceilings.display(),
                bw.threads.map_or("?".into(), |t| t.to_string()),
                backends.display()
            );
        }
        if b["layer"]["preset"] != "inkling" {
            bail!(
                "{}: the layer is not an `inkling` layer",
                backends.display()
            );
        }
        let one = (b["layer"]["cases"].as_array().into_iter().flatten())
            .find(|case| case["rows"] == 1)
            .with_context(|| format!("{}: no one-row layer case", backends.display()))?;
        let layer_ms = median(samples(&one["native_ms"], "native_ms", backends)?);
        let read_bandwidth_gbs = bw.median;
        let role_ms_here = LAYERS_PER_ROLE as f64 * layer_ms;
        let role_ms_target = role_ms_here * read_bandwidth_gbs / target_bandwidth_gbs;
        let paper_role_ms = 1e3
            * median(
                (0..paper.roles())
                    .map(|r| paper.costs.seconds(r, 1, false))
                    .collect(),
            );
        Ok(KernelScaling {
            ceilings: ceilings.display().to_string(),
            backends: backends.display().to_string(),
            threads,
            layer_ms,
            read_bandwidth_gbs,
            target_bandwidth_gbs,
            load_average: vec![
                b["load_average_start"].clone(),
                c["host"]["load_average"].clone(),
            ],
            role_ms_here,
            role_ms_target,
            paper_role_ms,
            factor: role_ms_target / paper_role_ms,
        })
    }
}

/// One predicted fleet: its curve (in `Level`, the reference being the paper-calibrated baseline).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Scenario {
    pub name: String,
    pub roles: usize,
    pub what: String,
    pub levels: Vec<Level>,
    /// Single-stream chain latency L and inter-frame interval T, seconds.
    pub chain_latency_s: f64,
    pub frame_interval_s: f64,
    /// (a, S) pairs.
    pub speculation_gain: Vec<(f64, f64)>,
    /// How the costs were scaled, for `our-kernels-paper-bandwidth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling: Option<KernelScaling>,
}

/// Every role cut in `k`: each part costs 1/k of the role's frame (its share of the layers).
pub fn split_into(costs: &Costs, k: usize) -> Costs {
    let part = |v: &[super::costs::Curve]| -> Vec<super::costs::Curve> {
        v.iter()
            .flat_map(|c| std::iter::repeat_n(c.scaled(1.0 / k as f64), k))
            .collect()
    };
    Costs {
        shared: part(&costs.shared),
        alone: part(&costs.alone),
    }
}

/// L: the token interval of a lone one-token-prompt stream in steady state.
fn chain_latency(m: &FleetModel) -> Result<f64> {
    let mut sim = Sim::new(m.clone());
    let out = sim.cohort(&[Request {
        offset_s: 0.0,
        prompt_tokens: 1,
        max_tokens: 8,
    }])?;
    let t = &out[0].tokens;
    Ok((t[t.len() - 1] - t[1]) / (t.len() - 2) as f64)
}

/// T: the slowest role's one-row frame plus one hop (a gigabit row).
fn frame_interval(m: &FleetModel) -> f64 {
    let row = (16 + 4 * m.hidden) as f64 * 8.0;
    let hop = m.hop_s + m.link_latency_s + m.link_rate_bps.map_or(0.0, |r| row / r);
    (0..m.roles())
        .map(|r| m.costs.seconds(r, 1, false) + m.hop_cpu_s)
        .fold(0.0, f64::max)
        + hop
}

/// Run one scenario against the baseline curve.
pub fn scenario(
    name: &str,
    what: &str,
    m: &FleetModel,
    baseline: &[Level],
    plan: &Plan,
    lengths: &PromptLengths,
) -> Result<Scenario> {
    let (_, curve) = tables(&simulate_plan(m, plan, lengths)?)?;
    let levels = baseline
        .iter()
        .map(|b| {
            let s = curve.iter().find(|s| s.concurrency == b.concurrency);
            Level {
                concurrency: b.concurrency,
                held_out: true,
                q_decode_measured: b.q_decode_simulated,
                q_decode_simulated: s.and_then(|s| s.q_decode_mean),
                ttft_median_measured: b.ttft_median_simulated,
                ttft_median_simulated: s.and_then(|s| s.ttft_median_s),
            }
        })
        .collect();
    let l = chain_latency(m)?;
    let t = frame_interval(m);
    Ok(Scenario {
        name: name.into(),
        roles: m.roles(),
        what: what.into(),
        levels,
        chain_latency_s: l,
        frame_interval_s: t,
        speculation_gain: ACCEPTED
            .iter()
            .map(|&a| (a, l / (a * t + (1.0 - a) * l)))
            .collect(),
        scaling: None,
    })
}

/// The scenarios: the paper-calibrated model on 10 GbE and cut into 22 roles, and our local costs
/// on eleven machines of their own; with `scaling`, the paper's fleet on our kernels.
pub fn scenarios(
    paper: &FleetModel,
    ours: &FleetModel,
    scaling: Option<KernelScaling>,
    baseline: &[Level],
    lengths: &PromptLengths,
) -> Result<Vec<Scenario>> {
    let plan = Plan::load("paper")?;
    let mut out = Vec::new();
    out.push(scenario(
        "paper-1gbe",
        "the paper-calibrated model: 11 machines, gigabit links (the baseline)",
        paper,
        baseline,
        &plan,
        lengths,
    )?);
    let mut ten = paper.clone();
    ten.link_rate_bps = Some(RATE_10GBE_BPS);
    ten.link_latency_s = LATENCY_10GBE_S;
    out.push(scenario(
        "paper-10gbe",
        "the same roles on 10 GbE (0.05 ms one way, assumed)",
        &ten,
        baseline,
        &plan,
        lengths,
    )?);
    let mut split = paper.clone();
    split.costs = split_into(&paper.costs, 2);
    split.groups = split.costs.roles();
    split.max_inflight = 2 * split.groups + 2;
    out.push(scenario(
        "paper-22-roles",
        "every role cut in two (three layers each, half the frame cost), 22 machines, gigabit",
        &split,
        baseline,
        &plan,
        lengths,
    )?);
    let mut own = ours.clone();
    own.cores = None;
    own.background = 0.0;
    own.link_rate_bps = Some(super::network::RATE_BPS);
    own.link_latency_s = super::network::LATENCY_S;
    out.push(scenario(
        "ours-11-machines",
        "our inkling-mini per-frame costs measured here, each role on a machine of its own, gigabit",
        &own,
        baseline,
        &plan,
        lengths,
    )?);
    if let Some(k) = scaling {
        let mut theirs = paper.clone();
        theirs.costs = paper.costs.scaled(k.factor);
        let mut s = scenario(
            "our-kernels-paper-bandwidth",
            &format!(
                "the paper's fleet, each role's frame costing six inkling MoE layers on our kernels \
                 ({:.1} ms here) at {:.0} GB/s instead of our {:.1} GB/s: x{:.2} the paper's costs",
                k.role_ms_here, k.target_bandwidth_gbs, k.read_bandwidth_gbs, k.factor
            ),
            &theirs,
            baseline,
            &plan,
            lengths,
        )?;
        s.scaling = Some(k);
        out.push(s);
    }
    Ok(out)
}

/// The scenarios as a Markdown table (Q_decode and TTFT median per level, L, T and S).
pub fn markdown(sc: &[Scenario]) -> String {
    let mut s = String::from("| C |");
    for x in sc {
        s += &format!(" {} Q_decode | TTFT median (s) |", x.name);
    }
    s += "\n|---:|";
    s += &"---:|---:|".repeat(sc.len());
    s += "\n";
    let n = sc.first().map_or(0, |x| x.levels.len());
    for i in 0..n {
        s += &format!("| {} |", sc[0].levels[i].concurrency);
        for x in sc {
            let l = &x.levels[i];
            let f = |v: Option<f64>, d: usize| v.map_or("–".into(), |v| format!("{v:.d$}"));
            s += &format!(
                " {} | {} |",
                f(l.q_decode_simulated, 1),
                f(l.ttft_median_simulated, 2)
            );
        }
        s += "\n";
    }
    s += "\n";
    s += &gains_md(sc);
    s
}

/// Q_decode of every scenario at some levels (docs/RESULTS.md's short form), then [`gains_md`].
pub fn summary_md(sc: &[Scenario], levels: &[usize]) -> String {
    let mut s = String::from("| C |");
    for x in sc {
        s += &format!(" {} |", x.name);
    }
    s += "\n|---:|";
    s += &"---:|".repeat(sc.len());
    s += "\n";
    for &c in levels {
        s += &format!("| {c} |");
        for x in sc {
            let q = x
                .levels
                .iter()
                .find(|l| l.concurrency == c)
                .and_then(|l| l.q_decode_simulated);
            s += &format!(" {} |", q.map_or("–".into(), |v| format!("{v:.1}")));
        }
        s += "\n";
    }
    s + "\n" + &gains_md(sc)
}

/// Each scenario's single-stream chain latency L, frame interval T and speculation's first-order
/// gain S, as a Markdown table.
pub fn gains_md(sc: &[Scenario]) -> String {
    let mut s = String::from("| scenario | roles | what | L (ms) | T (ms) |");
    for a in ACCEPTED {
        s += &format!(" S at a = {a} |");
    }
    s += "\n|---|---:|---|---:|---:|";
    s += &"---:|".repeat(ACCEPTED.len());
    s += "\n";
    for x in sc {
        s += &format!(
            "| {} | {} | {} | {:.1} | {:.1} |",
            x.name,
            x.roles,
            x.what,
            1e3 * x.chain_latency_s,
            1e3 * x.frame_interval_s
        );
        for (_, g) in &x.speculation_gain {
            s += &format!(" {g:.2}× |");
        }
        s += "\n";
    }
    s
}

#[cfg(test)]
mod tests {
    use super::super::costs::Curve;
    use super::*;

    fn paper(role_s: &[f64]) -> FleetModel {
        let curve = |s: f64| Curve {
            points: vec![(1.0, s), (8.0, 4.0 * s)],
        };
        FleetModel {
            costs: Costs {
                shared: role_s.iter().map(|&s| curve(s)).collect(),
                alone: vec![Curve::default(); role_s.len()],
            },
            cores: None,
            hop_s: 0.0,
            hop_cpu_s: 0.0,
            background: 0.0,
            time_slice_s: 0.003,
            link_rate_bps: None,
            link_latency_s: 0.0,
            hidden: 6144,
            slots: 176,
            groups: role_s.len(),
            window: 8,
            max_inflight: 2 * role_s.len() + 2,
        }
    }

    fn write(dir: &Path, bw_threads: u64, layer_threads: u64, preset: &str) {
        let ceilings = serde_json::json!({
            "host": {"load_average": [1.0, 1.0, 1.0]},
            "measurements": {
                "read_bandwidth_all": {"threads": bw_threads, "median": 20.0},
                "fma_rate_all": {"threads": bw_threads, "median": 200.0}
            }
        });
        let backends = serde_json::json!({
            "threads": layer_threads,
            "load_average_start": [1.0, 1.0, 1.0],
            "layer": {"preset": preset, "cases": [
                {"rows": 2, "native_ms": [99.0]},
                {"rows": 1, "native_ms": [12.0, 10.0, 11.0]}
            ]}
        });
        std::fs::write(dir.join("c.json"), ceilings.to_string()).unwrap();
        std::fs::write(dir.join("b.json"), backends.to_string()).unwrap();
    }

    #[test]
    fn kernel_costs_scale_by_bandwidth_onto_the_paper_roles() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), 2, 2, "inkling");
        let m = paper(&[0.030, 0.033, 0.036]);
        let k = KernelScaling::measure(dir.path(), "c.json".as_ref(), "b.json".as_ref(), 100.0, &m)
            .unwrap();
        // medians: an 11 ms layer, 20 GB/s; six layers at 100 GB/s: 66 * 20 / 100 = 13.2 ms,
        // against the middle role's 33 ms
        assert_eq!((k.layer_ms, k.read_bandwidth_gbs), (11.0, 20.0));
        assert!((k.role_ms_target - 13.2).abs() < 1e-12, "{k:?}");
        assert!((k.paper_role_ms - 33.0).abs() < 1e-12);
        assert!((k.factor - 0.4).abs() < 1e-12);
        // the scaled model keeps the paper's growth with rows
        let scaled = m.costs.scaled(k.factor);
        assert!((scaled.seconds(1, 8, false) - 4.0 * 0.033 * 0.4).abs() < 1e-12);
    }

    #[test]
    fn kernel_records_must_agree_and_be_of_the_full_preset() {
        let m = paper(&[0.03]);
        for (bw, layer, preset) in [(1, 2, "inkling"), (2, 2, "inkling-mini")] {
            let dir = tempfile::tempdir().unwrap();
            write(dir.path(), bw, layer, preset);
            let e =
                KernelScaling::measure(dir.path(), "c.json".as_ref(), "b.json".as_ref(), 100.0, &m);
            assert!(e.is_err(), "{bw} {layer} {preset}");
        }
        let dir = tempfile::tempdir().unwrap();
        let e = KernelScaling::measure(dir.path(), "c.json".as_ref(), "b.json".as_ref(), 100.0, &m)
            .unwrap_err();
        assert!(format!("{e:#}").contains("reading"), "{e:#}");
    }
}
