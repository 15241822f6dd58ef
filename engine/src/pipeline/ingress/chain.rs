//! Ending things: every stream at once (`end_all`), the fleet for good (`fail`), the chain until
//! the supervisor links it again (`lose`, with the streams in flight held for replay, `hold`,
//! `expire_held`, `recovered`), the server (`shutdown`), and one slot (`reap`, `free_slot`).

use super::{Downstream, Scheduler};
use crate::pipeline::events::GenEvent;
use crate::pipeline::recovery::Recovery;
use crate::pipeline::wire::Message;

impl Scheduler {
    /// Every stream, queued request and capture wait ends with `message`.
    fn end_all(&mut self, message: &str) {
        for (i, s) in self.slots.iter_mut().enumerate() {
            if let Some(st) = s.stream.take() {
                self.proposers.forget(i as u32);
                let _ = st.req.events.send(GenEvent::Error(message.to_string()));
                self.stats.stream_ended();
            }
        }
        for r in self.queue.drain(..) {
            let _ = r.events.send(GenEvent::Error(message.to_string()));
            self.stats.unreserve();
        }
        self.captures.end_all(message);
        self.stats.all_ended();
    }

    /// The fleet is broken for good: every request ends with the message; nothing more is
    /// admitted.
    pub(super) fn fail(&mut self, message: String) {
        if self.failed.is_some() {
            return;
        }
        tracing::error!("{message}");
        self.failed = Some(message.clone());
        self.readiness.lost();
        self.stats.failed(&message);
        self.end_all(&message);
    }

    /// The chain broke (`role` named when known): the streams in flight are held for replay
    /// (`hold`), queued requests wait, role 0 forgets its own state (the other roles forget theirs
    /// as their links close, or restart), and the supervisor links the chain again. Without a
    /// supervisor this is `fail`.
    pub(super) fn lose(&mut self, role: Option<usize>, message: String) {
        // once the chain is down, later reports are echoes of the same break; a relinked chain
        // that breaks while it is probed is a new loss
        if self.failed.is_some() || matches!(self.down, Downstream::Down) {
            return;
        }
        let Some(tx) = self.recovery.clone() else {
            return self.fail(message);
        };
        tracing::error!("{message}");
        self.recovering = true;
        self.readiness.lost();
        self.stats.lost(&message);
        self.seq_floor = self.next_seq;
        for i in 0..self.slots.len() {
            self.proposers.forget(i as u32);
        }
        self.engine.reset_all();
        self.inflight.clear();
        self.discarded.clear();
        self.hold(&message);
        self.captures.end_all(&message);
        if let Downstream::Link(w) = &self.down {
            w.close();
        }
        self.down = Downstream::Down;
        if self.lost.is_none() {
            self.lost = Some((std::time::Instant::now(), message.clone()));
        }
        if tx.send(Recovery::Lost { role, message }).is_err() {
            self.fail("role 0: the chain's supervisor has stopped".into());
        }
    }

    /// At a lost chain, every stream in flight is held to be replayed (`Stream::resume`) unless it
    /// captures (its file was being written by the last role), has used its replays
    /// (`--stream-replays`) or its client has gone: those end with `message`. A stream that had
    /// finished and waited only for its rows to come back is freed.
    fn hold(&mut self, message: &str) {
        self.group_members.fill(0);
        for i in 0..self.slots.len() {
            let Some(st) = self.slots[i].stream.as_mut() else {
                continue;
            };
            if st.closing && st.done.is_none() {
                // its client has its last token (or has gone)
                self.slots[i].stream = None;
                self.stats.slot_freed();
                continue;
            }
            // a stream that has sent nothing since its last replay loses nothing more
            let replays = st.replays + usize::from(st.sent > 0);
            let held = !st.closing
                && !st.req.capture
                && replays <= self.cfg.stream_replays
                && !st.req.events.is_closed();
            if held {
                st.resume();
                self.group_members[self.slots[i].group] += 1;
            } else if let Some(st) = self.slots[i].stream.take() {
                let _ = st.req.events.send(GenEvent::Error(message.to_string()));
                self.stats.stream_lost();
            }
        }
    }

    /// Held streams end with the loss's error once the chain has not come back within the
    /// deadline (`--resume-deadline-s`); the fleet goes on recovering for the requests after them.
    pub(super) fn expire_held(&mut self, now: std::time::Instant) {
        let Some((at, message)) = &self.lost else {
            return;
        };
        if !self.recovering || now.duration_since(*at) < self.cfg.resume_deadline {
            return;
        }
        let message = format!(
            "{message}; the chain did not come back within {:?} (--resume-deadline-s)",
            self.cfg.resume_deadline
        );
        for i in 0..self.slots.len() {
            if let Some(st) = self.slots[i].stream.take() {
                let _ = st.req.events.send(GenEvent::Error(message.clone()));
                self.group_members[self.slots[i].group] -= 1;
                self.stats.stream_lost();
            }
        }
        self.lost = None;
    }

    /// The relinked chain answered the readiness probe: the held streams' seeded sampling goes to
    /// the last role again, ahead of their replays, and their replays are counted. A send that
    /// loses the chain again ends this: it is a new loss, not a recovery.
    pub(super) fn recovered(&mut self) {
        self.recovering = false;
        let lost_at = self.lost.take();
        for i in 0..self.slots.len() {
            let Some(sampling) = self.slots[i].stream.as_ref().map(|s| s.req.sampling) else {
                continue;
            };
            if !sampling.is_greedy() {
                self.send(Message::Sampling {
                    slot: i as u32,
                    sampling,
                });
                if self.recovering {
                    return;
                }
            }
        }
        if let Some((at, _)) = lost_at {
            tracing::warn!(
                "chain back {:.3} s after the loss; replaying the streams held",
                at.elapsed().as_secs_f64()
            );
        }
        for s in self.slots.iter_mut().filter_map(|s| s.stream.as_mut()) {
            if std::mem::take(&mut s.replay_pending) {
                self.stats.stream_resumed(s.prefill_to());
            }
        }
        self.stats.recovered();
        if let Some(tx) = &self.recovery {
            let _ = tx.send(Recovery::Ready);
        }
    }

    pub(super) fn shutdown(&mut self) {
        self.log.flush();
        self.replies.flush();
        if self.cfg.phrase_file.is_some() && self.proposers.phrases.is_some() {
            match self.save_phrases() {
                Ok(what) => tracing::info!("phrase table saved to {what}"),
                Err(e) => tracing::error!("phrase table not saved: {e}"),
            }
        }
        if self.failed.is_none() {
            self.send(Message::Shutdown);
        }
        self.end_all("the server is shutting down");
        self.readiness.lost();
        self.stats.stopping();
    }

    /// Mark requests whose client went away; free slots with nothing in flight.
    pub(super) fn reap(&mut self) {
        for i in 0..self.slots.len() {
            let free = match &mut self.slots[i].stream {
                Some(s) => {
                    if s.req.events.is_closed() {
                        s.closing = true;
                    }
                    s.closing && s.rows_inflight == 0
                }
                None => false,
            };
            if free {
                self.free_slot(i);
            }
        }
        let stats = &self.stats;
        self.queue.retain(|r| {
            let keep = !r.events.is_closed();
            if !keep {
                stats.unreserve();
            }
            keep
        });
    }

    pub(super) fn free_slot(&mut self, i: usize) {
        if let Some(s) = self.slots[i].stream.take() {
            if s.capture_rows > 0 {
                // the Reset below closes the capture; its report answers this wait
                self.captures.expect(i, s.req.events, s.done);
            }
            let g = self.slots[i].group;
            self.group_members[g] -= 1;
            self.proposers.forget(i as u32);
            self.engine.reset(i as u32);
            self.send(Message::Reset { slot: i as u32 });
            self.stats.slot_freed();
        }
    }
}
