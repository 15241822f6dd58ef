//! Serve the OpenAI-compatible API from a fleet of roles: by default every role on this machine
//! (one process each, linked over loopback TCP); with --fleet, this process is role 0 of a
//! fleet whose other roles run `moefleet role --rank K --fleet FILE` on their hosts.

use super::prelude::*;

#[derive(clap::Args)]
pub struct Args {
    /// Read options from this TOML file: [model] (the options serve and role share), [serve], and
    /// optionally the fleet's [[role]] entries (then the file is the fleet file too). Keys are the
    /// long flags; a flag on the command line wins.
    #[arg(long)]
    config: Option<PathBuf>,
    #[command(flatten)]
    model: ModelArgs,
    /// Number of roles (processes); the layers split evenly (default: six layers per role).
    #[arg(long)]
    roles: Option<usize>,
    /// Address to serve on. The default, loopback, serves this machine only; any other
    /// address without --api-key prints a warning.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Require `Authorization: Bearer KEY` on every route but /health and /metrics (401
    /// without it). Also read from MOEFLEET_API_KEY, which keeps it out of the process list.
    #[arg(long, env = "MOEFLEET_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Largest request body in bytes; a larger one gets 413 [default: 8 MiB, room for a
    /// 512k-position prompt as token ids].
    #[arg(long, default_value_t = moefleet_engine::serve::DEFAULT_BODY_LIMIT)]
    max_body: usize,
    /// Serve requests that name any model (as llama.cpp does); by default a name other
    /// than the served model's gets 404, as OpenAI and vLLM answer.
    #[arg(long)]
    accept_any_model: bool,
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Fleet file (role -> host:port); omit to run every role on this machine.
    #[arg(long)]
    fleet: Option<PathBuf>,
    /// Stream slots (concurrent requests in the pipeline).
    #[arg(long, default_value_t = 176)]
    slots: usize,
    /// Pipeline groups of slots (default: one per role). A frame carries one group's rows, so with
    /// a group per role every role can work on a different frame: what a fleet of machines needs.
    /// On one machine with fewer cores than roles, fewer groups send fewer, fuller frames, and a
    /// frame alone in the pipeline is computed on every core of each role (docs/RESULTS.md,
    /// "Pipeline groups on one machine").
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=4096))]
    groups: Option<u64>,
    /// Requests waiting for a slot before new ones get 503.
    #[arg(long, default_value_t = 64)]
    queue: usize,
    /// Largest max_tokens a request may ask for.
    #[arg(long, default_value_t = 4096)]
    max_tokens_limit: usize,
    /// Prompt rows per frame, per stream: a prompt is sent as segments of this many rows
    /// (--window is the former name).
    #[arg(long = "prefill-rows", visible_alias = "window", default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=512))]
    window: u64,
    /// How prompts enter the pipeline: segments of --prefill-rows rows beside everything else
    /// (windowed), or the reference they are measured against (reference: one prompt at a
    /// time, whole, the next waiting for the previous one's first token; Figure 6).
    #[arg(long, value_enum, default_value_t = Admission::Windowed)]
    admission: Admission,
    /// tokenizer.json (default: the project's tokenizer, compiled in).
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// With --capture-dir: capture every stream (all) or only requests that carry
    /// `"moefleet_capture": true` (requested). The final SSE chunk (or the JSON response)
    /// names each stream's file under `moefleet.capture`.
    #[arg(long, value_enum, default_value_t = CaptureWhich::All, requires = "capture_dir")]
    capture: CaptureWhich,
    #[command(flatten)]
    spec: SpecArgs,
}

pub fn run(args: Args) -> Result<()> {
    let Args {
        config: _,
        model,
        roles,
        host,
        api_key,
        max_body,
        accept_any_model,
        port,
        fleet,
        slots,
        groups,
        queue,
        max_tokens_limit,
        window,
        admission,
        tokenizer: tk,
        capture,
        spec,
    } = args;
    let cfg = model.source().config()?;
    let fleet_file = fleet.as_deref().map(FleetFile::read).transpose()?;
    let n_roles = roles
        .or(fleet_file.as_ref().map(|f| f.role.len()))
        .unwrap_or_else(|| cfg.n_roles());
    layer_range(&cfg, 0, n_roles)?;
    if slots == 0 || slots > 4096 {
        bail!("--slots must be in 1..=4096");
    }
    let groups = groups.map(|g| g as usize);
    if groups.is_some_and(|g| g > slots) {
        bail!("--groups must be at most --slots ({slots})");
    }
    let mut rc = model.run_config(n_roles, slots, queue, window as usize);
    rc.groups = groups;
    rc.admission = admission;
    rc.spec = spec.options()?;
    if rc.spec.depth > 1 && n_roles < 2 {
        bail!("--speculate needs a pipeline of at least two roles (here: one)");
    }
    let tok = std::sync::Arc::new(model.tokenizer(tk.as_deref())?);
    if api_key.as_deref() == Some("") {
        tracing::warn!(
            "the API key given (--api-key or MOEFLEET_API_KEY) is empty: no key is required"
        );
    }
    let sc = ServeConfig {
        host,
        port,
        queue,
        max_tokens: max_tokens_limit,
        body_limit: max_body,
        accept_any_model,
        api_key: api_key.filter(|k| !k.is_empty()),
        capture: match (&model.capture_dir, capture) {
            (None, _) => CaptureMode::Off,
            (Some(_), CaptureWhich::All) => CaptureMode::All,
            (Some(_), CaptureWhich::Requested) => CaptureMode::Requested,
        },
    };
    let exe = std::env::current_exe()?;
    // every local role's share of the cores (role 0 computes in this process), unless
    // RAYON_NUM_THREADS sizes the pools
    let role_threads =
        fleet::local_role_threads(n_roles, std::env::var_os("RAYON_NUM_THREADS").is_some());
    match (&fleet_file, role_threads) {
        (None, Some(1)) => pipeline::share_cores(),
        (None, Some(t)) => rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build_global()
            .context("sizing role 0's compute threads")?,
        _ => {}
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(moefleet_engine::serve::run(
        sc,
        tok,
        slots,
        rc.budget,
        || async move {
            match &fleet_file {
                Some(f) => fleet::start_from_file(&rc, f).await,
                None => fleet::start_local(&rc, &exe, role_threads).await,
            }
        },
        async {
            let _ = tokio::signal::ctrl_c().await;
            eprintln!("moefleet: shutting down");
        },
    ))?;
    Ok(())
}

/// Which streams `serve --capture-dir` captures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum CaptureWhich {
    All,
    Requested,
}
