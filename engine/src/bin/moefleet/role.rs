//! Run one role of a fleet (started by `serve`, or by hand with --fleet on another host). A
//! role whose links break links again: restarted with the same arguments, it rejoins.

use super::prelude::*;

#[derive(clap::Args)]
pub struct Args {
    /// Read options from this TOML file: [model] (the options serve and role share), [serve], and
    /// optionally the fleet's [[role]] entries (then the file is the fleet file too). Keys are the
    /// long flags; a flag on the command line wins.
    #[arg(long)]
    config: Option<PathBuf>,
    #[command(flatten)]
    model: ModelArgs,
    #[arg(long, required_unless_present = "launch_stdin")]
    rank: Option<usize>,
    /// Read the whole launch (the fleet's configuration as JSON, rank, addresses) from stdin
    /// and answer with one JSON line naming the address listened on; exit when stdin closes.
    /// This is how `serve` starts its local roles.
    #[arg(long, hide = true)]
    launch_stdin: bool,
    /// Number of roles; taken from the fleet file when given.
    #[arg(long)]
    roles: Option<usize>,
    /// Fleet file (role -> host:port).
    #[arg(long, conflicts_with_all = ["listen", "next"])]
    fleet: Option<PathBuf>,
    /// Listen address for the previous role.
    #[arg(long)]
    listen: Option<String>,
    /// Address of the next role (role 0's return port for the last role).
    #[arg(long)]
    next: Option<String>,
    /// This role shares the machine's cores with more roles than cores (`serve` says so to its
    /// local roles): a frame computes on one thread, unless role 0 sent it with no other frame
    /// in flight (a lone stream's decode), when it takes the whole pool.
    #[arg(long)]
    share_cores: bool,
}

pub fn run(args: Args) -> Result<()> {
    let Args {
        config: _,
        model,
        rank,
        launch_stdin,
        roles,
        fleet,
        listen,
        next,
        share_cores,
    } = args;
    if launch_stdin {
        let l = children::read_launch()?;
        match l.threads {
            Some(1) => pipeline::share_cores(),
            Some(t) => rayon::ThreadPoolBuilder::new()
                .num_threads(t)
                .build_global()
                .context("sizing the role's compute threads")?,
            None => {}
        }
        let rank = l.rank;
        return run_worker(l.run, rank, l.listen, l.next, l.roster, |a| {
            children::announce(rank, a)
        });
    }
    let rank = rank.ok_or_else(|| anyhow::anyhow!("--rank is required"))?;
    if share_cores {
        pipeline::share_cores();
    }
    // a fleet file's roles ask role 0 for the roster (a spare may have taken a neighbour's rank)
    let (n_roles, listen, next, roster) = match fleet {
        Some(f) => {
            let ff = FleetFile::read(&f)?;
            let (l, n) = ff.links(rank)?;
            (ff.role.len(), l, n, Some(ff.role[0].addr.clone()))
        }
        None => (
            roles.ok_or_else(|| anyhow::anyhow!("--roles is required without --fleet"))?,
            listen.ok_or_else(|| anyhow::anyhow!("--listen is required without --fleet"))?,
            next.ok_or_else(|| anyhow::anyhow!("--next is required without --fleet"))?,
            None,
        ),
    };
    if rank == 0 {
        bail!("rank 0 is started with `moefleet serve --fleet FILE`");
    }
    let rc = model.run_config(n_roles, 1, 0, 8);
    run_worker(rc, rank, listen, next, roster, |a| {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "moefleet role {rank} listening on {a}")?;
        out.flush()
    })?;
    Ok(())
}

/// Run role `rank` of `rc` until `Shutdown`, or until it cannot rejoin its chain (or finds its
/// rank taken by a spare: `roster` is role 0's return port, asked while linking).
pub(crate) fn run_worker(
    rc: RunConfig,
    rank: usize,
    listen: String,
    next: String,
    roster: Option<String>,
    announce: impl FnOnce(std::net::SocketAddr) -> std::io::Result<()>,
) -> Result<()> {
    let cfg = rc.weights.config()?;
    layer_range(&cfg, rank, rc.n_roles)?;
    let wc = WorkerConfig {
        rank,
        n_roles: rc.n_roles,
        listen,
        next,
        connect_timeout: rc.link_timeout,
        rejoin_timeout: rc.recovery.rejoin_timeout,
        timing: rc.timing,
        profile_dir: rc.profile_dir.clone(),
        capture_dir: rc.capture_dir.clone(),
        roster,
    };
    worker::run(wc, announce, || {
        let m = rc.build_role(rank)?;
        let mut e = RoleEngine::new(rank, rc.n_roles, m, rc.budget);
        if let Some(h) = rc.spec.mtp.as_ref().filter(|_| e.is_last()) {
            e.set_head(h.build(&rc.weights, rc.budget)?);
        }
        Ok(e)
    })
}
