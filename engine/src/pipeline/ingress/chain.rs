//! Ending things: every stream at once (`end_all`), the fleet for good (`fail`), the chain until
//! the supervisor links it again (`lose`, `recovered`), the server (`shutdown`), and one slot
//! (`reap`, `free_slot`).

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

    /// The chain broke (`role` named when known): requests in flight end with the message, every
    /// stream is forgotten (the other roles forget theirs as their links close), and the
    /// supervisor links the chain again. Without a supervisor this is `fail`.
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
        self.end_all(&message);
        for i in 0..self.slots.len() {
            self.proposers.forget(i as u32);
        }
        self.engine.reset_all();
        self.group_members.fill(0);
        self.inflight.clear();
        self.discarded.clear();
        if let Downstream::Link(w) = &self.down {
            w.close();
        }
        self.down = Downstream::Down;
        if tx.send(Recovery::Lost { role, message }).is_err() {
            self.fail("role 0: the chain's supervisor has stopped".into());
        }
    }

    /// The relinked chain answered the readiness probe.
    pub(super) fn recovered(&mut self) {
        self.recovering = false;
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
