//! `moefleet`: argument parsing and wiring only.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use moefleet_engine::generate::generate;
use moefleet_engine::inspect::bytes_per_token;
use moefleet_engine::model::config::PRESET_NAMES;
use moefleet_engine::model::{
    export, load, DenseForm, ForwardOptions, Model, ModelConfig, SynthSpec,
};
use moefleet_engine::tokenizer::{self, TextTokenizer};

#[derive(Parser)]
#[command(
    name = "moefleet",
    version,
    about = "Resident mixture-of-experts engine for the Inkling model family"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Greedy generation in one process; prints the text and prefill/decode tokens per second.
    Generate {
        /// Preset with synthetic weights: inkling, inkling-small, inkling-mini, inkling-nano.
        #[arg(long, default_value = "inkling-mini", conflicts_with = "weights")]
        preset: String,
        /// Load an export directory instead of generating weights.
        #[arg(long)]
        weights: Option<PathBuf>,
        /// Seed of the synthetic weights.
        #[arg(long, default_value_t = 7)]
        seed: u64,
        #[arg(long)]
        prompt: String,
        /// Tokens to generate (1..=100000).
        #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=100_000))]
        max_tokens: u64,
        /// Prompt rows per prefill window.
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=4096))]
        window: u64,
        #[arg(long, value_enum, default_value_t = DenseForm::ThreeMatmul)]
        dense_form: DenseForm,
        /// tokenizer.json (default: workloads/tokenizer.json of this source tree).
        #[arg(long)]
        tokenizer: Option<PathBuf>,
        /// Also write the run's numbers as a JSON record to this file.
        #[arg(long)]
        record: Option<PathBuf>,
    },
    /// Write a preset's synthetic weights as manifest.json + model.safetensors + expert bins.
    Export {
        #[arg(long)]
        preset: String,
        #[arg(long, default_value_t = 7)]
        seed: u64,
        #[arg(long)]
        out: PathBuf,
        /// Only the first N layers (no head unless N is the layer count).
        #[arg(long)]
        layers: Option<usize>,
    },
    /// Shapes, formats and logical bytes per token of a preset or an export directory.
    Inspect {
        /// An export directory or a preset name.
        target: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Train the byte-level BPE tokenizer from corpus files.
    Tokenizer {
        #[arg(long, num_args = 1.., required = true)]
        corpus: Vec<PathBuf>,
        #[arg(long, default_value_t = 8000)]
        vocab: usize,
        #[arg(long)]
        out: PathBuf,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("moefleet: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Generate {
            preset,
            weights,
            seed,
            prompt,
            max_tokens,
            window,
            dense_form,
            tokenizer: tk,
            record,
        } => {
            let tk_path = tk.unwrap_or_else(tokenizer::default_path);
            let tok = TextTokenizer::load(&tk_path)?;
            let t0 = std::time::Instant::now();
            let w = match weights {
                Some(dir) => load::load(&dir)?,
                None => moefleet_engine::model::generate(&SynthSpec::whole(
                    ModelConfig::preset(&preset)?,
                    seed,
                ))?,
            };
            if w.layer_start != 0 || w.layer_end != w.config.n_layers {
                bail!(
                    "the weights hold layers {}..{} only; generation needs the whole model",
                    w.layer_start,
                    w.layer_end
                );
            }
            if tok.vocab_size() > w.config.vocab_size {
                bail!(
                    "tokenizer vocabulary {} exceeds the model's {}",
                    tok.vocab_size(),
                    w.config.vocab_size
                );
            }
            let load_s = t0.elapsed().as_secs_f64();
            let model = Model::new(
                w,
                ForwardOptions {
                    dense_form,
                    ..Default::default()
                },
            );
            let ids = tok.encode(&prompt)?;
            if ids.is_empty() {
                bail!("the prompt encodes to no tokens");
            }
            let g = generate(
                &model,
                &ids,
                max_tokens as usize,
                window as usize,
                None,
                false,
            )?;
            println!("{}{}", prompt, tok.decode(&g.tokens)?);
            eprintln!(
                "{}: {} layers, weights ready in {load_s:.2} s; prefill {} tokens at {:.1} tok/s; decode {} tokens at {:.2} tok/s",
                model.config().name,
                model.config().n_layers,
                g.prompt_rows,
                g.prefill_tok_s(),
                g.tokens.len(),
                g.decode_tok_s()
            );
            if let Some(path) = record {
                let rec = serde_json::json!({
                    "record": "single_process_generate",
                    "model": model.config().name,
                    "seed": seed,
                    "dense_form": dense_form,
                    "prompt_tokens": g.prompt_rows,
                    "generated_tokens": g.tokens.len(),
                    "prefill_s": g.prefill_s,
                    "decode_s": g.decode_s,
                    "prefill_tok_s": g.prefill_tok_s(),
                    "decode_tok_s": g.decode_tok_s(),
                    "weights_ready_s": load_s,
                    "bytes_per_token": bytes_per_token(model.config()),
                    "threads": rayon::current_num_threads(),
                    "host": host_facts(),
                    "engine_version": env!("CARGO_PKG_VERSION"),
                });
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)
                        .with_context(|| format!("creating {}", parent.display()))?;
                }
                std::fs::write(&path, serde_json::to_string_pretty(&rec)? + "\n")
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
        Cmd::Export {
            preset,
            seed,
            out,
            layers,
        } => {
            let cfg = ModelConfig::preset(&preset)?;
            let n = layers.unwrap_or(cfg.n_layers);
            if n == 0 || n > cfg.n_layers {
                bail!("--layers must be in 1..={} for {preset}", cfg.n_layers);
            }
            let spec = SynthSpec {
                layers: 0..n,
                ..SynthSpec::whole(cfg, seed)
            };
            let w = moefleet_engine::model::generate(&spec)?;
            let m = export::export(&w, &out)
                .with_context(|| format!("exporting to {}", out.display()))?;
            eprintln!(
                "wrote {} layers of {} to {}",
                m.layers.len(),
                m.config.name,
                out.display()
            );
        }
        Cmd::Inspect { target, json } => {
            let dir = PathBuf::from(&target);
            let (cfg, source) = if dir.join("manifest.json").exists() {
                let m = load::manifest(&dir)?;
                (
                    m.config,
                    format!(
                        "export {} (layers {}..{})",
                        dir.display(),
                        m.layer_start,
                        m.layer_end
                    ),
                )
            } else if PRESET_NAMES.contains(&target.as_str()) {
                (ModelConfig::preset(&target)?, format!("preset {target}"))
            } else {
                bail!("'{target}' is neither an export directory (no manifest.json) nor a preset ({})", PRESET_NAMES.join(", "));
            };
            print_inspect(&cfg, &source, json)?;
        }
        Cmd::Tokenizer { corpus, vocab, out } => {
            if !(256..=65536).contains(&vocab) {
                bail!("--vocab must be in 256..=65536");
            }
            let n = tokenizer::train(&corpus, vocab, &out)?;
            eprintln!(
                "trained a byte-level BPE of {n} tokens into {}",
                out.display()
            );
        }
    }
    Ok(())
}

fn print_inspect(c: &ModelConfig, source: &str, json: bool) -> Result<()> {
    let b = bytes_per_token(c);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"config": c, "bytes_per_token": b}))?
        );
        return Ok(());
    }
    // GB for the full presets, MB for the scaled ones
    let (div, unit) = if b.total >= 1_000_000_000 { (1e9, "GB") } else { (1e6, "MB") };
    let gb = |v: u64| v as f64 / div;
    println!("{source}: {}", c.name);
    println!(
        "  hidden {}  layers {} ({} roles)  q heads {} x {}  kv global/sliding {}/{}  window {}",
        c.hidden,
        c.n_layers,
        c.n_roles(),
        c.n_q_heads,
        c.head_dim,
        c.n_kv_heads_global,
        c.n_kv_heads_sliding,
        c.window
    );
    println!(
        "  dense width {} (layers 0..{})  experts {} routed top-{} + {} shared, width {}",
        c.dense_width, c.n_dense_layers, c.n_routed, c.top_k, c.n_shared, c.expert_width
    );
    println!(
        "  vocabulary {} (padded {})  context max {}",
        c.vocab_size, c.vocab_padded, c.max_context
    );
    println!("  formats: experts and dense INT4 group-32 (f16 scale, zero point 8); attention and head INT8 per row (f16 scale); embedding f16; small tensors f32");
    println!("logical weight bytes one unshared token reads:");
    println!(
        "  experts   {:>10.3} {unit}  ({:.3} {unit} with a stored 4-bit zero point per group)",
        gb(b.experts),
        gb(b.experts_with_zero_points)
    );
    println!("  attention {:>10.3} {unit}", gb(b.attention));
    println!(
        "  dense     {:>10.3} {unit}  ({:.3} {unit} with stored zero points)",
        gb(b.dense),
        gb(b.dense_with_zero_points)
    );
    println!("  head      {:>10.3} {unit}", gb(b.head));
    println!(
        "  total     {:>10.3} {unit}  (router, norms, taps, tables: {:.3} {unit} more)",
        gb(b.total),
        gb(b.small)
    );
    Ok(())
}

/// CPU model, logical CPUs and memory of this host, from /proc where it exists.
fn host_facts() -> serde_json::Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo.lines().find_map(|l| {
        l.strip_prefix("model name")
            .map(|r| r.trim_start_matches([' ', '\t', ':']).to_string())
    });
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kb = meminfo.lines().find_map(|l| {
        l.strip_prefix("MemTotal:")
            .and_then(|r| r.trim().trim_end_matches(" kB").parse::<u64>().ok())
    });
    serde_json::json!({
        "cpu": cpu,
        "logical_cpus": std::thread::available_parallelism().map(|n| n.get()).ok(),
        "mem_total_bytes": mem_kb.map(|k| k * 1024),
        "isa": format!("{:?}", moefleet_engine::kernels::isa()),
    })
}
