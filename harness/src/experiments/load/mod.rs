//! Open-loop load against real servers (docs/MEASUREMENTS.md §9): llama-server and our fleet on
//! the same real checkpoint (SmolLM2-135M-Instruct's GGUF, or `reproduce --model FILE.gguf`), one
//! after the other in one run, each searched for the highest Poisson request rate meeting the
//! same latency objectives. The claims on goodput and on the searches' answers are recomputed
//! from these runs' per-request records (`load::rederive`). `conversations`: multi-turn runs on
//! the same two servers, their counts and times cross-checked against each server's own.

pub mod conversations;
pub mod recheck;
pub mod unit;
