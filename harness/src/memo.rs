//! Results this process remembers under the SHA-256 digest of everything they were computed from.
//! `verify` re-derives on every pass and the tests run it many times over copies of the same
//! records; a derivation that is a pure function of its inputs gives the equal result for equal
//! inputs, and a changed input byte gives a new digest and a fresh derivation. Nothing is kept on
//! disk.

use std::sync::Mutex;

use sha2::{Digest, Sha256};

/// The newest `kept` results, by digest.
pub struct Memo<T> {
    kept: usize,
    entries: Mutex<Vec<([u8; 32], T)>>,
}

impl<T: Clone> Memo<T> {
    /// A memo keeping the newest `kept` results.
    pub const fn new(kept: usize) -> Self {
        Memo {
            kept,
            entries: Mutex::new(Vec::new()),
        }
    }

    /// The result remembered under `key`, else `derive`'s (remembered when it succeeds). The
    /// derivation runs outside the lock: two threads may both derive a new key, and get equal
    /// results.
    pub fn get_or_derive<E>(
        &self,
        key: [u8; 32],
        derive: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        let entries = || self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, v)) = entries().iter().find(|(k, _)| *k == key) {
            return Ok(v.clone());
        }
        let v = derive()?;
        let mut kept = entries();
        if kept.len() >= self.kept {
            kept.remove(0);
        }
        kept.push((key, v.clone()));
        Ok(v)
    }
}

/// The digest of `parts`, each length-prefixed so that no two different lists share one.
pub fn digest(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn equal_inputs_derive_once_and_the_oldest_is_dropped() {
        let memo: Memo<u32> = Memo::new(2);
        let calls = std::cell::Cell::new(0);
        let get = |key: &[u8], v: u32| {
            memo.get_or_derive(digest(&[key]), || {
                calls.set(calls.get() + 1);
                Ok::<_, ()>(v)
            })
            .unwrap()
        };
        assert_eq!(get(b"a", 1), 1);
        assert_eq!(get(b"a", 9), 1, "remembered, not derived again");
        assert_eq!(get(b"b", 2), 2);
        assert_eq!(get(b"c", 3), 3);
        assert_eq!(get(b"a", 4), 4, "a was the oldest of three with two kept");
        assert_eq!(calls.get(), 4);
        // a failed derivation is not remembered
        assert!(memo.get_or_derive(digest(&[b"d"]), || Err(())).is_err());
        assert_eq!(
            memo.get_or_derive(digest(&[b"d"]), || Ok::<_, ()>(5)),
            Ok(5)
        );
        assert_ne!(digest(&[b"ab", b"c"]), digest(&[b"a", b"bc"]));
    }
}
