//! Speculative injection (ARCHITECTURE.md §3.3): who proposes the next input of a lone stream.
//! The hybrid proposer asks, in the paper's order, the request-local suffix match, the shared
//! phrase table, and the draft model, with the draft head's drafts (which cost role 0 nothing)
//! asked before the draft model; the first that has a proposal wins. (`replay` is a proposer
//! for tests that knows the right answers, or deliberately gives wrong ones.) Role 0's scheduler
//! injects, verifies and rewinds (`pipeline::ingress`); nothing here touches the pipeline.
//!
//! - `suffix`: four-token suffix match within the stream's own context.
//! - `phrases`: the shared, persisted, mergeable phrase table.
//! - `draft`: a small model on role 0's CPU.
//! - `head`: the multi-token-prediction draft head (its weights, modules, export), live in the
//!   last role (`head::live`), and its offline replay over captured sequences (`head::chain`, the
//!   reference the live head is tested against and the draft replay measures with).
//! - `mtp`: the draft head's drafts as role 0's proposer.
//! - `replay`: known sequences, right or wrong (tests).

pub mod draft;
pub mod head;
pub mod mtp;
pub mod phrases;
pub mod replay;
pub mod suffix;

use serde::Serialize;

use crate::error::Result;
use draft::DraftModel;
use phrases::{PhraseRule, PhraseTable};
use replay::ReplayProposer;

/// Who proposed a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProposerKind {
    Suffix,
    Phrase,
    Draft,
    Replay,
    /// The fitted draft head, running in the last role (`spec::mtp`).
    Mtp,
}

/// How many kinds of proposer there are.
pub const N_KINDS: usize = 5;

impl ProposerKind {
    pub const ALL: [ProposerKind; N_KINDS] = [
        ProposerKind::Suffix,
        ProposerKind::Phrase,
        ProposerKind::Draft,
        ProposerKind::Replay,
        ProposerKind::Mtp,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ProposerKind::Suffix => "suffix",
            ProposerKind::Phrase => "phrase",
            ProposerKind::Draft => "draft",
            ProposerKind::Replay => "replay",
            ProposerKind::Mtp => "mtp",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// Asks a proposer only while its proposals are accepted often enough. A rejected proposal is not
/// free: its row, and every row behind it, is computed in every role and then undone, so a
/// proposer that is mostly wrong makes the stream slower than no speculation (measured: docs/RESULTS.md "Speculation").
/// Each proposer's acceptance is an exponential moving average over its verified proposals
/// (weight `EMA_WEIGHT`, starting at `START`); below `min_acceptance` it is benched, and asked
/// again once every `PROBE` positions it would have proposed at, so that it can recover. A position
/// is counted once however often the scheduler asks about it.
#[derive(Clone, Debug)]
pub struct Gate {
    pub min_acceptance: f64,
    ema: [f64; N_KINDS],
    skipped: [u32; N_KINDS],
    /// The last position (slot, context length) each proposer was benched at.
    last: [Option<(u32, usize)>; N_KINDS],
}

/// A proposer's acceptance before any of its proposals was verified: a few rejections bench it.
pub const START: f64 = 0.5;

/// Weight of the newest verification in a proposer's acceptance average.
pub const EMA_WEIGHT: f64 = 0.1;
/// A benched proposer is asked once every `PROBE` times.
pub const PROBE: u32 = 32;

impl Gate {
    pub fn new(min_acceptance: f64) -> Self {
        Gate {
            min_acceptance,
            ema: [START; N_KINDS],
            skipped: [0; N_KINDS],
            last: [None; N_KINDS],
        }
    }

    /// May `k` propose at this position (slot, context length)?
    pub fn allow(&mut self, k: ProposerKind, at: (u32, usize)) -> bool {
        let i = k.index();
        if self.ema[i] >= self.min_acceptance {
            return true;
        }
        if self.last[i] == Some(at) {
            return false; // this position was already counted
        }
        self.last[i] = Some(at);
        self.skipped[i] = self.skipped[i].wrapping_add(1);
        self.skipped[i].is_multiple_of(PROBE)
    }

    /// A proposal of `k` was verified: accepted or not.
    pub fn observe(&mut self, k: ProposerKind, accepted: bool) {
        let i = k.index();
        let x = if accepted { 1.0 } else { 0.0 };
        self.ema[i] = (1.0 - EMA_WEIGHT) * self.ema[i] + EMA_WEIGHT * x;
    }

    pub fn acceptance(&self, k: ProposerKind) -> f64 {
        self.ema[k.index()]
    }
}

impl Default for Gate {
    fn default() -> Self {
        Gate::new(0.0)
    }
}

/// The proposers switched on, in the order they are asked.
#[derive(Default)]
pub struct Proposers {
    pub suffix: bool,
    pub phrases: Option<(PhraseTable, PhraseRule)>,
    pub draft: Option<DraftModel>,
    /// The draft head's newest drafts (None: the head is off).
    pub mtp: Option<mtp::MtpDrafts>,
    pub replay: Option<ReplayProposer>,
    pub gate: Gate,
}

impl Proposers {
    pub fn any(&self) -> bool {
        self.suffix
            || self.phrases.is_some()
            || self.draft.is_some()
            || self.mtp.is_some()
            || self.replay.is_some()
    }

    /// The next input after `ctx` for the stream in `slot`, and who proposed it.
    pub fn propose(&mut self, slot: u32, ctx: &[u32]) -> Result<Option<(u32, ProposerKind)>> {
        let at = (slot, ctx.len());
        if let Some(r) = &self.replay {
            if let Some(t) = r.propose(ctx) {
                if self.gate.allow(ProposerKind::Replay, at) {
                    return Ok(Some((t, ProposerKind::Replay)));
                }
            }
        }
        if self.suffix {
            if let Some(t) = suffix::propose(ctx) {
                if self.gate.allow(ProposerKind::Suffix, at) {
                    return Ok(Some((t, ProposerKind::Suffix)));
                }
            }
        }
        if let Some((t, rule)) = &self.phrases {
            if let Some(x) = t.propose(ctx, rule) {
                if self.gate.allow(ProposerKind::Phrase, at) {
                    return Ok(Some((x, ProposerKind::Phrase)));
                }
            }
        }
        if let Some(t) = self.mtp.as_ref().and_then(|m| m.propose(slot, ctx)) {
            if self.gate.allow(ProposerKind::Mtp, at) {
                return Ok(Some((t, ProposerKind::Mtp)));
            }
        }
        // the draft model is asked only when the gate lets it (it costs a forward pass)
        if self.draft.is_some() && self.gate.allow(ProposerKind::Draft, at) {
            if let Some(t) = self
                .draft
                .as_mut()
                .and_then(|d| d.propose(slot, ctx).transpose())
            {
                return Ok(Some((t?, ProposerKind::Draft)));
            }
        }
        Ok(None)
    }

    /// A stream finished: learn from its whole sequence.
    pub fn finished(&mut self, seq: &[u32]) {
        if let Some((t, _)) = self.phrases.as_mut() {
            t.learn(seq);
        }
    }

    /// The stream in `slot` is gone (finished, cancelled or failed): drop its draft state.
    pub fn forget(&mut self, slot: u32) {
        if let Some(d) = self.draft.as_mut() {
            d.forget(slot);
        }
        if let Some(m) = self.mtp.as_mut() {
            m.forget(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mostly_wrong_proposer_is_benched_and_probed() {
        let mut g = Gate::new(0.3);
        let k = ProposerKind::Draft;
        assert!(g.allow(k, (0, 10)));
        // a few rejections from the start bench it
        let mut n = 0;
        while g.acceptance(k) >= 0.3 {
            g.observe(k, false);
            n += 1;
        }
        assert!(n <= 6, "benched after {n} rejections");
        let allowed = (0..PROBE as usize * 3)
            .filter(|&p| g.allow(k, (0, 100 + p)))
            .count();
        assert_eq!(allowed, 3, "asked once every PROBE positions");
        // asking again about the same position does not count it twice
        let again = (0..PROBE * 3).filter(|_| g.allow(k, (0, 7))).count();
        assert!(again <= 1, "one position counted {again} times");
        for _ in 0..30 {
            g.observe(k, true);
        }
        assert!(g.allow(k, (0, 8)), "a recovered proposer is asked again");
        assert!(
            g.allow(ProposerKind::Suffix, (0, 8)),
            "each proposer has its own average"
        );
    }
}
