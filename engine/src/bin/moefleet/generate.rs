//! Greedy generation in one process; prints the text and prefill/decode tokens per second.

use super::prelude::*;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: WholeModel,
    #[arg(long, required_unless_present = "prompt_ids")]
    prompt: Option<String>,
    /// The prompt as token ids (comma-separated) instead of text: no tokenizer in the way.
    #[arg(long, value_delimiter = ',', conflicts_with = "prompt")]
    prompt_ids: Option<Vec<u32>>,
    /// Tokens to generate (1..=100000).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    max_tokens: u64,
    /// Prompt rows per forward: the prompt is computed in segments of this many rows (--window is
    /// the former name).
    #[arg(long = "prefill-rows", visible_alias = "window", default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=4096))]
    window: u64,
    #[arg(long, value_enum, default_value_t = DenseForm::ThreeMatmul)]
    dense_form: DenseForm,
    #[command(flatten)]
    backend: BackendArgs,
    /// tokenizer.json (default: the project's tokenizer, compiled in).
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// Also write the run's numbers as a JSON record to this file.
    #[arg(long)]
    record: Option<PathBuf>,
    /// Also write the stream's capture (residual before the final norm at every position, with
    /// token ids; FORMAT.md "Capture files") to this file, as a fleet's last role would.
    #[arg(long)]
    capture: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<()> {
    let Args {
        model: source,
        prompt,
        prompt_ids,
        max_tokens,
        window,
        dense_form,
        backend,
        tokenizer: tk,
        record,
        capture,
    } = args;
    let tok = source.tokenizer(tk.as_deref())?;
    let t0 = std::time::Instant::now();
    let w = source.load("generation")?;
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
            backend: backend.backend(),
            ..Default::default()
        },
    );
    model.prepare()?;
    let (prompt, ids) = match (prompt, prompt_ids) {
        (_, Some(ids)) => (tok.decode(&ids)?, ids),
        (Some(p), None) => {
            let ids = tok.encode_prompt(&p)?;
            (p, ids)
        }
        (None, None) => bail!("give --prompt or --prompt-ids"),
    };
    if ids.is_empty() {
        bail!("the prompt encodes to no tokens");
    }
    // a checkpoint ends at its end-of-sequence token, as a server would
    let stop = model
        .config()
        .family
        .is_checkpoint()
        .then(|| tok.eos())
        .flatten();
    // from inside a pool, as the roles compute (pipeline::on_compute_pool says why)
    let g = moefleet_engine::pipeline::on_compute_pool("generate", || -> Result<_> {
        Ok(match &capture {
            None => generate(
                &model,
                &ids,
                max_tokens as usize,
                window as usize,
                stop,
                false,
            )?,
            Some(path) => {
                let (g, c) =
                    generate_captured(&model, &ids, max_tokens as usize, window as usize, None)?;
                std::fs::write(path, c.encode())
                    .with_context(|| format!("writing {}", path.display()))?;
                g
            }
        })
    })??;
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
            "seed": source.seed,
            "dense_form": dense_form,
            "backend": backend.backend(),
            "prompt_tokens": g.prompt_rows,
            "generated_tokens": g.tokens.len(),
            "prompt_ids": ids,
            "generated_ids": g.tokens,
            "prefill_s": g.prefill_s,
            "decode_s": g.decode_s,
            "prefill_tok_s": g.prefill_tok_s(),
            "decode_tok_s": g.decode_tok_s(),
            "weights_ready_s": load_s,
            "bytes_per_token": match &model.weights.checkpoint {
                Some(cp) => serde_json::json!(cp.bytes_per_token(model.config().top_k)),
                None => serde_json::json!(bytes_per_token(model.config())),
            },
            "threads": rayon::current_num_threads(),
            "host": bench::host_facts(),
            "engine_version": env!("CARGO_PKG_VERSION"),
            "engine_commit": env!("MOEFLEET_BUILD_COMMIT"),
        });
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, serde_json::to_string_pretty(&rec)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
