//! Role 0's end of the return link: the reader of what the last role sends back (tokens, drafts,
//! capture reports, pongs), which hands every message to the scheduler's inbox and reports a
//! silent, closed or failed link as the loss of the last role.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use super::events::Inbox;
use super::link::LinkReader;
use super::wire::Message;

/// Read the return link from role `last` once `started` fires, until it breaks or stays silent
/// for `stall` (heartbeats count as life, not messages); a break is reported unless `stopping`.
pub fn spawn_reader(
    mut rl: LinkReader,
    inbox: mpsc::Sender<Inbox>,
    stopping: Arc<AtomicBool>,
    last: usize,
    stall: Duration,
    started: tokio::sync::oneshot::Receiver<()>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if started.await.is_err() {
            return;
        }
        loop {
            let got = tokio::time::timeout(stall, rl.recv()).await;
            let why = match got {
                Ok(Ok((Message::Heartbeat, _))) => continue,
                Ok(Ok((m, _))) => {
                    if inbox.send(Inbox::Link(m)).is_err() {
                        return;
                    }
                    continue;
                }
                Ok(Err(e)) => format!("role {last} failed: its link to role 0 broke ({e})"),
                Err(_) => format!(
                    "role {last} stalled or its link to role 0 was cut: nothing for {stall:?}"
                ),
            };
            if !stopping.load(Ordering::SeqCst) {
                let _ = inbox.send(Inbox::Lost {
                    role: Some(last),
                    message: why,
                });
            }
            return;
        }
    })
}
