//! The engine beside llama.cpp (`scripts/peer.sh`, `make peer`): llama-bench's JSON and `moefleet
//! bench`'s record from one run, matched by test (ppN, tgN) and thread count, as `peer.csv` and
//! `PEER.md` with the ratio ours / theirs (above 1: the engine is faster); and, when the run holds
//! them, the served side: the same harness sweep against llama-server (`served-llama/`) and our
//! fleet (`served-moefleet/`), each level's paired Q_decode and TTFT median analysed afresh from the
//! traces (`served.csv`). Pure tables from the raw records and the run's `peer.json` (commands,
//! load averages, model file).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Context};
use moefleet_engine::bench::mean_sd;
use serde_json::Value;

pub mod recheck;
mod served;
pub mod unit;
pub use served::{served, served_csv, sweeps, Served};

/// One test at one thread count, both sides.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub test: String,
    pub threads: u64,
    /// (mean, sd) tokens per second.
    pub ours: (f64, f64),
    pub theirs: (f64, f64),
    /// The ratio's 95 % bootstrap interval over the repetitions (`ratio_interval`).
    pub interval: (f64, f64),
}

/// Draws of the ratio's bootstrap, and their seed.
const DRAWS: usize = 2000;
const SEED: u64 = 1;

/// The 95 % percentile bootstrap interval of mean(ours) / mean(theirs): each side's repetitions
/// drawn with replacement on their own (the two sides ran one after the other, so no repetition of
/// one is paired with one of the other), 2000 draws, seeded. It shows how far the repetitions'
/// spread moves the ratio; with five repetitions a side it is a rough interval, and it cannot
/// cover the drift between two runs on a shared machine.
pub fn ratio_interval(ours: &[f64], theirs: &[f64]) -> (f64, f64) {
    let mut rng = moefleet_engine::rng::Rng::new(SEED);
    let mut mean_of_draw = |xs: &[f64]| {
        let n = xs.len().max(1);
        (0..n)
            .map(|_| xs[rng.below(n as u64) as usize])
            .sum::<f64>()
            / n as f64
    };
    let mut ratios = Vec::with_capacity(DRAWS);
    for _ in 0..DRAWS {
        let o = mean_of_draw(ours);
        let t = mean_of_draw(theirs);
        ratios.push(o / t);
    }
    let q = |p| crate::stats::quantile(&ratios, p).unwrap_or(f64::NAN);
    (q(0.025), q(0.975))
}

impl Row {
    pub fn ratio(&self) -> f64 {
        self.ours.0 / self.theirs.0
    }
}

fn json(path: &Path) -> anyhow::Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

fn numbers(v: &Value, what: &str) -> anyhow::Result<Vec<f64>> {
    let xs: Vec<f64> = v
        .as_array()
        .with_context(|| format!("{what}: not an array"))?
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    if xs.is_empty() {
        bail!("{what}: no samples");
    }
    Ok(xs)
}

/// One side's measurement: test name, threads, tokens per second of each repetition.
pub type Measured = (String, u64, Vec<f64>);

/// llama-bench `-o json` rows: (test, threads) → its per-repetition samples.
pub fn llama_rows(v: &Value) -> anyhow::Result<Vec<Measured>> {
    let rows = v.as_array().context("llama-bench JSON: not an array")?;
    rows.iter()
        .map(|r| {
            let n = |k: &str| {
                r[k].as_u64()
                    .with_context(|| format!("llama-bench row: no {k}"))
            };
            let (p, g, t) = (n("n_prompt")?, n("n_gen")?, n("n_threads")?);
            let test = match (p, g) {
                (p, 0) => format!("pp{p}"),
                (0, g) => format!("tg{g}"),
                (p, g) => format!("pp{p}+tg{g}"),
            };
            Ok((test.clone(), t, numbers(&r["samples_ts"], &test)?))
        })
        .collect()
}

/// `moefleet bench --json` results: (test, threads) → its per-repetition samples.
pub fn our_rows(v: &Value) -> anyhow::Result<Vec<Measured>> {
    let rows = v["results"]
        .as_array()
        .context("moefleet bench record: no results")?;
    rows.iter()
        .map(|r| {
            let test = r["test"].as_str().context("no test")?.to_string();
            let t = r["threads"].as_u64().context("no threads")?;
            Ok((test.clone(), t, numbers(&r["tok_s"], &test)?))
        })
        .collect()
}

/// Pair the two sides; a test only one side ran is an error (the run is not side by side).
pub fn pair(ours: &[Measured], theirs: &[Measured]) -> anyhow::Result<Vec<Row>> {
    if ours.len() != theirs.len() {
        bail!(
            "{} tests on our side, {} on llama.cpp's: not the same run",
            ours.len(),
            theirs.len()
        );
    }
    ours.iter()
        .map(|(test, t, o)| {
            let (_, _, l) = theirs
                .iter()
                .find(|(lt, lth, _)| lt == test && lth == t)
                .with_context(|| format!("llama-bench has no {test} at {t} threads"))?;
            Ok(Row {
                test: test.clone(),
                threads: *t,
                ours: mean_sd(o),
                theirs: mean_sd(l),
                interval: ratio_interval(o, l),
            })
        })
        .collect()
}

/// `peer.csv`.
pub fn csv(rows: &[Row]) -> String {
    let mut s =
        String::from("key,test,threads,moefleet_tok_s,moefleet_sd,llama_tok_s,llama_sd,ratio,ratio_low,ratio_high\n");
    for r in rows {
        let _ = writeln!(
            s,
            "{0}/t{1},{0},{1},{2},{3},{4},{5},{6},{7},{8}",
            r.test,
            r.threads,
            r.ours.0,
            r.ours.1,
            r.theirs.0,
            r.theirs.1,
            r.ratio(),
            r.interval.0,
            r.interval.1
        );
    }
    s
}

fn load_text(v: &Value) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| {
                    x.as_str()
                        .map(str::to_string)
                        .or_else(|| x.as_f64().map(|f| f.to_string()))
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| "–".into())
}

/// `PEER.md`.
pub fn markdown(
    rows: &[Row],
    served: Option<&[Served]>,
    llama: &Value,
    ours: &Value,
    run: &Value,
) -> String {
    let l0 = &llama[0];
    // runs from issue 30 on: moefleet reads the GGUF file llama.cpp reads
    let same_file = run["moefleet_reads"].as_str() == Some("the same file");
    let mut s = String::from(if same_file {
        "# moefleet beside llama.cpp, one GGUF file, one run\n\n"
    } else {
        "# moefleet beside llama.cpp, same shapes, one run\n\n"
    });
    let ours_side = if same_file {
        format!(
            "moefleet reading the same file (`--model`, sha256 {}…)",
            run["gguf_sha256"]
                .as_str()
                .map_or("?", |h| &h[..h.len().min(16)])
        )
    } else {
        format!(
            "moefleet `{}` with synthetic weights (seed {})",
            ours["model"].as_str().unwrap_or("?"),
            ours["seed"]
        )
    };
    let _ =
        writeln!(
        s,
        "Single process, one machine ({}; {} instructions in our kernels; moefleet commit {}). \
         llama.cpp build {}, compiled with GGML_NATIVE for this CPU's instruction set{}, on `{}` \
         ({} bytes, {} parameters); {}. Both \
         sides' rates are tokens per second, mean ± sd over the repetitions, recomputed here from \
         each side's per-repetition samples; ratio = moefleet / llama.cpp (above 1: moefleet is \
         faster). llama-bench ran first, then `moefleet bench`; load averages (1, 5, 15 min) \
         before llama-bench: {}, after it: {}, after ours: {}.\n",
        ours["host"]["host_id"]
            .as_str()
            .or(l0["cpu_info"].as_str())
            .unwrap_or("?"),
        ours["isa"].as_str().unwrap_or("?"),
        run["git_commit"].as_str().map_or("not recorded".to_string(), |c| format!(
            "{}{}",
            &c[..c.len().min(9)],
            if run["git_dirty"].as_bool() == Some(true) { ", with uncommitted changes" } else { "" }
        )),
        l0["build_commit"].as_str().unwrap_or("?"),
        match run["llama_build_flags"].as_str() {
            Some(f) if f.contains("-mno-amx") => format!(
                " without AMX (`{}`: ggml's AMX kernels stop with SIGILL on this host)",
                f.trim_start_matches("native").trim()
            ),
            _ => String::new(),
        },
        run["gguf"].as_str().unwrap_or("?"),
        run["gguf_bytes"],
        l0["model_n_params"],
        ours_side,
        load_text(&run["load_average"]["before_llama"]),
        load_text(&run["load_average"]["after_llama"]),
        load_text(&run["load_average"]["after_moefleet"]),
    );
    s.push_str(
        "| test | threads | moefleet (tok/s) | llama.cpp (tok/s) | ratio | 95 % interval |\n\
         |---|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} ± {:.1} | {:.1} ± {:.1} | {:.2}× | {:.2}–{:.2}× |",
            r.test,
            r.threads,
            r.ours.0,
            r.ours.1,
            r.theirs.0,
            r.theirs.1,
            r.ratio(),
            r.interval.0,
            r.interval.1
        );
    }
    s.push_str(
        "\nThe interval: a percentile bootstrap of the ratio of means over each side's repetitions \
         (each side drawn on its own, 2000 draws, seed 1); it shows the repetitions' spread, not \
         the drift between runs.\n",
    );
    s.push_str(&profiles_md(ours));
    if let Some(served) = served {
        s.push_str(&served::served_md(served, run));
    }
    let what = "\nWhat the two run: ppN feeds N random token ids to a fresh context (llama-bench: \
                one batch; moefleet: one window of N rows unless `--window`), tgN decodes N tokens \
                one at a time, each computing the output logits.";
    if same_file {
        let _ = writeln!(
            s,
            "{what} The GGUF ({}) is read by both engines as it is: the same layers, tensor \
             formats and tokenizer; moefleet computes it with its checkpoint layers \
             (`engine/src/model/checkpoint`), which mirror llama.cpp's arithmetic op for op \
             (`results/gguf-parity-20261203`), not with the Inkling presets' kernels.\n\n\
             Commands:\n\n```\n{}\n{}\n```",
            run["gguf_source"].as_str().unwrap_or("?"),
            run["commands"]["llama_bench"].as_str().unwrap_or("?"),
            run["commands"]["moefleet_bench"].as_str().unwrap_or("?"),
        );
        return s;
    }
    let _ = writeln!(
        s,
        "\nWhat the two run: ppN feeds N random token ids to a fresh context (llama-bench: one \
         batch; moefleet: one window of N rows unless `--window`), tgN decodes N tokens one at a \
         time, each computing the output logits. The GGUF is `scripts/peer_gguf.py`'s: qwen3moe \
         with the preset's hidden width, layers, heads, experts and vocabulary, experts Q4_0 \
         (4.5 bits per weight, as our INT4 group-32), attention and head Q8_0 (as our INT8), \
         embedding F16, random weights. Not matched: the preset's two dense layers and shared \
         experts (all layers routed there, with the shared experts counted among the active \
         ones), its one global KV head and its relative-position taps.\n\nCommands:\n\n```\n{}\n{}\n```",
        run["commands"]["llama_bench"].as_str().unwrap_or("?"),
        run["commands"]["moefleet_bench"].as_str().unwrap_or("?"),
    );
    s
}

/// Our side's decode and prefill profiles (`moefleet bench`'s record), a table each.
fn profiles_md(ours: &Value) -> String {
    let mut s = String::new();
    for (key, about) in [
        (
            "decode_profiles",
            "Where one of our decode tokens goes (`moefleet bench`'s profile of the same decode \
             test, milliseconds per token)",
        ),
        (
            "prefill_profiles",
            "Where one of our prompt tokens goes (`moefleet bench`'s profile of one more prefill \
             of the longest prompt, milliseconds per prompt token; the head is the last row's)",
        ),
    ] {
        let Some(ps) = ours[key].as_array().filter(|p| !p.is_empty()) else {
            continue;
        };
        let _ = write!(
            s,
            "\n{about}:\n\n| threads | total | attention | experts / MLP | norms, \
             convolutions, residual | head |\n|---:|---:|---:|---:|---:|---:|\n"
        );
        for p in ps {
            let f = |k: &str| p[k].as_f64().map_or("–".into(), |v| format!("{v:.3}"));
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} |",
                p["threads"],
                f("total_ms"),
                f("attention_ms"),
                f("mlp_ms"),
                f("other_ms"),
                f("head_ms")
            );
        }
    }
    s
}

/// Every table of a peer run under `dir`.
pub fn render(dir: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let llama = json(&dir.join("llama-bench.json"))?;
    let ours = json(&dir.join("moefleet-bench.json"))?;
    let run = json(&dir.join("peer.json"))?;
    let rows = pair(&our_rows(&ours)?, &llama_rows(&llama)?)?;
    let served = served(dir)?;
    let mut files = vec![("peer.csv".into(), csv(&rows))];
    if let Some(sv) = &served {
        files.push(("served.csv".into(), served_csv(sv)));
    }
    files.push((
        "PEER.md".into(),
        markdown(&rows, served.as_deref(), &llama, &ours, &run),
    ));
    Ok(files)
}

/// Write the tables; returns PEER.md.
pub fn write(dir: &Path) -> anyhow::Result<String> {
    let mut md = String::new();
    for (name, text) in render(dir)? {
        crate::csv::write(&dir.join(&name), &text)?;
        if name == "PEER.md" {
            md = text;
        }
    }
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pairs_by_test_and_threads_from_the_samples() {
        let llama = json!([
            {"n_prompt": 64, "n_gen": 0, "n_threads": 1, "samples_ts": [300.0, 320.0]},
            {"n_prompt": 0, "n_gen": 128, "n_threads": 1, "samples_ts": [100.0, 100.0]},
        ]);
        let ours = json!({"results": [
            {"test": "tg128", "threads": 1, "tok_s": [120.0, 130.0]},
            {"test": "pp64", "threads": 1, "tok_s": [155.0, 155.0]},
        ]});
        let rows = pair(&our_rows(&ours).unwrap(), &llama_rows(&llama).unwrap()).unwrap();
        assert_eq!(rows[0].test, "tg128");
        assert!((rows[0].ratio() - 1.25).abs() < 1e-12);
        assert!((rows[1].ratio() - 0.5).abs() < 1e-12);
        assert!((rows[1].theirs.1 - 200f64.sqrt()).abs() < 1e-9, "sample sd");
        // ours 120 or 130 over theirs 100 always: the interval lies within [1.2, 1.3] and holds
        // the ratio; a side without spread gives a point
        let (lo, hi) = rows[0].interval;
        assert!(
            (1.2..=1.25).contains(&lo) && (1.25..=1.3).contains(&hi),
            "{lo} {hi}"
        );
        let (lo, hi) = rows[1].interval;
        assert!(lo < 0.5 && hi > 0.5 && lo >= 155.0 / 320.0 && hi <= 155.0 / 300.0);
        assert_eq!(ratio_interval(&[2.0, 2.0], &[1.0]), (2.0, 2.0));
        let c = csv(&rows);
        assert!(
            c.lines()
                .nth(1)
                .unwrap()
                .starts_with("tg128/t1,tg128,1,125,"),
            "{c}"
        );
        // a test one side did not run is refused
        let short = json!([{"n_prompt": 64, "n_gen": 0, "n_threads": 2, "samples_ts": [1.0]},
                           {"n_prompt": 0, "n_gen": 128, "n_threads": 1, "samples_ts": [1.0]}]);
        let e = pair(&our_rows(&ours).unwrap(), &llama_rows(&short).unwrap()).unwrap_err();
        assert!(e.to_string().contains("no pp64 at 1 threads"), "{e}");
        assert!(llama_rows(
            &json!([{"n_prompt": 1, "n_gen": 0, "n_threads": 1, "samples_ts": []}])
        )
        .is_err());
    }
}
