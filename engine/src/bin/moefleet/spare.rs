//! `moefleet spare --listen ADDR`: a spare host of a fleet file (`[[spare]] addr = ADDR`). It
//! waits until role 0 hands it the rank of a host that cannot be reached (the fleet's
//! configuration as data: weights from the same source, the same options), then runs that role on
//! ADDR until the fleet shuts down.

use super::prelude::*;

#[derive(clap::Args)]
pub struct Args {
    /// The address the fleet file lists this spare under (`[[spare]] addr`): role 0 connects here
    /// to hand it a role, which then listens here for the role before it.
    #[arg(long)]
    listen: String,
}

pub fn run(args: Args) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let waiting = async {
        let l = tokio::net::TcpListener::bind(&args.listen)
            .await
            .with_context(|| format!("listening on {}", args.listen))?;
        println!("moefleet spare waiting on {}", args.listen);
        pipeline::spare::wait_for_launch(l, &args.listen).await
    };
    let (launch, control) = rt.block_on(waiting)?;
    let mut control = control.into_std()?;
    control.set_nonblocking(false)?;
    drop(rt);
    let rank = launch.rank;
    println!("moefleet spare on {} takes role {rank}", args.listen);
    super::role::run_worker(
        launch.run,
        rank,
        launch.listen,
        launch.next,
        launch.roster,
        |bound| pipeline::spare::answer(&mut control, rank, bound),
    )
}
