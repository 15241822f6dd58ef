//! Single-process prefill and decode speed in llama-bench's terms (ppN: a prompt of N random
//! ids in one window by default; tgN: N greedy tokens after a one-token prompt), each test
//! once untimed and then repeated, as mean ± sd tokens per second, per thread count; then one
//! more decode pass and one more prefill of the longest prompt per thread count, outside the
//! table's timings, profile where time goes.

use super::prelude::*;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: WholeModel,
    /// Thread counts, comma-separated (each a pool of its own).
    #[arg(long, value_delimiter = ',', default_value = "1,2", value_parser = clap::value_parser!(u64).range(1..=1024))]
    threads: Vec<u64>,
    /// Prefill tests: prompt lengths, comma-separated (`--prompt` alone: none).
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "64,512", value_parser = clap::value_parser!(u64).range(1..=65_536))]
    prompt: Vec<u64>,
    /// Decode tests: tokens to generate, comma-separated (`--gen` alone: none).
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "128", value_parser = clap::value_parser!(u64).range(1..=65_536))]
    gen: Vec<u64>,
    /// Timed repetitions of each test.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    repetitions: u64,
    /// Prompt rows per forward [default: the whole prompt] (--window is the former name).
    #[arg(long = "prefill-rows", visible_alias = "window", value_parser = clap::value_parser!(u64).range(1..=65_536))]
    window: Option<u64>,
    /// Also write the results, with the load average before and after, as a JSON record.
    #[arg(long)]
    json: Option<PathBuf>,
    #[command(flatten)]
    backend: BackendArgs,
}

pub fn run(args: Args) -> Result<()> {
    let Args {
        model: source,
        threads,
        prompt,
        gen,
        repetitions,
        window,
        json,
        backend,
    } = args;
    use moefleet_engine::bench::Test;
    let w = source.load("a benchmark")?;
    let name = w.config.name.clone();
    let model = Model::new(
        w,
        ForwardOptions {
            backend: backend.backend(),
            ..Default::default()
        },
    );
    let tests: Vec<Test> = prompt
        .iter()
        .map(|&n| Test::Prefill { tokens: n as usize })
        .chain(gen.iter().map(|&n| Test::Decode { tokens: n as usize }))
        .collect();
    if tests.is_empty() {
        bail!("nothing to run: give --prompt or --gen lengths");
    }
    if backend.backend == BackendKind::Openvino && threads.len() > 1 {
        bail!(
            "with --backend openvino give one --threads count (OpenVINO fixes its \
             thread count when it compiles the graphs)"
        );
    }
    let load_start = bench::load_average();
    println!("| model | threads | test | t/s |\n|---|---:|---|---:|");
    let mut outcomes = Vec::new();
    for &t in &threads {
        for &test in &tests {
            let o = bench::run(
                &model,
                test,
                t as usize,
                repetitions as usize,
                window.map(|w| w as usize),
            )?;
            println!(
                "| {name} | {t} | {} | {:.2} ± {:.2} |",
                o.test, o.mean, o.sd
            );
            outcomes.push(o);
        }
    }
    // where a decode token's time goes, at each thread count
    let mut profiles = Vec::new();
    if let Some(&n) = gen.first() {
        for &t in &threads {
            let p = bench::profile_decode(&model, n as usize, t as usize)?;
            eprintln!(
                "decode profile, {t} thread(s): {:.3} ms a token = attention {:.3} + \
                 experts/MLP {:.3} + norms, convolutions, residual {:.3} + head {:.3} \
                 (+ embedding and bookkeeping)",
                p.total_ms, p.attention_ms, p.mlp_ms, p.other_ms, p.head_ms
            );
            profiles.push(p);
        }
    }
    // and where a prompt token's time goes, for the longest prompt
    let mut prefill_profiles = Vec::new();
    if let Some(&n) = prompt.iter().max() {
        for &t in &threads {
            let p =
                bench::profile_prefill(&model, n as usize, window.map(|w| w as usize), t as usize)?;
            eprintln!(
                "prefill profile (pp{n}), {t} thread(s): {:.3} ms a prompt token = attention \
                 {:.3} + experts/MLP {:.3} + norms, convolutions, residual {:.3} + head {:.3} \
                 (+ embedding and bookkeeping)",
                p.total_ms, p.attention_ms, p.mlp_ms, p.other_ms, p.head_ms
            );
            prefill_profiles.push(p);
        }
    }
    let load_end = bench::load_average();
    let said = |l: &Option<[f64; 3]>| match l {
        Some([a, b, c]) => format!("{a:.2} {b:.2} {c:.2}"),
        None => "unknown".to_string(),
    };
    eprintln!(
        "load average (1, 5, 15 min): {} before, {} after",
        said(&load_start),
        said(&load_end)
    );
    if let Some(path) = json {
        let record = serde_json::json!({
            "record": "engine_bench",
            "engine_commit": env!("MOEFLEET_BUILD_COMMIT"),
            "model": name,
            "backend": backend.backend(),
            "weights": source.weights,
            "seed": source.seed,
            "repetitions": repetitions,
            "window": window,
            "isa": moefleet_engine::kernels::describe(),
            "host": moefleet_engine::bench::host_facts(),
            "load_average_start": load_start,
            "load_average_end": load_end,
            "results": outcomes,
            "decode_profiles": profiles,
            "prefill_profiles": prefill_profiles,
        });
        std::fs::write(&path, serde_json::to_string_pretty(&record)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
