//! The records a role writes under `serve --profile-dir DIR`: one per frame it computes, and at
//! role 0 one per sampled row's reply.

use serde::{Deserialize, Serialize};

/// One frame as a role computed it: a JSON line of `serve --profile-dir DIR` (`DIR/role-K.jsonl`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct FrameRecord {
    pub role: usize,
    pub seq: u64,
    #[serde(default)]
    pub group: u32,
    pub rows: usize,
    /// Wall-clock seconds when the record was written, right after the frame (to split by phase).
    /// Absent in the oldest records; readers that time frames require it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch_s: Option<f64>,
    /// Wall-clock seconds when the role started computing the frame: with `epoch_s`, the interval
    /// the role was busy on it, comparable across the roles of one machine (the fleet simulator
    /// counts how many roles computed at once). Absent in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_s: Option<f64>,
    /// Wall-clock seconds just before the role handed the frame (or, at the last role, its tokens)
    /// to its link downstream: where the hop to the next role starts. `epoch_s` is read after the
    /// write returns, by which time the next role may already have started on the frame. Absent in
    /// older records (readers then take `epoch_s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_s: Option<f64>,
    /// CPU time of the role's compute thread over the frame: with `compute_ns`, how long the role
    /// waited for a core while computing it (other threads of a frame launched alone are not
    /// counted). Absent in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ns: Option<u64>,
    /// The frame was launched with nothing else in flight (`wire::FLAG_ALONE`): on a machine with
    /// more roles than cores it computes on every core rather than one.
    #[serde(default)]
    pub alone: bool,
    /// When the role started computing the frame, in nanoseconds since the role started (role 0:
    /// right after planning it). Readers that time frames on role 0's clock require it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_ns: Option<u64>,
    /// How long the role waited for this frame after finishing its previous message (workers,
    /// which read their link on the compute thread: a frame that arrived while the role was busy
    /// waited in the socket buffer, untimed, and shows only the read here; role 0: 0).
    #[serde(default)]
    pub idle_ns: u64,
    pub compute_ns: u64,
    #[serde(default)]
    pub attention_ns: u64,
    #[serde(default)]
    pub mlp_ns: u64,
    #[serde(default)]
    pub head_ns: u64,
    #[serde(default)]
    pub bytes_in: u64,
    #[serde(default)]
    pub bytes_out: u64,
}

impl FrameRecord {
    /// Wall-clock seconds when its compute started (older records: `epoch_s` less the compute;
    /// NaN for a record with neither, which readers that time frames refuse when they read it).
    pub fn start(&self) -> f64 {
        self.start_s
            .unwrap_or(self.epoch_s.unwrap_or(f64::NAN) - self.compute_ns as f64 * 1e-9)
    }

    /// Wall-clock seconds when its compute ended.
    pub fn end(&self) -> f64 {
        self.start() + self.compute_ns as f64 * 1e-9
    }

    /// What the frame cost: its thread's CPU time, or its wall time when launched alone.
    pub fn cost(&self) -> Option<f64> {
        if self.alone {
            Some(self.compute_ns as f64 * 1e-9)
        } else {
            self.cpu_ns.map(|c| c as f64 * 1e-9)
        }
    }
}

/// What became of a sampled row's reply at role 0.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ReplyOutcome {
    /// Its input was a confirmed token.
    Confirmed,
    /// Its input was a proposal verified before its reply.
    Accepted,
    /// Behind a rejected proposal, or after the stream finished.
    Discarded,
}

impl ReplyOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ReplyOutcome::Confirmed => "confirmed",
            ReplyOutcome::Accepted => "accepted",
            ReplyOutcome::Discarded => "discarded",
        }
    }
}

/// One sampled row's reply at role 0 (`DIR/role-0-replies.jsonl`): with role 0's frame records'
/// launch times, the round trip of every frame and the spacing of replies while speculating.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ReplyRecord {
    pub seq: u64,
    pub slot: u32,
    pub pos: u32,
    pub epoch_s: f64,
    /// Nanoseconds since role 0 started (the clock of its frame records).
    pub t_ns: u64,
    pub outcome: ReplyOutcome,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn records_write_every_field_in_order_and_older_lines_read() {
        let f = FrameRecord {
            role: 1,
            seq: 2,
            rows: 3,
            epoch_s: Some(0.0),
            start_s: Some(1.5),
            sent_s: Some(1.75),
            t_ns: Some(0),
            cpu_ns: Some(7),
            compute_ns: 9,
            ..Default::default()
        };
        let line = serde_json::to_string(&f).unwrap();
        assert_eq!(
            line,
            "{\"role\":1,\"seq\":2,\"group\":0,\"rows\":3,\"epoch_s\":0.0,\"start_s\":1.5,\
             \"sent_s\":1.75,\"cpu_ns\":7,\"alone\":false,\"t_ns\":0,\"idle_ns\":0,\"compute_ns\":9,\
             \"attention_ns\":0,\"mlp_ns\":0,\"head_ns\":0,\"bytes_in\":0,\"bytes_out\":0}"
        );
        assert_eq!(serde_json::from_str::<FrameRecord>(&line).unwrap(), f);
        // a record from before start_s and cpu_ns: its start is recovered from epoch_s
        let old = "{\"role\":0,\"seq\":4,\"rows\":1,\"epoch_s\":10.0,\"compute_ns\":2000000000}";
        let old: FrameRecord = serde_json::from_str(old).unwrap();
        assert_eq!((old.start(), old.end(), old.cost()), (8.0, 10.0, None));
        assert_eq!((old.t_ns, old.idle_ns, old.sent_s), (None, 0, None));
        // a line without the frame's sequence number is not a frame record
        let line = "{\"role\":0,\"rows\":1,\"epoch_s\":10.0,\"compute_ns\":2}";
        assert!(serde_json::from_str::<FrameRecord>(line).is_err());
        let r = ReplyRecord {
            seq: 1,
            slot: 0,
            pos: 4,
            epoch_s: 2.0,
            t_ns: 5,
            outcome: ReplyOutcome::Accepted,
        };
        let line = serde_json::to_string(&r).unwrap();
        assert!(line.ends_with("\"outcome\":\"accepted\"}"), "{line}");
        assert_eq!(serde_json::from_str::<ReplyRecord>(&line).unwrap(), r);
    }
}
