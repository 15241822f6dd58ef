//! The draft-model proposer: a small model sharing the tokenizer (another preset, or an export)
//! runs on role 0's CPU beside the scheduler and proposes its own greedy next token. It keeps a
//! stream state per slot, fed with the stream's context as it grows; when the context changes
//! under it (a rejected proposal was rewound), it truncates to the common prefix (within the
//! rewind slack) or starts the stream over.

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::model::{argmax, Model, Segment, StreamState};

/// Rows fed per forward call.
const WINDOW: usize = 8;

struct DraftStream {
    state: StreamState,
    /// Tokens fed so far (the state's positions).
    fed: Vec<u32>,
    /// The draft's next token after `fed`, when known.
    next: Option<u32>,
}

pub struct DraftModel {
    model: Model,
    budget: usize,
    streams: HashMap<u32, DraftStream>,
}

impl DraftModel {
    /// A draft over `model`, for the vocabulary of the served model (`vocab`): they must agree.
    pub fn new(model: Model, vocab: usize, budget: usize) -> Result<Self> {
        let c = model.config();
        if c.vocab_size != vocab {
            return Err(Error::Config(format!(
                "the draft model {} has a vocabulary of {}, the served model {vocab}",
                c.name, c.vocab_size
            )));
        }
        if model.weights.layer_start != 0 || model.weights.layer_end != c.n_layers {
            return Err(Error::Config(
                "the draft model must be a whole model".into(),
            ));
        }
        Ok(DraftModel {
            model,
            budget,
            streams: HashMap::new(),
        })
    }

    pub fn name(&self) -> &str {
        &self.model.config().name
    }

    /// The draft's greedy next token after `ctx` for the stream in `slot`.
    pub fn propose(&mut self, slot: u32, ctx: &[u32]) -> Result<Option<u32>> {
        if ctx.is_empty() || ctx.len() >= self.budget {
            return Ok(None);
        }
        let slack = self.model.config().rewind_slack;
        let model = &self.model;
        let budget = self.budget;
        let s = self.streams.entry(slot).or_insert_with(|| DraftStream {
            state: model.new_stream(budget),
            fed: Vec::new(),
            next: None,
        });
        let mut common = s.fed.iter().zip(ctx).take_while(|(a, b)| a == b).count();
        if common < s.fed.len() && common == ctx.len() {
            // the logits after ctx's last token are gone with what followed it: feed it again
            common -= 1;
        }
        if common < s.fed.len() {
            if s.fed.len() - common <= slack && common > 0 {
                s.state.truncate(common)?;
            } else {
                s.state.reset();
                s.fed.clear();
            }
            s.fed.truncate(common.min(s.fed.len()));
            s.next = None;
        }
        let start = s.fed.len();
        if start == ctx.len() {
            return Ok(s.next);
        }
        let h = model.config().hidden;
        let mut last = Vec::new();
        for chunk in ctx[start..].chunks(WINDOW) {
            let mut x = vec![0.0f32; chunk.len() * h];
            model.embed(chunk, &mut x)?;
            model.forward(
                &mut [Segment {
                    state: &mut s.state,
                    rows: chunk.len(),
                }],
                &mut x,
            )?;
            last = x[(chunk.len() - 1) * h..].to_vec();
        }
        s.fed.extend_from_slice(&ctx[start..]);
        s.next = Some(argmax(&model.logits(&last)?));
        Ok(s.next)
    }

    /// The stream in `slot` ended.
    pub fn forget(&mut self, slot: u32) {
        self.streams.remove(&slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{generate, ForwardOptions, ModelConfig, SynthSpec};

    #[test]
    fn proposes_its_own_greedy_continuation_across_rewinds() {
        let c = ModelConfig::preset("inkling-nano").unwrap();
        let m = || {
            Model::new(
                generate(&SynthSpec::whole(c.clone(), 3)).unwrap(),
                ForwardOptions::default(),
            )
        };
        let g = crate::generate::generate(&m(), &[5, 6, 7], 12, 8, None, false).unwrap();
        let mut d = DraftModel::new(m(), c.vocab_size, 256).unwrap();
        let mut ctx = vec![5, 6, 7];
        for &t in &g.tokens[..6] {
            assert_eq!(d.propose(1, &ctx).unwrap(), Some(t));
            ctx.push(t);
        }
        // a wrong token fed, then rewound: the draft follows the context it is given
        let mut bad = ctx.clone();
        bad.push(g.tokens[6] + 1);
        d.propose(1, &bad).unwrap();
        assert_eq!(d.propose(1, &ctx).unwrap(), Some(g.tokens[6]));
        assert!(DraftModel::new(m(), 100, 256).is_err());
    }
}
