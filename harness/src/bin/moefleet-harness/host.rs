//! `moefleet-harness host`: print the facts every record carries about this machine as JSON, for
//! scripts.

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_: Args) -> anyhow::Result<()> {
    println!(
        "{}",
        serde_json::to_string_pretty(&moefleet_harness::host::facts())?
    );
    Ok(())
}
