//! The models: Inkling's configuration, weights (synthetic or from files), stream state and the
//! forward pass; real checkpoints of the llama family and qwen3moe read from GGUF files
//! (`checkpoint`, `family`). The multi-token-prediction draft head is speculation's
//! (`spec::head`).

pub mod attention;
pub mod backend;
pub mod checkpoint;
pub mod config;
pub mod export;
pub mod family;
pub mod forward;
pub mod load;
pub mod mlp;
pub mod norm;
pub mod options;
pub mod state;
pub mod synth;
pub mod weights;

pub use attention::Segment;
pub use config::{AttentionKind, AttentionMode, DenseForm, MlpKind, ModelConfig};
pub use forward::{argmax, ForwardOptions, ForwardTimings, Model};
pub use state::StreamState;
pub use synth::{generate, Plant, SynthSpec};
pub use weights::ModelWeights;
