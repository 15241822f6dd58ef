//! The in-role context probe (MEASUREMENTS.md §3.1): for each context size, the memory one stream
//! needs against what is available (3 GiB margin), then — if it fits — one stream's caches really
//! filled to N positions, four timed single-row decode calls at position N (attention and MLP
//! split), the resident memory, and the pages freed again. The raw records go to
//! `probe-role-K.json`; the harness tables them (`moefleet-harness probe`).
//!
//! `build_role` instantiates one role at full shapes without its 975B of experts: each MoE layer
//! holds only the eight experts one row selects (six routed, fixed by the probe seed and made the
//! router's choice through the selection bias, plus the shared ones). A single-row MoE layer does
//! the same work whichever experts a row selects, so the timing is that of a real row.

use std::time::Instant;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::weights::{LayerWeights, MlpWeights};
use crate::model::{
    synth, ForwardOptions, ForwardTimings, Model, ModelConfig, ModelWeights, Segment, StreamState,
};
use crate::rng::Rng;

/// The probe's sizes (MEASUREMENTS.md §3.1).
pub const SIZES: [usize; 8] = [
    4096, 16_384, 65_536, 102_400, 131_072, 262_144, 524_288, 1_048_576,
];
/// Memory kept free beyond a stream's need.
pub const MARGIN_BYTES: u64 = 3 << 30;
/// Timed decode calls per size.
pub const CALLS: usize = 4;

/// One size on one role.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ProbeRecord {
    pub role: usize,
    pub context: usize,
    pub fits: bool,
    /// KV bytes one stream needs at this size on this role.
    pub need_bytes: u64,
    /// MemAvailable when the size was considered.
    pub avail_bytes: u64,
    /// Wall time of each decode call, ms (empty when it did not fit).
    pub decode_ms: Vec<f64>,
    pub attention_ms: Vec<f64>,
    pub mlp_ms: Vec<f64>,
    /// Resident set with the caches filled, and after they were freed.
    pub rss_filled_bytes: u64,
    pub rss_freed_bytes: u64,
    /// Seconds to allocate and fill the caches.
    pub fill_s: f64,
}

impl ProbeRecord {
    pub fn decode_median(&self) -> Option<f64> {
        median(&self.decode_ms)
    }
    pub fn attention_median(&self) -> Option<f64> {
        median(&self.attention_ms)
    }
    pub fn mlp_median(&self) -> Option<f64> {
        median(&self.mlp_ms)
    }
}

pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    Some(if s.len() % 2 == 1 {
        s[m]
    } else {
        0.5 * (s[m - 1] + s[m])
    })
}

/// Layers of role `role` when the model is cut into its preset's roles.
pub fn role_layers(c: &ModelConfig, role: usize) -> Result<std::ops::Range<usize>> {
    let roles = c.n_roles();
    if role >= roles {
        return Err(Error::Config(format!(
            "role {role} does not exist ({} has {roles} roles)",
            c.name
        )));
    }
    let per = c.n_layers / roles;
    Ok(role * per..(role + 1) * per)
}

/// Layer `l` at full shape; a MoE layer holds only the experts one row selects (drawn from the
/// seed) plus the shared ones, and its router's bias is raised so that every row selects them.
pub fn routed_layer(c: &ModelConfig, seed: u64, l: usize) -> Result<LayerWeights> {
    let mut rng = Rng::for_tensor(seed, l, "probe.route", 0);
    let mut routed: Vec<usize> = Vec::with_capacity(c.top_k);
    while routed.len() < c.top_k {
        let e = rng.below(c.n_routed as u64) as usize;
        if !routed.contains(&e) {
            routed.push(e);
        }
    }
    let mut keep = routed.clone();
    keep.extend(c.n_routed..c.n_experts_total());
    let mut w = synth::single_layer(c, seed, l, Some(&keep))?;
    if let MlpWeights::Moe { bias, .. } = &mut w.mlp {
        // make the router choose exactly the instantiated experts
        for &e in &routed {
            bias[e] += 1e3;
        }
    }
    Ok(w)
}

/// One role's layers at full shapes, MoE layers holding only the experts one row selects.
pub fn build_role(c: &ModelConfig, seed: u64, role: usize, opts: ForwardOptions) -> Result<Model> {
    let layers = role_layers(c, role)?;
    let out = layers
        .clone()
        .map(|l| routed_layer(c, seed, l))
        .collect::<Result<Vec<_>>>()?;
    let weights = ModelWeights {
        config: c.clone(),
        seed,
        layer_start: layers.start,
        layer_end: layers.end,
        embed: None,
        layers: out,
        head: None,
        checkpoint: None,
    };
    Ok(Model::new(weights, opts))
}

/// Memory facts from /proc.
pub fn mem_available() -> u64 {
    meminfo_kb("MemAvailable:").unwrap_or(0) * 1024
}

fn meminfo_kb(key: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    text.lines().find_map(|l| {
        l.strip_prefix(key)
            .and_then(|r| r.trim().trim_end_matches(" kB").trim().parse().ok())
    })
}

/// Resident set size of this process.
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// Probe `model` (any layer range) at each size; `progress` hears about each size as it ends.
pub fn run(
    model: &Model,
    role: usize,
    sizes: &[usize],
    seed: u64,
    mut progress: impl FnMut(&ProbeRecord),
) -> Result<Vec<ProbeRecord>> {
    let c = model.config();
    let h = c.hidden;
    let mut records = Vec::with_capacity(sizes.len());
    for &n in sizes {
        let need = StreamState::kv_bytes_at(c, model.layers(), n) as u64;
        let avail = mem_available();
        let mut rec = ProbeRecord {
            role,
            context: n,
            fits: need + MARGIN_BYTES <= avail,
            need_bytes: need,
            avail_bytes: avail,
            decode_ms: Vec::new(),
            attention_ms: Vec::new(),
            mlp_ms: Vec::new(),
            rss_filled_bytes: 0,
            rss_freed_bytes: 0,
            fill_s: 0.0,
        };
        if rec.fits {
            let t0 = Instant::now();
            let mut st = model.new_stream(n + CALLS + 1);
            st.fill_synthetic(n, seed ^ n as u64)?;
            rec.fill_s = t0.elapsed().as_secs_f64();
            rec.rss_filled_bytes = rss_bytes();
            let mut x0 = vec![0.0f32; h];
            Rng::new(seed).fill_sym(&mut x0, 1.0);
            for _ in 0..CALLS {
                let mut x = x0.clone();
                let mut t = ForwardTimings::default();
                let start = Instant::now();
                {
                    let mut segs = [Segment {
                        state: &mut st,
                        rows: 1,
                    }];
                    model.forward_timed(&mut segs, &mut x, &mut t)?;
                }
                rec.decode_ms.push(start.elapsed().as_secs_f64() * 1e3);
                rec.attention_ms.push(t.attention_ns as f64 / 1e6);
                rec.mlp_ms.push(t.mlp_ns as f64 / 1e6);
                st.truncate(n)?;
            }
            drop(st);
            rec.rss_freed_bytes = rss_bytes();
        }
        progress(&rec);
        records.push(rec);
    }
    Ok(records)
}

/// One line describing a size's outcome (progress output).
pub fn describe(r: &ProbeRecord) -> String {
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    match r.decode_median() {
        Some(d) => format!(
            "role {} {:>8} positions: need {:.2} GiB, decode {d:.1} ms (attention {:.1} ms), rss {:.2} GiB",
            r.role,
            r.context,
            gib(r.need_bytes),
            r.attention_median().unwrap_or(0.0),
            gib(r.rss_filled_bytes)
        ),
        None => format!(
            "role {} {:>8} positions: need {:.2} GiB + 3 GiB margin > {:.2} GiB available: skipped",
            r.role,
            r.context,
            gib(r.need_bytes),
            gib(r.avail_bytes)
        ),
    }
}

/// DIR/probe-role-K.json: the role's records with what was probed (`extra` adds fields).
pub fn write_role_record(
    dir: &std::path::Path,
    role: usize,
    model: &Model,
    records: &[ProbeRecord],
    extra: serde_json::Value,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut doc = serde_json::json!({
        "preset": model.config().name,
        "role": role,
        "layers": [model.layers().start, model.layers().end],
        "attention": model.opts.attention,
        "backend": model.opts.backend,
        "records": records,
    });
    if let (Some(d), Some(e)) = (doc.as_object_mut(), extra.as_object()) {
        d.extend(e.clone());
    }
    let path = dir.join(format!("probe-role-{role}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&doc)?)
        .with_context(|| format!("writing {}", path.display()))
}

/// The records of DIR/probe-role-*.json.
pub fn read_records(dir: &std::path::Path) -> anyhow::Result<Vec<ProbeRecord>> {
    let mut all = Vec::new();
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    for e in entries {
        let path = e?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !(name.starts_with("probe-role-") && name.ends_with(".json")) {
            continue;
        }
        let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path)?)
            .with_context(|| format!("parsing {}", path.display()))?;
        let recs: Vec<ProbeRecord> = serde_json::from_value(doc["records"].clone())
            .with_context(|| format!("{}: no probe records", path.display()))?;
        all.extend(recs);
    }
    if all.is_empty() {
        anyhow::bail!("no probe-role-*.json records in {}", dir.display());
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A filled stream has room for the probe's decode calls: writing the positions after the
    /// filled ones moves no global cache (else the first call would time a copy of all of it).
    #[test]
    fn a_filled_stream_grows_without_moving() {
        use crate::model::config::AttentionKind;
        let c = ModelConfig::preset("inkling-nano").unwrap();
        let mut st = StreamState::new(&c, 0..c.n_layers, 300);
        st.fill_synthetic(256, 1).unwrap();
        let g = st
            .layers
            .iter()
            .position(|l| l.kv.kind == AttentionKind::Global)
            .unwrap();
        let at = |st: &StreamState| st.layers[g].kv.blocks(0, 0, 0)[0].1.as_ptr();
        let before = at(&st);
        let width = st.layers[g].kv.n_kv * st.layers[g].kv.head_dim;
        let (k, v) = (vec![0.5f32; width], vec![0.25f32; width]);
        for p in 256..300 {
            st.layers[g].kv.write(p, &k, &v);
        }
        assert_eq!(at(&st), before, "the global cache moved to grow");
        assert_eq!(st.layers[g].kv.blocks(0, 299, 299)[0].1[0], 0.5);
    }

    #[test]
    fn nano_role_probe_fills_decodes_and_frees() {
        let c = ModelConfig::preset("inkling-nano").unwrap();
        let m = build_role(&c, 7, 1, ForwardOptions::default()).unwrap();
        let recs = run(&m, 1, &[300], 3, |_| {}).unwrap();
        let r = &recs[0];
        assert!(r.fits);
        assert_eq!(r.decode_ms.len(), CALLS);
        assert!(r.attention_ms.iter().all(|&a| a > 0.0));
        assert_eq!(
            r.need_bytes as usize,
            StreamState::kv_bytes_at(&c, role_layers(&c, 1).unwrap(), 300)
        );
        assert!(role_layers(&c, 2).is_err());
    }
}
