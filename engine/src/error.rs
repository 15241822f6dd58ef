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
