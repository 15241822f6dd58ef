//! `moefleet-harness probe`: table the in-role context probe (MEASUREMENTS.md §3.1) of each DIR
//! (DIR/context_probe.csv and DIR/probe.json).

use std::path::PathBuf;

use moefleet_harness::experiments::context;

#[derive(clap::Args)]
pub struct Args {
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args { dirs } = args;
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
    Ok(())
}
