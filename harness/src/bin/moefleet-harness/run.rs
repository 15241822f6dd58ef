//! `moefleet-harness run`: open-loop load against any OpenAI-compatible server (`load`, docs/
//! MEASUREMENTS.md §9). One step at a rate (constant, Poisson, gamma; a ramp; a concurrency cap),
//! a sweep across the server's range (`--load sweep`), or a search for the highest rate or
//! concurrency meeting latency objectives (`--search rate|concurrency` with `--slo`). A single
//! step writes OUT/run.json, schedule.csv, traces.jsonl.gz, summary.json and summary.md; a sweep
//! or search writes one such directory per step and OUT/steps.csv, steps.md, pareto.svg (and a
//! search OUT/search.json); any of these repeated (`--repeats`, and A B B A against a second
//! server with `--vs`) one directory per run and OUT/arms.csv, arms.md.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::bail;
use moefleet_engine::tokenizer::TextTokenizer;
use moefleet_harness::driver::server::Server;
use moefleet_harness::experiments::context::prompt::Corpus;
use moefleet_harness::load::arrivals::{Pattern, Process};
use moefleet_harness::load::latency::Slo;
use moefleet_harness::load::plans::{self, Search, SearchBy, Template};
use moefleet_harness::load::replay::{self, TextSource};
use moefleet_harness::load::step::{self, Schedule, StepPlan};
use moefleet_harness::load::{repeat, report};

/// The load's shape.
#[derive(Clone, Copy, Debug, PartialEq, clap::ValueEnum)]
enum Load {
    /// Evenly spaced requests.
    Constant,
    /// A Poisson process.
    Poisson,
    /// Gamma-distributed gaps of a chosen --burstiness.
    Gamma,
    /// One at a time, all at once, then --rates rates between (Poisson, or --sweep-process).
    Sweep,
}

#[derive(clap::Args)]
pub struct Args {
    /// Base URL of the server (e.g. http://127.0.0.1:8080).
    #[arg(long)]
    url: String,
    /// The arrival process, or `sweep` (see --rates).
    #[arg(long, value_enum, default_value = "poisson")]
    load: Load,
    /// Requests per second (at the start, with --rate-end). Needed unless --load sweep or
    /// --search.
    #[arg(long)]
    rate: Option<f64>,
    /// Ramp the rate linearly from --rate to this over the run.
    #[arg(long)]
    rate_end: Option<f64>,
    /// The gamma process's shape: 1 is Poisson, below 1 burstier, above 1 more regular.
    #[arg(long, default_value_t = 1.0)]
    burstiness: f64,
    /// Requests to send (per step of a sweep or search; the warm-up's included) [default: 100, or
    /// every request of a --trace].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    requests: Option<u64>,
    /// Output tokens asked per request.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_tokens: u64,
    /// Ask the server to ignore end-of-text so every request yields --max-tokens tokens.
    #[arg(long)]
    ignore_eos: bool,
    /// At most this many requests in flight; a request due meanwhile waits (its send lag shows
    /// it). A concurrency search's highest concurrency.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    max_concurrency: Option<u64>,
    /// The first N requests (of each step) warm the server up and are left out of the summary.
    #[arg(long, default_value_t = 0)]
    warmup: u64,
    /// Seed of the schedule (the same seed, the same due times).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Objectives for goodput, in seconds: e.g. ttft=0.5,tpot=0.05,e2e=10; with gate=p99 a step
    /// meets them when that percentile of each is within its limit (instead of --slo-share of
    /// requests meeting all). Presets: mlperf-server (TTFT 2 s, TPOT 0.2 s) and
    /// mlperf-interactive (0.45 s, 0.04 s), MLPerf's p99 gates for Llama 2 70B.
    #[arg(long, value_parser = Slo::parse, default_value = "")]
    slo: Slo,
    /// Rate steps of a sweep, evenly spaced between one-at-a-time and all-at-once.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=100))]
    rates: u64,
    /// The arrival process of a sweep's rate steps (a search's are --load's).
    #[arg(long, value_enum, default_value = "poisson")]
    sweep_process: Process,
    /// Search for the highest rate (or concurrency) whose step meets --slo.
    #[arg(long, value_enum)]
    search: Option<SearchBy>,
    /// Share of a step's requests that must meet every objective for the step to meet them.
    #[arg(long, default_value_t = 0.9)]
    slo_share: f64,
    /// A rate search stops when its bracket is this narrow (relative: 0.1 is 10 %).
    #[arg(long, default_value_t = 0.1)]
    precision: f64,
    /// At most this many bisection steps in a search.
    #[arg(long, default_value_t = 8)]
    max_search_steps: usize,
    /// A step ends as over-saturated once a request is open this long (default in a sweep or
    /// search: ten times one-at-a-time's slowest request, at least 5 s; none for a single step).
    #[arg(long)]
    saturation_s: Option<f64>,
    /// Prompts of one workload family only (default: the twelve families in turn).
    #[arg(long)]
    family: Option<String>,
    /// Turns per conversation: each request due starts a conversation whose later turns resend
    /// it all (every prompt and answer so far) with the next prompt; --requests and --warmup
    /// count conversations. The summary gives each turn's prefix-cache hits where the server
    /// reports them.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100))]
    turns: u64,
    /// Seconds from a turn's answer to the next turn of its conversation.
    #[arg(long, default_value_t = 0.0)]
    think_s: f64,
    /// Replay a request trace (JSONL: timestamp in ms or timestamp_s, prompt or input_length,
    /// output_length, optional hash_ids of shared prefix blocks) instead of --load.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Replay the trace this many times faster (0.5: half as fast).
    #[arg(long, default_value_t = 1.0)]
    time_scale: f64,
    /// The server's tokenizer (its GGUF file or tokenizer.json): a trace's prompt lengths are
    /// counted in it (without one a prompt has one corpus word per token asked), and every
    /// request's prompt and answer are counted again by the client, against the server's
    /// `usage` (OUT/crosscheck.md).
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// A second server (B) to alternate with --url (A) in blocks of A B B A, the same step, sweep
    /// or search each time (OUT/NN-ARM-BLOCK/; OUT/arms.md gives B / A with its interval over
    /// blocks).
    #[arg(long)]
    vs: Option<String>,
    /// Run the step, sweep or search this many times (blocks of A B B A with --vs); OUT/arms.md
    /// gives each metric's mean with its bootstrap interval over the runs (a sweep's and search's:
    /// their two bounds, and a search's answer and the goodput there).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1000))]
    repeats: u64,
    /// Run directory to create.
    #[arg(long)]
    out: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let process = match args.load {
        Load::Constant => Some(Process::Constant),
        Load::Poisson => Some(Process::Poisson),
        Load::Gamma => Some(Process::Gamma),
        Load::Sweep => None,
    };
    let single = args.search.is_none() && process.is_some();
    let replayed = match &args.trace {
        Some(t) => {
            if !single || args.rate.is_some() {
                bail!("--trace replays the trace's own times: no --rate, --load sweep or --search");
            }
            let tk = args
                .tokenizer
                .as_deref()
                .map(|p| TextTokenizer::open(Some(p)))
                .transpose()?;
            let corpus = Corpus::builtin()?;
            let text = TextSource::new(&corpus, tk.as_ref());
            let limit = args.requests.map(|n| n as usize);
            Some(Arc::new(replay::read(t, &text, args.time_scale, limit)?))
        }
        None => None,
    };
    let requests = match (&replayed, args.requests) {
        (Some(r), _) => r.len(),
        (None, n) => n.unwrap_or(100) as usize,
    };
    let schedule = match (single, process, args.rate, &args.trace) {
        (_, _, _, Some(trace)) => Schedule::Replay {
            trace: trace.clone(),
            time_scale: args.time_scale,
        },
        (true, Some(p), Some(rate), None) => Schedule::Arrivals(Pattern {
            process: p,
            rate,
            rate_end: args.rate_end,
            burstiness: args.burstiness,
            seed: args.seed,
        }),
        (true, _, None, None) => bail!("--rate is needed (or --load sweep, or --search)"),
        _ => Schedule::AtOnce,
    };
    let repeated = args.vs.is_some() || args.repeats > 1;
    if !single && (args.rate.is_some() || args.rate_end.is_some()) {
        bail!("--rate and --rate-end set one step's rate; a sweep or search chooses its own");
    }
    let plan = StepPlan {
        schedule,
        requests,
        warmup: args.warmup as usize,
        max_tokens: args.max_tokens as usize,
        ignore_eos: args.ignore_eos,
        max_concurrency: args.max_concurrency.map(|c| c as usize),
        family: args.family.clone(),
        slo: args.slo,
        saturation_s: args.saturation_s,
        replayed,
        turns: args.turns as usize,
        tokenizer: args.tokenizer.clone(),
        think_s: args.think_s,
    };
    plan.check()?;
    let template = Template {
        step: plan.clone(),
        process: process.unwrap_or(args.sweep_process),
        burstiness: args.burstiness,
        seed: args.seed,
    };
    let how = args.search.map(|by| Search {
        by,
        share: args.slo_share,
        precision: args.precision,
        max_steps: args.max_search_steps,
    });
    if let Some(h) = &how {
        h.check(&template)?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let server = Server::connect(&args.url).await?;
        eprintln!(
            "run: {} ({}) into {}",
            server.base,
            server.model,
            args.out.display()
        );
        if repeated {
            let mut servers = vec![server];
            if let Some(b) = &args.vs {
                servers.push(Server::connect(b).await?);
                eprintln!(
                    "run: alternating with {} ({})",
                    servers[1].base, servers[1].model
                );
            }
            let refs: Vec<&Server> = servers.iter().collect();
            let unit = match (how, process) {
                (Some(how), _) => repeat::Unit::Search(&template, how),
                (None, None) => repeat::Unit::Sweep(&template, args.rates as usize),
                (None, Some(_)) => repeat::Unit::Step(&plan),
            };
            repeat::run(&refs, &unit, args.repeats as usize, &args.out).await?;
            print!("{}", std::fs::read_to_string(args.out.join("arms.md"))?);
        } else if let Some(how) = how {
            let by = how.by;
            let f = plans::search(&server, &template, how, &args.out).await?;
            print!("{}", std::fs::read_to_string(args.out.join("steps.md"))?);
            let unit = match by {
                SearchBy::Rate => "requests/s",
                SearchBy::Concurrency => "streams",
            };
            match (f.best, f.missed) {
                (None, _) => println!("not even the lowest load met the objectives"),
                (Some(b), None) => {
                    println!("highest load meeting the objectives: {b:.3} {unit} (the most tried)")
                }
                (Some(b), Some(m)) => {
                    println!("highest load meeting the objectives: {b:.3} {unit} ({m:.3} missed)")
                }
            }
        } else if process.is_none() {
            plans::sweep(&server, &template, args.rates as usize, &args.out).await?;
            print!("{}", std::fs::read_to_string(args.out.join("steps.md"))?);
        } else {
            let r = step::run(&server, &plan, &args.out).await?;
            print!("{}", std::fs::read_to_string(r.dir.join("summary.md"))?);
            if r.summary.failed > 0 {
                eprintln!(
                    "run: {} requests failed (their errors are in {})",
                    r.summary.failed,
                    r.dir.join("traces.jsonl.gz").display()
                );
            }
        }
        anyhow::Ok(())
    })?;
    let page = report::write(&args.out)?;
    eprintln!("run: the report is {}", page.display());
    Ok(())
}
