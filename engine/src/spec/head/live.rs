//! The fitted draft head, live in the last role (ARCHITECTURE.md §1.7, §3.3): the role has every
//! row's final residual, so after sampling a row it runs the head's first `k` modules there and
//! sends their drafts back with the token (`spec::mtp` proposes them at role 0).
//!
//! Each drafted stream keeps one `MtpState` (the modules' attention histories) and is fed exactly
//! as the offline self-fed replay feeds it (`spec::head::chain`, `ReplayMode::SelfFed`): module 0
//! at position t reads the final-norm residual at t and the true next input x_{t+1} (the next
//! prompt token, or the token just sampled); module k ≥ 1 reads module k − 1's output at t and
//! x_{t+k+1} where that is a prompt token, module k − 1's own prediction otherwise. Prompt rows are
//! held until the prompt's sampled row, when the prompt's length, and so which inputs are true, is
//! known; after it, every row is one step of every module. Predictions are the arg-max over the
//! first `rows` rows of the shared unembedding (the whole vocabulary gives the replay's
//! predictions; fewer rows are cheaper and are what the replay's restricted column measures). For
//! a checkpoint the unembedding is the model's own head blocks as its last role multiplies them
//! (8-bit activations: its arg-max differs from the replay's f32 one only at near-ties), a quarter
//! of the f32 rows' bytes.
//! A rejected proposal's rows are undone with `truncate`, as in every role. A decode row is one
//! row through each module, so its products are matrix-vector products (`linear::matmul`); what
//! the head costs a drafted row is in each speculation run's `costs.md` (from the last role's
//! `draft_ns` and `drafted_rows`).
//! Only streams role 0 flags (`FLAG_DRAFT`: admitted alone, with the MTP proposer on) are run.

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::kernels::blocks::BlockMatrix;
use crate::kernels::linear::Linear;
use crate::model::argmax;
use crate::model::attention::Segment;
use crate::model::config::AttentionMode;
use crate::spec::head::{block, MtpState, MtpWeights, Shared};

/// One drafted stream's head state.
struct SlotHead {
    state: MtpState,
    /// Final-norm residuals ([n, H]) and inputs of rows not yet run (the prompt, until its
    /// sampled row), from position `state`'s length on.
    prev: Vec<f32>,
    inputs: Vec<u32>,
}

/// A row of a frame, as the head sees it.
#[derive(Clone, Copy, Debug)]
pub struct HeadRow<'a> {
    pub slot: u32,
    pub pos: usize,
    /// The input fed at `pos`.
    pub input: u32,
    /// The residual at `pos` before the final norm.
    pub residual: &'a [f32],
    /// The token sampled from this row, if it was sampled.
    pub sampled: Option<u32>,
}

/// Drafts after one sampled row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Drafted {
    pub slot: u32,
    /// The row's position `a`: the drafts are for the inputs at `a + 2 ..`.
    pub pos: usize,
    pub tokens: Vec<u32>,
}

/// The rows of the unembedding the drafts are chosen among.
enum Unembed {
    /// The whole f32 unembedding of `Shared`.
    Whole,
    /// Its first rows in f32.
    Rows(Linear),
    /// A checkpoint's head blocks (the model's own head, 8-bit activations), first rows.
    Blocks(BlockMatrix),
}

pub struct LiveHead {
    head: MtpWeights,
    shared: Shared,
    unembed: Unembed,
    /// Drafts end at the first whose softmax probability (over the rows drafted among) is below.
    p_min: f32,
    budget: usize,
    slots: HashMap<u32, SlotHead>,
}

impl LiveHead {
    /// The first `k` modules of `head`, predicting over the first `rows` tokens; with `q8`, a
    /// decode row's products read the modules' matrices as Q8_0 blocks (a quarter of the bytes;
    /// the drafts are then those of the head on that grid, not bit for bit the f32 head's).
    pub fn new(
        mut head: MtpWeights,
        shared: Shared,
        k: usize,
        rows: usize,
        budget: usize,
        q8: bool,
    ) -> Result<Self> {
        if head.config != shared.config {
            return Err(Error::Config(format!(
                "the draft head was made for {} (hidden {}, vocabulary {}), the model is {}",
                head.config.name, head.config.hidden, head.config.vocab_size, shared.config.name
            )));
        }
        if k == 0 || k > head.modules.len() {
            return Err(Error::Config(format!(
                "drafts per row must be in 1..={} (the head's modules), not {k}",
                head.modules.len()
            )));
        }
        let v = shared.vocab_size();
        if rows == 0 || rows > v {
            return Err(Error::Config(format!(
                "the head's rows must be in 1..={v} (the vocabulary), not {rows}"
            )));
        }
        head.modules.truncate(k);
        if q8 {
            for m in &mut head.modules {
                for l in [
                    &mut m.input_proj,
                    &mut m.q,
                    &mut m.k,
                    &mut m.v,
                    &mut m.o,
                    &mut m.gate,
                    &mut m.up,
                    &mut m.down,
                ] {
                    *l = std::mem::replace(l, Linear::new(0, 0, Vec::new())).with_q8()?;
                }
            }
        }
        let h = shared.config.hidden;
        let unembed = match shared.head_blocks().and_then(|b| b.first_rows(rows)) {
            Some(b) => Unembed::Blocks(b),
            None if rows < v => {
                Unembed::Rows(Linear::new(rows, h, shared.head().w[..rows * h].to_vec()))
            }
            None => Unembed::Whole,
        };
        Ok(LiveHead {
            head,
            shared,
            unembed,
            p_min: 0.0,
            budget,
            slots: HashMap::new(),
        })
    }

    /// Send a row's drafts only up to the first the head gives less than `p` (0: all of them).
    /// Every module still runs on every row: its history must hold every position.
    pub fn with_p_min(mut self, p: f32) -> Self {
        self.p_min = p;
        self
    }

    /// Run the head over the drafted rows of a frame (in frame order); returns the drafts after
    /// each sampled row. A slot whose rows skip a position (its state was lost) starts over at
    /// position 0 only; otherwise it is not drafted until it is reset.
    pub fn rows(&mut self, rows: &[HeadRow<'_>]) -> Result<Vec<Drafted>> {
        let mut out = Vec::new();
        for r in rows {
            let (c, budget) = (&self.head.config, self.budget);
            let s = self.slots.entry(r.slot).or_insert_with(|| SlotHead {
                state: MtpState::with_modules(c, self.head.modules.len(), budget),
                prev: Vec::new(),
                inputs: Vec::new(),
            });
            let next = s.state.modules[0].pos() + s.inputs.len();
            if r.pos != next {
                if r.pos != 0 {
                    tracing::warn!(
                        slot = r.slot,
                        "draft head: row at position {} where {next} was due; not drafting it",
                        r.pos
                    );
                    continue;
                }
                *s = SlotHead {
                    state: MtpState::with_modules(c, self.head.modules.len(), budget),
                    prev: Vec::new(),
                    inputs: Vec::new(),
                };
            }
            if r.pos >= budget {
                continue;
            }
            s.prev.extend(self.shared.final_norm(r.residual));
            s.inputs.push(r.input);
            if let Some(x) = r.sampled {
                let tokens = self.run(r.slot, x)?;
                out.push(Drafted {
                    slot: r.slot,
                    pos: r.pos,
                    tokens,
                });
            }
        }
        Ok(out)
    }

    /// Every module over the slot's held rows, the last of which sampled `sampled`.
    fn run(&mut self, slot: u32, sampled: u32) -> Result<Vec<u32>> {
        let LiveHead {
            head,
            shared,
            unembed,
            slots,
            p_min,
            ..
        } = self;
        let s = slots
            .get_mut(&slot)
            .ok_or_else(|| Error::State(format!("draft head: no state for slot {slot}")))?;
        let c = &head.config;
        let h = c.hidden;
        let n = s.inputs.len();
        let a = s.state.modules[0].pos();
        let p = a + n - 1; // the sampled row
        let k_max = head.modules.len();
        let v = match unembed {
            Unembed::Whole => shared.vocab_size(),
            Unembed::Rows(w) => w.rows,
            Unembed::Blocks(b) => b.rows,
        };
        // x_j for j in a ..= p + 1
        let mut known = std::mem::take(&mut s.inputs);
        known.push(sampled);
        let mut prev = std::mem::take(&mut s.prev);
        let mut preds: Vec<u32> = Vec::new(); // module k − 1's prediction at rows lo.., by row − lo
        let mut lo_prev = p + 1;
        let mut drafts = Vec::with_capacity(k_max);
        let mut confident = true;
        for (k, m) in head.modules.iter().enumerate() {
            let tokens: Vec<u32> = (a..=p)
                .map(|t| {
                    let j = t + k + 1;
                    if k == 0 || j <= p {
                        known[j - a]
                    } else {
                        preds[t - lo_prev]
                    }
                })
                .collect();
            let emb = shared.embed_rows(&tokens)?;
            let mut hk = vec![0.0f32; n * h];
            block::forward(
                c,
                m,
                AttentionMode::Parallel,
                &mut [Segment {
                    state: &mut s.state.modules[k],
                    rows: n,
                }],
                &prev,
                &emb,
                &mut hk,
                None,
            )?;
            // predictions where the next module reads one (t + k + 2 > p), and the draft at p
            let lo = if k + 1 < k_max {
                (p + 1).saturating_sub(k + 2).max(a)
            } else {
                p
            };
            let rows = &hk[(lo - a) * h..];
            let logits = match unembed {
                Unembed::Whole => shared.logits(shared.head(), rows),
                Unembed::Rows(w) => shared.logits(w, rows),
                Unembed::Blocks(b) => {
                    let mut y = vec![0.0f32; rows.len() / h * b.rows];
                    b.matmul(rows, &mut y);
                    y
                }
            };
            preds = logits.chunks_exact(v).map(argmax).collect();
            lo_prev = lo;
            let at = &logits[(p - lo) * v..(p - lo + 1) * v];
            confident &= *p_min <= 0.0 || self_p(at, preds[p - lo]) >= *p_min;
            if confident {
                drafts.push(preds[p - lo]);
            }
            prev = hk;
        }
        Ok(drafts)
    }

    /// Undo the slot's rows from position `pos` on.
    pub fn truncate(&mut self, slot: u32, pos: usize) -> Result<()> {
        if let Some(s) = self.slots.get_mut(&slot) {
            let done = s.state.modules[0].pos();
            if pos >= done {
                s.inputs.truncate(pos - done);
                s.prev.truncate((pos - done) * self.head.config.hidden);
            } else {
                s.inputs.clear();
                s.prev.clear();
                s.state.truncate(pos)?;
            }
        }
        Ok(())
    }

    pub fn forget(&mut self, slot: u32) {
        self.slots.remove(&slot);
    }

    pub fn forget_all(&mut self) {
        self.slots.clear();
    }
}

/// The softmax probability of token `t` in a row of logits.
fn self_p(logits: &[f32], t: u32) -> f32 {
    let top = logits[t as usize];
    let sum: f32 = logits.iter().map(|l| (l - top).exp()).sum();
    1.0 / sum
}
