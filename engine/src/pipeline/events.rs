//! What passes between the HTTP handlers and role 0's engine thread: a request with its event
//! channel, the events a client receives, and everything the engine thread reacts to.

use tokio::sync::{mpsc as tmpsc, oneshot};

use super::wire::Message;

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    Length,
    Stop,
}

/// What a request's client receives, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum GenEvent {
    Token {
        id: u32,
        logit: f32,
        hash: u64,
    },
    Done {
        reason: FinishReason,
        prompt_tokens: usize,
        completion_tokens: usize,
        /// The stream's capture file, when it was captured.
        capture: Option<CaptureFile>,
        /// What speculation did for this stream (None: the server has it switched off).
        speculation: Option<SpecSummary>,
    },
    Error(String),
}

/// Speculation over one stream: proposals injected, accepted (their row's input was what the
/// model then emitted), rewinds (a rejected proposal, and everything behind it, undone), and drafts
/// (runs of proposals verified in a row, each ended by a rejection or by running out).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SpecSummary {
    pub proposed: u64,
    pub accepted: u64,
    pub rewinds: u64,
    pub drafts: u64,
}

/// Where the last role wrote a stream's capture (a path on the last role's host).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CaptureFile {
    pub path: String,
    pub sequence: u64,
    pub bytes: u64,
}

/// A request as role 0 receives it.
pub struct GenRequest {
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub stop_token: Option<u32>,
    /// Record the stream's residuals in a capture file; its `Done` waits for the file.
    pub capture: bool,
    /// How the last role picks this stream's tokens.
    pub sampling: crate::sampling::Sampling,
    pub events: tmpsc::UnboundedSender<GenEvent>,
}

/// Everything the engine thread reacts to.
pub enum Inbox {
    Submit(GenRequest),
    /// A message from the last role (token replies, pongs, profiles, faults).
    Link(Message),
    /// The chain broke (a link or a role process failed; `role` is the one named, when known):
    /// the streams in flight are held for replay and the supervisor recovers the chain.
    Lost {
        role: Option<usize>,
        message: String,
    },
    /// The supervisor linked the chain again: frames go to role 1 through this writer.
    Relinked(std::sync::Arc<super::link::BlockingWriter>),
    /// A failure beyond recovery: every request from now on is refused.
    Failed(String),
    Profile(oneshot::Sender<Vec<serde_json::Value>>),
    /// Save the phrase table now; the reply says where, or why not.
    SavePhrases(oneshot::Sender<Result<String, String>>),
    Shutdown,
}
