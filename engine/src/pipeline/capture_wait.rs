//! Role 0's side of captures: a capturing stream whose slot is freed waits for the last role's
//! `CaptureReport`, matched by (slot, the slot's capture serial): both ends count a slot's closed
//! captures the same way, so a report finds its stream whatever order reports arrive in. The
//! stream's `Done` is held until then and sent with the file's path, or replaced by the error.

use std::collections::HashMap;

use tokio::sync::mpsc as tmpsc;

use super::events::{CaptureFile, GenEvent};

/// A stream's events and its held `Done` (None: it was cancelled, nobody waits for the file).
type Waiting = (tmpsc::UnboundedSender<GenEvent>, Option<GenEvent>);

#[derive(Default)]
pub struct CaptureWaits {
    next_serial: HashMap<usize, u64>,
    waiting: HashMap<(usize, u64), Waiting>,
}

/// What a `CaptureReport` says.
pub struct Reported {
    pub slot: u32,
    pub serial: u64,
    pub ok: bool,
    pub sequence: u64,
    pub bytes: u64,
    pub text: String,
}

impl CaptureWaits {
    /// A capturing stream's slot is being reset: its report will come.
    pub fn expect(
        &mut self,
        slot: usize,
        events: tmpsc::UnboundedSender<GenEvent>,
        done: Option<GenEvent>,
    ) {
        let serial = self.next_serial.entry(slot).or_insert(0);
        self.waiting.insert((slot, *serial), (events, done));
        *serial += 1;
    }

    /// A report arrived: finish its stream.
    pub fn report(&mut self, r: Reported) {
        match self.waiting.remove(&(r.slot as usize, r.serial)) {
            Some((
                events,
                Some(GenEvent::Done {
                    reason,
                    prompt_tokens,
                    completion_tokens,
                    speculation,
                    ..
                }),
            )) => {
                let _ = events.send(if r.ok {
                    GenEvent::Done {
                        reason,
                        prompt_tokens,
                        completion_tokens,
                        capture: Some(CaptureFile {
                            path: r.text,
                            sequence: r.sequence,
                            bytes: r.bytes,
                        }),
                        speculation,
                    }
                } else {
                    GenEvent::Error(r.text)
                });
            }
            Some(_) => {} // cancelled
            None => tracing::warn!(
                slot = r.slot,
                serial = r.serial,
                "capture report with no capture waiting: {}",
                r.text
            ),
        }
    }

    /// No report will come (the fleet failed or stops): every stream still waiting ends with
    /// `message`.
    pub fn end_all(&mut self, message: &str) {
        for (_, (events, done)) in self.waiting.drain() {
            if done.is_some() {
                let _ = events.send(GenEvent::Error(message.to_string()));
            }
        }
    }
}
