//! Link emulation, measured (`moefleet-harness links`): the kernel's `tbf` shaper on a veth pair
//! between two network namespaces (`scripts/link_tbf.sh`), tabulated against the time a frame
//! should take at the shaped rate, and the 11-role fleet's curve with and without the engine's own
//! emulated links (`scripts/link_emulation.sh`), side by side.

pub mod recheck;
pub mod unit;

use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// One frame size across the veth pair, unshaped and shaped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TbfRow {
    pub bytes: usize,
    /// Median round trip minus the median round trip of a one-byte frame, milliseconds.
    pub veth_ms: f64,
    pub tbf_ms: f64,
    /// bytes × 8 / rate, milliseconds.
    pub expected_ms: f64,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// Parse a rate as tc writes it (`1gbit`, `100mbit`).
fn rate_bps(s: &str) -> Result<f64> {
    moefleet_engine::pipeline::emulation::parse_rate(s).map_err(anyhow::Error::msg)
}

/// The tbf table of a `scripts/link_tbf.sh` directory.
pub fn tbf_rows(dir: &Path) -> Result<Vec<TbfRow>> {
    let read = |f: &str| -> Result<serde_json::Value> {
        let p = dir.join(f);
        let t = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        Ok(serde_json::from_str(&t)?)
    };
    let (veth, tbf, link) = (read("veth.json")?, read("tbf.json")?, read("link.json")?);
    let rate = rate_bps(link["rate"].as_str().context("link.json: no rate")?)?;
    let times = |v: &serde_json::Value, k: &str| -> Result<f64> {
        let mut t: Vec<f64> = v[k]
            .as_array()
            .with_context(|| format!("no samples for {k} bytes"))?
            .iter()
            .filter_map(|x| x.as_f64())
            .collect();
        anyhow::ensure!(!t.is_empty(), "no samples for {k} bytes");
        Ok(median(&mut t))
    };
    let (v1, t1) = (times(&veth, "1")?, times(&tbf, "1")?);
    let mut sizes: Vec<usize> = veth
        .as_object()
        .context("veth.json is not an object")?
        .keys()
        .filter_map(|k| k.parse().ok())
        .filter(|&n: &usize| n > 1)
        .collect();
    sizes.sort_unstable();
    sizes
        .into_iter()
        .map(|n| {
            let k = n.to_string();
            Ok(TbfRow {
                bytes: n,
                veth_ms: 1e3 * (times(&veth, &k)? - v1),
                tbf_ms: 1e3 * (times(&tbf, &k)? - t1),
                expected_ms: 1e3 * n as f64 * 8.0 / rate,
            })
        })
        .collect()
}

pub fn tbf_markdown(rows: &[TbfRow]) -> String {
    let mut s = String::from(
        "| frame bytes | veth, unshaped (ms) | veth + tbf (ms) | tbf − unshaped (ms) | bytes × 8 / rate (ms) |\n|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        s += &format!(
            "| {} | {:.3} | {:.3} | {:.3} | {:.3} |\n",
            r.bytes,
            r.veth_ms,
            r.tbf_ms,
            r.tbf_ms - r.veth_ms,
            r.expected_ms
        );
    }
    s
}

/// One configuration of `scripts/link_emulation.sh` at one level.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FleetRow {
    pub config: String,
    pub concurrency: usize,
    pub q_decode: Option<f64>,
    pub ttft_median_s: Option<f64>,
}

/// The configurations of a `scripts/link_emulation.sh` directory (subdirectories holding a
/// sweep), each re-analysed from its traces.
pub fn fleet_rows(dir: &Path) -> Result<Vec<FleetRow>> {
    let mut configs: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.join("phases.jsonl").exists())
        .collect();
    configs.sort();
    // loopback first, then the emulated links by name
    configs.sort_by_key(|p| !p.ends_with("loopback"));
    let mut rows = Vec::new();
    for c in configs {
        let run = crate::analysis::tables::load_run(&c)?;
        let (_, curve) = crate::analysis::tables::tables(&run)?;
        let name = c
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("?")
            .to_string();
        rows.extend(curve.into_iter().map(|r| FleetRow {
            config: name.clone(),
            concurrency: r.concurrency,
            q_decode: r.q_decode_mean,
            ttft_median_s: r.ttft_median_s,
        }));
    }
    anyhow::ensure!(!rows.is_empty(), "{}: no sweep under it", dir.display());
    Ok(rows)
}

pub fn fleet_markdown(rows: &[FleetRow]) -> String {
    let f = |v: Option<f64>, d: usize| v.map_or("–".into(), |x| format!("{x:.d$}"));
    let base = |c: usize| {
        rows.iter()
            .find(|r| r.concurrency == c)
            .and_then(|r| r.q_decode)
    };
    let mut s = String::from(
        "| links | C | Q_decode (tok/s) | vs the first | TTFT median (s) |\n|---|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let ratio = match (r.q_decode, base(r.concurrency)) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
            _ => "–".into(),
        };
        s += &format!(
            "| {} | {} | {} | {} | {} |\n",
            r.config,
            r.concurrency,
            f(r.q_decode, 1),
            ratio,
            f(r.ttft_median_s, 3)
        );
    }
    s
}
