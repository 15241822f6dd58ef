//! The draft head as role 0's proposer. The head itself runs in the last role
//! (`spec::head::live`), which has each row's final residual: after the token of a row at position
//! `a` it sends the head's drafts for the inputs at `a + 2 ..= a + 1 + k` (`Message::Drafts`).
//! Role 0 keeps, per stream, the drafts of the newest row whose token it emitted (a row it
//! discarded drafted from inputs that were wrong), and proposes draft `i` for the position
//! `a + 2 + i` while the inputs already in flight beyond `a + 1` are the drafts before it: a draft
//! is conditioned on the ones before it.

use std::collections::HashMap;

/// The newest drafts of each stream.
#[derive(Debug, Default)]
pub struct MtpDrafts {
    latest: HashMap<u32, (usize, Vec<u32>)>,
}

impl MtpDrafts {
    /// The head drafted `tokens` after the row at position `anchor` of `slot`.
    pub fn offer(&mut self, slot: u32, anchor: usize, tokens: Vec<u32>) {
        self.latest.insert(slot, (anchor, tokens));
    }

    /// The draft for the input after `ctx` (every input up to the newest row in flight).
    pub fn propose(&self, slot: u32, ctx: &[u32]) -> Option<u32> {
        let (anchor, d) = self.latest.get(&slot)?;
        let start = anchor + 2;
        let i = ctx.len().checked_sub(start)?;
        (i < d.len() && ctx[start..] == d[..i]).then(|| d[i])
    }

    pub fn forget(&mut self, slot: u32) {
        self.latest.remove(&slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drafts_are_proposed_in_order_while_the_inputs_in_flight_follow_them() {
        let mut m = MtpDrafts::default();
        assert_eq!(m.propose(0, &[1, 2, 3]), None, "no drafts yet");
        // the row at position 2 emitted x3 = 9 and drafted x4.. = 5, 6, 7
        m.offer(0, 2, vec![5, 6, 7]);
        assert_eq!(m.propose(0, &[1, 2, 3]), None, "x3 is not a draft");
        assert_eq!(m.propose(0, &[1, 2, 3, 9]), Some(5));
        assert_eq!(m.propose(0, &[1, 2, 3, 9, 5]), Some(6));
        assert_eq!(m.propose(0, &[1, 2, 3, 9, 5, 6]), Some(7));
        assert_eq!(
            m.propose(0, &[1, 2, 3, 9, 5, 6, 7]),
            None,
            "past the drafts"
        );
        assert_eq!(
            m.propose(0, &[1, 2, 3, 9, 4]),
            None,
            "an input in flight that is not the draft before"
        );
        assert_eq!(m.propose(1, &[1, 2, 3, 9]), None, "another stream");
        m.forget(0);
        assert_eq!(m.propose(0, &[1, 2, 3, 9]), None);
    }
}
