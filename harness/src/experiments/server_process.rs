//! A server an experiment measures: a fleet (`moefleet serve --port 0 ARGS`) or `llama-server` on a
//! free port, started in the background with its output in a log file, ready once its address
//! answers `/health`, and stopped (SIGINT to a fleet, SIGTERM to llama-server; up to 10 s to exit,
//! then SIGKILL) when the experiment is done with it or fails, so no role outlives a failed step;
//! and if the harness itself is killed, the kernel sends it that signal (`PR_SET_PDEATHSIG`), so
//! no server outlives the harness either.

use std::ffi::OsString;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// How long a fleet may take to answer `/health` (an 11-role fleet builds its weights first).
const READY_WITHIN: Duration = Duration::from_secs(300);
/// How long a fleet may take to exit after SIGINT before it is killed.
const EXIT_WITHIN: Duration = Duration::from_secs(10);

/// A running server; stopped when dropped.
pub struct ServerProcess {
    child: Option<Child>,
    url: String,
    /// What stops it gently: SIGINT for a fleet (role 0 stops its roles), SIGTERM for
    /// llama-server.
    signal: libc::c_int,
}

impl ServerProcess {
    /// Start `moefleet serve --port 0 ARGS` and wait until it serves (at the address it prints).
    pub fn start(moefleet: &Path, log: &Path, args: &[OsString]) -> Result<Self> {
        let mut cmd = Command::new(moefleet);
        cmd.args(["serve", "--port", "0"]).args(args);
        Self::spawn(cmd, log, None, libc::SIGINT)
    }

    /// Start `DIR/llama-server ARGS --host 127.0.0.1 --port P` on a free port P and wait until it
    /// serves.
    pub fn llama_server(dir: &Path, log: &Path, args: &[OsString]) -> Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .context("finding a free port for llama-server")?
            .port();
        let mut cmd = Command::new(dir.join("llama-server"));
        cmd.args(args)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()]);
        Self::spawn(
            cmd,
            log,
            Some(format!("http://127.0.0.1:{port}")),
            libc::SIGTERM,
        )
    }

    /// Spawn `cmd` logging to `log` and poll `/health` at `url` (None: the first address the log
    /// prints) until it answers.
    fn spawn(mut cmd: Command, log: &Path, url: Option<String>, signal: i32) -> Result<Self> {
        let out = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        cmd.stdout(out.try_clone()?).stderr(out);
        // SAFETY: prctl is async-signal-safe and touches no memory of this process; the death
        // signal follows the thread that spawns the server (the units run on the main thread)
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, signal) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let shown = {
            let a: Vec<_> = cmd.get_args().map(|a| a.to_string_lossy()).collect();
            format!("{} {}", cmd.get_program().to_string_lossy(), a.join(" "))
        };
        let child = cmd.spawn().with_context(|| format!("starting {shown}"))?;
        let mut fleet = ServerProcess {
            child: Some(child),
            url: String::new(),
            signal,
        };
        // one client for every poll (a blocking client starts a runtime thread of its own)
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .context("an HTTP client for the readiness polls")?;
        let t0 = Instant::now();
        loop {
            if let Some(st) = fleet
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                fleet.child = None; // reaped: its pid may be another process's now
                bail!(
                    "`{}` exited ({st}); its log ({}):\n{}",
                    shown,
                    log.display(),
                    tail(log, usize::MAX)
                );
            }
            // read again on every poll: the line may have been half written the last time
            fleet.url = match &url {
                Some(u) => u.clone(),
                None => printed_url(&std::fs::read_to_string(log).unwrap_or_default()),
            };
            if !fleet.url.is_empty() && healthy(&client, &fleet.url) {
                eprintln!("server: ready at {} ({})", fleet.url, shown);
                return Ok(fleet);
            }
            if t0.elapsed() > READY_WITHIN {
                bail!(
                    "`{}` not ready within {} s; the end of its log ({}):\n{}",
                    shown,
                    READY_WITHIN.as_secs(),
                    log.display(),
                    tail(log, 40)
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// The address it serves at (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Stop it: its signal, then SIGKILL if it has not exited within `EXIT_WITHIN`.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // SAFETY: kill(2) on our own unreaped child (its pid cannot have been reused)
        unsafe {
            libc::kill(child.id() as libc::pid_t, self.signal);
        }
        let t0 = Instant::now();
        while t0.elapsed() < EXIT_WITHIN {
            if child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The first `http://HOST:PORT` the log prints.
fn printed_url(log: &str) -> String {
    let Some(i) = log.find("http://") else {
        return String::new();
    };
    let rest = &log[i + 7..];
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ':'))
        .unwrap_or(rest.len());
    if end == 0 {
        return String::new();
    }
    format!("http://{}", &rest[..end])
}

fn healthy(client: &reqwest::blocking::Client, url: &str) -> bool {
    client
        .get(format!("{url}/health"))
        .send()
        .is_ok_and(|r| r.status().is_success())
}

/// The last `n` lines of `log`.
fn tail(log: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_printed_address_is_found() {
        assert_eq!(
            printed_url("x\nINFO serving at http://127.0.0.1:41234/v1 (11 roles)\n"),
            "http://127.0.0.1:41234"
        );
        assert_eq!(printed_url("starting roles\n"), "");
        assert_eq!(printed_url("see http:// later"), "");
    }

    #[test]
    fn a_server_that_exits_is_reported_with_its_log() {
        let t = tempfile::tempdir().unwrap();
        let fake = t.path().join("moefleet");
        std::fs::write(
            &fake,
            "#!/bin/sh\necho \"no such preset: $5\" >&2\nexit 2\n",
        )
        .unwrap();
        let mut perm = std::fs::metadata(&fake).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
        std::fs::set_permissions(&fake, perm).unwrap();
        let args = crate::os_args!["--preset", "nope"];
        let e = ServerProcess::start(&fake, &t.path().join("fleet.log"), &args)
            .err()
            .unwrap();
        let e = format!("{e:#}");
        assert!(
            e.contains("exited") && e.contains("no such preset: nope"),
            "{e}"
        );
    }
}
