//! Replies from the last role: `tokens` takes each row's token through `verify` (what the reply
//! means for its stream) and `apply` (the client's event, `rewind` on a rejected proposal,
//! `finish` at the stream's end), then frees the finished slots; `drafts` keeps the draft head's
//! guesses, and `account` and `count_proposals` keep the speculation counters.

use super::Scheduler;
use crate::pipeline::events::{FinishReason, GenEvent};
use crate::pipeline::role::{epoch_s, ReplyOutcome, ReplyRecord};
use crate::pipeline::stats::SpecCounter;
use crate::pipeline::stream::{Rejected, Verified};
use crate::pipeline::wire::{Message, TokenItem, NO_TOKEN};

impl Scheduler {
    /// Token replies of frame `seq` from the last role: each row's reply is verified against its
    /// stream (`verify`, which decides), then applied (`apply`: the client's event, a rewind, the
    /// stream's end), then the slots whose streams ended and whose rows are all back are freed.
    pub(super) fn tokens(&mut self, seq: u64, items: &[TokenItem]) {
        self.inflight.remove(&seq);
        for it in items {
            // sent over links that have since broken (or an item before this one lost the chain,
            // by a rewind's send)
            if seq < self.seq_floor {
                return;
            }
            match self.verify(seq, it) {
                Ok(Some(v)) => {
                    if !self.apply(it, v) {
                        return;
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    self.fail(format!("role 0 failed: slot {}: {e}", it.slot));
                    return;
                }
            }
        }
        // free finished slots at once (their rows are all back)
        for it in items {
            let i = it.slot as usize;
            if self
                .slots
                .get(i)
                .and_then(|s| s.stream.as_ref())
                .is_some_and(|s| s.closing && s.rows_inflight == 0)
            {
                self.free_slot(i);
            }
        }
    }

    /// One row's reply against its stream: the row is no longer in flight, its reply is recorded,
    /// and unless the row was discarded (or the stream is ending, or the row sampled nothing) the
    /// stream takes the token (`Stream::reply`, which verifies the proposal behind it). What that
    /// asks of the scheduler, or None when nothing.
    fn verify(&mut self, seq: u64, it: &TokenItem) -> Result<Option<Verified>, String> {
        let Some(st) = self
            .slots
            .get_mut(it.slot as usize)
            .and_then(|s| s.stream.as_mut())
        else {
            return Ok(None);
        };
        st.rows_inflight = st.rows_inflight.saturating_sub(1);
        if it.token == NO_TOKEN {
            return Ok(None);
        }
        let dropped = self.discarded.remove(&(seq, it.slot)) || st.closing;
        if self.replies.is_on() {
            let outcome = match (dropped, st.chain.front().map(|r| r.proposer)) {
                (true, _) => ReplyOutcome::Discarded,
                (false, Some(Some(_))) => ReplyOutcome::Accepted,
                _ => ReplyOutcome::Confirmed,
            };
            self.replies.append(&ReplyRecord {
                seq,
                slot: it.slot,
                pos: it.pos,
                epoch_s: epoch_s(),
                t_ns: self.t_start.elapsed().as_nanos() as u64,
                outcome,
            });
        }
        if dropped {
            return Ok(None);
        }
        st.reply(seq, it.token).map(Some)
    }

    /// Apply a verified reply: count it, send the client its token, rewind every role past a
    /// rejected proposal, and end the stream at its stop token or length. False when the fleet
    /// failed meanwhile (nothing more of this frame is applied).
    fn apply(&mut self, it: &TokenItem, v: Verified) -> bool {
        self.account(&v);
        let i = it.slot as usize;
        let Some(st) = self.slots[i].stream.as_mut() else {
            return true;
        };
        self.stats.token_delivered();
        let sent = st.req.events.send(GenEvent::Token {
            id: it.token,
            logit: it.logit,
            hash: it.hash,
        });
        if let Some(r) = v.rejected {
            if !self.rewind(it.slot, r) {
                return false;
            }
        }
        let Some(st) = self.slots[i].stream.as_mut() else {
            return true;
        };
        let reason = if st.req.stop_token == Some(it.token) {
            Some(FinishReason::Stop)
        } else if st.generated.len() >= st.req.max_tokens {
            Some(FinishReason::Length)
        } else {
            None
        };
        match reason {
            Some(reason) => self.finish(i, reason),
            None if sent.is_err() => st.closing = true, // the client went away
            None => {}
        }
        true
    }

    /// A rejected proposal: the rows behind it no longer count, and every role undoes them (behind
    /// them on every link) before the model's token is fed at their position. False when that
    /// failed the fleet.
    fn rewind(&mut self, slot: u32, r: Rejected) -> bool {
        for s in r.discarded {
            self.discarded.insert((s, slot));
        }
        if let Err(e) = self.engine.truncate(slot, r.pos as u32) {
            self.fail(format!("role 0 failed: {e}"));
            return false;
        }
        self.send(Message::Rewind {
            slot,
            pos: r.pos as u32,
        });
        true
    }

    /// Slot `i`'s stream ended for `reason`: its rows still in flight no longer count, the client
    /// gets `Done` (once the last role reports the capture file, when the stream captures), the
    /// proposers learn the whole sequence, and the slot is freed once its rows are back.
    fn finish(&mut self, i: usize, reason: FinishReason) {
        let speculating = self.stats.speculating();
        let Some(st) = self.slots[i].stream.as_mut() else {
            return;
        };
        for s in st.discard_chain() {
            self.discarded.insert((s, i as u32));
        }
        let done = GenEvent::Done {
            reason,
            prompt_tokens: st.plen(),
            completion_tokens: st.generated.len(),
            capture: None,
            speculation: speculating.then(|| st.spec.clone()),
        };
        if st.capture_rows > 0 {
            st.done = Some(done); // sent with the file's path once the last role reports it
        } else {
            let _ = st.req.events.send(done);
        }
        st.closing = true;
        let mut seq_all = st.req.prompt.clone();
        seq_all.extend_from_slice(&st.generated);
        self.proposers.finished(&seq_all);
    }

    /// The draft head's drafts after the row at `pos` of `slot` (frame `seq`): kept when that row's
    /// token was the stream's newest emitted one, i.e. the row was not discarded.
    pub(super) fn drafts(&mut self, seq: u64, slot: u32, pos: usize, tokens: Vec<u32>) {
        let Some(st) = self
            .slots
            .get(slot as usize)
            .and_then(|s| s.stream.as_ref())
        else {
            return;
        };
        if st.closing || st.last_reply != Some((seq, pos)) {
            return;
        }
        if let Some(m) = self.proposers.mtp.as_mut() {
            m.offer(slot, pos, tokens);
        }
    }

    /// The fleet's speculation counters, and the proposers' acceptance gate.
    fn account(&mut self, v: &Verified) {
        if let Some(k) = v.draft {
            self.stats.spec_add(k, SpecCounter::DraftBegun);
        }
        if let Some(k) = v.accepted {
            self.stats.spec_add(k, SpecCounter::Accepted);
            self.proposers.gate.observe(k, true);
        }
        if let Some(k) = v.accepted_in_draft_of {
            self.stats.spec_add(k, SpecCounter::AcceptedInDraft);
        }
        if let Some(r) = &v.rejected {
            self.stats.spec_add(r.proposer, SpecCounter::Rejected);
            self.proposers.gate.observe(r.proposer, false);
        }
    }

    /// Publish the proposals in flight: rows a proposer guessed, sent, and still waiting for the
    /// reply that verifies them, i.e. every row of a stream's chain behind its front (the front is
    /// a confirmed input or a proposal already accepted: `Stream::reply` verifies the row behind
    /// the one it answers). Counted from the chains after every pass of the loop, so the gauge
    /// cannot drift from them.
    pub(super) fn count_proposals(&self) {
        if !self.speculating() {
            return;
        }
        let n = self
            .slots
            .iter()
            .filter_map(|s| s.stream.as_ref())
            .flat_map(|st| st.chain.iter().skip(1))
            .filter(|r| r.proposer.is_some())
            .count();
        self.stats.proposals_in_flight(n);
    }
}
