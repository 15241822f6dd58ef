//! The context probe (MEASUREMENTS.md §3.1): build roles alone at full shapes (MoE layers hold
//! only the eight experts one row selects), and for each size from 4k to 1M positions fill one
//! stream's caches, time four single-row decode calls (attention and MLP split), record memory.
//! Writes the raw records, OUT/probe-role-K.json; `moefleet-harness probe OUT` tables them
//! (context_probe.csv in the paper's columns, probe.json).

use super::prelude::*;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "inkling")]
    preset: String,
    /// Probe a real checkpoint instead: a GGUF file's own layers, cut into as many six-layer
    /// roles as its layers fill (the sizes stop at the file's context length).
    #[arg(long)]
    model: Option<PathBuf>,
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Roles to probe: comma-separated indices, or "all".
    #[arg(long, default_value = "0")]
    roles: String,
    /// Largest size to try (the probe's sizes up to this one).
    #[arg(long, default_value_t = 1_048_576)]
    max_context: usize,
    /// Attention kernel: the paper's serial loop or the parallel one.
    #[arg(long, value_enum, default_value_t = AttentionMode::Parallel)]
    attention: AttentionMode,
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    backend: BackendArgs,
}

pub fn run(args: Args) -> Result<()> {
    let Args {
        preset,
        model,
        seed,
        roles,
        max_context,
        attention,
        out,
        backend,
    } = args;
    probe(
        &preset,
        model.as_deref(),
        seed,
        &roles,
        max_context,
        attention,
        backend.backend(),
        &out,
    )?;
    Ok(())
}

/// `moefleet probe`: one role at a time (its weights freed before the next is built).
fn probe(
    preset: &str,
    file: Option<&Path>,
    seed: u64,
    roles: &str,
    max_context: usize,
    attention: AttentionMode,
    backend: Backend,
    out: &std::path::Path,
) -> Result<()> {
    let source = file.map(|f| WeightsSource::Gguf(f.to_path_buf()));
    let c = match &source {
        Some(s) => s.config()?,
        None => ModelConfig::preset(preset)?,
    };
    let name = c.name.clone();
    let roles: Vec<usize> = if roles == "all" {
        (0..c.n_roles()).collect()
    } else {
        roles
            .split(',')
            .map(|r| r.trim().parse::<usize>())
            .collect::<std::result::Result<_, _>>()
            .with_context(|| format!("--roles {roles:?}: expected indices like 0,3 or \"all\""))?
    };
    let sizes: Vec<usize> = probe::SIZES
        .into_iter()
        .filter(|&n| n <= max_context.min(c.max_context))
        .collect();
    if sizes.is_empty() {
        bail!(
            "--max-context {max_context} is below the smallest probe size {}",
            probe::SIZES[0]
        );
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let opts = ForwardOptions {
        attention,
        backend,
        ..Default::default()
    };
    for &role in &roles {
        let t0 = std::time::Instant::now();
        let model = match &source {
            // the file's weights as they are: every expert is there, the router picks as it does
            Some(s) => {
                let n = c.n_roles();
                if role >= n {
                    bail!("role {role} does not exist ({name} has {n} roles)");
                }
                s.build_role(role, n, opts)?
            }
            None => probe::build_role(&c, seed, role, opts)?,
        };
        model.prepare()?;
        eprintln!(
            "probe: {name} role {role} (layers {:?}) built in {:.1} s; attention {attention:?}",
            model.layers(),
            t0.elapsed().as_secs_f64()
        );
        // from inside a pool, as the roles compute (pipeline::on_compute_pool says why)
        let recs = moefleet_engine::pipeline::on_compute_pool("probe", || {
            probe::run(&model, role, &sizes, seed, |r| {
                eprintln!("probe: {}", probe::describe(r))
            })
        })??;
        let extra = serde_json::json!({
            "seed": seed,
            "model_file": file.and_then(|f| f.file_name()).map(|f| f.to_string_lossy()),
            "host": bench::host_facts(),
        });
        probe::write_role_record(out, role, &model, &recs, extra)?;
    }
    eprintln!(
        "probe: wrote {}/probe-role-*.json; table them with `moefleet-harness probe {0}`",
        out.display()
    );
    Ok(())
}
