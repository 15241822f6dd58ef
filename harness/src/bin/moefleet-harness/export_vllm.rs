//! `moefleet-harness export-vllm DIR`: a load run in the JSON shape of `vllm bench serve` results
//! (`load::vllm`), as DIR/vllm.json (for a sweep, search or repeated run, in each step's
//! directory).

use std::path::PathBuf;

use moefleet_harness::load::{rederive, vllm};

#[derive(clap::Args)]
pub struct Args {
    /// A `run` directory, or a sweep's, search's or repeated run's (each step gets its own file).
    dir: PathBuf,
    /// The model name to write (default: the one the run recorded).
    #[arg(long)]
    model: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let steps = rederive::steps_under(&args.dir)?;
    for s in &steps {
        let model = match &args.model {
            Some(m) => m.clone(),
            None => moefleet_harness::recheck::read_json(&s.dir.join("run.json"))?["model"]
                .as_str()
                .unwrap_or("unknown")
                .to_string(),
        };
        let path = s.dir.join("vllm.json");
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&vllm::export(s, &model))?,
        )?;
        println!("{}", path.display());
    }
    Ok(())
}
