//! `moefleet config --print`: the options `serve` would run with, after `--config FILE` and the
//! command line are layered (`config_file.rs`), printed as a file `--config` reads back.

use clap::CommandFactory;

use super::prelude::*;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    serve: super::serve::Args,
    /// Print the resolved configuration as TOML: [model], [serve] and the fleet's [[role]]
    /// entries when a fleet file is named; options without a value appear as comments.
    #[arg(long, required = true)]
    print: bool,
}

/// Print the options `argv` (the command line with `--config` already layered in) resolves to.
pub fn run(_args: Args, argv: &[std::ffi::OsString]) -> Result<()> {
    let cmd = super::Cli::command();
    let m = cmd.clone().try_get_matches_from(argv)?;
    let (_, sm) = m.subcommand().context("no subcommand")?;
    let sub = cmd
        .find_subcommand("config")
        .context("the subcommand's definition")?;
    print!("{}", super::config_file::render(sub, sm)?);
    Ok(())
}
