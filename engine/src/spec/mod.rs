//! Speculative injection (ARCHITECTURE.md §3.3): who proposes the next input of a lone stream.
//! The hybrid proposer asks, in the paper's order, the request-local suffix match, the shared
//! phrase table, and the draft model; the first that has a proposal wins. (`replay` is a proposer
//! for tests that knows the right answers, or deliberately gives wrong ones.) Role 0's scheduler
//! injects, verifies and rewinds (`pipeline::ingress`); nothing here touches the pipeline.
//!
//! - `suffix`: four-token suffix match within the stream's own context.
//! - `phrases`: the shared, persisted, mergeable phrase table.
//! - `draft`: a small model on role 0's CPU.
//! - `replay`: known sequences, right or wrong (tests).

pub mod draft;
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
}

impl ProposerKind {
    pub const ALL: [ProposerKind; 4] = [
        ProposerKind::Suffix,
        ProposerKind::Phrase,
        ProposerKind::Draft,
        ProposerKind::Replay,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ProposerKind::Suffix => "suffix",
            ProposerKind::Phrase => "phrase",
            ProposerKind::Draft => "draft",
            ProposerKind::Replay => "replay",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// The proposers switched on, in the order they are asked.
#[derive(Default)]
pub struct Proposers {
    pub suffix: bool,
    pub phrases: Option<(PhraseTable, PhraseRule)>,
    pub draft: Option<DraftModel>,
    pub replay: Option<ReplayProposer>,
}

impl Proposers {
    pub fn any(&self) -> bool {
        self.suffix || self.phrases.is_some() || self.draft.is_some() || self.replay.is_some()
    }

    /// The next input after `ctx` for the stream in `slot`, and who proposed it.
    pub fn propose(&mut self, slot: u32, ctx: &[u32]) -> Result<Option<(u32, ProposerKind)>> {
        if let Some(r) = &self.replay {
            if let Some(t) = r.propose(ctx) {
                return Ok(Some((t, ProposerKind::Replay)));
            }
        }
        if self.suffix {
            if let Some(t) = suffix::propose(ctx) {
                return Ok(Some((t, ProposerKind::Suffix)));
            }
        }
        if let Some((t, rule)) = &self.phrases {
            if let Some(x) = t.propose(ctx, rule) {
                return Ok(Some((x, ProposerKind::Phrase)));
            }
        }
        if let Some(d) = self.draft.as_mut() {
            if let Some(t) = d.propose(slot, ctx)? {
                return Ok(Some((t, ProposerKind::Draft)));
            }
        }
        Ok(None)
    }

    /// A stream finished: learn from its whole sequence and forget its draft state.
    pub fn finished(&mut self, slot: u32, seq: &[u32]) {
        if let Some((t, _)) = self.phrases.as_mut() {
            t.learn(seq);
        }
        if let Some(d) = self.draft.as_mut() {
            d.forget(slot);
        }
    }
}
