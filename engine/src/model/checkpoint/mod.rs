//! Real checkpoints: the layers of GGUF files of the llama family and qwen3moe (`family`), with
//! their weights kept in the file's block formats (`kernels::blocks`, memory-mapped, no copies).
//!
//! The shapes live in `ModelConfig` like Inkling's (`config` builds it from the file's metadata),
//! the per-stream state is the same `StreamState`, and `Model`'s embed / forward / logits run these
//! layers when the weights hold a checkpoint: roles, capture and speculation read nothing else.
//!
//! Arithmetic: where the two engines can do the same operations, this one does what llama.cpp's
//! CPU backend does (so that greedy decoding agrees token for token): products quantise their
//! activations to 8 bits per block as ggml's vec-dot types do (`kernels::blocks`), RMSNorm sums
//! squares in f64, RoPE angles advance by repeated multiplication in f32, the KV cache holds f16
//! values, and attention follows ggml's flash-attention loop for short batches (`attention`).

pub mod attend_x86;
pub mod attention;
pub mod config;
pub mod expf_x86;
pub mod layer;
pub mod load;
pub mod norm;
pub mod resident;
pub mod rope;
pub mod scores_x86;
pub mod tap;
pub mod vecmath;

use crate::kernels::blocks::BlockMatrix;

/// The weights of a checkpoint's layer range, plus the embedding and head at the range's ends.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointWeights {
    /// `token_embd` [vocab, H], when the range starts at layer 0.
    pub embed: Option<BlockMatrix>,
    pub layers: Vec<CheckpointLayer>,
    /// `output_norm` [H] and `output` [vocab, H] (or `token_embd` when tied), when the range ends
    /// at the last layer.
    pub final_norm: Option<Vec<f32>>,
    pub head: Option<BlockMatrix>,
}

/// One decoder layer.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointLayer {
    pub index: usize,
    pub attn_norm: Vec<f32>,
    /// [n_q·D, H], [n_kv·D, H], [n_kv·D, H], [H, n_q·D]
    pub q: BlockMatrix,
    pub k: BlockMatrix,
    pub v: BlockMatrix,
    pub o: BlockMatrix,
    /// Projection biases (qwen2).
    pub q_bias: Option<Vec<f32>>,
    pub k_bias: Option<Vec<f32>>,
    pub v_bias: Option<Vec<f32>>,
    /// Per-head RMSNorm weights [D] of q and k (qwen3).
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub ffn_norm: Vec<f32>,
    pub mlp: CheckpointMlp,
}

#[derive(Clone, Debug, PartialEq)]
pub enum CheckpointMlp {
    /// SwiGLU: `down(silu(gate·x) ⊙ up·x)`.
    Dense {
        gate: BlockMatrix,
        up: BlockMatrix,
        down: BlockMatrix,
    },
    /// Softmax router [n_experts, H] over SwiGLU experts (gate, up, down): views of the file's
    /// stacked expert tensors.
    Moe {
        router: BlockMatrix,
        experts: Vec<[BlockMatrix; 3]>,
    },
}

impl CheckpointWeights {
    /// Weight bytes one token reads: every layer's projections, the dense FFN or the router and
    /// `top_k` experts (the mean expert's size), and the head; the embedding row is negligible.
    pub fn bytes_per_token(&self, top_k: usize) -> usize {
        let m = |b: &BlockMatrix| b.bytes();
        let mut n = self.head.as_ref().map_or(0, m);
        for l in &self.layers {
            n += m(&l.q) + m(&l.k) + m(&l.v) + m(&l.o);
            n += match &l.mlp {
                CheckpointMlp::Dense { gate, up, down } => m(gate) + m(up) + m(down),
                CheckpointMlp::Moe { router, experts } => {
                    let all: usize = experts.iter().flatten().map(m).sum();
                    m(router) + all * top_k / experts.len().max(1)
                }
            };
        }
        n
    }

    /// Stored bytes of the weights (what a token reads, except the unselected experts).
    pub fn bytes(&self) -> usize {
        let m = |b: &BlockMatrix| b.bytes();
        let mut n = self.embed.as_ref().map_or(0, m) + self.head.as_ref().map_or(0, m);
        for l in &self.layers {
            n += m(&l.q) + m(&l.k) + m(&l.v) + m(&l.o);
            n += match &l.mlp {
                CheckpointMlp::Dense { gate, up, down } => m(gate) + m(up) + m(down),
                CheckpointMlp::Moe { router, experts } => {
                    m(router) + experts.iter().flatten().map(m).sum::<usize>()
                }
            };
        }
        n
    }
}
