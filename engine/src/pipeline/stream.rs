//! One admitted request at role 0 (ARCHITECTURE.md §3.2–3.3): how much of its prompt is sent, the
//! tokens confirmed so far, and its sampled rows in flight, oldest first: the last prompt row or
//! one decode row, and behind it, while the stream is alone, rows whose inputs were proposed.
//!
//! Verification is one rule: when the reply to the front row arrives, its token is emitted (it
//! came from the model, as every emitted token does), and the next row in flight, whose input was
//! a proposal for exactly that token, is checked against it. A match keeps that row's work; a
//! mismatch discards it and every row behind it, and every role must rewind the stream to that
//! row's position before the model's token is fed there. Pure bookkeeping: the scheduler sends.
//!
//! A stream survives a lost chain (`resume`): what it has emitted stays emitted, and its rows are
//! sent again from position 0 as a prefill of the prompt and every emitted token but the last,
//! none of them sampled; the last emitted token then goes in as the next decode row, as it would
//! have without the loss. A row gives the same bits alone or batched, and a seeded draw is a
//! function of seed and position, so the tokens after the replay are those of an uninterrupted
//! run.

use std::collections::VecDeque;

use super::events::{GenEvent, GenRequest, SpecSummary};
use crate::spec::ProposerKind;

/// A sampled row in flight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InFlight {
    /// The frame it travels in.
    pub seq: u64,
    pub pos: usize,
    /// The token fed at `pos`.
    pub input: u32,
    /// Who proposed the input (None: a confirmed input).
    pub proposer: Option<ProposerKind>,
}

/// What verifying a reply decided (for the counters and the scheduler).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verified {
    /// A draft (a run of proposals verified one after another) began with this proposer's token.
    pub draft: Option<ProposerKind>,
    /// The next row's proposed input was the model's token.
    pub accepted: Option<ProposerKind>,
    /// ... in the draft this proposer began.
    pub accepted_in_draft_of: Option<ProposerKind>,
    /// It was not: rewind to `pos`; the rows of frames `discarded` no longer count.
    pub rejected: Option<Rejected>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    pub proposer: ProposerKind,
    pub pos: usize,
    pub discarded: Vec<u64>,
}

pub struct Stream {
    pub req: GenRequest,
    /// Prefill rows sent (of the `prefill_to` first positions).
    pub sent: usize,
    /// Positions the prefill covers: the prompt, or after a replay (`resume`) the prompt and
    /// every emitted token but the last.
    prefill_to: usize,
    /// Times this stream was replayed after a lost chain.
    pub replays: usize,
    /// Held with a replay to count once the chain is back (`resume`; the scheduler counts it).
    pub replay_pending: bool,
    /// Tokens emitted, all from the model's replies.
    pub generated: Vec<u32>,
    /// Sampled rows in flight, oldest first, at consecutive positions.
    pub chain: VecDeque<InFlight>,
    /// Rows of this stream in flight (sampled or not, discarded or not).
    pub rows_inflight: usize,
    /// Finished or cancelled: schedule nothing more; free once nothing is in flight.
    pub closing: bool,
    /// Rows sent with `FLAG_CAPTURE`.
    pub capture_rows: usize,
    /// A capturing stream's `Done`, held until the last role reports its file.
    pub done: Option<GenEvent>,
    pub spec: SpecSummary,
    /// The last role's draft head runs on this stream's rows (it was admitted alone).
    pub drafted: bool,
    /// The frame and position of the newest row whose token was emitted (the draft head's
    /// drafts after it are the ones conditioned on the stream's true inputs).
    pub last_reply: Option<(u64, usize)>,
    /// The proposer whose token began the draft being verified.
    run: Option<ProposerKind>,
}

impl Stream {
    pub fn new(req: GenRequest) -> Self {
        Stream {
            sent: 0,
            prefill_to: req.prompt.len(),
            replays: 0,
            replay_pending: false,
            req,
            generated: Vec::new(),
            chain: VecDeque::new(),
            rows_inflight: 0,
            closing: false,
            capture_rows: 0,
            done: None,
            spec: SpecSummary::default(),
            drafted: false,
            last_reply: None,
            run: None,
        }
    }

    pub fn plen(&self) -> usize {
        self.req.prompt.len()
    }

    /// Positions the prefill covers (the prompt's, or more after a replay).
    pub fn prefill_to(&self) -> usize {
        self.prefill_to
    }

    /// The prefill positions to send in the next window of at most `window` rows.
    pub fn next_prefill(&self, window: usize) -> Option<std::ops::Range<usize>> {
        (!self.closing && self.sent < self.prefill_to)
            .then(|| self.sent..self.prefill_to.min(self.sent + window))
    }

    /// The input at prefill position `pos`: the prompt's token, or past it an emitted one.
    pub fn input_at(&self, pos: usize) -> u32 {
        match pos.checked_sub(self.plen()) {
            None => self.req.prompt[pos],
            Some(k) => self.generated[k],
        }
    }

    /// Whether the prefill row at `pos` samples: the prompt's last row, unless its token was
    /// already emitted (a replay).
    pub fn samples_at(&self, pos: usize) -> bool {
        pos + 1 == self.plen() && self.generated.is_empty()
    }

    /// The chain was lost with every row in flight: send everything again from position 0 (see
    /// the module header). Returns the rows the replay will send before the next sampled one. A
    /// loss before the stream sent anything since its last replay (a relinked chain that broke
    /// again at once) does not count as a replay.
    pub fn resume(&mut self) -> usize {
        if self.sent > 0 {
            self.replays += 1;
            self.replay_pending = true;
        }
        self.sent = 0;
        self.prefill_to = self.plen() + self.generated.len().saturating_sub(1);
        self.chain.clear();
        self.rows_inflight = 0;
        self.last_reply = None;
        self.run = None;
        self.prefill_to
    }

    /// The confirmed decode row due now: (position, input), when nothing is in flight and the
    /// prefill is all sent.
    pub fn next_decode(&self) -> Option<(usize, u32)> {
        let g = self.generated.len();
        if self.closing
            || !self.chain.is_empty()
            || g == 0
            || g >= self.req.max_tokens
            || self.sent < self.prefill_to
        {
            return None;
        }
        Some((self.plen() + g - 1, self.generated[g - 1]))
    }

    /// Where the next proposal would go, if one may: the prompt is all sent, a sampled row is in
    /// flight to anchor it, fewer than `depth` are, and its row would still produce a wanted token
    /// within the context `budget`.
    pub fn next_proposal(&self, depth: usize, budget: usize) -> Option<usize> {
        let tail = self.chain.back()?;
        let pos = tail.pos + 1;
        // the row at position p produces generated token p − P + 1 (1-based)
        let last_wanted = (self.plen() + self.req.max_tokens).checked_sub(2)?;
        (!self.closing
            && !self.req.capture
            && self.sent >= self.prefill_to
            && self.chain.len() < depth
            && pos <= last_wanted
            && pos < budget)
            .then_some(pos)
    }

    /// The proposers' context: the prompt, the confirmed tokens, then the inputs in flight beyond
    /// them, i.e. every token up to the chain's last position.
    pub fn context(&self) -> Vec<u32> {
        let mut ctx = self.req.prompt.clone();
        ctx.extend_from_slice(&self.generated);
        for r in &self.chain {
            if r.pos == ctx.len() {
                ctx.push(r.input);
            }
        }
        ctx
    }

    /// The model's `token` for the front row (frame `seq`): emit it and verify the next row.
    pub fn reply(&mut self, seq: u64, token: u32) -> Result<Verified, String> {
        match self.chain.front() {
            Some(f) if f.seq == seq => {}
            other => {
                return Err(format!(
                    "a reply of frame {seq} for slot rows {other:?}: replies out of order"
                ))
            }
        }
        if let Some(f) = self.chain.pop_front() {
            self.last_reply = Some((seq, f.pos));
        }
        self.generated.push(token);
        let mut v = Verified::default();
        if self.req.stop_token == Some(token) {
            return Ok(v); // the stream ends here: what is behind is discarded, not verified
        }
        let Some(next) = self.chain.front() else {
            self.run = None;
            return Ok(v);
        };
        let Some(p) = next.proposer else {
            return Err(format!(
                "slot row at position {} behind the front has a confirmed input",
                next.pos
            ));
        };
        if self.run.is_none() {
            self.run = Some(p);
            self.spec.drafts += 1;
            v.draft = Some(p);
        }
        if next.input == token {
            self.spec.accepted += 1;
            v.accepted = Some(p);
            v.accepted_in_draft_of = self.run;
        } else {
            let pos = next.pos;
            let discarded = self.chain.drain(..).map(|r| r.seq).collect();
            self.spec.rewinds += 1;
            self.run = None;
            v.rejected = Some(Rejected {
                proposer: p,
                pos,
                discarded,
            });
        }
        Ok(v)
    }

    /// The stream finished: the rows still in flight are discarded (their frames returned).
    pub fn discard_chain(&mut self) -> Vec<u64> {
        self.run = None;
        self.chain.drain(..).map(|r| r.seq).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(prompt: Vec<u32>, max_tokens: usize) -> Stream {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        Stream::new(GenRequest {
            prompt,
            max_tokens,
            stop_token: None,
            capture: false,
            sampling: crate::sampling::Sampling::GREEDY,
            events: tx,
        })
    }

    fn row(seq: u64, pos: usize, input: u32, p: Option<ProposerKind>) -> InFlight {
        InFlight {
            seq,
            pos,
            input,
            proposer: p,
        }
    }

    const S: Option<ProposerKind> = Some(ProposerKind::Suffix);

    #[test]
    fn accepts_rejects_and_counts_drafts() {
        let mut s = stream(vec![1, 2, 3], 10);
        s.sent = 3;
        // the last prompt row (input 3 at position 2), then proposals 7 and 8 for positions 3, 4
        s.chain.push_back(row(0, 2, 3, None));
        assert_eq!(s.next_proposal(4, 100), Some(3));
        s.chain.push_back(row(1, 3, 7, S));
        s.chain.push_back(row(2, 4, 8, S));
        assert_eq!(s.context(), vec![1, 2, 3, 7, 8]);
        // the model emits 7: the proposal at 3 is accepted, and a draft begins
        let v = s.reply(0, 7).unwrap();
        assert_eq!((v.draft, v.accepted, v.rejected), (S, S, None));
        // the model emits 9 where 8 was proposed: rejected, rewind to 4
        let v = s.reply(1, 9).unwrap();
        let r = v.rejected.unwrap();
        assert_eq!((r.pos, r.discarded), (4, vec![2]));
        assert_eq!(s.generated, vec![7, 9]);
        assert_eq!(
            s.spec,
            SpecSummary {
                proposed: 0,
                accepted: 1,
                rewinds: 1,
                drafts: 1
            }
        );
        // the model's token goes in at 4 next, as a confirmed row
        assert_eq!(s.next_decode(), Some((4, 9)));
        assert!(s.reply(5, 1).is_err(), "a reply for no row in flight");
    }

    #[test]
    fn a_resumed_stream_replays_its_prompt_and_tokens_then_decodes_where_it_stopped() {
        let mut s = stream(vec![1, 2, 3], 10);
        // before its first token: the replay is the prompt again, its last row sampling
        s.sent = 3;
        s.chain.push_back(row(0, 2, 3, None));
        s.rows_inflight = 1;
        assert_eq!(s.resume(), 3);
        assert_eq!((s.sent, s.rows_inflight, s.chain.len()), (0, 0, 0));
        assert_eq!(s.next_prefill(8), Some(0..3));
        assert!(s.samples_at(2));
        // three tokens emitted, the row for the fourth in flight, when the chain is lost
        s.sent = 3;
        s.generated = vec![7, 8, 9];
        s.chain.push_back(row(5, 5, 9, None));
        s.rows_inflight = 1;
        assert_eq!(
            s.resume(),
            5,
            "the prompt and every emitted token but the last"
        );
        assert_eq!(s.replays, 2);
        assert_eq!(s.resume(), 5, "lost again before the replay sent a row");
        assert_eq!(s.replays, 2, "which is not a replay");
        assert_eq!(
            s.next_decode(),
            None,
            "nothing is decoded before the prefill is sent"
        );
        assert_eq!(s.next_prefill(4), Some(0..4));
        let inputs: Vec<u32> = (0..5).map(|p| s.input_at(p)).collect();
        assert_eq!(inputs, vec![1, 2, 3, 7, 8]);
        assert!(
            (0..5).all(|p| !s.samples_at(p)),
            "no replayed row samples: its token was emitted"
        );
        s.sent = 4;
        assert_eq!(s.next_prefill(4), Some(4..5));
        assert_eq!(s.next_proposal(4, 100), None);
        s.sent = 5;
        assert_eq!(s.next_prefill(4), None);
        // the last emitted token goes in where it would have without the loss
        assert_eq!(s.next_decode(), Some((5, 9)));
        assert_eq!(s.generated, vec![7, 8, 9], "nothing emitted twice");
    }

    #[test]
    fn proposals_stop_at_depth_the_last_wanted_token_and_capture() {
        let mut s = stream(vec![1, 2], 3);
        s.sent = 2;
        s.chain.push_back(row(0, 1, 2, None));
        // three tokens are produced by rows at positions 1, 2 and 3
        assert_eq!(s.next_proposal(8, 100), Some(2));
        s.chain.push_back(row(1, 2, 5, S));
        s.chain.push_back(row(2, 3, 6, S));
        assert_eq!(s.next_proposal(8, 100), None, "past the last wanted token");
        s.chain.pop_back();
        assert_eq!(s.next_proposal(2, 100), None, "at depth");
        assert_eq!(s.next_proposal(8, 3), None, "past the budget");
        s.req.capture = true;
        assert_eq!(
            s.next_proposal(8, 100),
            None,
            "capturing streams do not speculate"
        );
    }
}
