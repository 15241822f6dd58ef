//! The engine's error type. Library code returns `Result<T>`; only `bin/` and tests unwrap.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("configuration: {0}")]
    Config(String),
    #[error("weights: {0}")]
    Weights(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("stream state: {0}")]
    State(String),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("input: {0}")]
    Input(String),
    /// A GGUF file that is malformed, truncated or hostile, or lacks what a caller asked of it:
    /// the field (`tensor 17 (blk.2.ffn_up.weight) dims`) and, when the fault has a place in the
    /// file, its byte offset.
    #[error(
        "{path}: GGUF {field}{at}: {msg}",
        at = .offset.map(|o| format!(" at byte {o}")).unwrap_or_default()
    )]
    Gguf {
        path: PathBuf,
        offset: Option<u64>,
        field: String,
        msg: String,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
