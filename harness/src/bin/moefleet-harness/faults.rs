//! `moefleet-harness faults`: make faults under load (kill, stop, cut, a host gone) and watch the fleet recover;
//! exits non-zero if a fault costs more than its streams in flight, the server's token count
//! disagrees with the clients', or the fleet does not come back.

use std::path::PathBuf;

use anyhow::bail;

use crate::common::{runtime, ReliabilityPrompts};

#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    url: String,
    #[arg(long)]
    out: PathBuf,
    /// kill:ROLE (SIGKILL), stop:ROLE (SIGSTOP), cut:SECONDS (--cut-cmd, then --heal-cmd
    /// SECONDS later) or gone:SECONDS (the same against a fleet whose fleet file lists a spare:
    /// it must be ready again through the spare before --heal-cmd brings the host back).
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
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args {
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
    } = args;
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
    Ok(())
}
