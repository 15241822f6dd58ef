//! `moefleet-harness run`: an open-loop load against any OpenAI-compatible server — requests due
//! at a constant rate, as a Poisson process or a gamma process of a chosen burstiness, optionally
//! ramping from one rate to another and capped in concurrency — and its latency summary (TTFT,
//! TPOT, per-token ITL right under multi-token chunks, end to end, the client's own send lag,
//! goodput against objectives). Writes OUT/run.json (the configuration, host and load averages),
//! OUT/schedule.csv, OUT/traces.jsonl.gz (one record per request), OUT/summary.json and
//! OUT/summary.md.

use std::path::PathBuf;

use anyhow::{bail, Context};
use moefleet_harness::driver::server::Server;
use moefleet_harness::host;
use moefleet_harness::load::arrivals::{Pattern, Process};
use moefleet_harness::load::drive::{self, Drive};
use moefleet_harness::load::latency::{Slo, Summary};
use moefleet_harness::workload::Families;

#[derive(clap::Args)]
pub struct Args {
    /// Base URL of the server (e.g. http://127.0.0.1:8080).
    #[arg(long)]
    url: String,
    /// The arrival process: constant (evenly spaced), poisson, or gamma (see --burstiness).
    #[arg(long, value_enum, default_value = "poisson")]
    load: Process,
    /// Requests per second (at the start, with --rate-end).
    #[arg(long)]
    rate: f64,
    /// Ramp the rate linearly from --rate to this over the run.
    #[arg(long)]
    rate_end: Option<f64>,
    /// The gamma process's shape: 1 is Poisson, below 1 burstier, above 1 more regular.
    #[arg(long, default_value_t = 1.0)]
    burstiness: f64,
    /// Requests to send (the warm-up's included).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    requests: u64,
    /// Output tokens asked per request.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_tokens: u64,
    /// Ask the server to ignore end-of-text so every request yields --max-tokens tokens.
    #[arg(long)]
    ignore_eos: bool,
    /// At most this many requests in flight; a request due meanwhile waits (its send lag shows
    /// it).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    max_concurrency: Option<u64>,
    /// The first N requests warm the server up and are left out of the summary.
    #[arg(long, default_value_t = 0)]
    warmup: u64,
    /// Seed of the schedule (the same seed, the same due times).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Objectives for goodput, in seconds: e.g. ttft=0.5,tpot=0.05,e2e=10.
    #[arg(long, value_parser = Slo::parse, default_value = "")]
    slo: Slo,
    /// Prompts of one workload family only (default: the twelve families in turn).
    #[arg(long)]
    family: Option<String>,
    /// Run directory to create.
    #[arg(long)]
    out: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let pattern = Pattern {
        process: args.load,
        rate: args.rate,
        rate_end: args.rate_end,
        burstiness: args.burstiness,
        seed: args.seed,
    };
    pattern.check().map_err(anyhow::Error::msg)?;
    if args.warmup >= args.requests {
        bail!(
            "--warmup {} leaves none of the {} requests to measure",
            args.warmup,
            args.requests
        );
    }
    let traces = args.out.join("traces.jsonl.gz");
    if traces.exists() {
        bail!(
            "{} already holds a run (choose another --out)",
            args.out.display()
        );
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let families = Families::builtin()?;
    let family = match &args.family {
        Some(f) => Some(
            families
                .names
                .iter()
                .position(|n| n == f)
                .with_context(|| {
                    format!("no family {f:?} (families: {})", families.names.join(", "))
                })?,
        ),
        None => None,
    };
    let n = args.requests as usize;
    let prompts = families.phase_prompts("run", family, n);
    let due = pattern.schedule(n);
    let mut schedule = String::from("request,due_s\n");
    for (j, t) in due.iter().enumerate() {
        schedule += &format!("{j},{t:.6}\n");
    }
    std::fs::write(args.out.join("schedule.csv"), schedule)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let load_start = host::load_average();
    let records = rt.block_on(async {
        let server = Server::connect(&args.url).await?;
        eprintln!(
            "run: {n} requests to {} ({}), {:?} at {} requests/s{}",
            server.base,
            server.model,
            args.load,
            args.rate,
            args.rate_end
                .map_or(String::new(), |r| format!(" ramping to {r}"))
        );
        let manifest = serde_json::json!({
            "record": "load_run",
            "url": server.base,
            "model": server.model,
            "pattern": pattern,
            "requests": n,
            "warmup": args.warmup,
            "max_tokens": args.max_tokens,
            "ignore_eos": args.ignore_eos,
            "max_concurrency": args.max_concurrency,
            "family": args.family,
            "slo": args.slo,
            "command": std::env::args().collect::<Vec<_>>(),
            "host": host::facts(),
            "load_average_start": load_start,
        });
        std::fs::write(
            args.out.join("run.json"),
            serde_json::to_string_pretty(&manifest)?,
        )?;
        drive::run(
            Drive {
                server: &server,
                prompts,
                due,
                max_tokens: args.max_tokens as usize,
                ignore_eos: args.ignore_eos,
                max_concurrency: args.max_concurrency.map(|c| c as usize),
                warmup: args.warmup as usize,
            },
            &traces,
        )
        .await
    })?;
    let measured: Vec<_> = records
        .into_iter()
        .filter(|r| r.phase == "measure")
        .collect();
    let summary = Summary::of(&measured, args.slo);
    let mut doc = serde_json::to_value(&summary)?;
    doc["load_average_end"] = serde_json::json!(host::load_average());
    std::fs::write(
        args.out.join("summary.json"),
        serde_json::to_string_pretty(&doc)?,
    )?;
    let md = summary.markdown();
    std::fs::write(args.out.join("summary.md"), &md)?;
    print!("{md}");
    if summary.failed > 0 {
        eprintln!(
            "run: {} requests failed (their errors are in {})",
            summary.failed,
            traces.display()
        );
    }
    Ok(())
}
