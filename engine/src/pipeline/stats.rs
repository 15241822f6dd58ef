//! Counters role 0 keeps for `/api/stats`, `/metrics` and `/health`: monotonic counters, gauges,
//! readiness and the failure message. Plain atomics, private to this file: every change goes
//! through one method named after the event that causes it (a request received, reserved,
//! admitted, its slot freed; a token delivered; the chain lost, recovered or failed), so each
//! counter is written in one place; anyone reads them through `snapshot`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use serde::Serialize;

#[derive(Debug, Default)]
pub struct FleetStats {
    ready: AtomicBool,
    failure: Mutex<Option<String>>,
    /// What broke the chain, while it is being recovered.
    recovering: Mutex<Option<String>>,
    /// Recoveries completed (monotonic).
    recoveries_total: AtomicU64,
    /// Replays begun: a stream held through a lost chain counts once the chain is back (monotonic;
    /// a stream lost with more than once counts once per loss that found it sending).
    streams_resumed_total: AtomicU64,
    /// Streams in flight that a lost chain ended (monotonic).
    streams_lost_total: AtomicU64,
    /// Rows the replays sent again: each resumed stream's prompt and emitted tokens but the last
    /// (monotonic; the replay cost in prefill rows).
    replay_rows_total: AtomicU64,
    /// Tokens delivered to clients (monotonic).
    tokens_total: AtomicU64,
    /// Valid generation requests received, admitted or refused at capacity (monotonic), so that
    /// `Δrequests_total == requests + capacity rejections` (MEASUREMENTS.md §2.4).
    requests_total: AtomicU64,
    /// Requests refused with 503 because slots and queue were full (monotonic).
    rejected_total: AtomicU64,
    /// Requests refused with 4xx (monotonic).
    invalid_total: AtomicU64,
    /// Requests occupying a slot (gauge).
    requests_in_flight: AtomicU64,
    /// Requests accepted and not finished: queued + in slots (gauge; the admission bound).
    pending: AtomicU64,
    queue_depth: AtomicU64,
    slots_busy: AtomicU64,
    slots_total: AtomicU64,
    /// Pipeline groups the slots are dealt into (`serve --groups`; a frame carries one group's rows).
    pipeline_groups: AtomicU64,
    /// Speculation, per proposer (`ProposerKind::index`): proposed, accepted, rejected (each
    /// rejection is one rewind), drafts begun, tokens accepted in the drafts it began (monotonic).
    spec: [[AtomicU64; 5]; crate::spec::N_KINDS],
    /// Speculation is switched on.
    spec_enabled: AtomicBool,
    /// Proposals sent and not yet verified, over every stream (gauge; a rejection's discarded
    /// followers and a broken chain's proposals leave it without being verified).
    spec_in_flight: AtomicU64,
    /// Where each rank is, for a fleet of several roles (`roster`).
    roster: Mutex<Option<super::roster::Roster>>,
}

/// What each event does to the counters: the HTTP side's first, then role 0's.
impl FleetStats {
    /// A request refused with 4xx.
    pub fn invalid(&self) {
        self.invalid_total.fetch_add(1, Ordering::Relaxed);
    }

    /// A valid generation request received (admitted or refused at capacity next).
    pub fn received(&self) {
        self.requests_total.fetch_add(1, Ordering::Relaxed);
    }

    /// A request refused because slots and queue were full.
    pub fn rejected(&self) {
        self.rejected_total.fetch_add(1, Ordering::Relaxed);
    }

    /// Reserve room for one more request if `pending < capacity` (slots + queue).
    pub fn try_reserve(&self, capacity: u64) -> bool {
        self.pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| {
                (p < capacity).then_some(p + 1)
            })
            .is_ok()
    }

    /// A reserved request that never reached a slot ended (refused, its client gone, or ended
    /// in the queue).
    pub fn unreserve(&self) {
        self.pending.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// The scheduler's slots, at start.
    pub fn set_slots_total(&self, n: u64) {
        self.slots_total.store(n, Ordering::Relaxed);
    }

    pub fn set_pipeline_groups(&self, n: u64) {
        self.pipeline_groups.store(n, Ordering::Relaxed);
    }

    /// Speculation switched on or off, at start.
    pub fn set_speculating(&self, on: bool) {
        self.spec_enabled.store(on, Ordering::Relaxed);
    }

    pub fn speculating(&self) -> bool {
        self.spec_enabled.load(Ordering::Relaxed)
    }

    /// The chain answered readiness.
    pub fn ready_now(&self) {
        self.ready.store(true, Ordering::Relaxed);
    }

    /// Requests waiting for a slot, now.
    pub fn queued(&self, depth: usize) {
        self.queue_depth.store(depth as u64, Ordering::Relaxed);
    }

    /// A queued request took a slot.
    pub fn admitted(&self) {
        self.slots_busy.fetch_add(1, Ordering::Relaxed);
        self.requests_in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// A stream's slot was freed (its rows all back).
    pub fn slot_freed(&self) {
        self.slots_busy.fetch_sub(1, Ordering::Relaxed);
        self.requests_in_flight.fetch_sub(1, Ordering::Relaxed);
        self.pending.fetch_sub(1, Ordering::Relaxed);
    }

    /// A stream in a slot ended with every other (a failure, a lost chain, shutdown); `all_ended`
    /// then clears the slot gauges at once.
    pub fn stream_ended(&self) {
        self.pending.fetch_sub(1, Ordering::Relaxed);
        self.requests_in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// Every stream and queued request has ended: no slot busy, nothing queued or proposed.
    pub fn all_ended(&self) {
        self.spec_in_flight.store(0, Ordering::Relaxed);
        self.slots_busy.store(0, Ordering::Relaxed);
        self.queue_depth.store(0, Ordering::Relaxed);
    }

    /// A token delivered to its client.
    pub fn token_delivered(&self) {
        self.tokens_total.fetch_add(1, Ordering::Relaxed);
    }

    /// Proposals sent and not yet verified, now.
    pub fn proposals_in_flight(&self, n: usize) {
        self.spec_in_flight.store(n as u64, Ordering::Relaxed);
    }

    /// The chain broke (`why`) and is being linked again: not ready meanwhile.
    pub fn lost(&self, why: &str) {
        self.ready.store(false, Ordering::Relaxed);
        *self.recovering.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.to_string());
    }

    /// A held stream's replay begins (the chain is back), with `rows` prefill rows.
    pub fn stream_resumed(&self, rows: usize) {
        self.streams_resumed_total.fetch_add(1, Ordering::Relaxed);
        self.replay_rows_total
            .fetch_add(rows as u64, Ordering::Relaxed);
    }

    /// A stream in flight ended by a lost chain (its slot freed with it).
    pub fn stream_lost(&self) {
        self.streams_lost_total.fetch_add(1, Ordering::Relaxed);
        self.slot_freed();
    }

    /// The relinked chain answered readiness: one recovery more.
    pub fn recovered(&self) {
        *self.recovering.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.recoveries_total.fetch_add(1, Ordering::Relaxed);
    }

    /// The fleet failed for good with `message`.
    pub fn failed(&self, message: &str) {
        self.ready.store(false, Ordering::Relaxed);
        *self.failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(message.to_string());
        *self.recovering.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The server is shutting down: not ready.
    pub fn stopping(&self) {
        self.ready.store(false, Ordering::Relaxed);
    }
}

/// Speculation counters of one proposer in `/api/stats`.
#[derive(Debug, Serialize, PartialEq)]
pub struct ProposerStats {
    pub proposed: u64,
    pub accepted: u64,
    pub rewinds: u64,
    pub drafts: u64,
    /// As vLLM defines it: 1 + accepted / drafts (the target's own token counts as one), over the
    /// drafts this proposer began (a draft's tokens may come from several proposers); 0 when it
    /// began none.
    pub mean_accepted_length: f64,
}

/// The speculation counters kept per proposer (the second index of `FleetStats::spec`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecCounter {
    /// A proposal sent.
    Proposed = 0,
    /// A proposal verified right.
    Accepted = 1,
    /// A proposal verified wrong: one rewind.
    Rejected = 2,
    /// A draft (a run of proposals verified one after another) begun by this proposer.
    DraftBegun = 3,
    /// A token accepted in a draft this proposer began.
    AcceptedInDraft = 4,
}

impl FleetStats {
    /// Count one `what` for proposer `kind`.
    pub fn spec_add(&self, kind: crate::spec::ProposerKind, what: SpecCounter) {
        self.spec[kind.index()][what as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn proposer_stats(&self) -> std::collections::BTreeMap<&'static str, ProposerStats> {
        crate::spec::ProposerKind::ALL
            .iter()
            .map(|k| {
                let c = &self.spec[k.index()];
                let g = |w: SpecCounter| c[w as usize].load(Ordering::Relaxed);
                let drafts = g(SpecCounter::DraftBegun);
                (
                    k.name(),
                    ProposerStats {
                        proposed: g(SpecCounter::Proposed),
                        accepted: g(SpecCounter::Accepted),
                        rewinds: g(SpecCounter::Rejected),
                        drafts,
                        mean_accepted_length: if drafts == 0 {
                            0.0
                        } else {
                            1.0 + g(SpecCounter::AcceptedInDraft) as f64 / drafts as f64
                        },
                    },
                )
            })
            .collect()
    }
}

impl FleetStats {
    /// The fleet's roster is known (a fleet of several roles, once linked).
    pub fn linked_as(&self, roster: super::roster::Roster) {
        *self.roster.lock().unwrap_or_else(|e| e.into_inner()) = Some(roster);
    }
}

/// The JSON of `/api/stats`.
#[derive(Debug, Serialize)]
pub struct StatsSnapshot {
    pub engine_version: &'static str,
    /// The commit the engine was built from (`-dirty` when its tracked files differed; engine/build.rs).
    pub engine_commit: &'static str,
    pub ready: bool,
    pub failure: Option<String>,
    /// What broke the chain, while it is being recovered.
    pub recovering: Option<String>,
    pub recoveries_total: u64,
    /// Streams held through a lost chain and replayed (`serve --stream-replays`).
    pub streams_resumed_total: u64,
    /// Streams in flight that a lost chain ended with an error.
    pub streams_lost_total: u64,
    /// Prefill rows the replays sent again.
    pub replay_rows_total: u64,
    /// Every rank's address as role 0 links the chain now (a spare's once it took a rank; role
    /// 0's is its return port); absent for a one-role fleet.
    pub roles: Option<Vec<String>>,
    /// Ranks handed to spare hosts (`serve --spare-after-s`).
    pub roles_moved_total: u64,
    pub tokens_total: u64,
    pub requests_total: u64,
    pub requests_in_flight: u64,
    pub rejected_total: u64,
    pub invalid_total: u64,
    pub queue_depth: u64,
    pub queue_capacity: u64,
    pub slots_busy: u64,
    pub slots_total: u64,
    /// Pipeline groups of slots (a frame carries one group's rows): what a run that measures the
    /// fleet records of its configuration.
    pub pipeline_groups: u64,
    /// Per proposer, when speculation is switched on.
    pub speculation: Option<std::collections::BTreeMap<&'static str, ProposerStats>>,
    /// Proposals sent and not yet verified, now (when speculation is switched on).
    pub proposals_in_flight: Option<u64>,
}

impl FleetStats {
    pub fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn roster(&self) -> Option<super::roster::Roster> {
        self.roster
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn recovering(&self) -> Option<String> {
        self.recovering
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn snapshot(&self, queue_capacity: u64) -> StatsSnapshot {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            engine_version: env!("CARGO_PKG_VERSION"),
            engine_commit: env!("MOEFLEET_BUILD_COMMIT"),
            ready: self.ready.load(Ordering::Relaxed),
            failure: self.failure(),
            recovering: self.recovering(),
            recoveries_total: g(&self.recoveries_total),
            streams_resumed_total: g(&self.streams_resumed_total),
            streams_lost_total: g(&self.streams_lost_total),
            replay_rows_total: g(&self.replay_rows_total),
            roles: self.roster().map(|r| r.addrs()),
            roles_moved_total: self.roster().map_or(0, |r| r.moved()),
            tokens_total: g(&self.tokens_total),
            requests_total: g(&self.requests_total),
            requests_in_flight: g(&self.requests_in_flight),
            rejected_total: g(&self.rejected_total),
            invalid_total: g(&self.invalid_total),
            queue_depth: g(&self.queue_depth),
            queue_capacity,
            slots_busy: g(&self.slots_busy),
            slots_total: g(&self.slots_total),
            pipeline_groups: g(&self.pipeline_groups),
            speculation: self
                .spec_enabled
                .load(Ordering::Relaxed)
                .then(|| self.proposer_stats()),
            proposals_in_flight: self
                .spec_enabled
                .load(Ordering::Relaxed)
                .then(|| g(&self.spec_in_flight)),
        }
    }

    /// Prometheus text exposition.
    pub fn prometheus(&self, queue_capacity: u64, model: &str) -> String {
        let s = self.snapshot(queue_capacity);
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, v: u64| {
            out.push_str(&format!("# HELP moefleet_{name} {help}\n# TYPE moefleet_{name} {kind}\nmoefleet_{name}{{model=\"{model}\"}} {v}\n"));
        };
        metric(
            "tokens_total",
            "counter",
            "Tokens delivered to clients.",
            s.tokens_total,
        );
        metric(
            "requests_total",
            "counter",
            "Valid generation requests received (admitted or refused at capacity).",
            s.requests_total,
        );
        metric(
            "rejected_total",
            "counter",
            "Requests refused because slots and queue were full.",
            s.rejected_total,
        );
        metric(
            "invalid_total",
            "counter",
            "Requests refused as malformed or out of range.",
            s.invalid_total,
        );
        metric(
            "requests_in_flight",
            "gauge",
            "Requests occupying a stream slot.",
            s.requests_in_flight,
        );
        metric(
            "queue_depth",
            "gauge",
            "Requests waiting for a slot.",
            s.queue_depth,
        );
        metric("slots_busy", "gauge", "Stream slots in use.", s.slots_busy);
        metric("slots_total", "gauge", "Stream slots.", s.slots_total);
        metric(
            "ready",
            "gauge",
            "1 when every role answered the readiness probe.",
            s.ready as u64,
        );
        metric(
            "recoveries_total",
            "counter",
            "Times the chain was linked again after a role or link failed.",
            s.recoveries_total,
        );
        metric(
            "streams_resumed_total",
            "counter",
            "Streams held through a lost chain and replayed.",
            s.streams_resumed_total,
        );
        metric(
            "streams_lost_total",
            "counter",
            "Streams in flight that a lost chain ended with an error.",
            s.streams_lost_total,
        );
        metric(
            "replay_rows_total",
            "counter",
            "Prefill rows sent again to replay streams after a lost chain.",
            s.replay_rows_total,
        );
        metric(
            "roles_moved_total",
            "counter",
            "Ranks handed to spare hosts after their own host could not be reached.",
            s.roles_moved_total,
        );
        if let Some(n) = s.proposals_in_flight {
            metric(
                "spec_proposals_in_flight",
                "gauge",
                "Proposed tokens sent and not yet verified.",
                n,
            );
        }
        if let Some(spec) = &s.speculation {
            for (i, (name, help)) in [
                (
                    "spec_proposed_total",
                    "Proposed tokens injected behind a lone stream's input.",
                ),
                (
                    "spec_accepted_total",
                    "Proposed tokens the model then emitted.",
                ),
                (
                    "spec_rewinds_total",
                    "Rejected proposals, each undone in every role.",
                ),
                ("spec_drafts_total", "Runs of proposals verified in a row."),
            ]
            .into_iter()
            .enumerate()
            {
                out.push_str(&format!(
                    "# HELP moefleet_{name} {help}\n# TYPE moefleet_{name} counter\n"
                ));
                for (k, p) in spec {
                    let v = [p.proposed, p.accepted, p.rewinds, p.drafts][i];
                    out.push_str(&format!(
                        "moefleet_{name}{{model=\"{model}\",proposer=\"{k}\"}} {v}\n"
                    ));
                }
            }
        }
        out
    }
}
