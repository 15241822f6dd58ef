//! Frame plans: what a group (`plan_group`, `prefill_turn` under reference admission) may send
//! now, and where a proposal for the lone stream would go (`proposal_target`). Planning reads the
//! slots and changes nothing; asking the proposers for the guess (`propose`) is the one step here
//! that changes state (theirs), and runs only once a target is planned.

use super::{Admission, FramePlan, Scheduler, REFERENCE_ROWS};
use crate::pipeline::wire::{RowHeader, FLAG_CAPTURE, FLAG_DRAFT, FLAG_SAMPLE};

impl Scheduler {
    /// The rows group g can send now: each stream's next prefill window or its confirmed decode
    /// row. Changes nothing.
    pub fn plan_group(&self, g: usize) -> Option<FramePlan> {
        let (window, turn) = match self.cfg.admission {
            Admission::Windowed => (self.cfg.window, None),
            Admission::Reference => (REFERENCE_ROWS, self.prefill_turn()),
        };
        let mut rows = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            if s.group != g {
                continue;
            }
            let Some(st) = s.stream.as_ref() else {
                continue;
            };
            // the flags every row of the stream carries
            let flags = if st.req.capture { FLAG_CAPTURE } else { 0 }
                | if st.drafted { FLAG_DRAFT } else { 0 };
            if let Some(window) = st.next_prefill(window) {
                if turn.is_some_and(|t| t != i) {
                    continue; // reference admission: another prompt has the pipeline
                }
                for pos in window {
                    rows.push(RowHeader {
                        slot: i as u32,
                        pos: pos as u32,
                        token: st.input_at(pos),
                        flags: flags | if st.samples_at(pos) { FLAG_SAMPLE } else { 0 },
                    });
                }
            } else if let Some((pos, token)) = st.next_decode() {
                rows.push(RowHeader {
                    slot: i as u32,
                    pos: pos as u32,
                    token,
                    flags: flags | FLAG_SAMPLE,
                });
            }
        }
        (!rows.is_empty()).then_some(FramePlan {
            group: g,
            rows,
            proposal: None,
        })
    }

    /// Under reference admission, the slot whose prompt may be sent: the earliest admitted stream
    /// that has not yet returned its first token (or, replayed after a lost chain, not yet sent its
    /// prefill again).
    fn prefill_turn(&self) -> Option<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                s.stream.as_ref().is_some_and(|st| {
                    !st.closing && (st.generated.is_empty() || st.sent < st.prefill_to())
                })
            })
            .min_by_key(|(_, s)| s.admitted)
            .map(|(i, _)| i)
    }

    /// Where a proposal would go (pure: reads the slots, asks no proposer): the lone active
    /// stream's next proposal position, when speculation is on, nothing else is active or waiting,
    /// and the stream has room for one more row in flight.
    pub(super) fn proposal_target(&self) -> Option<ProposalTarget> {
        if !self.speculating() || !self.queue.is_empty() {
            return None;
        }
        let mut active = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.stream.is_some());
        let (i, slot) = active.next()?;
        if active.next().is_some() {
            return None;
        }
        let st = slot.stream.as_ref()?;
        let pos = st.next_proposal(self.cfg.spec_depth, self.cfg.budget)?;
        let context = st.context();
        debug_assert_eq!(context.len(), pos);
        Some(ProposalTarget {
            slot: i as u32,
            group: slot.group,
            drafted: st.drafted,
            context,
        })
    }

    /// Ask the proposers for `t`'s next input: the one-row frame to launch when one has a guess.
    /// A draft model that fails is dropped (speculation goes on without it).
    pub(super) fn propose(&mut self, t: ProposalTarget) -> Option<FramePlan> {
        match self.proposers.propose(t.slot, &t.context) {
            Ok(Some((token, kind))) => Some(FramePlan {
                group: t.group,
                rows: vec![RowHeader {
                    slot: t.slot,
                    pos: t.context.len() as u32,
                    token,
                    flags: FLAG_SAMPLE | if t.drafted { FLAG_DRAFT } else { 0 },
                }],
                proposal: Some(kind),
            }),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!("draft proposer failed; speculating without it: {e}");
                self.proposers.draft = None;
                None
            }
        }
    }
}

/// The lone stream a proposal would be made for: its slot and group, whether its rows carry the
/// draft head's flag, and its tokens so far (the proposal's position is their count).
pub(super) struct ProposalTarget {
    slot: u32,
    group: usize,
    drafted: bool,
    context: Vec<u32>,
}
