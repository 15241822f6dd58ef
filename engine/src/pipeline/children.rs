//! The role processes of a fleet on one machine. Each child is `moefleet role --launch-stdin`: it
//! reads its `RoleLaunch` (the fleet's `RunConfig` as JSON, its rank and addresses) from stdin,
//! answers on stdout with one JSON line naming the address it listens on, and exits when its stdin
//! closes (role 0 is gone). A restart hands the same launch, with the address the first start
//! bound, so the restarted role computes exactly what the first one did and its neighbours find
//! it where it was.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use serde::{Deserialize, Serialize};

use super::run_config::RunConfig;

/// Everything a role process needs, handed to it as data.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RoleLaunch {
    pub run: RunConfig,
    pub rank: usize,
    /// Where to listen for the previous role (port 0 on the first start: any free port).
    pub listen: String,
    /// The next role (role 0's return port for the last role).
    pub next: String,
    /// Compute threads: Some(1) shares the cores (`pipeline::share_cores`), Some(t) sizes the
    /// pool, None leaves it to rayon.
    pub threads: Option<usize>,
    /// Role 0's return port, to ask for the roster (`roster`): a spare's launch names it; local
    /// roles, restarted on their own addresses, need none.
    #[serde(default)]
    pub roster: Option<String>,
}

/// The one line a launched role writes on stdout once it listens.
#[derive(Debug, Serialize, Deserialize)]
pub struct Listening {
    pub role: usize,
    pub listening: String,
}

/// How long a child may take to bind its port and say so.
const ANNOUNCE_WITHIN: Duration = Duration::from_secs(60);

struct Kid {
    rank: usize,
    child: Child,
    /// Kept open: the child exits when it closes (role 0 ended, however it ended).
    _stdin: ChildStdin,
    /// Its exit has been reported (a restart replaces the entry).
    reported: bool,
}

/// Role 0's children, by rank, with the launch each was (and will again be) started with.
pub struct LocalRoles {
    exe: PathBuf,
    launches: Mutex<Vec<Option<RoleLaunch>>>,
    kids: Mutex<Vec<Kid>>,
    /// Set by `stop` before it takes `kids`: a child started after it (a restart under way when
    /// role 0 was stopped) is killed at once rather than kept.
    stopping: std::sync::atomic::AtomicBool,
}

impl LocalRoles {
    /// Start ranks `1..n` from the last backwards (each learns its successor's address), the last
    /// one linking back to `ret` (role 0's return port).
    pub fn start(
        exe: &Path,
        run: &RunConfig,
        ret: String,
        threads: Option<usize>,
    ) -> anyhow::Result<LocalRoles> {
        let roles = LocalRoles {
            exe: exe.to_path_buf(),
            launches: Mutex::new(vec![None; run.n_roles]),
            kids: Mutex::new(Vec::new()),
            stopping: std::sync::atomic::AtomicBool::new(false),
        };
        let mut next = ret;
        for rank in (1..run.n_roles).rev() {
            let launch = RoleLaunch {
                run: run.clone(),
                rank,
                listen: "127.0.0.1:0".into(),
                next: next.clone(),
                threads,
                roster: None,
            };
            let bound = roles.spawn(launch)?;
            next = bound;
        }
        Ok(roles)
    }

    /// Every rank's address, rank 0's being `ret` (role 0's return port).
    pub fn addrs(&self, ret: &str) -> Vec<String> {
        let launches = self.launches.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = vec![ret.to_string()];
        out.extend(
            launches
                .iter()
                .skip(1)
                .map(|l| l.as_ref().map(|l| l.listen.clone()).unwrap_or_default()),
        );
        out
    }

    /// Start one role process and wait for its address; its launch is kept (with that address)
    /// for restarts.
    fn spawn(&self, mut launch: RoleLaunch) -> anyhow::Result<String> {
        let rank = launch.rank;
        let mut cmd = Command::new(&self.exe);
        cmd.args(["role", "--launch-stdin"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt;
            cmd.process_group(0); // Ctrl-C reaches role 0 only; role 0 shuts the others down
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting role {rank} ({})", self.exe.display()))?;
        let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            bail!("role {rank}: no pipes to the child");
        };
        let mut line = serde_json::to_string(&launch)?;
        line.push('\n');
        if let Err(e) = stdin.write_all(line.as_bytes()).and_then(|_| stdin.flush()) {
            let _ = child.kill();
            let _ = child.wait();
            bail!("role {rank}: could not hand it its configuration: {e}");
        }
        // its first stdout line says where it listens; later lines are logged
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = std::io::BufReader::new(stdout).lines();
            let _ = tx.send(lines.next());
            for l in lines.map_while(Result::ok) {
                tracing::info!(rank, "{l}");
            }
        });
        let answer = match rx.recv_timeout(ANNOUNCE_WITHIN) {
            Ok(Some(Ok(l))) => serde_json::from_str::<Listening>(&l)
                .map_err(|e| anyhow!("role {rank}: unexpected first line '{l}' ({e})")),
            Ok(_) => Err(anyhow!("role {rank} exited before listening")),
            Err(_) => Err(anyhow!(
                "role {rank} did not report its address within {ANNOUNCE_WITHIN:?}"
            )),
        };
        let answer = answer.and_then(|a| {
            if a.role == rank {
                Ok(a)
            } else {
                Err(anyhow!("role {rank} answered as role {}", a.role))
            }
        });
        let bound = match answer {
            Ok(a) => a.listening,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };
        launch.listen = bound.clone();
        self.launches.lock().unwrap_or_else(|e| e.into_inner())[rank] = Some(launch);
        let mut kids = self.kids.lock().unwrap_or_else(|e| e.into_inner());
        if self.stopping.load(std::sync::atomic::Ordering::SeqCst) {
            let _ = child.kill();
            let _ = child.wait();
            bail!("role {rank}: role 0 is stopping");
        }
        kids.push(Kid {
            rank,
            child,
            _stdin: stdin,
            reported: false,
        });
        Ok(bound)
    }

    /// Kill role `rank` if it still runs, and start it again with its first launch.
    pub fn restart(&self, rank: usize) -> anyhow::Result<()> {
        let launch = self
            .launches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(rank)
            .cloned()
            .flatten()
            .ok_or_else(|| anyhow!("role {rank} is not a local role"))?;
        let old = {
            let mut kids = self.kids.lock().unwrap_or_else(|e| e.into_inner());
            let at = kids.iter().position(|k| k.rank == rank);
            at.map(|i| kids.remove(i))
        };
        if let Some(mut k) = old {
            let _ = k.child.kill();
            let _ = k.child.wait();
        }
        let want = launch.listen.clone();
        let got = self.spawn(launch)?;
        if got != want {
            bail!("role {rank} restarted on {got}, not on its address {want}");
        }
        tracing::warn!(rank, "role restarted on {got}");
        Ok(())
    }

    /// Roles whose process has exited and was not reported yet.
    pub fn newly_exited(&self) -> Vec<(usize, ExitStatus)> {
        let mut kids = self.kids.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for k in kids.iter_mut().filter(|k| !k.reported) {
            if let Ok(Some(status)) = k.child.try_wait() {
                k.reported = true;
                out.push((k.rank, status));
            }
        }
        out
    }

    /// Roles whose process is not running: exited, or stopped (SIGSTOP).
    pub fn dead(&self) -> Vec<usize> {
        let mut kids = self.kids.lock().unwrap_or_else(|e| e.into_inner());
        kids.iter_mut()
            .filter_map(|k| {
                let gone = !matches!(k.child.try_wait(), Ok(None)) || stopped(k.child.id());
                gone.then_some(k.rank)
            })
            .collect()
    }

    /// Process ids by rank (tests and logs).
    pub fn pids(&self) -> Vec<(usize, u32)> {
        let kids = self.kids.lock().unwrap_or_else(|e| e.into_inner());
        kids.iter().map(|k| (k.rank, k.child.id())).collect()
    }

    /// Wait up to `grace` for every child to exit on its own, then kill the rest.
    pub fn stop(&self, grace: Duration) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let mut kids = self.kids.lock().unwrap_or_else(|e| e.into_inner());
        let t0 = std::time::Instant::now();
        while t0.elapsed() < grace
            && !kids
                .iter_mut()
                .all(|k| matches!(k.child.try_wait(), Ok(Some(_))))
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        for k in kids.iter_mut() {
            let _ = k.child.kill();
            let _ = k.child.wait();
        }
        kids.clear();
    }
}

/// The child's side: read the launch from stdin, and from then on exit when stdin closes.
pub fn read_launch() -> anyhow::Result<RoleLaunch> {
    let mut line = String::new();
    let mut stdin = std::io::stdin().lock();
    stdin
        .read_line(&mut line)
        .context("reading the role's launch from stdin")?;
    let launch: RoleLaunch = serde_json::from_str(line.trim())
        .context("the launch on stdin is not a moefleet RoleLaunch")?;
    drop(stdin);
    let rank = launch.rank;
    std::thread::Builder::new()
        .name("parent-watch".into())
        .spawn(move || {
            let mut sink = Vec::new();
            let _ = std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut sink);
            tracing::warn!(rank, "role 0 is gone (stdin closed); exiting");
            std::process::exit(3);
        })?;
    Ok(launch)
}

/// The child's answer: the address it listens on, as one JSON line on stdout.
pub fn announce(rank: usize, addr: std::net::SocketAddr) -> std::io::Result<()> {
    let line = serde_json::to_string(&Listening {
        role: rank,
        listening: addr.to_string(),
    })?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()
}

/// Whether process `pid` is stopped (SIGSTOP, or traced): it holds its links open and answers
/// nothing, so a recovery replaces it as it would a dead one. Linux's /proc; elsewhere never.
fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        // the state follows the command name, which is in parentheses and may hold spaces
        s.rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next())
            .is_some_and(|c| c == 'T' || c == 't')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kill(sig: &str, pid: u32) {
        let ok = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {pid}");
    }

    /// A stopped process counts as gone (a recovery replaces it); a running one does not.
    #[test]
    fn a_stopped_process_is_seen_as_stopped() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        assert!(!stopped(pid));
        kill("-STOP", pid);
        let t0 = std::time::Instant::now();
        while !stopped(pid) {
            assert!(t0.elapsed() < Duration::from_secs(5), "never seen stopped");
            std::thread::sleep(Duration::from_millis(5));
        }
        kill("-CONT", pid);
        let _ = child.kill();
        let _ = child.wait();
    }
}
