//! `moefleet-harness ceilings`: this machine's ceilings and how close the engine's kernels come.
//! Measures sustained read bandwidth and the fp32 FMA rate with one thread and with all threads,
//! then the engine's INT4 product at the `inkling` expert gate shape and its INT8 product at the
//! `inkling` attention q shape (one input row, weights streamed from memory) on all threads and on
//! a 1-thread rayon pool, each compared with the bandwidth of the same thread count; then (unless
//! turned off) greedy decode of a whole preset, as bytes a token reads per second against the same
//! bandwidths and against plain reads of the same bytes laid out as a token finds them
//! (`token_reads`): decode's share of the roofline (`decode`).
//! Writes `ceilings.json`; prints a table and one `... GB/s = ... % of measured read bandwidth`
//! line per product and thread count. Progress goes to stderr. `rederive` recomputes a record's
//! summaries and ratios from its samples for `verify`.

pub mod decode;
pub mod fma;
pub mod memory;
pub mod print;
pub mod products;
pub mod recheck;
pub mod rederive;
pub mod token_reads;
pub mod unit;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};

use crate::host::logical_cpus;
use crate::stats::Summary;
use moefleet_engine::kernels::IntPath;
pub use print::{lines, table};
use products::{Product, ProductTiming};

/// What to run.
pub struct CeilingsConfig {
    pub out: PathBuf,
    /// Size of the bandwidth buffer.
    pub buffer_bytes: usize,
    /// Timed passes over the buffer per thread count.
    pub passes: usize,
    /// Time spent calling each product per thread count.
    pub product_budget: Duration,
    /// The decode to set against the bandwidth (None: none).
    pub decode: Option<decode::DecodeConfig>,
}

/// A measured quantity: one value per sample, higher is better.
pub struct Measurement {
    /// Key in `ceilings.json` (`read_bandwidth_all`, `int4_expert_product_1t`, ...).
    pub key: String,
    pub label: String,
    pub unit: &'static str,
    pub threads: usize,
    pub samples: Vec<f64>,
    /// Extra fields of the record (shapes, bytes, per-call times, ratios).
    pub details: Value,
}

impl Measurement {
    pub fn summary(&self) -> anyhow::Result<Summary> {
        Summary::of(&self.samples).with_context(|| format!("{}: no valid samples", self.key))
    }

    pub(crate) fn to_json(&self) -> anyhow::Result<Value> {
        let s = self.summary()?;
        let mut v = json!({
            "label": self.label,
            "unit": self.unit,
            "threads": self.threads,
            "median": s.median,
            "best": s.max,
            "p10": s.p10,
            "p90": s.p90,
            "n": s.n,
            "samples": self.samples,
        });
        if let (Some(o), Value::Object(d)) = (v.as_object_mut(), &self.details) {
            o.extend(d.clone());
        }
        Ok(v)
    }
}

/// The product shapes of the experiment (ARCHITECTURE.md §2, preset `inkling`).
struct Shape {
    key: &'static str,
    /// Name in the printed lines.
    line: &'static str,
    rows: usize,
    cols: usize,
    int4: bool,
}

const SHAPES: [Shape; 2] = [
    Shape {
        key: "int4_expert_product",
        line: "INT4 expert product",
        rows: 3072,
        cols: 6144,
        int4: true,
    },
    Shape {
        key: "int8_attention_q_product",
        line: "INT8 attention q product",
        rows: 8192,
        cols: 6144,
        int4: false,
    },
];

/// Seconds of each of `passes` timed passes of `work` run on every item of `items` at once, one
/// thread per item, after one untimed pass: threads start each pass together (a barrier), and a
/// pass spans the first thread's start to the last thread's end (zero-length passes dropped).
pub(crate) fn timed_together<T: Sync>(
    items: &[T],
    passes: usize,
    work: impl Fn(&T) + Sync,
) -> Vec<f64> {
    let barrier = std::sync::Barrier::new(items.len());
    let spans: Vec<Vec<(std::time::Instant, std::time::Instant)>> = std::thread::scope(|s| {
        let handles: Vec<_> = items
            .iter()
            .map(|item| {
                let (barrier, work) = (&barrier, &work);
                s.spawn(move || {
                    (0..=passes)
                        .map(|_| {
                            barrier.wait();
                            let t0 = std::time::Instant::now();
                            work(item);
                            (t0, std::time::Instant::now())
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    (1..=passes)
        .filter_map(|k| {
            let start = spans.iter().filter_map(|t| t.get(k)).map(|t| t.0).min()?;
            let end = spans.iter().filter_map(|t| t.get(k)).map(|t| t.1).max()?;
            let s = (end - start).as_secs_f64();
            (s > 0.0).then_some(s)
        })
        .collect()
}

/// Decode of `dc`'s preset at each thread count, each just after the token-shaped reads of the
/// same thread count (uniform picks, then decode's own), `passes` passes of the reads.
fn decode_measurements(
    dc: &decode::DecodeConfig,
    counts: &[usize],
    passes: usize,
) -> anyhow::Result<Vec<Measurement>> {
    let mut ms = Vec::new();
    eprintln!(
        "ceilings: generating {} (synthetic, seed {}) to decode",
        dc.preset, dc.seed
    );
    let model = decode::model(dc)?;
    let shape = token_reads::TokenShape::of(model.config(), dc.tokens);
    // the same reads with uniform picks (as before) and with the picks decode makes, whose
    // reuse across tokens the cache rewards: decode's share is of the second
    let uniform = token_reads::TokenReads::new(shape, dc.tokens, dc.seed)?;
    let replayed = token_reads::TokenReads::replaying(shape, decode::routes(&model, dc)?)?;
    eprintln!(
        "ceilings: decode's routes read {:.1} distinct experts a MoE layer over {} tokens \
         ({:.1} if uniform)",
        replayed.distinct_per_layer(),
        dc.tokens,
        replayed.distinct_if_uniform()
    );
    for &t in counts {
        eprintln!(
            "ceilings: reads shaped as {}'s tokens (uniform picks, then its own), then its \
             decode tg{}, {t} thread(s)",
            dc.preset, dc.tokens
        );
        let read_uniform = uniform.measure(&dc.preset, t, t, passes);
        let read = replayed.measure(&dc.preset, t, t, passes);
        let mut decoded = decode::measure(&model, dc, t, t)?;
        if let Value::Object(d) = &mut decoded.details {
            d.insert("token_read".into(), json!(read.key));
        }
        ms.extend([read_uniform, read, decoded]);
    }
    Ok(ms)
}

/// Run every measurement, write `OUT/ceilings.json`, print the table and the comparison lines.
pub fn run(cfg: &CeilingsConfig) -> anyhow::Result<()> {
    std::fs::create_dir_all(&cfg.out).with_context(|| format!("creating {}", cfg.out.display()))?;
    if cfg.passes == 0 {
        anyhow::bail!("--passes must be at least 1");
    }
    let all = logical_cpus();
    let counts: Vec<usize> = if all > 1 { vec![1, all] } else { vec![1] };
    let suffix = |t: usize| if t == 1 { "1t" } else { "all" };
    let mut ms: Vec<Measurement> = Vec::new();

    let buf = {
        eprintln!(
            "ceilings: touching a {:.0} MiB buffer",
            cfg.buffer_bytes as f64 / (1u64 << 20) as f64
        );
        memory::Buffer::new(cfg.buffer_bytes)?
    };
    for &t in &counts {
        eprintln!(
            "ceilings: read bandwidth, {t} thread(s), {} passes",
            cfg.passes
        );
        ms.push(Measurement {
            key: format!("read_bandwidth_{}", suffix(t)),
            label: format!("read bandwidth ({})", memory::kernel_name()),
            unit: "GB/s",
            threads: t,
            samples: memory::bandwidth(&buf, t, cfg.passes),
            details: json!({ "buffer_bytes": buf.bytes(), "kernel": memory::kernel_name() }),
        });
    }
    drop(buf);

    let iters = fma::calibrate(0.15);
    for &t in &counts {
        eprintln!("ceilings: fp32 FMA rate, {t} thread(s)");
        ms.push(Measurement {
            key: format!("fma_rate_{}", suffix(t)),
            label: format!("fp32 FMA ({})", fma::kernel_name()),
            unit: "GFLOP/s",
            threads: t,
            samples: fma::rate(t, iters, 7),
            details: json!({
                "kernel": fma::kernel_name(),
                "iterations_per_thread": iters,
                "flop_per_iteration": fma::FLOP_PER_ITER,
            }),
        });
    }

    let cache = products::largest_cache_bytes();
    let pool1 = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .context("building a 1-thread pool")?;
    for shape in &SHAPES {
        let p = if shape.int4 {
            Product::int4(shape.rows, shape.cols)?
        } else {
            Product::int8(shape.rows, shape.cols)?
        };
        let copies = products::copies_past_cache(p.bytes(), cache.unwrap_or(32 << 20));
        // the kernel the engine dispatches to, then every other integer kernel the CPU has, the
        // calls taking turns
        let dispatched = moefleet_engine::kernels::int_path();
        let others = IntPath::ALL
            .into_iter()
            .filter(|k| k.on_cpu() && Some(*k) != dispatched);
        let paths: Vec<Option<IntPath>> = std::iter::once(None)
            .chain(others.filter(|_| dispatched.is_some()).map(Some))
            .collect();
        for &t in &counts {
            eprintln!(
                "ceilings: {} {}x{}, {t} thread(s), {copies} copies in rotation, {} kernel(s) in \
                 turn",
                shape.line,
                shape.rows,
                shape.cols,
                paths.len()
            );
            let (timings, threads) = if t == 1 {
                let timed = pool1.install(|| p.time_paths(copies, cfg.product_budget, &paths))?;
                (timed, 1)
            } else {
                let timed = p.time_paths(copies, cfg.product_budget, &paths)?;
                (timed, rayon::current_num_threads())
            };
            let mut reads = Vec::new();
            for (&path, timing) in paths.iter().zip(timings) {
                reads.extend(timing.read_seconds.iter().copied());
                let kernel = path.or(dispatched);
                let on = kernel.filter(|_| path.is_some());
                ms.push(product_measurement(
                    shape, &p, timing, threads, t, cache, kernel, on,
                )?);
            }
            ms.push(interleaved_read(shape, &p, &reads, threads, t));
        }
    }
    if let Some(dc) = &cfg.decode {
        ms.extend(decode_measurements(dc, &counts, cfg.passes)?);
    }
    add_ratios(&mut ms)?;

    let record = json!({
        "record": "ceilings",
        "host": crate::host::facts(),
        "harness_version": env!("CARGO_PKG_VERSION"),
        "engine_commit": moefleet_engine::BUILD_COMMIT,
        "harness_commit": crate::BUILD_COMMIT,
        "measurements": ms
            .iter()
            .map(|m| Ok((m.key.clone(), m.to_json()?)))
            .collect::<anyhow::Result<serde_json::Map<String, Value>>>()?,
    });
    let path = cfg.out.join("ceilings.json");
    crate::json::write(&path, &record)?;
    print!("{}", table(&ms)?);
    for line in lines(&ms)? {
        println!("{line}");
    }
    eprintln!("ceilings: wrote {}", path.display());
    Ok(())
}

/// Key of the plain reads timed between a product's calls.
fn interleaved_key(shape: &Shape, requested: usize) -> String {
    format!(
        "read_interleaved_{}_{}",
        shape.key.trim_end_matches("_product"),
        if requested == 1 { "1t" } else { "all" }
    )
}

fn interleaved_read(
    shape: &Shape,
    p: &Product,
    read_seconds: &[f64],
    threads: usize,
    requested: usize,
) -> Measurement {
    let bytes = p.bytes() as f64;
    Measurement {
        key: interleaved_key(shape, requested),
        label: format!(
            "read between {} calls ({})",
            shape.line.split(' ').next().unwrap_or(shape.line),
            memory::kernel_name()
        ),
        unit: "GB/s",
        threads,
        samples: read_seconds.iter().map(|s| bytes / s / 1e9).collect(),
        details: json!({ "buffer_bytes": p.bytes(), "kernel": memory::kernel_name() }),
    }
}

/// A product's measurement on `kernel` (the integer kernel it ran on, None: portable); `on`: the
/// kernel it was asked to run on, when that was not the engine's own choice (a key of its own).
#[allow(clippy::too_many_arguments)]
fn product_measurement(
    shape: &Shape,
    p: &Product,
    timing: ProductTiming,
    threads: usize,
    requested: usize,
    cache: Option<usize>,
    kernel: Option<IntPath>,
    on: Option<IntPath>,
) -> anyhow::Result<Measurement> {
    let bytes = p.bytes() as f64;
    let ms_per_call: Vec<f64> = timing.seconds.iter().map(|s| s * 1e3).collect();
    let call = Summary::of(&ms_per_call).context("no product timings")?;
    // one input row: 2 FLOP per weight
    let flop = 2.0 * (shape.rows * shape.cols) as f64;
    Ok(Measurement {
        key: format!(
            "{}_{}{}",
            shape.key,
            on.map_or(String::new(), |k| format!("on_{}_", k.name())),
            if requested == 1 { "1t" } else { "all" }
        ),
        label: format!(
            "{} {}x{}{} ({})",
            shape.line,
            shape.rows,
            shape.cols,
            if shape.int4 { " g32" } else { "" },
            kernel.map_or("portable", IntPath::name)
        ),
        unit: "GB/s",
        threads,
        samples: timing.seconds.iter().map(|s| bytes / s / 1e9).collect(),
        details: json!({
            "format": if shape.int4 { "int4 group 32, f16 scale per group" } else { "int8, f16 scale per row" },
            "shape": { "rows_out": shape.rows, "cols_in": shape.cols, "input_rows": 1 },
            "bytes": p.bytes(),
            "copies_in_rotation": timing.copies,
            "working_set_bytes": p.bytes() * timing.copies,
            "largest_cache_bytes": cache,
            "call_ms": call,
            "gflops_median": flop / (call.median * 1e-3) / 1e9,
            "interleaved_read": interleaved_key(shape, requested),
            "kernel_path": kernel.map_or("portable", IntPath::name),
        }),
    })
}

/// Each product's median against the median read bandwidth and FMA rate of its thread count, and
/// against the median of the plain reads timed between its calls (`interleaved_read`).
pub(crate) fn add_ratios(ms: &mut [Measurement]) -> anyhow::Result<()> {
    let mut medians = std::collections::HashMap::new();
    for m in ms.iter() {
        medians.insert(m.key.clone(), m.summary()?.median);
    }
    for m in ms.iter_mut() {
        let Some(sfx) = m.key.rsplit('_').next().map(str::to_string) else {
            continue;
        };
        let is_decode = m.key.starts_with("decode_");
        if !m.key.contains("_product_") && !is_decode {
            continue;
        }
        let bw_key = format!("read_bandwidth_{sfx}");
        let fma_key = format!("fma_rate_{sfx}");
        let med = m.summary()?.median;
        let bw = medians.get(&bw_key).copied();
        let gf = m.details["gflops_median"].as_f64();
        let fma = medians.get(&fma_key).copied();
        let between = m.details["interleaved_read"]
            .as_str()
            .and_then(|k| medians.get(k).copied());
        if let Value::Object(d) = &mut m.details {
            if d.contains_key("interleaved_read") {
                d.insert(
                    "pct_of_interleaved_read".into(),
                    json!(between.map(|b| 100.0 * med / b)),
                );
            }
            if let Some(k) = d.get("token_read").and_then(Value::as_str) {
                let reads = medians.get(k).copied();
                d.insert(
                    "pct_of_token_read".into(),
                    json!(reads.map(|r| 100.0 * med / r)),
                );
            }
            d.insert("compared_with".into(), json!(bw_key));
            d.insert(
                "pct_of_read_bandwidth".into(),
                json!(bw.map(|b| 100.0 * med / b)),
            );
            if is_decode {
                // tokens a second at the median: the median rate over the bytes a token reads
                let per_token = d.get("bytes_per_token").and_then(Value::as_f64);
                d.insert(
                    "tok_s_median".into(),
                    json!(per_token.map(|b| med * 1e9 / b)),
                );
            } else {
                d.insert(
                    "pct_of_fma_rate".into(),
                    json!(gf.zip(fma).map(|(g, f)| 100.0 * g / f)),
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(key: &str, threads: usize, samples: &[f64], details: Value) -> Measurement {
        Measurement {
            key: key.into(),
            label: key.into(),
            unit: "GB/s",
            threads,
            samples: samples.to_vec(),
            details,
        }
    }

    #[test]
    fn products_compare_with_their_own_thread_count() {
        let mut ms = vec![
            m("read_bandwidth_1t", 1, &[10.0, 12.0, 11.0], json!({})),
            m("read_bandwidth_all", 2, &[20.0], json!({})),
            m("fma_rate_1t", 1, &[100.0], json!({})),
            m("fma_rate_all", 2, &[200.0], json!({})),
            m(
                "int4_expert_product_1t",
                1,
                &[5.5],
                json!({"gflops_median": 10.0, "call_ms": {"median": 2.0}, "bytes": 1e7}),
            ),
            m(
                "int4_expert_product_all",
                2,
                &[15.0],
                json!({"gflops_median": 30.0, "call_ms": {"median": 1.0}, "bytes": 1e7,
                       "interleaved_read": "read_interleaved_int4_expert_all"}),
            ),
            m(
                "read_interleaved_int4_expert_all",
                2,
                &[16.0, 18.0, 20.0],
                json!({}),
            ),
            m("read_token_x_1t", 1, &[20.0, 24.0], json!({})),
            m(
                "decode_x_1t",
                1,
                &[11.0],
                json!({"model": "x", "kernel_path": "k", "bytes_per_token": 2e6,
                       "token_read": "read_token_x_1t"}),
            ),
        ];
        add_ratios(&mut ms).unwrap();
        assert_eq!(ms[4].details["pct_of_read_bandwidth"], json!(50.0));
        assert_eq!(ms[4].details["pct_of_fma_rate"], json!(10.0));
        assert_eq!(ms[5].details["pct_of_read_bandwidth"], json!(75.0));
        assert_eq!(
            ms[5].details["pct_of_interleaved_read"],
            json!(100.0 * 15.0 / 18.0)
        );
        assert!(ms[4].details.get("pct_of_interleaved_read").is_none());
        assert!(ms[6].details.get("pct_of_read_bandwidth").is_none());
        let l = lines(&ms).unwrap();
        assert_eq!(
            l[0],
            "INT4 expert product: 5.50 GB/s = 50.0 % of measured read bandwidth (1 thread, vs 1-thread bandwidth)"
        );
        assert!(l[1].starts_with("INT4 expert product: 15.00 GB/s = 75.0 % of measured"));
        assert_eq!(
            l[2],
            "INT4 expert product: 83.3 % of the plain reads timed between its calls (2 threads)"
        );
        assert_eq!(
            l.last().unwrap(),
            "Decode x (k): 11.00 GB/s = 100.0 % of measured read bandwidth, 50.0 % of reads laid \
             out as its token's (1 thread): 5500.0 tok/s x 2.00 MB a token"
        );
        let j = ms[0].to_json().unwrap();
        assert_eq!(j["median"], json!(11.0));
        assert_eq!(j["best"], json!(12.0));
        assert!(table(&ms).unwrap().contains("int4_expert_product_all"));
    }
}
