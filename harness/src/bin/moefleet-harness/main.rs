//! `moefleet-harness`: argument parsing and wiring only. `main.rs` holds the top-level clap
//! definition (each subcommand's `--help` summary is the doc comment of its `Cmd` variant) and
//! dispatches; every subcommand has a file of its own beside it (`sweep.rs` for `sweep`,
//! `fit_draft.rs` for `fit-draft`, ...) with its flags as a clap `Args` struct and a `run` that
//! wires them to the library, `common.rs` what several share, and `simulate` lives in the library
//! (`simulate::cli`). The experiments' work itself is in the library modules (`driver`,
//! `analysis`, `experiments::*`, `figures`, `claims`).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod analyze;
mod backends;
mod bench_table;
mod capture;
mod ceilings;
mod claims;
mod common;
mod compare;
mod context;
mod context_fit;
mod crosscheck;
mod dense;
mod dense_stage;
mod export_vllm;
mod faults;
mod figure6;
mod figures;
mod fit_draft;
mod host;
mod links;
mod parity;
mod parquet;
mod peer;
mod probe;
mod readme_tables;
mod reliability;
mod replay;
mod report;
mod reproduce;
mod run;
mod soak;
mod speculation;
mod sweep;
mod verify;

#[derive(Parser)]
#[command(
    name = "moefleet-harness",
    version = moefleet_harness::VERSION,
    about = "Replays the Cascadia experiments against moefleet or any OpenAI-compatible server"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// The main job (`make reproduce`): every experiment of the registry in order into one run
    /// directory (the sweep, ceilings, dense, backends, context, draft, speculation, Figure 6, the
    /// simulator), each unit's time in OUT/units.json, then REPORT.md and `verify`; or, with
    /// --only, chosen experiments (`--list` shows them).
    Reproduce(reproduce::Args),
    /// Tables of a side-by-side run with llama.cpp (`scripts/peer.sh`, `make peer`): reads
    /// DIR/llama-bench.json (llama-bench -o json), DIR/moefleet-bench.json (moefleet bench --json)
    /// and DIR/peer.json (commands, load averages); writes DIR/peer.csv and DIR/PEER.md, with
    /// every rate recomputed from each side's per-repetition samples.
    Peer(peer::Args),
    /// Tables of a GGUF parity run (`scripts/gguf_parity.sh`): compares DIR/llama.jsonl
    /// (llama-server), DIR/moefleet.jsonl (`moefleet continue`) and DIR/fleet.jsonl (a fleet)
    /// token for token and writes DIR/parity.csv, DIR/PARITY.md (with DIR/meta.json's run facts)
    /// and parity.png/.svg.
    Parity(parity::Args),
    /// Print the facts every record carries about this machine (CPU, SIMD flags, cores, memory,
    /// kernel, the engine kernels' instruction set, load averages, date) as JSON, for scripts.
    Host(host::Args),
    /// Figure 6 (paper §5.3) from two sweeps of the burst plan (`workloads/plans/burst.toml`,
    /// `reproduce --only figure6`): one against a fleet with `--admission reference` (whole prompts, one
    /// at a time), one with `--admission windowed --prefill-rows 8`, each analysed. Pairs their retained
    /// phases by position and writes OUT/figure6.csv/.md and figure6.png/.svg: median TTFT and
    /// whole-phase tokens per second per phase, the paper's 019 (baseline) and 024 (windows) values
    /// as markers.
    Figure6(figure6::Args),
    /// Tables and figure of a speculation experiment (MEASUREMENTS.md §6) under ROOT, as
    /// the speculation unit writes it: ROOT/off and one directory per proposer set (suffix,
    /// phrase, draft, all), each a sweep of the speculation plan (first and repeated pass) with
    /// role 0's records in records/ (or profiles/). Writes ROOT/table3.csv/.md (the paper's Table 3 from `all`),
    /// onoff.csv/.md (each set against off, same prompts), model.csv/.md (the first-order model
    /// against the measured speedup) and speculation.png/.svg.
    Speculation(speculation::Args),
    /// Build a capture corpus through the API (MEASUREMENTS.md §5): for each of the twelve
    /// families, the first --eval-per-family distinct prompts (evaluation) and the next
    /// --train-per-family (training), each one streamed chat completion of --tokens greedy tokens
    /// asking for its capture. The server must run with `moefleet serve --capture-dir DIR` on this
    /// machine (the harness reads the file each final chunk names). Every capture is checked
    /// (finite values, record size, prompt ids = the tokenizer's ids of the rendered prompt,
    /// generated ids decode to the API's text) and copied to OUT/eval/ or OUT/train/; OUT/
    /// sequences.jsonl indexes them, OUT/corpus.json says what was asked and what fell short.
    Capture(capture::Args),
    /// Fit the draft head to the model from a corpus's training captures: per module, three
    /// closed-form ridge regressions onto RMSNorm_final(residual(t+k+1)) (input projection,
    /// attention output, MLP down); see harness/src/experiments/draft/fit.rs. Writes the head export (manifest
    /// naming its training captures, mtp.safetensors) and OUT/fit.json.
    FitDraft(fit_draft::Args),
    /// Replay the fitted head over a corpus's evaluation captures (teacher, self-fed and
    /// no-context modes; the paper's three vocabulary restrictions scaled to this vocabulary; the
    /// deployment grids), beside the untrained head of the same seed, repeat-last and a bigram of
    /// the training captures. Writes OUT/anchors.csv.gz (every prediction at every anchor),
    /// mtp.csv, chain.csv, table6.md, chain.md, figure8.png/.svg and replay.json (anchors per
    /// second per calculation).
    Replay(replay::Args),
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
    Context(context::Args),
    /// Fit TTFT = aN + bN^2 to the context scans under ROOT and draw Figure 7.
    ///
    /// Least squares through the origin (N = prompt tokens) over each scan's single-stream points
    /// under ROOT (scan-serial/ and scan-parallel/, each written by `context`), and report 1/a,
    /// b, the predicted TTFT at 128k, 256k and 1M positions and the implied attention rate
    /// (flops_per_key = 4 * n_q_heads * head_dim per global layer; N^2/2 keys in a causal
    /// prefill). Probes (probe-*/context_probe.csv, `moefleet probe` tabled by `moefleet-harness probe`) give the per-role decode
    /// and attention cost. Writes ROOT/fit.json, ROOT/fit.csv and ROOT/figure7.{png,svg}; any
    /// subset of the inputs will do.
    ContextFit(context_fit::Args),
    /// Paired concurrency sweep: replay a plan against an OpenAI-compatible server and record one
    /// trace per request under --out.
    Sweep(sweep::Args),
    /// Open-loop load at a request rate (constant, Poisson, gamma; optionally a ramp and a
    /// concurrency cap) against an OpenAI-compatible server: TTFT, TPOT, per-token ITL, end to
    /// end, goodput against --slo (MEASUREMENTS.md §9).
    Run(run::Args),
    /// Two load runs side by side (two `run` directories, or the steps of the same name in two
    /// sweeps or searches): each latency metric of A and B, B − A and B / A, each with a seeded
    /// bootstrap confidence interval over the requests (MEASUREMENTS.md §9).
    Compare(compare::Args),
    /// A load run in the JSON shape of `vllm bench serve --save-result` (DIR/vllm.json, or each
    /// step's of a sweep or search), for the notebooks and dashboards built on that tool; `compare`
    /// reads such files back.
    ExportVllm(export_vllm::Args),
    /// A load run's token counts and times against the server's own (`usage`, llama-server's
    /// `timings`) and the client's tokenizer (`run --tokenizer`): DIR/crosscheck.md, or each
    /// step's of a plan, rewritten from the records.
    Crosscheck(crosscheck::Args),
    /// Tables from the token traces of a run: phases.csv, curve.csv (each with its Parquet twin)
    /// and table4.md, computed with polars.
    Analyze(analyze::Args),
    /// Table the in-role context probe (MEASUREMENTS.md §3.1) of each DIR: reads the raw
    /// DIR/probe-role-K.json records `moefleet probe --out DIR` (or `serve --context-probe DIR`)
    /// wrote and writes DIR/context_probe.csv (the paper's columns: per size, the roles reporting
    /// and fitting, the largest need, decode and attention medians over roles) and DIR/probe.json
    /// (attention ms per 1k positions, KV bytes per position, the largest size every role fitted).
    Probe(probe::Args),
    /// Write the Parquet twin (x.parquet beside x.csv, columns typed) of every CSV table under
    /// each DIR, recursively: for tables written before the harness wrote twins, or by hand.
    Parquet(parquet::Args),
    /// Figures from the tables and records of a run directory, titled with the run its record
    /// names (model, plan, host, date, commit): figure5.png/.svg from a sweep's curve.csv and
    /// run.json (run `analyze` first), or figure3.png/.svg from a dense run's dense.csv and
    /// dense.json (beside reproduction/paper/dense.csv when present).
    Figures(figures::Args),
    /// Bounded soak against a moefleet server on this machine: --streams streams kept open for
    /// --duration-s, with --burst-factor times as many offered for --burst-s every
    /// --burst-every-s (at-capacity 503s are retried, and counted). Every prompt is first run
    /// alone; under load each output must equal its output alone, run to its cap, and count as
    /// usage says. Samples RSS and open descriptors of every role process (`/api/stats` lists
    /// them), the load average and the server's counters every --sample-s. Writes
    /// OUT/requests.jsonl.gz (one row per request), OUT/samples.jsonl and OUT/soak.json (config,
    /// counters before and after, checks); exits non-zero if a check fails.
    Soak(soak::Args),
    /// Make faults under load and watch the fleet recover (a moefleet server on this machine; its
    /// `/api/stats` names the role processes). Per --fault (kill:ROLE, stop:ROLE or cut:SECONDS, in
    /// order): --streams streams run for --lead-s, the fault is made, /health is read every
    /// 20 ms until it reports the loss and until it is ready again, the streams run --tail-s
    /// more, and every prompt is asked alone again and must answer as before the first fault.
    /// Writes OUT/requests.jsonl.gz and OUT/faults.json (events and findings per fault: streams
    /// lost, and from a server that holds its streams through a fault, as moefleet does, the held
    /// streams' longest pauses, the rows it replayed and its token count against the clients');
    /// exits non-zero if a fault costs more than its streams in flight, the counts disagree or the
    /// fleet does not come back.
    Faults(faults::Args),
    /// Print the reliability table rendered from committed records (faults runs, a soak, the
    /// wire fuzzing record), as the README holds it (and `scripts/reliability.sh` writes it to
    /// OUT/RELIABILITY.md).
    Reliability(reliability::Args),
    /// docs/RESULTS.md's tables that are rendered from committed records (named under
    /// `readme_tables` in reproduction/claims.toml): print each, or with --write put the renderings
    /// between their markers in ROOT/docs/RESULTS.md. `verify` checks them.
    ReadmeTables(readme_tables::Args),
    /// Link emulation, measured: the kernel's tbf shaper on a veth pair (a `scripts/link_tbf.sh`
    /// directory) against bytes × 8 / rate, and the fleet's curve with and without the engine's
    /// emulated links (a `scripts/link_emulation.sh` directory), re-analysed from the traces.
    /// Writes DIR/links.md for each given.
    Links(links::Args),
    /// The fleet simulator: a discrete-event model of the engine calibrated from per-frame stage
    /// records (`moefleet serve --profile-dir`), replaying sweep plans into the harness's own trace
    /// records. `validate` calibrates it on some levels of a measured sweep and compares the
    /// simulated curve with the measured one at every level.
    #[command(subcommand)]
    Simulate(moefleet_harness::simulate::cli::SimCmd),
    /// Recompute every claim of reproduction/claims.toml from the committed records, re-analyse
    /// the claimed runs, and check CLAIMS.md; fails naming each claim that does not hold.
    Verify(verify::Args),
    /// Write RUN/REPORT.md: what ran, where, our tables and figure, and the paper side by side.
    Report(report::Args),
    /// Render reproduction/CLAIMS.md from reproduction/claims.toml.
    Claims(claims::Args),
    /// Ceilings of this machine, in one run of about half a minute: sustained memory read
    /// bandwidth and the fp32 FMA rate with 1 thread and with all threads, then the engine's INT4
    /// product at the `inkling` expert gate shape (3072 x 6144, group 32, one row) and its INT8
    /// product at the attention q shape (8192 x 6144), each on all threads and on a 1-thread pool,
    /// compared with the bandwidth of the same thread count. Writes OUT/ceilings.json and prints a
    /// table; progress on stderr.
    Ceilings(ceilings::Args),
    /// The kernel microbenchmarks against this machine's ceilings: each criterion benchmark's
    /// median time, the bytes or FLOPs per call it declares, the rate achieved and its percentage
    /// of the all-threads read bandwidth (bytes) or fp32 FMA rate (FLOPs) of `ceilings`; for int4
    /// and int8, time at n rows over time at 1 row. Reads `<group>/<function>/<param>/new/` only.
    /// Writes OUT/kernels.csv and OUT/kernels.md and prints the markdown.
    BenchTable(bench_table::Args),
    /// Dense blocks as fused slices against three matrix calls (MEASUREMENTS.md §4): for each
    /// dense layer and row count, the median of one MLP call with each form (FP16 expert path on,
    /// forms interleaved), their agreement (cosine, relative difference), and why one is faster;
    /// on the native kernels and on OpenVINO graphs of the same weights, side by side.
    /// Writes OUT/dense.csv (the paper's columns), OUT/dense.json and OUT/figure3.{png,svg}.
    /// Each `inkling` dense layer is generated on the spot (about 255 MB of INT4).
    Dense(dense::Args),
    /// The native kernels against the OpenVINO backend in one run, as ratios: one `inkling` MoE
    /// layer (attention, router, the eight experts a row selects) per forward of 1 and 2 rows, and
    /// `inkling-mini` per decode token in one process, alternating the backends. Writes
    /// OUT/backends.json (every sample, load average) and OUT/backends.csv.
    Backends(backends::Args),
    /// Stage-level effect of the dense form: role 0 compute (and MLP) time per frame, median and
    /// p10/p90, overall and by rows per frame, from the role-0.jsonl profiles of two fleet runs
    /// (`moefleet serve --profile-dir DIR --dense-form ...`). Writes OUT/dense_stage.csv and
    /// OUT/dense_stage.json. The `dense` unit of `reproduce` makes both runs.
    DenseStage(dense_stage::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // the in-process kernel experiments honour MOEFLEET_ISA as the engine does
    if let Err(e) =
        moefleet_engine::kernels::apply_isa(std::env::var("MOEFLEET_ISA").ok().as_deref())
    {
        eprintln!("moefleet-harness: error: {e}");
        return ExitCode::from(2);
    }
    // where OpenVINO's C library is looked for, read here so the library reads no environment
    let search = moefleet_engine::openvino::locate::Search::from_env();
    if let Err(e) = moefleet_engine::openvino::locate::configure(search) {
        eprintln!("moefleet-harness: error: {e}");
        return ExitCode::from(2);
    }
    // a reader that closes the pipe (`| head`) ends the process quietly, as for any Unix tool,
    // instead of a panic in the next print
    // SAFETY: restoring the default disposition of one signal before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
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
        Cmd::Reproduce(args) => reproduce::run(args),
        Cmd::Peer(args) => peer::run(args),
        Cmd::Parity(args) => parity::run(args),
        Cmd::Host(args) => host::run(args),
        Cmd::Figure6(args) => figure6::run(args),
        Cmd::Speculation(args) => speculation::run(args),
        Cmd::Capture(args) => capture::run(args),
        Cmd::FitDraft(args) => fit_draft::run(args),
        Cmd::Replay(args) => replay::run(args),
        Cmd::Context(args) => context::run(args),
        Cmd::ContextFit(args) => context_fit::run(args),
        Cmd::Sweep(args) => sweep::run(args),
        Cmd::Run(args) => run::run(args),
        Cmd::Compare(args) => compare::run(args),
        Cmd::ExportVllm(args) => export_vllm::run(args),
        Cmd::Crosscheck(args) => crosscheck::run(args),
        Cmd::Analyze(args) => analyze::run(args),
        Cmd::Probe(args) => probe::run(args),
        Cmd::Parquet(args) => parquet::run(args),
        Cmd::Figures(args) => figures::run(args),
        Cmd::Soak(args) => soak::run(args),
        Cmd::Faults(args) => faults::run(args),
        Cmd::Reliability(args) => reliability::run(args),
        Cmd::ReadmeTables(args) => readme_tables::run(args),
        Cmd::Links(args) => links::run(args),
        Cmd::Simulate(cmd) => moefleet_harness::simulate::cli::run(cmd),
        Cmd::Verify(args) => verify::run(args),
        Cmd::Report(args) => report::run(args),
        Cmd::Claims(args) => claims::run(args),
        Cmd::Ceilings(args) => ceilings::run(args),
        Cmd::BenchTable(args) => bench_table::run(args),
        Cmd::Dense(args) => dense::run(args),
        Cmd::Backends(args) => backends::run(args),
        Cmd::DenseStage(args) => dense_stage::run(args),
    }
}
