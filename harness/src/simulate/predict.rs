//! Predictions for fleets that were never measured, each a replay of the paper's survey plan on a
//! changed model. They are predictions: nothing here was run on such a fleet.
//!
//! - `paper-1gbe`: the paper-calibrated model as compared with Table 4 (the baseline).
//! - `paper-10gbe`: the same roles on 10 GbE (`LATENCY_10GBE_S` one way, assumed).
//! - `paper-22-roles`: every role cut in two (each half three layers, half the per-frame cost, the
//!   same rows), 22 machines on gigabit links.
//! - `ours-11-machines`: our engine's per-frame costs as measured here (the local calibration,
//!   `inkling-mini`), each role on a machine of its own (no shared cores), gigabit links.
//!
//! Speculation's first-order gain (ARCHITECTURE.md §3.3): for a lone stream with chain latency L
//! (the simulated single-stream token interval) and inter-frame interval T (the slowest role's
//! one-row frame plus one hop), `S = L / (a T + (1 - a) L)` for a fraction `a` of positions whose
//! input was already in flight; the table gives S at several `a`.

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::costs::Costs;
use super::des::{FleetModel, Request, Sim};
use super::validate::Level;
use super::{simulate_plan, PromptLengths};
use crate::analysis::tables::tables;
use crate::workload::Plan;

pub const RATE_10GBE_BPS: f64 = 1e10;
pub const LATENCY_10GBE_S: f64 = 0.00005;
/// Fractions of positions already in flight at which the speculation gain is tabled.
pub const ACCEPTED: [f64; 4] = [0.25, 0.5, 0.75, 0.9];

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
    })
}

/// The scenarios: the paper-calibrated model on 10 GbE and cut into 22 roles, and our local costs
/// on eleven machines of their own.
pub fn scenarios(
    paper: &FleetModel,
    ours: &FleetModel,
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
    own.link_rate_bps = Some(super::paper::RATE_BPS);
    own.link_latency_s = super::paper::LATENCY_S;
    out.push(scenario(
        "ours-11-machines",
        "our inkling-mini per-frame costs measured here, each role on a machine of its own, gigabit",
        &own,
        baseline,
        &plan,
        lengths,
    )?);
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
    s += "\n| scenario | roles | what | L (ms) | T (ms) |";
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
