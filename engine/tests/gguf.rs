//! The GGUF reader (`moefleet_engine::gguf`): `api` (typed getters, zero-copy bytes), `real`
//! (SmolLM2 and the inkling-mini peer file when present, against facts and python's `gguf`
//! reader). Hostile files, allocation bounds and the fuzz checks are the fuzz crate's
//! (`fuzz/tests/gguf.rs`, with its allocation counter).

#![allow(clippy::unwrap_used)]

#[path = "gguf/api.rs"]
mod api;
mod common;
#[path = "gguf/real.rs"]
mod real;
