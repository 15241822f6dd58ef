//! Replies from the last role: `tokens` verifies and emits each row's token (rewinding every role
//! on a rejected proposal, finishing streams), `drafts` keeps the draft head's guesses, and
//! `account` and `count_proposals` keep the speculation counters.

use std::sync::atomic::Ordering;

use super::Scheduler;
use crate::pipeline::events::{FinishReason, GenEvent};
use crate::pipeline::role::{epoch_s, ReplyOutcome, ReplyRecord};
use crate::pipeline::stats::SpecCounter;
use crate::pipeline::stream::Verified;
use crate::pipeline::wire::{Message, TokenItem, NO_TOKEN};

impl Scheduler {
    /// Token replies of frame `seq` from the last role.
    pub(super) fn tokens(&mut self, seq: u64, items: &[TokenItem]) {
        self.inflight.remove(&seq);
        for it in items {
            let i = it.slot as usize;
            let Some(st) = self.slots.get_mut(i).and_then(|s| s.stream.as_mut()) else {
                continue;
            };
            st.rows_inflight = st.rows_inflight.saturating_sub(1);
            if it.token == NO_TOKEN {
                continue;
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
                continue;
            }
            let v = match st.reply(seq, it.token) {
                Ok(v) => v,
                Err(e) => {
                    self.fail(format!("role 0 failed: slot {i}: {e}"));
                    return;
                }
            };
            self.account(&v);
            let Some(st) = self.slots[i].stream.as_mut() else {
                continue;
            };
            self.stats.tokens_total.fetch_add(1, Ordering::Relaxed);
            let sent = st.req.events.send(GenEvent::Token {
                id: it.token,
                logit: it.logit,
                hash: it.hash,
            });
            if let Some(r) = v.rejected {
                for s in r.discarded {
                    self.discarded.insert((s, it.slot));
                }
                // every role undoes the rejected rows (behind them on every link) before the
                // model's token is fed at their position
                if let Err(e) = self.engine.truncate(it.slot, r.pos as u32) {
                    self.fail(format!("role 0 failed: {e}"));
                    return;
                }
                self.send(Message::Rewind {
                    slot: it.slot,
                    pos: r.pos as u32,
                });
            }
            let Some(st) = self.slots[i].stream.as_mut() else {
                continue;
            };
            let reason = if st.req.stop_token == Some(it.token) {
                Some(FinishReason::Stop)
            } else if st.generated.len() >= st.req.max_tokens {
                Some(FinishReason::Length)
            } else {
                None
            };
            if let Some(reason) = reason {
                for s in st.discard_chain() {
                    self.discarded.insert((s, it.slot));
                }
                let done = GenEvent::Done {
                    reason,
                    prompt_tokens: st.plen(),
                    completion_tokens: st.generated.len(),
                    capture: None,
                    speculation: self
                        .stats
                        .spec_enabled
                        .load(Ordering::Relaxed)
                        .then(|| st.spec.clone()),
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
            } else if sent.is_err() {
                st.closing = true;
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
        self.stats.spec_in_flight.store(n as u64, Ordering::Relaxed);
    }
}
