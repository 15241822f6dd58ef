//! `moefleet-harness`: argument parsing and wiring only. Over 600 lines because it holds the clap
//! definitions (with their `--help` text) and one short arm per subcommand; each experiment's work
//! lives in its library module (`driver`, `analysis`, `experiments::*`, `figures`, `claims`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use moefleet_harness::analysis::tables;
use moefleet_harness::claims;
use moefleet_harness::driver::sweep::{self, SweepConfig};
use moefleet_harness::experiments::context;
use moefleet_harness::experiments::draft::run::{self as draft_run, ModelSource};
use moefleet_harness::workload::Plan;

#[derive(Parser)]
#[command(
    name = "moefleet-harness",
    version,
    about = "Replays the Cascadia experiments against moefleet or any OpenAI-compatible server"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Tables of a side-by-side run with llama.cpp (`scripts/peer.sh`, `make peer`): reads
    /// DIR/llama-bench.json (llama-bench -o json), DIR/moefleet-bench.json (moefleet bench --json)
    /// and DIR/peer.json (commands, load averages); writes DIR/peer.csv and DIR/PEER.md, with
    /// every rate recomputed from each side's per-repetition samples.
    Peer { dir: PathBuf },
    /// Tables of a GGUF parity run (`scripts/gguf_parity.sh`): compares DIR/llama.jsonl
    /// (llama-server), DIR/moefleet.jsonl (`moefleet continue`) and DIR/fleet.jsonl (a fleet)
    /// token for token and writes DIR/parity.csv, DIR/PARITY.md (with DIR/meta.json's run facts)
    /// and parity.png/.svg.
    Parity { dir: PathBuf },
    /// Print the facts every record carries about this machine (CPU, SIMD flags, cores, memory,
    /// kernel, the engine kernels' instruction set, load averages, date) as JSON, for scripts.
    Host,
    /// Figure 6 (paper §5.3) from two sweeps of the burst plan (`workloads/plans/burst.toml`,
    /// `scripts/figure6.sh`): one against a fleet with `--admission reference` (whole prompts, one
    /// at a time), one with `--admission windowed --window 8`, each analysed. Pairs their retained
    /// phases by position and writes OUT/figure6.csv/.md and figure6.png/.svg: median TTFT and
    /// whole-phase tokens per second per phase, the paper's 019 (baseline) and 024 (windows) values
    /// as markers.
    Figure6 {
        /// The reference-admission run directory (with phases.csv).
        #[arg(long)]
        reference: PathBuf,
        /// The windowed run directory (with phases.csv).
        #[arg(long)]
        windowed: PathBuf,
        /// Where the figure and tables go.
        #[arg(long)]
        out: PathBuf,
        /// The paper's prefill.csv [default: reproduction/paper/prefill.csv when it exists].
        #[arg(long)]
        paper: Option<PathBuf>,
        /// Draw ours alone.
        #[arg(long, conflicts_with = "paper")]
        no_paper: bool,
    },
    /// Tables and figure of a speculation experiment (MEASUREMENTS.md §6) under ROOT, as
    /// `scripts/speculation.sh` writes it: ROOT/off and one directory per proposer set (suffix,
    /// phrase, draft, all), each a sweep of the speculation plan (first and repeated pass) with
    /// role 0's records in records/ (or profiles/). Writes ROOT/table3.csv/.md (the paper's Table 3 from `all`),
    /// onoff.csv/.md (each set against off, same prompts), model.csv/.md (the first-order model
    /// against the measured speedup) and speculation.png/.svg.
    Speculation {
        root: PathBuf,
        /// Repository root (the paper's published data under reproduction/paper).
        #[arg(long, default_value = ".")]
        repo: PathBuf,
    },
    /// Build a capture corpus through the API (MEASUREMENTS.md §5): for each of the twelve
    /// families, the first --eval-per-family distinct prompts (evaluation) and the next
    /// --train-per-family (training), each one streamed chat completion of --tokens greedy tokens
    /// asking for its capture. The server must run with `moefleet serve --capture-dir DIR` on this
    /// machine (the harness reads the file each final chunk names). Every capture is checked
    /// (finite values, record size, prompt ids = the tokenizer's ids of the rendered prompt,
    /// generated ids decode to the API's text) and copied to OUT/eval/ or OUT/train/; OUT/
    /// sequences.jsonl indexes them, OUT/corpus.json says what was asked and what fell short.
    Capture {
        /// Base URL of the server (e.g. http://127.0.0.1:8080).
        #[arg(long)]
        url: String,
        /// Corpus directory to create.
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=1000))]
        eval_per_family: u64,
        #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u64).range(0..=4000))]
        train_per_family: u64,
        /// Generated positions per sequence.
        #[arg(long, default_value_t = 160, value_parser = clap::value_parser!(u64).range(3..=100_000))]
        tokens: u64,
        /// Requests in flight at once.
        #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u64).range(1..=512))]
        concurrency: u64,
        /// Prompt-key prefix (keys are PREFIX/FAMILY/INDEX).
        #[arg(long, default_value = "mtp")]
        prefix: String,
        /// Also capture passages of workloads/corpus (compiled in) under each passage task
        /// (summary, continuation), up to this many per task; one passage in eight is held out
        /// for evaluation.
        #[arg(long, default_value_t = 0)]
        passages: u64,
        /// The server's tokenizer.json, or its GGUF file [default: the project's tokenizer,
        /// compiled in].
        #[arg(long)]
        tokenizer: Option<PathBuf>,
    },
    /// Fit the draft head to the model from a corpus's training captures: per module, three
    /// closed-form ridge regressions onto RMSNorm_final(residual(t+k+1)) (input projection,
    /// attention output, MLP down); see harness/src/experiments/draft/fit.rs. Writes the head export (manifest
    /// naming its training captures, mtp.safetensors) and OUT/fit.json.
    FitDraft {
        /// A corpus directory from `capture`.
        corpus: PathBuf,
        /// Directory for the fitted head.
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        model: DraftModel,
        /// Seed of the synthetic weights the fit starts from and keeps where it does not fit.
        #[arg(long, default_value_t = 7)]
        head_seed: u64,
        /// Ridge strength, relative to the mean diagonal of XᵀX.
        #[arg(long, default_value_t = 1e-3)]
        lambda: f64,
        /// Fit a control head instead: every module's targets permuted across the training rows
        /// with this seed, so it should agree with the model no better than chance.
        #[arg(long)]
        shuffle_targets: Option<u64>,
        /// Gradient-descent steps per module on W_down after the regressions (cross-entropy of
        /// the model's own next token through the shared unembedding; 0: regressions only).
        #[arg(long, default_value_t = 400)]
        descent_steps: u64,
        /// Rows per descent step.
        #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=65536))]
        descent_batch: u64,
        /// Adam's step relative to the regression's RMS weight.
        #[arg(long, default_value_t = 0.01)]
        descent_lr: f32,
        #[arg(long)]
        tokenizer: Option<PathBuf>,
    },
    /// Replay the fitted head over a corpus's evaluation captures (teacher, self-fed and
    /// no-context modes; the paper's three vocabulary restrictions scaled to this vocabulary; the
    /// deployment grids), beside the untrained head of the same seed, repeat-last and a bigram of
    /// the training captures. Writes OUT/anchors.csv.gz (every prediction at every anchor),
    /// mtp.csv, chain.csv, table6.md, chain.md, figure8.png/.svg and replay.json (anchors per
    /// second per calculation).
    Replay {
        /// A corpus directory from `capture`.
        corpus: PathBuf,
        /// The head from `fit-draft`.
        #[arg(long)]
        head: PathBuf,
        #[arg(long)]
        out: PathBuf,
        /// The model, if not the one the head's manifest names.
        #[command(flatten)]
        model: DraftModel,
        /// Repository root (the paper's published data under reproduction/paper is tabled beside
        /// ours when present).
        #[arg(long, default_value = ".")]
        root: PathBuf,
        /// Draw the paper's per-family agreement over ours in Figure 8.
        #[arg(long)]
        paper_overlay: bool,
        /// A control head (`fit-draft --shuffle-targets`) to replay beside the fitted one.
        #[arg(long)]
        control_head: Option<PathBuf>,
        #[arg(long)]
        tokenizer: Option<PathBuf>,
    },
    /// Real-prompt context scan (MEASUREMENTS.md §3.2): needle prompts of growing size, one at a
    /// time; TTFT, decode rate and machine load per request.
    ///
    /// Prompts of about N tokens (natural text from workloads/corpus, a sentence near the start
    /// stating an access code, a final question asking for it), sized with the engine's
    /// tokenizer, are sent one at a time through /v1/completions (greedy, streamed), smallest
    /// first. Records TTFT, prefill
    /// and decode rates, output tokens, whether the access code came back, and the load of this
    /// machine (CPU cores busy, least MemAvailable; sampled every --sample-s) with the server's
    /// /api/stats. Stops before a request predicted to overrun the budget left. Writes
    /// OUT/context.jsonl (one record per request, as it ends), OUT/context.csv (the paper's
    /// columns; gpu_busy_pct and package_w left empty) and OUT/context_run.json.
    Context {
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
    },
    /// Fit TTFT = aN + bN^2 to the context scans under ROOT and draw Figure 7.
    ///
    /// Least squares through the origin (N = prompt tokens) over each scan's single-stream points
    /// under ROOT (scan-serial/ and scan-parallel/, each written by `context`), and report 1/a,
    /// b, the predicted TTFT at 128k, 256k and 1M positions and the implied attention rate
    /// (flops_per_key = 4 * n_q_heads * head_dim per global layer; N^2/2 keys in a causal
    /// prefill). Probes (probe-*/context_probe.csv, `moefleet probe` tabled by `moefleet-harness probe`) give the per-role decode
    /// and attention cost. Writes ROOT/fit.json, ROOT/fit.csv and ROOT/figure7.{png,svg}; any
    /// subset of the inputs will do.
    ContextFit {
        /// Directory holding scan-*/context.csv and/or probe-*/context_probe.csv (or a
        /// context.csv of its own).
        root: PathBuf,
        /// Model preset for the FLOP count [default: the model named in each scan's
        /// context_run.json].
        #[arg(long)]
        preset: Option<String>,
        /// Roles of the scanned server; the measured decode time per token is divided by it
        /// [default: each scan's context_run.json].
        #[arg(long)]
        roles: Option<usize>,
        /// Title over the figure [default: what it shows; the runs are named under it].
        #[arg(long)]
        title: Option<String>,
    },
    /// Paired concurrency sweep: replay a plan against an OpenAI-compatible server and record one
    /// trace per request under --out.
    Sweep {
        /// Base URL of the server (e.g. http://127.0.0.1:8080) [with --resume: the run's].
        #[arg(long, required_unless_present = "resume")]
        url: Option<String>,
        /// Continue the interrupted run in --out: its plan and settings, the finished phases
        /// kept, the phase that was cut short run again (its partial traces kept aside).
        #[arg(long, conflicts_with_all = ["plan", "levels", "max_tokens", "honour_eos"])]
        resume: bool,
        /// A built-in plan (paper, quick) or a plan TOML file.
        #[arg(long, default_value = "quick")]
        plan: String,
        /// Only these levels of the plan (comma-separated), e.g. 1,88.
        #[arg(long, value_delimiter = ',')]
        levels: Option<Vec<usize>>,
        /// Override the plan's output tokens per request.
        #[arg(long)]
        max_tokens: Option<usize>,
        /// Run directory to create (e.g. results/RUN).
        #[arg(long)]
        out: PathBuf,
        /// Let the server stop at end-of-text (by default requests ask it to ignore EOS so every
        /// request yields exactly the output cap).
        #[arg(long)]
        honour_eos: bool,
        /// Seconds to wait for the server to become idle before a phase.
        #[arg(long, default_value_t = 120)]
        idle_timeout_s: u64,
    },
    /// Tables from the token traces of a run: phases.csv, curve.csv (each with its Parquet twin)
    /// and table4.md, computed with polars.
    Analyze { run: PathBuf },
    /// Table the in-role context probe (MEASUREMENTS.md §3.1) of each DIR: reads the raw
    /// DIR/probe-role-K.json records `moefleet probe --out DIR` (or `serve --context-probe DIR`)
    /// wrote and writes DIR/context_probe.csv (the paper's columns: per size, the roles reporting
    /// and fitting, the largest need, decode and attention medians over roles) and DIR/probe.json
    /// (attention ms per 1k positions, KV bytes per position, the largest size every role fitted).
    Probe {
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
    },
    /// Write the Parquet twin (x.parquet beside x.csv, columns typed) of every CSV table under
    /// each DIR, recursively: for tables written before the harness wrote twins, or by hand.
    Parquet {
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
    },
    /// Figures from the tables and records of a run directory, titled with the run its record
    /// names (model, plan, host, date, commit): figure5.png/.svg from a sweep's curve.csv and
    /// run.json (run `analyze` first), or figure3.png/.svg from a dense run's dense.csv and
    /// dense.json (beside reproduction/paper/dense.csv when present).
    Figures {
        run: PathBuf,
        /// Title over Figure 5 (default: what it shows; the run is named under it).
        #[arg(long)]
        title: Option<String>,
    },
    /// Bounded soak against a moefleet server on this machine: --streams streams kept open for
    /// --duration-s, with --burst-factor times as many offered for --burst-s every
    /// --burst-every-s (at-capacity 503s are retried, and counted). Every prompt is first run
    /// alone; under load each output must equal its output alone, run to its cap, and count as
    /// usage says. Samples RSS and open descriptors of every role process (`/api/stats` lists
    /// them), the load average and the server's counters every --sample-s. Writes
    /// OUT/requests.jsonl.gz (one row per request), OUT/samples.jsonl and OUT/soak.json (config,
    /// counters before and after, checks); exits non-zero if a check fails.
    Soak {
        /// Base URL of the server (e.g. http://127.0.0.1:8080).
        #[arg(long)]
        url: String,
        /// Directory to create.
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value_t = 1800.0)]
        duration_s: f64,
        #[arg(long, default_value_t = 176, value_parser = clap::value_parser!(u64).range(1..=4096))]
        streams: u64,
        #[arg(long, default_value_t = 300.0)]
        burst_every_s: f64,
        #[arg(long, default_value_t = 60.0)]
        burst_s: f64,
        #[arg(long, default_value_t = 2.0)]
        burst_factor: f64,
        #[command(flatten)]
        prompts: ReliabilityPrompts,
        #[arg(long, default_value_t = 10.0)]
        sample_s: f64,
        /// Longest wait for the requests in flight at the end to finish.
        #[arg(long, default_value_t = 600.0)]
        drain_s: f64,
    },
    /// Make faults under load and watch the fleet recover (a moefleet server on this machine; its
    /// `/api/stats` names the role processes). Per --fault (kill:ROLE, stop:ROLE or cut:SECONDS, in
    /// order): --streams streams run for --lead-s, the fault is made, /health is read every
    /// 20 ms until it reports the loss and until it is ready again, the streams run --tail-s
    /// more, and every prompt is asked alone again and must answer as before the first fault.
    /// Writes OUT/requests.jsonl.gz and OUT/faults.json (events and findings per fault); exits
    /// non-zero if a fault costs more than its streams in flight or the fleet does not come back.
    Faults {
        #[arg(long)]
        url: String,
        #[arg(long)]
        out: PathBuf,
        /// kill:ROLE (SIGKILL), stop:ROLE (SIGSTOP) or cut:SECONDS (--cut-cmd, then --heal-cmd
        /// SECONDS later).
        #[arg(long = "fault", required = true)]
        faults: Vec<moefleet_harness::reliability::faults::Fault>,
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=1024))]
        streams: u64,
        #[command(flatten)]
        prompts: ReliabilityPrompts,
        #[arg(long, default_value_t = 5.0)]
        lead_s: f64,
        #[arg(long, default_value_t = 5.0)]
        tail_s: f64,
        #[arg(long, default_value_t = 60.0)]
        detect_limit_s: f64,
        #[arg(long, default_value_t = 120.0)]
        ready_limit_s: f64,
        /// Shell command that cuts a link (e.g. `ip -n NS link set IF down`).
        #[arg(long)]
        cut_cmd: Option<String>,
        /// Shell command that mends it.
        #[arg(long)]
        heal_cmd: Option<String>,
    },
    /// Print the reliability table rendered from committed records (faults runs, a soak, the
    /// wire fuzzing record), as the README holds it (and `scripts/reliability.sh` writes it to
    /// OUT/RELIABILITY.md).
    Reliability {
        #[arg(long, default_value = ".")]
        root: PathBuf,
        /// Faults run directories, relative to ROOT.
        #[arg(long = "faults", required = true)]
        faults: Vec<String>,
        #[arg(long)]
        soak: String,
        #[arg(long)]
        fuzz: String,
    },
    /// The README's tables that are rendered from committed records (the simulator's and the
    /// link records', named under `readme_tables` in reproduction/claims.toml): print each, or with
    /// --write put the renderings between their markers in ROOT/README.md. `verify` checks them.
    ReadmeTables {
        #[arg(long, default_value = ".")]
        root: PathBuf,
        #[arg(long)]
        write: bool,
    },
    /// Link emulation, measured: the kernel's tbf shaper on a veth pair (a `scripts/link_tbf.sh`
    /// directory) against bytes × 8 / rate, and the fleet's curve with and without the engine's
    /// emulated links (a `scripts/link_emulation.sh` directory), re-analysed from the traces.
    /// Writes DIR/links.md for each given.
    Links {
        #[arg(long)]
        tbf: Option<PathBuf>,
        #[arg(long)]
        fleet: Option<PathBuf>,
    },
    /// The fleet simulator: a discrete-event model of the engine calibrated from per-frame stage
    /// records (`moefleet serve --profile-dir`), replaying sweep plans into the harness's own trace
    /// records. `validate` calibrates it on some levels of a measured sweep and compares the
    /// simulated curve with the measured one at every level.
    #[command(subcommand)]
    Simulate(moefleet_harness::simulate::cli::SimCmd),
    /// Recompute every claim of reproduction/claims.toml from the committed records, re-analyse
    /// the claimed runs, and check CLAIMS.md; fails naming each claim that does not hold.
    Verify {
        /// Repository root.
        #[arg(long, default_value = ".")]
        root: PathBuf,
    },
    /// Write RUN/REPORT.md: what ran, where, our tables and figure, and the paper side by side.
    Report {
        run: PathBuf,
        #[arg(long, default_value = ".")]
        root: PathBuf,
    },
    /// Render reproduction/CLAIMS.md from reproduction/claims.toml.
    Claims {
        #[arg(long, default_value = ".")]
        root: PathBuf,
        /// Print each claim's recomputed value beside the stated one.
        #[arg(long)]
        show: bool,
    },
    /// Ceilings of this machine, in one run of about half a minute: sustained memory read
    /// bandwidth and the fp32 FMA rate with 1 thread and with all threads, then the engine's INT4
    /// product at the `inkling` expert gate shape (3072 x 6144, group 32, one row) and its INT8
    /// product at the attention q shape (8192 x 6144), each on all threads and on a 1-thread pool,
    /// compared with the bandwidth of the same thread count. Writes OUT/ceilings.json and prints a
    /// table; progress on stderr.
    Ceilings {
        /// Directory for ceilings.json (created if missing).
        #[arg(long)]
        out: PathBuf,
        /// Size of the streamed buffer in MiB; keep it far larger than the caches.
        #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(64..=65536))]
        buffer_mib: u64,
        /// Timed passes over the buffer per thread count (after one untimed pass).
        #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u64).range(1..=1000))]
        passes: u64,
        /// Milliseconds of timed calls per product and thread count (at least 15 calls).
        #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
        product_ms: u64,
    },
    /// The kernel microbenchmarks against this machine's ceilings: each criterion benchmark's
    /// median time, the bytes or FLOPs per call it declares, the rate achieved and its percentage
    /// of the all-threads read bandwidth (bytes) or fp32 FMA rate (FLOPs) of `ceilings`; for int4
    /// and int8, time at n rows over time at 1 row. Reads `<group>/<function>/<param>/new/` only.
    /// Writes OUT/kernels.csv and OUT/kernels.md and prints the markdown.
    BenchTable {
        /// Criterion's directory (`cargo bench -p moefleet-engine --bench kernels` writes
        /// target/criterion).
        #[arg(long, default_value = "target/criterion")]
        criterion: PathBuf,
        /// The ceilings.json of `moefleet-harness ceilings` (or its directory).
        #[arg(long)]
        ceilings: PathBuf,
        /// Directory for kernels.csv and kernels.md (created if missing).
        #[arg(long)]
        out: PathBuf,
    },
    /// Dense blocks as fused slices against three matrix calls (MEASUREMENTS.md §4): for each
    /// dense layer and row count, the median of one MLP call with each form (FP16 expert path on,
    /// forms interleaved), their agreement (cosine, relative difference), and why one is faster;
    /// on the native kernels and on OpenVINO graphs of the same weights, side by side.
    /// Writes OUT/dense.csv (the paper's columns), OUT/dense.json and OUT/figure3.{png,svg}.
    /// Each `inkling` dense layer is generated on the spot (about 255 MB of INT4).
    Dense {
        /// Directory for the outputs (created if missing).
        #[arg(long)]
        out: PathBuf,
        /// Timed calls of each form per (layer, rows).
        #[arg(long, default_value_t = 31, value_parser = clap::value_parser!(u64).range(1..=100_000))]
        calls: u64,
        /// Untimed calls of each form first.
        #[arg(long, default_value_t = 2)]
        warmup: u64,
        /// Seed of the synthetic weights (and of the input rows).
        #[arg(long, default_value_t = 7)]
        seed: u64,
        /// Preset whose dense layers are measured.
        #[arg(long, default_value = "inkling")]
        preset: String,
        /// Dense layers to measure (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "0,1")]
        layers: Vec<usize>,
        /// Input rows per call (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "1,2")]
        rows: Vec<usize>,
        /// The paper's dense.csv to draw beside ours [default: reproduction/paper/dense.csv when
        /// it exists, else ours alone].
        #[arg(long)]
        paper: Option<PathBuf>,
        /// A ceilings.json whose read bandwidth the note compares with [default:
        /// OUT/ceilings.json when it exists].
        #[arg(long)]
        ceilings: Option<PathBuf>,
        /// Run on a pool of this many threads [default: rayon's, all logical CPUs].
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
        threads: Option<u64>,
        /// Backends measured side by side, each layer and row count in turn: the engine's native
        /// kernels and OpenVINO graphs of the same weights (CPU, f32; the wheel must be installed).
        #[arg(
            long,
            value_delimiter = ',',
            value_enum,
            default_value = "native,openvino"
        )]
        backends: Vec<moefleet_engine::model::config::BackendKind>,
    },
    /// The native kernels against the OpenVINO backend in one run, as ratios: one `inkling` MoE
    /// layer (attention, router, the eight experts a row selects) per forward of 1 and 2 rows, and
    /// `inkling-mini` per decode token in one process, alternating the backends. Writes
    /// OUT/backends.json (every sample, load average) and OUT/backends.csv.
    Backends {
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value_t = 7)]
        seed: u64,
        /// Preset of the per-layer measurement.
        #[arg(long, default_value = "inkling")]
        layer_preset: String,
        /// Layer measured (a MoE layer: 2 or above).
        #[arg(long, default_value_t = 2)]
        layer: usize,
        /// Rows per call (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "1,2")]
        rows: Vec<usize>,
        /// Timed calls of each backend per row count.
        #[arg(long, default_value_t = 31, value_parser = clap::value_parser!(u64).range(1..=100_000))]
        calls: u64,
        /// Preset of the per-token measurement (whole model, one process).
        #[arg(long, default_value = "inkling-mini")]
        token_preset: String,
        /// Decode tokens per round.
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=100_000))]
        tokens: u64,
        /// Rounds of each backend, alternating.
        #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u64).range(1..=1000))]
        rounds: u64,
    },
    /// Stage-level effect of the dense form: role 0 compute (and MLP) time per frame, median and
    /// p10/p90, overall and by rows per frame, from the role-0.jsonl profiles of two fleet runs
    /// (`moefleet serve --profile-dir DIR --dense-form ...`). Writes OUT/dense_stage.csv and
    /// OUT/dense_stage.json. scripts/dense_stage.sh makes both runs.
    DenseStage {
        /// Profile directory (or role-0.jsonl) of the run with --dense-form three-matmul.
        #[arg(long)]
        three: PathBuf,
        /// Profile directory (or role-0.jsonl) of the run with --dense-form fused-slices.
        #[arg(long)]
        fused: PathBuf,
        /// Directory for the outputs (created if missing).
        #[arg(long)]
        out: PathBuf,
    },
}

/// The model a draft head shares its embedding and unembedding with.
#[derive(clap::Args)]
struct DraftModel {
    /// Preset of the served model's synthetic weights [default for fit-draft: the model the
    /// corpus names; for replay: the head's].
    #[arg(long)]
    preset: Option<String>,
    /// Seed of the served model's synthetic weights.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// An export directory of the served model instead of a preset.
    #[arg(long, conflicts_with = "preset")]
    weights: Option<PathBuf>,
    /// A GGUF file of the served model instead of a preset (its tokenizer is the default
    /// --tokenizer).
    #[arg(long, conflicts_with_all = ["preset", "weights"])]
    model: Option<PathBuf>,
}

impl DraftModel {
    fn source(&self, fallback_preset: Option<&str>) -> Option<ModelSource> {
        if let Some(f) = &self.model {
            return Some(ModelSource::Gguf { file: f.clone() });
        }
        match (&self.weights, &self.preset, fallback_preset) {
            (Some(d), _, _) => Some(ModelSource::Export { dir: d.clone() }),
            (None, Some(p), _) => Some(ModelSource::Preset {
                name: p.clone(),
                seed: self.seed,
            }),
            (None, None, Some(p)) => Some(ModelSource::Preset {
                name: p.to_string(),
                seed: self.seed,
            }),
            _ => None,
        }
    }
}

/// The paper's published `file` under reproduction/paper/ as the default overlay of a figure, or
/// None (saying so on stderr) when this is not run from the repository root.
fn published(cmd: &str, file: &str) -> Option<PathBuf> {
    let p = PathBuf::from("reproduction/paper").join(file);
    if !p.exists() {
        eprintln!(
            "{cmd}: {} not found; drawing ours alone (use --paper)",
            p.display()
        );
    }
    p.exists().then_some(p)
}

/// The prompts of a reliability run.
#[derive(clap::Args)]
struct ReliabilityPrompts {
    /// Distinct prompts (of the built-in families), each first run alone for its reference.
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    prompts: u64,
    /// Output caps spread evenly from --min-tokens to --max-tokens over the prompts; every
    /// request runs to its cap (`ignore_eos`).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    min_tokens: u64,
    #[arg(long, default_value_t = 96, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    max_tokens: u64,
}

/// A two-thread runtime for one command.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

/// Run a sweep on a runtime of its own.
fn run_sweep(cfg: SweepConfig) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(sweep::sweep(cfg))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // the in-process kernel experiments honour MOEFLEET_ISA as the engine does
    if let Err(e) = moefleet_engine::kernels::apply_isa_env() {
        eprintln!("moefleet-harness: error: {e}");
        return ExitCode::from(2);
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("moefleet-harness: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.cmd {
        Cmd::Figure6 {
            reference,
            windowed,
            out,
            paper,
            no_paper,
        } => {
            let paper = if no_paper {
                None
            } else {
                paper.or_else(|| published("figure6", "prefill.csv"))
            };
            let md = moefleet_harness::figures::figure6::run(
                &reference,
                &windowed,
                &out,
                paper.as_deref(),
            )?;
            print!("{md}");
            eprintln!(
                "wrote {0}/figure6.png/.svg, figure6.csv and figure6.md",
                out.display()
            );
        }
        Cmd::Parity { dir } => {
            print!("{}", moefleet_harness::experiments::parity::write(&dir)?);
            eprintln!(
                "wrote {0}/parity.csv, PARITY.md and parity.png/.svg",
                dir.display()
            );
        }
        Cmd::Host => {
            println!(
                "{}",
                serde_json::to_string_pretty(&moefleet_harness::host::facts())?
            );
        }
        Cmd::Peer { dir } => {
            print!("{}", moefleet_harness::experiments::peer::write(&dir)?);
            eprintln!("wrote {0}/peer.csv and {0}/PEER.md", dir.display());
        }
        Cmd::Speculation { root, repo } => {
            print!(
                "{}",
                moefleet_harness::experiments::speculation::write(&root, &repo)?
            );
            eprintln!(
                "wrote {0}/table3.md, onoff.md, model.md (and .csv) and speculation.png/.svg",
                root.display()
            );
        }
        Cmd::Capture {
            url,
            out,
            eval_per_family,
            train_per_family,
            tokens,
            concurrency,
            prefix,
            passages,
            tokenizer,
        } => {
            let cfg = moefleet_harness::experiments::draft::capture::CaptureConfig {
                passages_per_task: passages as usize,
                url,
                out,
                prefix,
                eval_per_family: eval_per_family as usize,
                train_per_family: train_per_family as usize,
                tokens: tokens as usize,
                concurrency: concurrency as usize,
                tokenizer,
            };
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            rt.block_on(moefleet_harness::experiments::draft::capture::run(cfg))?;
        }
        Cmd::FitDraft {
            corpus,
            out,
            model,
            head_seed,
            lambda,
            shuffle_targets,
            descent_steps,
            descent_batch,
            descent_lr,
            tokenizer,
        } => {
            if !(descent_lr.is_finite() && descent_lr > 0.0) {
                bail!("--descent-lr must be a positive number");
            }
            if !(lambda.is_finite() && lambda > 0.0) {
                bail!("--lambda must be a positive number");
            }
            let named = std::fs::read_to_string(corpus.join("corpus.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .and_then(|v| v["model"].as_str().map(str::to_string));
            let tokenizer = tokenizer.or(model.model.clone());
            let Some(model) = model.source(named.as_deref()) else {
                bail!(
                    "the corpus names no model: pass --preset (and --seed), --weights or --model"
                );
            };
            draft_run::fit_draft(&draft_run::FitArgs {
                corpus,
                out,
                model,
                tokenizer,
                fit: moefleet_harness::experiments::draft::fit::FitConfig {
                    seed: head_seed,
                    lambda,
                    shuffle_targets,
                    descent: moefleet_harness::experiments::draft::descent::DescentConfig {
                        steps: descent_steps as usize,
                        batch: descent_batch as usize,
                        lr_rel: descent_lr,
                        seed: head_seed,
                    },
                },
            })?;
        }
        Cmd::Replay {
            corpus,
            head,
            out,
            model,
            root,
            paper_overlay,
            control_head,
            tokenizer,
        } => {
            draft_run::replay_draft(&draft_run::ReplayArgs {
                corpus,
                head,
                out,
                tokenizer: tokenizer.or(model.model.clone()),
                model: model.source(None),
                root,
                overlay: paper_overlay,
                control: control_head,
            })?;
        }
        Cmd::Context {
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
        } => {
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
        }
        Cmd::ContextFit {
            root,
            preset,
            roles,
            title,
        } => {
            let inputs = context::inputs::discover(&root)?;
            let opts = context::report::FitOptions { preset, roles };
            let report = context::report::build(&inputs, &opts)?;
            context::report::write(&root, &report)?;
            let title = title.unwrap_or_else(|| "Figure 7: context length, one stream".into());
            // the runs, from the scans' records; copied data (the paper's) has none
            let labels = inputs
                .scans
                .iter()
                .map(|s| s.dir.join("context_run.json"))
                .filter(|p| p.exists())
                .map(|p| moefleet_harness::figures::run_label::RunLabel::read(&p))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let run_line = if labels.is_empty() {
                "no run record (context_run.json) beside the scans".to_string()
            } else {
                moefleet_harness::figures::run_label::RunLabel::join(&labels).line()
            };
            moefleet_harness::figures::figure7::draw(
                &root,
                &inputs.scans,
                &report.scans,
                &inputs.probes,
                &title,
                &run_line,
            )?;
            print!("{}", context::report::render_text(&report));
            eprintln!(
                "wrote {0}/fit.json, {0}/fit.csv, {0}/figure7.png and {0}/figure7.svg",
                root.display()
            );
        }
        Cmd::Sweep {
            url,
            resume: true,
            out,
            idle_timeout_s,
            ..
        } => {
            let m = moefleet_harness::driver::manifest::RunManifest::read(&out)
                .context("--resume needs the run's run.json")?;
            let plan: Plan =
                serde_json::from_value(m.plan.clone()).context("the run's plan in run.json")?;
            let cfg = SweepConfig {
                url: url.unwrap_or(m.url),
                plan,
                out,
                ignore_eos: m.ignore_eos,
                idle_timeout: Duration::from_secs(idle_timeout_s),
                resume: true,
            };
            run_sweep(cfg)?;
        }
        Cmd::Sweep {
            url,
            plan,
            levels,
            max_tokens,
            out,
            honour_eos,
            idle_timeout_s,
            ..
        } => {
            let url = url.ok_or_else(|| anyhow::anyhow!("--url is required"))?;
            let mut plan = Plan::load(&plan)?;
            if let Some(ls) = levels {
                for l in &ls {
                    if !plan.levels.contains(l) {
                        bail!(
                            "level {l} is not in plan '{}' (levels: {:?})",
                            plan.name,
                            plan.levels
                        );
                    }
                }
                plan.levels.retain(|l| ls.contains(l));
            }
            if let Some(m) = max_tokens {
                if m == 0 {
                    bail!("--max-tokens must be at least 1");
                }
                plan.max_tokens = m;
            }
            let cfg = SweepConfig {
                url,
                plan,
                out,
                ignore_eos: !honour_eos,
                idle_timeout: Duration::from_secs(idle_timeout_s),
                resume: false,
            };
            run_sweep(cfg)?;
        }
        Cmd::Analyze { run } => {
            let table = tables::analyze(&run)?;
            print!("{table}");
            eprintln!(
                "wrote {0}/phases.csv, {0}/curve.csv (and their .parquet) and {0}/table4.md",
                run.display()
            );
        }
        Cmd::Probe { dirs } => {
            for d in dirs {
                let doc = context::probe::write(&d)?;
                let per = |k: &str, f: &dyn Fn(f64) -> String| {
                    doc[k]
                        .as_f64()
                        .map_or("no slope (one size measured)".to_string(), f)
                };
                eprintln!(
                    "probe: wrote {}/context_probe.csv and probe.json; attention {}, {}",
                    d.display(),
                    per("attention_ms_per_1k_positions", &|v| format!(
                        "{v:.3} ms per 1k positions"
                    )),
                    per("kv_bytes_per_position", &|v| format!(
                        "{v:.0} KV bytes per position"
                    ))
                );
            }
        }
        Cmd::Parquet { dirs } => {
            for d in dirs {
                for csv in moefleet_harness::csv::tables_under(&d)? {
                    moefleet_harness::csv::write_twin(&csv)?;
                    eprintln!("wrote {}", moefleet_harness::csv::twin_of(&csv).display());
                }
            }
        }
        Cmd::Figures { run, title } => {
            if run.join("dense.json").exists() {
                let paper = published("figures", "dense.csv");
                moefleet_harness::figures::figure3::draw(&run, paper.as_deref())?;
                eprintln!("wrote {0}/figure3.png and {0}/figure3.svg", run.display());
                return Ok(());
            }
            let title = title.unwrap_or_else(|| {
                "Figure 5: throughput and time to first token against concurrency".into()
            });
            let run_line =
                moefleet_harness::figures::run_label::RunLabel::read(&run.join("run.json"))?.line();
            moefleet_harness::figures::figure5::draw(&run, &title, &run_line)?;
            eprintln!("wrote {0}/figure5.png and {0}/figure5.svg", run.display());
        }
        Cmd::Report { run, root } => {
            moefleet_harness::report::write(&run, &root)?;
            eprintln!("wrote {}/REPORT.md", run.display());
        }
        Cmd::Soak {
            url,
            out,
            duration_s,
            streams,
            burst_every_s,
            burst_s,
            burst_factor,
            prompts,
            sample_s,
            drain_s,
        } => {
            let cfg = moefleet_harness::reliability::soak::SoakConfig {
                url,
                duration_s,
                streams: streams as usize,
                burst_every_s,
                burst_s,
                burst_factor,
                prompts: prompts.prompts as usize,
                min_tokens: prompts.min_tokens as usize,
                max_tokens: prompts.max_tokens as usize,
                sample_s,
                drain_s,
            };
            let rec = runtime()?.block_on(moefleet_harness::reliability::soak::run(cfg, &out))?;
            println!("{}", serde_json::to_string_pretty(&rec.summary.checks)?);
            eprintln!("wrote {}/soak.json", out.display());
            if !rec.summary.passed {
                bail!("the soak failed a check (see {}/soak.json)", out.display());
            }
        }
        Cmd::Faults {
            url,
            out,
            faults,
            streams,
            prompts,
            lead_s,
            tail_s,
            detect_limit_s,
            ready_limit_s,
            cut_cmd,
            heal_cmd,
        } => {
            let cfg = moefleet_harness::reliability::faults::FaultsConfig {
                url,
                faults,
                streams: streams as usize,
                prompts: prompts.prompts as usize,
                min_tokens: prompts.min_tokens as usize,
                max_tokens: prompts.max_tokens as usize,
                lead_s,
                tail_s,
                detect_limit_s,
                ready_limit_s,
                cut_cmd,
                heal_cmd,
            };
            let rec = runtime()?.block_on(moefleet_harness::reliability::faults::run(cfg, &out))?;
            println!("{}", serde_json::to_string_pretty(&rec.findings)?);
            eprintln!("wrote {}/faults.json", out.display());
            if let Some(f) = rec.findings.iter().find(|f| !f.passed) {
                bail!("{} failed (see {}/faults.json)", f.fault, out.display());
            }
        }
        Cmd::Reliability {
            root,
            faults,
            soak,
            fuzz,
        } => {
            print!(
                "{}",
                moefleet_harness::reliability::table::render(&root, &faults, &soak, &fuzz)?
            );
        }
        Cmd::ReadmeTables { root, write } => {
            use moefleet_harness::claims::readme_tables;
            let f = claims::load(&root)?;
            let path = root.join("README.md");
            let mut readme = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            for t in &f.readme_tables {
                let fresh =
                    readme_tables::render(&root, t).with_context(|| format!("table {}", t.name))?;
                if write {
                    readme = readme_tables::replace(&readme, &t.name, &fresh)?;
                } else {
                    println!("{}\n{fresh}", readme_tables::begin_marker(&t.name));
                }
            }
            if write {
                std::fs::write(&path, readme)?;
                eprintln!(
                    "readme-tables: {} tables written into {}",
                    f.readme_tables.len(),
                    path.display()
                );
            }
        }
        Cmd::Links { tbf, fleet } => {
            use moefleet_harness::experiments::links;
            if tbf.is_none() && fleet.is_none() {
                bail!("give --tbf DIR and/or --fleet DIR");
            }
            if let Some(d) = tbf {
                let md = links::tbf_markdown(&links::tbf_rows(&d)?);
                std::fs::write(d.join("links.md"), &md)?;
                println!("{md}");
            }
            if let Some(d) = fleet {
                let md = links::fleet_markdown(&links::fleet_rows(&d)?);
                std::fs::write(d.join("links.md"), &md)?;
                println!("{md}");
            }
        }
        Cmd::Simulate(cmd) => moefleet_harness::simulate::cli::run(cmd)?,
        Cmd::Verify { root } => {
            let (n, fails) = claims::verify(&root)?;
            if !fails.is_empty() {
                for f in &fails {
                    eprintln!("FAIL {}: {}", f.what, f.why);
                }
                bail!("{} of {n} checks failed", fails.len());
            }
            println!("verify: {n} passed, 0 failed");
        }
        Cmd::Claims { root, show } => {
            let f = claims::load(&root)?;
            if show {
                for c in f.section.iter().flat_map(|s| &s.claim) {
                    match c.rule.eval(&root) {
                        Ok(v) => println!("{:<40} stated {:<22} recomputed {v}", c.id, c.value),
                        Err(e) => println!("{:<40} stated {:<22} ERROR {e:#}", c.id, c.value),
                    }
                }
            } else {
                std::fs::write(root.join("reproduction/CLAIMS.md"), claims::render(&f))?;
                eprintln!("wrote reproduction/CLAIMS.md");
            }
        }
        Cmd::Ceilings {
            out,
            buffer_mib,
            passes,
            product_ms,
        } => {
            moefleet_harness::experiments::ceilings::run(
                &moefleet_harness::experiments::ceilings::CeilingsConfig {
                    out,
                    buffer_bytes: (buffer_mib as usize) << 20,
                    passes: passes as usize,
                    product_budget: Duration::from_millis(product_ms),
                },
            )?;
        }
        Cmd::BenchTable {
            criterion,
            ceilings,
            out,
        } => {
            let (_, md) =
                moefleet_harness::experiments::bench_table::run(&criterion, &ceilings, &out)?;
            print!("{md}");
            eprintln!("wrote {0}/kernels.csv and {0}/kernels.md", out.display());
        }
        Cmd::Backends {
            out,
            seed,
            layer_preset,
            layer,
            rows,
            calls,
            token_preset,
            tokens,
            rounds,
        } => moefleet_harness::experiments::backends::run(
            &moefleet_harness::experiments::backends::BackendsConfig {
                out,
                seed,
                layer_preset,
                layer,
                rows,
                calls: calls as usize,
                token_preset,
                tokens: tokens as usize,
                rounds: rounds as usize,
            },
        )?,
        Cmd::Dense {
            out,
            calls,
            warmup,
            seed,
            preset,
            layers,
            rows,
            paper,
            ceilings,
            threads,
            backends,
        } => {
            let paper = paper.or_else(|| published("dense", "dense.csv"));
            let ceilings = ceilings.or_else(|| {
                let p = out.join("ceilings.json");
                p.exists().then_some(p)
            });
            let cfg = moefleet_harness::experiments::dense::DenseConfig {
                out,
                preset,
                seed,
                layers,
                rows,
                calls: calls as usize,
                warmup: warmup as usize,
                paper,
                ceilings,
                backends,
            };
            match threads {
                Some(t) => rayon::ThreadPoolBuilder::new()
                    .num_threads(t as usize)
                    .build()?
                    .install(|| moefleet_harness::experiments::dense::run(&cfg))?,
                None => moefleet_harness::experiments::dense::run(&cfg)?,
            }
        }
        Cmd::DenseStage { three, fused, out } => {
            moefleet_harness::experiments::dense::stage::run(&three, &fused, &out)?;
        }
    }
    Ok(())
}
