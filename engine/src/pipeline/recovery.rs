//! Role 0's supervisor of the chain. The scheduler tells it the chain broke (`Recovery::Lost`,
//! naming the role when it is known) after ending the requests in flight; the supervisor then
//! waits out a back-off, restarts the local role processes that died or were named (killing a
//! stalled one first), links role 0 again (connect to role 1, accept the last role) and hands the
//! new downstream link to the scheduler, which probes the chain and is ready again when the probe
//! returns (`Recovery::Ready`). Recoveries are bounded: more than `max_recoveries` within
//! `window`, or a chain that cannot be linked or probed within `rejoin_timeout`, is a permanent
//! failure with a message that says so.
//!
//! A fleet file may list spare hosts (`spare`): while the chain stays broken, every
//! `--spare-after-s` role 0 looks for ranks whose host cannot be reached, hands each to a spare,
//! and links the chain again through it (the roles around it learn its address from the roster,
//! `roster`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use tokio::sync::mpsc as tmpsc;

use super::children::LocalRoles;
use super::events::Inbox;
use super::link::{self, BlockingWriter, LinkTiming};
use super::return_port::ReturnPort;
use super::roster::Roster;
pub use super::run_config::RecoveryPolicy;
use super::spare::Spares;
use super::wire::WireLimits;

/// What the scheduler tells the supervisor.
#[derive(Debug)]
pub enum Recovery {
    /// The chain broke; `role` is the one named by the fault, when one was.
    Lost {
        role: Option<usize>,
        message: String,
    },
    /// The readiness probe came back over the new links.
    Ready,
}

/// Role 0's ends of the chain and what it needs to link them again.
pub struct Chain {
    pub ret: ReturnPort,
    /// Every rank's address (role 1's is the one role 0 links to).
    pub roster: Roster,
    /// The spare hosts of a fleet file that lists them.
    pub spares: Option<Arc<Spares>>,
    pub lim: WireLimits,
    pub timing: LinkTiming,
    pub last: usize,
    pub inbox: mpsc::Sender<Inbox>,
    pub stopping: Arc<AtomicBool>,
}

/// A linked chain: the writer to role 1 (for the scheduler) and what keeps the links alive.
pub struct Linked {
    pub to_1: Arc<BlockingWriter>,
    reader: tokio::task::JoinHandle<()>,
    /// Lets the return link's reader begin (see [`Linked::start_reading`]).
    go: Option<tokio::sync::oneshot::Sender<()>>,
    beat_stop: Arc<AtomicBool>,
}

impl Linked {
    /// Let the return link's reader report what it reads. Called once the scheduler has been
    /// handed `to_1`: a loss the reader reports must reach the scheduler after the new link does,
    /// or the scheduler, still without a link, takes it for an echo of the old break and the
    /// probe waits for a link that is gone.
    pub fn start_reading(&mut self) {
        if let Some(go) = self.go.take() {
            let _ = go.send(());
        }
    }

    /// Stop reading the return link and writing heartbeats (the chain broke).
    fn drop_links(self) {
        self.reader.abort();
        self.beat_stop.store(true, Ordering::Relaxed);
        self.to_1.close();
    }
}

/// Role 1's link while role 0 waits for the last role's: closed (its heartbeats stopped) when
/// dropped before the chain is linked.
struct HalfLinked {
    to_1: Arc<BlockingWriter>,
    beat_stop: Arc<AtomicBool>,
    linked: bool,
}

impl Drop for HalfLinked {
    fn drop(&mut self) {
        if !self.linked {
            self.beat_stop.store(true, Ordering::Relaxed);
            self.to_1.close();
        }
    }
}

/// Why a recovery attempt failed: a restarted role that failed or died again is tried again
/// (within the policy's bound); a chain that could not be linked within the rejoin timeout is not.
enum Attempt {
    Again(anyhow::Error),
    GiveUp(anyhow::Error),
}

/// How often a recovery looks for local roles that died while the chain was being linked.
const DEATH_POLL: Duration = Duration::from_millis(100);

impl Chain {
    /// Connect to role 1 and accept the last role, within `wait`; start reading the return link
    /// (a silent, closed or failed return link is a loss naming the last role).
    pub async fn link(&self, wait: Duration) -> anyhow::Result<Linked> {
        let to_1 = link::connect_hello(&self.roster.get(1), wait)
            .await
            .map_err(|e| anyhow::anyhow!("connecting to role 1: {e}"))?;
        // kept alive from the start: role 1 may accept it long before the last role links here
        let (_, w1) = link::blocking_timed(to_1, self.lim, Some(self.timing))?;
        let to_1 = Arc::new(w1);
        let beat_stop = Arc::new(AtomicBool::new(false));
        // until the chain is linked, a failure or a caller that gives up closes role 1's link
        let mut half = HalfLinked {
            to_1: to_1.clone(),
            beat_stop: beat_stop.clone(),
            linked: false,
        };
        link::keep_alive(to_1.clone(), self.timing, beat_stop.clone())?;
        let (back, _) = self
            .ret
            .accept_live(wait)
            .await
            .map_err(|e| anyhow::anyhow!("waiting for role {}: {e}", self.last))?;
        half.linked = true;
        let (rl, _) = link::split(back, self.lim);
        let (go, started) = tokio::sync::oneshot::channel::<()>();
        let reader = super::return_link::spawn_reader(
            rl,
            self.inbox.clone(),
            self.stopping.clone(),
            self.last,
            self.timing.stall,
            started,
        );
        Ok(Linked {
            to_1,
            reader,
            go: Some(go),
            beat_stop,
        })
    }

    /// [`Chain::link`], given up as soon as a local role is found dead or stopped (a restarted
    /// role that failed while building its weights would otherwise hold the link open until
    /// `wait` ran out).
    async fn link_watching(
        &self,
        local: Option<&Arc<LocalRoles>>,
        wait: Duration,
    ) -> Result<Linked, Attempt> {
        let Some(roles) = local else {
            return self.link(wait).await.map_err(Attempt::GiveUp);
        };
        let linking = self.link(wait);
        tokio::pin!(linking);
        loop {
            tokio::select! {
                r = &mut linking => return r.map_err(Attempt::GiveUp),
                _ = tokio::time::sleep(DEATH_POLL) => {
                    let dead = roles.dead();
                    if !dead.is_empty() {
                        return Err(Attempt::Again(anyhow::anyhow!(
                            "role(s) {dead:?} exited or stopped while the chain was being linked"
                        )));
                    }
                }
            }
        }
    }
}

/// Run the supervisor until the fleet stops or gives up. `linked` is the chain as first linked.
pub async fn supervise(
    chain: Chain,
    linked: Linked,
    local: Option<Arc<LocalRoles>>,
    policy: RecoveryPolicy,
    mut events: tmpsc::UnboundedReceiver<Recovery>,
) {
    let mut recent: VecDeque<Instant> = VecDeque::new();
    let mut pending: Option<(Option<usize>, String)> = None;
    // since when the chain has been broken (None: linked and probed)
    let mut outage: Option<Outage> = None;
    // the links in use; none after an attempt that failed
    let mut linked = Some(linked);
    loop {
        let (role, message) = match pending.take() {
            Some(p) => p,
            None => match events.recv().await {
                Some(Recovery::Lost { role, message }) => (role, message),
                Some(Recovery::Ready) => continue,
                None => return,
            },
        };
        if chain.stopping.load(Ordering::SeqCst) {
            return;
        }
        if let Some(l) = linked.take() {
            l.drop_links();
        }
        let broken = outage.get_or_insert_with(Outage::new);
        let now = Instant::now();
        while recent
            .front()
            .is_some_and(|t| now.duration_since(*t) > policy.window)
        {
            recent.pop_front();
        }
        if recent.len() >= policy.max_recoveries {
            let _ = chain.inbox.send(Inbox::Failed(format!(
                "{message}; not recovering: {} recoveries within {:?} already (--max-recoveries)",
                recent.len(),
                policy.window
            )));
            return;
        }
        let wait = RecoveryPolicy::backoff(recent.len());
        recent.push_back(now);
        tracing::warn!("recovering from: {message} (after {wait:?})");
        tokio::time::sleep(wait).await;
        let attempt = recover(&chain, local.clone(), role, policy.rejoin_timeout);
        let attempt = match broken.or_spare(&chain, attempt).await {
            Ok(a) => a,
            Err(spared) => {
                pending = Some((None, format!("{message}; {spared}")));
                continue;
            }
        };
        match attempt {
            Ok(mut l) => {
                let _ = chain.inbox.send(Inbox::Relinked(Arc::clone(&l.to_1)));
                l.start_reading();
                linked = Some(l);
            }
            Err(Attempt::Again(e)) => {
                // counted and backed off like any loss, so bounded by --max-recoveries
                tracing::warn!("recovery attempt failed: {e:#}");
                pending = Some((role, format!("{message}; a recovery attempt failed: {e:#}")));
                continue;
            }
            Err(Attempt::GiveUp(e)) => {
                let _ = chain
                    .inbox
                    .send(Inbox::Failed(format!("{message}; recovery failed: {e:#}")));
                return;
            }
        }
        // the probe must come back over the new links within the bound
        let probed = tokio::time::timeout(policy.rejoin_timeout, async {
            match events.recv().await {
                Some(Recovery::Ready) => None,
                Some(Recovery::Lost { role, message }) => Some((role, message)),
                None => Some((None, String::new())),
            }
        });
        let probed = match broken.or_spare(&chain, probed).await {
            Ok(p) => p,
            // a spare took a role the linked chain was waiting for: the chain must be linked
            // again through it. The scheduler holds the new link, so it is told of the loss as of
            // any other (it holds the streams again), and its answer is the loss handled here:
            // dropping the links first would have it report their closing as a loss of its own
            // later, and that would end the next linking.
            Err(spared) => {
                let lost = Inbox::Lost {
                    role: None,
                    message: format!("{message}; {spared}"),
                };
                if chain.inbox.send(lost).is_err() {
                    return;
                }
                loop {
                    match events.recv().await {
                        Some(Recovery::Lost { role, message }) => break Ok(Some((role, message))),
                        Some(Recovery::Ready) => continue,
                        None => return,
                    }
                }
            }
        };
        match probed {
            Ok(None) => {
                tracing::warn!("recovered: every role answered the readiness probe");
                outage = None;
            }
            Ok(Some((_, m))) if m.is_empty() => return,
            Ok(Some(lost)) => pending = Some(lost),
            Err(_) => {
                if let Some(l) = linked.take() {
                    l.drop_links();
                }
                let _ = chain.inbox.send(Inbox::Failed(format!(
                    "{message}; the relinked chain did not answer the readiness probe within {:?}",
                    policy.rejoin_timeout
                )));
                return;
            }
        }
    }
}

/// How long the chain has been broken, and how often spares were looked for since.
struct Outage {
    since: Instant,
    looked: u32,
}

impl Outage {
    fn new() -> Outage {
        Outage {
            since: Instant::now(),
            looked: 0,
        }
    }

    /// Run `step` (a recovery attempt, or the wait for its probe); each time the outage reaches a
    /// multiple of `--spare-after-s` meanwhile, hand the ranks whose host cannot be reached to
    /// spares. Err (what the spares took, `step` abandoned) when one did: the chain must be linked
    /// again through it.
    async fn or_spare<T>(
        &mut self,
        chain: &Chain,
        step: impl std::future::Future<Output = T>,
    ) -> Result<T, String> {
        tokio::pin!(step);
        loop {
            let spares = chain.spares.as_ref().filter(|s| s.any());
            let due = spares.map(|s| self.since + s.after * (self.looked + 1));
            let look = async {
                match due {
                    Some(t) => tokio::time::sleep_until(t.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = &mut step => return Ok(r),
                _ = look => {
                    self.looked += 1;
                    let Some(spares) = spares else { continue };
                    let taken = spares.replace_unreachable(&chain.roster).await;
                    if !taken.is_empty() {
                        let away = self.since.elapsed().as_secs_f64();
                        let said: Vec<String> = taken
                            .iter()
                            .map(|(rank, spare)| format!("role {rank} to the spare {spare}"))
                            .collect();
                        return Err(format!(
                            "unreachable after {away:.1} s, handed {}",
                            said.join(", ")
                        ));
                    }
                }
            }
        }
    }
}

/// Restart what needs restarting on this machine, then link role 0 again.
async fn recover(
    chain: &Chain,
    local: Option<Arc<LocalRoles>>,
    named: Option<usize>,
    wait: Duration,
) -> Result<Linked, Attempt> {
    if let Some(roles) = local.clone() {
        tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
            let mut restart = roles.dead();
            // a named role that still runs may be stopped or wedged: it is replaced too
            if let Some(r) = named.filter(|&r| r > 0 && !restart.contains(&r)) {
                restart.push(r);
            }
            restart.sort_unstable();
            for r in restart {
                roles.restart(r)?;
            }
            Ok(())
        })
        .await
        .map_err(|e| Attempt::GiveUp(e.into()))?
        .map_err(Attempt::Again)?;
    }
    chain.link_watching(local.as_ref(), wait).await
}
