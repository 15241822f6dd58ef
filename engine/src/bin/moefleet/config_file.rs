//! `--config FILE` for `serve`, `role` and `config`: a TOML file whose keys are the subcommand's
//! long flags, layered under the command line. The file's tables:
//!
//! ```toml
//! [model]          # the options `serve` and `role` share (ModelArgs): preset, model, context, ...
//! preset = "inkling-mini"
//! [serve]          # the rest of serve's options: port, slots, speculate, proposers, ...
//! port = 8080
//! [[role]]         # optional: the fleet (role -> host:port), as a --fleet file holds it
//! [[spare]]        # optional: the fleet's spare hosts (addr), as a --fleet file holds them
//! rank = 0
//! addr = "10.0.0.10:7100"
//! ```
//!
//! Precedence: a flag on the command line (or its environment variable) wins over the file,
//! including over a key of the file it conflicts with (`--model` on the command line drops the
//! file's `preset`); the file wins over the defaults. A key is a flag's long name, with `-` or `_`.
//! The layering works on the arguments themselves (the file's keys become flags placed after the
//! command line's), so every flag has a key and clap checks the values as it checks typed ones.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};

/// The subcommands that read `--config`.
const READERS: [&str; 3] = ["serve", "role", "config"];

/// Ids that are never keys: clap's own, the file itself, and `config`'s verb.
const NOT_KEYS: [&str; 4] = ["help", "version", "config", "print"];

/// `argv` with the file's keys appended as flags, when the subcommand was given `--config`.
/// Arguments clap cannot parse are returned as they are, for clap to report.
pub fn layered(cmd: Command, argv: Vec<OsString>) -> Result<Vec<OsString>> {
    let Ok(m) = cmd.clone().try_get_matches_from(&argv) else {
        return Ok(argv);
    };
    let Some((name, sm)) = m.subcommand() else {
        return Ok(argv);
    };
    if !READERS.contains(&name) {
        return Ok(argv);
    }
    let Some(path) = sm.get_one::<PathBuf>("config") else {
        return Ok(argv);
    };
    let sub = cmd
        .find_subcommand(name)
        .context("the subcommand's definition")?
        .clone();
    let extra =
        file_args(&sub, sm, path).with_context(|| format!("--config {}", path.display()))?;
    Ok(argv.into_iter().chain(extra).collect())
}

/// The long names `[model]` may hold: the options `serve` and `role` share.
fn model_keys() -> BTreeSet<String> {
    use clap::Args;
    super::args::ModelArgs::augment_args(Command::new("model"))
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect()
}

/// The file's keys as flags for subcommand `sub`, skipping those the command line set.
fn file_args(sub: &Command, given: &ArgMatches, path: &Path) -> Result<Vec<OsString>> {
    let text = std::fs::read_to_string(path).context("reading the file")?;
    let file: toml::Table = toml::from_str(&text).context("parsing the file as TOML")?;
    let model = model_keys();
    let mut out = Vec::new();
    for (table, value) in &file {
        // whether the table holds the shared options ([model]) or the rest ([serve])
        let (entries, shared) = match (table.as_str(), value) {
            ("role" | "spare", toml::Value::Array(_)) => continue,
            ("model", toml::Value::Table(t)) => (t, true),
            ("serve", toml::Value::Table(t)) if sub.get_name() != "role" => (t, false),
            ("serve", toml::Value::Table(_)) => continue,
            _ => bail!(
                "unknown key {table:?} at the top (the file holds [model], [serve] and [[role]] \
                 entries)"
            ),
        };
        for (key, v) in entries {
            let long = key.replace('_', "-");
            let arg = sub
                .get_arguments()
                .find(|a| {
                    let former = a.get_all_aliases().unwrap_or_default();
                    (a.get_long() == Some(long.as_str()) || former.contains(&long.as_str()))
                        && !a.is_hide_set()
                })
                .filter(|a| {
                    model.contains(&long) == shared && !NOT_KEYS.contains(&a.get_id().as_str())
                });
            let Some(arg) = arg else {
                bail!("[{table}] has no key {key:?} for `{}`", sub.get_name());
            };
            if !from_command_line(sub, given, arg) {
                push_flag(&mut out, arg, v).with_context(|| format!("[{table}] {key}"))?;
            }
        }
    }
    // a file with a fleet serves as the fleet file, unless one is named
    if file.get("role").is_some() {
        if let Some(fleet) = sub.get_arguments().find(|a| a.get_id() == "fleet") {
            if !from_command_line(sub, given, fleet) && !out.iter().any(|a| a == "--fleet") {
                out.push("--fleet".into());
                out.push(path.into());
            }
        }
    }
    Ok(out)
}

/// Whether the command line (or the environment) set `arg` or an argument it conflicts with.
fn from_command_line(sub: &Command, given: &ArgMatches, arg: &Arg) -> bool {
    let set = |a: &Arg| {
        matches!(
            given.value_source(a.get_id().as_str()),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        )
    };
    let conflict = |a: &Arg, b: &Arg| {
        sub.get_arg_conflicts_with(a)
            .iter()
            .any(|c| c.get_id() == b.get_id())
    };
    set(arg)
        || sub
            .get_arguments()
            .filter(|b| set(b))
            .any(|b| conflict(arg, b) || conflict(b, arg))
}

/// Append `--long VALUE` (or the bare flag, or one flag per element) for a TOML value.
fn push_flag(out: &mut Vec<OsString>, arg: &Arg, v: &toml::Value) -> Result<()> {
    let flag = format!("--{}", arg.get_long().unwrap_or_default());
    let scalar = |v: &toml::Value| -> Result<String> {
        Ok(match v {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            other => bail!("expected a string or a number, found {}", other.type_str()),
        })
    };
    match (arg.get_action(), v) {
        (ArgAction::SetTrue, toml::Value::Boolean(b)) => {
            if *b {
                out.push(flag.into());
            }
        }
        (ArgAction::SetTrue, other) => bail!("expected true or false, found {}", other.type_str()),
        (_, toml::Value::Array(items)) => match arg.get_value_delimiter() {
            Some(d) => {
                let parts = items.iter().map(scalar).collect::<Result<Vec<_>>>()?;
                out.push(flag.into());
                out.push(parts.join(&d.to_string()).into());
            }
            None => {
                for item in items {
                    out.push(flag.clone().into());
                    out.push(scalar(item)?.into());
                }
            }
        },
        (_, v) => {
            out.push(flag.into());
            out.push(scalar(v)?.into());
        }
    }
    Ok(())
}

/// The resolved options of `sub` (its matches after layering) as a file `--config` reads back:
/// `[model]`, `[serve]` and the fleet's `[[role]]` entries when a fleet file is named. Options at
/// their defaults, without a value, or hiding theirs (API keys) are listed as comments.
pub fn render(sub: &Command, m: &ArgMatches) -> Result<String> {
    let model = model_keys();
    let mut tables = [(String::new(), "model"), (String::new(), "serve")];
    for arg in sub.get_arguments() {
        let id = arg.get_id().as_str();
        let Some(long) = arg.get_long() else { continue };
        if NOT_KEYS.contains(&id) || arg.is_hide_set() {
            continue;
        }
        let t = &mut tables[usize::from(!model.contains(long))].0;
        let source = m.value_source(id);
        let line = match m.get_raw(id) {
            None => format!("# {long} =\n"),
            // a key (API keys) whose value is kept out of sight
            Some(_) if arg.is_hide_env_values_set() => format!("# {long} = (set, not printed)\n"),
            Some(raw) => {
                let vals: Vec<String> = raw.map(|v| v.to_string_lossy().into_owned()).collect();
                let many = arg.get_value_delimiter().is_some()
                    || arg.get_num_args().is_some_and(|n| n.max_values() > 1);
                let value = if matches!(arg.get_action(), ArgAction::SetTrue) {
                    m.get_flag(id).to_string()
                } else if many {
                    let items: Vec<String> = vals.iter().map(|v| typed(v)).collect();
                    format!("[{}]", items.join(", "))
                } else {
                    typed(vals.first().map(String::as_str).unwrap_or_default())
                };
                // defaults as comments: read back, the file sets only what was set
                match source {
                    Some(ValueSource::DefaultValue) => format!("# {long} = {value} (default)\n"),
                    _ => format!("{long} = {value}\n"),
                }
            }
        };
        t.push_str(&line);
    }
    let mut out = String::new();
    for (body, name) in &tables {
        out.push_str(&format!("[{name}]\n{body}\n"));
    }
    if let Some(f) = m.get_one::<PathBuf>("fleet") {
        let ff = moefleet_engine::pipeline::fleet::FleetFile::read(f)?;
        for r in &ff.role {
            out.push_str(&format!(
                "[[role]]\nrank = {}\naddr = {}\n",
                r.rank,
                toml::Value::String(r.addr.clone())
            ));
        }
        for sp in &ff.spare {
            out.push_str(&format!(
                "[[spare]]\naddr = {}\n",
                toml::Value::String(sp.addr.clone())
            ));
        }
    }
    Ok(out)
}

/// A raw value as TOML: a number when it reads as one, else a string.
fn typed(v: &str) -> String {
    if v.parse::<i64>().is_ok() {
        return v.to_string();
    }
    if let Ok(f) = v.parse::<f64>() {
        if f.is_finite() {
            return toml::Value::Float(f).to_string();
        }
    }
    toml::Value::String(v.to_string()).to_string()
}
