//! `/api/profile` requests at role 0: role 0's own counters, then a `ProfileRequest` that every
//! role answers with its own; a request completes when every role replied, or with what came
//! within `TIMEOUT`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::oneshot;

/// How long a profile request waits for the roles' replies.
pub const TIMEOUT: Duration = Duration::from_secs(2);

struct Wait {
    reply: oneshot::Sender<Vec<Value>>,
    got: Vec<Value>,
    asked: Instant,
}

#[derive(Default)]
pub struct ProfileRequests {
    next: u64,
    waiting: HashMap<u64, Wait>,
}

impl ProfileRequests {
    /// Start a request with role 0's own profile; returns the nonce to ask the other roles with.
    pub fn start(&mut self, reply: oneshot::Sender<Vec<Value>>, own: Value) -> u64 {
        self.next += 1;
        self.waiting.insert(
            self.next,
            Wait {
                reply,
                got: vec![own],
                asked: Instant::now(),
            },
        );
        self.next
    }

    /// One role's reply (JSON text); completes the request once `n_roles` replied.
    pub fn add(&mut self, nonce: u64, json: String, n_roles: usize) {
        if let Some(w) = self.waiting.get_mut(&nonce) {
            w.got
                .push(serde_json::from_str(&json).unwrap_or(Value::String(json)));
        }
        self.complete(nonce, n_roles);
    }

    /// Answer the request if every role replied.
    pub fn complete(&mut self, nonce: u64, n_roles: usize) {
        if self
            .waiting
            .get(&nonce)
            .is_some_and(|w| w.got.len() >= n_roles)
        {
            self.answer(nonce);
        }
    }

    /// Answer, with what they have, the requests older than `TIMEOUT`.
    pub fn expire(&mut self, now: Instant) {
        let old: Vec<u64> = self
            .waiting
            .iter()
            .filter(|(_, w)| now.duration_since(w.asked) > TIMEOUT)
            .map(|(n, _)| *n)
            .collect();
        for n in old {
            self.answer(n);
        }
    }

    fn answer(&mut self, nonce: u64) {
        if let Some(mut w) = self.waiting.remove(&nonce) {
            w.got
                .sort_by_key(|v| v.get("role").and_then(|r| r.as_u64()).unwrap_or(0));
            let _ = w.reply.send(w.got);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completes_when_every_role_replied_or_on_timeout() {
        let mut p = ProfileRequests::default();
        let (tx, mut rx) = oneshot::channel();
        let n = p.start(tx, serde_json::json!({"role": 0}));
        p.add(n, r#"{"role": 2}"#.into(), 3);
        assert!(rx.try_recv().is_err());
        p.add(n, r#"{"role": 1}"#.into(), 3);
        let got = rx.try_recv().unwrap();
        assert_eq!(
            got.iter()
                .map(|v| v["role"].as_u64().unwrap())
                .collect::<Vec<_>>(),
            [0, 1, 2]
        );
        let (tx, mut rx) = oneshot::channel();
        p.start(tx, serde_json::json!({"role": 0}));
        p.expire(Instant::now() + 2 * TIMEOUT);
        assert_eq!(rx.try_recv().unwrap().len(), 1);
    }
}
