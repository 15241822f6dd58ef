//! `moefleet-harness context`: real-prompt context scan (MEASUREMENTS.md §3.2): needle prompts of
//! growing size, one at a time; TTFT, decode rate and machine load per request.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use moefleet_harness::experiments::context;

#[derive(clap::Args)]
pub struct Args {
    /// Base URL of the server (e.g. http://127.0.0.1:8080).
    #[arg(long)]
    url: String,
    /// Directory for the outputs (created; must not already hold a pass).
    #[arg(long)]
    out: PathBuf,
    /// Target prompt sizes in tokens, comma-separated (at least 128 each).
    #[arg(long, value_delimiter = ',', default_values_t = context::plan::DEFAULT_SIZES)]
    sizes: Vec<usize>,
    /// Leave out sizes above this many tokens.
    #[arg(long)]
    max_size: Option<usize>,
    /// Requests per size [default: 3 up to 16k, 2 up to 64k, 1 above].
    #[arg(long)]
    repeats: Option<usize>,
    /// Output tokens asked for per request.
    #[arg(long, default_value_t = 96)]
    max_tokens: usize,
    /// Ask the server to keep generating past end-of-text (the `ignore_eos` extension). By
    /// default end-of-text ends the answer and the output tokens are recorded as they come.
    #[arg(long)]
    ignore_eos: bool,
    /// Seed of the access codes and of where in the corpus each prompt's text starts.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Seconds the whole pass may take; a request predicted to take longer than what is left
    /// is not sent, and neither is any after it.
    #[arg(long, default_value_t = 1800.0)]
    budget_s: f64,
    /// Seconds between load samples during a request.
    #[arg(long, default_value_t = 5.0)]
    sample_s: f64,
    /// Longest one request may take, in seconds [default: the budget left].
    #[arg(long)]
    request_timeout_s: Option<f64>,
    /// The server's tokenizer.json [default: the project's tokenizer, compiled in].
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// Directory of *.txt natural text [default: workloads/corpus, compiled in].
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// Roles of the server, recorded for the fit [default: counted from /api/profile].
    #[arg(long)]
    roles: Option<usize>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        url,
        out,
        sizes,
        max_size,
        repeats,
        max_tokens,
        ignore_eos,
        seed,
        budget_s,
        sample_s,
        request_timeout_s,
        tokenizer,
        corpus,
        roles,
    } = args;
    let plan = context::plan::plan(&sizes, max_size, repeats)?;
    if max_tokens == 0 {
        bail!("--max-tokens must be at least 1");
    }
    // at most a year: Duration::from_secs_f64 must not overflow
    let seconds = |v: f64| v.is_finite() && v > 0.0 && v <= 3.2e7;
    if !seconds(budget_s) {
        bail!("--budget-s must be a positive number of seconds, at most a year");
    }
    if !(sample_s.is_finite() && (0.1..=3600.0).contains(&sample_s)) {
        bail!("--sample-s must be between 0.1 and 3600");
    }
    if request_timeout_s.is_some_and(|t| !seconds(t)) {
        bail!("--request-timeout-s must be a positive number of seconds, at most a year");
    }
    if roles == Some(0) {
        bail!("--roles must be at least 1");
    }
    let cfg = context::scan::ScanConfig {
        url,
        out: out.clone(),
        plan,
        max_tokens,
        ignore_eos,
        seed,
        budget: Duration::from_secs_f64(budget_s),
        sample_every: Duration::from_secs_f64(sample_s),
        request_timeout: request_timeout_s.map(Duration::from_secs_f64),
        tokenizer,
        corpus,
        roles,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let rows = rt.block_on(context::scan::scan(cfg))?;
    print!("{}", context::table::render(&rows));
    eprintln!(
        "wrote {0}/context.jsonl, {0}/context.csv and {0}/context_run.json",
        out.display()
    );
    Ok(())
}
