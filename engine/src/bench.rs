//! Single-process speed in llama-bench's terms, so the two can be set side by side: `pp N` feeds
//! a prompt of N random token ids to a fresh stream (in windows of `window` rows; the whole prompt
//! at once by default, as llama-bench's batch does) and `tg N` decodes N tokens greedily after a
//! one-token prompt, each forward computing the logits. Every test runs once untimed, then
//! `repetitions` times; the rate is tokens / seconds per repetition, reported as mean ± sd.

use serde::Serialize;

use crate::error::{Error, Result};
use crate::generate::generate;
use crate::model::Model;
use crate::rng::Rng;

/// One test: prefill of `tokens` prompt rows, or decode of `tokens` tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Test {
    Prefill { tokens: usize },
    Decode { tokens: usize },
}

impl Test {
    /// llama-bench's name for it (`pp64`, `tg128`).
    pub fn name(&self) -> String {
        match self {
            Test::Prefill { tokens } => format!("pp{tokens}"),
            Test::Decode { tokens } => format!("tg{tokens}"),
        }
    }
}

/// The measured rates of one test at one thread count.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    pub test: String,
    pub threads: usize,
    /// Tokens per second of each timed repetition.
    pub tok_s: Vec<f64>,
    pub mean: f64,
    /// Sample standard deviation (0 with one repetition).
    pub sd: f64,
}

/// Mean and sample standard deviation.
pub fn mean_sd(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    if x.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let m = x.iter().sum::<f64>() / n;
    let var = if x.len() > 1 {
        x.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (m, var.sqrt())
}

/// The one-token prompt of a `tg` run with `seed` (`run`'s warm-up is seed 0, its repetitions 1..).
pub fn decode_prompt(model: &Model, seed: u64) -> [u32; 1] {
    [Rng::new(seed).below(model.config().vocab_size as u64) as u32]
}

/// A pool of `threads` threads (at least one) for a test or a profile.
fn pool(threads: usize) -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .build()
        .map_err(|e| Error::Input(format!("a pool of {threads} threads: {e}")))
}

/// Seconds for one run of `test` (prompt ids drawn from `seed`).
fn once(model: &Model, test: Test, window: Option<usize>, seed: u64) -> Result<(f64, usize)> {
    let vocab = model.config().vocab_size as u64;
    let mut rng = Rng::new(seed);
    match test {
        Test::Prefill { tokens } => {
            let prompt: Vec<u32> = (0..tokens).map(|_| rng.below(vocab) as u32).collect();
            let g = generate(model, &prompt, 1, window.unwrap_or(tokens), None, false)?;
            Ok((g.prefill_s, tokens))
        }
        Test::Decode { tokens } => {
            let g = generate(
                model,
                &decode_prompt(model, seed),
                tokens + 1,
                1,
                None,
                false,
            )?;
            Ok((g.decode_s, g.tokens.len() - 1))
        }
    }
}

/// Run `test` on a pool of `threads` threads: once to warm up, then `repetitions` timed.
pub fn run(
    model: &Model,
    test: Test,
    threads: usize,
    repetitions: usize,
    window: Option<usize>,
) -> Result<Outcome> {
    let tokens = match test {
        Test::Prefill { tokens } | Test::Decode { tokens } => tokens,
    };
    if tokens == 0 || repetitions == 0 || threads == 0 || window == Some(0) {
        return Err(Error::Input(format!(
            "{}: tokens, repetitions, threads and window must be at least 1",
            test.name()
        )));
    }
    let pool = pool(threads)?;
    pool.install(|| {
        once(model, test, window, 0)?;
        let mut tok_s = Vec::with_capacity(repetitions);
        for rep in 0..repetitions {
            let (s, n) = once(model, test, window, 1 + rep as u64)?;
            tok_s.push(n as f64 / s.max(1e-12));
        }
        let (mean, sd) = mean_sd(&tok_s);
        Ok(Outcome {
            test: test.name(),
            threads,
            tok_s,
            mean,
            sd,
        })
    })
}

/// Where a token's time goes: milliseconds per token in each part of the forward pass
/// (`ForwardTimings`) and in the head (final norm, logits, arg-max). For decode (`profile_decode`)
/// per greedy token; for prefill (`profile_prefill`) per prompt token, the head being the last
/// row's alone.
#[derive(Clone, Debug, Serialize)]
pub struct Profile {
    pub threads: usize,
    pub tokens: usize,
    pub total_ms: f64,
    pub attention_ms: f64,
    pub mlp_ms: f64,
    /// Norms, output convolutions and residual adds.
    pub other_ms: f64,
    pub head_ms: f64,
}

/// Profile `tokens` decode steps on a pool of `threads` threads (after one untimed step).
pub fn profile_decode(model: &Model, tokens: usize, threads: usize) -> Result<Profile> {
    if tokens == 0 {
        return Err(Error::Input("a profile needs at least one token".into()));
    }
    let pool = pool(threads)?;
    pool.install(|| {
        let h = model.config().hidden;
        let mut st = model.new_stream(tokens + 2);
        let mut t = crate::model::ForwardTimings::default();
        let (mut head_ns, mut tok) = (0u128, 1u32);
        let mut t0 = std::time::Instant::now();
        for i in 0..=tokens {
            if i == 1 {
                // the first step warms caches up and is not counted
                t = Default::default();
                head_ns = 0;
                t0 = std::time::Instant::now();
            }
            let mut x = vec![0.0f32; h];
            model.embed(&[tok], &mut x)?;
            let mut seg = [crate::model::Segment {
                state: &mut st,
                rows: 1,
            }];
            model.forward_timed(&mut seg, &mut x, &mut t)?;
            let th = std::time::Instant::now();
            tok = crate::model::argmax(&model.logits(&x)?);
            head_ns += th.elapsed().as_nanos();
        }
        let total = t0.elapsed().as_secs_f64() * 1e3;
        let n = tokens as f64;
        let ms = |ns: u64| ns as f64 / 1e6 / n;
        Ok(Profile {
            threads,
            tokens,
            total_ms: total / n,
            attention_ms: ms(t.attention_ns),
            mlp_ms: ms(t.mlp_ns),
            other_ms: ms(t.other_ns),
            head_ms: head_ns as f64 / 1e6 / n,
        })
    })
}

/// Profile the prefill of a prompt of `tokens` random ids (seed 0, as `run`'s warm-up) in windows
/// of `window` rows (None: one window), on a pool of `threads` threads: once untimed, then once
/// timed, each on a fresh stream.
pub fn profile_prefill(
    model: &Model,
    tokens: usize,
    window: Option<usize>,
    threads: usize,
) -> Result<Profile> {
    if tokens == 0 || window == Some(0) {
        return Err(Error::Input(
            "a prefill profile needs at least one token and one row a window".into(),
        ));
    }
    let pool = pool(threads)?;
    let vocab = model.config().vocab_size as u64;
    let mut rng = Rng::new(0);
    let prompt: Vec<u32> = (0..tokens).map(|_| rng.below(vocab) as u32).collect();
    pool.install(|| {
        let h = model.config().hidden;
        let mut last = None;
        for _ in 0..2 {
            let mut st = model.new_stream(tokens + 1);
            let mut t = crate::model::ForwardTimings::default();
            let t0 = std::time::Instant::now();
            let mut x = Vec::new();
            for part in prompt.chunks(window.unwrap_or(tokens)) {
                x.resize(part.len() * h, 0.0);
                model.embed(part, &mut x)?;
                let mut seg = [crate::model::Segment {
                    state: &mut st,
                    rows: part.len(),
                }];
                model.forward_timed(&mut seg, &mut x, &mut t)?;
            }
            let th = std::time::Instant::now();
            crate::model::argmax(&model.logits(&x[x.len() - h..])?);
            last = Some((t, th.elapsed(), t0.elapsed()));
        }
        let (t, head, total) = last.unwrap_or_default();
        let n = tokens as f64;
        let ms = |ns: u64| ns as f64 / 1e6 / n;
        Ok(Profile {
            threads,
            tokens,
            total_ms: total.as_secs_f64() * 1e3 / n,
            attention_ms: ms(t.attention_ns),
            mlp_ms: ms(t.mlp_ns),
            other_ms: ms(t.other_ns),
            head_ms: head.as_secs_f64() * 1e3 / n,
        })
    })
}

/// The machine every record describes: CPU model, logical CPUs, memory and the instruction set the
/// kernels chose (fields that cannot be read are null). The one place these are read; the harness
/// adds its own fields for kernel-level records.
pub fn host_facts() -> serde_json::Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = Cpu::parse(&cpuinfo);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kb = meminfo.lines().find_map(|l| {
        l.strip_prefix("MemTotal:")
            .and_then(|r| r.trim().trim_end_matches(" kB").parse::<u64>().ok())
    });
    serde_json::json!({
        "cpu": cpu.model_name,
        "host_id": cpu.id(),
        "cpu_vendor": cpu.vendor,
        "cpu_family": cpu.family,
        "cpu_model": cpu.model,
        "cpu_stepping": cpu.stepping,
        "cpu_simd": cpu.simd,
        "logical_cpus": std::thread::available_parallelism().map(|n| n.get()).ok(),
        "physical_cores": cpu.physical_cores,
        "mem_total_bytes": mem_kb.map(|k| k * 1024),
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .ok()
            .map(|s| s.trim().to_string()),
        "isa": crate::kernels::describe(),
        "load_average": load_average(),
    })
}

/// The CPU as /proc/cpuinfo names it: what a record needs so that numbers from two hosts are
/// never taken for one ("AMD EPYC" alone names several generations).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Cpu {
    pub model_name: Option<String>,
    pub vendor: Option<String>,
    pub family: Option<u32>,
    pub model: Option<u32>,
    pub stepping: Option<u32>,
    /// The SIMD extensions among the CPU's flags that a kernel could use (not all are used).
    pub simd: Vec<String>,
    /// Distinct (physical id, core id) pairs.
    pub physical_cores: Option<usize>,
}

/// CPU flags worth naming in a record: the vector extensions a CPU kernel may choose between.
const SIMD_FLAGS: [&str; 12] = [
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx_vnni",
    "avx512_bf16",
    "amx_int8",
    "amx_bf16",
];

impl Cpu {
    /// Facts of the first processor of /proc/cpuinfo text, and the core count over all.
    pub fn parse(cpuinfo: &str) -> Cpu {
        let field = |name: &str| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.trim().to_string())
            })
        };
        let num = |name: &str| field(name).and_then(|v| v.parse().ok());
        let flags = field("flags").unwrap_or_default();
        let have: std::collections::BTreeSet<&str> = flags.split_whitespace().collect();
        let mut cores = std::collections::BTreeSet::new();
        let mut package = String::from("0");
        for line in cpuinfo.lines() {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            match k.trim() {
                "physical id" => package = v.trim().to_string(),
                "core id" => {
                    cores.insert((package.clone(), v.trim().to_string()));
                }
                _ => {}
            }
        }
        Cpu {
            model_name: field("model name"),
            vendor: field("vendor_id"),
            family: num("cpu family"),
            model: num("model"),
            stepping: num("stepping"),
            simd: SIMD_FLAGS
                .iter()
                .filter(|f| have.contains(**f))
                .map(|f| f.to_string())
                .collect(),
            physical_cores: (!cores.is_empty()).then_some(cores.len()),
        }
    }

    /// One line that tells hosts apart: model name, family/model/stepping.
    pub fn id(&self) -> Option<String> {
        let name = self.model_name.as_deref()?;
        Some(match (self.family, self.model, self.stepping) {
            (Some(f), Some(m), Some(s)) => format!("{name} (family {f}, model {m}, stepping {s})"),
            _ => name.to_string(),
        })
    }
}

/// The 1-, 5- and 15-minute load averages (None where /proc/loadavg cannot be read).
pub fn load_average() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let v: Vec<f64> = text
        .split_whitespace()
        .take(3)
        .filter_map(|x| x.parse().ok())
        .collect();
    (v.len() == 3).then(|| [v[0], v[1], v[2]])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{generate as synth, ForwardOptions, ModelConfig, SynthSpec};

    #[test]
    fn cpu_facts_from_cpuinfo() {
        let t = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n\
                 model name\t: Intel(R) Xeon(R) Processor\nstepping\t: 8\nphysical id\t: 0\n\
                 core id\t: 0\nflags\t\t: fpu avx avx2 fma avx512f avx512_vnni amx_int8\n\n\
                 processor\t: 1\nphysical id\t: 0\ncore id\t: 1\nmodel\t\t: 143\n";
        let c = Cpu::parse(t);
        assert_eq!(
            (c.family, c.model, c.stepping),
            (Some(6), Some(143), Some(8))
        );
        assert_eq!(c.vendor.as_deref(), Some("GenuineIntel"));
        assert_eq!(
            c.simd,
            ["avx", "avx2", "fma", "avx512f", "avx512_vnni", "amx_int8"]
        );
        assert_eq!(c.physical_cores, Some(2));
        assert_eq!(
            c.id().unwrap(),
            "Intel(R) Xeon(R) Processor (family 6, model 143, stepping 8)"
        );
        assert_eq!(Cpu::parse("").id(), None);
    }

    #[test]
    fn mean_and_sample_sd() {
        assert_eq!(mean_sd(&[2.0, 4.0, 6.0]), (4.0, 2.0));
        assert_eq!(mean_sd(&[5.0]), (5.0, 0.0));
        assert!(mean_sd(&[]).0.is_nan());
    }

    #[test]
    fn runs_each_test_and_refuses_zeros() {
        let c = ModelConfig::preset("inkling-nano").unwrap();
        let m = Model::new(
            synth(&SynthSpec::whole(c, 3)).unwrap(),
            ForwardOptions::default(),
        );
        for (test, name) in [
            (Test::Prefill { tokens: 9 }, "pp9"),
            (Test::Decode { tokens: 5 }, "tg5"),
        ] {
            let o = run(&m, test, 1, 2, None).unwrap();
            assert_eq!((o.test.as_str(), o.threads, o.tok_s.len()), (name, 1, 2));
            assert!(o.tok_s.iter().all(|r| r.is_finite() && *r > 0.0));
        }
        let e = run(&m, Test::Decode { tokens: 0 }, 1, 2, None).unwrap_err();
        assert!(e.to_string().contains("at least 1"), "{e}");
        assert!(run(&m, Test::Prefill { tokens: 4 }, 2, 1, Some(0)).is_err());
        for p in [
            profile_decode(&m, 6, 2).unwrap(),
            profile_prefill(&m, 9, None, 2).unwrap(),
            profile_prefill(&m, 9, Some(4), 1).unwrap(),
        ] {
            let parts = p.attention_ms + p.mlp_ms + p.other_ms + p.head_ms;
            assert!(parts > 0.0 && parts <= p.total_ms * 1.0001, "{p:?}");
            assert!(p.attention_ms > 0.0 && p.mlp_ms > 0.0, "{p:?}");
        }
        assert!(profile_prefill(&m, 0, None, 1).is_err());
        assert!(profile_prefill(&m, 4, Some(0), 1).is_err());
    }
}
