//! `context-fit`: from the scans and probes under ROOT to `fit.json`, `fit.csv` and a short text
//! summary: per scan the `aN + bN²` fit, `1/a`, `b`, predicted TTFT at 128k, 256k and 1M positions
//! and the implied attention rate (formula in `fit`); per probe the attention slope and rate.

use std::path::Path;

use anyhow::{bail, Context};
use moefleet_engine::model::config::{ModelConfig, PRESET_NAMES};
use serde::Serialize;

use super::fit::{fit_linear_quadratic, slope, AttentionCost, QuadFit};
use super::inputs::{Inputs, Probe, Scan};

/// Positions the fit predicts TTFT at.
pub const PREDICT_AT: [(usize, &str); 3] =
    [(131_072, "128k"), (262_144, "256k"), (1_048_576, "1m")];

/// Operator choices for `context-fit`.
#[derive(Clone, Debug, Default)]
pub struct FitOptions {
    /// Model preset for the FLOP count (else each scan's `context_run.json` model).
    pub preset: Option<String>,
    /// Roles of the scanned server (else each scan's `context_run.json`).
    pub roles: Option<usize>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Prediction {
    pub positions: usize,
    pub label: &'static str,
    pub ttft_s: f64,
    pub ttft_h: f64,
}

/// The fit of one scan.
#[derive(Clone, Debug, Serialize)]
pub struct ScanFit {
    pub scan: String,
    pub description: String,
    pub dir: String,
    pub model: Option<String>,
    /// Single-stream points the fit used.
    pub points: usize,
    pub prompt_tokens: Vec<f64>,
    pub fit: Option<QuadFit>,
    pub fit_error: Option<String>,
    pub linear_tok_s: Option<f64>,
    pub b_s_per_token2: Option<f64>,
    pub predicted: Vec<Prediction>,
    pub attention: Option<AttentionCost>,
    pub attn_gflops_per_layer: Option<f64>,
    pub attn_gflops_all_layers: Option<f64>,
    pub attention_note: Option<String>,
    /// Roles the measured decode time is divided by (None: unknown, not divided).
    pub roles: Option<usize>,
}

/// One probe's summary.
#[derive(Clone, Debug, Serialize)]
pub struct ProbeSummary {
    pub probe: String,
    pub path: String,
    /// Preset of the FLOP count (the probe's own `probe.json`, else --preset or the scans').
    pub preset: Option<String>,
    pub attention: Option<String>,
    pub contexts: usize,
    /// Slope of median attention ms against context over the sizes every role fits, per 1k.
    pub attn_ms_per_1k_positions: Option<f64>,
    /// `(context, GFLOP/s)`: `flops_per_key · context / attn_s` per role and token.
    pub attn_gflops: Vec<(f64, f64)>,
}

#[derive(Clone, Debug, Serialize)]
pub struct FitReport {
    pub record: &'static str,
    pub formula: String,
    pub scans: Vec<ScanFit>,
    pub probes: Vec<ProbeSummary>,
    pub problems: Vec<String>,
}

/// The model config named by `name`, or a note saying why there is none.
fn resolve(name: Option<&str>) -> Result<AttentionCost, String> {
    let Some(name) = name else {
        return Err("no model named (no context_run.json and no --preset)".to_string());
    };
    ModelConfig::preset(name)
        .map(|c| AttentionCost::of(&c))
        .map_err(|_| {
            format!(
                "model '{name}' is not a preset ({}); pass --preset",
                PRESET_NAMES.join(", ")
            )
        })
}

pub fn fit_scan(scan: &Scan, opts: &FitOptions) -> ScanFit {
    let pts = scan.single_stream();
    let fit = fit_linear_quadratic(&pts);
    let named = opts.preset.as_deref().or(scan.model.as_deref());
    let cost = resolve(named);
    let good = fit.as_ref().ok().copied();
    let b = good.map(|f| f.b);
    let rate = |g: fn(&AttentionCost, f64) -> f64| match (&cost, b) {
        (Ok(c), Some(b)) if b > 0.0 => Some(g(c, b)),
        _ => None,
    };
    let attention_note = match (&cost, b) {
        (Err(e), _) => Some(e.clone()),
        (Ok(_), Some(b)) if b <= 0.0 => Some("b <= 0: no quadratic term to attribute".to_string()),
        _ => None,
    };
    ScanFit {
        scan: scan.label.clone(),
        description: scan.description(),
        dir: scan.dir.display().to_string(),
        model: scan.model.clone(),
        points: pts.len(),
        prompt_tokens: pts.iter().map(|p| p.0).collect(),
        fit: good,
        fit_error: fit.err().map(|e| e.to_string()),
        linear_tok_s: good.map(|f| f.linear_tok_s()),
        b_s_per_token2: b,
        predicted: good
            .map(|f| {
                PREDICT_AT
                    .iter()
                    .map(|&(n, label)| Prediction {
                        positions: n,
                        label,
                        ttft_s: f.ttft_s(n as f64),
                        ttft_h: f.ttft_s(n as f64) / 3600.0,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        attn_gflops_per_layer: rate(AttentionCost::gflops_per_layer),
        attn_gflops_all_layers: rate(AttentionCost::gflops_all_layers),
        attention: cost.ok(),
        attention_note,
        roles: opts.roles.or(scan.roles),
    }
}

pub fn summarize_probe(p: &Probe, cost: Option<&AttentionCost>) -> ProbeSummary {
    let full: Vec<(f64, f64)> = p
        .rows
        .iter()
        .filter(|r| r.boxes_fit.is_some() && r.boxes_fit == r.boxes_reporting)
        .filter_map(|r| Some((r.context, r.attn_ms_median?)))
        .collect();
    ProbeSummary {
        probe: p.label.clone(),
        path: p.path.display().to_string(),
        preset: cost.map(|c| c.preset.clone()),
        attention: p.attention.clone(),
        contexts: p.rows.len(),
        attn_ms_per_1k_positions: slope(&full).map(|s| s * 1000.0),
        attn_gflops: match cost {
            Some(c) => p
                .rows
                .iter()
                .filter_map(|r| {
                    let ms = r.attn_ms_median.filter(|m| *m > 0.0)?;
                    Some((r.context, c.flops_per_key * r.context / (ms / 1000.0) / 1e9))
                })
                .collect(),
            None => Vec::new(),
        },
    }
}

/// Fit every scan and summarise every probe; fails only if ROOT holds neither.
pub fn build(inputs: &Inputs, opts: &FitOptions) -> anyhow::Result<FitReport> {
    if inputs.scans.is_empty() && inputs.probes.is_empty() {
        let mut msg = "found no inputs: expected scan-serial/context.csv, scan-parallel/context.csv (from `moefleet-harness context`) or probe-*/context_probe.csv (`moefleet probe`, tabled by `moefleet-harness probe`)".to_string();
        for p in &inputs.problems {
            msg.push_str(&format!("\n  unreadable: {p}"));
        }
        bail!(msg);
    }
    if let Some(p) = &opts.preset {
        ModelConfig::preset(p).with_context(|| format!("--preset {p}"))?;
    }
    if opts.roles == Some(0) {
        bail!("--roles must be at least 1");
    }
    let scans: Vec<ScanFit> = inputs.scans.iter().map(|s| fit_scan(s, opts)).collect();
    // a probe's own probe.json names what it measured; else --preset; else the first scan's
    let fallback_cost = match &opts.preset {
        Some(p) => resolve(Some(p)).ok(),
        None => scans.iter().find_map(|s| s.attention.clone()),
    };
    let probe_cost = |p: &Probe| match &p.preset {
        Some(name) => resolve(Some(name)).ok(),
        None => fallback_cost.clone(),
    };
    let formula = scans
        .iter()
        .find_map(|s| s.attention.clone())
        .or_else(|| fallback_cost.clone())
        .as_ref()
        .map(AttentionCost::formula)
        .unwrap_or_else(|| "flops_per_key = 2*2*n_q_heads*head_dim; one global layer does flops_per_key*N^2/2 in a causal prefill; attn_gflops_per_layer = flops_per_key/(2b)/1e9; attn_gflops_all_layers = n_global * that".to_string());
    Ok(FitReport {
        record: "context_fit",
        formula,
        probes: inputs
            .probes
            .iter()
            .map(|p| summarize_probe(p, probe_cost(p).as_ref()))
            .collect(),
        scans,
        problems: inputs.problems.clone(),
    })
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.filter(|x| x.is_finite()).map(f).unwrap_or_default()
}

/// `fit.csv`: one row per scan.
pub fn render_csv(r: &FitReport) -> String {
    let mut s = String::from("scan,model,points,a_s_per_token,linear_tok_s,b_s_per_token2,ttft_128k_s,ttft_256k_s,ttft_1m_s,ttft_128k_h,ttft_256k_h,ttft_1m_h,flops_per_key,n_global_layers,attn_gflops_per_layer,attn_gflops_all_layers\n");
    for f in &r.scans {
        // with b ≤ 0 the quadratic term is not resolved: no extrapolated predictions
        let resolved = f.b_s_per_token2.is_some_and(|b| b > 0.0);
        let pred = |i: usize| f.predicted.get(i).filter(|_| resolved);
        let cells = [
            f.scan.clone(),
            f.model.clone().unwrap_or_default(),
            f.points.to_string(),
            opt(f.fit.map(|q| q.a), |x| format!("{x:.6e}")),
            opt(f.linear_tok_s, |x| format!("{x:.2}")),
            opt(f.b_s_per_token2, |x| format!("{x:.4e}")),
            opt(pred(0).map(|p| p.ttft_s), |x| format!("{x:.1}")),
            opt(pred(1).map(|p| p.ttft_s), |x| format!("{x:.1}")),
            opt(pred(2).map(|p| p.ttft_s), |x| format!("{x:.1}")),
            opt(pred(0).map(|p| p.ttft_h), |x| format!("{x:.3}")),
            opt(pred(1).map(|p| p.ttft_h), |x| format!("{x:.3}")),
            opt(pred(2).map(|p| p.ttft_h), |x| format!("{x:.3}")),
            opt(f.attention.as_ref().map(|c| c.flops_per_key), |x| {
                format!("{x:.0}")
            }),
            f.attention
                .as_ref()
                .map(|c| c.n_global_layers.to_string())
                .unwrap_or_default(),
            opt(f.attn_gflops_per_layer, |x| format!("{x:.3}")),
            opt(f.attn_gflops_all_layers, |x| format!("{x:.3}")),
        ];
        s.push_str(&cells.join(","));
        s.push('\n');
    }
    s
}

/// A few lines for the terminal.
pub fn render_text(r: &FitReport) -> String {
    let mut s = String::new();
    for f in &r.scans {
        s.push_str(&format!(
            "scan {} ({} single-stream points)\n",
            f.description, f.points
        ));
        match (&f.fit, &f.fit_error) {
            (Some(q), _) => {
                s.push_str(&format!(
                    "  T(N) = aN + bN^2: 1/a = {:.1} tok/s, b = {:.3e} s\n",
                    q.linear_tok_s(),
                    q.b
                ));
                for p in &f.predicted {
                    s.push_str(&format!(
                        "  predicted TTFT at {:>4} ({} positions): {:.0} s = {:.2} h\n",
                        p.label, p.positions, p.ttft_s, p.ttft_h
                    ));
                }
            }
            (None, Some(e)) => s.push_str(&format!("  no fit: {e}\n")),
            (None, None) => {}
        }
        match (f.attn_gflops_per_layer, f.attn_gflops_all_layers, &f.attention_note) {
            (Some(l), Some(a), _) => s.push_str(&format!(
                "  implied attention rate: {l:.3} GFLOP/s per global layer (paper's convention), {a:.3} GFLOP/s over all {} global layers\n",
                f.attention.as_ref().map_or(0, |c| c.n_global_layers)
            )),
            (_, _, Some(n)) => s.push_str(&format!("  implied attention rate: none ({n})\n")),
            _ => {}
        }
    }
    for p in &r.probes {
        s.push_str(&format!(
            "probe {}: {} contexts, attention {} ms per 1k positions\n",
            p.probe,
            p.contexts,
            opt(p.attn_ms_per_1k_positions, |x| format!("{x:.2}"))
        ));
    }
    s.push_str(&format!("formula: {}\n", r.formula));
    for p in &r.problems {
        s.push_str(&format!("skipped unreadable input: {p}\n"));
    }
    s
}

/// A committed `context-fit` output and the options it was made with (claims.toml's
/// `context_fits`).
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitRun {
    /// The directory `context-fit` ran over, relative to the repository root.
    pub dir: String,
    #[serde(default)]
    pub preset: Option<String>,
    #[serde(default)]
    pub roles: Option<usize>,
}

/// `verify`: fit the scans and probes under `fit.dir` again (scans from their raw requests) and
/// compare with the committed `fit.csv` byte for byte and `fit.json` value for value (its paths
/// relative to `root`, as `context-fit` run from the root writes them); returns the files checked.
pub fn rederive_matches(root: &Path, fit: &FitRun) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let dir = root.join(&fit.dir);
    let opts = FitOptions {
        preset: fit.preset.clone(),
        roles: fit.roles,
    };
    let mut fresh = build(&super::inputs::discover(&dir)?, &opts)?;
    let rel = |p: &str| {
        Path::new(p)
            .strip_prefix(root)
            .map(|r| r.display().to_string())
            .unwrap_or_else(|_| p.to_string())
    };
    for s in &mut fresh.scans {
        s.dir = rel(&s.dir);
    }
    for p in &mut fresh.probes {
        p.path = rel(&p.path);
    }
    let csv = dir.join("fit.csv");
    let committed =
        std::fs::read_to_string(&csv).with_context(|| format!("reading {}", csv.display()))?;
    if committed != render_csv(&fresh) {
        bail!("fit.csv differs from a fresh fit of the scans' raw requests (edited by hand, or fitted from rounded tables?)");
    }
    crate::csv::check_twin(&csv)?;
    let json = dir.join("fit.json");
    let stored: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&json).with_context(|| format!("reading {}", json.display()))?,
    )
    .with_context(|| format!("parsing {}", json.display()))?;
    if !crate::recheck::same_json(&stored, &serde_json::to_value(&fresh)?) {
        bail!("fit.json differs from a fresh fit of the scans' raw requests");
    }
    Ok(vec![crate::csv::twin_of(&csv), csv, json])
}

/// Write `fit.json` and `fit.csv` into ROOT.
pub fn write(root: &Path, r: &FitReport) -> anyhow::Result<()> {
    let j = root.join("fit.json");
    crate::json::write(&j, r)?;
    let c = root.join("fit.csv");
    crate::csv::write(&c, &render_csv(r))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::context::inputs::{read_probe, read_scan};
    use std::path::PathBuf;

    fn paper_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../reproduction/paper")
    }

    /// The paper's own arithmetic (generated/context.tex) from its published context.csv and
    /// context_probe.csv, through the same code `context-fit` runs.
    #[test]
    fn reproduces_the_papers_context_arithmetic() {
        let scan = read_scan(&paper_dir(), "paper").unwrap();
        let opts = FitOptions {
            preset: Some("inkling".into()),
            roles: Some(11),
        };
        let f = fit_scan(&scan, &opts);
        assert_eq!(f.points, 7);
        // \CtxLinearRate{202}, \CtxQuadraticCoeff{1.51}, \CtxQuadraticGflops{11}
        assert_eq!(format!("{:.0}", f.linear_tok_s.unwrap()), "202");
        assert_eq!(format!("{:.2}", f.b_s_per_token2.unwrap() * 1e6), "1.51");
        assert_eq!(format!("{:.0}", f.attn_gflops_per_layer.unwrap()), "11");
        // \CtxPredictHoursOneTwoEightK{7.4}, TwoFiveSixK{29}, OneM{464}
        assert_eq!(format!("{:.1}", f.predicted[0].ttft_h), "7.4");
        assert_eq!(format!("{:.0}", f.predicted[1].ttft_h), "29");
        assert_eq!(format!("{:.0}", f.predicted[2].ttft_h), "464");
        // all eleven global layers' FLOPs in the same time: 11 x the per-layer rate
        let all = f.attn_gflops_all_layers.unwrap() / f.attn_gflops_per_layer.unwrap();
        assert!((all - 11.0).abs() < 1e-9);

        let probe = read_probe(&paper_dir().join("context_probe.csv"), "paper").unwrap();
        let p = summarize_probe(&probe, f.attention.as_ref());
        // \ProbeAttnSlope{2.8}, \ProbeAttnGflopsSixtyFourK{11}
        assert_eq!(format!("{:.1}", p.attn_ms_per_1k_positions.unwrap()), "2.8");
        let at64k = p.attn_gflops.iter().find(|g| g.0 == 65536.0).unwrap().1;
        assert_eq!(format!("{at64k:.0}"), "11");
    }

    #[test]
    fn outputs_hold_every_scan_and_say_why_a_rate_is_missing() {
        let scan = read_scan(&paper_dir(), "serial").unwrap();
        let unknown = Scan {
            label: "parallel".into(),
            model: Some("llama".into()),
            ..scan.clone()
        };
        let one_point = Scan {
            label: "tiny".into(),
            points: scan.points[..1].to_vec(),
            ..scan.clone()
        };
        let inputs = Inputs {
            scans: vec![scan, unknown, one_point],
            probes: vec![],
            problems: vec![],
        };
        let r = build(&inputs, &FitOptions::default()).unwrap();
        assert!(r.scans[0]
            .attention_note
            .as_deref()
            .unwrap()
            .contains("no model named"));
        assert!(r.scans[1]
            .attention_note
            .as_deref()
            .unwrap()
            .contains("not a preset"));
        assert!(r.scans[2]
            .fit_error
            .as_deref()
            .unwrap()
            .contains("two distinct"));
        let csv = render_csv(&r);
        assert_eq!(csv.lines().count(), 4);
        assert!(csv.lines().nth(3).unwrap().starts_with("tiny,,1,,"));
        let text = render_text(&r);
        assert!(text.contains("1/a = 201.9 tok/s"), "{text}");
        assert!(
            text.contains("formula: flops_per_key = 2*2*n_q_heads*head_dim"),
            "{text}"
        );
    }

    #[test]
    fn no_inputs_or_bad_options_are_clear_errors() {
        let e = build(&Inputs::default(), &FitOptions::default()).unwrap_err();
        assert!(e.to_string().contains("found no inputs"), "{e}");
        let inputs = Inputs {
            scans: vec![read_scan(&paper_dir(), "serial").unwrap()],
            ..Default::default()
        };
        let bad = FitOptions {
            preset: Some("inkling-huge".into()),
            roles: None,
        };
        assert!(format!("{:#}", build(&inputs, &bad).unwrap_err()).contains("unknown preset"));
    }
}
