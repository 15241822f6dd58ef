//! Counters role 0 keeps for `/api/stats`, `/metrics` and `/health`: monotonic counters, gauges,
//! readiness and the failure message. Written by the engine thread and the HTTP handlers, read by
//! anyone; plain atomics.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use serde::Serialize;

#[derive(Debug, Default)]
pub struct FleetStats {
    pub ready: AtomicBool,
    pub failure: Mutex<Option<String>>,
    /// Tokens delivered to clients (monotonic).
    pub tokens_total: AtomicU64,
    /// Valid generation requests received, admitted or refused at capacity (monotonic), so that
    /// `Δrequests_total == requests + capacity rejections` (MEASUREMENTS.md §2.4).
    pub requests_total: AtomicU64,
    /// Requests refused with 503 because slots and queue were full (monotonic).
    pub rejected_total: AtomicU64,
    /// Requests refused with 4xx (monotonic).
    pub invalid_total: AtomicU64,
    /// Requests occupying a slot (gauge).
    pub requests_in_flight: AtomicU64,
    /// Requests accepted and not finished: queued + in slots (gauge; the admission bound).
    pub pending: AtomicU64,
    pub queue_depth: AtomicU64,
    pub slots_busy: AtomicU64,
    pub slots_total: AtomicU64,
}

/// The JSON of `/api/stats`.
#[derive(Debug, Serialize)]
pub struct StatsSnapshot {
    pub engine_version: &'static str,
    pub ready: bool,
    pub failure: Option<String>,
    pub tokens_total: u64,
    pub requests_total: u64,
    pub requests_in_flight: u64,
    pub rejected_total: u64,
    pub invalid_total: u64,
    pub queue_depth: u64,
    pub queue_capacity: u64,
    pub slots_busy: u64,
    pub slots_total: u64,
}

impl FleetStats {
    /// Reserve room for one more request if `pending < capacity` (slots + queue).
    pub fn try_reserve(&self, capacity: u64) -> bool {
        self.pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| {
                (p < capacity).then_some(p + 1)
            })
            .is_ok()
    }

    pub fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn snapshot(&self, queue_capacity: u64) -> StatsSnapshot {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            engine_version: env!("CARGO_PKG_VERSION"),
            ready: self.ready.load(Ordering::Relaxed),
            failure: self.failure(),
            tokens_total: g(&self.tokens_total),
            requests_total: g(&self.requests_total),
            requests_in_flight: g(&self.requests_in_flight),
            rejected_total: g(&self.rejected_total),
            invalid_total: g(&self.invalid_total),
            queue_depth: g(&self.queue_depth),
            queue_capacity,
            slots_busy: g(&self.slots_busy),
            slots_total: g(&self.slots_total),
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
        out
    }
}
