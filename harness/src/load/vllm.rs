//! Runs in the JSON shape of `vllm bench serve --save-result` (docs/MEASUREMENTS.md §9), both
//! ways, so notebooks and dashboards built on that tool take our runs, and `compare` takes theirs.
//!
//! Export (`moefleet-harness export-vllm DIR`): one step's measured requests as vLLM writes them:
//! the run's settings (`model_id`, `num_prompts`, `request_rate`, `burstiness`,
//! `max_concurrency`), the totals and rates (`duration`, `completed`, `failed`, token counts,
//! `request_throughput`, `request_goodput`, `output_throughput`, `total_token_throughput`), the
//! per-request arrays (`input_lens`, `output_lens`, `ttfts`, `itls`, `start_times` on the run's
//! monotonic clock, `generated_texts`, `errors`; seconds) and `mean_`/`median_`/`std_`/`pNN_` of `ttft`, `tpot`,
//! `itl` and `e2el` in milliseconds. Our `itls` are per token (a chunk of k tokens gives k gaps of
//! g / k, §9), so each request's list sums to its decode time and has `output_len − 1` entries;
//! vLLM's own list has one gap per chunk, which is the same whenever a chunk carries one token.
//! A step with no arrival rate (all at once, or a trace's replay) has `request_rate` `"inf"`, as
//! vLLM writes an unset rate (JSON has no infinity; vLLM's own files say `Infinity`, which this
//! reader also takes). As vLLM counts them, a failed request's lengths are 0.
//!
//! Import (`compare A B`, either side a `.json` file): each request rebuilt as a trace record from
//! its `start_times` (or 0), `ttfts` and `itls` (its first token at the start plus the TTFT, then
//! one token per gap), failed where its `errors` entry is non-empty; the file's percentiles are
//! not read, every metric is recomputed from those arrays like ours. Such a request ends at its
//! last token (vLLM keeps no later time), so `compare` leaves end to end out for a file, and the
//! share meeting objectives too (the file states none).

use std::path::Path;

use anyhow::{bail, Context};
use moefleet_schema::TraceRecord;
use serde_json::{json, Map, Value};

use super::latency::{RequestLatency, Slo, Summary};
use super::rederive::Step;
use super::step::{Schedule, StepPlan};
use crate::stats::{mean, pstdev, quantile};

/// The percentiles written, as vLLM names them (`p99_ttft_ms`).
const PERCENTILES: [(&str, f64); 4] = [("50", 0.5), ("90", 0.9), ("95", 0.95), ("99", 0.99)];

/// One step in vLLM's shape; `model` names the served model.
pub fn export(s: &Step, model: &str) -> Value {
    let ok: Vec<&TraceRecord> = s.records.iter().filter(|r| r.error.is_none()).collect();
    let lat: Vec<RequestLatency> = ok.iter().map(|r| RequestLatency::of(r)).collect();
    let sum = &s.summary;
    let prompt = |r: &TraceRecord| {
        (r.usage.as_ref())
            .and_then(|u| u["prompt_tokens"].as_u64())
            .unwrap_or(0)
    };
    // as vLLM counts them: a failed request's tokens are 0 and count toward no total
    let prompt_ok = |r: &TraceRecord| if r.error.is_none() { prompt(r) } else { 0 };
    let input: u64 = s.records.iter().map(prompt_ok).sum();
    let rate = match &s.plan.schedule {
        Schedule::Arrivals(p) => json!(p.rate),
        Schedule::AtOnce | Schedule::Replay { .. } => json!("inf"),
    };
    let burstiness = match &s.plan.schedule {
        Schedule::Arrivals(p) => p.burstiness,
        _ => 1.0,
    };
    let mut doc = Map::new();
    let mut put = |k: &str, v: Value| {
        doc.insert(k.to_string(), v);
    };
    put("backend", json!("openai-chat"));
    put("endpoint_type", json!("openai-chat"));
    put("label", json!("moefleet-harness"));
    put("model_id", json!(model));
    put("tokenizer_id", json!(model));
    put("num_prompts", json!(s.records.len()));
    put("request_rate", rate);
    put("burstiness", json!(burstiness));
    put("max_concurrency", json!(s.plan.max_concurrency));
    put("duration", json!(sum.duration_s));
    put("completed", json!(ok.len()));
    put("failed", json!(sum.failed));
    put("total_input_tokens", json!(input));
    put("total_output_tokens", json!(sum.output_tokens));
    put("request_throughput", json!(sum.requests_per_s));
    let goodput = (s.plan.slo != Slo::default()).then_some(sum.goodput_requests_per_s);
    put("request_goodput", json!(goodput));
    put("output_throughput", json!(sum.output_tokens_per_s));
    let total = if sum.duration_s > 0.0 {
        (input + sum.output_tokens) as f64 / sum.duration_s
    } else {
        0.0
    };
    put("total_token_throughput", json!(total));
    let recs = &s.records;
    put(
        "input_lens",
        json!(recs.iter().map(prompt_ok).collect::<Vec<_>>()),
    );
    let output = |r: &TraceRecord| if r.error.is_none() { r.tokens() } else { 0 };
    put(
        "output_lens",
        json!(recs.iter().map(output).collect::<Vec<_>>()),
    );
    let mut per_request = lat.iter();
    let (mut ttfts, mut itls) = (Vec::new(), Vec::new());
    for r in recs {
        if r.error.is_some() {
            ttfts.push(0.0);
            itls.push(Vec::new());
        } else if let Some(l) = per_request.next() {
            ttfts.push(l.ttft.unwrap_or(0.0));
            itls.push(l.itl.clone());
        }
    }
    put("ttfts", json!(ttfts));
    put("itls", json!(itls));
    // on the run's monotonic clock, as vLLM's own (`time.perf_counter()`) are on its
    put(
        "start_times",
        json!(recs.iter().map(|r| r.started_mono).collect::<Vec<_>>()),
    );
    put(
        "generated_texts",
        json!(recs.iter().map(|r| r.text.as_str()).collect::<Vec<_>>()),
    );
    put(
        "errors",
        json!(recs
            .iter()
            .map(|r| r.error.clone().unwrap_or_default())
            .collect::<Vec<_>>()),
    );
    let series: [(&str, Vec<f64>); 4] = [
        ("ttft", lat.iter().filter_map(|l| l.ttft).collect()),
        ("tpot", lat.iter().filter_map(|l| l.tpot).collect()),
        (
            "itl",
            lat.iter().flat_map(|l| l.itl.iter().copied()).collect(),
        ),
        ("e2el", lat.iter().map(|l| l.e2e).collect()),
    ];
    for (name, xs) in series {
        let ms = |v: Option<f64>| json!(v.unwrap_or(0.0) * 1e3);
        put(&format!("mean_{name}_ms"), ms(mean(&xs)));
        put(&format!("median_{name}_ms"), ms(quantile(&xs, 0.5)));
        put(&format!("std_{name}_ms"), json!(pstdev(&xs) * 1e3));
        for (word, p) in PERCENTILES {
            put(&format!("p{word}_{name}_ms"), ms(quantile(&xs, p)));
        }
    }
    Value::Object(doc)
}

/// A number of a vLLM file that may be `inf` (as a string, or Python's bare `Infinity`).
fn rate_of(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) if matches!(s.as_str(), "inf" | "Infinity") => Some(f64::INFINITY),
        _ => None,
    }
}

/// A vLLM result file as a step (module header): its requests, no objectives.
pub fn import(path: &Path) -> anyhow::Result<Step> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    // Python's json module writes a bare Infinity for an unbounded rate: JSON has none (only that
    // key is rewritten; a generated text may say anything)
    let text = text
        .replace(
            "\"request_rate\": Infinity",
            "\"request_rate\": \"Infinity\"",
        )
        .replace("\"request_rate\":Infinity", "\"request_rate\":\"Infinity\"");
    let doc: Value = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a JSON document", path.display()))?;
    let array = |k: &str| -> anyhow::Result<&Vec<Value>> {
        doc[k].as_array().with_context(|| {
            format!(
                "{}: no `{k}` array (not a `vllm bench serve` result?)",
                path.display()
            )
        })
    };
    let (ttfts, itls) = (array("ttfts")?, array("itls")?);
    let n = ttfts.len();
    if itls.len() != n {
        bail!("{}: {} ttfts but {} itls", path.display(), n, itls.len());
    }
    let starts = doc["start_times"].as_array();
    let errors = doc["errors"].as_array();
    let texts = doc["generated_texts"].as_array();
    let mut records = Vec::with_capacity(n);
    for j in 0..n {
        let t0 = starts
            .and_then(|s| s.get(j))
            .and_then(Value::as_f64)
            .unwrap_or(0.0);
        let error = (errors.and_then(|e| e.get(j)).and_then(Value::as_str))
            .filter(|e| !e.is_empty())
            .map(str::to_string);
        let mut events = Vec::new();
        if error.is_none() {
            let ttft = ttfts[j]
                .as_f64()
                .with_context(|| format!("{}: ttfts[{j}] is not a number", path.display()))?;
            let mut t = t0 + ttft;
            events.push((t, 1));
            for g in itls[j].as_array().into_iter().flatten() {
                t += g
                    .as_f64()
                    .with_context(|| format!("{}: itls[{j}] holds a non-number", path.display()))?;
                events.push((t, 1));
            }
        }
        let end = events.last().map_or(t0, |e| e.0);
        records.push(TraceRecord {
            phase: "measure".into(),
            prompt_index: j,
            started: t0,
            started_mono: t0,
            events: events.clone(),
            events_mono: events,
            ended: end,
            ended_mono: end,
            text: (texts.and_then(|t| t.get(j)).and_then(Value::as_str))
                .unwrap_or_default()
                .to_string(),
            error,
            ..Default::default()
        });
    }
    let rate = rate_of(&doc["request_rate"]).filter(|r| r.is_finite());
    let plan: StepPlan = serde_json::from_value(json!({
        "schedule": match rate {
            Some(r) => json!({"kind": "arrivals", "process": "poisson", "rate": r,
                "rate_end": null, "burstiness": doc["burstiness"].as_f64().unwrap_or(1.0),
                "seed": 0}),
            None => json!({"kind": "at_once"}),
        },
        "requests": n, "warmup": 0,
        "max_tokens": doc["output_lens"].as_array().and_then(|a| a.iter().filter_map(Value::as_u64).max()).unwrap_or(0),
        "ignore_eos": false, "max_concurrency": doc["max_concurrency"].as_u64(),
        "family": null, "slo": {"ttft": null, "tpot": null, "e2e": null}, "saturation_s": null
    }))?;
    Ok(Step {
        dir: path.to_path_buf(),
        name: "run".into(),
        summary: Summary::of(&records, plan.slo),
        records,
        plan,
        saturated: false,
        imported: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step exported and read back gives every request's TTFT, per-token gaps and end, and so
    /// the same summary; vLLM's names are where its readers look for them.
    #[test]
    fn export_then_import_keeps_every_latency() {
        let records: Vec<TraceRecord> = (0..5)
            .map(|k| {
                let t0 = 100.0 + k as f64 * 0.5;
                let ev = vec![(t0 + 0.2, 1), (t0 + 0.26, 3), (t0 + 0.3, 1)];
                TraceRecord {
                    phase: "measure".into(),
                    started: t0,
                    started_mono: t0,
                    events: ev.clone(),
                    events_mono: ev,
                    ended: t0 + 0.3,
                    ended_mono: t0 + 0.3,
                    usage: Some(json!({"prompt_tokens": 7, "completion_tokens": 5})),
                    ..Default::default()
                }
            })
            .collect();
        let plan: StepPlan = serde_json::from_value(json!({
            "schedule": {"kind": "at_once"}, "requests": 5, "warmup": 0, "max_tokens": 5,
            "ignore_eos": true, "max_concurrency": 2, "family": null,
            "slo": {"ttft": 0.25, "tpot": null, "e2e": null}, "saturation_s": null
        }))
        .unwrap();
        let step = Step {
            dir: Default::default(),
            name: "run".into(),
            summary: Summary::of(&records, plan.slo),
            records,
            plan,
            saturated: false,
            imported: false,
        };
        let doc = export(&step, "m");
        assert_eq!(doc["completed"], 5);
        assert_eq!(doc["total_input_tokens"], 35);
        assert_eq!(doc["itls"][0].as_array().unwrap().len(), 4);
        assert!((doc["median_ttft_ms"].as_f64().unwrap() - 200.0).abs() < 1e-6);
        assert!((doc["p99_tpot_ms"].as_f64().unwrap() - 25.0).abs() < 1e-6);
        assert_eq!(doc["request_rate"], "inf");
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("vllm.json");
        // as Python writes an unbounded rate
        let text = doc
            .to_string()
            .replace("\"request_rate\":\"inf\"", "\"request_rate\": Infinity");
        std::fs::write(&p, text).unwrap();
        let back = import(&p).unwrap();
        let (a, b) = (&step.summary, &back.summary);
        for (x, y) in [
            (a.ttft, b.ttft),
            (a.tpot, b.tpot),
            (a.itl, b.itl),
            (a.e2e, b.e2e),
        ] {
            let (x, y) = (x.unwrap(), y.unwrap());
            assert!(
                (x.p50 - y.p50).abs() < 1e-9 && (x.max - y.max).abs() < 1e-9,
                "{x:?} {y:?}"
            );
        }
        assert_eq!(b.output_tokens, 25);
        std::fs::write(&p, "{}").unwrap();
        assert!(format!("{:#}", import(&p).unwrap_err()).contains("no `ttfts` array"));
    }
}
