//! The request-local suffix proposer (ARCHITECTURE.md §3.3): when the stream's last `SUFFIX`
//! tokens occurred earlier in its own context, propose the token that followed their most recent
//! earlier occurrence.

/// Tokens of context that must repeat.
pub const SUFFIX: usize = 4;

/// The token after the most recent earlier occurrence of `ctx`'s last `SUFFIX` tokens.
pub fn propose(ctx: &[u32]) -> Option<u32> {
    let n = ctx.len();
    if n <= SUFFIX {
        return None;
    }
    let tail = &ctx[n - SUFFIX..];
    // occurrences starting at j < n − SUFFIX, most recent first; the follower is ctx[j + SUFFIX]
    (0..n - SUFFIX)
        .rev()
        .find(|&j| &ctx[j..j + SUFFIX] == tail)
        .map(|j| ctx[j + SUFFIX])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proposes_what_followed_the_latest_earlier_occurrence() {
        assert_eq!(propose(&[1, 2, 3, 4]), None);
        assert_eq!(propose(&[9, 1, 2, 3, 4, 7, 1, 2, 3, 4]), Some(7));
        // two earlier occurrences: the latest wins
        assert_eq!(
            propose(&[1, 2, 3, 4, 5, 1, 2, 3, 4, 6, 1, 2, 3, 4]),
            Some(6)
        );
        // an overlapping run: the context 5 5 5 5 5 proposes 5
        assert_eq!(propose(&[5, 5, 5, 5, 5]), Some(5));
        assert_eq!(propose(&[1, 2, 3, 4, 5, 6, 7, 8]), None);
    }
}
